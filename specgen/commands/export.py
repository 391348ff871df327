"""`specgen export SPEC -o DIR [--checkpoint RUN] [--triton] [--precision P]`: model.onnx with trained weights."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from specgen.commands.common import InputPath, OutputFolder, positive_int
from specgen.extras import need
from specgen.paths import shown

if TYPE_CHECKING:
    from specgen.pipeline import Built
    from specgen.tracking.base import Record


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", action=InputPath)
    parser.add_argument("--checkpoint", action=InputPath,
                        help="a run folder (its latest checkpoint), a ckpt-* folder or a checkpoint prefix; "
                        "without it, the spec's checkpoint.restore plan applied to fresh variables")
    parser.add_argument("-o", "--output", action=OutputFolder, required=True, help="folder for model.onnx and export.json")
    parser.add_argument("--triton", action="store_true", help="also write a Triton model repository there")
    parser.add_argument("--precision", choices=["fp32", "fp16", "int8"],
                        help="also write model.fp16.onnx / model.int8.onnx, gated on accuracy and speed "
                             "(default: the spec's export.onnx.precision, fp32)")
    parser.add_argument("--calibration", type=positive_int, metavar="N",
                        help="eval examples for int8 calibration (default 512, or the whole eval set when smaller)")
    parser.add_argument("--force", action="store_true",
                        help="write the variant even when it is not faster, or unverified where its provider "
                             "cannot check it here (fp16 without CUDA): `specgen serve` then gates it at load")
    parser.add_argument("--provider", choices=["cpu", "cuda"], default="cpu",
                        help="where the variant is checked and timed: the provider that will run it")
    parser.add_argument("--register", metavar="NAME", help="register the export as a version of the MLflow model "
                        "NAME, in the tracking store of the --checkpoint run (docs/tracking.md)")
    parser.add_argument("--alias", metavar="ALIAS", help="the alias --register points at the new version "
                        "(default: candidate)")


def run(args: argparse.Namespace) -> int:
    from specgen.spec.load import load_spec

    _check_calibration(args.precision, args.calibration)
    tracked = _tracked_run(args)  # --register/--alias mistakes: one line, before the spec is read
    need("specgen export", "tensorflow", "onnxruntime")  # both at once, not one traceback after the other
    loaded = load_spec(args.spec)
    from specgen.pipeline import build

    built = build(loaded)  # spec -> IR -> generated code, once for the command
    from specgen.runtime.commands.export import export  # imports TensorFlow: only now
    from specgen.runtime.precision.step import PrecisionRequest

    request = PrecisionRequest(args.precision, args.calibration, args.force, args.provider)
    report = export(built, args.checkpoint, args.output, triton=args.triton, precision=request)
    nodes = sum(report["nodes"].values())
    if report["restore"] is None:
        print(f"exported {shown(args.output / 'model.onnx')}: {nodes} nodes, opset {report['opset']}, "
              f"{report['weights']} weights from {shown(report['checkpoint'])}")
    else:  # no --checkpoint: say where each variable came from, as `specgen train` does for a restore
        restore = report["restore"]
        left = [p for p, o in restore["variables"].items() if o == "initialized"]
        print(f"exported {shown(args.output / 'model.onnx')}: {nodes} nodes, opset {report['opset']}, "
              f"weights from the restore plan of {shown(args.spec)}")
        print(f"restore: {restore['summary']}" + (f"; initialized: {', '.join(left)}" if left else ""))
    from specgen.report.export_lines import export_lines

    print("\n".join(export_lines(report)))
    if report["precision"]["precision"] != "fp32":
        from specgen.report.export_lines import variant_lines

        print("\n".join(variant_lines(shown(args.output), report["precision"])))
    if "triton" in report:
        print(f"triton model repository: {shown(report['triton'])}, version {report['triton_version']}")
    if tracked is not None:  # the run is tracked: its MLflow run gets the export (and a registered version)
        from specgen.tracking import DEFAULT_ALIAS
        from specgen.tracking.export import Registration, log_export

        folder, record = tracked
        registration = Registration(args.register, args.alias or DEFAULT_ALIAS) if args.register else None
        log_export(loaded, record, args.output, report, registration, lambda: _report_page(built, folder))
    return 0


def _check_calibration(precision: str | None, calibration: int | None) -> None:
    """--calibration with a precision that is not calibrated: refused (exit 2), not dropped without a word."""
    from specgen.kinds.precisions import calibration_mistake

    problem = calibration_mistake(precision, calibration)
    if problem is not None:
        from specgen.errors import UsageError

        raise UsageError("export", problem)


def _tracked_run(args: argparse.Namespace) -> tuple[Path, Record] | None:
    """The --checkpoint run folder that records an MLflow run, with its record (mlflow.json), or None; refuses
    --register/--alias that cannot work, a damaged mlflow.json among them (without --register, it is one warning
    and the export is not logged: tracking never stops a command)."""
    from specgen.diagnostics import Diagnostic, SpecError
    from specgen.errors import UsageError
    from specgen.tracking import RUN_FILE, check_alias, check_model_name, run_folder_of
    from specgen.tracking.base import RecordError, read_record

    if args.alias is not None and args.register is None:  # a command-line mistake: exit 2, as argparse's
        raise UsageError("export", f"--alias {args.alias}: --alias names the alias of --register's version; expected "
                         "--register NAME with it")
    if args.register is not None:
        check_model_name(args.register)
        check_alias(args.alias if args.alias is not None else "candidate")
    folder = run_folder_of(args.checkpoint) if args.checkpoint is not None else None
    if args.register is not None and folder is None:
        where = f"{shown(args.checkpoint)} has no {RUN_FILE}" if args.checkpoint else "there is no --checkpoint run"
        raise SpecError([Diagnostic(f"--register {args.register}", None, f"{where}: only a run trained with MLflow "
                                    "tracking (--track mlflow:URI or train.tracking.mlflow) can be registered")])
    if folder is None:
        return None
    try:
        record = read_record(folder)
    except RecordError as exc:
        if args.register is not None:
            raise SpecError([Diagnostic(f"--register {args.register}", None, f"the MLflow run to register is "
                                        f"unknown: {exc}")]) from None
        print(f"specgen export: warning: {exc}; the export is not logged to MLflow", file=sys.stderr)
        return None
    return (folder, record) if record is not None else None


def _report_page(built: Built, run_folder: Path) -> str | None:
    """`specgen report SPEC --html --run RUN`'s page for the tracked run, or None (with a note) without matplotlib."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("note: the HTML report is not logged to MLflow: it needs matplotlib (the pictures extra)", file=sys.stderr)
        return None
    from specgen.report.html import page

    return page(built.loaded, built.ir, shown(built.loaded.path), run_folder)
