"""`specgen build [PATH...] [--out DIR] [--check]`: render specs into generated/<name>/ (no TensorFlow)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from specgen.commands.common import schema_drift, spec_paths
from specgen.config import load_config
from specgen.paths import shown

NAME = "build"
ORDER = 30
HELP = "render specs into generated/<name>/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, help="output folder (default: generated/)")
    parser.add_argument("--check", action="store_true", help="write nothing; print a diff and exit 1 on drift")


def run(args: argparse.Namespace) -> int:
    from specgen.render.build import check, render_all, write
    from specgen.schema import schema_text

    config = load_config()
    out = args.out or config.out
    # `pictures` belongs to the project's own output folder: a build elsewhere (--out) writes code only
    pictures = config.pictures and Path(os.path.realpath(out)) == Path(os.path.realpath(config.out))
    outputs = render_all(spec_paths(args.paths), pictures)
    if args.check:
        reports = check(outputs, out)
        if config.schema is not None and not args.paths:
            reports += schema_drift(config.schema, schema_text())
        for report in reports:
            print(report.rstrip("\n"))
        unsafe = sum(r.startswith("unsafe: ") for r in reports)
        if unsafe:
            print(f"specgen build --check: {unsafe} unsafe path(s) in the output folder; specgen neither reads "
                  "nor replaces them: remove them, then run `specgen build`", file=sys.stderr)
            return 1
        if reports:
            print(f"specgen build --check: {len(reports)} file(s) out of date; run `specgen build`", file=sys.stderr)
            return 1
        print(f"ok: {sum(len(o.files) for o in outputs)} generated files in {shown(out)} are up to date")
        return 0
    written, removed = write(outputs, out)
    for path in written:
        print(f"wrote {shown(path)}")
    for path in removed:  # what --check calls `stale:`
        print(f"removed {shown(path)} (no longer generated)")
    changed = len(written) + len(removed)
    print(f"built {len(outputs)} spec(s) into {shown(out)}: {changed} file(s) changed"
          + (f" ({len(removed)} removed)" if removed else ""))
    return 0
