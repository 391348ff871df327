"""A value a `Literal[...]` field refuses gets one line that names the kinds: `opset: "21"` is the string '21', not
the integer 21, and the line says so and what to write ("write 21"), instead of listing '21' as allowed and
suggesting it back. Every kind of literal field the spec has (integers: export.onnx.opset; strings: padding, dtype;
a boolean: resize's crop_to_aspect_ratio) is checked with a right value of the wrong kind, a wrong value of the
right kind and, for strings, a near miss that keeps its "did you mean", in a spec file and in `--set`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ValidationError
from test_spec_errors import BASE, mutate

from specgen.cli import main
from specgen.spec.literals import literal_message

OPSETS = "18, 19, 20, 21, 22 or 23"
RESIZE = ("  - {name: flat, op: flatten}",
          "  - {name: rz, op: resize, input: x, height: 4, width: 4, crop_to_aspect_ratio: @}\n"
          "  - {name: flat, op: flatten, input: conv}")


def validate(capsys: pytest.CaptureFixture[str], path: Path, *sets: str) -> list[str]:
    """`specgen validate PATH --set ...`'s standard error lines; the spec must be refused."""
    code = main(["validate", str(path), *(arg for text in sets for arg in ("--set", text))])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and "Traceback" not in err
    return err.splitlines()


@pytest.mark.parametrize(("old", "new", "line"), [
    # integers: a quoted one (either quotes, or !!str) is the right value of the wrong kind; no "did you mean"
    ("opset: 21", 'opset: "21"', f"47:17: error: opset: received '21' (a quoted string: write 21), expected an "
                                 f"integer: {OPSETS}"),
    ("opset: 21", "opset: '23'", f"47:17: error: opset: received '23' (a quoted string: write 23), expected an "
                                 f"integer: {OPSETS}"),
    ("opset: 21", "opset: !!str 18", f"47:17: error: opset: received '18' (a quoted string: write 18), expected an "
                                     f"integer: {OPSETS}"),
    ("opset: 21", "opset: 17", f"47:17: error: opset: received 17, expected {OPSETS}"),
    ("opset: 21", "opset: 210", f"47:17: error: opset: received 210, expected {OPSETS}"),  # no "did you mean '21'"
    ("opset: 21", "opset: abc", f"47:17: error: opset: received 'abc' (a string), expected an integer: {OPSETS}"),
    ("opset: 21", "opset: 'True'", f"47:17: error: opset: received 'True' (a string), expected an integer: {OPSETS}"),
    ("opset: 21", "opset: true", f"47:17: error: opset: received true (a boolean), expected an integer: {OPSETS}"),
    ("opset: 21", "opset: 21.5", f"47:17: error: opset: received 21.5 (a number), expected an integer: {OPSETS}"),
    ("opset: 21", "opset: null", f"47:17: error: opset: received null, expected an integer: {OPSETS}"),
    ("opset: 21", "opset: [21]", f"47:17: error: opset: received [21] (a list), expected an integer: {OPSETS}"),
    # strings: a near miss keeps its suggestion; another kind is named, without one
    ("padding: same", "padding: sme", "11:72: error: padding: received 'sme', expected 'same' or 'valid'; did you "
                                      "mean 'same'? (in layer 'conv')"),
    ("padding: same", "padding: full", "11:72: error: padding: received 'full', expected 'same' or 'valid' "
                                       "(in layer 'conv')"),
    ("padding: same", "padding: 1", "11:72: error: padding: received 1 (an integer), expected a string: 'same' or "
                                    "'valid' (in layer 'conv')"),
    ("padding: same", "padding: true", "11:72: error: padding: received true (a boolean), expected a string: 'same' "
                                       "or 'valid' (in layer 'conv')"),
    ("v: {shape: [4]}", "v: {shape: [4], dtype: float}", "6:26: error: dtype: received 'float', expected 'float32', "
                                                         "'int32', 'int64' or 'uint8'; did you mean 'float32'?"),
    ("v: {shape: [4]}", "v: {shape: [4], dtype: 32}", "6:26: error: dtype: received 32 (an integer), expected a "
                                                      "string: 'float32', 'int32', 'int64' or 'uint8'"),
    # a boolean: `'false'` and `'False'` are false quoted
    (RESIZE[0], RESIZE[1].replace("@", "'false'"), "13:81: error: crop_to_aspect_ratio: received 'false' (a quoted "
                                                   "string: write false), expected a boolean: false (in layer 'rz')"),
    (RESIZE[0], RESIZE[1].replace("@", "'False'"), "13:81: error: crop_to_aspect_ratio: received 'False' (a quoted "
                                                   "string: write false), expected a boolean: false (in layer 'rz')"),
    (RESIZE[0], RESIZE[1].replace("@", "true"), "13:81: error: crop_to_aspect_ratio: received true, expected false "
                                                "(in layer 'rz')"),
    (RESIZE[0], RESIZE[1].replace("@", "'no'"), "13:81: error: crop_to_aspect_ratio: received 'no' (a string), "
                                                "expected a boolean: false (in layer 'rz')"),
])
def test_a_spec_file_gets_one_positioned_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
                                              line: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(mutate(old, new))
    assert validate(capsys, path) == [f"{path}:{line}", "1 error found"]


@pytest.mark.parametrize(("text", "message"), [
    ("export.onnx.opset='23'", f"opset: received '23' (a quoted string: write 23), expected an integer: {OPSETS}"),
    ('export.onnx.opset="19"', f"opset: received '19' (a quoted string: write 19), expected an integer: {OPSETS}"),
    ("export.onnx.opset=17", f"opset: received 17, expected {OPSETS}"),
    ("export.onnx.opset=abc", f"opset: received 'abc' (a string), expected an integer: {OPSETS}"),
    ("layers[conv].padding=sme", "padding: received 'sme', expected 'same' or 'valid'; did you mean 'same'? "
                                 "(in layer 'conv')"),
    ("layers[conv].padding=1", "padding: received 1 (an integer), expected a string: 'same' or 'valid' "
                               "(in layer 'conv')"),
    ("inputs.v.dtype=float", "dtype: received 'float', expected 'float32', 'int32', 'int64' or 'uint8'; did you "
                             "mean 'float32'?"),
])
def test_a_set_override_gets_one_line_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                      message: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(BASE)
    assert validate(capsys, path, text) == [f"--set {text}: error: {message}", "1 error found"]


class Mixed(BaseModel):
    """Literal fields the spec does not have (yet): the line must hold for any of them, from pydantic's own error."""

    mixed: Literal[1, "one"] = 1
    commas: Literal["a, b", "c or d"] = "a, b"
    negative: Literal[-1, 0] = 0
    flags: Literal[True, False] = True


def refused(field: str, value: Any) -> str:
    """literal_message for pydantic's real error on `field: value`."""
    with pytest.raises(ValidationError) as caught:
        Mixed.model_validate({field: value})
    (error,) = caught.value.errors()
    assert error["type"] == "literal_error"
    return literal_message(error["input"], error["ctx"]["expected"])


@pytest.mark.parametrize(("field", "value", "line"), [
    ("mixed", 2, "received 2, expected 1 or 'one'"),
    ("mixed", "1", "received '1', expected 1 or 'one'"),  # a string is one of the kinds: the names are compared
    ("mixed", "onr", "received 'onr', expected 1 or 'one'; did you mean 'one'?"),
    ("mixed", 1.5, "received 1.5 (a number), expected 1 or 'one'"),
    ("commas", "c or e", "received 'c or e', expected 'a, b' or 'c or d'; did you mean 'c or d'?"),
    ("commas", 3, "received 3 (an integer), expected a string: 'a, b' or 'c or d'"),
    ("negative", 5, "received 5, expected -1 or 0"),
    ("negative", "-1", "received '-1' (a quoted string: write -1), expected an integer: -1 or 0"),
    ("flags", "true", "received 'true' (a quoted string: write true), expected a boolean: false or true"),
    ("flags", [True], "received [true] (a list), expected a boolean: false or true"),
])
def test_any_literal_field_keeps_its_kinds(field: str, value: Any, line: str) -> None:
    assert refused(field, value) == line


def test_an_expected_text_that_is_not_literals_is_shown_as_pydantic_wrote_it() -> None:
    assert literal_message(3, "<enum 'Color'>") == "received 3, expected <enum 'Color'>"
