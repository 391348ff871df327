"""Streamed TFRecord shards (issue 20): peak memory against the data's size, and the pipeline's throughput.

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

    python bench/data.py                          # 0.4 GB and 4 GB (several minutes: the 4 GB set is read once
                                                  # to check it, then trained on)
    python bench/data.py --large-gb 0 --small-gb 0.1 --repeats 3   # throughput only, quick
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
    parser.add_argument("--small-gb", type=float, default=0.4)
    parser.add_argument("--large-gb", type=float, default=4.0, help="0: skip the memory comparison")
    parser.add_argument("--steps", type=int, default=60, help="updates of each training run")
    parser.add_argument("--batches", type=int, default=100, help="batches each pipeline timing reads")
    parser.add_argument("--repeats", type=int, default=5, help="0: skip the throughput comparison")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="specgen-data-bench-") as root:
        small = Path(root) / "small"
        print(f"small set: {generate(small, args.small_gb):,} examples, {_size(small):.2f} GB")
        if args.repeats > 0:
            throughput(small, args)
        if args.large_gb > 0:
            memory(small, Path(root) / "large", args)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


def throughput(small: Path, args: argparse.Namespace) -> None:
    iterators = pipelines(small)
    for iterator in iterators.values():
        rate(iterator, 20)  # warm-up: traces, autotuning, the shuffle buffer's first fill
    figures: dict[str, list[float]] = {name: [] for name in [*iterators, "training"]}
    for _ in range(args.repeats):  # interleaved: each repetition times every pipeline once
        for name, iterator in iterators.items():
            figures[name].append(rate(iterator, args.batches))
        figures["training"].append(train(small, args.steps)[1] * BATCH)
    medians = {name: statistics.median(values) for name, values in figures.items()}
    for name, value in medians.items():
        print(f"{name:9} {value:9,.0f} examples/s (median of {args.repeats}; range {min(figures[name]):,.0f}-"
              f"{max(figures[name]):,.0f})")
    print(f"pipeline / training {medians['pipeline'] / medians['training']:.2f}x (target >= 2x); "
          f"pipeline / by hand {medians['pipeline'] / medians['by hand']:.2f}x (target >= 0.9x)")


def memory(small: Path, large: Path, args: argparse.Namespace) -> None:
    print(f"large set: {generate(large, args.large_gb):,} examples, {_size(large):.2f} GB")
    for name, folder in (("small", small), ("large", large)):
        started = time.perf_counter()
        peak, _ = train(folder, args.steps)
        print(f"{name:5} peak RSS {peak:8,.0f} MiB  ({time.perf_counter() - started:.0f} s wall, check pass included)")
        shutil.rmtree(folder / "shards") if name == "large" else None


def _size(folder: Path) -> float:
    return sum(p.stat().st_size for p in (folder / "shards").iterdir()) / 1e9


if __name__ == "__main__":
    main()
