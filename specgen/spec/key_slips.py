"""Keys that are not names (`0:`, `true:`, `null:`), judged once the value's place in a spec is known.

A number or boolean key is a slip of the YAML (`class_weight: {0: 2.0}`) whose own message would say to quote it;
under a key the spec does not have, the schema's `unknown key 'class_weight'; expected one of ...` names what to
change instead, and quoting `0` would only lead to it. yaml_source.py collects the slips while it converts a
document (a spec file's, whose root is the spec) or a `--set` value (placed by overrides.py), and reports those
`placed_slips` keeps.
"""

from __future__ import annotations

from typing import Any

from specgen.diagnostics import Diagnostic
from specgen.spec.source_map import PathKey, data_path

# Keys that are not names (`0:`), each with the place in its document of the mapping that holds it.
KeySlips = list[tuple[PathKey, Diagnostic]]


def placed_slips(at: PathKey, slips: KeySlips, data: Any) -> list[Diagnostic]:
    """Those of `slips` (of a value placed at `at` in spec data `data`) that the schema would not refuse first: the
    ones not under a key the spec does not have."""
    return [problem for path, problem in slips if not _unknown_above((*at, *path), data)]


def _unknown_above(path: PathKey, data: Any) -> bool:
    """Whether the mapping at `path` of a spec document is under a key the spec does not have (`train:
    {class_weight: {0: 2.0}}`): its keys that are not names are then left to the schema, whose `unknown key
    'class_weight'; expected one of ...` names what to change (quoting `0` would only lead to that message).
    Only a key no branch of its mapping's union has counts: where the schema cannot be told, the keys are reported."""
    loc: PathKey = ()
    for part in path:
        loc, branches = _branches(loc, data)
        if isinstance(part, str) and branches and not any(_known(part, keys) for _, keys in branches):
            return True
        loc = (*next((at for at, keys in branches if _known(part, keys)), loc), part)
    return False


def _known(part: str | int, keys: list[str]) -> bool:
    """Whether `part` is one of `keys`, which name a field by its alias: the schema also takes the field's own name,
    `with_` for `with` (aliases stand for Python keywords only)."""
    return part in keys or (isinstance(part, str) and part.removesuffix("_") in keys)


def _branches(loc: PathKey, data: Any) -> tuple[PathKey, list[tuple[PathKey, list[str]]]]:
    """`loc` with the union tags validation picks for the value there (pydantic's location: `('loss', 'list')`),
    and the keys its mapping may have, with their place: keys_at's; where that stops at a union inside a union (a
    layer's `op` after layer-or-instance, a loss term's `kind`), one per branch that a value of the mapping names;
    none where the mapping's keys are free (`optimizers`) or the schema is left."""
    from specgen.spec.allowed_keys import allowed_keys, located_keys  # the spec's schema: only for such keys

    loc, keys = located_keys(loc, data)
    if keys:
        return loc, [(loc, keys)]
    value = data_path(loc, data)[1]
    named = [(*loc, tag) for tag in value.values() if isinstance(tag, str)] if isinstance(value, dict) else []
    return loc, [(at, found) for at in named if (found := allowed_keys(at))]
