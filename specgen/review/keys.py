"""Dotted leaf keys (`checkpoint.restore[0].map[3].from`) indexed by what holds them.

Two keys are related when one is the other or holds it (`kernel_init` holds `kernel_init.kind`, `layers[h1]`
`layers[h1].units`). `diff` asks that of every differing leaf against sets that can hold thousands (a restore map
written entry by entry for a large pretrained model); testing each pair made it quadratic. A key's holders are its
prefixes that end before a `.` or `[`, so with the keys indexed by holder each test is a few set lookups."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator

_BREAK = re.compile(r"[.\[]")


def holders(key: str) -> list[str]:
    """The keys that hold `key`: its prefixes that end before a `.` or `[` (`a.b[c].d` -> `a`, `a.b`, `a.b[c]`).
    A name that holds a `.` or `[` itself (a data file `data.train.x.tfrecord`) gives a prefix there too, as a plain
    `startswith(k + ".")` test would."""
    return [key[:m.start()] for m in _BREAK.finditer(key)]


def held_by(keys: Iterable[str]) -> set[str]:
    """Every key that holds one of `keys` (whether or not it is one of them)."""
    return {holder for key in keys for holder in holders(key)}


class KeyIndex:
    """A set of keys, each also filed under every key that holds it."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.keys = set(keys)
        self.held: dict[str, list[str]] = {}  # a holder (in the set or not) -> the keys of the set it holds
        for key in self.keys:
            for holder in holders(key):
                self.held.setdefault(holder, []).append(key)

    def related(self, key: str) -> bool:
        """`key` is one of the keys, holds one, or is held by one."""
        return key in self.keys or key in self.held or any(h in self.keys for h in holders(key))

    def relatives(self, key: str) -> Iterator[str]:
        """The keys of the set that hold `key` or that it holds (`key` itself is not listed)."""
        yield from (h for h in holders(key) if h in self.keys)
        yield from self.held.get(key, ())


def reachable(start: Iterable[str], index: KeyIndex) -> set[str]:
    """`start` and every key of `index` it reaches through keys related one to the next, breadth-first: each key is
    taken once, and costs its holders and the keys it holds."""
    found = set(start)
    queue = deque(found)
    while queue:
        for key in index.relatives(queue.popleft()):
            if key not in found:
                found.add(key)
                queue.append(key)
    return found
