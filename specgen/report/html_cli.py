"""`specgen report SPEC --html [--run RUN] [--sweep DIR] -o report.html`: specgen/commands/report.py hands these flags here."""

from __future__ import annotations

import argparse
import sys

from specgen.errors import UsageError
from specgen.pictures.needs import need_matplotlib, need_tensorboard


def _usage(args: argparse.Namespace) -> None:
    """Mistakes in the flags, before any spec is read: exit 2, as argparse's own."""
    if not args.html:
        flag = "--run" if args.run_folder is not None else "--sweep" if args.sweep is not None else "-o"
        raise UsageError("report", f"got {flag} without --html; expected --html with them "
                                 "(the text report prints to stdout)")
    if args.checkpoint is not None:  # the page has no pruning table: refused, never silently ignored
        raise UsageError("report", "--html: got --checkpoint; the page does not show a checkpoint's mask sparsity "
                                 "(specgen report SPEC --checkpoint CKPT prints it)")
    if len(args.paths) != 1 or args.paths[0].is_dir():
        raise UsageError("report", f"--html: got {len(args.paths)} path(s) "
                                 f"({', '.join(map(str, args.paths))}); expected one spec file")
    if args.output is None or args.output.suffix.lower() not in (".html", ".htm"):
        raise UsageError("report", f"--html: got -o {args.output or '(none)'}; expected -o FILE.html")


def run_html_report(args: argparse.Namespace) -> int:
    from specgen.atomic import write_atomic
    from specgen.ir.resolve import build_ir
    from specgen.paths import shown
    from specgen.report.html import page
    from specgen.spec.load import load_spec

    _usage(args)
    if args.run_folder is not None:
        need_matplotlib("specgen report --html --run")
        need_tensorboard("specgen report --html --run")
    loaded = load_spec(args.paths[0])
    ir = build_ir(loaded)
    scan = None
    if args.run_folder is not None:
        from specgen.pictures.curves import scan_run

        scan = scan_run(args.run_folder)
        for line in scan.lines():  # the page shows them too, above the curves
            print(line, file=sys.stderr)
    sweep = None
    if args.sweep is not None:
        need_matplotlib("specgen report --html --sweep")
        from specgen.sweep.summary import report_parts

        sweep = report_parts(loaded, args.sweep, args.storage)
    text = page(loaded, ir, shown(args.paths[0]), args.run_folder, scan, sweep)
    write_atomic(args.output, text.encode(), fsync=False)
    print(f"wrote {shown(args.output)} ({len(text.encode()):,} bytes)")
    return 0
