"""The one base class of every error specgen raises to tell a person what is wrong.

Spec mistakes (SpecError), op rules (OpError), Keras imports (ImportProblem, KerasFileError,
UnsafeKerasFile), data and inputs (DataError, InputError), checkpoints (Unreadable), paths specgen
refuses (UnsafePathError), the server's repository and requests (RepositoryError,
ProtocolError, Refused) and a generated file failing its own check (RenderError, a specgen bug) all
derive from SpecgenError, so the CLI catches them in one place and a library caller can too.
Classes that were ValueError or OSError keep that base beside this one: code that catches those
still does. Signals that are no one's mistake (the server's QueueFull, ShuttingDown) stay plain.
It imports nothing from specgen: every layer may raise it.
"""

from __future__ import annotations


class SpecgenError(Exception):
    """Its str() is the message a person reads: one line (SpecError: one line per diagnostic)."""


class AbstractSpec(SpecgenError):
    """A spec marked `abstract: true` (one that exists to be extended) was checked, and has no model to use
    (spec/load.py raises it; render/build.py skips such a spec without importing the spec layer).

    `validate` prints it as its ok line and `build` skips the file; any other command stops with it.
    """

    def __init__(self, display: str, keys: int):
        self.display, self.keys = display, keys
        super().__init__(f"{display} is abstract (abstract: true): it exists only to be extended by other specs; "
                         "use a spec that extends it")


class UsageError(SpecgenError, ValueError):
    """A command-line mistake found after argparse (flags that contradict each other, an output name whose format
    cannot be told): printed as `specgen COMMAND: error: message` and exit status 2, as argparse's own usage
    errors, so a script can tell "the command line is wrong" from "the spec has errors" (1)."""

    def __init__(self, command: str, message: str):
        self.command = command
        super().__init__(message)
