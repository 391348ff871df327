"""Faults at the worst moment (round 13): concurrent Triton exports, a killed export's temporaries, a run folder
moved or deleted while `specgen train` saves.

- two `specgen export --triton` into one repository take turns (`<out>/.specgen-export.lock`): the second waits,
  saying for which pid, and writes the next version after the first's; the printed line names the version;
- the temporaries a killed export left in a Triton version folder are removed by the next export into the folder;
- a run folder moved or deleted during training stops the run with one line naming what happened, never a
  TensorFlow traceback, and never a run folder made again at the path without its lock; TensorFlow's
  ENOENT/EACCES/ENOTDIR in the run folder are one-line write failures with what to do.
Real processes where a kill or a pause is the point (SIGSTOP / SIGKILL of an export, `mv` of a training run).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

tf = pytest.importorskip("tensorflow")

from specgen.cli import main  # noqa: E402
from specgen.diagnostics import SpecError  # noqa: E402
from specgen.errors import SpecgenError  # noqa: E402
from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render import build_lock  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime import file_set  # noqa: E402
from specgen.runtime import triton as triton_module  # noqa: E402
from specgen.runtime.checkpoint import CheckpointFolder, write_failure  # noqa: E402
from specgen.runtime.disk import os_error  # noqa: E402
from specgen.runtime.onnx_export import with_weights  # noqa: E402
from specgen.runtime.parity import random_weights  # noqa: E402
from specgen.runtime.run_lock import RunLock  # noqa: E402
from specgen.runtime.triton import remove_leftovers, write_repository  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "data" / "digits.npz"
TINY = """\
specgen: 1
name: tiny
inputs: {x: {shape: [4]}}
outputs: {logits: d2}
layers:
  - {name: d1, op: dense, units: 8, input: x}
  - {name: d2, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: "*", kind: sgd, learning_rate: 0.01}}
train: {batch_size: 4}
data:
  train: {npz: d.npz, features: {x: x}, labels: {label: y}}
  eval: {npz: d.npz, features: {x: x}, labels: {label: y}}
checkpoint: {dir: run, every_steps: 1, keep: 1}
"""
DIGITS_SPEC = """\
specgen: 1
name: digits
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: out}
layers:
  - {name: flat, op: flatten}
  - {name: hidden, op: dense, units: 16, activation: relu}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: ["*"], kind: adam, learning_rate: 0.01}}
train: {batch_size: 32, epochs: 8, ema: {decay: 0.9}, metrics: [accuracy], seed: 1}
data:
  train: {npz: digits.npz, features: {image: x_train}, labels: {label: y_train}}
  eval: {npz: digits.npz, features: {image: x_test}, labels: {label: y_test}}
checkpoint: {dir: run, every_steps: 1, keep: 3}
"""


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The tiny spec in the working folder (so printed paths are short), its data, and two raw checkpoints."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(TINY)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((64, 4)).astype(np.float32), y=rng.integers(0, 3, 64))
    ir = build_ir(load_spec(tmp_path / "spec.yaml"))
    for name, seed in (("a", 1), ("b", 2)):
        values = random_weights(ir, np.random.default_rng(seed))
        names = sorted(values)
        tf.raw_ops.SaveV2(prefix=str(tmp_path / name), tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=[tf.constant(values[n]) for n in names])
    return {"folder": tmp_path, "ir": ir}


def _model(ir: Any, seed: int) -> bytes:
    graph = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir,
                         random_weights(ir, np.random.default_rng(seed)))
    return graph.SerializeToString(deterministic=True)


def _export(*args: str) -> list[str]:
    return [sys.executable, "-m", "specgen", "export", "spec.yaml", *args]


def _export_stopped_at(condition: str, sig: str, *args: str) -> list[str]:
    """`specgen export` in a process that sends itself `sig` (once) at its first os.replace whose target `dst`
    meets `condition`: between a temporary's write and its rename, the moment a kill or a busy machine picks."""
    code = ("import os, signal, sys\nfrom pathlib import Path\nreal, hit = os.replace, []\n"
            "def replace(src, dst, *a, **k):\n"
            f"    if not hit and ({condition}):\n"
            f"        hit.append(1); os.kill(os.getpid(), signal.{sig})\n"
            "    return real(src, dst, *a, **k)\n"
            "os.replace = replace\n"
            "from specgen.cli import main\nsys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-c", code, "export", "spec.yaml", *args]


def _stopped(pid: int, timeout: float = 120) -> None:
    """Wait until process `pid` is stopped (SIGSTOP: state T in /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t"):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop")


def _dead_pid() -> int:
    """A pid no process has now (a child that ended and was reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _line_starting(stream: Any, prefix: str, timeout: float) -> str:
    """The first line of `stream` that starts with `prefix` (TensorFlow may log before it)."""
    deadline = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([stream], [], [], max(deadline - time.monotonic(), 0))
        assert ready, f"no line starting {prefix!r} within {timeout} s"
        line = str(stream.readline())
        assert line, f"the stream ended before a line starting {prefix!r}"
        if line.startswith(prefix):
            return line.rstrip("\n")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- F3: two exports into one repository take turns -----------------------------------------------------------------


@pytest.mark.slow
def test_two_exports_into_one_repository_write_two_versions(tiny: dict[str, Any],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Export A is paused (SIGSTOP) at its first temporary, after it chose version 2, as a busy machine can; export B
    waits for it, naming its pid, and writes version 3 once A is done. Before, B wrote version 2 and A replaced it:
    both printed success and one model was gone."""
    assert main(["export", "spec.yaml", "--checkpoint", "a", "-o", "cc", "--triton"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "triton model repository: cc/tiny, version 1"
    at_export_folder = "Path(dst).parent.name == 'cc'"
    first = subprocess.Popen(_export_stopped_at(at_export_folder, "SIGSTOP", "--checkpoint", "a", "-o", "cc", "--triton"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second: subprocess.Popen[str] | None = None
    try:
        _stopped(first.pid)  # at its first rename, its export folder's: it chose version 2 before
        assert Path("cc/.specgen-export.lock").read_text() == f"{first.pid}\n"
        second = subprocess.Popen(_export("--checkpoint", "b", "-o", "cc", "--triton"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        waiting = _line_starting(second.stderr, "specgen export:", 120)
        assert waiting == f"specgen export: waiting for another specgen export (pid {first.pid}) to finish writing cc"
    finally:
        first.send_signal(signal.SIGCONT)
    out_a, err_a = first.communicate(timeout=120)
    assert second is not None
    out_b, err_b = second.communicate(timeout=120)
    assert (first.returncode, second.returncode) == (0, 0), err_a + err_b
    assert out_a.splitlines()[-1] == "triton model repository: cc/tiny, version 2"
    assert out_b.splitlines()[-1] == "triton model repository: cc/tiny, version 3"
    versions = Path("cc/tiny")
    assert sorted(p.name for p in versions.iterdir()) == ["1", "2", "3", "config.pbtxt"]
    assert _sha(versions / "2" / "model.onnx") == _sha(versions / "1" / "model.onnx")  # A's: checkpoint a again
    assert _sha(versions / "3" / "model.onnx") != _sha(versions / "2" / "model.onnx")  # B's own bytes
    assert (versions / "3" / "model.onnx").read_bytes() == Path("cc/model.onnx").read_bytes()  # B wrote last
    assert json.loads(Path("cc/export.json").read_text())["model_sha256"] == _sha(Path("cc/model.onnx"))
    assert not list(Path("cc").rglob("*.tmp")) and not Path("cc/.specgen-export.lock").exists()


def test_a_writer_between_choosing_and_writing_holds_the_next_one_back(tiny: dict[str, Any]) -> None:
    """The pause between choosing a version and writing it, in one process: while writer A holds the export lock
    (paused in its version folder's write), writer B waits, then takes the version after A's."""
    ir, root = tiny["ir"], tiny["folder"] / "repo"
    write_repository(root, ir, _model(ir, 1))
    paused, go = threading.Event(), threading.Event()
    real = file_set.write_set

    def slow(folder: Path, files: Any, last: str, **kw: Any) -> None:
        if threading.current_thread().name == "A":
            paused.set()
            assert go.wait(30)
        real(folder, files, last, **kw)

    done: dict[str, Path] = {}
    a = threading.Thread(name="A", target=lambda: done.setdefault("A", write_repository(root, ir, _model(ir, 2))))
    b = threading.Thread(name="B", target=lambda: done.setdefault("B", write_repository(root, ir, _model(ir, 3))))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(triton_module, "write_set", slow)
        a.start()
        assert paused.wait(30)
        b.start()
        time.sleep(0.5)  # B has chosen nothing yet: it waits for the lock
        assert b.is_alive() and not (root / "tiny" / "3").exists()
        go.set()
        a.join(30)
        b.join(30)
    model = root / "tiny"
    assert (model / "2" / "model.onnx").read_bytes() == _model(ir, 2)
    assert (model / "3" / "model.onnx").read_bytes() == _model(ir, 3)


def test_an_export_that_waits_too_long_stops_with_one_line(tiny: dict[str, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ir, root = tiny["ir"], tiny["folder"] / "repo"
    write_repository(root, ir, _model(ir, 1))
    monkeypatch.setattr(build_lock, "LOCK_WAIT", 0.3)
    with build_lock.locked(root, "export"):  # another export's lock (this process's own pid)
        with pytest.raises(SpecgenError) as raised:
            write_repository(root, ir, _model(ir, 2))
    assert str(raised.value) == (f"another specgen export (pid {os.getpid()}) is writing repo, and it did not finish "
                                 "within 0.3 s; run this export again once it has (or stop it)")
    assert sorted(p.name for p in (root / "tiny").iterdir()) == ["1", "config.pbtxt"]
    assert sorted(p.name for p in root.iterdir()) == ["tiny"]


def test_the_export_command_says_whom_it_waits_for_and_when_it_gives_up(
        tiny: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(build_lock, "LOCK_WAIT", 0.3)
    with build_lock.locked(Path("cc"), "export"):
        assert main(["export", "spec.yaml", "--checkpoint", "a", "-o", "cc", "--triton"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("specgen")]
    assert err == [f"specgen export: waiting for another specgen export (pid {os.getpid()}) to finish writing cc",
                   f"specgen: error: another specgen export (pid {os.getpid()}) is writing cc, and it did not finish "
                   "within 0.3 s; run this export again once it has (or stop it)"]
    assert os.listdir("cc") == []  # the export wrote nothing (the folder is the other lock holder's)


# --- F4: what a killed export left in a version folder ---------------------------------------------------------------


@pytest.mark.slow
def test_a_killed_exports_temporary_in_a_version_folder_is_removed_by_the_next(
        tiny: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "spec.yaml", "--checkpoint", "a", "-o", "cc", "--triton"]) == 0
    capsys.readouterr()
    in_version = "Path(dst).parent.parent.name == 'tiny'"  # kill -9 as its version's model.onnx is renamed in
    killed = subprocess.run(_export_stopped_at(in_version, "SIGKILL", "--checkpoint", "b", "-o", "cc", "--triton"),
                            capture_output=True, text=True, timeout=180)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    temps = list(Path("cc").rglob("*.tmp"))
    assert [p.parent for p in temps] == [Path("cc/tiny/2")] and temps[0].name.startswith(".model.onnx.")
    assert main(["export", "spec.yaml", "--checkpoint", "b", "-o", "cc", "--triton"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "triton model repository: cc/tiny, version 2"  # re-used
    assert sorted(os.listdir("cc/tiny/2")) == ["model.onnx"]
    assert not list(Path("cc").rglob("*.tmp")) and not Path("cc/.specgen-export.lock").exists()


def test_only_dead_writers_temporaries_older_than_the_lock_are_removed(tmp_path: Path) -> None:
    root = tmp_path
    model = root / "tiny"
    (model / "7").mkdir(parents=True)
    (model / "notes").mkdir()
    dead, alive = _dead_pid(), os.getpid()
    old = [model / "7" / f".model.onnx.{dead}.0123abcd.tmp", model / f".config.pbtxt.{dead}.0123abcd.tmp"]
    kept = [model / "7" / f".model.onnx.{alive}.0123abcd.tmp",  # a live writer's
            model / "7" / "model.onnx.tmp", model / "7" / f".model.onnx.{dead}.xyz.tmp",  # not specgen's names
            model / "notes" / f".model.onnx.{dead}.0123abcd.tmp"]  # not a version folder
    for path in old + kept:
        path.write_bytes(b"partial")
    os.mkdir(model / "7" / f".sample.npz.{dead}.0123abcd.tmp")  # a folder: never removed
    os.symlink("/etc/hostname", model / "7" / f".variant.json.{dead}.0123abcd.tmp")  # a link: never followed
    since = time.time() + 1
    newer = model / "7" / f".model.onnx.{dead}.89abcdef.tmp"
    newer.write_bytes(b"partial")
    os.utime(newer, (since + 5, since + 5))  # younger than the lock: not ours to judge
    assert sorted(remove_leftovers(root, model, since)) == sorted(old)
    assert all(p.exists() or p.is_symlink() for p in [*kept, newer]) and not any(p.exists() for p in old)
    assert (model / "7" / f".sample.npz.{dead}.0123abcd.tmp").is_dir()
    export_json = root / f".export.json.{dead}.0123abcd.tmp"
    other = root / f".latest.{dead}.0123abcd.tmp"
    export_json.write_bytes(b"{")
    other.write_bytes(b"ckpt")
    assert remove_leftovers(root, root, since, ["export.json", "model.onnx"]) == [export_json]
    assert other.exists()  # not a file export writes


# --- F2: the run folder moved or deleted while train saves -----------------------------------------------------------


def test_tensorflow_file_errors_in_the_run_folder_are_write_failures(tmp_path: Path) -> None:
    run = Path("run")
    missing = tf.errors.NotFoundError(None, None, "{{function_node __wrapped__SaveV2}} run/.ckpt-00000002.9.tmp/"
                                      "data_temp; No such file or directory [Op:SaveV2]")
    error = os_error(missing, run)
    assert error is not None and (error.errno, error.filename) == (errno.ENOENT, "run/.ckpt-00000002.9.tmp/data_temp")
    assert os_error(missing) is None  # without the folder: a data file's ENOENT is the data's
    assert os_error(missing, Path("elsewhere")) is None
    denied = tf.errors.PermissionDeniedError(None, None, f"{Path.cwd() / 'run/tensorboard/train/x'}; Permission denied")
    found = os_error(denied, run)
    assert found is not None and found.errno == errno.EACCES
    nodir = tf.errors.FailedPreconditionError(None, None, "run/.ckpt-3.1.tmp/variables.data-00000-of-00001.tempstate1; "
                                              "Not a directory")
    assert (os_error(nodir, run) or OSError()).errno == errno.ENOTDIR
    full = tf.errors.ResourceExhaustedError(None, None, "/data/x; No space left on device")
    assert (os_error(full) or OSError()).errno == errno.ENOSPC  # a full disk, anywhere, as before
    line = str(write_failure(OSError(errno.ENOENT, "No such file or directory", "run/x"), tmp_path / "run",
                             "variables.data-00000-of-00001 of checkpoint ckpt-00000002 (step 2)"))
    assert line == (f"{tmp_path / 'run'}: error: no such file or directory while writing variables.data-00000-of-00001 "
                    "of checkpoint ckpt-00000002 (step 2); no checkpoint was written yet. Leave the run folder's "
                    "files alone while it trains (something removed one), then train again")


def test_the_lock_tells_a_moved_or_deleted_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("run").mkdir()
    lock = RunLock(Path("run"))
    lock.acquire()
    assert lock.held and lock.fate() is None
    os.rename("run", "gone")
    assert lock.fate() == "moved to gone"
    Path("run").mkdir()  # a new folder at the path is not the one locked
    assert lock.fate() == "moved to gone"
    os.rmdir("run")
    os.rename("gone", "run")
    assert lock.fate() is None
    shutil.rmtree("run")
    assert lock.fate() == "deleted"
    lock.release()
    assert lock.fate() is None  # nothing held, nothing to tell


@pytest.fixture
def saving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CheckpointFolder, Callable[[], Path]]]:
    """A locked run folder `run` in the working folder and a save of one variable into it."""
    monkeypatch.chdir(tmp_path)
    Path("run").mkdir()
    lock = RunLock(Path("run"))
    lock.acquire()
    folder = CheckpointFolder(Path("run"), 3, lock=lock)
    variables = {"w": tf.Variable([1.0, 2.0])}
    yield folder, lambda: folder.save(2, variables, None, {"spec": "tiny"})
    lock.release()


MOVED = ("run: error: the run folder disappeared {when} checkpoint ckpt-00000002 (step 2) was written (moved to gone); "
         "training stopped there, and nothing more was written. Move gone back to run, then continue with --resume")


def test_a_save_into_a_moved_run_folder_stops_and_makes_no_new_one(
        saving: tuple[CheckpointFolder, Callable[[], Path]]) -> None:
    _, save = saving
    assert save().name == "ckpt-00000002"
    os.rename("run", "gone")
    with pytest.raises(SpecError) as raised:
        save()
    assert str(raised.value) == MOVED.format(when="before")
    assert not Path("run").exists()  # before: the save made `run/` again and kept saving there, unlocked
    assert sorted(os.listdir("gone")) == ["checkpoint", "ckpt-00000002", "latest"]


def test_a_run_folder_moved_during_tensorflows_write_is_one_line(
        saving: tuple[CheckpointFolder, Callable[[], Path]], monkeypatch: pytest.MonkeyPatch) -> None:
    """SaveV2 into a folder that moved: TensorFlow's NotFoundError, a traceback before."""
    _, save = saving
    real = tf.raw_ops.SaveV2

    def moved_first(**kw: Any) -> Any:
        os.rename("run", "gone")
        return real(**kw)

    monkeypatch.setattr(tf.raw_ops, "SaveV2", moved_first)
    with pytest.raises(SpecError) as raised:
        save()
    assert str(raised.value) == MOVED.format(when="while")
    assert not Path("run").exists()
    # the save's folder moved with the run; the next `specgen train` there removes it, saying so
    assert os.listdir("gone") == [f".ckpt-00000002.{os.getpid()}.tmp"]


def test_a_folder_tensorflow_made_again_for_the_save_is_removed(
        saving: tuple[CheckpointFolder, Callable[[], Path]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Moved after the variables were written: meta.json's write makes `run/.ckpt-....tmp/` again at the path, as
    TensorFlow's Checkpoint.write does; the save is not published there, and the folder it made goes."""
    from specgen.runtime import checkpoint as checkpoint_module

    real = checkpoint_module.write_atomic

    def moved_then_written(target: Path, *args: Any, **kw: Any) -> None:
        if target.name == "meta.json":
            os.rename("run", "gone")
        real(target, *args, **kw)

    monkeypatch.setattr(checkpoint_module, "write_atomic", moved_then_written)
    _, save = saving
    with pytest.raises(SpecError) as raised:
        save()
    assert str(raised.value) == MOVED.format(when="while")
    assert not Path("run").exists()


def test_a_deleted_run_folder_is_said_so(saving: tuple[CheckpointFolder, Callable[[], Path]]) -> None:
    _, save = saving
    shutil.rmtree("run")
    with pytest.raises(SpecError) as raised:
        save()
    assert str(raised.value) == ("run: error: the run folder disappeared before checkpoint ckpt-00000002 (step 2) was "
                                 "written (deleted); training stopped there, and nothing more was written. Its "
                                 "checkpoints went with it: train again")
    assert not Path("run").exists()


def test_a_run_folder_being_removed_is_said_deleted(saving: tuple[CheckpointFolder, Callable[[], Path]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`rm -rf run` empties the folder before it removes it: TensorFlow's ENOENT comes while the folder is still
    there. The save looks again a moment later, and says what happened rather than 'something removed a file'."""
    _, save = saving

    def removing(**kw: Any) -> Any:
        temp = Path(str(kw["prefix"])).parent
        shutil.rmtree(temp)  # rm has reached the save's folder ...
        threading.Timer(0.05, shutil.rmtree, ["run"]).start()  # ... and removes the run folder just after
        raise tf.errors.NotFoundError(None, None, f"{temp}; No such file or directory")  # as SaveV2 says it

    monkeypatch.setattr(tf.raw_ops, "SaveV2", removing)
    with pytest.raises(SpecError) as raised:
        save()
    assert str(raised.value) == ("run: error: the run folder disappeared while checkpoint ckpt-00000002 (step 2) was "
                                 "written (deleted); training stopped there, and nothing more was written. Its "
                                 "checkpoints went with it: train again")


@pytest.mark.slow
def test_moving_the_folder_of_a_real_run_stops_it_with_one_line(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A real `specgen train` saving every step; its run folder moved once while it trains: one line, exit 1, no
    folder made again at the path; moved back, --resume continues it (the line's advice)."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(DIGITS, "digits.npz")
    Path("spec.yaml").write_text(DIGITS_SPEC)
    command = [sys.executable, "-m", "specgen", "train", "spec.yaml", "--quiet"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while not Path("run/latest").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.rename("run", "gone")
    out, err = process.communicate(timeout=180)
    assert process.returncode == 1, out + err
    assert "Traceback" not in err
    line = next(x for x in err.splitlines() if x.startswith("run: error:"))
    found = re.match(r"run: error: the run folder disappeared (before|while) checkpoint ckpt-(\d{8}) ", line)
    assert found, line
    step = int(found[2])
    assert line == (f"run: error: the run folder disappeared {found[1]} checkpoint ckpt-{step:08d} (step {step}) was "
                    "written (moved to gone); training stopped there, and nothing more was written. Move gone back to "
                    "run, then continue with --resume")
    assert not Path("run").exists()
    os.rename("gone", "run")
    resumed = subprocess.run([*command, "--resume", "--steps", "2"], capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    assert re.search(r"^done: 2 updates in .* checkpoint run/ckpt-\d{8}$", resumed.stdout, re.M), resumed.stdout
