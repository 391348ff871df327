"""Inference latency: onnxruntime on specgen's exported graph against tf.function and against tf2onnx.

For the digits CNN and the digits MLP of examples/specs, one run builds each spec in memory
(load_spec, build_ir, render_files), draws random weights (parity.random_weights, seed 0) and
puts the same values into three models:

  ort specgen   onnxruntime on specgen's graph with weights (onnx_export.with_weights: batch
                norm folded into the conv), the session options specgen's Predictor uses
  tf.function   the generated TensorFlow module (load_generated + assign) called as
                model({"image": x}, training=False) inside a tf.function with an input_signature
  ort tf2onnx   onnxruntime on tf2onnx's conversion of a hand-written Keras 3 model with the same
                layers and weights (Conv2D/BatchNormalization/ReLU/MaxPool2D/Flatten/Dense, or
                Flatten/Dense/Dense), converted through tf2onnx.convert.from_function on a
                tf.function wrapping the Keras model (from_keras is tried first; it fails on Keras 3)

On the CPU a fourth row times the same specgen session through `Predictor.__call__` (its input
checks included: what `specgen infer` and the server pay); the targets use the plain session.run.
On CUDA the specgen and tf2onnx rows both go through a Predictor (IO binding), as served.

Every call takes a numpy batch and returns numpy outputs (for tf.function: the numpy array goes
into the traced function and the result is read back with .numpy()). Each variant is warmed up
(the trace included) and then measured `--repeats` times, interleaved with the others (the
order rotates every repetition); a measurement runs as many calls as fit in `--seconds`.
Medians over the repetitions are reported, with the best repetition (a guide when other work
shares the cores) and the per-repetition ratios (median and min-max; each pair ran back to back).
The 1-minute load average at the start and end of the run is printed: above ~0.3 on 2 cores,
other processes share the CPU and the numbers are noisy.

After each (model, batch) block, specgen's and tf2onnx's sessions are also compared in `--pairs`
short ABBA pairs of `--slot` seconds each: the two graphs are within a few percent of each other,
which the long measurements (seconds apart) cannot resolve on a shared host.

Targets, on the CPU: onnxruntime(specgen) >= 7x tf.function at batch 1 and >= 1.2x at batch
256 (ratios of the medians), at least as fast as the tf2onnx graph (median of the ABBA pair
ratios >= 1; within 2% below is printed as a tie, and --strict lets it pass), with at most 60%
of its nodes. Large-batch
throughput is also quoted in GFLOP/s (FLOPs per example from specgen's IR, the sum of
node.flops) and as a fraction of the ceiling measured in the same run: onnxruntime on a
float32 2048^3 MatMul (constant B, as weights are).

    python bench/infer.py                     # CPU, both models, batch 1 and 256 (~1 min on 2 cores)
    python bench/infer.py --provider cuda     # onnxruntime on CUDA (the GPU machine)
    python bench/infer.py --repeats 9 --seconds 0.5 --strict
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime import parity
from specgen.runtime.onnx_export import with_weights
from specgen.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "examples" / "specs"
MODELS = {"cnn": "digits_cnn.yaml", "mlp": "digits_mlp.yaml"}
BATCHES = (1, 256)
TF2ONNX_OPSET = 18  # the highest opset tf2onnx 1.17 knows
CEILING_N = 2048
MATCH_TOLERANCE = 1e-4
TARGET_TF_SMALL, TARGET_TF_LARGE, TARGET_T2O, TARGET_NODES = 7.0, 1.2, 1.0, 0.60
TIE = 0.02  # a paired specgen/tf2onnx ratio within 2% below 1.0 is reported as a tie, not a miss
CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"

# Keras layer name -> spec layer name, per model (Keras 3 layer names cannot hold '/').
KERAS_NAMES = {
    "cnn": {"conv1": "conv1", "bn1": "bn1", "fc": "head/fc", "out": "head/out"},
    "mlp": {"hidden": "hidden", "out": "out"},
}
KERAS_VARIABLES = {"conv2d": ("kernel", "bias"), "dense": ("kernel", "bias"),
                   "batch_normalization": ("gamma", "beta", "moving_mean", "moving_variance")}


# ---------------------------------------------------------------------------------------------
# onnxruntime sessions (no TensorFlow)
# ---------------------------------------------------------------------------------------------


def cuda_problem() -> str | None:
    """Why the CUDA provider cannot run here, or None when it may."""
    import onnxruntime as ort

    from specgen.runtime.predictor import has_cuda_driver

    if CUDA not in ort.get_available_providers():
        return (f"the installed onnxruntime has no CUDA provider (available: {', '.join(ort.get_available_providers())}); "
                "install onnxruntime-gpu")
    if not has_cuda_driver():
        return "no NVIDIA driver (libcuda) on this machine"
    return None


@dataclass
class Session:
    """An onnxruntime model ready to call on numpy batches; `provider` is the one that actually runs."""

    label: str
    model: onnx.ModelProto
    provider: str
    call: Callable[[np.ndarray], np.ndarray]
    session: Any
    predictor: Any


def ort_session(label: str, model: onnx.ModelProto, provider: str, threads: int) -> Session:
    """A session with specgen Predictor's options; CPU calls session.run, CUDA calls the Predictor (IO binding)."""
    from specgen.runtime.predictor import InputError, Predictor

    try:
        predictor = Predictor(model.SerializeToString(), provider=provider, threads=threads)
    except InputError as exc:
        raise SystemExit(f"bench/infer.py: {label}: {exc}") from None
    session = predictor.session
    input_name, output_name = session.get_inputs()[0].name, session.get_outputs()[0].name
    if predictor.provider == CPU:
        def call(x: np.ndarray) -> np.ndarray:
            return session.run([output_name], {input_name: x})[0]
    else:
        def call(x: np.ndarray) -> np.ndarray:
            return predictor({input_name: x})[output_name]
    return Session(label, model, predictor.provider, call, session, predictor)


def ort_optimized_nodes(model: onnx.ModelProto) -> list[str]:
    """The node types left after onnxruntime's CPU graph optimizations (level all), as it saves them."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as folder:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
        options.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), options, providers=[CPU])
        return [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]


def matmul_model(n: int, rng: np.random.Generator) -> onnx.ModelProto:
    """Y = A @ B, A a [n, n] input and B a [n, n] float32 constant."""
    weight = numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["Y"])], "ceiling",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def ceiling_gflops(provider: str, repeats: int, seconds: float) -> tuple[float, float, str]:
    """Median and best GFLOP/s of onnxruntime's float32 n^3 MatMul on `provider`, and the provider that ran."""
    import onnxruntime as ort

    rng = np.random.default_rng(1)
    model = matmul_model(CEILING_N, rng)
    a = rng.standard_normal((CEILING_N, CEILING_N)).astype(np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=[CUDA, CPU] if provider == "cuda" else [CPU])
    ran = session.get_providers()[0]
    if ran == CUDA:  # operands stay on the GPU: the ceiling is the kernel, not the PCIe link
        binding = session.io_binding()
        binding.bind_ortvalue_input("A", ort.OrtValue.ortvalue_from_numpy(a, "cuda", 0))
        binding.bind_output("Y", "cuda", 0)

        def call() -> None:
            session.run_with_iobinding(binding)
    else:
        def call() -> None:
            session.run(["Y"], {"A": a})

    timer = Timer("ceiling", call)
    timer.warm_up(seconds)
    for _ in range(repeats):
        timer.measure()
    return 2 * CEILING_N**3 / timer.median / 1e9, 2 * CEILING_N**3 / min(timer.per_call) / 1e9, ran


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


@dataclass
class Timer:
    """Seconds per call of `call`, one entry per measurement."""

    label: str
    call: Callable[[], Any]
    per_call: list[float] = field(default_factory=list)
    calls: int = 1

    def warm_up(self, seconds: float) -> None:
        """Untimed calls (a tf.function traces on the first); sets how many calls fill `seconds`.

        The estimate is the fastest of several short chunks, so that a burst of other work during
        warm-up does not shrink every later measurement to a handful of calls.
        """
        self.call()
        estimates, chunk = [], 1
        deadline = time.perf_counter() + max(0.2, seconds)
        while len(estimates) < 5 or time.perf_counter() < deadline:
            start = time.perf_counter()
            for _ in range(chunk):
                self.call()
            elapsed = time.perf_counter() - start
            estimates.append(elapsed / chunk)
            if elapsed < 0.02:
                chunk *= 2
        self.calls = max(3, int(seconds / min(estimates)))

    def measure(self) -> None:
        """One measurement: the call count fixed at warm-up, so every measurement does the same work."""
        call, calls = self.call, self.calls
        start = time.perf_counter()
        for _ in range(calls):
            call()
        self.per_call.append((time.perf_counter() - start) / calls)

    @property
    def median(self) -> float:
        return statistics.median(self.per_call)


def ab_ratios(slow: Timer, fast: Timer, pairs: int, slot: float) -> list[float]:
    """Per-pair latency ratios slow/fast from short back-to-back slots in ABBA order (both already warm).

    Near 1.0 the medians of the long interleaved measurements drift with whatever else the host
    runs (steal time included); slots of `slot` seconds taken in turns see nearly the same machine.
    """
    ratios = []
    for i in range(pairs):
        order = (slow, fast) if i % 2 else (fast, slow)
        times = {}
        for timer in order:
            calls = max(3, int(slot / timer.median))
            call, start = timer.call, time.perf_counter()
            for _ in range(calls):
                call()
            times[id(timer)] = (time.perf_counter() - start) / calls
        ratios.append(times[id(slow)] / times[id(fast)])
    return ratios


# Between two measurements: onnxruntime's and TensorFlow's pool threads spin for a while after a call,
# and on a 2-core machine that spinning takes the cores from whatever is measured next. Rotating the
# order alone did not cancel it (with 3 timers and 5 repetitions specgen followed tf2onnx three times,
# tf2onnx followed specgen never). A pause lets the spinning stop before the next measurement; with 0
# here zoo.py gives the biased figures (bench/RESULTS.md, "Speed on quiet cores": VGG16 0.91x vs 1.05x).
SETTLE_S = 0.05


def interleaved(timers: list[Timer], repeats: int, seconds: float) -> None:
    for timer in timers:
        timer.warm_up(seconds)
    for rep in range(repeats):
        shift = rep % len(timers)
        for timer in timers[shift:] + timers[:shift]:
            time.sleep(SETTLE_S)
            timer.measure()


# ---------------------------------------------------------------------------------------------
# The three models (TensorFlow imported lazily, from main() on)
# ---------------------------------------------------------------------------------------------


@dataclass
class Built:
    """One spec with the same weights in specgen's ONNX graph, the generated TF module and tf2onnx's graph."""

    key: str
    ir: ModelIR
    values: dict[str, np.ndarray]
    specgen_onnx: onnx.ModelProto
    tf_fn: Any
    tf2onnx_model: onnx.ModelProto
    tf2onnx_how: str
    keras_vs_tf: float = 0.0
    match: float = float("nan")  # max |ort tf2onnx - ort specgen| on a random batch
    tf_match: float = float("nan")  # max |tf.function - ort specgen|

    @property
    def flops_per_example(self) -> int:
        return sum(node.flops for node in self.ir.nodes)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.ir.inputs[0].shape[1:])


def keras_model(key: str, ir: ModelIR, values: dict[str, np.ndarray]) -> Any:
    """The hand-written Keras 3 model with the spec's layers, holding `values`."""
    import keras
    from keras import layers

    shape = tuple(int(d) for d in ir.inputs[0].shape[1:])
    if key == "cnn":
        conv, bn, fc = ir.node("conv1"), ir.node("bn1"), ir.node("head/fc")
        body = [
            layers.Conv2D(conv.shape[3], 3, padding="same", name="conv1"),
            layers.BatchNormalization(momentum=bn.params.get("momentum", 0.99), epsilon=bn.params["epsilon"], name="bn1"),
            layers.ReLU(name="relu1"),
            layers.MaxPool2D(2, name="pool1"),
            layers.Flatten(name="flat"),
            layers.Dense(fc.shape[1], activation="relu", name="fc"),
            layers.Dense(ir.node("head/out").shape[1], name="out"),
        ]
    else:
        body = [
            layers.Flatten(name="flat"),
            layers.Dense(ir.node("hidden").shape[1], activation="relu", name="hidden"),
            layers.Dense(ir.node("out").shape[1], name="out"),
        ]
    net = keras.Sequential([keras.Input(shape, name="image"), *body], name=f"keras_{key}")
    for keras_name, spec_name in KERAS_NAMES[key].items():
        layer = net.get_layer(keras_name)
        kind = {"Conv2D": "conv2d", "Dense": "dense", "BatchNormalization": "batch_normalization"}[type(layer).__name__]
        layer.set_weights([values[f"{spec_name}/{v}"] for v in KERAS_VARIABLES[kind]])
    return net


def convert_tf2onnx(net: Any, shape: tuple[int, ...]) -> tuple[onnx.ModelProto, str]:
    """tf2onnx's graph of the Keras model: from_keras, else from_function on a tf.function around it."""
    import tensorflow as tf
    import tf2onnx

    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    signature = [tf.TensorSpec([None, *shape], tf.float32, name="image")]
    try:
        model, _ = tf2onnx.convert.from_keras(net, input_signature=signature, opset=TF2ONNX_OPSET)
        return model, f"tf2onnx {tf2onnx.__version__} from_keras, opset {TF2ONNX_OPSET}"
    except Exception as exc:  # Keras 3 models: KeyError on the output tensor names in tf2onnx 1.17
        failure = f"{type(exc).__name__}: {exc}"

    @tf.function(input_signature=signature)
    def forward(image: tf.Tensor) -> tf.Tensor:
        return net(image, training=False)

    model, _ = tf2onnx.convert.from_function(forward, input_signature=signature, opset=TF2ONNX_OPSET)
    return model, (f"tf2onnx {tf2onnx.__version__} from_function on tf.function(keras), opset {TF2ONNX_OPSET} "
                   f"(from_keras failed: {failure})")


def build(key: str, folder: Path) -> Built:
    import tensorflow as tf

    ir = build_ir(load_spec(SPECS / MODELS[key]))
    files = render_files(ir)
    values = parity.random_weights(ir, np.random.default_rng(0))
    specgen_onnx = with_weights(onnx.load_from_string(files["model.onnx"]), ir, values)

    path = folder / key / "model.py"
    path.parent.mkdir(parents=True)
    path.write_bytes(files["model.py"])
    module = getattr(parity.load_generated(path), ir.class_name)(seed=0)
    parity.assign(module, values)
    source, output = ir.inputs[0], next(iter(ir.outputs))
    shape = tuple(int(d) for d in source.shape[1:])

    @tf.function(input_signature=[tf.TensorSpec([None, *shape], tf.float32, name=source.name)])
    def tf_fn(x: tf.Tensor) -> tf.Tensor:
        return module({source.name: x}, training=False)[output]

    net = keras_model(key, ir, values)
    tf2onnx_model, how = convert_tf2onnx(net, shape)
    probe = np.random.default_rng(2).standard_normal((64, *shape)).astype(np.float32)
    keras_vs_tf = float(np.max(np.abs(net(probe, training=False).numpy() - tf_fn(probe).numpy())))
    return Built(key, ir, values, specgen_onnx, tf_fn, tf2onnx_model, how, keras_vs_tf)


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:8.1f} us"
    return f"{seconds * 1e3:8.3f} ms"


def paired(slow: Timer, fast: Timer) -> str:
    """The per-repetition ratios slow/fast (measured back to back): median and min-max."""
    ratios = [a / b for a, b in zip(slow.per_call, fast.per_call, strict=True)]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


@dataclass
class Result:
    built: Built
    batch: int
    timers: dict[str, Timer]
    provider: str
    ab: list[float] = field(default_factory=list)  # tf2onnx/specgen latency, short ABBA pairs

    @property
    def ab_median(self) -> float:
        return statistics.median(self.ab)

    def speedup(self, over: str) -> float:
        """How many times faster ort specgen is than `over` (ratio of median latencies)."""
        return self.timers[over].median / self.timers["specgen"].median


def met(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def report(results: list[Result], builts: list[Built], sessions: dict[str, tuple[Session, Session]],
           ceilings: tuple[float, float, str], args: argparse.Namespace) -> bool:
    ceiling, ceiling_best, ceiling_provider = ceilings
    provider = "CUDA" if args.provider == "cuda" else "CPU"
    labels = {"specgen": f"ort specgen ({provider})", "tf": "tf.function", "tf2onnx": f"ort tf2onnx ({provider})",
              "predictor": "ort specgen Predictor()"}
    print(f"\nmedian of {args.repeats} interleaved repetitions, each >= {args.seconds:.2f} s of calls; numpy in, numpy out")
    print(f"{'model':5} {'batch':>5}  {'variant':24} {'median/call':>12} {'examples/s':>12} {'best rep':>12} {'calls/rep':>9}")
    for r in results:
        for key, t in r.timers.items():
            print(f"{r.built.key:5} {r.batch:5}  {labels[key]:24} {fmt_time(t.median):>12} {r.batch / t.median:12,.0f} "
                  f"{fmt_time(min(t.per_call)):>12} {t.calls:9}")

    print("\nspeed-ups of ort specgen: ratio of the median latencies; per repetition: median (min-max)")
    print(f"{'model':5} {'batch':>5}  {'over tf.function':>16} {'per repetition':>22}  "
          f"{'over tf2onnx':>12} {'per repetition':>18}")
    for r in results:
        t = r.timers
        print(f"{r.built.key:5} {r.batch:5}  {r.speedup('tf'):15.2f}x {paired(t['tf'], t['specgen']):>22}  "
              f"{r.speedup('tf2onnx'):11.2f}x {paired(t['tf2onnx'], t['specgen']):>18}")

    print(f"\nort specgen over ort tf2onnx in {args.pairs} short back-to-back pairs (ABBA, {args.slot * 1e3:.0f} ms slots): "
          "median, quartiles, pairs where specgen was faster")
    for r in results:
        q = statistics.quantiles(r.ab, n=4)
        wins = sum(x > 1 for x in r.ab) / len(r.ab)
        print(f"{r.built.key:5} {r.batch:5}  {r.ab_median:.3f}x  ({q[0]:.3f}-{q[2]:.3f})  specgen faster in {wins:.0%}")

    print(f"\n{'model':5} {'specgen nodes':>13} {'tf2onnx nodes':>13} {'fraction':>8}  "
          "graph as built; ort: what onnxruntime's CPU optimizer leaves")
    fractions = {}
    for b in builts:
        ours, theirs = b.specgen_onnx.graph.node, b.tf2onnx_model.graph.node
        fractions[b.key] = len(ours) / len(theirs)
        print(f"{b.key:5} {len(ours):13} {len(theirs):13} {fractions[b.key]:8.0%}")
        print(f"      specgen: {' '.join(n.op_type for n in ours)}")
        print(f"               ort: {' '.join(ort_optimized_nodes(b.specgen_onnx))}")
        print(f"      tf2onnx: {' '.join(n.op_type for n in theirs)}")
        print(f"               ort: {' '.join(ort_optimized_nodes(b.tf2onnx_model))}")

    large = max(r.batch for r in results)
    print(f"\nthroughput at batch {large} in GFLOP/s (FLOPs per example from specgen's IR), and as a fraction of the "
          f"ceiling: {ceiling:.0f} GFLOP/s (onnxruntime float32 {CEILING_N}^3 MatMul, {ceiling_provider}; median of "
          f"{args.repeats}, best {ceiling_best:.0f})")
    for r in (r for r in results if r.batch == large):
        flops = r.built.flops_per_example
        cells = []
        for key in ("specgen", "tf", "tf2onnx"):
            gflops = flops * r.batch / r.timers[key].median / 1e9
            cells.append(f"{labels[key]} {gflops:6.2f} ({gflops / ceiling:5.1%})")
        print(f"{r.built.key:5} {flops:7,} FLOP/example   " + "   ".join(cells))

    print("\nchecks (batch 256, random inputs):")
    for b in builts:
        a, c = sessions[b.key]
        print(f"  {b.key}: max |ort tf2onnx - ort specgen| = {b.match:.2e} ({'<=' if b.match <= MATCH_TOLERANCE else '>'} "
              f"{MATCH_TOLERANCE:g}); max |tf.function - ort specgen| = {b.tf_match:.2e}; "
              f"max |keras - generated tf| = {b.keras_vs_tf:.2e}; providers: specgen {a.provider}, tf2onnx {c.provider}")
        print(f"        {b.tf2onnx_how}")

    print(f"\ntargets ({provider}):")
    ok = True
    for r in results:
        target = TARGET_TF_SMALL if r.batch == 1 else TARGET_TF_LARGE
        hit = r.speedup("tf") >= target
        ok &= hit
        print(f"  {r.built.key} batch {r.batch:3}: ort specgen >= {target}x tf.function: {r.speedup('tf'):.2f}x  {met(hit)}")
    for r in results:  # judged on the paired ABBA median: the medians above drift with the host
        hit, tie = r.ab_median >= TARGET_T2O, r.ab_median >= TARGET_T2O - TIE
        ok &= tie
        verdict = met(hit) if hit or not tie else f"tie (within {TIE:.0%})"
        print(f"  {r.built.key} batch {r.batch:3}: ort specgen at least as fast as ort tf2onnx: {r.ab_median:.3f}x paired "
              f"(ratio of medians {r.speedup('tf2onnx'):.2f}x)  {verdict}")
    for b in builts:
        hit = fractions[b.key] <= TARGET_NODES
        ok &= hit
        print(f"  {b.key}: specgen nodes <= {TARGET_NODES:.0%} of tf2onnx's: {fractions[b.key]:.0%}  {met(hit)}")
    for b in builts:
        hit = b.match <= MATCH_TOLERANCE
        ok &= hit
        print(f"  {b.key}: ort tf2onnx outputs match ort specgen to {MATCH_TOLERANCE:g}: {b.match:.1e}  {met(hit)}")
    return ok


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", choices=("cpu", "cuda"), default="cpu",
                        help="onnxruntime provider for the specgen and tf2onnx graphs (default cpu)")
    parser.add_argument("--models", nargs="+", choices=tuple(MODELS), default=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    parser.add_argument("--repeats", type=int, default=11, help="interleaved measurements per variant (default 11)")
    parser.add_argument("--seconds", type=float, default=0.15, help="seconds of calls per measurement (default 0.15)")
    parser.add_argument("--pairs", type=int, default=40,
                        help="short ABBA pairs for the specgen/tf2onnx comparison (default 40)")
    parser.add_argument("--slot", type=float, default=0.02, help="seconds per ABBA slot (default 0.02)")
    parser.add_argument("--threads", type=int, default=0,
                        help="onnxruntime intra-op threads, as Predictor(threads=...) (default 0: one per core)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is not met")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.provider == "cuda" and (problem := cuda_problem()):
        print(f"bench/infer.py: --provider cuda cannot run here: {problem}. Run it on a machine with an NVIDIA GPU "
              "and onnxruntime-gpu, or use --provider cpu.", file=sys.stderr)
        return 2
    if importlib.util.find_spec("tf2onnx") is None:
        print("bench/infer.py: tf2onnx is not installed; `pip install tf2onnx==1.17.0` (the version this bench was run "
              "with: TF 2.21, Keras 3, protobuf 7, through from_function).", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    import onnxruntime as ort
    import tensorflow as tf

    ort.set_default_logger_severity(3)
    for gpu in tf.config.list_physical_devices("GPU"):  # TF would otherwise take nearly all GPU memory from onnxruntime
        tf.config.experimental.set_memory_growth(gpu, True)
    if args.provider == "cuda" and hasattr(ort, "preload_dlls"):
        ort.preload_dlls()  # CUDA/cuDNN from pip's nvidia-* wheels, when that is where they are
    print(f"tensorflow {tf.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}, numpy {np.__version__}, "
          f"{os.cpu_count()} CPUs, TF GPUs: {len(tf.config.list_physical_devices('GPU'))}")

    builts, sessions, results = [], {}, []
    with tempfile.TemporaryDirectory(prefix="specgen-bench-infer-") as folder:
        for key in args.models:
            b = build(key, Path(folder))
            a = ort_session(f"{key} specgen", b.specgen_onnx, args.provider, args.threads)
            c = ort_session(f"{key} tf2onnx", b.tf2onnx_model, args.provider, args.threads)
            x = np.random.default_rng(3).standard_normal((256, *b.input_shape)).astype(np.float32)
            b.match = float(np.max(np.abs(c.call(x) - a.call(x))))
            b.tf_match = float(np.max(np.abs(b.tf_fn(x).numpy() - a.call(x))))
            builts.append(b)
            sessions[key] = (a, c)
        print(f"built in {time.perf_counter() - started:.1f} s; providers: "
              + ", ".join(f"{k} specgen {a.provider} / tf2onnx {c.provider}" for k, (a, c) in sessions.items()))

        ceiling, ceiling_best, ceiling_provider = ceiling_gflops(args.provider, args.repeats, args.seconds)
        for b in builts:
            a, c = sessions[b.key]
            for batch in args.batches:
                x = np.random.default_rng(batch).standard_normal((batch, *b.input_shape)).astype(np.float32)
                timers = {
                    "specgen": Timer("specgen", lambda a=a, x=x: a.call(x)),
                    "tf": Timer("tf", lambda f=b.tf_fn, x=x: f(x).numpy()),
                    "tf2onnx": Timer("tf2onnx", lambda c=c, x=x: c.call(x)),
                }
                if a.provider == CPU:  # what `specgen infer`/serve pay on top: Predictor's input checks
                    feeds = {b.ir.inputs[0].onnx_name: x}
                    timers["predictor"] = Timer("predictor", lambda p=a.predictor, feeds=feeds: p(feeds))
                interleaved(list(timers.values()), args.repeats, args.seconds)
                ab = ab_ratios(timers["tf2onnx"], timers["specgen"], args.pairs, args.slot)
                results.append(Result(b, batch, timers, a.provider, ab))
    ok = report(results, builts, sessions, (ceiling, ceiling_best, ceiling_provider), args)
    print(f"\nwhole run {time.perf_counter() - started:.0f} s; load average (1 min) {load_before:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
