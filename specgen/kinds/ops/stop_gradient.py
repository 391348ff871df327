"""stop_gradient: the identity whose gradient is zero (a TD target is a constant for the loss).

Forward it is the identity, so ONNX has no node for it: the layer's tensor is its input.
"""

from __future__ import annotations

from typing import Literal

from specgen.fields.layers import LayerBase
from specgen.kinds.ops.base import PASSES_MASK, OpDef, OpResult
from specgen.kinds.ops.nodes import Shape


class StopGradient(LayerBase):
    op: Literal["stop_gradient"]


def infer(layer: StopGradient, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    return OpResult(shape, dtype)


OPS = (OpDef("stop_gradient", StopGradient, infer, layout="any", symbolic=True, onnx_template=None, gradient=False,
              mask=PASSES_MASK, moments="same"),)
