"""Render-ready loss terms: the skeleton's single-call loss, or the loss_terms partial's terms (templates/tf/features/)."""

from __future__ import annotations

from dataclasses import dataclass

from specgen.ir.model import ModelIR
from specgen.ir.naming import py_name
from specgen.ir.training import TrainingIR
from specgen.ir.training.terms import LossTermIR
from specgen.kinds.features.loss_terms import single
from specgen.kinds.losses import REGISTRY as LOSSES
from specgen.render.environment import py_literal


@dataclass(frozen=True)
class TermPlan:
    name: str
    kind: str
    call: str  # the losses.* call that computes the term's mean value
    weight: float
    factor: str  # "" for a weight of 1, else "<weight> * "
    attr: str | None = None  # a regularizer's weight list attribute
    paths: tuple[str, ...] = ()
    note: str | None = None  # a comment placed above the term


def _args(term: LossTermIR) -> str:
    """The kind's own keyword arguments (huber's delta), after labels and output."""
    return "".join(f", {k}={py_literal(v)}" for k, v in term.args)


def _named(name: str, constant: str, value: str | None) -> str:
    """The module constant (LABEL, OUTPUT) where it holds this name, as the rest of train.py reads it; else the name."""
    return constant if name == value else py_literal(name)


def _term(term: LossTermIR, label: str | None, output: str) -> TermPlan:
    factor = "" if term.weight == 1.0 else f"{py_literal(term.weight)} * "
    if term.regularizer:
        attr = f"reg_{py_name(term.name)}"
        return TermPlan(term.name, term.kind, f"{LOSSES[term.kind].function}(self.{attr})", term.weight, factor, attr,
                        term.paths, f"{term.kind} over {len(term.paths)} weight(s)")
    assert term.output is not None and term.labels is not None
    if term.labels_from_output:
        labels = f"tf.stop_gradient(outputs[{py_literal(term.labels)}])"
        note = f"labels: output '{term.labels}', a computed target held constant (no gradient flows into it)"
    else:
        labels, note = f"labels[{_named(term.labels, 'LABEL', label)}]", None
    call = f"{LOSSES[term.kind].function}({labels}, outputs[{_named(term.output, 'OUTPUT', output)}]{_args(term)})"
    return TermPlan(term.name, term.kind, call, term.weight, factor, note=note)


def label_and_output(training: TrainingIR) -> tuple[str | None, str]:
    """train.py's LABEL and OUTPUT: the primary term's. Without a term that reads data labels (targets computed from
    outputs only), no LABEL, and OUTPUT is the first term's output, which no metric reads (ir/resolve.py refuses
    metrics then)."""
    loss = training.loss
    if loss is not None:
        return loss.labels, loss.output
    return None, next(t.output for t in training.terms if t.output)


def single_loss_call(training: TrainingIR) -> str | None:
    """The skeleton's single-call loss; None when the loss_terms feature renders the loss (its partial)."""
    if not single(training):
        return None
    term = training.terms[0]
    return f"{LOSSES[term.kind].function}(labels[LABEL], output{_args(term)})"


@dataclass(frozen=True)
class LossTermsPlan:
    """The loss_terms partial's context (templates/tf/features/loss_terms.py.j2). Built here, not in
    kinds/features/loss_terms.py, as its calls are Python text (py_literal, ir/naming's py_name)."""

    terms: tuple[TermPlan, ...]
    total: str  # the weighted sum's expression
    term_names: tuple[str, ...]


def terms_plan(ir: ModelIR) -> LossTermsPlan:
    assert ir.training is not None
    terms = tuple(_term(t, *label_and_output(ir.training)) for t in ir.training.terms)
    total = " + ".join(f"{t.factor}terms[{py_literal(t.name)}]" for t in terms)
    return LossTermsPlan(terms, total, tuple(t.name for t in terms))
