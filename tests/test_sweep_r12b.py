"""`specgen sweep`, round 12 (verify): a study records the data its trials read and refuses other bytes at the same
path; `report --sweep DIR --storage URL` draws the study DIR belongs to or refuses; two different values never print
alike in a refusal (a value written out is not "the default", a long value is cut where it differs, a sparsity or a
step shown to the digits that tell it apart).

No trial trains here: each sweep is refused before its first `specgen train` starts, or the study is made as
`specgen sweep` makes it (test_sweep_r12.make_study), so the file runs in seconds.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli
from test_sweep_r12 import DIGITS, PRUNED, SPEC, make_study, write

pytest.importorskip("optuna")

LOCAL = SPEC.replace(str(DIGITS), "digits.npz")  # data beside the spec, so a test can rewrite it


def local_spec(folder: Path, text: str = LOCAL, name: str = "mlp.yaml") -> Path:
    shutil.copy(DIGITS, folder / "digits.npz")
    return write(folder, text, name)


def rewrite_fewer_rows(path: Path, rows: int = 500) -> None:
    arrays = dict(np.load(path))
    arrays["x_train"], arrays["y_train"] = arrays["x_train"][:rows], arrays["y_train"][:rows]
    np.savez(path, **arrays)


def described(path: Path) -> str:
    return f"{path.stat().st_size:,} bytes (sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:12]})"


# --- a study's data ----------------------------------------------------------------------------------------------

def test_a_data_file_rewritten_at_the_same_path_does_not_join_the_study(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local_spec(tmp_path)
    make_study(tmp_path / "mlp.yaml", tmp_path / "k9")
    before = described(tmp_path / "digits.npz")
    kept = tmp_path / "digits.orig"
    shutil.copy(tmp_path / "digits.npz", kept)
    rewrite_fewer_rows(tmp_path / "digits.npz")
    listed = sorted(p.name for p in (tmp_path / "k9").iterdir())
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "k9", "--trials", "3"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"mlp.yaml:14:16: error: the study 'tiny_mlp' in sqlite:///k9/study.db belongs to another sweep: data.train's "
        f"digits.npz is {described(tmp_path / 'digits.npz')} here, {before} in the study's (and 1 more: data.eval's "
        "digits.npz); a study compares trials trained on the same data, so this sweep cannot join it: expected the "
        "data files the study was made with (as they were), or a new study: -o NEW_FOLDER (each sweep folder keeps "
        "its own study)",
        "1 error found"]
    assert sorted(p.name for p in (tmp_path / "k9").iterdir()) == listed
    shutil.copy(kept, tmp_path / "digits.npz")  # the same bytes again: the sweep joins its study (no refusal)
    make_study(tmp_path / "mlp.yaml", tmp_path / "k9")


def test_data_read_from_another_working_folder_are_the_same_data(tmp_path: Path) -> None:
    """Paths are recorded from the spec's folder, not the working folder: a sweep started elsewhere joins."""
    import os

    from specgen.sweep.datafiles import fingerprint
    from specgen.sweep.membership import check_study

    local_spec(tmp_path)
    plan, study = make_study(tmp_path / "mlp.yaml", tmp_path / "k9")
    assert [f[0] for f in plan.data["train"]["files"]] == ["digits.npz"]
    (tmp_path / "sub").mkdir()
    old = Path.cwd()
    os.chdir(tmp_path / "sub")
    try:
        assert fingerprint(plan.loaded) == plan.data
        check_study(plan, study._storage)
    finally:
        os.chdir(old)


def test_a_study_of_an_older_specgen_records_the_data_once_with_a_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    optuna = pytest.importorskip("optuna")
    local_spec(tmp_path)
    _, study = make_study(tmp_path / "mlp.yaml", tmp_path / "k9")
    study.set_user_attr("specgen_data", None)  # as an older specgen left it: no record of the data
    for value in (0.5, 0.7):  # the budget spent: the sweep runs no trial
        study.add_trial(optuna.trial.create_trial(
            params={"optimizers.all.learning_rate": 0.01, "layers[hidden].units": 8}, value=value,
            distributions={"optimizers.all.learning_rate": optuna.distributions.FloatDistribution(1e-3, 0.1, log=True),
                           "layers[hidden].units": optuna.distributions.CategoricalDistribution([8, 16, 32])}))
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "k9"], capsys, tmp_path)
    assert (code, err) == (0, ""), err
    assert out.splitlines()[1] == (
        "note: the study 'tiny_mlp' in sqlite:///k9/study.db was made by an older specgen, which did not record the "
        "data its trials read; it now records the files mlp.yaml reads as they are now (each file's size and "
        "sha256), and refuses a sweep on other data from now on (whether its earlier trials read these bytes cannot "
        "be checked)")
    assert out.count("note: ") == 1
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "k9"], capsys, tmp_path)
    assert (code, err) == (0, "") and "note: " not in out
    rewrite_fewer_rows(tmp_path / "digits.npz")
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "k9"], capsys, tmp_path)
    assert code == 1 and "belongs to another sweep: data.train's digits.npz is " in err


def test_a_data_file_that_cannot_be_read_is_one_line_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local_spec(tmp_path, LOCAL.replace("npz: digits.npz, features: {image: x_test}",
                                       "npz: gone.npz, features: {image: x_test}"))
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "s", "--storage", f"sqlite:///{tmp_path / 'x.db'}"],
                             capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "mlp.yaml:15:15: error: data.eval (gone.npz): no such file; expected a .npz file relative to the spec's "
        "folder, its files readable (a sweep records each data file's size and sha256 before its first trial)",
        "1 error found"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits.npz", "mlp.yaml"]


# --- report --sweep DIR --storage URL -----------------------------------------------------------------------------

def two_studies(tmp_path: Path) -> str:
    """tiny_mlp's sweep in out1 and tiny_mlp2's in fresh2, both in out1's study.db (SW5's advice taken)."""
    url = f"sqlite:///{tmp_path / 'out1' / 'study.db'}"
    make_study(write(tmp_path), tmp_path / "out1")
    make_study(write(tmp_path, SPEC.replace("name: tiny_mlp", "name: tiny_mlp2"), "mlp2.yaml"), tmp_path / "fresh2",
               url)
    return url


def test_report_refuses_a_folder_of_another_study_in_the_storage(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    url = two_studies(tmp_path)
    code, out, err = run_cli(["report", "mlp.yaml", "--html", "--sweep", "fresh2", "--storage", url, "-o", "r.html"],
                             capsys, tmp_path)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "specgen report: error: --sweep fresh2: that folder holds the sweep of the study 'tiny_mlp2' in "
        "sqlite:///out1/study.db, not of 'tiny_mlp' (the study named after mlp.yaml's 'name'); expected the spec "
        "that sweep ran (its 'name': tiny_mlp2), or the folder of a sweep of mlp.yaml"]
    (tmp_path / "elsewhere").mkdir()
    code, out, err = run_cli(["report", "mlp.yaml", "--html", "--sweep", "elsewhere", "--storage", url, "-o",
                              "r.html"], capsys, tmp_path)
    assert (code, out, err) == (2, "", "specgen report: error: --sweep elsewhere: no study in sqlite:///out1/study.db "
                                       "ran a sweep in that folder; expected the folder (-o) of a sweep that used "
                                       "this storage\n")
    assert not (tmp_path / "r.html").exists()
    code, out, err = run_cli(["report", "mlp2.yaml", "--html", "--sweep", "fresh2", "--storage", url, "-o",
                              "r.html"], capsys, tmp_path)
    assert (code, err) == (0, "") and out.startswith("wrote r.html (")
    assert "Sweep (fresh2)" in (tmp_path / "r.html").read_text()


def test_report_finds_an_older_study_by_its_trials_run_folders(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A study made before sweeps recorded their folder: its trials' run folders (SWEEP/trial-NNNN) say where."""
    optuna = pytest.importorskip("optuna")
    pytest.importorskip("matplotlib")
    url = two_studies(tmp_path)
    with sqlite3.connect(tmp_path / "out1" / "study.db") as db:
        db.execute("DELETE FROM study_user_attributes WHERE key LIKE 'specgen_folder_%'")
    study = optuna.load_study(study_name="tiny_mlp2", storage=url)
    study.add_trial(optuna.trial.create_trial(
        params={"layers[hidden].units": 8}, value=0.5, user_attrs={"folder": str(tmp_path / "fresh2" / "trial-0000")},
        distributions={"layers[hidden].units": optuna.distributions.CategoricalDistribution([8, 16, 32])}))
    code, out, err = run_cli(["report", "mlp.yaml", "--html", "--sweep", "fresh2", "--storage", url, "-o", "r.html"],
                             capsys, tmp_path)
    assert (code, out) == (2, "") and err.startswith("specgen report: error: --sweep fresh2: that folder holds the "
                                                     "sweep of the study 'tiny_mlp2' in ")
    code, out, err = run_cli(["report", "mlp2.yaml", "--html", "--sweep", "fresh2", "--storage", url, "-o",
                              "r.html"], capsys, tmp_path)
    assert (code, err) == (0, "")


# --- two values that differ never read alike ------------------------------------------------------------------------

def test_a_value_written_out_is_not_called_the_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_study(write(tmp_path), tmp_path / "k9")
    write(tmp_path, SPEC.replace("epochs: 2, ", "epochs: 1, ").replace("seed: 1}", "seed: 1, accumulate: 1}")
          .replace("units: 16", "units: 12"), "written.yaml")
    write(tmp_path, SPEC.replace("epochs: 2, ", ""), "left.yaml")
    code, _, err = run_cli(["sweep", "written.yaml", "-o", "k9"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines()[0].split("belongs to another sweep: ")[1].split("; a study")[0] == (
        "layers[hidden].units is 12 here, 16 in the study's; train.epochs is 1 here, 2 in the study's")
    code, _, err = run_cli(["sweep", "left.yaml", "-o", "k9"], capsys, tmp_path)
    assert err.splitlines()[0].split("belongs to another sweep: ")[1].split("; a study")[0] == (
        "train.epochs is 1 (the default) here, 2 in the study's")


def test_long_values_are_cut_where_they_differ() -> None:
    from specgen.sweep.membership import _differences

    start = "runs/" + "a" * 100
    assert _differences({"data.train.npz": f"{start}/old.npz"}, {"data.train.npz": f"{start}/new.npz"}) == (
        f'data.train.npz is …{"a" * 19}/new.npz" here, …{"a" * 19}/old.npz" in the study\'s')
    assert _differences({"k": "x" * 90}, {"k": "y" * 90}) == (
        f'k is "{"y" * 79}… here, "{"x" * 79}… in the study\'s')


PRUNED_LATE = PRUNED.replace("end_step: 20, frequency: 5", "end_step: 2000, frequency: 5").replace(
    "prune.schedule.frequency: {int: [5, 20], step: 5}", "prune.schedule.frequency: {choice: [5, 3]}")


def test_a_last_sparsity_just_short_of_the_target_prints_the_digits_that_differ(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, PRUNED_LATE)
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "prn"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "mlp.yaml:26:5: error: 'prune.schedule.frequency' cannot take 3: end_step 2000 is not begin_step + k * "
        "frequency (0 + k * 3): masks would be recomputed at steps 3, 6, 9, then every 3 until 1998 (666 times), and "
        "the last target would be sparsity 0.4999999995, not final_sparsity 0.5 (TF Model Optimization falls short "
        "the same way, silently); set end_step to 1998 or 2001, or frequency to 2",
        "1 error found"]


def test_the_largest_step_of_a_range_is_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, SPEC.replace("{log_uniform: [1.0e-3, 1.0e-1]}", "{uniform: [0.001, 0.09999999], step: 0.1}"))
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "st"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines()[0].endswith("uniform: the step 0.1 is larger than the range [0.001, 0.09999999], which "
                                        "then holds one value (0.001); expected a step of at most 0.09899999")


# --- one sweep folder, one study ------------------------------------------------------------------------------------

def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_of_another_study_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Trial run folders are named by their number in their study: a second study in one folder would write over the
    first one's trial-0000. Refused with the default storage (the folder's study.db), a shared one, and another one
    (the folder's study.db still says whose folder it is)."""
    make_study(write(tmp_path), tmp_path / "out1")
    write(tmp_path, SPEC.replace("name: tiny_mlp", "name: tiny_mlp2"), "mlp2.yaml")
    before = snapshot(tmp_path / "out1")
    refusal = ("specgen sweep: error: the sweep folder out1 belongs to the study 'tiny_mlp' in sqlite:///out1/study.db: "
               "its trials' run folders (trial-NNNN) would be written over by the trials of the study '{name}' in "
               "{url} ({spec}'s 'name'); expected a folder of this study's own: -o NEW_FOLDER\n")
    for name, spec, storage in [("tiny_mlp2", "mlp2.yaml", []),
                                ("tiny_mlp2", "mlp2.yaml", ["--storage", "sqlite:///out1/study.db"]),
                                ("tiny_mlp", "mlp.yaml", ["--storage", "sqlite:///shared.db"])]:
        code, out, err = run_cli(["sweep", spec, "-o", "out1", *storage], capsys, tmp_path)
        url = storage[1] if storage else "sqlite:///out1/study.db"
        assert (code, out, err) == (2, "", refusal.format(name=name, url=url, spec=spec))
        assert snapshot(tmp_path / "out1") == before
    assert not (tmp_path / "shared.db").exists()
    # Its own folder, or the same study again in its own folder and storage, is no refusal
    make_study(tmp_path / "mlp2.yaml", tmp_path / "out2", f"sqlite:///{tmp_path / 'out1' / 'study.db'}")
    make_study(tmp_path / "mlp.yaml", tmp_path / "out1")


def test_editing_checkpoint_every_steps_or_keep_joins_the_study(tmp_path: Path) -> None:
    """Where a trial saves and how many checkpoints it keeps change nothing it learns (MAY_CHANGE); a study that
    recorded them, made before they joined MAY_CHANGE, is joined too."""
    import optuna

    assert "checkpoint: {dir: runs/tiny}" in SPEC
    make_study(write(tmp_path), tmp_path / "k9")
    for edit in ["keep: 9", "every_steps: 7", "every_steps: 7, keep: 9"]:
        edited = write(tmp_path, SPEC.replace("{dir: runs/tiny}", f"{{dir: runs/tiny, {edit}}}"), "edited.yaml")
        plan, _ = make_study(edited, tmp_path / "k9")  # no refusal
    study = optuna.load_study(study_name="tiny_mlp", storage=plan.url)
    recorded = study.user_attrs["specgen"]
    study.set_user_attr("specgen", {**recorded, "spec": "0" * 64, "keys": {**recorded["keys"], "checkpoint.keep": 9}})
    make_study(edited, tmp_path / "k9")
