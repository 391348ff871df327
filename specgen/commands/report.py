"""`specgen report PATH... [--checkpoint CKPT]`, and `--html [--run RUN] [--sweep DIR [--storage URL]] -o FILE.html`
(report/)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specgen.commands.common import InputPath, OutputFile, expand
from specgen.paths import shown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", action=InputPath)
    parser.add_argument("--checkpoint", action=InputPath, help="with one pruned spec: the sparsity of each mask in this "
                        "checkpoint (reads it with TensorFlow)")
    parser.add_argument("--html", action="store_true", help="write one self-contained HTML page for one spec "
                        "(graph, tables, restore plan, curves, export lines) to -o")
    parser.add_argument("--run", action=InputPath, metavar="RUN", dest="run_folder", help="with --html: the run folder "
                        "whose curves and export the page shows")
    parser.add_argument("--sweep", action=InputPath, metavar="DIR", help="with --html: a folder of `specgen sweep` whose "
                        "trials the page lists and draws")
    parser.add_argument("--storage", metavar="URL", help="with --sweep: the Optuna storage of a sweep that ran with "
                        "--storage (default: the study.db in DIR)")
    parser.add_argument("-o", "--output", action=OutputFile, help="with --html: the page to write")


def run(args: argparse.Namespace) -> int:
    from specgen.diagnostics import Diagnostic, SpecError

    if args.storage is not None and args.sweep is None:  # where a sweep's study is: nothing without --sweep
        from specgen.errors import UsageError

        raise UsageError("report", "got --storage without --sweep; expected --html --sweep DIR --storage URL (the "
                         "storage the sweep ran with)")
    if args.html or args.run_folder is not None or args.output is not None or args.sweep is not None:
        from specgen.report.html_cli import run_html_report

        return run_html_report(args)
    if args.checkpoint is not None:  # reading its masks takes TensorFlow: one line naming the extra, not a traceback
        from specgen.extras import need

        need("specgen report --checkpoint", "tensorflow")
    paths = expand(args.paths)
    problems: list[Diagnostic] = []
    for path in paths:  # every spec's report or errors, as validate does: one broken spec hides no other's
        try:
            print(_one(path, args.checkpoint, len(paths)))
        except SpecError as exc:
            problems += exc.diagnostics
    if problems:
        raise SpecError(problems)
    return 0


def _one(path: Path, checkpoint: Path | None, specs: int) -> str:
    from specgen.ir.resolve import build_ir
    from specgen.report import report
    from specgen.spec.load import load_spec

    loaded = load_spec(path)
    ir = build_ir(loaded)
    measured = None
    if checkpoint is not None:  # only then TensorFlow (to read the checkpoint's masks)
        from specgen.runtime.pruning_state import checkpoint_sparsity

        measured = checkpoint_sparsity(loaded, ir, checkpoint, specs)
    return report(ir, shown(path), loaded.spec.optimizers, measured, layers=loaded.layers)
