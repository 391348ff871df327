"""fp32 against specgen's int8 and onnxruntime's plain `quantize_static`, and fp16 against fp32 on CUDA.

Models: ResNet50 and MobileNetV2 at 224 (keras.applications through specgen's importer, random weights
with realistic batch-norm statistics as bench/zoo.py draws them; calibrated on N(0, 1) images, since
there is no data for them here) and the digits CNN trained for 200 steps (calibrated on its 360 eval
examples, the accuracy measured on the same set). Two phases, so the measuring one needs no TensorFlow:

  make     (TensorFlow) DIR/<model>/model.onnx exported by specgen, DIR/<model>/data.npz (calibration
           inputs `x`, and for digits its eval set `x_test`, `y_test`)
  measure  (onnx + onnxruntime only) for each DIR/<model>: sizes, the integer kernels onnxruntime fused,
           latency at batch 1 and 8 (medians of interleaved repetitions, ratios the medians of
           per-repetition ratios), digits accuracy; `--provider cuda` measures fp16 against fp32 instead

    python bench/precision.py                               # make into a temporary folder, then measure on CPU
    python bench/precision.py --make /tmp/prec              # only the exports (needs TensorFlow)
    python bench/precision.py --onnx-only /tmp/prec --provider cuda   # on a GPU machine without TensorFlow
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
ZOO = (("ResNet50", 224), ("MobileNetV2", 224))
BATCHES = (1, 8)
ZOO_CALIBRATION = 64  # random images: more of them only widen the ranges noise already sets


# --- make (TensorFlow) ----------------------------------------------------------------------------


def make(folder: Path) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for name, size in ZOO:
        _make_zoo(folder / f"{name}@{size}", name, size)
    _make_digits(folder / "digits_cnn")


def _make_zoo(folder: Path, name: str, size: int) -> None:
    import keras
    from zoo import randomize_statistics

    from specgen.importers.keras import import_keras
    from specgen.pipeline import build
    from specgen.runtime.commands.export import export
    from specgen.spec.load import load_spec

    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "model.yaml"
    imported = import_keras(name, spec, input_shape=(size, size, 3))
    net = keras.models.load_model(imported.weights_written, compile=False)
    randomize_statistics(net)
    net.save(imported.weights_written)
    export(build(load_spec(spec)), None, folder)
    x = np.random.default_rng(0).standard_normal((ZOO_CALIBRATION, size, size, 3)).astype(np.float32)
    np.savez(folder / "data.npz", x=x)


def _make_digits(folder: Path) -> None:
    from specgen.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    data = ROOT / "examples" / "data" / "digits.npz"
    text = (ROOT / "examples/specs/digits_cnn.yaml").read_text().replace("../data/digits.npz", str(data))
    spec = folder / "digits_cnn.yaml"
    spec.write_text(text.replace("dir: ../../runs/digits_cnn", "dir: run"))
    assert main(["train", str(spec), "--steps", "200", "--quiet"]) == 0
    assert main(["export", str(spec), "--checkpoint", str(folder / "run"), "-o", str(folder)]) == 0
    arrays = np.load(data)
    np.savez(folder / "data.npz", x=arrays["x_test"], x_test=arrays["x_test"], y_test=arrays["y_test"])


# --- measure (onnx + onnxruntime) -------------------------------------------------------------------


def plain_int8(model_bytes: bytes, x: np.ndarray) -> bytes:
    """onnxruntime's own call, as its docs give it: QDQ, per-channel, uint8 activations, int8 weights, MinMax."""
    import logging

    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.rows = iter([{name: x[i:i + 1]} for i in range(len(x))])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.rows, None)

    name = onnx.load_from_string(model_bytes).graph.input[0].name
    logging.getLogger().setLevel(logging.ERROR)  # its pre-processing advice, on every call
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "f.onnx").write_bytes(model_bytes)
        quantize_static(Path(tmp) / "f.onnx", Path(tmp) / "q.onnx", Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return (Path(tmp) / "q.onnx").read_bytes()


class Runner:
    """One model on one provider; CUDA through IO binding (input copied once, output left on the device)."""

    def __init__(self, model_bytes: bytes, provider: str):
        import onnxruntime as ort

        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if provider == "cuda" else ["CPUExecutionProvider"]
        self.session = ort.InferenceSession(model_bytes, providers=providers)
        self.provider = self.session.get_providers()[0]
        self.input, self.output = self.session.get_inputs()[0].name, self.session.get_outputs()[0].name

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.session.run([self.output], {self.input: x})[0]

    def timed_call(self, x: np.ndarray) -> Callable[[], Any]:
        if self.provider != "CUDAExecutionProvider":
            return lambda: self.session.run([self.output], {self.input: x})
        import onnxruntime as ort

        binding = self.session.io_binding()
        binding.bind_ortvalue_input(self.input, ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
        binding.bind_output(self.output, "cuda", 0)
        return lambda: self.session.run_with_iobinding(binding)


def interleaved(calls: dict[str, Callable[[], Any]], repeats: int, seconds: float) -> dict[str, list[float]]:
    """Seconds per call of each, `repeats` times, the order rotated each repetition (same load for all)."""
    counts = {}
    for key, call in calls.items():
        call()
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < seconds / 2 or n < 2:
            call()
            n += 1
        counts[key] = max(2, round(n * seconds / (time.perf_counter() - start)))  # calls that fill `seconds`
    times: dict[str, list[float]] = {k: [] for k in calls}
    keys = list(calls)
    for rep in range(repeats):
        for key in keys[rep % len(keys):] + keys[:rep % len(keys)]:
            start = time.perf_counter()
            for _ in range(counts[key]):
                calls[key]()
            times[key].append((time.perf_counter() - start) / counts[key])
    return times


def measure(folder: Path, provider: str, repeats: int, seconds: float) -> dict[str, Any]:
    from specgen.runtime.precision import fp16, int8
    from specgen.runtime.precision.base import Calibration, PrecisionRefusal
    from specgen.runtime.precision.optimized import op_counts, optimized_graph

    fp32 = (folder / "model.onnx").read_bytes()
    data = np.load(folder / "data.npz")
    name = Runner(fp32, "cpu").input
    variants: dict[str, bytes] = {"fp32": fp32}
    row: dict[str, Any] = {"model": folder.name, "provider": provider, "checks": {}}
    if provider == "cuda":
        variants["fp16"] = fp16.convert(fp32, Calibration())[0]
    else:
        variants["int8"] = int8.convert(fp32, Calibration("minmax", {name: data["x"]}))[0]
        variants["plain"] = plain_int8(fp32, data["x"])
    import onnxruntime as ort

    for key, model in variants.items():
        row.setdefault("bytes", {})[key] = len(model)
        if key == "fp32":
            continue
        graph = optimized_graph(model, provider, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        ops = op_counts(graph)
        row["checks"][key] = {"integer_kernels": sum(ops.get(o, 0) for o in int8.INTEGER_KERNELS),
                              "float_convs": ops.get("Conv", 0) + ops.get("FusedConv", 0)}
        try:
            (fp16 if key == "fp16" else int8).check(model, provider)
        except PrecisionRefusal as exc:
            row["checks"][key]["refusal"] = str(exc)
    runners = {k: Runner(m, provider) for k, m in variants.items()}
    row["device"] = runners["fp32"].provider
    if "y_test" in data.files:
        row["accuracy"] = {k: float(np.mean(np.argmax(r(data["x_test"]), -1) == data["y_test"]))
                           for k, r in runners.items()}
    shape = data["x"].shape[1:]
    for batch in BATCHES:
        x = np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)
        times = interleaved({k: r.timed_call(x) for k, r in runners.items()}, repeats, seconds)
        row[f"b{batch}_ms"] = {k: statistics.median(t) * 1e3 for k, t in times.items()}
        row[f"b{batch}_speedup"] = {k: statistics.median(a / b for a, b in zip(times["fp32"], t, strict=True))
                                    for k, t in times.items() if k != "fp32"}
    return row


def table(rows: list[dict[str, Any]]) -> str:
    keys = [k for k in rows[0]["bytes"] if k != "fp32"]
    head = ["model", "MB fp32 / " + " / ".join(keys)]
    head += [f"b{b} ms fp32 / {' / '.join(keys)}" for b in BATCHES] + [f"b{b} x fp32" for b in BATCHES]
    head += ["integer kernels (float convs left)", "accuracy fp32 / " + " / ".join(keys)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        mb = " / ".join(f"{r['bytes'][k] / 1e6:.2f}" for k in r["bytes"])
        ms = [" / ".join(f"{r[f'b{b}_ms'][k]:.2f}" for k in r["bytes"]) for b in BATCHES]
        speed = [" / ".join(f"{r[f'b{b}_speedup'][k]:.2f}x" for k in keys) for b in BATCHES]
        kernels = " / ".join(f"{c['integer_kernels']} ({c['float_convs']})" + (" refused" if "refusal" in c else "")
                             for c in r["checks"].values())
        acc = " / ".join(f"{a:.4f}" for a in r["accuracy"].values()) if "accuracy" in r else "-"
        lines.append(f"| {r['model']} | {mb} | {ms[0]} | {ms[1]} | {speed[0]} | {speed[1]} | {kernels} | {acc} |")
    return "\n".join(lines)


def machine() -> str:
    """The CPU, its integer-dot-product ISA flags and the load: int8's choices and speed depend on them (7-bit
    weights without VNNI), so a figure without them cannot be compared with another machine's."""
    import onnxruntime as ort

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    lines = info.splitlines()
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown CPU")
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    isa = sorted(f for f in flags if f.startswith(("avx512", "amx")) or f in ("avx2", "avx_vnni", "fma"))
    load = os.getloadavg()
    return (f"{model}, {os.cpu_count()} cores, ISA flags: {' '.join(isa) or 'unknown'}; onnxruntime {ort.__version__}; "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--make", type=Path, metavar="DIR", help="only export the models into DIR (TensorFlow)")
    parser.add_argument("--onnx-only", type=Path, metavar="DIR", help="only measure the models in DIR (no TensorFlow)")
    parser.add_argument("--provider", choices=["cpu", "cuda"], default="cpu", help="cpu: int8 vs fp32; cuda: fp16 vs fp32")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=0.5, help="per measurement")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.make:
        make(args.make)
        return 0
    folder = args.onnx_only or Path(tempfile.mkdtemp(prefix="specgen-precision-"))
    if args.onnx_only is None:
        make(folder)
    print(machine(), flush=True)
    rows = [measure(m, args.provider, args.repeats, args.seconds) for m in sorted(folder.iterdir()) if
            (m / "model.onnx").exists()]
    print(table(rows))
    # onnxruntime falls back to the CPU silently when CUDA cannot start: say which provider ran each model
    print("ran on: " + ", ".join(f"{r['model']} {r['device']}" for r in rows))
    for r in rows:
        for key, check in r["checks"].items():
            if "refusal" in check:
                print(f"{r['model']} {key}: {check['refusal']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
