"""Shipped blocks: block definitions packaged with specgen (specgen/blocks/*.yaml), usable by name.

Why YAML in the spec language: a shipped block is exactly what a user could write in `blocks:` (and
can copy to change), and it goes through the same checks and expansion (spec/expand.py). A spec that
uses one gets it merged into its `blocks`; a spec's own block of the same name replaces it; a spec
that uses none gets nothing merged, so its messages and output stay as they were.

Two rules go past what a user's block can say (block parameters cannot compute or change the graph),
applied per instance when its arguments are known (`prepare`, called by expand.py):
- `normalize_first: true` expands the block `<name>_normalize_first` (the pre-norm graph);
- `key_dim` is `hidden_dim / num_heads` (KerasHub's rule); a hidden size that `num_heads` does not
  divide is an error at the value, and an instance may not set `key_dim` itself.

One rule needs the shapes, so the IR build asks it (`features_problem`, called by ir/resolve.py at the first
layer reading the block's input): `hidden_dim` is the input's feature size (KerasHub reads it from the input),
and a different value is refused at the value, naming hidden_dim, the block and both sizes, rather than by
the residual `add` deep inside the block whose two inputs then fail to broadcast.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from specgen import text
from specgen.diagnostics import Diagnostic
from specgen.spec.blocks import Block, Instance
from specgen.spec.model import Spec
from specgen.spec.origins import Origins
from specgen.spec.source_map import PathKey

VARIANT = "_normalize_first"  # suffix of the pre-norm graph of a shipped block with `normalize_first`
DERIVED = "key_dim"  # computed per instance; never written
FEATURES = "hidden_dim"  # a shipped block parameter that must equal its first input's last axis


@cache
def definitions() -> dict[str, dict[str, Any]]:
    """Shipped block name -> its raw definition (a mapping as a spec's `blocks` entry holds it)."""
    found: dict[str, dict[str, Any]] = {}
    for entry in sorted(resources.files("specgen.blocks").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            # Packaged, trusted files: plain safe_load (the spec loader's bounds are for user files).
            found.update(yaml.safe_load(entry.read_text(encoding="utf-8"))["blocks"])
    return found


@cache
def _models() -> dict[str, Block]:
    return {name: Block.model_validate(raw) for name, raw in definitions().items()}


def _used(spec: Spec) -> Iterator[str]:
    """Every block name an instance (top level or inside a spec's block) uses, as written."""
    for item in spec.layers:
        if isinstance(item, Instance):
            yield item.block
            if item.first is not None and item.first.block:
                yield item.first.block
    for block in spec.blocks.values():
        for raw in block.layers:
            yield from (v for v in (raw.get("block"), (raw.get("first") or {}).get("block")) if isinstance(v, str))


def names() -> list[str]:
    """Every shipped block name, for messages about unknown blocks."""
    return sorted(definitions())


def merged(spec: Spec) -> tuple[Spec, dict[str, dict[str, Any]]]:
    """The spec with the shipped blocks it uses in `blocks` (and their variants), and those raw definitions."""
    models, raw = _models(), definitions()
    names = {name for name in _used(spec) if name in models and name not in spec.blocks}
    names |= {name + VARIANT for name in names if name + VARIANT in models and name + VARIANT not in spec.blocks}
    if not names:
        return spec, {}
    blocks = {**{name: models[name] for name in sorted(names)}, **spec.blocks}
    return spec.model_copy(update={"blocks": blocks}), {name: raw[name] for name in names}


@dataclass(frozen=True)
class Prepared:
    block: str
    args: dict[str, tuple[Any, PathKey]]
    error: tuple[PathKey, str] | None = None  # where, message


def prepare(block: str, args: Mapping[str, tuple[Any, PathKey]], shipped: Mapping[str, Any],
            instance: str) -> Prepared:
    """The block to expand and its arguments for one instance of shipped block `block` (see the module doc)."""
    found = dict(args)
    error = _key_dim(block, found, instance) if DERIVED in found else None
    if error is not None:
        return Prepared(block, found, error)
    pre = found.get("normalize_first", (False, ()))[0]
    if not isinstance(pre, bool):
        return Prepared(block, found, (found["normalize_first"][1], f"normalize_first: received {pre!r}, "
                                       f"expected true or false (in instance '{instance}')"))
    chosen = block + VARIANT if pre and block + VARIANT in shipped else block
    return Prepared(chosen, found)


def _key_dim(block: str, found: dict[str, tuple[Any, PathKey]], instance: str) -> tuple[PathKey, str] | None:
    """Set found['key_dim'] to hidden_dim / num_heads, or (where, message) of why it cannot be."""
    if found[DERIVED][1][:2] != ("blocks", block):  # set by the instance, not the default
        return found[DERIVED][1], (f"block '{block}' computes key_dim as hidden_dim / num_heads; remove key_dim "
                                   f"from 'with' (in instance '{instance}')")
    (hidden, at_hidden), (heads, at_heads) = found["hidden_dim"], found["num_heads"]
    for value, at, param in ((hidden, at_hidden, "hidden_dim"), (heads, at_heads, "num_heads")):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            return at, f"{param}: received {value!r}, expected a positive integer (in instance '{instance}')"
    if hidden % heads:
        return at_heads, (f"num_heads {heads} does not divide hidden_dim {hidden}: block '{block}' gives each head "
                          f"key_dim = hidden_dim / num_heads, which must be a whole number; choose num_heads that "
                          f"divides it (in instance '{instance}')")
    found[DERIVED] = (hidden // heads, at_heads)
    return None


def features_problem(origins: Origins | None, index: int, shapes: list[Any]) -> Diagnostic | None:
    """Why expanded layer `index` (input shapes `shapes`) contradicts its shipped block instance's `hidden_dim`:
    checked where the layer reads the block's first input, whose last axis hidden_dim must equal."""
    if origins is None or not 0 <= index < len(origins.items):
        return None
    origin = origins.items[index]
    loc = origin.loc  # ("blocks", <shipped block>, "layers", j) for a layer written in a shipped block
    if not origin.sites or len(loc) != 4 or loc[0] != "blocks" or not isinstance(loc[1], str) \
            or loc[1] not in origins.shipped:
        return None
    raw, site = origins.shipped[loc[1]], origin.sites[0]
    reads = raw["layers"][loc[3]].get("input")
    if FEATURES not in site.args or not shapes or reads != raw["inputs"][0]:
        return None
    (hidden, where), features = site.args[FEATURES], shapes[0][-1]
    if type(hidden) is not int or type(features) is not int or hidden == features:
        return None
    shipped_value = len(where) >= 2 and where[0] == "blocks" and where[1] in origins.shipped
    position = origins.source.locate(site.loc if shipped_value else where, origins.data)
    written = site.block.removesuffix(VARIANT)  # the name the instance wrote (normalize_first picks the variant)
    message = (f"{FEATURES}: received {hidden}, expected the input's {features} features: block '{written}' "
               f"adds its input {text.shape(shapes[0])} to outputs of {FEATURES} features, so {FEATURES} is the "
               "input's feature size")
    return Diagnostic(origins.source.path, position, message + origins.note(origin))
