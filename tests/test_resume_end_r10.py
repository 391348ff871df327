"""A run's end (runtime/commands/run_end.py), finding F1 of checker round 10: `--resume`, as the Ctrl-C and SIGTERM
lines advise, trained `train.epochs` MORE epochs (8840 -> 23840 for a run of 15000), so a resumed run never ended
where an uninterrupted one does; only `--resume --steps TOTAL-saved` did, and a finished run resumed trained again.

Now every checkpoint records the run's end (meta.json `until_step`, `until_by`): a plain `--resume` goes on to it,
bit for bit; a run at its end trains nothing, writes nothing and exits 0 with one line; `--steps N` / `--epochs N`
still add N more and record the new end. Real TensorFlow on a tiny MLP; Ctrl-C in a real `specgen train` process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from specgen.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
# 1437 examples, batches of 8: 179 updates an epoch.
SPEC = f"""\
specgen: 1
name: end_mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 8, activation: relu}}
  - {{name: drop, op: dropout, rate: 0.1}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: adam, learning_rate: {{schedule: cosine_decay, initial: 0.01, decay_steps: 1432}}}}
train: {{batch_size: 8, epochs: {{epochs}}, seed: 1, shuffle_buffer: 200}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
checkpoint: {{dir: run, every_steps: 4, keep: 3}}
"""
MORE = "Pass --steps N or --epochs N to train N more"


def write_spec(folder: Path, epochs: int = 1, every: int = 4) -> Path:
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.replace("{epochs}", str(epochs)).replace("every_steps: 4", f"every_steps: {every}"))
    return spec


def cli(args: list[Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def snapshot(folder: Path) -> dict[str, tuple[bytes | str, int]]:
    """Every entry under `folder` and the folder itself: files by bytes and mtime, folders and links by mtime."""
    entries: dict[str, tuple[bytes | str, int]] = {".": ("folder", folder.stat().st_mtime_ns)}
    for path in sorted(folder.rglob("*")):
        what = path.read_bytes() if path.is_file() and not path.is_symlink() else "other"  # a folder, a link
        entries[str(path.relative_to(folder))] = (what, path.lstat().st_mtime_ns)
    return entries


def weights(checkpoint: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(checkpoint / "variables"))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def meta(checkpoint: Path) -> dict[str, Any]:
    return dict(json.loads((checkpoint / "meta.json").read_text()))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """spec.yaml and run/ after `--steps 8`: ckpt-4 and ckpt-8, the run's end."""
    folder = tmp_path_factory.mktemp("base")
    assert main(["train", str(write_spec(folder)), "--steps", "8", "--quiet"]) == 0
    return folder


@pytest.fixture
def run(base: Path, tmp_path: Path) -> Path:
    shutil.copytree(base, tmp_path / "copy")
    return tmp_path / "copy" / "run"


def test_every_checkpoint_records_the_end_of_its_run(run: Path) -> None:
    for name in ("ckpt-00000004", "ckpt-00000008"):
        assert {k: v for k, v in meta(run / name).items() if k.startswith("until")} == {
            "until_step": 8, "until_by": "steps", "until_per_epoch": 179}


@pytest.mark.parametrize("flags", [["--resume"], ["--resume-from", "ckpt-00000008"], ["--resume-or-start"]])
def test_a_run_at_its_end_resumed_plainly_trains_nothing_and_writes_nothing(
        run: Path, flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Was: 179 more updates (train.epochs again), without a note. Now one line, exit 0, the folder as it was."""
    before = snapshot(run)
    args = [a if a != "ckpt-00000008" else run / a for a in flags]
    code, out, err = cli(["train", run.parent / "spec.yaml", *args, "--quiet"], capsys)
    assert (code, out, err) == (0, f"nothing to train: {run}/ckpt-00000008 is at step 8, the end its run was started "
                                   f"to reach; nothing was written. {MORE}\n", "")
    assert snapshot(run) == before


def test_steps_and_epochs_on_resume_train_more_and_record_the_new_end(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = run.parent / "spec.yaml"
    code, out, _ = cli(["train", spec, "--resume", "--steps", "3", "--quiet"], capsys)
    assert code == 0 and "training end_mlp: step 8 -> 11 (179 updates per epoch, 1437 examples)\n" in out
    assert (meta(run / "ckpt-00000011")["until_step"], meta(run / "ckpt-00000011")["until_by"]) == (11, "steps")
    code, out, _ = cli(["train", spec, "--resume", "--epochs", "1", "--quiet"], capsys)
    assert code == 0 and "training end_mlp: step 11 -> 190 (179 updates per epoch, 1437 examples)\n" in out
    assert (meta(run / "ckpt-00000190")["until_step"], meta(run / "ckpt-00000190")["until_by"]) == (190, "epochs")
    code, out, _ = cli(["train", spec, "--resume", "--quiet"], capsys)
    assert (code, out) == (0, f"nothing to train: {run}/ckpt-00000190 is at step 190, the end its run was started to "
                              f"reach; nothing was written. {MORE}\n")


def test_a_plain_resume_from_an_earlier_checkpoint_goes_on_to_its_end(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["train", run.parent / "spec.yaml", "--resume-from", run / "ckpt-00000004", "--quiet"], capsys)
    assert code == 0 and "training end_mlp: step 4 -> 8 (179 updates per epoch, 1437 examples)\n" in out
    assert re.search(rf"done: 4 updates in [0-9.]+ s, step 8, checkpoint {run}/ckpt-00000008-2\n$", out), out
    np.testing.assert_equal(weights(run / "ckpt-00000008-2"), weights(run / "ckpt-00000008"))


def test_a_new_set_train_epochs_does_not_move_a_recorded_end_and_says_so(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = run.parent / "spec.yaml"
    before = snapshot(run)
    code, out, _ = cli(["train", spec, "--resume", "--set", "train.epochs=3", "--quiet"], capsys)
    assert (code, out) == (0, f"nothing to train: {run}/ckpt-00000008 is at step 8, the end its run was started to "
                              "reach; nothing was written. --set train.epochs does not move a run's end: pass --steps N "
                              "or --epochs N to train N more\n")
    assert snapshot(run) == before
    code, out, _ = cli(["train", spec, "--resume-from", run / "ckpt-00000004", "--set", "train.epochs=3", "--quiet"],
                       capsys)
    assert code == 0 and out.startswith(
        f"note: --set train.epochs does not move the end of a resumed run: it goes on to step 8, the end "
        f"{run}/ckpt-00000004 records. {MORE}\n"), out


def _as_older_specgen(checkpoint: Path) -> None:
    """meta.json as specgen wrote it before the end was recorded."""
    text = (checkpoint / "meta.json").read_text()
    (checkpoint / "meta.json").write_text(json.dumps({k: v for k, v in json.loads(text).items()
                                                      if not k.startswith("until")}, indent=2, sort_keys=True))


def test_an_older_checkpoint_ends_after_train_epochs_from_step_0(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _as_older_specgen(run / "ckpt-00000008")
    code, out, _ = cli(["train", run.parent / "spec.yaml", "--resume", "--quiet"], capsys)
    assert code == 0 and "training end_mlp: step 8 -> 179 (179 updates per epoch, 1437 examples)\n" in out
    assert meta(run / "ckpt-00000179")["until_step"] == 179
    _as_older_specgen(run / "ckpt-00000179")
    before = snapshot(run)
    code, out, _ = cli(["train", run.parent / "spec.yaml", "--resume", "--quiet"], capsys)
    assert (code, out) == (0, f"nothing to train: {run}/ckpt-00000179 is at step 179, the end of train.epochs (1 "
                              "epoch of 179 updates from step 0; ckpt-00000179 records no end: an older specgen saved "
                              f"it); nothing was written. {MORE}\n")
    assert snapshot(run) == before


UNTIL_STEP = "an integer from 0 to 9223372036854775807 (the step the run ends at)"


@pytest.mark.parametrize(("edit", "bad", "received", "expected"), [
    ('"until_step": 8', '"until_step": -1', "-1 (int)", UNTIL_STEP),
    # beyond the int64 global step: it started `step 8 -> 10^29` and trained until stopped
    ('"until_step": 8', '"until_step": 100000000000000000000000000000', "100000000000000000000000000000 (int)",
     UNTIL_STEP),
    # specgen writes the key or (older versions) none: a null read as "no end recorded" and trained train.epochs
    ('"until_step": 8', '"until_step": null', "None (NoneType)", UNTIL_STEP),
    ('"until_by": "steps"', '"until_by": "passes"', "'passes' (str)", "'steps' or 'epochs' (what the run's end counts)"),
    ('"until_by": "steps"', '"until_by": null', "None (NoneType)", "'steps' or 'epochs' (what the run's end counts)"),
])
def test_a_malformed_end_is_refused_at_its_key(run: Path, edit: str, bad: str, received: str, expected: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    file = run / "ckpt-00000008" / "meta.json"
    text = file.read_text()
    key = edit.split(":")[0]
    file.write_text(text.replace(edit, bad))
    line = next(n for n, row in enumerate(text.splitlines(), 1) if key in row)
    before = snapshot(run)
    code, out, err = cli(["train", run.parent / "spec.yaml", "--resume", "--quiet"], capsys)
    assert (code, out) == (1, "")
    assert err == (f"{file}:{line}:3: error: checkpoint ckpt-00000008 has a malformed meta.json: "
                   f"'{key.strip(chr(34))}' is {received}; expected {expected}, as specgen writes it. Resume from "
                   "another checkpoint (--resume-from) or start over with --fresh\n1 error found\n")
    assert snapshot(run) == before


@pytest.mark.slow
def test_ctrl_c_mid_run_then_a_plain_resume_ends_bitwise_where_an_uninterrupted_run_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The F1 case: no --steps anywhere; the run's end is train.epochs' (8 epochs, 1432 updates)."""
    spec = write_spec(tmp_path, epochs=8, every=20)
    process = subprocess.Popen(
        [sys.executable, "-m", "specgen", "train", str(spec)], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(process.stderr or []))
    reader.start()
    assert process.stdout is not None
    for line in process.stdout:  # the first progress line comes after the first chunk and its checkpoint
        if line.startswith("step "):
            process.send_signal(signal.SIGINT)
            break
    process.stdout.read()
    process.wait(timeout=300)
    reader.join()
    assert process.returncode == 130 and not any("Traceback" in line for line in errors), errors
    stopped = re.fullmatch(r"specgen train: interrupted at step (\d+); the newest checkpoint is run/ckpt-(\d+): "
                           r"continue with --resume\n", errors[-1])
    assert stopped, errors
    saved = int(stopped[2])
    assert 20 <= saved < 1432 and saved % 20 == 0
    # As the line advises: --resume alone goes on to the run's end, 1432, and not 1432 more.
    code, out, err = cli(["train", spec, "--resume", "--quiet"], capsys)
    assert code == 0 and out.startswith(f"resumed from {tmp_path}/run/ckpt-{saved:08d} at step {saved}\n"
                                        f"training end_mlp: step {saved} -> 1432 (179 updates per epoch, "
                                        "1437 examples)\n"), (out, err)
    code, _, err = cli(["train", spec, "--quiet", "--set", "checkpoint.dir=straight"], capsys)
    assert code == 0, err
    resumed, straight = (weights(tmp_path / folder / "ckpt-00001432") for folder in ("run", "straight"))
    assert resumed.keys() == straight.keys()
    for key, value in straight.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)
    assert not (tmp_path / "run" / "ckpt-00001440").exists()  # nothing past the end (every_steps 20)
