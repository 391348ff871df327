"""`kind: levenberg_marquardt` (issue 12 part 4): the generated trainer against scipy.optimize.least_squares
(method="lm", MINPACK's lmder, float64, same start), against Adam on the same full batch, its checkpointed
damping, and the validation refusals.

Fits and their float64 numpy residuals/Jacobians: tests/lm_fits.py. Losses are the mean squared residual in
float64 of the weights each trainer ends with.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from lm_fits import DECAY, LOGISTIC, SINE, Fit, Trainer, mse, scipy_at, write_fit

from specgen.cli import main
from specgen.ir.training import keys

least_squares = pytest.importorskip("scipy.optimize").least_squares
ROOT = Path(__file__).resolve().parents[1]
LM = "{kind: levenberg_marquardt}"
ADAM = "{kind: adam, learning_rate: 0.05}"  # the best of 0.01 / 0.05 / 0.1 on these fits (bench/RESULTS.md)


def data(fit: Fit) -> tuple[np.ndarray, np.ndarray]:
    """The fit's data as the trainer reads it (float32), in float64."""
    x, y = fit.data(np.random.default_rng(0))
    return x.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64)


def epochs_to(trainer: Trainer, x: np.ndarray, y: np.ndarray, target: float, cap: int, chunk: int = 25) -> int | None:
    """The first multiple of `chunk` epochs after which the loss is at or below `target`; None within `cap`."""
    while trainer.epochs < cap:
        if mse(trainer.fit, trainer.train(chunk), x, y) <= target:
            return trainer.epochs
    return None


@pytest.mark.parametrize("fit", [DECAY, LOGISTIC], ids=lambda f: f.name)
def test_well_posed_fits_reach_scipys_loss_in_far_fewer_epochs_than_adam(tmp_path: Path, fit: Fit) -> None:
    x, y = data(fit)
    lm = Trainer(write_fit(tmp_path / "lm", fit, LM), fit)
    start = lm.params()
    reference = least_squares(fit.residuals, start, jac=fit.jacobian, method="lm", args=(x, y))
    best = 2 * reference.cost / len(y)  # scipy's cost is half the sum of squares
    assert reference.success
    within = next(e for e in range(1, 31) if mse(fit, lm.train(1), x, y) <= best * 1.01)
    final = mse(fit, lm.train(30 - lm.epochs), x, y)
    assert abs(final - best) <= 1e-6 * best, (final, best)
    adam = Trainer(write_fit(tmp_path / "adam", fit, ADAM), fit)
    np.testing.assert_array_equal(adam.params(), start)  # the same seed, the same start
    adam_within = epochs_to(adam, x, y, best * 1.01, cap=40 * within)
    # Measured: LM within 1% of the optimum after 9 (decay) and 4 (logistic) epochs, Adam after 200 and 400 (read
    # every 25 epochs): 22x and 100x; 15x leaves Adam's 25-epoch reading grain as margin.
    assert adam_within is None or adam_within >= 15 * within, (within, adam_within)


def test_tanh_net_stays_within_5_percent_of_scipy_at_equal_jacobian_evaluations(tmp_path: Path) -> None:
    x, y = data(SINE)
    lm = Trainer(write_fit(tmp_path / "lm", SINE, LM), SINE)
    start = lm.params()
    # Equal whole iterations (Jacobians): lmder stopped on the try it kept in its iteration N (scipy_at).
    for iterations in (30, 60, 120):
        reference = scipy_at(SINE, start, x, y, iterations)
        scipy_loss = 2 * reference.cost / len(y)
        ours = mse(SINE, lm.train(reference.njev - lm.epochs), x, y)
        assert lm.state(keys.iterations("fit")) == reference.njev == iterations
        # Measured (seed 0): {MEASURED}. 5%: the spread float32 rounding alone gives lmder on this 49-weight fit
        # (bench/RESULTS.md), well below the 8.5% gap of Marquardt's fixed factor 10.
        assert abs(ours - scipy_loss) <= 0.05 * scipy_loss, (reference.njev, ours, scipy_loss)
        if iterations == 30:
            first = ours
    adam = Trainer(write_fit(tmp_path / "adam", SINE, ADAM), SINE)
    np.testing.assert_array_equal(adam.params(), start)
    # Adam does not reach LM's loss after 30 iterations in 1500 epochs (bench/RESULTS.md).
    assert epochs_to(adam, x, y, first, cap=1500) is None


def test_damping_step_bound_and_scales_are_checkpointed_and_resumed(tmp_path: Path) -> None:
    from specgen.pipeline import build
    from specgen.runtime.commands.resume import Options, prepare
    from specgen.runtime.commands.session import Session
    from specgen.spec.load import load_spec

    spec = write_fit(tmp_path, SINE, "{kind: levenberg_marquardt, initial_damping: 0.5}")
    first = Trainer(spec, SINE)
    first.train(3)
    saved = {k: v.numpy() for k, v in first.session.trainer.state_by_path().items()}
    assert saved[keys.step_bound("fit")] > 0 and saved[keys.damping("fit")] >= 0
    assert (saved[keys.slot_prefix("fit", "scale") + "/out/kernel"] > 0).all()  # D: J's column norms
    first.session.save()
    straight = first.train(3)
    options = Options(resume=True, steps=3, quiet=True)  # 3 more: past the run's end (1 epoch), which --resume keeps
    begin = prepare(load_spec(spec), options)
    resumed = Session(build(begin.loaded), options, begin)
    resumed.start()
    state = resumed.trainer.state_by_path()
    assert set(state) == set(saved)
    for key, value in saved.items():
        np.testing.assert_array_equal(state[key].numpy(), value, err_msg=key)
    # The same three iterations again from the checkpoint: the same weights, bit for bit (one process, one CPU).
    resumed.updates(3)
    variables = resumed.model.variables_by_path()
    again = np.concatenate([variables[p].numpy().astype(np.float64).ravel() for p in SINE.paths])
    np.testing.assert_array_equal(again, straight)


def test_report_lists_the_damping_in_the_optimizer_collection(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(write_fit(tmp_path, LOGISTIC, LM))]) == 0
    out = capsys.readouterr().out
    assert "optimizers/fit/damping           []      float32  optimizer" in out
    assert "optimizers/fit/step_bound        []      float32  optimizer" in out
    assert "optimizers/fit/scale/out/kernel  [1, 1]  float32  optimizer" in out
    assert "learning_rate" not in out
    assert "fit        levenberg_marquardt" in out


BAD = """specgen: 1
name: bad
inputs:
  x: {shape: [1], dtype: float32}
outputs:
  y: out
layers:
  - {name: drop, op: dropout, input: x, rate: 0.1}
  - {name: out, op: dense, units: 1}
loss: {kind: mean_absolute_error, predictions: y, labels: target}
optimizers:
  fit: {kind: levenberg_marquardt, variables: out/kernel}
  other: {kind: sgd, learning_rate: 0.1, variables: out/bias}
train: {batch_size: 64, accumulate: 2, clip: {global_norm: 1.0}}
"""


def validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> list[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 1
    return [line.replace(str(path), "spec.yaml") for line in capsys.readouterr().err.splitlines()]


def test_refusals_name_the_place_and_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = validate(tmp_path, capsys, BAD)
    this = "levenberg_marquardt optimizer 'fit'"
    assert err == [
        f"spec.yaml:8:22: error: layer 'drop': {this} cannot train through dropout: its random mask changes the "
        "function between the trial evaluations; remove the layer or choose another optimizer",
        f"spec.yaml:10:14: error: {this} needs a squared-error loss: its step solves for the residual vector "
        "(predictions - labels) whose mean square is the loss; received loss kind 'mean_absolute_error', expected "
        "'mean_squared_error'",
        f"spec.yaml:13:3: error: optimizer 'other' cannot train beside {this}: each of its iterations tries damped "
        "steps until the loss falls, which another update in the same step would confound; train those weights in "
        "another run, or freeze them",
        f"spec.yaml:14:21: error: {this} needs 'batch_size: full': a Gauss-Newton step is solved for one fixed set "
        "of residuals, and keeping it or not compares the loss on those same examples; received 64",
        f"spec.yaml:14:37: error: {this} takes no accumulation: with 'batch_size: full' every iteration already "
        "sees the whole training set; received 2, expected 1 (or leave it out)",
        f"spec.yaml:14:40: error: {this} takes no clip: its step is a damped Gauss-Newton solve, not a gradient "
        "step, and a larger damping already shortens it; remove train.clip",
        "6 errors found",
    ], "\n".join(err)


@pytest.mark.parametrize(("key", "why"), [
    ("learning_rate: 0.1", "learning rate: the damping sets the step length"),
    ("clip: {value: 1.0}", "clipping: the step is a damped Gauss-Newton solve"),
    ("weight_decay: 0.01", "weight decay: each step solves the damped normal equations"),
    ("damping_factor: 10", "damping_factor: the damping follows MINPACK's trust-region rule"),
])
def test_keys_it_does_without_are_refused_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          key: str, why: str) -> None:
    text = write_fit(tmp_path / "fit", LOGISTIC, f"{{kind: levenberg_marquardt, {key}}}").read_text()
    err = validate(tmp_path, capsys, text)
    column = 36 + len(key.split(":")[0]) + 2  # the value, after `fit: {kind: levenberg_marquardt, <key>: `
    assert err == [err[0], "1 error found"] and err[0].startswith(f"spec.yaml:11:{column}: error: "), err
    assert f"{key.split(':')[0]}: levenberg_marquardt takes no {why}" in err[0]


def test_batch_size_full_or_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = write_fit(tmp_path / "fit", LOGISTIC, LM).read_text()
    err = validate(tmp_path, capsys, text.replace("batch_size: full", "batch_size: fulll"))
    assert err == ["spec.yaml:12:21: error: batch_size: received 'fulll', expected 'full'; did you mean 'full'?",
                   "1 error found"]


@pytest.mark.parametrize(("loss", "where", "why"), [
    ("loss:\n  - {kind: mean_squared_error, predictions: y, labels: target}\n  - {kind: l2, variables: trainable, "
     "weight: 0.01}\n", "9:1", "needs one squared-error loss term: its step solves for one residual vector "
     "(predictions - labels); received 2 terms"),
    ("loss: {kind: mean_squared_error, predictions: y, labels: target, weight: 2}\n", "9:74",
     "minimizes the sum of squared residuals, which a weight does not change; received weight 2, remove it"),
    ("loss: [{kind: huber, predictions: y, labels: target}]\n", "9:15",
     "needs a squared-error loss: its step solves for the residual vector (predictions - labels) whose mean "
     "square is the loss; received loss kind 'huber', expected 'mean_squared_error'"),
])
def test_loss_terms_it_cannot_solve_for(tmp_path: Path, capsys: pytest.CaptureFixture[str], loss: str, where: str,
                                        why: str) -> None:
    text = write_fit(tmp_path / "fit", LOGISTIC, LM).read_text()
    text = text.replace("loss: {kind: mean_squared_error, predictions: y, labels: target}\n", loss)
    assert validate(tmp_path, capsys, text) == [
        f"spec.yaml:{where}: error: levenberg_marquardt optimizer 'fit' {why}", "1 error found"]


def test_pruning_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = write_fit(tmp_path / "fit", SINE, LM).read_text()
    text += "prune: {variables: hidden/kernel, schedule: {kind: constant_sparsity, sparsity: 0.5}}\n"
    assert validate(tmp_path, capsys, text) == [
        "spec.yaml:17:1: error: levenberg_marquardt optimizer 'fit' cannot prune: the masks are applied around each "
        "gradient update, and its trial steps would move masked weights; prune in another run", "1 error found"]


def test_probe_says_why_it_does_not_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", str(write_fit(tmp_path, LOGISTIC, LM)), "--probe"]) == 1
    assert capsys.readouterr().err.endswith(
        "error: --probe shows one gradient update; a levenberg_marquardt iteration is a damped solve over the whole "
        "training set: train a few epochs and read the loss instead\n1 error found\n")


def test_max_tries_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 17: 2147483647 tries never finished one iteration.
    text = write_fit(tmp_path / "fit", LOGISTIC, "{kind: levenberg_marquardt, max_tries: 2147483647}").read_text()
    assert validate(tmp_path, capsys, text) == [
        "spec.yaml:11:47: error: max_tries: received 2147483647, expected a value <= 100", "1 error found"]


def test_a_stall_is_logged_once_and_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_fit(tmp_path, LOGISTIC, "{kind: levenberg_marquardt, max_tries: 100}")
    trainer = Trainer(spec, LOGISTIC)
    settled = trainer.train(12)
    err = capsys.readouterr().err
    notes = re.findall(r"note: levenberg_marquardt optimizer 'fit': stalled at step (\d+): (.*)\n", err)
    assert [why for _, why in notes] == [
        "the step bound reached 1.2e-07·‖D·w‖ (float32's resolution of the weights) or the gradient is 0, so no "
        "step can lower the loss: a minimum, or a stationary point; the weights stay, and later iterations change "
        "nothing"], err
    # lmder converges in 6 iterations from here (scipy); measured: the 7th stalls. Which one, in 7-12, depends on
    # float32's last bits at the minimum, which differ between CPUs.
    assert 7 <= int(notes[0][0]) <= 12
    np.testing.assert_array_equal(trainer.train(5), settled)
    assert "stalled" not in capsys.readouterr().err  # said once, not once an iteration


def test_ctrl_c_during_training_stops_at_once_with_one_line(tmp_path: Path) -> None:
    spec = write_fit(tmp_path, SINE, "{kind: levenberg_marquardt, max_tries: 100}")
    spec.write_text(spec.read_text().replace("epochs: 1,", "epochs: 1000000,").replace("every_steps: 100000",
                                                                                       "every_steps: 5"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen([sys.executable, "-m", "specgen", "train", str(spec), "--quiet"], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), line) for line in process.stderr))
    reader.start()
    latest = tmp_path / "run" / "latest"
    deadline = time.monotonic() + 240
    while not latest.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)  # inside the iterations now, past the first checkpoint
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    process.wait(timeout=120)  # TensorFlow's own shutdown follows: measured 9 s on 2 cores shared by 9 processes
    reader.join()
    assert process.returncode == 130, lines
    assert not any("Traceback" in line for _, line in lines), lines
    said, line = lines[-1]
    # 5 s: an iteration of this 49-weight fit takes milliseconds; measured: the line came 0.01 s after the signal.
    assert said - sent < 5.0
    match = re.fullmatch(r"specgen train: interrupted at step (\d+); the newest checkpoint is run/ckpt-(\d+): "
                         r"continue with --resume\n", line)
    assert match, line
    saved = int(match[2])
    assert saved % 5 == 0 and 5 <= saved <= int(match[1])
    assert latest.read_text().strip() == f"ckpt-{saved:08d}"  # the checkpoint named is the whole, latest one
    assert main(["train", str(spec), "--resume", "--steps", "1", "--quiet"]) == 0
    assert (tmp_path / "run" / f"ckpt-{saved + 1:08d}").is_dir()


def test_an_iteration_that_keeps_no_step_says_so_and_leaves_the_weights(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # One try a step: the first, within lmder's first bound 100·‖D·w‖, is a long Gauss-Newton step on this tanh net.
    trainer = Trainer(write_fit(tmp_path, SINE, "{kind: levenberg_marquardt, max_tries: 1}"), SINE)
    start = trainer.params()
    np.testing.assert_array_equal(trainer.train(1), start)
    assert capsys.readouterr().err.endswith(
        "note: levenberg_marquardt optimizer 'fit': step 1 rejected: none of its 1 tries lowered the loss enough; "
        "the weights stay and the next iteration tries shorter steps\n")
    assert trainer.state(keys.iterations("fit")) == 1
