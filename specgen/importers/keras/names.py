"""Keras names as spec names: kept where valid, renamed deterministically where not.

A spec name part is letters and digits with single underscores between them (LAYER in
specgen/fields/base.py); Keras allows more (`block_1__conv`, `conv-1`, `1x1`). A rename replaces
every run of other characters by one `_`, trims `_` at the ends, starts the first part with a
letter, shortens parts over MAX_NAME_CHARS (128) characters (with a hash of the original) and adds
`_2`, `_3`, ... until the name is unique, also once `/` becomes `_` (how generated Python names layers).
"""

from __future__ import annotations

import hashlib
import re

from specgen.fields.base import MAX_NAME_CHARS, MAX_NAME_PARTS
from specgen.ir.naming import STATE_ROOTS

RESERVED_FIRST = STATE_ROOTS  # training-state prefixes
# The spec's own limit (fields/base.py), not a copy: a Keras name the spec accepts is kept as it is.
MAX_PART = MAX_NAME_CHARS
# A whole layer name: `<name>/<weight>` (restore map `to`) and `<name>/*` (frozen, collections) must fit the
# spec's 256-character patterns; 8 parts of 128 would not.
MAX_NAME = 200


def _part(text: str, first: bool) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_") or "layer"
    if first and not cleaned[0].isalpha():
        cleaned = "layer_" + cleaned
    if len(cleaned) > MAX_PART:
        cleaned = cleaned[:MAX_PART - 9].rstrip("_") + "_" + _hash(text)
    return cleaned


class Namer:
    """Hands out unique spec names; `taken` also holds the Python form (`/` as `_`) of each."""

    def __init__(self) -> None:
        self.taken: set[str] = set()

    def free(self, name: str) -> bool:
        return name not in self.taken and name.replace("/", "_") not in self.taken

    def claim(self, name: str) -> None:
        self.taken |= {name, name.replace("/", "_")}

    def layer(self, keras_name: str) -> str:
        parts = [_part(p, i == 0) for i, p in enumerate(keras_name.split("/"))]
        if parts[0] in RESERVED_FIRST:
            parts[0] += "_layer"
        if len(parts) > MAX_NAME_PARTS:  # the spec's levels of nesting
            parts = [*parts[:MAX_NAME_PARTS - 1], "_".join(parts[MAX_NAME_PARTS - 1:])[:MAX_PART].rstrip("_")]
        return self._unique("/".join(_fit(parts, keras_name)))

    def identifier(self, keras_name: str) -> str:
        return self._unique(_part(keras_name.replace("/", "_"), True))

    def _unique(self, base: str) -> str:
        name, n = base, 1
        head, _, last = base.rpartition("/")
        while not self.free(name):
            n += 1
            suffix = f"_{n}"  # the last part keeps at most MAX_PART characters with it
            name = (f"{head}/" if head else "") + last[:MAX_PART - len(suffix)].rstrip("_") + suffix
        self.claim(name)
        return name


def _fit(parts: list[str], original: str) -> list[str]:
    """Parts whose joined length is at most MAX_NAME: the parts that fit, the last of them ending in a hash."""
    if len("/".join(parts)) <= MAX_NAME:
        return parts
    kept: list[str] = []
    for part in parts:  # room is left for "_<hash>" and a later "_<n>"
        if len("/".join([*kept, part])) > MAX_NAME - 16:
            break
        kept.append(part)
    last = kept.pop() if kept else parts[0]
    return [*kept, last[:MAX_PART - 16].rstrip("_") + "_" + _hash(original)]


def _hash(text: str) -> str:
    """8 hex digits that tell shortened names apart (lone surrogates from JSON included)."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
