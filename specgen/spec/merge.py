"""The merge of spec trees that `extends` composes (compose.py loads the files): every value keeps the `Setting`s
that wrote it, in order (the last one won), so diagnostics point where the winning value was written and `specgen
explain` lists every place that set a key.

The rules (docs/spec.md, "Composing specs"):

- mappings merge key by key; `key: null` in a file that extends removes the key its bases gave (Helm's rule for
  values files; a null that removes nothing stays a null, as in a plain spec), and the removal stays in the
  history;
- a list whose items are all mappings with a `name` (`layers`, a block's `layers`) merges by name: an item naming
  an existing one changes only the fields it gives, a new one is appended or placed with `after: NAME` /
  `before: NAME`, and `{name: X, remove: true}` removes one (a name twice in one list is an error, and so is a
  removal that would silently rewire the layer after it, which read the removed one implicitly);
- every other value, lists included, is replaced whole.

A value's history keeps each place that wrote it once, so a diamond of bases (a extends [b, c], both extend d)
cannot double at every level.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from specgen.diagnostics import Diagnostic, Position, SpecError, describe, quoted
from specgen.spec.yaml_source import PathKey, SourceMap

CONTROL = ("remove", "after", "before")  # the keys of a named item that steer the merge; never in the result


@dataclass(frozen=True)
class Setting:
    """One place that wrote a value: a file position (`source`, `loc`), an override, or a default."""

    label: str  # the file as printed, `--set` or `default`
    source: SourceMap | None = None
    loc: PathKey = ()
    via: str = ""  # 'b.yaml:1:10, via top.yaml:1:10': the `extends` entries that brought the file in
    top: bool = True  # written in the spec file itself (not a base)
    value: Any = field(default=None, compare=False)  # what a leaf's setting wrote (for `specgen explain`)
    removes: bool = field(default=False, compare=False)  # a `key: null` that removed what the bases gave

    def position(self, key: bool = False) -> Position | None:
        if self.source is None:
            return None
        found = self.source.position(self.loc, key=key)
        if found is None or self.top:
            return found
        return Position(found.line, found.col, file=self.label, via=self.via)

    def place(self) -> tuple[int, PathKey] | Setting:
        """What makes two settings the same place: one file (each is parsed once) and one location in it."""
        return (id(self.source), self.loc) if self.source is not None else self

    def where(self) -> str:
        """`base.yaml:12:5`, `--set train.batch_size=32` or `default`."""
        found = self.source.position(self.loc) if self.source is not None else None
        return f"{self.label}:{found.line}:{found.col}" if found else self.label


class Orphan(NamedTuple):
    """A layer that read a removed one implicitly: the reader, the removed layer, the `remove: true` that removed
    it, and the layer the reader reads once the list that removed it is merged (None: it is first)."""

    reader: str
    removed: str
    flag: Setting
    now_reads: str | None


@dataclass
class Node:
    """A merged value with the settings that wrote it: a leaf's value, or a mapping's or list's children."""

    settings: list[Setting]
    value: Any = None
    mapping: dict[Any, Node] | None = None
    items: list[Node] | None = None
    # A key a `key: null` removed: kept (out of `data()`) so that `explain` still lists who set and who removed it.
    removed: bool = False
    # A named list's removals that left the next layer reading another one implicitly: judged once the whole spec
    # is merged (check_orphans), as a file that extends the one removing may give that layer its input.
    orphans: tuple[Orphan, ...] = ()

    def data(self) -> Any:
        if self.mapping is not None:
            return {k: v.data() for k, v in self.mapping.items() if not v.removed}
        if self.items is not None:
            return [v.data() for v in self.items]
        return self.value

    def flat(self, at: PathKey = ()) -> Iterator[tuple[PathKey, list[Setting]]]:
        yield at, self.settings
        children = self.mapping.items() if self.mapping is not None else enumerate(self.items or [])
        for key, child in children:
            if not child.removed:
                yield from child.flat((*at, key))

    def name(self) -> Any:
        return self.mapping["name"].value if self.mapping is not None and "name" in self.mapping else None


def node(value: Any, setting: Setting) -> Node:
    """The tree of `value` as written at `setting` (its children at their own locations in the same file)."""
    def at(part: Any) -> Setting:
        return Setting(setting.label, setting.source, (*setting.loc, part), setting.via, setting.top)

    if isinstance(value, dict):
        return Node([setting], mapping={k: node(v, at(k)) for k, v in value.items()})
    if isinstance(value, list):
        return Node([setting], items=[node(v, at(i)) for i, v in enumerate(value)])
    return Node([replace(setting, value=value)], value=value)


class ComposedSourceMap(SourceMap):
    """A SourceMap over merged data: each path's position is where its winning value was written."""

    def __init__(self, path: str, tree: Node):
        super().__init__(path)
        self.tree = tree
        self.settings: dict[PathKey, list[Setting]] = dict(tree.flat())

    def position(self, path: PathKey, *, key: bool = False) -> Position | None:
        for n in range(len(path), -1, -1):
            found = self.settings.get(tuple(path[:n]))
            if found:
                return found[-1].position(key=key and n == len(path))
        return None


# --- merging ---------------------------------------------------------------------------------------------------


def merge(base: Node, child: Node) -> Node:
    """`child` written over `base` by the rules of the module docstring."""
    if base.mapping is not None and child.mapping is not None:
        merged = dict(base.mapping)
        for key, value in child.mapping.items():
            old = merged.get(key)
            if value.removed:  # a key a later base removed: that base gives nothing there
                merged.setdefault(key, value)
            elif old is None:
                merged[key] = value
            elif _is_null(value):
                merged[key] = _removal(old, value)  # `key: null` removes what the bases gave
            else:
                if old.removed:  # written again: it comes last, as a key the bases never gave (the data's order)
                    del merged[key]
                merged[key] = merge(old, value)
        return Node(_history(base.settings, child.settings), mapping=merged)
    if base.items is not None and child.items is not None and _named(base.items) and _named(child.items):
        items, orphans = _merge_named(base.items, child.items)
        return Node(_history(base.settings, child.settings), items=items,
                    orphans=(*base.orphans, *child.orphans, *orphans))
    if child.mapping is None and child.items is None and base.mapping is None and base.items is None:
        return Node(_history(base.settings, child.settings), value=child.value)  # a leaf keeps its history
    return child


def _is_null(value: Node) -> bool:
    return value.mapping is None and value.items is None and value.value is None


def _removal(old: Node, null: Node) -> Node:
    """What `key: null` leaves of a key the bases gave: nothing in the data, the history for `explain`."""
    return Node(_history(old.settings, [replace(s, removes=True) for s in null.settings]), removed=True)


def _history(first: list[Setting], then: list[Setting]) -> list[Setting]:
    """The settings of `first`, then of `then`, each place once at its last: a base reached along two paths (a
    diamond) wrote its values once, and keeping both copies would double every history at every level."""
    if not first or not then:
        return first + then
    later = {s.place() for s in then}
    return [s for s in first if s.place() not in later] + then


def _named(items: list[Node]) -> bool:
    """Every item a mapping with a string `name` (a child's item may be only `{name, remove}`)."""
    return bool(items) and all(isinstance(i.name(), str) for i in items)


def _merge_named(base: list[Node], child: list[Node]) -> tuple[list[Node], list[Orphan]]:
    result = list(base)
    seen: dict[str, Setting] = {}
    placed: set[str] = set()  # new items and items moved with after/before: where this list put them is deliberate
    orphans: list[Orphan] = []
    for item in child:
        assert item.mapping is not None
        name = item.name()
        _check_once(item, name, seen)
        steer = {k: item.mapping[k] for k in CONTROL if k in item.mapping}
        names = [n.name() for n in result]
        if "remove" in steer and steer["remove"].value is not False:
            orphans += _remove(result, item, steer["remove"], names)
            continue
        body = Node(item.settings, mapping={k: v for k, v in item.mapping.items() if k not in CONTROL})
        if name in names:
            index = names.index(name)
            merged = merge(result.pop(index), body)
            names.pop(index)
        else:
            index, merged = len(result), body
            placed.add(name)
        if "after" in steer or "before" in steer:
            placed.add(name)
        result.insert(_place(steer, names, index), merged)
    return result, _orphaned(result, orphans, placed)


def _check_once(item: Node, name: str, seen: dict[str, Setting]) -> None:
    """One item per name in a list that merges by name (as a plain spec's layer names are unique)."""
    at = _name_at(item)
    if name in seen:
        raise error_at(at, f"name: {quoted(name)} is listed twice in this list (first at {seen[name].where()}); an item "
                      "is changed in one place: merge the two into one")
    seen[name] = at


def _name_at(item: Node) -> Setting:
    """Where a named item's `name` was last written: diagnostics about the item point there."""
    assert item.mapping is not None  # only the items of a named list (_named) get here
    return item.mapping["name"].settings[-1]


def _remove(result: list[Node], item: Node, flag: Node, names: list[Any]) -> list[Orphan]:
    """Remove `item`'s namesake from `result`; the layer after it, when it read it implicitly, as an orphan (its
    new predecessor is filled in once the list is merged: _orphaned)."""
    name = item.name()
    _check_remove(item, flag, name, names)
    index = names.index(name)
    del result[index]
    if index < len(result) and _reads_previous(result[index]):
        return [Orphan(result[index].name(), name, flag.settings[-1], None)]
    return []


def _check_remove(item: Node, flag: Node, name: str, names: list[Any]) -> None:
    assert item.mapping is not None
    if flag.value is not True:
        raise error_at(flag.settings[-1], f"remove: expected true; received {received(flag.value)}")
    extra = next((k for k in item.mapping if k not in ("name", "remove")), None)
    if extra is not None:  # `after`, `units`, ... beside `remove: true` would be silently ignored
        raise error_at(item.mapping[extra].settings[-1], f"{extra}: an item with `remove: true` takes only `name`; "
                                                    f"drop {quoted(extra)} or `remove`")
    if name not in names:
        raise error_at(flag.settings[-1], f"remove: no base defines an item named {quoted(name)}; "
                                     f"{_choices(names)}")


def _given(item: Node, key: str) -> bool:
    found = item.mapping.get(key) if item.mapping is not None else None
    return found is not None and not found.removed and not _is_null(found)


def _reads_previous(item: Node) -> bool:
    """A layer (or block instance) without `input` / `inputs`: it reads the layer listed before it."""
    return (_given(item, "op") or _given(item, "block")) and not (_given(item, "input") or _given(item, "inputs"))


def _orphaned(result: list[Node], orphans: list[Orphan], placed: set[str]) -> list[Orphan]:
    """The orphans this list leaves, each with the layer it now reads: not those this list gave an input or a
    layer of its own right before them (as an insertion does, on purpose), nor those removed as well."""
    names = [n.name() for n in result]
    left = []
    for orphan in orphans:
        if orphan.reader not in names:
            continue  # removed as well: the layer after it was checked when it was
        index = names.index(orphan.reader)
        before = names[index - 1] if index else None
        if _reads_previous(result[index]) and orphan.reader not in placed and before not in placed:
            left.append(orphan._replace(now_reads=before))
    return left


def check_orphans(tree: Node) -> None:
    """After the whole spec is merged: a layer that read a removed layer implicitly and would now silently read the
    one before that is an error at the reader (docs/spec.md), unless a later file gave it an input or changed the
    layer before it (an insertion, a move: on purpose)."""
    if tree.items is not None:
        names = [n.name() for n in tree.items]
        for orphan in tree.orphans:
            index = names.index(orphan.reader) if orphan.reader in names else None
            if index is None or not _reads_previous(tree.items[index]):
                continue
            if (names[index - 1] if index else None) == orphan.now_reads:
                raise _orphan_error(tree.items[index], orphan)
    children = tree.mapping.values() if tree.mapping is not None else tree.items or []
    for child in children:
        check_orphans(child)


def _orphan_error(reader: Node, orphan: Orphan) -> SpecError:
    before = orphan.now_reads
    now = f"the layer before it is now {quoted(before)}" if before is not None else "it is now the first layer"
    return error_at(_name_at(reader), f"layer {quoted(orphan.reader)} reads {quoted(orphan.removed)} implicitly (as the "
                                      f"layer before it), and {orphan.flag.where()} removes {quoted(orphan.removed)}; "
                                      f"give {quoted(orphan.reader)} an explicit `input:` ({now})")


def _place(steer: dict[str, Node], names: list[Any], index: int) -> int:
    """Where an item goes: after/before a named one, else where it was (a new one: at the end)."""
    for key, offset in (("after", 1), ("before", 0)):
        if key in steer:
            target = steer[key]
            if target.value not in names:
                raise error_at(target.settings[-1], f"{key}: no item named {quoted(target.value)} to place it "
                                               f"{key}; {_choices(names)}")
            return names.index(target.value) + offset
    return index


def _choices(names: list[Any]) -> str:
    shown_names = ", ".join(str(n) for n in names[:12]) + (", ..." if len(names) > 12 else "")
    return f"expected one of {shown_names}" if names else "the list is empty"


def received(value: Any) -> str:
    """A received value as messages write it; None is YAML's `null` (`~` or an empty value), not Python's."""
    return "null" if value is None else describe(value)


def error_at(setting: Setting, message: str) -> SpecError:
    position = setting.position()
    path = position.file if position is not None and position.file else setting.label
    return SpecError([Diagnostic(path, position, message)])
