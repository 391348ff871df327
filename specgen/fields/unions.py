"""Unions discriminated by the shape of the value, so errors name one branch only.

A plain `int | list[int]` makes pydantic report a failure for every branch;
picking the branch from the raw value first gives one clear message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Discriminator, Tag


def by_shape(pick: Callable[[Any], str | None], expected: str, **branches: Any) -> Any:
    """A union whose branch is chosen by `pick(raw value)`; None means no branch fits."""
    members = tuple(Annotated[tp, Tag(tag)] for tag, tp in branches.items())
    union = members[0]
    for member in members[1:]:
        union = union | member
    return Annotated[union, Discriminator(pick, custom_error_type="wrong_shape",
                                          custom_error_message=f"expected {expected}")]


def scalar_or_list(value: Any) -> str | None:
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return None
    return "scalar"


def scalar_or_mapping(value: Any) -> str | None:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return None
    return "scalar"


def by_key(*keys: str) -> Callable[[Any], str | None]:
    """Pick the branch named after the one key of `keys` that the mapping has."""

    def pick(value: Any) -> str | None:
        if isinstance(value, dict):
            present = [k for k in keys if k in value]
            return present[0] if len(present) == 1 else None
        fields = getattr(type(value), "model_fields", {})
        names = {f.alias or n for n, f in fields.items()} | set(fields)
        return next((k for k in keys if k in names), None)

    return pick
