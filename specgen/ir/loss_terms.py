"""The `loss` section resolved into terms: names, outputs, label sources and regularized weights.

Runs after the collections resolve (a regularizer's `variables` is a selection like an optimizer's)
and reports positioned errors: an output or label that names nothing, a regularizer selection that
holds no weight, a duplicate term name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specgen.diagnostics import Diagnostic, did_you_mean
from specgen.fields.base import is_identifier
from specgen.ir.collections import Membership, Resolver
from specgen.ir.training.terms import LossTermIR
from specgen.kinds.losses import REGISTRY as LOSSES
from specgen.spec.load import LoadedSpec

Loc = tuple[str | int, ...]


def spec_terms(loss: Any) -> list[tuple[Loc, Any]]:
    """(where it is written, the term) for each term: `loss` itself, or each item of a list."""
    if loss is None:
        return []
    if isinstance(loss, list):
        return [(("loss", i), term) for i, term in enumerate(loss)]
    return [(("loss",), loss)]


def term_output(term: Any) -> tuple[str, str] | None:
    """(spec key, output name) a data term reads; None for a regularizer."""
    for field in ("logits", "predictions"):
        if hasattr(term, field):
            return field, getattr(term, field)
    return None


def data_terms(spec: Any) -> list[tuple[Loc, Any]]:
    """The terms whose labels come from the data section (not an output)."""
    return [(loc, t) for loc, t in spec_terms(spec.loss)
            if term_output(t) is not None and t.labels not in spec.outputs]


def primary_kind(spec: Any) -> str | None:
    """The kind of the term metrics read: the first with data labels."""
    terms = data_terms(spec)
    return terms[0][1].kind if terms else None


def _where(loc: Loc) -> str:
    return "loss" if len(loc) == 1 else f"loss[{loc[1]}]"


def _default_name(term: Any) -> str:
    """A data term: the output it reads; a regularizer: its kind, with the collection it names if one."""
    read = term_output(term)
    if read is not None:
        return read[1]
    named = f"{term.kind}_{term.variables}" if isinstance(term.variables, str) else ""
    return named if is_identifier(named) else term.kind


def _names(loaded: LoadedSpec, written: list[tuple[Loc, Any]], problems: list[Diagnostic]) -> list[str]:
    """Each term's name: its own, else a default made unique with a `_2`, `_3`... suffix."""
    given: dict[str, Loc] = {}
    for loc, term in written:
        if term.name is None:
            continue
        if term.name in given:
            problems.append(loaded.diagnostic((*loc, "name"), (
                f"loss term name '{term.name}' is already the name of {_where(given[term.name])}; "
                "term names must be unique")))
        given.setdefault(term.name, loc)
    names, taken = [], set(given)
    for _, term in written:
        if term.name is not None:
            names.append(term.name)
            continue
        base = name = _default_name(term)
        count = 1
        while name in taken:
            count += 1
            name = f"{base}_{count}"
        taken.add(name)
        names.append(name)
    return names


def _data_term(loaded: LoadedSpec, loc: Loc, term: Any, name: str, problems: list[Diagnostic]) -> LossTermIR:
    spec = loaded.spec
    field, output = term_output(term) or ("", "")
    where = _where(loc)
    outputs = ", ".join(spec.outputs)
    if output not in spec.outputs:
        problems.append(loaded.diagnostic((*loc, field), f"{where} {field} '{output}' is not an output"
                                          f"{did_you_mean(output, spec.outputs)} (outputs: {outputs})"))
    from_output = term.labels in spec.outputs
    if from_output and term.labels == output:
        problems.append(loaded.diagnostic((*loc, "labels"), (
            f"{where} labels '{term.labels}' is the output the term reads ({field}); a target held constant "
            "equals the prediction and the term is zero. Name a data label or another output")))
    labels = _data_labels(spec)
    if from_output and labels is not None and term.labels in labels:
        problems.append(loaded.diagnostic((*loc, "labels"), (
            f"{where} labels '{term.labels}' names both an output and a label of the data section; "
            "rename one of them so that the term's target is unambiguous")))
    if not from_output and labels is not None and term.labels not in labels:
        choices = [*labels, *spec.outputs]
        problems.append(loaded.diagnostic((*loc, "labels"), (
            f"{where} labels '{term.labels}' is neither a label of the data section "
            f"(labels: {', '.join(labels) or 'none'}) nor an output (outputs: {outputs})"
            f"{did_you_mean(term.labels, choices)}")))
    return LossTermIR(name, term.kind, float(term.weight), output, field, term.labels, from_output,
                      LOSSES[term.kind].arguments(term))


def _data_labels(spec: Any) -> list[str] | None:
    """Every label the data section names (any stage); None without a data section."""
    if spec.data is None:
        return None
    stages = [s for s in (spec.data.train, spec.data.eval) if s is not None]
    return list(dict.fromkeys(name for s in stages for name in s.labels))


def _regularizer(loaded: LoadedSpec, loc: Loc, term: Any, name: str, members: Membership,
                 problems: list[Diagnostic]) -> LossTermIR:
    # A resolver of its own over the final collections (user ones, `trainable`, `frozen`): its problems
    # are this term's, and the collections' own problems are not reported twice.
    scratch = dataclasses.replace(members, problems=[])
    resolver = Resolver(loaded, scratch)
    resolver.resolved.update(members.collections)
    selected = resolver.selection(term.variables, (*loc, "variables"))
    problems += scratch.problems
    weights = set(members.weights)
    paths = tuple(p for p in selected if p in weights)
    if selected and not paths:
        problems.append(loaded.diagnostic((*loc, "variables"), (
            f"{_where(loc)} ({term.kind}) selects no weight, only state that no gradient moves "
            f"({', '.join(selected[:4])}); select weights (kernels, biases, embeddings)")))
    return LossTermIR(name, term.kind, float(term.weight), paths=paths)


def resolve_terms(loaded: LoadedSpec, members: Membership) -> tuple[tuple[LossTermIR, ...], list[Diagnostic]]:
    """The spec's loss terms in spec order, and the problems found in them."""
    written = spec_terms(loaded.spec.loss)
    problems: list[Diagnostic] = []
    names = _names(loaded, written, problems)
    terms = []
    for (loc, term), name in zip(written, names, strict=True):
        if term_output(term) is None:
            terms.append(_regularizer(loaded, loc, term, name, members, problems))
        else:
            terms.append(_data_term(loaded, loc, term, name, problems))
    if written and not any(t.output for t in terms):
        problems.append(loaded.diagnostic(("loss",), (
            "the loss has regularizer terms only; add a term that reads an output (logits or predictions)"),
            key=True))
    return tuple(terms), problems
