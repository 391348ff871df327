"""specgen's Predictor on the CUDA provider (IO binding) against the CPU provider, on a trained export.

tests/test_export.py::test_cuda_provider skips where there is no NVIDIA driver (CI has none); this is that
check, and a latency figure, run on the lent GPU machine, where specgen's Predictor imports with numpy and
onnxruntime alone (no TensorFlow there). The model is a trained export copied beside the repository
(`.gpu/digits/model.onnx`); its inputs are the bundled digits' test images.

    python bench/cuda_predictor.py .gpu/digits/model.onnx examples/data/digits.npz
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specgen.runtime.predictor import CUDA, Predictor


def median_ms(call, feed, calls: int = 200) -> float:
    for _ in range(10):
        call(feed)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call(feed)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a trained export (model.onnx)")
    parser.add_argument("data", type=Path, help="an npz with x_test (the bundled examples/data/digits.npz)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    model, data = args.model, np.load(args.data)
    images = data["x_test"].astype(np.float32)
    gpu, cpu = Predictor(model, provider="cuda"), Predictor(model, provider="cpu")
    name = next(iter(gpu.inputs))
    shape = gpu.inputs[name][0]
    feed = {name: images.reshape((-1, *[int(d) for d in shape[1:]]))}
    got, want = gpu(feed), cpu(feed)
    worst = max(float(np.max(np.abs(got[k] - want[k])) / np.max(np.abs(want[k]))) for k in want)
    agree = {k: float(np.mean(np.argmax(got[k], -1) == np.argmax(want[k], -1))) for k in want}
    print(f"Predictor provider {gpu.provider} (expected {CUDA}); {len(images)} images; max |cuda - cpu| / max |cpu| {worst:.2e}; "
          f"argmax agreement {agree}")
    for batch in (1, 64):
        one = {name: feed[name][:batch]}
        print(f"batch {batch}: Predictor cuda {median_ms(gpu, one):.3f} ms, cpu {median_ms(cpu, one):.3f} ms (medians)")
    # 1e-2: the CUDA provider may run convolutions and matrix products on TF32 units (10-bit mantissa, ~5e-4
    # relative per product) and sums in other orders; a wrong kernel or a lost IO binding is off by far more.
    return 0 if gpu.provider == CUDA and worst < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
