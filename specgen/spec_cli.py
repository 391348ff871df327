"""The commands that read specs and nothing else: `validate`, `build`, `schema` and `report` (cli.py wires them).

They never import TensorFlow (tests/test_build.py checks it): `report --checkpoint` is the one path that
does, and only when given.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from specgen.config import load_config
from specgen.diagnostics import Diagnostic, SpecError, report_lines
from specgen.paths import shown

SPEC_SUFFIXES = (".yaml", ".yml")


def expand(paths: Sequence[Path]) -> list[Path]:
    """Files as given; folders contribute their *.yaml / *.yml files, sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.suffix in SPEC_SUFFIXES and p.is_file())
        else:
            found.append(path)
    return found


def _spec_paths(args: argparse.Namespace) -> list[Path]:
    paths = expand(args.paths or load_config().specs)
    if not paths:
        raise SpecError([Diagnostic("specgen", None, "no spec files given; pass paths or set "
                                    "[tool.specgen] specs in pyproject.toml")])
    return paths


def cmd_validate(args: argparse.Namespace) -> int:
    from specgen.ir.lints import init_scale_warnings
    from specgen.ir.resolve import build_ir
    from specgen.spec.load import AbstractSpec
    from specgen.spec.overrides import load_with_overrides

    if args.resolved:
        return _print_resolved(_spec_paths(args), args.set)
    problems: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    for path in _spec_paths(args):
        try:
            loaded = load_with_overrides(path, args.set)
            ir = build_ir(loaded)
        except SpecError as exc:
            problems += exc.diagnostics
            continue
        except AbstractSpec as abstract:
            print(f"ok: {shown(path)} (abstract: {abstract.keys} section(s) checked; build generates nothing for it)")
            continue
        skipped = {*args.no_lint, *ir.skip_lints}  # the command line's, and the spec's own `lints.skip`
        found = [] if "init_scale" in skipped else init_scale_warnings(loaded, ir)
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


def cmd_explain(args: argparse.Namespace) -> int:
    from specgen.spec.provenance import explain, load_resolved

    loaded, tree = load_resolved(args.spec, args.set)
    print("\n".join(explain(tree, args.key, loaded.display)))
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from specgen.render.build import check, render_all, write
    from specgen.schema import schema_text

    config = load_config()
    out = args.out or config.out
    # `pictures` belongs to the project's own output folder: a build elsewhere (--out) writes code only
    pictures = config.pictures and Path(os.path.realpath(out)) == Path(os.path.realpath(config.out))
    outputs = render_all(_spec_paths(args), pictures)
    if args.check:
        reports = check(outputs, out)
        if config.schema is not None and not args.paths:
            reports += _schema_drift(config.schema, schema_text())
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
    written = write(outputs, out)
    for path in written:
        print(f"wrote {shown(path)}")
    print(f"built {len(outputs)} spec(s) into {shown(out)}: {len(written)} file(s) changed")
    return 0


def _schema_drift(target: Path, text: str) -> list[str]:
    """[] if `target` holds `text`; else one report line. Never reads through a link or a device."""
    from specgen.atomic import UnsafePathError, read_regular

    try:
        on_disk = read_regular(target)
    except UnsafePathError as exc:
        return [f"unsafe: {exc}"]
    return [] if on_disk == text.encode() else [f"drifted: {shown(target)} (run `specgen schema`)"]


def cmd_schema(args: argparse.Namespace) -> int:
    from specgen.atomic import write_atomic
    from specgen.schema import schema_text

    target = args.output or load_config().schema or Path("schemas/specgen.schema.json")
    text = schema_text()
    if args.check:
        drift = _schema_drift(target, text)
        for line in drift:
            print(line)
        if drift:
            return 1
        print(f"ok: {shown(target)} is up to date")
        return 0
    write_atomic(target, text)
    print(f"wrote {shown(target)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from specgen.ir.resolve import build_ir
    from specgen.report import report
    from specgen.spec.load import load_spec

    if args.html or args.run_folder is not None or args.output is not None or args.sweep is not None:
        from specgen.report.html_cli import run_html_report

        return run_html_report(args)
    paths = expand(args.paths)
    for path in paths:
        loaded = load_spec(path)
        ir = build_ir(loaded)
        measured = None
        if args.checkpoint is not None:  # only then TensorFlow (to read the checkpoint's masks)
            from specgen.runtime.pruning_state import checkpoint_sparsity

            measured = checkpoint_sparsity(loaded, ir, args.checkpoint, len(paths))
        print(report(ir, shown(path), loaded.spec.optimizers, measured))
    return 0
