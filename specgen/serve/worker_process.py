"""One worker of `specgen serve --workers N`, the process the supervisor (workers.py) starts: `python -m` this module
with the parent's pid as its argument and its settings pickled on stdin."""

from __future__ import annotations

import os
import pickle
import signal
import sys

from specgen.serve.metrics import remove_orphaned_metrics
from specgen.serve.process import ServerSettings, serve


def _die_with_parent(parent: int) -> None:
    """SIGTERM to this worker when the parent dies (Linux); exit now if it already has."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        sys.exit(1)


def worker_main() -> int:
    """A worker: the settings come pickled on stdin from the parent (its own child: trusted)."""
    parent = int(sys.argv[1])
    _die_with_parent(parent)
    settings: ServerSettings = pickle.load(sys.stdin.buffer)
    try:
        return serve(settings)
    finally:
        if os.getppid() != parent:  # the parent was killed: no one else will remove the metrics folder
            remove_orphaned_metrics()


if __name__ == "__main__":
    sys.exit(worker_main())
