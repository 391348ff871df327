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
    parser.add_argument("--check", action="store_true",
                        help="write no output (only the template cache); print a diff and exit 1 on drift")


def run(args: argparse.Namespace) -> int:
    from specgen.render.build import check, render_all, write
    from specgen.render.stale_folders import remove, unclaimed
    from specgen.schema import schema_text

    config = load_config()
    out = args.out or config.out
    # `pictures` belongs to the project's own output folder: a build elsewhere (--out) writes code only
    pictures = config.pictures and Path(os.path.realpath(out)) == Path(os.path.realpath(config.out))
    outputs = render_all(spec_paths(args.paths, out), pictures)
    # Without paths the specs are the whole configured set: a folder under `out` that none of them names was left by
    # a deleted or renamed spec (render/stale_folders.py). With paths, other folders belong to specs not given.
    leftover = [] if args.paths else unclaimed((o.folder for o in outputs), out)
    if args.check:
        reports = check(outputs, out) + [f"stale: {shown(f.shown)}/ {f.note()}" for f in leftover if not f.foreign]
        kept = [f"stale: {shown(f.shown)}/ {f.note()}" for f in leftover if f.foreign]  # `build` keeps these
        schema = schema_drift(config.schema, schema_text()) if config.schema is not None and not args.paths else []
        for report in reports + kept + schema:
            print(report.rstrip("\n"))
        unsafe = sum(r.startswith("unsafe: ") for r in reports + schema)
        if unsafe:
            print(f"specgen build --check: {unsafe} unsafe path(s) in the output folder; specgen neither reads "
                  "nor replaces them: remove them, then run `specgen build`", file=sys.stderr)
            return 1
        if reports or kept or schema:
            # each remedy is what fixes those lines: only `specgen schema` writes the schema, and `build` never
            # deletes a folder holding a file it did not write
            remedy = " and ".join(["run `specgen build`"] * bool(reports) + ["run `specgen schema`"] * bool(schema)
                                  + ["remove the folder(s) named by hand"] * bool(kept))
            print(f"specgen build --check: {len(reports) + len(kept) + len(schema)} file(s) out of date; {remedy}",
                  file=sys.stderr)
            return 1
        print(f"ok: {sum(len(o.files) for o in outputs)} generated files in {shown(out)} are up to date")
        return 0
    written, removed = write(outputs, out)
    for path in written:
        print(f"wrote {shown(path)}")
    for path in removed:  # what --check calls `stale:`
        print(f"removed {shown(path)} (no longer generated)")
    for folder in leftover:
        if folder.foreign:  # never deleted: it holds a file specgen cannot show it wrote
            print(f"specgen build: kept {shown(folder.shown)}/ {folder.note()}", file=sys.stderr)
        else:
            remove(folder)
            print(f"removed {shown(folder.shown)}/ {folder.note()}")
    gone = len(removed) + sum(len(f.ours) for f in leftover if not f.foreign)
    changed = len(written) + gone
    print(f"built {len(outputs)} spec(s) into {shown(out)}: {changed} file(s) changed"
          + (f" ({gone} removed)" if gone else ""))
    return 0
