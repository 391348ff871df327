"""The model graph as Graphviz dot or Mermaid text, for users who lay it out with their own tools.

The same drawing (graph_model.py) as the SVG: boxes, nested block clusters, edges, colours by status.
"""

from __future__ import annotations

from collections.abc import Callable

from specgen.pictures.graph_model import Box, Drawing
from specgen.pictures.palette import FILL


def _tree(d: Drawing, emit_box: Callable[[Box, str], str], open_: Callable[[tuple[str, ...], str], str],
          close: str) -> list[str]:
    """Boxes nested in their clusters, outer first, in IR order; `open_` starts a cluster, `close` ends one."""
    lines: list[str] = []
    first = {c: min(b.order for b in d.boxes if b.cluster[:len(c)] == c) for c in d.clusters}

    def visit(path: tuple[str, ...], indent: str) -> None:
        items: list[tuple[int, tuple[str, ...] | Box]] = [
            (first[c], c) for c in d.clusters if len(c) == len(path) + 1 and c[:len(path)] == path]
        items += [(b.order, b) for b in d.boxes if b.cluster == path]
        for _, item in sorted(items, key=lambda pair: pair[0]):  # IR order, blocks where their first layer is
            if isinstance(item, Box):
                lines.append(indent + emit_box(item, indent))
                continue
            lines.append(indent + open_(item, indent))
            visit(item, indent + "  ")
            lines.append(indent + close)

    visit((), "  ")
    return lines


def _dot_text(s: str) -> str:
    """`s` for inside a DOT quoted string, drawn as written. Graphviz reads `\\` escapes there (`\\n`, `\\N`, `\\"`)
    and decodes HTML entities in every string (`&#8238;` is U+202E, a bidi override; `&lt;` is `<`): a `\\`, a `"`
    and an `&` are escaped, so an entity's text in the spec is drawn as that text."""
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;")


def _dot_quote(s: str) -> str:
    return '"' + _dot_text(s) + '"'


def render_dot(d: Drawing) -> str:
    """A `digraph` for Graphviz' dot: one `cluster_` subgraph per block path."""
    def box(b: Box, _: str) -> str:
        label = "\\n".join(_dot_text(line) for line in b.lines)
        tags = _dot_text(f" [{', '.join(b.tags)}]") if b.tags else ""
        style = "rounded,filled,dashed" if b.status == "frozen" else "rounded,filled"
        return (f'{_dot_quote(b.id)} [label="{label}{tags}", fillcolor="{FILL[b.status]}", style="{style}", '
                f'class="{b.status}"];')

    def cluster(path: tuple[str, ...], _: str) -> str:
        return f"subgraph {_dot_quote('cluster_' + '/'.join(path))} {{ label={_dot_quote('/'.join(path))};"

    lines = [f"digraph {_dot_quote(d.name)} {{", '  rankdir=TB;',
             '  node [shape=box, fontname="Courier", fontsize=10];', *_tree(d, box, cluster, "}")]
    for e in d.edges:
        extra = " [style=dashed, label=share]" if e.kind == "share" else ""
        lines.append(f"  {_dot_quote(e.src)} -> {_dot_quote(e.dst)}{extra};")
    return "\n".join([*lines, "}"]) + "\n"


MERMAID_ESCAPES = {"#": "#35;", "&": "#amp;", '"': "#quot;", "<": "#lt;", ">": "#gt;", "`": "#96;"}


def _mermaid_text(s: str) -> str:
    """Mermaid's entity escapes for the characters that end a label or start markup: `"`, `<`, `>`, a backtick
    (a label in backticks is Markdown), `&` (an HTML entity), and `#` itself, which starts Mermaid's own entity
    codes (`#8238;` is U+202E, a bidi override; `#quot;` is `"`), so such a code in the spec is drawn as its text."""
    return "".join(MERMAID_ESCAPES.get(c, c) for c in s)


def render_mermaid(d: Drawing) -> str:
    """A Mermaid `flowchart TB`: ids n0, n1, ... (layer names hold '/'), blocks as nested subgraphs."""
    ids = {b.id: f"n{i}" for i, b in enumerate(d.boxes)}
    cids = {c: f"c{i}" for i, c in enumerate(d.clusters)}

    def box(b: Box, _: str) -> str:
        tags = "".join(f" [{t}]" for t in b.tags)
        label = "<br/>".join(_mermaid_text(line) for line in b.lines) + _mermaid_text(tags)
        return f'{ids[b.id]}["{label}"]:::{b.status}'

    def cluster(path: tuple[str, ...], _: str) -> str:
        return f'subgraph {cids[path]}["{_mermaid_text("/".join(path))}"]'

    lines = ["flowchart TB", *_tree(d, box, cluster, "end")]
    lines += [f"  {ids[e.src]} {'-.->' if e.kind == 'share' else '-->'} {ids[e.dst]}" for e in d.edges]
    lines += [f"  classDef {s} fill:{c},stroke:#555,color:#000" for s, c in FILL.items()]
    return "\n".join(lines) + "\n"
