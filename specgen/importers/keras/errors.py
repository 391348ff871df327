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


# What to do about a layer whose class the importer cannot take: the same advice for every such refusal.
WHAT_TO_DO = ("write the layer as spec ops in the imported spec by hand (docs/extending.md adds an op), or save the "
              "model without it")


def custom_class(module: object, registered: object, cls: str) -> str | None:
    """Why a config entry names a class Keras does not ship, or None: Keras 3 loads a `registered_name` custom object
    before its own class of that name (serialization_lib's _retrieve_class_or_fn), and a module outside Keras is
    the user's code. KerasHub's modules are left to keras_hub_problem."""
    if isinstance(module, str) and module.startswith("keras_hub."):
        return None
    if isinstance(module, str) and module != "keras" and not module.startswith("keras."):
        return f"a custom class from module {quoted(module)}"
    if registered is not None and registered != cls:
        return f"a custom object registered as {quoted(str(registered))}"
    return None


def custom_problem(name: str, cls: str, why: str) -> ImportProblem:
    return layer_problem(name, cls, f"{why}: specgen never imports a model's own code; {WHAT_TO_DO}")


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
