"""Named dynamic dimensions (`shape: [seq, 6]`): one graph runs at every length, ONNX declares them
as dim_param, TensorFlow's signature as None, and what needs a fixed size says so where the spec does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from op_cases_seq1d import c1

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime import parity
from specgen.spec.load import load_spec_text

TOLERANCE = 1e-5  # float32 convolutions summed in different orders by TensorFlow and onnxruntime


def spec(layers: list[dict], inputs: dict | None = None, name: str = "dyn") -> str:
    document = {"specgen": 1, "name": name, "inputs": inputs or {"x": {"shape": ["seq", 6]}},
                "outputs": {"y": layers[-1]["name"]}, "layers": layers}
    return yaml.safe_dump(document, sort_keys=False)


# A causal conv with a residual add (both `seq`), a strided SAME conv (ceil(seq/2)), a pool, a global pool.
SEQ_LAYERS = [c1(filters=6, padding="causal", dilation=2, input="x"), {"name": "sum", "op": "add", "inputs": ["x", "c"]},
              c1(name="d", filters=4, strides=2, padding="same"), {"name": "p", "op": "max_pool1d", "size": 2},
              {"name": "g", "op": "global_avg_pool"}, {"name": "out", "op": "dense", "units": 3}]


def test_one_onnx_graph_runs_two_lengths_like_tensorflow(tmp_path: Path) -> None:
    ir = build_ir(load_spec_text(spec(SEQ_LAYERS), "dyn.yaml"))
    files = render_files(ir)
    (tmp_path / "m.py").write_bytes(files["model.py"])
    model = getattr(parity.load_generated(tmp_path / "m.py"), ir.class_name)(seed=0)
    rng = np.random.default_rng(0)
    values = parity.random_weights(ir, rng)
    parity.assign(model, values)
    shapes = {}
    for steps in (5, 13):  # the same ONNX bytes at both lengths
        inputs = parity.random_inputs(ir, 4, rng, {"seq": steps})
        assert inputs["x"].shape == (4, steps, 6)
        expected = parity.run_tf(model, inputs)
        actual = parity.run_onnx(files["model.onnx"], ir, values, inputs)
        assert parity.max_abs_diff(expected, actual) <= TOLERANCE
        shapes[steps] = actual["y"].shape
    assert shapes == {5: (4, 3), 13: (4, 3)}


@pytest.mark.parametrize("op", ["lstm", "gru", "simple_rnn"])
@pytest.mark.parametrize("sequences", [False, True])
def test_one_recurrent_onnx_graph_runs_two_lengths_like_tensorflow(tmp_path: Path, op: str, sequences: bool) -> None:
    """A recurrent layer on `[seq, 6]`: the ONNX LSTM/GRU/RNN node takes any length, as the TensorFlow scan does."""
    layers = [{"name": "r", "op": op, "input": "x", "units": 5, "return_sequences": sequences, "go_backwards": True},
              {"name": "out", "op": "dense", "units": 3}]
    ir = build_ir(load_spec_text(spec(layers), "dyn.yaml"))
    files = render_files(ir)
    (tmp_path / "m.py").write_bytes(files["model.py"])
    model = getattr(parity.load_generated(tmp_path / "m.py"), ir.class_name)(seed=0)
    rng = np.random.default_rng(0)
    values = parity.random_weights(ir, rng)
    parity.assign(model, values)
    for steps in (5, 13):  # the same ONNX bytes at both lengths
        inputs = parity.random_inputs(ir, 4, rng, {"seq": steps})
        expected = parity.run_tf(model, inputs)
        actual = parity.run_onnx(files["model.onnx"], ir, values, inputs)
        assert actual["y"].shape == ((4, steps, 3) if sequences else (4, 3))
        assert parity.max_abs_diff(expected, actual) <= TOLERANCE


def test_tensorflow_and_onnx_declare_the_dimensions(tmp_path: Path) -> None:
    layers = [c1(filters=4, strides=2, padding="same", input="x")]  # output [batch, ceil(seq/2), 4]
    ir = build_ir(load_spec_text(spec(layers), "dyn.yaml"))
    files = render_files(ir)
    text = files["model.onnx.txt"].decode()
    assert "  float[batch, seq, 6] x,\n" in text
    assert '  float[batch, "ceil(seq/2)", 4] y\n' in text
    graph = onnx.load_from_string(files["model.onnx"]).graph
    assert [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == ["batch", "seq", 6]
    assert [d.dim_param or d.dim_value for d in graph.output[0].type.tensor_type.shape.dim] == [
        "batch", "ceil(seq/2)", 4]
    assert '    "x": ([None, None, 6], tf.float32),\n' in files["model.py"].decode()


def test_image_symbols_carry_through_windows() -> None:
    layers = [{"name": "c", "op": "conv2d", "filters": 4, "kernel": 3, "input": "image"},  # valid: height-2
              {"name": "p", "op": "max_pool", "size": 2, "strides": 2, "padding": "same"},
              {"name": "u", "op": "upsample", "size": [2, 3]}]
    ir = build_ir(load_spec_text(spec(layers, {"image": {"shape": ["height", "width", 3]}}), "img.yaml"))
    assert [n.shape for n in ir.nodes] == [(None, "height-2", "width-2", 4),
                                           (None, "ceil((height-2)/2)", "ceil((width-2)/2)", 4),
                                           (None, "2*ceil((height-2)/2)", "3*ceil((width-2)/2)", 4)]
    # FLOPs per output position: 2 * 3*3 kernel * 3 channels * 4 filters + 4 biases
    assert ir.nodes[0].flops == 2 * 9 * 3 * 4 + 4


def validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 1
    return capsys.readouterr().err


@pytest.mark.parametrize(("layer", "line"), [
    ({"name": "out", "op": "dense", "units": 3, "input": "x"},
     "bad.yaml:14:10: error: layer 'out' (dense): dense's last axis (its kernel's rows) needs a fixed size; received "
     "the named dynamic dimension 'seq' (its size is known only at run time)"),
    ({"name": "out", "op": "lstm", "units": 3, "input": "x"},
     "bad.yaml:14:10: error: layer 'out' (lstm): lstm needs a fixed feature size (its kernel's rows); its input "
     "[batch, 6, seq] has the named dimension 'seq' there"),
    ({"name": "out", "op": "flatten", "input": "x"},
     "bad.yaml:13:10: error: layer 'out' (flatten): flatten needs fixed sizes; its input [batch, 6, seq] has the named "
     "dynamic dimension 'seq', known only at run time"),
    ({"name": "out", "op": "reshape", "shape": [-1], "input": "x"},
     "bad.yaml:15:10: error: layer 'out' (reshape): reshape needs fixed sizes; its input [batch, 6, seq] has the named "
     "dynamic dimension 'seq', known only at run time"),
])
def test_a_rule_that_needs_a_size_names_the_symbol(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   layer: dict, line: str) -> None:
    text = spec([layer], {"x": {"shape": [6, "seq"]}})
    err = validate(tmp_path, text, capsys)
    assert err.splitlines() == [f"{tmp_path / line.split(':', 1)[0]}:{line.split(':', 1)[1]}", "1 error found"]


def test_a_residual_add_of_two_symbols_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = spec([{"name": "out", "op": "add", "inputs": ["x", "z"]}],
                {"x": {"shape": ["seq", 6]}, "z": {"shape": ["time", 6]}})
    err = validate(tmp_path, text, capsys)
    assert err.splitlines() == [
        f"{tmp_path / 'bad.yaml'}:18:3: error: layer 'out' (add): inputs: received 'x' [batch, seq, 6] and 'z' "
        "[batch, time, 6], which do not broadcast; expected inputs of one rank whose axes are equal or 1 in one of "
        "them; named dynamic dimensions line up only with the same name or size 1 ('seq' vs 'time': their sizes "
        "are known only at run time)", "1 error found"]


def test_a_bad_dimension_name_gets_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = validate(tmp_path, spec([{"name": "a", "op": "relu"}], {"x": {"shape": ["Seq", 6]}}), capsys)
    assert err.splitlines() == [
        f"{tmp_path / 'bad.yaml'}:6:7: error: shape[0]: received 'Seq', expected a positive integer or a lowercase "
        "identifier such as seq or height (a named dynamic dimension)", "1 error found"]


def test_report_states_how_flops_count_symbols(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dyn.yaml"
    path.write_text(spec(SEQ_LAYERS))
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "d      conv1d           [batch, ceil(seq/2), 4]" in out
    claim, served = out.rstrip().split(" Served sizes: ")  # valid windows' smallest sizes (test_report_claims)
    assert served == "seq >= 3 (layer 'p', max_pool1d); a shorter input is refused."
    assert claim.endswith("Named dynamic dimensions (seq): a plain figure on a row whose output has them is "
                                 "per position (multiply by the run-time sizes of the named dimensions in its output); "
                                 "a cost that grows otherwise (attention's scores with the square of the length, a layer "
                                 "that reduces one away) is a formula in them (a long one under the table), as is the "
                                 "total.")


def test_csv_cannot_fill_a_named_dimension(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "d.csv").write_text("a,b,y\n1,2,0\n")
    document = yaml.safe_load(spec([c1(input="x"), {"name": "g", "op": "global_avg_pool"}]))
    document |= {"loss": {"kind": "sparse_softmax_cross_entropy", "logits": "y", "labels": "label"},
                 "optimizers": {"all": {"kind": "sgd", "learning_rate": 0.1}},
                 "data": {"train": {"csv": "d.csv", "features": {"x": ["a", "b"]}, "labels": {"label": "y"}}},
                 "train": {"batch_size": 1, "epochs": 1}, "checkpoint": {"dir": "ckpt"}}
    path = tmp_path / "dyn.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    assert main(["train", str(path)]) == 1
    line = capsys.readouterr().err.splitlines()[0]
    assert line == (f"{path}:31:7: error: data.train ({tmp_path / 'd.csv'}): 'x' has the named dynamic dimension "
                    "'seq', which only npz data sources fill (one length per file: pad the arrays to it)")


def test_a_dimension_named_as_a_python_keyword_is_evaluated() -> None:
    """`in` is a valid symbol (validate and report take it); the expressions of it parse with each symbol prefixed
    (kinds/dims.py `expression`), which the size search of export's parity check and `specgen diff` share."""
    from specgen.kinds import dims
    from specgen.runtime import sample_sizes

    text = ("specgen: 1\nname: kw\ninputs: {x: {shape: [in, 4]}}\noutputs: {y: c}\nlayers:\n"
            "  - {name: c, op: conv1d, filters: 2, kernel: 3, strides: 2, padding: valid}\n")
    ir = build_ir(load_spec_text(text, "kw.yaml"))
    assert sample_sizes.lower_bounds(ir) == {"in": (3, "c")}  # ceil((in-2)/2) >= 1 from in = 3 on
    assert sample_sizes.evaluate("ceil((in-2)/2)", {"in": 9}) == 4 and sample_sizes.period("ceil(ceil(if/2)/3)") == 6
    assert dims.names("ceil((in-2)/2)+floor(if/3)") == ["in", "if"]
