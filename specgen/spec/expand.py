"""Expand block instances into the flat list of op layers that the IR resolves.

Why here, in specgen/spec/ right after pydantic validation: the IR (ir/graph.py, ir/resolve.py)
already resolves a flat list of op layers and reports its problems at `("layers", i, key)`. Expanding
once, at load time, gives it exactly that list, so no IR module learns about blocks, and expansion
sits next to the source map it needs for positions. Each expanded layer keeps an `Origin` (where
its mapping is written, and the instances it came through); `LoadedSpec.diagnostic` maps
`("layers", i, ...)` through it, so every later diagnostic about the layer points at the block's
line and names the instance lines too (`Origins.locate`).

Work is bounded before it is done: the block graph must be acyclic, expansion stops at
MAX_LAYERS layers, so nested `repeat`s cannot blow up, and at an instance whose layers would have
more name parts than a layer name may (MAX_NAME_PARTS), so that a chain of hundreds of blocks using
each other recurses at most that deep (each level adds a part) (docs/security.md's YAML bounds hold before).
A spec without blocks never reaches this module (load.py), so it costs such a spec nothing. Block
definitions are checked first (block_checks.py); origins.py keeps the positions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

from specgen.diagnostics import Diagnostic, Position, SpecError
from specgen.fields.base import MAX_NAME_PARTS, is_layer_name
from specgen.kinds.ops import REGISTRY, Layer
from specgen.spec.block_checks import STATIC_KEYS, check_blocks
from specgen.spec.blocks import MAX_LAYERS, PARAM_REF, Instance
from specgen.spec.messages import Overrides, validation_diagnostics
from specgen.spec.model import Spec
from specgen.spec.origins import Origin, Origins, Site
from specgen.spec.shipped import merged, prepare
from specgen.spec.source_map import PathKey, SourceMap

__all__ = ["MAX_LAYERS", "expand"]



@dataclass(frozen=True)
class Expanded:
    spec: Spec
    origins: Origins


def expand(spec: Spec, data: dict[str, Any], source: SourceMap, overrides: Overrides = ()) -> Expanded:
    """The spec with its instances expanded into op layers, or SpecError with every problem (`overrides`: the `--set`
    overrides applied to `data`, which notes name instead of a file position)."""
    spec, shipped = merged(spec)
    origins = Origins(source, data, shipped=shipped, overrides=overrides)
    problems = check_blocks(spec, data, origins)
    if problems:
        raise SpecError(problems)
    expander = _Expander(spec, origins)
    expander.top_level()
    if not expander.problems:
        expander.finish()
    if expander.problems:
        raise SpecError(_unique(expander.problems))
    outputs = {name: expander.resolve(target) for name, target in spec.outputs.items()}
    flat = spec.model_copy(update={"layers": expander.layers, "outputs": outputs})
    return Expanded(flat, origins)


def _unique(problems: list[Diagnostic]) -> list[Diagnostic]:
    """A block mistake seen in every instance is reported once (with the first instance's note)."""
    seen: dict[tuple[Position | None, str], Diagnostic] = {}
    for problem in problems:
        seen.setdefault((problem.position, problem.message.split(" (in ", 1)[0]), problem)
    return list(seen.values())


# ---------------------------------------------------------------------------------------------
# Expansion: once the definitions are sound
# ---------------------------------------------------------------------------------------------

Args = Mapping[str, tuple[Any, PathKey]]  # parameter -> (value, where the value is written)


@cache
def _layer_adapter() -> TypeAdapter[Any]:
    return TypeAdapter(Layer)


def _reads(layer: Any) -> list[str]:
    """The names an op layer (a model or, from a block, a mapping) reads, as written."""
    get: Callable[[str], Any] = layer.get if isinstance(layer, dict) else lambda key: getattr(layer, key, None)
    if isinstance(layer, dict) or "inputs" in type(layer).model_fields:
        inputs = get("inputs")
        if isinstance(inputs, list):
            return inputs
    single = get("input") if isinstance(layer, dict) or "input" in type(layer).model_fields else None
    return [single] if isinstance(single, str) else []


class _Expander:
    """Walks `layers`, expanding each instance depth first; names are resolved once all are known."""

    def __init__(self, spec: Spec, origins: Origins):
        self.spec, self.origins = spec, origins
        self.layers: list[Any] = []  # top-level op layers (models) and block layers (mappings until finish)
        self.problems: list[Diagnostic] = []
        self.aliases: dict[str, str] = {}  # instance names and <instance>/<output> -> the name each reads
        self.alias_at: dict[str, Origin] = {}
        self.instances: dict[tuple[str, int], Instance] = {}

    def report(self, origin: Origin, message: str, rest: PathKey = (), key: bool = False) -> None:
        position, note = self.origins.at(origin, rest, key)
        self.problems.append(Diagnostic(self.origins.source.path, position, message + note))

    def top_level(self) -> None:
        previous: str | None = None  # what a layer without `input` reads: the entry before's output
        after_instance = False
        for i, item in enumerate(self.spec.layers):
            loc: PathKey = ("layers", i)
            if isinstance(item, Instance):
                given = item.inputs if item.inputs is not None else [item.input] if item.input else None
                inputs = given or ([previous] if previous else [])
                if not inputs and i == 0 and len(self.spec.inputs) == 1:
                    inputs = list(self.spec.inputs)
                if not inputs:
                    self.report(Origin(loc), f"instance '{item.name}' must name its input"
                                + ("; the spec has several inputs" if i == 0 else ""))
                    return
                self._instance(item, item.name, inputs, loc, {}, ())
                previous = item.name if len(self.spec.blocks[item.block].outputs) == 1 else None
                after_instance = True
            else:
                if after_instance and not _reads(item) and "input" in type(item).model_fields:
                    if previous is None:
                        self.report(Origin(loc), f"layer '{item.name}' must name its input: the instance before it "
                                    "has several outputs (name one as '<instance>/<output>')")
                        return
                    item = item.model_copy(update={"input": previous})
                self._add(item, Origin(loc))
                previous, after_instance = item.name, False
            if self.problems:
                return

    def _instance(self, instance: Instance, name: str, inputs: list[str], loc: PathKey, outer: Args,
                  sites: tuple[Site, ...]) -> None:
        """Expand one instance entry (several with `repeat`) named `name`, reading `inputs`."""
        args = _arguments(instance.with_, outer, (*loc, "with"))
        if instance.repeat is None:
            self._block(instance.block, name, inputs, loc, args, sites)
            return
        first = instance.first
        first_args = {**args, **_arguments(first.with_, outer, (*loc, "first", "with"))} if first else args
        current = inputs
        for k in range(1, instance.repeat + 1):
            block = first.block or instance.block if first is not None and k == 1 else instance.block
            self._block(block, f"{name}/{k}", current, loc, first_args if k == 1 else args, sites)
            current = [f"{name}/{k}"]
        self._alias(name, current[0], Origin(loc, sites))

    def _block(self, block_name: str, name: str, inputs: list[str], loc: PathKey, given: Args,
               sites: tuple[Site, ...]) -> None:
        """Expand one block as `name`: its layers become `<name>/<layer>`."""
        # Past the longest layer name, nothing below can be valid: stop descending (one part over still
        # expands, so that finish() names the first layer that is too long, as for any name).
        if name.count("/") + 1 > MAX_NAME_PARTS:
            self.report(Origin(loc, sites), f"instance '{name}' nests blocks too deep: its name has more than "
                        f"{MAX_NAME_PARTS} parts joined by '/', the most a layer name has (nest fewer blocks or "
                        "shorten the names)")
            return
        block = self.spec.blocks[block_name]
        args: dict[str, tuple[Any, PathKey]] = {p: (d, ("blocks", block_name, "params", p))
                                                for p, d in block.params.items() if d is not None}
        args.update(given)
        if block_name in self.origins.shipped:  # a shipped block: its graph and key_dim per instance
            prepared = prepare(block_name, args, self.origins.shipped, name)
            if prepared.error is not None:
                self.report(Origin(prepared.error[0], sites), prepared.error[1])
                return
            block_name, args = prepared.block, prepared.args
            block = self.spec.blocks[block_name]
        inner = (Site(name, block_name, loc, args), *sites)
        values = {p: value for p, (value, _) in args.items()}
        scope = dict(zip(block.inputs, inputs, strict=True))
        previous = inputs[0] if len(inputs) == 1 else None
        for j, item in enumerate(block.layers):
            at = ("blocks", block_name, "layers", j)
            local = item["name"]
            refs = _reads(item)
            reads = [scope.get(r, f"{name}/{r}") for r in refs] or ([previous] if previous else [])
            if "block" in item:
                instance = self.instances.get((block_name, j))
                if instance is None:
                    instance = self.instances[(block_name, j)] = Instance.model_validate(item)
                self._instance(instance, f"{name}/{local}", reads, at, args, inner)
            else:
                layer = {k: _substitute(v, values) for k, v in item.items() if k not in STATIC_KEYS}
                layer["name"], layer["op"] = f"{name}/{local}", item["op"]
                fields = REGISTRY[item["op"]].spec.model_fields
                if "inputs" in fields and "inputs" in item:
                    layer["inputs"] = reads
                elif "input" in fields and reads:
                    layer["input"] = reads[0]
                for key in ("input", "inputs"):  # written where the op has no such key: let validation say so
                    if key in item and key not in layer:
                        layer[key] = item[key]
                self._add(layer, Origin(at, inner))
            previous = f"{name}/{local}"
            if self.problems:
                return
        for out, ref in block.outputs.items():
            if out != ref:
                self._alias(f"{name}/{out}", f"{name}/{ref}", Origin(loc, sites))
        if len(block.outputs) == 1:
            self._alias(name, f"{name}/{next(iter(block.outputs))}", Origin(loc, sites))

    def _alias(self, alias: str, target: str, origin: Origin) -> None:
        if alias in self.aliases and self.aliases[alias] != target:
            self.report(origin, f"instance name '{alias}' is used twice")
        self.aliases[alias] = target
        self.alias_at.setdefault(alias, origin)

    def _add(self, layer: Any, origin: Origin) -> None:
        if len(self.layers) >= MAX_LAYERS:
            top = origin.sites[-1].loc if origin.sites else origin.loc
            position = self.origins.source.locate(top, self.origins.data)
            raise SpecError([Diagnostic(self.origins.source.path, position, (
                f"the spec expands to more than {MAX_LAYERS} layers; specgen stops there (fewer or smaller repeats)"))])
        self.layers.append(layer)
        self.origins.items.append(origin)

    def resolve(self, name: str) -> str:
        """The layer an instance name (or `<instance>/<output>`) stands for; other names as they are."""
        for _ in range(len(self.aliases) + 1):  # chains end at a layer: blocks are acyclic
            if name not in self.aliases:
                break
            name = self.aliases[name]
        return name

    def finish(self) -> None:
        """Check every name, resolve what each layer reads, and validate the block layers as op layers."""
        names = {layer["name"] if isinstance(layer, dict) else layer.name for layer in self.layers}
        for alias, origin in self.alias_at.items():
            clash = "a layer" if alias in names else "an input" if alias in self.spec.inputs else None
            if clash:
                self.report(origin, f"instance name '{alias}' is already used by {clash}")
            elif not is_layer_name(alias):  # every part was checked (block_checks, pydantic): only the count can fail
                self.report(origin, f"the instance name '{alias}' is not a valid layer name "
                            f"(at most 8 parts joined by '/'): nest fewer blocks or shorten the names")
        for i, layer in enumerate(self.layers):
            self.layers[i] = self._final(i, layer)

    def _final(self, i: int, layer: Any) -> Any:
        reads = _reads(layer)
        resolved = [self.resolve(name) for name in reads]
        if not isinstance(layer, dict):
            if resolved == reads:
                return layer
            key = "inputs" if "inputs" in type(layer).model_fields else "input"
            return layer.model_copy(update={key: resolved if key == "inputs" else resolved[0]})
        if isinstance(layer.get("inputs"), list):
            layer["inputs"] = resolved
        elif resolved:
            layer["input"] = resolved[0]
        if not is_layer_name(layer["name"]):
            self.report(self.origins.items[i], f"the expanded layer name '{layer['name']}' is not a valid layer name "
                        "(at most 8 parts joined by '/'): nest fewer blocks or shorten the names")
            return layer
        try:
            return _layer_adapter().validate_python(layer)
        except ValidationError as exc:
            self.problems += validation_diagnostics(exc, {"layers": [layer]}, self.origins.source, prefix=("layers", 0),
                                                    locator=lambda at, key: self.origins.locate(("layers", i, *at[2:]), key))
            return layer


def _arguments(written: Mapping[str, Any], outer: Args, loc: PathKey) -> dict[str, tuple[Any, PathKey]]:
    """An instance's `with` values; a `$param` of the enclosing block takes that block's value (and position)."""
    args = {}
    for param, value in written.items():
        ref = isinstance(value, str) and PARAM_REF.match(value)
        args[param] = outer[value[1:]] if ref and value[1:] in outer else (value, (*loc, param))
    return args


# ---------------------------------------------------------------------------------------------
# Definitions: checked once per block, before any instance is expanded
# ---------------------------------------------------------------------------------------------


def _substitute(value: Any, args: Mapping[str, Any]) -> Any:
    """A block layer's value with each `$param` replaced by the instance's whole value."""
    if isinstance(value, str):
        return args[value[1:]] if PARAM_REF.match(value) else value
    if isinstance(value, dict):
        return {key: _substitute(item, args) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute(item, args) for item in value]
    return value
