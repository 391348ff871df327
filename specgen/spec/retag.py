"""Problems a variant causes by changing a base item's tag: a layer's `op`, an optimizer's, a loss's or an
initializer's `kind`, a schedule's `schedule`. The keys the base wrote for the old tag stay (mappings merge key by
key, spec/merge.py), and the schema then refuses them at the base's lines, which are right for what the base wrote.
The change is the cause: an unknown key is reported at the tag the variant set, naming the key's place and how to
drop it; any other problem at such a key keeps its place and names the change (docs/spec.md, "Composing specs").
"""

from __future__ import annotations

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

    def position(self) -> Position | None:
        return self.now.position()

    def unknown(self, allowed: list[str]) -> str:
        """The message of a key the new tag does not take, said at the tag."""
        tag, now, was = self.tag, _text(self.now.value), _text(self.was)
        return (f"{tag}: {now} takes no {quoted(self.key)}, which {self.written.where()} gives for {tag} {was}; "
                f"remove it here with `{self.key}: null`, or keep {tag} {was}"
                + (f" ({now} takes {one_of(allowed)})" if allowed else ""))

    def note(self) -> str:
        """What any other problem at the key adds: the change that made the key's value wrong."""
        return f" ({self.tag} changed from {_text(self.was)} to {_text(self.now.value)} at {self.now.where()})"


def retag(loc: PathKey, data: Any, source: SourceMap) -> Retag | None:
    """The change of tag behind a problem at the key `loc`, if a file other than the key's changed the tag of the
    innermost mapping holding it that has one."""
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


def _text(value: Any) -> str:
    return flow(value) if isinstance(value, dict | list) else str(value)
