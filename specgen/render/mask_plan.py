"""The padding mask a layer consumes (Node.mask, ir/masks.py) as template attributes.

TensorFlow: the call expression that builds it from the id tensors, placed as the helper's `mask=` argument.
ONNX: the id tensors, which the consumer's template turns into a bool [batch, time] tensor (Cast to bool:
non-zero is true) and, for recurrent nodes, into the in-graph reordering that feeds `sequence_lens`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgen.ir.model import Node
from specgen.kinds.ops import op_def
from specgen.kinds.ops.attention import empty_rows, masked_value, padding_roles
from specgen.kinds.ops.base import MaskRender


@dataclass(frozen=True)
class MaskConstants:
    """The constants templates/onnx/masks.onnx.j2 reads as `m.<name>`, each a tensor name; only those the chosen
    nodes read are made (onnxruntime warns about unused initializers), the rest stay None and are never read."""

    axis0: str | None = None
    axis1: str | None = None
    axis2: str | None = None
    zero: str | None = None  # int64 scalars: Range's bounds, CumSum's axis
    one: str | None = None
    fzero: str | None = None  # float 0.0
    flip: tuple[str, ...] | None = None  # Slice's starts, ends, axes and steps: a backward layer's outputs reversed
    axes_index: str | None = None
    axes_query: str | None = None
    axes_key: str | None = None


def _by_role(node: Node) -> dict[str, tuple[str, ...]]:
    """multi_head_attention's padding masks by role (query unless query_mask: false, value, and key when it is a
    separate input); empty where none of those is masked."""
    at = node.params["roles"]
    return {role: node.input_masks[at[role]] for role in padding_roles(node.params) if node.input_masks[at[role]]}


def _consumes(node: Node) -> MaskRender | None:
    """How the node's op takes a padding mask (OpDef.mask.consumes)."""
    return op_def(node.op).mask.consumes


def tf_mask(node: Node, local: dict[str, str]) -> dict[str, Any]:
    if not any(node.input_masks) or (_consumes(node) == "attention" and not _by_role(node)):
        return {}
    if _consumes(node) == "attention":
        return {"padding": {role: f"layers.token_mask({', '.join(local[s] for s in ids)})"
                            for role, ids in _by_role(node).items()}}
    if _consumes(node) == "product":  # multiply: each input's own mask, "None" for an unmasked one
        return {"factors": [f"layers.token_mask({', '.join(local[s] for s in ids)})" if ids else "None"
                            for ids in node.input_masks]}
    return {"mask": f"layers.token_mask({', '.join(local[s] for s in node.mask)})"}


def onnx_mask(node: Node, ctx: Any, attrs: dict[str, Any]) -> dict[str, Any]:
    """`ctx`: render/onnx_plan.py's Lowering (its tensor names, constants and plan); `attrs`: the op's own."""
    if not any(node.input_masks) or (_consumes(node) == "attention" and not _by_role(node)):
        return {}  # an attention whose only padded input is a query it does not mask (query_mask: false)
    if _consumes(node) == "attention":
        padding = {role: [ctx.tensor[s] for s in ids] for role, ids in _by_role(node).items()}
        return {"padding": padding} | onnx_constants(node, ctx, attrs)
    if _consumes(node) == "product":
        return _product(node, ctx, attrs)
    return {"mask": [ctx.tensor[s] for s in node.mask]} | onnx_constants(node, ctx, attrs)


def _product(node: Node, ctx: Any, attrs: dict[str, Any]) -> dict[str, Any]:
    """multiply (templates/onnx/ops/multiply.onnx.j2): each input's id tensors ([] when unmasked), where its mask
    goes in, the 1 a masked step counts as and, when every input is masked, the 0 the output takes there."""
    n = node.onnx_name
    found = {"factors": [[ctx.tensor[s] for s in ids] for ids in node.input_masks],
             "axes": ctx.constant(f"{n}___mask_axes", [attrs["mask_axis"]]),
             "one": ctx.float_constant(f"{n}___mask_one", 1.0)}
    if all(node.input_masks):
        found["zero"] = ctx.float_constant(f"{n}___mask_zero", 0.0)
    return found


def _scalar(ctx: Any, name: str, value: int) -> str:
    """An int64 scalar (Range's bounds and CumSum's axis are 0-d; OnnxContext.constant makes 1-d tensors)."""
    ctx.plan.constants.append(f"int64 {name} = {{{value}}}")
    return name


def onnx_constants(node: Node, ctx: Any, attrs: dict[str, Any]) -> dict[str, Any]:
    """Template attributes for templates/onnx/masks.onnx.j2: only the constants the chosen nodes read
    (onnxruntime warns about unused initializers); `attrs` are the op's own (multi_head_attention's)."""
    n, p, consumes = node.onnx_name, node.params, _consumes(node)
    # Each constant is made in the order the calls below run: that order is the model's initializer order.
    if consumes == "recurrent":
        axis1, axis2 = ctx.constant(f"{n}___mask_axis1", [1]), ctx.constant(f"{n}___mask_axis2", [2])
        zero, one = _scalar(ctx, f"{n}___mask_zero", 0), _scalar(ctx, f"{n}___mask_one", 1)
        flip = fzero = None
        if p["return_sequences"] and p["go_backwards"]:
            flip = tuple(ctx.constant(f"{n}___mask_{k}", [v]) for k, v in
                         (("starts", -1), ("ends", -(2**63)), ("flip_axes", 1), ("steps", -1)))
        elif p["return_sequences"]:
            fzero = ctx.float_constant(f"{n}___mask_fzero", 0.0)
        return {"masks": MaskConstants(axis1=axis1, axis2=axis2, zero=zero, one=one, flip=flip, fzero=fzero)}
    if consumes == "both_directions":
        axis1, axis2 = ctx.constant(f"{n}___mask_axis1", [1]), ctx.constant(f"{n}___mask_axis2", [2])
        zero, one = _scalar(ctx, f"{n}___mask_zero", 0), _scalar(ctx, f"{n}___mask_one", 1)
        axes_index = fzero = axis0 = None
        if p["return_sequences"]:
            axes_index = ctx.constant(f"{n}___mask_axes_index", [0, 3])
            fzero = ctx.float_constant(f"{n}___mask_fzero", 0.0)
            if p["merge_mode"] != "concat":
                axis0 = ctx.constant(f"{n}___mask_axis0", [0])
        return {"masks": MaskConstants(axis0=axis0, axis1=axis1, axis2=axis2, zero=zero, one=one, fzero=fzero,
                                       axes_index=axes_index)}
    if consumes == "masked_mean":  # global_avg_pool
        axis1 = ctx.constant(f"{n}___mask_axis1", [1])
        return {"masks": MaskConstants(axis1=axis1, fzero=ctx.float_constant(f"{n}___mask_fzero", 0.0))}
    return _attention_constants(node, ctx, attrs)


def _attention_constants(node: Node, ctx: Any, attrs: dict[str, Any]) -> dict[str, Any]:
    n, by_role = node.onnx_name, _by_role(node)
    axis1 = ctx.constant(f"{n}___mask_axis1", [1])
    axes_query = ctx.constant(f"{n}___mask_axes_query", [1, 3]) if "query" in by_role else None
    axes_key = ctx.constant(f"{n}___mask_axes_key", [1, 2]) if by_role.keys() - {"query"} else None
    # The op declared these only for its own masks; a padding mask needs them too. With is_causal (the fused
    # node's causal flag) and a padding mask, the causal mask is built and and-ed like an explicit one.
    extra: dict[str, Any] = {"masks": MaskConstants(axis1=axis1, axes_query=axes_query, axes_key=axes_key)}
    if attrs["empty_rows"] is None:  # a padded query step may have no allowed key
        extra |= empty_rows(n, attrs["fused"], node.params["dropout"], ctx)
    if not attrs["fused"] and "masked" not in attrs:  # the fused node takes the boolean mask itself
        extra["masked"] = ctx.float_constant(f"{n}___masked_value", masked_value(node.params["dropout"]))
    if attrs["is_causal"]:
        extra |= {"causal": True, "is_causal": False}
        if "one" not in attrs:
            extra["one"] = ctx.float_constant(f"{n}___one", 1.0)
    return extra
