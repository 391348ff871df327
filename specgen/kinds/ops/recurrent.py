"""lstm, gru, simple_rnn: Keras' recurrent layers over [batch, time, features].

Variables are Keras' (`kernel` [features, gates*units], `recurrent_kernel` [units, gates*units],
`bias`) in Keras' gate order (LSTM i, f, c, o; GRU z, r, h), so Keras weights restore by identity.
ONNX runs each layer as one LSTM / GRU / RNN node, time-major behind a Transpose (onnxruntime 1.31's
CPU kernels refuse `layout = 1`: "Batchwise recurrent operations are not supported"). The VarDecls say
how the TensorFlow values become ONNX's [1, gates*units, features] inputs (transposed, LSTM gates
reordered to i, o, f, c); every opset specgen pins (18-21) has these nodes.
The time dimension is copied through as the input shape holds it (a symbol once shapes carry them).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from specgen import text
from specgen.fields.base import Flag, PositiveInt, SpecModel
from specgen.fields.layers import LayerBase
from specgen.kinds.dims import nominal
from specgen.kinds.initializers import InitializerSpec
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
    resolve_init,
)
from specgen.kinds.ops.moments import plus, times, weighted
from specgen.kinds.ops.nodes import Init, Node, Shape
from specgen.kinds.ops.shapes import require_float

# The activations both renderings implement (ONNX names and alpha/beta where ONNX's function takes them).
# hard_sigmoid is Keras 3's: relu6(x + 3) / 6, ONNX HardSigmoid(alpha 1/6, beta 0.5).
RecurrentActivation = Literal["tanh", "sigmoid", "relu", "hard_sigmoid"]
ONNX_ACTIVATIONS: dict[str, tuple[str, tuple[float, float] | None]] = {
    "tanh": ("Tanh", None), "sigmoid": ("Sigmoid", None), "relu": ("Relu", None),
    "hard_sigmoid": ("HardSigmoid", (1.0 / 6.0, 0.5)),
}
GATES = {"lstm": 4, "gru": 3, "simple_rnn": 1}
# return_state's outputs in Keras' order, and the ONNX node output each is Y_h or Y_c of.
STATES = {"lstm": ("state_h", "state_c"), "gru": ("state",), "simple_rnn": ("state",)}
ONNX_STATE = {"state_h": "h", "state": "h", "state_c": "c"}
LSTM_TO_ONNX = (0, 3, 1, 2)  # Keras i, f, c, o -> ONNX i, o, f, c


class RecurrentFields(SpecModel):
    """A recurrent layer's own keys; bidirectional.py takes them without name/input (the wrapped `layer:`)."""

    if TYPE_CHECKING:  # each recurrent model declares its own `op: Literal[...]`; not a field here
        op: str

    units: PositiveInt
    return_sequences: Flag = Field(False, description="Output every step [batch, time, units], not the last.")
    return_state: Flag = Field(False, description="Also output the states after the last step read, named "
                                                  "<layer>/state_h and <layer>/state_c (lstm) or <layer>/state "
                                                  "(gru, simple_rnn), as Keras' [output, *states].")
    go_backwards: Flag = Field(False, description="Read the sequence last step first (outputs in that order).")
    activation: RecurrentActivation = "tanh"
    use_bias: Flag = True
    kernel_init: InitializerSpec = "glorot_uniform"
    recurrent_init: InitializerSpec = "orthogonal"
    bias_init: InitializerSpec = "zeros"


class LSTMFields(RecurrentFields):
    recurrent_activation: RecurrentActivation = "sigmoid"
    unit_forget_bias: Flag = Field(True, description="Start the forget gate's bias at 1 (Keras' default).")


class GRUFields(RecurrentFields):
    recurrent_activation: RecurrentActivation = "sigmoid"
    reset_after: Flag = Field(True, description="Apply the reset gate after the recurrent matmul (Keras' "
                                                "default; bias [2, 3*units]) rather than before (bias [3*units]).")


class RecurrentBase(RecurrentFields, LayerBase):
    pass


class InitialState(SpecModel):
    """A graph layer's own key (not bidirectional's wrapped layer): Keras' `initial_state=`."""

    initial_state: list[str] | None = Field(None, description="The states to start from instead of zeros, "
                                                              "[units] each: [state_h, state_c] for lstm, [state] "
                                                              "for gru and simple_rnn (e.g. an encoder's "
                                                              "enc/state_h, enc/state_c).")


class SimpleRNN(InitialState, RecurrentBase):
    op: Literal["simple_rnn"]


class LSTM(InitialState, LSTMFields, LayerBase):
    op: Literal["lstm"]


class GRU(InitialState, GRUFields, LayerBase):
    op: Literal["gru"]


def _bias_init(layer: RecurrentFields) -> Init:
    init = resolve_init(layer.bias_init)
    if not getattr(layer, "unit_forget_bias", False):
        return init
    # Keras draws the i, c, o parts from bias_init and sets f to ones; specgen keeps a bias init a plain
    # (kind, numbers) pair, so the fixed kinds are the ones that combine with unit_forget_bias.
    values = {"zeros": 0.0, "ones": 1.0, "constant": dict(init.args).get("value", 0.0)}
    if init.kind not in values:
        raise OpError(f"unit_forget_bias: true needs a fixed bias_init (zeros, ones or constant); received "
                      f"{init.kind}; set unit_forget_bias: false to draw the whole bias from {init.kind}",
                      "bias_init")
    return Init("unit_forget_bias", (("value", values[init.kind]),))


def _variables(layer: RecurrentFields, features: int) -> list[VarDecl]:
    units, gates = layer.units, GATES[layer.op]
    width = gates * units
    # ONNX: W [1, gates*units, features], R [1, gates*units, units]; LSTM's blocks reordered to i, o, f, c.
    order = LSTM_TO_ONNX if layer.op == "lstm" else None
    split_in, split_rec = ((features, gates, units), (units, gates, units)) if order else (None, None)
    perm = (1, 2, 0) if order else (1, 0)
    found = [
        VarDecl("kernel", (features, width), resolve_init(layer.kernel_init), onnx_perm=perm,
                onnx_shape=(1, width, features), onnx_split=split_in, onnx_order=order),
        VarDecl("recurrent_kernel", (units, width), resolve_init(layer.recurrent_init), onnx_perm=perm,
                onnx_shape=(1, width, units), onnx_split=split_rec, onnx_order=order),
    ]
    if layer.use_bias:
        if getattr(layer, "reset_after", False):  # input and recurrent biases: exactly ONNX's [Wb, Rb]
            found.append(VarDecl("bias", (2, width), resolve_init(layer.bias_init), onnx_shape=(1, 2 * width)))
        else:  # the input bias Wb; the graph pads Rb with zeros
            found.append(VarDecl("bias", (width,), _bias_init(layer), onnx_shape=(1, width),
                                 onnx_split=(gates, units) if order else None, onnx_order=order))
    return found


def infer(layer: RecurrentFields, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape, *states), (dtype, *_) = shapes, dtypes
    _check_initial(layer, states, dtypes[1:])
    require_float(dtype, layer.op)
    if len(shape) != 3:
        raise OpError(f"{layer.op} needs a rank-3 input (batch, time, features); received {text.shape(shape)}",
                      "input")
    steps, features = shape[1], shape[2] or 0
    if isinstance(features, str):
        raise OpError(f"{layer.op} needs a fixed feature size (its kernel's rows); its input {text.shape(shape)} has the "
                      f"named dimension '{features}' there", "input")
    out = (None, steps, layer.units) if layer.return_sequences else (None, layer.units)
    params = {"units": layer.units, "return_sequences": layer.return_sequences, "go_backwards": layer.go_backwards,
              "activation": layer.activation, "recurrent_activation": getattr(layer, "recurrent_activation", None),
              "reset_after": getattr(layer, "reset_after", False), "use_bias": layer.use_bias}
    params["return_state"], params["initial_state"] = layer.return_state, bool(states)
    result = OpResult(out, params=params, variables=_variables(layer, features),
                      extra_outputs={k: ((None, layer.units), dtype) for k in STATES[layer.op]} if layer.return_state else {})
    # Per example: one step's FLOPs times the steps; a named time dimension counts 1 (FLOPs per position of it).
    result.flops = nominal(steps) * _step_flops(layer, features)
    return result


def _check_initial(layer: RecurrentFields, shapes: list[Shape], dtypes: list[str]) -> None:
    """initial_state: one float32 [batch, units] tensor per state of the cell, in Keras' order."""
    if not shapes:
        return
    names = STATES[layer.op]
    if len(shapes) != len(names):
        raise OpError(f"initial_state of {layer.op} needs {len(names)} tensor(s) ({', '.join(names)}); received "
                      f"{len(shapes)}", "initial_state")
    for name, shape, dtype in zip(names, shapes, dtypes, strict=True):
        if tuple(shape) != (None, layer.units) or dtype != "float32":
            raise OpError(f"initial_state: its {name} must be float32 [batch, {layer.units}] (units); received "
                          f"{dtype} {text.shape(shape)}", "initial_state")


def _step_flops(layer: RecurrentFields, features: int) -> int:
    """One step of one example: the two matmuls, the biases and the gate arithmetic (one per element)."""
    units, gates = layer.units, GATES[layer.op]
    matmuls = 2 * (features + units) * gates * units
    biases = (2 if getattr(layer, "reset_after", False) else 1) * gates * units if layer.use_bias else 0
    # LSTM: 4 gate activations, tanh(c), 3 products, 1 sum; GRU: 3 activations, r*h, the z blend (3);
    # simple_rnn: the recurrent sum and the activation.
    elementwise = {"lstm": 9, "gru": 7, "simple_rnn": 2}[layer.op] * units
    return matmuls + biases + elementwise


def tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    shape = {"units": p["units"], "return_sequences": p["return_sequences"], "go_backwards": p["go_backwards"]}
    if p["return_state"]:  # only then: every other generated module stays as it was
        shape["return_state"] = True
    cell = {"activation": p["activation"]}
    if node.op != "simple_rnn":
        cell["recurrent_activation"] = p["recurrent_activation"]
    if node.op == "gru":
        cell["reset_after"] = p["reset_after"]
    return {"op": node.op, "shape": shape, "cell": cell, "initial": bool(p.get("initial_state"))}


def activations(names: list[str]) -> str:
    """ONNX's activations attribute, with activation_alpha/beta for those functions that take them."""
    onnx = [ONNX_ACTIVATIONS[n] for n in names]
    found = "activations = [" + ", ".join(f'"{name}"' for name, _ in onnx) + "]"
    pairs = [ab for _, ab in onnx if ab is not None]  # onnxruntime consumes them in order, by the functions using them
    if pairs:
        found += ", activation_alpha = [" + ", ".join(repr(a) for a, _ in pairs) + "]"
        found += ", activation_beta = [" + ", ".join(repr(b) for _, b in pairs) + "]"
    return found


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p, name = node.params, node.onnx_name
    gates = GATES[node.op]
    act, rec = p["activation"], p["recurrent_activation"]
    names = {"lstm": [rec, act, act], "gru": [rec, act], "simple_rnn": [act]}[node.op]
    attrs = [f"hidden_size = {p['units']}", activations(names)]
    if p["go_backwards"]:
        attrs.append('direction = "reverse"')
    if node.op == "gru" and p["reset_after"]:
        attrs.append("linear_before_reset = 1")
    found: dict[str, Any] = {"onnx_op": {"lstm": "LSTM", "gru": "GRU", "simple_rnn": "RNN"}[node.op],
                             "attributes": ", ".join(attrs), "outputs": 3 if node.op == "lstm" else 2,
                             "bias": p["use_bias"], "sequences": p["return_sequences"], "reverse": p["go_backwards"]}
    if p["use_bias"] and not p["reset_after"]:  # ONNX's B is [Wb, Rb]; Keras has no recurrent bias here
        found["pads"] = ctx.constant(f"{name}___pads", [0, 0, 0, gates * p["units"]])
    if p["return_sequences"]:
        found["squeeze"] = ctx.constant(f"{name}___axes", [1])  # Y [time, 1, batch, units]
        # ONNX's reverse direction writes Y in input order; Keras in reading order. Masked, the mask's own
        # placing of the outputs flips them (render/mask_plan.py), and unused constants make onnxruntime warn.
        if p["go_backwards"] and not any(node.input_masks):
            found["flip"] = [ctx.constant(f"{name}___{k}", [v]) for k, v in
                             (("starts", -1), ("ends", -(2**63)), ("flip_axes", 0), ("steps", -1))]
    else:
        found["squeeze"] = ctx.constant(f"{name}___axes", [0])  # Y_h [1, batch, units]
    if p["return_state"] or p["initial_state"]:  # [1, batch, units] <-> [batch, units] (ONNX's direction axis)
        found["state_axes"] = ctx.constant(f"{name}___state_axes", [0])
    if p["return_state"]:  # Y_h / Y_c; ONNX's reverse direction ends where Keras' go_backwards does
        found["states"] = ONNX_STATE
    # The node's inputs: the sequence, then initial_state's tensors, then the weights (VarDecl order).
    found["initial"], found["w"] = len(STATES[node.op]) if p["initial_state"] else 0, len(node.inputs)
    return found


# --- the initialization-scale lint (ir/scales.py; docs/spec.md#lints) ----------------------------------------------

ZERO: Moments = (0.0, 0.0)
LIMIT_STEPS = 1000  # a named time dimension: the moments after this many steps, or where they stop changing
SETTLED = 1e-9  # relative change of both moments under which a step's moments are taken as the fixed point's


def cell_moments(node: Node, ins: list[Moments | None], weight: WeightMoments, activation: ActivationMoments,
                 cell: str, prefix: str = "") -> Outputs:
    """The moments of a recurrent layer's outputs at initialization, by mean field: each step's pre-activations are
    Gaussian, with the moments of sums of independent products (kernel times input, recurrent kernel times the
    previous state, plus the bias; an lstm's cell state c too where its activation reads it), and the gates, the
    candidate and the states they combine are independent of each other, and of the input's other steps; the states
    start at zeros (or at initial_state's moments), and a padding mask is not looked at. With a
    fixed time axis the output with return_sequences pools its steps' moments, and without it (as the states) is the
    last step's; with a named one, each is the fixed point the steps reach, a long sequence's (after at most
    LIMIT_STEPS steps). `cell`: lstm, gru or simple_rnn; `prefix`: the variables' (a bidirectional half's
    "forward/")."""
    p, x = node.params, ins[0]
    assert x is not None  # reads(): the sequence is read
    kernel, recurrent = node.variables[f"{prefix}kernel"].shape, node.variables[f"{prefix}recurrent_kernel"].shape
    w, u = weight(f"{prefix}kernel"), weight(f"{prefix}recurrent_kernel")
    act, rec = p["activation"], p["recurrent_activation"]
    gates = ("i", "f", "c", "o") if cell == "lstm" else ("z", "r", "h") if cell == "gru" else ("h",)
    biases = _biases(node, weight, prefix, gates)
    entering = {g: weighted(x, kernel[0], w) for g in gates}  # the input's part, the same at every step

    def gate(name: str, h: Moments, fn: str) -> Moments:
        return activation(fn, plus(plus(entering[name], weighted(h, recurrent[0], u)), biases[name][0]))

    def step(h: Moments, c: Moments) -> tuple[Moments, Moments]:
        if cell == "lstm":
            i, f, g, o = gate("i", h, rec), gate("f", h, rec), gate("c", h, act), gate("o", h, rec)
            c = plus(times(f, c), times(i, g))
            return times(o, activation(act, c)), c
        if cell == "gru":
            z, r = gate("z", h, rec), gate("r", h, rec)
            if p["reset_after"]:  # act(x W_h + b_x + r * (h U_h + b_r))
                inner = times(r, plus(weighted(h, recurrent[0], u), biases["h"][1]))
            else:  # act(x W_h + (r * h) U_h + b)
                inner = weighted(times(r, h), recurrent[0], u)
            candidate = activation(act, plus(plus(entering["h"], inner), biases["h"][0]))
            # z * h + (1 - z) * candidate with z independent of both: E[z (1 - z)] = E[z] - E[z^2] in the cross term.
            mean = z[0] * h[0] + (1 - z[0]) * candidate[0]
            square = z[1] * h[1] + 2 * (z[0] - z[1]) * h[0] * candidate[0] + (1 - 2 * z[0] + z[1]) * candidate[1]
            return (mean, square), c
        return gate("h", h, act), c

    states = [m for m in ins[1:] if m is not None]
    h, c = (states[0], states[1] if len(states) > 1 else ZERO) if states else (ZERO, ZERO)
    steps = node.input_shapes[0][1]
    count = steps if isinstance(steps, int) else LIMIT_STEPS
    total, done = ZERO, 0
    while done < count:
        after = step(h, c)
        done += 1
        total = (total[0] + after[0][0], total[1] + after[0][1])
        settled = all(abs(a - b) <= SETTLED * max(abs(a), abs(b)) for a, b in zip((*after[0], *after[1]), (*h, *c),
                                                                                  strict=True))
        h, c = after
        if settled or not all(math.isfinite(v) for v in (*h, *c)):
            break
    rest = count - done  # the steps left repeat the fixed point
    pooled = ((total[0] + (rest * h[0] if rest else 0.0)) / count, (total[1] + (rest * h[1] if rest else 0.0)) / count)
    main = pooled if p["return_sequences"] and isinstance(steps, int) else h
    return {"": main, "state_h": h, "state_c": c, "state": h}


def _biases(node: Node, weight: WeightMoments, prefix: str, gates: tuple[str, ...]) -> dict[str, tuple[Moments, Moments]]:
    """Each gate's (input bias, recurrent bias) moments: zeros without a bias; Keras' unit_forget_bias sets the
    forget gate's to 1 and the others to `value`; a GRU with reset_after has both halves of its [2, 3 units] bias."""
    role = f"{prefix}bias"
    if role not in node.variables:
        return {g: (ZERO, ZERO) for g in gates}
    init = node.variables[role].init
    if init is not None and init.kind == "unit_forget_bias":
        value = dict(init.args).get("value", 0.0)
        return {g: ((1.0, 1.0) if g == "f" else (value, value * value), ZERO) for g in gates}
    one = weight(role)
    return {g: (one, one if len(node.variables[role].shape) == 2 else ZERO) for g in gates}


def recurrent_moments(node: Node, ins: list[Moments | None], weight: WeightMoments,
                      activation: ActivationMoments) -> Outputs:
    return cell_moments(node, ins, weight, activation, node.op)


def _reads(node: Node) -> tuple[int, ...]:
    return tuple(range(len(node.inputs)))  # the sequence, and initial_state's tensors


MOMENTS = Derived(recurrent_moments, _reads, bounded=True)


# Masked steps leave the state unchanged; with return_sequences the mask goes on (Keras' RNN.compute_mask).
RECURRENT_MASK = MaskRule("first", keeps=lambda layer: layer.return_sequences, consumes="recurrent")
# unit_forget_bias only sets the forget gate's initial bias (recurrent_init's and bias_init's company).
TRAINING_ONLY = ("kernel_init", "recurrent_init", "bias_init", "unit_forget_bias")
OPS = tuple(OpDef(name, model, infer, tf_attrs, onnx_attrs, tf_template="recurrent", onnx_template="recurrent",
                  activation_after=False, symbolic=True, mask=RECURRENT_MASK, moments=MOMENTS, keras=(keras,),
                  training_only=tuple(k for k in TRAINING_ONLY if k in model.model_fields))
            for name, model, keras in (("lstm", LSTM, "LSTM"), ("gru", GRU, "GRU"), ("simple_rnn", SimpleRNN, "SimpleRNN")))
