"""`specgen schema [-o FILE] [--check]`: the JSON Schema of spec files, for editors and CI."""

from __future__ import annotations

import argparse

from specgen.commands.common import OutputFile, schema_drift
from specgen.config import load_config
from specgen.paths import shown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", action=OutputFile, metavar="FILE",
                        help="the schema file (default: `schema` of [tool.specgen] in the nearest pyproject.toml, "
                        "else schemas/specgen.schema.json under that pyproject.toml's folder, or the working "
                        "directory without one)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the schema file is out of date")


def run(args: argparse.Namespace) -> int:
    from specgen.atomic import write_atomic
    from specgen.schema import schema_text

    target = args.output or load_config().schema_target
    text = schema_text()
    if args.check:
        drift = schema_drift(target, text)
        for line in drift:
            print(line)
        if drift:
            return 1
        print(f"ok: {shown(target)} is up to date")
        return 0
    try:
        unchanged = not schema_drift(target, text)
    except OSError:  # a path that cannot be read (a file where a folder goes): the write below says what is wrong
        unchanged = False
    if unchanged:  # as build: an unchanged file is not touched (a read-only checkout too)
        print(f"unchanged: {shown(target)}")
        return 0
    write_atomic(target, text)
    print(f"wrote {shown(target)}")
    return 0
