"""The padding mask a layer consumes (Node.mask, ir/masks.py) as template attributes.

TensorFlow: the call expression that builds it from the id tensors, placed as the helper's `mask=` argument.
ONNX: the id tensors, which the consumer's template turns into a bool [batch, time] tensor (Cast to bool:
non-zero is true) and, for recurrent nodes, into the in-graph reordering that feeds `sequence_lens`.
"""

from __future__ import annotations

from typing import Any

from specgen.ir.model import Node


def tf_mask(node: Node, local: dict[str, str]) -> dict[str, Any]:
    if not node.mask:
        return {}
    return {"mask": f"layers.token_mask({', '.join(local[s] for s in node.mask)})"}


def onnx_mask(node: Node, ctx: Any) -> dict[str, Any]:
    """`ctx`: render/onnx_plan.py's Lowering (its tensor names, constants and plan)."""
    if not node.mask:
        return {}
    return {"mask": [ctx.tensor[s] for s in node.mask], "masks": onnx_constants(node, ctx)}


def _scalar(ctx: Any, name: str, value: int) -> str:
    """An int64 scalar (Range's bounds and CumSum's axis are 0-d; OnnxContext.constant makes 1-d tensors)."""
    ctx.plan.constants.append(f"int64 {name} = {{{value}}}")
    return name


def onnx_constants(node: Node, ctx: Any) -> dict[str, Any]:
    """The constants templates/onnx/masks.onnx.j2 reads for this node (declared once per node)."""
    n = node.onnx_name
    found = {"axis1": ctx.constant(f"{n}___mask_axis1", [1]), "axis2": ctx.constant(f"{n}___mask_axis2", [2]),
             "fzero": ctx.float_constant(f"{n}___mask_fzero", 0.0)}
    if node.op in ("lstm", "gru", "simple_rnn"):
        found |= {"zero": _scalar(ctx, f"{n}___mask_zero", 0), "one": _scalar(ctx, f"{n}___mask_one", 1),
                  "flip": [ctx.constant(f"{n}___mask_{k}", [v]) for k, v in
                           (("starts", -1), ("ends", -(2**63)), ("flip_axes", 1), ("steps", -1))]}
    if node.op == "multi_head_attention":
        found["masked"] = ctx.float_constant(f"{n}___mask_value", -1e9)  # Keras' masked score (attention.py)
        # Keras' Softmax-layer path (taken when dropout > 0) zeroes a fully masked row; runtime/lib/attention.py
        found["zero_rows"] = node.params["dropout"] > 0
    return found
