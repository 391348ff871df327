"""Every kind of every registry round-trips: an example -> its model -> dump -> YAML -> specgen's loader -> equal.

Keras' `get_config` habit: what a model holds can be written out and read back to the same thing, so a spec that
`specgen validate --resolved` prints (or a run folder records) loads to the spec that was trained. A kind added to a
registry without an example here fails `test_every_kind_has_an_example`, naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_op_parity import CASES

from specgen.kinds import augment, losses, metrics, ops, optimizers, schedules, sources
from specgen.spec.yaml_source import parse_value

pytestmark = pytest.mark.quick

EXAMPLES: dict[str, dict[str, dict[str, Any]]] = {
    "optimizers": {
        "adagrad": {"kind": "adagrad", "variables": "trainable", "learning_rate": 0.1, "weight_decay": 0.001},
        "adam": {"kind": "adam", "variables": "trainable", "learning_rate": 0.001, "beta_2": 0.99},
        "adamw": {"kind": "adamw", "variables": "trainable", "learning_rate": 0.001, "weight_decay": 0.01},
        "levenberg_marquardt": {"kind": "levenberg_marquardt", "variables": "trainable"},
        "lion": {"kind": "lion", "variables": "trainable", "learning_rate": 0.0001},
        "rmsprop": {"kind": "rmsprop", "variables": "trainable", "learning_rate": 0.01, "rho": 0.8},
        "sgd": {"kind": "sgd", "variables": "trainable", "learning_rate": 0.05, "momentum": 0.9, "nesterov": True},
    },
    "losses": {
        "focal": {"kind": "focal", "logits": "y", "labels": "label", "gamma": 2.0},
        "huber": {"kind": "huber", "predictions": "y", "labels": "t", "delta": 0.5},
        "l1": {"kind": "l1", "variables": "trainable", "weight": 0.001},
        "l2": {"kind": "l2", "variables": "trainable", "weight": 0.0001},
        "mean_absolute_error": {"kind": "mean_absolute_error", "predictions": "y", "labels": "t"},
        "mean_squared_error": {"kind": "mean_squared_error", "predictions": "y", "labels": "t", "weight": 0.5},
        "sigmoid_cross_entropy": {"kind": "sigmoid_cross_entropy", "logits": "y", "labels": "label"},
        "softmax_cross_entropy": {"kind": "softmax_cross_entropy", "logits": "y", "labels": "label", "name": "ce"},
        "sparse_softmax_cross_entropy": {"kind": "sparse_softmax_cross_entropy", "logits": "y", "labels": "label"},
    },
    "schedules": {
        "constant": {"schedule": "constant", "initial": 0.01, "warmup_steps": 5},
        "cosine_decay": {"schedule": "cosine_decay", "initial": 0.1, "decay_steps": 100, "alpha": 0.1},
        "exponential_decay": {"schedule": "exponential_decay", "initial": 0.1, "decay_steps": 10, "decay_rate": 0.9},
        "piecewise_constant": {"schedule": "piecewise_constant", "boundaries": [10, 20], "values": [0.1, 0.01, 0.001]},
    },
    "metrics": {
        "accuracy": {"kind": "accuracy"},
        "auc": {"kind": "auc"},
        "mean_loss": {"kind": "mean_loss"},
        "precision": {"kind": "precision"},
        "recall": {"kind": "recall"},
        "top_k_accuracy": {"kind": "top_k_accuracy", "k": 3},
    },
    "sources": {
        "csv": {"csv": "d.csv", "features": {"x": ["a", "b"]}, "labels": {"label": "c"}},
        "images": {"images": "folder", "image_size": [8, 8]},
        "npz": {"npz": "d.npz", "features": {"x": "x"}, "labels": {"label": "y"}},
        "tfrecord": {"tfrecord": ["a.tfrecord", "train-*.tfrecord"], "features": {"x": "x",
                     "image": {"key": "image/encoded", "decode": "image", "size": [8, 8]}}, "labels": {"label": "y"},
                     "cycle_length": 2, "cache": "memory", "skip_bad": True},
    },
    "augment": {
        "cutmix": {"cutmix": 1.0},
        "mixup": {"mixup": 0.2},
        "random_brightness": {"random_brightness": 0.1},
        "random_contrast": {"random_contrast": 0.2},
        "random_crop": {"random_crop": {"size": [6, 6], "pad": 1}},
        "random_flip": {"random_flip": "horizontal"},
        "random_rotation": {"random_rotation": 0.1},
        "random_translation": {"random_translation": 0.1},
        "random_zoom": {"random_zoom": 0.1},
    },
}
REGISTRIES = {"optimizers": optimizers.REGISTRY, "losses": losses.REGISTRY, "schedules": schedules.REGISTRY,
              "metrics": metrics.REGISTRY, "sources": sources.REGISTRY, "augment": augment.REGISTRY}
CASES_BY_KIND = [(registry, kind) for registry in REGISTRIES for kind in sorted(REGISTRIES[registry])]
OP_LAYERS = {name: layers[0] for name, (_, layers) in CASES.items() if layers and isinstance(layers[0], dict)}


def round_trip(model: type, example: dict[str, Any]) -> tuple[Any, Any]:
    """(the model of `example`, the model read back from its YAML dump through specgen's own loader)."""
    first = model.model_validate(example)
    # exclude_none: a None is "not set", and some kinds refuse a key that is set at all (levenberg_marquardt's
    # learning_rate): the dump a person or a run folder keeps leaves them out, as --resolved does.
    text = yaml.safe_dump(first.model_dump(mode="json", by_alias=True, warnings=False, exclude_none=True),
                          sort_keys=False)
    return first, model.model_validate(parse_value(text, "<dump>"))


@pytest.mark.parametrize(("registry", "kind"), CASES_BY_KIND)
def test_every_kind_has_an_example(registry: str, kind: str) -> None:
    assert kind in EXAMPLES[registry], f"{registry} kind '{kind}' has no example in tests/test_registry_roundtrip.py"


@pytest.mark.parametrize(("registry", "kind"), CASES_BY_KIND)
def test_a_kind_round_trips(registry: str, kind: str) -> None:
    if kind not in EXAMPLES[registry]:  # one failure, the one above naming where the example goes (not a KeyError)
        pytest.skip(f"{registry} kind '{kind}' has no example (test_every_kind_has_an_example names it)")
    first, again = round_trip(REGISTRIES[registry][kind].spec, EXAMPLES[registry][kind])
    assert again == first


@pytest.mark.parametrize("name", sorted(ops.REGISTRY))
def test_an_op_layer_round_trips(name: str) -> None:
    layer = next((layer for case, layer in OP_LAYERS.items() if layer.get("op") == name), None)
    if layer is None:
        layer = next((lay for _, layers in CASES.values() for lay in layers
                      if isinstance(lay, dict) and lay.get("op") == name), None)
    assert layer is not None, f"op '{name}' has no layer in tests/test_op_parity.py's CASES to round-trip"
    first, again = round_trip(ops.REGISTRY[name].spec, layer)
    assert again == first


SPECS = sorted((Path(__file__).resolve().parents[1] / "examples" / "specs").rglob("*.yaml"))


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_a_whole_spec_round_trips_and_its_resolved_print_loads_to_the_same_spec(path: Path) -> None:
    """The dump of a validated spec, and what `validate --resolved` prints (a run's spec.resolved.yaml), read back
    by specgen's loader, validate to an equal spec."""
    from specgen.errors import AbstractSpec
    from specgen.spec.load import load_spec, load_spec_text
    from specgen.spec.model import Spec
    from specgen.spec.provenance import load_resolved, resolved_yaml

    try:
        loaded = load_spec(path)
    except AbstractSpec:
        pytest.skip("an abstract base: it has no spec of its own")
    first, again = round_trip(Spec, loaded.data)
    assert again == first
    _, tree = load_resolved(path, [])
    printed = load_spec_text(resolved_yaml(tree), "<resolved>", path)
    assert printed.spec == loaded.spec
