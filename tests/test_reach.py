"""Gradient reachability (specgen/ir/reach.py) and per-spec lint silencing (`lints.skip`).

No TensorFlow here: both run in `specgen validate`. The blocking cases mark an existing op as
passing no gradient (what `OpDef.gradient` declares for stop_gradient) through the registry,
the one place `reach.py` reads it from. Expected lines were checked by hand against the text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from specgen.cli import main
from specgen.ir import reach
from specgen.ir.resolve import build_ir, ir_from_file
from specgen.kinds.ops import REGISTRY
from specgen.spec.load import load_spec_text

ROOT = Path(__file__).resolve().parents[1]

SPEC = """specgen: 1
name: reach
inputs:
  x: {shape: [4]}
outputs:
  logits: out
layers:
  - {name: a, op: dense, units: 8}
  - {name: act, op: relu}
  - {name: b, op: dense, input: x, units: 8}
  - {name: sum, op: add, inputs: [act, b]}
  - {name: out, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {variables: ["*"], kind: sgd, learning_rate: 0.1}
"""


def validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *flags: str) -> tuple[int, list[str]]:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    code = main(["validate", *flags, str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, [line.removeprefix(f"{path}:") for line in err.splitlines()]


@pytest.fixture
def relu_blocks() -> Iterator[None]:
    """relu declared as passing no gradient, as stop_gradient's OpDef does."""
    kept = REGISTRY["relu"]
    REGISTRY["relu"] = replace(kept, gradient=False)
    yield
    REGISTRY["relu"] = kept


@pytest.fixture
def add_second_blocks() -> Iterator[None]:
    """add passing gradients to its first input only: a per-input declaration (a gather's indices)."""
    kept = REGISTRY["add"]
    REGISTRY["add"] = replace(kept, gradient=(True, False))
    yield
    REGISTRY["add"] = kept


def test_the_spec_is_valid_as_declared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert validate(tmp_path, capsys, SPEC) == (0, [])
    walked = reach.walk(build_ir(load_spec_text(SPEC)), ("logits",))
    assert walked.reached == {"out", "sum", "act", "b", "a", "x"} and walked.stops == ()


def test_a_blocking_layer_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], relu_blocks: None) -> None:
    assert validate(tmp_path, capsys, SPEC) == (1, [
        "15:20: error: optimizer 'all' claims variables 'a/kernel', 'a/bias', which do not get a gradient from the "
        "loss output 'logits': layer 'act' (relu) passes no gradient to its input 'a'; their gradients would be "
        "None and training would stop at the first step. Freeze them (list them in 'frozen' instead of in this "
        "optimizer), or change layer 'act'", "1 error found"])


def test_a_blocked_input_position(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  add_second_blocks: None) -> None:
    code, lines = validate(tmp_path, capsys, SPEC)
    assert code == 1 and lines[0].startswith(
        "15:20: error: optimizer 'all' claims variables 'b/kernel', 'b/bias', which do not get a gradient from the "
        "loss output 'logits': layer 'sum' (add) passes no gradient to its input 'b';")
    walked = reach.walk(build_ir(load_spec_text(SPEC.replace('["*"]', '["a/*", "out/*"]').replace(
        "optimizers:", 'frozen: ["b/*"]\noptimizers:'))), ("logits",))
    assert "b" not in walked.reached and [(n.name, s) for n, s in walked.stops] == [("sum", "b")]


def test_one_error_per_optimizer_and_cause(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           relu_blocks: None) -> None:
    """A weight past the blocking layer and one on a branch no loss reads: two messages, each its own fix."""
    text = SPEC.replace("  - {name: out, op: dense, units: 3}\n",
                        "  - {name: out, op: dense, units: 3}\n  - {name: aux, op: dense, input: out, units: 1}\n")
    code, lines = validate(tmp_path, capsys, text)
    assert code == 1 and lines[-1] == "2 errors found"
    off = next(line for line in lines if "aux/kernel" in line)
    blocked = next(line for line in lines if "a/kernel" in line)
    assert "'aux/kernel', 'aux/bias', which do not reach the loss output 'logits' (their layers reach no output)" in off
    assert "'a/kernel', 'a/bias', which do not get a gradient" in blocked and "layer 'act' (relu)" in blocked


def test_frozen_weights_behind_a_block_are_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                relu_blocks: None) -> None:
    text = SPEC.replace('["*"]', '["b/*", "out/*"]').replace("optimizers:", 'frozen: ["a/*"]\noptimizers:')
    assert validate(tmp_path, capsys, text) == (0, [])


def test_a_shared_weight_is_reached_through_any_user(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     relu_blocks: None) -> None:
    """'a2' shares 'a' and sits on an open path: a's weights get their gradient through it."""
    text = SPEC.replace("  - {name: b, op: dense, input: x, units: 8}\n",
                        "  - {name: a2, op: dense, units: 8, share: a, input: x}\n"
                        "  - {name: b, op: dense, input: a2, units: 8}\n")
    assert validate(tmp_path, capsys, text) == (0, [])


def test_integer_inputs_carry_no_gradient() -> None:
    text = """specgen: 1
name: ids
inputs:
  ids: {shape: [5], dtype: int32}
outputs:
  logits: out
layers:
  - {name: emb, op: embedding, vocab_size: 10, dim: 4}
  - {name: flat, op: flatten}
  - {name: out, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {variables: ["*"], kind: adam, learning_rate: 0.001}
"""
    ir = build_ir(load_spec_text(text))
    walked = reach.walk(ir, reach.loss_outputs(ir))
    assert walked.reached == {"out", "flat", "emb"}  # not the int32 input 'ids'
    assert [(n.name, s) for n, s in walked.stops] == [("emb", "ids")]
    assert reach.unreached(ir) == {}


def test_examples_have_no_unreached_weights() -> None:
    specs = [*sorted((ROOT / "examples" / "specs").glob("*.yaml")), ROOT / "examples" / "finetune" /
             "mobilenet_v2_digits.yaml"]
    for path in specs:
        ir = ir_from_file(path)
        assert reach.unreached(ir) == {}, path
        assert ir.optimizers and reach.walk(ir, reach.loss_outputs(ir)).reached >= {
            n.name for n in ir.nodes if any(v.path in ir.collections["trainable"] for v in n.variables.values())}


# --- lints.skip ----------------------------------------------------------------------------

BIG = """specgen: 1
name: big
inputs:
  x: {shape: [5]}
outputs:
  y: h
layers:
  - {name: h, op: dense, units: 4, activation: relu, kernel_init: {kind: random_normal, stddev: 200}}
"""


def test_lints_skip_silences_init_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = validate(tmp_path, capsys, BIG, "--strict")
    assert code == 1 and lines[0].startswith("8:67: error: layer 'h' (dense): at initialization the activation std")
    assert validate(tmp_path, capsys, BIG + "lints: {skip: [init_scale]}\n", "--strict") == (0, [])
    assert build_ir(load_spec_text(BIG + "lints:\n  skip: [init_scale, bn_momentum, init_scale]\n")).skip_lints == (
        "init_scale", "bn_momentum")


def test_unknown_lint_names_are_positioned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = BIG + "lints:\n  skip: [init_scale, bn_momentun]\n"
    assert validate(tmp_path, capsys, text) == (1, [
        "10:22: error: skip[1]: received 'bn_momentun', expected 'bn_momentum' or 'init_scale'; did you mean "
        "'bn_momentum'?", "1 error found"])
    assert validate(tmp_path, capsys, BIG + "lints: {silence: [init_scale]}\n")[1][0].startswith("9:9: error: ")


def test_stop_gradient_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The op as registered (gradient=False): a TD-style target whose weights an optimizer claims."""
    text = SPEC.replace("  - {name: act, op: relu}\n", "  - {name: act, op: stop_gradient}\n")
    assert validate(tmp_path, capsys, text) == (1, [
        "15:20: error: optimizer 'all' claims variables 'a/kernel', 'a/bias', which do not get a gradient from the "
        "loss output 'logits': layer 'act' (stop_gradient) passes no gradient to its input 'a'; their gradients "
        "would be None and training would stop at the first step. Freeze them (list them in 'frozen' instead of in "
        "this optimizer), or change layer 'act'", "1 error found"])
    assert not REGISTRY["stop_gradient"].passes_gradient(0) and REGISTRY["gather"].passes_gradient(0)
    assert not REGISTRY["gather"].passes_gradient(1)  # the indices


@pytest.fixture
def relu_casts() -> Iterator[None]:
    """relu with an int32 output, standing in for an argmax or a cast (no registered op makes integers yet)."""
    kept = REGISTRY["relu"]

    def to_int(layer: object, shapes: list, dtypes: list[str]) -> object:
        result = kept.infer(layer, shapes, dtypes)
        result.dtype = "int32"
        return result

    REGISTRY["relu"] = replace(kept, infer=to_int)
    yield
    REGISTRY["relu"] = kept


def test_an_integer_tensor_names_the_layer_that_made_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         relu_casts: None) -> None:
    text = SPEC.replace("  - {name: act, op: relu}\n", "  - {name: act, op: relu}\n  - {name: emb, op: embedding, "
                        "vocab_size: 10, dim: 8}\n  - {name: flat, op: flatten}\n").replace(
                        "inputs: [act, b]", "inputs: [flat, b]").replace("units: 8}\n  - {name: act", "units: 1}\n"
                                                                         "  - {name: act")
    code, lines = validate(tmp_path, capsys, text)
    assert code == 1 and "claims variables 'a/kernel', 'a/bias', which do not get a gradient from the loss output " \
        "'logits': layer 'act' (relu) outputs int32, and integer tensors carry no gradient;" in lines[0]


# --- several loss terms (TrainingIR.terms) ------------------------------------------------------

TERMS = """specgen: 1
name: terms
inputs:
  x: {shape: [4]}
outputs:
  logits: out
  aux: aux
layers:
  - {name: body, op: dense, units: 8}
  - {name: out, op: dense, units: 3}
  - {name: aux, op: dense, input: x, units: 3}
optimizers:
  all: {variables: ["*"], kind: sgd, learning_rate: 0.1}
"""


def test_every_term_output_is_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = TERMS + ("loss:\n  - {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}\n"
                    "  - {kind: mean_squared_error, predictions: aux, labels: y2}\n")
    assert validate(tmp_path, capsys, text) == (0, [])
    assert reach.loss_outputs(build_ir(load_spec_text(text))) == ("logits", "aux")


def test_labels_read_from_an_output_are_not_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`aux` as the target of the logits term: held constant, so its weights get no gradient."""
    text = TERMS + "loss:\n  - {kind: mean_squared_error, predictions: logits, labels: aux}\n"
    assert validate(tmp_path, capsys, text) == (1, [
        "13:20: error: optimizer 'all' claims variables 'aux/kernel', 'aux/bias', which do not reach the loss output "
        "'logits' (they feed only output 'aux', which the loss does not read): their gradients would be None and "
        "training would stop at the first step. Freeze them (list them in 'frozen' instead of in this optimizer), "
        "or make the loss read 'aux' instead", "1 error found"])


def test_a_regularizer_reaches_its_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = TERMS + ("loss:\n  - {kind: mean_squared_error, predictions: logits, labels: aux}\n"
                    "  - {kind: l2, variables: ['aux/*'], weight: 0.01}\n")
    assert validate(tmp_path, capsys, text) == (0, [])
    assert reach.penalized(build_ir(load_spec_text(text))) == {"aux/kernel", "aux/bias"}
