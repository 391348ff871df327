"""Round 13's training findings: the batch-norm share counts training batches under `train.accumulate` in
`specgen report` as `specgen train` does, and a run that trains nothing gets no momentum advice (F2); `--probe`
says a weight did not move because its learning rate is 0, not that its gradient vanished (F1); a mapping whose keys
are numbers under a key the spec does not have is reported as that unknown key (F3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specgen.cli import main
from specgen.ir import lints
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parents[1]

# --- F2: batch-norm momentum counted in training batches -------------------------------------------------------

BN = """specgen: 1
name: bn
inputs: {x: {shape: [6]}}
outputs: {logits: out}
layers:
  - {name: h1, op: dense, input: x, units: 8}
  - {name: bn, op: batch_norm, momentum: MOMENTUM}
  - {name: out, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  a: {kind: sgd, learning_rate: 0.1}
train: {batch_size: 8, accumulate: ACCUMULATE}
data: {train: {npz: d.npz, features: {x: x}, labels: {label: y}}}
"""


def _bn(momentum: float = 0.99, accumulate: int = 2) -> str:
    return BN.replace("MOMENTUM", str(momentum)).replace("ACCUMULATE", str(accumulate))


def test_the_report_counts_the_training_batches_an_update_takes_under_accumulate() -> None:
    """0.99^(100 x 2) = 13.40%, as the statistics move once per micro-batch (Keras' BatchNormalization); was 36.60%."""
    ir = build_ir(load_spec_text(_bn()))
    assert lints.momentum_note(ir) == (
        "batch-norm momentum 0.99 ('bn'): the moving statistics still hold 13.40% of their initial values after "
        "100 updates (200 training batches at accumulate 2), 0.00% after 1000 (2000 batches)")
    assert lints.momentum_note(build_ir(load_spec_text(_bn(accumulate=1)))) == (
        "batch-norm momentum 0.99 ('bn'): the moving statistics still hold 36.60% of their initial values after "
        "100 updates, 0.00% after 1000")


def test_the_report_and_the_train_warning_agree() -> None:
    """One function counts for both: 100 updates of accumulate 2 at momentum 0.999 hold 81.86% (train: 82%)."""
    ir = build_ir(load_spec_text(_bn(0.999)))
    assert lints.momentum_note(ir, (100,)) == (
        "batch-norm momentum 0.999 ('bn'): the moving statistics still hold 81.86% of their initial values after "
        "100 updates (200 training batches at accumulate 2)")
    assert lints.momentum_warnings(ir, 100, accumulate=2) == [
        "warning: batch-norm momentum 0.999 ('bn'): after the 200 planned training batches (100 updates x "
        "accumulate 2) the moving statistics still hold 82% of their initial values (mean 0, variance 1), so "
        "evaluation and export normalize with mostly wrong statistics; momentum 0.985 or lower leaves under 5%"]
    assert lints.held_share(0.999, 100, 2) == pytest.approx(0.999 ** 200)


def test_the_report_prints_the_shipped_specs_share(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/specs/digits_resnet.yaml trains with accumulate 2 (docs/cli.md shows this line)."""
    assert main(["report", str(ROOT / "examples/specs/digits_resnet.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("batch-norm momentum")] == [
        "batch-norm momentum 0.99 ('block/bn'): the moving statistics still hold 13.40% of their initial values "
        "after 100 updates (200 training batches at accumulate 2), 0.00% after 1000 (2000 batches)"]


def test_no_momentum_advice_for_no_update() -> None:
    """`--steps 0`: 'after the 0 planned training batches ... momentum 0 or lower leaves under 5%' was void."""
    ir = build_ir(load_spec_text(_bn()))
    assert lints.momentum_warnings(ir, 0, accumulate=2) == []
    assert lints.momentum_warnings(ir, 0) == []


def _data(folder: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(folder / "d.npz", x=rng.standard_normal((50, 6)).astype(np.float32),
             y=rng.integers(0, 3, 50).astype(np.int32))


def _train(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "specgen", "train", "bn.yaml", *args]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600, check=False)


def test_a_run_that_trains_nothing_warns_nothing(tmp_path: Path) -> None:
    """A new run of --steps 0 and a resumed one of --epochs 0 move no statistics: no warning; a run of 2 updates
    does warn."""
    pytest.importorskip("tensorflow")
    _data(tmp_path)
    (tmp_path / "bn.yaml").write_text(_bn())
    warned = "warning: batch-norm momentum 0.99 ('bn'): after the 4 planned training batches (2 updates x accumulate 2)"
    fresh = _train(tmp_path, "--steps", "0")
    assert fresh.returncode == 0 and "batch-norm" not in fresh.stderr, fresh.stderr
    two = _train(tmp_path, "--fresh", "--steps", "2")
    assert two.returncode == 0 and warned in two.stderr, two.stderr
    resumed = _train(tmp_path, "--resume", "--epochs", "0")
    assert resumed.returncode == 0 and "batch-norm" not in resumed.stderr, resumed.stderr
    assert "training bn: step 2 -> 2 (3 updates per epoch, 50 examples)" in resumed.stdout.splitlines()


# --- F1: --probe at learning rate 0 ----------------------------------------------------------------------------


def test_a_zero_update_at_rate_zero_is_not_vanishing() -> None:
    pytest.importorskip("tensorflow")
    from specgen.runtime.commands.probe import VariableRow

    tiny = VariableRow("h1/bias", (8,), 0.0, 2.8e-8, 0.0, 0.0, "a")
    assert tiny.flag(1.0, 0) == "near zero (under 1e-05 of the largest); no update: learning rate 0 at step 0"
    assert VariableRow("h1/kernel", (6, 8), 2.5, 0.7, 0.0, 0.0, "a").flag(1.0, 3) == (
        "no update: learning rate 0 at step 3")
    # At a non-zero rate the step rounded away: still `vanishing`; a gradient that is exactly 0 says so first.
    assert VariableRow("sat/kernel", (5, 4), 2e3, 1.1e-7, 0.0, 0.1, "a").flag(1.0) == (
        "vanishing: update is exactly 0 (gradient under 1e-05 of the largest)")
    assert VariableRow("dead/kernel", (5, 4), 2.0, 0.0, 0.0, 0.0, "a").flag(1.0) == "ZERO gradient"
    # A momentum's velocity moves a weight at rate 0 (from a checkpoint): its gradient is judged as usual.
    assert VariableRow("h1/kernel", (6, 8), 2.5, 0.7, 0.15, 0.0, "a").flag(1.0) == ""


PROBED = """specgen: 1
name: p
inputs: {x: {shape: [6]}}
outputs: {logits: out}
layers:
  - {name: h1, op: dense, input: x, units: 8}
  - {name: bn, op: batch_norm, momentum: 0.9}
  - {name: out, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  a: {variables: ["h1/*", "bn/*"], kind: sgd, learning_rate: {schedule: constant, initial: 0.1, warmup_steps: 2}}
  b: {variables: ["out/*"], kind: adam, learning_rate: 0.01}
train: {batch_size: 8}
data: {train: {npz: d.npz, features: {x: x}, labels: {label: y}}}
"""


def test_the_probe_flags_the_weights_its_warm_up_holds_still(tmp_path: Path) -> None:
    """The checker's spec: h1/bias (before a batch norm: a rounding-noise gradient) read `vanishing: update is
    exactly 0` at the warm-up's rate 0, sending the user to the init-scale lint for a saturation that is not there."""
    pytest.importorskip("tensorflow")
    from specgen.pipeline import build
    from specgen.runtime.commands import probe as probing
    from specgen.spec.load import load_spec

    _data(tmp_path)
    (tmp_path / "p.yaml").write_text(PROBED)
    result = probing.probe(build(load_spec(tmp_path / "p.yaml")))
    largest = max(r.grad_norm or 0.0 for r in result.variables)
    flags = {r.path: r.flag(largest, result.step) for r in result.variables}
    assert flags == {"h1/kernel": "no update: learning rate 0 at step 0",
                     "h1/bias": "near zero (under 1e-05 of the largest); no update: learning rate 0 at step 0",
                     "bn/gamma": "no update: learning rate 0 at step 0", "bn/beta": "no update: learning rate 0 at step 0",
                     "out/kernel": "", "out/bias": ""}
    lines = probing.format_probe(result).splitlines()
    assert "4 of 6 trained variables flagged" in lines
    assert ("note: optimizer 'a' runs at learning rate 0 at step 0 (its warm-up of 2 steps starts from 0), so the "
            "|update| of its 4 weights is a zero step, not the size of a training update") in lines


def test_the_note_says_when_a_velocity_moves_weights_at_rate_zero() -> None:
    """sgd with momentum resumed at rate 0: the weights still move (docs/training.md); the note said 'zero step'."""
    pytest.importorskip("tensorflow")
    from specgen.runtime.commands import probe as probing

    rows = (probing.VariableRow("h1/kernel", (6, 8), 2.5, 0.36, 0.15, 0.0, "a"),
            probing.VariableRow("out/kernel", (8, 3), 2.0, 0.77, 0.03, 0.01, "b"))
    result = probing.Probe("the checkpoint ckpt-00000003", 8, 0.9, rows, (), 3, (("a", 0, 1),))
    lines = probing.format_probe(result).splitlines()
    assert ("note: optimizer 'a' runs at learning rate 0 at step 3, so the |update| of its 1 weight is only what its "
            "momentum carries over, not a gradient step") in lines
    assert "all 2 trained variables have a non-zero gradient" in lines


# --- F3: keys that are not names under an unknown key ----------------------------------------------------------

BASE = """specgen: 1
name: cw
inputs: {x: {shape: [6]}}
outputs: {logits: out}
layers:
  - {name: out, op: dense, input: x, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  a: {kind: sgd, learning_rate: 0.1}
train: {batch_size: 8}
data: {train: {npz: d.npz, features: {x: x}, labels: {label: y}}}
"""

TRAIN_KEYS = ("'accumulate', 'batch_size', 'clip', 'distribute', 'ema', 'epochs', 'jit_compile', 'metrics', "
              "'precision', 'seed', 'shuffle_buffer' or 'tracking'")


def _validate(folder: Path, old: str, new: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert old in BASE
    (folder / "v.yaml").write_text(BASE.replace(old, new, 1))
    assert main(["validate", str(folder / "v.yaml")]) == 1
    return [line.replace(str(folder) + "/", "") for line in capsys.readouterr().err.splitlines()]


@pytest.mark.parametrize(("old", "new", "expected"), [
    # the checker's: Keras' class_weight spelling (was two 'a mapping key: received 0 (a number)' lines)
    ("train: {batch_size: 8}", "train: {batch_size: 8, class_weight: {0: 2.0, 1: 1.0}}",
     f"v.yaml:10:24: error: unknown key 'class_weight'; expected one of {TRAIN_KEYS}"),
    ("train: {batch_size: 8}", "train: {batch_size: 8, class_weights: {true: 2.0, ~: 1.0}}",
     f"v.yaml:10:24: error: unknown key 'class_weights'; expected one of {TRAIN_KEYS}"),
    ("labels: label}", "labels: label, class_weights: {0: 2.0}}",
     "v.yaml:7:75: error: unknown key 'class_weights'; did you mean 'weight'?"),
    ("loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}",
     "loss: [{kind: sparse_softmax_cross_entropy, logits: logits, labels: label, label_smoothing: {0: 0.1}}]",
     "v.yaml:7:76: error: unknown key 'label_smoothing'; expected one of 'kind', 'labels', 'logits', 'name' or "
     "'weight'"),
    ("units: 3}", "units: 3, weights: {0: 1}}",
     "v.yaml:6:48: error: unknown key 'weights'; expected one of 'activation', 'bias_init', 'input', 'kernel_init', "
     "'name', 'op', 'share', 'units' or 'use_bias' (in layer 'out')"),
    ("learning_rate: 0.1}", "learning_rate: {schedule: constant, initial: 0.1, extra: {0: 1}}}",
     "v.yaml:9:68: error: unknown key 'extra'; expected one of 'initial', 'schedule' or 'warmup_steps'"),
    ("npz: d.npz,", "npz: d.npz, weights: {0: {1: 2}},",
     "v.yaml:11:28: error: unknown key 'weights'; expected one of 'augment', 'features', 'labels' or 'npz'"),
])
def test_number_keys_under_an_unknown_key_report_the_unknown_key(
        old: str, new: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _validate(tmp_path, old, new, capsys) == [expected, "1 error found"]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("train: {batch_size: 8}", "train: {0: 2.0}",
     "v.yaml:10:9: error: a mapping key: received 0 (a number), expected a name (quote it ('0') if you mean the text)"),
    ("features: {x: x}", "features: {x: x, 0: y}",
     "v.yaml:11:45: error: a mapping key: received 0 (a number), expected a name (quote it ('0') if you mean the "
     "text)"),
    ("learning_rate: 0.1}", "learning_rate: {schedule: constant, initial: 0.1, warmup_steps: {0: 1}}}",
     "v.yaml:9:83: error: a mapping key: received 0 (a number), expected a name (quote it ('0') if you mean the "
     "text)"),
])
def test_number_keys_where_the_spec_has_the_key_are_still_named(
        old: str, new: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under a key the spec has (or at a mapping whose keys are free), the key that is not a name is the mistake."""
    assert _validate(tmp_path, old, new, capsys) == [expected, "1 error found"]


def test_an_unknown_key_in_a_base_is_reported_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "b1.yaml").write_text(BASE.replace("train: {batch_size: 8}",
                                                   "train: {batch_size: 8, class_weight: {0: 2.0}}"))
    (tmp_path / "child.yaml").write_text("extends: b1.yaml\nname: child\n")
    assert main(["validate", str(tmp_path / "child.yaml")]) == 1
    err = capsys.readouterr().err.replace(str(tmp_path) + "/", "").splitlines()
    assert err == [f"b1.yaml:10:24: error: unknown key 'class_weight'; expected one of {TRAIN_KEYS} (via "
                   "child.yaml:1:10)", "1 error found"]
