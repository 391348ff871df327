"""Running a sweep: Optuna's study in its storage, each trial an ordinary `specgen train` in a subprocess.

A worker thread (`--parallel P` of them) takes a trial from the study (ask), runs
`specgen train SPEC --quiet --set checkpoint.dir=SWEEP/trial-NNNN --set KEY=VALUE ...` and follows the metric in
the run's TensorBoard events as they are written; the pruner sees each value as it comes (`trial.report`), and a
trial it prunes is stopped with SIGINT, as Ctrl-C stops `specgen train` (between updates). When the run ends,
the metric's last value is the trial's (tell). A run that fails is a failed trial with its error line (or the
signal that ended it, notes.py); the sweep goes on. A run that SIGINT or SIGTERM stopped (notes.stopped) is
interrupted, not failed, and runs again. A run whose tracker failed (it warns in its log and trains on)
is said by the sweep and noted on the trial.

The budget: a trial is asked for only while the finished trials (complete, pruned, failed) and the running ones
are fewer than the sweep's `trials`, checked under one lock per process; processes sharing a study each check
before they ask, so two asking at the same moment can each take the last place (the study then ends with one
trial more per such process). Interrupted trials do not count: a trial whose sweep process is gone (killed, or
Ctrl-C or SIGTERM; claim.py tells a lost trial) is marked failed with `interrupted` and a new trial with the same
values is queued (Optuna's enqueue_trial), which the next worker to ask runs first. Finished trials are never run again.

Ctrl-C and SIGTERM (`timeout`, `docker stop`, a Kubernetes pod deleted, systemd, a CI job cancelled) stop the sweep
alike: `specgen train`'s Interrupts (runtime/interrupt.py) notes the signal and the main thread acts on it between
its waits; the trials are stopped, marked interrupted and queued again, and the command writes the summary. Before,
SIGTERM kept its default: the sweep died at once with no summary, and its running trial stayed RUNNING in the study
(with a shared journal storage no other machine takes such a trial back). A second SIGTERM ends it at once.

The study itself (the plan, its sampler and pruner, what counts toward the budget) is study.py's.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgen import native_logs
from specgen.runtime.interrupt import Interrupts
from specgen.sweep import storage as stores
from specgen.sweep.claim import claim, left, lost, ownerless_grace
from specgen.sweep.follow import Follower
from specgen.sweep.notes import killed, last_line, stopped, tracking_warning
from specgen.sweep.plan import Plan
from specgen.sweep.space import overrides_of
from specgen.sweep.study import counted, pruner, seeded
from specgen.sweep.study import retry as queue_again

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

POLL = 0.5  # seconds between reads of a running trial's events, and between the main thread's checks for a signal
# How long a worker whose trial a signal ended (one the sweep did not send) waits for the sweep to act on the same
# signal before it asks for another trial. The kernel may deliver the sweep's SIGTERM (a process group's, `timeout`'s)
# or Ctrl-C's SIGINT to a worker thread, and Python runs the handler in the main thread only when its wait returns
# (POLL); meanwhile the trial, which the same signal reached, has ended. Without the wait the worker started the
# queued-again trial at once (a CI run failed on it: test_sweep_sigterm.py). A trial stopped alone costs this much.
SETTLE = 4 * POLL
STOP_WAIT = 60  # seconds a trial stopped by a failing worker has to stop between two updates before SIGKILL


class Runner:
    """One `specgen sweep` process: its workers, the trial processes they started, what it prints."""

    def __init__(self, plan: Plan, storage: BaseStorage, say: Callable[[str], None]):
        self.plan, self.storage, self._say = plan, storage, say
        self.budget_lock, self.print_lock = threading.Lock(), threading.Lock()
        self.stop = threading.Event()
        self.me = stores.owner()
        self.started: list[int] = []  # numbers of the trials this process started
        self.grace = ownerless_grace()  # seconds an ownerless running trial is waited for (claim.py)
        self.unowned: dict[int, float] = {}  # trial id -> when this process first saw it running with no owner
        self.announced: set[int] = set()  # numbers of the ownerless trials the waiting line named
        self.distributions = {p.key: p.distribution() for p in plan.params}
        self.signum: int | None = None  # the signal that stopped the sweep (SIGINT or SIGTERM), once it did
        # What ended a worker thread (stdout's reader gone, a log that cannot be opened, a storage error): the sweep
        # stops as on Ctrl-C and the command ends with it (command.py); the first one is kept
        self.failure: BaseException | None = None
        self.gone = False  # standard output's reader went away: nothing more is printed (docs/cli.md, 141)
        self.interrupts: Interrupts | None = None  # while sweep() runs: the signals noted in the main thread

    def stopping(self) -> bool:
        """Whether the sweep stops: the main thread acted on a signal, or one came that it has yet to act on, or a
        worker failed. A trial that the same SIGTERM reached (`timeout` sends it to the process group too) can end
        before the main thread's next check: its worker must not start another trial then."""
        return self.stop.is_set() or (self.interrupts is not None and self.interrupts.received)

    def fail(self, exc: BaseException) -> None:
        """A worker (or stdout) failed: keep the first failure and stop the sweep; every running trial is then
        stopped, marked interrupted and queued again, as on Ctrl-C."""
        if self.failure is None:
            self.failure = exc
        self.stop.set()

    def failed(self) -> bool:  # a method: a worker thread sets it while the main thread looks
        return self.failure is not None

    def say(self, line: str) -> None:
        """Print a line; a reader that went away (`specgen sweep | head`) stops the sweep quietly, from any thread:
        raised in a worker, the BrokenPipeError left its claimed trial running in the study."""
        with self.print_lock:
            if self.gone:
                return
            try:
                self._say(line)
            except BrokenPipeError as exc:
                self.gone = True
                self.fail(exc)

    # --- the budget and the dead ----------------------------------------------------------------------------

    def reap(self, study: optuna.Study) -> None:
        """Running trials that are lost (claim.lost: their owner gone from this machine, or no owner and no
        heartbeat for self.grace seconds): failed as interrupted, and queued again; on RDB storages also those
        whose heartbeat stopped (Optuna's fail_stale_trials)."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.storages import fail_stale_trials
        from optuna.trial import TrialState

        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        ids = {t._trial_id for t in running}
        self.unowned = {i: seen for i, seen in self.unowned.items() if i in ids}  # only trials still running
        for trial in running:
            why = lost(trial, self.storage, self.me, self.started, self.unowned, self.grace)
            if why is None:
                continue
            trial_id = trial._trial_id  # Optuna's storage API names trials by id
            try:
                self.storage.set_trial_user_attr(trial_id, "interrupted", why)
                failed = self.storage.set_trial_state_values(trial_id, TrialState.FAIL)
            except UpdateFinishedTrialError:  # it ended meanwhile (another process reaped it, or it finished)
                continue
            if failed:
                self.retry(study, trial)
                self.say(f"trial {trial.number} was interrupted ({why}): queued again")
        fail_stale_trials(study)

    def retry(self, study: optuna.Study, trial: FrozenTrial) -> None:
        queue_again(study, trial)

    def ask(self, study: optuna.Study) -> optuna.Trial | None:
        with self.budget_lock:
            if self.stopping():
                return None
            self.reap(study)
            done, running = counted(study.get_trials(deepcopy=False))
            if done + len(running) >= self.plan.budget():
                return None
            trial = claim(study, self.me, self.distributions)  # its owner written with it
            self.started.append(trial.number)
            return trial

    # --- one trial -----------------------------------------------------------------------------------------

    def work(self) -> None:
        import optuna

        study = optuna.load_study(study_name=self.plan.study_name, storage=self.storage, sampler=seeded(self.plan),
                                  pruner=pruner(self.plan.sweep))
        while (trial := self.ask(study)) is not None:
            self.run(study, trial)

    def run(self, study: optuna.Study, trial: optuna.Trial) -> None:
        """Run a claimed trial; whatever goes wrong here (the log cannot be opened, the process cannot start, the
        storage fails) the trial is stopped, marked interrupted and queued again, never left running in the
        study, and the sweep stops with the error (command.py prints it, one line)."""
        process: list[subprocess.Popen[bytes]] = []
        try:
            self._run(study, trial, process)
        except Exception as exc:
            self.fail(exc)
            self.abandon(study, trial, process[0] if process else None)

    def _run(self, study: optuna.Study, trial: optuna.Trial, process: list[subprocess.Popen[bytes]]) -> None:
        plan, number = self.plan, trial.number
        overrides = list(overrides_of(plan.params, trial.params))
        folder = plan.folder / f"trial-{number:04d}"
        log = plan.folder / f"trial-{number:04d}.log"
        for key, value in (("folder", str(folder)), ("overrides", overrides), ("log", str(log))):
            trial.set_user_attr(key, value)
        retried = trial.user_attrs.get("retry_of")
        again = f" (trial {retried} again)" if retried is not None else ""
        self.say(f"trial {number} started{again}: {', '.join(overrides)}")
        if self.stopping():  # stopped meanwhile (a Ctrl-C, stdout gone): queued again, no process started for it
            self.abandon(study, trial, None)
            self.say(f"trial {number} interrupted: it runs again when the sweep continues")
            return
        started = time.monotonic()
        process.append(self.spawn(folder, log, overrides))
        outcome = self.follow(trial, process[0])
        seconds = time.monotonic() - started
        trial.set_user_attr("seconds", round(seconds, 3))
        self.untracked(trial, log)
        self.finish(study, trial, outcome, seconds, log)
        if outcome["pruned"] is None and not outcome["stopped"] and stopped(outcome["code"]) is not None:
            self.settle()  # a signal the sweep did not send (a pruned trial's SIGINT is its own)

    def abandon(self, study: optuna.Study, trial: optuna.Trial, process: subprocess.Popen[bytes] | None) -> None:
        """A claimed trial that does not run to its end here: its process stopped (SIGINT, as Ctrl-C; SIGKILL after
        STOP_WAIT), the trial marked interrupted and queued again. Storage errors are swallowed: the sweep is
        ending with another error already, and a trial left running names this process, which the next sweep on
        this machine sees gone (claim.py)."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            if _wait(process, STOP_WAIT) is None:
                process.kill()
                process.wait()
        try:
            self.storage.set_trial_user_attr(trial._trial_id, "interrupted", "the sweep was stopped")
            if self.storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
                self.retry(study, self.storage.get_trial(trial._trial_id))
        except UpdateFinishedTrialError:  # it ended meanwhile: nothing is left running
            pass
        except Exception:  # see the docstring: the first error is the one the sweep reports
            pass

    def settle(self, seconds: float = SETTLE) -> None:
        """Wait (at most `seconds`) for the main thread to note a signal that may have reached the sweep too (SETTLE)."""
        deadline = time.monotonic() + seconds
        while not self.stopping() and time.monotonic() < deadline:
            time.sleep(0.02)

    def untracked(self, trial: optuna.Trial, log: Path) -> None:
        """A trial whose tracker failed went on without it, and said so only in its log: the sweep says it too, and
        the summary notes the trial (else a sweep with every trial untracked would look tracked)."""
        warning = tracking_warning(log)
        if warning is not None:
            trial.set_user_attr("untracked", warning)
            self.say(f"trial {trial.number} {warning}; it went on without it (log: {self.plan.shown(log)})")

    def spawn(self, folder: Path, log: Path, overrides: list[str]) -> subprocess.Popen[bytes]:
        plan = self.plan
        sets = [arg for text in [*plan.base, f"checkpoint.dir={folder}", *overrides] for arg in ("--set", text)]
        command = [sys.executable, "-m", "specgen", "train", str(plan.loaded.path), "--quiet", *sets]
        if plan.track is not None:  # each trial its own MLflow run, named after its folder (trial-NNNN)
            command += ["--track", f"mlflow:{plan.track}"]
        wrapper = [sys.executable, "-m", "specgen.sweep.child", str(os.getpid())]
        env = os.environ | {"PYTHONUNBUFFERED": "1"}
        if env.get("TF_CPP_MIN_LOG_LEVEL") == native_logs.DEFAULT_LEVEL:  # this process's quiet() set it: the
            del env["TF_CPP_MIN_LOG_LEVEL"]  # trial filters TensorFlow's start-up lines itself, as train does
        # O_NOFOLLOW: a link named like the log is refused, not written through
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with os.fdopen(fd, "wb") as out:  # the child holds its own descriptor
            return subprocess.Popen([*wrapper, *command], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env)

    def follow(self, trial: optuna.Trial, process: subprocess.Popen[bytes]) -> dict[str, Any]:
        """Wait for the run, reporting each new value of the metric; stop it (SIGINT) when the pruner says so
        or the sweep is stopping."""
        stage, tag = self.plan.sweep.metric.split("/", 1)
        follower = Follower(Path(trial.user_attrs["folder"]) / "tensorboard" / stage, tag)
        outcome: dict[str, Any] = {"pruned": None, "stopped": False}
        beat, evals = 0.0, 0
        heartbeat = getattr(self.storage, "record_heartbeat", None)
        while True:
            code = _wait(process, POLL)
            if heartbeat is not None and time.monotonic() - beat >= stores.HEARTBEAT:
                heartbeat(trial._trial_id)
                beat = time.monotonic()
            for step, value in follower.poll():
                if outcome["pruned"] is not None:  # its value is the one it was pruned at (Optuna: the last reported)
                    break
                # eval happens once an epoch: trials are compared at their n-th eval, so trials of other batch
                # sizes (other steps per epoch) meet the pruner at the same epochs
                evals += 1
                trial.report(value, evals if stage == "eval" else step)
                if code is None and outcome["pruned"] is None and trial.should_prune():
                    outcome["pruned"] = (evals if stage == "eval" else step, value)
                    process.send_signal(signal.SIGINT)
            if code is None and self.stopping() and not outcome["stopped"]:
                outcome["stopped"] = True
                process.send_signal(signal.SIGINT)
            if code is not None:
                outcome["code"], outcome["points"] = code, follower.points
                return outcome

    def finish(self, study: optuna.Study, trial: optuna.Trial, outcome: dict[str, Any], seconds: float,
               log: Path) -> None:
        from optuna.trial import TrialState

        number, metric, code = trial.number, self.plan.sweep.metric, outcome["code"]
        if outcome["pruned"] is not None:
            at, value = outcome["pruned"]
            where = f"eval {at}" if metric.startswith("eval/") else f"step {at}"
            study.tell(trial, state=TrialState.PRUNED)
            self.say(f"trial {number} pruned at {where}: {metric} {value:.4f} ({seconds:.1f} s)")
        elif outcome["stopped"] or stopped(code) is not None:
            # SIGTERM reaches a trial of its own (systemd stops the whole group, `timeout` its process group): a stop
            # like Ctrl-C, not a failure; the trial may end before the sweep acts on its own SIGTERM
            own = not outcome["stopped"] and stopped(code) == signal.SIGTERM
            trial.set_user_attr("interrupted", "its run was stopped by SIGTERM" if own else "the sweep was stopped")
            study.tell(trial, state=TrialState.FAIL)
            self.retry(study, study.trials[number])
            how = "stopped by SIGTERM" if own else "interrupted"
            self.say(f"trial {number} {how}: it runs again when the sweep continues")
        elif code != 0:  # a signal (the OOM killer's SIGKILL) ends a run with no error line: its last line misleads
            error = killed(code) if code < 0 else last_line(log) or f"exit status {code}"
            trial.set_user_attr("error", error)
            study.tell(trial, state=TrialState.FAIL)
            self.say(f"trial {number} failed ({seconds:.1f} s): {error} (log: {self.plan.shown(log)})")
        elif not outcome["points"]:
            error = f"the run logged no {metric}"
            trial.set_user_attr("error", error)
            study.tell(trial, state=TrialState.FAIL)
            self.say(f"trial {number} failed ({seconds:.1f} s): {error}")
        else:
            value = outcome["points"][max(outcome["points"])]
            study.tell(trial, value)
            self.say(f"trial {number} finished: {metric} {value:.4f} ({seconds:.1f} s)")

    # --- the whole sweep -----------------------------------------------------------------------------------

    def sweep(self, study: optuna.Study) -> bool:
        """Run trials until the budget is used; False when stopped by Ctrl-C or SIGTERM (`signum` says which; the
        running trials are then stopped, marked interrupted and queued again)."""
        with Interrupts() as interrupts:  # both only noted: acted on in the main thread, between its waits
            self.interrupts = interrupts
            try:
                return self._sweep(study, interrupts)
            finally:
                self.interrupts = None

    def _sweep(self, study: optuna.Study, interrupts: Interrupts) -> bool:
        waited, ended = False, []
        try:
            while True:
                interrupts.check()  # before more workers: a trial started now would only be stopped again
                if self.failed():  # a worker failed: its trials were stopped and queued again
                    return False
                with self.budget_lock:  # no more workers than trials left to ask for: each opens the study
                    done, running = counted(study.get_trials(deepcopy=False))
                    asked = len(self.started)
                ended = [self._start_worker() for _ in range(min(self.plan.parallel,
                                                                  self.plan.budget() - done - len(running)))]
                for end in ended:
                    while not end.wait(POLL):
                        interrupts.check()  # Ctrl-C or SIGTERM: KeyboardInterrupt here, in the main thread
                if self.failed():
                    return False
                with self.budget_lock:
                    self.reap(study)
                    done, running = counted(study.get_trials(deepcopy=False))
                if done + len(running) < self.plan.budget() and (not ended or len(self.started) > asked):
                    continue  # a place came free (a trial elsewhere was lost, or reaped just now): take it
                if not running:  # this process's trials are done, and no other process runs one
                    interrupts.check()  # a signal that came meanwhile still gets its line and exit status
                    return True
                self.waiting(running, waited)
                waited = True
                for _ in range(4):
                    time.sleep(POLL)
                    interrupts.check()
        except KeyboardInterrupt:  # from check()
            self.signum = interrupts.signum or signal.SIGINT
            self._stop_workers(ended)
            return False
        except BaseException:  # the main thread's own error (its storage): the trials stop first, then it is raised
            self._stop_workers(ended)
            raise

    def _stop_workers(self, ended: list[threading.Event]) -> None:
        self.stop.set()
        for end in ended:  # a second Ctrl-C is only noted: the trials are being stopped already
            while not end.wait(POLL):  # with a timeout: Python runs a signal's handler in the main thread only
                pass  # between waits, and a second SIGTERM the kernel handed to a worker thread must end it now

    def waiting(self, running: list[FrozenTrial], waited: bool) -> None:
        """Say which trials the sweep waits for, once, and again when a trial without an owner appears: those
        are named with the time left before they count as lost, so a sweep never waits in silence."""
        ownerless = {t.number: s for t in running if (s := left(t._trial_id, self.unowned, self.grace)) is not None}
        if waited and set(ownerless) <= self.announced:
            return
        self.announced |= set(ownerless)
        line = f"waiting for {len(running)} trial(s) running in other processes: {', '.join(str(t.number) for t in running)}"
        if ownerless:
            names = ", ".join(str(n) for n in ownerless)
            seconds = math.ceil(max(ownerless.values()))
            line += (f"; trial {names} has no owner and no heartbeat (another program's, or an older specgen's), and "
                     f"counts as lost if it still has none in {seconds} s" if len(ownerless) == 1 else
                     f"; trials {names} have no owner and no heartbeat (another program's, or an older specgen's), "
                     f"and count as lost if they still have none in {seconds} s")
        self.say(line)

    def _start_worker(self) -> threading.Event:
        """A worker thread; the event is set when it ends (Thread.join, cut by Ctrl-C, can report a live thread
        as ended)."""
        end = threading.Event()

        def work() -> None:
            try:
                self.work()
            except Exception as exc:  # opening the study, asking for a trial: no trial of this worker is running
                self.fail(exc)
            finally:
                end.set()

        threading.Thread(target=work, daemon=True).start()
        return end


def _wait(process: subprocess.Popen[bytes], seconds: float) -> int | None:
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None
