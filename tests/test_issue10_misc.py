"""Issue 10, "also in this issue": value errors name their key, optional optimizer `variables`,
outputs named like their layer, printed paths, TensorFlow's `checkpoint` state file, escaped
spec names in Triton configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.diagnostics import SpecError
from specgen.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SMALL = """\
specgen: 1
name: small
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: out}
layers:
  - {name: flat, op: flatten}
  - {name: hidden, op: dense, units: 8, activation: relu}
  - {name: out, op: dense, units: 10}
"""


def messages(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, "s.yaml")
    return [str(d) for d in caught.value.diagnostics]


# --- value errors name their key ---------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "expected"), [
    ("units: 10}", "units: -3}", "s.yaml:8:35: error: units: received -3, expected a value > 0 (in layer 'out')"),
    ("units: 8,", "units: eight,", "s.yaml:7:38: error: units: expected an integer, received 'eight' (str) "
                                   "(in layer 'hidden')"),
    ("shape: [8, 8, 1]", "shape: [8, -1, 1]", "s.yaml:3:29: error: shape[1]: received -1, expected a value > 0"),
    ("name: small", "name: 2small", "s.yaml:2:7: error: name: invalid name '2small': expected a letter, then "
                                    "letters and digits with single '_' between them"),
    ("op: flatten}", "op: flatten, input: [image]}", "s.yaml:6:38: error: input: expected a string, received "
                                                     "['image'] (list) (in layer 'flat')"),
], ids=["bound", "type", "list_item", "name", "wrong_type_in_layer"])
def test_a_value_error_names_its_key_and_keeps_its_position(old: str, new: str, expected: str) -> None:
    assert messages(SMALL.replace(old, new)) == [expected]


def test_messages_that_name_their_key_already_are_not_prefixed() -> None:
    text = SMALL.replace("units: 10}", "unitz: 10}").replace("op: flatten", "op: flaten")
    found = messages(text)
    assert found[0].startswith("s.yaml:6:22: error: unknown op 'flaten'; did you mean 'flatten'?")
    assert found[1] == "s.yaml:8:28: error: unknown key 'unitz'; did you mean 'units'? (in layer 'out')"
    assert messages(SMALL.replace("specgen: 1", "specgen: 2")) == [
        "s.yaml:1:10: error: unsupported spec format version 2; this specgen reads version 1"]
