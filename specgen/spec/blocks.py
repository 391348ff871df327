"""Reusable blocks: the `blocks:` section and block instances in `layers` (docs/spec.md, "Blocks").

These are only the models, shaped like the YAML. Expanding instances into the flat list of op
layers that the IR handles is specgen/spec/expand.py.

A block's layers are kept as plain mappings here: their values may be `$param` references, which
no op model accepts, so each one is validated as an op layer once per instance, after its
parameters are substituted (expand.py). The JSON Schema therefore checks block layers loosely.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag, WithJsonSchema

from specgen.fields.base import IDENT, Doc, Identifier, LayerName, PositiveInt, SpecModel
from specgen.kinds.ops import Layer

# Layers in one spec after block expansion (docs/security.md): checked for every spec, with or without blocks
# (spec/load.py; spec/expand.py while expanding). EfficientNetB7, among the largest, has 813.
MAX_LAYERS = 10_000

# A parameter reference is a whole string value `$name`; there is no templating inside strings. Its length is not
# bounded here (IDENT has no bound): `$` and a name of any length is meant as a reference, and block_checks.py
# says when the name is too long to be a parameter's (name_length_problem).
PARAM_REF = re.compile("^\\$" + IDENT[1:])
MAX_REPEAT = 1000  # instances from one `repeat`; the total of expanded layers is bounded in expand.py

Arguments = dict[Identifier, Any]


class First(SpecModel):
    """What differs for the first of `repeat` instances (e.g. strides, or a projection shortcut)."""

    block: Identifier | None = Field(None, description="Another block for the first instance (same inputs "
                                     "and outputs); defaults to the instance's block.")
    with_: Arguments = Field(default_factory=dict, alias="with",
                             description="Parameter values for the first instance, over the instance's `with`.")


class Instance(SpecModel):
    """One use of a block in `layers` (or in another block's `layers`)."""

    name: LayerName = Field(description="Prefix of the expanded layers: <name>/<block layer>, or <name>/<k>/... "
                            "with `repeat`.")
    block: Identifier = Field(description="The block to expand, from the top-level `blocks` section.")
    input: LayerName | None = Field(None, description="For a block with one input; defaults to the previous layer.")
    inputs: Annotated[list[LayerName], Field(min_length=1)] | None = Field(
        None, description="One name per block input, in the block's order.")
    with_: Arguments = Field(default_factory=dict, alias="with", description="Parameter values (whole values).")
    repeat: Annotated[PositiveInt, Field(le=MAX_REPEAT)] | None = Field(
        None, description="Stack this many instances, named <name>/1 ... <name>/N, each reading the one before.")
    first: First | None = Field(None, description="With `repeat`: what differs for instance <name>/1.")


# Values are `$param` references until an instance substitutes them, so the schema only asks for a name.
BlockLayer = Annotated[dict[str, Any], WithJsonSchema({
    "type": "object", "required": ["name"],
    "description": "An op layer or a block instance, as in `layers`; any value except names and inputs "
                   "may be a `$param` reference.",
})]


class Block(SpecModel):
    """A named, parameterized group of layers with its own inputs and outputs."""

    doc: Doc = ""
    params: dict[Identifier, Any] = Field(default_factory=dict, description=(
        "Parameter name -> default value; null (or no value) means every instance must set it."))
    inputs: Annotated[list[Identifier], Field(min_length=1)]
    outputs: Annotated[dict[Identifier, LayerName], Field(min_length=1, description=(
        "Output name -> a layer of the block, or a block instance in it (<instance> or <instance>/<output>)."))]
    layers: Annotated[list[BlockLayer], Field(min_length=1)]


def _layer_or_instance(value: Any) -> str:
    """A mapping with `block` and no `op` is an instance; anything else is read as an op layer, so that
    the messages for a layer stay the ones a spec without blocks gets."""
    if isinstance(value, dict):
        return "instance" if "block" in value and "op" not in value else "layer"
    return "instance" if isinstance(value, Instance) else "layer"


LayerOrInstance = Annotated[
    Annotated[Layer, Tag("layer")] | Annotated[Instance, Tag("instance")],
    Discriminator(_layer_or_instance),
]
