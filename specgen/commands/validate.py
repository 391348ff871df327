"""`specgen validate [PATH...] [--strict] [--no-lint L] [--set K=V] [--resolved]`: check specs, report every problem."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from specgen.commands.common import spec_paths
from specgen.diagnostics import Diagnostic, SpecError, report_lines
from specgen.paths import shown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=Path)
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
    from specgen.ir.resolve import build_ir
    from specgen.runtime.sources.sizes import declared
    from specgen.spec.overrides import load_with_overrides

    if args.resolved:
        return _print_resolved(spec_paths(args.paths), args.set)
    problems: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    for path in spec_paths(args.paths):
        try:
            loaded = load_with_overrides(path, args.set)
            ir = build_ir(loaded)
            if sized := declared(loaded, ir):  # data sizes known from the spec alone: the model must run at them
                raise SpecError(sized)
        except SpecError as exc:
            problems += exc.diagnostics
            continue
        except AbstractSpec as abstract:
            print(f"ok: {shown(path)} (abstract: {abstract.keys} section(s) checked; build generates nothing for it)")
            continue
        skipped = {*args.no_lint, *ir.skip_lints}  # the command line's, and the spec's own `lints.skip`
        found = [] if "init_scale" in skipped else init_scale_warnings(loaded, ir)
        found += top_k_warnings(loaded, ir)  # a metric that can only read 1.0: no reason to keep it, no lint name
        warnings += found
        if not (found and args.strict):
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


def _print_resolved(paths: list[Path], overrides: list[str]) -> int:
    from specgen.spec.provenance import load_resolved, resolved_yaml

    for n, path in enumerate(paths):
        _, tree = load_resolved(path, overrides)
        print(("---\n" if n else "") + f"# {shown(path)}, resolved: each value's origin is the comment after it")
        print(resolved_yaml(tree), end="")
    return 0
