"""batch_norm and layer_norm: the epsilon is always written out (Keras 1e-3, ONNX 1e-5 by default)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from specgen import text
from specgen.fields.base import Flag, PositiveFloat, bounds
from specgen.fields.layers import Activation, LayerBase
from specgen.kinds.ops.base import PASSES_MASK, MaskRule, OnnxContext, OpDef, OpError, OpResult, VarDecl
from specgen.kinds.ops.nodes import Init, Node, Shape
from specgen.kinds.ops.shapes import fixed, prod, require_float


class BatchNorm(LayerBase):
    op: Literal["batch_norm"]
    # 0 is Keras' momentum=0: the moving statistics become the last training batch's (moving * 0 + batch * 1).
    momentum: Annotated[float, *bounds(float, ge=0, lt=1)] = 0.99
    epsilon: PositiveFloat = 1e-3
    center: Flag = Field(True, description="Add the learned offset `beta`; false: no `beta` variable (Keras' `center`).")
    scale: Flag = Field(True, description="Multiply by the learned `gamma`; false: no `gamma` variable (Keras' `scale`; "
                                          "InceptionV3 uses false, as a following linear layer can do the scaling).")
    sync: Flag = Field(False, description=(
        "Under a tf.distribute strategy, batch statistics over the global batch (all-reduced) instead of each "
        "replica's slice, as Keras' `synchronized=True`; no effect in one process. `train.distribute.sync_batch_norm` "
        "turns it on for every batch_norm."))
    activation: Activation = "linear"


class LayerNorm(LayerBase):
    op: Literal["layer_norm"]
    epsilon: PositiveFloat = 1e-3


def batch_norm(layer: BatchNorm, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, "batch_norm")
    if len(shape) < 2:
        raise OpError(f"batch_norm needs a channel axis; received {text.shape(shape)}", "input")
    channels = fixed(shape[-1], "batch_norm's channel axis")
    params = {"momentum": layer.momentum, "epsilon": layer.epsilon, "axes": tuple(range(len(shape) - 1)),
              "channels": channels, "sync": layer.sync}
    result = OpResult(shape, params=params, flops=2 * prod(shape))
    result.variables += [VarDecl("gamma", (channels,), Init("ones"))] if layer.scale else []
    result.variables += [VarDecl("beta", (channels,), Init("zeros"))] if layer.center else []
    result.variables += [
        VarDecl("moving_mean", (channels,), Init("zeros"), "update"),
        VarDecl("moving_variance", (channels,), Init("ones"), "update"),
    ]
    return result


def layer_norm(layer: LayerNorm, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, "layer_norm")
    if len(shape) < 2:
        raise OpError(f"layer_norm needs a feature axis; received {text.shape(shape)}", "input")
    channels = fixed(shape[-1], "layer_norm's feature axis")
    result = OpResult(shape, params={"epsilon": layer.epsilon}, flops=8 * prod(shape))
    result.variables += [VarDecl("gamma", (channels,), Init("ones")), VarDecl("beta", (channels,), Init("zeros"))]
    return result


def batch_norm_tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    # A batch norm whose weights are all frozen runs in inference mode, training or not (Keras' trainable=False).
    return {"axes": list(p["axes"]), "momentum": p["momentum"], "epsilon": p["epsilon"],
            "inference_mode": node.inference_mode, "sync": p["sync"]}


def layer_norm_tf_attrs(node: Node) -> dict[str, Any]:
    return {"epsilon": node.params["epsilon"]}


def epsilon_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"epsilon": node.params["epsilon"]}


# ONNX BatchNormalization has no optional scale or bias: a missing gamma is ones, a missing beta zeros.
FILLERS = (("gamma", 1.0), ("beta", 0.0))


def batch_norm_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    """The operands after the input, with ConstantOfShape fillers for gamma/beta that do not exist.

    Export folds them like weights (runtime/onnx_export.py), so they cost nothing after a Conv.
    """
    operands, filled = [], []
    missing = [(role, value) for role, value in FILLERS if role not in node.variables]
    shape = ctx.constant(f"{node.onnx_name}___channels", [node.params["channels"]]) if missing else ""
    for role, value in FILLERS:
        name = node.variables[role].onnx_name if role in node.variables else f"{node.onnx_name}___{role}"
        if (role, value) in missing:
            filled.append({"out": name, "value": value, "shape": shape})
        operands.append(name)
    operands += [node.variables[role].onnx_name for role in ("moving_mean", "moving_variance")]
    return {"epsilon": node.params["epsilon"], "operands": operands, "filled": filled}


BATCH_NORM_MASK = MaskRule(reason="Keras' BatchNormalization takes its batch statistics over the unmasked steps only; "
                                  "specgen's batch_norm takes them over every step")

OPS = (
    # ONNX BatchNormalization normalizes axis 1: channels-first.
    OpDef("batch_norm", BatchNorm, batch_norm, batch_norm_tf_attrs, batch_norm_onnx_attrs, layout="first",
          symbolic=True, mask=BATCH_NORM_MASK, compute_dtype="float32", moments="batch_normalized",
          keras=("BatchNormalization",), stateful=lambda layer: True, folds_away=True,  # moving statistics
          variance=("moving_variance", "epsilon"),
          training_only=("momentum", "sync")),  # how training updates the moving statistics; inference reads them
    # LayerNormalization is written with axis -1: channels-last.
    OpDef("layer_norm", LayerNorm, layer_norm, layer_norm_tf_attrs, epsilon_onnx_attrs, symbolic=True,
          mask=PASSES_MASK, compute_dtype="float32", moments="normalized", keras=("LayerNormalization",)),
)
