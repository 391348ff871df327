"""A learning rate edited in the spec before `--resume` is the one the resumed run trains at (checker rt12/train #1).

The checkpoint's `optimizers/<name>/learning_rate` variable holds the rate of its last update, and a constant rate's
update reads that variable: before the fix an edited constant (or a schedule edited into one) was silently kept at
the checkpoint's value while spec.resolved.yaml recorded the edit. Each case trains 2 steps (batches in file order:
shuffle_buffer 1), edits the spec, resumes 2 steps, and compares the weights with Keras 3's optimizer stepped from
the checkpoint's weights and slots at the edited rate (tolerance: float32 rounding over two steps); the resume's
`note:` line, the checkpoint's rate variable and spec.resolved.yaml are checked too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from specgen.cli import main  # noqa: E402

pytestmark = pytest.mark.slow

SPEC = """\
specgen: 1
name: lr
inputs: {{x: {{shape: [6]}}}}
outputs: {{logits: out}}
layers:
  - {{name: fc, op: dense, units: 4, activation: tanh}}
  - {{name: out, op: dense, units: 3}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{kind: {kind}, learning_rate: {rate}{extra}}}
train: {{batch_size: 16, shuffle_buffer: 1}}
data: {{train: {{npz: d.npz, features: {{x: x}}, labels: {{label: y}}}}}}
checkpoint: {{dir: run, every_steps: 1, keep: 100}}
"""
WEIGHTS = ("fc/kernel", "fc/bias", "out/kernel", "out/bias")
BATCH = 16
TAIL = ": training goes on at the spec's rate, not the checkpoint's"
EXPONENTIAL = "{schedule: exponential_decay, initial: 0.05, decay_steps: 1, decay_rate: 0.5}"
COSINE = "{schedule: cosine_decay, initial: 0.02, decay_steps: 10}"


def cli(args: list[Any], capsys: pytest.CaptureFixture[str]) -> str:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err, err
    return out


def start_lines(out: str) -> list[str]:
    """The lines a resume prints before it trains (the `resumed from` line and its notes)."""
    lines = out.splitlines()
    return lines[:next(i for i, line in enumerate(lines) if line.startswith("training lr: "))]


def write_spec(folder: Path, kind: str, rate: str) -> Path:
    path = folder / "lr.yaml"
    path.write_text(SPEC.format(kind=kind, rate=rate, extra=", momentum: 0.9" if kind == "sgd" else ""))
    return path


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the lines name the run folder as `run/...`
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 6)).astype(np.float32)
    y = np.argmax(x @ rng.standard_normal((6, 3)) + 0.5 * rng.standard_normal((96, 3)), 1).astype(np.int64)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    return tmp_path


def values(checkpoint: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(checkpoint / "variables"))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


# Keras' optimizer, and where each of specgen's slots (optimizers/all/<slot>/<path>) goes in it.
KERAS: dict[str, tuple[Callable[[Any], Any], dict[str, str]]] = {
    "sgd": (lambda rate: keras.optimizers.SGD(rate, momentum=0.9), {"momentum": "momentums"}),
    "adam": (lambda rate: keras.optimizers.Adam(rate), {"m": "_momentums", "v": "_velocities"}),
    "rmsprop": (lambda rate: keras.optimizers.RMSprop(rate), {"rms": "_velocities"}),
    "adagrad": (lambda rate: keras.optimizers.Adagrad(rate), {"accumulator": "_accumulators"}),
}


def keras_steps(folder: Path, start: dict[str, np.ndarray], kind: str, rate: Any, steps: int) -> dict[str, np.ndarray]:
    """`steps` updates of Keras' optimizer from a checkpoint's weights, slots and iteration count, on the batches a
    resume reads next (file order); `rate`: a float or a Keras schedule (of Keras' iterations: the global step here)."""
    make, slots = KERAS[kind]
    weights = [keras.Variable(start[p]) for p in WEIGHTS]
    optimizer = make(rate)
    optimizer.build(weights)
    optimizer.iterations.assign(int(start["optimizers/all/iterations"]))
    for slot, attribute in slots.items():
        for variable, path in zip(getattr(optimizer, attribute), WEIGHTS, strict=True):
            variable.assign(start[f"optimizers/all/{slot}/{path}"])
    data = np.load(folder / "d.npz")
    for step in range(int(start["global_step"]), int(start["global_step"]) + steps):
        x, y = data["x"][step * BATCH:(step + 1) * BATCH], data["y"][step * BATCH:(step + 1) * BATCH]
        with tf.GradientTape() as tape:
            hidden = tf.tanh(x @ weights[0].value + weights[1].value)
            logits = hidden @ weights[2].value + weights[3].value
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        optimizer.apply_gradients(zip(tape.gradient(loss, [w.value for w in weights]), weights, strict=True))
    return {p: np.asarray(w.numpy()) for p, w in zip(WEIGHTS, weights, strict=True)}


def edit_and_resume(folder: Path, kind: str, old: str, new: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """2 steps at `old`, then the spec edited to `new` and 2 steps more; the resume's lines."""
    cli(["train", write_spec(folder, kind, old), "--steps", 2, "--quiet"], capsys)
    out = cli(["train", write_spec(folder, kind, new), "--resume", "--steps", 2, "--quiet"], capsys)
    return start_lines(out)


CASES = [  # (kind, rate before, rate after, the note's "(old -> new)", Keras' rate after)
    ("sgd", "0.05", "0.01", "(0.05 -> 0.01)", lambda: 0.01),  # constant -> constant
    ("adam", EXPONENTIAL, "0.02", "(0.025 -> 0.02)", lambda: 0.02),  # schedule -> constant: its step-1 rate was 0.025
    ("adagrad", "{schedule: piecewise_constant, boundaries: [1], values: [0.3, 0.1]}", "0.2", "(0.3 -> 0.2)",
     lambda: 0.2),
    ("rmsprop", "0.01", COSINE, "(0.01 -> cosine_decay: 0.01809017 at step 2)",  # constant -> schedule
     lambda: keras.optimizers.schedules.CosineDecay(0.02, 10)),
]


@pytest.mark.parametrize(("kind", "old", "new", "change", "keras_rate"), CASES, ids=[c[0] for c in CASES])
def test_an_edited_learning_rate_applies_on_resume_with_a_note(
        folder: Path, capsys: pytest.CaptureFixture[str], kind: str, old: str, new: str, change: str,
        keras_rate: Callable[[], Any]) -> None:
    lines = edit_and_resume(folder, kind, old, new, capsys)
    assert lines == ["resumed from run/ckpt-00000002 at step 2",
                         f"note: optimizers.all.learning_rate changed since ckpt-00000002 {change}{TAIL}"]
    expected = keras_steps(folder, values(folder / "run" / "ckpt-00000002"), kind, keras_rate(), 2)
    after = values(folder / "run" / "ckpt-00000004")
    for path in WEIGHTS:
        np.testing.assert_allclose(after[path], expected[path], rtol=0, atol=2e-6, err_msg=path)
    if not new.startswith("{"):  # a constant: what the run trained at and recorded, as the spec says
        assert after["optimizers/all/learning_rate"] == np.float32(new)
        assert f"\n    learning_rate: {new}  # " in (folder / "run" / "spec.resolved.yaml").read_text()


def test_the_old_rate_would_have_moved_the_weights_elsewhere(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The comparison above tells the two rates apart: Keras at the checkpoint's rate lands well outside its tolerance."""
    edit_and_resume(folder, "sgd", "0.05", "0.01", capsys)
    start, after = values(folder / "run" / "ckpt-00000002"), values(folder / "run" / "ckpt-00000004")
    kept = keras_steps(folder, start, "sgd", 0.05, 2)
    assert max(float(np.abs(after[p] - kept[p]).max()) for p in WEIGHTS) > 1e-3


@pytest.mark.parametrize("rate", ["0.05", EXPONENTIAL, "{schedule: exponential_decay, initial: 0.05, decay_steps: 3, "
                                  "decay_rate: 0.5, warmup_steps: 2}"], ids=["constant", "schedule", "warmup"])
def test_an_unchanged_rate_resumes_without_a_note(folder: Path, capsys: pytest.CaptureFixture[str], rate: str) -> None:
    spec = write_spec(folder, "sgd", rate)
    cli(["train", spec, "--steps", 0, "--quiet"], capsys)  # ckpt-0: the rate before any update
    assert start_lines(cli(["train", spec, "--resume", "--steps", 3, "--quiet"], capsys)) == [
        "resumed from run/ckpt-00000000 at step 0"]
    assert start_lines(cli(["train", spec, "--resume", "--steps", 1, "--quiet"], capsys)) == [
        "resumed from run/ckpt-00000003 at step 3"]


def test_a_set_of_the_rate_is_shown_on_the_resume_line_not_in_a_note(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(folder, "sgd", "0.05")
    cli(["train", spec, "--steps", 2, "--quiet"], capsys)
    out = cli(["train", spec, "--resume", "--steps", 1, "--quiet", "--set", "optimizers.all.learning_rate=0.01"], capsys)
    assert start_lines(out) == ["resumed from run/ckpt-00000002 at step 2 with --set optimizers.all.learning_rate=0.01"]
    assert values(folder / "run" / "ckpt-00000003")["optimizers/all/learning_rate"] == np.float32(0.01)
    # The kept --set wins over the spec's rate on later resumes, with no note (the checkpoint already holds it).
    out = cli(["train", spec, "--resume", "--steps", 1, "--quiet"], capsys)
    assert start_lines(out) == ["resumed from run/ckpt-00000003 at step 3 with --set optimizers.all.learning_rate=0.01 "
                                "(kept from the run)"]
    assert values(folder / "run" / "ckpt-00000004")["optimizers/all/learning_rate"] == np.float32(0.01)


def test_probe_on_resume_probes_at_the_specs_rate(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--probe --resume` takes the step --resume would: at the edited rate (0 here, which the probe notes)."""
    cli(["train", write_spec(folder, "adam", "0.01"), "--steps", 2, "--quiet"], capsys)
    out = cli(["train", write_spec(folder, "adam", "0"), "--probe", "--resume"], capsys)
    assert ("note: optimizer 'all' runs at learning rate 0 at step 2, so the |update| of its 4 weights is a zero step, "
            "not the size of a training update") in out.splitlines()


def test_the_runtime_schedule_is_the_generated_one() -> None:
    """resume_rates.spec_schedule builds each registered kind as render/train_plan.py writes it into train.py."""
    from specgen.ir.training import ScheduleIR
    from specgen.kinds.schedules import REGISTRY
    from specgen.render.train_plan import _schedule
    from specgen.runtime.commands.resume_rates import spec_schedule
    from specgen.runtime.lib import schedules

    specs = {"constant": {"initial": 0.1}, "exponential_decay": {"initial": 0.1, "decay_steps": 3, "decay_rate": 0.5},
             "cosine_decay": {"initial": 0.1, "decay_steps": 5}, "piecewise_constant": {
                 "boundaries": [2, 4], "values": [0.3, 0.2, 0.1]}}
    assert set(specs) == set(REGISTRY)  # a new kind: add it here
    for kind, args in specs.items():
        model = REGISTRY[kind].spec.model_validate({"schedule": kind, **args, "warmup_steps": 2})
        ir = ScheduleIR(kind, REGISTRY[kind].args(model), 2)
        generated = eval(_schedule(ir) or "", {"schedules": schedules})  # the call train.py holds, from our IR
        ours = spec_schedule(ir)
        for step in range(8):
            assert float(ours(tf.constant(step, tf.int64))) == float(generated(tf.constant(step, tf.int64))), kind
