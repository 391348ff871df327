"""The `prune` section resolved: which weights carry a mask, and the schedule that recomputes the masks.

Masks are training state in the built-in `pruning` collection (one `pruning/<weight path>` per
pruned weight, ir/training/keys.py). The schedule formulas are TF Model Optimization's
(`tfmot.sparsity.keras.ConstantSparsity` and `PolynomialDecay`); docs/pruning.md states them.
The generated code evaluates them in TensorFlow (specgen/runtime/lib/pruning.py); this module
answers what `specgen report` prints without TensorFlow.

Steps count as TFMOT 0.6-0.8's `pruning_step`: the b-th update (1-based) is step b, so step 0 never
updates a mask (update_masks). A schedule on which no update would prune, and a polynomial_decay whose
end_step is off its begin_step + k * frequency grid (so final_sparsity is never the target), are refused
here (docs/pruning.md "Schedules" says why refused and not warned).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specgen.diagnostics import Diagnostic
from specgen.ir.collections import Membership, Resolver, variable_list
from specgen.ir.model import PrunedWeight, PruneScheduleIR, PruningIR
from specgen.ir.training import keys
from specgen.kinds.ops import op_def
from specgen.spec.load import LoadedSpec


def pruned_count(size: int, sparsity: float) -> int:
    """How many of `size` entries a mask at `sparsity` zeroes: TFMOT keeps max(round(size * (1 - sparsity)), 1),
    rounding half to even (tf.math.round; Python's round does the same)."""
    return size - max(round(size * (1.0 - sparsity)), 1)


def first_update(s: PruneScheduleIR) -> int:
    """The first step (= 1-based update) at which masks are recomputed, ignoring end_step: step 0 is never one."""
    return s.begin_step if s.begin_step >= 1 else s.begin_step + s.frequency


def update_count(s: PruneScheduleIR) -> int | None:
    """How many updates recompute the masks (None: no end, every `frequency` until training stops)."""
    if s.end_step is None:
        return None
    first = first_update(s)
    return 0 if first > s.end_step else (s.end_step - first) // s.frequency + 1


def steps_text(s: PruneScheduleIR) -> str:
    """The mask updates in words: 'at step 5 (once)', 'at steps 5 and 8 (twice)', 'at steps 3, 6, 9 and 12 (4 times)',
    'at steps 3, 6, 9, then every 3 until 99 (33 times)'; only steps that really update masks are named."""
    first, count, every = first_update(s), update_count(s), s.frequency
    if count is None:
        return f"at step {first} and every {every} updates after it, until training stops"
    if count == 0:
        return "at no step"
    steps = [first + i * every for i in range(min(count, 4))]
    times = {1: "once", 2: "twice"}.get(count, f"{count} times")
    if count == 1:
        return f"at step {first} (once)"
    if count <= 4:
        return f"at steps {', '.join(map(str, steps[:-1]))} and {steps[-1]} ({times})"
    return f"at steps {', '.join(map(str, steps[:3]))}, then every {every} until {first + (count - 1) * every} ({times})"


def schedule_problems(loaded: LoadedSpec, s: PruneScheduleIR) -> list[Diagnostic]:
    """One positioned line for a schedule that would silently fall short of its target: no update at all, or a
    polynomial_decay whose last update comes before end_step (TFMOT accepts both and falls short in silence)."""
    count = update_count(s)
    if count is None or (count and (s.kind == "constant_sparsity" or s.end_step == s.last_step)):
        return []
    assert s.end_step is not None and s.last_step is not None
    first, span, at = first_update(s), s.end_step - s.begin_step, ("prune", "schedule", "end_step")
    tfmot = "(TF Model Optimization falls short the same way, silently)"
    if not count:  # begin_step 0 and end_step < frequency: step 0 is the only one on the grid
        other = f", or frequency to {s.end_step}" if s.end_step else ""  # then end_step is the one pruning step
        return [loaded.diagnostic(at, (
            f"end_step {s.end_step}: no update would recompute the masks, so no weight would be pruned: update b is "
            f"schedule step b (never 0, as in TF Model Optimization 0.8), and the first pruning step, {first}, comes "
            f"after end_step {tfmot}; set end_step to {first}{other}"))]
    k = span // s.frequency
    grid = " or ".join(str(s.begin_step + j * s.frequency) for j in (k, k + 1) if j >= 1)
    every = max(d for d in range(1, s.frequency + 1) if span % d == 0)
    last = _apart(s.sparsity_at(s.last_step), s.final_sparsity)
    return [loaded.diagnostic(at, (
        f"end_step {s.end_step} is not begin_step + k * frequency ({s.begin_step} + k * {s.frequency}): masks would "
        f"be recomputed {steps_text(s)}, and the last target would be sparsity {last}, "
        f"not final_sparsity {s.final_sparsity} {tfmot}; set end_step to {grid}, or frequency to {every}"))]


def _apart(value: float, target: float) -> str:
    """`value` with 6 significant digits, or as many more as it takes not to print as `target` (0.4999999995 is
    not "0.5" beside final_sparsity 0.5)."""
    return next((text for digits in range(6, 18) if float(text := f"{value:.{digits}g}") != target), repr(value))


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
    ops = {layer.name: layer.op for layer in loaded.layers}
    if not paths and not problems:
        problems.append(loaded.diagnostic(("prune", "variables"), (
            "prune selects no trained weight (batch-norm statistics and constants are never pruned); "
            "name kernels, e.g. ['conv1/kernel', 'head/*/kernel']")))
    if folded := [p for p in paths if op_def(ops[owners[p]]).folds_away]:
        problems.append(_folded_selected(loaded, folded))
    schedule = _schedule(prune.schedule)
    problems += schedule_problems(loaded, schedule)
    if problems:
        return None, problems
    pruned = tuple(PrunedWeight(p, keys.mask(p), shapes[p], owners[p]) for p in paths)
    return PruningIR(pruned, schedule), []


def _folded_selected(loaded: LoadedSpec, paths: list[str]) -> Diagnostic:
    """Batch-norm gamma and beta are refused, not masked. They hold one value per channel, so a zero gamma makes a
    whole channel constant: channel pruning, for which per-entry masks are the wrong tool, as the channel stays in the
    graph and costs what it did. That holds wherever the batch norm ends up: the export (runtime/onnx_export.py) folds
    one right after a conv or dense layer into that layer's kernel and bias (a zero gamma: a zeroed output channel of
    the kernel, the gamma itself gone) and keeps any other (after an input, an activation, a shared layer) as an
    ONNX BatchNormalization node in inference form (the zero gamma stays there, the channel outputs beta). So the
    message names the effect, not the fold. TF Model Optimization prunes no batch-norm weight either."""
    return loaded.diagnostic(("prune", "variables"), (
        f"prune selects batch-norm {variable_list(paths)}; gamma and beta hold one value per channel, so a zero gamma "
        "makes a whole channel constant, which stays in the graph and costs what it did (pruning zeroes single "
        "weights, and TF Model Optimization prunes no batch-norm weight): select kernels, e.g. ['conv1/kernel', "
        "'head/*/kernel']"))


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
