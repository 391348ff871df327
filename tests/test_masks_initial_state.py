"""A masked lstm / gru / simple_rnn started from a non-zero `initial_state`, against Keras' own layer called with
the same weights, an explicit `mask=` and `initial_state=` (a functional Keras model is no reference here: Keras
fills in `mask=` only for a call with one tensor argument, so with `initial_state=` it runs unmasked).

Keras' backend.rnn carries the previous step's OUTPUT apart from the states, starting at zeros: a masked step
before the first real one outputs zeros while the states still hold the initial ones, and a row with no real
step outputs zeros and returns its initial states. With a zero initial state the two coincide, which is all
tests/test_masks_keras.py can see. Every output (the layer's and return_state's) and, through the generated
TensorFlow module, the gradients of every weight: the module eagerly at a static 7 steps (runtime/lib/
recurrent.py's unrolled path) and traced over a dynamic time axis at 7 and 12 steps (its tf.while_loop), and
onnxruntime on the generated ONNX graph at both lengths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

keras = pytest.importorskip("keras")

VOCAB, DIM, UNITS, CONTEXT = 9, 4, 3, 5
LENGTHS = (7, 12)  # 7: unrolled when the length is static; both: the while loop when traced over [batch, None]
KERAS = {"lstm": "LSTM", "gru": "GRU", "simple_rnn": "SimpleRNN"}
STATES = {"lstm": ("state_h", "state_c"), "gru": ("state",), "simple_rnn": ("state",)}
# Keras and specgen evaluate the same float32 ops (float32 eps 1.2e-7) in different orders through a dozen
# steps of a few dozen ops each: differences of a few ulps of values of order 1 (tests/keras_parity.py's
# 1e-5), taken relative to the larger of 1 and the reference's size, as tests/test_masks_keras.py does (an
# LSTM's cell state grows past 1 over the steps). The bug this guards against was off by 0.7 to 4.
TOLERANCE = 1e-5


def ids_batch(steps: int, rng: np.random.Generator) -> np.ndarray:
    """Rows padded at the end, at the start, with holes after a real first step, at the start and in a hole,
    nowhere real, and not at all. With go_backwards the end-padded row is read padding first."""
    ids = rng.integers(1, VOCAB, (6, steps)).astype(np.int32)
    ids[0, -3:] = 0
    ids[1, :3] = 0
    ids[2, 1::2] = 0
    ids[3, [0, 1, 3]] = 0
    ids[4] = 0
    return ids


def spec_text(op: str, params: dict[str, Any]) -> str:
    starts = [f"start_{state}" for state in STATES[op]]  # each state from its own dense of the context
    layers = [{"name": "emb", "op": "embedding", "input": "ids", "vocab_size": VOCAB, "dim": DIM, "mask_zero": True},
              *({"name": name, "op": "dense", "input": "ctx", "units": UNITS} for name in starts),
              {"name": "r", "op": op, "input": "emb", "units": UNITS, "return_state": True, "initial_state": starts,
               **params}]
    document = {"specgen": 1, "name": "masked_start", "layers": layers,
                "inputs": {"ids": {"shape": ["seq"], "dtype": "int32"}, "ctx": {"shape": [CONTEXT]}},
                "outputs": {"y": "r", **{state: f"r/{state}" for state in STATES[op]}}}
    return yaml.safe_dump(document, sort_keys=False)


def _diff(a: Any, b: Any) -> float:
    import tensorflow as tf

    # tf.convert_to_tensor: an embedding's gradient is IndexedSlices
    a, b = (np.asarray(tf.convert_to_tensor(v), np.float64) for v in (a, b))
    assert a.shape == b.shape
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))  # NaN stays NaN: it fails


class KerasReference:
    """The spec's graph in plain TensorFlow around Keras' layer: the embedding lookup and the dense layers are
    gathers and matmuls of the same values; the layer is Keras', called with `mask=` and `initial_state=`."""

    def __init__(self, op: str, params: dict[str, Any], values: dict[str, np.ndarray]) -> None:
        import tensorflow as tf

        self.layer = getattr(keras.layers, KERAS[op])(UNITS, return_state=True, **params)
        self.layer.build((None, None, DIM))
        by_name = {w.name: w for w in self.layer.weights}
        self.variables = {path: tf.Variable(value) for path, value in values.items() if not path.startswith("r/")}
        for path, value in values.items():
            if path.startswith("r/"):
                by_name[path.removeprefix("r/")].assign(value)
                self.variables[path] = by_name[path.removeprefix("r/")]
        self.starts = [f"start_{state}" for state in STATES[op]]

    def __call__(self, ids: np.ndarray, ctx: np.ndarray) -> list[Any]:
        import tensorflow as tf

        v = self.variables
        x = tf.gather(v["emb/embeddings"], ids)
        initial = [ctx @ v[f"{s}/kernel"] + v[f"{s}/bias"] for s in self.starts]
        return list(self.layer(x, mask=tf.constant(ids != 0), initial_state=initial))


def diffs(op: str, params: dict[str, Any], tmp_path: Path) -> dict[str, float]:
    """Worst relative difference per output and path ('tf eager y', 'onnx state_c', 'grad r/kernel', ...)."""
    import tensorflow as tf

    from specgen.runtime import parity

    ir = build_ir(load_spec_text(spec_text(op, params), "masked_start.yaml"))
    files = render_files(ir)
    (tmp_path / "model.py").write_bytes(files["model.py"])
    model = getattr(parity.load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    rng = np.random.default_rng(0)
    ours = model.variables_by_path()
    # Unit-variance initial states and glorot-sized weights: every value of order 1, no gate saturated.
    values = {path: (rng.standard_normal(tuple(v.shape)) / np.sqrt(v.shape[0])).astype(np.float32)
              for path, v in ours.items()}
    parity.assign(model, values)
    reference = KerasReference(op, params, values)
    names = list(ir.outputs)

    # The while loop traced once over a dynamic time axis (autograph off: the runtime writes its loop itself,
    # and converting the module costs more than running it here); forward only, the gradients are taken eagerly.
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, CONTEXT], tf.float32)],
                 autograph=False)
    def traced(ids: Any, ctx: Any) -> dict[str, Any]:
        return model({"ids": ids, "ctx": ctx})

    found: dict[str, float] = {}

    def worst(key: str, a: Any, b: Any) -> None:
        value = _diff(a, b)
        found[key] = max(found.get(key, 0.0), value) if value == value else value  # a NaN stays: it must fail

    for steps in LENGTHS:
        ids = ids_batch(steps, rng)
        ctx = rng.standard_normal((len(ids), CONTEXT)).astype(np.float32)
        eager = steps == LENGTHS[0]  # a static length of 7: the unrolled path, run eagerly with its gradients
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(list(ours.values()))  # generated variables are not trainable without optimizers
            expected = reference(ids, ctx)
            projections = [rng.standard_normal(tuple(e.shape)).astype(np.float32) for e in expected]
            mine = model({"ids": tf.constant(ids), "ctx": tf.constant(ctx)}) if eager else {}
        if eager:
            keras_grads = tape.gradient(expected, [reference.variables[path] for path in ours], projections)
            grads = tape.gradient([mine[k] for k in names], list(ours.values()), projections)
            for path, g, k in zip(ours, grads, keras_grads, strict=True):
                worst(f"grad {path}", g, k)
        outputs = traced(tf.constant(ids), tf.constant(ctx))
        onnx = parity.run_onnx(files["model.onnx"], ir, values, {"ids": ids, "ctx": ctx})
        for k, e in zip(names, expected, strict=True):
            worst(f"tf traced {k}", outputs[k], e)
            worst(f"onnx {k}", onnx[k], e)
            if eager:
                worst(f"tf eager {k}", mine[k], e)
    assert traced.experimental_get_tracing_count() == 1  # both lengths through the same while loop
    return found


CASES = [pytest.param(op, {"return_sequences": seq, "go_backwards": back},
                      id=f"{op}-{'seq' if seq else 'last'}-{'back' if back else 'fwd'}")
         for op in sorted(KERAS) for seq in (True, False) for back in (False, True)]


@pytest.mark.parametrize(("op", "params"), CASES)
def test_masked_steps_before_the_first_real_one_output_zeros_like_keras(op: str, params: dict[str, Any],
                                                                       tmp_path: Path) -> None:
    found = diffs(op, params, tmp_path)
    outputs = ("y", *STATES[op])
    weights = ("emb/embeddings", *(f"start_{s}/{r}" for s in STATES[op] for r in ("kernel", "bias")),
               "r/kernel", "r/recurrent_kernel", "r/bias")
    assert set(found) == {f"{way} {k}" for way in ("tf eager", "tf traced", "onnx") for k in outputs} | {
        f"grad {path}" for path in weights}
    over = {key: f"{value:.3g}" for key, value in found.items() if not value <= TOLERANCE}  # NaN included
    assert not over, f"over {TOLERANCE}: {over}"
