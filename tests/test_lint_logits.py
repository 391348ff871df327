"""The lint for a loss on logits that reads probabilities (specgen/ir/lints_logits.py, docs/spec.md#lints).

Every loss kind whose model has a `logits` key (the registry's) warns when its output's layer is a softmax or a
sigmoid, or has one as its `activation:`; a loss on `predictions` does not (a sigmoid before a regression is
a choice); `--strict` makes the warning an error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.cli import main
from specgen.ir.lints_logits import logits_warnings
from specgen.ir.resolve import build_ir
from specgen.kinds.losses import REGISTRY as LOSSES
from specgen.kinds.ops import REGISTRY as OPS
from specgen.spec.load import load_spec_text

ON_LOGITS = sorted(name for name, loss in LOSSES.items() if "logits" in loss.spec.model_fields)


def spec(last: str, loss: str, outputs: str = "  y: probs\n") -> str:
    return ("specgen: 1\nname: m\ninputs:\n  x: {shape: [6]}\noutputs:\n" + outputs + "layers:\n"
            "  - {name: head/out, op: dense, units: 3}\n" + last + "loss: " + loss + "\n")


def warnings(text: str) -> list[str]:
    loaded = load_spec_text(text, "m.yaml")
    return [str(w) for w in logits_warnings(loaded, build_ir(loaded))]


def test_the_registries_name_the_losses_on_logits_and_the_ops_giving_probabilities() -> None:
    assert ON_LOGITS == ["focal", "sigmoid_cross_entropy", "softmax_cross_entropy", "sparse_softmax_cross_entropy"]
    assert sorted(name for name, op in OPS.items() if op.probabilities) == ["hard_sigmoid", "sigmoid", "softmax"]


@pytest.mark.parametrize("kind", ON_LOGITS)
@pytest.mark.parametrize("op", ["softmax", "sigmoid", "hard_sigmoid"])
def test_a_loss_on_logits_reading_a_softmax_or_sigmoid_warns(kind: str, op: str) -> None:
    text = spec(f"  - {{name: probs, op: {op}}}\n", f"{{kind: {kind}, logits: y, labels: t}}")
    assert warnings(text) == [f"m.yaml:10:{24 + len(kind)}: warning: loss 'logits' reads layer 'probs' ({op}): {kind} "
                              "takes logits; read the layer before it ('head/out')"]


def test_an_activation_a_reshape_after_it_and_a_list_of_terms() -> None:
    text = spec("  - {name: probs, op: dense, units: 4, activation: softmax}\n"
                "  - {name: flat, op: reshape, shape: [2, 2]}\n",
                "\n  - {kind: mean_squared_error, predictions: z, labels: u}\n"
                "  - {kind: softmax_cross_entropy, logits: y, labels: t}", "  y: probs\n  z: flat\n")
    assert warnings(text) == [
        "m.yaml:14:43: warning: loss 'logits' reads layer 'probs' (dense, activation: softmax): softmax_cross_entropy "
        "takes logits; remove the layer's activation"]
    text = spec("  - {name: flat, op: reshape, input: head/out, shape: [3, 1]}\n",
                "{kind: sigmoid_cross_entropy, logits: y, labels: t}", "  y: flat\n")
    assert warnings(text) == []  # the reshape reads the logits themselves


def test_losses_on_predictions_and_logits_layers_are_quiet() -> None:
    assert warnings(spec("  - {name: probs, op: sigmoid}\n", "{kind: mean_squared_error, predictions: y, labels: t}")) \
        == []
    assert warnings(spec("  - {name: probs, op: relu}\n", "{kind: sparse_softmax_cross_entropy, logits: y, labels: t}")) \
        == []


def test_validate_prints_it_and_strict_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("m.yaml").write_text(spec("  - {name: probs, op: softmax}\n",
                                   "{kind: sparse_softmax_cross_entropy, logits: y, labels: t}"))
    line = ("m.yaml:10:52: {}: loss 'logits' reads layer 'probs' (softmax): sparse_softmax_cross_entropy takes logits; "
            "read the layer before it ('head/out')")
    assert main(["validate", "m.yaml"]) == 0
    assert capsys.readouterr().err.splitlines() == [line.format("warning"), "1 warning (--strict makes them errors)"]
    assert main(["validate", "--strict", "m.yaml"]) == 1
    assert capsys.readouterr().err.splitlines() == [line.format("error"), "1 error found"]
