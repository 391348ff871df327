"""`specgen diff`'s settings rows (review/sections.py `settings_of`, `changed_rows`) are found through an index of
the keys' ancestors (review/keys.py) instead of testing each pair of keys, which took 2.7 s at 4,000 differing leaves
(a restore map written entry by entry; red-team round 6, finding 6; bench/diff_rows.py times it). The rows stay
those of the pair-by-pair code, which `_reference_*` below keeps as it was, compared on random key sets."""

from __future__ import annotations

import random

from specgen.review.keys import holders
from specgen.review.sections import Change, changed_rows, settings_of

Table = dict[str, str]


# --- the pair-by-pair code that `changed_rows` and `settings_of` replaced, as it was (the reference) ---------------

def _reference_related(a: str, b: str) -> bool:
    return a == b or a.startswith((b + ".", b + "[")) or b.startswith((a + ".", a + "["))


def _reference_rows(before: Table, after: Table, before_meant: Table, after_meant: Table) -> list[Change]:
    meant = {k for k in before_meant.keys() | after_meant.keys() if before_meant.get(k) != after_meant.get(k)}
    differ = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    shown = {k for k in differ if any(_reference_related(k, m) for m in meant)}
    while grown := {k for k in differ - shown if any(_reference_related(k, s) for s in shown)}:
        shown |= grown
    rows = []
    for key in sorted(shown):
        if key not in after:
            rows.append(Change("removed", key, before[key]))
        elif key not in before:
            rows.append(Change("added", key, "", after[key]))
        else:
            rows.append(Change("changed", key, before[key], after[key]))
    return rows


def _reference_unset(key: str, side: Table, other: Table) -> bool:
    return side[key] in ("null", "[]") and any(k.startswith((key + ".", key + "[")) for k in other)


def _reference_settings(before: Table, after: Table, meant: tuple[Table, Table] | None) -> list[Change]:
    changes = []
    for change in _reference_rows(before, after, *(meant or (before, after))):
        if change.what == "removed" and _reference_unset(change.which, before, after):
            continue
        if change.what == "added" and _reference_unset(change.which, after, before):
            continue
        changes.append(change)
    return changes


# --- random key sets ----------------------------------------------------------------------------------------------

# Few parts, so that keys often hold one another; `x.y` and `f[0` make names that hold a `.` or `[` themselves (a
# data file `data.train.x.tfrecord`), and "" an empty part.
PARTS = ("a", "b", "ab", "x.y", "f[0", "")
VALUES = ("1", "2", "null", "[]", '"s"')


def _key(rng: random.Random) -> str:
    key = rng.choice(PARTS[:3])
    for _ in range(rng.randrange(4)):
        part = rng.choice(PARTS)
        key += f"[{part}]" if rng.random() < 0.4 else f".{part}"
    return key


def _table(rng: random.Random, keys: list[str]) -> Table:
    return {k: rng.choice(VALUES) for k in rng.sample(keys, rng.randrange(len(keys) + 1))}


def _case(rng: random.Random) -> tuple[Table, Table, tuple[Table, Table] | None]:
    keys = sorted({_key(rng) for _ in range(rng.randrange(1, 30))})
    before = _table(rng, keys)
    after = {k: v for k, v in before.items() if rng.random() < 0.6} | _table(rng, keys)
    if rng.random() < 0.2:
        return before, after, None
    return before, after, (_table(rng, keys), _table(rng, keys))  # normalized: differs elsewhere, or not at all


def test_holders_are_the_prefixes_before_each_dot_or_bracket() -> None:
    assert holders("checkpoint.restore[0].map[3].from") == [
        "checkpoint", "checkpoint.restore", "checkpoint.restore[0]", "checkpoint.restore[0].map",
        "checkpoint.restore[0].map[3]"]
    assert holders("doc") == []
    assert holders("data.train.x.tfrecord") == ["data", "data.train", "data.train.x"]
    assert holders("a[b.c]") == ["a", "a[b"]  # a name holding a `.`: a prefix there too, as `startswith` saw it


def test_rows_are_the_pair_by_pair_rows_on_random_key_sets() -> None:
    rng = random.Random(6)
    shown = 0
    for _ in range(3000):
        before, after, meant = _case(rng)
        expected = _reference_settings(before, after, meant)
        assert settings_of("s", before, after, meant).changes == expected, (before, after, meant)
        assert changed_rows(before, after, *(meant or (before, after))) == _reference_rows(
            before, after, *(meant or (before, after)))
        shown += bool(expected)
    assert shown > 1000  # the cases are not vacuous: most show rows
