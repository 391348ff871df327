"""Review of round 12 (/tmp/rt12/review.md), findings 1 and 4.

- 1: a version folder written by the previous specgen for a model that is not a classifier holds `labels` (its
  targets) in sample.npz beside `"logits": null`. The server refused the version (`specgen serve` exited 1 on a
  repository that served before); now it ignores them and gates on relative error, as that export did. Every
  refusal of the variant itself at load, a classifier's sample without labels included, serves the float32
  reference beside it rather than refusing the version.
- 4: the constant-input rule applies only to a variant with calibrated ranges (static int8), and a variant
  written with --force past it (variant.json `constant_inputs`) is served where the other gates pass.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_precision_verify import WEIGHT, X, _classifier, _quantized

from specgen.runtime.precision import REGISTRY, fp16, int8
from specgen.runtime.precision.base import Calibration
from specgen.runtime.precision.gates import Timing
from specgen.runtime.precision.sidecars import sample_bytes
from specgen.runtime.precision.verify import (
    INFO_FILE,
    SAMPLE_FILE,
    VariantFileError,
    VariantInfo,
    check_version,
    info_bytes,
    read_info,
    version_files,
)

FASTER = Timing((2e-4,) * 9, (1e-4,) * 9)  # the variant twice as fast in every round: the speed gate passes anywhere
CONFIG = ('name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
          'input [{name: "x", data_type: TYPE_FP32, dims: [64]}]\noutput [{name: "logits", data_type: TYPE_FP32, dims: [4]}]\n')
TARGETS = (X @ WEIGHT).astype(np.float32)  # a regression's targets, as the previous export recorded them


def _old_layout(folder: Path, variant: bytes, budget: float) -> Path:
    """A version folder as the previous export wrote it for a model that is not a classifier: `"logits": null`
    and the targets in sample.npz as `labels` (its version_files wrote `sample_bytes(inputs, loss.labels)`)."""
    info = VariantInfo(precision="int8", verified=False, verified_on=None, reason="forced", budget=budget, logits=None,
                       inputs=("x",), model_sha256=hashlib.sha256(variant).hexdigest())
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(variant)
    (folder / "model.fp32.onnx").write_bytes(_classifier(WEIGHT))
    (folder / SAMPLE_FILE).write_bytes(sample_bytes({"x": X}, TARGETS))
    (folder / INFO_FILE).write_bytes(info_bytes(info))
    return folder


# --- 1: an older export's sample ---------------------------------------------------------------------------------------

def test_an_older_regressions_sample_is_gated_on_relative_error(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The old code raised `variant.json: 'logits' is null, but sample.npz holds a classifier's 'labels'...`."""
    monkeypatch.setattr("specgen.runtime.precision.verify.paired_timing", lambda *args, **kwargs: FASTER)
    folder = _old_layout(tmp_path / "1", _quantized(WEIGHT), budget=100.0)
    with np.load(folder / SAMPLE_FILE) as sample:
        assert sample.files == ["input_0", "labels"]
    with caplog.at_level(logging.DEBUG, logger="specgen.serve"):
        check = check_version(folder, provider="cpu")
    assert check is not None and check.passed and check.serve.name == "model.onnx"
    assert "relative_error_percent" in check.report["accuracy"]
    notes = [r.fields["line"] for r in caplog.records if getattr(r, "fields", {}).get("event") == "sample_labels_ignored"]
    assert notes == [f"{folder}/sample.npz: holds 'labels' and variant.json's 'logits' is null (a sample written by an "
                     "older specgen, whose labels are the targets of a model that is not a classifier): gated on "
                     "relative error, as at export"]
    assert [r.levelno for r in caplog.records if getattr(r, "fields", {}).get("event") == "sample_labels_ignored"] == [
        logging.DEBUG]


def test_an_older_sample_whose_variant_fails_serves_the_float32_model(tmp_path: Path) -> None:
    """Through the server's load: the version is served (its float32 reference), where the old code refused it."""
    from specgen.serve.model_config import parse_config
    from specgen.serve.models import load_version

    folder = _old_layout(tmp_path / "m" / "1", _quantized(WEIGHT), budget=0.0)  # any error is over a budget of 0
    model = load_version("m", 1, folder / "model.onnx", parse_config(CONFIG), provider="cpu")
    assert model.path == folder / "model.fp32.onnx"


def test_a_classifiers_sample_without_labels_serves_the_float32_model(tmp_path: Path) -> None:
    from specgen.serve.model_config import parse_config
    from specgen.serve.models import load_version

    variant = _quantized(WEIGHT)
    info = VariantInfo(precision="int8", verified=False, verified_on=None, reason="forced", budget=1.0,
                       logits="logits", inputs=("x",), model_sha256=hashlib.sha256(variant).hexdigest())
    folder = tmp_path / "m" / "1"
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(variant)
    for name, data in version_files(info, _classifier(WEIGHT), {"x": X}, None).items():  # no labels recorded
        (folder / name).write_bytes(data)
    assert load_version("m", 1, folder / "model.onnx", parse_config(CONFIG), provider="cpu").path == folder / "model.fp32.onnx"


# --- 4: the constant-input rule where it matters, and --force past it ---------------------------------------------------

def _masked() -> bytes:
    """x, mask [batch, 64] -> logits = (x * mask) @ WEIGHT: a float mask, all 1.0 in the sample below."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "mask"], ["xm"]), helper.make_node("MatMul", ["xm", "w"], ["logits"])], "masked",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 64]) for n in ("x", "mask")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(WEIGHT.astype(np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


SAMPLE = {"x": X, "mask": np.ones_like(X)}
LABELS = np.argmax(X @ WEIGHT, axis=1).astype(np.int64)


def _masked_version(folder: Path, variant: bytes, precision: str = "int8", constant: tuple[str, ...] = ()) -> Path:
    info = VariantInfo(precision=precision, verified=False, verified_on=None, reason="forced", budget=1.0,
                       logits="logits", inputs=("x", "mask"), model_sha256=hashlib.sha256(variant).hexdigest(),
                       constant_inputs=constant)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(variant)
    for name, data in version_files(info, _masked(), SAMPLE, LABELS).items():
        (folder / name).write_bytes(data)
    return folder


@pytest.fixture(scope="module")
def static() -> bytes:
    """The masked model in static int8, calibrated on the sample (the mask's range: the one value 1.0)."""
    return int8.DEF.convert(_masked(), Calibration("minmax", SAMPLE))[0]


def test_a_static_variant_with_a_constant_input_is_refused_unless_forced(tmp_path: Path, static: bytes,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The old code refused it either way: --force could not get it served."""
    monkeypatch.setattr("specgen.runtime.precision.verify.paired_timing", lambda *args, **kwargs: FASTER)
    folder = _masked_version(tmp_path / "1", static)
    refused = check_version(folder, provider="cpu")
    assert refused is not None and not refused.passed
    assert refused.report["refused"] == (
        f"sample.npz cannot test the variant: input 'mask' is the same in all {len(X)} examples, so int8's calibrated "
        "range for it is that one value (every other value saturates to it), and the gate never sees another")
    forced = check_version(_masked_version(tmp_path / "2", static, constant=("mask",)), provider="cpu")
    assert forced is not None and forced.passed and forced.serve.name == "model.onnx"
    accuracy, speed = forced.report["accuracy"], forced.report["speed"]
    assert forced.line == (
        f"{tmp_path}/2/model.onnx: int8 variant verified on CPUExecutionProvider: {accuracy['lost_points']:.2f} points "
        f"of accuracy lost on {len(X)} examples (budget 1), 2.00x float32's speed ({speed['confidence']:.0%} interval "
        "2.00-2.00x); input 'mask' taken as constant in use (variant.json 'constant_inputs', --force at export)")


@pytest.mark.parametrize("precision", ["fp16", "dynamic int8"])
def test_a_constant_input_is_no_reason_to_refuse_a_variant_without_calibrated_ranges(
        tmp_path: Path, precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """fp16 and dynamic int8 round another value of the mask as they round 1.0: the old code refused them for it."""
    monkeypatch.setattr("specgen.runtime.precision.verify.paired_timing", lambda *args, **kwargs: FASTER)
    if precision == "fp16":
        variant = fp16.DEF.convert(_masked(), Calibration())[0]
        # the CPU has no float16 MatMul kernel (its check refuses that first): played as a provider that has
        monkeypatch.setitem(REGISTRY, "fp16", replace(fp16.DEF, check=lambda *args: {}))
    else:
        variant = _quantized_masked()
    check = check_version(_masked_version(tmp_path / "1", variant, precision.split()[-1]), provider="cpu")
    assert check is not None and check.passed, check.line


def _quantized_masked() -> bytes:
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "float.onnx", Path(folder) / "int8.onnx"
        source.write_bytes(_masked())
        quantize_dynamic(source, target, weight_type=QuantType.QInt8)
        return target.read_bytes()


def test_only_a_static_variant_has_calibrated_ranges(static: bytes) -> None:
    assert (int8.calibrated_ranges(static), int8.calibrated_ranges(_quantized_masked()),
            int8.calibrated_ranges(fp16.DEF.convert(_masked(), Calibration())[0])) == (True, False, False)


def test_constant_inputs_in_variant_json(tmp_path: Path) -> None:
    """Written only where --force passed the rule (other variant.json files unchanged); read back; a name that is
    not an input is one line."""
    base = VariantInfo(precision="int8", verified=False, verified_on=None, reason="forced", budget=1.0, logits=None,
                       inputs=("x", "mask"), model_sha256="0" * 64)
    assert "constant_inputs" not in json.loads(info_bytes(base))
    forced = VariantInfo(**{**base.__dict__, "constant_inputs": ("mask",)})
    (tmp_path / INFO_FILE).write_bytes(info_bytes(forced))
    assert read_info(tmp_path) == forced
    raw: dict[str, Any] = json.loads(info_bytes(forced))
    (tmp_path / INFO_FILE).write_text(json.dumps({**raw, "constant_inputs": ["image"]}))
    with pytest.raises(VariantFileError) as caught:
        read_info(tmp_path)
    assert str(caught.value) == (f"{tmp_path}/variant.json: 'constant_inputs' is ['image']; expected names of "
                                 "'inputs', ['x', 'mask'], as `specgen export --force` writes it")

