"""Ctrl-C during `specgen train`: noted when it comes, acted on between two TensorFlow calls.

Python's default SIGINT handler raises KeyboardInterrupt at whatever bytecode the main thread runs next, and
during training that is nearly always inside TensorFlow's own Python code: its C++ nest functions calling back
into Python (a SystemError "returned a result with an exception set", then a tf.function whose argument
structure no longer matches), a tf.function's tracing state, a `__del__` (where Python swallows the exception
and the run goes on). The run then died with a traceback or did not stop at all (the quarantined Ctrl-C test).
Here the handler only notes the signal; the training loop calls `check()` where no TensorFlow call is half done
(between updates, eval batches and saves), which raises KeyboardInterrupt there.

`specgen train` enters it for the whole command, not only the loop (commands/train.py): a Ctrl-C during start-up
(reading the data, building and restoring the model) is acted on between those phases, and one during the checks
before the run folder's first write stops there, with nothing written. Where Python raises KeyboardInterrupt
itself (before this is entered: imports, reading the spec; other commands), cli.main turns it into one line and
exit status 130.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any


class Interrupts:
    """While entered (in the main thread): SIGINT is noted, not raised; `check()` raises it at a safe point.

    Outside the main thread Python cannot install a handler, so Ctrl-C keeps Python's default there.
    """

    def __init__(self) -> None:
        self.received, self._installed = False, False
        self._previous: Any = None  # what signal.signal returned: a handler, SIG_DFL/SIG_IGN, or None (set in C)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.received = True

    def check(self) -> None:
        """Raise KeyboardInterrupt when Ctrl-C came since entering (the loop's `except KeyboardInterrupt` stops)."""
        if self.received:
            raise KeyboardInterrupt

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._previous, self._installed = signal.signal(signal.SIGINT, self._note), True
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._installed:  # a handler set outside Python (None) cannot be put back: Python's default then
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.default_int_handler)
            self._installed = False
