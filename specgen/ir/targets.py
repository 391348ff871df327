"""The `targets` section resolved: which model variable follows which, and how.

A target pairs two prefix patterns (`online: "qnet/*"`, `target: "target_qnet/*"`); each variable
under the target prefix is the copy of the online variable with the same rest of the path
(`target_qnet/fc1/kernel` follows `qnet/fc1/kernel`). Pairing is by path only, so any layer kind
(batch-norm statistics, shared layers, recurrent layers to come) needs nothing here.
Target variables form the built-in `target` collection: no optimizer trains them (they need not be
listed in `frozen`), and a batch norm whose weights are all targets runs in inference mode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from specgen import text
from specgen.diagnostics import Diagnostic, did_you_mean
from specgen.ir.model import Shape
from specgen.spec.load import LoadedSpec

WILDCARDS = "*?["


@dataclass(frozen=True)
class TargetIR:
    """One `targets:` entry: `pairs` are (online path, target path), in model-variable order."""

    name: str
    tau: float | None  # soft: t <- (1 - tau) t + tau o after every update
    every_steps: int | None  # hard: t <- o when global_step % every_steps == 0 after the update
    pairs: tuple[tuple[str, str], ...]

    @property
    def kind(self) -> str:
        return "soft" if self.tau is not None else "hard"

    @property
    def online_paths(self) -> tuple[str, ...]:
        return tuple(o for o, _ in self.pairs)

    @property
    def target_paths(self) -> tuple[str, ...]:
        return tuple(t for _, t in self.pairs)


def _prefix(pattern: str) -> str | None:
    """'qnet/*' -> 'qnet/'; None when the pattern is not a prefix followed by one trailing '*'."""
    head = pattern[:-1]
    return head if pattern.endswith("*") and not any(c in head for c in WILDCARDS) else None


def _under(prefix: str, paths: list[str]) -> dict[str, str]:
    """Rest of the path -> path, for every path under `prefix`."""
    return {p[len(prefix):]: p for p in paths if p.startswith(prefix) and len(p) > len(prefix)}


def _prefixes(paths: list[str]) -> list[str]:
    """Every prefix pattern that matches something ('qnet/*', 'qnet/fc/*'), for a did-you-mean."""
    parts = (p.split("/") for p in paths)
    return sorted({"/".join(ps[:i]) + "/*" for ps in parts for i in range(1, len(ps))})


def resolve_targets(loaded: LoadedSpec, paths: list[str], shapes: dict[str, tuple[int, ...] | Shape]
                    ) -> tuple[list[TargetIR], list[Diagnostic]]:
    """Pair every target's variables; positioned problems for patterns, pairs and shapes that do not fit."""
    targets: list[TargetIR] = []
    problems: list[Diagnostic] = []
    copied: dict[str, str] = {}  # target path -> the target entry that writes it
    for name, entry in loaded.spec.targets.items():
        found = _pairs(loaded, name, entry, paths, shapes, problems)
        if found is None:
            continue
        twice = [t for _, t in found if t in copied]
        if twice:
            problems.append(loaded.diagnostic(("targets", name, "target"), (
                f"target '{name}' writes '{twice[0]}', which target '{copied[twice[0]]}' already writes; "
                "each variable follows one online variable")))
            continue
        copied.update({t: name for _, t in found})
        tau = getattr(entry, "tau", None)
        targets.append(TargetIR(name, tau, getattr(entry, "every_steps", None), tuple(found)))
    return targets, problems


def _pairs(loaded: LoadedSpec, name: str, entry: Any, paths: list[str], shapes: dict[str, Any],
           problems: list[Diagnostic]) -> list[tuple[str, str]] | None:
    sides: dict[str, dict[str, str]] = {}
    for key in ("online", "target"):
        pattern = getattr(entry, key)
        prefix = _prefix(pattern)
        loc = ("targets", name, key)
        if prefix is None:
            head = re.split(r"[*?\[]", pattern)[0].rstrip("/") or "qnet"
            problems.append(loaded.diagnostic(loc, (
                f"target '{name}': {key} '{pattern}' is not a prefix pattern; expected a path prefix followed by one "
                f"'*' and no other wildcard, e.g. '{head}/*'")))
            return None
        sides[key] = _under(prefix, paths)
        if not sides[key]:
            problems.append(loaded.diagnostic(loc, (
                f"target '{name}': {key} '{pattern}' matches no variable{did_you_mean(pattern, _prefixes(paths))}")))
            return None
    online, target = sides["online"], sides["target"]
    loc = ("targets", name, "target")
    both = sorted(set(online.values()) & set(target.values()))
    if both:
        problems.append(loaded.diagnostic(loc, (
            f"target '{name}': '{both[0]}' is both an online and a target variable; the two prefixes must not overlap")))
        return None
    lonely = [(online[r], entry.target[:-1] + r) for r in online if r not in target] + \
             [(target[r], entry.online[:-1] + r) for r in target if r not in online]
    if lonely:
        has, lacks = lonely[0]
        problems.append(loaded.diagnostic(loc, (
            f"target '{name}': '{has}' has no counterpart '{lacks}' ({len(lonely)} unpaired variable"
            f"{'s' if len(lonely) > 1 else ''}); online '{entry.online}' and target '{entry.target}' must hold the same "
            "variables under their prefixes (e.g. two instances of one block)")))
        return None
    pairs = [(online[r], target[r]) for r in online]
    for o, t in pairs:
        if tuple(shapes[o]) != tuple(shapes[t]):
            problems.append(loaded.diagnostic(loc, (
                f"target '{name}': '{t}' has shape {text.shape(shapes[t])} but the online '{o}' it copies has shape "
                f"{text.shape(shapes[o])}; expected equal shapes")))
            return None
    order = {p: i for i, p in enumerate(paths)}
    return sorted(pairs, key=lambda pair: order[pair[1]])
