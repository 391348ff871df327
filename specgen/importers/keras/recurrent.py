"""Keras' LSTM / GRU / SimpleRNN as spec recurrent layers (and as the `layer:` of a bidirectional one,
bidirectional.py), with the call's initial_state tensors.
"""

from __future__ import annotations

from typing import Any

from specgen.importers.keras.args import Args
from specgen.importers.keras.base import Shapes, _init
from specgen.importers.keras.errors import layer_problem
from specgen.importers.keras.graph import Ref

RECURRENT_OPS = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "simple_rnn"}


RECURRENT_ACTIVATIONS = ("tanh", "sigmoid", "relu", "hard_sigmoid")  # specgen/kinds/ops/recurrent.py


def _cell_activation(a: Args, key: str, default: str) -> str:
    value = a.get(key, default)
    if value not in RECURRENT_ACTIVATIONS or (a.keras2 and value == "hard_sigmoid"):
        raise a.refuse(key, "a recurrent activation: " + ", ".join(RECURRENT_ACTIVATIONS)
                       + (" (Keras 2's hard_sigmoid differs from Keras 3's)" if a.keras2 else ""))
    return str(value)


INITIAL_STATES = "_initial_states"  # how many of the layer's inputs (the last ones) are initial_state; convert.py pops it


def _initial_state(a: Args) -> dict[str, Any]:
    """Keras' `layer(x, initial_state=[...])`: the tensors follow x in KLayer.inputs (graph.py's CALL_KWARGS)."""
    states = a.layer.kwargs.get("initial_state")
    if states is None:
        return {}
    states = [states] if isinstance(states, Ref) else states  # Keras records one state as the tensor itself
    if not isinstance(states, list) or not all(isinstance(s, Ref) for s in states):
        raise layer_problem(a.layer.name, a.layer.cls, f"initial_state {str(states)[:80]} is not a list of tensors")
    return {INITIAL_STATES: len(states)}


def recurrent(a: Args, shapes: Shapes) -> dict[str, Any]:
    """LSTM / GRU / SimpleRNN: the spec keys that differ from the defaults (which are Keras')."""
    op = RECURRENT_OPS[a.layer.cls]
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
    if (act := _cell_activation(a, "activation", "tanh")) != "tanh":
        out["activation"] = act
    if op != "simple_rnn" and (rec := _cell_activation(a, "recurrent_activation", "sigmoid")) != "sigmoid":
        out["recurrent_activation"] = rec
    if op == "gru" and not a.flag("reset_after", True):
        out["reset_after"] = False
    if op == "lstm" and not a.flag("unit_forget_bias", True):
        out["unit_forget_bias"] = False
    if not a.flag("use_bias", True):
        out["use_bias"] = False
    _init(a, out, "kernel_initializer", "kernel_init")
    if (init := a.initializer("recurrent_initializer")) not in (None, {"kind": "orthogonal", "gain": 1.0}):
        out["recurrent_init"] = init
    if (init := a.initializer("bias_initializer")) not in (None, "zeros"):
        out["bias_init"] = init
    return out
