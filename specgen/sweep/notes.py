"""A finished trial's note, from how its process ended and what it printed (driver.py writes it on the trial).

A run that fails prints its error line last; one that a signal ended (the kernel's OOM killer sends SIGKILL)
printed no error, and its last line is whatever it was doing: the signal is the note then. A run stopped by SIGINT
or SIGTERM (`stopped`) did not fail: it was stopped as Ctrl-C stops `specgen train`, and runs again. A run whose
tracker failed warns once in its log and trains on.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


def tracking_warning(log: Path) -> str | None:
    """The first tracking warning in a trial's log (`warning: MLflow tracking at URI failed (REASON)`), or None."""
    from specgen.diagnostics import one_line
    from specgen.tracking.base import FAILED, GOING_ON

    try:
        with open(log, "rb") as file:
            while line := file.readline(1 << 16):  # bounded: a line without an end is read in pieces
                text = line.decode("utf-8", "replace")
                if FAILED in text:
                    return one_line(text[text.index(FAILED):].strip().removesuffix(GOING_ON))[:500]
    except OSError:
        return None
    return None


# How `specgen train` ends when SIGINT or SIGTERM stops it: its handler's exit status, 128 + the signal
# (runtime/interrupt.py), or Popen's -N when the signal came before that handler was in place (Python starting,
# TensorFlow importing). child.py's 143 is a trial whose sweep was gone before it started.
STOPS = {signal.SIGINT: (128 + signal.SIGINT, -signal.SIGINT), signal.SIGTERM: (128 + signal.SIGTERM, -signal.SIGTERM)}


def stopped(code: int) -> signal.Signals | None:
    """The signal that stopped a trial's run (SIGINT: Ctrl-C or the sweep stopping it; SIGTERM: `timeout`, `docker
    stop`, systemd's stop of the whole group, the kernel when its sweep died), or None when it was not stopped so."""
    return next((number for number, codes in STOPS.items() if code in codes), None)


def killed(code: int) -> str:
    """A trial's note when a signal ended it (Popen's returncode -N): the signal by name; SIGKILL is what the
    kernel's OOM killer sends, so it says that too."""
    number = -code
    try:
        name = signal.Signals(number).name
    except ValueError:  # a real-time or unnamed signal
        return f"killed by signal {number}"
    oom = "; out of memory?" if number == signal.SIGKILL else ""
    return f"killed by {name} (signal {number}{oom})"


def last_line(log: Path) -> str:
    """The last line the run printed (its error line), escaped and cut to one line."""
    from specgen.diagnostics import one_line

    try:
        with open(log, "rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - 4096))
            lines = [line for line in file.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return one_line(lines[-2] if lines and lines[-1].endswith(" found") and len(lines) > 1 else
                    lines[-1] if lines else "")[:500]
