"""Block definitions, checked once per block before any instance is expanded (spec/expand.py).

Names, ops, `$param` references, what each block layer reads, outputs, the `block` and `with` of
every instance, and the block graph (no cycles). Problems are positioned where they are written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from specgen.diagnostics import Diagnostic, did_you_mean, quoted, safe_repr
from specgen.fields.base import ECHO_CHARS, LAYER, name_length_problem
from specgen.kinds.ops import REGISTRY
from specgen.spec.blocks import PARAM_REF, Block, Instance
from specgen.spec.messages import validation_diagnostics
from specgen.spec.model import Spec
from specgen.spec.origins import Origin, Origins
from specgen.spec.shipped import names as shipped_names
from specgen.spec.source_map import PathKey

LAYER_NAME = re.compile(LAYER)  # the form only: a part's length is name_length_problem's (fields/base.py)
STATIC_KEYS = ("name", "op", "input", "inputs")  # never `$param`s: the graph is known before any instance


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
        local = self._local_name(name, item, loc)
        if local is None:
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
            self.problems += validation_diagnostics(exc, {"layers": [item]}, self.origins.source, prefix=("layers", 0),
                                                    locator=lambda at, key: self.origins.at(Origin(loc), at[2:], key))
            return {local: "instance"}
        self.instances[(name, j)] = instance
        self.uses(instance, loc, block)
        return _aliases(instance, self.spec)

    def _local_name(self, name: str, item: dict[str, Any], loc: PathKey) -> str | None:
        """A block layer's name, None if it has none of a layer name's form. One too long is reported here, once,
        and kept in scope: left to pydantic, every instance and every layer reading it refused it again (rt8 F6)."""
        local = item.get("name")
        if not isinstance(local, str) or not LAYER_NAME.fullmatch(local):  # fullmatch: '$' also matches before a '\n'
            self.report((*loc, "name") if "name" in item else loc,
                        f"block '{name}': layer name {safe_repr(local)} is not a layer name (parts of an ASCII "
                        "letter, then ASCII letters and digits with single '_', joined by '/'); names cannot be "
                        "parameters")
            return None
        if problem := name_length_problem(local):
            self.report((*loc, "name"), f"block '{name}': layer name '{local[:ECHO_CHARS]}…' is too long: {problem}; "
                        "shorten it")
        return local

    def uses(self, instance: Instance, loc: PathKey, within: Block | None) -> None:
        """An instance names a block that exists, sets only its parameters, every one without a default,
        and has inputs that fit it."""
        blocks = self.spec.blocks
        used = [(instance.block, (*loc, "block"))]
        if instance.first is not None and instance.first.block is not None:
            used.append((instance.first.block, (*loc, "first", "block")))
        for name, at in used:
            if name not in blocks:
                shipped = [n for n in shipped_names() if n not in blocks]  # shipped blocks are named in full
                known = (f" (blocks: {', '.join(blocks)})" if blocks else
                         f" (the spec has no 'blocks' section; shipped blocks: {', '.join(shipped)})")
                self.report(at, f"instance '{instance.name}' uses block '{name}', which is not defined"
                            f"{did_you_mean(name, [*blocks, *shipped])}{known}")
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
                    self.report((*at, param), f"{safe_repr(value)} refers to a parameter, but instance '{instance.name}' is "
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
            if problem := name_length_problem(ref):  # no parameter is that long (Identifier): one bounded line
                self.report(at, f"block '{name}': '${ref[:ECHO_CHARS]}…' names no parameter: {problem}; shorten it")
            elif ref not in block.params:
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
                names, where = cycle
                self.report(where, f"block '{names[0]}' uses itself: {' -> '.join(names)}; blocks cannot be recursive")
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
