"""Unions discriminated by the shape of the value, so errors name one branch only.

A plain `int | list[int]` makes pydantic report a failure for every branch;
picking the branch from the raw value first gives one clear message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Discriminator, Tag


class OneItem:
    """Marks a scalar-or-list union whose scalar means the one-item list (`variables: "*"` is `["*"]`), so that
    `specgen diff` (review/spellings.py) compares the two spellings as one. Not every such union: a channel
    value's scalar is repeated over the channels, and a CSV label column's scalar gives a label of shape []."""


ONE_ITEM = OneItem()


def by_shape(pick: Callable[[Any], str | None], expected: str, *marks: OneItem, **branches: Any) -> Any:
    """A union whose branch is chosen by `pick(raw value)`; None means no branch fits. `marks`: ONE_ITEM where a
    scalar is the list of that one item."""
    members = tuple(Annotated[tp, Tag(tag)] for tag, tp in branches.items())
    union = members[0]
    for member in members[1:]:
        union = union | member
    # A union picked by key hands its keys to the message layer, which suggests one for a misspelt key (`cvs:`).
    context = _Context({KEYS_CONTEXT: " ".join(pick.keys)}) if isinstance(pick, ByKey) else None
    return Annotated[union, Discriminator(pick, custom_error_type="wrong_shape",
                                          custom_error_message=f"expected {expected}", custom_error_context=context),
                     *marks]


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


class _Context(dict[str, int | str | float]):
    """An error context that can be hashed: pydantic hashes the (frozen) Discriminator that holds it."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))


KEYS_CONTEXT = "keys"  # the error context entry holding a by_key union's keys, space-separated


class ByKey:
    """Picks the branch named after the one key of `keys` that the mapping has (None when it has none or several).

    A class rather than a closure so that by_shape can read its keys: they are what a misspelt key is compared with.
    """

    def __init__(self, *keys: str) -> None:
        self.keys = keys
        self.__name__ = "pick"  # pydantic names a callable discriminator by it, as it named the closure this was

    def __call__(self, value: Any) -> str | None:
        if isinstance(value, dict):
            present = [k for k in self.keys if k in value]
            return present[0] if len(present) == 1 else None
        fields = getattr(type(value), "model_fields", {})
        names = {f.alias or n for n, f in fields.items()} | set(fields)
        return next((k for k in self.keys if k in names), None)


def by_key(*keys: str) -> ByKey:
    """Pick the branch named after the one key of `keys` that the mapping has."""
    return ByKey(*keys)
