"""The `prune` section resolved: which weights carry a mask, and the schedule that recomputes the masks.

Masks are training state in the built-in `pruning` collection (one `pruning/<weight path>` per
pruned weight, ir/training/keys.py). The schedule formulas are TF Model Optimization's
(`tfmot.sparsity.keras.ConstantSparsity` and `PolynomialDecay`); docs/pruning.md states them.
The generated code evaluates them in TensorFlow (specgen/runtime/lib/pruning.py); this module
answers what `specgen report` prints without TensorFlow.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specgen.diagnostics import Diagnostic
from specgen.ir.collections import Membership, Resolver, variable_list
from specgen.ir.model import PrunedWeight, PruneScheduleIR, PruningIR
from specgen.ir.training import keys
from specgen.spec.load import LoadedSpec


def pruned_count(size: int, sparsity: float) -> int:
    """How many of `size` entries a mask at `sparsity` zeroes: TFMOT keeps max(round(size * (1 - sparsity)), 1),
    rounding half to even (tf.math.round; Python's round does the same)."""
    return size - max(round(size * (1.0 - sparsity)), 1)


def _schedule(schedule: Any) -> PruneScheduleIR:
    if schedule.kind == "constant_sparsity":
        return PruneScheduleIR(schedule.kind, schedule.begin_step, schedule.end_step, schedule.frequency,
                               schedule.sparsity, schedule.sparsity)
    return PruneScheduleIR(schedule.kind, schedule.begin_step, schedule.end_step, schedule.frequency,
                           schedule.initial_sparsity, schedule.final_sparsity, schedule.power)


def resolve_pruning(loaded: LoadedSpec, members: Membership, shapes: dict[str, tuple[int, ...]],
                    owners: dict[str, str]) -> tuple[PruningIR | None, list[Diagnostic]]:
    """The pruned weights (trained weights only; statistics a pattern matches are dropped, as `frozen` and
    optimizers drop them) and the schedule; positioned problems instead when the section cannot apply."""
    spec = loaded.spec
    prune = spec.prune
    if prune is None:
        return None, []
    if not (spec.optimizers and spec.loss and spec.train):
        return None, [loaded.diagnostic(("prune",), "pruning happens during training and needs the 'loss', "
                                        "'optimizers' and 'train' sections", key=True)]
    probe = replace(members, problems=[])
    resolver = Resolver(loaded, probe)
    # Bare `trainable` reads naturally here ("prune every trained weight"); the other built-ins stay refused.
    resolver.resolved["trainable"] = members.collections.get("trainable", [])
    selected = resolver.selection(prune.variables, ("prune", "variables"))
    problems = list(probe.problems)
    weights, trainable = set(members.weights), set(members.collections.get("trainable", []))
    # A target network's statistics are dropped as every statistic is; its weights are refused as copies.
    targets = set(members.targets)
    copies = [p for p in selected if p in weights and p in targets]
    if copies:
        problems.append(_copies_selected(loaded, copies))
    held = [p for p in selected if p in weights and p not in trainable and p not in copies]
    if held:
        problems.append(loaded.diagnostic(("prune", "variables"), (
            f"prune selects frozen {variable_list(held)}; no optimizer updates frozen weights and pruning would "
            "change them: remove them from 'prune.variables' or from 'frozen'")))
    paths = [p for p in selected if p in trainable]
    if not paths and not problems:
        problems.append(loaded.diagnostic(("prune", "variables"), (
            "prune selects no trained weight (batch-norm statistics and constants are never pruned); "
            "name kernels, e.g. ['conv1/kernel', 'head/*/kernel']")))
    if problems:
        return None, problems
    pruned = tuple(PrunedWeight(p, keys.mask(p), shapes[p], owners[p]) for p in paths)
    return PruningIR(pruned, _schedule(prune.schedule)), []


def _copies_selected(loaded: LoadedSpec, copies: list[str]) -> Diagnostic:
    """Target-network copies are in no optimizer and not in `frozen` either (docs/targets.md): say what they are,
    and name the online weights that pruning should select instead."""
    prefixes = {name: (e.online[:-1], e.target[:-1]) for name, e in loaded.spec.targets.items()}  # 'net/*' -> 'net/'
    online, names = [], []
    for path in copies:
        name, (source, prefix) = next((n, pair) for n, pair in prefixes.items() if path.startswith(pair[1]))
        online.append(f"'{source}{path[len(prefix):]}'")
        names += [] if f"targets.{name}" in names else [f"targets.{name}"]
    one = len(copies) == 1
    shown = ", ".join(f"'{p}'" for p in copies[:4]) + (f" and {len(copies) - 4} more" if len(copies) > 4 else "")
    return loaded.diagnostic(("prune", "variables"), (
        f"prune selects target-network {'copy' if one else 'copies'} {shown} ({', '.join(names)}); a target copy is "
        "trained by no optimizer and follows its online weights, so its next update would undo a mask of its own, "
        "and pruning the online weights already reaches it (a hard copy takes their zeros, a soft one decays toward "
        f"them): prune {', '.join(online[:4])}{' ...' if len(online) > 4 else ''} and remove the "
        f"{'copy' if one else 'copies'} from 'prune.variables'"))
