"""`specgen validate [PATH...] [--strict] [--no-lint L] [--set K=V] [--resolved]`: check specs, report every problem."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from specgen.commands.common import InputPath, spec_paths
from specgen.diagnostics import Diagnostic, SpecError, report_lines
from specgen.paths import shown

if TYPE_CHECKING:
    from specgen.ir.model import ModelIR
    from specgen.spec.load import LoadedSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", action=InputPath)
    parser.add_argument("--strict", action="store_true", help="treat warnings as errors (exit 1)")
    parser.add_argument("--no-lint", action="append", default=[], choices=["init_scale"],
                        help="skip a lint (docs/spec.md#lints); repeatable")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a value of the merged spec, as train does (repeatable)")
    parser.add_argument("--resolved", action="store_true",
                        help="print the merged spec as YAML with the origin of every value (file:line:col, "
                             "--set or default)")


def run(args: argparse.Namespace) -> int:
    from specgen.errors import AbstractSpec
    from specgen.ir.lints import init_scale_warnings, top_k_warnings
    from specgen.ir.lints_logits import logits_warnings

    problems: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    trees: list[Path] = []  # the specs whose resolved tree is printed: each after the first opens with `---`
    for path in spec_paths(args.paths):
        try:
            loaded, ir = _checked(path, args, trees)
        except SpecError as exc:
            problems += exc.diagnostics
            continue
        except AbstractSpec as abstract:
            if args.resolved:  # nothing to resolve: `specgen: error: ... is abstract` as before
                raise
            print(f"ok: {shown(path)} (abstract: {abstract.keys} section(s) checked; build generates nothing for it)")
            continue
        skipped = {*args.no_lint, *ir.skip_lints}  # the command line's, and the spec's own `lints.skip`
        found = [] if "init_scale" in skipped else init_scale_warnings(loaded, ir)
        found += top_k_warnings(loaded, ir)  # a metric that can only read 1.0: no reason to keep it, no lint name
        found += logits_warnings(loaded, ir)  # a loss on logits reading probabilities: likewise
        warnings += found
        if not ((found and args.strict) or args.resolved):  # --resolved: standard output is the YAML alone
            print(f"ok: {shown(path)} ({ir.name}: {ir.layer_count} layers, {len(ir.variables)} variables)")
    if args.strict:  # warnings become errors: reported with them, exit 1
        problems += [replace(w, severity="error") for w in warnings]
    elif warnings:  # never the exit status: validate fails on errors only
        for line in report_lines(sorted(warnings, key=Diagnostic.sort_key)):
            print(line, file=sys.stderr)
        print(f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''} (--strict makes them errors)",
              file=sys.stderr)
    if problems:
        raise SpecError(problems)
    return 0


def _checked(path: Path, args: argparse.Namespace, trees: list[Path]) -> tuple[LoadedSpec, ModelIR]:
    """The spec loaded and resolved with every check `validate` makes: fields, then the graph (build_ir), then
    what the spec's data sizes imply (`declared`). With --resolved the merged tree is printed once the fields
    are valid, also when a later check fails (those errors are printed after it and the exit is 1, as without
    --resolved): the tree is what the graph's errors are about, and its comments say which file wrote each value
    a message names. A field error leaves no tree to print."""
    from specgen.ir.resolve import build_ir
    from specgen.runtime.sources.sizes import declared
    from specgen.spec.overrides import load_with_overrides
    from specgen.spec.provenance import load_resolved, resolved_yaml

    if args.resolved:
        loaded, tree = load_resolved(path, args.set)
        print(("---\n" if trees else "") + f"# {shown(path)}, resolved: each value's origin is the comment after it")
        print(resolved_yaml(tree), end="")
        trees.append(path)
    else:
        loaded = load_with_overrides(path, args.set)
    ir = build_ir(loaded)
    if sized := declared(loaded, ir):  # data sizes known from the spec alone: the model must run at them
        raise SpecError(sized)
    return loaded, ir
