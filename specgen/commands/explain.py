"""`specgen explain SPEC KEY [--set K=V]`: a key's final value and every place that set it (docs/review.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "explain"
ORDER = 15
HELP = "print a key's final value and every place that set it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", type=Path)
    parser.add_argument("key", help="as in --set, with [NAME] for a named list item: layers[head/out].units")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")


def run(args: argparse.Namespace) -> int:
    from specgen.spec.provenance import explain, load_resolved

    loaded, tree = load_resolved(args.spec, args.set)
    print("\n".join(explain(tree, args.key, loaded.display)))
    return 0
