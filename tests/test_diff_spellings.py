"""`specgen diff` compares what a spec means, not how it is spelled (red-team rt6, finding F4): a scalar for a pair
(`kernel: 3` / `[3, 3]`), a padding's three spellings, a default that is null because it is derived (a pool's
`strides`: its size; an attention's `value_dim`: its `key_dim`), a negative axis, and a name for a mapping
(`kernel_init: glorot_uniform` / `{kind: glorot_uniform}`, a metric name). Genuine changes are still rows and
breaks, written as before. No TensorFlow."""

from __future__ import annotations

import pytest
from cli_helpers import run_cli as run
from test_diff_sections import section, write
from test_diff_sections_r4 import MLP

from specgen.kinds.ops.padding import Pad, pairs
from specgen.kinds.ops.shapes import pair
from specgen.review.spellings import normalized

CHECKER = """\
specgen: 1
name: s
inputs: {image: {shape: [8, 8, 1]}}
outputs: {y: fc}
layers:
  - {name: conv1, op: conv2d, filters: 4, kernel: 3, padding: same}
  - {name: pool1, op: max_pool, size: 2}
  - {name: flat, op: flatten}
  - {name: fc, op: dense, units: 2, kernel_init: glorot_uniform}
"""

SPELL = """\
specgen: 1
name: spell
inputs:
  image: {shape: [8, 8, 1]}
  seq: {shape: [6, 4]}
outputs: {y: fc, z: att, w: both}
layers:
  - {name: conv1, op: conv2d, input: image, filters: 4, kernel: 3, padding: same}
  - {name: pad1, op: pad, padding: 1}
  - {name: crop1, op: crop, cropping: 1}
  - {name: up1, op: upsample}
  - {name: tconv, op: conv2d_transpose, filters: 2, kernel: 3, output_padding: 0, strides: 2}
  - {name: pool1, op: max_pool, size: 2}
  - {name: flat, op: flatten}
  - {name: fc, op: dense, units: 2, kernel_init: glorot_uniform}
  - {name: rnn, op: bidirectional, input: seq, layer: {op: lstm, units: 4, return_sequences: true, recurrent_init: orthogonal}}
  - {name: att, op: multi_head_attention, inputs: [rnn, rnn], num_heads: 2, key_dim: 4}
  - {name: both, op: concat, inputs: [rnn, att]}
train: {batch_size: 4, epochs: 1, seed: 0}
"""

UNCHANGED = ["interface: unchanged", "layers: unchanged", "variables: unchanged", "training: unchanged",
             "export: unchanged", "other: unchanged"]


def diff(tmp_path, capsys, old: str, new: str, gates: str = "interface,checkpoint,layers") -> tuple[int, str, str]:
    write(tmp_path, **{"old.yaml": old, "new.yaml": new})
    return run(["diff", "old.yaml", "new.yaml", "--fail-on", gates], capsys, tmp_path)


def test_the_checkers_respelling_is_unchanged(tmp_path, capsys) -> None:
    new = (CHECKER.replace("kernel: 3, padding: same}", "kernel: [3, 3], padding: same, strides: [1, 1], "
                                                        "dilation: [1, 1]}")
           .replace("size: 2}", "size: [2, 2], strides: 2}")
           .replace("kernel_init: glorot_uniform}", "kernel_init: {kind: glorot_uniform}}"))
    code, out, err = diff(tmp_path, capsys, CHECKER, new)
    assert (code, err) == (0, "")
    assert [line for line in out.splitlines() if line.endswith("unchanged")] == UNCHANGED


@pytest.mark.parametrize("old, new", [
    ("kernel: 3, padding: same}", "kernel: [3, 3], padding: same}"),  # a scalar for a pair
    ("kernel: 3, padding: same}", "kernel: 3, padding: same, strides: [1, 1], dilation: 1}"),  # a default written
    ("{name: pad1, op: pad, padding: 1}", "{name: pad1, op: pad, padding: [1, 1]}"),  # [h, w]
    ("{name: pad1, op: pad, padding: 1}", "{name: pad1, op: pad, padding: [[1, 1], [1, 1]]}"),  # [[t, b], [l, r]]
    ("{name: crop1, op: crop, cropping: 1}", "{name: crop1, op: crop, cropping: [1, 1]}"),
    ("{name: up1, op: upsample}", "{name: up1, op: upsample, size: [2, 2]}"),
    ("output_padding: 0, strides: 2}", "output_padding: [0, 0], strides: [2, 2]}"),
    ("{name: pool1, op: max_pool, size: 2}", "{name: pool1, op: max_pool, size: 2, strides: [2, 2]}"),  # null: derived
    ("num_heads: 2, key_dim: 4}", "num_heads: 2, key_dim: 4, value_dim: 4}"),  # null: the key_dim
    ("inputs: [rnn, att]}", "inputs: [rnn, att], axis: 2}"),  # -1, resolved
    ("kernel_init: glorot_uniform}", "kernel_init: {kind: glorot_uniform}}"),  # a name for its mapping
    ("recurrent_init: orthogonal}", "recurrent_init: {kind: orthogonal, gain: 1.0}}"),  # ... defaults filled in
])
def test_each_kind_of_spelling_is_unchanged(tmp_path, capsys, old: str, new: str) -> None:
    assert old in SPELL
    code, out, err = diff(tmp_path, capsys, SPELL, SPELL.replace(old, new))
    assert (code, err) == (0, "")
    assert [line for line in out.splitlines() if line.endswith("unchanged")] == UNCHANGED


def test_a_metric_name_spelled_as_its_mapping_is_unchanged(tmp_path, capsys) -> None:
    old = MLP.replace("seed: 1}", "seed: 1, metrics: [accuracy]}")
    code, out, err = diff(tmp_path, capsys, old, old.replace("[accuracy]", "[{kind: accuracy}]"))
    assert (code, err) == (0, "")
    assert "\ntraining: unchanged\n" in out


def test_genuine_changes_are_still_rows_and_breaks_as_written(tmp_path, capsys) -> None:
    new = (SPELL.replace("kernel: 3, padding: same}", "kernel: [5, 5], padding: same, strides: 2}")
           .replace("{name: pad1, op: pad, padding: 1}", "{name: pad1, op: pad, padding: [[1, 0], [1, 1]]}")
           .replace("{name: pool1, op: max_pool, size: 2}", "{name: pool1, op: max_pool, size: 2, strides: 1}")
           .replace("num_heads: 2, key_dim: 4}", "num_heads: 2, key_dim: 4, value_dim: 2}"))
    code, out, err = diff(tmp_path, capsys, SPELL, new, "layers")
    assert code == 1
    assert section(out, "layers")[3:] == [
        "  changed  conv1.kernel   3     [5, 5]",
        "  changed  conv1.strides  1     2",
        "  changed  pad1.padding   1     [[1, 0], [1, 1]]",
        "  changed  pool1.strides  null  1",
        "  changed  att.value_dim  null  2",
    ]
    assert err.splitlines() == [
        "specgen diff: breaks layers: layer 'conv1': kernel changed from 3 to [5, 5]",
        "specgen diff: breaks layers: layer 'conv1': strides changed from 1 to 2",
        "specgen diff: breaks layers: layer 'pad1': padding changed from 1 to [[1, 0], [1, 1]]",
        "specgen diff: breaks layers: layer 'pool1': strides changed from null to 1",
        "specgen diff: breaks layers: layer 'att': value_dim changed from null to 2",
    ]


def test_a_genuine_initializer_change_is_a_training_row_as_written(tmp_path, capsys) -> None:
    new = (SPELL.replace("kernel_init: glorot_uniform}", "kernel_init: {kind: he_normal}}")
           .replace("recurrent_init: orthogonal}", "recurrent_init: {kind: orthogonal, gain: 2.0}}"))
    code, out, err = diff(tmp_path, capsys, SPELL, new, "layers")
    assert (code, err) == (0, "")
    assert section(out, "training")[3:] == [
        "  removed  layers[fc].kernel_init                 glorot_uniform",
        "  added    layers[fc].kernel_init.kind                            he_normal",
        "  removed  layers[rnn].layer.recurrent_init       orthogonal",
        "  added    layers[rnn].layer.recurrent_init.gain                  2.0",
        "  added    layers[rnn].layer.recurrent_init.kind                  orthogonal",
    ]


def test_a_genuine_metric_change_is_still_a_training_row(tmp_path, capsys) -> None:
    old = MLP.replace("seed: 1}", "seed: 1, metrics: [accuracy]}")
    code, out, err = diff(tmp_path, capsys, old, old.replace("[accuracy]", "[{kind: top_k_accuracy, k: 3}]"))
    assert (code, err) == (0, "")
    assert section(out, "training")[3:] == [
        "  removed  train.metrics          [\"accuracy\"]",
        "  added    train.metrics[0].k                   3",
        "  added    train.metrics[0].kind                top_k_accuracy",
    ]


@pytest.mark.parametrize("value", [0, 2, [1, 3], [[1, 2], [3, 4]]])
def test_the_padding_spelling_is_what_the_op_reads(value: object) -> None:
    """The type-derived spelling (each value repeated over a missing inner axis) agrees with padding.pairs."""
    layer = Pad.model_validate({"name": "p", "op": "pad", "padding": value})
    assert normalized(layer)["padding"] == [list(p) for p in pairs(layer.padding)]


@pytest.mark.parametrize("value", [3, [3, 5]])
def test_the_pair_spelling_is_what_the_op_reads(value: object) -> None:
    from specgen.kinds.ops.upsample import Upsample
    layer = Upsample.model_validate({"name": "u", "op": "upsample", "size": value})
    assert normalized(layer)["size"] == list(pair(layer.size))


# --- a scalar that means the one-item list (fields/unions.py ONE_ITEM), left alone at stop 44, fixed since ---------

def test_a_selection_written_as_one_pattern_is_its_one_item_list(tmp_path, capsys) -> None:
    """`variables: "*"` selects what `["*"]` does: it was a `changed optimizers.all.variables ["*"] *` row."""
    code, out, err = diff(tmp_path, capsys, MLP, MLP.replace('variables: ["*"]', 'variables: "*"'))
    assert (code, err) == (0, "")
    assert "\ntraining: unchanged\n" in out


def test_a_reduce_axis_written_as_one_axis_is_its_one_item_list(tmp_path, capsys) -> None:
    old = SPELL.replace("  - {name: flat, op: flatten}", "  - {name: red, op: reduce, kind: mean, axis: 1}\n"
                                                           "  - {name: flat, op: flatten}")
    code, out, err = diff(tmp_path, capsys, old, old.replace("kind: mean, axis: 1}", "kind: mean, axis: [1]}"))
    assert (code, err) == (0, "")
    assert [line for line in out.splitlines() if line.endswith("unchanged")] == UNCHANGED


def test_a_genuine_selection_change_is_still_a_row_as_written(tmp_path, capsys) -> None:
    code, out, err = diff(tmp_path, capsys, MLP, MLP.replace('variables: ["*"]', 'variables: ["*", "h1/*"]'))
    assert (code, err) == (0, "")
    assert section(out, "training")[3:] == ['  changed  optimizers.all.variables  ["*"]  ["*", "h1/*"]']


def test_only_unions_whose_scalar_is_one_item_are_marked() -> None:
    """A channel value's scalar is repeated over the channels (`mean: 0.5` is not `[0.5]` on 3 channels), a CSV
    label column's scalar gives a label of shape []: not marked, so a change between the two is a row."""
    from specgen.fields.losses import Selection
    from specgen.fields.unions import OneItem
    from specgen.kinds.ops.scaling import ChannelValues
    from specgen.kinds.sources.csv import Column

    def marked(tp: object) -> bool:
        return any(isinstance(m, OneItem) for m in getattr(tp, "__metadata__", ()))

    assert (marked(Selection), marked(ChannelValues), marked(Column)) == (True, False, False)


# --- a loss term is the one-item list of terms (review round 11, finding 2) ----------------------------------------

TERM = "loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}"
ONE_TERM = "loss:\n  - {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}"


def test_a_loss_written_as_one_term_is_its_one_item_list(tmp_path, capsys) -> None:
    """It was `training: 10 change(s)`: every `loss.*` key removed and every `loss[None].*` key added."""
    assert TERM in MLP
    code, out, err = diff(tmp_path, capsys, MLP, MLP.replace(TERM, ONE_TERM))
    assert (code, err) == (0, "")
    assert "\ntraining: unchanged\n" in out


def test_unnamed_loss_terms_are_rows_by_their_index(tmp_path, capsys) -> None:
    """A term's name is null unless written: its rows said `loss[None]`, and two unnamed terms shared them."""
    old = MLP.replace(TERM, ONE_TERM)
    new = old.replace(ONE_TERM, ONE_TERM + "\n  - {kind: l2, variables: trainable, weight: 0.001}"
                                           "\n  - {kind: l1, variables: trainable, weight: 0.5, name: sparse}")
    code, out, err = diff(tmp_path, capsys, old, new)
    assert (code, err) == (0, "")
    assert section(out, "training")[3:] == [
        "  added   loss[1].kind                 l2",
        "  added   loss[1].name                 null",
        "  added   loss[1].variables            trainable",
        "  added   loss[1].weight               0.001",
        "  added   loss[sparse].kind            l1",
        "  added   loss[sparse].name            sparse",
        "  added   loss[sparse].variables       trainable",
        "  added   loss[sparse].weight          0.5",
    ]


def test_every_union_whose_single_form_is_one_item_is_marked() -> None:
    """The spec's scalar-or-list and mapping-or-list unions (fields/unions.py by_shape) whose single form means the
    one-item list: a loss term, a selection, a reduce axis, a TFRecord file. The loss was left out in round 11."""
    from specgen.fields.losses import Selection
    from specgen.fields.unions import OneItem
    from specgen.kinds.losses import Loss
    from specgen.kinds.ops.reduce import Axes
    from specgen.kinds.sources.tfrecord import Files

    def marked(tp: object) -> bool:
        return any(isinstance(m, OneItem) for m in getattr(tp, "__metadata__", ()))

    assert [marked(tp) for tp in (Loss, Selection, Axes, Files)] == [True] * 4
