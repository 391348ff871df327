"""Expand block instances into the flat list of op layers that the IR resolves.

Why here, in specgen/spec/ right after pydantic validation: the IR (ir/graph.py, ir/resolve.py)
already resolves a flat list of op layers and reports its problems at `("layers", i, key)`. Expanding
once, at load time, gives it exactly that list, so no IR module learns about blocks, and expansion
sits next to the source map it needs for positions. Each expanded layer keeps an `Origin` (where
its mapping is written, and the instances it came through); `LoadedSpec.diagnostic` maps
`("layers", i, ...)` through it, so every later diagnostic about the layer points at the block's
line and names the instance lines too (`Origins.locate`).

Work is bounded before it is done: the block graph must be acyclic, and expansion stops at
MAX_LAYERS layers, so nested `repeat`s cannot blow up (docs/security.md's YAML bounds hold before).
A spec without blocks never reaches this module (load.py), so it costs such a spec nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

from specgen.diagnostics import Diagnostic, Position, SpecError, did_you_mean, quoted, safe_repr
from specgen.ir.ops import REGISTRY, Layer
from specgen.spec.base import LAYER
from specgen.spec.blocks import PARAM_REF, Block, Instance
from specgen.spec.model import Spec
from specgen.spec.yaml_source import PathKey, SourceMap

MAX_LAYERS = 10_000  # expanded layers in one spec; EfficientNetB7, among the largest, has 813
LAYER_NAME = re.compile(LAYER)
STATIC_KEYS = ("name", "op", "input", "inputs")  # never `$param`s: the graph is known before any instance


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

    def locate(self, loc: PathKey, key: bool = False) -> tuple[Position | None, str]:
        if len(loc) < 2 or loc[0] != "layers" or not isinstance(loc[1], int) or not 0 <= loc[1] < len(self.items):
            return self.source.locate(loc, self.data, key=key), ""
        origin = self.items[loc[1]]
        return self.at(origin, loc[2:], key)

    def at(self, origin: Origin, rest: PathKey = (), key: bool = False) -> tuple[Position | None, str]:
        return self.source.locate((*origin.loc, *rest), self.data, key=key), self.note(origin, rest)

    def note(self, origin: Origin, rest: PathKey = ()) -> str:
        """' (in instance 'a/1' of block 'b' at f:3:7, in ...; $filters is 64, set at f:9:40)'."""
        if not origin.sites:
            return ""
        text = " (in " + ", in ".join(f"instance '{s.name}' of block '{s.block}' at {self._shown(s.loc)}"
                                     for s in origin.sites)
        ref = self._param_at(origin.loc, rest)
        if ref is not None and ref in origin.sites[0].args:
            value, where = origin.sites[0].args[ref]
            text += f"; ${ref} is {safe_repr(value)}, set at {self._shown(where)}"
        return text + ")"

    def _shown(self, loc: PathKey) -> str:
        position = self.source.locate(loc, self.data)
        return f"{self.source.path}:{position.line}:{position.col}" if position else self.source.path

    def _param_at(self, loc: PathKey, rest: PathKey) -> str | None:
        """The parameter whose `$ref` is written where a diagnostic points, if one is."""
        node = _node(self.data, loc)
        for part in rest:
            if isinstance(node, dict) and isinstance(part, str) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
        return node[1:] if isinstance(node, str) and PARAM_REF.match(node) else None


@dataclass(frozen=True)
class Expanded:
    spec: Spec
    origins: Origins


def expand(spec: Spec, data: dict[str, Any], source: SourceMap) -> Expanded:
    """The spec with its instances expanded into op layers, or SpecError with every problem."""
    origins = Origins(source, data)
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


def _node(data: Any, loc: PathKey) -> Any:
    for part in loc:
        data = data[part]
    return data


# ---------------------------------------------------------------------------------------------
# Expansion: once the definitions are sound
# ---------------------------------------------------------------------------------------------

Args = Mapping[str, tuple[Any, PathKey]]  # parameter -> (value, where the value is written)


@cache
def _layer_adapter() -> TypeAdapter[Any]:
    return TypeAdapter(Layer)


def _reads(layer: Any) -> list[str]:
    """The names an op layer (a model or, from a block, a mapping) reads, as written."""
    get = layer.get if isinstance(layer, dict) else lambda key: getattr(layer, key, None)
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
        block = self.spec.blocks[block_name]
        args: dict[str, tuple[Any, PathKey]] = {p: (d, ("blocks", block_name, "params", p))
                                                for p, d in block.params.items() if d is not None}
        args.update(given)
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
            elif not LAYER_NAME.match(alias):
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
        if not LAYER_NAME.match(layer["name"]):
            self.report(self.origins.items[i], f"the expanded layer name '{layer['name']}' is not a valid layer name "
                        "(at most 8 parts joined by '/'): nest fewer blocks or shorten the names")
            return layer
        try:
            return _layer_adapter().validate_python(layer)
        except ValidationError as exc:
            from specgen.spec.load import _diagnostics  # load.py imports this module only when it is needed

            self.problems += _diagnostics(exc, {"layers": [layer]}, self.origins.source, prefix=("layers", 0),
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


def check_blocks(spec: Spec, data: dict[str, Any], origins: Origins) -> list[Diagnostic]:
    """Names, references and parameters of every block, the `block` and `with` of every instance,
    and the block graph (no cycles)."""
    checker = _Checker(spec, origins)
    for name, block in spec.blocks.items():
        checker.block(name, block)
    for i, item in enumerate(spec.layers):
        if isinstance(item, Instance):
            checker.uses(item, ("layers", i), None)
    if not checker.problems:
        checker.cycles()
    return checker.problems


@dataclass
class _Checker:
    spec: Spec
    origins: Origins
    problems: list[Diagnostic] = field(default_factory=list)
    instances: dict[tuple[str, int], Instance] = field(default_factory=dict)  # (block, index) -> its instance

    def report(self, loc: PathKey, message: str, key: bool = False) -> None:
        position = self.origins.source.locate(loc, self.origins.data, key=key)
        self.problems.append(Diagnostic(self.origins.source.path, position, message))

    def block(self, name: str, block: Block) -> None:
        where: PathKey = ("blocks", name)
        scope: dict[str, str] = dict.fromkeys(block.inputs, "input")  # local name -> what it names
        for j, item in enumerate(block.layers):
            loc = (*where, "layers", j)
            names = self._item(name, block, j, item, loc)
            for alias, kind in names.items():
                if alias in scope:
                    self.report((*loc, "name"), f"block '{name}': '{alias}' is already used by "
                                f"{'an input' if scope[alias] == 'input' else 'another layer'} of the block")
                scope.setdefault(alias, kind)
            self._params(name, block, item, loc)
        for j, item in enumerate(block.layers):
            self._references(name, block, j, item, scope)
        for out, ref in block.outputs.items():
            if scope.get(ref) not in ("layer", "instance"):
                why = {"input": "an input of the block", "several": "an instance with several outputs (name one)"}
                self.report((*where, "outputs", out), f"block '{name}': output '{out}' names '{ref}', which is "
                            f"{why.get(scope.get(ref, ''), 'not a layer or an instance of the block')}"
                            f"{did_you_mean(ref, [n for n, k in scope.items() if k in ('layer', 'instance')])}")
            elif out != ref and scope.get(out) is not None:
                self.report((*where, "outputs", out), f"block '{name}': output '{out}' is named like a layer of the "
                            f"block but reads '{ref}'; both would be '<instance>/{out}': rename one", key=True)

    def _item(self, name: str, block: Block, j: int, item: dict[str, Any], loc: PathKey) -> dict[str, str]:
        """The local names one block layer defines, with what each names."""
        local = item.get("name")
        if not isinstance(local, str) or not LAYER_NAME.match(local):
            self.report((*loc, "name") if "name" in item else loc,
                        f"block '{name}': layer name {safe_repr(local)} is not a layer name (parts of a letter, then "
                        "letters and digits with single '_', joined by '/'); names cannot be parameters")
            return {}
        if ("op" in item) == ("block" in item):
            self.report(loc, f"block '{name}': layer '{local}' needs exactly one of 'op' (a layer) or 'block' "
                        "(an instance of another block)")
            return {}
        if "op" in item:
            op = item["op"]
            if not isinstance(op, str) or op not in REGISTRY:
                self.report((*loc, "op"), f"unknown op {quoted(op)}{did_you_mean(str(op), REGISTRY)} "
                            f"(in block '{name}', layer '{local}'; ops cannot be parameters)")
            for key in ("input", "inputs"):
                refs = item.get(key)
                refs = [refs] if key == "input" and refs is not None else refs
                if refs is not None and not (isinstance(refs, list) and all(isinstance(r, str) for r in refs)):
                    self.report((*loc, key), f"block '{name}': '{key}' of layer '{local}' must be "
                                f"{'a layer name' if key == 'input' else 'a list of layer names'}; "
                                "inputs cannot be parameters")
            return {local: "layer"}
        try:
            instance = Instance.model_validate(item)
        except ValidationError as exc:
            from specgen.spec.load import _diagnostics  # load.py imports this module only when it is needed

            self.problems += _diagnostics(exc, {"layers": [item]}, self.origins.source, prefix=("layers", 0),
                                          locator=lambda at, key: self.origins.at(Origin(loc), at[2:], key))
            return {local: "instance"}
        self.instances[(name, j)] = instance
        self.uses(instance, loc, block)
        return _aliases(instance, self.spec)

    def uses(self, instance: Instance, loc: PathKey, within: Block | None) -> None:
        """An instance names a block that exists, sets only its parameters, every one without a default,
        and has inputs that fit it."""
        blocks = self.spec.blocks
        used = [(instance.block, (*loc, "block"))]
        if instance.first is not None and instance.first.block is not None:
            used.append((instance.first.block, (*loc, "first", "block")))
        for name, at in used:
            if name not in blocks:
                known = f" (blocks: {', '.join(blocks)})" if blocks else " (the spec has no 'blocks' section)"
                self.report(at, f"instance '{instance.name}' uses block '{name}', which is not defined"
                            f"{did_you_mean(name, blocks)}{known}")
        if any(name not in blocks for name, _ in used):
            return
        block = blocks[instance.block]
        first = blocks[used[-1][0]]
        if instance.first is not None and instance.repeat is None:
            self.report((*loc, "first"), f"instance '{instance.name}': 'first' applies to the first of 'repeat' "
                        "instances; add 'repeat' or write its values in 'with'", key=True)
        if instance.repeat is not None:
            for name, target in {instance.block: block, used[-1][0]: first}.items():
                if len(target.inputs) != 1 or len(target.outputs) != 1:
                    self.report((*loc, "repeat"), f"instance '{instance.name}': 'repeat' stacks instances that each "
                                f"read the one before, so block '{name}' needs one input and one output; it has "
                                f"{len(target.inputs)} and {len(target.outputs)}", key=True)
        self._arguments(instance, loc, block, first, within)
        given = instance.inputs if instance.inputs is not None else [instance.input] if instance.input else None
        if instance.input is not None and instance.inputs is not None:
            self.report((*loc, "inputs"), f"instance '{instance.name}': write 'input' or 'inputs', not both", key=True)
        elif given is None and len(block.inputs) != 1:
            self.report(loc, f"instance '{instance.name}' must name its inputs: block '{instance.block}' has "
                        f"{len(block.inputs)} ({', '.join(block.inputs)}); write inputs: [...] in that order")
        elif given is not None and len(given) != len(block.inputs):
            self.report((*loc, "inputs" if instance.inputs is not None else "input"),
                        f"instance '{instance.name}' gives {len(given)} input(s), but block '{instance.block}' reads "
                        f"{len(block.inputs)} ({', '.join(block.inputs)})")

    def _arguments(self, instance: Instance, loc: PathKey, block: Block, first: Block, within: Block | None) -> None:
        """`with` names parameters of every block it reaches; every parameter without a default gets a value."""
        repeat = instance.repeat
        receivers = [block] if repeat is None else [first] if repeat == 1 else list({id(b): b for b in (first, block)}.values())
        written = [((*loc, "with"), instance.with_, receivers)]
        if instance.first is not None:
            written.append(((*loc, "first", "with"), instance.first.with_, [first]))
        for at, values, targets in written:
            for param, value in values.items():
                unknown = next((t for t in targets if param not in t.params), None)
                if unknown is not None:
                    self.report((*at, param), f"block '{self._name(unknown)}' has no parameter '{param}'"
                                f"{did_you_mean(param, unknown.params)} "
                                f"(parameters: {', '.join(unknown.params) or 'none'})", key=True)
                if within is None and isinstance(value, str) and PARAM_REF.match(value):
                    self.report((*at, param), f"'{value}' refers to a parameter, but instance '{instance.name}' is "
                                "not inside a block; write the value itself")
        cases = [(block, instance.with_, "")] if repeat is None else [
            (first, {**instance.with_, **(instance.first.with_ if instance.first else {})}, " for its first instance")]
        if repeat is not None and repeat > 1:
            cases.append((block, instance.with_, " for instances 2 and on"))
        for target, values, which in cases:
            missing = [p for p, default in target.params.items() if default is None and p not in values]
            if missing:
                self.report(loc, f"instance '{instance.name}' must set parameter(s) {', '.join(map(quoted, missing))} "
                            f"of block '{self._name(target)}'{which} in 'with' (they have no default)")

    def _name(self, block: Block) -> str:
        return next(n for n, b in self.spec.blocks.items() if b is block)

    def _params(self, name: str, block: Block, item: dict[str, Any], loc: PathKey) -> None:
        """Every `$param` in a block layer is a parameter of the block."""
        if "block" in item:
            values = {"with": item.get("with", {}), "first": {"with": (item.get("first") or {}).get("with", {})}}
        else:
            values = {k: v for k, v in item.items() if k not in STATIC_KEYS}
        for at, ref in _refs(values, loc):
            if ref not in block.params:
                self.report(at, f"block '{name}' has no parameter '{ref}'{did_you_mean(ref, block.params)} "
                            f"(parameters: {', '.join(block.params) or 'none'}; declare it in 'params')")

    def _references(self, name: str, block: Block, j: int, item: dict[str, Any], scope: dict[str, str]) -> None:
        """Inputs name the block's inputs, layers or instances; a left-out input is the one before."""
        loc = ("blocks", name, "layers", j)
        local = item.get("name")
        instance = self.instances.get((name, j))
        if instance is not None:
            given = instance.inputs if instance.inputs is not None else [instance.input] if instance.input else None
            key = "inputs" if instance.inputs is not None else "input"
        elif "op" in item and isinstance(local, str):
            raw = item.get("inputs", item.get("input"))
            if raw is not None and not (isinstance(raw, str) or (isinstance(raw, list) and all(
                    isinstance(r, str) for r in raw))):
                return  # reported by _item
            given = raw if isinstance(raw, list) else [raw] if isinstance(raw, str) else None
            key = "inputs" if "inputs" in item else "input"
        else:
            return
        if given is None:
            before = _previous(block, j, self.instances, name, self.spec)
            if j == 0 and len(block.inputs) != 1:
                self.report(loc, f"block '{name}': its first layer '{local}' must name its input; the block has "
                            f"several inputs ({', '.join(block.inputs)})")
            elif before == "":
                self.report(loc, f"block '{name}': layer '{local}' must name its input: the instance before it has "
                            "several outputs (name one as '<instance>/<output>')")
            return
        for k, ref in enumerate(given):
            if scope.get(ref) in ("input", "layer", "instance") and ref != local:
                continue
            at = (*loc, key, k) if key == "inputs" else (*loc, key)
            if ref == local:
                self.report(at, f"block '{name}': layer '{local}' reads its own output")
            elif scope.get(ref) == "several":
                self.report(at, f"block '{name}': '{ref}' is an instance with several outputs; name one as "
                            f"'{ref}/<output>'")
            else:
                self.report(at, f"block '{name}': layer '{local}' reads '{ref}', which is not an input, a layer or an "
                            f"instance of the block{did_you_mean(ref, [n for n, k in scope.items() if k != 'several'])}"
                            " (a block reads only its own inputs)")

    def cycles(self) -> None:
        """Blocks may use other blocks, never themselves (directly or not)."""
        uses: dict[str, list[tuple[str, PathKey]]] = {name: [] for name in self.spec.blocks}
        for (name, j), instance in self.instances.items():
            at = ("blocks", name, "layers", j)
            uses[name].append((instance.block, (*at, "block")))
            if instance.first is not None and instance.first.block is not None:
                uses[name].append((instance.first.block, (*at, "first", "block")))
        done: set[str] = set()
        for start in uses:
            cycle = _find_cycle(start, uses, done)
            if cycle is not None:
                names, at = cycle
                self.report(at, f"block '{names[0]}' uses itself: {' -> '.join(names)}; blocks cannot be recursive")
                return


def _find_cycle(start: str, uses: dict[str, list[tuple[str, PathKey]]],
                done: set[str]) -> tuple[list[str], PathKey] | None:
    """One cycle through the block graph reachable from `start` (iterative depth-first search)."""
    path: list[str] = []
    stack: list[tuple[str, Iterator[tuple[str, PathKey]]]] = [(start, iter(uses[start]))]
    on_path = {start}
    path.append(start)
    while stack:
        name, edges = stack[-1]
        step = next(edges, None)
        if step is None:
            stack.pop()
            path.pop()
            on_path.discard(name)
            done.add(name)
            continue
        target, at = step
        if target in on_path:
            cycle = [*path[path.index(target):], target]
            return cycle, at
        if target not in done and target in uses:
            stack.append((target, iter(uses[target])))
            path.append(target)
            on_path.add(target)
    return None


def _aliases(instance: Instance, spec: Spec) -> dict[str, str]:
    """The local names an instance defines: itself (when its block has one output), `<name>/<output>`,
    and with `repeat`, `<name>/<k>` for each instance."""
    block = spec.blocks.get(instance.block)
    if block is None:
        return {instance.name: "instance"}
    single = "instance" if len(block.outputs) == 1 else "several"
    names = {instance.name: single}
    if instance.repeat is None:
        names.update({f"{instance.name}/{out}": "instance" for out in block.outputs})
    else:
        names.update({f"{instance.name}/{k}": single for k in range(1, instance.repeat + 1)})
    return names


def _previous(block: Block, j: int, instances: dict[tuple[str, int], Instance], name: str, spec: Spec) -> str | None:
    """What a block layer without an input reads: '' when the entry before is an instance with several
    outputs, None for the block's own input (first layer)."""
    if j == 0:
        return None
    before = instances.get((name, j - 1))
    if before is None:
        return str(block.layers[j - 1].get("name"))
    target = spec.blocks.get(before.block)
    return "" if target is not None and len(target.outputs) != 1 else before.name


def _refs(value: Any, loc: PathKey) -> Iterator[tuple[PathKey, str]]:
    """(where, parameter) of every `$param` inside a value."""
    if isinstance(value, str):
        if PARAM_REF.match(value):
            yield loc, value[1:]
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _refs(item, (*loc, key))
    elif isinstance(value, list):
        for k, item in enumerate(value):
            yield from _refs(item, (*loc, k))


def _substitute(value: Any, args: Mapping[str, Any]) -> Any:
    """A block layer's value with each `$param` replaced by the instance's whole value."""
    if isinstance(value, str):
        return args[value[1:]] if PARAM_REF.match(value) else value
    if isinstance(value, dict):
        return {key: _substitute(item, args) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute(item, args) for item in value]
    return value
