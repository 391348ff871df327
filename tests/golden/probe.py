"""One small spec per pair of features, validated by `specgen validate`: what specgen allows today.

`spec_for(features)` writes the smallest spec that uses exactly those features on one MLP over the
8x8 digits (each feature adds its own section or key, and nothing else), so a pair that `validate`
refuses is refused because of the two features, not because of the scaffolding. `validate_all`
runs the real command line once over a folder of them (a subprocess: this stays true while
specgen's modules move) and returns each file's error messages.

    PYTHONPATH=tests python -m golden.probe        # prints the table compat.py holds
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from golden.compat import FEATURE_NAMES, OPTIMIZER_KINDS, ORDER, Pair, pair

ROOT = Path(__file__).resolve().parents[2]
REQUIRES = {"export_ema": ("ema",)}  # export weights 'ema' needs train.ema: the pair is with ema as well
LM = "levenberg_marquardt"


def _optimizers(features: set[str]) -> dict[str, Any]:
    """The first optimizer takes every weight left; a second one (multi_optimizer, or two kinds) takes out/*."""
    kinds = ([LM] if LM in features else []) + [k for k in OPTIMIZER_KINDS if f"opt_{k}" in features]
    while len(kinds) < (2 if "multi_optimizer" in features else 1):
        kinds.append("sgd")
    made: dict[str, Any] = {}
    for i, kind in enumerate(kinds):
        entry: dict[str, Any] = {"kind": kind} if kind == LM else {"kind": kind, "learning_rate": 0.01}
        if i:
            entry["variables"] = "out/*"
        made[("first", "second")[i]] = entry
    first = made[next(iter(made))]
    if "schedule" in features:
        first["learning_rate"] = {"schedule": "cosine_decay", "initial": 0.01, "decay_steps": 100}
    if "weight_decay" in features:
        first["weight_decay"] = 0.001
    if "optimizer_clip" in features:
        first["clip"] = {"global_norm": 1.0}
    return made


def _layers(features: set[str]) -> list[dict[str, Any]]:
    layers: list[dict[str, Any]] = [
        {"name": "flat", "op": "flatten"},
        {"name": "stem", "op": "dense", "units": 32, "activation": "relu", "kernel_init": "he_normal"},
        {"name": "hidden", "op": "dense", "units": 16, "activation": "relu", "kernel_init": "he_normal"},
    ]
    if "batch_norm" in features:
        layers.append({"name": "bn", "op": "batch_norm"})
    if "dropout" in features:
        layers.append({"name": "drop", "op": "dropout", "rate": 0.1})
    layers.append({"name": "out", "op": "dense", "units": 10})
    if "targets" in features:  # a copy of hidden that follows it, read by no output
        layers.append({"name": "target/hidden", "op": "dense", "input": "stem", "units": 16, "activation": "relu"})
    return layers


def _train(features: set[str]) -> dict[str, Any]:
    train: dict[str, Any] = {"batch_size": "full" if {"full_batch", LM} & features else 32}
    train |= {"accumulate": 2} if "accumulate" in features else {}
    train |= {"clip": {"global_norm": 1.0}} if "clip" in features else {}
    train |= {"ema": {"decay": 0.99}} if "ema" in features else {}
    train |= {"metrics": ["mean_loss"]} if "metrics" in features else {}
    distribute = {"strategy": "mirrored", "cpu_devices": 2} if "distribute" in features else {}
    distribute |= {"sync_batch_norm": True} if "sync_batch_norm" in features else {}
    return train | ({"distribute": distribute} if distribute else {})


def spec_for(features: set[str], name: str) -> dict[str, Any]:
    """The smallest spec with these features (and those they require)."""
    features = features | {r for f in features for r in REQUIRES.get(f, ())}
    regression = LM in features  # levenberg_marquardt fits a squared error
    loss: Any = ({"kind": "mean_squared_error", "predictions": "logits", "labels": "label"} if regression
                 else {"kind": "sparse_softmax_cross_entropy", "logits": "logits", "labels": "label"})
    if "loss_terms" in features:
        loss = [loss, {"kind": "l2", "variables": "hidden/*", "weight": 0.0001}]
    spec: dict[str, Any] = {"specgen": 1, "name": name, "inputs": {"image": {"shape": [8, 8, 1]}},
                            "outputs": {"logits": "out"}, "layers": _layers(features), "loss": loss,
                            "optimizers": _optimizers(features), "train": _train(features)}
    if "frozen" in features:
        spec["frozen"] = ["stem/*"]
    if "targets" in features:
        spec["targets"] = {"follow": {"online": "hidden/*", "target": "target/hidden/*", "tau": 0.1}}
    if "prune" in features:
        spec["prune"] = {"variables": "hidden/kernel", "schedule": {"kind": "constant_sparsity", "sparsity": 0.5}}
    if "probe" in features:
        spec["data"] = {"train": {"npz": "digits.npz", "features": {"image": "x_train"}, "labels": {"label": "y_train"}}}
    if "restore" in features:
        spec["checkpoint"] = {"dir": "runs", "restore": [{"from": "pretrained", "exclude": ["out/*"]}]}
    if "export_ema" in features:
        spec["export"] = {"onnx": {"weights": "ema"}}
    return spec


def pair_file(p: Pair) -> str:
    return f"{p[0]}__{p[1]}.yaml"


def write_pairs(folder: Path) -> dict[str, Pair]:
    """One spec per pair of features in `folder`; file name -> pair."""
    files = {}
    for a, b in itertools.combinations(FEATURE_NAMES, 2):
        p = pair(a, b)
        files[pair_file(p)] = p
        spec = spec_for({a, b}, "pair")
        (folder / pair_file(p)).write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return files


ERROR = re.compile(r"^(?P<file>[^:]+\.yaml)(?::\d+:\d+)?: error: (?P<message>.*)$")


def validate_all(folder: Path) -> dict[Pair, tuple[str, ...]]:
    """Pair -> the error messages `specgen validate` prints for its spec (empty: allowed)."""
    files = write_pairs(folder)
    # From the repository root, as the build check runs: `-m` puts it first on sys.path, so this checkout's
    # specgen answers (an installed one where the root holds none).
    done = subprocess.run([sys.executable, "-m", "specgen", "validate", "--no-lint", "init_scale", str(folder.resolve())],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    found: dict[Pair, list[str]] = {p: [] for p in files.values()}
    for line in done.stderr.splitlines():
        if match := ERROR.match(line):
            found[files[Path(match["file"]).name]].append(match["message"])
    ok = {Path(m).name for m in re.findall(r"^ok: (.+?\.yaml) \(", done.stdout, re.M)}
    unexplained = [f for f, p in files.items() if (f in ok) == bool(found[p])]
    assert not unexplained, f"neither ok nor errors (or both) for {unexplained}: {done.stderr[-2000:]}"
    return {p: tuple(messages) for p, messages in found.items()}


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        result = validate_all(Path(folder))
    for p, messages in sorted(result.items(), key=lambda item: (ORDER[item[0][0]], ORDER[item[0][1]])):
        if messages:
            print(f"    {p!r}: {messages!r},")
    for a in FEATURE_NAMES:  # in table order: the partners that come after `a`
        partners = tuple(b for b in FEATURE_NAMES if pair(a, b) == (a, b) and a != b and not result[(a, b)])
        print(f"    {a!r}: {partners!r},")


if __name__ == "__main__":
    main()
