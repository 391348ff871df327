"""`specgen curves RUN [RUN...] [-o FILE.svg|png]` (cli.py wires it). Never imports TensorFlow."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specgen.errors import SpecgenError

FORMATS = {".svg": "svg", ".png": "png"}
EXTRA = "specgen[pictures]"


class PicturesUsageError(SpecgenError, ValueError):
    """An output name curves cannot write, or the pictures extra missing."""


def need_matplotlib(what: str) -> None:
    """One line naming the extra, instead of an ImportError's traceback."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PicturesUsageError(f"{what} needs matplotlib, which is not installed; expected the pictures extra: "
                                 f"pip install '{EXTRA}'") from None


def need_tensorboard(what: str) -> None:
    """The event files' protos come from the tensorboard package (the train extra, not the pictures one)."""
    try:
        import tensorboard.compat.proto.event_pb2  # noqa: F401
    except ImportError:
        raise PicturesUsageError(f"{what} reads TensorBoard event files with the tensorboard package, which is not "
                                 "installed; expected: pip install tensorboard (or 'specgen[train]')") from None


def curves_format(output: Path | None) -> str:
    if output is None:
        return "svg"
    fmt = FORMATS.get(output.suffix.lower())
    if fmt is None:
        raise PicturesUsageError(f"cannot write curves to -o {output}: got '{output.suffix or '(no suffix)'}', "
                                 "expected a name ending in .svg or .png")
    return fmt


def run_curves(args: argparse.Namespace) -> int:
    from specgen.atomic import write_atomic
    from specgen.paths import shown
    from specgen.pictures.curves import render, scan_run

    fmt = curves_format(args.output)  # before reading anything: a usage mistake costs nothing
    need_matplotlib("specgen curves")
    need_tensorboard("specgen curves")
    scans = [scan_run(run) for run in args.runs]
    for line in (line for scan in scans for line in scan.lines()):  # standard error: stdout may be the picture
        print(line, file=sys.stderr)
    runs = [scan.series for scan in scans]
    picture = render(runs, fmt)
    if args.output is None:
        sys.stdout.buffer.write(picture)
        return 0
    write_atomic(args.output, picture, fsync=False)
    scalars = len({s.tag for run in runs for s in run})
    print(f"wrote {shown(args.output)} ({fmt}: {scalars} scalar{'s' * (scalars != 1)} of {len(runs)} "
          f"run{'s' * (len(runs) > 1)})")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    curves = sub.add_parser("curves", help="draw a run's training curves from its TensorBoard events")
    curves.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run folders of specgen train (overlaid)")
    curves.add_argument("-o", "--output", type=Path, help="write here, .svg or .png (default: SVG to stdout)")
    curves.set_defaults(run=run_curves)
