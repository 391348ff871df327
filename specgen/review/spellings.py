"""One spelling per value, so that `specgen diff` compares what a spec means, not how it was written.

A spec says many things in more than one way, and the field types say which: a union picked by the value's
shape (fields/unions.py `by_shape`) whose branches are a scalar and a list of fixed length (`kernel: 3` is
`[3, 3]`; a padding's `1` is `[1, 1]` is `[[1, 1], [1, 1]]`: each shorter spelling repeats every value over the
missing inner axis, as kinds/ops/shapes.py `pair` and kinds/ops/padding.py `pairs` read it), or a name and a
mapping discriminated by a key (`kernel_init: he_normal` is `{kind: he_normal}`, its defaults filled in; a metric
name is `{kind: <name>}`), or a scalar that means the one-item list (`variables: "*"` is `["*"]`: the unions
marked ONE_ITEM, fields/unions.py). `normalized` rewrites a model's dump into the longest spelling of each. A default that
is null because it is derived from another key (a pool's `strides`: its `size`) is the IR's to resolve:
review/layers.py takes such values from the layer's resolved parameters.

review/sections.py `changed_rows` then lists, as rows of the written leaves, only what differs once normalized.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

from annotated_types import MaxLen, MinLen
from pydantic import BaseModel, Discriminator, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from specgen.fields.unions import OneItem

_ADAPTERS: dict[int, tuple[Any, TypeAdapter[Any]]] = {}  # id(type) -> (type, its adapter): building one is slow


def normalized(model: BaseModel, include: set[str] | None = None) -> dict[str, Any]:
    """`model`'s JSON dump (by alias, defaults filled in; its fields `include` only, where given) with every
    shorthand in its longest spelling."""
    return _model(model, model.model_dump(mode="json", by_alias=True, warnings=False, include=include))


def _model(model: BaseModel, dumped: dict[str, Any]) -> dict[str, Any]:
    """Walks the dump beside the model's fields, so that a value no rule rewrites stays exactly as pydantic dumps it."""
    out = dict(dumped)
    for name, info in type(model).model_fields.items():
        key = info.serialization_alias or info.alias or name
        if key in out:
            out[key] = _value(_annotation(info), getattr(model, name), out[key])
    return out


def _annotation(info: FieldInfo) -> Any:
    return Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation


def _value(tp: Any, value: Any, dumped: Any) -> Any:
    # The shape union and an optional field's one type are looked at before a model value is walked: a loss term
    # (a model) in `Loss | None` is the one-item list of terms (ONE_ITEM), which walking it as a model would miss.
    base, meta = (get_args(tp)[0], get_args(tp)[1:]) if get_origin(tp) is Annotated else (tp, ())
    if any(isinstance(m, Discriminator) and callable(m.discriminator) for m in meta):
        if any(isinstance(m, OneItem) for m in meta) and not isinstance(dumped, list):
            return [_shorthand(_branches(base), value, dumped)]  # a scalar is the list of that one item
        return _shorthand(_branches(base), value, dumped)
    origin, args = get_origin(base), get_args(base)
    members = [a for a in args if a is not type(None)]
    if origin in (Union, types.UnionType) and value is not None and len(members) == 1:
        return _value(members[0], value, dumped)
    if isinstance(value, BaseModel) and isinstance(dumped, dict):
        return _model(value, dumped)
    if origin in (list, tuple) and args and isinstance(value, list | tuple) and isinstance(dumped, list):
        return [_value(args[0], v, d) for v, d in zip(value, dumped, strict=False)]
    if origin is dict and len(args) == 2 and isinstance(value, dict) and isinstance(dumped, dict):
        return {k: _value(args[1], v, d) for (k, d), v in zip(dumped.items(), value.values(), strict=False)}
    return dumped


def _branches(union: Any) -> list[Any]:
    """The branches of a `by_shape` union, each without its Tag."""
    members = get_args(union) if get_origin(union) in (Union, types.UnionType) else (union,)
    found = []
    for member in members:
        if get_origin(member) is Annotated:
            inner, *meta = get_args(member)
            kept = [m for m in meta if type(m).__name__ != "Tag"]
            member = Annotated[(inner, *kept)] if kept else inner
        found.append(member)
    return found


def _shorthand(branches: list[Any], value: Any, dumped: Any) -> Any:
    if isinstance(value, BaseModel) and isinstance(dumped, dict):
        return _model(value, dumped)
    if isinstance(value, str):
        for branch in branches:
            if (spelled := _named(branch, value)) is not None:
                return spelled
    dims = max((_dims(b) for b in branches), key=len)
    if dims and _depth(dumped) < len(dims) and isinstance(dumped, int | float | list):
        return _widen(dumped, dims)
    return dumped


def _named(branch: Any, name: str) -> Any:
    """`name` as the mapping `{<key>: name}` where `branch` is a union discriminated by that key (an initializer,
    a metric), normalized; None where the branch is none such or refuses it (`pruner: none` is no kind)."""
    key = _discriminator(branch)
    if key is None:
        return None
    adapter = _adapter(branch)
    try:
        found = adapter.validate_python({key: name})
    except ValidationError:
        return None
    return _value(branch, found, adapter.dump_python(found, mode="json", by_alias=True, warnings=False))


def _discriminator(branch: Any) -> str | None:
    if get_origin(branch) is not Annotated:
        return None
    for meta in get_args(branch)[1:]:
        if isinstance(meta, FieldInfo) and isinstance(meta.discriminator, str):
            return meta.discriminator
    return None


def _adapter(tp: Any) -> TypeAdapter[Any]:
    if id(tp) not in _ADAPTERS:
        _ADAPTERS[id(tp)] = (tp, TypeAdapter(tp))  # the type is kept so that its id is never reused
    return _ADAPTERS[id(tp)][1]


def _dims(branch: Any) -> tuple[int, ...]:
    """The fixed lengths of a branch that is a list of fixed length (of lists of fixed length...): `(2,)` for
    `[h, w]`, `(2, 2)` for `[[top, bottom], [left, right]]`, `()` for anything else."""
    if get_origin(branch) is not Annotated:
        return ()
    inner, *meta = get_args(branch)
    limits = [m for info in meta if isinstance(info, FieldInfo) for m in info.metadata] + list(meta)
    low = next((m.min_length for m in limits if isinstance(m, MinLen)), None)
    high = next((m.max_length for m in limits if isinstance(m, MaxLen)), None)
    if get_origin(inner) is not list or low is None or low != high:
        return ()
    return (low, *_dims(get_args(inner)[0]))


def _depth(value: Any) -> int:
    return 1 + _depth(value[0]) if isinstance(value, list) and value else 0


def _widen(value: Any, dims: tuple[int, ...]) -> Any:
    """`value` spelled with every axis of `dims`: a missing inner axis repeats each value (`[h, w]` ->
    `[[h, h], [w, w]]`, a scalar -> every item)."""
    if not dims:
        return value
    if isinstance(value, list):
        return [_widen(v, dims[1:]) for v in value]
    return [_widen(value, dims[1:])] * dims[0]
