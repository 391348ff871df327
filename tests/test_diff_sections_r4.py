"""`specgen diff` after red-team round 4 (findings 3, 4, 5): which interface changes break a client that sends and
reads as before (docs/review.md#interface-changes), settings that only change how a layer trains (the op registry's
`training_only`) as training rows instead of layer breaks, and the spec keys that no section showed (`checkpoint.*`,
`doc`, `lints`, `sweep`). No TensorFlow: the ONNX claims are checked on the model.onnx `specgen build` writes."""

from __future__ import annotations

import typing
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli as run
from test_diff_sections import section, served, write

from specgen.ir.resolve import build_ir
from specgen.kinds.initializers import InitializerSpec
from specgen.kinds.ops import REGISTRY
from specgen.render.files import render_files
from specgen.spec.load import load_spec

TCN = """\
specgen: 1
name: tcn
inputs:
  x: {shape: [seq, 8]}
outputs:
  logits: head
  feats: down
layers:
  - {name: c1, op: conv1d, input: x, filters: 8, kernel: 3, padding: causal, activation: relu}
  - {name: down, op: conv1d, filters: 16, kernel: 3, strides: 2, padding: same}
  - {name: pool, op: global_avg_pool}
  - {name: head, op: dense, units: 4}
"""

TWO = """\
specgen: 1
name: two
inputs:
  x: {shape: [seq, 4]}
  y: {shape: [len, 4]}
outputs:
  out: sum
layers:
  - {name: px, op: global_avg_pool, input: x}
  - {name: py, op: global_avg_pool, input: y}
  - {name: sum, op: add, inputs: [px, py]}
"""

MLP = """\
specgen: 1
name: mlp
doc: A small classifier.
inputs:
  image: {shape: [8, 8, 1]}
outputs:
  logits: out
layers:
  - {name: flat, op: flatten}
  - {name: h1, op: dense, units: 32, activation: relu}
  - {name: bn, op: batch_norm, momentum: 0.9}
  - {name: drop, op: dropout, rate: 0.1}
  - {name: h2, op: dense, units: 32, activation: relu}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {variables: ["*"], kind: adam, learning_rate: 0.01}
train: {batch_size: 32, epochs: 1, seed: 1}
checkpoint: {dir: runs/base, every_steps: 5}
"""


# --- finding 3: interface ------------------------------------------------------------------------------------------

def test_a_renamed_named_dim_is_compatible_derived_output_dims_included(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"tcn.yaml": TCN, "time.yaml": TCN.replace("[seq, 8]", "[time, 8]")})
    code, out, err = run(["diff", "tcn.yaml", "time.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert section(out, "interface") == [
        "2 change(s)",
        "  change      what          old                              new",
        "  ----------  ------------  -------------------------------  --------------------------------",
        "  compatible  input x       float32[batch, seq, 8]           float32[batch, time, 8]",
        "  compatible  output feats  float32[batch, ceil(seq/2), 16]  float32[batch, ceil(time/2), 16]",
    ]
    # the two model.onnx files differ in their dim_param names only
    assert served(tmp_path, "tcn.yaml") == {"x": ["batch", "seq", 8], "logits": ["batch", 4],
                                            "feats": ["batch", "ceil(seq/2)", 16]}
    assert served(tmp_path, "time.yaml") == {"x": ["batch", "time", 8], "logits": ["batch", 4],
                                             "feats": ["batch", "ceil(time/2)", 16]}


def test_a_renamed_dim_whose_derived_output_changes_breaks_only_that_output(tmp_path: Path, capsys) -> None:
    new = TCN.replace("[seq, 8]", "[time, 8]").replace("strides: 2, padding: same", "strides: 3, padding: same")
    write(tmp_path, **{"tcn.yaml": TCN, "time3.yaml": new})
    code, out, err = run(["diff", "tcn.yaml", "time3.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert code == 1
    assert section(out, "interface")[3:5] == [
        "  compatible  input x       float32[batch, seq, 8]           float32[batch, time, 8]",
        "  changed     output feats  float32[batch, ceil(seq/2), 16]  float32[batch, ceil(time/3), 16]",
    ]
    assert err == ("specgen diff: breaks interface: output 'feats' changed from float32[batch, ceil(seq/2), 16] to "
                   "float32[batch, ceil(time/3), 16]: clients that read it as before fail\n")


def test_a_fixed_batch_made_dynamic_is_widening_and_the_reverse_still_breaks(tmp_path: Path, capsys) -> None:
    fixed = "extends: base.yaml\nexport: {onnx: {dynamic_batch: false}}\n"
    write(tmp_path, **{"base.yaml": MLP, "fixed.yaml": fixed})
    code, out, err = run(["diff", "fixed.yaml", "base.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert section(out, "interface")[3:] == [
        "  compatible  input image    float32[1, 8, 8, 1]  float32[batch, 8, 8, 1]",
        "  compatible  output logits  float32[1, 10]       float32[batch, 10]",
    ]
    code, out, err = run(["diff", "base.yaml", "fixed.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "specgen diff: breaks interface: input 'image' changed from float32[batch, 8, 8, 1] to float32[1, 8, 8, 1]: "
        "clients that send it as before fail",
        "specgen diff: breaks interface: output 'logits' changed from float32[batch, 10] to float32[1, 10]: clients "
        "that read it as before fail"]
    # what a batch-1 client of the fixed model sends, the dynamic one answers at the same shape, with the same numbers
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(0).normal(size=(1, 8, 8, 1)).astype(np.float32)
    answers = []
    for spec in ("fixed.yaml", "base.yaml"):
        ir = build_ir(load_spec(tmp_path / spec))
        weights = {v.onnx_name: np.full(v.onnx_shape, 0.01, np.float32) for v in ir.model_variables}
        answers.append(ort.InferenceSession(render_files(ir)["model.onnx"]).run(None, {"image": x} | weights)[0])
    assert answers[0].shape == answers[1].shape == (1, 10) and answers[0].tobytes() == answers[1].tobytes()


def test_named_dims_tied_into_one_break_and_split_apart_are_widening(tmp_path: Path, capsys) -> None:
    tied = TWO.replace("[len, 4]", "[seq, 4]")
    write(tmp_path, **{"two.yaml": TWO, "tied.yaml": tied})
    code, out, err = run(["diff", "two.yaml", "tied.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert code == 1
    assert err == ("specgen diff: breaks interface: input 'y' changed from float32[batch, len, 4] to "
                   "float32[batch, seq, 4]: clients that send it as before fail ('seq' now stands for len, seq: "
                   "they must be equal)\n")
    code, out, err = run(["diff", "tied.yaml", "two.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert section(out, "interface")[3:] == [
        "  compatible  input y  float32[batch, seq, 4]  float32[batch, len, 4]"]
    # two names that trade places are a renaming too: every request still fits
    write(tmp_path, **{"swap.yaml": TWO.replace("[seq, 4]", "[tmp, 4]").replace("[len, 4]", "[seq, 4]")
                       .replace("[tmp, 4]", "[len, 4]")})
    code, out, err = run(["diff", "two.yaml", "swap.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert [row.split()[:3] for row in section(out, "interface")[3:]] == [
        ["compatible", "input", "x"], ["compatible", "input", "y"]]


def test_a_named_dim_made_fixed_or_a_fixed_size_changed_breaks(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"tcn.yaml": TCN, "ten.yaml": TCN.replace("[seq, 8]", "[10, 8]"),
                       "twenty.yaml": TCN.replace("[seq, 8]", "[20, 8]"),
                       "named.yaml": TCN.replace("[seq, 8]", "[time, 8]")})
    code, _, err = run(["diff", "tcn.yaml", "ten.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "specgen diff: breaks interface: input 'x' changed from float32[batch, seq, 8] to float32[batch, 10, 8]: "
        "clients that send it as before fail",
        "specgen diff: breaks interface: output 'feats' changed from float32[batch, ceil(seq/2), 16] to "
        "float32[batch, 5, 16]: clients that read it as before fail"]
    code, _, err = run(["diff", "ten.yaml", "twenty.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert code == 1 and err.startswith("specgen diff: breaks interface: input 'x' changed from float32[batch, 10, 8] "
                                        "to float32[batch, 20, 8]")
    # 10 made `time`: every request of OLD still fits, and its `feats` is ceil(10/2) = 5 as before
    code, out, err = run(["diff", "ten.yaml", "named.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert [row.split()[0] for row in section(out, "interface")[3:]] == ["compatible", "compatible"]


def test_a_dim_named_as_a_python_keyword_is_compared_by_value(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"tcn.yaml": TCN, "kw.yaml": TCN.replace("[seq, 8]", "[if, 8]")})
    code, out, err = run(["diff", "tcn.yaml", "kw.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert "  compatible  output feats  float32[batch, ceil(seq/2), 16]  float32[batch, ceil(if/2), 16]" in out



# A derived dimension that differs only at some remainders of its names: every remainder is compared, not a few
# random sizes (red team round 4 review, F1: four sizes from a fixed seed, all even, called these compatible).
CONV = "specgen: 1\nname: c\ninputs:\n  x: {{shape: [{shape}]}}\noutputs:\n  feats: down\nlayers:\n" \
       "  - {{name: down, op: {op}, input: x, filters: 4, kernel: {kernel}, strides: {strides}, padding: {padding}}}\n"


@pytest.mark.parametrize(("shape", "op", "kernel", "strides", "old", "new", "request_", "steps"), [
    # stride 2 same -> valid: ceil(seq/2) against ceil((seq-1)/2), 3 steps against 2 at seq = 5
    ("seq, 8", "conv1d", 2, 2, "[batch, ceil(seq/2), 4]", "[batch, ceil((seq-1)/2), 4]", (1, 5, 8), (3, 2)),
    # stride 4: they differ only where seq is 1 modulo 4 (1 step against 0 at seq = 1, 2 against 1 at seq = 5)
    ("seq, 8", "conv1d", 2, 4, "[batch, ceil(seq/4), 4]", "[batch, ceil((seq-1)/4), 4]", (1, 5, 8), (2, 1)),
    # two names: only the width is strided, and only an odd width tells the two apart
    ("height, width, 3", "conv2d", "[1, 2]", "[1, 2]", "[batch, height, ceil(width/2), 4]",
     "[batch, height, ceil((width-1)/2), 4]", (1, 2, 3, 3), (2, 1)),
])
def test_an_output_dim_that_differs_only_at_some_remainders_breaks(
        tmp_path: Path, capsys, shape: str, op: str, kernel: object, strides: object, old: str, new: str,
        request_: tuple[int, ...], steps: tuple[int, int]) -> None:
    write(tmp_path, **{f"{p}.yaml": CONV.format(shape=shape, op=op, kernel=kernel, strides=strides, padding=p)
                       for p in ("same", "valid")})
    for a, b in (("same", "valid"), ("valid", "same")):
        code, _, err = run(["diff", f"{a}.yaml", f"{b}.yaml", "--fail-on", "interface"], capsys, tmp_path)
        x, y = (old, new) if a == "same" else (new, old)
        assert code == 1
        dim = shape.split(",")[-2].strip()  # `valid` needs 2 steps of kernel 2 along it (r12: a raised minimum)
        raised = (f"specgen diff: breaks interface: input 'x': NEW needs {dim} >= 2 (layer 'down' ({op}) needs at "
                  f"least 2); OLD served {dim} >= 1: clients that send a shorter '{dim}' fail\n") if a == "same" else ""
        assert err == (f"specgen diff: breaks interface: output 'feats' changed from float32{x} to float32{y}: "
                       "clients that read it as before fail\n") + raised
    assert served(tmp_path, "same.yaml")["feats"] == [*old[1:-4].split(", "), 4]
    # the break is real: one request, answered at another shape by each model.onnx
    ort = pytest.importorskip("onnxruntime")
    x = np.ones(request_, np.float32)
    for padding, answered in zip(("same", "valid"), steps, strict=True):
        ir = build_ir(load_spec(tmp_path / f"{padding}.yaml"))
        weights = {v.onnx_name: np.full(v.onnx_shape, 0.01, np.float32) for v in ir.model_variables}
        out = ort.InferenceSession(render_files(ir)["model.onnx"]).run(None, {"x": x} | weights)[0]
        assert out.shape == (*request_[:-2], answered, 4)


def test_outputs_equal_at_every_size_stay_compatible_however_they_are_written(tmp_path: Path, capsys) -> None:
    """Two stride-2 layers and one stride-4 layer answer ceil(ceil(seq/2)/2) = ceil(seq/4) steps at every seq."""
    two = CONV.format(shape="seq, 8", op="conv1d", kernel=1, strides=2, padding="same") + \
        "  - {name: down2, op: conv1d, filters: 4, kernel: 1, strides: 2, padding: same}\n"
    write(tmp_path, **{"two.yaml": two.replace("feats: down", "feats: down2"),
                       "one.yaml": CONV.format(shape="seq, 8", op="conv1d", kernel=1, strides=4, padding="same")})
    code, out, err = run(["diff", "two.yaml", "one.yaml", "--fail-on", "interface"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert section(out, "interface")[3:] == [
        "  compatible  output feats  float32[batch, ceil(ceil(seq/2)/2), 4]  float32[batch, ceil(seq/4), 4]"]


@pytest.mark.parametrize(("old", "new", "stands", "agree"), [
    ("floor(seq/2)", "ceil(seq/2)", {}, False),  # floor against ceil: apart at every odd seq
    ("floor(seq/2)", "ceil((seq-1)/2)", {}, True),  # the same function, written two ways
    ("ceil(ceil(seq/2)/3)", "ceil(seq/6)", {}, True),  # nested strides: a period of 6
    ("ceil(seq/6)", "ceil((seq+1)/6)", {}, False),  # apart only where seq is 0 modulo 6
    ("ceil(seq/2)+len", "len+ceil(time/2)", {"time": {"seq"}, "len": {"len"}}, True),  # two names, one renamed
    ("ceil(seq/2)+len", "len+ceil(time/2)", {"time": {"len"}, "len": {"seq"}}, False),  # ... or swapped
    ("ceil(seq*len/2)", "ceil(seq/2)*len", {}, False),  # a product: apart where seq and len are both odd
    ("floor(seq*seq/3)", "ceil((seq*seq-2)/3)", {}, True),  # a square: a period of 3 * 2! = 6 bounds it
])
def test_dims_are_compared_at_every_remainder(old: str, new: str, stands: dict[str, set[int | str]],
                                              agree: bool) -> None:
    from specgen.review.interface import _output_break
    assert (_output_break(("float32", (old,)), ("float32", (new,)), stands) is None) is agree

# --- finding 4: training-only settings -----------------------------------------------------------------------------

def test_training_only_settings_are_training_rows_not_layer_breaks(tmp_path: Path, capsys) -> None:
    new = (MLP.replace("momentum: 0.9}", "momentum: 0.5, sync: true}").replace("rate: 0.1}", "rate: 0.4}")
           .replace("units: 32, activation: relu}\n  - {name: out",
                    "units: 32, activation: relu, kernel_init: he_normal, bias_init: {kind: constant, value: 0.5}}\n"
                    "  - {name: out"))
    write(tmp_path, **{"a.yaml": MLP, "b.yaml": new})
    code, out, err = run(["diff", "a.yaml", "b.yaml", "--fail-on", "interface,checkpoint,layers"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert "\nlayers: unchanged\n" in out
    assert section(out, "training") == [
        "7 change(s)",
        "  change   what                        old             new",
        "  -------  --------------------------  --------------  ---------",
        "  changed  layers[bn].momentum         0.9             0.5",
        "  changed  layers[bn].sync             false           true",
        "  changed  layers[drop].rate           0.1             0.4",
        "  removed  layers[h2].bias_init        zeros",
        "  added    layers[h2].bias_init.kind                   constant",
        "  added    layers[h2].bias_init.value                  0.5",
        "  changed  layers[h2].kernel_init      glorot_uniform  he_normal",
    ]


def test_a_setting_that_changes_inference_still_breaks_beside_a_training_one(tmp_path: Path, capsys) -> None:
    new = (MLP.replace("momentum: 0.9}", "momentum: 0.9, epsilon: 0.01}")
           .replace("units: 32, activation: relu}\n  - {name: out", "units: 48, activation: tanh, kernel_init: "
                    "he_normal}\n  - {name: out"))
    write(tmp_path, **{"a.yaml": MLP, "b.yaml": new})
    code, out, err = run(["diff", "a.yaml", "b.yaml", "--fail-on", "layers"], capsys, tmp_path)
    assert code == 1
    assert err.splitlines() == [
        "specgen diff: breaks layers: layer 'bn': epsilon changed from 0.001 to 0.01",
        "specgen diff: breaks layers: layer 'h2': activation changed from relu to tanh",
        "specgen diff: breaks layers: layer 'h2': units changed from 32 to 48",
    ]
    assert section(out, "training")[3:] == ["  changed  layers[h2].kernel_init  glorot_uniform  he_normal"]


def test_a_renamed_layer_with_a_new_initializer_is_a_rename_and_a_training_row(tmp_path: Path, capsys) -> None:
    new = MLP.replace("{name: h2, op: dense, units: 32, activation: relu}",
                      "{name: hidden2, op: dense, units: 32, activation: relu, kernel_init: he_uniform}")
    write(tmp_path, **{"a.yaml": MLP, "b.yaml": new})
    code, out, err = run(["diff", "a.yaml", "b.yaml", "--fail-on", "layers"], capsys, tmp_path)
    assert (code, err) == (0, "")
    assert section(out, "layers")[3:] == ["  renamed  hidden2  h2   hidden2"]
    assert section(out, "training")[3:] == ["  changed  layers[hidden2].kernel_init  glorot_uniform  he_uniform"]


def test_every_initializer_key_of_every_op_is_training_only_and_each_declared_key_exists() -> None:
    initializer = typing.get_args(InitializerSpec)[0]
    for name, op in REGISTRY.items():
        fields = op.spec.model_fields
        inits = {key for key, f in fields.items() if f.annotation == initializer}
        assert inits <= set(op.training_only), f"{name}: {sorted(inits - set(op.training_only))} not training_only"
        for key in op.training_only:
            head, _, rest = key.partition(".")
            assert head in fields, f"{name}: training_only names {key!r}, not a key of the op"
            if rest:  # a wrapped layer's key (bidirectional's `layer.kernel_init`): a key of one of its ops
                members = typing.get_args(fields[head].annotation) or (fields[head].annotation,)
                assert any(rest in m.model_fields for m in members), f"{name}: {key!r}"
    assert REGISTRY["batch_norm"].training_only == ("momentum", "sync")
    assert "epsilon" not in REGISTRY["batch_norm"].training_only and REGISTRY["dropout"].training_only == ("rate",)


# --- finding 5: checkpoint.*, doc, lints, sweep --------------------------------------------------------------------

def test_checkpoint_doc_and_lints_changes_are_rows(tmp_path: Path, capsys) -> None:
    new = ("extends: a.yaml\ndoc: Another text,\n  on two lines.\n"
           "checkpoint: {keep: 7, every_steps: 1000, dir: elsewhere, restore: [{from: runs/pretrained}]}\n"
           "lints: {skip: [init_scale]}\n")
    write(tmp_path, **{"a.yaml": MLP, "b.yaml": new})
    code, out, err = run(["diff", "a.yaml", "b.yaml", "--fail-on", "interface,checkpoint,layers"], capsys, tmp_path)
    assert (code, err) == (0, "")
    training = section(out, "training")
    assert training[0] == "8 change(s)"
    assert [row.split()[:3] for row in training[3:]] == [
        ["changed", "checkpoint.dir", "runs/base"],
        ["changed", "checkpoint.every_steps", "5"],
        ["changed", "checkpoint.keep", "3"],
        ["added", "checkpoint.restore[0].ema_to_model", "false"],
        ["added", "checkpoint.restore[0].exclude", "[]"],
        ["added", "checkpoint.restore[0].from", "runs/pretrained"],
        ["added", "checkpoint.restore[0].map", "[]"],
        ["added", "checkpoint.restore[0].strict", "false"],
    ]
    assert "checkpoint.restore  " not in out  # the empty list it replaced is no row of its own
    assert section(out, "other")[3:] == [
        "  changed  doc         A small classifier.  Another text, on two lines.",
        "  changed  lints.skip  []                   [\"init_scale\"]",
    ]
    # a restore entry that now reads another checkpoint is a row of its own
    write(tmp_path, **{"c.yaml": "extends: b.yaml\ncheckpoint: {restore: [{from: runs/other}]}\n"})
    code, out, err = run(["diff", "b.yaml", "c.yaml"], capsys, tmp_path)
    assert code == 0
    assert section(out, "training")[1:] == [
        "  change   what                        old              new",
        "  -------  --------------------------  ---------------  ----------",
        "  changed  checkpoint.restore[0].from  runs/pretrained  runs/other"]


def test_a_doc_with_line_breaks_stays_one_row(tmp_path: Path, capsys) -> None:
    write(tmp_path, **{"a.yaml": MLP, "b.yaml": 'extends: a.yaml\ndoc: "one\\ntwo\\u001b[31m"\n'})
    code, out, _ = run(["diff", "a.yaml", "b.yaml"], capsys, tmp_path)
    assert code == 0
    assert section(out, "other")[3:] == ["  changed  doc   A small classifier.  one\\ntwo\\x1b[31m"]
