"""Checkpoint safety of `specgen train`: crashes in a save, damaged files, changed settings, kept overrides.

Real TensorFlow training on a tiny MLP (in process, so TensorFlow loads once); one trained run is
shared by the module and copied for each test, which then damages, resumes or retrains the copy.
A kill is simulated by raising a BaseException from os.rename/os.replace at a chosen call: like
SIGKILL, nothing after that point runs (only `finally` clean-ups, which a kill would skip too).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from specgen.cli import main  # noqa: E402

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: safety_mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 8, activation: relu}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all:
    variables: ["*"]
    kind: sgd
    momentum: 0.9
    learning_rate: {{schedule: exponential_decay, initial: 0.05, decay_steps: 10, decay_rate: 0.5}}
train: {{batch_size: 8, seed: 1, shuffle_buffer: 200}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
checkpoint: {{dir: run, every_steps: 4, keep: 3}}
"""
CKPT4, CKPT8 = "ckpt-00000004", "ckpt-00000008"


class Killed(BaseException):
    """What a kill does to the code after it: nothing more of it runs."""


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def one_error(err: str) -> str:
    """The one diagnostic line of a failed command (main adds an 'N error(s) found' line)."""
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[1] == "1 error found", err
    return lines[0]


def values(folder: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(folder / "variables"))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("ckpt-*/*"))}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """spec.yaml and run/ after 8 steps: ckpt-4 and ckpt-8 (8 is a multiple of every_steps)."""
    folder = tmp_path_factory.mktemp("base")
    (folder / "spec.yaml").write_text(SPEC)
    assert main(["train", str(folder / "spec.yaml"), "--steps", "8", "--quiet"]) == 0
    return folder


@pytest.fixture
def run(base: Path, tmp_path: Path) -> Path:
    """A copy of the trained run folder (its spec.yaml beside it)."""
    shutil.copytree(base, tmp_path / "copy")
    return tmp_path / "copy" / "run"


def spec_of(run: Path) -> Path:
    return run.parent / "spec.yaml"


# ---- item 2: a crash in a save never leaves `latest` naming nothing, and never costs a complete checkpoint


def kill_at(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """Raise Killed at the `call`-th rename that publishes a checkpoint folder or `latest`."""
    seen = [0]
    for name in ("rename", "replace"):
        real: Callable[..., Any] = getattr(os, name)

        def fake(src: Any, dst: Any, *args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
            if Path(dst).name.startswith("ckpt-") or Path(dst).name == "latest":
                seen[0] += 1
                if seen[0] == call:
                    raise Killed(f"killed before renaming {src} to {dst}")
            return _real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, name, fake)


@pytest.mark.parametrize("call", [3, 4, 5], ids=["before ckpt-8 is renamed in", "before latest names it",
                                                 "at a second save of step 8"])
def test_a_kill_in_the_last_save_loses_no_complete_checkpoint(
        tmp_path: Path, call: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    kill_at(monkeypatch, call)
    try:
        main(["train", str(spec), "--steps", "8", "--quiet"])
    except Killed:
        pass
    monkeypatch.undo()
    capsys.readouterr()
    folder = tmp_path / "run"
    assert (folder / (folder / "latest").read_text().strip()).is_dir()  # `latest` never names nothing
    whole = sorted(p.name for p in folder.glob("ckpt-*"))
    for name in whole:  # every ckpt-* folder is complete: none was removed to be replaced
        assert values(folder / name) and json.loads((folder / name / "meta.json").read_text())["step"] > 0
    assert whole[-1] == (CKPT8 if call > 3 else CKPT4)
    code, out, err = cli(["train", spec, "--steps", "1"], capsys)
    assert code == 1 and "pass --resume to continue it, or --fresh" in err  # a new run never overwrites it
    code, out, err = cli(["train", spec, "--resume", "--steps", "0", "--quiet"], capsys)
    assert code == 0, err
    assert f"resumed from {folder / whole[-1]} at step {int(whole[-1][5:])}" in out
    if call == 4:  # ckpt-8 was renamed in, but `latest` still names ckpt-4
        assert f"note: {folder}/latest names {CKPT4}, saved before {CKPT8}; using {CKPT8}" in out
    assert len(list(folder.glob(".*.tmp"))) == 0


def test_the_end_of_a_run_does_not_save_its_step_twice(run: Path) -> None:
    assert json.loads((run / CKPT8 / "meta.json").read_text())["serial"] == 2  # ckpt-4 was 1: one save of 8


@pytest.mark.parametrize(("pointer", "why"), [
    (None, "is missing"), (b"", "is empty"), (b"garbage\n", "is damaged (it holds 'garbage', not a ckpt-* name)"),
    (b"\xff\xfe\x00\x01", "is damaged (not text)"), (b"ckpt-00000099\n", "names 'ckpt-00000099', which does not exist"),
], ids=["missing", "empty", "garbage", "not text", "dangling"])
def test_resume_falls_back_to_the_newest_checkpoint_when_latest_is_broken(
        run: Path, pointer: bytes | None, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "latest").unlink()
    if pointer is not None:
        (run / "latest").write_bytes(pointer)  # a garbled file is told apart from a missing one (was: "is missing")
    (run / ".ckpt-00000012.4242.tmp").mkdir()  # what a kill during a save leaves
    (run / ".ckpt-00000012.4242.tmp" / "variables.index").write_bytes(b"half")
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "0", "--quiet"], capsys)
    assert code == 0, err
    assert f"note: {run}/latest {why}; using {CKPT8}, the newest checkpoint there" in out
    assert f"note: removed what an interrupted save left in {run}: .ckpt-00000012.4242.tmp" in out
    assert f"resumed from {run / CKPT8} at step 8" in out
    assert not (run / ".ckpt-00000012.4242.tmp").exists()


def test_a_new_run_refuses_a_folder_with_checkpoints_and_fresh_moves_the_old_run_aside(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "latest").unlink()  # the old code then started at step 0 here and pruned the old checkpoints
    before = files(run)
    code, out, err = cli(["train", spec_of(run), "--steps", "4"], capsys)
    assert one_error(err) == (f"{run}: error: the run folder already holds {CKPT8} and 1 more; pass --resume to "
                              "continue it, or --fresh to start a new run (the old one is moved to "
                              f"{run}/previous-1, nothing is deleted)")
    assert files(run) == before
    code, out, err = cli(["train", spec_of(run), "--steps", "4", "--fresh", "--quiet"], capsys)
    assert code == 0, err
    # TensorFlow's `checkpoint` state file moves with the run it describes
    assert (f"note: --fresh: moved the previous run (checkpoint, {CKPT4}, {CKPT8}, code, provenance.json, "
            "spec.resolved.yaml, tensorboard) to "
            f"{run / 'previous-1'}; "
            "nothing was deleted") in out
    assert files(run / "previous-1") == before
    assert sorted(p.name for p in run.glob("ckpt-*")) == [CKPT4] and "started a new run" in out


def test_pruning_goes_by_save_order_not_by_name(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = cli(["train", spec_of(run), "--resume-from", run / CKPT4, "--steps", "2", "--quiet",
                          "--set", "checkpoint.keep=1"], capsys)
    assert code == 0, err
    # Saved after ckpt-8, ckpt-6 is the newest: by name, keep: 1 would have removed it and kept ckpt-8.
    assert sorted(p.name for p in run.glob("ckpt-*")) == ["ckpt-00000006"]
    assert (run / "latest").read_text() == "ckpt-00000006\n"
    assert not list(run.glob(".*"))


def test_a_save_never_replaces_an_existing_checkpoint_of_the_same_step(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = files(run)
    code, _out, err = cli(["train", spec_of(run), "--resume-from", run / CKPT4, "--steps", "4", "--quiet"], capsys)
    assert code == 0, err
    assert files(run).items() >= before.items()  # the abandoned ckpt-8 is untouched, byte for byte
    assert (run / "latest").read_text() == "ckpt-00000008-2\n"
    assert json.loads((run / "ckpt-00000008-2" / "meta.json").read_text())["step"] == 8


# ---- item 12: unwritable folders, damaged checkpoints and meta.json that does not match


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def zero(path: Path) -> None:
    path.write_bytes(b"\0" * path.stat().st_size)


def garbage(path: Path) -> None:
    path.write_bytes(bytes(range(7, 207)))


DAMAGE: dict[str, tuple[str, Callable[[Path], None]]] = {
    **{f"{how.__name__} {name}": (name, how) for name in ("variables.index", "variables.data-00000-of-00001",
                                                          "data.index", "data.data-00000-of-00001")
       for how in (truncate, zero, garbage)},
    "missing variables data": ("variables.data-00000-of-00001", Path.unlink),
    "missing variables.index": ("variables.index", Path.unlink),
    "missing data state": ("data.index", Path.unlink),
    "empty meta.json": ("meta.json", lambda p: p.write_text("")),
    "garbage meta.json": ("meta.json", lambda p: p.write_text("{step: 8,,")),
    "missing meta.json": ("meta.json", Path.unlink),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_one_line_pointing_at_the_intact_one(
        run: Path, damage: str, capsys: pytest.CaptureFixture[str]) -> None:
    name, how = DAMAGE[damage]
    how(run / CKPT8 / name)
    before = files(run)
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "1"], capsys)
    line = one_error(err)
    assert code == 1 and line.startswith(f"{run / CKPT8 / name}:")
    assert f"checkpoint {CKPT8} is unreadable: " in line
    assert line.endswith(f"Nothing was changed; the intact checkpoint beside it is {CKPT4}: "
                         f"specgen train {spec_of(run)} --resume-from {run / CKPT4}")
    assert files(run) == before and "training" not in out
    code, out, err = cli(["train", spec_of(run), "--resume-from", run / CKPT4, "--steps", "0", "--quiet"], capsys)
    assert code == 0 and f"resumed from {run / CKPT4} at step 4" in out


@pytest.mark.parametrize("damage", ["truncate variables.index", "zero variables.data-00000-of-00001",
                                    "garbage variables.data-00000-of-00001", "missing variables.index"])
def test_export_of_a_damaged_checkpoint_is_one_line(
        run: Path, damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name, how = DAMAGE[damage]
    how(run / CKPT8 / name)
    code, _out, err = cli(["export", spec_of(run), "--checkpoint", run, "-o", tmp_path / "out"], capsys)
    line = one_error(err)
    assert code == 1 and f"checkpoint {CKPT8} is unreadable: " in line and str(run / CKPT8 / name) in line
    assert f"the intact checkpoint beside it is {CKPT4}: pass --checkpoint {run / CKPT4}" in line


def test_meta_json_must_match_its_checkpoint_and_the_spec(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = run / CKPT8 / "meta.json"
    text = meta.read_text()
    line_of = {key: n for n, line in enumerate(text.splitlines(), 1) for key in ("step", "spec") if f'"{key}"' in line}
    meta.write_text(text.replace('"step": 8', '"step": 12'))
    _, _, err = cli(["train", spec_of(run), "--resume", "--steps", "1"], capsys)
    assert one_error(err).startswith(f"{meta}:{line_of['step']}:3: error: checkpoint {CKPT8} is unreadable: "
                                     "'step' is 12, but the checkpoint's global_step is 8. Nothing was changed;")
    meta.write_text(text.replace('"spec": "safety_mlp"', '"spec": "other"'))
    _code, _out, err = cli(["train", spec_of(run), "--resume", "--steps", "1"], capsys)
    assert one_error(err) == (f"{meta}:{line_of['spec']}:3: error: this checkpoint belongs to spec 'other', not "
                              "'safety_mlp'; resume it with that spec, or give this one its own folder "
                              "(checkpoint.dir)")


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs a read-only /sys")
@pytest.mark.parametrize("folder", ["/sys/kernel", "/sys/kernel/specgen-run"], ids=["read-only", "cannot create"])
def test_an_unwritable_run_folder_is_refused_before_training(
        tmp_path: Path, folder: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    code, out, err = cli(["train", spec, "--set", f"checkpoint.dir={folder}"], capsys)
    line = one_error(err)
    assert code == 1 and line.startswith(f"{folder}: error: cannot write the run folder (")
    assert line.endswith("make it writable, or train into another folder with --set checkpoint.dir=PATH. "
                         "Nothing was trained.")
    assert "training" not in out


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through file modes")
def test_a_read_only_code_folder_is_refused_before_training(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "code").chmod(0o555)
    try:
        _code, _out, err = cli(["train", spec_of(run), "--resume", "--steps", "1"], capsys)
    finally:
        (run / "code").chmod(0o755)
    assert one_error(err).startswith(f"{run / 'code'}: error: cannot write the run folder (Permission denied)")


# ---- item 14: another batch size on resume; item 15: kept overrides, a rate of 0 under momentum


def test_resume_with_another_batch_size_starts_a_new_pass(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "2", "--quiet",
                          "--set", "train.batch_size=12"], capsys)
    assert code == 0, err
    assert (f"note: the data settings changed since {CKPT8} (batch_size 8 -> 12), so its saved data position does "
            "not apply: the training data starts a new pass here, shuffled with seed 9 (train.seed + step)") in out
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "1", "--quiet"], capsys)
    assert code == 0, err
    assert "at step 10 with --set train.batch_size=12 (kept from the run)\n" in out and "new pass" not in out
    assert int(values(run / "ckpt-00000011")["global_step"]) == 11


def test_resume_of_an_older_checkpoint_with_another_batch_size(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = json.loads((run / CKPT8 / "meta.json").read_text())
    del meta["data"]  # as written before the data settings were saved
    (run / CKPT8 / "meta.json").write_text(json.dumps(meta))
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "1", "--quiet",
                          "--set", "train.batch_size=12"], capsys)
    assert code == 0, err
    assert f"note: the data settings changed since {CKPT8} (batch_size), so" in out


def test_overrides_are_kept_with_the_run_and_replaced_by_a_new_set(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lr = "optimizers/all/learning_rate"
    code, out, err = cli(["train", spec_of(run), "--resume", "--steps", "1", "--quiet",
                          "--set", "optimizers.all.learning_rate=0.0005"], capsys)
    assert code == 0, err
    assert "at step 8 with --set optimizers.all.learning_rate=0.0005\n" in out
    code, out, _ = cli(["train", spec_of(run), "--resume", "--steps", "1", "--quiet"], capsys)
    assert code == 0 and "with --set optimizers.all.learning_rate=0.0005 (kept from the run)\n" in out
    assert values(run / "ckpt-00000010")[lr] == np.float32(0.0005)  # not the schedule's 0.05 * 0.5 ** 0.9
    code, out, _err = cli(["train", spec_of(run), "--resume", "--steps", "1", "--quiet",
                          "--set", "optimizers.all.learning_rate=0.002"], capsys)
    assert "at step 10 with --set optimizers.all.learning_rate=0.002\n" in out
    assert json.loads((run / "ckpt-00000011" / "meta.json").read_text())["overrides"] == [
        "optimizers.all.learning_rate=0.002"]
    assert values(run / "ckpt-00000011")[lr] == np.float32(0.002)


def test_a_learning_rate_of_0_under_momentum_still_moves_the_weights_as_in_keras(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = values(run / CKPT8)
    code, _out, err = cli(["train", spec_of(run), "--resume", "--steps", "1", "--quiet",
                          "--set", "optimizers.all.learning_rate=0"], capsys)
    assert code == 0, err
    after = values(run / "ckpt-00000009")
    for path in ("hidden/kernel", "out/bias"):  # Keras SGD: v = 0.9 v - 0 * g; w += v
        velocity = before[f"optimizers/all/momentum/{path}"]
        assert np.abs(velocity).max() > 0
        np.testing.assert_allclose(after[path], before[path] + np.float32(0.9) * velocity, rtol=1e-6, atol=1e-7)


def test_verify_reads_every_byte(run: Path) -> None:
    """A flipped byte in the middle of the data file is found (TensorFlow checks each tensor's CRC)."""
    from specgen.runtime.integrity import Unreadable, verify

    data = run / CKPT8 / "variables.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(Unreadable, match=r"variables\.data-00000-of-00001"):
        verify(run / CKPT8)


@pytest.mark.parametrize("damage", ["garbage variables.data-00000-of-00001", "zero variables.data-00000-of-00001"])
def test_fine_tuning_from_a_damaged_checkpoint_is_one_line(
        run: Path, damage: str, capsys: pytest.CaptureFixture[str]) -> None:
    name, how = DAMAGE[damage]
    how(run / CKPT8 / name)
    tuned = run.parent / "tuned.yaml"
    tuned.write_text(SPEC.replace("checkpoint: {dir: run, every_steps: 4, keep: 3}",
                                  f"checkpoint:\n  dir: tuned\n  restore:\n    - {{from: {run}}}"))
    code, _, err = cli(["train", tuned, "--steps", "1"], capsys)
    # 200 garbage bytes are shorter than the index's byte ranges: refused at plan time (bundle_index.py)
    expected = "variables.data-00000-of-00001 is truncated: it holds 200 bytes, but the index places " \
        if damage.startswith("garbage") else "cannot restore: cannot read 'hidden/kernel' from "
    assert code == 1 and expected in one_error(err)
    assert not (run.parent / "tuned" / "latest").exists()


# ---- a diverged run stops with one line and saves nothing over the good checkpoints (issue 9, item 3's class)


def test_a_diverged_run_stops_before_saving_non_finite_weights(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = files(run)
    code, _, err = cli(["train", spec_of(run), "--resume", "--steps", "12", "--quiet",
                        "--set", "optimizers.all.learning_rate=1e30"], capsys)
    assert code == 1
    line = one_error(err)
    assert line.startswith(f"{spec_of(run)}: error: training diverged by step ")
    assert f"Nothing was saved for it; the newest checkpoint, {CKPT8}, is left as it was." in line
    assert "Lower the learning rate, add train.clip, or check the data" in line
    assert files(run) == before  # no checkpoint of NaN weights was added, none was pruned


def test_export_refuses_a_bad_output_before_reading_the_checkpoint(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A link where model.onnx goes, or an unwritable folder: one line, the link's target untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.onnx").symlink_to(victim)
    code, _, err = cli(["export", spec_of(run), "--checkpoint", run, "-o", out], capsys)
    assert code == 1 and err.strip() == (f"specgen: error: cannot write {out / 'model.onnx'}: it is a symbolic link "
                                         f"(to {victim}), and specgen never writes, deletes or reads through a link; "
                                         "remove the link (or choose another path) and run again")
    assert victim.read_bytes() == b"precious" and sorted(p.name for p in out.iterdir()) == ["model.onnx"]
    code, _, err = cli(["export", spec_of(run), "--checkpoint", run, "-o", "/sys/kernel/specgen-out"], capsys)
    assert code == 1 and err.startswith("specgen: error: cannot write /sys/kernel/specgen-out") and len(err.splitlines()) == 1
