"""embedding: integer ids -> rows of a [vocab_size, dim] table (Gather in ONNX)."""

from __future__ import annotations

from typing import Literal

from specgen.kinds.ops.base import FLOAT, INTEGER, OpDef, OpError, OpResult, VarDecl, resolve_init
from specgen.kinds.ops.nodes import Shape
from specgen.spec.base import PositiveInt
from specgen.spec.layers import InitializerSpec, LayerBase


class Embedding(LayerBase):
    op: Literal["embedding"]
    vocab_size: PositiveInt
    dim: PositiveInt
    embeddings_init: InitializerSpec = "random_uniform"


def infer(layer: Embedding, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    if dtype not in INTEGER:
        raise OpError(f"embedding needs integer ids (int32 or int64); received {dtype}", "input")
    result = OpResult((*shape, layer.dim), FLOAT, {"vocab_size": layer.vocab_size})
    result.variables.append(VarDecl("embeddings", (layer.vocab_size, layer.dim), resolve_init(layer.embeddings_init)))
    return result


OPS = (OpDef("embedding", Embedding, infer, symbolic=True),)
