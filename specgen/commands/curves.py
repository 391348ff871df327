"""`specgen curves RUN [RUN...] [-o FILE.svg|png]`: a run's training curves. Never imports TensorFlow."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specgen.commands.common import InputPath, OutputFile
from specgen.errors import UsageError
from specgen.pictures.needs import need_matplotlib, need_tensorboard

FORMATS = {".svg": "svg", ".png": "png"}


def curves_format(output: Path | None) -> str:
    if output is None:
        return "svg"
    fmt = FORMATS.get(output.suffix.lower())
    if fmt is None:
        raise UsageError("curves", f"cannot write curves to -o {output}: got '{output.suffix or '(no suffix)'}', "
                                 "expected a name ending in .svg or .png")
    return fmt


def run(args: argparse.Namespace) -> int:
    from specgen.atomic import write_atomic
    from specgen.paths import shown
    from specgen.pictures.curves import render, scan_runs

    fmt = curves_format(args.output)  # before reading anything: a usage mistake costs nothing
    need_matplotlib("specgen curves")
    need_tensorboard("specgen curves")
    scans, notes = scan_runs(args.runs)
    for line in notes + [line for scan in scans for line in scan.lines()]:  # stderr: stdout may be the picture
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", action=InputPath, metavar="RUN", help="run folders of specgen train (overlaid)")
    parser.add_argument("-o", "--output", action=OutputFile, help="write here, .svg or .png (default: SVG to stdout)")
