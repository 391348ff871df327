"""A precision variant's gates at load (runtime/precision/verify.py), on the CPU, with graphs built here.

The end-to-end path (`specgen export --precision fp16 --force --triton` on a trained model, then the check
the server runs) is in tests/test_export_precision.py; here each verdict and each damaged file has a test.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from specgen.runtime.precision import fp16, int8
from specgen.runtime.precision.base import Calibration, PrecisionRefusal
from specgen.runtime.precision.verify import (
    INFO_FILE,
    REFERENCE_FILE,
    SAMPLE_BYTES,
    SAMPLE_FILE,
    VariantFileError,
    VariantInfo,
    check_version,
    config_parameters,
    needs_check,
    read_info,
    sample_rows,
    version_files,
)
from specgen.runtime.predictor import CPU, CUDA

ROWS = 16


def _classifier(weight: np.ndarray, heavy: int = 0) -> bytes:
    """x [batch, 64] -> logits = x @ weight, plus `heavy` chained 256-wide MatMuls times zero (slow, adds 0)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(weight.astype(np.float32), "w"), numpy_helper.from_array(np.zeros(1, np.float32), "zero")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    if heavy:
        inits.append(numpy_helper.from_array((rng.standard_normal((64, 256)) / 8).astype(np.float32), "a"))
        inits.append(numpy_helper.from_array((rng.standard_normal((256, 256)) / 16).astype(np.float32), "b"))
        inits.append(numpy_helper.from_array(np.ones((256, 4), np.float32), "c"))
        nodes.append(helper.make_node("MatMul", ["x", "a"], ["h0"]))
        for k in range(heavy):
            nodes += [helper.make_node("MatMul", [f"h{k}", "b"], [f"m{k}"]), helper.make_node("Tanh", [f"m{k}"], [f"h{k + 1}"])]
        nodes += [helper.make_node("MatMul", [f"h{heavy}", "c"], ["s"]), helper.make_node("Mul", ["s", "zero"], ["z"]),
                  helper.make_node("Add", ["y", "z"], ["logits"])]
    else:
        nodes.append(helper.make_node("Identity", ["y"], ["logits"]))
    graph = helper.make_graph(nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


def _quantized(weight: np.ndarray) -> bytes:
    """`_classifier(weight)` with onnxruntime's dynamic int8 quantization: one integer kernel
    (DynamicQuantizeMatMul), so the int8 kernel gate has something to count."""
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "float.onnx", Path(folder) / "int8.onnx"
        source.write_bytes(_classifier(weight))
        quantize_dynamic(source, target, weight_type=QuantType.QInt8)
        return target.read_bytes()


WEIGHT = np.random.default_rng(1).standard_normal((64, 4))
# Rows whose top two float32 logits differ by at least MARGIN, so int8's error cannot flip a label on any CPU.
# Dynamic quantization rounds each of the 64 weights (step max|w| / 127, about 0.02 here) and activations (step
# range / 255, about 0.03) to half a step: a logit's error is a sum of 64 such terms, a standard deviation near
# 0.08 for unit-scale inputs and weights, so a difference of two logits has one near 0.11; MARGIN is 9 of those.
# (Drawn at random, the 16 rows had a margin of 0.11 where the int8 logits were 0.22 off: right only by luck,
# and MLAS rounds differently with and without AVX-512 VNNI.)
MARGIN = 1.0


def _rows(count: int) -> np.ndarray:
    drawn = np.random.default_rng(2).standard_normal((64 * count, 64)).astype(np.float32)
    top = np.sort(drawn @ WEIGHT, axis=1)
    return drawn[top[:, -1] - top[:, -2] >= MARGIN][:count]


X = _rows(ROWS)
LABELS = np.argmax(X @ WEIGHT, axis=1).astype(np.int64)  # the float32 model is right on every example


def _write(folder: Path, variant: bytes, reference: bytes, precision: str = "int8", verified: bool = False,
           verified_on: str | None = None, labels: np.ndarray | None = LABELS) -> Path:
    info = VariantInfo(precision=precision, verified=verified, verified_on=verified_on,
                       reason=None if verified else "no CUDA here", budget=1.0, logits="logits", inputs=("x",),
                       model_sha256=hashlib.sha256(variant).hexdigest(),
                       vnni=int8.has_vnni() if precision == "int8" else None)  # as the export records it
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(variant)
    for name, data in version_files(info, reference, {"x": X}, labels).items():
        (folder / name).write_bytes(data)
    return folder


def test_files_and_parameters_written_beside_a_variant(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", _classifier(WEIGHT), _classifier(WEIGHT, heavy=2))
    assert sorted(p.name for p in folder.iterdir()) == sorted(["model.onnx", REFERENCE_FILE, SAMPLE_FILE, INFO_FILE])
    info = read_info(folder)
    assert info is not None and (info.precision, info.verified, info.inputs, info.logits) == ("int8", False, ("x",), "logits")
    with np.load(folder / SAMPLE_FILE) as sample:
        assert sorted(sample.files) == ["input_0", "labels"]
        assert np.array_equal(sample["input_0"], X) and np.array_equal(sample["labels"], LABELS)
    assert config_parameters(info) == {"specgen_precision": "int8", "specgen_verified": "false"}
    assert needs_check(info, CPU) and needs_check(info, CUDA)
    verified = VariantInfo(**{**info.__dict__, "verified": True, "verified_on": CUDA})
    assert not needs_check(verified, CUDA) and needs_check(verified, CPU)  # measured on another provider: again


def test_the_sample_is_bounded() -> None:
    images = np.zeros((600, 224, 224, 3), np.float32)[:, :1]  # shapes only: 600 examples of 2,688 bytes
    assert sample_rows({"x": images}, None) == 512  # SAMPLE_EXAMPLES
    big = np.broadcast_to(np.zeros(1, np.float32), (100, 224 * 224 * 3))  # 602,112 bytes per example, no memory
    assert sample_rows({"x": big}, np.zeros(100, np.int64)) == SAMPLE_BYTES // (224 * 224 * 3 * 4 + 8) == 55
    huge = np.broadcast_to(np.zeros(1, np.float32), (2, SAMPLE_BYTES // 4 + 1))
    with pytest.raises(PrecisionRefusal) as caught:
        version_files(VariantInfo("fp16", False, None, "r", 1.0, None, ("x",), "0" * 64), b"", {"x": huge}, None)
    assert str(caught.value) == (f"one example is {SAMPLE_BYTES + 4:,} bytes; the sample recorded for the gates at "
                                 f"load holds at most {SAMPLE_BYTES:,}")


def test_a_faster_variant_within_budget_is_served(tmp_path: Path) -> None:
    # The "variant" computes the same logits without the reference's dead work: the gates' pass path, on figures
    # this machine cannot make ambiguous (the reference runs 24 extra 256x256 products per row).
    folder = _write(tmp_path / "1", _quantized(WEIGHT), _classifier(WEIGHT, heavy=24))
    check = check_version(folder, provider="cpu")
    assert check is not None and check.passed and check.serve == folder / "model.onnx" and check.provider == CPU
    assert check.report["accuracy"]["lost_points"] == 0.0 and check.report["speed"]["speedup"] > 1
    assert check.report["kernels"]["integer_kernels"] == 1
    assert check.line.startswith(f"{folder / 'model.onnx'}: int8 variant verified on CPUExecutionProvider: 0.00 points "
                                 f"of accuracy lost on {ROWS} examples (budget 1), ")
    assert check.predictor is not None and np.array_equal(check.predictor({"x": X})["logits"].argmax(1), LABELS)


def test_a_variant_over_budget_is_refused_for_the_float32_model(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", _quantized(-WEIGHT), _classifier(WEIGHT))  # wrong on every example
    check = check_version(folder, provider="cpu")
    assert check is not None and not check.passed and check.serve == folder / REFERENCE_FILE
    assert check.line == (f"{folder / 'model.onnx'}: int8 variant refused on CPUExecutionProvider: int8 loses 100.00 "
                          f"points of accuracy against float32 (float32 1.0000, int8 0.0000 on {ROWS} examples); the "
                          f"budget is 1 (export.onnx.budget): over by 99.00; serving {folder / REFERENCE_FILE} "
                          "(float32) instead")
    assert check.predictor is not None and check.predictor.provider == CPU


def test_fp16_on_the_cpu_is_refused_by_its_kernels(tmp_path: Path) -> None:
    reference = _classifier(WEIGHT)
    variant, _ = fp16.convert(reference, Calibration())
    folder = _write(tmp_path / "1", variant, reference, precision="fp16")
    check = check_version(folder, provider="cpu")
    assert check is not None and not check.passed
    assert check.line == (f"{folder / 'model.onnx'}: fp16 variant refused on CPUExecutionProvider: fp16: 1 node(s) "
                          "have no float16 kernel on the cpu provider (onnxruntime would cast them back to float32): "
                          "MatMul 'y'; fp16 pays off with --provider cuda; serving "
                          f"{folder / REFERENCE_FILE} (float32) instead")


def test_verified_on_this_provider_is_not_gated_again(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", _classifier(-WEIGHT), _classifier(WEIGHT), verified=True, verified_on=CPU)
    check = check_version(folder, provider="cpu")
    assert check is not None and check.passed and check.report == {}
    assert check.line == f"{folder / 'model.onnx'}: int8 variant, verified on CPUExecutionProvider by the export"


def test_a_float32_model_and_a_stale_marker_are_not_variants(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.onnx").write_bytes(_classifier(WEIGHT))
    assert check_version(tmp_path / "1", provider="cpu") is None
    folder = _write(tmp_path / "2", _classifier(-WEIGHT), _classifier(WEIGHT))
    (folder / "model.onnx").write_bytes(_classifier(WEIGHT))  # a later float32 export into the same folder
    assert check_version(folder, provider="cpu") is None


def test_a_variant_onnxruntime_cannot_load_is_refused(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", b"not a model", _classifier(WEIGHT))
    check = check_version(folder, provider="cpu")
    assert check is not None and not check.passed and check.serve == folder / REFERENCE_FILE
    assert check.line.startswith(f"{folder / 'model.onnx'}: int8 variant refused on CPUExecutionProvider: onnxruntime "
                                 "cannot load the variant: ")
    assert check.line.endswith(f"; serving {folder / REFERENCE_FILE} (float32) instead") and "\n" not in check.line


def _edited_info(folder: Path, **changes: object) -> None:
    raw = json.loads((folder / INFO_FILE).read_text())
    (folder / INFO_FILE).write_text(json.dumps({**raw, **changes}))


@pytest.mark.parametrize(("change", "message"), [
    ({"budget": "1"}, "'budget' is '1' (str); expected a finite number, as `specgen export` writes it"),
    ({"verified": 1}, "'verified' is 1 (int); expected true or false, as `specgen export` writes it"),
    ({"precision": "fp8"}, "'precision' is 'fp8'; expected one of fp16, int8"),
    ({"inputs": []}, "'inputs' is []; expected a non-empty list of input names"),
    ({"model_sha256": "x" * 64}, f"'model_sha256' is {'x' * 64!r}; expected 64 lowercase hex digits"),
])
def test_a_damaged_variant_json_is_one_line(tmp_path: Path, change: dict[str, object], message: str) -> None:
    folder = _write(tmp_path / "1", _classifier(WEIGHT), _classifier(WEIGHT))
    _edited_info(folder, **change)
    with pytest.raises(VariantFileError) as caught:
        check_version(folder, provider="cpu")
    assert str(caught.value) == f"{folder / INFO_FILE}: {message}"


def test_variant_json_that_is_not_json_or_too_large(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", _classifier(WEIGHT), _classifier(WEIGHT))
    (folder / INFO_FILE).write_bytes(b"\xff{")
    with pytest.raises(VariantFileError, match=r"variant\.json: not JSON \(UnicodeDecodeError\); expected the object"):
        read_info(folder)
    (folder / INFO_FILE).write_bytes(b" " * (64 * 1024 + 1))
    with pytest.raises(VariantFileError, match=r"variant\.json: more than 65,536 bytes; expected a few hundred"):
        read_info(folder)


def test_a_damaged_or_oversized_sample_is_one_line(tmp_path: Path) -> None:
    folder = _write(tmp_path / "1", _classifier(WEIGHT), _classifier(WEIGHT, heavy=1))
    buffer = io.BytesIO()
    np.savez(buffer, other=X)
    (folder / SAMPLE_FILE).write_bytes(buffer.getvalue())
    with pytest.raises(VariantFileError) as caught:
        check_version(folder, provider="cpu")
    assert str(caught.value) == f"{folder / SAMPLE_FILE}: has arrays ['other']; expected ['input_0'] (and 'labels')"
    # a member that declares more than the bound is refused from the zip directory, before anything is read
    with zipfile.ZipFile(folder / SAMPLE_FILE, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("input_0.npy", "w", force_zip64=True) as member:
            for _ in range(SAMPLE_BYTES // 2**20 + 1):
                member.write(bytes(2**20))
    with pytest.raises(VariantFileError) as caught:
        check_version(folder, provider="cpu")
    assert str(caught.value) == (f"{folder / SAMPLE_FILE}: holds {SAMPLE_BYTES + 2**20:,} bytes uncompressed; "
                                 f"expected at most {SAMPLE_BYTES:,}")
    (folder / SAMPLE_FILE).write_bytes(b"PK\x03\x04 cut")
    with pytest.raises(VariantFileError, match=r"sample\.npz: not a readable sample \("):
        check_version(folder, provider="cpu")


def test_an_unverified_variant_in_export_json_is_read_and_printed(tmp_path: Path) -> None:
    """`specgen report --html --run` reads export.json as untrusted input: an unverified variant has no speed
    figures, and says why; a checked one without them is still refused."""
    from specgen.diagnostics import SpecError
    from specgen.pictures.export_json import read_export
    from specgen.report.export_lines import variant_lines

    precision = {"precision": "fp16", "file": "model.fp16.onnx", "bytes": 35883, "fp32_bytes": 69883,
                 "kept_float32": [], "verified": False, "unverified": "no float16 kernels here; written unverified "
                 "with --force", "speed": None,
                 "accuracy": {"lost_points": 0.0, "accuracy": 0.975, "fp32_accuracy": 0.975, "budget": 1.0,
                              "provider": "CPUExecutionProvider"}}
    report = {"parity_max_abs_diff": 3e-06, "parity_scaled_diff": 3e-07, "compared_examples": 360,
              "precision": precision}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(report))
    assert read_export(path)["precision"]["verified"] is False
    assert variant_lines("out", precision) == [
        "fp16: wrote out/model.fp16.onnx (35,883 bytes, float32 69,883)",
        "fp16 accuracy: 0.9750 vs float32 0.9750 (0.00 points lost, budget 1, on CPUExecutionProvider)",
        "warning: fp16 is unverified: no float16 kernels here; written unverified with --force; `specgen serve` runs "
        "its kernel, accuracy and speed gates at load and serves the float32 model where it fails"]
    del precision["unverified"]
    path.write_text(json.dumps(report))
    with pytest.raises(SpecError) as caught:
        read_export(path)
    assert str(caught.value).endswith("malformed export.json: 'precision.speed' is null; expected the speed gate's "
                                      "figures (or 'unverified' saying why there are none), as `specgen export` "
                                      "writes it")
