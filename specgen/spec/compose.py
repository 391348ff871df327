"""`extends`: a spec built on other spec files, with the origin of every value kept (docs/spec.md, "Composing specs").

`extends: base.yaml` or `extends: [a.yaml, b.yaml]` at the top of a spec names files (relative to the file that
names them) whose content the file's own keys then change; merge.py holds the merge rules and the trees whose
values remember where they were written (`via variants/small.yaml:2:10` in a diagnostic, every place in
`specgen explain`).

The files apply in one order, each once (C3, Python's order of base classes, with each list read from its end):
every file after all of its bases, each list left to right. A base that two listed files share applies once,
before both: applying each listed base as its own merged tree would let the second one's copy of the shared base
write the base's values again over the first one's changes. Lists that order two files both ways are refused.

Refusals (a cycle, a missing or unreadable file, one that is not a spec mapping, a file outside the repository, a
chain deeper than MAX_DEPTH, a base listed twice, also as a link to it, lists that order two files both ways) are one
positioned line each at the `extends` entry that names the file; the refused file's content is never echoed.

The work is bounded by the files, not by the paths through them: each file is read, ordered and merged once.

A base is the file the OS opens for the path (docs/spec.md): `link/../b.yaml` is resolved as `open()` resolves it,
links first (a lexical `..` would read `b.yaml` beside the link, another file), and a base is known by its real path
(os.path.realpath), so a file reached by two spellings (a link to it, a linked folder) is one file of the order and
applies once. Its own `extends` counts from its real folder: one file, one set of bases, whichever way it was reached.
The top spec's `extends` counts from the folder it is named in, as its data paths do.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specgen.diagnostics import Diagnostic, Position, SpecError, quoted
from specgen.paths import shown
from specgen.spec.merge import ComposedSourceMap, Node, Setting, check_added, check_orphans, error_at, merge, node, received
from specgen.spec.source_map import SourceMap
from specgen.spec.spec_file import read_spec_text
from specgen.spec.yaml_source import load_yaml, parse_document
from specgen.text import printable

MAX_DEPTH = 16  # files in one chain of `extends`; real families use 2 or 3
MAX_FILES = 64  # distinct files one spec may be composed of
MAX_BASES = 16  # entries of one `extends` list; real families use 1 to 3
MAX_SHOWN = 1024  # characters of a path in a message before its middle is cut (cut_path)
# `specgen diff REV:PATH` composes a revision's spec files copied into a temporary folder (review/sides.py): while
# it does, messages name those files `REV:PATH`, never by the temporary folder's path.
_REVISION: ContextVar[tuple[tuple[Path, ...], str] | None] = ContextVar("specgen_revision", default=None)


@contextmanager
def revision_files(folder: Path, rev: str) -> Iterator[None]:
    """Within the block, files under `folder` are printed as `REV:PATH` (PATH from the folder's top)."""
    token = _REVISION.set(((Path(os.path.abspath(folder)), folder.resolve()), rev))  # as named, and resolved
    try:
        yield
    finally:
        _REVISION.reset(token)


# --- loading ---------------------------------------------------------------------------------------------------


@dataclass
class _File:
    """One file as composition uses it: its own keys, and the files to apply for it, its bases first (C3)."""

    own: Node  # the file's keys but `extends`, each value with its place
    order: list[Path]  # every file it is composed of, each once, in the order they apply; itself last
    height: int  # the files in its longest chain of `extends`, itself included


@dataclass
class _Loader:
    """Loads one top spec and every file it extends, each read once, within the repository."""

    root: Path  # the resolved folder every file must lie under
    top: str  # the spec as named (refusals say how to flatten it)
    relative: bool = True  # the top spec named by a relative path: bases are printed relative to the working folder
    files: dict[Path, tuple[Any, SourceMap]] = field(default_factory=dict)
    # Each file by its real path: a base that several files extend, by any spelling, is read and linearized once, so
    # the work grows with the files, not with the paths through them.
    loaded: dict[Path, _File] = field(default_factory=dict)
    labels: dict[Path, str] = field(default_factory=dict)  # each file's path as messages print it

    def load(self, real: Path, folder: Path, display: str, chain: tuple[Path, ...], via: str) -> _File:
        """The file `real` (printed `display`), whose `extends` entries count from `folder`."""
        data, source = self.files[real]
        setting = Setting(display, source, (), via, not chain)
        self.labels[real] = display
        if "extends" not in data:
            return _File(node(data, setting), [real], 1)
        own = node({k: v for k, v in data.items() if k != "extends"}, setting)
        refs = self._refs(folder, data["extends"], setting)
        bases = [self._base(folder, ref, where, (*chain, real)) for ref, where in refs]
        at = Setting(setting.label, setting.source, ("extends",), setting.via, setting.top)
        order = self._linearize(real, [(base, self.loaded[base].order) for base in bases], at)
        return _File(own, order, max(self.loaded[base].height for base in bases) + 1)

    def _linearize(self, key: Path, bases: list[tuple[Path, list[Path]]], at: Setting) -> list[Path]:
        """The files to apply, each once: every file after all of its bases, each `extends` list in its order, and
        a base shared by several files once, before the first of them (Python's C3 order of base classes, with
        the list read from its end: the last base applies last and wins, as `extends` applies left to right)."""
        seqs = [order[::-1] for _, order in reversed(bases)] + [[base for base, _ in reversed(bases)]]
        pos = [0] * len(seqs)
        tails = Counter(item for seq in seqs for item in seq[1:])  # a file still due after another: not yet
        found = [key]
        while True:
            heads = [seq[pos[i]] for i, seq in enumerate(seqs) if pos[i] < len(seq)]
            if not heads:
                return found[::-1]
            head = next((h for h in heads if not tails[h]), None)
            if head is None:
                if (late := self._late_base(bases)) is not None:  # the plain reason, where this list has it
                    raise error_at(at, late)
                blocked = ", ".join(dict.fromkeys(quoted(self.labels[h]) for h in heads))
                raise error_at(at, f"extends: no order of the bases applies each file after its own bases and keeps "
                                   f"every `extends` list's order: {blocked} are listed in conflicting orders; list "
                                   "them in one order everywhere")
            found.append(head)
            for i, seq in enumerate(seqs):
                if pos[i] < len(seq) and seq[pos[i]] == head:
                    pos[i] += 1
                    if pos[i] < len(seq):
                        tails[seq[pos[i]]] -= 1

    def _late_base(self, bases: list[tuple[Path, list[Path]]]) -> str | None:
        """Why an `extends` list has no order, where one file in it is a base of a file listed before it (the later
        file applies later, and a base must apply before the files built on it); None otherwise."""
        for n, (child, order) in enumerate(bases):
            late = next((base for base, _ in bases[n + 1:] if base in order[:-1]), None)
            if late is not None:
                base, built = quoted(self.labels[late]), quoted(self.labels[child])
                return (f"extends: {base} is a base of {built} and must come first (the files listed apply in order, "
                        f"each after its own bases); list {base} before {built}, or leave it out: {built} brings it in")
        return None

    def compose(self, key: Path) -> Node:
        """The merged tree: each file's own keys over the ones before, in the top file's order."""
        order = self.loaded[key].order
        tree: Node | None = None
        for file in order:
            own = self.loaded[file].own
            if file != key and own.mapping is not None and "abstract" in own.mapping:  # a base's `abstract` is its own
                own = Node(own.settings, mapping={k: v for k, v in own.mapping.items() if k != "abstract"})
            tree = own if tree is None else merge(tree, own)
        assert tree is not None
        return tree

    def _refs(self, folder: Path, value: Any, setting: Setting) -> list[tuple[str, Setting]]:
        at = Setting(setting.label, setting.source, ("extends",), setting.via, setting.top)
        if not isinstance(value, list):
            _check_ref(value, at, "extends")
            return [(value, at)]
        if not value:  # most likely a list emptied by an edit; leaving `extends` out says "no base" plainly
            raise error_at(at, "extends: the list is empty; expected at least one spec file (leave `extends` out for a "
                          "spec with no base)")
        if len(value) > MAX_BASES:
            raise error_at(at, f"extends: {len(value)} bases in one list; at most {MAX_BASES}")
        refs = [(r, Setting(at.label, at.source, ("extends", i), at.via, at.top)) for i, r in enumerate(value)]
        for i, (ref, where) in enumerate(refs):  # each entry at itself: the list is what it should be
            _check_ref(ref, where, f"extends[{i}]")
        first: dict[str, tuple[str, Setting]] = {}
        for ref, where in refs:  # a base applied twice changes nothing the first did not, and doubles the work
            target = _identity(folder / ref)
            if target in first:
                named, at = first[target]
                same = "is already listed" if os.path.normpath(named) == os.path.normpath(ref) else \
                    f"is the same file as {quoted(named)}"
                raise error_at(where, f"extends: {quoted(ref)} {same} (at {at.where()}); each base applies once: list "
                                      "it once")
            first[target] = (ref, where)
        return refs

    def _base(self, folder: Path, ref: str, where: Setting, chain: tuple[Path, ...]) -> Path:
        # Not normalised: `..` after a link is the link target's parent, as the OS reads the path (module docstring).
        path = folder / ref
        if path.suffix.lower() not in (".yaml", ".yml"):  # in any case, as a spec named on the command line
            raise error_at(where, f"extends: {quoted(ref)} is not a spec file; expected a .yaml or .yml file")
        try:
            real = self._find(path, ref, where, chain)  # refuses what may not be read; reads it into `files`
        except OSError as exc:  # a name too long for the file system, a permission on a folder, ...
            raise error_at(where, f"extends: {quoted(ref)} is refused: {exc.strerror or type(exc).__name__}") from None
        cached = self.loaded.get(real)  # known by its real path: a link to it, or a linked folder, is the same file
        if cached is None:
            via = where.where() + (f", via {where.via}" if where.via else "")
            cached = self.loaded[real] = self.load(real, real.parent, self.labels[real], chain, via)
        if len(chain) + cached.height > MAX_DEPTH:  # the files above this base, then its own longest chain
            raise error_at(where, f"extends: the chain of bases is deeper than {MAX_DEPTH} files")
        return real

    def label(self, real: Path) -> str:
        """How messages print a base: its real path (the file read, whichever spelling reached it), relative to the
        working folder when the top spec was named relative (`../common/base.yaml`), else as `_shown` prints it."""
        if self.relative and _revision_of(real) is None:
            try:
                return _shown(Path(os.path.relpath(real, Path.cwd().resolve())))
            except (OSError, ValueError):  # no working folder any more
                pass
        return _shown(real)

    def _find(self, path: Path, ref: str, where: Setting, chain: tuple[Path, ...]) -> Path:
        """The resolved path of a base that may be read, read into `files`; else a refusal at `where`."""
        if len(chain) >= MAX_DEPTH:
            raise error_at(where, f"extends: the chain of bases is deeper than {MAX_DEPTH} files")
        if not path.exists():
            if _dangling_outside(path, self.root):  # a link to a file outside: the rule, not the file's absence
                raise error_at(where, self._outside(ref, link=True))
            raise error_at(where, f"extends: {quoted(ref)} does not exist ({self._looked_for(path)})")
        real = path.resolve()
        if not real.is_relative_to(self.root):
            raise error_at(where, self._outside(ref, link=(path.parent.resolve() / path.name).is_relative_to(self.root)))
        if real in chain:
            cycle = " -> ".join(self.labels.get(p) or self.label(p) for p in (*chain[chain.index(real):], real))
            raise error_at(where, f"extends: {quoted(ref)} closes a cycle ({cycle})")
        if real not in self.files:
            if len(self.files) >= MAX_FILES:
                raise error_at(where, f"extends: the spec is composed of more than {MAX_FILES} files")
            self.labels.setdefault(real, self.label(real))
            self.files[real] = _read_base(real, self.labels[real], ref, where)
        return real

    def _looked_for(self, path: Path) -> str:
        """Where a base that does not exist was looked for. The OS goes through every folder a path names, even one
        its `..` leaves (`sub/../b.yaml` from `sub/` needs `sub/sub`), where realpath drops a missing one: so a
        folder on the way that is missing (or is no folder) is named with the path as written from there."""
        blocked = next((part for part in reversed(path.parents) if not part.is_dir()), None)
        if blocked is None:
            return f"looked for {self.label(Path(os.path.realpath(path)))}"
        start = self.label(Path(os.path.realpath(blocked.parent)))
        rest = printable(path.relative_to(blocked.parent).as_posix())
        looked = rest if start == "." else f"{start}{'' if start.endswith(('/', ':')) else '/'}{rest}"
        folder = self.label(Path(os.path.realpath(blocked)))
        return f"looked for {looked}: {f'{folder} is not a folder' if blocked.exists() else f'no folder {folder}'}"

    def _outside(self, ref: str, link: bool) -> str:
        """The refusal of a base outside the repository: which repository, and why it is that folder."""
        what = "is a link to a file outside" if link else "is outside"
        rule = "a spec extends only files of its own repository"
        revision = _revision_of(self.root)
        if revision is not None:
            return f"extends: {quoted(ref)} {what} the repository (at {revision}); {rule}"
        if (self.root / ".git").exists():
            return f"extends: {quoted(ref)} {what} the repository ({_shown(self.root)}); {rule}"
        # A copy without `.git` (git archive, a Docker image): the spec's own folder is all it may read.
        return (f"extends: {quoted(ref)} {what} the repository ({_shown(self.root)}: no .git above the spec, so its "
                f"own folder); {rule}: run it from a git checkout, or flatten it there with `specgen validate "
                f"{self.top} --resolved > flat.yaml` and use flat.yaml beside it")


def _dangling_outside(path: Path, root: Path) -> bool:
    """A link whose target does not exist here and lies outside `root` (a revision's link to a file outside it)."""
    try:
        return not Path(os.path.normpath(path.parent.resolve() / os.readlink(path))).is_relative_to(root)
    except (OSError, ValueError, RuntimeError):  # not a link, a name the system refuses, a loop of links above it
        return False


def _revision_of(path: Path) -> str | None:
    """The revision `path` (resolved) is the copy of, or None for a file of the work tree."""
    found = _REVISION.get()
    return found[1] if found is not None and path.is_relative_to(found[0][1]) else None


def _identity(path: Path) -> str:
    """What makes two entries of one list the same base: the file they resolve to (a link and its target are one
    file); a path that cannot be resolved is compared as written, and refused when it is read."""
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):  # a loop of links, a name too long
        return os.path.normpath(path)


def _check_ref(ref: Any, at: Setting, key: str) -> None:
    """One entry (`extends[1]`, at itself) or the whole setting (`extends`) is a file name."""
    if not isinstance(ref, str) or not ref:
        what = "a spec file (a path relative to this file)" + (" or a list of them" if key == "extends" else "")
        raise error_at(at, f"{key}: expected {what}; received {received(ref)}")


def _read_base(path: Path, label: str, ref: str, where: Setting) -> tuple[dict[str, Any], SourceMap]:
    """A base's data and source map. What keeps it from being read at all is refused at the `extends` entry; a
    problem inside it (a YAML syntax error, a duplicate key) stays at its line in the base, with the chain."""
    try:
        data, source = parse_document(read_spec_text(path, label), label)
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
    if found is None:  # about the whole file: not a regular file, too large (a byte not UTF-8 has its line)
        return error_at(where, f"extends: {quoted(ref)} is refused: {diagnostic.message}").diagnostics[0]
    return replace(diagnostic, position=Position(found.line, found.col, file=diagnostic.path, via=via))


def _shown(path: Path) -> str:
    """A path as messages print it: relative where it can be (a revision's file as `REV:PATH`), escaped, and cut in
    the middle when absurdly long."""
    folders, rev = _REVISION.get() or ((), "")
    absolute = Path(os.path.abspath(path))
    for folder in folders:  # a path as named, or resolved (a cycle's files)
        if absolute.is_relative_to(folder):
            inside = absolute.relative_to(folder).as_posix()
            return cut_path(printable(f"{rev}:{inside if inside != '.' else ''}"))
    return cut_path(shown(path))


def cut_path(text: str, limit: int = MAX_SHOWN) -> str:
    """`text` whole up to `limit` characters, else its start, `…` and its file name: a message names the file it is
    about even when a folder's name is absurdly long (cutting the end left `dddd…`, naming no file)."""
    if len(text) <= limit:
        return text
    name = text[text.rfind("/"):] if "/" in text else text[-(limit // 4):]
    name = name[-(limit * 3 // 4):]  # a file name (at most 255 bytes) fits whole
    return f"{text[:limit - len(name)]}…{name}"


def _abstract(tree: Node) -> bool:
    flag = tree.mapping.get("abstract") if tree.mapping is not None else None
    return flag is not None and flag.value is True


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
    loader = _Loader(repository_root(path), shown_path, not path.is_absolute(), {path.resolve(): (data, source)})
    key = path.resolve()  # a base that is the top spec itself closes a cycle (_find)
    loader.loaded[key] = loader.load(key, path.parent, shown_path, (), "")
    tree = loader.compose(key)
    if not _abstract(tree):  # an abstract spec's children may give its new layers their op
        check_added(tree)  # once every file is merged: a later file may give the new layer its op
    check_orphans(tree)  # once every file is merged: a later file may give the orphaned layer its input
    return tree.data(), ComposedSourceMap(shown_path, tree)
