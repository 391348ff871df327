"""specgen's int8 against fp32 and onnxruntime's plain `quantize_static`, on another machine's CPU.

bench/precision.py's targets are for a CPU with AVX-512 VNNI (uint8 x int8 dot products summed in int32);
this project's development machine has AVX2 only. The lent GPU machine's CPU may have VNNI, but it has no
TensorFlow and takes at most 64 MiB per call, so the work is split:

  prepare (here, TensorFlow)     python bench/int8_device.py prepare .gpu/int8
      ResNet50 and MobileNetV2 at 224 as bench/precision.py makes them (imported by specgen, random weights
      with realistic batch-norm statistics, exported with the parity gate), written as per-channel skeletons
      (bench/onnx_skeleton.py); the digits CNN trained 200 steps, whole, with its eval set.
  measure (there: numpy, onnx, onnxruntime)   python bench/int8_device.py measure .gpu/int8 --json OUT.json
      fills the skeletons, draws the calibration images (N(0, 1), as bench/precision.py does), and runs
      bench/precision.py's `measure` on each model: specgen's int8 conversion runs THERE, so it makes the
      choices it makes on that CPU (8-bit weights where VNNI is present, 7-bit without).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_skeleton import fill, strip

ZOO = ("ResNet50", "MobileNetV2")
SIZE, CALIBRATION = 224, 64


def prepare(out: Path) -> None:
    from cuda_prepare_zoo import export_one
    from precision import _make_digits

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specgen-int8-") as tmp:
        for name in ZOO:
            (out / f"{name}@{SIZE}").mkdir(exist_ok=True)
            onnx.save(strip(export_one(name, Path(tmp)), per_channel=True), out / f"{name}@{SIZE}" / "skeleton.onnx")
        _make_digits(Path(tmp) / "digits_cnn")
        (out / "digits_cnn").mkdir(exist_ok=True)
        for file in ("model.onnx", "data.npz"):
            shutil.copy(Path(tmp) / "digits_cnn" / file, out / "digits_cnn" / file)


def cpu() -> dict[str, object]:
    text = Path("/proc/cpuinfo").read_text()
    flags = next(line for line in text.splitlines() if line.startswith("flags")).split()
    model = next(line for line in text.splitlines() if line.startswith("model name")).split(":", 1)[1].strip()
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")
    return {"model": model, "cpus": os.cpu_count(), "flags": [f for f in wanted if f in flags],
            "python": platform.python_version()}


def measure_all(folder: Path, repeats: int, seconds: float) -> list[dict[str, object]]:
    import onnxruntime
    from precision import measure, table

    from specgen.runtime.precision.int8 import has_vnni

    print(json.dumps(cpu()), f"onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__},",
          f"specgen sees VNNI: {has_vnni()}", flush=True)
    for skeleton in sorted(folder.glob("*/skeleton.onnx")):
        onnx.save(fill(onnx.load(skeleton)), skeleton.parent / "model.onnx")
        x = np.random.default_rng(0).standard_normal((CALIBRATION, SIZE, SIZE, 3)).astype(np.float32)
        np.savez(skeleton.parent / "data.npz", x=x)
    rows = []
    for model in sorted(m for m in folder.iterdir() if (m / "model.onnx").exists()):
        rows.append(measure(model, "cpu", repeats, seconds))
        print(table(rows[-1:]), flush=True)
    print(table(rows))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["prepare", "measure"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.phase == "prepare":
        prepare(args.folder)
        return 0
    rows = measure_all(args.folder, args.repeats, args.seconds)
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
