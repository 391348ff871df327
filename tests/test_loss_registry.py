"""Every registered loss kind lacks nothing: model in the union, runtime function, label form, parity case, docs.

The lists come from specgen.kinds.losses.REGISTRY; each failure names the kind and what it misses
(docs/extending.md).
"""

from __future__ import annotations

from typing import get_args

import pytest
from kind_checks import has_own_test, literal_names, table_kinds, union_members
from test_loss_parity import CASES

from specgen.kinds.losses import REGISTRY, LossTerm, Target
from specgen.kinds.pointers import resolve

KINDS = sorted(REGISTRY)


@pytest.mark.parametrize("name", KINDS)
def test_loss_has_a_spec_model_in_the_union(name: str) -> None:
    kind = REGISTRY[name]
    assert kind.spec in union_members(LossTerm), f"loss '{name}': its model {kind.spec.__name__} is not in LossTerm"
    assert name in literal_names(kind.spec, "kind"), (
        f"loss '{name}': its model {kind.spec.__name__} accepts kind {literal_names(kind.spec, 'kind')}")


@pytest.mark.parametrize("name", KINDS)
def test_loss_points_to_a_runtime_function(name: str) -> None:
    kind = REGISTRY[name]
    assert callable(resolve(kind.runtime)), f"loss '{name}': runtime pointer {kind.runtime} is not a function"


@pytest.mark.parametrize("name", KINDS)
def test_loss_reads_what_its_label_form_says(name: str) -> None:
    kind = REGISTRY[name]
    fields = kind.spec.model_fields
    if kind.regularizer:
        assert "variables" in fields, f"loss '{name}': a regularizer (target None) without 'variables'"
    else:
        assert kind.target in get_args(Target), f"loss '{name}': label form {kind.target!r} is not one of {Target}"
        assert "labels" in fields and ("logits" in fields or "predictions" in fields), (
            f"loss '{name}': a data term needs 'labels' and 'logits' or 'predictions'")
    missing = [a for a in kind.args if a not in fields]
    assert not missing, f"loss '{name}': args {missing} are not keys of {kind.spec.__name__}"


@pytest.mark.parametrize("name", KINDS)
def test_loss_has_a_parity_case(name: str) -> None:
    assert name in CASES or has_own_test(name), (
        f"loss '{name}': no case in tests/test_loss_parity.py CASES and no tests/test_{name}.py")


@pytest.mark.parametrize("name", KINDS)
def test_loss_is_documented(name: str) -> None:
    assert name in table_kinds("spec.md", "## `loss`"), f"loss '{name}': docs/spec.md's `loss` table has no row naming it"


def test_every_union_member_is_registered() -> None:
    for model in union_members(LossTerm):
        names = literal_names(model, "kind")
        assert all(n in REGISTRY and REGISTRY[n].spec is model for n in names), (
            f"spec model {model.__name__} accepts kind(s) {names} that no LossDef owns")
