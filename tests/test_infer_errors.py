"""`specgen infer`'s mistakes are one line in the user's terms (specgen/runtime/commands/infer*.py).

A missing MODEL and a file that is no ONNX model (the .npz given first by mistake, a text file, an empty one) used to
pass onnxruntime's text through (`[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : ...`); a misspelt --feed array got
a Python list repr and the advice to use --feed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from cli_helpers import run_cli  # noqa: E402

EXPECTED = "expected an .onnx model written by specgen export"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """text.npz (ids_test, x_test) and id.onnx: a model whose one input 'ids' is its output 'y'."""
    np.savez(tmp_path / "text.npz", ids_test=np.zeros((2, 3), np.int32), x_test=np.zeros((2, 4), np.float32))
    h, t = onnx.helper, onnx.TensorProto
    graph = h.make_graph([h.make_node("Identity", ["ids"], ["y"])], "g", [h.make_tensor_value_info("ids", t.INT32, ["N", 3])],
                         [h.make_tensor_value_info("y", t.INT32, ["N", 3])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "id.onnx")
    return tmp_path


def lines(argv: list[str], capsys: pytest.CaptureFixture[str], cwd: Path) -> list[str]:
    code, _, err = run_cli(["infer", *argv, "--provider", "cpu"], capsys, cwd)
    assert code == 1
    return err.splitlines()


@pytest.mark.parametrize(("name", "content", "line"), [
    ("missing.onnx", None, f"missing.onnx: error: no such file; {EXPECTED}"),
    ("text.npz", None, "text.npz: error: not an ONNX model (it is an .npz archive); MODEL comes first, then --input: "
                      "specgen infer MODEL.onnx --input DATA.npz"),
    ("a.npy", b"\x93NUMPY\x01\x00", "a.npy: error: not an ONNX model (it is an .npy array); MODEL comes first, then "
                                    "--input: specgen infer MODEL.onnx --input DATA.npz"),
    ("m.keras", b"PK\x03\x04rest", f"m.keras: error: not an ONNX model (it is a zip archive); {EXPECTED}"),
    ("t.onnx", b"ir_version: 10\n", f"t.onnx: error: not an ONNX model (it is a text file); {EXPECTED}"),
    ("e.onnx", b"", f"e.onnx: error: not an ONNX model (it is empty); {EXPECTED}"),
    ("r.onnx", bytes(range(0x80, 0x100)) * 2, "r.onnx: error: not an ONNX model (onnxruntime cannot parse it: a damaged "
                                              f"model or another format); {EXPECTED}"),
])
def test_a_model_that_is_missing_or_no_onnx_is_one_line(
        folder: Path, name: str, content: bytes | None, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    if content is not None:  # None: as the fixture left it (missing.onnx absent, text.npz the data)
        (folder / name).write_bytes(content)
    assert lines([name, "--input", "text.npz"], capsys, folder) == [line, "1 error found"]


def test_a_misspelt_feed_array_gets_a_suggestion(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lines(["id.onnx", "--input", "text.npz", "--feed", "ids=ids_tset"], capsys, folder) == [
        "text.npz: error: --feed ids=ids_tset: no array 'ids_tset' in the .npz (its arrays: ids_test, x_test); "
        "did you mean 'ids_test'?", "1 error found"]


def test_an_input_without_its_array_is_told_to_use_feed(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lines(["id.onnx", "--input", "text.npz"], capsys, folder) == [
        "text.npz: error: no array 'ids' for model input 'ids' in the .npz (its arrays: ids_test, x_test); pick one "
        "with --feed ids=ARRAY", "1 error found"]


def test_a_feed_to_no_model_input_names_the_inputs(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lines(["id.onnx", "--input", "text.npz", "--feed", "ds=ids_test"], capsys, folder) == [
        "--feed ds=ids_test: error: the model has no input 'ds' (its inputs: 'ids'); expected INPUT=ARRAY with INPUT "
        "one of them", "1 error found"]


def test_the_feed_that_fits_runs(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["infer", "id.onnx", "--input", "text.npz", "--feed", "ids=ids_test", "--provider", "cpu"],
                             capsys, folder)
    assert (code, err) == (0, "") and "output y: shape [2, 3], dtype int32" in out
