"""Epoch ends after a resume that starts a new pass of the data (left alone at the last stop, now fixed).

A resume whose data settings or files changed starts a new pass of the data at the checkpoint (data_position.py).
The loop's epoch ends, where it evaluates, were still counted from step 0 (`attempts % updates_per_epoch`), so the
evaluations fell inside the new passes; and an `epochs` end that the updates per epoch did not move (`--set
train.seed`, a file rewritten with as many examples) stayed where it was, inside a pass. Now each checkpoint records
where its data's current pass began (meta.json `pass_start`): epochs end on the new passes' ends, resumed again or
not, and the run's end moves to the end of the pass it falls in, with a note. Real TensorFlow on a tiny MLP.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from test_resume_end_r10 import SPEC, cli, meta, snapshot, weights  # noqa: E402

from specgen.cli import main  # noqa: E402

# 1437 examples: batches of 479 make 3 updates an epoch, of 287 make 5.
THREE, FIVE, SEED = "train.batch_size=479", "train.batch_size=287", "train.seed=7"
EVAL = "  eval: {npz: DIGITS, features: {image: x_test}, labels: {label: y_test}}\n"


def write_spec(folder: Path) -> Path:
    """SPEC with evaluation data and a metric (an evaluation line at each epoch's end), 3 epochs, a checkpoint
    every 2 steps."""
    digits = re.search(r"npz: (\S+),", SPEC)
    assert digits is not None
    text = SPEC.replace("{epochs}", "3").replace("every_steps: 4, keep: 3", "every_steps: 2, keep: 20")
    text = text.replace("checkpoint:", EVAL.replace("DIGITS", digits[1]) + "checkpoint:")
    text = text.replace("train: {batch_size: 8,", "train: {metrics: [accuracy], batch_size: 8,")
    spec = folder / "spec.yaml"
    spec.write_text(text)
    return spec


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 epochs of 3 updates: ckpt-2, -4, -6, -8, -9; ckpt-4 is one update into the second pass."""
    folder = tmp_path_factory.mktemp("passes")
    assert main(["train", str(write_spec(folder)), "--set", THREE, "--quiet"]) == 0
    return folder


@pytest.fixture
def run(base: Path, tmp_path: Path) -> Path:
    """A copy of the run, stopped at ckpt-4 (the later checkpoints removed: a resume would name its own
    ckpt-6-2 beside them)."""
    shutil.copytree(base, tmp_path / "copy")
    for name in ("ckpt-00000006", "ckpt-00000008", "ckpt-00000009"):
        shutil.rmtree(tmp_path / "copy" / "run" / name)
    return tmp_path / "copy" / "run"


def evals(out: str) -> list[int]:
    return [int(m) for m in re.findall(r"^eval at step (\d+):", out, re.M)]


def test_a_run_from_its_start_records_its_pass_start_0_and_evaluates_at_its_pass_ends(
        base: Path, run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert [meta(p)["pass_start"] for p in sorted((base / "run").glob("ckpt-*"))] == [0] * 5
    shutil.rmtree(run)
    code, out, _ = cli(["train", run.parent / "spec.yaml", "--set", THREE, "--quiet"], capsys)
    assert (code, evals(out)) == (0, [3, 6, 9])


def test_after_a_new_pass_epochs_end_on_its_pass_ends(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: evaluations at 5 and 10 (multiples of 5 from step 0), the first one inside the new pass. The end, 1 pass
    and a begun one left (5 updates at 3), is 2 passes of 5 from step 4: 14."""
    code, out, _ = cli(["train", run.parent / "spec.yaml", "--resume-from", run / "ckpt-00000004", "--set", FIVE,
                        "--quiet"], capsys)
    assert code == 0
    assert "the run's end moves from step 9 to 14" in out.splitlines()[0]
    assert evals(out) == [9, 14]
    assert [meta(run / f"ckpt-{s:08d}")["pass_start"] for s in (6, 8, 10, 12, 14)] == [4] * 5


def test_a_new_pass_under_the_same_updates_per_epoch_moves_the_end_to_its_pass_end(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--set train.seed` starts a new pass at 4 with 3 updates an epoch still. Was: the end stayed 9, inside the
    second new pass (4 + 3 + 2), and the evaluations came at 6 and 9. Now: at 7 and 10, the run's end."""
    code, out, _ = cli(["train", run.parent / "spec.yaml", "--resume-from", run / "ckpt-00000004", "--set", SEED,
                        "--quiet"], capsys)
    assert code == 0
    lines = out.splitlines()
    data = next(n for n, line in enumerate(lines) if line.startswith("note: the data settings changed"))
    assert lines[data].startswith("note: the data settings changed since ckpt-00000004 (seed 1 -> 7)")
    assert lines[data + 1] == ("note: the data starts a new pass at step 4, inside a pass of the run's epochs: the run's end "
                        "moves from step 9 to 10, the end of the pass it falls in (5 updates left at 3 a pass; a pass "
                        "begun counts whole)")
    assert evals(out) == [7, 10]
    assert meta(run / "ckpt-00000010")["until_step"] == 10


def test_a_plain_resume_inside_a_new_pass_ends_bitwise_where_the_uninterrupted_run_does(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The new pass's start is read back from the checkpoint: resumed from ckpt-6 (two updates into the new pass
    begun at 4), epochs still end at 7 and 10, and ckpt-10 holds the uninterrupted run's bytes."""
    spec = run.parent / "spec.yaml"
    assert cli(["train", spec, "--resume-from", run / "ckpt-00000004", "--set", SEED, "--quiet"], capsys)[0] == 0
    whole = weights(run / "ckpt-00000010")
    for name in ("ckpt-00000008", "ckpt-00000010"):
        shutil.rmtree(run / name)
    code, out, _ = cli(["train", spec, "--resume-from", run / "ckpt-00000006", "--quiet"], capsys)
    assert (code, evals(out)) == (0, [7, 10])
    again = weights(run / "ckpt-00000010")
    assert sorted(again) == sorted(whole)
    for key, value in whole.items():
        np.testing.assert_array_equal(again[key], value, err_msg=key)


PASS_START = "an integer from 0 to 9223372036854775807 (the update the data's current pass began at)"


@pytest.mark.parametrize(("bad", "received", "expected"), [
    ("-1", "-1 (int)", PASS_START), ("null", "None (NoneType)", PASS_START), ('"4"', "'4' (str)", PASS_START),
    ("2.0", "2.0 (float)", PASS_START),
    # a pass cannot begin after its checkpoint (4 attempted updates): an edit to 1000 resumed silently with the
    # data shuffled by another seed (train.seed + 1000); found by the verification of checker round 11
    ("1000", "1000 (int)", "an integer from 0 to 4 (the update the data's current pass began at, at most the "
     "checkpoint's attempted updates)")])
def test_a_malformed_pass_start_is_refused_at_its_key(run: Path, bad: str, received: str, expected: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    file = run / "ckpt-00000004" / "meta.json"
    text = file.read_text()
    file.write_text(text.replace('"pass_start": 0', f'"pass_start": {bad}'))
    line = next(n for n, row in enumerate(text.splitlines(), 1) if '"pass_start"' in row)
    before = snapshot(run)
    code, out, err = cli(["train", run.parent / "spec.yaml", "--resume-from", run / "ckpt-00000004", "--quiet"],
                         capsys)
    assert (code, out) == (1, "")
    assert err == (f"{file}:{line}:3: error: checkpoint ckpt-00000004 has a malformed meta.json: 'pass_start' is "
                   f"{received}; expected {expected}, as specgen writes it. Resume from another checkpoint "
                   "(--resume-from) or start over with --fresh\n1 error found\n")
    assert snapshot(run) == before
