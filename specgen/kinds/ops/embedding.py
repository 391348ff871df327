"""embedding: integer ids -> rows of a [vocab_size, dim] table (Gather in ONNX)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specgen import text
from specgen.fields.base import Flag, PositiveInt
from specgen.fields.layers import LayerBase
from specgen.kinds.initializers import InitializerSpec
from specgen.kinds.ops.base import FLOAT, INTEGER, MaskRule, OpDef, OpError, OpResult, VarDecl, resolve_init
from specgen.kinds.ops.nodes import Shape


class Embedding(LayerBase):
    op: Literal["embedding"]
    vocab_size: PositiveInt
    dim: PositiveInt
    embeddings_init: InitializerSpec = "random_uniform"
    mask_zero: Flag = Field(False, description="Id 0 is padding (Keras' mask_zero): the layers after it skip those "
                                               "steps (docs/spec.md, Masks). Id 0 still has its row in the table.")


def infer(layer: Embedding, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    if dtype not in INTEGER:
        raise OpError(f"embedding needs integer ids (int32 or int64); received {dtype}", "input")
    params = {"vocab_size": layer.vocab_size}
    if layer.mask_zero:  # only then, so the files rendered for unmasked embeddings stay as they were
        if len(shape) != 2:  # a mask marks steps of [batch, time] ids; ir/masks.py follows it through the graph
            raise OpError(f"mask_zero needs ids of shape [batch, time]; received {text.shape(shape)}", "mask_zero")
        params["mask_zero"] = True
    result = OpResult((*shape, layer.dim), FLOAT, params)
    result.variables.append(VarDecl("embeddings", (layer.vocab_size, layer.dim), resolve_init(layer.embeddings_init)))
    return result


OPS = (OpDef("embedding", Embedding, infer, symbolic=True, mask=MaskRule(reason="an embedding reads ids, not a masked "
                                                                            "sequence"),
              moments="lookup", id_limit="vocab_size", ids_checked=True, keras=("Embedding",),
              training_only=("embeddings_init",)),)
