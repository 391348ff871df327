"""`specgen graph SPEC [-o FILE] [--format svg|html|dot|mermaid] [--depth N]`: the model graph as a picture.

Never imports TensorFlow: the picture is drawn from the IR alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specgen.commands.common import InputPath, OutputFile
from specgen.errors import UsageError

SUFFIXES = {".svg": "svg", ".html": "html", ".htm": "html", ".dot": "dot", ".gv": "dot", ".mmd": "mermaid",
            ".mermaid": "mermaid"}


class GraphUsageError(UsageError):
    """`-o` and `--format` that disagree, or an output name whose format cannot be told (exit 2)."""

    def __init__(self, message: str):
        super().__init__("graph", message)


def output_format(output: Path | None, fmt: str | None) -> str:
    """The format to write: `--format`, else the output's suffix, else svg; a disagreement is an error."""
    if output is None:
        return fmt or "svg"
    by_suffix = SUFFIXES.get(output.suffix.lower())
    if fmt and by_suffix and fmt != by_suffix:
        raise GraphUsageError(f"-o {output} ends in '{output.suffix}' (format {by_suffix}) but --format is {fmt}; "
                              "expected them to agree: drop --format or change the file name")
    if not fmt and not by_suffix:
        raise GraphUsageError(f"cannot tell the format of -o {output} from '{output.suffix or '(no suffix)'}'; "
                              f"expected a name ending in {', '.join(SUFFIXES)}, or --format svg|html|dot|mermaid")
    return fmt or by_suffix or "svg"


def depth(text: str) -> int:
    """argparse type of --depth: a whole number of block levels, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of block levels (0 or more), got {text!r}")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from specgen.atomic import write_atomic
    from specgen.ir.resolve import build_ir
    from specgen.paths import shown
    from specgen.pictures.graph import render
    from specgen.spec.load import load_spec

    fmt = output_format(args.output, args.format)  # before the spec: a usage mistake costs nothing
    ir = build_ir(load_spec(args.spec))
    picture = render(ir, fmt, args.depth)
    if args.output is None:
        sys.stdout.write(picture)  # cli.py refuses a closed stdout before any command runs
        return 0
    write_atomic(args.output, picture, fsync=False)
    print(f"wrote {shown(args.output)} ({fmt}: {ir.layer_count} layers)")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", action=InputPath)
    parser.add_argument("-o", "--output", action=OutputFile, help="write here (default: stdout); the suffix picks the format")
    parser.add_argument("--format", choices=["svg", "html", "dot", "mermaid"],
                        help="svg (default), html (a page holding the SVG), dot (Graphviz) or mermaid")
    parser.add_argument("--depth", type=depth, metavar="N", help="draw blocks nested deeper than N levels as one "
                        "box each (0: every top-level block is one box); default: every layer")
