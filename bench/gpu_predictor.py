"""Today's Predictor against issue 30's on the CUDA provider: fp32 and fp16 ResNet50 at batch 1 and 8.

Needs a GPU: without onnxruntime's CUDA provider and an NVIDIA driver it says so and exits 2. The forms, each
called as `specgen infer` and the server's batcher call it (numpy in, numpy out, inputs checked):

- `today`: `Predictor(model, "cuda", nhwc=False)`: IO binding, NCHW convolutions, no graph (the Predictor
  before issue 30: the same code path with `prefer_nhwc` off);
- `nhwc`: `Predictor(model, "cuda")`: the default now, `prefer_nhwc=1`;
- `graphs`: `Predictor(model, "cuda", cuda_graphs=True, max_batch_size=B)`: a CUDA graph captured per
  batch bucket (1, 2, 4, 8 for B = 8), replayed from preallocated device buffers.

Before timing, every form's outputs are compared with onnxruntime's CPU provider on the float32 model (the
largest |difference| over the largest |output|). Timing: medians of `--repeats` interleaved measurements of
at least `--seconds` each (the order rotated every repetition), after a warm-up. Ratios are against today's
fp32 at the same batch. `--server` also times one client's requests through `specgen serve` (binary tensors
over HTTP, tritonclient), once with and once without `--cuda-graphs`, where the server offers that option
(specgen.serve.models.load_repository taking `cuda_graphs`); it needs the serve extra's packages there.

    python bench/gpu_predictor.py resnet50.onnx [--fp16 resnet50.fp16.onnx] [--skeleton] [--json out.json]
    python3 bench/gpu_predictor.py .gpu/models/resnet50_fp32.onnx --fp16 .gpu/models/resnet50_fp16.onnx --skeleton

`--skeleton`: the graphs are bench/onnx_skeleton.py skeletons (what `bench/cuda_prepare_zoo.py --out DIR` writes
for the GPU machine: DIR/resnet50_fp32.onnx and DIR/resnet50_fp16.onnx); their weights are filled in first.
Without `--fp16`, the fp16 graph is made from the fp32 one by `specgen export --precision fp16`'s conversion
(runtime/precision/fp16.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from specgen.runtime.buckets import batch_buckets  # noqa: E402
from specgen.runtime.predictor import CUDA, Predictor, has_cuda_driver  # noqa: E402


def needs_gpu() -> str | None:
    if CUDA not in ort.get_available_providers():
        return f"onnxruntime {ort.__version__} has no CUDA provider here ({', '.join(ort.get_available_providers())})"
    if not has_cuda_driver():
        return "no NVIDIA driver on this machine"
    return None


def load(path: Path, skeleton: bool) -> bytes:
    model = onnx.load(str(path))
    if skeleton:
        from onnx_skeleton import fill

        fill(model, seed=0)
    return model.SerializeToString()


def forms(model: bytes, batch: int, dry_run: bool = False) -> dict[str, Predictor]:
    if dry_run:  # the script's own path on the CPU: buckets without graphs
        return {"today": Predictor(model, "cpu"), "nhwc": Predictor(model, "cpu"),
                "graphs": Predictor(model, "cpu", buckets=batch_buckets(batch))}
    return {"today": Predictor(model, "cuda", nhwc=False), "nhwc": Predictor(model, "cuda"),
            "graphs": Predictor(model, "cuda", cuda_graphs=True, max_batch_size=batch)}


def per_call(call: Callable[[], Any], seconds: float) -> float:
    """Median seconds per call over at least `seconds` (3 calls at least)."""
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(calls: dict[str, Callable[[], Any]], repeats: int, seconds: float) -> dict[str, list[float]]:
    for call in calls.values():  # warm-up: cuDNN's algorithm search, allocations
        for _ in range(5):
            call()
    labels, times = list(calls), {label: [] for label in calls}
    for rep in range(repeats):
        for label in labels[rep % len(labels):] + labels[:rep % len(labels)]:
            times[label].append(per_call(calls[label], seconds))
    return times


def relative(got: np.ndarray, expected: np.ndarray) -> float:
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    return float(np.max(np.abs(got - expected)) / max(np.max(np.abs(expected)), 1e-30))


def bare(models: dict[str, bytes], batches: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every form of every precision at every batch, against the CPU provider's float32 outputs."""
    cpu = Predictor(models["fp32"], "cpu")
    name, (shape, _) = next(iter(cpu.inputs.items()))
    rows = []
    for batch in batches:
        x = np.random.default_rng(batch).standard_normal((batch, *shape[1:])).astype(np.float32)
        expected = next(iter(cpu({name: x}).values()))
        loaded = {f"{precision} {form}": p for precision, m in models.items()
                  for form, p in forms(m, batch, args.dry_run_cpu).items()}
        notes = {label: p.graph_note for label, p in loaded.items() if p.graph_note}
        checks = {label: relative(next(iter(p({name: x}).values())), expected) for label, p in loaded.items()}
        times = interleaved({label: (lambda p=p, x=x: p({name: x})) for label, p in loaded.items()}, args.repeats,
                            args.seconds)
        base = statistics.median(times["fp32 today"])
        for label, values in times.items():
            median = statistics.median(values)
            rows.append({"where": "Predictor", "form": label, "batch": batch, "ms": median * 1e3,
                         "min_ms": min(values) * 1e3, "max_ms": max(values) * 1e3, "vs_fp32_today": base / median,
                         "cuda_vs_cpu_relative": checks[label], "graph_note": notes.get(label)})
        for p in loaded.values():
            p.close()
    return rows


def _config(model: bytes, name: str, max_batch: int) -> str:
    """A minimal config.pbtxt for a batch-first float32 model (what `specgen export --triton` writes)."""
    graph = onnx.load_from_string(model).graph
    weights = {t.name for t in graph.initializer}

    def tensors(values: list[onnx.ValueInfoProto]) -> str:
        return ", ".join(f'{{ name: "{v.name}" data_type: TYPE_FP32 dims: '
                         f'[ {", ".join(str(d.dim_value) for d in v.type.tensor_type.shape.dim[1:])} ] }}' for v in values)

    inputs = [v for v in graph.input if v.name not in weights]
    return (f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: {max_batch}\ninput [ {tensors(inputs)} ]\n'
            f'output [ {tensors(list(graph.output))} ]\ndynamic_batching {{ max_queue_delay_microseconds: 100 }}\n')


def served(models: dict[str, bytes], batches: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One client's requests through the server, with and without --cuda-graphs (binary tensors over HTTP)."""
    import inspect

    try:
        import tritonclient.http as http
        import uvicorn

        from specgen.serve.app import create_app
        from specgen.serve.models import load_repository
        from specgen.serve.server import server_config
    except ImportError as exc:
        print(f"server: not timed ({exc}); install specgen's serve extra and tritonclient here", flush=True)
        return []
    if "cuda_graphs" not in inspect.signature(load_repository).parameters:
        print("server: not timed: specgen.serve.models.load_repository takes no cuda_graphs yet", flush=True)
        return []
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for precision, model in models.items():
            (Path(folder) / precision / "1").mkdir(parents=True)
            (Path(folder) / precision / "1" / "model.onnx").write_bytes(model)
            (Path(folder) / precision / "config.pbtxt").write_text(_config(model, precision, max(batches)))
        for graphs in (False, True):
            provider = "cpu" if args.dry_run_cpu else "cuda"
            app = create_app(load_repository(Path(folder), provider=provider, cuda_graphs=graphs))
            server = uvicorn.Server(server_config(app, "127.0.0.1", 0))
            thread = threading.Thread(target=server.run, daemon=True)
            thread.start()
            while not server.started:
                time.sleep(0.01)
            url = f"127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
            client = http.InferenceServerClient(url)
            for precision, model in models.items():
                graph = onnx.load_from_string(model).graph
                source = next(v for v in graph.input if v.name not in {t.name for t in graph.initializer})
                tail = [d.dim_value for d in source.type.tensor_type.shape.dim[1:]]
                for batch in batches:
                    x = np.random.default_rng(batch).standard_normal((batch, *tail)).astype(np.float32)
                    tensor = http.InferInput(source.name, list(x.shape), "FP32")
                    tensor.set_data_from_numpy(x, binary_data=True)
                    calls = {"one": lambda c=client, t=tensor, p=precision: c.infer(p, [t])}
                    times = interleaved(calls, args.repeats, args.seconds)["one"]
                    rows.append({"where": "server", "form": f"{precision} {'graphs' if graphs else 'no graphs'}",
                                 "batch": batch, "ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
                                 "max_ms": max(times) * 1e3})
            server.should_exit = True
            thread.join(30)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="the float32 model (ResNet50 at 224, specgen's export)")
    parser.add_argument("--fp16", type=Path, help="its fp16 variant (default: converted here)")
    parser.add_argument("--skeleton", action="store_true", help="the graphs are bench/onnx_skeleton.py skeletons")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--server", action="store_true", help="also time requests through specgen serve")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--dry-run-cpu", action="store_true", help="run the script's path on the CPU (no figures)")
    args = parser.parse_args(argv)
    missing = None if args.dry_run_cpu else needs_gpu()
    if missing:
        print(f"bench/gpu_predictor.py needs a GPU: {missing}. Run it on the GPU machine (bench/cuda_run.sh).",
              file=sys.stderr)
        return 2
    ort.set_default_logger_severity(3)
    models = {"fp32": load(args.model, args.skeleton)}
    if args.fp16:
        models["fp16"] = load(args.fp16, args.skeleton)
    else:
        from specgen.runtime.precision import fp16
        from specgen.runtime.precision.base import Calibration

        models["fp16"] = fp16.convert(models["fp32"], Calibration())[0]
    rows = bare(models, args.batches, args) + (served(models, args.batches, args) if args.server else [])
    print(f"\nonnxruntime {ort.__version__}; medians of {args.repeats} interleaved measurements of >= {args.seconds} s; "
          "numpy in and out")
    print(f"{'where':<10}{'form':<14}{'batch':>6}{'ms':>9}{'min-max':>17}{'vs fp32 today':>15}{'cuda/cpu':>10}")
    for r in rows:
        ratio = f"{r['vs_fp32_today']:.2f}x" if "vs_fp32_today" in r else ""
        check = f"{r['cuda_vs_cpu_relative']:.1e}" if "cuda_vs_cpu_relative" in r else ""
        print(f"{r['where']:<10}{r['form']:<14}{r['batch']:>6}{r['ms']:>9.3f}{r['min_ms']:>8.3f}-{r['max_ms']:<8.3f}"
              f"{ratio:>15}{check:>10}" + (f"  ({r['graph_note']})" if r.get("graph_note") else ""))
    if args.json:
        args.json.write_text(json.dumps({"onnxruntime": ort.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
