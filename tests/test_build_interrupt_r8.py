"""Ctrl-C during `specgen build`'s worker pool, a Ctrl-C a library wraps into its own error, and a SIGINT its
launcher ignores (runtime/interrupt.py, render/build.py, cli.py, sweep/child.py).

Old: a SIGINT to the process group of a build of 8+ specs reached every pool worker, which raised
KeyboardInterrupt (a `Process ForkPoolWorker-1:` traceback each) and now and then died holding the task queue's
lock, so the pool's teardown hung; a KeyboardInterrupt that pydantic turned into a SchemaError while it imported
was a traceback; `Interrupts` took SIGINT over an inherited SIG_IGN.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specgen.cli import main
from specgen.runtime.interrupt import Interrupts

ROOT = Path(__file__).resolve().parents[1]
RESNET = ROOT / "examples" / "specs" / "resnet50.yaml"  # the slowest example to render: a wide window for the signal
# The build runs on 2 CPUs (`_two_cpus`), so 2 workers (render/build.py usable_cpus) whatever the machine: 200 specs
# are 9 s of pool work on a shared 2-core machine and still 3 s on one three times as fast, well over the largest
# delay below. Only the fixture's files cost more for it: the signal ends the build, and a build renders nothing
# before its pool.
SPECS = 200
CPUS = sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else []
LINE = "\nspecgen build: interrupted (Ctrl-C); it stopped before it finished\n"



@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("many")
    text = RESNET.read_text()
    for i in range(SPECS):
        (folder / f"r{i}.yaml").write_text(text.replace("name: resnet50\n", f"name: resnet50_{i}\n"))
    return folder


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc: the pool's workers)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            # the command name, field 2, is in parentheses and may hold spaces: the fields after the last ')'
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _specgen() -> list[str]:
    script = Path(sys.executable).parent / "specgen"  # the console script, as a user runs it
    return [str(script)] if script.exists() else [sys.executable, "-m", "specgen"]


def _two_cpus() -> None:
    """In the forked build before it runs: SIGINT's default, as a shell gives a foreground command (a test runner
    may ignore it), and two CPUs, so the pool's size and speed do not depend on the machine's cores."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.sched_setaffinity(0, CPUS)


@pytest.mark.skipif(len(CPUS) < 2 or not sys.platform.startswith("linux"),
                    reason="reads /proc; the pool forks (Linux) and needs two CPUs")
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])
def test_ctrl_c_during_the_worker_pool_is_one_line_and_130(many: Path, tmp_path: Path, delay: float) -> None:
    """A real SIGINT to the whole process group (what a terminal's Ctrl-C sends), `delay` seconds after the first
    worker was forked: delay 0 lands while the workers start, the others while they render (one worker per CPU the
    build may use: 2 here, also on a machine with more; old: os.cpu_count() of them)."""
    out = tmp_path / "out"
    process = subprocess.Popen([*_specgen(), "build", str(many), "--out", str(out)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_two_cpus)
    try:
        deadline = time.monotonic() + 60
        while not _children(process.pid):
            assert process.poll() is None and time.monotonic() < deadline, "the build ended before its pool started"
            time.sleep(0.002)
        time.sleep(delay)
        assert len(_children(process.pid)) <= len(CPUS)
        assert process.poll() is None, "the build ended before the signal"
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)  # old: now and then never returned (the pool hung)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert (process.returncode, stdout, stderr) == (130, "", LINE)
    assert not out.exists()  # nothing is written before every spec rendered
    with pytest.raises(ProcessLookupError):  # no worker outlives the build
        os.killpg(process.pid, 0)


@pytest.mark.usefixtures("python_default_sigint")
def test_a_ctrl_c_a_library_wrapped_into_its_own_error_is_one_line_and_130(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Old: pydantic turned a KeyboardInterrupt raised while it built a schema (at import) into a SchemaError, which
    cli printed as a traceback (exit 1)."""
    from specgen.commands import build

    def run(args: object) -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # Python's handler raises KeyboardInterrupt here
        except KeyboardInterrupt as exc:  # as pydantic-core does while it builds a validator
            raise RuntimeError('Error building "tagged-union" validator: KeyboardInterrupt:') from exc
        return 0

    monkeypatch.setattr(build, "run", run)
    assert main(["build"]) == 130
    assert capsys.readouterr().err == LINE


def test_an_error_without_a_ctrl_c_is_still_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug stays a traceback: only an error that came with a Ctrl-C is the interrupted line."""
    from specgen.commands import build

    def run(args: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(build, "run", run)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["build"])


def test_interrupts_leave_an_ignored_sigint_ignored() -> None:
    """Old: `Interrupts` took SIGINT over SIG_IGN (a background job of a script), so a run could not be stopped by
    SIGINT while it started but could once it trained; SIGTERM already kept an inherited SIG_IGN."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with Interrupts() as interrupts:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(100_000))  # chances for a handler to run
            assert not interrupts.received
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sweep/child.py's parent-death signal is Linux's")
def test_a_sweep_trial_starts_with_sigints_default_even_when_the_sweep_ignores_it() -> None:
    """The sweep stops a trial (pruned, or the sweep stopping) with SIGINT: a trial must take it even when the sweep
    itself was started with SIGINT ignored, now that `specgen train` keeps an inherited SIG_IGN."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    result = subprocess.run([sys.executable, "-m", "specgen.sweep.child", str(os.getpid()), sys.executable, "-c", probe],
                            capture_output=True, text=True, timeout=60, check=False,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert (result.returncode, result.stdout, result.stderr) == (0, "True\n", "")
