"""Keras' LSTM / GRU / SimpleRNN as spec recurrent layers (and as the `layer:` of a bidirectional one,
bidirectional.py), with the call's initial_state tensors.
"""

from __future__ import annotations

from typing import Any, get_args

from specgen.diagnostics import safe_repr
from specgen.importers.keras.args import Args, activation_refusal, keras2_differs
from specgen.importers.keras.base import KERAS_OPS, Shapes, _init
from specgen.importers.keras.dag import Ref
from specgen.importers.keras.errors import layer_problem
from specgen.kinds.ops import REGISTRY
from specgen.kinds.ops.recurrent import RecurrentActivation

# Keras' recurrent classes (each imports as the op that declares it, OpDef.keras), with Keras 2's cell names.
KERAS2_CELLS = {"LSTM": "lstm_cell", "GRU": "gru_cell", "SimpleRNN": "simple_rnn_cell"}
RECURRENT_CLASSES = tuple(KERAS2_CELLS)
RECURRENT_ACTIVATIONS: tuple[str, ...] = get_args(RecurrentActivation)  # specgen/kinds/ops/recurrent.py


def _cell_activation(a: Args, key: str, default: str) -> str:
    value = a.get(key, default)
    if value not in RECURRENT_ACTIVATIONS or (a.keras2 and keras2_differs(value)):
        raise a.refuse(key, activation_refusal(value, a.keras2, RECURRENT_ACTIVATIONS, "a recurrent activation"))
    return str(value)


INITIAL_STATES = "_initial_states"  # how many of the layer's inputs (the last ones) are initial_state; convert.py pops it


def _initial_state(a: Args) -> dict[str, Any]:
    """Keras' `layer(x, initial_state=[...])`: the tensors follow x in KLayer.inputs (dag.py's CALL_KWARGS)."""
    states = a.layer.kwargs.get("initial_state")
    if states is None:
        return {}
    states = [states] if isinstance(states, Ref) else states  # Keras records one state as the tensor itself
    if not isinstance(states, list) or not all(isinstance(s, Ref) for s in states):
        shown = [f"the output of '{s.key.rsplit(':', 2)[0]}'" if isinstance(s, Ref) else safe_repr(s) for s in
                 (states if isinstance(states, list) else [states])]
        raise layer_problem(a.layer.name, a.layer.cls, f"initial_state [{', '.join(shown)}] is not a list of tensors")
    return {INITIAL_STATES: len(states)}


def recurrent(a: Args, shapes: Shapes) -> dict[str, Any]:
    """LSTM / GRU / SimpleRNN: the spec keys that differ from the defaults (which are Keras')."""
    op = KERAS_OPS[a.layer.cls]
    fields = REGISTRY[op].spec.model_fields  # the keys this op has, with their defaults
    for key, why in (("stateful", "specgen's recurrent layers start every batch from zeros"),
                     ("time_major", "specgen sequences are batch-major")):
        a.expect(key, False, None, why=why)
    for key in ("dropout", "recurrent_dropout"):  # it would train differently: refused, not dropped
        if a.number(key, 0.0) != 0.0:
            raise a.refuse(key, "specgen's recurrent layers have no dropout yet")
    a.expect("zero_output_for_mask", False, True, None)  # masks only, which specgen does not import yet
    a.get("unroll"), a.get("implementation")  # the same outputs whichever way Keras runs the loop
    out: dict[str, Any] = {"op": op, "units": a.integer("units"), **_initial_state(a)}
    for key in ("return_sequences", "return_state", "go_backwards"):  # states: `<layer>/state_h` ... (convert.py)
        if a.flag(key, False):
            out[key] = True
    for key in ("activation", "recurrent_activation"):  # SimpleRNN has no recurrent_activation
        if key in fields and (act := _cell_activation(a, key, fields[key].default)) != fields[key].default:
            out[key] = act
    for key in ("reset_after", "unit_forget_bias"):  # GRU's, LSTM's
        if key in fields and not a.flag(key, True):
            out[key] = False
    if not a.flag("use_bias", True):
        out["use_bias"] = False
    _init(a, out, "kernel_initializer", "kernel_init")
    if (init := a.initializer("recurrent_initializer")) not in (None, {"kind": "orthogonal", "gain": 1.0}):
        out["recurrent_init"] = init
    if (init := a.initializer("bias_initializer")) not in (None, "zeros"):
        out["bias_init"] = init
    return out
