"""`specgen explain SPEC KEY [--set K=V]`: a key's final value and every place that set it (docs/review.md).

explain checks what it needs to merge the spec: its files and every field (a field error is printed and exits 1,
as in validate). It does not resolve the graph or check sections against each other (an output naming no layer,
optimizers without a loss): where a value came from is what one asks while such an error is being fixed, so explain
still answers (docs/cli.md); `specgen validate` is the check.
"""

from __future__ import annotations

import argparse
import sys

from specgen.commands.common import InputPath


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", action=InputPath)
    parser.add_argument("key", help="as in --set, with [NAME] for a named list item: layers[head/out].units")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a value of the merged spec, as train does (repeatable)")


def run(args: argparse.Namespace) -> int:
    from specgen.diagnostics import one_line
    from specgen.spec.overrides import key_problem
    from specgen.spec.provenance import explain, load_resolved

    problem = key_problem(args.key)
    if problem is not None:  # a command-line mistake, as argparse's: exit 2, before the spec is read
        print(f"specgen explain: error: {one_line(problem)}", file=sys.stderr)
        return 2
    loaded, tree = load_resolved(args.spec, args.set)
    print("\n".join(explain(tree, args.key, loaded.display)))
    return 0
