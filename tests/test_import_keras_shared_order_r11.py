"""`specgen import keras` writes the layers in the order Keras' Functional runs them, so that a shared
`batch_norm` updates its moving statistics in Keras' order (rt11 numerics finding: a shared layer after a
shared batch norm makes Keras run the batch norm's second call first; the spec ran the first call first).

Keras' order is read from the loaded model itself (`_nodes_by_depth`, the order `_run_through_graph` runs);
the numbers come from Keras `train_on_batch` against specgen's generated train step on the imported spec,
then `model.predict` against onnxruntime on specgen's ONNX graph with the trained variables.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")

from test_import_keras import randomize, run_import  # noqa: E402

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime import parity  # noqa: E402
from specgen.runtime.commands.restore import apply_plan, plan_restore  # noqa: E402
from specgen.runtime.lib.generated import load_generated  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

L = keras.layers
MOMENTUM = 0.5  # a large step: the wrong order moves a statistic by m(1 - m)(mean_a - mean_b), about 1.25 here
RATE = 0.1
STEPS = 3
# Of max(1, |Keras' value|), after 3 SGD steps. Measured 0 (bitwise: the same float32 TensorFlow kernels in the
# same order, sums of at most 9 terms, and onnxruntime's too); 1e-5 leaves room for another kernel's summation
# order (float32 eps 1.2e-7, through a few layers and 3 steps), far below what a statistic updated in the wrong
# order is off by (about 1.2 on values near 1.3 here).
TOLERANCE = 1e-5


def two_inputs() -> tuple[Any, Any]:
    return keras.Input((3,), name="a"), keras.Input((3,), name="b")


def finding() -> Any:
    """The finding's model: a shared Dense after the shared batch norm (Keras runs bn on b first)."""
    a, b = two_inputs()
    bn, fc = L.BatchNormalization(momentum=MOMENTUM, name="bn"), L.Dense(3, name="fc")
    return keras.Model([a, b], L.Dense(2, name="head")(L.Subtract(name="diff")([fc(bn(a)), fc(bn(b))])))


def variant(pre: bool, post: bool) -> Callable[[], Any]:
    """order.py's variants: a shared layer before the batch norm and/or after it; Keras' order flips with `post`."""
    def make() -> Any:
        a, b = two_inputs()
        ha, hb = a, b
        if pre:
            lin = L.Dense(3, name="lin")
            ha, hb = lin(ha), lin(hb)
        bn = L.BatchNormalization(momentum=MOMENTUM, name="bn")
        ha, hb = bn(ha), bn(hb)
        if post:
            lin2 = L.Dense(3, name="lin2")
            ha, hb = lin2(ha), lin2(hb)
        return keras.Model([a, b], L.Dense(2, name="head")(L.Subtract(name="diff")([ha, hb])))
    return make


def three_calls() -> Any:
    """Three calls, a shared Dense after each: Keras runs them c, b, a."""
    a, b = two_inputs()
    c = keras.Input((3,), name="c")
    bn, fc = L.BatchNormalization(momentum=MOMENTUM, name="bn"), L.Dense(3, name="fc")
    joined = L.Concatenate(name="cat")([fc(bn(a)), fc(bn(b)), fc(bn(c))])
    return keras.Model([a, b, c], L.Dense(2, name="head")(joined))


def nested() -> Any:
    """A siamese encoder as a nested model (Dense, BatchNormalization), called twice, a shared Dense after it."""
    x = keras.Input((3,), name="x")
    enc = keras.Model(x, L.BatchNormalization(momentum=MOMENTUM, name="bn")(L.Dense(3, name="dense")(x)), name="enc")
    a, b = two_inputs()
    fc = L.Dense(3, name="fc")
    return keras.Model([a, b], L.Dense(2, name="head")(L.Subtract(name="diff")([fc(enc(a)), fc(enc(b))])))


MODELS = {"finding": finding, "pre0-post0": variant(False, False), "pre0-post1": variant(False, True),
          "pre1-post0": variant(True, False), "pre1-post1": variant(True, True), "three_calls": three_calls,
          "nested": nested}
# Inputs far apart, so that the order of the updates shows: a ~ N(0, 1), b ~ N(5, 2), c ~ N(-3, 1)
SHIFTS = {"a": (0.0, 1.0), "b": (5.0, 2.0), "c": (-3.0, 1.0)}


def keras_run_order(model: Any, scope: str = "") -> list[str]:
    """The layer calls in the order Keras' `_run_through_graph` runs them, named as the import names them:
    call k > 1 of a layer is `<layer>/call<k>`, a nested model's calls `<model>/<layer>`."""
    from keras.src.ops.function import make_node_key

    inner = getattr(model, "_functional", None) or model  # a Sequential runs through its Functional
    order: list[str] = []
    for depth in sorted(inner._nodes_by_depth, reverse=True):
        for node in inner._nodes_by_depth[depth]:
            if node.is_input:
                continue
            op = node.operation
            calls = [i for i in range(len(op._inbound_nodes)) if make_node_key(op, i) in inner._nodes]
            call = calls.index(op._inbound_nodes.index(node))
            name = scope + (op.name if call == 0 else f"{op.name}/call{call + 1}")
            order += keras_run_order(op, name + "/") if isinstance(op, keras.Model) else [name]
    return order


def imported(make: Callable[[], Any], tmp_path: Path) -> tuple[Any, Path, list[str]]:
    """The Keras model saved and reloaded (Keras runs the loaded model's graph), its imported spec, the spec's
    layer names in the spec's order."""
    keras.backend.clear_session()
    model = make()
    randomize(model)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert run_import(tmp_path / "m.keras", "-o", tmp_path / "m.yaml") == 0
    names = [layer["name"] for layer in yaml.safe_load((tmp_path / "m.yaml").read_text())["layers"]]
    return loaded, tmp_path / "m.yaml", names


def masked() -> Any:
    """Keras 3's mask operations (NotEqual, LogicalOr) are nodes of Keras' graph; attention reads them by name."""
    ids = keras.Input((5,), dtype="int32", name="ids")
    emb = L.Embedding(10, 4, mask_zero=True, name="emb")(ids)
    other = L.Embedding(10, 4, mask_zero=True, name="other")(ids)
    y = L.MultiHeadAttention(2, 2, name="att")(emb, L.Add(name="both")([emb, other]), key=other)
    z = L.Dense(4, name="fc")(y)
    return keras.Model(ids, L.Dense(2, name="head")(L.GlobalAveragePooling1D(name="gap")(L.Add(name="sum")([y, z]))))


@pytest.mark.parametrize("name", [*MODELS, "masked"])
def test_spec_order_is_keras_run_order(name: str, tmp_path: Path) -> None:
    model, _, names = imported(MODELS.get(name, masked), tmp_path)
    keras_order = keras_run_order(model)
    # Keras' mask operations make no spec layer (specgen derives the masks itself)
    assert names == [n for n in keras_order if n in names]
    assert all(n.startswith(("not_equal", "logical_or")) for n in set(keras_order) - set(names))
    assert (len(keras_order) > len(names)) == (name == "masked")  # the mask operations are in Keras' graph


def test_bn_calls_are_written_as_keras_runs_them(tmp_path: Path) -> None:
    """The order itself, spelled out: where a shared layer follows, the later calls come first."""
    expected = {"finding": ["bn/call2", "bn", "fc", "fc/call2"], "pre0-post0": ["bn", "bn/call2"],
                "pre1-post1": ["lin/call2", "lin", "bn/call2", "bn", "lin2", "lin2/call2"],
                "three_calls": ["bn/call3", "bn/call2", "bn", "fc", "fc/call2", "fc/call3"],
                "nested": ["enc/call2/dense", "enc/call2/bn", "enc/dense", "enc/bn", "fc", "fc/call2"]}
    for name, start in expected.items():
        (tmp_path / name).mkdir()
        _, _, names = imported(MODELS[name], tmp_path / name)
        assert names[:len(start)] == start, name


def test_return_state_model_order(tmp_path: Path) -> None:
    """Dict outputs (walked by sorted key), call arguments by name (initial_state), extra outputs, operations."""
    from test_return_state_import import states_model

    model, _, names = imported(states_model, tmp_path)
    assert names == keras_run_order(model)


def feeds(inputs: list[str], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal((8, 3)) * SHIFTS[k][1] + SHIFTS[k][0]).astype(np.float32) for k in inputs}


TRAINING = f"""
loss: {{kind: sparse_softmax_cross_entropy, logits: head, labels: label}}
optimizers: {{all: {{kind: sgd, learning_rate: {RATE}}}}}
train: {{batch_size: 8}}
"""


def specgen_model(spec: Path, tmp_path: Path) -> tuple[Any, Any, Any, dict[str, bytes]]:
    """The imported spec with an SGD step, rendered and loaded, every variable restored from the .keras file."""
    spec.write_text(spec.read_text() + TRAINING)
    loaded = load_spec(spec)
    ir = build_ir(loaded)
    files = render_files(ir)
    for file in ("model.py", "train.py"):
        (tmp_path / file).write_bytes(files[file])
    model = getattr(load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    trainer = getattr(load_generated(tmp_path / "train.py"), f"{ir.class_name}Training")(model)
    variables = model.variables_by_path()
    plan = plan_restore(loaded, {p: (tuple(v.shape), v.dtype.name) for p, v in variables.items()})
    assert plan.ok and plan.count("restored") == len(variables)
    apply_plan(plan, variables)
    return ir, model, trainer, files


def keras_values(model: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """Keras' variables by the spec's paths (`enc/bn/moving_mean`: the nested model's layer)."""
    found: dict[str, np.ndarray] = {}
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            found.update(keras_values(layer, f"{prefix}{layer.name}/"))
        else:
            found.update({f"{prefix}{layer.name}/{v.name}": np.asarray(v.numpy()) for v in layer.weights})
    return found


def close(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))


@pytest.mark.parametrize("name", MODELS)
def test_statistics_and_onnx_after_training_equal_keras(name: str, tmp_path: Path) -> None:
    import tensorflow as tf

    model, spec, _ = imported(MODELS[name], tmp_path)
    ir, ours, trainer, files = specgen_model(spec, tmp_path)
    model.compile(optimizer=keras.optimizers.SGD(RATE),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    inputs = [t.name for t in model.inputs]
    for step in range(STEPS):
        x, y = feeds(inputs, seed=step), np.random.default_rng(10 + step).integers(0, 2, 8)
        model.train_on_batch([x[k] for k in inputs], y)
        trainer.train_step({k: tf.constant(v) for k, v in x.items()}, {"label": tf.constant(y)},
                           tf.constant([0, 0], tf.int64))
    theirs = keras_values(model)
    values = {p: v.numpy() for p, v in ours.variables_by_path().items()}
    assert sorted(values) == sorted(theirs)
    for path, want in theirs.items():
        assert close(values[path], want) <= TOLERANCE, f"{path}: {values[path]} vs {want}"
    x = feeds(inputs, seed=99)
    want = model.predict([x[k] for k in inputs], verbose=0)
    got = parity.run_onnx(files["model.onnx"], ir, values, x)
    assert close(np.asarray(got["head"]), want) <= TOLERANCE
