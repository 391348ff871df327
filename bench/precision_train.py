"""Training steps/s of the generated step under train.precision (and train.jit_compile) against float32.

For the digits CNN of examples/specs (two optimizers, clip, EMA, batch norm, dropout) and a wider variant of it
(conv 64 filters, dense 512, batch 256: more of each step in matmuls and convolutions), one run renders each
variant with specgen, imports the generated train.py and times `trainer.train_step` on the bundled digits
batches. Both specs use avg_pool for max_pool, so that the XLA variant is the same model (train.jit_compile
refuses max_pool: specgen/ir/training/jit_compile.py). Each variant is traced once, then measured `--repeats`
times, interleaved (the order rotates every repetition): `--warmup` steps, then `--steps` timed steps.

    python bench/precision_train.py                 # ~2 min on 2 cores
    python bench/precision_train.py --repeats 3 --steps 20

Which kernels run in bfloat16 and float16 depends on the CPU: oneDNN has native bf16 matmuls and convolutions
only with AVX-512 BF16 or AMX; on an AVX2-only CPU TensorFlow converts to float32 around each op.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "specs" / "digits_cnn.yaml"
DIGITS = ROOT / "examples" / "data" / "digits.npz"
VARIANTS = (("float32", "float32", False), ("mixed_bfloat16", "mixed_bfloat16", False),
            ("mixed_float16", "mixed_float16", False), ("float32 + XLA", "float32", True))


def spec_text(precision: str, jit: bool, wide: bool) -> tuple[str, int]:
    text = EXAMPLE.read_text().replace("../data/digits.npz", str(DIGITS)).replace("op: max_pool,", "op: avg_pool,")
    text = text.replace("  accumulate: 1\n", f"  accumulate: 1\n  precision: {precision}\n  jit_compile: {str(jit).lower()}\n")
    batch = 64
    if wide:
        batch = 256
        text = text.replace("filters: 16", "filters: 64").replace("units: 64", "units: 512")
        text = text.replace("batch_size: 64", f"batch_size: {batch}")
    return text, batch


def trainer(folder: Path, text: str) -> Any:
    from specgen.ir.resolve import build_ir
    from specgen.render.files import render_files
    from specgen.runtime.lib.generated import load_generated
    from specgen.spec.load import load_spec_text

    folder.mkdir(parents=True)
    ir = build_ir(load_spec_text(text, "spec.yaml", folder / "spec.yaml"))
    for name, content in render_files(ir).items():
        (folder / name).write_bytes(content)
    model = getattr(load_generated(folder / "model.py"), ir.class_name)(seed=0)
    return getattr(load_generated(folder / "train.py"), f"{ir.class_name}Training")(model)


def batches(batch: int, count: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    import numpy as np
    import tensorflow as tf

    with np.load(DIGITS) as data:
        x, y = data["x_train"], data["y_train"]
    starts = [(i * batch) % (len(x) - batch) for i in range(count)]
    return [({"image": tf.constant(x[s:s + batch])}, {"label": tf.constant(y[s:s + batch])}) for s in starts]


def steps_per_second(step: Any, data: list[Any], warmup: int) -> float:
    import tensorflow as tf

    for i, (f, labels) in enumerate(data[:warmup]):
        step(f, labels, tf.constant([i, 0], tf.int64))
    start = time.perf_counter()
    loss = None
    for i, (f, labels) in enumerate(data[warmup:]):
        loss = step(f, labels, tf.constant([i, 0], tf.int64))
    float(loss)
    return (len(data) - warmup) / (time.perf_counter() - start)


def bench(wide: bool, args: argparse.Namespace, root: Path) -> None:
    import tensorflow as tf

    trainers, batch = {}, 64
    for name, precision, jit in VARIANTS:
        text, batch = spec_text(precision, jit, wide)
        trainers[name] = trainer(root / f"{'wide' if wide else 'cnn'}_{precision}_{jit}", text)
    data = batches(batch, args.warmup + args.steps)
    for t in trainers.values():  # trace once
        t.train_step(*data[0], tf.constant([0, 0], tf.int64))
    rates: dict[str, list[float]] = {name: [] for name in trainers}
    names = list(trainers)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            rates[name].append(steps_per_second(trainers[name].train_step, data, args.warmup))
    base = statistics.median(rates["float32"])
    print(f"\n{'digits CNN, wide' if wide else 'digits CNN'} (batch {batch}), steps/s, "
          f"{args.repeats} interleaved repetitions of {args.steps} steps")
    print(f"  {'variant':<16}{'median':>9}{'min':>9}{'max':>9}{'vs float32':>12}")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"  {name:<16}{median:>9.1f}{min(values):>9.1f}{max(values):>9.1f}{median / base:>11.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    flags = Path("/proc/cpuinfo").read_text().split("flags")[1].split("\n")[0] if Path("/proc/cpuinfo").exists() else ""
    isa = sorted({f for f in flags.split() if f.startswith(("avx512", "amx")) or f in ("avx2", "fma")})
    print(f"CPU: {os.cpu_count()} cores, ISA flags: {' '.join(isa) or 'unknown'}")
    with tempfile.TemporaryDirectory() as folder:
        for wide in (False, True):
            bench(wide, args, Path(folder))


if __name__ == "__main__":
    main()
