"""`specgen import keras` of recurrent layers' extra outputs: LSTM return_state, Bidirectional with
return_state under merge_mode None and sum, states read by `initial_state=` (one tensor, and a list of two),
and Keras 3's `x[:, 0]` (GetItem) and `keras.ops.take` as the spec's `take`. One saved model holds them all;
the imported spec restores every weight by identity, and the generated TensorFlow model and the ONNX graph
equal `model.predict` on every output."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")

from test_import_keras import randomize, refusal, run_import  # noqa: E402

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime import parity  # noqa: E402
from specgen.runtime.commands.restore import apply_plan, plan_restore  # noqa: E402
from specgen.runtime.lib.generated import load_generated  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

# Relative to the output's largest value: float32 through 7 steps, three stacked recurrent layers and two
# directions; Keras, TensorFlow and onnxruntime sum in different orders (1e-5 absolute on bidirectional alone).
TOLERANCE = 1e-4


def states_model() -> Any:
    # `x[:, 0]` gets Keras' automatic name (get_item, get_item_1, ...) from a process-wide counter: clearing the
    # session makes it the same whatever ran earlier in this pytest worker (CI once saw get_item_1).
    keras.backend.clear_session()
    L = keras.layers
    x = keras.Input((7, 5), name="steps")
    seq, h, c = L.LSTM(4, return_sequences=True, return_state=True, name="enc")(x)
    fw, bw, _, fc, _, bc = L.Bidirectional(L.LSTM(3, return_sequences=True, return_state=True), merge_mode=None,
                                           name="bi")(seq)
    y, _, bs = L.Bidirectional(L.GRU(3, return_state=True), merge_mode="sum", name="bg")(x)
    first, last = seq[:, 0], keras.ops.take(bw, -1, axis=1)
    dec = L.GRU(4, name="dec")(x, initial_state=h)
    dec2 = L.LSTM(4, name="dec2")(x, initial_state=[h, c])
    head = L.Dense(2, name="head")(L.Concatenate(name="cat")([first, last, c, fc, bs, dec, dec2]))
    model = keras.Model(x, {"head": head, "state": h, "fw": fw, "bc": bc, "y": y}, name="states")
    randomize(model)
    return model


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    tmp = tmp_path_factory.mktemp("states")
    model = states_model()
    model.save(tmp / "m.keras")
    assert run_import(tmp / "m.keras", "-o", tmp / "m.yaml") == 0
    return model, tmp / "m.yaml"


def test_extra_outputs_and_take_are_imported(imported: tuple[Any, Path]) -> None:
    doc = yaml.safe_load(imported[1].read_text())
    assert doc["outputs"] == {"head": "head", "state": "enc/state_h", "fw": "bi", "bc": "bi/backward_state_c",
                              "y": "bg"}
    # In the order Keras runs the calls (importers/keras/run_order.py)
    assert [{k: v for k, v in x.items() if k != "name"} for x in doc["layers"]] == [
        {"op": "lstm", "units": 4, "return_sequences": True, "return_state": True},
        {"op": "bidirectional", "layer": {"op": "lstm", "units": 3, "return_sequences": True, "return_state": True},
         "merge_mode": "none"},
        {"op": "take", "input": "enc", "axis": 1, "index": 0},
        {"op": "take", "input": "bi/backward", "axis": 1, "index": -1},
        {"op": "bidirectional", "input": "steps", "layer": {"op": "gru", "units": 3, "return_state": True},
         "merge_mode": "sum"},
        {"op": "gru", "input": "steps", "initial_state": ["enc/state_h"], "units": 4},
        {"op": "lstm", "input": "steps", "initial_state": ["enc/state_h", "enc/state_c"], "units": 4},
        {"op": "concat", "inputs": ["get_item", "take", "enc/state_c", "bi/forward_state_c", "bg/backward_state", "dec",
                                    "dec2"]},
        {"op": "dense", "units": 2}]


def test_tensorflow_and_onnx_equal_predict(imported: tuple[Any, Path], tmp_path: Path) -> None:
    model, spec = imported
    loaded = load_spec(spec)
    ir = build_ir(loaded)
    files = render_files(ir)
    (tmp_path / "model.py").write_bytes(files["model.py"])
    ours = getattr(load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    variables = ours.variables_by_path()
    plan = plan_restore(loaded, {p: (tuple(v.shape), v.dtype.name) for p, v in variables.items()})
    # enc 3 + bi 2x3 + bg 2x3 + dec 3 + dec2 3 + head 2: every one from the .keras file, none left over
    assert plan.ok and plan.count("restored") == len(variables) == 23 and not plan.unused
    apply_plan(plan, variables)
    x = np.random.default_rng(4).standard_normal((3, 7, 5)).astype(np.float32)
    expected = model.predict(x, verbose=0)
    values = {p: v.numpy() for p, v in variables.items()}
    for got in (ours({"steps": x}, training=False), parity.run_onnx(files["model.onnx"], ir, values, {"steps": x})):
        assert sorted(got) == sorted(expected)
        for key, want in expected.items():
            diff = float(np.max(np.abs(np.asarray(got[key]) - want)) / np.max(np.abs(want)))
            assert diff <= TOLERANCE, f"{key}: {diff:.3g}"


EXPECTED = ("; expected one integer index on one axis after the batch, every other axis whole (`x[:, 0]`, "
            "`x[:, -1, :]`), the spec's take")


@pytest.mark.parametrize(("index", "message"), [
    (lambda t: t[:, 1:3], "(GetItem): received x[:, 1:3]" + EXPECTED),
    (lambda t: t[:, ::2, 0], "(GetItem): received x[:, ::2, 0]" + EXPECTED),
    (lambda t: t[0], "(GetItem): received index 0 on the batch axis" + EXPECTED),
    (lambda t: keras.ops.take(t, 1, axis=0), "(Take): received index 1 on the batch axis" + EXPECTED),
], ids=["range", "step", "batch", "take_batch"])
def test_other_indexing_is_refused(index: Any, message: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    a = keras.Input((4, 2), name="a")
    err = refusal(tmp_path, keras.Model(a, keras.layers.Flatten(name="f")(index(a))), capsys)
    assert err.count("\n") == 2 and err.endswith("\n1 error found\n"), err  # one line, no traceback
    # Keras numbers unnamed operations per process (get_item_3): the layer's name is matched as a pattern
    assert re.search(r": error: Keras layer '(get_item|take)(_\d+)?' " + re.escape(message) + "\n", err), err


def test_an_output_the_layer_lacks_is_refused(imported: tuple[Any, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A config whose model output reads output 3 of the LSTM (which has 3: the sequence, state_h and state_c)."""
    import json
    import zipfile

    source, bad = imported[1].with_name("m.keras"), tmp_path / "bad.keras"
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename == "config.json":
                config = json.loads(data)
                config["config"]["output_layers"]["state"] = ["enc", 0, 3]
                data = json.dumps(config).encode()
            zout.writestr(item, data)
    assert run_import(bad, "-o", tmp_path / "bad.yaml") == 1
    assert not (tmp_path / "bad.yaml").exists()
    assert capsys.readouterr().err == (f"{bad}: error: output 'state' is output 3 of Keras layer 'enc', which has 3 "
                                       "output(s) as specgen imports it\n1 error found\n")
