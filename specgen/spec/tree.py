"""The trees `extends` merges (spec/merge.py holds the rules): every value with the `Setting`s that wrote it, in
order (the last one won), so diagnostics point where the winning value was written and `specgen explain` lists
every place that set a key."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from specgen.diagnostics import Diagnostic, Position, SpecError
from specgen.spec.received import received
from specgen.spec.source_map import PathKey, SourceMap

__all__ = ["Added", "ComposedSourceMap", "Gone", "Node", "Orphan", "Setting", "error_at", "node", "received"]


@dataclass(frozen=True)
class Setting:
    """One place that wrote a value: a file position (`source`, `loc`), an override, or a default."""

    label: str  # the file as printed, `--set` or `default`
    source: SourceMap | None = None
    loc: PathKey = ()
    via: str = ""  # 'b.yaml:1:10, via top.yaml:1:10': the `extends` entries that brought the file in
    top: bool = True  # written in the spec file itself (not a base)
    value: Any = field(default=None, compare=False)  # what the setting wrote, as written (for `specgen explain`)
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


class Added(NamedTuple):
    """An item a file appended to a named list its bases gave (its name is in none of them): where, and the names
    the bases' list held, for a message when it stays without what a new item needs (merge.check_added)."""

    at: Setting
    before: tuple[str, ...]


class Gone(NamedTuple):
    """An item a `{name: X, remove: true}` removed from a named list: kept (out of the data) so that `explain`
    still lists who set its keys, and where it was removed."""

    item: Node
    flag: Setting


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
    # A named list's removed items by name (an item given again later is live, not gone).
    gone: dict[str, Gone] = field(default_factory=dict)
    # A named list's items that a file appended to what its bases gave, by name.
    added: dict[str, Added] = field(default_factory=dict)
    # A mapping's keys the schema knows, whose default is null (unset), that nothing wrote: left out of the resolved
    # spec, and still a key `explain` answers for (a dense layer's `activation`).
    unset: frozenset[str] = frozenset()

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

    # A container's setting keeps what it wrote as well: a list replaced whole lists each value in `explain`.
    if isinstance(value, dict):
        return Node([replace(setting, value=value)], mapping={k: node(v, at(k)) for k, v in value.items()})
    if isinstance(value, list):
        return Node([replace(setting, value=value)], items=[node(v, at(i)) for i, v in enumerate(value)])
    return Node([replace(setting, value=value)], value=value)


class ComposedSourceMap(SourceMap):
    """A SourceMap over merged data: each path's position is where its winning value was written."""

    def __init__(self, path: str, tree: Node):
        super().__init__(path)
        self.tree = tree
        self.settings: dict[PathKey, list[Setting]] = dict(tree.flat())
        self.removals: dict[PathKey, Setting] = dict(_removals(tree, ()))

    def removal(self, path: PathKey) -> Position | None:
        found = self.removals.get(tuple(path))
        return found.position() if found is not None else None

    def position(self, path: PathKey, *, key: bool = False) -> Position | None:
        for n in range(len(path), -1, -1):
            found = self.settings.get(tuple(path[:n]))
            if found:
                return found[-1].position(key=key and n == len(path))
        return None


def _removals(tree: Node, at: PathKey) -> Iterator[tuple[PathKey, Setting]]:
    """Each key a `key: null` removed (and nothing wrote again), with that null."""
    children = tree.mapping.items() if tree.mapping is not None else enumerate(tree.items or [])
    for key, child in children:
        if child.removed:
            null = next((s for s in reversed(child.settings) if s.removes), None)
            if null is not None:
                yield (*at, key), null
        else:
            yield from _removals(child, (*at, key))


def error_at(setting: Setting, message: str) -> SpecError:
    position = setting.position()
    path = position.file if position is not None and position.file else setting.label
    return SpecError([Diagnostic(path, position, message)])
