"""`specgen report`'s loss table: each term with what it reads, its labels and its weight."""

from __future__ import annotations

from specgen import text
from specgen.ir.model import ModelIR
from specgen.ir.training.terms import LossTermIR, primary


def _reads(term: LossTermIR) -> str:
    if term.output is not None:
        return f"output {term.output}"
    shown = ", ".join(term.paths[:3]) + (f" and {len(term.paths) - 3} more" if len(term.paths) > 3 else "")
    return f"{len(term.paths)} weight{'s' if len(term.paths) != 1 else ''}: {shown}"


def _labels(term: LossTermIR) -> str:
    if term.labels is None:
        return "-"
    return f"output {term.labels} (held constant)" if term.labels_from_output else f"data {term.labels}"


def _kind(term: LossTermIR) -> str:
    """The kind with its own keys, e.g. `huber (delta 1.5)`."""
    return f"{term.kind} ({', '.join(f'{k} {v:g}' for k, v in term.args)})" if term.args else term.kind


def loss_table(ir: ModelIR) -> str | None:
    """The terms in spec order, and which one metrics read; None for a spec without a loss."""
    terms = ir.training.terms if ir.training else ()
    if not terms:
        return None
    rows = [(t.name, _kind(t), _reads(t), _labels(t), f"{t.weight:g}") for t in terms]
    first = primary(terms)
    note = (f"The loss is the weighted sum of {len(terms)} terms; metrics read term '{first.name}' (the first with "
            "data labels)." if len(terms) > 1 and first else
            "No term has data labels: metrics are off." if first is None else "")
    return text.table(("loss term", "kind", "reads", "labels", "weight"), rows, right={4}) + (f"\n{note}" if note else "")
