"""Positioned `specgen validate` errors of pad, crop and the issue-10 activations.

Same method as tests/test_spec_errors.py (whose helpers this uses): one valid spec, one
mistake per case, the exact `path:line:col: error: key: received ..., expected ...` lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
from test_spec_errors import expected_lines, validate

from specgen.fields.layers import Activation

BASE = """\
specgen: 1
name: act
inputs:
  x: {shape: [9, 7, 3]}
outputs:
  y: k
layers:
  - {name: c, op: conv2d, filters: 4, kernel: 3, padding: same, activation: hard_swish}
  - {name: p, op: pad, padding: [[1, 2], [0, 3]]}
  - {name: r, op: relu, max_value: 2.5}
  - {name: s, op: silu}
  - {name: k, op: crop, cropping: [1, 2]}
"""


# Every value `activation:` takes, as the message lists them (sorted): a new activation op changes the list.
_QUOTED_ACTIVATIONS = [f"'{name}'" for name in sorted(get_args(Activation))]
ONE_ACTIVATIONS = ", ".join(_QUOTED_ACTIVATIONS[:-1]) + " or " + _QUOTED_ACTIVATIONS[-1]


def mutate(old: str, new: str) -> str:
    assert BASE.count(old) == 1, old
    return BASE.replace(old, new)


CASES = [
    ("negative_padding", mutate("padding: [[1, 2]", "padding: [[1, -2]"),
     ["9:38: error: padding[0][1]: received -2, expected a value >= 0 (in layer 'p')"]),
    ("negative_padding_int", mutate("padding: [[1, 2], [0, 3]]", "padding: -1"),
     ["9:33: error: padding: received -1, expected a value >= 0 (in layer 'p')"]),
    ("padding_three_sides", mutate("padding: [[1, 2], [0, 3]]", "padding: [1, 2, 3]"),
     ["9:33: error: padding: expected at most 2 item(s), received 3 (in layer 'p')"]),
    ("padding_mixed_forms", mutate("padding: [[1, 2], [0, 3]]", "padding: [[1, 2], 3]"),
     ["9:42: error: padding[1]: expected a list, received 3 (int) (in layer 'p')"]),
    ("padding_mapping", mutate("padding: [[1, 2], [0, 3]]", "padding: {top: 1}"),
     ["9:33: error: padding: expected an integer, [h, w] or [[top, bottom], [left, right]], received "
      "{top: 1} (a mapping) (in layer 'p')"]),
    ("cropping_larger_than_input", mutate("cropping: [1, 2]", "cropping: [6, 2]"),
     ["12:35: error: layer 'k' (crop): cropping: received [6, 2] (12 rows and 4 columns off), expected at most "
      "11 rows (top + bottom) and 9 columns (left + right) off a [batch, 12, 10, 4] input, leaving at least one"]),
    ("cropping_all_columns", mutate("cropping: [1, 2]", "cropping: [[0, 0], [4, 6]]"),
     ["12:35: error: layer 'k' (crop): cropping: received [[0, 0], [4, 6]] (0 rows and 10 columns off), expected "
      "at most 11 rows (top + bottom) and 9 columns (left + right) off a [batch, 12, 10, 4] input, leaving at "
      "least one"]),
    ("pad_on_a_vector", mutate("{name: c, op: conv2d, filters: 4, kernel: 3, padding: same, activation: hard_swish}",
                               "{name: c, op: flatten}"),
     ["9:5: error: layer 'p' (pad): pad needs a rank-4 input (batch, height, width, channels); "
      "received [batch, 189]"]),
    ("negative_max_value", mutate("max_value: 2.5", "max_value: -1"),
     ["10:36: error: max_value: received -1, expected a value >= 0.0 (in layer 'r')"]),
    ("activation_typo", mutate("activation: hard_swish", "activation: hard_swsh"),
     [f"8:77: error: activation: received 'hard_swsh', expected {ONE_ACTIVATIONS}; did you mean 'hard_swish'? "
      "(in layer 'c')"]),
]


def test_base_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(BASE)
    code, out, err = validate(capsys, path)
    assert (code, err) == (0, [])
    assert out == f"ok: {path} (act: 5 layers, 2 variables)\n"


@pytest.mark.parametrize(("text", "expected"), [pytest.param(t, e, id=i) for i, t, e in CASES])
def test_broken_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: list[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    code, out, err = validate(capsys, path)
    assert code == 1
    assert out == ""
    assert err == expected_lines(path, expected)
