"""Streamed TFRecord shards and a JPEG folder (issue 20): peak memory against the data's size, and throughput.

Generates shards into a temporary folder under /tmp (deleted afterwards) of `tf.train.Example`s with a float
feature `x` [64, 64, 3] (48 KiB) and an int64 label, then:

  memory      `specgen train` (a fresh process each, --steps) on the same spec over a small and a large set
              (default 0.4 GB and 4 GB); the peak RSS of each process (os.wait4's ru_maxrss). The target:
              large within 1.2x small. What bounds the rest: the interpreter and TensorFlow, the shuffle
              buffer (train.shuffle_buffer x example bytes), one batch of the checking pass, prefetched batches.
  throughput  on the small set, interleaved repetitions, medians:
                pipeline  specgen's training batches (runtime/data.py over the tfrecord reader), examples/s
                by hand   TFRecordDataset interleave + parse_example + shuffle + batch + prefetch, all AUTOTUNE
                training  `specgen train`'s update rate on the same spec x batch size, examples/s
              Targets: pipeline >= 2x training, pipeline >= 0.9x by hand.

  images      a folder of generated JPEG files (default 2,000 at 128x128, 10 classes),
              decoded, resized to 96x96, flipped, padded-cropped to 88x88 and contrast-changed: specgen's images
              source against tf.data by hand (list_files, decode_jpeg, resize, the same augmentation as tf ops,
              map with AUTOTUNE, batch, prefetch), `specgen train`'s rate on it, and the checking pass every
              start (a --resume too) runs, per image.

    python bench/data.py                          # 0.4 GB and 4 GB (several minutes: the 4 GB set is read once
                                                  # to check it, then trained on), then the JPEG folder
    python bench/data.py --large-gb 0 --small-gb 0.1 --repeats 3   # throughput only, quick
    python bench/data.py --small-gb 0 --large-gb 0 --repeats 5    # the JPEG folder only
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (64, 64, 3)
EXAMPLE_BYTES = int(np.prod(SHAPE)) * 4
BATCH = 32
SPEC = """\
specgen: 1
name: stream_bench
inputs: {x: {shape: [64, 64, 3]}}
outputs: {logits: out}
layers:
  - {name: conv, op: conv2d, filters: 8, kernel: 3, strides: 2, activation: relu}
  - {name: pool, op: global_avg_pool}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: ["*"], kind: adam, learning_rate: 0.001}}
train: {batch_size: BATCH, seed: 1, shuffle_buffer: 512}
data:
  train: {tfrecord: "shards/*.tfrecord", features: {x: x}, labels: {label: y}}
checkpoint: {dir: run, every_steps: 100000}
""".replace("BATCH", str(BATCH))


def generate(folder: Path, gigabytes: float, shards: int = 16) -> int:
    """Shards holding `gigabytes` of examples (64 distinct ones, repeated: generating is not what is measured)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    records = [tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(int(np.prod(SHAPE)), np.float32))),
        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10])),
    })).SerializeToString() for i in range(64)]
    count = int(gigabytes * 1e9 / len(records[0]))
    (folder / "shards").mkdir(parents=True)
    for s in range(shards):
        with tf.io.TFRecordWriter(str(folder / "shards" / f"part-{s:05d}.tfrecord")) as writer:
            for k in range(s * count // shards, (s + 1) * count // shards):
                writer.write(records[k % len(records)])
    (folder / "spec.yaml").write_text(SPEC)
    return count


def train(folder: Path, steps: int) -> tuple[float, float]:
    """`specgen train --steps` in a fresh process: (peak RSS in MiB, updates per second it printed)."""
    shutil.rmtree(folder / "run", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen([sys.executable, "-m", "specgen", "train", str(folder / "spec.yaml"), "--steps",
                                str(steps), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = process.stdout.read().decode() if process.stdout else ""
    err = process.stderr.read().decode() if process.stderr else ""
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"specgen train failed:\n{out}\n{err}")
    done = re.search(r"done: (\d+) updates in ([\d.]+) s", out)
    rate = int(done.group(1)) / float(done.group(2)) if done else float("nan")
    return usage.ru_maxrss / 1024, rate


def pipelines(folder: Path) -> dict[str, object]:
    """specgen's training batches and the hand-written equivalent, each a callable that times N batches."""
    import tensorflow as tf

    from specgen.ir.resolve import build_ir
    from specgen.runtime import data
    from specgen.spec.load import load_spec

    loaded = load_spec(folder / "spec.yaml")
    ir = build_ir(loaded)
    source = data.read_stage(loaded, ir, "train")
    assert source is not None
    ours = data.training_batches(source, BATCH, 1, 512)
    spec = {"x": tf.io.FixedLenFeature(list(SHAPE), tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}
    files = tf.data.Dataset.list_files(str(folder / "shards" / "*.tfrecord"), shuffle=False)
    hand = (files.interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE)
            .map(lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
            .shuffle(512, seed=1).batch(BATCH, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE))
    return {"pipeline": iter(ours), "by hand": iter(hand)}


def rate(iterator: object, batches: int) -> float:
    """Examples per second over `batches` batches (after the iterator has warmed up)."""
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)  # type: ignore[call-overload]
    return batches * BATCH / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-gb", type=float, default=0.4, help="0: skip the tfrecord throughput")
    parser.add_argument("--large-gb", type=float, default=4.0, help="0: skip the memory comparison")
    parser.add_argument("--images", type=int, default=2000, help="JPEG files of the folder case; 0: skip it")
    parser.add_argument("--steps", type=int, default=60, help="updates of each training run")
    parser.add_argument("--batches", type=int, default=100, help="batches each pipeline timing reads")
    parser.add_argument("--repeats", type=int, default=5, help="0: skip the throughput comparisons")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="specgen-data-bench-") as root:
        small = Path(root) / "small"
        if args.small_gb > 0:
            print(f"small set: {generate(small, args.small_gb):,} examples, {_size(small):.2f} GB")
            if args.repeats > 0:
                throughput(small, pipelines(small), args)
            if args.large_gb > 0:
                memory(small, Path(root) / "large", args)
        if args.images > 0:
            folder = Path(root) / "jpeg"
            started = time.perf_counter()
            print(f"JPEG folder: {write_jpegs(folder, args.images):.1f} MB in {args.images:,} files "
                  f"({time.perf_counter() - started:.0f} s to write)")
            iterators = image_pipelines(folder)
            if args.repeats > 0:
                throughput(folder, iterators, args)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


def throughput(folder: Path, iterators: dict[str, object], args: argparse.Namespace) -> None:
    for iterator in iterators.values():
        rate(iterator, 20)  # warm-up: traces, autotuning, the shuffle buffer's first fill
    figures: dict[str, list[float]] = {name: [] for name in [*iterators, "training"]}
    for _ in range(args.repeats):  # interleaved: each repetition times every pipeline once
        for name, iterator in iterators.items():
            figures[name].append(rate(iterator, args.batches))
        figures["training"].append(train(folder, args.steps)[1] * BATCH)
    medians = {name: statistics.median(values) for name, values in figures.items()}
    for name, value in medians.items():
        print(f"{name:9} {value:9,.0f} examples/s (median of {args.repeats}; range {min(figures[name]):,.0f}-"
              f"{max(figures[name]):,.0f})")
    print(f"pipeline / training {medians['pipeline'] / medians['training']:.2f}x (target >= 2x); "
          f"pipeline / by hand {medians['pipeline'] / medians['by hand']:.2f}x (target >= 0.9x)")
    state = sum(p.stat().st_size for p in (folder / "run").glob("ckpt-*/data.*"))  # what --resume restores
    print(f"the data iterator's state in the last checkpoint (data.*): {state / 1e6:.1f} MB")


def memory(small: Path, large: Path, args: argparse.Namespace) -> None:
    print(f"large set: {generate(large, args.large_gb):,} examples, {_size(large):.2f} GB")
    for name, folder in (("small", small), ("large", large)):
        started = time.perf_counter()
        peak, _ = train(folder, args.steps)
        print(f"{name:5} peak RSS {peak:8,.0f} MiB  ({time.perf_counter() - started:.0f} s wall, check pass included)")
        shutil.rmtree(folder / "shards") if name == "large" else None


def _size(folder: Path) -> float:
    return sum(p.stat().st_size for p in (folder / "shards").iterdir()) / 1e9


IMAGE_SPEC = """\
specgen: 1
name: jpeg_bench
inputs: {image: {shape: [88, 88, 3]}}
outputs: {logits: out}
layers:
  - {name: scale, op: rescale, input: image, scale: 0.00392156862745098}
  - {name: conv, op: conv2d, filters: 8, kernel: 3, strides: 2, activation: relu}
  - {name: pool, op: global_avg_pool}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: ["*"], kind: adam, learning_rate: 0.001}}
train: {batch_size: BATCH, seed: 1, shuffle_buffer: 512}
data:
  train:
    images: images
    image_size: [96, 96]
    augment:
      - {random_flip: horizontal}
      - {random_crop: {size: [88, 88], pad: 4}}
      - {random_contrast: 0.2}
checkpoint: {dir: run, every_steps: 100000}
""".replace("BATCH", str(BATCH))


def write_jpegs(folder: Path, count: int, side: int = 128) -> float:
    """`count` JPEG files (quality 90) in 10 class folders: smooth random colour fields with noise, so they
    compress as photos do rather than as flat or white-noise images. Returns their size in MB."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for n in range(count):
        coarse = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).resize((side, side), Image.BICUBIC)
        pixels = np.clip(np.asarray(coarse, np.int16) + rng.integers(-12, 13, (side, side, 3)), 0, 255)
        (folder / "images" / f"c{n % 10}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels.astype(np.uint8)).save(folder / "images" / f"c{n % 10}" / f"{n:05d}.jpg", quality=90)
    (folder / "spec.yaml").write_text(IMAGE_SPEC)
    return sum(p.stat().st_size for p in (folder / "images").rglob("*.jpg")) / 1e6


def image_pipelines(folder: Path) -> dict[str, object]:
    """specgen's images source (timed: its checking pass, which every start and every --resume runs) and
    tf.data by hand doing the same decode, resize and augmentation."""
    import tensorflow as tf

    from specgen.ir.resolve import build_ir
    from specgen.runtime import data
    from specgen.spec.load import load_spec

    loaded = load_spec(folder / "spec.yaml")
    ir = build_ir(loaded)
    data.read_stage(loaded, ir, "train")  # once untimed: importing Keras, tracing the pass: fixed costs, not per image
    started = time.perf_counter()
    source = data.read_stage(loaded, ir, "train")
    took = time.perf_counter() - started
    assert source is not None
    print(f"checking pass (headers, one decode of every image): {took:.2f} s, "
          f"{took / source.examples * 1e3:.2f} ms per image")
    ours = data.training_batches(source, BATCH, 1, 512)
    return {"pipeline": iter(ours), "by hand": iter(_by_hand(folder, tf))}


def _by_hand(folder: Path, tf: Any) -> Any:
    """list_files, decode_jpeg + resize (parallel), shuffle, batch, the augmentation on each batch as tf ops
    (Keras' semantics: a flip and a contrast factor per image, one crop window per batch; parallel), prefetch."""
    files = tf.data.Dataset.list_files(str(folder / "images" / "*" / "*.jpg"), shuffle=True, seed=1)

    def decode(path: Any) -> Any:
        label = tf.strings.to_number(tf.strings.substr(tf.strings.split(path, "/")[-2], 1, 1), tf.int64)
        image = tf.image.resize(tf.io.decode_jpeg(tf.io.read_file(path), channels=3), [96, 96])
        return {"image": image}, {"label": label}

    def augment(index: Any, batch: Any) -> Any:
        images, seeds = batch[0]["image"], tf.stack([tf.constant(1, tf.int64), index])
        flip = tf.random.stateless_uniform([BATCH, 1, 1, 1], seeds) < 0.5
        images = tf.where(flip, tf.reverse(images, [2]), images)
        images = tf.pad(images, [[0, 0], [4, 4], [4, 4], [0, 0]])
        top, left = tf.unstack(tf.random.stateless_uniform([2], seeds + 1, 0, 104 - 88 + 1, tf.int32))
        images = images[:, top:top + 88, left:left + 88, :]
        factor = tf.random.stateless_uniform([BATCH, 1, 1, 1], seeds + 2, 0.8, 1.2)
        mean = tf.reduce_mean(images, axis=[1, 2], keepdims=True)
        return {"image": tf.clip_by_value((images - mean) * factor + mean, 0, 255)}, batch[1]

    return (files.map(decode, num_parallel_calls=tf.data.AUTOTUNE).shuffle(512, seed=1)
            .batch(BATCH, drop_remainder=True).repeat().enumerate()
            .map(augment, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


if __name__ == "__main__":
    main()
