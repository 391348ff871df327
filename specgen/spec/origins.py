"""Where each expanded layer is written, for diagnostics (spec/expand.py fills it, load.py reads it).

`LoadedSpec.diagnostic(("layers", i, ...))` goes through `Origins.locate`: for a layer that came from a
block, the position is the layer's line inside the block, and the message gains a note naming every
instance it was expanded through with its own `path:line:col`, and where a `$param` value was set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specgen.diagnostics import Position, safe_repr
from specgen.spec.blocks import PARAM_REF
from specgen.spec.messages import Overrides, override_at
from specgen.spec.source_map import PathKey, SourceMap, data_path


@dataclass(frozen=True)
class Site:
    """One instance a layer was expanded through."""

    name: str  # as expanded: 'stage2/1'
    block: str
    loc: PathKey  # its entry in `layers` or in a block's `layers`
    args: Mapping[str, tuple[Any, PathKey]]  # parameter -> (value, where that value is written)


@dataclass(frozen=True)
class Origin:
    """Where an expanded layer is written, and the instances it came through (innermost first)."""

    loc: PathKey
    sites: tuple[Site, ...] = ()


@dataclass
class Origins:
    """Expanded layer index -> Origin: turns `("layers", i, ...)` into a position and a note."""

    source: SourceMap
    data: Any
    items: list[Origin] = field(default_factory=list)
    # Shipped blocks the spec uses (spec/shipped.py): name -> raw definition. Not in the user's file, so a
    # diagnostic inside one points at the user's value of the `$param` involved, else at the instance.
    shipped: Mapping[str, Any] = field(default_factory=dict)
    # `--set` overrides applied to `data` (spec/overrides.py): a value one of them set has no place in a file.
    overrides: Overrides = ()

    def locate(self, loc: PathKey, key: bool = False) -> tuple[Position | None, str]:
        if len(loc) < 2 or loc[0] != "layers" or not isinstance(loc[1], int) or not 0 <= loc[1] < len(self.items):
            return self.source.locate(loc, self.data, key=key), ""
        origin = self.items[loc[1]]
        return self.at(origin, loc[2:], key)

    def written(self, loc: PathKey) -> list[PathKey]:
        """Where the value at `loc` is written in the data: for an expanded layer's key, in its block's layer (or the
        spec's), and where its instance sets the `$param` written there; for its name, also each instance's name."""
        if len(loc) < 2 or loc[0] != "layers" or not isinstance(loc[1], int) or not 0 <= loc[1] < len(self.items):
            return [loc]
        origin, rest = self.items[loc[1]], loc[2:]
        places = [(*origin.loc, *rest)]
        ref = self._param_at(origin.loc, rest)
        if ref is not None and origin.sites and ref in origin.sites[0].args:
            places.append(origin.sites[0].args[ref][1])
        if rest[:1] == ("name",):  # `stage/1/conv` is named by the instances it came through too
            places += [(*site.loc, "name") for site in origin.sites]
        return places

    def at(self, origin: Origin, rest: PathKey = (), key: bool = False) -> tuple[Position | None, str]:
        if self._shipped(origin.loc) and origin.sites:
            site = origin.sites[0]  # the instance of the shipped block (shipped blocks use no other block)
            ref = self._param_at(origin.loc, rest)
            value_at = site.args[ref][1] if ref is not None and ref in site.args else None
            if value_at is not None and not self._shipped(value_at):
                return self.source.locate(value_at, self.data, key=key), self.note(origin, rest)
            return self.source.locate(site.loc, self.data), self.note(origin, rest)
        return self.source.locate((*origin.loc, *rest), self.data, key=key), self.note(origin, rest)

    def _shipped(self, loc: PathKey) -> bool:
        return len(loc) >= 2 and loc[0] == "blocks" and loc[1] in self.shipped

    def note(self, origin: Origin, rest: PathKey = ()) -> str:
        """' (in instance 'a/1' of block 'b' at f:3:7, in ...; $filters is 64, set at f:9:40)'."""
        if not origin.sites:
            return ""
        text = " (in " + ", in ".join(f"instance '{s.name}' of block '{s.block}' {self._set(s.loc, 'at')}"
                                     for s in origin.sites)
        ref = self._param_at(origin.loc, rest)
        if ref is not None and ref in origin.sites[0].args:
            value, where = origin.sites[0].args[ref]
            text += f"; ${ref} is {safe_repr(value)}, " + (
                f"the default of shipped block '{where[1]}'" if self._shipped(where) else self._set(where))
        return text + ")"

    def _set(self, loc: PathKey, at: str = "set at") -> str:
        """Who wrote `loc`: `set at base.yaml:13:48` (`at`, then the place), or `set by --set layers[stage].with`."""
        override = self._override(loc)
        return f"set by --set {override}" if override is not None else f"{at} {self._shown(loc)}"

    def _override(self, loc: PathKey) -> str | None:
        """The key of the last `--set` that set `loc` or a key above it, as written, or None."""
        text = override_at(self.overrides, [data_path(loc, self.data)[0]]) if self.overrides else None
        return None if text is None else text.partition("=")[0].strip()

    def _shown(self, loc: PathKey) -> str:
        """`base.yaml:13:5`: the file that wrote `loc` (with `extends`, a base's own, not the top spec)."""
        if self._shipped(loc):  # not in the user's file: name it instead
            return f"shipped block '{loc[1]}'"
        position = self.source.locate(loc, self.data)
        if position is None:
            return self.source.path
        return f"{position.file or self.source.path}:{position.line}:{position.col}"

    def _param_at(self, loc: PathKey, rest: PathKey) -> str | None:
        """The parameter whose `$ref` is written where a diagnostic points, if one is."""
        node = _node({"blocks": self.shipped}, loc) if self._shipped(loc) else _node(self.data, loc)
        for part in rest:
            if isinstance(node, dict) and isinstance(part, str) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
        return node[1:] if isinstance(node, str) and PARAM_REF.match(node) else None


def _node(data: Any, loc: PathKey) -> Any:
    for part in loc:
        data = data[part]
    return data
