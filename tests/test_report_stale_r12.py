"""`specgen report --html --run`: no figure of export.json about a file that is not the one measured (verify rt12,
new problem 4: after model.onnx was replaced the page withheld the variant's gates but still showed the export's
parity and accuracy for the replaced file).

One rule (specgen/report/export_check.py) for every figure the page shows from export.json: parity and accuracy
(model.onnx), a variant's sizes and gates (the variant and model.onnx). A file whose SHA-256 (an older export.json's
size) is not the recorded one has its figures withheld in one line naming it; where nothing is recorded (an fp32
export.json written before `model_sha256`) the figures stand under a line saying they cannot be checked.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "specs" / "digits_mlp.yaml"
PARITY = "parity: max abs diff 2.5e-07 between onnxruntime and TensorFlow on 64 examples (limit 1e-4)"
ACCURACY = "eval accuracy: onnxruntime 0.9375, TensorFlow 0.9375"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def events() -> bytes:
    """One train/loss scalar in TFRecord framing (TensorBoard's writer): the page needs a run's curves."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.types_pb2 import DT_FLOAT
    from tensorboard.summary.writer.record_writer import RecordWriter

    plugin = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    value = Summary.Value(tag="loss", metadata=plugin, tensor=TensorProto(dtype=DT_FLOAT, float_val=[0.5]))
    buffer = io.BytesIO()
    RecordWriter(buffer).write(Event(step=1, summary=Summary(value=[value])).SerializeToString())
    return buffer.getvalue()


def variant(fp32: bytes, int8: bytes, digests: bool = True) -> dict[str, Any]:
    described = {"precision": "int8", "file": "model.int8.onnx", "bytes": len(int8), "fp32_bytes": len(fp32),
                 "integer_kernels": 3, "accuracy": {"lost_points": 0.5, "accuracy": 0.9325, "fp32_accuracy": 0.9375,
                                                    "budget": 1.0},
                 "speed": {"variant_ms": 0.5, "fp32_ms": 1.0, "batch": 32, "provider": "cpu", "speedup": 2.0}}
    return described | ({"sha256": sha(int8), "fp32_sha256": sha(fp32)} if digests else {})


def report_run(here: Path, capsys: pytest.CaptureFixture[str], report: dict[str, Any],
               files: dict[str, bytes]) -> tuple[int, str, str]:
    """`specgen report --html --run run` of a run whose export folder holds `report` as export.json and `files`."""
    (here / "run" / "tensorboard" / "train").mkdir(parents=True)
    (here / "run" / "tensorboard" / "train" / "events.out.tfevents.1").write_bytes(events())
    (here / "run" / "export").mkdir()
    (here / "run" / "export" / "export.json").write_text(json.dumps(report))
    for name, data in files.items():
        (here / "run" / "export" / name).write_bytes(data)
    return run_cli(["report", str(SPEC), "--html", "--run", "run", "-o", "r.html"], capsys, here)


def export_page(here: Path, capsys: pytest.CaptureFixture[str], report: dict[str, Any],
                files: dict[str, bytes]) -> list[str]:
    """The export section's lines of the page."""
    code, out, err = report_run(here, capsys, report, files)
    assert (code, err, out.startswith("wrote r.html (")) == (0, "", True), err
    return section(here / "r.html")


def section(page: Path) -> list[str]:
    text = page.read_text()
    body = text[text.index('<section id="export">'):]
    return html.unescape(body[body.index("<pre>") + 5:body.index("</pre>")]).split("\n")


FIGURES = {"parity_max_abs_diff": 2.5e-07, "parity_scaled_diff": 2.5e-07, "compared_examples": 64,
           "onnxruntime_accuracy": 0.9375, "tensorflow_accuracy": 0.9375}


def test_a_replaced_fp32_model_onnx_has_no_parity_or_accuracy(tmp_path: Path, capsys) -> None:
    report = FIGURES | {"model_sha256": sha(b"float32"), "precision": {"precision": "fp32"}}
    assert export_page(tmp_path, capsys, report, {"model.onnx": b"another model"}) == [
        "run/export/export.json:",
        f"model.onnx: no parity or accuracy figures: model.onnx changed since export.json (its SHA-256 is "
        f"{sha(b'another model')}; export.json records {sha(b'float32')}); run specgen export again to measure it",
        "precision variants: model.onnx (fp32)"]


def test_the_same_file_shows_its_figures(tmp_path: Path, capsys) -> None:
    report = FIGURES | {"model_sha256": sha(b"float32"), "precision": {"precision": "fp32"}}
    assert export_page(tmp_path, capsys, report, {"model.onnx": b"float32"}) == [
        "run/export/export.json:", PARITY, ACCURACY, "precision variants: model.onnx (fp32)"]


def test_a_replaced_model_onnx_withholds_every_figure_about_it(tmp_path: Path, capsys) -> None:
    """An export.json of before model_sha256: the variant entry's fp32_sha256 describes model.onnx for both groups."""
    report = FIGURES | {"precision": variant(b"float32", b"int8")}
    moved = f"model.onnx changed since export.json (its SHA-256 is {sha(b'other')}; export.json records {sha(b'float32')})"
    assert export_page(tmp_path, capsys, report, {"model.onnx": b"other", "model.int8.onnx": b"int8"}) == [
        "run/export/export.json:",
        f"model.onnx: no parity or accuracy figures: {moved}; run specgen export again to measure it",
        "precision variants: model.onnx (fp32), model.int8.onnx",
        f"model.int8.onnx: no gate figures: {moved}; run specgen export --precision int8 again to gate it"]


def test_a_replaced_variant_keeps_the_parity_of_model_onnx(tmp_path: Path, capsys) -> None:
    report = FIGURES | {"model_sha256": sha(b"float32"), "precision": variant(b"float32", b"int8")}
    lines = export_page(tmp_path, capsys, report, {"model.onnx": b"float32", "model.int8.onnx": b"fp16"})
    assert lines == [
        "run/export/export.json:", PARITY, ACCURACY, "precision variants: model.onnx (fp32), model.int8.onnx",
        f"model.int8.onnx: no gate figures: model.int8.onnx changed since export.json (its SHA-256 is {sha(b'fp16')}; "
        f"export.json records {sha(b'int8')}); run specgen export --precision int8 again to gate it"]


def test_an_older_export_json_compares_sizes(tmp_path: Path, capsys) -> None:
    report = FIGURES | {"precision": variant(b"float32", b"int8", digests=False)}
    moved = "model.onnx changed since export.json (12 bytes; export.json records 7)"
    assert export_page(tmp_path, capsys, report, {"model.onnx": b"more float32", "model.int8.onnx": b"int8"}) == [
        "run/export/export.json:",
        f"model.onnx: no parity or accuracy figures: {moved}; run specgen export again to measure it",
        "precision variants: model.onnx (fp32), model.int8.onnx",
        f"model.int8.onnx: no gate figures: {moved}; run specgen export --precision int8 again to gate it"]


def test_an_older_fp32_export_json_says_its_figures_cannot_be_checked(tmp_path: Path, capsys) -> None:
    report = {k: v for k, v in FIGURES.items() if k != "onnxruntime_accuracy"} | {"precision": {"precision": "fp32"}}
    assert export_page(tmp_path, capsys, report, {"model.onnx": b"anything"}) == [
        "run/export/export.json:",
        "model.onnx: the parity figures below cannot be checked against it: export.json, written by an older "
        "specgen, records neither its SHA-256 nor its size; run specgen export again to record them",
        PARITY, "precision variants: model.onnx (fp32)"]


def test_a_removed_model_onnx_has_no_figures(tmp_path: Path, capsys) -> None:
    report = FIGURES | {"precision": {"precision": "fp32"}}  # nothing recorded: a missing file is still told
    assert export_page(tmp_path, capsys, report, {}) == [
        "run/export/export.json:",
        "model.onnx: no parity or accuracy figures: model.onnx cannot be read (cannot read the file: No such file or "
        "directory), so it is not the file export.json describes; run specgen export again to measure it",
        "precision variants: model.onnx (fp32)"]


@pytest.mark.parametrize(("report", "why"), [
    (FIGURES | {"model_sha256": "ABC"}, "'model_sha256' is 'ABC' (str); expected a SHA-256 in 64 lowercase hex "
                                        "digits, as `specgen export` writes it"),
    (FIGURES | {"model_sha256": sha(b"a"), "precision": variant(b"b", b"int8")},
     f"'precision.fp32_sha256' is '{sha(b'b')}' (str); expected model_sha256's value ({sha(b'a')}): both are "
     "model.onnx's SHA-256, as `specgen export` writes it"),
    (FIGURES | {"precision": variant(b"a", b"b") | {"file": "../../secret"}},  # never a file outside the folder
     "'precision.file' is '../../secret' (str); expected the name of a file in the export folder other than "
     "model.onnx, such as model.int8.onnx, as `specgen export` writes it"),
])
def test_a_malformed_digest_is_one_line(tmp_path: Path, capsys, report: dict[str, Any], why: str) -> None:
    code, out, err = report_run(tmp_path, capsys, report, {"model.onnx": b"float32"})
    assert not (tmp_path / "r.html").exists()
    assert (code, out, err.splitlines()) == (1, "", [f"run/export/export.json: error: malformed export.json: {why}",
                                                     "1 error found"])


@pytest.mark.slow
def test_a_real_export_records_model_onnx_and_the_page_withholds_after_a_replacement(tmp_path: Path, capsys) -> None:
    """The verifier's case: `specgen export --precision int8`, then model.onnx replaced by another model."""
    spec = tmp_path / "mlp.yaml"
    spec.write_text(SPEC.read_text().replace("../data/digits.npz", str(ROOT / "examples/data/digits.npz"))
                    + "checkpoint: {dir: run, every_steps: 1000}\n")
    assert run_cli(["train", str(spec), "--steps", "5", "--quiet"], capsys, tmp_path)[0] == 0
    code, _, err = run_cli(["export", str(spec), "--checkpoint", "run", "-o", "run/export", "--precision", "int8",
                            "--force"], capsys, tmp_path)
    assert code == 0, err
    folder = tmp_path / "run" / "export"
    report = json.loads((folder / "export.json").read_text())
    measured = sha((folder / "model.onnx").read_bytes())
    assert report["model_sha256"] == report["precision"]["fp32_sha256"] == measured
    code, _, err = run_cli(["report", str(spec), "--html", "--run", "run", "-o", "r.html"], capsys, tmp_path)
    assert (code, err) == (0, "") and section(tmp_path / "r.html")[1].startswith("parity: max abs diff ")
    shutil.copyfile(folder / "model.int8.onnx", folder / "model.onnx")  # another model in its place
    code, _, err = run_cli(["report", str(spec), "--html", "--run", "run", "-o", "r.html"], capsys, tmp_path)
    moved = (f"model.onnx changed since export.json (its SHA-256 is {sha((folder / 'model.onnx').read_bytes())}; "
             f"export.json records {measured})")
    assert (code, err) == (0, "")
    assert section(tmp_path / "r.html") == [
        "run/export/export.json:",
        f"model.onnx: no parity or accuracy figures: {moved}; run specgen export again to measure it",
        "precision variants: model.onnx (fp32), model.int8.onnx",
        f"model.int8.onnx: no gate figures: {moved}; run specgen export --precision int8 again to gate it"]
