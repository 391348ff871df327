"""Errors a variant causes say where the variant caused them (rt12 compose F2, F3), and `extends` / `abstract` are
top-level keys an unknown-key message offers (F4):

- a layer removed with `remove: true` that another layer, an output, a `share:` or a pattern (collections, frozen,
  an optimizer's variables) still names: the error at the base's line names the removal;
- an `op` (an optimizer's `kind`, a schedule's `schedule`) changed under keys the base wrote for the old one: the
  error is at the variant's tag, names the key's place and how to drop it;
- a misspelt `extend:` gets a did-you-mean, and not the "missing required key" errors of the bases it did not read.
"""

from __future__ import annotations

from pathlib import Path

from cli_helpers import run_cli as run

BASE = """\
specgen: 1
name: eb
inputs:
  x: {shape: [6], dtype: float32}
outputs:
  logits: out
layers:
  - {name: h1, op: dense, input: x, units: 4, activation: relu}
  - {name: h2, op: dense, input: h1, units: 4}
  - {name: h3, op: dense, input: h2, units: 4, share: h2}
  - {name: out, op: dense, units: 2}
collections:
  c: ["h1/*"]
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  a: {kind: sgd, learning_rate: {schedule: exponential_decay, initial: 0.1, decay_steps: 10, decay_rate: 0.5}, momentum: 0.9}
"""


def validate(folder: Path, capsys, variant: str) -> list[str]:
    (folder / "base.yaml").write_text(BASE)
    (folder / "v.yaml").write_text(variant)
    code, _, err = run(["validate", "v.yaml"], capsys, folder)
    assert code == 1
    return err.splitlines()


def test_an_explicit_reader_of_a_removed_layer_names_the_removal(tmp_path: Path, capsys) -> None:
    assert validate(tmp_path, capsys, "extends: base.yaml\nlayers:\n  - {name: h1, remove: true}\n"
                                      "collections: {c: ['h2/*']}\n") == [
        "base.yaml:9:34: error: layer 'h2' reads 'h1', which is neither a layer nor an input; v.yaml:3:24 removes 'h1': "
        "keep it, or name another layer in that file (via v.yaml:1:10)",
        "1 error found"]


def test_an_output_naming_a_removed_layer_names_the_removal(tmp_path: Path, capsys) -> None:
    assert validate(tmp_path, capsys, "extends: base.yaml\nlayers:\n  - {name: out, remove: true}\n") == [
        "base.yaml:6:11: error: output 'logits' names layer 'out', which does not exist; v.yaml:3:25 removes 'out': "
        "keep it, or name another layer in that file (via v.yaml:1:10)",
        "1 error found"]


def test_a_share_and_patterns_naming_a_removed_layer_name_the_removal(tmp_path: Path, capsys) -> None:
    assert validate(tmp_path, capsys, "extends: base.yaml\nlayers:\n  - {name: h2, remove: true}\n"
                                      "  - {name: h3, input: h1}\n") == [
        "base.yaml:10:55: error: layer 'h3' shares 'h2', which is not a layer; v.yaml:3:24 removes 'h2': keep it, or "
        "name another layer in that file (via v.yaml:1:10)",
        "1 error found"]
    assert validate(tmp_path, capsys, "extends: base.yaml\nlayers:\n  - {name: h1, remove: true}\n"
                                      "  - {name: h2, input: x}\n  - {name: h3, share: null}\n") == [
        "base.yaml:13:7: error: pattern 'h1/*' matches no variable; v.yaml:3:24 removes 'h1': keep it, or name another "
        "layer in that file; did you mean 'h3/*'? (via v.yaml:1:10)",
        "1 error found"]


def test_an_op_changed_under_the_bases_keys_is_reported_at_the_change(tmp_path: Path, capsys) -> None:
    assert validate(tmp_path, capsys, "extends: base.yaml\nlayers:\n  - {name: h1, op: layer_norm}\n") == [
        "v.yaml:3:20: error: op: layer_norm takes no 'activation', which base.yaml:8:59 gives for op dense; remove it "
        "here with `activation: null`, or keep op dense (layer_norm takes 'epsilon', 'input', 'name', 'op' or "
        "'share') (in layer 'h1')",
        "v.yaml:3:20: error: op: layer_norm takes no 'units', which base.yaml:8:44 gives for op dense; remove it here "
        "with `units: null`, or keep op dense (layer_norm takes 'epsilon', 'input', 'name', 'op' or 'share') "
        "(in layer 'h1')",
        "2 errors found"]


def test_the_change_is_reported_through_a_chain_with_its_via(tmp_path: Path, capsys) -> None:
    (tmp_path / "mid.yaml").write_text("extends: base.yaml\nlayers:\n  - {name: h1, op: layer_norm, activation: null}\n")
    assert validate(tmp_path, capsys, "extends: mid.yaml\n") == [
        "mid.yaml:3:20: error: op: layer_norm takes no 'units', which base.yaml:8:44 gives for op dense; remove it "
        "here with `units: null`, or keep op dense (layer_norm takes 'epsilon', 'input', 'name', 'op' or 'share') "
        "(in layer 'h1') (via v.yaml:1:10)",
        "1 error found"]


def test_an_optimizer_kind_and_a_schedule_changed_under_the_bases_keys(tmp_path: Path, capsys) -> None:
    assert validate(tmp_path, capsys, "extends: base.yaml\noptimizers:\n  a: {kind: adam}\n") == [
        "v.yaml:3:13: error: kind: adam takes no 'momentum', which base.yaml:16:122 gives for kind sgd; remove it here "
        "with `momentum: null`, or keep kind sgd (adam takes 'beta_1', 'beta_2', 'clip', 'epsilon', 'kind', "
        "'learning_rate', 'variables' or 'weight_decay')",
        "1 error found"]
    assert validate(tmp_path, capsys, "extends: base.yaml\noptimizers:\n  a: {learning_rate: {schedule: cosine_decay}}\n") == [
        "v.yaml:3:33: error: schedule: cosine_decay takes no 'decay_rate', which base.yaml:16:106 gives for schedule "
        "exponential_decay; remove it here with `decay_rate: null`, or keep schedule exponential_decay (cosine_decay "
        "takes 'alpha', 'decay_steps', 'initial', 'schedule' or 'warmup_steps')",
        "1 error found"]


def test_a_key_the_variant_itself_writes_is_reported_as_before(tmp_path: Path, capsys) -> None:
    assert validate(tmp_path, capsys, "extends: base.yaml\nlayers:\n  - {name: h1, op: layer_norm, units: null, "
                                      "activation: null, rate: 2}\n") == [
        "v.yaml:3:63: error: unknown key 'rate'; expected one of 'epsilon', 'input', 'name', 'op' or 'share' "
        "(in layer 'h1')",
        "1 error found"]


def test_a_misspelt_extends_gets_a_did_you_mean_and_no_missing_keys(tmp_path: Path, capsys) -> None:
    assert validate(tmp_path, capsys, "specgen: 1\nname: a\nextend: base.yaml\n") == [
        "v.yaml:3:1: error: unknown key 'extend'; did you mean 'extends'?",
        "1 error found"]
    assert validate(tmp_path, capsys, "specgen: 1\nname: a\nabstrac: true\n") == [
        "v.yaml:3:1: error: unknown key 'abstrac'; did you mean 'abstract'?",
        "1 error found"]


def test_the_top_level_keys_offered_include_extends_and_abstract(tmp_path: Path, capsys) -> None:
    assert validate(tmp_path, capsys, "extends: base.yaml\nzzz: 1\n") == [
        "v.yaml:2:1: error: unknown key 'zzz'; expected one of 'abstract', 'blocks', 'checkpoint', 'collections', "
        "'data', 'doc', 'export', 'extends', 'frozen', 'inputs', 'layers', 'lints', 'loss', 'name', 'optimizers', "
        "'outputs', 'prune', 'specgen', 'sweep', 'targets' or 'train'",
        "1 error found"]
