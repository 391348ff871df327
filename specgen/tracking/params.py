"""The resolved spec's leaves as MLflow params, and TensorBoard's scalar names as MLflow metric keys.

A param's key is the leaf's `--set` key (`optimizers.all.learning_rate`, `train.batch_size`) with a named list
item's `[NAME]` written `.NAME` (`layers.hidden.units`): MLflow keys allow only letters, digits and `_ - . / :`
and spaces. Its value is the leaf as spec.resolved.yaml writes it (YAML flow: `true`, `[8, 8, 1]`, `null`), a
string as it is. MLflow's limits are kept: keys of at most 250 characters (longer ones cut, with a digest so two
never meet), values of at most 6000 (cut, saying so: the run's spec.resolved.yaml artifact has them whole).
`train.tracking` is left out: it says where the run is logged, not how it trains, and a URI can hold a password.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from specgen.spec.merge import Node

MAX_KEY, MAX_VALUE = 250, 6000  # mlflow/utils/validation.py: MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH
PARAMS_PER_BATCH, METRICS_PER_BATCH = 100, 1000  # MAX_PARAMS_TAGS_PER_BATCH, MAX_METRICS_PER_BATCH
LEFT_OUT = ("train.tracking",)
_BAD = re.compile(r"[^/\w.\- ]")  # what MLflow refuses in a key (colons too: Windows refuses them)


def mlflow_key(key: str) -> str:
    """`layers[hidden].units` -> `layers.hidden.units`; other refused characters become `_`; cut to 250."""
    text = _BAD.sub("_", re.sub(r"\[([^\]]*)\]", r".\1", key)).strip(".")
    text = re.sub(r"/{2,}", "/", text).strip("/")  # MLflow refuses keys that normalize to another path
    if len(text) > MAX_KEY:
        text = text[:MAX_KEY - 9] + "~" + hashlib.sha256(key.encode()).hexdigest()[:8]
    return text or "_"


def leaves(tree: Node, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of the resolved tree with its `explain` key (a list of scalars is one leaf, as the file writes it)."""
    if tree.mapping is not None:
        children: Any = tree.mapping.items()
    elif tree.items is not None and any(i.mapping is not None for i in tree.items):
        children = enumerate(tree.items)
    else:
        yield prefix, tree.data()
        return
    for key, child in children:
        part = f"[{child.name()}]" if isinstance(key, int) and child.name() is not None else f".{key}"
        yield from leaves(child, (prefix + part).lstrip("."))


def text(value: Any) -> str:
    """A leaf's value as spec.resolved.yaml writes it; a string as it is; cut to MLflow's 6000 characters."""
    shown = value if isinstance(value, str) else \
        yaml.safe_dump(value, default_flow_style=True, width=1 << 30).removesuffix("\n").removesuffix("\n...")
    if len(shown) > MAX_VALUE:
        note = f" ... (cut from {len(shown)} characters: spec.resolved.yaml has it whole)"
        shown = shown[:MAX_VALUE - len(note)] + note
    return shown


def params(tree: Node) -> dict[str, str]:
    """MLflow key -> value for every leaf of the resolved spec but those under LEFT_OUT."""
    found: dict[str, str] = {}
    for key, value in leaves(tree):
        if not any(key == gone or key.startswith(gone + ".") for gone in LEFT_OUT):
            found[mlflow_key(key)] = text(value)
    return found


def resolved_params(spec: Path, overrides: list[str]) -> dict[str, str]:
    """The params of `spec` with `overrides` applied, as the run folder's spec.resolved.yaml resolves it."""
    from specgen.spec.provenance import load_resolved

    _, tree = load_resolved(spec, overrides)
    return params(tree)


def metric_key(stage: str, name: str) -> str:
    """TensorBoard's `name` in the run's `stage` writer (tensorboard/train, tensorboard/eval) -> `train/loss`,
    `eval/accuracy`: the names `specgen sweep` and `specgen curves` use."""
    return mlflow_key(f"{stage}/{name}")


def batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
