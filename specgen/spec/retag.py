"""Problems a variant causes by changing a base item's tag: a layer's `op`, an optimizer's, a loss's or an
initializer's `kind`, a schedule's `schedule`. The keys the base wrote for the old tag stay (mappings merge key by
key, spec/merge.py), and the schema then refuses them at the base's lines, which are right for what the base wrote.
The change is the cause: an unknown key is reported at the tag the variant set, naming the key's place and how to
drop it; any other problem at such a key keeps its place and names the change (docs/spec.md, "Composing specs").
A `--set` that changes a tag (`--set 'layers[h2].op=layer_norm'`) is the same change, made after the files: its
problems name that override, where the key was written and the `--set ... =null` that drops it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from specgen.diagnostics import Position, one_of, quoted
from specgen.spec.received import flow
from specgen.spec.source_map import PathKey, SourceMap, data_path
from specgen.spec.tree import ComposedSourceMap, Setting

TAGS = ("op", "kind", "schedule")  # the keys that choose which other keys a mapping takes


@dataclass(frozen=True)
class Retag:
    tag: str
    was: Any  # the tag's value where the key was written
    now: Setting  # the tag's winning setting: the file that changed it
    key: str
    written: Setting  # where the key was written
    by: str | None = None  # the `--set` that changed the tag (its text), when one did
    drop: str = ""  # with `by`: the override that removes the key (`layers[h2].activation=null`)

    def position(self) -> Position | None:
        return None if self.by is not None else self.now.position()

    def unknown(self, allowed: list[str]) -> str:
        """The message of a key the new tag does not take, said at the tag (a file's, or the `--set` that wrote it)."""
        tag, now, was = self.tag, _text(self.now.value), _text(self.was)
        fix = f"remove it with `--set {shlex.quote(self.drop)}`" if self.by is not None else \
            f"remove it here with `{self.key}: null`"
        return (f"{tag}: {now} takes no {quoted(self.key)}, which {self.written.where()} gives for {tag} {was}; "
                f"{fix}, or keep {tag} {was}" + (f" ({now} takes {one_of(allowed)})" if allowed else ""))

    def note(self) -> str:
        """What any other problem at the key adds: the change that made the key's value wrong (said at the
        override when a `--set` made it, so the note says where the key's value was written)."""
        if self.by is not None:
            return f" ({self.written.where()} writes it for {self.tag} {_text(self.was)}; this --set changes " \
                   f"{self.tag} to {_text(self.now.value)})"
        return f" ({self.tag} changed from {_text(self.was)} to {_text(self.now.value)} at {self.now.where()})"


def retag(loc: PathKey, data: Any, source: SourceMap,
          overrides: tuple[tuple[PathKey, str], ...] = ()) -> Retag | None:
    """The change of tag behind a problem at the key `loc`, if a `--set` (one of `overrides`: where each wrote in
    `data`, and its text) or a file other than the key's changed the tag of the innermost mapping holding it that
    has one."""
    if overrides and (by_set := _by_override(loc, data, source, overrides)) is not None:
        return by_set
    if not isinstance(source, ComposedSourceMap):
        return None
    path = data_path(loc, data)[0]
    written = source.settings.get(path)
    if not written or not path or path[-1] != loc[-1] or not isinstance(path[-1], str):
        return None  # not a key the data holds (a missing key: said at the mapping, which the variant wrote)
    for depth in range(len(path) - 1, -1, -1):
        tag = next((t for t in TAGS if (*path[:depth], t) in source.settings and (*path[:depth], t) != path), None)
        if tag is not None:
            return _changed(tag, source.settings[(*path[:depth], tag)], path[-1], written[-1])
    return None


def _changed(tag: str, settings: list[Setting], key: str, written: Setting) -> Retag | None:
    """The change, where the tag's winning value was written by another file than the key and differs from a value
    it had before (in the key's own file, where it set one)."""
    now = settings[-1]
    if now.source is written.source and now.label == written.label:
        return None
    before = [s for s in settings[:-1] if s.value != now.value]
    if not before:
        return None
    was = next((s for s in reversed(before) if s.source is written.source), before[-1])
    return Retag(tag, was.value, now, key, written)


def _by_override(loc: PathKey, data: Any, source: SourceMap,
                 overrides: tuple[tuple[PathKey, str], ...]) -> Retag | None:
    """The change, where an override set the tag of the innermost mapping (in `data`, the spec with the overrides
    applied) that holds the key `loc` and has a tag, to another value than the files gave it. The caller has found
    that no override wrote the key itself."""
    path = data_path(loc, data)[0]
    if not path or path[-1] != loc[-1] or not isinstance(path[-1], str) or _file_value(source, path) is None:
        return None  # not a key the files wrote
    for depth in range(len(path) - 1, -1, -1):
        holder = data_path(path[:depth], data)[1]
        tag = next((t for t in TAGS if isinstance(holder, dict) and t in holder and (*path[:depth], t) != path), None)
        if tag is None:
            continue
        text = next((text for at, text in reversed(overrides) if at == (*path[:depth], tag)), None)
        was = _file_value(source, (*path[:depth], tag))
        if text is None or was is None or was == holder[tag]:
            return None
        written = _file_setting(source, path)
        head = text.partition("=")[0].strip()[: -len(tag)].rstrip(".")
        drop = ".".join([head, *(str(part) for part in path[depth:])]).lstrip(".") + "=null"
        return Retag(tag, was, Setting(f"--set {text}", value=holder[tag]), path[-1], written, text, drop)
    return None


def _file_value(source: SourceMap, path: PathKey) -> Any:
    """What the spec's files give at `path` (before any override), None where they give nothing."""
    if isinstance(source, ComposedSourceMap):
        settings = source.settings.get(path)
        return settings[-1].value if settings else None
    return source.value(path)


def _file_setting(source: SourceMap, path: PathKey) -> Setting:
    """Where the files write the value at `path` (which they do)."""
    if isinstance(source, ComposedSourceMap):
        return source.settings[path][-1]
    return Setting(source.path, source, path)


def _text(value: Any) -> str:
    return flow(value) if isinstance(value, dict | list) else str(value)
