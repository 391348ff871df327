"""What stops `specgen sweep` (or `specgen report --sweep`) before a trial starts: a flag it cannot use, or optuna
not installed.

Apart from command.py so that katib.py and summary.py, which command.py imports, can raise it without an
import cycle.
"""

from __future__ import annotations

from specgen.errors import UsageError
from specgen.extras import need


class SweepUsageError(UsageError):
    """A command-line mistake of `specgen sweep` or `specgen report --sweep` found after argparse: a UsageError, so
    the CLI prints it as argparse prints its own (`specgen sweep: error: ...`) and exits 2, not 1 (docs/cli.md)."""

    def __init__(self, message: str, command: str = "sweep"):
        super().__init__(command, message)


def need_optuna() -> None:
    need("specgen sweep", "optuna")  # one line naming the sweep extra (specgen.extras, as every command's)
