"""Ctrl-C (and SIGTERM) during `specgen train`: noted when it comes, acted on between two TensorFlow calls.

Python's default SIGINT handler raises KeyboardInterrupt at whatever bytecode the main thread runs next, and
during training that is nearly always inside TensorFlow's own Python code: its C++ nest functions calling back
into Python (a SystemError "returned a result with an exception set", then a tf.function whose argument
structure no longer matches), a tf.function's tracing state, a `__del__` (where Python swallows the exception
and the run goes on). The run then died with a traceback or did not stop at all (the quarantined Ctrl-C test).
Here the handler only notes the signal; the training loop calls `check()` where no TensorFlow call is half done
(between updates, eval batches and saves), which raises KeyboardInterrupt there. `Interrupts` treats SIGTERM the
same way (its default, ending the process at once, left no line, no clean stop and a tracked run RUNNING); the
command's line and exit status (128 + the signal) say which came.

`specgen train` enters it for the whole command, not only the loop (commands/train.py): a Ctrl-C during start-up
(reading the data, building and restoring the model) is acted on between those phases, and one during the checks
before the run folder's first write stops there, with nothing written. A SIGTERM before it is entered (Python and
TensorFlow importing, the spec read, the strategy starting) keeps its default: the process ends at once, before
anything of the run folder is written and before any MLflow run is opened. Where Python raises KeyboardInterrupt
itself (before this is entered: imports, reading the spec; other commands), cli.main turns it into one line and
exit status 130.

Python can also raise it where it is swallowed: inside a weakref callback or a `__del__` (importlib's module-lock
callback while TensorFlow imports), which prints "Exception ignored in ..." and goes on, so the Ctrl-C was lost
and the command ran to its end (exit 0; the full suite caught it). `raising_interrupts` (cli.main, for every
command) keeps Python's behaviour but notes each Ctrl-C first and keeps a swallowed one's report quiet; `pending()`
tells whether one came, and `Interrupts` starts from it, so its first `check()` stops there.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

_noted = threading.Event()  # a Ctrl-C came during this command (raising_interrupts), raised or not


def pending() -> bool:
    """Whether a Ctrl-C came since the command started, even one Python raised where it was swallowed."""
    return _noted.is_set()


def _raise(signum: int, frame: FrameType | None) -> None:
    _noted.set()
    raise KeyboardInterrupt


def _quiet_interrupt(hook: Any) -> Any:
    def unraisable(report: Any) -> None:  # a swallowed Ctrl-C was noted: its "Exception ignored" report is noise
        if not (isinstance(report.exc_value, KeyboardInterrupt) and _noted.is_set()):
            hook(report)
    return unraisable


@contextmanager
def raising_interrupts() -> Iterator[None]:
    """For one command in the main thread: Python's KeyboardInterrupt, noted first (see the module docstring);
    the caller's handler and unraisable hook are put back after (tests call cli.main many times)."""
    _noted.clear()
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # not ours to change: a thread, or a caller that set its own handler (or ignores SIGINT)
        return
    hook, previous = sys.unraisablehook, signal.signal(signal.SIGINT, _raise)
    sys.unraisablehook = _quiet_interrupt(hook)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = hook
        if _noted.is_set():  # however the command ended: cli's one line, or train's own SystemExit(130)
            _forget_unhandled_interrupt()
        _noted.clear()  # the note is the command's: an Interrupts entered later starts clean


def _forget_unhandled_interrupt() -> None:
    """Clear CPython's note that a KeyboardInterrupt went unhandled, which this one did not.

    CPython notes it when a KeyboardInterrupt leaves code run from a string (`exec` of a str, `PyRun_String`:
    pybind11's `py::exec`, which TensorFlow's extension modules run while they import) and, under `python -m`,
    kills the process with SIGINT at exit whatever status `sys.exit` gave (`Py_RunMain`; the `specgen` console
    script exits through another path). A Ctrl-C that landed there ended in -2 instead of 130 now and then
    (measured: 1 in 8 interrupts 3.3-3.6 s into `python -m specgen train`; 0 in 14 with this). Running any string
    through the same entry point clears the note, as the next `py::exec` would have.
    """
    import ctypes  # here: only an interrupted command pays for the import

    ctypes.pythonapi.PyRun_SimpleString(b"")


# Stopped like Ctrl-C: SIGTERM is what `timeout`, `docker stop`, Kubernetes (a TFJob's pod evicted or deleted),
# systemd and Slurm's preemption send before they kill; by default it ended the run at once, without a line, and
# left a tracked MLflow run RUNNING.
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A SIGTERM this soon after the first is the same stop, not a supervisor that would not wait: `timeout` sends its
# SIGTERM to the command and then to its process group, microseconds apart, and when the handler ran in between
# (a `specgen sweep` waiting in a lock, about 1 in 10) the second one ended the command with no line. Supervisors
# that repeat the signal do so seconds apart.
ECHO_SECONDS = 1.0


def exit_status(signum: int) -> int:
    """A shell's status for a command a signal stopped: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + signum


class Interrupts:
    """While entered (in the main thread): SIGINT and SIGTERM (or `signals`) are noted, not acted on; `check()`
    raises KeyboardInterrupt at a safe point, and `signum` says which came first.

    Outside the main thread Python cannot install a handler, so both keep their defaults there; a signal ignored
    when it is entered (SIG_IGN, inherited from the launcher) stays ignored.
    """

    def __init__(self, signals: tuple[int, ...] = SIGNALS) -> None:
        # One Ctrl-C swallowed before it was entered (raising_interrupts noted it) stops at the first check().
        self.signum: int | None = signal.SIGINT if pending() else None
        self._signals = signals  # build's worker pool takes SIGINT alone: SIGTERM keeps its default there
        self._previous: dict[int, Any] = {}  # what signal.signal returned: a handler, SIG_DFL/SIG_IGN, or None (C's)
        self._terminated: float | None = None  # when the first SIGTERM came (time.monotonic)

    @property
    def received(self) -> bool:
        return self.signum is not None

    def _note(self, signum: int, frame: FrameType | None) -> None:
        first, now = self._terminated, time.monotonic()
        if signum == signal.SIGTERM and first is None:
            self._terminated = now
        if self.signum is None:  # the first one names the stop
            self.signum = signum
        elif signum == signal.SIGTERM and (first is None or now - first >= ECHO_SECONDS):
            # A second SIGTERM is a supervisor that would not wait (systemd, Slurm's ladder, a person repeating it):
            # its default, ending the process at once, as before this handling. A run stuck in a long call (a hung
            # collective, a blocked read) is stopped then; the checkpoints on disk are whole (saves are atomic).
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)

    def check(self) -> None:
        """Raise KeyboardInterrupt when a signal came since entering (the loop's `except KeyboardInterrupt` stops)."""
        if self.signum is not None:
            raise KeyboardInterrupt

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            # A signal its launcher chose to ignore stays ignored (a script's background job ignores SIGINT), as
            # raising_interrupts leaves it: SIGINT taken over SIG_IGN stopped a run once it trained, not while it
            # started. A sweep's trials take SIGINT whatever the sweep ignores (sweep/child.py): it stops them so.
            taken = [n for n in self._signals if signal.getsignal(n) is not signal.SIG_IGN]
            self._previous = {number: signal.signal(number, self._note) for number in taken}
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for number, previous in self._previous.items():  # one set outside Python (None) cannot be put back
            signal.signal(number, previous if previous is not None else _DEFAULTS[number])
        self._previous = {}


_DEFAULTS: dict[int, Any] = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


# While a distribution strategy starts, the main thread is inside TensorFlow's C++ (MultiWorkerMirroredStrategy
# waits there for every worker of TF_CONFIG to connect, for as long as they take), where no Python handler runs,
# and TensorFlow's coordination agent installs its own SIGTERM handler (tsl's preemption notifier), which only
# notes it: `timeout`'s SIGTERM, and a repeated one, did nothing; only SIGKILL ended a worker whose peers never
# came. `stoppable` acts on SIGINT and SIGTERM from a thread instead, through the wakeup fd that Python's C-level
# handler writes whatever the main thread does, and puts that handler back when TensorFlow replaced it.
WATCH_SECONDS = 0.1  # how often the watcher looks at the pipe and at SIGTERM's handler


def _sigaction() -> Any:
    """libc's sigaction with its struct (Linux's layout), or None elsewhere: the only way a thread can put Python's
    C-level handler back (`signal.signal` works in the main thread only, which TensorFlow holds)."""
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return None

    class Action(ctypes.Structure):
        _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                    ("restorer", ctypes.c_void_p)]

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.sigaction.argtypes = [ctypes.c_int, ctypes.POINTER(Action), ctypes.POINTER(Action)]
    return libc.sigaction, Action


class _Watcher:
    """The thread of `stoppable`: reads signal numbers from the wakeup pipe and keeps Python's handler in place."""

    def __init__(self, signals: list[int], stop: Callable[[int], object]) -> None:
        self.read, self.write = os.pipe()
        os.set_blocking(self.write, False)  # the C-level handler must never block
        self.signals, self.stop, self.done = signals, stop, threading.Event()
        self.native = _sigaction()
        self.ours: dict[int, Any] = {}  # signal -> Python's C-level sigaction, as installed in the main thread
        if self.native is not None:
            call, action = self.native
            for number in signals:
                self.ours[number] = action()
                call(number, None, self.ours[number])
        self.thread = threading.Thread(target=self._watch, name="specgen-stop-watcher", daemon=True)

    def _reinstall(self) -> None:
        if self.native is None:
            return
        call, action = self.native
        for number, ours in self.ours.items():
            now = action()
            call(number, None, now)
            if now.handler != ours.handler:  # TensorFlow's own handler replaced Python's: put Python's back
                call(number, ours, None)

    def _watch(self) -> None:
        import select

        while not self.done.is_set():
            self._reinstall()
            ready, _, _ = select.select([self.read], [], [], WATCH_SECONDS)
            if ready and (data := os.read(self.read, 64)):
                taken = [number for number in data if number in self.signals]
                if taken:
                    _end_now(taken[0], self.stop)

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        os.close(self.read)
        os.close(self.write)


def _end_now(signum: int, stop: Callable[[int], object]) -> None:
    """The command's one stop line (`stop` prints it), then the process ends with 128 + signum at once: nothing of
    the run folder is written while a strategy starts, so there is nothing to finish."""
    try:
        sys.stdout.flush()
        stop(signum)
        sys.stderr.flush()
    finally:
        os._exit(exit_status(signum))


@contextmanager
def stoppable(stop: Callable[[int], object]) -> Iterator[None]:
    """While entered (in the main thread): SIGINT or SIGTERM (those not ignored) calls `stop(signum)`, which prints
    the command's stop line, and ends the process with exit_status(signum), from the watcher thread: also while the
    main thread waits for the other workers (placement/cluster.py's rendezvous, in Python, so the watcher runs) and
    after TensorFlow installed its own SIGTERM handler (put back to ours). Not during TensorFlow's own start once
    every peer answered (1-2 s): it holds the GIL there and its handler takes the signal (docs/distributed.md).
    Leaving it puts the previous handlers back (for SIGTERM: its default, until `Interrupts` is entered)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [int(n) for n in SIGNALS if signal.getsignal(n) is not signal.SIG_IGN]
    came: list[int] = []
    previous = {n: signal.signal(n, lambda signum, frame: came.append(signum)) for n in taken}
    watcher = _Watcher(taken, stop)
    old_fd = signal.set_wakeup_fd(watcher.write, warn_on_full_buffer=False)
    watcher.thread.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_fd)  # first: a signal from here on is the handler's (`came`), never a closed pipe's
        watcher.close()
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else _DEFAULTS[number])
    if came:  # one the Python-level handler saw after the watcher stopped reading: the same stop
        _end_now(came[0], stop)
