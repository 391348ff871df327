"""Broken specs through `specgen validate`: every mistake gives an exact `path:line:col: error: message`.

Each case is the valid BASE spec with exactly one mistake, written to a real file and run
through the real CLI entry point, so the whole path (YAML positions, pydantic, IR checks,
printing) is covered. Expected lines were checked by hand against the text: the column is
where the offending key or value starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main
from specgen.kinds.ops import REGISTRY
from specgen.kinds.optimizers import REGISTRY as OPTIMIZERS
from specgen.kinds.schedules import REGISTRY as SCHEDULES
from specgen.paths import shown
from specgen.spec.yaml_compose import MAX_FILE_BYTES

ROOT = Path(__file__).resolve().parents[1]

BASE = """\
specgen: 1
name: tiny
doc: A tiny model for error tests.
inputs:
  x: {shape: [8, 8, 1], dtype: float32}
  v: {shape: [4]}
  ids: {shape: [3], dtype: int32}
outputs:
  logits: head/out
layers:
  - {name: conv, op: conv2d, input: x, filters: 2, kernel: 3, padding: same}
  - {name: bn, op: batch_norm}
  - {name: flat, op: flatten}
  - {name: head/fc, op: dense, units: 4, activation: relu}
  - {name: mix, op: add, inputs: [head/fc, v]}
  - {name: emb, op: embedding, input: ids, vocab_size: 10, dim: 4}
  - {name: head/out, op: dense, input: mix, units: 10}
collections:
  body: ["conv/*", "bn/*"]
  head: ["head/*"]
frozen: ["emb/*"]
loss:
  kind: sparse_softmax_cross_entropy
  logits: logits
  labels: label
optimizers:
  main:
    kind: sgd
    variables: body
    learning_rate: 0.1
  top:
    kind: adam
    variables: head
    learning_rate: {schedule: piecewise_constant, boundaries: [100], values: [0.01, 0.001]}
train:
  batch_size: 16
  ema: {decay: 0.99}
data:
  train: {npz: data.npz, features: {x: x_train, v: v_train, ids: ids_train}, labels: {label: y_train}}
checkpoint:
  dir: runs/tiny
  restore:
    - from: pretrained.ckpt
      map:
        - {pattern: "^old/(.*)$", to: "\\\\1"}
export:
  onnx: {opset: 21, weights: ema}
"""


def mutate(old: str, new: str) -> str:
    """BASE with one piece of text replaced; the piece must occur exactly once."""
    assert BASE.count(old) == 1, f"{old!r} occurs {BASE.count(old)} times in BASE"
    return BASE.replace(old, new)


def alias_bomb() -> str:
    """Billion laughs: nine levels of ten aliases each would expand to 10**10 values."""
    levels = ["lol0: &l0 [x, x, x, x, x, x, x, x, x, x]\n"]
    levels += [f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 10)]
    return mutate("doc: A tiny model for error tests.\n", "doc: A tiny model for error tests.\n" + "".join(levels))


OVERSIZED = BASE + ("# padding\n" * (MAX_FILE_BYTES // 10 + 1))
OVERSIZED_BYTES = len(OVERSIZED.encode())
_QUOTED_OPS = [f"'{op}'" for op in sorted(REGISTRY)]  # every registered op, as the message lists them
ONE_OPS = ", ".join(_QUOTED_OPS[:-1]) + " or " + _QUOTED_OPS[-1]
_QUOTED_OPTIMIZERS = [f"'{k}'" for k in sorted(OPTIMIZERS)]  # every registered kind: the message lists them sorted
ONE_OPTIMIZERS = ", ".join(_QUOTED_OPTIMIZERS[:-1]) + " or " + _QUOTED_OPTIMIZERS[-1]
_QUOTED_SCHEDULES = [f"'{k}'" for k in sorted(SCHEDULES)]  # every registered schedule, sorted as the message has them
ONE_SCHEDULES = ", ".join(_QUOTED_SCHEDULES[:-1]) + " or " + _QUOTED_SCHEDULES[-1]

# (id, spec text, expected diagnostics without the leading "path:")
CASES = [
    # --- keys, types, literals, names -------------------------------------------------------
    ("unknown_key_did_you_mean", mutate("  batch_size: 16\n", "  batch_size: 16\n  epochz: 3\n"),
     ["37:3: error: unknown key 'epochz'; did you mean 'epochs'?"]),
    # a misspelt required key is one mistake: no extra "missing required key 'filters'"
    ("misspelt_required_key", mutate("filters: 2,", "filter: 2,"),
     ["11:40: error: unknown key 'filter'; did you mean 'filters'? (in layer 'conv')"]),
    # a key inside a tagged union branch (loss: one term, kind-discriminated) lists the branch's keys
    ("unknown_loss_key_lists_keys", mutate("  labels: label\n", "  labels: label\n  label_smoothing: 0.1\n"),
     ["26:3: error: unknown key 'label_smoothing'; expected one of 'kind', 'labels', 'logits', 'name' or 'weight'"]),
    ("unknown_top_level_key", mutate("frozen: [", "frozn: ["),
     ["21:1: error: unknown key 'frozn'; did you mean 'frozen'?"]),
    ("unknown_op_did_you_mean", mutate("op: flatten", "op: flaten"),
     [f"13:22: error: unknown op 'flaten'; did you mean 'flatten'? (expected {ONE_OPS})"]),
    ("unknown_optimizer_kind", mutate("kind: sgd", "kind: sdg"),
     [f"28:11: error: unknown kind 'sdg'; did you mean 'sgd'? (expected {ONE_OPTIMIZERS})"]),
    ("missing_layer_key", mutate("input: mix, units: 10}", "input: mix}"),
     ["17:5: error: missing required key 'units' (in layer 'head/out')"]),
    ("missing_top_level_key", mutate("name: tiny\n", ""),
     ["1:1: error: missing required key 'name'"]),
    ("string_for_int", mutate("batch_size: 16", "batch_size: sixteen"),
     ["36:15: error: batch_size: expected a positive integer or 'full', received 'sixteen' (str)"]),
    ("bool_for_int", mutate("units: 4,", "units: true,"),
     ["14:39: error: units: expected a number, received true (a boolean) (in layer 'head/fc')"]),
    ("int_above_limit", mutate("units: 10}", "units: 100000000000000000000}"),
     ["17:52: error: units: received 100000000000000000000, expected a value <= 2147483647 (in layer 'head/out')"]),
    ("infinite_float", mutate("learning_rate: 0.1", "learning_rate: .inf"),
     ["30:20: error: learning_rate: expected a finite number, received .inf"]),
    ("bad_literal_padding", mutate("padding: same", "padding: sme"),
     ["11:72: error: padding: received 'sme', expected 'same' or 'valid'; did you mean 'same'? (in layer 'conv')"]),
    ("name_with_space", mutate("name: tiny", "name: tiny model"),
     ["2:7: error: name: invalid name 'tiny model': expected an ASCII letter, then ASCII letters and digits with "
      "single '_' between them"]),
    ("layer_name_leading_digit", mutate("name: conv,", "name: 1conv,"),
     ["11:12: error: name: invalid name '1conv': expected parts joined by '/', each an ASCII letter, then ASCII "
      "letters and digits with single '_' between them (in layer '1conv')"]),
    # a bad mapping key is reported at the key, not at its value
    ("input_name_leading_digit", mutate("  v: {shape: [4]}", "  2v: {shape: [4]}"),
     ["6:3: error: invalid name '2v': expected an ASCII letter, then ASCII letters and digits with single '_' "
      "between them"]),
    ("control_character_in_key", mutate("  batch_size: 16", '  "batch\\nsize": 16'),
     ["36:3: error: unknown key 'batch\\nsize'; did you mean 'batch_size'?"]),
    ("unsupported_version", mutate("specgen: 1", "specgen: 2"),
     ["1:10: error: unsupported spec format version 2; this specgen reads version 1"]),
    # --- the YAML layer ---------------------------------------------------------------------
    ("invalid_yaml_syntax", mutate("{name: bn, op: batch_norm}", "{name: bn, op: batch_norm"),
     ["13:5: error: the '{' opened at 12:5 is still open on line 13, where '{' cannot follow; expected '}' to close "
      "it at the end of line 12, or ',' there if its entries go on: add the missing '}' or ','"]),
    ("yaml_tab_indent", mutate("  batch_size: 16", "\tbatch_size: 16"),
     ["36:1: error: a tab character indents this line; YAML indents with spaces only: replace the tab with spaces"]),
    ("duplicate_yaml_key", mutate("name: tiny\n", "name: tiny\nname: tiny\n"),
     ["3:1: error: duplicate key 'name'; YAML keeps only one of them, so write it once"]),
    ("python_tag", mutate("doc: A tiny model for error tests.", "doc: !!python/object/apply:os.system [echo]"),
     ["3:6: error: unsupported YAML tag '!!python/object/apply:os.system'; specs hold plain data"]),
    ("unknown_tag", mutate("doc: A tiny model for error tests.", "doc: !custom text"),
     ["3:6: error: unsupported YAML tag '!custom'; specs hold plain data"]),
    ("empty_file", "", ["1:1: error: the file is empty; expected a spec mapping"]),
    ("comments_only", "# nothing here\n", ["1:1: error: the file is empty; expected a spec mapping"]),
    ("yaml_list_not_mapping", "- specgen: 1\n- name: tiny\n",
     ["1:1: error: a spec is a mapping of sections; received a list of 2 items"]),
    ("oversized_file", OVERSIZED,
     [f"error: the file is {OVERSIZED_BYTES} bytes; specs are limited to {MAX_FILE_BYTES} bytes "
      "(is this really a spec?)"]),
    ("alias_bomb", alias_bomb(),
     ["8:7: error: the document expands to more than 100000 values through aliases (a YAML alias bomb?); "
      "write the values out or use fewer aliases"]),
    ("deep_nesting", mutate("doc: A tiny model for error tests.", "doc: " + "[" * 80 + "]" * 80),
     ["3:70: error: the document nests more than 64 levels deep"]),
    ("error_inside_merged_mapping",
     mutate("  top:\n    kind: adam\n", "  top:\n    <<: {kind: adam, beta_1: 1.5}\n"),
     ["32:30: error: beta_1: received 1.5, expected a value < 1.0"]),
    # --- the layer graph and shapes ---------------------------------------------------------
    ("dangling_input_did_you_mean", mutate("inputs: [head/fc, v]", "inputs: [head/fcc, v]"),
     ["15:35: error: layer 'mix' reads 'head/fcc', which is neither a layer nor an input; did you mean 'head/fc'?"]),
    ("layer_reads_itself", mutate("{name: bn, op: batch_norm}", "{name: bn, op: batch_norm, input: bn}"),
     ["12:5: error: layer 'bn' reads its own output"]),
    ("duplicate_layer_name", mutate("{name: flat, op: flatten}", "{name: bn, op: flatten}"),
     ["13:12: error: layer name 'bn' is already used by another layer"]),
    ("output_names_no_layer", mutate("logits: head/out", "logits: head/outt"),
     ["9:11: error: output 'logits' names layer 'head/outt', which does not exist; did you mean 'head/out'?"]),
    ("add_shape_mismatch", mutate("inputs: [head/fc, v]", "inputs: [flat, v]"),
     ["15:34: error: layer 'mix' (add): inputs: received 'flat' [batch, 128] and 'v' [batch, 4], which do not "
      "broadcast; expected inputs of one rank whose axes are equal or 1 in one of them"]),
    ("concat_shape_mismatch",
     mutate("  - {name: head/out", "  - {name: cat, op: concat, inputs: [conv, x], axis: 1}\n  - {name: head/out"),
     ["17:37: error: layer 'cat' (concat): concat on axis 1 needs the other axes equal; "
      "'conv' is [batch, 8, 8, 2] but 'x' is [batch, 8, 8, 1]"]),
    ("dense_on_integer_input",
     mutate("  - {name: head/out", "  - {name: bad, op: dense, input: ids, units: 2}\n  - {name: head/out"),
     ["17:35: error: layer 'bad' (dense): dense needs a float32 input; received int32 "
      "(integer inputs feed embedding layers)"]),
    ("conv2d_on_rank2_input", mutate("input: x, filters", "input: v, filters"),
     ["11:37: error: layer 'conv' (conv2d): conv2d needs a rank-4 input (batch, height, width, channels); "
      "received [batch, 4]"]),
    ("valid_window_too_large", mutate("kernel: 3, padding: same", "kernel: 9, padding: valid"),
     ["11:60: error: layer 'conv' (conv2d): a window of 9 does not fit an input extent of 8 with padding 'valid'"]),
    ("input_too_large", mutate("v: {shape: [4]}", "v: {shape: [100000, 100000]}"),
     ["6:6: error: v: an example of shape [100000, 100000] has 10000000000 values; the limit is 2147483647"]),
    # --- collections and optimizers ---------------------------------------------------------
    ("collection_pattern_matches_nothing", mutate('head: ["head/*"]', 'head: ["head/*", "tail/*"]'),
     ["20:20: error: pattern 'tail/*' matches no variable; the variables begin with 'conv/', 'bn/', 'head/', 'emb/'"]),
    ("optimizer_unknown_collection", mutate("variables: head", "variables: hed"),
     ["33:16: error: unknown collection 'hed'; did you mean 'head'?"]),
    ("variable_claimed_twice", mutate("variables: body", 'variables: [body, "head/fc/*"]'),
     ["33:16: error: optimizer 'top' claims variables 'head/fc/kernel', 'head/fc/bias', already claimed by "
      "optimizer 'main'; each variable belongs to one optimizer"]),
    ("trainable_variable_unclaimed", mutate('frozen: ["emb/*"]', "frozen: []"),
     ["26:1: error: variable 'emb/embeddings' is neither frozen nor claimed by an optimizer; "
      "add them to an optimizer's variables or to 'frozen'"]),
    ("frozen_variable_claimed", mutate("variables: head", 'variables: [head, "emb/*"]'),
     ["33:16: error: optimizer 'top' claims frozen variable 'emb/embeddings'; "
      "remove them from 'frozen' or from this optimizer"]),
    ("collection_refers_to_itself", mutate('head: ["head/*"]', 'head: ["head/*", head2]\n  head2: [head]'),
     ["20:9: error: collection 'head' refers to itself through other collections"]),
    # --- loss, schedules, data, checkpoint, export ------------------------------------------
    ("loss_logits_not_an_output", mutate("logits: logits", "logits: logit"),
     ["24:11: error: loss logits 'logit' is not an output; did you mean 'logits'? (outputs: logits)"]),
    ("piecewise_wrong_counts", mutate("boundaries: [100]", "boundaries: [100, 200]"),
     ["34:20: error: learning_rate: piecewise_constant needs one more value than boundaries; received 2 boundaries "
      "and 2 values"]),
    ("unknown_schedule", mutate("schedule: piecewise_constant", "schedule: piecewize_constant"),
     ["34:31: error: unknown schedule 'piecewize_constant'; did you mean 'piecewise_constant'? (expected "
      f"{ONE_SCHEDULES})"]),
    ("invalid_restore_regex", mutate('"^old/(.*)$"', '"^old/(.*$"'),
     ["45:21: error: pattern '^old/(.*$' is not valid RE2 syntax, which restore patterns use: missing ): ^old/(.*$"]),
    ("data_feature_not_an_input", mutate("ids: ids_train}", "ids: ids_train, xx: x_extra}"),
     ["39:77: error: feature 'xx' is not a spec input; did you mean 'x'?"]),
    ("export_ema_without_train_ema", mutate("  ema: {decay: 0.99}\n", ""),
     ["46:30: error: export weights 'ema' needs 'train.ema' (no shadow weights exist without it)"]),
]


def expected_lines(path: Path, expected: list[str]) -> list[str]:
    lines = [f"{path}: {e}" if e.startswith("error:") else f"{path}:{e}" for e in expected]
    return [*lines, f"{len(expected)} error{'s' if len(expected) != 1 else ''} found"]


def validate(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, str, list[str]]:
    """Run `specgen validate`; the exit code, stdout and the stderr lines."""
    code = main(["validate", *(str(p) for p in paths)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err.splitlines()


def test_base_spec_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every case is BASE plus one mistake, so BASE itself must pass."""
    path = tmp_path / "spec.yaml"
    path.write_text(BASE)
    code, out, err = validate(capsys, path)
    assert (code, err) == (0, [])
    assert out == f"ok: {path} (tiny: 7 layers, 32 variables)\n"


def test_case_ids_are_unique() -> None:
    ids = [case[0] for case in CASES]
    assert len(ids) == len(set(ids)) >= 25


@pytest.mark.parametrize(("text", "expected"), [pytest.param(t, e, id=i) for i, t, e in CASES])
def test_broken_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: list[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    code, out, err = validate(capsys, path)
    assert code == 1
    assert out == ""
    assert err == expected_lines(path, expected)


def test_merge_keys_written_in_the_mapping_win(tmp_path: Path) -> None:
    """YAML merge semantics: a key written in the mapping overrides the merged one, before or after `<<`."""
    from specgen.spec.load import load_spec

    text = mutate("  top:\n    kind: adam\n", "  top:\n    <<: *main\n    kind: adam\n")
    text = text.replace("  main:\n", "  main: &main\n")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    top = load_spec(path).spec.optimizers["top"]
    assert (top.kind, top.variables, top.learning_rate.schedule) == ("adam", "head", "piecewise_constant")


CYCLE = mutate("{name: bn, op: batch_norm}\n  - {name: flat, op: flatten}",
               "{name: bn, op: batch_norm, input: flat}\n  - {name: flat, op: flatten, input: bn}")


def test_layer_cycle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two layers naming each other via `input`: one diagnostic, at the first layer of the cycle."""
    path = tmp_path / "spec.yaml"
    path.write_text(CYCLE)
    code, _, err = validate(capsys, path)
    assert code == 1
    assert len(err) == 2 and err[1] == "1 error found"
    assert err[0].startswith(f"{path}:12:5: error: the layers form a cycle: bn -> flat")


def test_layer_cycle_names_only_the_cycle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(CYCLE)
    _, _, err = validate(capsys, path)
    message = err[0].split(": error: ", 1)[1]
    assert message == "the layers form a cycle: bn -> flat -> bn", message


def test_output_naming_an_input_builds_or_is_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(mutate("outputs:\n  logits: head/out\n", "outputs:\n  logits: head/out\n  raw: v\n"))
    code = main(["build", str(path), "--out", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err
    assert "error: output 'raw' names input 'v'; outputs name layers" in err
    assert not (tmp_path / "out").exists()


def test_two_broken_files_report_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One run reports every problem in every file, sorted by file, and counts them all."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(mutate("padding: same", "padding: sme"))
    second.write_text(mutate("logits: head/out", "logits: head/outt"))
    code, out, err = validate(capsys, second, first)
    assert code == 1
    assert out == ""
    assert err == [
        f"{first}:11:72: error: padding: received 'sme', expected 'same' or 'valid'; did you mean 'same'? (in layer 'conv')",
        f"{second}:9:11: error: output 'logits' names layer 'head/outt', which does not exist; "
        "did you mean 'head/out'?",
        "2 errors found",
    ]


def test_folder_with_good_and_broken_specs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "good.yaml").write_text(BASE)
    (tmp_path / "bad.yml").write_text(mutate("specgen: 1", "specgen: 2"))
    (tmp_path / "notes.txt").write_text("specgen: 2\n")  # not a spec: ignored
    code, out, err = validate(capsys, tmp_path)
    assert code == 1
    assert out == f"ok: {tmp_path / 'good.yaml'} (tiny: 7 layers, 32 variables)\n"
    assert err == [f"{tmp_path / 'bad.yml'}:1:10: error: unsupported spec format version 2; "
                   "this specgen reads version 1", "1 error found"]


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "absent.yaml"
    code, _, err = validate(capsys, path)
    assert (code, err) == (1, [f"{path}: error: cannot read the spec: No such file or directory", "1 error found"])


def test_examples_validate(capsys: pytest.CaptureFixture[str]) -> None:
    specs = sorted((ROOT / "examples" / "specs").rglob("*.yaml"))  # family/: a base and its variants
    assert specs
    code, out, err = validate(capsys, ROOT / "examples" / "specs")
    assert (code, err) == (0, [])
    assert [line.split(" ")[1] for line in out.splitlines()] == [shown(p) for p in specs]  # relative under cwd
    assert all(line.startswith("ok: ") for line in out.splitlines())
