"""padding_attention_mask: a padding mask [batch, steps] (nonzero = a real token) as a self-attention mask
[batch, steps, steps] for `multi_head_attention`'s `attention_mask`.

KerasHub's backbones take `padding_mask` and their TransformerEncoder/Decoder attend only to real keys:
`mask[:, None, :]` broadcast over the queries (merge_padding_and_attention_mask), and-ed with the causal
mask in the decoder (multi_head_attention's `causal: true` does that). A padded query still attends to the
real keys, so its output is what KerasHub gives at that position. Why a separate op and not a rank-2
attention_mask: the attention op's mask stays Keras' [batch, T, S] contract, and the expansion is spelled
once where several layers share it (one mask for every layer of an imported backbone).

ONNX: Unsqueeze to [batch, 1, steps], Expand by [1, steps, 1] (the full-size mask onnxruntime's opset-23
Attention kernel needs; attention.py's docstring). The output keeps the input's dtype; FLOPs 0.
"""

from __future__ import annotations

from typing import Any, Literal

from specgen import text
from specgen.fields.layers import LayerBase
from specgen.kinds.ops.attention import MASK_DTYPES
from specgen.kinds.ops.base import OnnxContext, OpDef, OpError, OpResult
from specgen.kinds.ops.nodes import Node, Shape


class PaddingAttentionMask(LayerBase):
    op: Literal["padding_attention_mask"]


def infer(layer: PaddingAttentionMask, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    if len(shape) != 2 or dtype not in MASK_DTYPES:
        raise OpError(f"{layer.op} needs a padding mask [batch, steps] of {', '.join(MASK_DTYPES)}; received "
                      f"{text.shape(shape)} {dtype}", "input")
    return OpResult((None, shape[1], shape[1]), dtype, flops=0)


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    name = node.onnx_name
    return {"axis": ctx.constant(f"{name}___axis", [1]), "one": ctx.constant(f"{name}___one", [1])}


# gradient: a mask selects, it carries none (as gather's indices).
OPS = (OpDef("padding_attention_mask", PaddingAttentionMask, infer, onnx_attrs=onnx_attrs, symbolic=True,
             gradient=False, moments="same"),)  # its input's values, broadcast
