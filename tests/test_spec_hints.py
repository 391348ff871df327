"""Semantic errors carry the hint the writer needs, and one mistake gives one error.

Each case is examples/specs/digits_cnn.yaml with one edit, run through `specgen validate`; the whole stderr is
asserted. Before these hints: `frozen: [conv1]` said only "unknown collection 'conv1'" (and a second error for
conv1's weights), a pattern one letter off had no did-you-mean, `lr:` gave "unknown key" plus "missing required key
'learning_rate'", `padding: SAME` no suggestion, and a stage missing the loss's label did not say what it has.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "specs" / "digits_cnn.yaml"
BACKBONE = '  backbone: ["conv1/*", "bn1/*"]'

CASES: dict[str, tuple[list[tuple[str, str]], list[str]]] = {
    # (a) a layer name where a collection name goes: in frozen, in a collection, as an optimizer's variables
    "layer_name_in_frozen": (
        [(BACKBONE, '  backbone: ["bn1/*"]'), ('  head: ["head/*"]', '  head: ["head/*"]\nfrozen: [conv1]')],
        ["24:10: error: unknown collection 'conv1'; 'conv1' is a layer, not a collection: to select its variables "
         'write "conv1/*"']),
    "layer_name_in_a_collection": (
        [(BACKBONE, '  backbone: [conv1, "bn1/*"]')],
        ["22:14: error: unknown collection 'conv1'; 'conv1' is a layer, not a collection: to select its variables "
         'write "conv1/*"']),
    "layer_name_as_optimizer_variables": (
        [("variables: head\n", "variables: head/out\n")],
        ["37:16: error: pattern 'head/out' matches no variable; 'head/out' is a layer, not a variable: to select its "
         'variables write "head/out/*"']),
    "layer_without_variables": (  # its hint selects nothing, so conv1's weights are still loose: a second mistake
        [(BACKBONE, '  backbone: ["bn1/*", relu1]')],
        ["22:23: error: unknown collection 'relu1'; 'relu1' is a layer without variables (there is nothing to "
         "select): remove it",
         "30:1: error: variables 'conv1/kernel', 'conv1/bias' are neither frozen nor claimed by an optimizer; add "
         "them to an optimizer's variables or to 'frozen'"]),
    "collection_name_near_another": (
        [("variables: backbone", "variables: bakbone")],
        ["32:16: error: unknown collection 'bakbone'; did you mean 'backbone'?"]),
    "name_near_a_layer_prefix": (
        [(BACKBONE, '  backbone: ["bn1/*", conv2]')],
        ["22:23: error: unknown collection 'conv2'; did you mean 'conv1/*'?"]),
    # (b) a pattern that matches nothing
    "pattern_near_a_layer_prefix": (
        [('  head: ["head/*"]', '  head: ["heads/*"]')],
        ["23:10: error: pattern 'heads/*' matches no variable; did you mean 'head/*'?"]),
    "pattern_near_nothing": (  # no hint says what it meant: the loose head weights are not a second error
        [('  head: ["head/*"]', '  head: ["tail/*"]')],
        ["23:10: error: pattern 'tail/*' matches no variable; the variables begin with 'conv1/', 'bn1/', 'head/'"]),
    # (c) a Keras spelling of a specgen key, and no "missing required key" for it
    "keras_lr": (
        [("learning_rate: 0.001", "lr: 0.001")],
        ["39:5: error: unknown key 'lr'; did you mean 'learning_rate'?"]),
    "keras_kernel_size": (  # difflib alone took it for 'kernel_init'
        [("kernel: 3", "kernel_size: 3")],
        ["12:58: error: unknown key 'kernel_size'; did you mean 'kernel'? (in layer 'conv1')"]),
    "keras_pool_size": (
        [("size: 2}", "pool_size: 2}")],
        ["15:33: error: unknown key 'pool_size'; did you mean 'size'? (in layer 'pool1')"]),
    # (d) a literal that differs only in case, in any Literal field
    "padding_upper_case": (
        [("padding: same", "padding: SAME")],
        ["12:78: error: padding: received 'SAME', expected 'same' or 'valid'; did you mean 'same'? (in layer "
         "'conv1')"]),
    "dtype_upper_case": (
        [("dtype: float32", "dtype: FLOAT32")],
        ["7:36: error: dtype: received 'FLOAT32', expected 'float32', 'int32', 'int64' or 'uint8'; did you mean "
         "'float32'?"]),
    # (e) a stage without the loss's label: what it has, and the two places to change
    "stage_without_the_loss_label": (
        [("labels: {label: y_train}", "labels: {y: y_train}")],
        ["52:10: error: data.train has no label 'label', which the loss reads (data.train labels: 'y'); name the "
         "label 'label' in data.train.labels, or change the loss's 'labels' at {spec}:28:11 to a label every data "
         "stage has"]),
}


def _edited(edits: list[tuple[str, str]]) -> str:
    text = EXAMPLE.read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_error_has_its_hint(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edits, expected = CASES[name]
    path = tmp_path / "d.yaml"
    path.write_text(_edited(edits))
    code = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    count = f"{len(expected)} error{'s' if len(expected) > 1 else ''} found"
    assert err.splitlines() == [*(f"{path}:{line}".replace("{spec}", str(path)) for line in expected), count]


# The loss's 'labels' is named where it is written, which need not be the file the error names: a variant that
# sets it over a base, or a --set (rt6 review, finding 2: these printed the base's error with the variant's line:col
# bare, or the line:col of the file's value the override replaced).
def _base_whose_eval_has(label: str, tmp_path: Path) -> Path:
    base = tmp_path / "base.yaml"
    base.write_text(_edited([("labels: {label: y_test}", f"labels: {{label: y_test, {label}: y_test}}")]))
    return base


def test_a_variant_s_labels_are_named_in_the_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _base_whose_eval_has("lab", tmp_path)
    variant = tmp_path / "v2.yaml"
    variant.write_text("extends: base.yaml\nloss:\n  labels: lab\n")
    code = main(["validate", str(variant)])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"{base}:52:10: error: data.train has no label 'lab', which the loss reads (data.train labels: 'label'); "
        f"name the label 'lab' in data.train.labels, or change the loss's 'labels' at {variant}:3:11 to a label "
        f"every data stage has (via {variant}:1:10)",
        "1 error found"]


@pytest.mark.parametrize(("override", "key"), [
    ("loss.labels=lab", "loss.labels"),
    ("loss={kind: sparse_softmax_cross_entropy, logits: logits, labels: lab}", "loss"),
])
def test_labels_set_by_an_override_name_it(override: str, key: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    base = _base_whose_eval_has("lab", tmp_path)
    code = main(["validate", str(base), "--set", override])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"{base}:52:10: error: data.train has no label 'lab', which the loss reads (data.train labels: 'label'); "
        f"name the label 'lab' in data.train.labels, or change the loss's 'labels' (set by --set {key}) to a label "
        "every data stage has",
        "1 error found"]
