"""`specgen sweep`'s second round of faults: a trial left running with no owner, two sweeps racing for a queued
trial, a trial killed by a signal, the bounds of --trials and --parallel, the sweep section's strict numbers and
distinct choices, keys that change the model's interface or data, one line per bad choice, and a tracking store
below a file.

Most drive the sweep's own parts (its Runner, a real Optuna study in SQLite, real processes) without TensorFlow;
one runs a 1-trial sweep end to end (slow), since only a real sweep shows that it no longer waits forever.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any

import pytest
from cli_helpers import run_cli
from test_sweep_checks import BASE, refused, write

optuna = pytest.importorskip("optuna")


# --- the sweep's parts, as command.py puts them together --------------------------------------------------------


def runner(tmp_path: Path, trials: int = 2, parallel: int = 1) -> tuple[Any, Any, list[str]]:
    """(a Runner, its study, the lines it said) for the spec of test_sweep_checks, its study in tmp_path."""
    from specgen.spec.overrides import load_with_overrides
    from specgen.sweep import storage as stores
    from specgen.sweep.driver import Runner
    from specgen.sweep.plan import Plan
    from specgen.sweep.space import parameters
    from specgen.sweep.study import open_study, quiet_optuna, retry

    quiet_optuna()
    loaded = load_with_overrides(write(tmp_path), [])
    assert loaded.spec.sweep is not None
    folder = tmp_path / "s"
    folder.mkdir()
    url = stores.default_url(folder)
    plan = Plan(loaded, loaded.spec.sweep, parameters(loaded, []), folder, url, trials, parallel)
    storage = stores.open_storage(url, retry)
    said: list[str] = []
    return Runner(plan, storage, said.append), open_study(plan, storage), said


class Clock:
    """claim.py's time.monotonic, which only the test moves: the grace is counted exactly, however long the SQLite
    reads in between take (a real 0.2 s grace was partly spent by them on a loaded machine)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        from specgen.sweep import claim

        self.now = 1000.0
        monkeypatch.setattr(claim, "time", SimpleNamespace(monotonic=lambda: self.now))  # claim's name only


def test_a_running_trial_without_an_owner_is_reaped_after_the_grace(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An older specgen killed between Optuna's ask() and writing the owner leaves this (made here as the checker
    did: an ask() whose process writes nothing more), and so does a live plain Optuna ask(): the sweep names it
    with the time left, and counts it as lost only after the grace (minutes) on its own clock."""
    from optuna.trial import TrialState

    from specgen.sweep import claim

    assert claim.OWNERLESS == 600
    monkeypatch.setenv("SPECGEN_SWEEP_OWNERLESS", "0.2")  # the grace, shortened, as a user may set it
    clock = Clock(monkeypatch)
    run, study, said = runner(tmp_path)
    assert run.grace == 0.2
    other = optuna.load_study(study_name=study.study_name, storage=run.plan.url)
    left = other.ask()  # RUNNING, no owner, no heartbeat
    run.reap(study)
    assert study.trials[left.number].state == TrialState.RUNNING  # first seen now: a live one is not failed at once
    run.waiting(study.get_trials(states=(TrialState.RUNNING,)), False)
    run.waiting(study.get_trials(states=(TrialState.RUNNING,)), True)  # said once
    assert said == ["waiting for 1 trial(s) running in other processes: 0; trial 0 has no owner and no heartbeat "
                    "(another program's, or an older specgen's), and counts as lost if it still has none in 1 s"]
    clock.now += 0.125  # within the grace: still waited for
    run.reap(study)
    assert study.trials[left.number].state == TrialState.RUNNING and len(said) == 1
    clock.now += 0.125
    run.reap(study)
    trials = study.get_trials()
    assert trials[left.number].state == TrialState.FAIL
    assert trials[left.number].user_attrs["interrupted"] == "it had no owner and no heartbeat for 0.2 s"
    assert [(t.number, t.state, t.user_attrs) for t in trials[1:]] == [(1, TrialState.WAITING, {"retry_of": 0})]
    assert said[1:] == ["trial 0 was interrupted (it had no owner and no heartbeat for 0.2 s): queued again"]


def test_the_grace_is_counted_from_when_this_process_saw_the_trial(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Not from the trial's start, which is the clock (and time zone) of the machine that made it: a trial that
    started long ago is waited for the whole grace all the same, and two of them are named together."""
    from datetime import datetime, timedelta

    from optuna.trial import FrozenTrial, TrialState

    clock = Clock(monkeypatch)
    run, study, said = runner(tmp_path, trials=5)
    run.grace = 30.0
    for hours in (30, -5):  # its start a day ago, or five hours ahead (another machine's clock or time zone)
        made = FrozenTrial(number=-1, state=TrialState.RUNNING, value=None, params={}, distributions={},
                           datetime_start=datetime.now() - timedelta(hours=hours), datetime_complete=None,
                           user_attrs={}, system_attrs={}, intermediate_values={}, trial_id=-1)
        run.storage.create_new_trial(study._study_id, template_trial=made)
    run.unowned[study.trials[0]._trial_id] = clock.now - 29.5  # seen 29.5 s ago
    run.reap(study)
    assert [t.state for t in study.trials] == [TrialState.RUNNING] * 2
    run.waiting(study.get_trials(states=(TrialState.RUNNING,)), False)
    assert said == ["waiting for 2 trial(s) running in other processes: 0, 1; trials 0, 1 have no owner and no "
                    "heartbeat (another program's, or an older specgen's), and count as lost if they still have none "
                    "in 30 s"]
    clock.now += 0.6
    run.reap(study)
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.RUNNING, TrialState.WAITING]


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "1e9"])
def test_a_bad_grace_in_the_environment_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from specgen.sweep.claim import ownerless_grace

    spec = write(tmp_path)
    monkeypatch.setenv("SPECGEN_SWEEP_OWNERLESS", value)
    code, out, err = run_cli(["sweep", spec.name, "-o", "s"], capsys, tmp_path)
    assert (code, out) == (2, "")
    assert err == (f"specgen sweep: error: SPECGEN_SWEEP_OWNERLESS: received {value!r}; expected seconds from 0 to "
                   "10,000,000 (how long a running trial without an owner is waited for)\n")
    assert not (tmp_path / "s").exists()  # refused before the sweep folder is made
    monkeypatch.setenv("SPECGEN_SWEEP_OWNERLESS", "90")
    assert ownerless_grace() == 90.0


@pytest.mark.parametrize("journal", [False, True])
def test_the_loser_of_a_race_for_a_queued_trial_never_owns_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             journal: bool) -> None:
    """The reviewer's interleaving, run deterministically: sweep B reads the queue, sweep A claims the queued
    trial completely, then B goes on with what it read. B used to write itself in as the owner before trying the
    claim, and its next reap failed A's live trial as "its sweep process died while taking it"."""
    from optuna.trial import TrialState

    from specgen.sweep import storage as stores
    from specgen.sweep.driver import Runner
    from specgen.sweep.study import open_study, retry

    run_a, study_a, said_a = runner(tmp_path, trials=3)
    if journal:  # the same race on the journal storage: a second study in its own file
        url = f"journal:{tmp_path / 'study.log'}"
        run_a.plan.url, run_a.storage = url, stores.open_storage(url, retry)
        study_a = open_study(run_a.plan, run_a.storage)
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # B: a live process
    try:
        said_b: list[str] = []
        run_b = Runner(run_a.plan, run_a.storage, said_b.append)
        run_b.me = dict(run_a.me, pid=sibling.pid, start=stores._start(sibling.pid))
        assert not stores.gone(run_b.me)
        study_b = optuna.load_study(study_name=study_a.study_name, storage=run_a.storage)
        study_a.enqueue_trial({"layers[hidden].units": 16}, user_attrs={"retry_of": 9})
        waiting = (TrialState.WAITING,)
        read = study_b._storage.get_all_trials(study_b._study_id, deepcopy=False, states=waiting)
        assert [t.number for t in read] == [0]
        won = run_a.ask(study_a)
        assert won is not None and won.number == 0
        reading = study_b._storage.get_all_trials
        monkeypatch.setattr(study_b._storage, "get_all_trials",
                            lambda *a, **k: read if k.get("states") == waiting else reading(*a, **k))
        other = run_b.ask(study_b)  # B's claim of trial 0 fails; it makes a trial of its own
        monkeypatch.undo()
        assert other is not None and other.number == 1
        trials = study_a.get_trials()
        assert [(t.number, t.state, t.user_attrs["owner"]["pid"]) for t in trials] == [
            (0, TrialState.RUNNING, run_a.me["pid"]), (1, TrialState.RUNNING, sibling.pid)]
        run_b.reap(study_b)
        run_a.reap(study_a)
        assert [t.state for t in study_a.get_trials()] == [TrialState.RUNNING] * 2
        assert said_a == said_b == []
        # B's reap in the gap between A's claim and A's owner (one write later): the trial is ownerless, and is
        # waited for, not failed
        study_a.enqueue_trial({"layers[hidden].units": 32})
        queued = study_a.get_trials(states=waiting)[0]
        assert run_a.storage.set_trial_state_values(queued._trial_id, TrialState.RUNNING)
        run_b.reap(study_b)
        assert study_a.trials[queued.number].state == TrialState.RUNNING and said_b == []
    finally:
        sibling.kill()
        sibling.wait()


def test_a_trial_is_made_with_its_owner_and_a_queued_one_gets_it(tmp_path: Path) -> None:
    from optuna.trial import TrialState

    run, study, _ = runner(tmp_path, trials=3)
    first = run.ask(study)
    assert first is not None
    stored = study.trials[first.number]
    assert stored.state == TrialState.RUNNING and stored.user_attrs == {"owner": run.me}
    assert set(stored.params) == {"optimizers.all.learning_rate", "layers[hidden].units"}
    study.enqueue_trial({"layers[hidden].units": 16}, user_attrs={"retry_of": 7})
    second = run.ask(study)
    assert second is not None
    stored = study.trials[second.number]
    assert stored.user_attrs == {"owner": run.me, "retry_of": 7} and stored.params["layers[hidden].units"] == 16
    # A trial this process owns that it never started: only the winner of a claim writes itself in, so this
    # process won it and then failed before running it (the worker's error ended it). It is lost, not waited for.
    lost = optuna.load_study(study_name=study.study_name, storage=run.plan.url).ask()
    run.storage.set_trial_user_attr(lost._trial_id, "owner", run.me)
    run.reap(study)
    assert study.trials[lost.number].user_attrs["interrupted"] == "its sweep process failed while taking it"
    assert [t.state for t in study.trials[: lost.number]] == [TrialState.RUNNING, TrialState.RUNNING]


def test_a_trial_killed_by_a_signal_is_noted_with_the_signal(tmp_path: Path) -> None:
    from optuna.trial import TrialState

    from specgen.sweep.notes import killed

    run, study, said = runner(tmp_path)
    trial = run.ask(study)
    assert trial is not None
    log = tmp_path / "s" / "trial-0000.log"
    log.write_text("started a new run in s/trial-0000\ntraining sweep_mlp: step 0 -> 23\n")
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    process.kill()  # SIGKILL, as the kernel's OOM killer sends it
    outcome: dict[str, Any] = {"pruned": None, "stopped": False, "code": process.wait(), "points": {}}
    run.finish(study, trial, outcome, 1.25, log)
    stored = study.trials[trial.number]
    assert stored.state == TrialState.FAIL
    assert stored.user_attrs["error"] == "killed by SIGKILL (signal 9; out of memory?)"
    assert said == ["trial 0 failed (1.2 s): killed by SIGKILL (signal 9; out of memory?) (log: "
                    f"{log.relative_to(Path.cwd()) if log.is_relative_to(Path.cwd()) else log})"]
    assert killed(-int(signal.SIGTERM)) == "killed by SIGTERM (signal 15)"
    assert killed(-40) == "killed by signal 40"


def test_no_more_workers_than_trials_left(tmp_path: Path) -> None:
    """Each worker thread opens the study: --parallel 64 on a finished sweep started 64 of them for nothing."""
    from specgen.sweep.driver import Runner

    run, study, _ = runner(tmp_path, trials=2, parallel=64)
    for _ in range(2):
        study.tell(study.ask(), 0.5)
    worked: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is Runner.work.__code__:
            worked.append(threading.current_thread().name)

    threading.setprofile(profile)
    try:
        assert run.sweep(study) is True
    finally:
        threading.setprofile(None)
    assert worked == []


@pytest.mark.parametrize(("flags", "line"), [
    (["--trials", "100001"], "argument --trials: received '100001'; expected at most 100,000 (the bound of "
                             "sweep.trials)"),
    (["--emit", "katib", "--image", "x", "--trials", "100000000"],
     "argument --trials: received '100000000'; expected at most 100,000 (the bound of sweep.trials)"),
    (["--parallel", "65"], "argument --parallel: received '65'; expected at most 64 (each is a TensorFlow process)"),
])
def test_trials_and_parallel_are_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                                         line: str) -> None:
    from specgen.commands.sweep import MAX_TRIALS
    from specgen.sweep.spec import MAX_TRIALS as SPEC_BOUND

    assert MAX_TRIALS == SPEC_BOUND
    spec = write(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        run_cli(["sweep", spec.name, *flags], capsys, tmp_path)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"specgen sweep: error: {line}"
    assert not [p for p in tmp_path.iterdir() if p.name != "spec.yaml"]


def test_numbers_are_strict_and_choices_distinct_as_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, "    optimizers.all.learning_rate: {uniform: ['0.1', '0.2']}\n"
                           "    layers[hidden].units: {choice: [16, 16.0]}\n"
                           "    train.batch_size: {int: [4, 8], step: 100}\n"
                           "    train.epochs: {int: [1, 2.0]}\n"
                           "    train.shuffle_buffer: {choice: [1, true]}\n"
                           "    optimizers.all.beta_1: {uniform: [0.8, 0.9], step: 0.5}")
    assert refused(tmp_path, capsys, spec) == [
        "spec.yaml:21:46: error: uniform[0]: expected a number, received '0.1' (a quoted string); write the number "
        "without quotes",
        "spec.yaml:21:53: error: uniform[1]: expected a number, received '0.2' (a quoted string); write the number "
        "without quotes",
        "spec.yaml:22:36: error: choice: the values 16 and 16.0 are equal as values (Optuna cannot tell them apart); "
        "list each value once",
        "spec.yaml:23:29: error: int: the step 100 is larger than the range [4, 8], which then holds one value (4); "
        "expected a step of at most 4",
        "spec.yaml:24:29: error: int[1]: expected an integer, received 2.0 (float)",
        "spec.yaml:25:36: error: choice: the values 1 and true are equal as values (Optuna cannot tell them apart); "
        "list each value once",
        "spec.yaml:26:38: error: uniform: the step 0.5 is larger than the range [0.8, 0.9], which then holds one "
        "value (0.8); expected a step of at most 0.1",
        "7 errors found"]
    text = BASE + "sweep:\n  metric: eval/accuracy\n  direction: maximize\n  trials: '3'\n  seed: 2.0\n  space:\n" \
        "    layers[hidden].units: {choice: [16, 32]}\n"
    spec.write_text(text)
    assert refused(tmp_path, capsys, spec) == [
        "spec.yaml:19:11: error: trials: expected an integer, received '3' (a quoted string); write the number "
        "without quotes",
        "spec.yaml:20:9: error: seed: expected an integer, received 2.0 (float)",
        "2 errors found"]


def test_a_step_that_reaches_the_high_end_and_1e_3_stay_allowed(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, "    optimizers.all.learning_rate: {uniform: [1e-3, 3e-3], step: 2e-3}\n"
                           "    optimizers.all.beta_1: {uniform: [0.1, 0.3], step: 0.2}")
    code, out, err = run_cli(["sweep", spec.name, "--emit", "katib", "--image", "x", "-o", "k.yaml"], capsys, tmp_path)
    assert (code, err) == (0, ""), err
    assert out.startswith("wrote k.yaml: a Katib Experiment of 2 trial(s)")


@pytest.mark.parametrize(("space", "line"), [
    ("layers[out].units: {choice: [10, 2]}",
     "spec.yaml:21:5: error: 'layers[out].units' cannot take 2: it changes output 'logits' from [N, 10] float32 to "
     "[N, 2] float32; a sweep searches how the model trains, not the inputs and outputs its data must fit (the data "
     "are read only when a trial starts)"),
    ("inputs.image.shape.0: {int: [8, 9]}",
     "spec.yaml:21:5: error: 'inputs.image.shape.0' cannot take 9 (a value of its range): it changes input 'image' "
     "from [N, 8, 8, 1] float32 to [N, 9, 8, 1] float32; a sweep searches how the model trains, not the inputs and "
     "outputs its data must fit (the data are read only when a trial starts)"),
    ("data.train.npz: {choice: [digits.npz, other.npz]}",
     "spec.yaml:21:5: error: 'data.train.npz' cannot be searched: it says what a trial trains and is judged on: "
     "trials on other data are not compared on one metric, and a data file is read only when its trial starts; "
     "expected a key that changes how a trial trains"),
])
def test_keys_that_change_the_interface_or_the_data_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                space: str, line: str) -> None:
    assert refused(tmp_path, capsys, write(tmp_path, f"    {space}")) == [line, "1 error found"]


@pytest.mark.parametrize(("value", "shown"), [
    ("null", "null"), ("[4]", "[4] (list)"), ("{a: 1}", "{'a': 1} (dict)"),
    ("x" * 300, f"'{'x' * 80}'… (300 characters)"),
])
def test_a_bad_choice_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, shown: str) -> None:
    spec = write(tmp_path, f"    layers[hidden].units: {{choice: [16, {value}]}}")
    assert refused(tmp_path, capsys, spec) == [
        f"spec.yaml:21:41: error: choice[1]: expected a number, true or false, or a string of at most 256 characters, "
        f"received {shown}", "1 error found"]


def test_a_tracking_store_below_a_file_says_not_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    from specgen.tracking.base import Target
    from specgen.tracking.mlflow import prepare

    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text("a file\n")
    for uri in ("sqlite:///spec.yaml/mlflow.db", f"sqlite:///{tmp_path}/spec.yaml/runs/mlflow.db"):
        assert prepare(Target(uri, "x")) == "[Errno 20] Not a directory: spec.yaml"


@pytest.mark.slow
def test_a_sweep_no_longer_waits_forever_for_an_ownerless_trial(tmp_path: Path) -> None:
    """The checker's repro: an ask()ed trial left behind (its process gone), then the same sweep command."""
    spec = write(tmp_path, "    optimizers.all.learning_rate: {log_uniform: [1.0e-3, 1.0e-1]}").read_text()
    (tmp_path / "spec.yaml").write_text(spec.replace("trials: 2", "trials: 1"))
    (tmp_path / "out").mkdir()
    study = optuna.create_study(study_name="sweep_mlp", storage=f"sqlite:///{tmp_path}/out/study.db",
                                direction="maximize")
    study.ask()
    done = subprocess.run([sys.executable, "-m", "specgen", "sweep", "spec.yaml", "-o", "out"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env=os.environ | {"SPECGEN_SWEEP_OWNERLESS": "3"})  # the grace (600 s), shortened
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1:3] == ["waiting for 1 trial(s) running in other processes: 0; trial 0 has no owner and no "
                          "heartbeat (another program's, or an older specgen's), and counts as lost if it still has "
                          "none in 3 s",
                          "trial 0 was interrupted (it had no owner and no heartbeat for 3 s): queued again"]
    assert lines[3].startswith("trial 1 started (trial 0 again): optimizers.all.learning_rate=")
    assert lines[4].startswith("trial 1 finished: eval/accuracy ")
    assert "\n2 trial(s): 1 interrupted, 1 finished\n" in done.stdout


def test_the_cli_still_parses_a_good_parallel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path)
    code, out, _ = run_cli(["sweep", spec.name, "--emit", "katib", "--image", "x", "--parallel", "64"], capsys,
                           tmp_path)
    assert code == 0 and "parallelTrialCount: 2" in out
