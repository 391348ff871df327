"""`specgen infer MODEL --input X.npz [--output Y.npz] [--labels A]`: run an exported model with onnxruntime."""

from __future__ import annotations

import argparse

from specgen.commands.common import InputPath, OutputFile, positive_int
from specgen.extras import need


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", action=InputPath)
    parser.add_argument("--input", action=InputPath, required=True, help=".npz with one array per model input")
    parser.add_argument("--output", action=OutputFile, help="write the outputs to this .npz")
    parser.add_argument("--provider", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--feed", action="append", default=[], metavar="INPUT=ARRAY", type=feed,
                        help="take a model input from a differently named array (repeatable)")
    parser.add_argument("--labels", metavar="ARRAY", help="integer labels in the .npz: print the accuracy")
    parser.add_argument("--chunk", type=positive_int, metavar="ROWS",
                        help="rows per onnxruntime run (default: up to 1024 rows whose inputs and outputs fit 16 MiB)")


def feed(text: str) -> str:
    """argparse type of --feed: INPUT=ARRAY with both names given (whether INPUT is the model's is known later)."""
    name, sep, array = text.partition("=")
    if not (sep and name and array):
        raise argparse.ArgumentTypeError(f"expected INPUT=ARRAY (a model input and an array of the .npz), "
                                         f"received {text!r}")
    return text


def run(args: argparse.Namespace) -> int:
    from specgen.commands.common import require_regular

    require_regular(args.model, "the model")  # onnxruntime would wait forever on a FIFO
    need("specgen infer", "onnxruntime")  # one line naming the extra, not an ImportError's traceback
    from specgen.runtime.commands.infer import infer  # onnxruntime: only now

    return infer(args.model, args.input, args.output, args.provider, args.feed, args.labels, chunk=args.chunk)
