"""Per-channel affine ops over the last axis: scale (ConvNeXt's LayerScale), rescale and normalize.

Each runs in its input's ONNX layout ("any"): a per-channel value meets a tensor held
channels-first as [C, 1, 1] (a Constant of that shape, or a Reshape of the variable), so a
conv stack pays no transpose for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import Field

from specgen import text
from specgen.fields.base import Float, NonNegativeFloat
from specgen.fields.layers import LayerBase
from specgen.fields.unions import by_shape, scalar_or_list
from specgen.kinds.ops.base import PASSES_MASK, OnnxContext, OpDef, OpError, OpResult, VarDecl
from specgen.kinds.ops.nodes import Init, Node, Shape
from specgen.kinds.ops.shapes import fixed, prod, require_float

if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    ChannelValues: TypeAlias = float | list[float]
else:
    ChannelValues = by_shape(scalar_or_list, "a number or a list of one number per channel",
                             scalar=Float, list=Annotated[list[Float], Field(min_length=1)])
if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Variances: TypeAlias = float | list[float]
else:
    Variances = by_shape(scalar_or_list, "a non-negative number or a list of one per channel",
                         scalar=NonNegativeFloat, list=Annotated[list[NonNegativeFloat], Field(min_length=1)])
KERAS_EPSILON = 1e-7  # keras.backend.epsilon(): Normalization divides by max(sqrt(variance), this)


class Scale(LayerBase):
    op: Literal["scale"]
    init_values: Float = Field(1e-6, description="Initial value of every element of `gamma` (ConvNeXt uses 1e-6).")


class Rescale(LayerBase):
    op: Literal["rescale"]
    scale: ChannelValues = Field(description="Multiplier: one number, or one per channel.")
    offset: ChannelValues = Field(0.0, description="Added after scaling: one number, or one per channel.")


class Normalize(LayerBase):
    op: Literal["normalize"]
    mean: ChannelValues | None = Field(None, description="Per-channel mean (or one number); left out with "
                                       "`variance`: a `mean` variable set by a restore or checkpoint.")
    variance: Variances | None = Field(None, description="Per-channel variance (or one number); left out with "
                                       "`mean`: a `variance` variable.")


def _channels(op: str, shape: Shape, dtype: str) -> int:
    require_float(dtype, op)
    if len(shape) < 2:
        raise OpError(f"{op} needs a channel axis; received {text.shape(shape)}", "input")
    return fixed(shape[-1], f"{op}'s channel axis")


def _fixed(value: float | list[float], channels: int, key: str) -> float | list[float]:
    """A spec value as a float or a list of exactly one float per channel."""
    if isinstance(value, list) and len(value) != channels:
        raise OpError(f"{key}: received {len(value)} values, expected one number or {channels} "
                      f"(one per channel of the input)", key)
    return value


def scale(layer: Scale, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    channels = _channels("scale", shape, dtype)
    result = OpResult(shape, params={"rank": len(shape)}, flops=prod(shape))
    result.variables.append(VarDecl("gamma", (channels,), Init("constant", (("value", float(layer.init_values)),))))
    return result


def rescale(layer: Rescale, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    channels = _channels("rescale", shape, dtype)
    params = {"rank": len(shape), "scale": _fixed(layer.scale, channels, "scale"),
              "offset": _fixed(layer.offset, channels, "offset")}
    return OpResult(shape, params=params, flops=(1 if params["offset"] == 0.0 else 2) * prod(shape))


def normalize(layer: Normalize, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    channels = _channels("normalize", shape, dtype)
    if (layer.mean is None) != (layer.variance is None):
        given, missing = ("mean", "variance") if layer.variance is None else ("variance", "mean")
        raise OpError(f"{given}: received {given} without {missing}, expected both (fixed statistics) or "
                      f"neither (variables 'mean' and 'variance' filled by a restore or checkpoint)", given)
    result = OpResult(shape, params={"rank": len(shape)}, flops=2 * prod(shape) + 2 * channels)
    if layer.mean is None:
        # Keras' adapted Normalization keeps them as non-trainable weights: state no step changes.
        result.variables += [VarDecl("mean", (channels,), Init("zeros"), "constant"),
                             VarDecl("variance", (channels,), Init("ones"), "constant")]
    else:
        assert layer.variance is not None  # given together with mean (checked above)
        result.params |= {"mean": _fixed(layer.mean, channels, "mean"),
                          "variance": _fixed(layer.variance, channels, "variance")}
    return result


# --- rendering --------------------------------------------------------------------------------


def tf_attrs(node: Node) -> dict[str, Any]:
    """Fixed values (numbers or lists; the template wraps lists in tf.constant) and the epsilon."""
    keys = ("scale", "offset", "mean", "variance")
    return {k: node.params[k] for k in keys if k in node.params} | {"epsilon": KERAS_EPSILON}


def _tensor_literal(values: list[float], shape: list[int]) -> str:
    return f"float[{','.join(map(str, shape))}] {{{', '.join(repr(float(v)) for v in values)}}}"


def _operand(node: Node, first: bool, ctx: OnnxContext, role: str, prep: list[dict[str, str]]) -> str:
    """The ONNX name of a per-channel value (variable or fixed), shaped to broadcast in the held layout."""
    rank = node.params["rank"]
    trailing = [1] * (rank - 2) if first else []  # channels-first: [C, 1, 1] against [N, C, H, W]
    name = f"{node.onnx_name}___{role}"
    if role in node.variables:
        if not trailing:
            return node.variables[role].onnx_name
        shape = next((p["shape"] for p in prep if p["shape"]), "")  # one shape constant per node
        shape = shape or ctx.constant(f"{node.onnx_name}___channel_shape", [-1, *trailing])
        prep.append({"out": name, "src": node.variables[role].onnx_name, "shape": shape, "value": ""})
        return name
    value = node.params[role]
    if not isinstance(value, list):
        return ctx.float_constant(name, float(value))
    prep.append({"out": name, "src": "", "shape": "", "value": _tensor_literal(value, [len(value), *trailing])})
    return name


def _onnx(roles: tuple[str, ...]) -> Any:
    def attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
        prep: list[dict[str, str]] = []
        present = [r for r in roles if r in node.variables or r in node.params]
        if node.params.get("offset") == 0.0:
            present.remove("offset")  # x * s + 0 is x * s: no Add node
        result: dict[str, Any] = {role: _operand(node, first, ctx, role, prep) for role in present}
        if "variance" in result:
            result["epsilon"] = ctx.float_constant(f"{node.onnx_name}___epsilon", KERAS_EPSILON)
        return result | {"prep": prep}
    return attrs


OPS = (
    OpDef("scale", Scale, scale, onnx_attrs=_onnx(("gamma",)), layout="any", symbolic=True, mask=PASSES_MASK,
          moments="gain", training_only=("init_values",)),  # gamma's initial value: a checkpoint restores gamma
    OpDef("rescale", Rescale, rescale, tf_attrs, _onnx(("scale", "offset")), layout="any", symbolic=True,
          mask=PASSES_MASK, moments="affine", keras=("Rescaling",)),
    OpDef("normalize", Normalize, normalize, tf_attrs, _onnx(("mean", "variance")), layout="any", symbolic=True,
          mask=PASSES_MASK, moments="standardize", keras=("Normalization",),
          variance=("variance", "")),  # max(sqrt(variance), KERAS_EPSILON): no epsilon added before the root
)
