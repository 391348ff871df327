"""`specgen infer MODEL --input X.npz [--output Y.npz] [--labels A]`: run an exported model with onnxruntime."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "infer"
ORDER = 100
HELP = "run an exported model with onnxruntime on arrays from an .npz"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path)
    parser.add_argument("--input", type=Path, required=True, help=".npz with one array per model input")
    parser.add_argument("--output", type=Path, help="write the outputs to this .npz")
    parser.add_argument("--provider", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--feed", action="append", default=[], metavar="INPUT=ARRAY",
                        help="take a model input from a differently named array (repeatable)")
    parser.add_argument("--labels", metavar="ARRAY", help="integer labels in the .npz: print the accuracy")


def run(args: argparse.Namespace) -> int:
    from specgen.runtime.commands.infer import infer

    return infer(args.model, args.input, args.output, args.provider, args.feed, args.labels)
