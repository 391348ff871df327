"""A run's end under a resume that changes the updates per epoch, and the review of round 10's change (findings 1,
2, 4, 9 of /tmp/rt10/review.md):

- 1: an `epochs` end was kept as an update count, so after `--set train.batch_size` (or a data file grown or
  cleaned) the run trained another number of passes than it was started for, in silence. Each checkpoint now
  records the updates per epoch its end is counted in (`until_per_epoch`), and a resume under other ones counts
  the end anew (the passes left, a pass begun counted whole, times the new updates per epoch), with a note; a
  `steps` end stays its step count, with a note.
- 2: the "nothing to train" line of a run whose updates were skipped read "(passes of 4400 updates, ...)", 4400
  being the run's whole end.
- 4: a distributed worker that is not the chief hashed all the training data at its first save, mid-run, for a
  checkpoint that is then removed: the files are hashed at the start, and only where needed.
- 9: a malformed `train_files_sha256` read as "not recorded"; it is refused at its key like every other key.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, cast

import pytest

tf = pytest.importorskip("tensorflow")

from test_resume_end_r10 import MORE, cli, meta, snapshot, write_spec  # noqa: E402

from specgen.pipeline import build  # noqa: E402
from specgen.runtime import provenance  # noqa: E402
from specgen.runtime.commands import run_end, session  # noqa: E402
from specgen.runtime.commands.resume import Options, Start, prepare  # noqa: E402
from specgen.runtime.placement.default import Distribution  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

# 1437 examples: batches of 479 make 3 updates an epoch, of 287 make 5 (2 examples left out of each pass).
THREE, FIVE = "train.batch_size=479", "train.batch_size=287"


@pytest.fixture(scope="module")
def epochs_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of 3 epochs at 3 updates each (its end: 9 attempted updates), ckpt-2, -4, -6, -8 and -9 (kept: 3)."""
    folder = tmp_path_factory.mktemp("epochs")
    assert cli_quiet(["train", write_spec(folder, epochs=3, every=2), "--set", THREE]) == 0
    return folder


def cli_quiet(args: list[Any]) -> int:
    from specgen.cli import main

    return main([str(a) for a in [*args, "--quiet"]])


@pytest.fixture
def run(epochs_run: Path, tmp_path: Path) -> Path:
    shutil.copytree(epochs_run, tmp_path / "copy")
    return tmp_path / "copy" / "run"


def test_each_checkpoint_records_the_updates_per_epoch_its_end_counts(run: Path) -> None:
    assert sorted(p.name for p in run.glob("ckpt-*")) == ["ckpt-00000006", "ckpt-00000008", "ckpt-00000009"]
    assert {k: v for k, v in meta(run / "ckpt-00000006").items() if k.startswith("until")} == {
        "until_step": 9, "until_by": "epochs", "until_per_epoch": 3}
    # sorted last: every key before keeps its line (json.dumps(sort_keys=True); tests assert those lines)
    assert list(meta(run / "ckpt-00000006"))[-4:] == ["train_files_sha256", "until_by", "until_per_epoch", "until_step"]


def test_an_epochs_end_is_counted_anew_in_the_new_updates_per_epoch(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: the end stayed 9, so 3 updates at 5 an epoch (0.6 of a pass) after 6 of 9: 1.6 passes of 3 became
    0.6. Now the 1 pass left (3 updates at 3) is 1 pass at 5: the run ends at 6 + 5 = 11, a pass's end."""
    spec = run.parent / "spec.yaml"
    code, out, _ = cli(["train", spec, "--resume-from", run / "ckpt-00000006", "--set", FIVE, "--quiet"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == ("note: the updates per epoch changed since ckpt-00000006 (3 -> 5): the run's end moves from "
                        "step 9 to 11, the 1 pass it had left (3 updates at 3 a pass; a pass begun counts whole) at 5 "
                        "updates each")
    assert lines[1] == f"resumed from {run}/ckpt-00000006 at step 6 with --set {FIVE}"
    assert lines[2].startswith("note: the data settings changed since ckpt-00000006 (batch_size 479 -> 287), so its "
                               "saved data position does not apply: the training data starts a new pass here"), lines
    assert "training end_mlp: step 6 -> 11 (5 updates per epoch, 1437 examples)" in lines
    assert {k: v for k, v in meta(run / "ckpt-00000011").items() if k.startswith("until")} == {
        "until_step": 11, "until_by": "epochs", "until_per_epoch": 5}
    # The new end is the run's now: a plain resume of its checkpoint is at it.
    before = snapshot(run)
    code, out, _ = cli(["train", spec, "--resume", "--quiet"], capsys)
    assert (code, out) == (0, f"nothing to train: {run}/ckpt-00000011 is at step 11, the end its run was started to "
                              f"reach; nothing was written. {MORE}\n")
    assert snapshot(run) == before


def test_a_pass_begun_counts_whole(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ckpt-8 has 1 update of its 3rd pass left: the new pass starts here, so the run trains 1 whole pass of 5."""
    spec = run.parent / "spec.yaml"
    code, out, _ = cli(["train", spec, "--resume-from", run / "ckpt-00000008", "--set", FIVE, "--quiet"], capsys)
    assert code == 0 and out.startswith(
        "note: the updates per epoch changed since ckpt-00000008 (3 -> 5): the run's end moves from step 9 to 13, the "
        "1 pass it had left (1 update at 3 a pass; a pass begun counts whole) at 5 updates each\n"), out
    assert "training end_mlp: step 8 -> 13 (5 updates per epoch, 1437 examples)\n" in out


def test_a_run_at_its_end_stays_there_whatever_its_updates_per_epoch(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(run)
    code, out, _ = cli(["train", run.parent / "spec.yaml", "--resume", "--set", FIVE, "--quiet"], capsys)
    assert (code, out) == (0, f"nothing to train: {run}/ckpt-00000009 is at step 9, the end its run was started to "
                              f"reach; nothing was written. {MORE}\n")
    assert snapshot(run) == before


def test_a_steps_end_stays_a_step_count_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, every=4)
    assert cli(["train", spec, "--steps", "8", "--quiet"], capsys)[0] == 0
    code, out, _ = cli(["train", spec, "--resume-from", tmp_path / "run" / "ckpt-00000004", "--set",
                        "train.batch_size=16", "--quiet"], capsys)
    assert code == 0 and out.startswith(
        "note: the updates per epoch changed since ckpt-00000004 (179 -> 89); the run's end stays step 8, a step "
        "count (--steps)\n"), out
    assert "training end_mlp: step 4 -> 8 (89 updates per epoch, 1437 examples)\n" in out


def test_set_train_epochs_on_a_recounted_end_says_which_end_it_goes_on_to(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["train", run.parent / "spec.yaml", "--resume-from", run / "ckpt-00000006", "--set", FIVE,
                        "--set", "train.epochs=7", "--quiet"], capsys)
    assert code == 0 and out.splitlines()[1] == (
        "note: --set train.epochs does not move the end of a resumed run: it goes on to step 11, its end counted "
        f"anew above. {MORE}"), out


def _start(meta: dict[str, Any]) -> Start:
    return Start(cast(Any, None), checkpoint=Path("run/ckpt-00000008"), meta={"step": 8, **meta})


@pytest.mark.parametrize(("recorded", "position", "end"), [
    ({"until_step": 9, "until_by": "epochs", "until_per_epoch": 3}, (8, 8), (13, "epochs")),  # 1 of 3: a pass
    ({"until_step": 14, "until_by": "epochs", "until_per_epoch": 3}, (8, 8), (18, "epochs")),  # 6 of 3: 2 passes
    ({"until_step": 15, "until_by": "epochs", "until_per_epoch": 3}, (8, 8), (23, "epochs")),  # 7 of 3: 3 passes
    ({"until_step": 15, "until_by": "epochs", "until_per_epoch": 3}, (6, 8), (23, "epochs")),  # attempts count
    ({"until_step": 15, "until_by": "epochs", "until_per_epoch": 5}, (8, 8), (15, "epochs")),  # the same: as it is
    ({"until_step": 15, "until_by": "epochs"}, (8, 8), (15, "epochs")),  # recorded before until_per_epoch: as it is
    ({"until_step": 8, "until_by": "epochs", "until_per_epoch": 3}, (8, 8), (8, "epochs")),  # at its end: stays
    ({"until_step": 15, "until_by": "steps", "until_per_epoch": 3}, (8, 8), (15, "steps")),  # a step count
])
def test_the_end_under_new_updates_per_epoch(recorded: dict[str, Any], position: tuple[int, int],
                                             end: tuple[int, str]) -> None:
    planned = run_end.planned(Options(resume=True), _start(recorded), position, 5, 1)
    assert (planned.step, planned.by, planned.per_epoch) == (*end, 5)


# ---- 2: the line of a run whose updates were skipped (mixed_float16) ---------------------------------------------

def test_a_run_at_its_end_with_skipped_updates_says_its_passes_end_in_attempts(
        run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: "(passes of 9 updates, 1 of them skipped ...)", 9 being the run's whole end. A fake skip count: the
    checkpoint of step 8 as if mixed_float16 had skipped 1 of its 9 attempted updates."""
    monkeypatch.setattr(session, "skipped_updates", lambda prefix, saved: 1)
    before = snapshot(run)
    code, out, _ = cli(["train", run.parent / "spec.yaml", "--resume-from", run / "ckpt-00000008", "--quiet"], capsys)
    assert (code, out) == (0, f"nothing to train: {run}/ckpt-00000008 is at step 8, the end its run was started to "
                              "reach: its passes end after 9 attempted updates, 1 of them skipped by mixed_float16's "
                              f"loss scale; nothing was written. {MORE}\n")
    monkeypatch.setattr(session, "skipped_updates", lambda prefix, saved: 2)
    code, out, _ = cli(["train", run.parent / "spec.yaml", "--resume", "--quiet"], capsys)
    assert (code, out) == (0, f"nothing to train: {run}/ckpt-00000009 is at step 9, past the end its run was started "
                              "to reach: its passes end after 9 attempted updates, and it attempted 11, 2 of them "
                              f"skipped by mixed_float16's loss scale; nothing was written. {MORE}\n")
    assert snapshot(run) == before


def test_an_older_checkpoint_with_skipped_updates_is_said_in_one_parenthesis() -> None:
    end = run_end.End(220, "epochs", 44, recorded=False)
    assert run_end._where(Path("run/ckpt-00000210"), end, (210, 220), 44) == (
        "run/ckpt-00000210 is at step 210, the end of train.epochs (5 epochs of 44 updates from step 0; "
        "ckpt-00000210 records no end: an older specgen saved it): its passes end after 220 attempted updates, 10 of "
        "them skipped by mixed_float16's loss scale")


# ---- 4: the training files are hashed at the start, where needed ---------------------------------------------------

class Worker(Distribution):
    """A worker that is not the chief: it writes a folder of its own (Replicas' pattern, without a strategy)."""

    chief = False

    def __init__(self, folder: Path):
        self.folder = folder

    def write_folder(self, run: Path) -> Path:
        return self.folder


def test_the_files_are_hashed_at_the_start_and_only_where_needed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: a worker that is not the chief hashed every data file at its first save (mid-run, the others waiting at
    the next collective), for a checkpoint that is removed."""
    events: list[str] = []
    fingerprint = provenance.data_fingerprint
    monkeypatch.setattr(provenance, "data_fingerprint", lambda loaded: events.append("hash") or fingerprint(loaded))
    spec = write_spec(tmp_path)
    built = build(load_spec(spec))

    def train(options: Options, distribution: Distribution) -> dict[str, Any]:
        events.clear()
        begin = prepare(built.loaded, options, chief=distribution.chief)
        try:
            run = session.Session(built, options, begin, distribution)
            run.start()
            events.append("started")
            run.updates(2)
            return meta(run.save())
        finally:
            begin.release()

    saved = train(Options(steps=2), Worker(tmp_path / "worker"))  # not the chief: its checkpoint is removed
    assert events == ["started"] and saved["train_files_sha256"] is None
    saved = train(Options(steps=2), Distribution())  # the chief of a new run: hashed for the run's record
    assert events == ["hash", "started"] and len(saved["train_files_sha256"]) == 64
    chief_digest = saved["train_files_sha256"]
    saved = train(Options(resume=True, steps=2), Worker(tmp_path / "worker2"))  # a resume compares: every worker
    assert events == ["hash", "started"] and saved["train_files_sha256"] is None
    saved = train(Options(resume=True, steps=2), Distribution())
    assert events == ["hash", "started"] and saved["train_files_sha256"] == chief_digest


# ---- 9: meta.json's new keys are checked like the others -----------------------------------------------------------

@pytest.mark.parametrize(("key", "bad", "received", "expected"), [
    ("train_files_sha256", '"5e1d4e9f0c2a"', "'5e1d4e9f0c2a' (str)",
     "a sha256 of the training files (64 lowercase hexadecimal digits)"),
    ("train_files_sha256", "12", "12 (int)", "a sha256 of the training files (64 lowercase hexadecimal digits)"),
    ("until_per_epoch", "0", "0 (int)", "an integer, 1 or more (the updates per epoch the run's end was counted in)"),
])
def test_a_malformed_new_key_is_refused_at_its_key(run: Path, key: str, bad: str, received: str, expected: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Was (train_files_sha256): read as "not recorded", the files then compared with the run's latest start."""
    file = run / "ckpt-00000009" / "meta.json"
    text = file.read_text()
    line = next(n for n, row in enumerate(text.splitlines(), 1) if f'"{key}"' in row)
    file.write_text(json.dumps({**json.loads(text), key: json.loads(bad)}, indent=2, sort_keys=True))
    before = snapshot(run)
    code, out, err = cli(["train", run.parent / "spec.yaml", "--resume", "--quiet"], capsys)
    assert (code, out) == (1, "")
    assert err == (f"{file}:{line}:3: error: checkpoint ckpt-00000009 has a malformed meta.json: '{key}' is "
                   f"{received}; expected {expected}, as specgen writes it. Resume from another checkpoint "
                   "(--resume-from) or start over with --fresh\n1 error found\n")
    assert snapshot(run) == before
