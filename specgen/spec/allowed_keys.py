"""Which keys a mapping of a spec may have, read from Spec's type annotations: the list an unknown-key message offers.

Pydantic locates an error by a path of field names, list indices and union branch tags (`('loss', 'term',
'sparse_softmax_cross_entropy', 'from_logits')`); this module walks Spec's annotations along such a path, through
Optional, tagged and discriminated unions, to the model whose fields are the keys. Kept apart from messages.py,
which words the errors, so each stays readable on its own.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any

from pydantic import BaseModel

from specgen.spec.model import Spec
from specgen.spec.source_map import PathKey, data_path


@functools.lru_cache(maxsize=256)
def allowed_keys(loc: PathKey) -> list[str]:
    """The keys a mapping at `loc` may have, found by walking Spec's type annotations (cached:
    every unknown key in one mapping asks for the same list; callers must not change it)."""
    model = _model_of(_type_at(loc))
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()] + (list(COMPOSING) if loc == () else [])


# Top-level keys that spec/compose.py and spec/load.py take out before Spec validates the rest: a spec's keys all
# the same (docs/spec.md, "Top-level keys"), so a misspelt `extend:` is offered `extends`.
COMPOSING = ("abstract", "extends")


def keys_at(loc: PathKey, data: Any) -> list[str]:
    """allowed_keys of the mapping at `loc` in `data`. Where `loc` ends at a union without naming a branch (a
    caller validated one branch alone: a block's instance entry as `Instance`), the branch is the one the
    union's own discriminator picks for the value written there, as validation would have picked it."""
    return located_keys(loc, data)[1]


def located_keys(loc: PathKey, data: Any) -> tuple[PathKey, list[str]]:
    """keys_at's location and keys: `loc` with the union branch tags it picked appended (as pydantic's error
    locations name them), so a caller can walk on below it (yaml_source.py's unknown-key judge)."""
    keys = allowed_keys(loc)
    value = data_path(loc, data)[1] if not keys else None
    for _ in range(MAX_BRANCHES):  # a picked branch may be a union again (a layer: then its `op`)
        if keys:
            break
        tag = _pick(_type_at(loc), value)
        if tag is None:
            break
        loc = (*loc, tag)
        keys = allowed_keys(loc)
    return loc, keys


MAX_BRANCHES = 4  # unions nested in unions along one location; specs have at most 2


def _type_at(loc: PathKey) -> Any:
    """The type of the value at `loc` in a spec (None where `loc` leaves the spec's types)."""
    tp: Any = Spec
    for part in loc:
        tp = _step(tp, part)
        if tp is None:
            return None
    return tp


def _pick(tp: Any, value: Any) -> str | None:
    """The tag of the branch of union `tp` that `value` takes, by the union's discriminator: a function of the
    value (fields/unions.by_shape, blocks.LayerOrInstance) or a key (`op`, `kind`); None without one."""
    for meta in _metadata(tp):
        found = getattr(meta, "discriminator", None)
        found = getattr(found, "discriminator", found)  # Field(discriminator=Discriminator(...))
        if callable(found):
            tag = found(value)
        elif isinstance(found, str) and isinstance(value, dict):
            tag = value.get(found)
        else:
            continue
        return tag if isinstance(tag, str) else None
    return None


def _metadata(tp: Any) -> list[Any]:
    """The Annotated metadata of `tp`, outermost first, through `X | None`."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        tp = members[0] if len(members) == 1 else tp  # `X | None`: X's
    found: list[Any] = []
    while typing.get_origin(tp) is typing.Annotated:
        found += typing.get_args(tp)[1:]
        tp = typing.get_args(tp)[0]
    return found


def _members(tp: Any) -> list[Any]:
    """Flatten Annotated/Union into the member types (with their Annotated metadata)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        inner = typing.get_args(tp)[0]
        members = _members(inner)
        return members if len(members) > 1 else [tp]
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(tp) for m in _members(arg)]
    return [tp]


def _tagged(tp: Any) -> list[Any]:
    """A union's branches that carry a Tag, unflattened: `_members` flattens a tagged union branch into its
    members, and a location that names the branch's tag would then find none."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return [tp] if _tag_of(tp) is not None else _tagged(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [branch for arg in typing.get_args(tp) for branch in _tagged(arg)]
    return []


def _strip(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _tag_of(tp: Any) -> str | None:
    if typing.get_origin(tp) is typing.Annotated:
        for meta in typing.get_args(tp)[1:]:
            if type(meta).__name__ == "Tag":
                return str(meta.tag)
    return None


def _model_of(tp: Any) -> type[BaseModel] | None:
    members = [_strip(m) for m in _members(tp)]
    models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
    return models[0] if len(models) == 1 else None


def _step(tp: Any, part: str | int) -> Any:
    members = [m for m in _members(tp) if _strip(m) is not type(None)]  # `X | None` (optional) steps into X
    if len(members) == 1:
        tp = members[0]
    elif len(members) > 1:  # a union: the location names the branch by tag or discriminator value
        for branch in _tagged(tp):  # a tagged branch that is itself a union (loss: `term`, then its kind)
            if _tag_of(branch) == part:
                return typing.get_args(branch)[0]
        for member in members:
            if _tag_of(member) == part or _literal_tag(_strip(member), part):
                return member
        return None
    tp = _strip(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, field in tp.model_fields.items():
            if part in (name, field.alias):
                return field.annotation
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list and isinstance(part, int):
        return args[0]
    if origin is dict:
        return args[1]
    return None


def _literal_tag(tp: Any, part: str | int) -> bool:
    if not (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return False
    for field in tp.model_fields.values():
        if typing.get_origin(field.annotation) is typing.Literal and part in typing.get_args(field.annotation):
            return True
    return False
