"""SIGTERM stops `specgen sweep` as Ctrl-C does (`timeout`, `docker stop`, a Kubernetes pod deleted, systemd, a CI
job cancelled send it): the trials stopped and queued again, the summary written, one line, exit status 143; a
second SIGTERM ends it at once. It used to keep its default: the sweep died with no line and no summary, its
running trial left RUNNING in the study.

A trial's own run that SIGTERM stopped (`specgen train`'s exit status 143, or -15 before its handler was in place)
is interrupted and queued again, as one that SIGINT stopped: it used to be a failed trial.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_sweep_faults2 import runner
from test_sweep_run import _running, mlp, started, sweep

optuna = pytest.importorskip("optuna")

STOPPED = ("specgen sweep: stopped by SIGTERM; the trials it stopped run again when the same command continues the "
           "sweep (study 'sweep_mlp' in sqlite:///out/study.db)\n")


def start(tmp_path: Path) -> subprocess.Popen[str]:
    """A 1-trial sweep of the digits MLP, returned once its trial 0 started."""
    mlp(tmp_path, trials=1)
    process = subprocess.Popen([sys.executable, "-m", "specgen", "sweep", "spec.yaml", "-o", "out"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("trial 0 started"):
            return process
    process.kill()
    raise AssertionError(f"no trial started: {process.communicate()}")


def gone(marker: str, seconds: float = 20) -> bool:
    """Whether every process whose command line names `marker` ended within `seconds` (a trial's folder)."""
    deadline = time.monotonic() + seconds
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _running(marker)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_sigterm_stops_the_sweep_as_ctrl_c_does_and_a_rerun_completes_it(tmp_path: Path) -> None:
    process = start(tmp_path)
    process.send_signal(signal.SIGTERM)
    rest, err = process.communicate(timeout=120)
    assert process.returncode == 143, rest + err
    assert err == STOPPED
    assert rest.splitlines()[0] == "trial 0 interrupted: it runs again when the sweep continues", rest
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert summary in rest and summary.endswith("\n2 trial(s): 1 interrupted, 1 queued\n"
                                                "no trial finished with a value of eval/accuracy\n"), summary
    assert (tmp_path / "out" / "sweep.svg").is_file()
    assert gone(str(tmp_path / "out" / "trial-0000"))  # its trial was stopped, not left behind
    study = optuna.load_study(study_name="sweep_mlp", storage=f"sqlite:///{tmp_path}/out/study.db")
    assert [(t.number, t.state.name) for t in study.trials] == [(0, "FAIL"), (1, "WAITING")]  # none RUNNING
    assert study.trials[0].user_attrs["interrupted"] == "the sweep was stopped"
    assert study.trials[1].user_attrs["retry_of"] == 0
    again = sweep(tmp_path, "spec.yaml", "-o", "out", timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    out = again.stdout
    assert out.splitlines()[0].endswith("(2 trial(s) there already)") and started(out) == [1], out
    assert "trial 1 started (trial 0 again): optimizers.all.learning_rate=" in out
    assert "2 trial(s): 1 interrupted, 1 finished" in out and "best: trial 1," in out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_sigterm_to_the_whole_group_starts_no_trial_after_the_one_it_stopped(tmp_path: Path) -> None:
    """`timeout`, systemd and `kill -- -PGID` reach the trial too: it ended (-15 or 143) before the sweep's main thread
    acted on its own SIGTERM, and its worker took the trial queued again and started it."""
    mlp(tmp_path, trials=1)
    process = subprocess.Popen([sys.executable, "-m", "specgen", "sweep", "spec.yaml", "-o", "out"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stdout is not None
    log, deadline = tmp_path / "out" / "trial-0000.log", time.monotonic() + 60
    while not (log.is_file() and _running(str(tmp_path / "out" / "trial-0000"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 143, out + err
    assert err == STOPPED
    assert started(out) == [0], out
    assert re.search(r"^trial 0 (stopped by SIGTERM|interrupted): it runs again when the sweep continues$", out, re.M)
    assert "2 trial(s): 1 interrupted, 1 queued" in out


# A trial that does not stop on SIGINT (a stuck run), in place of `specgen train`: the sweep, stopping, waits for it.
# child.py stays in front of it, so it still ends with its sweep.
STUBBORN = """\
import subprocess, sys
from specgen.cli import main
real = subprocess.Popen
TRIAL = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('stubborn', flush=True); time.sleep(120)"
subprocess.Popen = lambda args, **kw: real([*args[:4], sys.executable, "-c", TRIAL], **kw)  # after child.py's 4
sys.exit(main(["sweep", "spec.yaml", "-o", "out"]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_a_second_sigterm_ends_the_sweep_at_once_but_not_its_echo(tmp_path: Path) -> None:
    """The supervisor that would not wait (systemd, a person repeating it): SIGTERM's default, no line; the trial
    ends with its sweep (child.py), and the next sweep finds it lost, as after `kill -9` (test_sweep_run.py). The
    same SIGTERM sent twice at once (`timeout` sends it to the command and to its process group) is one stop: the
    second ended the sweep with no line when its handler ran between the two (ECHO_SECONDS)."""
    mlp(tmp_path, trials=1)
    process = subprocess.Popen([sys.executable, "-c", STUBBORN], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    log, deadline = tmp_path / "out" / "trial-0000.log", time.monotonic() + 60
    while not (log.is_file() and "stubborn" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)  # the trial ignores SIGINT from now on
    assert "stubborn" in log.read_text()
    process.send_signal(signal.SIGTERM)
    process.send_signal(signal.SIGTERM)
    time.sleep(1.5)
    assert process.poll() is None  # stopping: it waits for the trial it sent SIGINT
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM, out + err
    assert err == "" and out.splitlines()[-1].startswith("trial 0 started"), out
    assert gone(str(tmp_path / "out" / "trial-0000"))


def _tgkill(pid: int, tid: int, signum: int) -> None:
    """A signal to one thread of another process (Linux's tgkill): the kernel hands a process's signal to any thread."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(234 if os.uname().machine == "x86_64" else 131, pid, tid, signum) == 0, ctypes.get_errno()


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine not in ("x86_64", "aarch64"),
                    reason="tgkill's syscall number is known here")
def test_a_second_sigterm_that_lands_on_a_worker_thread_still_ends_the_sweep(tmp_path: Path) -> None:
    """Stopping, the main thread waited for its workers with no timeout; Python runs a handler in the main thread only
    when it runs bytecode, so a second SIGTERM the kernel handed to a worker thread waited for the stuck trial (120 s
    here) instead of ending the sweep. Sent to a thread other than the main one on purpose."""
    mlp(tmp_path, trials=1)
    process = subprocess.Popen([sys.executable, "-c", STUBBORN], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    log, deadline = tmp_path / "out" / "trial-0000.log", time.monotonic() + 60
    while not (log.is_file() and "stubborn" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "stubborn" in log.read_text()
    process.send_signal(signal.SIGTERM)
    time.sleep(1.5)  # past ECHO_SECONDS: the next one is a second stop, not an echo
    assert process.poll() is None  # stopping: it waits for the trial it sent SIGINT
    thread = next(int(t) for t in os.listdir(f"/proc/{process.pid}/task") if int(t) != process.pid)
    _tgkill(process.pid, thread, signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGTERM, out + err
    assert gone(str(tmp_path / "out" / "trial-0000"))


def test_a_sigterm_echo_is_one_stop_and_a_later_one_ends_the_process() -> None:
    """Interrupts (runtime/interrupt.py), which train and sweep share: its handler runs between the two sends here."""
    child = subprocess.run([sys.executable, "-c", (
        "import signal, time\n"
        "from specgen.runtime.interrupt import ECHO_SECONDS, Interrupts\n"
        "with Interrupts() as interrupts:\n"
        "    signal.raise_signal(signal.SIGTERM)\n"
        "    signal.raise_signal(signal.SIGTERM)  # the handler ran after each: the echo\n"
        "    print('echo', interrupts.signum, flush=True)\n"
        "    time.sleep(ECHO_SECONDS)\n"
        "    signal.raise_signal(signal.SIGTERM)\n"
        "    print('still here', flush=True)\n")], capture_output=True, text=True, timeout=60)
    assert (child.returncode, child.stdout, child.stderr) == (-signal.SIGTERM, "echo 15\n", "")


# --- a trial's own stop (the sweep's parts, no TensorFlow) ----------------------------------------------------------


@pytest.mark.parametrize(("code", "said", "why"), [
    (143, "stopped by SIGTERM", "its run was stopped by SIGTERM"),  # specgen train's handler
    (-signal.SIGTERM, "stopped by SIGTERM", "its run was stopped by SIGTERM"),  # before it was in place
    (130, "interrupted", "the sweep was stopped"),
    (-signal.SIGINT, "interrupted", "the sweep was stopped"),
])
def test_a_trial_that_a_signal_stopped_is_interrupted_and_queued_again(tmp_path: Path, code: int, said: str,
                                                                       why: str) -> None:
    """systemd stops a service's whole group: the trial's SIGTERM may end it before the sweep sees its own."""
    from optuna.trial import TrialState

    run, study, lines = runner(tmp_path)
    trial = run.ask(study)
    assert trial is not None
    log = tmp_path / "s" / "trial-0000.log"
    log.write_text("specgen train: stopped by SIGTERM at step 7; ...\n")
    outcome: dict[str, Any] = {"pruned": None, "stopped": False, "code": code, "points": {}}
    run.finish(study, trial, outcome, 1.25, log)
    assert lines == [f"trial 0 {said}: it runs again when the sweep continues"]
    stored = study.trials
    assert [(t.number, t.state) for t in stored] == [(0, TrialState.FAIL), (1, TrialState.WAITING)]
    assert stored[0].user_attrs["interrupted"] == why and "error" not in stored[0].user_attrs
    assert stored[1].user_attrs["retry_of"] == 0


def test_the_notes_read_128_plus_n_and_minus_n_as_a_stop() -> None:
    from specgen.sweep.notes import stopped

    assert [stopped(code) for code in (130, -2, 143, -15)] == [signal.SIGINT] * 2 + [signal.SIGTERM] * 2
    assert [stopped(code) for code in (0, 1, 2, -9, 137, -6)] == [None] * 6


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_worker_whose_trial_the_same_signal_ended_waits_for_the_sweep_to_note_it(tmp_path: Path,
                                                                                 signum: int) -> None:
    """The kernel may hand the sweep's own SIGTERM (or Ctrl-C's SIGINT) to a worker thread; Python notes it only when
    the main thread's wait returns, up to POLL later. The trial the same signal reached ended first, and its worker
    started the trial queued again (CI: `trial 1 started (trial 0 again)` after the stop). Here the main thread
    notes the signal 1 s after the trial ended: no trial starts after it."""
    from specgen.runtime.interrupt import Interrupts
    from specgen.sweep.driver import SETTLE

    run, _study, lines = runner(tmp_path, trials=2)
    run.interrupts = Interrupts()
    ended = threading.Event()

    def spawn(folder: Path, log: Path, overrides: list[str]) -> subprocess.Popen[bytes]:
        log.write_text("")
        ended.set()
        return subprocess.Popen([sys.executable, "-c", f"import os; os.kill(os.getpid(), {int(signum)})"])

    run.spawn = spawn
    noted = threading.Timer(SETTLE / 2, lambda: setattr(run.interrupts, "signum", signum))
    threading.Thread(target=lambda: ended.wait() and noted.start(), daemon=True).start()
    run.work()
    noted.cancel()
    assert run.started == [0], lines
    assert lines[0].startswith("trial 0 started:") and len(lines) == 2, lines


def test_a_trial_stopped_alone_delays_the_next_by_settle_only(tmp_path: Path) -> None:
    """A trial someone stopped by its own pid (the sweep got no signal): the worker goes on after SETTLE."""
    from specgen.sweep.driver import SETTLE

    run, study, _lines = runner(tmp_path, trials=1)
    began = time.monotonic()
    run.settle()
    waited = time.monotonic() - began
    assert SETTLE <= waited < SETTLE + 2, waited  # the upper bound: a loaded machine's sleeps overrun
    assert run.ask(study) is not None
