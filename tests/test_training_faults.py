"""A full disk (or a file-size limit) during `specgen train`: one line, exit 1, the previous checkpoint intact and
`--resume` continuing from it to the weights an uninterrupted run reaches (issue 17, §4).

Real writes fail for real: RLIMIT_FSIZE in the child (SIGXFSZ ignored, so a write past the limit fails with
EFBIG) runs everywhere; a small tmpfs (ENOSPC, the user's case) needs the right to mount one (root here).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
# variables.data is ~29 KB (2,410 weights and Adam's two slots); a shuffle buffer of 16 keeps data.data small.
SPEC = f"""\
specgen: 1
name: fault_mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 32, activation: relu}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: adam, learning_rate: 0.003}}
train: {{batch_size: 16, seed: 3, shuffle_buffer: 16}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
checkpoint: {{dir: RUN, every_steps: 5, keep: 2}}
"""
PAGE = 4096  # tmpfs counts its size in pages


def specgen(spec: Path, *args: str, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    """`specgen train` in a child (working in the test's folder, above the spec's); with `fsize`, no file it
    writes may grow past that many bytes."""
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the child
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([sys.executable, "-m", "specgen", "train", str(spec), "--quiet", *args], capture_output=True,
                          text=True, timeout=300, cwd=spec.parent.parent, preexec_fn=limit if fsize else None,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})


def refusal(spec: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """`specgen train` through the CLI's main in this process, in the child's working folder: for a refusal made
    before anything trains, where a child's start-up (TensorFlow's import, seconds) would be the test's whole time."""
    code, _, err = run_cli(["train", str(spec), "--quiet", *args], capsys, spec.parent.parent)
    return code, own_lines(err)


def own_lines(stderr: str) -> list[str]:
    """stderr without TensorFlow's C++ start-up log lines (absl, CUDA probing), which specgen does not write."""
    return [line for line in stderr.splitlines()
            if not line.startswith(("WARNING: All log messages before absl", "I0000 ", "W0000 ", "E0000 "))]


def weights(checkpoint: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(checkpoint / "variables"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def write_spec(folder: Path, run: Path) -> Path:
    """tmp/spec/spec.yaml, training into `run` (printed relative to tmp, the child's working folder)."""
    (folder / "spec").mkdir(parents=True, exist_ok=True)
    spec = folder / "spec" / "spec.yaml"
    spec.write_text(SPEC.replace("RUN", str(run)))
    return spec


def failed_then_resumed(spec: Path, run: Path, result: subprocess.CompletedProcess[str], line: str,
                        uninterrupted: Path) -> None:
    """The one line, exit 1, ckpt-5 untouched and named by `latest`; then --resume ends where a plain run does."""
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert own_lines(result.stderr) == [line.format(run=run.relative_to(spec.parent.parent)), "1 error found"]
    assert sorted(os.listdir(run)) == ["checkpoint", "ckpt-00000005", "code", "latest", "provenance.json",
                                       "spec.resolved.yaml", "tensorboard"]  # no temporary
    assert (run / "latest").read_text() == "ckpt-00000005\n"
    resumed = specgen(spec, "--resume", "--steps", "5")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {run.relative_to(spec.parent.parent)}/ckpt-00000005 at step 5" in resumed.stdout
    after, reference = weights(run / "ckpt-00000010"), weights(uninterrupted / "ckpt-00000010")
    assert after.keys() == reference.keys()
    for name, value in reference.items():  # bitwise: the resume contract of docs/training.md
        np.testing.assert_array_equal(after[name], value, err_msg=name)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 steps in one run (checkpoints at 5 and 10): what every resumed run must reach."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    result = specgen(write_spec(folder, folder / "run"), "--steps", "10")
    assert result.returncode == 0, result.stderr
    return folder / "run"


@pytest.mark.slow
def test_a_file_size_limit_while_checkpointing_is_one_line_and_resume_continues(tmp_path: Path,
                                                                                 uninterrupted: Path) -> None:
    run = tmp_path / "run"
    spec = write_spec(tmp_path, run)
    assert specgen(spec, "--steps", "5").returncode == 0
    # 16 KB: the generated code (6 KB) and event files fit, variables.data (~29 KB) does not.
    result = specgen(spec, "--resume", "--steps", "5", fsize=16 * 1024)
    failed_then_resumed(spec, run, result, "{run}: error: file too large while writing variables.data-00000-of-00001 "
                        "of checkpoint ckpt-00000010 (step 10); the newest checkpoint, ckpt-00000005, is intact. Raise "
                        "the file-size limit (ulimit -f), then continue from it with --resume", uninterrupted)


# ---- a full tmpfs: ENOSPC, as on a user's full disk ---------------------------------------------------------------


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None and sys.platform == "linux"


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of 64 inodes at tmp_path/fs, unmounted afterwards."""
    if not _can_mount():
        pytest.skip("mounting a tmpfs needs root; the RLIMIT_FSIZE test above covers the same path with EFBIG")
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,nr_inodes=64", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path, pages: int | None = None, inodes: int | None = None) -> None:
    """Leave exactly `pages` pages or `inodes` inodes free on the tmpfs (a filler file, or empty files)."""
    stats = os.statvfs(mount)
    if pages is not None:
        (mount / "filler").write_bytes(b"\0" * ((stats.f_bavail * stats.f_frsize) // PAGE - pages) * PAGE)
    if inodes is not None:
        (mount / "inodes").mkdir()
        for number in range(os.statvfs(mount).f_favail - inodes):
            (mount / "inodes" / str(number)).touch()
    assert os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize // PAGE == pages if pages is not None else True


def unfill(mount: Path) -> None:
    (mount / "filler").unlink(missing_ok=True)
    shutil.rmtree(mount / "inodes", ignore_errors=True)


@pytest.mark.slow
def test_a_full_disk_while_writing_checkpoint_data_is_one_line_and_resume_continues(
        tmp_path: Path, tiny_fs: Path, uninterrupted: Path) -> None:
    run = tiny_fs / "run"
    spec = write_spec(tmp_path, run)
    assert specgen(spec, "--steps", "5").returncode == 0
    fill(tiny_fs, pages=4)  # 16 KB: the code's rewrite and two event files fit, variables.data (8 pages) does not
    result = specgen(spec, "--resume", "--steps", "5")
    unfill(tiny_fs)
    failed_then_resumed(spec, run, result, "{run}: error: no space left on device while writing "
                        "variables.data-00000-of-00001 of checkpoint ckpt-00000010 (step 10); the newest checkpoint, "
                        "ckpt-00000005, is intact. Free space, then continue from it with --resume", uninterrupted)


@pytest.mark.slow
def test_a_full_disk_while_writing_meta_json_is_one_line_and_resume_continues(
        tmp_path: Path, tiny_fs: Path, uninterrupted: Path) -> None:
    """meta.json is written last (write_atomic): seven 4 KB `doc` overrides (its longest) make it eight pages where
    every file before it fits."""
    run = tiny_fs / "run"
    spec = write_spec(tmp_path, run)
    doc = ["--set", "doc=" + "d" * PAGE] * 7
    assert specgen(spec, "--steps", "5", *doc).returncode == 0
    base = run / "ckpt-00000005"
    assert -(-(base / "meta.json").stat().st_size // PAGE) == 8
    # The pages the save needs before meta.json (measured with the old two-page meta.json at +2, +3 and +4):
    # the run's two new event files take a page each (their headers are written when the writers open); then the
    # pages of the previous checkpoint's variables.* and data.*, plus one that TensorFlow's merged data.index
    # and its temporary part index hold at the same moment. data.data holds the batches tf.data's prefetch had
    # ready at the save, which the prefetch thread decides: it varies by a few pages between runs (and between
    # ckpt-5 and ckpt-10; a CI run once saw 3 more), so meta.json gets 4 pages of its 8: it fails there whether
    # data.data takes up to 3 pages more or fewer than ckpt-5's.
    before_meta = sum(-(-f.stat().st_size // PAGE) for f in base.iterdir() if f.name != "meta.json")
    fill(tiny_fs, pages=2 + before_meta + 1 + 4)
    result = specgen(spec, "--resume", "--steps", "5")
    unfill(tiny_fs)
    failed_then_resumed(spec, run, result, "{run}: error: no space left on device while writing meta.json of "
                        "checkpoint ckpt-00000010 (step 10); the newest checkpoint, ckpt-00000005, is intact. Free "
                        "space, then continue from it with --resume", uninterrupted)


@pytest.mark.slow
def test_a_full_disk_under_tensorboard_events_is_one_line_and_resume_continues(
        tmp_path: Path, tiny_fs: Path, uninterrupted: Path) -> None:
    """One inode left: the write check's probe and the code's rewrites borrow it and give it back, the train
    events file takes it, and the eval events file cannot be created."""
    run = tiny_fs / "run"
    spec = write_spec(tmp_path, run)
    assert specgen(spec, "--steps", "5").returncode == 0
    fill(tiny_fs, inodes=1)
    result = specgen(spec, "--resume", "--steps", "5")
    unfill(tiny_fs)
    line, shown = own_lines(result.stderr)[0], "fs/run"
    assert line.startswith(f"{shown}: error: no space left on device while writing TensorBoard events ({shown}/"
                           "tensorboard/eval/events.out.tfevents."), line
    assert line.endswith("); the newest checkpoint, ckpt-00000005, is intact. Free space, then continue from it with "
                         "--resume"), line
    for events in (run / "tensorboard").glob("*/events.*"):
        if events.stat().st_size == 0:  # the one TensorFlow created before its header would not fit
            events.unlink()
    failed_then_resumed(spec, run, result, line, uninterrupted)


# ---- --resume and meta.json ---------------------------------------------------------------------------------------

COMPLETE = {"data": {"batch_size": 16, "examples": 1437, "seed": 3, "shuffle_buffer": 16}, "overrides": [], "serial": 1,
            "spec": "fault_mlp", "step": 5, "optimizers": {"all": "adam"}, "accumulate": 1,
            "until_step": 5, "until_by": "steps", "until_per_epoch": 89, "pass_start": 0}  # added last: the lines below stay
# (`optimizers`: each optimizer's kind, which --resume checks; `accumulate`: the cut of each pass; `until_*`: the run's
# end and the updates per epoch it counts in, run_end.py)
REMEDY = "as specgen writes it. Resume from another checkpoint (--resume-from) or start over with --fresh"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with ckpt-00000005 (its meta.json is rewritten by each case, then put back)."""
    folder = tmp_path_factory.mktemp("trained")
    spec = write_spec(folder, folder / "run")
    assert specgen(spec, "--steps", "5").returncode == 0
    meta = json.loads((folder / "run" / "ckpt-00000005" / "meta.json").read_text())
    # the training files' digest (session.py): a hash of the data's bytes; the cases below write metas without it,
    # as an older specgen did, which resume reads as "not recorded"
    assert re.fullmatch("[0-9a-f]{64}", meta.pop("train_files_sha256")), meta
    assert meta == COMPLETE
    return spec


@pytest.mark.slow
@pytest.mark.parametrize(("meta", "line"), [
    ('{"step": 5, "spec": "other"}', "run/ckpt-00000005/meta.json: error: this checkpoint belongs to spec 'other', "
     "not 'fault_mlp'; resume it with that spec, or give this one its own folder (checkpoint.dir)"),
    (json.dumps({**COMPLETE, "spec": None}, indent=2), "run/ckpt-00000005/meta.json:10:3: error: checkpoint "
     f"ckpt-00000005 has a malformed meta.json: 'spec' is None (NoneType); expected the name of the spec that wrote it "
     f"(a string), {REMEDY}"),
    (json.dumps({k: v for k, v in COMPLETE.items() if k != "spec"}, indent=2), "run/ckpt-00000005/meta.json: error: "
     "checkpoint ckpt-00000005 has a malformed meta.json: 'spec' is nothing (the key is missing); expected the name of "
     f"the spec that wrote it (a string), {REMEDY}"),
    (json.dumps({**COMPLETE, "data": {**COMPLETE["data"], "seed": 3.5}}, indent=2), "run/ckpt-00000005/meta.json:2:3: "
     "error: checkpoint ckpt-00000005 has a malformed meta.json: 'data.seed' is 3.5 (float); expected an object of "
     f"batch_size, examples, seed and shuffle_buffer (integers), {REMEDY}"),
    (json.dumps({**COMPLETE, "overrides": "lr=1"}, indent=2), "run/ckpt-00000005/meta.json:8:3: error: checkpoint "
     f"ckpt-00000005 has a malformed meta.json: 'overrides' is 'lr=1' (str); expected a list of --set texts (strings), "
     f"{REMEDY}"),
    ("{not json", "run/ckpt-00000005/meta.json:1:2: error: checkpoint ckpt-00000005 is unreadable: not valid JSON "
     "(Expecting property name enclosed in double quotes). Nothing was changed; no intact checkpoint is beside it; "
     "start over with --fresh (it moves this run aside, deleting nothing)"),
    # json's message for a string cut off ends in " at" (its text goes on with the position, given here as 1:10)
    ('{"step": "5', "run/ckpt-00000005/meta.json:1:10: error: checkpoint ckpt-00000005 is unreadable: not valid JSON "
     "(Unterminated string starting). Nothing was changed; no intact checkpoint is beside it; start over with --fresh "
     "(it moves this run aside, deleting nothing)"),
], ids=["another spec", "spec null", "spec missing", "float seed", "overrides a string", "not JSON", "cut off"])
def test_resume_refuses_a_meta_json_of_another_spec_or_a_malformed_one_in_one_line(
        trained: Path, meta: str, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = trained.parent.parent / "run"
    file = run / "ckpt-00000005" / "meta.json"
    original = file.read_bytes()
    file.write_text(meta)
    listing = sorted(p.name for p in run.rglob("*"))
    try:
        assert refusal(trained, "--resume", "--steps", "5", capsys=capsys) == \
            (1, [line, "1 error found"])
        assert sorted(p.name for p in run.rglob("*")) == listing and file.read_text() == meta  # nothing changed
    finally:
        file.write_bytes(original)


@pytest.mark.slow
def test_probe_resume_refuses_a_meta_json_of_another_spec(trained: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--probe --resume` loads the same checkpoint `--resume` would: it makes the same meta.json checks."""
    run = trained.parent.parent / "run"
    file = run / "ckpt-00000005" / "meta.json"
    original = file.read_bytes()
    file.write_text('{"step": 5, "spec": "other"}')
    try:
        assert refusal(trained, "--probe", "--resume", capsys=capsys) == (1, [
            "run/ckpt-00000005/meta.json: error: this checkpoint belongs to spec 'other', not 'fault_mlp'; resume it "
            "with that spec, or give this one its own folder (checkpoint.dir)", "1 error found"])
    finally:
        file.write_bytes(original)
