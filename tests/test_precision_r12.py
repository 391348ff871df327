"""Round 12 of the precision checks: a gate sample that cannot test a variant (constant, too few distinct rows, one
class) is refused at export and at load; a sample missing the labels its variant.json calls for is refused at load;
fp16's kernel check refuses a graph that computes nothing in float16; export.json records the digests of the files
its figures are about and the report says when a file changed; the advice after a refusal is a step that works."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_precision_verify import WEIGHT, X, _classifier, _quantized

from specgen.diagnostics import SpecError
from specgen.runtime.precision import fp16, int8
from specgen.runtime.precision.base import Calibration, PrecisionRefusal
from specgen.runtime.precision.gates import accuracy_gate
from specgen.runtime.precision.step import PrecisionRequest, _checked, make_variant
from specgen.runtime.precision.verify import (
    INFO_FILE,
    SAMPLE_FILE,
    VariantInfo,
    check_version,
    version_files,
)
from specgen.runtime.predictor import EXPORT_PROVIDERS, InputError, Predictor, has_cuda_driver

ROOT = Path(__file__).resolve().parents[1]
LABELS = np.argmax(X @ WEIGHT, axis=1).astype(np.int64)


# --- F1: a sample that cannot test the variant ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlp() -> dict[str, Any]:
    """digits_mlp with random weights, its float32 graph and 64 eval rows, as the export's precision step gets them."""
    from specgen.ir.resolve import build_ir
    from specgen.render.files import render_files
    from specgen.runtime.onnx_export import with_weights
    from specgen.runtime.parity import random_weights
    from specgen.spec.load import load_spec

    loaded = load_spec(ROOT / "examples/specs/digits_mlp.yaml")
    ir = build_ir(loaded)
    built = onnx.load_from_string(render_files(ir)["model.onnx"])
    source = with_weights(built, ir, random_weights(ir, np.random.default_rng(0))).SerializeToString()
    with np.load(ROOT / "examples/data/digits.npz") as data:
        image, labels = data["x_test"][:64].astype(np.float32), data["y_test"][:64].astype(np.int64)
    return {"loaded": loaded, "ir": ir, "source": source, "image": image, "labels": labels}


HINT = ("use an eval set of varied examples (data.eval), or pass --force to write it unverified (`specgen serve` runs "
        "its gates at load, on the provider it gets); nothing was written")
CONSTANT_HINT = ("use an eval set of varied examples (data.eval), or, if 'image' always holds that value (a mask, a "
                 "flag), pass --force to write it unverified (`specgen serve` runs its gates at load, on the provider "
                 "it gets, all but this rule); nothing was written")
CONSTANT = ("input 'image' is the same in all 64 examples, so int8's calibrated range for it is that one value (every "
            "other value saturates to it), and the gate never sees another")
FEW = ("it holds 3 distinct examples (of 64); the gate needs at least 11, since on fewer a variant that changes one "
       "answer in four passes unseen more than 5% of the time")
ONE_CLASS = ("its labels are all class 3 (64 examples), so a variant that answers 3 everywhere would lose no accuracy; "
             "the accuracy gate needs at least two classes")


def _degenerate(mlp: dict[str, Any], kind: str) -> tuple[np.ndarray, np.ndarray]:
    image, labels = mlp["image"], mlp["labels"]
    if kind == "constant":
        return np.full_like(image, 0.5), labels
    if kind == "few":
        return image[np.arange(64) % 3], labels[np.arange(64) % 3]
    return image, np.full_like(labels, 3)


@pytest.mark.parametrize(("kind", "why", "hint"), [("constant", CONSTANT, CONSTANT_HINT), ("few", FEW, HINT),
                                                  ("one class", ONE_CLASS, HINT)])
def test_export_refuses_an_eval_set_that_cannot_test_the_variant(mlp: dict[str, Any], kind: str, why: str,
                                                                  hint: str) -> None:
    """The old code gated on it and passed: 0.00 points lost on one constant image (int8 lost 41 on real ones).
    (fp16 on the CPU is refused by its kernel step first; the check is the same code for every precision.)"""
    precision = "int8"
    image, labels = _degenerate(mlp, kind)
    with pytest.raises(SpecError) as caught:
        make_variant(mlp["loaded"], mlp["ir"], mlp["source"], {"image": image}, labels, "eval set",
                     PrecisionRequest(precision))
    assert str(caught.value.diagnostics[0]) == (
        f"{mlp['loaded'].display}: error: --precision {precision}: {precision}: the eval set cannot test the "
        f"variant: {why}; {hint}")


def test_forced_on_such_an_eval_set_the_variant_is_unverified_and_records_its_digests(mlp: dict[str, Any]) -> None:
    image, labels = _degenerate(mlp, "constant")
    variant = make_variant(mlp["loaded"], mlp["ir"], mlp["source"], {"image": image}, labels, "eval set",
                           PrecisionRequest("int8", force=True))
    assert variant is not None
    reason = f"int8: the eval set cannot test the variant: {CONSTANT}; written unverified with --force"
    assert (variant.report["verified"], variant.report["unverified"], variant.report["speed"]) == (False, reason, None)
    assert (variant.info.verified, variant.info.reason, variant.info.constant_inputs) == (False, reason, ("image",))
    assert variant.report["sha256"] == hashlib.sha256(variant.model_bytes).hexdigest()
    assert variant.report["fp32_sha256"] == hashlib.sha256(mlp["source"]).hexdigest()


def _version(folder: Path, inputs: np.ndarray, labels: np.ndarray | None, logits: str | None = "logits",
             variant: bytes | None = None) -> Path:
    """A version folder of the dynamic int8 classifier (tests/test_precision_verify.py) or `variant`, unverified,
    on `inputs`."""
    variant = variant or _quantized(WEIGHT)
    info = VariantInfo(precision="int8", verified=False, verified_on=None, reason="forced", budget=1.0, logits=logits,
                       inputs=("x",), model_sha256=hashlib.sha256(variant).hexdigest())
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(variant)
    for name, data in version_files(info, _classifier(WEIGHT), {"x": inputs}, labels).items():
        (folder / name).write_bytes(data)
    return folder


def test_the_server_refuses_a_variant_its_sample_cannot_test(tmp_path: Path) -> None:
    constant = np.repeat(X[:1], len(X), axis=0)
    static = int8.DEF.convert(_classifier(WEIGHT), Calibration("minmax", {"x": X}))[0]  # calibrated ranges
    check = check_version(_version(tmp_path / "1", constant, LABELS[:1].repeat(len(X)), variant=static),
                          provider="cpu")
    assert check is not None and not check.passed and check.serve.name == "model.fp32.onnx"
    assert check.line == (f"{tmp_path}/1/model.onnx: int8 variant refused on CPUExecutionProvider: sample.npz cannot "
                          f"test the variant: input 'x' is the same in all {len(X)} examples, so int8's calibrated "
                          "range for it is that one value (every other value saturates to it), and the gate never sees "
                          f"another; serving {tmp_path}/1/model.fp32.onnx (float32) instead")
    varied = check_version(_version(tmp_path / "2", X, LABELS), provider="cpu")
    assert varied is not None and "cannot test" not in varied.line  # the same variant on a varied sample is gated


# --- F2: a sample without what its gate needs -------------------------------------------------------------------------

def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def test_a_classifiers_sample_without_labels_is_refused_at_load(tmp_path: Path) -> None:
    """The old code gated it on relative error, in percent, against a budget meant as points; the variant is refused
    and its float32 reference served (tests/test_precision_r12b.py: the same through the server's load)."""
    folder = _version(tmp_path / "1", X, LABELS)
    (folder / SAMPLE_FILE).write_bytes(_npz(input_0=X))
    check = check_version(folder, provider="cpu")
    assert check is not None and not check.passed and check.serve.name == "model.fp32.onnx"
    assert check.line == (f"{folder}/model.onnx: int8 variant refused on CPUExecutionProvider: sample.npz cannot test "
                          "the variant: it holds no 'labels' for the classifier output 'logits' named in variant.json, "
                          "so the accuracy gate, in points, cannot run; run specgen export --triton again to record "
                          f"them; serving {folder}/model.fp32.onnx (float32) instead")


def test_logits_null_beside_labels_ignores_them(tmp_path: Path) -> None:
    """An older export wrote every model's targets as `labels` (tests/test_precision_r12b.py: a regression's)."""
    folder = _version(tmp_path / "1", X, LABELS)
    info = json.loads((folder / INFO_FILE).read_text())
    (folder / INFO_FILE).write_text(json.dumps({**info, "logits": None}))
    check = check_version(folder, provider="cpu")
    assert check is not None and "relative_error_percent" in check.report["accuracy"]


def test_a_model_that_is_not_a_classifier_records_no_labels(tmp_path: Path) -> None:
    """Its eval set's targets are read by no gate: a sample holds labels exactly for a classifier."""
    folder = _version(tmp_path / "1", X, LABELS.astype(np.float32), logits=None)
    with np.load(folder / SAMPLE_FILE) as sample:
        assert sample.files == ["input_0"]
    check = check_version(folder, provider="cpu")
    assert check is not None and "relative_error_percent" in check.report["accuracy"]  # gated on its outputs


def test_the_relative_error_refusal_says_percent() -> None:
    with pytest.raises(PrecisionRefusal) as refused:
        accuracy_gate("fp16", 0.5, {"y": np.array([[3.0, 4.0]])}, {"y": np.array([[3.0, 4.05]])}, None, None)
    assert str(refused.value) == ("fp16 has 1.00% relative error against float32 (largest over outputs, 1 examples); "
                                  "the budget is 0.5% (export.onnx.budget): over by 0.50%")


# --- F3: fp16 with no float16 compute ---------------------------------------------------------------------------------

def _layer_norm() -> bytes:
    """x [batch, 10] -> LayerNormalization: fp16 keeps it in float32, so its variant is Casts around it."""
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], name="ln", axis=-1)], "ln",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 10])],
        [helper.make_tensor_value_info("ln", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(np.ones(10, np.float32), "g"), numpy_helper.from_array(np.zeros(10, np.float32), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


NO_FLOAT16 = ("fp16: the graph has no float16 compute node on the cpu provider (no node but Casts and data movement "
              "reads or writes float16; in float32: {}): it would run as float32")


def test_fp16_kernel_check_refuses_a_graph_that_computes_nothing_in_float16() -> None:
    variant, _ = fp16.DEF.convert(_layer_norm(), Calibration())
    assert [n.op_type for n in onnx.load_from_string(variant).graph.node] == ["Cast", "Cast", "LayerNormalization",
                                                                            "Cast", "Cast"]
    with pytest.raises(PrecisionRefusal) as refused:
        fp16.DEF.check(variant, "cpu")
    assert str(refused.value) == NO_FLOAT16.format("LayerNormalization 'ln'")


def test_fp16_export_refuses_it_even_with_force() -> None:
    """A verdict on the graph, not "the CPU cannot check it": --force does not write it (as int8's)."""
    with pytest.raises(PrecisionRefusal) as refused:
        _checked(fp16.DEF, _layer_norm(), fp16.DEF.convert(_layer_norm(), Calibration())[0],
                 PrecisionRequest("fp16", force=True))
    assert str(refused.value) == NO_FLOAT16.format("LayerNormalization 'ln'")


def test_a_float32_graph_labelled_fp16_is_refused_at_load(tmp_path: Path) -> None:
    folder = _version(tmp_path / "1", X, LABELS)
    plain = _classifier(WEIGHT, heavy=1)  # float32 compute only
    (folder / "model.onnx").write_bytes(plain)
    info = json.loads((folder / INFO_FILE).read_text())
    (folder / INFO_FILE).write_text(json.dumps({**info, "precision": "fp16",
                                                "model_sha256": hashlib.sha256(plain).hexdigest()}))
    check = check_version(folder, provider="cpu")
    assert check is not None and not check.passed
    assert check.report["refused"] == NO_FLOAT16.format("MatMul 'y', MatMul 'h0', MatMul 'm0', Tanh 'h1', MatMul 's' ...")


# --- F4: export.json's digests, read by the report ---------------------------------------------------------------------

def _export_folder(folder: Path) -> dict[str, Any]:
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"float32")
    (folder / "model.int8.onnx").write_bytes(b"int8 variant")
    return {"precision": "int8", "file": "model.int8.onnx", "bytes": 12, "fp32_bytes": 7,
            "sha256": hashlib.sha256(b"int8 variant").hexdigest(), "fp32_sha256": hashlib.sha256(b"float32").hexdigest(),
            "integer_kernels": 2, "accuracy": {"lost_points": 0.0, "accuracy": 0.9, "fp32_accuracy": 0.9, "budget": 1},
            "speed": {"variant_ms": 1.0, "fp32_ms": 2.0, "batch": 8, "provider": "CPUExecutionProvider", "speedup": 2.0},
            "verified": True}


def test_the_report_shows_no_figures_for_a_variant_file_replaced_since_export_json(tmp_path: Path) -> None:
    from specgen.report.precision import variants_lines

    described = _export_folder(tmp_path / "export")
    fresh = variants_lines(tmp_path / "export", "export", {"precision": described})
    assert fresh[1] == "int8: wrote export/model.int8.onnx (12 bytes, float32 7), 2 integer kernels after onnxruntime's fusion"
    (tmp_path / "export" / "model.int8.onnx").write_bytes(b"an fp16 graph")  # the old report showed int8's figures
    digest = hashlib.sha256(b"an fp16 graph").hexdigest()
    assert variants_lines(tmp_path / "export", "export", {"precision": described}) == [
        "precision variants: model.onnx (fp32), model.int8.onnx",
        f"model.int8.onnx: no gate figures: model.int8.onnx changed since export.json (its SHA-256 is {digest}; "
        f"export.json records {described['sha256']}); run specgen export --precision int8 again to gate it"]


def test_the_report_shows_no_figures_when_model_onnx_changed(tmp_path: Path) -> None:
    from specgen.report.precision import variants_lines

    described = _export_folder(tmp_path / "export")
    (tmp_path / "export" / "model.onnx").write_bytes(b"another float32")
    old = {k: v for k, v in described.items() if not k.endswith("sha256")}  # an export.json from before: sizes
    assert variants_lines(tmp_path / "export", "export", {"precision": old})[1] == (
        "model.int8.onnx: no gate figures: model.onnx changed since export.json (15 bytes; export.json records 7); run "
        "specgen export --precision int8 again to gate it")


def test_a_truncated_export_json_says_at_once(tmp_path: Path) -> None:
    from specgen.pictures.export_json import read_export

    (tmp_path / "export.json").write_text('{"precision": "int8", "file": "mod')
    with pytest.raises(SpecError) as caught:
        read_export(tmp_path / "export.json")
    assert str(caught.value.diagnostics[0]) == (
        f"{tmp_path}/export.json: error: malformed export.json: the whole file is text that is not JSON (Unterminated "
        "string starting at line 1 column 31); expected JSON text as `specgen export` writes it")


# --- F5: advice that works --------------------------------------------------------------------------------------------

def test_fp16_without_cuda_in_onnxruntime_advises_force_not_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old advice, `use --provider cpu`, is refused in turn for fp16 (no float16 kernels there)."""
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    with pytest.raises(PrecisionRefusal) as refused:
        _checked(fp16.DEF, _classifier(WEIGHT), _classifier(WEIGHT), PrecisionRequest("fp16", provider="cuda"))
    assert str(refused.value) == (
        "the CUDA provider is not in this onnxruntime (available: CPUExecutionProvider); install onnxruntime-gpu; the "
        "CPU cannot verify fp16, which is made for the CUDA provider; pass --force to write it unverified (`specgen "
        "serve` runs its gates at load, on the provider it gets)")
    with pytest.raises(InputError) as caught:  # int8 runs on the CPU: there the advice stands
        Predictor(_classifier(WEIGHT), "cuda", choices=EXPORT_PROVIDERS)
    assert str(caught.value).endswith("install onnxruntime-gpu, or use --provider cpu")


@pytest.mark.skipif(has_cuda_driver(), reason="CUDA may start here")
def test_fp16_where_cuda_cannot_start_advises_force_not_the_cpu() -> None:
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("this onnxruntime has no CUDA provider (the test above covers that message)")
    with pytest.raises(PrecisionRefusal) as refused:
        _checked(fp16.DEF, _classifier(WEIGHT), _classifier(WEIGHT), PrecisionRequest("fp16", provider="cuda"))
    assert str(refused.value) == (
        "the CUDA provider could not start (CUDA or cuDNN libraries missing?); onnxruntime fell back to the CPU; the "
        "CPU cannot verify fp16, which is made for the CUDA provider; pass --force to write it unverified (`specgen "
        "serve` runs its gates at load, on the provider it gets)")


def test_fp16_has_no_constant_input_rule(mlp: dict[str, Any]) -> None:
    """fp16 calibrates nothing: a constant image is refused for what it leaves of the sample (one distinct example),
    not for its constancy (the old reason). int8's rule: tests/test_precision_r12b.py."""
    image, labels = _degenerate(mlp, "constant")
    variant = make_variant(mlp["loaded"], mlp["ir"], mlp["source"], {"image": image}, labels, "eval set",
                           PrecisionRequest("fp16", force=True))
    assert variant is not None and variant.info.constant_inputs == ()
    assert variant.report["unverified"] == (
        "fp16: the eval set cannot test the variant: it holds 1 distinct example (of 64); the gate needs at least 11, "
        "since on fewer a variant that changes one answer in four passes unseen more than 5% of the time; written "
        "unverified with --force; fp16: 2 node(s) have no float16 kernel on the cpu provider (onnxruntime would cast "
        "them back to float32): Gemm 'hidden___preact', Gemm 'logits'; fp16 pays off with --provider cuda; written "
        "unverified with --force")
