"""Sequence models: onnxruntime on specgen's export against tf.function, tf2onnx and tf2onnx + ORT's optimizer.

Two models, each declared by a spec this script writes into a temporary folder (`encoder_layers` /
`lstm_layers`: the one place that says how the model is spelled in a spec) and built as `specgen build`
builds it (load_spec, build_ir, render_files):

  encoder  BERT-base sized post-norm encoder on a float input [seq, hidden]: per layer
           multi_head_attention, add, layer_norm, dense(gelu) and dense on rank 3, add, layer_norm
           (12 layers, hidden 768, 12 heads, intermediate 3072); sequence 128, batch 1 and 8
  lstm     two LSTM layers (hidden 256, the second returns its last state) on [seq, 64], a dense of 10;
           sequence 32 and 256, batch 1 and 8

The Keras model (keras.layers MultiHeadAttention / LayerNormalization / Dense / LSTM, random weights,
seed 0) is the reference. Its weights are copied by name into specgen's variables (Keras layer `l0_attn`
is spec layer `l0/attn`; the weight path after the layer name, `query/kernel`, is the variable's role;
`specgen import keras` has no MultiHeadAttention yet) and into the export (onnx_export.with_weights).
Before anything is timed, a parity gate runs Keras, the generated TF module and ort specgen at two
sequence lengths through the same graphs: a relative difference above 1e-4 stops the run (exit 1).

Timed (bench/infer.py's Timer and interleaved: rotating order, a settle pause), numpy in, numpy out:
  ort specgen       onnxruntime on specgen's export, Predictor's session options
  tf.function       the Keras model in a tf.function with a [None, None, features] signature
  ort tf2onnx       tf2onnx 1.17 from_function on that tf.function (opset 18, as bench/infer.py)
  ort tf2onnx+opt   onnxruntime.transformers.optimizer.optimize_model(model_type="bert") on tf2onnx's graph
Ratios are peer / specgen per repetition (median, min-max). Targets: ort specgen at least as fast as the
best peer at every point, one attention node per layer in specgen's export. Each graph's attention
nodes (fused Attention / MultiHeadAttention, and Softmax) are counted per layer. `--profile` adds
onnxruntime's profiler (enable_profiling) over a few calls of each ONNX path: time share per op kind.

    python bench/sequence.py                         # full sizes (24 min on 2 cores at load 8-12)
    python bench/sequence.py --models lstm --repeats 7
    python bench/sequence.py --quick --peers tf      # small sizes, 2 repetitions (the test runs this)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from infer import CPU, TF2ONNX_OPSET, Timer, fmt_time, interleaved, ort_optimized_nodes, ort_session

from specgen.diagnostics import SpecError
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime.onnx_export import with_weights
from specgen.spec.load import load_spec

TOLERANCE = 1e-4  # max |x - keras| / max |keras|; float32 through 12 layers, summed in other orders
EPSILON = 1e-5  # layer_norm epsilon on both sides (Keras' default is 1e-3; any value, the same on both)
PEERS = ("tf", "tf2onnx", "tf2onnx+opt")
FUSED = ("Attention", "MultiHeadAttention")
ATTENTION_OPSET = 23  # ONNX opset 23 / com.microsoft


@dataclass(frozen=True)
class Config:
    """One model and the points (batch, sequence) it is timed at."""

    key: str
    layers: int
    hidden: int
    heads: int = 0
    intermediate: int = 0
    features: int = 0  # the lstm's input features (the encoder's input is `hidden` wide)
    points: tuple[tuple[int, int], ...] = ()


FULL = {
    "encoder": Config("encoder", 12, 768, heads=12, intermediate=3072, points=((1, 128), (8, 128))),
    "lstm": Config("lstm", 2, 256, features=64, points=((1, 32), (8, 32), (1, 256), (8, 256))),
}
QUICK = {
    "encoder": Config("encoder", 2, 32, heads=4, intermediate=64, points=((1, 16), (4, 16))),
    "lstm": Config("lstm", 2, 16, features=8, points=((1, 8), (4, 8))),
}


# ---------------------------------------------------------------------------------------------
# The spec side (no TensorFlow)
# ---------------------------------------------------------------------------------------------


def encoder_layers(c: Config) -> list[dict[str, Any]]:
    """The encoder as spec layers. When the shipped `transformer_encoder` block lands, this is the function that
    switches to it (one `block:` entry per layer); the variable roles the weight copy relies on stay Keras'."""
    found: list[dict[str, Any]] = []
    previous = "x"
    for i in range(c.layers):
        p = f"l{i}/"
        found += [
            {"name": p + "attn", "op": "multi_head_attention", "input": previous, "num_heads": c.heads,
             "key_dim": c.hidden // c.heads},
            {"name": p + "add1", "op": "add", "inputs": [previous, p + "attn"]},
            {"name": p + "ln1", "op": "layer_norm", "epsilon": EPSILON},
            {"name": p + "ffn1", "op": "dense", "units": c.intermediate, "activation": "gelu"},
            {"name": p + "ffn2", "op": "dense", "units": c.hidden},
            {"name": p + "add2", "op": "add", "inputs": [p + "ln1", p + "ffn2"]},
            {"name": p + "ln2", "op": "layer_norm", "epsilon": EPSILON},
        ]
        previous = p + "ln2"
    return found


def lstm_layers(c: Config) -> list[dict[str, Any]]:
    stack = [{"name": f"lstm{i + 1}", "op": "lstm", "units": c.hidden, "return_sequences": i + 1 < c.layers}
             for i in range(c.layers)]
    return [*stack, {"name": "out", "op": "dense", "units": 10}]


def write_spec(c: Config, folder: Path, steps: int | str = "seq", opset: int = ATTENTION_OPSET) -> Path:
    """The spec file of `c` (input `x: [steps, features]`, `seq` a named dynamic length; output the last layer)."""
    layers = encoder_layers(c) if c.key == "encoder" else lstm_layers(c)
    width = c.hidden if c.key == "encoder" else c.features
    document = {"specgen": 1, "name": f"bench_{c.key}", "inputs": {"x": {"shape": [steps, width]}},
                "outputs": {"y": layers[-1]["name"]}, "layers": layers}
    if c.key == "encoder":  # multi_head_attention exports one fused Attention node from opset 23 on (default 21)
        document["export"] = {"onnx": {"opset": opset}}
    path = folder / f"{c.key}{'' if opset == ATTENTION_OPSET else opset}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def attention_nodes(model: onnx.ModelProto) -> dict[str, int]:
    """Fused attention nodes and Softmax nodes in a graph (its node types counted)."""
    return count_attention([n.op_type for n in model.graph.node])


def count_attention(op_types: list[str]) -> dict[str, int]:
    counts = Counter(op_types)
    return {"fused": sum(counts[t] for t in FUSED), "softmax": counts["Softmax"], "nodes": len(op_types)}


# ---------------------------------------------------------------------------------------------
# Keras, the weight copy and the parity gate (TensorFlow imported lazily, from main() on)
# ---------------------------------------------------------------------------------------------


def keras_model(c: Config) -> Any:
    """The Keras reference with the spec's layers; Keras layer names are the spec's with '/' -> '_'."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    x = inputs = keras.Input((None, c.hidden if c.key == "encoder" else c.features), name="x")
    if c.key == "lstm":
        for i in range(c.layers):
            x = layers.LSTM(c.hidden, return_sequences=i + 1 < c.layers, name=f"lstm{i + 1}")(x)
        return keras.Model(inputs, layers.Dense(10, name="out")(x), name="keras_lstm")
    for i in range(c.layers):
        a = layers.MultiHeadAttention(c.heads, c.hidden // c.heads, name=f"l{i}_attn")(x, x)
        x = layers.LayerNormalization(epsilon=EPSILON, name=f"l{i}_ln1")(layers.Add(name=f"l{i}_add1")([x, a]))
        h = layers.Dense(c.intermediate, activation=gelu, name=f"l{i}_ffn1")(x)
        h = layers.Dense(c.hidden, name=f"l{i}_ffn2")(h)
        x = layers.LayerNormalization(epsilon=EPSILON, name=f"l{i}_ln2")(layers.Add(name=f"l{i}_add2")([x, h]))
    return keras.Model(inputs, x, name="keras_encoder")


def gelu(x: Any) -> Any:
    """Exact GELU, x * (1 + erf(x / sqrt 2)) / 2, as specgen's gelu and ONNX's Gelu. Keras 3's own "gelu" spells
    it with erfc, which tf2onnx 1.17 cannot convert (`Erfc is not supported`): the same function in float32
    (the parity gate checks it), written so that the tf2onnx row exists."""
    from keras import ops

    return 0.5 * x * (1.0 + ops.erf(x * np.float32(1 / np.sqrt(2))))


def keras_values(net: Any, spec_names: list[str]) -> dict[str, np.ndarray]:
    """Keras' weights under specgen's variable paths: `l0_attn/query/kernel` -> `l0/attn/query/kernel`;
    an RNN's cell level (`lstm1/lstm_cell/kernel`) is not part of specgen's path."""
    by_keras = {name.replace("/", "_"): name for name in spec_names}
    values = {}
    for layer in net.layers:
        for weight in layer.weights:
            role = weight.path.split("/", 1)[1].removeprefix("lstm_cell/")
            values[f"{by_keras[layer.name]}/{role}"] = np.asarray(weight.numpy(), np.float32)
    return values


class ParityError(Exception):
    """The Keras reference and specgen's model disagree: nothing is timed."""


def relative(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max |expected|; NaN anywhere gives NaN, which fails every gate."""
    return float(np.max(np.abs(actual.astype(np.float64) - expected)) / np.max(np.abs(expected)))


@dataclass
class Built:
    """One model with the same weights in Keras, the generated TF module, specgen's export and the peers' graphs."""

    config: Config
    width: int
    fixed: int | None  # the spec's fixed sequence length, None for a named dynamic one
    keras_fn: Any
    specgen_tf: Any
    specgen_onnx: onnx.ModelProto
    peers: dict[str, onnx.ModelProto] = field(default_factory=dict)
    parity: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # peer -> why it has no graph
    variants: dict[str, onnx.ModelProto] = field(default_factory=dict)  # other specgen exports, for --save-onnx


def spec_ir(c: Config, folder: Path) -> ModelIR:
    """The IR with a named dynamic length `seq`, or, where an op on main still needs a fixed length
    (multi_head_attention before named-dimension support), the one length every point of `c` uses."""
    try:
        return build_ir(load_spec(write_spec(c, folder)))
    except SpecError as exc:
        lengths = {steps for _, steps in c.points}
        if "needs fixed sizes" not in str(exc) or len(lengths) != 1:
            raise
        return build_ir(load_spec(write_spec(c, folder, lengths.pop())))


def build(c: Config, folder: Path, peers: list[str], perturb: bool = False) -> Built:
    """Build every path of `c`; `perturb` changes one copied weight (the check the parity gate must fail)."""
    import tensorflow as tf

    from specgen.runtime import parity

    ir = spec_ir(c, folder)
    files = render_files(ir)
    net = keras_model(c)
    values = keras_values(net, [node.name for node in ir.nodes if node.variables])
    if missing := {v.path for v in ir.model_variables} ^ set(values):
        raise ParityError(f"Keras weights and spec variables differ: {sorted(missing)}")
    if perturb:
        first = ir.model_variables[0].path
        values[first] = values[first] + np.float32(0.05)
    (folder / f"{c.key}_model.py").write_bytes(files["model.py"])
    module = getattr(parity.load_generated(folder / f"{c.key}_model.py"), ir.class_name)(seed=0)
    parity.assign(module, values)
    width, steps = int(ir.inputs[0].shape[-1]), ir.inputs[0].shape[1]  # [batch, steps, width]
    fixed = steps if isinstance(steps, int) else None
    signature = [tf.TensorSpec([None, None, width], tf.float32, name="x")]
    keras_fn = tf.function(lambda x: net(x, training=False), input_signature=signature)
    specgen_tf = tf.function(lambda x: module({"x": x}, training=False)["y"],
                             input_signature=[tf.TensorSpec([None, fixed, width], tf.float32, name="x")])
    built = Built(c, width, fixed, keras_fn, specgen_tf,
                  with_weights(onnx.load_from_string(files["model.onnx"]), ir, values))
    if c.key == "encoder":  # the default opset's plain nodes, the same weights: what --save-onnx also times
        ir21 = build_ir(load_spec(write_spec(c, folder, opset=21)))
        built.variants["specgen opset 21"] = with_weights(onnx.load_from_string(render_files(ir21)["model.onnx"]),
                                                          ir21, values)
    if "tf2onnx" in peers or "tf2onnx+opt" in peers:
        built.peers["tf2onnx"] = convert_tf2onnx(keras_fn, signature)
    if "tf2onnx+opt" in peers:
        try:
            built.peers["tf2onnx+opt"] = optimize_bert(built.peers["tf2onnx"], c)
        except Exception as exc:  # its fusions expect BERT-shaped graphs; the run goes on without this row
            built.failed["tf2onnx+opt"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return built


def convert_tf2onnx(fn: Any, signature: list[Any]) -> onnx.ModelProto:
    import tf2onnx

    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    model, _ = tf2onnx.convert.from_function(fn, input_signature=signature, opset=TF2ONNX_OPSET)
    return model


def optimize_bert(model: onnx.ModelProto, c: Config) -> onnx.ModelProto:
    """onnxruntime's transformer optimizer as the brief names it (model_type bert), on tf2onnx's graph."""
    from onnxruntime.transformers.optimizer import optimize_model

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    heads, hidden = (c.heads, c.hidden) if c.key == "encoder" else (0, 0)  # 0, 0: let it detect (nothing to fuse)
    # opt_level 0: its Python fusions only. Its onnxruntime pre-pass (opt_level 1, bert's default) imports torch
    # (onnxruntime 1.31, optimize_by_onnxruntime), which is not installed; the session applies the same
    # onnxruntime graph optimizations when it loads the model anyway.
    # It edits the ModelProto it is given, also when it fails half-way: a copy keeps tf2onnx's graph whole.
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return optimize_model(copy, model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0).model


def save_skeletons(b: Built, folder: Path) -> None:
    """Every ONNX graph of `b` as a skeleton (bench/onnx_skeleton.py) plus its manifest entry, for the GPU machine."""
    from onnx_skeleton import strip

    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"models": []}
    graphs = {"specgen": b.specgen_onnx, **b.variants, **b.peers}
    manifest["models"] = [m for m in manifest["models"] if m["group"] != b.config.key]
    for label, model in graphs.items():
        name = f"{b.config.key}_{label.replace(' ', '_').replace('+', '_')}.onnx"
        onnx.save(strip(model), folder / name)
        manifest["models"].append({"group": b.config.key, "label": label, "file": name, "input": "x",
                                   "shape": ["B", "S", b.width], "dtype": "float32",
                                   "points": [list(p) for p in b.config.points]})
    manifest_path.write_text(json.dumps(manifest, indent=1))


def check_parity(b: Built, sessions: dict[str, Any]) -> None:
    """Every path against Keras at two sequence lengths through the same graphs; ParityError above TOLERANCE."""
    longest = max(s for _, s in b.config.points)
    # Two lengths through the same graphs, so that a length baked into any graph shows (one where fixed).
    for steps in (longest, longest // 2 + 3) if b.fixed is None else (b.fixed,):
        x = np.random.default_rng(steps).standard_normal((2, steps, b.width)).astype(np.float32)
        expected = b.keras_fn(x).numpy().astype(np.float64)
        outputs = {"specgen tf": b.specgen_tf(x).numpy()} | {k: s.call(x) for k, s in sessions.items()}
        for label, actual in outputs.items():
            error = relative(actual, expected)
            b.parity[f"{label} @{steps}"] = error
            if not error <= TOLERANCE:
                raise ParityError(f"{b.config.key}: {label} differs from Keras at sequence {steps}: max relative "
                                  f"difference {error:.2e}, expected <= {TOLERANCE:g}; nothing was timed")


# ---------------------------------------------------------------------------------------------
# Timing, profile, report
# ---------------------------------------------------------------------------------------------


@dataclass
class Point:
    key: str
    batch: int
    steps: int
    timers: dict[str, Timer]

    def ratios(self, peer: str) -> list[float]:
        """peer / specgen seconds per call, per repetition (measured in the same rotation)."""
        return [a / b for a, b in zip(self.timers[peer].per_call, self.timers["specgen"].per_call, strict=True)]


def time_point(b: Built, sessions: dict[str, Any], batch: int, steps: int, args: argparse.Namespace) -> Point:
    x = np.random.default_rng(batch * 1000 + steps).standard_normal((batch, steps, b.width)).astype(np.float32)
    calls = {"specgen": sessions["specgen"].call, **{k: s.call for k, s in sessions.items() if k != "specgen"}}
    if "tf" in args.peers:
        calls["tf"] = lambda x: b.keras_fn(x).numpy()
    timers = {k: Timer(k, lambda f=f: f(x)) for k, f in calls.items()}
    interleaved(list(timers.values()), args.repeats, args.seconds)
    return Point(b.config.key, batch, steps, timers)


def profile(model: onnx.ModelProto, x: np.ndarray, calls: int, folder: Path) -> list[tuple[str, float]]:
    """onnxruntime's profiler over `calls` runs: (op kind, share of the node time), largest first."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_profiling, options.profile_file_prefix = True, str(folder / "profile")
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=[CPU])
    name = session.get_inputs()[0].name
    for _ in range(calls):
        session.run(None, {name: x})
    events = json.loads(Path(session.end_profiling()).read_text())
    by_op: Counter[str] = Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_op[event["args"]["op_name"]] += event["dur"]
    total = sum(by_op.values()) or 1
    return [(op, dur / total) for op, dur in by_op.most_common()]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):5.2f}x ({min(values):.2f}-{max(values):.2f})"


def report(points: list[Point], builts: list[Built], peers: list[str]) -> bool:
    labels = {"specgen": "ort specgen", "tf": "tf.function", "tf2onnx": "ort tf2onnx", "tf2onnx+opt": "ort tf2onnx+opt"}
    print("\nmedian seconds per call (min over repetitions); ratio: peer / ort specgen per repetition, median (min-max)")
    print(f"{'model':8}{'batch':>6}{'seq':>5}  " + "".join(f"{labels[k]:>34}" for k in ("specgen", *peers)))
    ok = True
    for p in points:
        cells = [f"{fmt_time(p.timers['specgen'].median)} ({fmt_time(min(p.timers['specgen'].per_call)).strip()})"]
        cells += [f"{fmt_time(p.timers[k].median)} {spread(p.ratios(k))}" if k in p.timers else "-" for k in peers]
        print(f"{p.key:8}{p.batch:6}{p.steps:5}  " + "".join(f"{c:>34}" for c in cells))
    print("\ntargets: ort specgen at least as fast as the best peer (median per-repetition ratio >= 1.0)")
    for p in points:
        best = min((k for k in peers if k in p.timers), key=lambda k: p.timers[k].median)
        ratio = statistics.median(p.ratios(best))
        ok &= ratio >= 1.0
        print(f"  {p.key} batch {p.batch} seq {p.steps}: best peer {labels[best]}, {ratio:.2f}x  "
              f"{'met' if ratio >= 1.0 else 'NOT met'}")
    for b in builts:
        for peer, why in b.failed.items():
            print(f"  {b.config.key}: no {labels[peer]} row: {why}")
    print("\nattention nodes per layer (fused Attention/MultiHeadAttention; Softmax) and node counts; ort: after "
          "onnxruntime's CPU optimizer")
    for b in builts:
        graphs = {"specgen": b.specgen_onnx, **b.peers}
        for label, model in graphs.items():
            made, ran = attention_nodes(model), count_attention(ort_optimized_nodes(model))
            n = b.config.layers if b.config.key == "encoder" else 1
            print(f"  {b.config.key:8}{labels[label]:>16}: fused {made['fused'] / n:.0f}, softmax {made['softmax'] / n:.0f}"
                  f", {made['nodes']} nodes; ort: fused {ran['fused'] / n:.0f}, softmax {ran['softmax'] / n:.0f}, "
                  f"{ran['nodes']} nodes")
            if label == "specgen" and b.config.key == "encoder":
                one = made["fused"] == n
                ok &= one
                print(f"           one attention node per layer in specgen's export: {'met' if one else 'NOT met'}")
    return ok


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=tuple(FULL), default=list(FULL))
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    parser.add_argument("--quick", action="store_true", help="small models, 2 repetitions (seconds; the CI test)")
    parser.add_argument("--repeats", type=int, help="interleaved measurements per path (default 5, --quick 2)")
    parser.add_argument("--seconds", type=float, default=0.3, help="seconds of calls per measurement (at least 3 calls)")
    parser.add_argument("--profile", action="store_true", help="onnxruntime's profiler per ONNX path at the last point")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is not met")
    parser.add_argument("--perturb", action="store_true",
                        help="change one copied weight before the parity gate (which must then stop the run)")
    parser.add_argument("--save-onnx", type=Path, metavar="DIR",
                        help="also write every ONNX graph as a skeleton with a manifest for bench/cuda_onnx.py")
    parser.add_argument("--build-only", action="store_true", help="build and check parity, time nothing (with --save-onnx)")
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (2 if args.quick else 5)
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if {"tf2onnx", "tf2onnx+opt"} & set(args.peers) and importlib.util.find_spec("tf2onnx") is None:
        print("bench/sequence.py: tf2onnx is not installed; install the bench extra (`pip install tf2onnx==1.17.0`) "
              "or leave it out with `--peers tf`.", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started, load = time.perf_counter(), os.getloadavg()
    import onnxruntime as ort
    import tensorflow as tf

    ort.set_default_logger_severity(3)
    print(f"tensorflow {tf.__version__}, onnxruntime {ort.__version__}, {os.cpu_count()} CPUs, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.repeats} repetitions, >= {args.seconds} s each")
    configs = QUICK if args.quick else FULL
    points, builts = [], []
    with tempfile.TemporaryDirectory(prefix="specgen-bench-sequence-") as tmp:
        for key in args.models:
            c, t0 = configs[key], time.perf_counter()
            try:
                b = build(c, Path(tmp), args.peers, args.perturb)
                sessions = {"specgen": ort_session("specgen", b.specgen_onnx, "cpu", 0)}
                sessions |= {k: ort_session(k, m, "cpu", 0) for k, m in b.peers.items()}
                check_parity(b, {k: s for k, s in sessions.items()})
            except ParityError as exc:
                print(f"bench/sequence.py: parity gate: {exc}", file=sys.stderr)
                return 1
            worst = max(b.parity.values())
            print(f"{key}: {c.layers} layers, hidden {c.hidden}, input [seq, {b.width}]; spec length "
                  f"{b.fixed or 'seq (named)'}; built in {time.perf_counter() - t0:.0f} s; parity vs Keras: worst "
                  f"relative {worst:.1e} (<= {TOLERANCE:g}) over " + ", ".join(sorted(b.parity)))
            builts.append(b)
            if args.save_onnx:
                save_skeletons(b, args.save_onnx)
            if args.build_only:
                continue
            points += [time_point(b, sessions, batch, steps, args) for batch, steps in c.points]
            if args.profile:
                batch, steps = c.points[-1]
                x = np.random.default_rng(0).standard_normal((batch, steps, b.width)).astype(np.float32)
                for label, model in {"specgen": b.specgen_onnx, **b.peers}.items():
                    shares = profile(model, x, 3, Path(tmp))
                    print(f"  profile {key} {label} batch {batch} seq {steps}: "
                          + ", ".join(f"{op} {share:.0%}" for op, share in shares[:6]))
        ok = report(points, builts, [k for k in ("tf", "tf2onnx", "tf2onnx+opt") if k in args.peers])
    end = os.getloadavg()
    print(f"\nwhole run {time.perf_counter() - started:.0f} s; load average at the end {end[0]:.2f} {end[1]:.2f} "
          f"{end[2]:.2f} (2 cores: above ~0.3 at the start, other work shared them)")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
