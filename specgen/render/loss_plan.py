"""Render-ready loss terms for templates/tf/train.py.j2 and its partials under templates/tf/loss/."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgen.ir.naming import py_name
from specgen.ir.training import TrainingIR
from specgen.ir.training.terms import LossTermIR
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


def simple(training: TrainingIR) -> bool:
    """One term with data labels and weight 1: the loss method keeps its single-call form."""
    terms = training.terms
    return len(terms) == 1 and terms[0].data_labels and terms[0].weight == 1.0


def _delta(term: LossTermIR) -> str:
    return f", delta={py_literal(term.delta)}" if term.kind == "huber" else ""


def _term(term: LossTermIR) -> TermPlan:
    factor = "" if term.weight == 1.0 else f"{py_literal(term.weight)} * "
    if term.regularizer:
        attr = f"reg_{py_name(term.name)}"
        return TermPlan(term.name, term.kind, f"losses.{term.kind}(self.{attr})", term.weight, factor, attr,
                        term.paths, f"{term.kind} over {len(term.paths)} weight(s)")
    assert term.output is not None and term.labels is not None
    if term.labels_from_output:
        labels = f"tf.stop_gradient(outputs[{py_literal(term.labels)}])"
        note = f"labels: output '{term.labels}', a computed target held constant (no gradient flows into it)"
    else:
        labels, note = f"labels[{py_literal(term.labels)}]", None
    call = f"losses.{term.kind}({labels}, outputs[{py_literal(term.output)}]{_delta(term)})"
    return TermPlan(term.name, term.kind, call, term.weight, factor, note=note)


def loss_context(training: TrainingIR) -> dict[str, Any]:
    """`loss_call` for the single-call form, else `terms` for the general one (templates/tf/loss/)."""
    if simple(training):
        term = training.terms[0]
        return {"loss_call": f"losses.{term.kind}(labels[LABEL], output{_delta(term)})", "terms": []}
    terms = [_term(t) for t in training.terms]
    total = " + ".join(f"{t.factor}terms[{py_literal(t.name)}]" for t in terms)
    return {"loss_call": None, "terms": terms, "total": total, "term_names": tuple(t.name for t in terms)}
