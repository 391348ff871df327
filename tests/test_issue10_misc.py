"""Issue 10, "also in this issue": value errors name their key, optional optimizer `variables`,
outputs named like their layer, printed paths, TensorFlow's `checkpoint` state file, escaped
spec names in Triton configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.diagnostics import SpecError
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SMALL = """\
specgen: 1
name: small
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: out}
layers:
  - {name: flat, op: flatten}
  - {name: hidden, op: dense, units: 8, activation: relu}
  - {name: out, op: dense, units: 10}
"""


def messages(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, "s.yaml")
    return [str(d) for d in caught.value.diagnostics]


# --- value errors name their key ---------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "expected"), [
    ("units: 10}", "units: -3}", "s.yaml:8:35: error: units: received -3, expected a value > 0 (in layer 'out')"),
    ("units: 8,", "units: eight,", "s.yaml:7:38: error: units: expected an integer, received 'eight' (str) "
                                   "(in layer 'hidden')"),
    ("shape: [8, 8, 1]", "shape: [8, -1, 1]", "s.yaml:3:29: error: shape[1]: received -1, expected a value > 0"),
    ("name: small", "name: 2small", "s.yaml:2:7: error: name: invalid name '2small': expected an ASCII letter, then "
                                    "ASCII letters and digits with single '_' between them"),
    ("op: flatten}", "op: flatten, input: [image]}", "s.yaml:6:38: error: input: expected a string, received "
                                                     "[image] (a list) (in layer 'flat')"),
], ids=["bound", "type", "list_item", "name", "wrong_type_in_layer"])
def test_a_value_error_names_its_key_and_keeps_its_position(old: str, new: str, expected: str) -> None:
    assert messages(SMALL.replace(old, new)) == [expected]


def test_messages_that_name_their_key_already_are_not_prefixed() -> None:
    text = SMALL.replace("units: 10}", "unitz: 10}").replace("op: flatten", "op: flaten")
    found = messages(text)
    assert found[0].startswith("s.yaml:6:22: error: unknown op 'flaten'; did you mean 'flatten'?")
    assert found[1] == "s.yaml:8:28: error: unknown key 'unitz'; did you mean 'units'? (in layer 'out')"
    assert messages(SMALL.replace("specgen: 1", "specgen: 2")) == [
        "s.yaml:1:10: error: unsupported spec format version 2; this specgen reads version 1"]


# --- optimizers without `variables` -------------------------------------------------------------

CNN = (ROOT / "examples" / "specs" / "digits_cnn.yaml").read_text()


def resolve(text: str) -> ModelIR:
    return build_ir(load_spec_text(text, "cnn.yaml", ROOT / "examples" / "specs" / "cnn.yaml"))


def resolve_errors(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        resolve(text)
    return [str(d) for d in caught.value.diagnostics]


@pytest.mark.parametrize("written", ["", "    variables: trainable\n", "    variables: [trainable]\n"],
                         ids=["left_out", "trainable", "trainable_list"])
def test_an_optimizer_without_variables_takes_every_weight_left(written: str) -> None:
    ir = resolve(CNN.replace("    variables: head\n", written))
    explicit = resolve(CNN)
    assert ir.optimizers == explicit.optimizers  # head takes head/*: all that body leaves
    assert list(ir.optimizers) == ["body", "head"]  # spec order, as train.py applies them
    assert ir.collections["trainable"] == explicit.collections["trainable"]


def test_frozen_weights_are_not_taken_and_a_single_optimizer_needs_no_selection() -> None:
    text = CNN.replace("    variables: head\n", "").replace("    variables: backbone\n", '    variables: ["head/fc/*"]\n')
    ir = resolve(text.replace("collections:\n", "frozen: [backbone]\ncollections:\n", 1))
    assert ir.optimizers["head"] == ("head/out/kernel", "head/out/bias")
    assert ir.collections["frozen"] == ("conv1/kernel", "conv1/bias", "bn1/gamma", "bn1/beta")
    single = SMALL + ("loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}\n"
                      "optimizers: {all: {kind: adam, learning_rate: 0.001}}\n")
    assert resolve(single).optimizers == {"all": ("hidden/kernel", "hidden/bias", "out/kernel", "out/bias")}


def test_two_optimizers_taking_the_rest_is_a_positioned_error() -> None:
    both = CNN.replace("    variables: head\n", "").replace("    variables: backbone\n", "")
    assert resolve_errors(both) == [
        "cnn.yaml:35:3: error: optimizer 'head' takes every weight that is not frozen or claimed by another "
        "optimizer (no 'variables', or 'trainable'), and so does optimizer 'body'; only one optimizer may: give "
        "the others their 'variables'"]
    written = CNN.replace("    variables: head\n", "    variables: trainable\n").replace(
        "    variables: backbone\n", "")
    assert resolve_errors(written)[0].startswith("cnn.yaml:36:16: error: optimizer 'head' takes every weight")


def test_nothing_left_and_trainable_among_other_entries_are_errors() -> None:
    greedy = CNN.replace("    variables: head\n", "").replace("    variables: backbone\n", '    variables: ["*"]\n')
    assert resolve_errors(greedy) == [
        "cnn.yaml:36:3: error: optimizer 'head' takes every weight that is not frozen or claimed by another "
        "optimizer, but none is left; remove the optimizer, or give it 'variables'"]
    mixed = resolve_errors(CNN.replace("    variables: head\n", "    variables: [trainable, head]\n"))
    assert mixed[0].startswith("cnn.yaml:37:17: error: collection 'trainable' is resolved from the optimizers")


def test_report_shows_what_an_optimizer_without_variables_took(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.cli import main

    spec = tmp_path / "cnn.yaml"
    spec.write_text(CNN.replace("    variables: head\n", "").replace("../data/", f"{DIGITS.parent}/"))
    assert main(["report", str(spec)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:6] == ["head", "adam", "4", "17,098", "left", "out"] and "head/out/bias" in line
               for line in lines)
    assert "The rest: every weight that is not frozen and not claimed by another optimizer." in lines


def test_schema_lets_variables_be_left_out() -> None:
    import json

    schema = json.loads((ROOT / "schemas" / "specgen.schema.json").read_text())
    adam = schema["$defs"]["Adam"]
    assert "variables" not in adam["required"]
    assert "trainable" in adam["properties"]["variables"]["description"]


# --- an output named like the layer it reads ----------------------------------------------------

SAME_NAME = f"""\
specgen: 1
name: same_name
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: OUTPUTS
layers:
  - {{name: conv, op: conv2d, filters: 4, kernel: 3, padding: same, activation: relu}}
  - {{name: bn, op: batch_norm}}
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 16, activation: relu}}
  - {{name: drop, op: dropout, rate: 0.2}}
  - {{name: logits, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{kind: adam, learning_rate: 0.003}}}}
train: {{batch_size: 16, metrics: [accuracy], seed: 3}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
  eval: {{npz: {DIGITS}, features: {{image: x_test}}, labels: {{label: y_test}}}}
checkpoint: {{dir: run, every_steps: 100}}
"""
# A channels-first tensor (conv, batch_norm) read by an output of its own name, and an output reading
# a dropout whose input another output renamed, are the cases render/onnx_plan.py bind_outputs handles.
SAME_NAME_CASES = [
    pytest.param("{logits: logits}", id="logits"),
    pytest.param("{logits: logits, scores: logits, hidden: hidden, drop: drop, flat: flat}", id="dense_side"),
    pytest.param("{conv: conv, bn: bn, logits: logits}", id="channels_first"),
    pytest.param("{h: hidden, d: drop, logits: logits}", id="dropout_alias"),
]


@pytest.mark.parametrize("outputs", SAME_NAME_CASES)
def test_outputs_named_like_their_layers_validate_and_build(outputs: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from specgen.cli import main

    spec = tmp_path / "spec.yaml"
    spec.write_text(SAME_NAME.replace("OUTPUTS", outputs))
    assert main(["validate", str(spec)]) == 0
    assert main(["build", str(spec), "--out", str(tmp_path / "gen")]) == 0, capsys.readouterr().err
    assert (tmp_path / "gen" / "same_name" / "model.onnx").is_file()


@pytest.mark.parametrize("outputs", [SAME_NAME_CASES[1], SAME_NAME_CASES[2]])
def test_outputs_named_like_their_layers_train_and_export(outputs: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import onnx

    from specgen.cli import main

    spec = tmp_path / "spec.yaml"
    spec.write_text(SAME_NAME.replace("OUTPUTS", outputs))
    assert main(["train", str(spec), "--steps", "3", "--quiet"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    code = main(["export", str(spec), "--checkpoint", str(tmp_path / "run"), "-o", str(tmp_path / "out"), "--triton"])
    assert code == 0, capsys.readouterr().err
    assert "parity: max abs diff" in capsys.readouterr().out
    model = onnx.load(str(tmp_path / "out" / "model.onnx"))
    names = [o.name for o in model.graph.output]
    assert names == [part.split(":")[0].strip() for part in outputs.strip("{}").split(",")]
    config = (tmp_path / "out" / "same_name" / "config.pbtxt").read_text()
    assert all(f'name: "{name}"' in config for name in names)


# --- printed paths and TensorFlow's checkpoint state file ---------------------------------------

def test_shown_is_relative_under_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specgen.paths import shown

    monkeypatch.chdir(tmp_path)
    assert shown(tmp_path / "runs" / "x" / "ckpt-00000066") == "runs/x/ckpt-00000066"
    assert shown(tmp_path) == "."
    assert shown(str(tmp_path / "a" / ".." / "b")) == "b"
    assert shown("runs/x") == "runs/x"  # given relative: as it is
    assert shown("/elsewhere/runs/x") == "/elsewhere/runs/x"  # outside: absolute, as it is
    assert shown(f"{tmp_path}x/y") == f"{tmp_path}x/y"  # a sibling with a common prefix is outside


TRAINABLE = SMALL + f"""\
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers: {{all: {{kind: adam, learning_rate: 0.003}}}}
train: {{batch_size: 16, seed: 1}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
  eval: {{npz: {DIGITS}, features: {{image: x_test}}, labels: {{label: y_test}}}}
checkpoint: {{dir: run, every_steps: 2, keep: 2}}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with checkpoints of steps 4 and 6 (2 pruned), trained from outside its folder."""
    from specgen.cli import main

    folder = tmp_path_factory.mktemp("trained")
    (folder / "spec.yaml").write_text(TRAINABLE)
    assert main(["train", str(folder / "spec.yaml"), "--steps", "6", "--quiet"]) == 0
    return folder


def test_tensorflow_reads_the_run_folder_with_its_own_functions(trained: Path, tmp_path: Path) -> None:
    import shutil

    import tensorflow as tf

    run = trained / "run"
    assert tf.train.latest_checkpoint(str(run)) == str(run / "ckpt-00000006" / "variables")
    assert int(tf.train.load_checkpoint(str(run)).get_tensor("global_step")) == 6
    state = tf.train.get_checkpoint_state(str(run))
    assert [Path(p).parent.name for p in state.all_model_checkpoint_paths] == ["ckpt-00000004", "ckpt-00000006"]
    text = (run / "checkpoint").read_text()
    assert str(trained) not in text and 'model_checkpoint_path: "ckpt-00000006/variables"' in text  # relative
    moved = tmp_path / "moved"
    shutil.copytree(run, moved)
    assert tf.train.latest_checkpoint(str(moved)) == str(moved / "ckpt-00000006" / "variables")


def test_paths_print_relative_and_resume_prune_fresh_handle_the_state_file(
        trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    import tensorflow as tf

    from specgen.cli import main

    work = tmp_path / "work"
    shutil.copytree(trained, work)
    monkeypatch.chdir(work)
    spec, run = str(work / "spec.yaml"), work / "run"
    capsys.readouterr()
    (run / f".checkpoint.{123}.abcd1234.tmp").write_text("half")  # what a kill inside write_atomic leaves
    assert main(["train", spec, "--resume", "--steps", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "note: removed what an interrupted save left in run: .checkpoint.123.abcd1234.tmp" in out
    assert "resumed from run/ckpt-00000006 at step 6" in out  # `latest` decides, not TF's file
    assert out.rstrip().endswith("step 8, checkpoint run/ckpt-00000008")
    assert str(work) not in out
    state = tf.train.get_checkpoint_state(str(run))
    assert [Path(p).parent.name for p in state.all_model_checkpoint_paths] == ["ckpt-00000006", "ckpt-00000008"]

    assert main(["train", spec, "--steps", "1", "--quiet"]) == 1  # a new run refuses the folder
    assert capsys.readouterr().err.startswith("run: error: the run folder already holds ckpt-00000008 and 1 more")

    assert main(["export", spec, "--checkpoint", str(run), "-o", str(work / "out"), "--triton"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("exported out/model.onnx: ") and lines[0].endswith("from run/ckpt-00000008/variables")
    assert lines[-1] == "triton model repository: out/small, version 1"
    assert main(["infer", str(work / "out" / "model.onnx"), "--input", str(DIGITS), "--feed", "image=x_test",
                 "--output", str(work / "out" / "y")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "wrote out/y.npz"

    (run / "latest").unlink()  # specgen falls back to the newest in save order, TF's file or not
    assert main(["train", spec, "--resume", "--steps", "1", "--quiet"]) == 0
    assert "note: run/latest is missing; using ckpt-00000008" in capsys.readouterr().out

    assert main(["train", spec, "--fresh", "--steps", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert ("--fresh: moved the previous run (checkpoint, ckpt-00000008, ckpt-00000009, code, latest, provenance.json, "
            "spec.resolved.yaml, tensorboard) to run/previous-1") in out
    assert tf.train.latest_checkpoint("run/previous-1") == "run/previous-1/ckpt-00000009/variables"
    assert tf.train.latest_checkpoint("run") == "run/ckpt-00000002/variables"


def test_a_folder_holding_only_the_state_file_is_not_taken_over(tmp_path: Path) -> None:
    from specgen.runtime.checkpoint import CheckpointFolder

    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-1"\n')
    assert CheckpointFolder(tmp_path, 1).holds_checkpoints() == ["checkpoint"]


# --- spec file names in generated text ----------------------------------------------------------

@pytest.mark.parametrize("file_name", ['odd\nname: "evil"\nmax_batch_size: 0\n.yaml', "tab\tand'quote.yaml",
                                       "line\u2028sep.yaml"])
def test_triton_config_escapes_the_spec_file_name(file_name: str) -> None:
    from google.protobuf import text_format

    from specgen.runtime.triton import config_text

    loaded = load_spec_text(SMALL, file_name, Path("/specs") / file_name)
    text = config_text(build_ir(loaded))
    header, *rest = text.splitlines()
    assert header == (f"# Generated by specgen from {file_name!r}. Do not edit: change the spec and run "
                      "`specgen export --triton`.")
    assert not any(line.startswith(("name", "max_batch_size")) and "evil" in line for line in rest)
    assert [line for line in rest if line.startswith("max_batch_size")] == ["max_batch_size: 64"]
    model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")  # Triton's own schema, as serve reads it
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert config.name == "small" and config.max_batch_size == 64
