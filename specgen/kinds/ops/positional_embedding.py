"""positional_embedding: KerasHub's learned PositionEmbedding over [batch, time, features].

The layer returns the position embeddings, not their sum with the input: rows 0..time-1 of its
`embeddings` variable [max_length, features] (glorot_uniform, as KerasHub), broadcast to the input's
shape. Follow it with `add` to add them to token embeddings, as KerasHub's TokenAndPositionEmbedding
does. The input gives only the length and the feature size, so no gradient flows back to it.

One graph runs at any time length up to `max_length`: TensorFlow checks the length and slices; ONNX
gathers rows Range(0, time) (Shape, Range, Gather, Reshape, Expand), so a longer sequence fails in the graph
rather than being clipped as a bare Slice would. Without optimizations Gather's bounds check refuses row
max_length; onnxruntime's optimizer rewrites that Gather into a Slice, which clips, and the Reshape of the
rows to the input's [time, features] then refuses the missing rows. The Reshape is there for every
max_length: Expand alone refused a clipped table only where it had 2 or more rows (a 1-row table
broadcasts, so max_length 1 answered every step with row 0). `specgen export` also records the bound of a
named time dimension in the model's metadata (runtime/lengths.py), so `specgen infer` and `specgen serve`
refuse a longer sequence in one line naming the input and the layer before running.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from specgen import text
from specgen.fields.base import PositiveInt
from specgen.fields.layers import LayerBase
from specgen.kinds.initializers import InitializerSpec
from specgen.kinds.ops.base import MaskRule, OnnxContext, OpDef, OpError, OpResult, VarDecl, resolve_init
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import fixed, require_float


class PositionalEmbedding(LayerBase):
    op: Literal["positional_embedding"]
    max_length: PositiveInt = Field(description="The longest sequence the layer takes (KerasHub's sequence_length): "
                                                "the rows of its embeddings variable.")
    embeddings_init: InitializerSpec = "glorot_uniform"


def infer(layer: PositionalEmbedding, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, layer.op)
    if len(shape) != 3:
        raise OpError(f"{layer.op} needs a rank-3 input (batch, time, features); received {text.shape(shape)}", "input")
    steps = shape[1]
    features = fixed(shape[2], f"{layer.op}'s last axis (its embeddings' columns)")
    if isinstance(steps, int) and steps > layer.max_length:
        raise OpError(f"max_length: received {layer.max_length}, expected at least the input's {steps} time steps "
                      f"(input {text.shape(shape)})", "max_length")
    result = OpResult(shape, params={"max_length": layer.max_length, "steps": steps})
    result.variables.append(VarDecl("embeddings", (layer.max_length, features), resolve_init(layer.embeddings_init)))
    result.flops = 0  # a row gather and a broadcast: memory traffic, no arithmetic
    return result


def tf_attrs(node: Node) -> dict[str, Any]:
    return {"layer": node.name}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    name = node.onnx_name
    # Range takes scalars; the lowering declares 1-element int64 constants, squeezed in the graph
    # (onnxruntime folds them once at session start).
    return {"zero": ctx.constant(f"{name}___zero", [0]), "one": ctx.constant(f"{name}___one", [1])}


# gradient: the input gives only its shape; the embeddings variable is the layer's only trained value.
# KerasHub's PositionEmbedding does not support masking, so Keras drops the mask; its output is the position table,
# which holds no padded values, so dropping it changes no number.
OPS = (OpDef("positional_embedding", PositionalEmbedding, infer, tf_attrs, onnx_attrs, symbolic=True,
             gradient=(False,), mask=MaskRule("none"), bounds_steps=True, moments="lookup",
             training_only=("embeddings_init",)),)
