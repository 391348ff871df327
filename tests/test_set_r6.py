"""`--set` where it cannot write (red-team rt6, F6): each refusal says what is there and what `--set` can do instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli

BASE = """\
specgen: 1
name: b
inputs: {x: {shape: [4]}}
outputs: {y: out}
layers:
  - {name: h1, op: dense, units: 8}
  - {name: out, op: dense, units: 2}
"""

VARIANT = "write `{name: NAME, remove: true}` in a variant file's 'layers' (docs/spec.md, \"Composing specs\")"


@pytest.mark.parametrize(("override", "message"), [
    ("layers[h1]=null",
     "'layers[h1]' selects a list item; --set cannot remove a list item: " + VARIANT.replace("NAME", "h1")),
    ("layers.1=null",
     "--set cannot remove a list item (layers.1=null would leave a null in the list): " + VARIANT.replace("NAME", "out")),
    ("layers[out]={name: out, op: relu}",
     "'layers[out]' selects a list item to set its keys (layers[out].KEY=VALUE); to replace the whole item, set it "
     "by its index: layers.1=VALUE"),
    ("layers.2={name: h3, op: dense, units: 3}",
     "'layers' has 2 items (0..1): an index sets an existing item; --set cannot add a list item: write it in a "
     "variant file (a new name is appended, or placed with after: NAME)"),
    ("layers.5.units=3",
     "'layers' has 2 items (0..1): an index sets an existing item; --set cannot add a list item: write it in a "
     "variant file (a new name is appended, or placed with after: NAME)"),
    ("inputs.x.shape.1=3",
     "'inputs.x.shape' has 1 item (0..0): an index sets an existing item; to change its length, set the whole list: "
     "inputs.x.shape=[...]"),
    ("layers.units=3", "'layers' is a list: select an item by its index (layers.0) or by its name (layers[h1]), "
                       "not 'units'"),
    ("name.x.y=3", "'name' holds 'b' (str), not a mapping or a list, so it has no key 'x'; set 'name' itself"),
    ("layers[h1].units.x=1",
     "'layers[h1].units' holds 8 (int), not a mapping or a list, so it has no key 'x'; set 'layers[h1].units' itself"),
    # a [NAME] no item has, as the last key part (rt6 review, finding 1: a StopIteration traceback)
    ("layers[nope]=1", "no item named 'nope' in 'layers'"),
    ("layers[nope]=null", "no item named 'nope' in 'layers'"),
    ("layers[nope]={name: nope, op: relu}", "no item named 'nope' in 'layers'"),
    ("layers[ou]=1", "no item named 'ou' in 'layers'; did you mean 'out'?"),
    ("layers[ou].units=1", "no item named 'ou' in 'layers'; did you mean 'out'?"),
])
def test_a_set_that_cannot_write_says_why(tmp_path: Path, capsys, override: str, message: str) -> None:
    (tmp_path / "base.yaml").write_text(BASE)
    code, out, err = run_cli(["validate", "base.yaml", "--set", override], capsys, tmp_path)
    assert (code, out) == (1, "")
    assert err.splitlines() == [f"--set {override}: error: {message}", "1 error found"]


def test_set_null_still_removes_a_mapping_key(tmp_path: Path, capsys) -> None:
    (tmp_path / "base.yaml").write_text(BASE.replace("units: 8}", "units: 8, activation: relu}"))
    code, out, _ = run_cli(["explain", "base.yaml", "layers[h1].activation", "--set", "layers[h1].activation=null"],
                           capsys, tmp_path)
    assert code == 0
    assert out.splitlines() == ["layers[h1].activation = linear", "  1. base.yaml:6:49  relu",
                                "  2. --set layers[h1].activation  null (removes the bases' value)",
                                "  3. default  linear (no activation)  <- wins"]
