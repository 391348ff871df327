"""The init_scale lint and `checkpoint.restore` (specgen/ir/lints.py's `restored_scales`).

A `strict: true` restore entry holds a key for every model variable its `exclude` does not name (or the run stops
before training), so those variables' initializers never run: the lint does not judge the layers that hold them,
nor the layers after them (their input's scale is the checkpoint's). Layers whose scale only initializers set
(an excluded head reading the model's input) are still judged, and so is every layer of a spec without a strict
restore. The KerasHub case (a freshly imported backbone passing `validate --strict`) is in
tests/test_import_keras_hub.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main
from specgen.ir import lints
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

SMALL = "{kind: truncated_normal, stddev: 0.02}"  # over fan-in 8: std 0.02 * sqrt(0.7737 * 8) = 0.0498, flagged
# Two paths from x: `a` then `head/after` (reads a), and `head/side` (reads x). Each kernel alone shrinks the std.
LAYERS = f"""specgen: 1
name: held
inputs:
  x: {{shape: [8]}}
outputs:
  y: head/after
  z: head/side
layers:
  - {{name: a, op: dense, units: 8, kernel_init: {SMALL}}}
  - {{name: head/after, op: dense, units: 8, kernel_init: {SMALL}}}
  - {{name: head/side, op: dense, units: 8, input: x, kernel_init: {SMALL}}}
"""


def spec(restore: str = "") -> str:
    return LAYERS + (f"checkpoint:\n  dir: run\n  restore:\n    - {restore}\n" if restore else "")


def flagged(text: str) -> list[str]:
    return [node.name for node, _ in lints.init_scale_findings(build_ir(load_spec_text(text)))]


def test_a_strict_restore_without_exclude_judges_nothing() -> None:
    text = spec("{from: pretrained.keras, strict: true}")
    assert lints.strictly_restored(build_ir(load_spec_text(text))) == {
        f"{layer}/{role}" for layer in ("a", "head/after", "head/side") for role in ("kernel", "bias")}
    assert flagged(text) == []
    # The same layers without the restore: both paths judged, at the first layer of each.
    loaded = load_spec_text(spec(), "held.yaml")
    assert [str(w) for w in lints.init_scale_warnings(loaded, build_ir(loaded))] == [
        "held.yaml:9:49: warning: layer 'a' (dense): at initialization the activation std shrinks to 0.0498x the "
        "input's (outside [0.1, 10]; unit-variance inputs assumed, see docs/spec.md#lints); kernel_init "
        "truncated_normal (mean 0, stddev 0.02) over fan-in 8 scales the second moment by 0.00248; glorot_uniform "
        "keeps it near 1",
        "held.yaml:11:67: warning: layer 'head/side' (dense): at initialization the activation std shrinks to "
        "0.0498x the input's (outside [0.1, 10]; unit-variance inputs assumed, see docs/spec.md#lints); kernel_init "
        "truncated_normal (mean 0, stddev 0.02) over fan-in 8 scales the second moment by 0.00248; glorot_uniform "
        "keeps it near 1"]
    # An entry that is not strict restores what its file happens to hold, which validate never reads: judged as
    # without a restore. So is a strict entry whose exclude names every variable.
    for restore in ("{from: pretrained.keras}", "{from: pretrained.keras, strict: false}",
                    "{from: pretrained.keras, map: [{from: w, to: a/kernel}]}",
                    '{from: pretrained.keras, strict: true, exclude: ["*"]}'):
        assert flagged(spec(restore)) == ["a", "head/side"], restore


def test_an_excluded_head_is_judged_only_where_no_restored_layer_feeds_it() -> None:
    """`head/*` keeps its initializers; `head/after` reads restored `a` (an unknown scale), `head/side` reads x."""
    text = spec('{from: pretrained.keras, strict: true, exclude: ["head/*"]}')
    assert lints.strictly_restored(build_ir(load_spec_text(text))) == {"a/kernel", "a/bias"}
    assert flagged(text) == ["head/side"]


def test_a_partial_exclude_of_a_layer_still_settles_it() -> None:
    """a/kernel restored, a/bias initialized: a's output depends on the restored kernel, so it is not judged."""
    assert flagged(spec('{from: pretrained.keras, strict: true, exclude: ["a/bias", "head/side/*"]}')) == [
        "head/side"]


def test_validate_strict_passes_a_fully_restored_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """validate reads no checkpoint: the file named in `from` need not exist for the lint's rule."""
    (tmp_path / "restored.yaml").write_text(spec("{from: pretrained.keras, strict: true}"))
    (tmp_path / "fresh.yaml").write_text(spec())
    assert main(["validate", "--strict", str(tmp_path / "restored.yaml")]) == 0
    assert capsys.readouterr().out.startswith("ok: ")
    assert main(["validate", "--strict", str(tmp_path / "fresh.yaml")]) == 1
    assert capsys.readouterr().err.count("error: layer ") == 2
