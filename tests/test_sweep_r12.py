"""`specgen sweep`, round 12: what defines a study (another spec never joins it, and the refusal writes nothing and
names what differs), usage mistakes as usage lines (exit 2), a worker that fails or a reader that goes away never
leaves a trial running, `report --sweep --storage`, and every value of a short range checked before any trial.

No trial trains here: each sweep stops before its first `specgen train` starts (a refusal, a log that cannot be
opened, standard output closed), so the file runs in seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli

pytest.importorskip("optuna")

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: tiny_mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 16, activation: relu}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: adam, learning_rate: 0.01}}
train: {{batch_size: 64, epochs: 2, metrics: [accuracy], seed: 1}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
  eval: {{npz: {DIGITS}, features: {{image: x_test}}, labels: {{label: y_test}}}}
checkpoint: {{dir: runs/tiny}}
sweep:
  metric: eval/accuracy
  direction: maximize
  trials: 2
  space:
    optimizers.all.learning_rate: {{log_uniform: [1.0e-3, 1.0e-1]}}
    layers[hidden].units: {{choice: [8, 16, 32]}}
"""


def write(folder: Path, text: str = SPEC, name: str = "mlp.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def make_study(spec: Path, folder: Path, url: str | None = None, base: list[str] | None = None) -> Any:
    """The study `specgen sweep spec -o folder` makes before its first trial (command.py _run's steps)."""
    from specgen.spec.overrides import load_with_overrides
    from specgen.sweep import storage as stores
    from specgen.sweep.plan import Plan
    from specgen.sweep.space import parameters
    from specgen.sweep.study import open_study, quiet_optuna, retry

    quiet_optuna()
    folder.mkdir(exist_ok=True)
    sets = base or []
    url = url or stores.default_url(folder)
    loaded = load_with_overrides(spec, sets)
    assert loaded.spec.sweep is not None
    plan = Plan(loaded, loaded.spec.sweep, parameters(loaded, sets), folder.resolve(), url, 2, 1, sets)
    return plan, open_study(plan, stores.open_storage(url, retry))


def states(url: str, name: str = "tiny_mlp") -> list[tuple[int, str, Any, Any]]:
    import optuna

    study = optuna.load_study(study_name=name, storage=url)
    return [(t.number, t.state.name, t.user_attrs.get("interrupted"), t.user_attrs.get("retry_of"))
            for t in study.trials]


# --- F1, F5: what defines a study ------------------------------------------------------------------------------

def test_an_edited_spec_does_not_join_the_study_and_says_what_differs(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    make_study(write(tmp_path), tmp_path / "k9")
    other = SPEC.replace("epochs: 2", "epochs: 1").replace("activation: relu", "activation: tanh")
    write(tmp_path, other, "other.yaml")
    before = sorted(p.name for p in (tmp_path / "k9").iterdir())
    code, out, err = run_cli(["sweep", "other.yaml", "-o", "k9", "--trials", "4"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "other.yaml: error: the study 'tiny_mlp' in sqlite:///k9/study.db belongs to another sweep: "
        "layers[hidden].activation is \"tanh\" here, \"relu\" in the study's; train.epochs is 1 here, "
        "2 in the study's; a study compares the trials of one spec, so this sweep cannot join it: expected the spec "
        "the study was made with, or a new study: -o NEW_FOLDER (each sweep folder keeps its own study)",
        "1 error found"]
    assert sorted(p.name for p in (tmp_path / "k9").iterdir()) == before
    assert states(f"sqlite:///{tmp_path / 'k9' / 'study.db'}") == []


def test_a_refused_study_in_a_storage_leaves_no_new_folder_and_names_the_sets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_study(write(tmp_path), tmp_path / "out1")
    url = f"sqlite:///{tmp_path / 'out1' / 'study.db'}"
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "fresh_dir", "--storage", url, "--set", "train.epochs=1"],
                             capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "mlp.yaml: error: the study 'tiny_mlp' in sqlite:///out1/study.db belongs to another sweep: it was made with "
        "no --set, and this sweep has --set train.epochs=1; a study compares the trials of one spec, so this sweep "
        "cannot join it: expected the --sets the study was made with, or a new study: a copy of the spec with "
        "another 'name' (the study's name in this storage) or another --storage",
        "1 error found"]
    assert not (tmp_path / "fresh_dir").exists()


def test_only_the_budget_and_how_trials_are_drawn_may_change(tmp_path: Path) -> None:
    """sweep.trials, sampler, seed, pruner, doc, checkpoint.dir, export and train.tracking may change (study.py
    MAY_CHANGE); a default written out is no change; anything else is another study."""
    from specgen.spec.overrides import load_with_overrides
    from specgen.sweep.membership import check_study

    plan, study = make_study(write(tmp_path), tmp_path / "s")
    same = SPEC.replace("trials: 2", "trials: 7\n  sampler: random\n  seed: 3\n  pruner: median").replace(
        "name: tiny_mlp\n", "name: tiny_mlp\ndoc: tuned\n").replace("dir: runs/tiny", "dir: runs/other").replace(
        "seed: 1}", "seed: 1, accumulate: 1}")
    plan.loaded = load_with_overrides(write(tmp_path, same, "same.yaml"), [])
    check_study(plan, study._storage)  # accepted: no error
    plan.loaded = load_with_overrides(write(tmp_path, SPEC.replace("[8, 16, 32]", "[8, 16]"), "space.yaml"), [])
    with pytest.raises(Exception, match=r"sweep\.space\.layers\[hidden\]\.units\.choice\.2 is the default here, "
                                        r"32 in the study's;"):
        check_study(plan, study._storage)


# --- F2: usage mistakes --------------------------------------------------------------------------------------

USAGE = [
    (["sweep", "mlp.yaml", "--image", "x"],
     "specgen sweep: error: --image goes with --emit katib; a local sweep takes -o, --trials, --parallel, --storage, "
     "--track and --set"),
    (["sweep", "mlp.yaml", "--emit", "katib"],
     "specgen sweep: error: --emit katib: --image is required: the container image that holds specgen, TensorFlow "
     "and the spec (e.g. --image registry/train:1.0)"),
    (["sweep", "mlp.yaml", "--emit", "katib", "--image", "x", "--track", "mlflow:/tmp/x"],
     "specgen sweep: error: --track goes with a local sweep; a Katib trial runs in its pod: track it with "
     "train.tracking.mlflow in the spec (docs/tracking.md)"),
    (["sweep", "mlp.yaml", "--emit", "katib", "--image", "x", "--storage", "sqlite:///s.db"],
     "specgen sweep: error: --storage goes with a local sweep; Katib keeps the trials of its Experiment itself"),
    (["report", "mlp.yaml", "--html", "--sweep", "nowhere", "-o", "r.html"],
     "specgen report: error: --sweep nowhere: no study.db there; a sweep keeps its study in its folder (its -o) "
     "unless it ran with --storage: expected that folder, or --storage URL naming the storage the sweep used"),
    (["report", "mlp.yaml", "--html", "--sweep", "nowhere", "--storage", "journal:j.log", "-o", "r.html"],
     "specgen report: error: --storage journal:j.log: no such file; expected the storage the sweep ran with (its "
     "--storage)"),
    (["report", "mlp.yaml", "--html", "--sweep", "s", "--storage", "", "-o", "r.html"],
     "specgen report: error: --storage '': the URL is empty; expected an Optuna storage: an RDB URL "
     "(sqlite:///study.db, postgresql://user@host/db) or journal:PATH (a journal file on a shared filesystem)"),
    (["report", "mlp.yaml", "--html", "--sweep", "s", "--storage", "sqlite://", "-o", "r.html"],
     "specgen report: error: --storage sqlite://: an in-memory SQLite database is private to one connection and "
     "gone when the sweep ends, so the sweep's worker threads, a later run that continues the sweep and other sweep "
     "processes cannot share the study; expected a database file (sqlite:///study.db), an RDB server "
     "(postgresql://user@host/db) or journal:PATH"),
    (["report", "mlp.yaml", "--storage", "journal:j.log"],
     "specgen report: error: got --storage without --sweep; expected --html --sweep DIR --storage URL (the storage "
     "the sweep ran with)"),
]


@pytest.mark.parametrize(("args", "line"), USAGE)
def test_usage_mistakes_are_usage_lines(args: list[str], line: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    if "--sweep" in args:  # the page's picture comes first (need_matplotlib)
        pytest.importorskip("matplotlib")
    write(tmp_path)
    assert run_cli(args, capsys, tmp_path) == (2, "", line + "\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.yaml"]


def test_report_sweep_without_a_sweep_section_is_a_usage_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    write(tmp_path, SPEC[: SPEC.index("sweep:")])
    code, out, err = run_cli(["report", "mlp.yaml", "--html", "--sweep", "s", "-o", "r.html"], capsys, tmp_path)
    assert (code, out, err) == (2, "", "specgen report: error: --sweep: mlp.yaml has no 'sweep' section; expected "
                                       "the spec the sweep ran\n")


# --- F4: report --sweep of a sweep that used --storage ---------------------------------------------------------

def test_report_reads_a_sweep_kept_in_another_storage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    journal = tmp_path / "j.log"
    make_study(write(tmp_path), tmp_path / "jr", f"journal:{journal}")
    code, out, err = run_cli(["report", "mlp.yaml", "--html", "--sweep", "jr", "--storage", f"journal:{journal}",
                              "-o", "rj.html"], capsys, tmp_path)
    assert (code, err) == (0, "") and out.startswith("wrote rj.html (")
    assert "0 trial(s)" in (tmp_path / "rj.html").read_text()
    code, _, err = run_cli(["report", "mlp.yaml", "--html", "--sweep", "jr", "--storage",
                            f"sqlite:///{tmp_path / 'none.db'}", "-o", "r2.html"], capsys, tmp_path)
    assert (code, err) == (2, "specgen report: error: --storage sqlite:///none.db: no such file; expected the "
                              "storage the sweep ran with (its --storage)\n")


# --- F3: a worker's error, a reader gone ---------------------------------------------------------------------

def test_a_log_that_cannot_be_opened_queues_the_trial_again_and_ends_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path)
    (tmp_path / "dd" / "trial-0000.log").mkdir(parents=True)  # the log's name is a folder: os.open fails
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "dd"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "specgen: error: sweep: stopped by an error: dd/trial-0000.log: it is a folder; give a file path; the "
        "trials it stopped run again when the same command continues the sweep (study 'tiny_mlp' in "
        "sqlite:///dd/study.db)"]
    assert "2 trial(s): 1 interrupted, 1 queued" in out.splitlines()
    assert states(f"sqlite:///{tmp_path / 'dd' / 'study.db'}") == [
        (0, "FAIL", "the sweep was stopped", None), (1, "WAITING", None, 0)]


def test_a_reader_that_goes_away_ends_the_sweep_quietly_with_no_trial_running(tmp_path: Path) -> None:
    """A real pipe, closed after the first line: every later line (the workers' too) hits EPIPE."""
    write(tmp_path)
    child = subprocess.Popen([sys.executable, "-m", "specgen", "sweep", "mlp.yaml", "-o", "pipe"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stderr is not None
    first = child.stdout.readline()
    child.stdout.close()
    err = child.stderr.read()
    assert (child.wait(timeout=120), err) == (141, "")
    assert first.startswith("sweep tiny_mlp: 2 trials of eval/accuracy (maximize)")
    assert states(f"sqlite:///{tmp_path / 'pipe' / 'study.db'}") == [
        (0, "FAIL", "the sweep was stopped", None), (1, "WAITING", None, 0)]
    assert (tmp_path / "pipe" / "summary.txt").read_text().splitlines()[-1] == "no trial finished with a value of " \
        "eval/accuracy"
    assert not (tmp_path / "pipe" / "trial-0000").exists()  # no process was started for it


# --- F6: every value of a short range ------------------------------------------------------------------------

PRUNED = SPEC[: SPEC.index("sweep:")] + """\
prune:
  variables: ["hidden/kernel"]
  schedule: {kind: polynomial_decay, final_sparsity: 0.5, begin_step: 0, end_step: 20, frequency: 5}
sweep:
  metric: eval/accuracy
  direction: maximize
  trials: 4
  sampler: grid
  space:
    prune.schedule.frequency: {int: [5, 20], step: 5}
"""


def test_a_value_inside_a_range_is_checked_before_any_trial(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, PRUNED)
    code, out, err = run_cli(["sweep", "mlp.yaml", "-o", "prn"], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "mlp.yaml:26:5: error: 'prune.schedule.frequency' cannot take 15 (a value of its range): end_step 20 is not "
        "begin_step + k * frequency (0 + k * 15): masks would be recomputed at step 15 (once), and the last target "
        "would be sparsity 0.492188, not final_sparsity 0.5 (TF Model Optimization falls short the same way, "
        "silently); set end_step to 15 or 30, or frequency to 10",
        "1 error found"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.yaml"]


def test_a_long_range_is_checked_at_its_ends_and_spread_between() -> None:
    from specgen.sweep.space import CHECKED, HALF, Param
    from specgen.sweep.spec import IntRange, UniformRange

    short = Param("k", IntRange.model_validate({"int": [8, 64], "step": 10}))
    assert short.edges() == [8, 18, 28, 38, 48, 58]
    assert Param("k", UniformRange.model_validate({"uniform": [0.1, 0.3], "step": 0.1})).edges() == [0.1, 0.2, 0.3]
    values = Param("k", IntRange.model_validate({"int": [1, 100_000]})).edges()
    assert len(values) == CHECKED and values == sorted(set(values))
    assert values[:HALF] == list(range(1, HALF + 1)) and values[-HALF:] == list(range(100_001 - HALF, 100_001))
