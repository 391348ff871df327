"""Bidirectional controls ("Trojan Source", CVE-2021-42574): refused in a spec's text with file:line:col, drawn
escaped when a value written as an escape reaches a picture (yaml_dialect.py, pictures/graph_model.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli

BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]
SPEC = """specgen: 1
name: bidi
doc: {doc}
inputs:
  img: {{shape: [8, 8, 1]}}
outputs:
  out: blk/head
layers:
  - {{name: blk/conv, op: conv2d, filters: 4, kernel: 3, padding: same}}
  - {{name: pool, op: global_avg_pool}}
  - {{name: blk/head, op: dense, units: 3}}
loss: {{kind: sparse_softmax_cross_entropy, logits: out, labels: label}}
optimizers:
  h: {{variables: ["blk/*"], kind: adam, learning_rate: 0.1}}
checkpoint:
  dir: runs/x
  restore:
    - {{from: {source}}}  # {comment}
"""


def _spec(doc: str = "plain", source: str = "prev.ckpt", comment: str = "where the weights come from") -> str:
    return SPEC.format(doc=doc, source=source, comment=comment)


@pytest.mark.parametrize("char", BIDI, ids=[f"U+{ord(c):04X}" for c in BIDI])
def test_a_bidi_control_in_a_value_is_refused_at_its_place(char: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.yaml").write_text(_spec(doc=f"ab{char}cd"), encoding="utf-8")
    code, out, err = run_cli(["validate", "s.yaml"], capsys, tmp_path)
    assert (code, out) == (1, "")
    first = err.splitlines()[0]
    assert first.startswith(f"s.yaml:3:8: error: the character U+{ord(char):04X} ("), first
    assert "Trojan Source" in first and char not in err  # the message names it and never prints it raw
    assert err.splitlines()[1:] == ["1 error found"]


def test_a_bidi_control_in_a_comment_is_refused_at_its_place(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The classic attack hides in a comment: the override makes the rest of the line look like other text."""
    text = _spec(comment="harmless \u202e }kcehc{ \u2066")
    (tmp_path / "s.yaml").write_text(text, encoding="utf-8")
    code, _, err = run_cli(["validate", "s.yaml"], capsys, tmp_path)
    line = text.split("\n").index(next(x for x in text.split("\n") if "\u202e" in x)) + 1
    col = text.split("\n")[line - 1].index("\u202e") + 1
    assert code == 1
    assert err.startswith(f"s.yaml:{line}:{col}: error: the character U+202E (RIGHT-TO-LEFT OVERRIDE) "), err


def test_a_base_file_is_checked_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "base.yaml").write_text(_spec(doc="x  # \u2067"), encoding="utf-8")
    (tmp_path / "v.yaml").write_text("extends: base.yaml\nname: v\n", encoding="utf-8")
    code, _, err = run_cli(["validate", "v.yaml"], capsys, tmp_path)
    assert code == 1
    assert err.startswith("base.yaml:3:11: error: the character U+2067 (RIGHT-TO-LEFT ISOLATE) "), err
    assert err.splitlines()[0].endswith("(via v.yaml:1:10)")


def test_the_marks_stay_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """LRM, RLM and ALM cannot reorder runs of text, and right-to-left prose in a doc needs them."""
    (tmp_path / "s.yaml").write_text(_spec(doc="\u05e9\u05dc\u05d5\u05dd\u200f (v2)\u200e \u061c."), encoding="utf-8")
    code, out, err = run_cli(["validate", "s.yaml"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert out == "ok: s.yaml (bidi: 3 layers, 15 variables)\n"


# format -> how the escape reads in its text (dot doubles a backslash) and how often: in each of the two layers'
# boxes that the restore fills (by name), and the SVG's again in each box's <title> tooltip
DRAWN = {"svg": ("evil\\u202egpj.ckpt", 4), "html": ("evil\\u202egpj.ckpt", 4), "dot": ("evil\\\\u202egpj.ckpt", 2),
         "mermaid": ("evil\\u202egpj.ckpt", 2)}


@pytest.mark.parametrize("fmt", list(DRAWN))
def test_graph_draws_an_escaped_override_escaped(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Written as a YAML escape the override is visible in the spec and passes validate; the picture shows the
    escape (`\\u202e`) where the restore source's name is drawn, never the character itself."""
    (tmp_path / "s.yaml").write_text(_spec(source='"evil\\u202egpj.ckpt"'), encoding="utf-8")
    code, _, err = run_cli(["graph", "s.yaml", "--format", fmt, "-o", f"g.{fmt}"], capsys, tmp_path)
    assert code == 0, err
    drawn = (tmp_path / f"g.{fmt}").read_text(encoding="utf-8")
    assert not any(c in drawn for c in BIDI)
    escaped, times = DRAWN[fmt]
    assert drawn.count(f"restore {escaped}") == times
