"""`specgen report SPEC --html [--run RUN] -o report.html`: one self-contained page per spec (and run).

The page holds everything it shows: CSS inline, both pictures as inline SVG, no script, no font or image
fetched at view time. Its tables are the text report's own sections (specgen/report), in <pre> blocks:
the same functions, so the page and `specgen report` never disagree. TensorFlow is imported only for a
restore plan (reading the restore sources' checkpoints), and only when the spec restores something.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgen.errors import SpecgenError
from specgen.ir.model import ModelIR
from specgen.paths import shown
from specgen.report.export_check import FP32, Checked
from specgen.report.export_lines import export_lines
from specgen.report.flops import flops_table
from specgen.report.optimizers import optimizers_table
from specgen.report.precision import precision_table, variants_lines
from specgen.report.variables import collections_table, variables_table
from specgen.spec.load import LoadedSpec
from specgen.text import printable

if TYPE_CHECKING:
    from specgen.pictures.curves import RunScan

SECTIONS = ("graph", "variables", "collections", "optimizers", "precision", "flops", "restore", "curves", "export")
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:16px 28px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#c9d1dc;font-size:14px}
nav{padding:8px 28px;background:#e8ebf0;font-size:14px}nav a{margin-right:14px;color:#1f4f99}
main{padding:8px 28px 40px;max-width:1280px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;margin:16px 0;padding:8px 18px 16px}
h2{font-size:18px;margin:10px 0}
pre{font:13px/1.45 "DejaVu Sans Mono",Menlo,Consolas,monospace;white-space:pre-wrap;margin:0;padding:8px;
background:#fafbfc;border:1px solid #eceff3;border-radius:4px}
.picture{overflow-x:auto}.picture svg{max-width:100%;height:auto}
.none{color:#5b6573;font-style:italic}
"""


def _section(key: str, title: str, body: str) -> str:
    return f'<section id="{key}"><h2>{html.escape(title)}</h2>\n{body}\n</section>'


def _plain(text: str) -> str:
    """Text as the page shows it: control characters and bidi overrides escaped line by line (a file name or an
    export.json string can hold any: a NUL is not allowed in HTML), then HTML's own characters."""
    return html.escape("\n".join(printable(line) for line in text.split("\n")))


def _pre(text: str) -> str:
    return f"<pre>{_plain(text)}</pre>"


def _none(text: str) -> str:
    return f'<p class="none">{_plain(text)}</p>'


_SVG_ID = re.compile(r'\bid="([^"]*)"')
_SVG_REF = re.compile(r'(href="#|url\(#)([^")]*)')


def inline_svg(svg: str, prefix: str) -> str:
    """An SVG document as an element of the page: its XML declaration and DOCTYPE (which names a DTD
    URL) dropped; the namespace attributes stay (names, never fetched). Its ids, and the references to them, get
    `prefix`: two pictures drawn by matplotlib name their parts alike (`figure_1`, a glyph's `DejaVuSans-14`), and
    a page's ids must be unique (a reference resolves to the first, which may be another picture's)."""
    body = _SVG_ID.sub(lambda m: f'id="{prefix}-{m[1]}"', svg[svg.index("<svg"):])
    return f'<div class="picture">{_SVG_REF.sub(lambda m: f"{m[1]}{prefix}-{m[2]}", body)}</div>'


def graph_section(ir: ModelIR) -> str:
    try:
        from specgen.pictures.graph import render_svg
    except ImportError:  # the graph slice not merged in this checkout: the page says so instead
        return _none("the model graph is not available in this specgen")
    return inline_svg(render_svg(ir), "graph")


def restore_section(loaded: LoadedSpec, ir: ModelIR) -> str:
    from specgen.ir.training.build import checkpoint_of

    if not checkpoint_of(loaded).restore:
        return _none("the spec restores nothing (no checkpoint.restore)")
    from specgen.ir.restore_rules import target_copies
    from specgen.ir.restore_targets import restore_targets
    from specgen.runtime.commands.restore import format_plan, plan_restore  # imports TensorFlow: only here

    try:
        return _pre(format_plan(plan_restore(loaded, restore_targets(ir), copies=target_copies(ir))))
    except SpecgenError as exc:  # a restore source that is not there yet: the page still shows the rest
        return _none(f"no plan: {exc}")


def curves_section(scan: RunScan | None) -> str:
    """The run's curves, under the notes of what reading its events skipped or found cut short."""
    if scan is None:
        return _none("no run given (--run RUN)")
    from specgen.pictures.curves import render

    return "\n".join([*map(_none, scan.lines()), inline_svg(render([scan.series]).decode(), "curves")])


def export_section(run: Path | None) -> str:
    found = None if run is None else run / "export" / "export.json"
    if found is None or not found.is_file():
        return _none("no export of this run (specgen export ... -o RUN/export writes RUN/export/export.json)")
    from specgen.pictures.export_json import read_export

    report = read_export(found)  # every key the lines below print, checked: one line otherwise
    return _pre("\n".join([f"{shown(found)}:", *export_figures(found.parent, report)]))


def export_figures(folder: Path, report: Mapping[str, Any]) -> list[str]:
    """export.json's lines, each group only while the files it was measured on are still there (export_check)."""
    checked = Checked(folder, report)
    kinds = ("parity", "accuracy") if report.get("onnxruntime_accuracy") is not None else ("parity",)
    parity = checked.figures(kinds, (FP32,), "specgen export", "measure it", export_lines(report))
    return [*parity, *variants_lines(folder, shown(folder), report, checked)]


def precision_section(ir: ModelIR, scan: RunScan | None) -> str:
    logged = [] if scan is None else scan.series  # the loss scale as the run logged it last
    table = precision_table(ir, logged)
    return _pre(table) if table else _none("float32 training and export (train.precision, export.onnx.precision)")


def page(loaded: LoadedSpec, ir: ModelIR, path: str, run: Path | None, scan: RunScan | None = None,
         sweep: tuple[str, str, str] | None = None) -> str:
    """The page; `scan`: the run's events as curves.scan_run read them (read here when not given); `sweep`: a sweep
    folder as shown, its summary and its picture (sweep/summary.py's report_parts), a last section when given."""
    if run is not None and scan is None:
        from specgen.pictures.curves import scan_run

        scan = scan_run(run)
    optimizers = loaded.spec.optimizers
    bodies = {
        "graph": ("Model graph", graph_section(ir)),
        "variables": ("Variables", _pre(variables_table(ir))),
        "collections": ("Collections", _pre(collections_table(ir))),
        "optimizers": ("Optimizers", _pre(optimizers_table(ir, optimizers)) if optimizers and ir.optimizers
                       else _none("no optimizers")),
        "precision": ("Precision", precision_section(ir, scan)),
        "flops": ("FLOPs", _pre(flops_table(ir, loaded.layers))),
        "restore": ("Restore plan", restore_section(loaded, ir)),
        "curves": ("Training curves" + (f" ({shown(run)})" if run else ""), curves_section(scan)),
        "export": ("Export: parity, accuracy and precision", export_section(run)),
    }
    sections: tuple[str, ...] = SECTIONS
    if sweep is not None:
        folder, summary, svg = sweep
        bodies["sweep"] = (f"Sweep ({folder})", _pre(summary) + "\n" + inline_svg(svg, "sweep"))
        sections = (*SECTIONS, "sweep")
    nav = " ".join(f'<a href="#{key}">{html.escape(bodies[key][0])}</a>' for key in sections)
    title = f"{ir.name}: specgen report"
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{html.escape(ir.name)}</h1><p>{html.escape(path)}: {ir.layer_count} layers, "
        f"{len(ir.variables)} variables</p></header>",
        f"<nav>{nav}</nav><main>",
        *(_section(key, *bodies[key]) for key in sections),
        "</main></body></html>", ""])
