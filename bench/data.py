"""Streamed TFRecord shards and a JPEG folder (issue 20): peak memory against the data's size, and throughput.

Generates shards into a temporary folder under /tmp (deleted afterwards) of `tf.train.Example`s with a float
feature `x` [64, 64, 3] (48 KiB) and an int64 label, then:

  memory      `specgen train --steps 60` (a fresh process each) on the same spec over a small and a large set
              (default 0.4 GB and 4 GB); the peak RSS of each process (os.wait4's ru_maxrss). The target:
              large within 1.2x small. What bounds the rest: the interpreter and TensorFlow, the shuffle
              buffer (train.shuffle_buffer x example bytes), one batch of the checking pass, prefetched batches.
  throughput  on the small set, interleaved repetitions, medians:
                pipeline  specgen's training batches (runtime/data.py over the tfrecord reader), examples/s
                by hand   TFRecordDataset interleave + parse_example + shuffle + batch + prefetch, all AUTOTUNE
                training  the steady-state update rate of the spec it feeds x batch size, examples/s: in a
                          fresh process, the real `specgen train` Session (runtime/commands/session.py) runs
                          --warmup updates untimed (tracing, the pipeline's first fill), then --steps updates
                          timed, in chunks of 20 in one graph call each as `specgen train` runs them; the
                          checkpoint saved after them (the data state below) is not timed either
              Targets: pipeline >= 2x training, pipeline >= 0.9x by hand. (Before 2026-12-07 the training
              figure was `specgen train --steps 60`'s own "done: N updates in X s", which includes tracing
              and the final checkpoint save: at 60 updates mostly start-up, so the ratio came out inflated.)

  images      a folder of generated JPEG files (default 2,000 at 128x128, 10 classes),
              decoded, resized to 96x96, flipped, padded-cropped to 88x88 and contrast-changed: specgen's images
              source against tf.data by hand (list_files, decode_jpeg, resize, the same augmentation as tf ops,
              map with AUTOTUNE, batch, prefetch), `specgen train`'s rate on it, and the checking pass every
              start (a --resume too) runs, per image.

    python bench/data.py                          # 0.4 GB and 4 GB (several minutes: the 4 GB set is read once
                                                  # to check it, then trained on), then the JPEG folder
    python bench/data.py --large-gb 0 --small-gb 0.1 --repeats 3 --images 0   # tfrecord throughput only, quick
    python bench/data.py --small-gb 0 --large-gb 0 --repeats 5    # the JPEG folder only
"""

from __future__ import annotations

import argparse
import os
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


def train(folder: Path, steps: int) -> float:
    """`specgen train --steps` in a fresh process: its peak RSS in MiB (os.wait4's ru_maxrss; the memory comparison)."""
    shutil.rmtree(folder / "run", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: reading one pipe while the other fills would block
        process = subprocess.Popen([sys.executable, "-m", "specgen", "train", str(folder / "spec.yaml"), "--steps",
                                    str(steps), "--quiet"], stdout=subprocess.PIPE, stderr=err, env=env)
        out = process.stdout.read().decode() if process.stdout else ""
        _, status, usage = os.wait4(process.pid, 0)  # reaped here (not by Popen) to read its resource usage
        process.returncode = os.waitstatus_to_exitcode(status)
        if status != 0:
            err.seek(0)
            raise SystemExit(f"specgen train failed:\n{out}\n{err.read().decode()[-3000:]}")
    return usage.ru_maxrss / 1024


def training_rate(folder: Path, warmup: int, steps: int) -> float:
    """Steady-state updates per second of the spec in `folder`, measured by `steady_worker` in a fresh process."""
    shutil.rmtree(folder / "run", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, __file__, "--steady-worker", str(folder / "spec.yaml"), "--warmup",
                           str(warmup), "--steps", str(steps)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the training-rate worker failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    return steps / float(done.stdout.strip().splitlines()[-1])


def steady_worker(spec: Path, warmup: int, steps: int) -> None:
    """Prints the seconds of `steps` updates after `warmup` untimed ones, run as `specgen train` runs them."""
    from specgen.pipeline import build
    from specgen.runtime.commands.resume import Options
    from specgen.runtime.commands.session import Session
    from specgen.runtime.commands.train import LOG_EVERY
    from specgen.spec.load import load_spec

    session = Session(build(load_spec(spec)), Options(quiet=True))
    session.start()

    def run(count: int) -> None:
        while count > 0:  # `specgen train`'s chunks: up to LOG_EVERY updates per graph call, a loss read after each
            chunk = min(count, LOG_EVERY)
            float(session.updates(chunk))
            count -= chunk

    run(warmup)
    started = time.perf_counter()
    run(steps)
    seconds = time.perf_counter() - started
    session.save()  # untimed: the data state that throughput() reports
    session.flush_summaries()
    print(f"{seconds:.6f}")


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


MEMORY_STEPS = 60  # updates of each memory run: enough to fill the shuffle buffer and the prefetched batches
MIN_BATCHES = 50  # AUTOTUNE's prefetch buffers hold tens of batches: fewer would time reads of what they hold


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-gb", type=float, default=0.4, help="0: skip the tfrecord throughput")
    parser.add_argument("--large-gb", type=float, default=4.0, help="0: skip the memory comparison")
    parser.add_argument("--images", type=int, default=2000, help="JPEG files of the folder case; 0: skip it")
    parser.add_argument("--steps", type=int, default=200,
                        help="timed updates of each training-rate run (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed updates before the timed ones (default 20)")
    parser.add_argument("--batches", type=int, default=100, help="batches each pipeline timing reads (default 100)")
    parser.add_argument("--repeats", type=int, default=5, help="0: skip the throughput comparisons")
    parser.add_argument("--steady-worker", type=Path, metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        parser.error("--steps and --warmup must be at least 1 (the warm-up traces the step outside the timing)")
    if args.batches < MIN_BATCHES:
        parser.error(f"--batches must be at least {MIN_BATCHES}: fewer would time what the prefetch buffers already hold")
    if min(args.small_gb, args.large_gb, args.images, args.repeats) < 0:
        parser.error("--small-gb, --large-gb, --images and --repeats must not be negative")
    return args


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    if args.steady_worker is not None:
        steady_worker(args.steady_worker, args.warmup, args.steps)
        return
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
        figures["training"].append(training_rate(folder, args.warmup, args.steps) * BATCH)
    medians = {name: statistics.median(values) for name, values in figures.items()}
    for name, value in medians.items():
        print(f"{name:9} {value:9,.0f} examples/s (median of {args.repeats}; range {min(figures[name]):,.0f}-"
              f"{max(figures[name]):,.0f})")
    print(f"training: {args.steps} updates timed after {args.warmup} untimed (tracing, first fill), no checkpoint saves")
    print(f"pipeline / training {medians['pipeline'] / medians['training']:.2f}x (target >= 2x); "
          f"pipeline / by hand {medians['pipeline'] / medians['by hand']:.2f}x (target >= 0.9x)")
    state = sum(p.stat().st_size for p in (folder / "run").glob("ckpt-*/data.*"))  # what --resume restores
    print(f"the data iterator's state in the last checkpoint (data.*): {state / 1e6:.1f} MB")


def memory(small: Path, large: Path, args: argparse.Namespace) -> None:
    print(f"large set: {generate(large, args.large_gb):,} examples, {_size(large):.2f} GB")
    peaks = {}
    for name, folder in (("small", small), ("large", large)):
        started = time.perf_counter()
        peaks[name] = train(folder, MEMORY_STEPS)
        print(f"{name:5} peak RSS {peaks[name]:8,.0f} MiB  ({time.perf_counter() - started:.0f} s wall, check pass "
              "included)")
        shutil.rmtree(folder / "shards") if name == "large" else None
    print(f"large / small peak RSS {peaks['large'] / peaks['small']:.2f}x (target <= 1.2x)")


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
