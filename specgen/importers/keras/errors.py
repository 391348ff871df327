"""The one error an import raises: a SpecError whose diagnostics name the source file."""

from __future__ import annotations

from specgen.diagnostics import Diagnostic, SpecError, quoted
from specgen.errors import SpecgenError


class ImportProblem(SpecgenError):
    """What cannot be imported; `refused` turns it into the CLI's SpecError for a source."""


def refused(source: str, problems: list[str]) -> SpecError:
    return SpecError([Diagnostic(source, None, message) for message in problems])


def layer_problem(name: str, cls: str, message: str) -> ImportProblem:
    """An error naming the Keras layer and its class, as every refusal does."""
    return ImportProblem(f"Keras layer '{name}' ({cls}): {message}")


def keras_hub_problem(name: str, cls: str, module: str) -> ImportProblem:
    """A KerasHub class inside a saved model (a layer such as TransformerEncoder, or a whole backbone called as a
    layer): refused by name, before its call arguments are read (a backbone's dict input is no mask)."""
    what = "model used as a layer" if ".models." in module else "layer"
    return layer_problem(name, cls, f"a KerasHub {what} inside a model is not imported yet; KerasHub backbones saved "
                         "whole (BertBackbone, GPT2Backbone, RobertaBackbone) are, and their layers as spec ops are in "
                         "docs/import.md (KerasHub backbones)")


MAX_LISTED = 5  # names a refusal lists; the rest are counted


def listed(names: list[str]) -> str:
    """How many, then the first few names: `3 ('a', 'b', 'c')`, `12 ('a', ..., 'e' and 7 more)`."""
    more = f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    return f"{len(names)} ({', '.join(quoted(n) for n in names[:MAX_LISTED])}{more})"
