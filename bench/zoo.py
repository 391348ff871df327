"""The keras.applications zoo through specgen: import, build, export, onnxruntime, against Keras and tf2onnx.

For each of the 40 constructors (weights=None, Keras' initial weights drawn after
keras.utils.set_random_seed(0), 1000 classes with softmax; the smallest input each allows, plus
224x224 for ResNet50 and MobileNetV2), one subprocess (memory and TensorFlow state do not
accumulate; a per-model timeout) runs:

  import   specgen.importers.keras.import_keras(name, input_shape=...): the spec and <spec>.keras
  build    load_spec + build_ir (what `specgen validate` checks) + render_files (`specgen build`)
  export   specgen.runtime.commands.export.export without a checkpoint: the restore plan, with its gate
  parity   max |onnxruntime(specgen) - Keras| / max |Keras| on a batch of 2 (N(0, 1) inputs),
           Keras being the saved .keras model in a tf.function (training=False)
  tf2onnx  tf2onnx.convert.from_function on that tf.function (opset 18, as bench/infer.py); its
           node count and its own parity, or the exception's first line when it fails
  latency  batch 1 and 8, onnxruntime CPU (Predictor's options, default intra-op threads) on
           specgen's and tf2onnx's graphs and the Keras tf.function, interleaved (bench/infer.py's
           Timer): medians of --repeats; ratios are the medians of per-repetition ratios

Times are in-process after TensorFlow and Keras are imported (import includes building the Keras
model and saving the .keras file). Prints a markdown table and a summary; --json writes both.

    python bench/zoo.py                                  # all 42 rows (about an hour on 2 cores)
    python bench/zoo.py --models 'MobileNet*' ResNet50 --quick
    python bench/zoo.py --json /tmp/zoo.json --timeout 900
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

NAMES = ["ConvNeXtBase", "ConvNeXtLarge", "ConvNeXtSmall", "ConvNeXtTiny", "ConvNeXtXLarge", "DenseNet121",
         "DenseNet169", "DenseNet201", *[f"EfficientNetB{i}" for i in range(8)],
         *[f"EfficientNetV2{s}" for s in ("B0", "B1", "B2", "B3", "L", "M", "S")], "InceptionResNetV2",
         "InceptionV3", "MobileNet", "MobileNetV2", "MobileNetV3Large", "MobileNetV3Small", "NASNetLarge",
         "NASNetMobile", "ResNet101", "ResNet101V2", "ResNet152", "ResNet152V2", "ResNet50", "ResNet50V2", "VGG16",
         "VGG19", "Xception"]
SMALLEST = {"Xception": 71, "InceptionV3": 75, "InceptionResNetV2": 75}  # others: 32
ROWS = [(n, SMALLEST.get(n, 32)) for n in sorted(NAMES)] + [("ResNet50", 224), ("MobileNetV2", 224)]
TOLERANCE = 1e-4
TF2ONNX_OPSET = 18
BATCHES = (1, 8)
# Run last (the table is sorted by name anyway), so that an interrupted run has the most rows.
HEAVY = ("ConvNeXtBase", "ConvNeXtLarge", "ConvNeXtXLarge", "EfficientNetB6", "EfficientNetB7", "EfficientNetV2L",
         "EfficientNetV2M", "NASNetLarge", "ResNet152", "ResNet152V2")


def _last_line(stderr: str) -> str:
    """A failed model's last stderr line, its scratch folder shown as <tmp> (no machine paths in the table)."""
    line = (stderr.strip().splitlines() or ["?"])[-1]
    return re.sub(re.escape(tempfile.gettempdir()) + r"/specgen-zoo-[^/\s]+", "<tmp>", line)[:600]  # a gate refusal says why


def label(name: str, size: int) -> str:
    return name if size == SMALLEST.get(name, 32) else f"{name}@{size}"


# --- one model, in its own process ------------------------------------------------------------


def _leaf_layers(model: Any) -> int:
    """Keras layers, nested models counted by their layers, InputLayers left out."""
    return sum(type(layer).__name__ != "InputLayer" for layer in _all_layers(model))


def _all_layers(model: Any) -> list[Any]:
    """Every layer, nested models' layers included."""
    return [inner for layer in model.layers
            for inner in (_all_layers(layer) if hasattr(layer, "layers") else [layer])]


def _rel(actual: Any, expected: Any) -> float:
    import numpy as np

    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


def _time(row: dict[str, Any], calls: dict[str, Any], batch: int, repeats: int, seconds: float) -> None:
    from infer import Timer, interleaved

    timers = {key: Timer(key, call) for key, call in calls.items()}
    interleaved(list(timers.values()), repeats, seconds)
    row[f"b{batch}_ms"] = {key: t.median * 1e3 for key, t in timers.items()}
    specgen = timers["specgen"].per_call
    row[f"b{batch}_speedup"] = {key: statistics.median(a / b for a, b in zip(t.per_call, specgen, strict=True))
                                for key, t in timers.items() if key != "specgen"}


def randomize_statistics(net: Any) -> None:
    """Random batch-norm parameters and statistics (seed 1), convolution and dense weights left as Keras drew them.

    With Keras' fresh weights several models (EfficientNet, MobileNet) output an almost uniform softmax, and a
    relative difference of such an output proves little; normalizations with non-trivial statistics make every
    channel's scale and shift matter while the variance-preserving kernels keep deep models finite.
    """
    import numpy as np

    rng = np.random.default_rng(1)
    for weight in net.weights:
        leaf = weight.path.rsplit("/", 1)[-1]
        shape = tuple(weight.shape)
        if leaf == "moving_variance":
            weight.assign(rng.uniform(0.5, 1.5, shape).astype(np.float32))
        elif leaf in ("beta", "moving_mean"):
            weight.assign((rng.standard_normal(shape) * 0.1).astype(np.float32))
    # gamma = sqrt(variance) x U(0.8, 1.2): each normalization scales by 0.8-1.2, so a 300-layer model stays in
    # float32's comfortable range (gamma ~ U(0.5, 1.5) on its own compounded to saturated softmaxes).
    for layer in _all_layers(net):
        if type(layer).__name__ == "BatchNormalization" and layer.scale:
            std = np.sqrt(layer.moving_variance.numpy())
            layer.gamma.assign((std * rng.uniform(0.8, 1.2, std.shape)).astype(np.float32))


def one(name: str, size: int, result: Path, repeats: int, seconds: float) -> None:
    """Fill `result` (JSON, rewritten after every phase, so a timeout still says how far it got)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import logging

    import keras
    import numpy as np
    import onnx
    import tensorflow as tf
    import tf2onnx
    from infer import ort_session

    from specgen.importers.keras import import_keras
    from specgen.ir.resolve import build_ir
    from specgen.pipeline import build
    from specgen.render.files import render_files
    from specgen.runtime.commands.export import export
    from specgen.spec.load import load_spec

    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    row: dict[str, Any] = {"model": label(name, size), "input": size, "phase": "import"}

    def save(phase: str) -> None:
        row["phase"] = phase
        result.write_text(json.dumps(row))

    save("import")
    folder = Path(tempfile.mkdtemp(prefix="specgen-zoo-"))
    spec = folder / "model.yaml"
    start = time.perf_counter()
    imported = import_keras(name, spec, input_shape=(size, size, 3))
    assert imported.weights_written is not None
    net = keras.models.load_model(imported.weights_written, compile=False)  # Keras' own file, written by the import
    randomize_statistics(net)
    net.save(imported.weights_written)
    row["import_s"], row["spec_lines"] = time.perf_counter() - start, len(spec.read_text().splitlines())
    save("build")
    start = time.perf_counter()
    loaded = load_spec(spec)
    ir = build_ir(loaded)
    render_files(ir)
    row["build_s"], row["spec_layers"] = time.perf_counter() - start, len(ir.nodes)
    save("export")
    start = time.perf_counter()
    report = export(build(loaded), None, folder / "out")
    row["export_s"], row["export_scaled_diff"] = time.perf_counter() - start, report["parity_scaled_diff"]
    save("parity")
    row["keras_layers"] = _leaf_layers(net)
    model = onnx.load(folder / "out" / "model.onnx")
    row["nodes"] = len(model.graph.node)
    input_name = ir.inputs[0].onnx_name
    signature = [tf.TensorSpec([None, size, size, 3], tf.float32, name=input_name)]

    @tf.function(input_signature=signature)
    def forward(x: tf.Tensor) -> tf.Tensor:
        return net(x, training=False)

    ours = ort_session("specgen", model, "cpu", 0)
    x2 = np.random.default_rng(0).standard_normal((2, size, size, 3)).astype(np.float32)
    reference = forward(x2).numpy()
    row["rel_diff"] = _rel(ours.call(x2), reference)
    # (max - min) / mean |output|: near 0, the output is uniform (a 1000-way softmax of tiny logits) and proves little
    row["output_spread"] = float((reference.max() - reference.min()) / max(float(np.mean(np.abs(reference))), 1e-30))
    save("tf2onnx")
    theirs = None
    try:
        converted, _ = tf2onnx.convert.from_function(forward, input_signature=signature, opset=TF2ONNX_OPSET)
        row["tf2onnx_nodes"] = len(converted.graph.node)
        session = ort_session("tf2onnx", converted, "cpu", 0)
        row["tf2onnx_rel_diff"] = _rel(session.call(x2), reference)  # raises when its graph cannot run
        theirs = session
    except Exception as exc:  # tf2onnx's own failure: recorded, the row goes on without it
        row["tf2onnx_error"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"
    # Timed sessions are created together, after the conversion: measured, a session created before
    # tf2onnx's conversion ran up to 40% slower than the same graph in a fresh session beside it.
    ours = ort_session("specgen", model, "cpu", 0)
    if theirs is not None:
        theirs = ort_session("tf2onnx", converted, "cpu", 0)
    for batch in BATCHES:
        save(f"latency b{batch}")
        x = np.random.default_rng(batch).standard_normal((batch, size, size, 3)).astype(np.float32)
        calls = {"specgen": lambda x=x: ours.call(x), "tf.function": lambda x=x: forward(x).numpy()}
        if theirs is not None:
            calls["tf2onnx"] = lambda x=x: theirs.call(x)
        _time(row, calls, batch, repeats, seconds)
    save("done")


# --- the table ----------------------------------------------------------------------------------


def _speed(row: dict[str, Any], batch: int) -> list[str]:
    ms = row.get(f"b{batch}_ms")
    if ms is None:
        return ["-", "-", "-"]
    up = row[f"b{batch}_speedup"]
    return [f"{ms['specgen']:.2f}", f"{up['tf2onnx']:.2f}x" if "tf2onnx" in up else "-", f"{up['tf.function']:.2f}x"]


def table(rows: list[dict[str, Any]]) -> str:
    """Ratios are other/specgen latency: above 1, specgen's graph in onnxruntime is faster."""
    head = ["model", "input", "Keras layers", "spec lines", "import / build / export s", "max rel diff (output spread)",
            "nodes specgen / tf2onnx", "b1 ms", "b1 vs tf2onnx", "b1 vs tf.function", "b8 ms", "b8 vs tf2onnx",
            "b8 vs tf.function"]
    lines, notes = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)], []
    for r in rows:
        if "error" in r:
            notes.append(f"- {r['model']}: {r['error']}")
        if "tf2onnx_error" in r:
            notes.append(f"- {r['model']}: tf2onnx fails: {r['tf2onnx_error']}")
        secs = " / ".join(f"{r[k]:.1f}" if k in r else "-" for k in ("import_s", "build_s", "export_s"))
        diff = f"{r['rel_diff']:.1e}" if "rel_diff" in r else "**failed**"
        if "output_spread" in r:
            diff += f" (spread {r['output_spread']:.2f})"
        t2o = "tf2onnx fails" if "tf2onnx_error" in r else str(r.get("tf2onnx_nodes", "-"))
        cells = [r["model"], str(r["input"]), str(r.get("keras_layers", "-")), str(r.get("spec_lines", "-")), secs,
                 diff, f"{r.get('nodes', '-')} / {t2o}", *_speed(r, 1), *_speed(r, 8)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + (["", *notes] if notes else []))


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r.get("rel_diff", float("inf")) <= TOLERANCE]
    both = [r for r in rows if "tf2onnx_nodes" in r and "nodes" in r]
    node_ratios = [r["nodes"] / r["tf2onnx_nodes"] for r in both]
    out: dict[str, Any] = {"rows": len(rows), "within_tolerance": len(ok),
                           "outside": [r["model"] for r in rows if r not in ok],
                           "tf2onnx_failures": {r["model"]: r["tf2onnx_error"] for r in rows if "tf2onnx_error" in r}}
    if node_ratios:
        out["node_ratio"] = {"median": statistics.median(node_ratios), "worst": max(node_ratios)}
    for batch in BATCHES:
        for other in ("tf2onnx", "tf.function"):
            ups = [r[f"b{batch}_speedup"][other] for r in rows if other in r.get(f"b{batch}_speedup", {})]
            if ups:
                worst = min(rows, key=lambda r: r.get(f"b{batch}_speedup", {}).get(other, float("inf")))
                out[f"b{batch}_vs_{other}"] = {"median": statistics.median(ups), "worst": min(ups),
                                               "worst_model": worst["model"], "slower": sum(u < 1 for u in ups)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["*"], help="names or globs (ResNet50 also picks ResNet50@224)")
    parser.add_argument("--quick", action="store_true", help="3 repetitions of 0.1 s instead of 5 of 0.3 s")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model (default 900)")
    parser.add_argument("--json", type=Path, help="write the rows and the summary here")
    parser.add_argument("--one", nargs=3, metavar=("NAME", "SIZE", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be above 0 seconds")
    # Each row's subprocess imports tf2onnx first: without it every model was counted as a specgen failure.
    if importlib.util.find_spec("tf2onnx") is None:
        print("bench/zoo.py: tf2onnx is not installed; `pip install tf2onnx==1.17.0` (the bench extra; the version "
              "bench/infer.py was run with); nothing was measured.", file=sys.stderr)
        return 2
    repeats, seconds = (3, 0.1) if args.quick else (5, 0.3)
    if args.one:
        one(args.one[0], int(args.one[1]), Path(args.one[2]), repeats, seconds)
        return 0
    picked = [(n, s) for n, s in ROWS
              if any(fnmatch.fnmatchcase(n, p) or fnmatch.fnmatchcase(label(n, s), p) for p in args.models)]
    if not picked:
        parser.error(f"--models: {' '.join(args.models)} names none of the {len(ROWS)} rows (bench/zoo.py's ROWS)")
    picked.sort(key=lambda row: (row[0] in HEAVY, row[1] != SMALLEST.get(row[0], 32)))
    rows, started = [], time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specgen-zoo-results-") as folder:
        for name, size in picked:
            result = Path(folder) / f"{label(name, size)}.json"
            command = [sys.executable, __file__, "--one", name, str(size), str(result)] + (["--quick"] * args.quick)
            begun = time.perf_counter()
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
                failure = None if done.returncode == 0 else _last_line(done.stderr)
            except subprocess.TimeoutExpired:
                failure = f"timeout after {args.timeout:.0f} s"
            row = json.loads(result.read_text()) if result.is_file() else {"model": label(name, size), "input": size}
            if failure:
                row["error"] = f"{failure} (in {row.get('phase', 'start')})"
            row["wall_s"] = time.perf_counter() - begun
            rows.append(row)
            print(f"{row['model']}: {row.get('phase')} in {row['wall_s']:.0f} s"
                  + (f", rel diff {row['rel_diff']:.1e}" if "rel_diff" in row else "")
                  + (f"; {row['error']}" if "error" in row else ""), file=sys.stderr, flush=True)
            if args.json:  # after every model: an interrupted run keeps what it measured
                args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    rows.sort(key=lambda row: row["model"])
    result_summary = summary(rows)
    print(table(rows))
    print("\n" + json.dumps(result_summary, indent=1))
    print(f"\nwhole run {time.perf_counter() - started:.0f} s; {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": result_summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
