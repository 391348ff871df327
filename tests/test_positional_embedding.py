"""positional_embedding: KerasHub's PositionEmbedding with the same weights (forward, gradient of the table)
at two lengths through one generated model; one ONNX graph at two lengths like TensorFlow; positioned spec
errors; and a sequence longer than max_length refused with one clear line by TensorFlow, `specgen infer`
and `specgen serve` (real CLI, real HTTP) rather than answered from clipped rows. TF-vs-onnxruntime cases at
fixed lengths are in tests/op_cases_positional_embedding.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime import parity
from specgen.runtime.onnx_export import with_weights
from specgen.spec.load import load_spec_text

keras = pytest.importorskip("keras")

from keras_parity import GRADIENT_TOLERANCE, generated_model, layer_spec  # noqa: E402

MAX = 10
TOO_LONG = ("input 'ids': received 11 steps along 'seq' (shape [2, 11]), expected at most 10: the max_length of "
            "layer 'pos' (positional_embedding)")


def tokens_spec(name: str = "pe") -> str:
    """KerasHub's TokenAndPositionEmbedding spelled in ops, then a dense: ids [batch, seq] -> [batch, seq, 3]."""
    layers = [{"name": "tok", "op": "embedding", "input": "ids", "vocab_size": 13, "dim": 4},
              {"name": "pos", "op": "positional_embedding", "input": "tok", "max_length": MAX},
              {"name": "sum", "op": "add", "inputs": ["tok", "pos"]}, {"name": "out", "op": "dense", "units": 3}]
    return yaml.safe_dump({"specgen": 1, "name": name, "inputs": {"ids": {"shape": ["seq"], "dtype": "int32"}},
                           "outputs": {"y": "out"}, "layers": layers}, sort_keys=False)


def test_matches_keras_hub_at_two_lengths(tmp_path: Path) -> None:
    """The same generated model at 4 and 10 steps: forward equal to KerasHub's bit for bit (a row copy, no
    arithmetic), the gradient of the table within the parity tolerance (a sum over the batch, in TF's order)."""
    import tensorflow as tf

    keras_hub = pytest.importorskip("keras_hub")
    model = generated_model(layer_spec("pe", ["seq", 8], [{"name": "pos", "op": "positional_embedding",
                                                           "max_length": MAX}]), tmp_path)
    theirs = keras_hub.layers.PositionEmbedding(sequence_length=MAX)
    theirs.build((None, None, 8))
    (ours,) = model.variables_by_path().values()
    assert [w.path.rsplit("/", 1)[-1] for w in theirs.weights] == ["embeddings"] and ours.shape == (MAX, 8)
    rng = np.random.default_rng(0)
    table = rng.standard_normal((MAX, 8)).astype(np.float32)
    ours.assign(table)
    theirs.set_weights([table])
    for steps in (4, MAX):
        x = tf.constant(rng.standard_normal((3, steps, 8)).astype(np.float32))
        projection = tf.constant(rng.standard_normal((3, steps, 8)).astype(np.float32))
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(ours)  # generated variables are plain tf.Variables; train.py picks the trainable ones
            out_ours, out_theirs = model({"x": x}, training=True)["y"], theirs(x)
            loss_ours, loss_theirs = tf.reduce_sum(out_ours * projection), tf.reduce_sum(out_theirs * projection)
        np.testing.assert_array_equal(out_ours.numpy(), out_theirs.numpy())
        np.testing.assert_array_equal(out_ours.numpy()[1], table[:steps])  # the rows themselves, not added to x
        g_ours, g_theirs = tape.gradient(loss_ours, ours), tape.gradient(loss_theirs, theirs.weights[0])
        assert np.max(np.abs(np.asarray(g_ours) - np.asarray(g_theirs))) <= GRADIENT_TOLERANCE
        assert np.all(np.asarray(g_ours)[steps:] == 0)  # rows past the length get no gradient
        assert np.max(np.abs(np.asarray(g_ours)[:steps])) > 0.1


def _built(tmp_path: Path) -> tuple[Any, dict[str, bytes], Any, dict[str, np.ndarray]]:
    ir = build_ir(load_spec_text(tokens_spec(), "pe.yaml"))
    files = render_files(ir)
    (tmp_path / "m.py").write_bytes(files["model.py"])
    model = getattr(parity.load_generated(tmp_path / "m.py"), ir.class_name)(seed=0)
    values = parity.random_weights(ir, np.random.default_rng(0))
    parity.assign(model, values)
    return ir, files, model, values


def test_one_onnx_graph_runs_two_lengths_and_tensorflow_refuses_more(tmp_path: Path) -> None:
    import tensorflow as tf

    ir, files, model, values = _built(tmp_path)
    rng = np.random.default_rng(1)
    for steps in (3, MAX):  # the same ONNX bytes at both lengths
        inputs = parity.random_inputs(ir, 2, rng, {"seq": steps})
        expected, actual = parity.run_tf(model, inputs), parity.run_onnx(files["model.onnx"], ir, values, inputs)
        assert actual["y"].shape == (2, steps, 3)
        assert parity.max_abs_diff(expected, actual) <= 1e-5  # tests/test_op_parity.py's TOLERANCE: float32 order
    too_long = parity.random_inputs(ir, 2, rng, {"seq": MAX + 1})
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(
            "layer 'pos' (positional_embedding): the input's time steps exceed max_length 10")):
        parity.run_tf(model, too_long)
    # The bare graph fails too: onnxruntime rewrites Gather(Range) into a Slice, whose 10 rows the Reshape to
    # [11, features] then refuses (without the rewrite, Gather's bounds check refuses index 10).
    with pytest.raises(Exception, match=re.escape("Input shape:{10,4}, requested shape:{11,4}")):
        parity.run_onnx(files["model.onnx"], ir, values, too_long)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, bytes]:
    """The model as `specgen export` writes it (with_weights stamps the bound into its metadata)."""
    ir = build_ir(load_spec_text(tokens_spec(), "pe.yaml"))
    values = parity.random_weights(ir, np.random.default_rng(0))
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir, values)
    assert {p.key: p.value for p in model.metadata_props} == {"specgen.max_lengths": '{"seq": [10, "pos"]}',
                                                              "specgen.min_lengths": '{"seq": [1, "tok", "embedding"]}',
                                                              "specgen.id_ranges": '{"ids": [0, 13, "tok", "embedding"]}'}
    path = tmp_path_factory.mktemp("pe") / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path, ir, model.SerializeToString()


def ids(steps: int) -> np.ndarray:
    return np.random.default_rng(steps).integers(0, 13, (2, steps)).astype(np.int32)


def test_infer_refuses_a_longer_sequence(exported: tuple[Path, Any, bytes], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = exported[0]
    for steps in (4, MAX):
        np.savez(tmp_path / f"in{steps}.npz", ids=ids(steps))
        assert main(["infer", str(path), "--input", str(tmp_path / f"in{steps}.npz"), "--provider", "cpu"]) == 0
        assert f"output y: shape [2, {steps}, 3], dtype float32" in capsys.readouterr().out
    np.savez(tmp_path / "long.npz", ids=ids(MAX + 1))
    out = tmp_path / "out.npz"
    assert main(["infer", str(path), "--input", str(tmp_path / "long.npz"), "--provider", "cpu",
                 "--output", str(out)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{tmp_path / 'long.npz'}: error: {TOO_LONG}", "1 error found"], err
    assert not out.exists()


@pytest.fixture(scope="module")
def url(exported: tuple[Path, Any, bytes], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from test_serve import ThreadServer

    from specgen.runtime.triton import write_repository
    from specgen.serve.app import create_app
    from specgen.serve.models import load_repository

    root = tmp_path_factory.mktemp("repo")
    write_repository(root, exported[1], exported[2])
    with ThreadServer(create_app(load_repository(root, provider="cpu"))) as base:
        yield base


def test_serve_refuses_a_longer_sequence(url: str) -> None:
    import httpx

    def post(x: np.ndarray) -> httpx.Response:
        body = {"inputs": [{"name": "ids", "shape": list(x.shape), "datatype": "INT32", "data": x.reshape(-1).tolist()}]}
        return httpx.post(f"{url}/v2/models/pe/infer", json=body, timeout=30)

    for steps in (4, MAX):
        response = post(ids(steps))
        assert response.status_code == 200, response.text
        assert response.json()["outputs"][0]["shape"] == [2, steps, 3]
    response = post(ids(MAX + 1))
    assert (response.status_code, response.json()) == (400, {"error": TOO_LONG})


SPEC = """specgen: 1
name: bad
inputs:
  x: {shape: [6, 5]}
  s: {shape: [seq, 5]}
  f: {shape: [6, feat]}
  v: {shape: [5]}
  i: {shape: [6, 5], dtype: int32}
outputs:
  y: last
layers:
LAST
"""

ERRORS = [
    ("short", "  - {name: last, op: positional_embedding, input: x, max_length: 4}",
     "12:66: error: layer 'last' (positional_embedding): max_length: received 4, expected at least the input's 6 "
     "time steps (input [batch, 6, 5])"),
    ("rank2", "  - {name: last, op: positional_embedding, input: v, max_length: 4}",
     "12:51: error: layer 'last' (positional_embedding): positional_embedding needs a rank-3 input (batch, time, "
     "features); received [batch, 5]"),
    ("named_features", "  - {name: last, op: positional_embedding, input: f, max_length: 8}",
     "12:51: error: layer 'last' (positional_embedding): positional_embedding's last axis (its embeddings' columns) "
     "needs a fixed size; received the named dynamic dimension 'feat' (its size is known only at run time)"),
    ("zero", "  - {name: last, op: positional_embedding, input: s, max_length: 0}",
     "12:66: error: max_length: received 0, expected a value > 0 (in layer 'last')"),
]


@pytest.mark.parametrize(("layer", "expected"), [pytest.param(t, e, id=i) for i, t, e in ERRORS])
def test_positioned_errors(layer: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("LAST", layer))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1:] == ["1 error found"] and err[0].endswith(f"spec.yaml:{expected}"), err
    assert list(tmp_path.iterdir()) == [path]  # nothing written


def test_bounds_metadata_is_read_as_data() -> None:
    """The metadata comes from a model file that may be hand-edited: entries of another shape are ignored (the
    graph itself still refuses a longer sequence), never a crash; a good entry bounds only its symbol."""
    from specgen.runtime import lengths

    assert lengths.read({"specgen.max_lengths": "{not json"}) == {}
    assert lengths.read({"specgen.max_lengths": "[1, 2]"}) == {}
    assert lengths.read({"specgen.max_lengths": '{"seq": [true, "pos"], "t": ["9", "p"], "u": [4, "q"]}'}) == \
        {"u": (4, "q")}
    found = lengths.read({"specgen.max_lengths": '{"seq": [10, "pos"]}'})
    declared = {"ids": ("batch", "seq"), "other": ("batch", "time")}
    assert lengths.violation(found, declared, {"ids": (2, 10), "other": (2, 99)}) is None
    assert lengths.violation(found, declared, {"ids": (2, 11), "other": (2, 1)}) == TOO_LONG
