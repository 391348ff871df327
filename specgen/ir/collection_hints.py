"""What to say about a collection entry or pattern that selects nothing (ir/collections.py, `Resolver.select`).

A layer name where its variables were meant (`conv1` for `conv1/*`, docs/spec.md, "Selection rules"), a name or
pattern close to a known one, or else what the variable paths begin with. Each hint comes with what its rewrite
would select, so that the "neither frozen nor claimed" error leaves out the weights a hint already names
(`unexplained`). All of this runs only on error.
"""

from __future__ import annotations

import fnmatch

from specgen.diagnostics import closest
from specgen.spec.load import LoadedSpec


def selects_nothing(loaded: LoadedSpec, entry: str, order: dict[str, int], resolved: dict[str, list[str]]) -> \
        tuple[str, set[str] | None]:
    """The error for an entry that names nothing, and what its hint's rewrite would select (None: no hint).
    `order`: the model variable paths (in layer order); `resolved`: the collections resolved so far."""
    named = not _is_pattern(entry) and "/" not in entry  # a bare name is read as a collection's
    head = f"unknown collection '{entry}'" if named else f"pattern '{entry}' matches no variable"
    layer = _layer_hint(loaded, entry, named, order)
    if layer is not None:
        return head + layer[0], layer[1]
    prefixes = _prefix_patterns(order)
    if named:
        close = closest(entry, [*loaded.spec.collections, "model", "update"])
        known = resolved.get(close) if close else None  # a collection resolved later: unknown here
        if close is None and (close := closest(f"{entry}/*", prefixes)) is not None:
            known = _matching(order, close)
        return head + _suggested(close), None if known is None else set(known)
    close = closest(entry, [*prefixes, *order])
    return head + (_suggested(close) if close else _beginnings(order)), \
        set(_matching(order, close)) if close else None


def _is_pattern(text: str) -> bool:
    return any(c in text for c in "*?[")


def _matching(order: dict[str, int], pattern: str) -> list[str]:
    return [p for p in order if fnmatch.fnmatchcase(p, pattern)]


def _layer_hint(loaded: LoadedSpec, entry: str, named: bool, order: dict[str, int]) -> tuple[str, set[str]] | None:
    """`conv1` where `conv1/*` was meant (docs/spec.md, "Selection rules"): the hint, and what that selects."""
    below = {p for p in order if p.startswith(f"{entry}/")}
    is_layer = any(layer.name == entry for layer in loaded.layers)
    if not below:
        return (f"; '{entry}' is a layer without variables (there is nothing to select): remove it", set()) \
            if is_layer else None
    what, whose = ("a layer", "its") if is_layer else ("the start of layer names", "their")
    return (f"; '{entry}' is {what}, not {'a collection' if named else 'a variable'}"
            f": to select {whose} variables write \"{entry}/*\"", below)


def _prefix_patterns(paths: dict[str, int]) -> list[str]:
    """`conv1/*`, `head/*`, `head/out/*`: a pattern for each layer-name prefix of the variables, for a did-you-mean."""
    return list(dict.fromkeys(f"{p.rsplit('/', i)[0]}/*" for p in paths for i in range(1, p.count("/") + 1)))


def _suggested(close: str | None) -> str:
    return f"; did you mean '{close}'?" if close else ""


def _beginnings(paths: dict[str, int]) -> str:
    """What the variable paths begin with, for a pattern too far from any to suggest one."""
    starts = list(dict.fromkeys(p.split("/", 1)[0] for p in paths))
    more = f" and {len(starts) - 8} more" if len(starts) > 8 else ""
    return f"; the variables begin with {', '.join(repr(s + '/') for s in starts[:8])}{more}" if starts else ""


def unexplained(loose: list[str], missed: list[set[str] | None]) -> list[str]:
    """The loose weights that no entry naming nothing could have meant. An entry whose hint says what it meant
    (`conv1` for `conv1/*`) already reports those variables, so they are not named a second time; an entry without
    such a hint could have meant any of them, so then none is reported: the error would be a second one for the
    same mistake, and once the entry is fixed validate reports whatever is still loose."""
    if any(covered is None for covered in missed):
        return []
    meant = {p for covered in missed if covered is not None for p in covered}
    return [p for p in loose if p not in meant]
