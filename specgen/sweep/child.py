"""`python -m specgen.sweep.child PARENT_PID COMMAND...`: run a trial's command so that it ends with its sweep.

On Linux the process asks the kernel for SIGTERM when the thread that started it ends (prctl
PR_SET_PDEATHSIG, kept across exec), then becomes the trial's `specgen train`: a sweep killed with `kill -9`
leaves no training behind it, and the next `specgen sweep` re-runs the trial it cut short. If the sweep died
before the request took effect, the parent is no longer PARENT_PID and the trial does not start. Elsewhere the
command just runs (a killed sweep's trial then finishes on its own; its result is not recorded).
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    parent, command = int(argv[0]), argv[1:]
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:
            return 143  # the sweep is gone already: as if the signal had come
    # The sweep stops a trial with SIGINT (pruned, or the sweep stopping): the trial's `specgen train` keeps an
    # ignored SIGINT ignored (runtime/interrupt.py), so a sweep started with it ignored (a script's `&` job) gives
    # its trial SIGINT's default; exec keeps SIG_IGN but resets a handler.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execv(command[0], command)  # does not return: the command replaces this process (an OSError if it cannot)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
