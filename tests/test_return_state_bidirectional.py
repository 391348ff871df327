"""bidirectional with return_state and merge_mode none against Keras' own Bidirectional: outputs in
Keras' list order (the merged output, or forward then backward under none; then the forward layer's
states, then the backward one's), forward values and one step's gradients of every weight and the input
through all of them within 1e-5, two lengths through one graph; TF vs onnxruntime; names and refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specgen.spec.load import load_spec_text

keras = pytest.importorskip("keras")

from test_op_parity import TOLERANCE, check_parity  # noqa: E402
from test_return_state import KERAS, STATES, assert_within, compare_outputs, errors, spec_text  # noqa: E402

MERGES = ("concat", "sum", "mul", "ave", "none")


def keras_key(weight: Any) -> str:
    """Keras 3 names the halves forward_<layer> / backward_<layer>: '<half>/<role>' as specgen's paths end."""
    return f"{'forward' if '/forward_' in weight.path else 'backward'}/{weight.name}"


def outputs_of(op: str, merge: str, state: bool) -> dict[str, str]:
    found = {"f": "b/forward", "bw": "b/backward"} if merge == "none" else {"y": "b"}
    if state:
        found.update({f"{h}_{k}": f"b/{h}_{k}" for h in ("forward", "backward") for k in STATES[op]})
    return found


def layer(op: str, merge: str, state: bool, seq: bool) -> dict[str, Any]:
    return {"name": "b", "op": "bidirectional", "merge_mode": merge,
            "layer": {"op": op, "units": 4, "return_sequences": seq, **({"return_state": True} if state else {})}}


# Every cell under none with states, every merge mode with states (lstm: two states per half), none without
# states; merges without states are tests/test_bidirectional_keras.py's. Both output selections each.
CHOSEN = [*((op, "none", True) for op in KERAS), *(("lstm", m, True) for m in MERGES if m != "none"),
          ("gru", "none", False)]
CASES = [pytest.param(op, merge, state, seq, id=f"{op}-{merge}-{'state' if state else 'nostate'}-{'seq' if seq else 'last'}")
         for op, merge, state in CHOSEN for seq in (False, True)]


@pytest.mark.parametrize(("op", "merge", "state", "seq"), CASES)
def test_matches_keras(op: str, merge: str, state: bool, seq: bool, tmp_path: Path) -> None:
    inner = getattr(keras.layers, KERAS[op])(4, return_sequences=seq, return_state=state)
    theirs = keras.layers.Bidirectional(inner, merge_mode=None if merge == "none" else merge)
    outputs = outputs_of(op, merge, state)
    diffs = compare_outputs([layer(op, merge, state, seq)], outputs, theirs, keras_key, tmp_path)
    paths = {f"grad b/{h}/{r}" for h in ("forward", "backward") for r in ("kernel", "recurrent_kernel", "bias")}
    assert set(diffs) == {*(f"forward {k}" for k in outputs), "grad input", *paths}
    assert_within(diffs)


@pytest.mark.parametrize(("op", "merge", "state", "seq"), CASES)
def test_tf_vs_onnxruntime(op: str, merge: str, state: bool, seq: bool, tmp_path: Path) -> None:
    text = spec_text([layer(op, merge, state, seq)], {**outputs_of(op, merge, state), "whole": "b"})
    assert check_parity(load_spec_text(text, "bs.yaml"), tmp_path) <= TOLERANCE


def test_merge_none_names_its_outputs_when_one_is_unknown() -> None:
    assert errors([layer("gru", "none", True, False)], {"y": "b/forward_state_h"}) == [
        "rs.yaml:9:6: error: output 'y' names 'b/forward_state_h'; layer 'b' has no output 'forward_state_h' "
        "(its outputs are b, b/forward, b/backward, b/forward_state, b/backward_state)"]
