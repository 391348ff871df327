"""Guards of `specgen train` around a run folder (the faults check's seven findings): one run per folder, refusals
that write nothing, Ctrl-C at any moment, no silent reinterpretation of saved state, damage named on the right
file, no silent step back past a damaged newer checkpoint.

Real `specgen train` runs of a tiny spec, in process (TensorFlow loads once): one run folder is trained once for
the module (ckpt-2, ckpt-4) and copied for each test (copytree keeps mtimes). Every refusal is checked for its
line, its exit status and the folder's files, byte for byte and mtime for mtime.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from specgen.cli import main

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = """\
specgen: 1
name: guards
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: out}
layers:
  - {name: flat, op: flatten}
  - {name: hidden, op: dense, units: 8}
  - {name: norm, op: batch_norm, momentum: 0.9}
  - {name: act, op: relu}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: ["*"], kind: adam, learning_rate: 0.01}}
train: {batch_size: 16, seed: 1, shuffle_buffer: 16, ema: {decay: 0.9}}
data:
  train: {npz: digits.npz, features: {image: x_train}, labels: {label: y_train}}
checkpoint: {dir: run, every_steps: 2, keep: 3}
"""
CKPT2, CKPT4 = "ckpt-00000002", "ckpt-00000004"
WAY_OUT = ("Nothing was changed. Undo the change to resume, or start a new run that restores only the model variables "
           f"from it: checkpoint.restore: [{{from: run/{CKPT4}}}] and another checkpoint.dir (docs/finetune.md)")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("guards")
    (folder / "spec.yaml").write_text(SPEC)
    shutil.copy(DIGITS, folder / "digits.npz")
    assert main(["train", str(folder / "spec.yaml"), "--steps", "4", "--quiet"]) == 0
    return folder


@pytest.fixture
def run(trained: Path, tmp_path: Path) -> Path:
    shutil.copytree(trained, tmp_path / "copy")
    return tmp_path / "copy" / "run"



def snapshot(folder: Path) -> dict[str, Any]:
    """Every entry under `folder`; for files, their bytes and mtime (what a refusal must leave as it was)."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else "folder"
            for p in sorted(folder.rglob("*"))}


def train(spec: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int | str | None, str, str]:
    """`specgen train` in process: (exit status, stdout, stderr); a SystemExit's code, or the exception's name when
    one escaped (old code let KeyboardInterrupt through: caught here so that it fails the test, not the session)."""
    try:
        code: int | str | None = main(["train", str(spec), "--quiet", *args])
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:  # KeyboardInterrupt included, on purpose
        code = type(exc).__name__
    out, err = capsys.readouterr()
    return code, out, err


def refused(spec: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line of a refused `--resume` (exit 1), checked to leave the run folder as it was."""
    run = spec.parent / "run"
    before = snapshot(run)
    code, out, err = train(spec, "--resume", "--steps", "1", *args, capsys=capsys)
    lines = err.strip().splitlines()
    assert (code, lines[1:]) == (1, ["1 error found"]), err
    assert "training" not in out
    assert snapshot(run) == before
    return lines[0]


# ---- finding 1: one `specgen train` per run folder ------------------------------------------------------------------


def held(folder: Path) -> int:
    """Lock the folder as another `specgen train` would (its own open file description)."""
    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_a_run_folder_held_by_another_train_is_refused_and_left_as_it_was(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fd = held(run)
    try:
        line = refused(run.parent / "spec.yaml", capsys)
    finally:
        os.close(fd)
    assert line == (f"{run}: error: the run folder is in use by another specgen train (pid {os.getpid()}); wait for "
                    "it to end, or train into another folder with --set checkpoint.dir=PATH. Nothing was changed.")


def test_a_new_run_into_a_held_folder_is_refused(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two new runs into one folder: the second finds the first's lock (here on a folder it made, still empty)."""
    other = run.parent / "other"
    other.mkdir()
    fd = held(other)
    try:
        code, _out, err = train(run.parent / "spec.yaml", "--steps", "1", "--set", f"checkpoint.dir={other}",
                                capsys=capsys)
    finally:
        os.close(fd)
    assert code == 1 and "the run folder is in use by another specgen train" in err, err
    assert list(other.iterdir()) == []


# ---- findings 2 and 5: a resume refused for a spec that reinterprets the checkpoint writes nothing ---------------


@pytest.mark.parametrize(("edit", "line"), [
    (("units: 8}", "units: 16}"), f"/variables.index: error: --resume: 'hidden/kernel' is float32[64, 8] in {CKPT4} "
     "but float32[64, 16] in this spec (21 more differences)"),
    (("kind: adam,", "kind: lion,"), "/meta.json:9:3: error: --resume: optimizer 'all' is lion in this spec but was "
     "adam when the checkpoint was saved: its saved state is adam's, and would be read as lion's (6 more differences)"),
    (("kind: adam,", "kind: adamw,"), "/meta.json:9:3: error: --resume: optimizer 'all' is adamw in this spec but was "
     "adam when the checkpoint was saved: its saved state is adam's, and would be read as adamw's;"),
    (("op: batch_norm, momentum: 0.9", "op: layer_norm"), f"/variables.index: error: --resume: {CKPT4} holds "
     "'norm/moving_mean', which this spec does not save: it would be dropped (1 more difference)"),
    ((", ema: {decay: 0.9}", ""), f"/variables.index: error: --resume: {CKPT4} holds 'ema/hidden/bias', which this "
     "spec does not save: it would be dropped (5 more differences)"),
], ids=["units", "adam to lion", "adam to adamw", "batch_norm to layer_norm", "ema removed"])
def test_a_resume_that_would_reinterpret_the_checkpoint_is_refused_and_writes_nothing(
        run: Path, edit: tuple[str, str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = run.parent / "spec.yaml"
    spec.write_text(spec.read_text().replace(*edit))
    said = refused(spec, capsys)
    assert said.startswith(f"{run / CKPT4}{line}"), said
    assert said.endswith(f"; the spec changed since {CKPT4} was saved. {WAY_OUT}"), said


def test_hyperparameters_still_change_on_resume(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = run.parent / "spec.yaml"
    spec.write_text(spec.read_text().replace("learning_rate: 0.01", "learning_rate: 0.002"))
    code, out, err = train(spec, "--resume", "--steps", "0", "--set", "train.batch_size=8", capsys=capsys)
    assert code == 0, err
    assert f"resumed from {run / CKPT4} at step 4 with --set train.batch_size=8" in out
    assert "note: the data settings changed" in out


def test_a_checkpoint_without_optimizer_kinds_is_compared_by_slots_and_says_so(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = run / CKPT4 / "meta.json"
    meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "optimizers"}))
    spec = run.parent / "spec.yaml"
    spec.write_text(spec.read_text().replace("kind: adam,", "kind: adamw,"))
    code, out, err = train(spec, "--resume", "--steps", "0", capsys=capsys)
    assert code == 0, err
    assert (f"note: {CKPT4} records no optimizer kinds (an older specgen saved it): --resume compared the names of "
            "their saved slots only, so a change of kind with the same slots (adam -> adamw) is not noticed") in out


def test_a_resume_on_other_training_data_says_so_and_keeps_the_first_record(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = json.loads((run / "provenance.json").read_text())
    with np.load(DIGITS) as digits:
        arrays = dict(digits)
    arrays["x_train"] = arrays["x_train"][::-1].copy()  # the same count: nothing else tells the change
    np.savez(run.parent / "digits.npz", **arrays)
    code, out, err = train(run.parent / "spec.yaml", "--resume", "--steps", "0", capsys=capsys)
    assert code == 0, err
    record = json.loads((run / "provenance.json").read_text())
    old, new = first["data"]["train"]["list"][0]["sha256"], record["data"]["train"]["list"][0]["sha256"]
    # The checkpoint's data position belongs to the old file: a new pass (tests/test_data_r10.py, checker round 10).
    assert (f"note: the data settings changed since ckpt-00000004 (the training files: {run.parent / 'digits.npz'} "
            f"changed (sha256 {old[:12]} -> {new[:12]})), so its saved data position does not apply: the training "
            "data starts a new pass here, shuffled with seed 5 (train.seed + step)") in out.splitlines()
    # The first start's record is kept: the history of starts, oldest first, each with the step it started at.
    assert [(s["step"], s["data"]["train"]["list"][0]["sha256"]) for s in record["starts"]] == [(0, old), (4, new)]
    # A later start keeps only what changed since the one before (`spec` too here: the run folder was copied).
    assert sorted(record["starts"][1]) == ["data", "spec", "step"]


# ---- findings 6 and 7: damage named on its own file; no silent step back -------------------------------------------


def test_a_garbled_variables_index_is_named_as_the_damaged_file(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = run / CKPT4 / "variables.index"
    data = bytearray(index.read_bytes())
    data[len(data) // 2] ^= 0xFF
    index.write_bytes(bytes(data))
    line = refused(run.parent / "spec.yaml", capsys)
    assert line.startswith(f"{index}: error: checkpoint {CKPT4} is unreadable: damaged (Unable to read file"), line
    assert line.endswith(f"the intact checkpoint beside it is {CKPT2}: specgen train {run.parent / 'spec.yaml'} "
                         f"--resume-from {run / CKPT2}")


@pytest.mark.parametrize("latest", [None, b"\xff\xfe\x00garbage"], ids=["latest missing", "latest garbled"])
def test_a_damaged_newest_checkpoint_is_never_stepped_back_from(
        run: Path, latest: bytes | None, capsys: pytest.CaptureFixture[str]) -> None:
    (run / CKPT4 / "meta.json").write_text("")
    (run / "latest").unlink()
    if latest is not None:
        (run / "latest").write_bytes(latest)
    spec = run.parent / "spec.yaml"
    assert refused(spec, capsys) == (
        f"{run / CKPT4 / 'meta.json'}: error: checkpoint {CKPT4} is unreadable: the file is empty. Nothing was changed; "
        f"the intact checkpoint beside it is {CKPT2}: specgen train {spec} --resume-from {run / CKPT2} (or move {CKPT4} "
        "out of the run folder, then --resume)")


def test_a_garbled_latest_is_called_damaged_not_missing(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "latest").write_bytes(b"\xff\xfe\x00")
    code, out, err = train(run.parent / "spec.yaml", "--resume", "--steps", "0", capsys=capsys)
    assert code == 0, err
    assert f"note: {run}/latest is damaged (not text); using {CKPT4}, the newest checkpoint there" in out


# ---- findings 3 and 4: Ctrl-C at any moment is one line and status 130 -------------------------------------------


@pytest.mark.usefixtures("python_default_sigint")
def test_ctrl_c_during_start_up_is_one_line_and_writes_nothing(
        run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.runtime import data

    real = data.read_stage

    def interrupted(*args: Any, **kwargs: Any) -> Any:  # Ctrl-C while the data is read, as a user would
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "read_stage", interrupted)
    before = snapshot(run)
    code, out, err = train(run.parent / "spec.yaml", "--resume", "--steps", "1", capsys=capsys)
    assert (code, err) == (130, f"\nspecgen train: interrupted before training started; the newest checkpoint is "
                                f"{run / CKPT4}: continue with --resume\n")
    assert snapshot(run) == before and "training" not in out


def test_ctrl_c_in_any_command_is_one_line_and_status_130(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.commands import validate

    def interrupted(args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(validate, "run", interrupted)  # main's parser looks `run` up when it is built
    try:
        status: Any = main(["validate", "spec.yaml"])
    except BaseException as exc:  # the old code let KeyboardInterrupt through
        status = type(exc).__name__
    assert (status, capsys.readouterr().err) == (130, "\nspecgen validate: interrupted (Ctrl-C); it stopped before "
                                                      "it finished\n")


@pytest.mark.usefixtures("python_default_sigint")
def test_ctrl_c_before_the_first_checkpoint_says_to_start_again(
        trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.runtime.commands.session import Session

    real = Session.updates

    def interrupted(self: Session, count: int) -> Any:
        os.kill(os.getpid(), signal.SIGINT)
        return real(self, count)

    monkeypatch.setattr(Session, "updates", interrupted)
    spec, fresh = trained / "spec.yaml", tmp_path / "fresh"
    code, _out, err = train(spec, "--steps", "3", "--set", f"checkpoint.dir={fresh}", capsys=capsys)
    # Stopped after the first chunk of updates (to step 2), before its checkpoint was saved.
    assert code == 130 and err.endswith(f"\n\nspecgen train: interrupted at step 2; no checkpoint was saved yet: start "
                                        f"the run again with specgen train {spec} --set checkpoint.dir={fresh} (without "
                                        "--resume)\n"), err
    assert not any(p.name.startswith("ckpt-") for p in fresh.iterdir())
    monkeypatch.undo()
    code, out, err = train(spec, "--steps", "1", "--set", f"checkpoint.dir={fresh}", capsys=capsys)  # the advice works
    assert code == 0 and "started a new run" in out, err


TENSORFLOW_LIBRARIES = ("libtensorflow_framework", "_pywrap_tensorflow_internal")


def test_ctrl_c_while_the_command_starts_is_one_line_in_a_real_process(tmp_path: Path) -> None:
    """A real SIGINT while TensorFlow imports (the spec read): no traceback, status 130 (not killed by SIGINT).
    Wherever it lands (the child may be further on by then), the answer is one line. Sent once the child has mapped
    TensorFlow's library (/proc/PID/maps), so inside the train command and past cli.main's handler whatever the
    load: a fixed delay could land in Python's start-up, a bare KeyboardInterrupt no command can answer."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    shutil.copy(DIGITS, tmp_path / "digits.npz")
    process = subprocess.Popen([sys.executable, "-m", "specgen", "train", "spec.yaml", "--quiet"], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                               env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})
    deadline = time.monotonic() + 120
    while not any(name in Path(f"/proc/{process.pid}/maps").read_text() for name in TENSORFLOW_LIBRARIES):
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "the child did not import TensorFlow in 120 s"
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line and not line.startswith(("WARNING: All log", "I0000", "W0000",
                                                                                 "E0000"))]
    assert process.returncode == 130 and len(lines) == 1, err
    assert lines[0].startswith("specgen train: interrupted"), err
