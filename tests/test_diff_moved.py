"""`specgen diff`: a layer moved with `before:` keeps its name, its settings and its weights: no swap, no map."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import run_cli as run

BASE = """\
specgen: 1
name: tiny
inputs: {x: {shape: [4], dtype: float32}}
outputs: {logits: out}
layers:
  - {name: h1, op: dense, input: x, units: 8, activation: relu}
  - {name: a, op: dense, units: 8, activation: relu}
  - {name: b, op: dense, units: 8, activation: tanh}
  - {name: out, op: dense, units: 2}
"""
MOVED = "extends: base.yaml\nlayers:\n  - {name: b, before: a}\n"


def section(out: str, name: str) -> list[str]:
    return out.split(f"\n{name}: ", 1)[1].split("\n\n", 1)[0].splitlines()


def test_a_layer_moved_before_another_is_an_order_change_not_a_swap(tmp_path: Path, capsys) -> None:
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "moved.yaml").write_text(MOVED)
    code, out, err = run(["diff", "base.yaml", "moved.yaml", "--map", "--fail-on", "checkpoint"], capsys, tmp_path)
    assert (code, err) == (0, "")  # each layer's weights restore into the layer of that name and activation
    assert "renamed" not in out and "crossed" not in out
    assert "checkpoint: a checkpoint of OLD restored into NEW: restored 8, initialized 0, unused weights 0, mismatched 0" in out
    assert "# no map entries needed" in out
    code, out, err = run(["diff", "base.yaml", "moved.yaml", "--fail-on", "layers"], capsys, tmp_path)
    assert code == 1
    assert section(out, "layers")[3:] == [  # the order change: who reads whom; no activation row, no rename
        "  rewired  b.inputs    a    h1",
        "  rewired  a.inputs    h1   b",
        "  rewired  out.inputs  b    a",
    ]
    assert err.splitlines() == ["specgen diff: breaks layers: layer 'b' reads h1, was a",
                                "specgen diff: breaks layers: layer 'a' reads b, was h1",
                                "specgen diff: breaks layers: layer 'out' reads a, was b"]
    # With the same settings, moving one is indistinguishable from the two swapping names, and the place keeps what
    # the model computes: the swap (and its map) stands.
    (tmp_path / "base.yaml").write_text(BASE.replace("activation: tanh", "activation: relu"))
    code, out, _ = run(["diff", "base.yaml", "moved.yaml", "--map", "--fail-on", "checkpoint"], capsys, tmp_path)
    assert code == 1 and "renamed layers: a -> b, b -> a" in out
    assert "    - {from: a/kernel, to: b/kernel}" in out
