"""Which features each golden spec uses, and which pairs of features the golden set covers.

The golden set (tests/golden/README.md) pins what `specgen build` renders before issue 18 moves the
training code into registries. It must use every feature and every pair of features that specgen
allows today (`compat.ALLOWED`), and every kind of every axis (`AXES`) at least once.

Features are read from the spec's YAML with plain `yaml.safe_load` and no specgen import, so this
module means the same thing while specgen's own modules move. The coverage report:

    PYTHONPATH=tests python -m golden.pairs
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from golden.compat import FEATURE_NAMES, OPTIMIZER_KINDS, Pair, pair

SPECS = Path(__file__).resolve().parent / "specs"
Spec = dict[str, Any]
Test = Callable[[Spec], bool]


def _train(spec: Spec) -> Spec:
    return spec.get("train") or {}


def _optimizers(spec: Spec) -> list[Spec]:
    return list((spec.get("optimizers") or {}).values())


def _distribute(spec: Spec) -> Spec:
    return _train(spec).get("distribute") or {}


def _onnx(spec: Spec) -> Spec:
    return (spec.get("export") or {}).get("onnx") or {}


def _terms(spec: Spec) -> list[Spec]:
    loss = spec.get("loss")
    return loss if isinstance(loss, list) else [] if loss is None else [loss]


def _restores(spec: Spec) -> list[Spec]:
    return (spec.get("checkpoint") or {}).get("restore") or []


def _sources(spec: Spec) -> list[Spec]:
    data = spec.get("data") or {}
    return [data[stage] for stage in ("train", "eval") if data.get(stage)]


def _layers(spec: Spec) -> list[Spec]:
    """Every layer mapping (one with `name` and `op`): top-level layers and block bodies."""
    def walk(node: Any) -> Iterator[Spec]:
        if isinstance(node, dict):
            if "op" in node and "name" in node:
                yield node
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
    return [*walk(spec.get("layers")), *walk(spec.get("blocks"))]


def _decay_rate(optimizer: Spec) -> float:
    # adamw decays by 0.004 when weight_decay is not written (Keras' AdamW default; docs/spec.md).
    decay = optimizer.get("weight_decay", 0.004 if optimizer["kind"] == "adamw" else 0.0)
    return float(decay["rate"] if isinstance(decay, dict) else decay)


def _multi_term(spec: Spec) -> bool:
    """The loss takes train.py's terms path: anything but one data term with weight 1 (docs/spec.md#loss-terms)."""
    terms, outputs = _terms(spec), spec.get("outputs") or {}
    return len(terms) > 1 or any(t["kind"] in ("l1", "l2") or t.get("weight", 1.0) != 1.0
                                 or t.get("labels") in outputs for t in terms)


def _kind(kind: str) -> Test:
    return lambda s: any(o["kind"] == kind for o in _optimizers(s))


def _probe(spec: Spec) -> bool:
    """`specgen train --probe` runs on it: loss, optimizers, train and data.train, and no levenberg_marquardt."""
    trains = bool(spec.get("loss") and spec.get("optimizers") and spec.get("train"))
    return trains and bool((spec.get("data") or {}).get("train")) and not _kind("levenberg_marquardt")(spec)


FEATURES: dict[str, Test] = {
    "ema": lambda s: "ema" in _train(s),
    "accumulate": lambda s: _train(s).get("accumulate", 1) > 1,
    "clip": lambda s: "clip" in _train(s),
    "optimizer_clip": lambda s: any("clip" in o for o in _optimizers(s)),
    "weight_decay": lambda s: any(_decay_rate(o) > 0 for o in _optimizers(s) if o["kind"] != "levenberg_marquardt"),
    "loss_terms": _multi_term,
    "targets": lambda s: bool(s.get("targets")),
    "prune": lambda s: "prune" in s,
    "levenberg_marquardt": _kind("levenberg_marquardt"),
    "distribute": lambda s: _distribute(s).get("strategy", "default") != "default",
    "probe": _probe,
    "multi_optimizer": lambda s: len(_optimizers(s)) > 1,
    "schedule": lambda s: any(isinstance(o.get("learning_rate"), dict) for o in _optimizers(s)),
    "metrics": lambda s: bool(_train(s).get("metrics")),
    "full_batch": lambda s: _train(s).get("batch_size") == "full",
    "frozen": lambda s: bool(s.get("frozen")),
    "restore": lambda s: bool(_restores(s)),
    "batch_norm": lambda s: any(x["op"] == "batch_norm" for x in _layers(s)),
    "dropout": lambda s: any(x["op"] == "dropout" and x.get("rate", 0) > 0 for x in _layers(s)),
    "sync_batch_norm": lambda s: bool(_distribute(s).get("sync_batch_norm")),
    "export_ema": lambda s: _onnx(s).get("weights") == "ema",
    # one per optimizer kind of compat.FEATURE_NAMES: a new kind needs nothing here
    **{f"opt_{k}": _kind(k) for k in OPTIMIZER_KINDS},
}


def detector_mismatch() -> str | None:
    """What differs between compat.FEATURE_NAMES and the detectors above (tests/test_golden.py reports it)."""
    missing = [name for name in FEATURE_NAMES if name not in FEATURES]
    extra = [name for name in FEATURES if name not in FEATURE_NAMES]
    if missing:
        return (f"{', '.join(missing)}: in FEATURE_NAMES of tests/golden/compat.py but no detector in FEATURES of "
                "tests/golden/pairs.py (how a spec's YAML shows the feature)")
    if extra:
        return f"{', '.join(extra)}: a detector in FEATURES of tests/golden/pairs.py but not in FEATURE_NAMES"
    if tuple(FEATURES) != FEATURE_NAMES:
        return "FEATURES of tests/golden/pairs.py lists the features in another order than FEATURE_NAMES"
    return None


def _rate_schedules(spec: Spec) -> list[Any]:
    return [o["learning_rate"] for o in _optimizers(spec) if "learning_rate" in o]


def _maps(spec: Spec) -> list[Spec]:
    return [m for r in _restores(spec) for m in r.get("map") or []]


def _metric_names(spec: Spec) -> list[str]:
    """`train.metrics` items are names or mappings with `kind` (top_k_accuracy's `k`)."""
    return [m["kind"] if isinstance(m, dict) else m for m in _train(spec).get("metrics") or []]


def _in(values: Callable[[Spec], list[Any]], value: Any) -> Test:
    return lambda s: value in values(s)


def _prune_schedule(kind: str) -> Test:
    return lambda s: ((s.get("prune") or {}).get("schedule") or {}).get("kind") == kind


# Axis -> kind -> how a spec shows it. Every kind of every axis is used by at least one golden spec;
# kinds within an axis are values of one setting, so their pairs are not required (see README.md).
AXES: dict[str, dict[str, Test]] = {
    "optimizer": {k: _kind(k) for k in (*OPTIMIZER_KINDS, "levenberg_marquardt")}
    | {"sgd_nesterov": lambda s: any(o.get("nesterov") for o in _optimizers(s)),
       "rmsprop_centered": lambda s: any(o.get("centered") for o in _optimizers(s))},
    "loss": {k: _in(lambda s: [t["kind"] for t in _terms(s)], k) for k in (
        "sparse_softmax_cross_entropy", "softmax_cross_entropy", "sigmoid_cross_entropy", "mean_squared_error",
        "mean_absolute_error", "huber", "l2", "l1", "focal")}
    | {"labels_from_output": lambda s: any(t.get("labels") in (s.get("outputs") or {}) for t in _terms(s)),
       "term_weight": lambda s: any("weight" in t and t["kind"] not in ("l1", "l2") for t in _terms(s)),
       "term_name": lambda s: any("name" in t for t in _terms(s))},
    "learning_rate": {k: _in(lambda s: [r.get("schedule") for r in _rate_schedules(s) if isinstance(r, dict)], k)
                      for k in ("constant", "exponential_decay", "cosine_decay", "piecewise_constant")}
    | {"number": lambda s: any(not isinstance(r, dict) for r in _rate_schedules(s)),
       "zero": lambda s: any(r == 0 for r in _rate_schedules(s)),
       "warmup_steps": lambda s: any(isinstance(r, dict) and r.get("warmup_steps") for r in _rate_schedules(s)),
       "staircase": lambda s: any(isinstance(r, dict) and r.get("staircase") for r in _rate_schedules(s))},
    "metric": {k: _in(_metric_names, k) for k in ("accuracy", "mean_loss", "auc", "precision", "recall", "top_k_accuracy")}
    | {"metric_keys": lambda s: any(isinstance(m, dict) and len(m) > 1 for m in _train(s).get("metrics") or [])},
    "data_source": {k: lambda s, k=k: any(k in src for src in _sources(s)) for k in ("npz", "csv", "tfrecord")}
    | {"csv_columns": lambda s: any(isinstance(c, list) for src in _sources(s) if "csv" in src
                                    for c in src["features"].values())},
    "clip": {"train_global_norm": lambda s: "global_norm" in (_train(s).get("clip") or {}),
             "train_value": lambda s: "value" in (_train(s).get("clip") or {}),
             "optimizer_global_norm": lambda s: any("global_norm" in o.get("clip", {}) for o in _optimizers(s)),
             "optimizer_value": lambda s: any("value" in o.get("clip", {}) for o in _optimizers(s))},
    "weight_decay": {"number": lambda s: any(isinstance(o.get("weight_decay"), float) and o["weight_decay"] > 0
                                             for o in _optimizers(s)),
                     "exclude": lambda s: any(isinstance(o.get("weight_decay"), dict) for o in _optimizers(s)),
                     "adamw_default": lambda s: any(o["kind"] == "adamw" and "weight_decay" not in o
                                                    for o in _optimizers(s))},
    "targets": {"soft": lambda s: any("tau" in t for t in (s.get("targets") or {}).values()),
                "hard": lambda s: any("every_steps" in t for t in (s.get("targets") or {}).values())},
    "prune": {k: _prune_schedule(k) for k in ("constant_sparsity", "polynomial_decay")},
    "strategy": {k: lambda s, k=k: _distribute(s).get("strategy", "default") == k
                 for k in ("default", "mirrored", "multi_worker")}
    | {"cpu_devices": lambda s: _distribute(s).get("cpu_devices", 1) > 1},
    "restore": {"map_from": lambda s: any("from" in m for m in _maps(s)),
                "map_pattern": lambda s: any("pattern" in m for m in _maps(s)),
                "map_prefix": lambda s: any("strip_prefix" in m or "add_prefix" in m for m in _maps(s)),
                "exclude": lambda s: any(r.get("exclude") for r in _restores(s)),
                "ema_to_model": lambda s: any(r.get("ema_to_model") for r in _restores(s)),
                "several_sources": lambda s: len(_restores(s)) > 1},
    "export": {f"opset_{n}": lambda s, n=n: _onnx(s).get("opset", 21) == n for n in (18, 19, 20, 21)}
    | {"weights_raw": lambda s: _onnx(s).get("weights", "raw") == "raw",
       "weights_ema": lambda s: _onnx(s).get("weights") == "ema",
       "fixed_batch": lambda s: _onnx(s).get("dynamic_batch") is False,
       "outputs": lambda s: "outputs" in _onnx(s)},
    "frozen": {"collection": lambda s: any(e in (s.get("collections") or {}) for e in s.get("frozen") or []),
               "pattern": lambda s: any(e not in (s.get("collections") or {}) for e in s.get("frozen") or [])},
    "train": {"no_train_section": lambda s: "train" not in s, "blocks": lambda s: bool(s.get("blocks")),
              "no_data_section": lambda s: "train" in s and "data" not in s},
}


def load(path: Path) -> Spec:
    with path.open(encoding="utf-8") as file:
        spec: Spec = yaml.safe_load(file)
    return spec


def features(spec: Spec) -> set[str]:
    return {name for name, test in FEATURES.items() if test(spec)}


def kinds(spec: Spec) -> set[tuple[str, str]]:
    return {(axis, kind) for axis, tests in AXES.items() for kind, test in tests.items() if test(spec)}


def golden_specs() -> dict[str, Spec]:
    """File stem -> the spec's YAML, for every golden spec."""
    return {path.stem: load(path) for path in sorted(SPECS.glob("*.yaml"))}


def coverage(specs: dict[str, Spec]) -> dict[Pair, list[str]]:
    """Every pair of features some spec uses together -> the specs that do."""
    found: dict[Pair, list[str]] = {}
    for name, spec in specs.items():
        for a, b in itertools.combinations(sorted(features(spec)), 2):
            found.setdefault(pair(a, b), []).append(name)
    return found


def markdown(specs: dict[str, Spec]) -> str:
    """The table of tests/golden/README.md's "The specs": each spec's features, in table order."""
    rows = ["| spec | features |", "|---|---|"]
    rows += [f"| `{name}` | {', '.join(f for f in FEATURES if f in features(spec)) or '(none)'} |"
             for name, spec in specs.items()]
    return "\n".join(rows) + "\n"


def main() -> None:
    from golden.compat import ALLOWED, REFUSED, RUNTIME_REFUSED

    specs = golden_specs()
    for name, spec in specs.items():
        print(f"{name}: {', '.join(f for f in FEATURES if f in features(spec))}")
    covered = coverage(specs)
    allowed = {pair(a, b) for a, partners in ALLOWED.items() for b in partners}
    print(f"\n{len(specs)} specs; {len(allowed & covered.keys())} of {len(allowed)} allowed pairs covered")
    for a, b in sorted(allowed - covered.keys()):
        print(f"  not covered: {a} + {b}")
    for p in sorted((REFUSED.keys() | RUNTIME_REFUSED.keys()) & covered.keys()):
        print(f"  REFUSED pair used by {', '.join(covered[p])}: {p[0]} + {p[1]}")
    used = set().union(*(kinds(s) for s in specs.values()))
    for axis, tests in AXES.items():
        for kind in tests:
            if (axis, kind) not in used:
                print(f"  kind not used: {axis}: {kind}")


if __name__ == "__main__":
    main()
