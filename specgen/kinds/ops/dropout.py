"""dropout: random in training (seeded, replayable), the identity at inference (no ONNX node)."""

from __future__ import annotations

import zlib
from typing import Annotated, Any, Literal

from specgen.fields.base import bounds
from specgen.fields.layers import LayerBase
from specgen.kinds.ops.base import PASSES_MASK, OpDef, OpResult
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import require_float


class Dropout(LayerBase):
    op: Literal["dropout"]
    rate: Annotated[float, *bounds(float, ge=0, lt=1)]


def infer(layer: Dropout, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, "dropout")
    return OpResult(shape, params={"rate": layer.rate})


def tf_attrs(node: Node) -> dict[str, Any]:
    # The salt (layer name, 20 bits) gives each dropout layer its own stream under one seed.
    return {"rate": node.params["rate"], "salt": zlib.crc32(node.name.encode()) & 0xFFFFF,
            "inference_mode": node.inference_mode}  # a target network's: off in training too (ir/resolve.py)


OPS = (OpDef("dropout", Dropout, infer, tf_attrs, layout="any", symbolic=True, onnx_template=None, mask=PASSES_MASK,
              moments="same", keras=("Dropout",), stateful=lambda layer: layer.rate != 0,  # its random mask
              training_only=("rate",)),)  # the identity at inference, whatever the rate
