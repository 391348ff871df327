"""`specgen graph`: the model DAG as SVG (or an HTML page holding it; dot and mermaid text: graph_text.py).

A pure function of the IR: the same spec gives the same bytes (coordinates are written with one
decimal, in IR order). Other pictures embed `render_svg(ir, depth)` (the HTML report does).
"""

from __future__ import annotations

from html import escape
from itertools import pairwise

from specgen.ir.model import ModelIR
from specgen.pictures.graph_model import Box, Drawing, drawing
from specgen.pictures.layout import Placed, layout
from specgen.pictures.palette import BADGE, FILL, LEGEND

FORMATS = ("svg", "html", "dot", "mermaid")
FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"  # monospace: box widths are computed from character counts
CHAR = 7.3  # pixels per character at 12px in the monospace fonts above (DejaVu Sans Mono: 7.22)
LINE = 15.0
PAD = 8.0
BADGE_CHAR = 6.2  # at 10px
LEGEND_HEIGHT = 56.0
TITLE = 13.0  # a block title's line height (11px text), per level of nesting



def render(ir: ModelIR, fmt: str = "svg", depth: int | None = None) -> str:
    """The picture of `ir` in one of FORMATS."""
    if fmt in ("dot", "mermaid"):
        from specgen.pictures.graph_text import render_dot, render_mermaid

        return (render_dot if fmt == "dot" else render_mermaid)(drawing(ir, depth))
    svg = render_svg(ir, depth)
    if fmt == "svg":
        return svg
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>{escape(ir.name)}: model graph'
            f'</title></head>\n<body style="margin:0">\n{svg}</body>\n</html>\n')


def render_svg(ir: ModelIR, depth: int | None = None) -> str:
    """The SVG text of `ir`'s graph; `depth`: draw each block deeper than `depth` levels as one box."""
    d = drawing(ir, depth)
    sizes = {b.id: _size(b) for b in d.boxes}
    placed = layout(sizes, [(e.src, e.dst) for e in d.edges], {b.id: b.cluster for b in d.boxes if b.cluster})
    by_id = {b.id: b for b in d.boxes}
    legend, legend_width = _legend(d)
    # room for the frames of nested blocks around the outermost boxes (_clusters' padding and titles)
    levels = max((len(c) for c in d.clusters), default=0)
    margin = PAD + 6.0 + (6.0 + TITLE) * levels + (14 if d.clusters else 0)
    width, height = max(placed.width + 2 * margin, legend_width + PAD), placed.height + LEGEND_HEIGHT + 2 * margin
    body = [*_clusters(d, placed, sizes), *_edges(d, placed), *(_box(b, placed, sizes) for b in by_id.values())]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{FONT}" font-size="12">\n'
            f"<title>{escape(d.name)}</title>\n"
            '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="8" markerHeight="8" '
            'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#444"/></marker></defs>\n'
            f'<rect width="100%" height="100%" fill="#ffffff"/>\n{legend}'
            f'<g class="graph" transform="translate({margin:.0f},{LEGEND_HEIGHT + margin:.0f})">\n'
            + "".join(body) + "</g>\n</svg>\n")


def _badges(box: Box) -> list[tuple[str, float]]:
    return [(t, len(BADGE[t][1]) * BADGE_CHAR + 8) for t in box.tags]


def _size(box: Box) -> tuple[float, float]:
    name = len(box.lines[0]) * CHAR + sum(w + 4 for _, w in _badges(box))
    wide = max([name, *(len(line) * CHAR for line in box.lines[1:])])
    return round(wide + 2 * PAD), round(len(box.lines) * LINE + PAD)


def _box(box: Box, placed: Placed, sizes: dict[str, tuple[float, float]]) -> str:
    w, h = sizes[box.id]
    x, y = placed.x[box.id] - w / 2, placed.y[box.id]
    dash = ' stroke-dasharray="4 2"' if box.status == "frozen" else ""
    rx = 12 if box.kind in ("input", "output") else 4
    out = [f'<g class="box {box.kind} {box.status}" data-name="{escape(box.id)}" data-status="{box.status}" '
           f'data-tags="{" ".join(box.tags)}">',
           f"<title>{escape(' / '.join(box.lines))}</title>",
           f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.0f}" height="{h:.0f}" rx="{rx}" fill="{FILL[box.status]}" '
           f'stroke="#555"{dash}/>']
    for i, line in enumerate(box.lines):
        weight = ' font-weight="bold"' if i == 0 else ""
        out.append(f'<text x="{x + PAD:.1f}" y="{y + PAD / 2 + (i + 0.8) * LINE:.1f}"{weight}>{escape(line)}</text>')
    bx = x + PAD + len(box.lines[0]) * CHAR + 6
    for tag, bw in _badges(box):
        fill, label, _ = BADGE[tag]
        out.append(f'<rect class="badge {tag}" x="{bx:.1f}" y="{y + 5:.1f}" width="{bw:.1f}" height="14" rx="3" '
                   f'fill="{fill}" stroke="#777"/><text x="{bx + 4:.1f}" y="{y + 15.5:.1f}" font-size="10">{label}</text>')
        bx += bw + 4
    return "\n".join(out) + "\n</g>\n"


def _edges(d: Drawing, placed: Placed) -> list[str]:
    out = []
    for e, route in zip(d.edges, placed.routes, strict=True):
        path = f"M{route[0][0]:.1f},{route[0][1]:.1f}"
        for (x0, y0), (x1, y1) in pairwise(route):
            mid = (y0 + y1) / 2
            path += f" L{x1:.1f},{y1:.1f}" if x0 == x1 else f" C{x0:.1f},{mid:.1f} {x1:.1f},{mid:.1f} {x1:.1f},{y1:.1f}"
        style = ' stroke-dasharray="5 3" stroke="#8a4fbf"' if e.kind == "share" else ' stroke="#444"'
        out.append(f'<path class="edge {e.kind}" data-from="{escape(e.source)}" data-to="{escape(e.dst)}" d="{path}" '
                   f'fill="none"{style} stroke-width="1.2" marker-end="url(#arrow)"/>\n')
    return out


def _clusters(d: Drawing, placed: Placed, sizes: dict[str, tuple[float, float]]) -> list[str]:
    """An outline per block path around its boxes, outer blocks first (drawn beneath, with wider margins).

    Stepped, one band per rank the block has boxes in: a rectangle around all of them would also cover
    the boxes of other layers beside a narrow rank (a ResNet shortcut beside its residual branch).
    """
    out = []
    for path in d.clusters:
        members = [b for b in d.boxes if b.cluster[:len(path)] == path]
        inside = max(len(b.cluster) for b in members) - len(path)  # levels of blocks nested in this one
        pad = 6.0 + 6.0 * inside  # room for the frames inside it
        bands: dict[float, list[float]] = {}  # box top (one per rank) -> [left, right, bottom]
        for b in members:
            (w, h), x, y = sizes[b.id], placed.x[b.id], placed.y[b.id]
            band = bands.setdefault(y, [x - w / 2, x + w / 2, y + h])
            band[:] = [min(band[0], x - w / 2), max(band[1], x + w / 2), max(band[2], y + h)]
        tops = sorted(bands)
        name = "/".join(path)
        # a title line per nested level above the inner titles: nested blocks starting at one rank
        # (encoder, encoder/1) would otherwise print their titles over each other
        title_y = tops[0] - pad - 14 - TITLE * inside
        out.append(f'<g class="cluster" data-path="{escape(name)}"><path d="{_outline(tops, bands, pad, title_y)}" '
                   f'fill="#7f7f7f" fill-opacity="0.06" stroke="#999"/><text x="{bands[tops[0]][0] - pad + 6:.1f}" '
                   f'y="{title_y + 12:.1f}" font-size="11" fill="#555">{escape(name)}</text></g>\n')
    return out


def _outline(tops: list[float], bands: dict[float, list[float]], pad: float, title_y: float) -> str:
    """The stepped polygon: down the left side band by band, up the right; steps halfway between ranks."""
    # halfway between ranks: V_GAP / 2 from either rank's boxes, so a step never cuts a box
    ys = [title_y] + [(bands[a][2] + b) / 2 for a, b in pairwise(tops)] + [bands[tops[-1]][2] + pad]
    left = [p for i, t in enumerate(tops) for p in ((bands[t][0] - pad, ys[i]), (bands[t][0] - pad, ys[i + 1]))]
    right = [p for i, t in enumerate(tops) for p in ((bands[t][1] + pad, ys[i]), (bands[t][1] + pad, ys[i + 1]))]
    points = left + right[::-1]
    return "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in points) + " Z"


def _legend(d: Drawing) -> tuple[str, float]:
    """The colour key, with the count of boxes of each kind; trainable and frozen always, others when drawn."""
    out = [f'<g class="legend"><text x="{PAD:.0f}" y="{PAD + 12:.0f}" font-weight="bold">{escape(d.name)}</text>\n']
    x, y = PAD, PAD + 24
    for status, label in LEGEND.items():
        if d.counts[status] or status in ("trainable", "frozen"):
            text = f"{label} ({d.counts[status]})"
            dash = ' stroke-dasharray="4 2"' if status == "frozen" else ""
            out.append(f'<rect class="key {status}" x="{x:.1f}" y="{y:.1f}" width="14" height="14" rx="2" '
                       f'fill="{FILL[status]}" stroke="#555"{dash}/><text x="{x + 18:.1f}" y="{y + 11:.1f}">{text}</text>\n')
            x += 18 + len(text) * CHAR + 14
    first_row, x, y = x, PAD, y + 20
    for tag, (fill, label, meaning) in BADGE.items():
        text = f"{meaning} ({d.counts[tag]})"
        bw = len(label) * BADGE_CHAR + 8
        out.append(f'<rect class="key {tag}" x="{x:.1f}" y="{y:.1f}" width="{bw:.1f}" height="14" rx="3" fill="{fill}" '
                   f'stroke="#777"/><text x="{x + 4:.1f}" y="{y + 10.5:.1f}" font-size="10">{label}</text>'
                   f'<text x="{x + bw + 4:.1f}" y="{y + 11:.1f}">{escape(text)}</text>\n')
        x += bw + 8 + len(text) * CHAR + 14
    return "".join(out) + "</g>\n", max(first_row, x)
