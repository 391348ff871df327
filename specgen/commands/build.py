"""`specgen build [PATH...] [--out DIR] [--check]`: render specs into generated/<name>/ (no TensorFlow)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from specgen.commands.common import InputPath, OutputFolder, schema_drift, spec_paths
from specgen.config import load_config
from specgen.paths import shown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", action=InputPath)
    parser.add_argument("--out", action=OutputFolder, metavar="DIR", help="output folder (default: `out` of "
                        "[tool.specgen] in the nearest pyproject.toml, else generated/)")
    parser.add_argument("--check", action="store_true",
                        help="write no output (only the template cache); print a diff and exit 1 on drift")


def run(args: argparse.Namespace) -> int:
    from specgen.render.build import Changes, check, render_all, write
    from specgen.render.build_lock import locked
    from specgen.render.stale_folders import remove, unclaimed
    from specgen.schema import schema_text

    # build always reads [tool.specgen]: it needs `out` (also with paths, cli.md) and `pictures`; only the set of
    # specs comes from the paths when they are given (spec_paths)
    config = load_config()
    out = args.out or config.out
    home = Path(os.path.realpath(out)) == Path(os.path.realpath(config.out))  # the project's own output folder
    # `pictures` belongs to the project's own output folder: a build elsewhere (--out) writes code only
    pictures = config.pictures and home
    outputs = render_all(spec_paths(args.paths, out), pictures)
    # Only the configured set of specs built into the configured `out` owns that folder: then a folder under it that
    # none of them names was left by a deleted or renamed spec (render/stale_folders.py). With paths, or with --out
    # elsewhere (another set's folder: `build --out tests/golden/generated` without its specs), the other folders
    # belong to specs not given, and are neither reported nor removed.
    prune = not args.paths and home
    if args.check:
        leftover = unclaimed((o.folder for o in outputs), out) if prune else []
        extras: list[str] = []  # files in spec folders that specgen did not write: build keeps them
        blocked: list[str] = []  # files under generated names that specgen did not write: build stops on them
        files = check(outputs, out, extras, blocked)
        folders = [f"stale: {shown(f.shown)}/ {f.note()}" for f in leftover]
        schema = schema_drift(config.schema, schema_text()) if config.schema is not None and not args.paths else []
        for report in files + folders + schema:
            print(report.rstrip("\n"))
        unsafe = sum(r.startswith("unsafe: ") for r in files + schema)
        if unsafe:
            print(f"specgen build --check: {unsafe} unsafe path(s) in the output folder; specgen neither reads "
                  "nor replaces them: remove them, then run `specgen build`", file=sys.stderr)
            return 1
        if files or folders or schema:
            # each remedy is what fixes those lines: only `specgen schema` writes the schema, and `build` never
            # deletes a folder holding a file it did not write
            removable, kept = any(not f.foreign for f in leftover), any(f.foreign for f in leftover)
            by_hand = ["file(s)"] * bool(extras) + ["folder(s)"] * kept
            remedy = " and ".join(["move the file(s) that are not build's own elsewhere"] * bool(blocked)
                                  + ["run `specgen build`"] * (len(files) > len(extras) + len(blocked) or removable)
                                  + ["run `specgen schema`"] * bool(schema)
                                  + [f"remove the {' and '.join(by_hand)} named by hand"] * bool(by_hand))
            changed, gone = len(files) + len(schema), len(folders)
            counts = [f"{changed} file(s)"] * bool(changed) + [f"{gone} folder(s)"] * bool(gone)
            print(f"specgen build --check: {' and '.join(counts)} out of date; {remedy}", file=sys.stderr)
            return 1
        print(f"ok: {sum(len(o.files) for o in outputs)} generated files in {shown(out)} are up to date")
        return 0
    changes = Changes()
    with locked(out):  # one build at a time writes (and prunes) a folder: render/build_lock.py
        try:
            write(outputs, out, changes)
        finally:  # also when a write fails half-way: what was written before the error line
            for line in changes.lines():  # `removed ... (no longer generated)` is what --check calls `stale:`
                print(line)
        for line in changes.notes():  # files specgen did not write: named, never deleted (as the folders below)
            print(line, file=sys.stderr)
        # surveyed after writing, so no folder a spec just wrote into can be taken for a left-over one
        leftover = unclaimed((o.folder for o in outputs), out) if prune else []
        for folder in leftover:
            if folder.foreign:  # never deleted: it holds a file specgen cannot show it wrote
                print(f"specgen build: kept {shown(folder.shown)}/ {folder.note()}", file=sys.stderr)
            else:
                remove(folder)
                print(f"removed {shown(folder.shown)}/ {folder.note()}")
    gone = len(changes.removed) + len(changes.temporary) + sum(len(f.ours) for f in leftover if not f.foreign)
    changed = len(changes.written) + gone
    print(f"built {len(outputs)} spec(s) into {shown(out)}: {changed} file(s) changed"
          + (f" ({gone} removed)" if gone else ""))
    return 0
