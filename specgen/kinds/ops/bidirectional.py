"""bidirectional: Keras' Bidirectional around one lstm / gru / simple_rnn.

Spec syntax: `{name: enc, op: bidirectional, layer: {op: lstm, units: 32, return_sequences: true},
merge_mode: concat}`. The wrapped layer is written as a nested mapping with the recurrent layer's own
keys (no name or input: it is not a layer of the graph), as Keras writes `Bidirectional(LSTM(...))`
and as its config nests `layer`; so an importer copies the inner config through and a reader sees the
one recurrent layer both halves are copies of. Variables are `<name>/forward/<role>` and
`<name>/backward/<role>` with the recurrent layer's Keras shapes (Keras 3 names the halves
`forward_<layer>` and `backward_<layer>`), so Keras weights restore by identity.

ONNX: ONE recurrent node with direction = "bidirectional"; W, R and B are the two halves' ONNX-layout
values stacked (Concat on axis 0: forward then backward), which onnxruntime folds once at load. The
merge is plain nodes on Y [time, 2, batch, units] (or Y_h [2, batch, units]): concat is a Transpose
and a Reshape; sum / ave / mul are ReduceSum / ReduceMean / ReduceProd over the direction axis, the
same float32 operations as Keras' y + y_rev, (y + y_rev) / 2 and y * y_rev. ONNX's reverse direction
writes Y in input order, which is Keras' backward output after Bidirectional flips it back.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal, Union

from pydantic import Field

from specgen.fields.layers import LayerBase
from specgen.kinds.dims import nominal
from specgen.kinds.ops import recurrent
from specgen.kinds.ops.base import (
    ActivationMoments,
    Derived,
    MaskRule,
    Moments,
    OnnxContext,
    OpDef,
    OpError,
    OpResult,
    Outputs,
    VarDecl,
    WeightMoments,
)
from specgen.kinds.ops.moments import plus, times
from specgen.kinds.ops.nodes import Node, Shape

MergeMode = Literal["concat", "sum", "mul", "ave", "none"]
ONNX_REDUCE = {"sum": "ReduceSum", "ave": "ReduceMean", "mul": "ReduceProd"}


class LSTMLayer(recurrent.LSTMFields):
    op: Literal["lstm"]


class GRULayer(recurrent.GRUFields):
    op: Literal["gru"]


class SimpleRNNLayer(recurrent.RecurrentFields):
    op: Literal["simple_rnn"]


Wrapped = Annotated[Union[LSTMLayer, GRULayer, SimpleRNNLayer], Field(discriminator="op")]  # noqa: UP007


class Bidirectional(LayerBase):
    op: Literal["bidirectional"]
    layer: Wrapped = Field(description="The recurrent layer both directions copy: lstm, gru or simple_rnn, "
                                       "with its own keys (no name or input).")
    merge_mode: MergeMode = Field("concat", description="How the forward and backward outputs combine "
                                                        "(Keras' default concat: forward then backward); none "
                                                        "keeps both: <name>/forward (also <name>) and "
                                                        "<name>/backward.")


def infer(layer: Bidirectional, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    inner = layer.layer
    if inner.go_backwards:
        raise OpError("go_backwards inside bidirectional is not supported; received true, expected false "
                      "(the backward half already reads the sequence last step first)", "layer")
    try:
        one = recurrent.infer(inner, shapes, dtypes)
    except OpError as exc:  # point at the wrapped layer's mapping, where the key is
        raise OpError(str(exc), "layer") from None
    width = 2 * inner.units if layer.merge_mode == "concat" else inner.units
    # Keras' list order: [forward, backward] under merge_mode none, then the forward states, the backward ones.
    halves = {h: ((*one.shape[:-1], inner.units), one.dtype) for h in ("forward", "backward")
              if layer.merge_mode == "none"}
    states = {f"{h}_{k}": v for h in ("forward", "backward") for k, v in one.extra_outputs.items()}
    variables = [VarDecl(f"{half}/{d.role}", d.shape, d.init, d.kind, d.onnx_perm, d.onnx_shape, d.onnx_split,
                         d.onnx_order) for half in ("forward", "backward") for d in one.variables]
    result = OpResult((*one.shape[:-1], width), params={**one.params, "op": inner.op,
                                                       "merge_mode": layer.merge_mode}, variables=variables,
                      extra_outputs={**halves, **states})
    steps = nominal(one.shape[1]) if inner.return_sequences else 1  # a named step counts 1 (kinds/dims.py)
    # Two copies of the layer; the merge is one operation per output element (ave: a sum and a scale).
    merge = 0 if layer.merge_mode in ("concat", "none") else (2 if layer.merge_mode == "ave" else 1) * steps * inner.units
    result.flops = 2 * one.flops + merge
    return result


def tf_attrs(node: Node) -> dict[str, Any]:
    wrapped = recurrent.tf_attrs(replace(node, op=node.params["op"]))
    return {**wrapped, "merge_mode": node.params["merge_mode"],
            "roles": [r for r in ("kernel", "recurrent_kernel", "bias") if f"forward/{r}" in node.variables]}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p, name = node.params, node.onnx_name
    op, gates = p["op"], recurrent.GATES[p["op"]]
    act, rec = p["activation"], p["recurrent_activation"]
    names = {"lstm": [rec, act, act], "gru": [rec, act], "simple_rnn": [act]}[op]
    attrs = [f"hidden_size = {p['units']}", recurrent.activations(names * 2), 'direction = "bidirectional"']
    if op == "gru" and p["reset_after"]:
        attrs.append("linear_before_reset = 1")
    found: dict[str, Any] = {
        "onnx_op": {"lstm": "LSTM", "gru": "GRU", "simple_rnn": "RNN"}[op], "attributes": ", ".join(attrs),
        "outputs": 3 if op == "lstm" else 2, "bias": p["use_bias"], "sequences": p["return_sequences"],
        "merge": p["merge_mode"], "reduce": ONNX_REDUCE.get(p["merge_mode"], ""),
        "w": 1 + len(node.variables) // 2,  # s.ins: the input, the forward weights, then the backward ones
    }
    if p["use_bias"] and not p["reset_after"]:  # ONNX's B is [Wb, Rb]; Keras has no recurrent bias here
        found["pads"] = ctx.constant(f"{name}___pads", [0, 0, 0, gates * p["units"]])
    if p["return_state"]:  # Y_h / Y_c [2, batch, units] split into the halves' states
        found["states"] = recurrent.ONNX_STATE
        found["state_axes"] = ctx.constant(f"{name}___state_axes", [0])
    # Only the constants the template's chosen nodes read (render/files.py refuses unread initializers): the
    # direction axis for merge none and the reductions, the flat shape for concat; masked sequences are merged
    # by templates/onnx/masks.onnx.j2 on their own axis.
    merge, masked_sequences = p["merge_mode"], p["return_sequences"] and any(node.input_masks)
    if merge == "none" or (merge != "concat" and not masked_sequences):
        found["axes"] = ctx.constant(f"{name}___axes", [1 if p["return_sequences"] else 0])  # Y [time, 2, ...]
    if merge == "concat":  # Y_h [2, batch, units]
        found["concat_shape"] = ctx.constant(f"{name}___shape", [0, 0, -1] if p["return_sequences"] else [0, -1])
    return found


def mask_check(layer: Bidirectional, masked: tuple[bool, ...], rank: int) -> str:
    if layer.merge_mode == "none":  # two outputs; Keras masks both
        return "merge_mode none with a padding mask is not supported (use concat, sum, mul or ave)"
    return ""


def moments(node: Node, ins: list[Moments | None], weight: WeightMoments, activation: ActivationMoments) -> Outputs:
    """Both halves have the moments of the wrapped layer (recurrent.cell_moments: reading the sequence backwards
    changes none), independent of each other; the merge combines them: concat keeps them, sum adds, ave halves the
    sum, mul multiplies."""
    cell = node.params["op"]
    half = {h: recurrent.cell_moments(node, ins, weight, activation, cell, f"{h}/") for h in ("forward", "backward")}
    one = half["forward"][""]
    merge = node.params["merge_mode"]
    both = plus(one, half["backward"][""])
    main = {"sum": both, "ave": (both[0] / 2, both[1] / 4), "mul": times(one, half["backward"][""])}.get(merge, one)
    found: Outputs = {"": main, "forward": one, "backward": half["backward"][""]}
    found |= {f"{h}_{k}": m for h, outs in half.items() for k, m in outs.items() if k}
    return found


# Keras' Bidirectional: its wrapped layer's return_sequences keeps the mask, and masked outputs are zeros.
MASK = MaskRule("first", keeps=lambda layer: layer.layer.return_sequences, check=mask_check, consumes="both_directions")
OPS = (OpDef("bidirectional", Bidirectional, infer, tf_attrs, onnx_attrs, activation_after=False, symbolic=True,
             mask=MASK, moments=Derived(moments, lambda node: (0,), bounded=True), keras=("Bidirectional",),
             training_only=tuple(f"layer.{key}" for key in recurrent.TRAINING_ONLY)),)
