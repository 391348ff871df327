"""`specgen report` and `specgen report --html` show the precision a spec trains and exports at; the HTML page of
a real mixed_float16 run adds the loss scale it logged and the int8 variant its export wrote, with the gates'
figures as `specgen export` printed them."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pytest

from specgen.cli import main
from specgen.paths import shown
from specgen.report.export_lines import variant_lines

ROOT = Path(__file__).resolve().parents[1]
# A budget of 10 points: 20 steps train a barely fitted model, and the gate itself is not under test here.
EXPORT = "export:\n  onnx: {precision: int8, calibration_examples: 64, budget: 10}\n"
KEPT = ("variables, optimizer slots, EMA shadows and checkpoints float32; normalizations, softmax and losses in "
        "float32")
SCALE_ROW = ("loss scale             dynamic: starts at 32768, halved on an update with non-finite gradients "
             "(the update is skipped), doubled after 2000 finite ones in a row")
EXPORT_ROW = ("export.onnx.precision  int8: model.int8.onnx beside model.onnx, calibrated (minmax) on 64 eval "
              "examples, kept only if it loses at most 10 points of accuracy (classifiers) or 10% relative error, and "
              "runs faster than float32")


def mlp_spec(folder: Path, precision: str, jit: bool = False) -> Path:
    """digits_mlp.yaml at `precision`, exporting int8, its run in folder/run."""
    text = (ROOT / "examples/specs/digits_mlp.yaml").read_text().replace("../data/digits.npz",
                                                                         str(ROOT / "examples/data/digits.npz"))
    text = text.replace("  seed: 1\n", f"  seed: 1\n  precision: {precision}\n  jit_compile: {str(jit).lower()}\n")
    spec = folder / f"mlp_{precision}.yaml"
    spec.write_text(text + EXPORT + "checkpoint: {dir: run, every_steps: 1000}\n")
    return spec


def test_text_report_shows_the_precision_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(mlp_spec(tmp_path, "mixed_bfloat16", jit=True))]) == 0
    blocks = capsys.readouterr().out.split("\n\n")
    section = next(b for b in blocks if b.startswith("setting ")).splitlines()
    assert section == [
        "setting                value",
        "---------------------  " + "-" * (len(EXPORT_ROW) - 23),
        f"train.precision        mixed_bfloat16: bfloat16 compute; {KEPT}",
        "train.jit_compile      true: the training step compiled with XLA",
        EXPORT_ROW]


def test_a_float32_spec_has_no_precision_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(ROOT / "examples/specs/digits_mlp.yaml")]) == 0
    assert "train.precision" not in capsys.readouterr().out


def test_the_loss_scale_figures_match_the_trainers() -> None:
    from specgen.report import precision as shown_here
    from specgen.runtime.lib import precision as runtime

    assert (shown_here.INITIAL_SCALE, shown_here.GROWTH_INTERVAL) == (runtime.INITIAL_SCALE, runtime.GROWTH_INTERVAL)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    tmp = tmp_path_factory.mktemp("report_precision")
    spec, run = mlp_spec(tmp, "mixed_float16"), tmp / "run"
    assert main(["train", str(spec), "--steps", "20", "--quiet"]) == 0
    # --force: whether int8 beats float32 on this tiny MLP depends on the CPU; the page shows either verdict.
    assert main(["export", str(spec), "--checkpoint", str(run), "-o", str(run / "export"), "--force"]) == 0
    # An earlier export's variant left in the folder (export.json describes only the last export).
    shutil.copyfile(run / "export" / "model.onnx", run / "export" / "model.fp16.onnx")
    out = tmp / "report.html"
    assert main(["report", str(spec), "--html", "--run", str(run), "-o", str(out)]) == 0
    return out.read_text(), run


def test_the_page_shows_the_runs_loss_scale(page: tuple[str, Path]) -> None:
    text = page[0]
    section = text[text.index('<section id="precision">'):text.index('<section id="flops">')]
    assert html.escape(f"train.precision        mixed_float16: float16 compute with dynamic loss scaling; {KEPT}") in section
    assert html.escape(SCALE_ROW) in section and html.escape(EXPORT_ROW) in section
    # 20 finite updates from 2**15: no skip, no growth (that takes 2000).
    assert "run&#x27;s loss scale       32768 at step 20, 0 updates skipped so far" in section


def test_the_page_shows_the_variants_and_their_gates(page: tuple[str, Path]) -> None:
    text, run = page
    report = json.loads((run / "export" / "export.json").read_text())
    folder = shown(run / "export")
    assert report["precision"]["precision"] == "int8"
    lines = ["precision variants: model.onnx (fp32), model.fp16.onnx, model.int8.onnx",
             *variant_lines(folder, report["precision"]),
             "model.fp16.onnx: no gate figures (export.json describes the last export, int8); "
             "run specgen export --precision fp16 again to gate it"]
    assert lines[1].startswith(f"int8: wrote {folder}/model.int8.onnx (")
    assert html.escape("\n".join(lines)) in text


def test_the_text_report_takes_the_runs_scalars(page: tuple[str, Path]) -> None:
    """report()'s `logged` (what a text `specgen report --run RUN` would pass): the same row as the page."""
    from specgen.ir.resolve import build_ir
    from specgen.pictures.curves import read_run
    from specgen.report import report
    from specgen.spec.load import load_spec

    run = page[1]
    spec = run.parent / "mlp_mixed_float16.yaml"
    text = report(build_ir(load_spec(spec)), str(spec), None, None, read_run(run))
    assert "\nrun's loss scale       32768 at step 20, 0 updates skipped so far\n" in text
