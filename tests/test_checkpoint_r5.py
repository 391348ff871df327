"""Checkpoint findings of the fifth red-team round: what orders checkpoints, SIGTERM, TensorFlow's state file after
a kill, a kill's temporary files, and the wording of a few lines.

1. A meta.json whose `serial` (or `step`) is not what specgen writes made the newest checkpoint look like the
   oldest: --resume and export stepped back with a false note, and the next save's pruning deleted it.
2. SIGTERM ended `specgen train` at once: no line, no clean stop, a tracked MLflow run left RUNNING.
3. A kill between `latest` and TensorFlow's `checkpoint` file left the state file naming an older checkpoint.
4. write_atomic's temporaries a kill left in the run folder survived a resume (the 60 s rule is for shared folders).
5. A full disk named TensorFlow's internal file; restore paths printed `a/../b`; the write probe changed folder times.

Real TensorFlow on a tiny MLP, in process where it can be (one trained run, copied per test); SIGTERM in a real
`specgen train` process.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from specgen.cli import main  # noqa: E402
from specgen.runtime.checkpoint import CheckpointFolder, resolve_prefix  # noqa: E402
from specgen.runtime.commands.session import _published  # noqa: E402
from specgen.runtime.integrity import Malformed, read_meta  # noqa: E402
from specgen.runtime.interrupt import Interrupts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: r5_mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 8, activation: relu}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: sgd, momentum: 0.9, learning_rate: 0.05}}
train: {{batch_size: 8, seed: 1, shuffle_buffer: 200}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
checkpoint: {{dir: run, every_steps: 4, keep: 3}}
"""
CKPT4, CKPT8 = "ckpt-00000004", "ckpt-00000008"


def cli(args: list[Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[1] == "1 error found", err
    return lines[0]


def snapshot(folder: Path) -> dict[str, Any]:
    """Every entry under `folder` and the folder itself: files by bytes and mtime, folders by mtime."""
    entries = {".": ("folder", folder.stat().st_mtime_ns)}
    for path in sorted(folder.rglob("*")):
        what = path.read_bytes() if path.is_file() else "folder"
        entries[str(path.relative_to(folder))] = (what, path.stat().st_mtime_ns)
    return entries


def weights(checkpoint: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(checkpoint / "variables"))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """spec.yaml and run/ after 8 steps: ckpt-4 (serial 1) and ckpt-8 (serial 2), `latest` naming ckpt-8."""
    folder = tmp_path_factory.mktemp("base")
    (folder / "spec.yaml").write_text(SPEC)
    assert main(["train", str(folder / "spec.yaml"), "--steps", "8", "--quiet"]) == 0
    return folder


@pytest.fixture
def run(base: Path, tmp_path: Path) -> Path:
    shutil.copytree(base, tmp_path / "copy")
    return tmp_path / "copy" / "run"


def spec_of(run: Path) -> Path:
    return run.parent / "spec.yaml"


# ---- 1. a malformed `serial` or `step` is reported at the key; nothing is chosen past it or pruned ---------------

def _without(key: str) -> Callable[[str], str]:
    return lambda text: re.sub(rf'\n\s*"{key}": [^\n]*,', "", text)


BAD_SERIAL: dict[str, tuple[Callable[[str], str], str]] = {
    "missing": (_without("serial"), "nothing (the key is missing)"),
    "misspelt": (lambda text: text.replace('"serial"', '"seriam"'), "nothing (the key is missing)"),
    "-1": (lambda text: text.replace('"serial": 2', '"serial": -1'), "-1 (int)"),
    "0": (lambda text: text.replace('"serial": 2', '"serial": 0'), "0 (int)"),
    "string": (lambda text: text.replace('"serial": 2', '"serial": "2"'), "'2' (str)"),
    "float": (lambda text: text.replace('"serial": 2', '"serial": 2.0'), "2.0 (float)"),
    "bool": (lambda text: text.replace('"serial": 2', '"serial": true'), "True (bool)"),
}
EXPECTED = "expected an integer, 1 or more (the save order), as specgen writes it"


def damage_serial(run: Path, form: str) -> tuple[Path, str]:
    """ckpt-8's meta.json with `serial` in the bad form; the file and where its line points (`:line:3`, or '')."""
    meta = run / CKPT8 / "meta.json"
    text = meta.read_text()
    assert '"serial": 2,' in text
    meta.write_text(BAD_SERIAL[form][0](text))
    line = next((n for n, row in enumerate(meta.read_text().splitlines(), 1) if '"serial"' in row), None)
    return meta, f":{line}:3" if line else ""


@pytest.mark.parametrize("form", list(BAD_SERIAL))
@pytest.mark.parametrize("latest", ["names it", "missing"])
def test_resume_and_export_refuse_a_malformed_serial_in_one_line_and_change_nothing(
        run: Path, form: str, latest: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The old code read a bad serial as 0: ckpt-8 sorted before ckpt-4, `--resume` took ckpt-4 with the note
    "latest names ckpt-00000008, saved before ckpt-00000004", and export did the same."""
    meta, at = damage_serial(run, form)
    if latest == "missing":  # the fallback path: ckpt-8 is newer by its name, its save order unreadable
        (run / "latest").unlink()
    before = snapshot(run)
    problem = (f"checkpoint {CKPT8} has a malformed meta.json: 'serial' is {BAD_SERIAL[form][1]}; {EXPECTED}. "
               f"Nothing was changed; the intact checkpoint beside it is {CKPT4}: ")
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "1", "--quiet"], capsys)
    assert (code, one_error(err)) == (1, f"{meta}{at}: error: {problem}specgen train {spec_of(run)} --resume-from "
                                         f"{run / CKPT4}" + (f" (or move {CKPT8} out of the run folder, then --resume)"
                                                             if latest == "missing" else ""))
    assert "resumed" not in out and snapshot(run) == before
    code, out, err = cli(["export", spec_of(run), "--checkpoint", run, "-o", tmp_path / "out"], capsys)
    assert (code, one_error(err)) == (1, f"{run}: error: {meta}{at}: {problem}pass --checkpoint {run / CKPT4} "
                                         f"(export, restore-plan) or --resume-from {run / CKPT4} (train)")
    assert not (tmp_path / "out").exists() and snapshot(run) == before


@pytest.mark.parametrize("form", list(BAD_SERIAL))
def test_pruning_never_removes_a_checkpoint_whose_save_order_it_cannot_read(run: Path, form: str) -> None:
    """The old code pruned ckpt-8 (5 steps ahead) as the oldest: keep 1 after a save of step 5 removed it."""
    damage_serial(run, form)
    folder = CheckpointFolder(run, keep=1)
    final = folder.save(5, {"x": tf.Variable(1.0)}, None, {"spec": "r5_mlp", "overrides": []})
    assert sorted(p.name for p in run.glob("ckpt-*")) == ["ckpt-00000005", CKPT8]  # ckpt-4 pruned, ckpt-8 kept
    assert json.loads((final / "meta.json").read_text())["serial"] == 2  # after ckpt-4's 1: ckpt-8's is unknown
    assert not list(run.glob(".*"))


def test_resume_from_beside_a_malformed_checkpoint_says_so_and_keeps_it(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta, _ = damage_serial(run, "-1")
    code, out, err = cli(["train", spec_of(run), "--resume-from", run / CKPT4, "--steps", "2", "--quiet",
                          "--set", "checkpoint.keep=1"], capsys)
    assert code == 0, err
    assert (f"note: {meta}: checkpoint {CKPT8} has a malformed meta.json: 'serial' is -1 (int); {EXPECTED}; it is "
            "left as it is (pruning never removes a checkpoint whose save order it cannot read)\n") in out
    assert sorted(p.name for p in run.glob("ckpt-*")) == ["ckpt-00000006", CKPT8]


@pytest.mark.parametrize(("step", "received"), [("-1", "-1 (int)"), ('"8"', "'8' (str)"), ("8.0", "8.0 (float)"),
                                                ("false", "False (bool)")])
def test_a_malformed_step_is_reported_at_its_key(run: Path, step: str, received: str) -> None:
    meta = run / CKPT8 / "meta.json"
    meta.write_text(meta.read_text().replace('"step": 8', f'"step": {step}'))
    with pytest.raises(Malformed) as caught:
        read_meta(run / CKPT8)
    assert caught.value.problem == f"'step' is {received}; expected an integer, 0 or more, as specgen writes it"
    assert caught.value.position is not None


def test_a_meta_json_written_before_save_serials_still_reads(tmp_path: Path) -> None:
    """Before serials (2026-11-24) meta.json held step and spec only: ordered by step, as before."""
    (tmp_path / "meta.json").write_text('{"step": 5, "spec": "x"}\n')
    assert read_meta(tmp_path) == {"step": 5, "spec": "x"}


# ---- 2. SIGTERM stops like Ctrl-C: one line, exit 143, a tracked run KILLED, --resume bitwise ---------------------

def test_sigterm_is_noted_not_fatal_until_check_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with Interrupts() as interrupts:
        os.kill(os.getpid(), signal.SIGTERM)  # the default handler would end the test process here
        total = sum(range(100_000))  # Python runs handlers between bytecodes: many chances to act
        assert interrupts.signum == signal.SIGTERM and interrupts.received
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert total == 4_999_950_000 and signal.getsignal(signal.SIGTERM) is before


def test_a_second_sigterm_ends_the_process_at_once() -> None:
    """Found by review: a second SIGTERM changed nothing, so a run stuck before its next check() (a hung collective)
    could not be stopped by a supervisor repeating it. The child notes the first, is stuck, and dies by the second."""
    child = subprocess.Popen([sys.executable, "-c", (
        "import os, signal, sys, time\n"
        "from specgen.runtime.interrupt import ECHO_SECONDS, Interrupts\n"
        "with Interrupts() as interrupts:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    while not interrupts.received: pass\n"
        "    time.sleep(ECHO_SECONDS)  # one sooner is the first one's echo (`timeout` sends it twice)\n"
        "    print('noted', flush=True)\n"
        "    while True: time.sleep(0.01)  # stuck: check() is never reached\n")],
        stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "noted\n"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == -signal.SIGTERM


def test_a_sigterm_the_launcher_ignores_stays_ignored() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with Interrupts() as interrupts:
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(100_000))
            assert not interrupts.received
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.slow
def test_sigterm_during_training_is_one_line_exit_143_killed_and_resume_is_bitwise(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("every_steps: 4", "every_steps: 5"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    process = subprocess.Popen(
        [sys.executable, "-m", "specgen", "train", str(spec), "--steps", "100000", "--track", f"mlflow:{uri}"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(process.stderr or []))
    reader.start()
    assert process.stdout is not None
    for line in process.stdout:  # the first progress line comes after the first chunk and its checkpoint
        if line.startswith("step "):
            process.send_signal(signal.SIGTERM)
            break
    rest = process.stdout.read()
    process.wait(timeout=300)
    reader.join()
    assert process.returncode == 143, (rest, errors)
    assert not any("Traceback" in line for line in errors), errors
    stopped = re.fullmatch(r"specgen train: stopped by SIGTERM at step (\d+); the newest checkpoint is "
                           r"run/ckpt-(\d+): continue with --resume\n", errors[-1])
    assert stopped, errors
    saved = int(stopped[2])
    assert saved % 5 == 0 and 5 <= saved <= int(stopped[1])
    record = json.loads((tmp_path / "run" / "mlflow.json").read_text())
    assert MlflowClient(uri).get_run(record["run_id"]).info.status == "KILLED"  # was RUNNING: the process just died
    # --resume continues from it to where a run that was never stopped ends, bit for bit.
    code, out, err = cli(["train", spec, "--resume", "--steps", "3", "--quiet"], capsys)
    assert code == 0 and f"resumed from {tmp_path / 'run'}/ckpt-{saved:08d} at step {saved}" in out, err
    code, out, err = cli(["train", spec, "--steps", str(saved + 3), "--quiet", "--set", "checkpoint.dir=straight"],
                         capsys)
    assert code == 0, err
    resumed, straight = (weights(tmp_path / folder / f"ckpt-{saved + 3:08d}") for folder in ("run", "straight"))
    assert resumed.keys() == straight.keys()
    for key, value in straight.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)


# ---- 3. TensorFlow's state file after a kill inside a save ---------------------------------------------------------

class Killed(BaseException):
    """What a kill does to the code after it: nothing more of it runs."""


def state(run: Path) -> list[str]:
    return (run / "checkpoint").read_text().splitlines()


def test_a_kill_before_the_state_file_is_rewritten_is_repaired_when_the_run_next_opens(
        run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.runtime import checkpoint

    real = checkpoint.write_atomic

    def killed_at_state(target: Path, *args: Any, **kwargs: Any) -> None:
        if Path(target).name == "checkpoint":
            raise Killed
        real(target, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "write_atomic", killed_at_state)
    with pytest.raises(Killed):  # the save of step 12: ckpt-12 published and named by `latest`, then the kill
        main(["train", str(spec_of(run)), "--resume", "--steps", "4", "--quiet"])
    monkeypatch.undo()
    capsys.readouterr()
    assert (run / "latest").read_text() == "ckpt-00000012\n"
    assert tf.train.latest_checkpoint(str(run)) == str(run / CKPT8 / "variables")  # what the kill left
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "0", "--quiet"], capsys)
    assert code == 0, err
    assert (f"note: rewrote {run / 'checkpoint'}, TensorFlow's state file, which named {CKPT8}, to name "
            "ckpt-00000012\n") in out
    assert state(run) == ['model_checkpoint_path: "ckpt-00000012/variables"',
                          f'all_model_checkpoint_paths: "{CKPT4}/variables"',
                          f'all_model_checkpoint_paths: "{CKPT8}/variables"',
                          'all_model_checkpoint_paths: "ckpt-00000012/variables"']
    assert tf.train.latest_checkpoint(str(run)) == str(run / "ckpt-00000012" / "variables")
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "0", "--quiet"], capsys)
    assert code == 0 and "rewrote" not in out, err  # a state file as a save leaves it is left alone
    shutil.rmtree(run / CKPT4)  # removed by hand: the newest is right, the list is not (found by review)
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "0", "--quiet"], capsys)
    assert code == 0, err
    assert (f"note: rewrote {run / 'checkpoint'}, TensorFlow's state file, whose list of checkpoints was not the "
            "folder's\n") in out
    assert f'all_model_checkpoint_paths: "{CKPT4}/variables"' not in state(run)


def test_a_kill_while_pruning_leaves_a_state_file_that_lists_no_removed_checkpoint(
        run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state file is written before pruning: the old order (prune, then state) left it naming ckpt-8."""
    real = os.rename

    def killed_at_prune(source: Any, target: Any) -> None:
        if str(target).endswith(".pruned.tmp"):
            raise Killed
        real(source, target)

    monkeypatch.setattr(os, "rename", killed_at_prune)
    with pytest.raises(Killed):
        CheckpointFolder(run, keep=1).save(12, {"x": tf.Variable(1.0)}, None, {"spec": "r5_mlp", "overrides": []})
    assert state(run) == ['model_checkpoint_path: "ckpt-00000012/variables"',
                          'all_model_checkpoint_paths: "ckpt-00000012/variables"']


# ---- 4. a kill's temporary files are removed, and named, by the next run ------------------------------------------

def test_a_resume_removes_every_temporary_a_kill_left_at_once(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Fresh (under write_atomic's 60 s) and of a dead pid: the old code left all but `.ckpt-*.tmp` in place."""
    left = [".spec.resolved.yaml.999999.ec4b252d.tmp", ".provenance.json.999999.00aa11bb.tmp",
            ".latest.999999.0bba922c.tmp", "code/.model.py.999999.0bba922c.tmp", ".specgen-write-check.999999",
            "tensorboard/.specgen-write-check.999999"]
    for name in left:
        (run / name).write_text("half")
    (run / "code" / ".keep.tmp").write_text("not ours")  # another name: left alone
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "0", "--quiet"], capsys)
    assert code == 0, err
    assert (f"note: removed what an interrupted save left in {run}: .latest.999999.0bba922c.tmp, "
            ".provenance.json.999999.00aa11bb.tmp, .spec.resolved.yaml.999999.ec4b252d.tmp, .specgen-write-check.999999, "
            "code/.model.py.999999.0bba922c.tmp, tensorboard/.specgen-write-check.999999\n") in out
    assert not any((run / name).exists() for name in left) and (run / "code" / ".keep.tmp").exists()


def test_a_run_folder_that_is_a_link_is_cleaned_too(tmp_path: Path) -> None:
    """Found by review: the guard against following links skipped the run folder itself when it was one
    (runs/x -> /scratch/x), so its leftovers, whole checkpoint folders among them, stayed."""
    real = tmp_path / "real"
    (real / ".ckpt-00000010.tmp").mkdir(parents=True)
    for name in (".latest.123.abcdef12.tmp", ".spec.resolved.yaml.999999.deadbeef.tmp"):
        (real / name).write_text("half")
    (tmp_path / "link").symlink_to(real)
    removed = CheckpointFolder(tmp_path / "link", 1).remove_temporaries()
    assert removed == [".ckpt-00000010.tmp", ".latest.123.abcdef12.tmp", ".spec.resolved.yaml.999999.deadbeef.tmp"]
    assert sorted(os.listdir(real)) == []


# ---- 5. wording: the published file name, tidy paths; a refused run leaves folder times as they were --------------

def test_a_full_disk_names_the_file_a_checkpoint_folder_holds(run: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    def full(self: CheckpointFolder, temp: Path, *args: Any) -> None:
        written = temp / "data_temp" / "part-00000-of-00001.data-00000-of-00001.tempstate5347724719263659764"
        raise OSError(errno.ENOSPC, "No space left on device", str(written))

    monkeypatch.setattr(CheckpointFolder, "_write", full)
    code, _out, err = cli(["train", spec_of(run), "--resume", "--steps", "4", "--quiet"], capsys)
    assert (code, one_error(err)) == (1, f"{run}: error: no space left on device while writing data.data-00000-of-00001 "
                                         f"of checkpoint ckpt-00000012 (step 12); the newest checkpoint, {CKPT8}, is "
                                         "intact. Free space, then continue from it with --resume")


@pytest.mark.parametrize(("written", "published"), [
    ("data_temp/part-00000-of-00001.index", "data.index"),
    ("data_temp/part-00000-of-00001.data-00000-of-00001.tempstate42", "data.data-00000-of-00001"),
    ("variables.data-00000-of-00001.tempstate7", "variables.data-00000-of-00001"),
    ("variables.index", "variables.index")])
def test_published_names(written: str, published: str) -> None:
    assert _published(Path(".ckpt-00000015.4242.tmp") / written) == published


def test_a_restore_path_with_dot_dot_is_read_and_shown_tidy_unless_a_link_would_change_it(
        run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = run.parent
    monkeypatch.chdir(top)
    (top / "ft").mkdir()
    assert resolve_prefix(Path("ft/../run")) == Path(f"run/{CKPT8}/variables")  # was ft/../run/ckpt-.../variables
    (top / "deep" / "er").mkdir(parents=True)
    shutil.copytree(run, top / "deep" / "run")
    (top / "link").symlink_to(top / "deep" / "er")
    # link/.. is deep/ for the kernel, not the top folder: kept as written, so the message names what was read
    assert resolve_prefix(Path("link/../run")) == Path(f"link/../run/{CKPT8}/variables")


def test_a_refused_fresh_run_leaves_the_folder_times_as_they_were(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The write probe (a file made and removed in the run folder and its subfolders) changed their times."""
    spec = spec_of(run)
    spec.write_text(SPEC.replace(str(DIGITS), str(run.parent / "missing.npz")))
    before = snapshot(run)
    code, _out, err = cli(["train", spec, "--fresh", "--steps", "1", "--quiet"], capsys)
    assert code == 1 and "missing.npz" in err, err
    assert snapshot(run) == before
