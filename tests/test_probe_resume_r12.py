"""Round 12's verify findings on resuming (checker rt12, "New problem 1" and "New problem 5").

1. `--probe --resume` probed the spec with this command's `--set` overrides only, where `--resume` also applies the
   ones the run kept (meta.json `overrides`): after a resume with `--set optimizers.all.learning_rate=0.5` the probe
   measured the first update at the spec's 0.01 and noted a change "0.5 -> 0.01" that --resume does not make, and a
   run started with `--set layers[fc].units=8` could not be probed at all. The probe now builds the spec through
   resume.py's with_kept_overrides, shows the kept ones as the `resumed from` line does, and its first update is the
   one the resumed run makes (checked against the run's next checkpoint, on a full batch both read alike).
5. A checkpoint of one data position of all the data (every worker read all of it), resumed where the workers read
   shards of their own, was refused with advice that could not be followed (no option makes workers read all the
   data); the opposite direction started a new pass. Now both start a new pass with a note naming the change; a
   checkpoint of another number of per-worker positions is still refused. Driven on data_position.restore with
   real positions, as tests/test_data_r12b.py does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from cli_helpers import run_cli
from test_data_r12 import passes, read, write
from test_data_r12b import CKPT, SETTINGS, STEP, batches, new_pass, resume, save, shares

from specgen.diagnostics import SpecError

tf = pytest.importorskip("tensorflow")

# --- 1: --probe --resume probes the spec --resume trains ---------------------------------------------------------

SPEC = """\
specgen: 1
name: lr
inputs: {x: {shape: [6]}}
outputs: {logits: out}
layers:
  - {name: fc, op: dense, units: 4, activation: tanh}
  - {name: out, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {kind: adam, learning_rate: 0.01}
train: {batch_size: full, shuffle_buffer: 1}
data: {train: {npz: d.npz, features: {x: x}, labels: {label: y}}}
checkpoint: {dir: run, every_steps: 1, keep: 100}
"""
RATE = "optimizers.all.learning_rate=0.5"
WEIGHTS = ("fc/kernel", "fc/bias", "out/kernel", "out/bias")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.standard_normal((64, 6)).astype(np.float32),
             y=rng.integers(0, 3, 64).astype(np.int64))
    (tmp_path / "lr.yaml").write_text(SPEC)
    return tmp_path


def cli(folder: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    code, out, err = run_cli(["train", "lr.yaml", *args], capsys, folder)
    assert (code, err) == (0, ""), err
    return out.splitlines()


def head(lines: list[str]) -> list[str]:
    """The probe's first line without its loss figure, and its notes up to the blank line before the table."""
    first, _, _ = lines[0].partition("; training-mode loss ")
    return [first, *lines[1:lines.index("")]]


def values(checkpoint: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(checkpoint / "variables"))
    return {key: reader.get_tensor(key) for key in WEIGHTS}


@pytest.mark.slow
def test_probe_on_resume_applies_the_overrides_the_run_kept(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli(folder, capsys, "--steps", "2", "--quiet")
    assert cli(folder, capsys, "--resume", "--steps", "1", "--quiet", "--set", RATE)[0] == (
        f"resumed from run/ckpt-00000002 at step 2 with --set {RATE}")
    kept = f"probe: one batch of 64 examples, weights from the checkpoint run/ckpt-00000003 with --set {RATE} (kept " \
           "from the run)"
    # No "0.5 -> 0.01" note: --resume trains on at the kept 0.5, as its own line says below.
    assert head(cli(folder, capsys, "--probe", "--resume")) == [kept]
    assert head(cli(folder, capsys, "--probe", "--resume-from", "run/ckpt-00000003")) == [kept]
    # This command's --set replaces the kept one, and is in view on its command line: neither shown nor noted.
    assert head(cli(folder, capsys, "--probe", "--resume", "--set", "optimizers.all.learning_rate=0.3")) == [
        "probe: one batch of 64 examples, weights from the checkpoint run/ckpt-00000003"]
    # The update the probe measures is the one the resumed run makes (the full batch: the same examples).
    from specgen.pipeline import build
    from specgen.runtime.commands.probe import probe, resumed_spec
    from specgen.spec.load import load_spec

    built, begin = resumed_spec(build(load_spec(folder / "lr.yaml")), folder / "run" / "ckpt-00000003")
    probed = {row.path: row.update_norm for row in probe(built, begin).variables}
    assert cli(folder, capsys, "--resume", "--steps", "1", "--quiet")[0] == (
        f"resumed from run/ckpt-00000003 at step 3 with --set {RATE} (kept from the run)")
    before, after = values(folder / "run" / "ckpt-00000003"), values(folder / "run" / "ckpt-00000004")
    made = {path: float(np.linalg.norm((after[path] - before[path]).astype(np.float64))) for path in WEIGHTS}
    assert probed == pytest.approx(made, rel=1e-4)


@pytest.mark.slow
def test_probe_on_resume_prints_the_note_resume_prints_of_latest(folder: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`latest` naming an older checkpoint: both take the newest in save order, and say so in the same words."""
    cli(folder, capsys, "--steps", "2", "--quiet")
    (folder / "run" / "latest").write_text("ckpt-00000001\n")
    note = ("note: run/latest names ckpt-00000001, saved before ckpt-00000002; using ckpt-00000002, the newest "
            "checkpoint there")
    assert head(cli(folder, capsys, "--probe", "--resume")) == [
        "probe: one batch of 64 examples, weights from the checkpoint run/ckpt-00000002", note]
    assert cli(folder, capsys, "--resume", "--steps", "1", "--quiet")[:2] == [
        note, "resumed from run/ckpt-00000002 at step 2"]


@pytest.mark.slow
def test_probe_on_resume_builds_the_model_a_kept_override_shaped(folder: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A run started with `--set layers[fc].units=8` saved fc/kernel as [6, 8]: the probe builds that model too."""
    cli(folder, capsys, "--steps", "1", "--quiet", "--set", "layers[fc].units=8")
    lines = cli(folder, capsys, "--probe", "--resume")
    assert head(lines) == ["probe: one batch of 64 examples, weights from the checkpoint run/ckpt-00000001 with "
                           "--set layers[fc].units=8 (kept from the run)"]
    columns = [re.split(r"\s{2,}", line) for line in lines]
    assert [row[:2] for row in columns if row[0] in ("fc/kernel", "out/kernel")] == [["fc/kernel", "[6, 8]"],
                                                                                    ["out/kernel", "[8, 3]"]]


@pytest.mark.slow
def test_probe_on_resume_refuses_a_kept_override_as_resume_does(folder: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A kept override the edited spec cannot take: the probe's error is --resume's, word for word."""
    cli(folder, capsys, "--steps", "1", "--quiet", "--set", "layers[fc].units=8")
    (folder / "lr.yaml").write_text(SPEC.replace("name: fc", "name: hidden"))
    errors = [run_cli(["train", "lr.yaml", *args], capsys, folder) for args in (["--probe", "--resume"],
                                                                                  ["--resume", "--steps", "1"])]
    assert errors[0] == errors[1]
    assert errors[0] == (1, "", "--set layers[fc].units=8: error: no item named 'fc' in 'layers' (with the overrides "
                                "kept from run/ckpt-00000001: replace one with --set KEY=VALUE)\n1 error found\n")


# --- 5: one position of all the data, resumed where the workers read their own shards ------------------------------

def save_whole(folder: Path, whole: Any, meta: dict[str, Any]) -> Path:
    """A checkpoint of one data position (`data.*`) after STEP batches of all the data, and `meta` as its meta.json
    (no `data_workers`: every worker read all of it, or one process did)."""
    checkpoint = folder / CKPT
    checkpoint.mkdir(parents=True)
    iterator = iter(batches(whole))
    for _ in range(STEP):
        next(iterator)
    tf.train.Checkpoint(iterator=iterator).write(str(checkpoint / "data"))
    (checkpoint / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return checkpoint


WHOLE_META = {"step": STEP, "spec": "tiny", "data": SETTINGS | {"examples": 80}, "accumulate": 1, "pass_start": 0}


def test_a_checkpoint_of_all_the_data_resumed_on_shards_starts_a_new_pass(tmp_path: Path) -> None:
    """4 equal shards over 2 workers: each reads 2 of them now; the checkpoint's one position is of all 4 files."""
    spec = write(tmp_path, [20, 20, 20, 20])
    source, _ = read(spec)
    train, new = shares(spec)
    assert [w.sharded for w in new] == [True, True]
    checkpoint = save_whole(tmp_path / "run", SimpleNamespace(source=source), WHOLE_META)
    for index, worker in enumerate(new):
        note, start, iterator = resume(checkpoint, train, index, worker)
        assert (note, start) == (new_pass("which shards each worker reads: every worker read all the data when it "
                                          "was saved, and this run's 2 workers read their own"), STEP)
        # The new pass of its own share, shuffled with train.seed + step, as any changed data setting starts.
        assert passes(iterator, 1, 20) == passes(batches(worker, STEP), 1, 20)


def test_a_checkpoint_of_all_the_data_resumed_on_all_the_data_goes_on(tmp_path: Path) -> None:
    """Unchanged: workers that each read all the data (3 unbalanced shards) restore the one position exactly."""
    spec = write(tmp_path, [10, 13, 7])
    source, _ = read(spec)
    train, new = shares(spec)
    whole = SimpleNamespace(source=source, share=None)
    checkpoint = save_whole(tmp_path / "run", whole, WHOLE_META | {"data": SETTINGS | {"examples": 30}})
    note, start, iterator = resume(checkpoint, train, 0, whole, new[0].why)
    assert (note, start) == ("", 0)
    assert passes(iterator, 1, 10) == passes(batches(whole), 1, STEP + 10)[STEP:]


def test_the_positions_of_another_worker_count_are_still_refused(tmp_path: Path) -> None:
    """Per-worker positions of 2 workers, resumed by 3 that read shards: no re-shard continues them; refused."""
    spec = write(tmp_path, [20, 20, 20, 20])
    train, new = shares(spec)
    checkpoint = save(tmp_path / "run", new, {"step": STEP, "spec": "tiny", "data": SETTINGS | {"examples": 80},
                                              "accumulate": 1, "pass_start": 0, "data_workers": 2})
    with pytest.raises(SpecError) as caught:
        resume(checkpoint, train, 0, new[0], workers=3)
    assert str(caught.value) == (
        f"{checkpoint / 'meta.json'}: error: checkpoint {CKPT} holds the data positions of 2 workers that read "
        "disjoint shards, but this run has 3 workers that read disjoint shards: its data positions do not apply. To "
        "continue it, relaunch 2 workers with --resume; or start over with --fresh")


# --- --probe --resume says what --resume says: other damaged checkpoints, and a spec changed since -------------------

@pytest.mark.slow
def test_probe_on_resume_notes_the_damaged_checkpoints_resume_notes(folder: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An older checkpoint whose meta.json does not read: --resume goes on beside it with a note, and the probe
    prints that note, word for word, where --resume prints it (after `latest`'s note)."""
    cli(folder, capsys, "--steps", "3", "--quiet")
    (folder / "run" / "ckpt-00000001" / "meta.json").write_text("{")
    (folder / "run" / "latest").write_text("ckpt-00000002\n")
    damaged = ("note: run/ckpt-00000001/meta.json: checkpoint ckpt-00000001 is unreadable: not valid JSON (Expecting "
               "property name enclosed in double quotes); it is left as it is (pruning never removes a checkpoint "
               "whose save order it cannot read)")
    latest = ("note: run/latest names ckpt-00000002, saved before ckpt-00000003; using ckpt-00000003, the newest "
              "checkpoint there")
    assert head(cli(folder, capsys, "--probe", "--resume")) == [
        "probe: one batch of 64 examples, weights from the checkpoint run/ckpt-00000003", latest, damaged]
    assert head(cli(folder, capsys, "--probe", "--resume-from", "run/ckpt-00000002")) == [
        "probe: one batch of 64 examples, weights from the checkpoint run/ckpt-00000002", damaged]
    assert cli(folder, capsys, "--resume", "--steps", "1", "--quiet")[:2] == [latest, damaged]


@pytest.mark.slow
def test_probe_on_resume_refuses_a_changed_spec_as_resume_does(folder: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """fc widened since the checkpoint: the probe gives --resume's refusal (resume_fit.py), not a failed read of
    the checkpoint's variables."""
    cli(folder, capsys, "--steps", "1", "--quiet")
    (folder / "lr.yaml").write_text(SPEC.replace("units: 4", "units: 5"))
    errors = [run_cli(["train", "lr.yaml", *args], capsys, folder) for args in (
        ["--probe", "--resume"], ["--probe", "--resume-from", "run/ckpt-00000001"], ["--resume", "--steps", "1"])]
    assert errors[0] == errors[1] == errors[2]
    assert errors[0] == (1, "", "run/ckpt-00000001/variables.index: error: --resume: 'fc/kernel' is float32[6, 4] in "
                         "ckpt-00000001 but float32[6, 5] in this spec (8 more differences); the spec changed since "
                         "ckpt-00000001 was saved. Nothing was changed. Undo the change to resume, or start a new run "
                         "that restores only the model variables from it: checkpoint.restore: [{from: "
                         "run/ckpt-00000001}] and another checkpoint.dir (docs/finetune.md)\n1 error found\n")


@pytest.mark.slow
def test_probe_on_resume_prints_the_fit_note_resume_prints(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint of an older specgen (no `optimizers` in meta.json): both say its kinds went unchecked."""
    cli(folder, capsys, "--steps", "1", "--quiet")
    meta_file = folder / "run" / "ckpt-00000001" / "meta.json"
    meta = json.loads(meta_file.read_text())
    del meta["optimizers"]
    meta_file.write_text(json.dumps(meta))
    note = ("note: ckpt-00000001 records no optimizer kinds (an older specgen saved it): --resume compared the names "
            "of their saved slots only, so a change of kind with the same slots (adam -> adamw) is not noticed")
    assert head(cli(folder, capsys, "--probe", "--resume")) == [
        "probe: one batch of 64 examples, weights from the checkpoint run/ckpt-00000001", note]
    assert cli(folder, capsys, "--resume", "--steps", "1", "--quiet")[:2] == [
        note, "resumed from run/ckpt-00000001 at step 1"]
