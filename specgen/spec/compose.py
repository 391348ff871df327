"""`extends`: a spec built on other spec files, with the origin of every value kept (docs/spec.md, "Composing specs").

`extends: base.yaml` or `extends: [a.yaml, b.yaml]` at the top of a spec names files (relative to the file that
names them) whose merged content the file's own keys then change. The merge rules, in one place:

- mappings merge key by key; `key: null` in a file that extends removes the key its bases gave (Helm's rule for
  values files; a null that removes nothing stays a null, as in a plain spec);
- a list whose items are all mappings with a `name` (`layers`, a block's `layers`) merges by name: an item naming
  an existing one changes only the fields it gives, a new one is appended or placed with `after: NAME` /
  `before: NAME`, and `{name: X, remove: true}` removes one;
- every other value, lists included, is replaced whole.

Each value of the merged data keeps the list of `Setting`s that wrote it, in order (the last one won), so a
diagnostic points at the file, line and column where the winning value was written, with the chain of `extends`
that brought it in (`via variants/small.yaml:2:10`), and `specgen explain` can list every place that set a key.
Refusals (a cycle, a missing file, a file outside the repository, a chain deeper than MAX_DEPTH) are one
positioned line each at the `extends` entry that names the file; the refused file's content is never echoed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specgen.diagnostics import Diagnostic, Position, SpecError, describe, quoted
from specgen.paths import shown
from specgen.spec.yaml_source import PathKey, SourceMap, load_yaml

MAX_DEPTH = 16  # files in one chain of `extends`; real families use 2 or 3
MAX_FILES = 64  # distinct files one spec may be composed of
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

    def position(self, key: bool = False) -> Position | None:
        if self.source is None:
            return None
        found = self.source.position(self.loc, key=key)
        if found is None or self.top:
            return found
        return Position(found.line, found.col, file=self.label, via=self.via)

    def where(self) -> str:
        """`base.yaml:12:5`, `--set train.batch_size=32` or `default`."""
        found = self.source.position(self.loc) if self.source is not None else None
        return f"{self.label}:{found.line}:{found.col}" if found else self.label


@dataclass
class Node:
    """A merged value with the settings that wrote it: a leaf's value, or a mapping's or list's children."""

    settings: list[Setting]
    value: Any = None
    mapping: dict[Any, Node] | None = None
    items: list[Node] | None = None

    def data(self) -> Any:
        if self.mapping is not None:
            return {k: v.data() for k, v in self.mapping.items()}
        if self.items is not None:
            return [v.data() for v in self.items]
        return self.value

    def flat(self, at: PathKey = ()) -> Iterator[tuple[PathKey, list[Setting]]]:
        yield at, self.settings
        children = self.mapping.items() if self.mapping is not None else enumerate(self.items or [])
        for key, child in children:
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
            if value.mapping is None and value.items is None and value.value is None and key in merged:
                del merged[key]  # `key: null` removes what the bases gave
            else:
                merged[key] = merge(merged[key], value) if key in merged else value
        return Node(base.settings + child.settings, mapping=merged)
    if base.items is not None and child.items is not None and _named(base.items) and _named(child.items):
        return Node(base.settings + child.settings, items=_merge_named(base.items, child.items))
    if child.mapping is None and child.items is None and base.mapping is None and base.items is None:
        return Node(base.settings + child.settings, value=child.value)  # a leaf keeps its history for `explain`
    return child


def _named(items: list[Node]) -> bool:
    """Every item a mapping with a string `name` (a child's item may be only `{name, remove}`)."""
    return bool(items) and all(isinstance(i.name(), str) for i in items)


def _merge_named(base: list[Node], child: list[Node]) -> list[Node]:
    result = list(base)
    for item in child:
        assert item.mapping is not None
        name = item.name()
        steer = {k: item.mapping[k] for k in CONTROL if k in item.mapping}
        body = Node(item.settings, mapping={k: v for k, v in item.mapping.items() if k not in CONTROL})
        names = [n.name() for n in result]
        if steer.get("remove") is not None and steer["remove"].value is not False:
            _check_remove(steer["remove"], name, names)
            del result[names.index(name)]
            continue
        if name in names:
            index = names.index(name)
            merged = merge(result.pop(index), body)
            names.pop(index)
        else:
            index, merged = len(result), body
        result.insert(_place(steer, names, index), merged)
    return result


def _check_remove(flag: Node, name: str, names: list[Any]) -> None:
    if flag.value is not True:
        raise _at(flag.settings[-1], f"remove: expected true; received {describe(flag.value)}")
    if name not in names:
        raise _at(flag.settings[-1], f"remove: no base defines an item named {quoted(name)}; "
                                     f"{_choices(names)}")


def _place(steer: dict[str, Node], names: list[Any], index: int) -> int:
    """Where an item goes: after/before a named one, else where it was (a new one: at the end)."""
    for key, offset in (("after", 1), ("before", 0)):
        if key in steer:
            target = steer[key]
            if target.value not in names:
                raise _at(target.settings[-1], f"{key}: no item named {quoted(target.value)} to place it "
                                               f"{key}; {_choices(names)}")
            return names.index(target.value) + offset
    return index


def _choices(names: list[Any]) -> str:
    shown_names = ", ".join(str(n) for n in names[:12]) + (", ..." if len(names) > 12 else "")
    return f"expected one of {shown_names}" if names else "the list is empty"


def _at(setting: Setting, message: str) -> SpecError:
    position = setting.position()
    path = position.file if position is not None and position.file else setting.label
    return SpecError([Diagnostic(path, position, message)])


# --- loading ---------------------------------------------------------------------------------------------------


@dataclass
class _Loader:
    """Loads one top spec and every file it extends, each once, within the repository."""

    root: Path  # the resolved folder every file must lie under
    files: dict[Path, tuple[Any, SourceMap]] = field(default_factory=dict)

    def load(self, path: Path, display: str, chain: tuple[Path, ...], via: str) -> Node:
        real = path.resolve()
        if real not in self.files:
            self.files[real] = load_yaml(path, display)
        data, source = self.files[real]
        top = not chain
        setting = Setting(display, source, (), via, top)
        if not isinstance(data, dict) or "extends" not in data:
            return node(data, setting)
        own = node({k: v for k, v in data.items() if k != "extends"}, setting)
        merged: Node | None = None
        for ref, where in self._refs(data["extends"], setting):
            base = self._base(path, ref, where, (*chain, real))
            merged = base if merged is None else merge(merged, base)
        if merged is None:
            return own
        if merged.mapping is not None:
            merged.mapping.pop("abstract", None)  # a base's `abstract` is its own: the child is concrete
        return merge(merged, own)

    def _refs(self, value: Any, setting: Setting) -> list[tuple[str, Setting]]:
        at = Setting(setting.label, setting.source, ("extends",), setting.via, setting.top)
        refs = value if isinstance(value, list) else [value]
        if not all(isinstance(r, str) and r for r in refs):
            raise _at(at, f"extends: expected a spec file (a path relative to this file) or a list of them; "
                          f"received {describe(value)}")
        if isinstance(value, list):
            return [(r, Setting(at.label, at.source, ("extends", i), at.via, at.top)) for i, r in enumerate(refs)]
        return [(value, at)]

    def _base(self, child: Path, ref: str, where: Setting, chain: tuple[Path, ...]) -> Node:
        path = Path(os.path.normpath(child.parent / ref))
        if len(chain) >= MAX_DEPTH:
            raise _at(where, f"extends: the chain of bases is deeper than {MAX_DEPTH} files")
        if path.suffix not in (".yaml", ".yml"):
            raise _at(where, f"extends: {quoted(ref)} is not a spec file; expected a .yaml or .yml file")
        if not path.exists():
            raise _at(where, f"extends: {quoted(ref)} does not exist (looked for {shown(path)})")
        real = path.resolve()
        if not real.is_relative_to(self.root):
            raise _at(where, f"extends: {quoted(ref)} is outside the repository ({shown(self.root)}); a spec "
                             "extends only files of its own repository")
        if real in chain:
            cycle = " -> ".join(shown(p) for p in (*chain[chain.index(real):], real))
            raise _at(where, f"extends: {quoted(ref)} closes a cycle ({cycle})")
        if real not in self.files and len(self.files) >= MAX_FILES:
            raise _at(where, f"extends: the spec is composed of more than {MAX_FILES} files")
        via = where.where() + (f", via {where.via}" if where.via else "")
        return self.load(path, shown(path), chain, via)


def repository_root(spec: Path) -> Path:
    """The folder holding the spec's nearest `.git` (a folder or a worktree's file), else the spec's folder."""
    folder = spec.resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return folder


def load_composed(path: Path, display: str | None = None) -> tuple[Any, SourceMap]:
    """(merged data, source map) of a spec and everything it extends; a plain spec's own SourceMap unchanged."""
    shown_path = display or str(path)
    data, source = load_yaml(path, shown_path)
    if not isinstance(data, dict) or "extends" not in data:
        return data, source
    loader = _Loader(repository_root(path), {path.resolve(): (data, source)})
    tree = loader.load(path, shown_path, (), "")
    return tree.data(), ComposedSourceMap(shown_path, tree)
