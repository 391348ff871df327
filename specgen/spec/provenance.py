"""Where every value of a spec came from: `specgen validate SPEC --resolved` and `specgen explain SPEC KEY`.

The tree is spec/compose.py's (files, in `extends` order, each value with the settings that wrote it), then each
`--set` as one more setting, then the defaults the schema fills in (pydantic's dump of the validated spec, for
keys no file wrote). `--resolved` prints it as YAML with the winning origin of each leaf as a comment
(`# base.yaml:12:5`, `# --set`, `# default`); `explain` prints one key's final value and every setting, in order.
Keys are written as in `--set`, with `[NAME]` selecting a list item by its name: `layers[head/out].units`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from specgen.diagnostics import Diagnostic, SpecError, did_you_mean, quoted
from specgen.spec.compose import load_composed
from specgen.spec.load import LoadedSpec
from specgen.spec.merge import ComposedSourceMap, Node, Setting, node
from specgen.spec.overrides import key_parts, load_with_overrides, parse_override
from specgen.spec.received import flow
from specgen.spec.source_map import SourceMap
from specgen.spec.tree import Gone

DEFAULT = Setting("default")
# Top-level keys whose dump holds what specgen ships, not defaults of the spec: the loader adds the shipped blocks
# a spec uses to `blocks` (spec/shipped.py); printed, they would read as blocks the spec defines.
SHIPPED = frozenset({"blocks"})


def tree_of(data: Any, source: SourceMap) -> Node:
    """The provenance tree of loaded data: a composed spec's own, or a single file's."""
    if isinstance(source, ComposedSourceMap):
        return source.tree
    return node(data, Setting(source.path, source, ()))


def with_overrides(tree: Node, overrides: list[str]) -> Node:
    """Each `--set` written into the tree as a setting of its own (the values were checked by the loader); a
    `--set KEY=null` removes the key, as `key: null` in a file does (spec/overrides.py). As in the file merge
    (spec/merge.py), every list and mapping above the key lists the `--set` as a place that wrote into it."""
    for text in overrides:
        parts, value = parse_override(text)
        label = f"--set {text.partition('=')[0].strip()}"
        at = tree
        for part in parts[:-1]:
            at.settings.append(Setting(label, value=value))
            at = _child(at, part, create=True)
        at.settings.append(Setting(label, value=value))
        if value is None and at.mapping is not None and parts[-1] in at.mapping and not at.mapping[parts[-1]].removed:
            old = at.mapping[parts[-1]]
            at.mapping[parts[-1]] = Node([*old.settings, Setting(label, removes=True)], removed=True)
            continue
        _assign(at, parts[-1], node(value, Setting(label)))
    return tree


def _child(at: Node, part: str | int, create: bool = False) -> Node:
    if at.items is not None and isinstance(part, int) and 0 <= part < len(at.items):
        return at.items[part]
    if at.items is not None and isinstance(part, str) and part.startswith("["):
        return next(item for item in at.items if item.name() == part[1:-1])  # the loader checked it exists
    if at.mapping is None:
        at.mapping, at.value = {}, None
    if create and part in at.mapping and at.mapping[part].removed:
        del at.mapping[part]  # `--set` under a removed key: a new mapping, last, as in the data `--set` changed
    if part not in at.mapping and create:
        at.mapping[part] = Node([], mapping={})
    return at.mapping[part]


def _assign(at: Node, part: str | int, value: Node) -> None:
    if at.items is not None and isinstance(part, int) and 0 <= part < len(at.items):
        old = at.items[part]
        at.items[part] = value
    else:
        if at.mapping is not None and part in at.mapping and at.mapping[part].removed:
            old = at.mapping.pop(part)  # a removed key set again comes last, as in the data `--set` changed
        else:
            old = _child(at, part, create=True)
        assert at.mapping is not None
        at.mapping[part] = value
    _inherit(old, value)


def _inherit(old: Node, new: Node) -> None:
    """A value keeps its history, a list or mapping replaced whole too, and so do the values inside it that the old
    one held (docs/spec.md): a mapping's keys by key, a named list's items by name, as the file merge pairs them
    (another list's items are replaced with it, as in the file merge)."""
    new.settings[:0] = old.settings
    if old.removed:
        return
    if old.mapping is not None and new.mapping is not None:
        for key, child in new.mapping.items():
            if key in old.mapping:
                _inherit(old.mapping[key], child)
    elif old.items is not None and new.items is not None:
        before = {item.name(): item for item in old.items if isinstance(item.name(), str)}
        for item in new.items:
            if isinstance(item.name(), str) and item.name() in before:
                _inherit(before.pop(item.name()), item)


def with_defaults(tree: Node, dumped: Any, top: bool = True, add: bool = True,
                  skip: frozenset[str] = frozenset()) -> Node:
    """Keys the schema filled in and no file wrote, each as a `default` setting (None defaults mean unset: left out;
    keys in `skip` are not defaults there)."""
    if tree.mapping is not None and isinstance(dumped, dict):
        if add:
            tree.unset = frozenset(k for k, v in dumped.items() if v is None and k not in tree.mapping)
        for key, value in dumped.items():
            found = tree.mapping.get(key)
            if found is not None and not found.removed:  # a spec's own blocks get their defaults, no shipped ones
                with_defaults(found, value, top=False, add=not (top and key in SHIPPED))
            elif add and value is not None and value != {} and value != [] and not (top and key in SHIPPED) \
                    and key not in skip:
                tree.mapping.pop(key, None)  # a removed key's default comes last, as one no file wrote
                tree.mapping[key] = _default(value, found)
        if top:  # sections in the schema's order (specgen, name, doc, inputs, ...), whichever file wrote each first
            order = {key: n for n, key in enumerate(dumped)}
            tree.mapping = dict(sorted(tree.mapping.items(), key=lambda item: order.get(item[0], len(order))))
    elif tree.items is not None and isinstance(dumped, list):
        for item, value in _paired(tree.items, dumped):
            with_defaults(item, value, top=False, skip=WIRED)
    return tree


# The keys a layer reads from: their only default is null (the layer before it), so a value the dump holds where no
# file wrote one is the wiring block expansion gave the layer after an instance, not a default.
WIRED = frozenset({"input", "inputs"})


def _paired(items: list[Node], dumped: list[Any]) -> Iterator[tuple[Node, dict[str, Any]]]:
    """Each written item with its validated dump: a named item by its name (with blocks, the dump holds the expanded
    layers, `u/r1` for instance `u`, so positions differ; an instance has no dump of its own), another by its
    position when the two lists are as long."""
    by_name = {value["name"]: value for value in dumped if isinstance(value, dict) and isinstance(value.get("name"), str)}
    for n, item in enumerate(items):
        name = item.name()
        value = by_name.get(name) if isinstance(name, str) else dumped[n] if len(dumped) == len(items) else None
        if isinstance(value, dict):
            yield item, value


def _default(value: Any, removed: Node | None) -> Node:
    """A default's tree; where a `key: null` removed the bases' value, after that history (explain lists both)."""
    fresh = node(value, DEFAULT)
    if removed is not None:
        fresh.settings[:0] = removed.settings
    return fresh


# --- printing ---------------------------------------------------------------------------------------------------


def resolved_yaml(tree: Node) -> str:
    """The merged spec as YAML, each leaf (and each list written whole) with the origin that won."""
    return "\n".join(_lines(tree, 0)) + "\n"


def _origin(at: Node) -> str:
    return f"  # {at.settings[-1].where()}" if at.settings else ""


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=False, width=1 << 30)
    return text.removesuffix("\n").removesuffix("\n...").removesuffix("\n")


def _leaf(at: Node) -> bool:
    return at.mapping is None and (at.items is None or not any(i.mapping is not None for i in at.items))


def _lines(at: Node, indent: int) -> Iterator[str]:
    pad = " " * indent
    if at.mapping is not None:
        for key, child in at.mapping.items():
            if child.removed:  # removed by a `key: null`, without a default to print instead
                continue
            if _leaf(child):
                yield f"{pad}{_scalar(key)}: {_scalar(child.data())}{_origin(child)}"
            else:
                yield f"{pad}{_scalar(key)}:{_origin(child)}"
                yield from _lines(child, indent + 2)
    elif at.items is not None:
        for child in at.items:
            if _leaf(child):
                yield f"{pad}- {_scalar(child.data())}{_origin(child)}"
                continue
            inner = list(_lines(child, indent + 2))
            yield f"{pad}- {inner[0][indent + 2:]}" if inner else f"{pad}- {{}}"
            yield from inner[1:]


# --- explain ----------------------------------------------------------------------------------------------------


def parse_key(text: str) -> list[str | int]:
    """`layers[head/out].units` -> ['layers', '[head/out]', 'units']; `a.0.b` -> ['a', 0, 'b'] (as `--set`)."""
    return key_parts(text)


def find(tree: Node, parts: list[str | int]) -> Node | None:
    """The node at `parts` in the resolved spec (not in an item a `remove: true` removed)."""
    found, gone = find_any(tree, parts)
    return found if gone is None else None


def find_any(tree: Node, parts: list[str | int]) -> tuple[Node | None, Gone | None]:
    """The node at `parts`, and the removal (`remove: true`) of the list item it lies in, if one removed it."""
    at: Node | None = tree
    gone: Gone | None = None
    for part in parts:
        if at is None:
            return None, None
        if isinstance(part, str) and part.startswith("[") and at.items is not None:
            found = next((i for i in at.items if i.name() == part[1:-1]), None)
            if found is None and gone is None and part[1:-1] in at.gone:  # removed: its history, and where
                gone = at.gone[part[1:-1]]
                found = gone.item
            at = found
        elif isinstance(part, int) and at.items is not None:
            at = at.items[part] if 0 <= part < len(at.items) else None
        else:
            at = at.mapping.get(part) if at.mapping is not None else None
    return at, gone


def keys(tree: Node, prefix: str = "") -> Iterator[str]:
    """Every key of the tree as `explain` writes it (list items of mappings with a name by `[NAME]`)."""
    children: Any = tree.mapping.items() if tree.mapping is not None else enumerate(tree.items or [])
    for key, child in children:
        part = f"[{child.name()}]" if isinstance(key, int) and child.name() is not None else f".{key}"
        here = (prefix + part).lstrip(".")
        yield here
        yield from keys(child, here)
    yield from (f"{prefix}.{key}".lstrip(".") for key in sorted(tree.unset))  # keys left unset are keys too


# What a key some values leave unset means: a layer without an activation is linear (`specgen diff` says so too), one
# without an input reads the layer before it (the first layer reads the model's only input).
UNSET_MEANS = {"activation": "linear", "input": "the layer before it (the first layer: the model's input)"}


def explain(tree: Node, key: str, display: str) -> list[str]:
    """The final value of `key`, then every setting that wrote it, in order, the last one marked as the winner."""
    parts = parse_key(key)
    found, gone = find_any(tree, parts)
    if found is None and parts and _unset(tree, parts):
        means = _means(tree, parts)
        return [f"{key} = {means or 'null (unset)'}",
                f"  1. default  null{f': {means}' if means else ''}  <- wins"]
    if found is None and parts in (["extends"], ["abstract"]):
        return _composition(tree, str(parts[0]))
    if found is None:
        hint = _expanded(tree, parts) or did_you_mean(key, keys(tree))
        raise SpecError([Diagnostic(display, None, f"no key {quoted(key)} in the resolved spec{hint}")])
    settings = found.settings or [DEFAULT]
    leaf = found.mapping is None and found.items is None
    means = _means(tree, parts) if found.removed and len(parts) >= 2 and str(parts[-2]).startswith("[") else None
    if gone is not None:
        value = f"(unset: the item was removed at {gone.flag.where()})"
    elif means is not None:
        value = means
    else:
        value = "(unset: removed, and it has no default)" if found.removed else _scalar(found.data())
    lines = [f"{key} = {value}"]
    wins = gone is None and not found.removed
    for n, setting in enumerate(settings, 1):
        mark = "  <- wins" if n == len(settings) and wins else ""
        lines.append(f"  {n}. {setting.where()}{_written(setting, leaf, found.removed)}{mark}")
    if gone is not None:
        lines.append(f"  {len(settings) + 1}. {gone.flag.where()}  remove: true (removes the item)")
    elif means is not None:
        lines.append(f"  {len(settings) + 1}. default  {means} (no {parts[-1]})  <- wins")
    return lines


def _means(tree: Node, parts: list[str | int]) -> str | None:
    """What the unset key at `parts` means; for a layer's `input`, the layer it reads, named (the question asked)."""
    key = str(parts[-1])
    return (key == "input" and _implicit_input(tree, parts[:-1])) or UNSET_MEANS.get(key)


def _implicit_input(tree: Node, item: list[str | int]) -> str | None:
    """What the list item at `item` (a layer) reads without an `input`: the item before it in its list, the model's
    one input for the spec's first layer; None where it cannot be said (the spec's first layer with several inputs
    must name one)."""
    holder, node = find_any(tree, item[:-1])[0], find_any(tree, item)
    if len(item) < 2 or holder is None or holder.items is None or node[0] is None or node[1] is not None:
        return None
    index = next((n for n, i in enumerate(holder.items) if i is node[0]), None)
    if index:
        return f"{holder.items[index - 1].name()} (the layer before it)"
    if index is None:
        return None
    inputs = tree.mapping.get("inputs") if tree.mapping is not None and item[:-1] == ["layers"] else None
    names = list(inputs.mapping) if inputs is not None and inputs.mapping is not None else []
    return f"{names[0]} (the model's input: the first layer reads it)" if len(names) == 1 else None


def _composition(tree: Node, key: str) -> list[str]:
    """`extends` and `abstract`: keys each file has for itself, which composition reads and takes out of the merged
    spec (a base's `abstract: true` is not inherited), so explain answers them from the spec file itself. (An
    `abstract` the spec writes is still in the tree, and found there.)"""
    top = next((s for s in tree.settings if s.top and s.source is not None and s.loc == ()), None)
    written = top.source.value((key,)) if top is not None and top.source is not None else None
    if key == "abstract":
        return ["abstract = false", "  1. default  false (each file's own: a base's `abstract: true` is not "
                "inherited)  <- wins"]
    if top is None or written is None:
        return ["extends = null (unset: the spec extends no file)", "  1. default  null  <- wins"]
    place = Setting(top.label, top.source, ("extends",))
    return [f"extends = {_scalar(written)} (the files this spec is built on, applied before its own keys: not a key "
            "of the merged spec)", f"  1. {place.where()}  {flow(written)}  <- wins"]


def _unset(tree: Node, parts: list[str | int]) -> bool:
    """Whether `parts` names a key the schema has there with a null default that nothing wrote (with_defaults)."""
    parent, gone = find_any(tree, parts[:-1])
    return parent is not None and gone is None and not parent.removed and str(parts[-1]) in parent.unset


def _expanded(tree: Node, parts: list[str | int]) -> str:
    """Where the keys of a layer a block instance expands to (`layers[u/r1].op`) are written: the resolved spec keeps
    `layers` as written (so that it reads back as the same spec), the instance `u`, not its layers."""
    layers = tree.mapping.get("layers") if tree.mapping is not None else None
    if len(parts) < 2 or parts[0] != "layers" or layers is None or layers.items is None \
            or not (isinstance(parts[1], str) and parts[1].startswith("[")):
        return ""
    name = parts[1][1:-1]
    instance = next((item for item in layers.items if isinstance(item.name(), str) and item.mapping is not None
                     and "block" in item.mapping and name.startswith(f"{item.name()}/")), None)
    if instance is None or instance.mapping is None:
        return ""
    block = str(instance.mapping["block"].data())
    inner = name[len(instance.name()) + 1:]
    if "repeat" in instance.mapping:  # `u/2/r1`: the second repeat of the block
        inner = inner.partition("/")[2]
    rest = "".join(f"[{p[1:-1]}]" if isinstance(p, str) and p.startswith("[") else f".{p}" for p in parts[2:])
    written = f"blocks.{block}.layers[{inner}]"
    kept = (f": {quoted(name)} lies in instance {quoted(instance.name())} of block {quoted(block)}, and the resolved "
            "spec keeps the instance as written, not the layers it expands to")
    if find(tree, parse_key(written)) is not None:
        return f"{kept}; explain {quoted(written + rest)} (the instance's `with` sets the block's parameters)"
    if find(tree, ["blocks", block]) is None:  # a shipped block (spec/shipped.py): not in the user's files
        return f"{kept}; its layers are specgen's (docs/spec.md, \"Shipped blocks\")"
    return ""


def _written(setting: Setting, leaf: bool, removed: bool) -> str:
    """What one setting wrote, as `explain` prints it after the place (a list or mapping in flow style, cut)."""
    if setting.removes:
        return "  null (removes the bases' value)"
    if isinstance(setting.value, dict | list):
        return f"  {flow(setting.value)}"
    if leaf:  # a removed mapping's own setting holds no value to print
        return "" if removed and setting.value is None else f"  {_scalar(setting.value)}"
    # The key holds a list or mapping now: a place that wrote a scalar (or a null) there before it was replaced
    # still shows what it wrote, and a `--set` of a key inside it the value it set; only a bare `default` wrote
    # nothing.
    return "" if setting.label == DEFAULT.label and setting.value is None else f"  {_scalar(setting.value)}"


def load_resolved(path: Path, overrides: list[str]) -> tuple[LoadedSpec, Node]:
    """The validated spec (with its overrides) and its provenance tree: files, then `--set`, then defaults."""
    loaded = load_with_overrides(path, overrides)  # raises on any problem before anything is printed
    data, source = load_composed(path, loaded.display)
    tree = with_overrides(tree_of(data, source), overrides)
    return loaded, with_defaults(tree, loaded.spec.model_dump(mode="json", by_alias=True, warnings=False))
