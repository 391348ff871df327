"""Loss terms and weight decay `exclude` at build time: names, positioned errors, report (no TensorFlow)."""

from __future__ import annotations

import re
import textwrap

import pytest

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.report.loss_terms import loss_table
from specgen.spec.load import load_spec_text

HEAD = """\
specgen: 1
name: net
inputs: {x: {shape: [4]}}
outputs: {logits: out, q: qhead, target: target}
layers:
  - {name: body, op: dense, input: x, units: 3}
  - {name: bn, op: batch_norm}
  - {name: out, op: dense, units: 2}
  - {name: qhead, op: dense, input: bn, units: 2}
  - {name: target, op: dense, input: bn, units: 2}
collections: {backbone: ["body/*", "bn/*"]}
frozen: ["target/*", "out/*"]
"""  # the loss starts on line 13
TAIL = """\
optimizers:
  all: {variables: ["body/*", "bn/*", "qhead/*"], kind: sgd, learning_rate: 0.1}
train: {batch_size: 2}
data:
  train: {npz: d.npz, features: {x: x}, labels: {label: y, value: v}}
"""


def build(loss: str, tail: str = TAIL) -> object:
    return build_ir(load_spec_text(HEAD + textwrap.dedent(loss) + tail, "net.yaml"))


def errors(loss: str, tail: str = TAIL) -> list[str]:
    with pytest.raises(SpecError) as caught:
        build(loss, tail)
    return [str(d) for d in caught.value.diagnostics]


def test_default_names_and_resolved_terms() -> None:
    ir = build("""\
        loss:
          - {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
          - {kind: mean_squared_error, predictions: q, labels: value, weight: 0.25}
          - {kind: huber, predictions: q, labels: target}
          - {kind: l2, variables: backbone, weight: 0.0001}
          - {kind: l1, variables: ["out/*"], weight: 0.001}
        """)
    terms = ir.training.terms
    assert [t.name for t in terms] == ["logits", "q", "q_2", "l2_backbone", "l1"]
    # l2 over the weights the selection names: batch-norm statistics are state, not weights.
    assert terms[3].paths == ("body/kernel", "body/bias", "bn/gamma", "bn/beta")
    assert terms[4].paths == ("out/kernel", "out/bias")
    assert (terms[2].labels, terms[2].labels_from_output, terms[2].delta) == ("target", True, 1.0)
    assert ir.training.loss.output == "logits" and ir.training.loss.labels == "label"
    assert ir.training.can_train


def test_single_mapping_keeps_its_generated_form() -> None:
    ir = build("loss: {kind: huber, predictions: q, labels: value, delta: 2.0}\n")
    code = render_files(ir)["train.py"].decode()
    assert "return losses.huber(labels[LABEL], output, delta=2.0), output" in code
    assert "loss_terms" not in code  # one term with data labels and weight 1: the total is the term


def test_labels_from_an_output_are_held_constant_in_generated_code() -> None:
    code = render_files(build("loss: {kind: huber, predictions: q, labels: target, name: td}\n"))["train.py"].decode()
    # OUTPUT is the first term's output (no term reads data labels: LABEL is None); the term reads it by that constant
    assert 'LABEL = None\nOUTPUT = "q"\n' in code
    assert '"td": losses.huber(tf.stop_gradient(outputs["target"]), outputs[OUTPUT], delta=1.0),' in code
    assert "    def loss_terms(self) -> dict[str, tf.Tensor]:" in code


@pytest.mark.parametrize(("loss", "expected"), [
    ("""\
        loss:
          - {kind: sparse_softmax_cross_entropy, logits: logits, labels: label, name: main}
          - {kind: huber, predictions: q, labels: value, name: main}
        """,
     "net.yaml:15:56: error: loss term name 'main' is already the name of loss[0]; term names must be unique"),
    ("loss: {kind: huber, predictions: q, labels: targt}\n",
     "net.yaml:13:45: error: loss labels 'targt' is neither a label of the data section (labels: label, value) "
     "nor an output (outputs: logits, q, target); did you mean 'target'?"),
    ("loss: {kind: huber, predictions: q, labels: q}\n",
     "net.yaml:13:45: error: loss labels 'q' is the output the term reads (predictions); a target held constant "
     "equals the prediction and the term is zero. Name a data label or another output"),
    ("""\
        loss:
          - {kind: mean_squared_error, predictions: qq, labels: value}
        """,
     "net.yaml:14:45: error: loss[0] predictions 'qq' is not an output; did you mean 'q'? (outputs: logits, q, target)"),
    ("""\
        loss:
          - {kind: huber, predictions: q, labels: value}
          - {kind: l2, variables: "head/*", weight: 0.1}
        """,
     "net.yaml:15:27: error: pattern 'head/*' matches no variable"),
    ("""\
        loss:
          - {kind: huber, predictions: q, labels: value}
          - {kind: l2, variables: "bn/moving_*", weight: 0.1}
        """,
     "net.yaml:15:27: error: loss[1] (l2) selects no weight, only state that no gradient moves "
     "(bn/moving_mean, bn/moving_variance); select weights (kernels, biases, embeddings)"),
    ("loss: [{kind: l2, variables: backbone, weight: 0.1}]\n",
     "net.yaml:13:1: error: the loss has regularizer terms only; add a term that reads an output (logits or "
     "predictions)"),
])
def test_positioned_errors(loss: str, expected: str) -> None:
    found = errors(loss)
    assert any(expected in line for line in found), found


def test_labels_naming_both_an_output_and_a_data_label_are_refused() -> None:
    found = errors("loss: {kind: huber, predictions: q, labels: target}\n", TAIL.replace("value: v}", "target: v}"))
    assert any("net.yaml:13:45: error: loss labels 'target' names both an output and a label of the data section; "
               "rename one of them" in line for line in found), found


def test_metrics_need_a_term_with_data_labels() -> None:
    """A metric reading labels needs a term with data labels; mean_loss reads none (the loss value itself)."""
    found = errors("loss: {kind: huber, predictions: q, labels: target}\n",
                   TAIL.replace("train: {batch_size: 2}", "train: {batch_size: 2, metrics: [precision]}"))
    assert found == ["net.yaml:16:34: error: metric 'precision' reads the first loss term with labels from the data "
                     "section, and no term has them (each reads its labels from an output); metrics without labels: "
                     "mean_loss"], found
    build("loss: {kind: huber, predictions: q, labels: target}\n",
          TAIL.replace("train: {batch_size: 2}", "train: {batch_size: 2, metrics: [mean_loss]}"))


def test_weight_decay_exclude_resolves_and_refuses_patterns_that_match_nothing() -> None:
    decay = TAIL.replace("learning_rate: 0.1}", 'learning_rate: 0.1, weight_decay: {rate: 0.01, exclude: ["*/bias", backbone]}}')
    ir = build("loss: {kind: huber, predictions: q, labels: value}\n", decay)
    opt = ir.training.optimizers[0]
    assert opt.weight_decay == 0.01
    assert opt.decay_excluded == ("body/kernel", "body/bias", "bn/gamma", "bn/beta", "qhead/bias")
    code = render_files(ir)["train.py"].decode()
    assert 'self.opt_all_decayed = [v[p] for p in ["qhead/kernel"]]' in code
    assert "optimizers.weight_decay(self.opt_all_decayed, lr, 0.01)" in code
    # Every weight excluded: no decay call at all (not a fallback to decaying everything).
    everything = TAIL.replace("learning_rate: 0.1}", 'learning_rate: 0.1, weight_decay: {rate: 0.01, exclude: ["*"]}}')
    code = render_files(build("loss: {kind: huber, predictions: q, labels: value}\n", everything))["train.py"].decode()
    assert "weight_decay" not in code and "_decayed" not in code
    wrong = TAIL.replace("learning_rate: 0.1}", 'learning_rate: 0.1, weight_decay: {rate: 0.01, exclude: ["target/*"]}}')
    found = errors("loss: {kind: huber, predictions: q, labels: value}\n", wrong)
    assert any("net.yaml:15:119: error: weight_decay exclude 'target/*' matches none of the weights of optimizer 'all' "
               "(variables 'body/kernel', 'body/bias', 'bn/gamma', 'bn/beta' and 2 more)" in line
               for line in found), found


def test_report_lists_the_terms() -> None:
    ir = build("""\
        loss:
          - {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
          - {kind: huber, predictions: q, labels: target, delta: 0.5, weight: 0.5, name: td}
          - {kind: l2, variables: backbone, weight: 0.0001}
        """)
    lines = (loss_table(ir) or "").splitlines()
    assert [re.split(r"\s{2,}", line.strip()) for line in lines[:1] + lines[2:5]] == [
        ["loss term", "kind", "reads", "labels", "weight"],
        ["logits", "sparse_softmax_cross_entropy", "output logits", "data label", "1"],
        ["td", "huber (delta 0.5)", "output q", "output target (held constant)", "0.5"],
        ["l2_backbone", "l2", "4 weights: body/kernel, body/bias, bn/gamma and 1 more", "-", "0.0001"],
    ]
    assert lines[5] == "The loss is the weighted sum of 3 terms; metrics read term 'logits' (the first with data labels)."


def test_schema_takes_a_list_of_terms_and_refuses_a_bad_delta() -> None:
    import json
    from pathlib import Path

    import jsonschema
    import yaml

    schema = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "specgen.schema.json").read_text())
    document = yaml.safe_load(HEAD + textwrap.dedent("""\
        loss:
          - {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
          - {kind: huber, predictions: q, labels: target, delta: 0.5, weight: 0.5, name: td}
          - {kind: l2, variables: backbone, weight: 0.0001}
        """) + TAIL.replace("learning_rate: 0.1}", 'learning_rate: 0.1, weight_decay: {rate: 0.01, exclude: ["*/bias"]}}'))
    jsonschema.validate(document, schema)
    document["loss"][1]["delta"] = 0
    with pytest.raises(jsonschema.ValidationError, match="less than or equal to the minimum of 0"):
        jsonschema.validate(document, schema)
