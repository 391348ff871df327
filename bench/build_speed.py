"""How long `specgen build` takes over many realistic specs, against the cost of importing its libraries.

One run generates N valid spec files of about L layers each (seeded, so every run builds the
same specs) into a temporary folder, then times two subprocesses, interleaved over several
repetitions so that machine noise hits both alike:

  floor  `python -c "import pydantic, jinja2, onnx"`: what any build pays before doing work
  build  `specgen build <specs> --out <fresh folder>`: load, resolve, render, check and write all N

and prints their medians, the ratio build/floor and the milliseconds each spec costs above
the floor. The target is a whole build within 3x the import floor.

`--profile` instead runs the build once in this process under cProfile (after importing the
floor libraries, so the profile shows the time above the floor) and prints the top functions.

`--lower-bound` times only the work any build that meets the issue must do, whatever its
design: parse each spec with libyaml, check each generated Python file with `compile()` (cheaper
than the `ast.parse` the issue names), run onnx.parser and the full onnx.checker on each graph,
and create the output files. Spread perfectly over every core, that work plus the import floor
is the fastest a build can be on this machine; the ratio it prints is the best reachable.

    python bench/build_speed.py                 # 100 specs x 50 layers, 5 repetitions
    python bench/build_speed.py --profile       # where the time goes
    python bench/build_speed.py --lower-bound   # the best ratio this machine allows
    python bench/build_speed.py --phases        # ms per spec of each phase, in process
    python bench/build_speed.py --blocks        # the same, with each spec's body written as block instances
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import json
import os
import pstats
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TARGET_RATIO = 3.0
FLOOR_CODE = "import pydantic, jinja2, onnx"
ACTIVATIONS = ("relu", "gelu", "leaky_relu", "sigmoid", "tanh")
INITS = ("glorot_uniform", "he_normal", "he_uniform", "glorot_normal")

# ---------------------------------------------------------------------------------------------
# Spec generation
# ---------------------------------------------------------------------------------------------

_PLAIN = re.compile(r"^[A-Za-z][A-Za-z0-9_/]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def flow(value: object) -> str:
    """A YAML flow value (one line), the way the example specs are written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if "e" in text or "E" in text:  # PyYAML reads 1e-05 as a string: write it out
            text = format(value, ".12f").rstrip("0")
        return text
    if isinstance(value, str):
        return value if _PLAIN.match(value) and value.lower() not in _YAML_WORDS else json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


@dataclass
class Tensor:
    """The layer (or input) a new layer reads, with its shape without the batch dimension."""

    name: str
    shape: tuple[int, ...]


@dataclass
class SpecBuilder:
    """Grows one spec layer by layer, tracking shapes so that every layer is valid."""

    rng: random.Random
    layers: list[dict[str, object]] = field(default_factory=list)
    counter: int = 0

    def add(self, prefix: str, op: str, x: Tensor | None, shape: tuple[int, ...], **params: object) -> Tensor:
        """Append a layer reading `x` (or, when None, the previous layer) and return its output."""
        self.counter += 1
        name = f"{prefix}/{op}{self.counter}"
        layer: dict[str, object] = {"name": name, "op": op}
        previous = self.layers[-1]["name"] if self.layers else None
        if x is not None and "inputs" not in params and x.name != previous:  # else `input` defaults to it
            layer["input"] = x.name
        layer.update(params)
        self.layers.append(layer)
        return Tensor(name, shape)

    # -- convolutional blocks (rank-4 tensors: height, width, channels) ------------------------

    def conv(self, x: Tensor, filters: int, kernel: int = 3, strides: int = 1, **extra: object) -> Tensor:
        h, w, _ = x.shape
        if strides > 1:
            h, w = -(-h // strides), -(-w // strides)
        params: dict[str, object] = {"filters": filters, "kernel": kernel, "padding": "same"}
        if strides > 1:
            params["strides"] = strides
        if self.rng.random() < 0.3:
            params["kernel_init"] = {"kind": self.rng.choice(INITS)}
        params.update(extra)
        return self.add("body", "conv2d", x, (h, w, filters), **params)

    def bn(self, x: Tensor) -> Tensor:
        params = {"momentum": 0.99, "epsilon": 0.001} if self.rng.random() < 0.5 else {}
        return self.add("body", "batch_norm", x, x.shape, **params)

    def act(self, x: Tensor) -> Tensor:
        return self.add("body", self.rng.choice(ACTIVATIONS), x, x.shape)

    def residual(self, x: Tensor) -> Tensor:  # 7 layers
        c = x.shape[-1]
        y = self.act(self.bn(self.conv(x, c)))
        y = self.bn(self.conv(y, c, kernel=self.rng.choice((1, 3))))
        s = self.add("body", "add", None, x.shape, inputs=[x.name, y.name])
        return self.act(s)

    def separable(self, x: Tensor) -> Tensor:  # 4 layers
        h, w, c = x.shape
        y = self.add("body", "depthwise_conv2d", x, (h, w, c), kernel=3, padding="same",
                     activation=self.rng.choice(("relu", "gelu")))
        y = self.bn(y)
        filters = self.rng.choice((c, c * 2)) if c < 64 else c
        y = self.conv(y, filters, kernel=1, use_bias=False)
        return self.act(y)

    def branches(self, x: Tensor) -> Tensor:  # 4 layers
        f1, f2 = self.rng.choice((8, 16)), self.rng.choice((8, 16, 24))
        a = self.conv(x, f1, kernel=1, activation="relu")
        b = self.conv(x, f2, kernel=3, activation=self.rng.choice(ACTIVATIONS))
        h, w, _ = x.shape
        y = self.add("body", "concat", None, (h, w, f1 + f2), inputs=[a.name, b.name], axis=-1)
        return self.bn(y)

    def downsample(self, x: Tensor) -> Tensor:  # 1 layer
        h, w, c = x.shape
        if self.rng.random() < 0.5:
            op = self.rng.choice(("max_pool", "avg_pool"))
            return self.add("body", op, x, (h // 2, w // 2, c), size=2)
        return self.conv(x, min(c * 2, 64), strides=2, activation="relu")

    def single(self, x: Tensor) -> Tensor:  # 1 layer
        choice = self.rng.random()
        if choice < 0.3:
            return self.add("body", "dropout", x, x.shape, rate=round(self.rng.uniform(0.05, 0.3), 2))
        if choice < 0.5:
            return self.add("body", "layer_norm", x, x.shape, epsilon=0.00001)
        if choice < 0.7:
            return self.bn(x)
        return self.act(x)

    # -- the head (rank-2 tensors: features) -----------------------------------------------------

    def head(self, x: Tensor, classes: int) -> tuple[Tensor, Tensor]:  # 8 layers
        h, w, c = x.shape
        if h * w * c <= 2048 and self.rng.random() < 0.5:
            x = self.add("head", "flatten", x, (h * w * c,))
        else:
            x = self.add("head", "global_avg_pool", x, (c,))
        units = self.rng.choice((64, 128, 256))
        fc = self.add("head", "dense", x, (units,), units=units, activation=self.rng.choice(ACTIVATIONS),
                      kernel_init={"kind": "he_normal"})
        y = self.add("head", "layer_norm", fc, fc.shape)
        y = self.add("head", "dense", y, (units,), units=units, use_bias=self.rng.random() < 0.5)
        y = self.add("head", "add", None, fc.shape, inputs=[fc.name, y.name])
        y = self.add("head", "gelu", y, y.shape)
        y = self.add("head", "dropout", y, y.shape, rate=0.2)
        out = self.add("head", "dense", y, (classes,), units=classes)
        return fc, out


HEAD_LAYERS = 8
STEM_LAYERS = 3


def spec_text(index: int, seed: int, n_layers: int) -> str:
    """One valid spec with exactly `n_layers` layers; the same (index, seed) always gives the same text."""
    rng = random.Random(seed * 1_000_003 + index)
    side, channels = rng.choice((16, 24, 32)), rng.choice((1, 3))
    b = SpecBuilder(rng)
    x = Tensor("image", (side, side, channels))
    x = b.add("stem", "conv2d", x, (side, side, 16), filters=16, kernel=3, padding="same")
    x = b.add("stem", "batch_norm", x, x.shape)
    x = b.add("stem", "relu", x, x.shape)
    blocks = {b.residual: 7, b.separable: 4, b.branches: 4, b.downsample: 1, b.single: 1}
    while (left := n_layers - HEAD_LAYERS - len(b.layers)) > 0:
        fits = [f for f, size in blocks.items() if size <= left]
        if x.shape[0] < 4 and b.downsample in fits:
            fits.remove(b.downsample)
        weights = [{b.residual: 4, b.separable: 3, b.branches: 2, b.downsample: 1, b.single: 1}[f] for f in fits]
        x = rng.choices(fits, weights)[0](x)
    fc, out = b.head(x, classes=10)

    lines = [
        f"specgen: 1\nname: bench_{index:03d}",
        f"doc: Generated by bench/build_speed.py (seed {seed}, spec {index}) to time specgen build.",
        "",
        f"inputs:\n  image: {{shape: [{side}, {side}, {channels}], dtype: float32}}",
        f"outputs:\n  logits: {out.name}",
    ]
    if rng.random() < 0.3:
        lines.append(f"  features: {fc.name}")
    lines += ["", "layers:", *(f"  - {flow(layer)}" for layer in b.layers), ""]
    lines += _training_sections(rng)
    return "\n".join(lines) + "\n"


# Blocks for --blocks: the body is stages of instances, expanded by `specgen build` (docs/spec.md, Blocks).
BLOCKS = """\
blocks:
  residual:                 # 7 layers
    params: {filters: ~, kernel: 3}
    inputs: [x]
    outputs: {out: relu}
    layers:
      - {name: conv1, op: conv2d, input: x, filters: $filters, kernel: 3, padding: same}
      - {name: bn1, op: batch_norm}
      - {name: act, op: relu}
      - {name: conv2, op: conv2d, filters: $filters, kernel: $kernel, padding: same, kernel_init: he_normal}
      - {name: bn2, op: batch_norm, momentum: 0.99, epsilon: 0.001}
      - {name: sum, op: add, inputs: [x, bn2]}
      - {name: relu, op: relu}
  separable:                # 4 layers
    params: {filters: ~, act: relu}
    inputs: [x]
    outputs: {out: relu}
    layers:
      - {name: dw, op: depthwise_conv2d, input: x, kernel: 3, padding: same, activation: $act}
      - {name: bn, op: batch_norm}
      - {name: pw, op: conv2d, filters: $filters, kernel: 1, use_bias: false}
      - {name: relu, op: relu}
  stage:                    # 2 x residual + separable = 18 layers, a block of blocks
    params: {filters: ~, act: relu}
    inputs: [x]
    outputs: {out: sep}
    layers:
      - {name: res, block: residual, input: x, repeat: 2, with: {filters: $filters}}
      - {name: sep, block: separable, with: {filters: $filters, act: $act}}
"""


def blocks_spec_text(index: int, seed: int, n_layers: int) -> str:
    """Like spec_text, with the body written as block instances (`--blocks`): `n_layers` once expanded."""
    rng = random.Random(seed * 1_000_003 + index)
    side, channels = rng.choice((16, 24, 32)), rng.choice((1, 3))
    b = SpecBuilder(rng)
    x = Tensor("image", (side, side, channels))
    x = b.add("stem", "conv2d", x, (side, side, 16), filters=16, kernel=3, padding="same")
    x = b.add("stem", "batch_norm", x, x.shape)
    x = b.add("stem", "relu", x, x.shape)
    sizes = {"stage": 18, "residual": 7, "separable": 4}
    expanded, stage = len(b.layers), 0
    while (left := n_layers - HEAD_LAYERS - expanded) > 0:
        stage += 1
        fits = [k for k, size in sizes.items() if size <= left] or ["single"]
        kind = rng.choice(fits)
        c = x.shape[-1]
        if kind == "single":
            x = b.single(x)
            expanded += 1
            continue
        entry: dict[str, object] = {"name": f"body/s{stage}", "block": kind}
        repeat = rng.randint(1, left // sizes[kind]) if kind != "stage" else 1
        if repeat > 1:
            entry["repeat"] = repeat
        entry["with"] = {"filters": c, **({"act": rng.choice(("relu", "gelu"))} if kind != "residual" else {})}
        b.layers.append(entry)
        x, expanded = Tensor(str(entry["name"]), x.shape), expanded + repeat * sizes[kind]
    _, out = b.head(x, classes=10)

    lines = [f"specgen: 1\nname: bench_{index:03d}",
             f"doc: Generated by bench/build_speed.py --blocks (seed {seed}, spec {index}) to time specgen build.", "",
             f"inputs:\n  image: {{shape: [{side}, {side}, {channels}], dtype: float32}}",
             f"outputs:\n  logits: {out.name}", "", BLOCKS, "layers:", *(f"  - {flow(layer)}" for layer in b.layers), ""]
    lines += _training_sections(rng)
    return "\n".join(lines) + "\n"


def _training_sections(rng: random.Random) -> list[str]:
    """Collections, loss, optimizers (every weight claimed exactly once), train and export."""
    mode = rng.choice(("one", "split", "frozen_stem"))
    lines: list[str] = []
    if mode == "one":
        optimizers = {"all": {"variables": ["*"], "kind": "adam", "learning_rate": 0.001}}
    elif mode == "split":
        lines += ["collections:", '  backbone: ["stem/*", "body/*"]', '  head: ["head/*"]', ""]
        optimizers = {
            "body": {"variables": "backbone", "kind": "sgd", "momentum": 0.9,
                     "learning_rate": {"schedule": "cosine_decay", "initial": 0.05, "decay_steps": 2000}},
            "head": {"variables": "head", "kind": "adamw", "learning_rate": 0.001, "weight_decay": 0.0001},
        }
    else:
        lines += ["collections:", '  stem: ["stem/*"]', "frozen: [stem]", ""]
        optimizers = {
            "rest": {"variables": ["body/*", "head/*"], "kind": rng.choice(("rmsprop", "adagrad", "sgd")),
                     "learning_rate": {"schedule": "exponential_decay", "initial": 0.01, "decay_steps": 500,
                                       "decay_rate": 0.9, "warmup_steps": 100}},
        }
    lines += ["loss:", "  kind: sparse_softmax_cross_entropy", "  logits: logits", "  labels: label", ""]
    lines.append("optimizers:")
    for name, body in optimizers.items():
        lines.append(f"  {name}:")
        lines += [f"    {key}: {flow(value)}" for key, value in body.items()]
    ema = rng.random() < 0.5
    lines += ["", "train:", f"  batch_size: {rng.choice((32, 64, 128))}", f"  accumulate: {rng.choice((1, 1, 2, 4))}",
              "  clip: {global_norm: 5.0}", "  metrics: [accuracy, mean_loss]", "  seed: 0"]
    if ema:
        lines.append("  ema: {decay: 0.999}")
    opset = rng.choice((18, 19, 20, 21))
    lines += ["", "export:", f"  onnx: {{opset: {opset}, weights: {'ema' if ema else 'raw'}, dynamic_batch: true}}"]
    return lines


def write_specs(folder: Path, count: int, n_layers: int, seed: int, blocks: bool = False) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    text = blocks_spec_text if blocks else spec_text
    for index in range(count):
        path = folder / f"bench_{index:03d}.yaml"
        path.write_text(text(index, seed, n_layers), encoding="utf-8")
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def specgen_command() -> list[str]:
    """The `specgen` script installed next to this interpreter, or `python -m specgen`."""
    folder = Path(sys.executable).parent
    for name in ("specgen", "specgen.exe"):
        if (folder / name).is_file():
            return [str(folder / name)]
    return [sys.executable, "-m", "specgen"]


def child_env(work: Path, as_is: bool) -> dict[str, str]:
    """The environment of the timed commands.

    Unless `as_is`, bytecode caching is switched on and pointed at a folder of our own
    (PYTHONPYCACHEPREFIX), so both commands run from warm .pyc files as an installed specgen
    does, even where PYTHONDONTWRITEBYTECODE is set, and nothing is written into the checkout
    or the virtualenv.
    """
    env = dict(os.environ)
    if not as_is:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def timed(command: list[str], env: dict[str, str]) -> float:
    """Wall-clock seconds of one subprocess; exit with its stderr if it fails."""
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False,
                          env=env)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-4000:]}")
    return elapsed


def measure(specs: Path, work: Path, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Interleaved floor/build runs (order alternating each repetition) after one untimed warm-up."""
    floor_cmd = [sys.executable, "-c", FLOOR_CODE]
    build_cmd = [*specgen_command(), "build", str(specs)]
    env, count = child_env(work, args.env_as_is), args.specs

    warm = work / "out-warmup"
    shutil.rmtree(warm, ignore_errors=True)
    timed(floor_cmd, env)
    timed([*build_cmd, "--out", str(warm)], env)  # fills the bytecode cache; proves every spec builds
    built = sorted(p.name for p in warm.iterdir() if p.is_dir())
    if len(built) != count:
        sys.exit(f"expected {count} output folders in {warm}, found {len(built)}")

    floors, builds = [], []
    for rep in range(args.repetitions):
        out = work / f"out-{rep}"
        shutil.rmtree(out, ignore_errors=True)  # a fresh folder: every file is written
        runs = [("floor", floor_cmd), ("build", [*build_cmd, "--out", str(out)])]
        for kind, command in runs if rep % 2 == 0 else runs[::-1]:
            (floors if kind == "floor" else builds).append(timed(command, env))
        shutil.rmtree(out, ignore_errors=True)
    return floors, builds


def report(floors: list[float], builds: list[float], count: int, n_layers: int, args: argparse.Namespace) -> bool:
    floor, build = statistics.median(floors), statistics.median(builds)
    ratio = build / floor
    per_spec_ms = (build - floor) / count * 1000
    met = ratio <= TARGET_RATIO
    print(f"specgen build speed: {count} specs x {n_layers} layers{' (as block instances)' if args.blocks else ''} "
          f"(seed {args.seed}), "
          f"{len(builds)} interleaved repetitions, Python {sys.version.split()[0]}, "
          f"{'environment as is' if args.env_as_is else 'warm bytecode cache'}")
    print()
    print(f"  {'':<28}{'median':>9}{'min':>9}{'max':>9}")
    for label, values in (("import floor (s)", floors), ("specgen build (s)", builds)):
        print(f"  {label:<28}{statistics.median(values):>9.3f}{min(values):>9.3f}{max(values):>9.3f}")
    print(f"  {'ratio build / floor':<28}{ratio:>8.2f}x")
    print(f"  {'per spec above floor (ms)':<28}{per_spec_ms:>9.1f}")
    print()
    budget = TARGET_RATIO * floor
    print(f"target: whole build within {TARGET_RATIO:g}x the import floor (<= {budget:.3f} s for {count} specs, "
          f"i.e. <= {(budget - floor) / count * 1000:.1f} ms per spec above the floor): "
          f"{'MET' if met else 'NOT MET'}")
    return met


# ---------------------------------------------------------------------------------------------
# Phases
# ---------------------------------------------------------------------------------------------


def phases(specs: Path, repetitions: int) -> None:
    """Milliseconds per spec of each build phase, in this process on one core (medians)."""
    for module in ("pydantic", "jinja2", "onnx"):
        __import__(module)
    from specgen.ir.resolve import build_ir
    from specgen.render import files
    from specgen.spec.load import load_spec

    files.load_templates()
    paths = sorted(specs.glob("*.yaml"))
    loaded = [load_spec(p) for p in paths]
    irs = [build_ir(spec) for spec in loaded]
    texts = [files.render_onnx_text(ir) for ir in irs]
    gc.freeze()  # as `specgen` does at start-up: collections then skip the objects set up here
    steps: dict[str, Callable[[], object]] = {
        "load (YAML + pydantic)": lambda: [load_spec(p) for p in paths],
        "resolve (IR)": lambda: [build_ir(spec) for spec in loaded],
        "model.py (render + compile)": lambda: [files.render_model_py(ir) for ir in irs],
        "train.py (render + compile)": lambda: [files.render_train_py(ir) for ir in irs],
        "collections.yaml (render)": lambda: [files.render_collections(ir) for ir in irs],
        "ONNX text (render)": lambda: [files.render_onnx_text(ir) for ir in irs],
        "ONNX parse + check": lambda: [files.onnx_model(t, ir) for t, ir in zip(texts, irs, strict=True)],
    }
    print(f"build phases over {len(paths)} specs, ms per spec on one core (median of {repetitions}):")
    total = 0.0
    for label, step in steps.items():
        ms = _median_seconds(step, repetitions) / len(paths) * 1000
        total += ms
        print(f"  {label:<32}{ms:>8.2f}")
    print(f"  {'total':<32}{total:>8.2f}")


# ---------------------------------------------------------------------------------------------
# Lower bound
# ---------------------------------------------------------------------------------------------


def _median_seconds(work: Callable[[], object], repetitions: int) -> float:
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def lower_bound(specs: Path, work: Path, args: argparse.Namespace) -> None:
    """Time the work every conforming build must do, and the ratio it allows on this machine's cores."""
    import onnx.checker
    import onnx.parser
    import yaml

    out = work / "out-lower-bound"
    shutil.rmtree(out, ignore_errors=True)
    env = child_env(work, args.env_as_is)
    timed([*specgen_command(), "build", str(specs), "--out", str(out)], env)
    files = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    texts = [p.read_text(encoding="utf-8") for p in sorted(specs.glob("*.yaml"))]
    python = [(str(k), v.decode()) for k, v in files.items() if k.suffix == ".py"]
    graphs = [v.decode() for k, v in files.items() if k.suffix == ".txt"]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    def create_files() -> None:
        target = work / "out-files"
        shutil.rmtree(target, ignore_errors=True)
        for rel, content in files.items():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_bytes(content)

    parts = {
        "parse specs (libyaml compose)": lambda: [yaml.compose(t, Loader=loader) for t in texts],
        f"compile() {len(python)} generated .py": lambda: [compile(t, n, "exec", dont_inherit=True) for n, t in python],
        f"onnx parser + full checker x{len(graphs)}": lambda: [
            onnx.checker.check_model(onnx.parser.parse_model(t), full_check=True) for t in graphs],
        f"create {len(files)} output files": create_files,
    }
    floor = statistics.median(timed([sys.executable, "-c", FLOOR_CODE], env) for _ in range(args.repetitions))
    cores = os.cpu_count() or 1
    print(f"work every conforming build does for {args.specs} specs x {args.layers} layers "
          f"(median of {args.repetitions}, one core):")
    total = 0.0
    for label, part in parts.items():
        seconds = _median_seconds(part, args.repetitions)
        total += seconds
        print(f"  {label:<40}{seconds:>8.3f} s")
    best = floor + total / cores
    print(f"  {'total':<40}{total:>8.3f} s")
    print()
    print(f"import floor {floor:.3f} s; with that work spread perfectly over {cores} cores a build takes at least "
          f"{best:.3f} s = {best / floor:.2f}x the floor (target {TARGET_RATIO:g}x), before importing specgen, "
          "validating, resolving or rendering anything")


# ---------------------------------------------------------------------------------------------
# Profiling
# ---------------------------------------------------------------------------------------------


def profile(specs: Path, work: Path, top: int, sort: str) -> None:
    """Run the build in this process under cProfile; the floor libraries are imported first."""
    for module in ("pydantic", "jinja2", "onnx"):
        __import__(module)
    from specgen.cli import main

    out = work / "out-profile"
    shutil.rmtree(out, ignore_errors=True)
    profiler = cProfile.Profile()
    quiet = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(quiet):
        profiler.enable()
        code = main(["build", str(specs), "--out", str(out)])
        profiler.disable()
    elapsed = time.perf_counter() - start
    if code != 0:
        sys.exit(f"specgen build failed with exit code {code}")
    print(f"in-process build under cProfile: {elapsed:.3f} s (profiler overhead included; "
          "pydantic, jinja2 and onnx were imported before profiling)")
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.strip_dirs().sort_stats(sort).print_stats(top)


# ---------------------------------------------------------------------------------------------


def arguments(argv: list[str] | None) -> argparse.Namespace:
    top = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    top.add_argument("--specs", type=int, default=100, help="spec files to generate (default 100)")
    top.add_argument("--layers", type=int, default=50, help="layers per spec (default 50, at least 20)")
    top.add_argument("--repetitions", "-r", type=int, default=5, help="timed runs of each command (default 5)")
    top.add_argument("--seed", type=int, default=0, help="seed of the generated specs (default 0)")
    top.add_argument("--profile", action="store_true", help="profile one in-process build instead of timing")
    top.add_argument("--phases", action="store_true", help="time each build phase in this process instead")
    top.add_argument("--lower-bound", action="store_true",
                     help="time only the work every conforming build must do, and the best ratio it allows")
    top.add_argument("--top", type=int, default=25, help="functions to list with --profile (default 25)")
    top.add_argument("--sort", default="cumulative", choices=("cumulative", "tottime", "ncalls"),
                     help="profile order (default cumulative)")
    top.add_argument("--keep", type=Path, help="write specs and outputs here and keep them, instead of a temp folder")
    top.add_argument("--env-as-is", action="store_true",
                     help="run the timed commands in this environment unchanged (by default they get a "
                          "private bytecode cache, see child_env)")
    top.add_argument("--strict", action="store_true", help="exit 1 when the target is not met")
    top.add_argument("--blocks", action="store_true",
                     help="write each spec's body as block instances (stages, repeats, nested blocks); "
                          "--layers counts the expanded layers")
    args = top.parse_args(argv)
    if args.specs < 1 or args.layers < 20 or args.repetitions < 1:
        top.error("--specs and --repetitions must be at least 1, --layers at least 20")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    with contextlib.ExitStack() as stack:
        if args.keep:
            work = args.keep
            shutil.rmtree(work / "specs", ignore_errors=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="specgen-bench-")))
        specs = work / "specs"
        write_specs(specs, args.specs, args.layers, args.seed, args.blocks)
        if args.profile:
            profile(specs, work, args.top, args.sort)
            return 0
        if args.phases:
            phases(specs, args.repetitions)
            return 0
        if args.lower_bound:
            lower_bound(specs, work, args)
            return 0
        floors, builds = measure(specs, work, args)
        met = report(floors, builds, args.specs, args.layers, args)
        return 1 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
