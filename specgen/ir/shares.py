"""Shared layers: a layer with `share: <owner>` is another call of the owner (docs/spec.md, "Shared layers").

It owns no variables: its node reads the owner's, so every variable exists once (collections,
optimizers, checkpoints and the export count it once) while the FLOPs of both calls count.
Checked here, before shapes: the owner exists, the op is the same and every key the sharing layer
writes equals the owner's (keys it leaves out take the owner's value, not the op's default, since a
second call of a Keras layer runs with that layer's configuration). After shapes: the variables
the sharing layer's input would need are the owner's shapes.

A share of a share resolves to the root owner (the Keras importer writes every later call as a
share of the first, but a hand-written chain means the same thing); a chain that loops is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specgen import text
from specgen.diagnostics import Diagnostic, did_you_mean
from specgen.kinds.ops import OpResult
from specgen.kinds.ops.base import resolve_init
from specgen.spec.load import LoadedSpec

# Keys that say where a call reads from, not what the layer is.
CALL_KEYS = frozenset(("name", "input", "inputs", "attention_mask", "share", "op"))


def share_owners(loaded: LoadedSpec) -> tuple[dict[str, str], list[Diagnostic]]:
    """Sharing layer -> root owner, and the problems of every `share:` key."""
    owners: dict[str, str] = {}
    problems: list[Diagnostic] = []
    sharing = [(i, layer) for i, layer in enumerate(loaded.layers) if layer.share is not None]
    layers = {layer.name: (i, layer) for i, layer in enumerate(loaded.layers)} if sharing else {}
    for i, layer in sharing:
        root, problem = _root(layer.name, layers)
        if problem:
            problems.append(loaded.diagnostic(("layers", i, "share"), problem))
            continue
        owner = layers[root][1]
        if owner.op != layer.op:
            problems.append(loaded.diagnostic(("layers", i, "op"), (
                f"layer '{layer.name}' shares '{root}' (op {owner.op}) but is op {layer.op}: a shared layer is "
                f"another call of the same layer; write op: {owner.op}, or drop 'share' for a layer of its own")))
            continue
        for key in sorted(layer.model_fields_set - CALL_KEYS):
            mine, theirs = getattr(layer, key), getattr(owner, key)
            if not _same(mine, theirs):
                # `op` picks the schema, so keys the op requires cannot be left out (docs/spec.md)
                fix = ("write the owner's value" if type(layer).model_fields[key].is_required()
                       else f"leave '{key}' out (it takes the owner's value) or make it equal")
                problems.append(loaded.diagnostic(("layers", i, key), (
                    f"layer '{layer.name}' shares '{root}' but sets {key} {_shown(mine)}, where '{root}' has "
                    f"{_shown(theirs)}: a shared layer runs with its owner's configuration; {fix}")))
        owners[layer.name] = root
    return owners, problems


def _root(name: str, layers: dict[str, tuple[int, Any]]) -> tuple[str, str]:
    """The layer a chain of shares ends at, or ("", why not)."""
    chain = [name]
    while (share := layers[chain[-1]][1].share) is not None:
        if share not in layers:
            return "", (f"layer '{chain[-1]}' shares '{share}', which is not a layer"
                        f"{did_you_mean(share, list(layers))}")
        if share in chain:
            loop = " -> ".join([*chain[chain.index(share):], share])
            return "", f"the shares form a loop ({loop}): one layer of a shared group must own the variables"
        chain.append(share)
    return chain[-1], ""


def _same(a: Any, b: Any) -> bool:
    """Equal, counting `kernel: 3` and `kernel: [3, 3]`, or `he_normal` and `{kind: he_normal}`, as the same value."""
    if isinstance(a, str) and hasattr(b, "kind"):
        a, b = b, a
    if hasattr(a, "kind") and isinstance(b, str):
        return resolve_init(a) == resolve_init(b)
    if isinstance(a, int) and isinstance(b, list):
        a, b = b, a
    if isinstance(a, list) and isinstance(b, int) and not isinstance(b, bool):
        return all(x == b for x in a)
    return bool(a == b)


def _shown(value: Any) -> str:
    return repr(value.model_dump() if hasattr(value, "model_dump") else value)


def effective(layer: Any, owner: Any) -> Any:
    """The configuration a sharing layer runs with: the owner's, under its own name and inputs."""
    wiring = {k: getattr(layer, k) for k in ("name", "input", "inputs", "share") if k in type(layer).model_fields}
    return owner.model_copy(update=wiring)


def check_shapes(loaded: LoadedSpec, inferred: Sequence[Any]) -> list[Diagnostic]:
    """A sharing layer's input must fit its owner's variables (a dense kernel's fan-in, a conv's channels).

    `inferred`: resolve.py's layers with their input shapes and shape-rule results.
    """
    by_name = {x.layer.name: x for x in inferred}
    problems = []
    for x in inferred:
        owner = by_name.get(x.shares or "")
        if owner is None:
            continue  # not shared, or the owner already failed
        why = _shape_problem(x.layer.name, x.shapes, x.result, owner.layer.name, owner.shapes, owner.result)
        if why:
            written = loaded.layers[x.index]
            key = "inputs" if "inputs" in type(written).model_fields else "input"
            loc = ("layers", x.index, key) if key in written.model_fields_set else ("layers", x.index)
            problems.append(loaded.diagnostic(loc, why))
    return problems


def _shape_problem(name: str, shapes: list[Any], result: OpResult, owner: str, owner_shapes: list[Any],
                  owner_result: OpResult) -> str:
    """Why the sharing layer's input cannot use the owner's variables ("" when it can)."""
    theirs = {d.role: d.shape for d in owner_result.variables}
    for decl in result.variables:
        if theirs.get(decl.role) != decl.shape:
            return (f"layer '{name}' shares the variables of '{owner}', but its input {text.shape(shapes[0])} would need "
                    f"{decl.role} {list(decl.shape)}, and '{owner}/{decl.role}' is {list(theirs.get(decl.role, ()))} "
                    f"(for the input {text.shape(owner_shapes[0])} of '{owner}')")
    return ""
