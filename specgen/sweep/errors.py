"""What stops `specgen sweep` before a trial starts: a flag it cannot use, or optuna not installed.

Apart from command.py so that katib.py and summary.py, which command.py imports, can raise it without an
import cycle.
"""

from __future__ import annotations

from specgen.errors import SpecgenError

EXTRA = "specgen[sweep]"


class SweepUsageError(SpecgenError, ValueError):
    """A flag the sweep cannot use, or its extra not installed."""


def need_optuna() -> None:
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise SweepUsageError(f"specgen sweep needs optuna, which is not installed; expected the sweep extra: "
                              f"pip install '{EXTRA}'") from None
