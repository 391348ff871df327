"""`specgen export SPEC -o DIR [--checkpoint RUN] [--triton] [--precision P]`: model.onnx with trained weights."""

from __future__ import annotations

import argparse
from pathlib import Path

from specgen.commands.common import positive_int
from specgen.paths import shown

NAME = "export"
ORDER = 90
HELP = "write model.onnx with trained weights from a checkpoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", type=Path)
    parser.add_argument("--checkpoint", type=Path,
                        help="a run folder (its latest checkpoint), a ckpt-* folder or a checkpoint prefix; "
                        "without it, the spec's checkpoint.restore plan applied to fresh variables")
    parser.add_argument("-o", "--output", type=Path, required=True, help="folder for model.onnx and export.json")
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


def run(args: argparse.Namespace) -> int:
    from specgen.spec.load import load_spec

    loaded = load_spec(args.spec)
    from specgen.runtime.commands.export import export  # imports TensorFlow: only now
    from specgen.runtime.precision.step import PrecisionRequest

    request = PrecisionRequest(args.precision, args.calibration, args.force, args.provider)
    report = export(loaded, args.checkpoint, args.output, triton=args.triton, precision=request)
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
        print(f"triton model repository: {shown(report['triton'])}")
    return 0
