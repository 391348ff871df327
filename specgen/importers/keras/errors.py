"""The one error an import raises: a SpecError whose diagnostics name the source file."""

from __future__ import annotations

from specgen.diagnostics import Diagnostic, SpecError
from specgen.errors import SpecgenError


class ImportProblem(SpecgenError):
    """What cannot be imported; `refused` turns it into the CLI's SpecError for a source."""


def refused(source: str, problems: list[str]) -> SpecError:
    return SpecError([Diagnostic(source, None, message) for message in problems])


def layer_problem(name: str, cls: str, message: str) -> ImportProblem:
    """An error naming the Keras layer and its class, as every refusal does."""
    return ImportProblem(f"Keras layer '{name}' ({cls}): {message}")
