"""Training-step throughput: the specgen-generated step against a hand-written Keras 3 `model.fit`.

For the digits CNN and the digits MLP of examples/specs, one run builds a bench-local variant
of each spec in memory (one Adam optimizer over every variable at a constant learning rate,
no EMA, no clipping, accumulate 1, metric `accuracy`; layers, sizes, batch size and seed as in
the example), renders it with specgen, imports the generated model.py/train.py from a
temporary folder, and builds the same model in Keras (same layers and sizes, Adam with the
same hyper-parameters, SparseCategoricalCrossentropy(from_logits=True), metric accuracy,
jit_compile off as specgen's step has no XLA). Both read the bundled digits npz through the
same tf.data chain (shuffle, batch with drop_remainder, repeat, prefetch).

Each variant is traced once, then measured `--repeats` times, interleaved (the order rotates
every repetition): each measurement runs `--warmup` steps, then times `--steps` steps.

  specgen loop      a Python loop calling trainer.train_step(features, labels, seed) once per
                    step, seed = tf.constant([step, 0], tf.int64), float(loss) each step
  specgen train()   what `specgen train` runs (specgen/runtime/commands/session.py): Session.updates runs
                    chunks of updates inside one graph (the generated train_steps pulls batches
                    in the graph), then the bookkeeping (metric reads, progress line, TensorBoard
                    scalars) every LOG_EVERY updates; the real Session methods; no checkpoints/eval
  specgen graph[k]  k steps inside one tf.function (a loop over tf.range(k) pulling batches
                    from the iterator in the graph): what Keras does with steps_per_execution=k
  keras fit         model.fit(steps_per_execution=1), Keras' default
  keras fit[k]      model.fit(steps_per_execution=k)

Ratios are specgen / Keras in steps/s (of the medians, and the median of per-repetition
ratios). The target is >= 1.0 for what `specgen train` runs (specgen train() vs keras fit);
the per-call loop and graph[k] vs fit[k] are printed with it. `--strict` exits 1 when the
target is not met.

    python bench/train_step.py                  # both models, ~1.5 min on 2 cores
    python bench/train_step.py --profile        # cProfile of the specgen loop (top functions)
    python bench/train_step.py --determinism    # with op determinism on, as `specgen train` sets it
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from specgen.spec.load import LoadedSpec, load_spec_text

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "examples" / "specs"
TARGET_RATIO = 1.0
LEARNING_RATE = 0.001
MODELS = ("cnn", "mlp")
SPEC_FILES = {"cnn": "digits_cnn.yaml", "mlp": "digits_mlp.yaml"}


def bench_spec(model: str, folder: Path) -> LoadedSpec:
    """The example spec with one Adam over every variable, constant LR, no EMA/clip, accumulate 1; its run
    folder in `folder`."""
    path = SPECS / SPEC_FILES[model]
    data = yaml.safe_load(path.read_text())
    train = data["train"]
    data["optimizers"] = {"all": {"variables": ["*"], "kind": "adam", "learning_rate": LEARNING_RATE}}
    data["train"] = {"batch_size": train["batch_size"], "epochs": 1, "accumulate": 1, "metrics": ["accuracy"],
                     "seed": train.get("seed", 0)}
    for section in ("frozen", "export"):
        data.pop(section, None)
    data["checkpoint"] = run_section(folder)
    return load_spec_text(yaml.safe_dump(data, sort_keys=False), f"<bench {path.name}>", path)


# ---------------------------------------------------------------------------------------------
# Everything below imports TensorFlow lazily, inside functions called from main().
# ---------------------------------------------------------------------------------------------


@dataclass
class Variant:
    """One measured way of training: `timed(warmup, steps)` runs warmup + steps, returns the seconds of `steps`."""

    label: str
    timed: Callable[[int, int], float]
    rates: list[float] = field(default_factory=list)
    quantum: int = 1  # steps per call; warm-up and timed steps are multiples of it
    timed_steps: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def keras_model(model: str, spec: Any) -> Any:
    """The hand-written Keras 3 model with the example spec's layers."""
    import keras
    from keras import layers

    shape = tuple(spec.inputs["image"].shape)
    if model == "cnn":
        body = [
            layers.Conv2D(16, 3, padding="same", name="conv1"),
            layers.BatchNormalization(momentum=0.99, epsilon=1e-3, name="bn1"),
            layers.ReLU(name="relu1"),
            layers.MaxPool2D(2, name="pool1"),
            layers.Flatten(name="flat"),
            layers.Dense(64, activation="relu", kernel_initializer="he_normal", name="fc"),
            layers.Dropout(0.2, name="drop"),
            layers.Dense(10, name="out"),
        ]
    else:
        body = [
            layers.Flatten(name="flat"),
            layers.Dense(128, activation="relu", kernel_initializer="he_normal", name="hidden"),
            layers.Dropout(0.1, name="drop"),
            layers.Dense(10, name="out"),
        ]
    return keras.Sequential([keras.Input(shape, name="image"), *body], name=f"keras_{model}")


def compile_keras(net: Any, steps_per_execution: int) -> None:
    import keras

    net.compile(
        optimizer=keras.optimizers.Adam(learning_rate=LEARNING_RATE, beta_1=0.9, beta_2=0.999, epsilon=1e-7),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
        jit_compile=False,
    )


def check_same_variables(specgen_model: Any, net: Any) -> None:
    """Guard: the two models hold variables of the same shapes (weights and batch-norm statistics)."""
    ours = sorted(tuple(v.shape) for v in specgen_model.variables_by_path().values())
    theirs = sorted(tuple(v.shape) for v in net.weights)
    if ours != theirs:
        raise SystemExit(f"the Keras model does not match the spec: specgen {ours} vs keras {theirs}")


def keras_dataset(loaded: LoadedSpec) -> Any:
    """The chain specgen.runtime.data.training_batches builds, on (x, y) tuples for Keras."""
    import tensorflow as tf

    train, spec = loaded.spec.data.train, loaded.spec.train
    with np.load(loaded.folder / train.npz) as npz:
        x = npz[train.features["image"]].astype(np.float32)
        y = npz[train.labels["label"]].astype(np.int64).reshape(-1)
    return (tf.data.Dataset.from_tensor_slices((x, y))
            .shuffle(min(spec.shuffle_buffer, len(x)), seed=spec.seed, reshuffle_each_iteration=True)
            .batch(spec.batch_size, drop_remainder=True).repeat().prefetch(2))


def run_section(folder: Path) -> dict[str, Any]:
    """The bench specs' `checkpoint` section: the run folder inside the bench's temporary folder, and no
    periodic save (the loop never saves; a save would time the disk, which the Keras side does not)."""
    return {"dir": str(folder / "run"), "every_steps": 10**9, "keep": 1}


class Specgen:
    """The generated model and training module for one bench spec, driven three ways.

    The session is a real `Session` (what `specgen train` builds), so every attribute its methods read is set
    by its own __init__: a Session built by hand lost `tracker` when __init__ gained it and the bench broke.
    `loaded`'s checkpoint.dir must be a folder the bench may write (run_section); nothing is saved there.
    """

    def __init__(self, loaded: LoadedSpec, determinism: bool = False):
        from tensorflow.python.framework.config import disable_op_determinism  # no public name; TF's own tests use it

        from specgen.pipeline import build
        from specgen.progress import TrainProgress
        from specgen.runtime import data
        from specgen.runtime.commands.resume import Options
        from specgen.runtime.commands.train import Session

        self.loaded, self.spec = loaded, loaded.spec
        self.session = session = Session(build(loaded), Options(quiet=True))
        session.start()  # a new run in the bench's folder: opens the TensorBoard writers the loop writes to
        if not determinism:
            # Session.__init__ turns op determinism on for the whole process, as `specgen train` does; the bench
            # leaves it off unless --determinism asks: it slows both sides, and RESULTS.md's figures ran without it.
            disable_op_determinism()
        # Epoch ends (an eval in `specgen train`) are not timed: the loop's chunks end at log points only.
        session.updates_per_epoch = 10**9
        self.model, self.trainer = session.model, session.trainer
        source = data.read_stage(loaded, session.ir, "train")
        assert source is not None
        train = self.spec.train

        def batches() -> Any:
            return data.training_batches(source, train.batch_size, train.seed, train.shuffle_buffer)

        self.loop_iterator, self.graph_iterator = iter(batches()), iter(batches())
        self.loop_step = 0
        self.progress, self.losses = TrainProgress(0, 10**9, quiet=True), []
        self.started, self.first = time.monotonic(), 0

    def loop(self, steps: int) -> None:
        """Session.micro_batch's call pattern: next batch, seed [step, 0], train_step, float(loss)."""
        import tensorflow as tf

        trainer, iterator = self.trainer, self.loop_iterator
        for _ in range(steps):
            features, labels = next(iterator)
            seed = tf.constant([self.loop_step, 0], tf.int64)
            float(trainer.train_step(features, labels, seed))
            self.loop_step += 1

    def train_loop(self, steps: int) -> None:
        """The body of specgen.runtime.commands.train.train, without checkpoint saves and eval."""
        from specgen.runtime.commands.train import _chunk, _format

        session, progress = self.session, self.progress
        stop = session.step + steps
        while session.step < stop:
            loss = float(session.updates(_chunk(session, stop, None)))
            step, rate = session.step, (session.step - self.first) / max(time.monotonic() - self.started, 1e-9)
            train_metrics = session.metrics()
            progress.show(step, f"step {step}/{stop}  {rate:.1f} steps/s  loss {loss:.4f}  {_format(train_metrics)}",
                          f"loss {loss:.4f}")
            session._summaries("train", {"loss": loss, **train_metrics})

    def close(self) -> None:
        """The TensorBoard writers, before the temporary folder goes."""
        for writer in self.session.writers.values():
            writer.close()

    def graph(self, k: int) -> Callable[[int], None]:
        """k train steps per call of one tf.function that pulls its batches from the iterator."""
        import tensorflow as tf

        trainer = self.trainer

        @tf.function
        def k_steps(iterator: Any, first: tf.Tensor) -> tf.Tensor:
            loss = tf.constant(0.0)
            for i in tf.range(k, dtype=tf.int64):
                features, labels = next(iterator)
                loss = trainer.train_step(features, labels, tf.stack([first + i, tf.constant(0, tf.int64)]))
            return loss

        state = {"step": 0}

        def run(steps: int) -> None:
            for _ in range(steps // k):
                float(k_steps(self.graph_iterator, tf.constant(state["step"], tf.int64)))
                state["step"] += k

        return run


class KerasFit:
    """model.fit over a fresh epoch per measurement, timed from the first step after warm-up."""

    def __init__(self, net: Any, dataset: Any, steps_per_execution: int):
        import keras

        self.net, self.dataset, self.k = net, dataset, steps_per_execution
        self.warmup, self.start, self.end = 0, 0.0, 0.0
        bench = self

        class Clock(keras.callbacks.Callback):
            # Only on_train_batch_begin / on_epoch_end: Keras keeps dispatching batch-end work asynchronously.
            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                if batch == bench.warmup:
                    bench.start = time.perf_counter()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                bench.end = time.perf_counter()

        self.clock = Clock()

    def timed(self, warmup: int, steps: int) -> float:
        self.warmup = warmup
        self.net.fit(self.dataset, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[self.clock])
        return self.end - self.start


def timed_runs(run: Callable[[int], None]) -> Callable[[int, int], float]:
    """`run(steps)` runs steps synchronously (each call ends with a float(loss)): time the last `steps`."""

    def timed(warmup: int, steps: int) -> float:
        run(warmup)
        started = time.perf_counter()
        run(steps)
        return time.perf_counter() - started

    return timed


def measure(variants: list[Variant], args: argparse.Namespace) -> None:
    """Trace each variant, then time them `repeats` times, rotating the order each repetition."""
    for variant in variants:
        variant.timed(variant.quantum, variant.quantum)
    for rep in range(args.repeats):
        shift = rep % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            warmup = -(-args.warmup // variant.quantum) * variant.quantum
            steps = args.steps // variant.quantum * variant.quantum
            variant.rates.append(steps / variant.timed(warmup, steps))
            variant.timed_steps = steps


def setup(model: str, folder: Path, k: int, determinism: bool) -> tuple[list[Variant], dict[int, KerasFit], Specgen]:
    loaded = bench_spec(model, folder)
    ours = Specgen(loaded, determinism)
    dataset = keras_dataset(loaded)
    fits = {}
    for spe in (1, k):
        net = keras_model(model, loaded.spec)
        compile_keras(net, spe)
        check_same_variables(ours.model, net)
        fits[spe] = KerasFit(net, dataset, spe)
    variants = [
        Variant("specgen loop", timed_runs(ours.loop)),
        Variant("specgen train()", timed_runs(ours.train_loop)),
        Variant(f"specgen graph[{k}]", timed_runs(ours.graph(k)), quantum=k),
        Variant("keras fit", fits[1].timed),
        Variant(f"keras fit[{k}]", fits[k].timed, quantum=k),
    ]
    return variants, fits, ours


def report(model: str, ours: Specgen, fits: dict[int, KerasFit], variants: list[Variant],
           k: int) -> list[tuple[str, float, float]]:
    """Print one model's table; return (label, ratio of medians, paired ratio) per specgen variant."""
    by_label = {v.label: v for v in variants}
    pairs = {"specgen loop": "keras fit", "specgen train()": "keras fit", f"specgen graph[{k}]": f"keras fit[{k}]"}
    print(f"\n{model}: batch {ours.spec.train.batch_size}, steps/s over {variants[0].timed_steps} timed steps "
          f"({len(variants[0].rates)} repetitions)")
    print(f"  {'variant':<20}{'median':>10}{'min':>10}{'max':>10}   specgen / keras (medians)")
    for variant in variants:
        against = pairs.get(variant.label)
        ratio = f"{variant.median / by_label[against].median:6.2f}x {against}" if against else ""
        print(f"  {variant.label:<20}{variant.median:>10.1f}{min(variant.rates):>10.1f}{max(variant.rates):>10.1f}"
              f"   {ratio}")
    accuracy = float(ours.trainer.metrics[0].result())
    history = fits[1].net.history.history
    print(f"  sanity: specgen train_step traced {ours.trainer.train_step.experimental_get_tracing_count()} time(s); "
          f"train accuracy specgen {accuracy:.3f} (over all bench steps), keras {history['accuracy'][-1]:.3f} "
          "(last fit)")
    results = []
    for a, b in pairs.items():
        ratio = by_label[a].median / by_label[b].median
        paired = statistics.median(x / y for x, y in zip(by_label[a].rates, by_label[b].rates, strict=True))
        results.append((f"{model}: {a} / {b}", ratio, paired))
    return results


def profile(ours: Specgen, steps: int, top: int) -> None:
    """cProfile over `steps` iterations of the specgen loop (after tracing)."""
    ours.loop(20)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    ours.loop(steps)
    profiler.disable()
    elapsed = time.perf_counter() - started
    print(f"\nspecgen loop under cProfile: {steps} steps in {elapsed:.2f} s "
          f"({elapsed / steps * 1e6:.0f} us/step, profiler overhead included)")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("cumulative").print_stats(top)
    print(out.getvalue())


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--steps", type=int, default=300, help="timed steps per measurement (default 300)")
    parser.add_argument("--warmup", type=int, default=50, help="untimed steps before each measurement (default 50)")
    parser.add_argument("--repeats", type=int, default=7, help="measurements per variant (default 7)")
    parser.add_argument("--k", type=int, default=50, help="steps per tf.function call / steps_per_execution")
    parser.add_argument("--determinism", action="store_true",
                        help="switch on op determinism first, as `specgen train` does (affects both sides)")
    parser.add_argument("--profile", action="store_true", help="profile the specgen loop instead of comparing")
    parser.add_argument("--top", type=int, default=30, help="functions to show with --profile")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target (train() vs fit) is not met")
    args = parser.parse_args(argv)
    if args.steps < args.k:
        parser.error("--steps must be at least --k")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    if args.determinism:
        tf.config.experimental.enable_op_determinism()
    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} CPU(s), "
          f"{len(tf.config.list_physical_devices('GPU'))} GPU(s), "
          f"op determinism {'on' if args.determinism else 'off'}, load average {os.getloadavg()[0]:.2f}")
    print(f"{args.warmup} warm-up + {args.steps} timed steps per measurement, {args.repeats} repetitions interleaved, "
          f"k = {args.k}; Keras jit_compile off")
    results = []
    with tempfile.TemporaryDirectory(prefix="specgen-bench-") as tmp:
        for model in args.models:
            folder = Path(tmp) / model
            folder.mkdir()
            variants, fits, ours = setup(model, folder, args.k, args.determinism)
            if args.profile:
                profile(ours, args.steps, args.top)
                continue
            measure(variants, args)
            results += report(model, ours, fits, variants, args.k)
            ours.close()
    if args.profile:
        return 0
    print(f"\ntarget: specgen steps/s >= {TARGET_RATIO:g}x Keras model.fit, per model, for what `specgen train` runs "
          "('specgen train()':\nchunks of updates in one graph, bookkeeping every few updates). 'specgen loop' calls "
          f"train_step once per step;\ngraph[{args.k}] runs a fixed {args.k} steps per tf.function call.")
    print(f"  {'':<46}{'ratio':>8} {'paired':>8}")
    for label, ratio, paired in results:
        print(f"  {label:<46}{ratio:7.3f}x {paired:7.3f}x  {'met' if ratio >= TARGET_RATIO else 'NOT met'}")
    print("  ratio: of the medians; paired: median of the per-repetition ratios (both measured in the same repetition)")
    print(f"\nload average {os.getloadavg()[0]:.2f}; whole run {time.perf_counter() - started:.1f} s")
    met = all(ratio >= TARGET_RATIO for label, ratio, _ in results if "train()" in label)
    return 1 if args.strict and not met else 0


if __name__ == "__main__":
    raise SystemExit(main())
