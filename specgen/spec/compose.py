"""`extends`: a spec built on other spec files, with the origin of every value kept (docs/spec.md, "Composing specs").

`extends: base.yaml` or `extends: [a.yaml, b.yaml]` at the top of a spec names files (relative to the file that
names them) whose merged content the file's own keys then change; merge.py holds the merge rules and the trees
whose values remember where they were written (`via variants/small.yaml:2:10` in a diagnostic, every place in
`specgen explain`).

Refusals (a cycle, a missing or unreadable file, one that is not a spec mapping, a file outside the repository, a
chain deeper than MAX_DEPTH, a base listed twice) are one positioned line each at the `extends` entry that names the
file; the refused file's content is never echoed.

The work is bounded by the files, not by the paths through them: each file is read and merged once (a base that
several files extend is merged from its cached tree).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specgen.diagnostics import Diagnostic, Position, SpecError, quoted
from specgen.diagnostics import shown as shown_text
from specgen.paths import shown
from specgen.spec.merge import ComposedSourceMap, Node, Setting, check_orphans, error_at, merge, node, received
from specgen.spec.spec_file import read_spec_text
from specgen.spec.yaml_source import SourceMap, load_yaml, parse_document

MAX_DEPTH = 16  # files in one chain of `extends`; real families use 2 or 3
MAX_FILES = 64  # distinct files one spec may be composed of
MAX_BASES = 16  # entries of one `extends` list; real families use 1 to 3


# --- loading ---------------------------------------------------------------------------------------------------


@dataclass
class _Loader:
    """Loads one top spec and every file it extends, each read and merged once, within the repository."""

    root: Path  # the resolved folder every file must lie under
    files: dict[Path, tuple[Any, SourceMap]] = field(default_factory=dict)
    # Each base's merged tree, by its path as named, and the files in its longest chain (itself included): a base
    # that several files extend is merged once, so the work grows with the files, not with the paths through them.
    trees: dict[Path, tuple[Node, int]] = field(default_factory=dict)

    def load(self, path: Path, display: str, chain: tuple[Path, ...], via: str) -> tuple[Node, int]:
        real = path.resolve()
        data, source = self.files[real]
        setting = Setting(display, source, (), via, not chain)
        if "extends" not in data:
            return node(data, setting), 1
        own = node({k: v for k, v in data.items() if k != "extends"}, setting)
        merged: Node | None = None
        height = 0
        for ref, where in self._refs(path, data["extends"], setting):
            base, below = self._base(path, ref, where, (*chain, real))
            merged = base if merged is None else merge(merged, base)
            height = max(height, below)
        assert merged is not None  # _refs refuses an empty list
        if merged.mapping is not None:  # a base's `abstract` is its own: the child is concrete (the tree is cached)
            merged = Node(merged.settings, mapping={k: v for k, v in merged.mapping.items() if k != "abstract"})
        return merge(merged, own), height + 1

    def _refs(self, path: Path, value: Any, setting: Setting) -> list[tuple[str, Setting]]:
        at = Setting(setting.label, setting.source, ("extends",), setting.via, setting.top)
        if not isinstance(value, list):
            _check_ref(value, value, at)
            return [(value, at)]
        if not value:  # most likely a list emptied by an edit; leaving `extends` out says "no base" plainly
            raise error_at(at, "extends: the list is empty; expected at least one spec file (leave `extends` out for a "
                          "spec with no base)")
        if len(value) > MAX_BASES:
            raise error_at(at, f"extends: {len(value)} bases in one list; at most {MAX_BASES}")
        for ref in value:
            _check_ref(ref, value, at)
        refs = [(r, Setting(at.label, at.source, ("extends", i), at.via, at.top)) for i, r in enumerate(value)]
        first: dict[str, Setting] = {}
        for ref, where in refs:  # a base applied twice changes nothing the first did not, and doubles the work
            target = os.path.normpath(path.parent / ref)
            if target in first:
                raise error_at(where, f"extends: {quoted(ref)} is already listed (at {first[target].where()}); each base "
                                 "applies once: list it once")
            first[target] = where
        return refs

    def _base(self, child: Path, ref: str, where: Setting, chain: tuple[Path, ...]) -> tuple[Node, int]:
        path = Path(os.path.normpath(child.parent / ref))
        if path.suffix not in (".yaml", ".yml"):
            raise error_at(where, f"extends: {quoted(ref)} is not a spec file; expected a .yaml or .yml file")
        try:
            self._find(path, ref, where, chain)  # refuses what may not be read; reads it into `files`
        except OSError as exc:  # a name too long for the file system, a permission on a folder, ...
            raise error_at(where, f"extends: {quoted(ref)} is refused: {exc.strerror or type(exc).__name__}") from None
        # Cached by the path as named, not as resolved: a base reached through a link reads its own `extends`
        # beside the link, so the same file reached two ways may make two trees.
        key = Path(os.path.abspath(path))
        cached = self.trees.get(key)
        if cached is None:
            via = where.where() + (f", via {where.via}" if where.via else "")
            cached = self.trees[key] = self.load(path, _shown(path), chain, via)
        if len(chain) + cached[1] > MAX_DEPTH:  # the files above this base, then its own longest chain
            raise error_at(where, f"extends: the chain of bases is deeper than {MAX_DEPTH} files")
        return cached

    def _find(self, path: Path, ref: str, where: Setting, chain: tuple[Path, ...]) -> Path:
        """The resolved path of a base that may be read, read into `files`; else a refusal at `where`."""
        if len(chain) >= MAX_DEPTH:
            raise error_at(where, f"extends: the chain of bases is deeper than {MAX_DEPTH} files")
        if not path.exists():
            raise error_at(where, f"extends: {quoted(ref)} does not exist (looked for {_shown(path)})")
        real = path.resolve()
        if not real.is_relative_to(self.root):
            raise error_at(where, f"extends: {quoted(ref)} is outside the repository ({_shown(self.root)}); a spec "
                             "extends only files of its own repository")
        if real in chain:
            cycle = " -> ".join(_shown(p) for p in (*chain[chain.index(real):], real))
            raise error_at(where, f"extends: {quoted(ref)} closes a cycle ({cycle})")
        if real not in self.files:
            if len(self.files) >= MAX_FILES:
                raise error_at(where, f"extends: the spec is composed of more than {MAX_FILES} files")
            self.files[real] = _read_base(path, ref, where)
        return real


def _check_ref(ref: Any, value: Any, at: Setting) -> None:
    if not isinstance(ref, str) or not ref:
        raise error_at(at, f"extends: expected a spec file (a path relative to this file) or a list of them; "
                      f"received {received(value)}")


def _read_base(path: Path, ref: str, where: Setting) -> tuple[dict[str, Any], SourceMap]:
    """A base's data and source map. What keeps it from being read at all is refused at the `extends` entry; a
    problem inside it (a YAML syntax error, a duplicate key) stays at its line in the base, with the chain."""
    try:
        data, source = parse_document(read_spec_text(path, _shown(path)), _shown(path))
    except SpecError as exc:
        via = where.where() + (f", via {where.via}" if where.via else "")
        raise SpecError([_in_base(d, ref, where, via) for d in exc.diagnostics]) from None
    if not isinstance(data, dict):
        kind = "is empty" if data is None else \
            f"is not a spec mapping (the file holds {'a list' if isinstance(data, list) else 'a single value'})"
        raise error_at(where, f"extends: {quoted(ref)} {kind}; expected a mapping of spec sections")
    return data, source


def _in_base(diagnostic: Diagnostic, ref: str, where: Setting, via: str) -> Diagnostic:
    found = diagnostic.position
    if found is None:  # about the whole file: not a regular file, too large, not UTF-8
        return error_at(where, f"extends: {quoted(ref)} is refused: {diagnostic.message}").diagnostics[0]
    return replace(diagnostic, position=Position(found.line, found.col, file=diagnostic.path, via=via))


def _shown(path: Path) -> str:
    """A path as messages print it: relative where it can be, escaped, and cut when absurdly long."""
    return shown_text(shown(path), 1024)  # the longest path a spec may name; a longer one only in a refusal


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
    tree = loader.load(path, shown_path, (), "")[0]
    check_orphans(tree)  # once every file is merged: a later file may give the orphaned layer its input
    return tree.data(), ComposedSourceMap(shown_path, tree)
