"""What stops `specgen sweep` before a trial starts: a flag it cannot use, or optuna not installed.

Apart from command.py so that katib.py and summary.py, which command.py imports, can raise it without an
import cycle.
"""

from __future__ import annotations

from specgen.errors import SpecgenError
from specgen.extras import need


class SweepUsageError(SpecgenError, ValueError):
    """A flag the sweep cannot use, or its extra not installed."""


def need_optuna() -> None:
    need("specgen sweep", "optuna")  # one line naming the sweep extra (specgen.extras, as every command's)
