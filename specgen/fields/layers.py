"""Field types and base classes that layer models share.

Each op's own model lives with the rest of its definition in specgen/kinds/ops/<module>.py;
the discriminated union of them all is `specgen.kinds.ops.Layer`. Initializer keys (`InitializerSpec`)
come from their own registry, specgen/kinds/initializers/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from specgen.fields.base import (
    LayerName,
    PositiveInt,
    SpecModel,
)
from specgen.fields.unions import by_shape, scalar_or_list

# The ops a layer's `activation:` key accepts (each defines AsActivation in specgen/kinds/ops;
# tests/test_op_registry.py checks the two agree). Kept as a literal here for the JSON schema's enum.
Activation = Literal["relu", "leaky_relu", "gelu", "gelu_approximate", "sigmoid", "tanh", "softmax", "relu6", "elu",
                     "selu", "softplus", "swish", "silu", "hard_sigmoid", "hard_swish", "hard_silu", "linear"]
Padding = Literal["same", "valid"]
Size2 = by_shape(scalar_or_list, "an integer or a list of 2 integers",
                 scalar=PositiveInt, list=Annotated[list[PositiveInt], Field(min_length=2, max_length=2)])


# A layer with `share:` is a second call of another layer: its owner's variables, op and configuration
# (docs/spec.md, "Shared layers"; checked in specgen/ir/shares.py).
SHARE_DESCRIPTION = ("Reuse this layer's variables (a layer called twice): same op, and every other key "
                     "equal to that layer's or left out (left out: that layer's value).")


class LayerBase(SpecModel):
    name: LayerName
    input: LayerName | None = Field(None, description="Input layer or spec input; defaults to the previous layer.")
    share: LayerName | None = Field(None, description=SHARE_DESCRIPTION)

    if TYPE_CHECKING:  # each op's model declares its own `op: Literal[...]`, the union's tag; not a field here
        op: str


class MultiInputBase(SpecModel):
    name: LayerName
    inputs: Annotated[list[LayerName], Field(min_length=2)]
    share: LayerName | None = Field(None, description=SHARE_DESCRIPTION)

    if TYPE_CHECKING:  # each op's model declares its own `op: Literal[...]`, the union's tag; not a field here
        op: str
