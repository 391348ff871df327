"""Time exported ONNX graphs with onnxruntime's CUDA provider, side by side, on a machine without TensorFlow.

The GPU machine this project is lent has onnxruntime-gpu carried to it but no TensorFlow, so the graphs are
made here (`bench/sequence.py --build-only --save-onnx DIR`: the encoder and LSTM; `bench/cuda_prepare_zoo.py
--out DIR`: ResNet50 and MobileNetV2, fp32 and fp16) as skeletons (bench/onnx_skeleton.py: large weights
replaced by their statistics) with a `manifest.json`:

    {"models": [{"group": "encoder", "label": "specgen", "file": "encoder_specgen.onnx", "input": "x",
                 "shape": ["B", "S", 768], "dtype": "float32", "points": [[1, 128], [8, 128]]}, ...]}

Every graph of a group is timed at each of the group's points (B batch, S sequence or image side), interleaved
(rotating order, medians of `--repeats` measurements of at least `--seconds` each; numpy in and out, as
`specgen infer` and `serve` call it, so host-device copies are included). Before timing, each graph's CUDA
output is compared with its CPU provider output on the same weights and input (relative max difference;
onnxruntime's CUDA provider may use TF32 matrix units, ~1e-3 relative). Ratios are against the group's first
label. `--io-binding` times with the inputs copied to the GPU once and the outputs left there; an entry's
`cuda_options` (e.g. {"prefer_nhwc": "1"}) go to the CUDA provider; {"enable_cuda_graph": "1"} replays the whole
graph as one captured CUDA graph (device-resident only: a captured graph needs fixed input and output addresses,
so such an entry gets a session of its own per point, outputs bound to preallocated buffers).
Output: a table, and JSON in `--json`.

    python bench/cuda_onnx.py DIR [--repeats 7] [--seconds 0.3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_skeleton import fill


def session(model: onnx.ModelProto, provider: str, cuda_options: dict[str, str] | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    cuda: Any = ("CUDAExecutionProvider", cuda_options) if cuda_options else "CUDAExecutionProvider"
    providers = [cuda, "CPUExecutionProvider"] if provider == "cuda" else ["CPUExecutionProvider"]
    return ort.InferenceSession(model.SerializeToString(), options, providers=providers)


class Bound:
    """`sess.run` with the input copied to the GPU once and the outputs left there: the device-resident figure.

    `fixed`: the outputs go to buffers allocated once (of their declared shape, "B" the batch), as a captured
    CUDA graph requires.
    """

    def __init__(self, sess: ort.InferenceSession, feed: dict[str, np.ndarray], fixed: bool = False):
        self.sess, self.binding = sess, sess.io_binding()
        for name, array in feed.items():
            self.binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0))
        batch = next(iter(feed.values())).shape[0]
        for out in sess.get_outputs():
            if fixed:
                shape = [d if isinstance(d, int) else batch for d in out.shape]
                self.binding.bind_ortvalue_output(out.name, ort.OrtValue.ortvalue_from_shape_and_type(
                    shape, np.float16 if "float16" in out.type else np.float32, "cuda", 0))
            else:
                self.binding.bind_output(out.name, "cuda", 0)

    def run(self, _outputs: Any, _feed: Any) -> None:
        self.sess.run_with_iobinding(self.binding)

    def outputs(self) -> list[np.ndarray]:
        """Run once more and copy the outputs to the host (for the CPU comparison, never timed)."""
        self.sess.run_with_iobinding(self.binding)
        return self.binding.copy_outputs_to_cpu()


def graphed(entry: dict[str, Any]) -> bool:
    return (entry.get("cuda_options") or {}).get("enable_cuda_graph") == "1"


def example(entry: dict[str, Any], batch: int, size: int, seed: int = 0) -> np.ndarray:
    shape = [batch if d == "B" else size if d == "S" else int(d) for d in entry["shape"]]
    rng = np.random.default_rng(seed)
    if entry["dtype"].startswith("int"):
        return rng.integers(1, entry.get("vocab", 100), size=shape).astype(entry["dtype"])
    return rng.standard_normal(shape).astype(entry["dtype"])


def per_call(sess: Any, feed: dict[str, np.ndarray], seconds: float) -> float:
    """Median seconds per call over at least `seconds` of calls (3 at least)."""
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def relative(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def run_group(entries: list[dict[str, Any]], folder: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    models = {e["label"]: fill(onnx.load(folder / e["file"]), seed=0) for e in entries}
    cuda = {e["label"]: session(models[e["label"]], args.provider, e.get("cuda_options")) for e in entries
            if not graphed(e)}
    rows = []
    for batch, size in entries[0]["points"]:
        feeds = {e["label"]: {e["input"]: example(e, batch, size)} for e in entries}
        bound = {}
        for e in filter(graphed, entries):  # a graph that cannot be captured is reported and left out
            try:
                bound[e["label"]] = Bound(session(models[e["label"]], args.provider, e["cuda_options"]),
                                          feeds[e["label"]], fixed=True)
                bound[e["label"]].outputs()
            except Exception as exc:
                bound.pop(e["label"], None)
                print(f"  {e['label']}: no CUDA graph ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})")
        active = [e for e in entries if not graphed(e) or e["label"] in bound]
        checks = {}
        for e in active:  # CUDA against CPU on the same weights and input
            label = e["label"]
            try:
                expected = session(models[label], "cpu").run(None, feeds[label])[0]
            except Exception as exc:  # e.g. a float16 Conv, which onnxruntime's CPU provider has no kernel for
                print(f"  {label}: no CPU reference ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
                checks[label] = float("nan")
                continue
            got = bound[label].outputs() if label in bound else cuda[label].run(None, feeds[label])
            checks[label] = relative(got[0], expected)
        runners: dict[str, Any] = {**cuda, **bound}
        if args.io_binding:
            runners = {**{label: Bound(s, feeds[label]) for label, s in cuda.items()}, **bound}
        times: dict[str, list[float]] = {e["label"]: [] for e in active}
        labels = list(times)
        for label in labels:  # warm-up: cuDNN algorithm search, allocations
            for _ in range(3):
                runners[label].run(None, feeds[label])
        for rep in range(args.repeats):
            for label in labels[rep % len(labels):] + labels[:rep % len(labels)]:
                times[label].append(per_call(runners[label], feeds[label], args.seconds))
        base = statistics.median(times[labels[0]])
        for label in labels:
            median = statistics.median(times[label])
            rows.append({"group": active[0]["group"], "label": label, "batch": batch, "size": size,
                         "ms": median * 1e3, "min_ms": min(times[label]) * 1e3, "max_ms": max(times[label]) * 1e3,
                         "speedup_vs_first": base / median, "cuda_vs_cpu_relative": checks[label]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--groups", nargs="*", help="only these groups")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--provider", choices=("cuda", "cpu"), default="cuda", help="cpu: a dry run of the script")
    parser.add_argument("--io-binding", action="store_true",
                        help="inputs and outputs stay on the GPU (no host-device copies timed)")
    args = parser.parse_args(argv)
    ort.set_default_logger_severity(3)
    if args.provider == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        print(f"bench/cuda_onnx.py: onnxruntime {ort.__version__} has no CUDA provider "
              f"({ort.get_available_providers()})", file=sys.stderr)
        return 2
    manifest = json.loads((args.folder / "manifest.json").read_text())
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in manifest["models"]:
        groups.setdefault(entry["group"], []).append(entry)
    rows: list[dict[str, Any]] = []
    for name, entries in groups.items():
        if args.groups and name not in args.groups:
            continue
        t0 = time.perf_counter()
        rows += run_group(entries, args.folder, args)
        print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)
    copies = "device-resident inputs and outputs" if args.io_binding else "numpy in and out"
    print(f"\nonnxruntime {ort.__version__}, {args.provider} provider, {copies}; "
          f"medians of {args.repeats} interleaved measurements")
    print(f"{'group':<14}{'graph':<26}{'batch':>6}{'size':>6}{'ms':>10}{'min-max':>18}{'vs first':>10}{'cuda/cpu':>10}")
    for r in rows:
        print(f"{r['group']:<14}{r['label']:<26}{r['batch']:>6}{r['size']:>6}{r['ms']:>10.3f}"
              f"{r['min_ms']:>8.3f}-{r['max_ms']:<9.3f}{r['speedup_vs_first']:>9.2f}x{r['cuda_vs_cpu_relative']:>10.1e}")
    if args.json:
        args.json.write_text(json.dumps({"onnxruntime": ort.__version__, "io_binding": args.io_binding, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
