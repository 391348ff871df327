"""What the model graph shows, derived from the IR: boxes, edges, clusters; no coordinates (layout.py).

A box is a spec input, a layer (or, with `depth`, a collapsed block), or a spec output. Each layer's
status comes from its variables' collections: trainable, frozen, partly frozen, target (a target
network's copy) or none (no weights); `update` (batch-norm statistics) and `EMA` (shadowed weights)
are tags beside the status, since a batch norm is trainable, updated and EMA'd at once.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from glob import escape as glob_escape
from pathlib import PurePosixPath

from specgen import text
from specgen.ir.graph import producer
from specgen.ir.model import ModelIR, Node
from specgen.ir.restore_rules import MapEntry, rename
from specgen.kinds.features import ema
from specgen.pictures.labels import distinct_suffixes
from specgen.spec.io import RenameKey, RenamePattern, RestoreSource

STATUSES = ("trainable", "frozen", "partly_frozen", "target", "stateless", "input", "output", "block")
TAGS = ("update", "ema")


@dataclass
class Box:
    id: str  # the layer's (or input's, block's) name; outputs are "output:<name>"
    kind: str  # 'input', 'layer', 'block' or 'output'
    lines: list[str]  # label lines, the first is the name
    status: str  # one of STATUSES: the fill colour
    tags: tuple[str, ...] = ()  # of TAGS
    cluster: tuple[str, ...] = ()  # the block path the box sits in ('stage1', '2')
    order: int = 0  # first appearance in the IR, for a stable layout
    params: int = 0  # a collapsed block's parameters
    layers: int = 0  # ... and its layers


@dataclass(frozen=True)
class Edge:
    source: str  # the tensor as the layer reads it: a box id or '<layer>/<extra output>'
    src: str  # the box it leaves
    dst: str  # the box it enters
    kind: str = "data"  # 'data', or 'share' (a shared layer's link to the layer whose weights it uses)


@dataclass
class Drawing:
    name: str
    boxes: list[Box]
    edges: list[Edge]
    clusters: list[tuple[str, ...]] = field(default_factory=list)  # every block path, outer before inner
    counts: dict[str, int] = field(default_factory=dict)  # status/tag -> boxes, for the legend


def _status(paths: list[str], ir: ModelIR, updates: bool = True) -> tuple[str, tuple[str, ...]]:
    """A layer's fill status and tags from its variables' collections; `updates`: False for a layer in inference
    mode (a batch norm whose weights are all frozen keeps its statistics)."""
    sets = {c: set(ir.collections.get(c, ())) for c in ("trainable", "frozen", "target", "update")}
    held = [p for p in paths if p not in sets["update"]]  # statistics are neither trained nor frozen
    trained = sum(p in sets["trainable"] for p in held)
    frozen = sum(p in sets["frozen"] for p in held)
    tags = tuple(t for t, hit in (("update", updates and any(p in sets["update"] for p in paths)),
                                  ("ema", any(ema.shadow(p) in ir.collections.get(ema.ROOT, ()) for p in paths))) if hit)
    if not paths:
        return "stateless", tags
    if any(p in sets["target"] for p in paths):
        return "target", tags
    if trained and frozen:
        return "partly_frozen", tags
    if frozen or (held and not trained):
        return "frozen", tags
    return "trainable", tags


def _optimizers(paths: list[str], ir: ModelIR) -> list[str]:
    return [name for name, claimed in ir.optimizers.items() if set(paths) & set(claimed)]


def _restores(paths: list[str], ir: ModelIR) -> list[str]:
    """The restore sources that may restore one of these paths (without reading them: `specgen restore-plan` does).

    By restore-plan's own rule (ir/restore_rules.rename): a key goes through the first map entry that matches it,
    and a key no entry matches keeps its name; so a source restores a path an entry writes to, or the path itself
    when no entry matches that name; `exclude` drops paths either way. Sources sharing a folder name are told
    apart by as much of their path as it takes (pictures/labels.py).
    """
    restore = ir.training.checkpoint.restore if ir.training else ()
    names = distinct_suffixes([PurePosixPath(str(r.source.from_)) for r in restore])
    # A path is the one label text the spec's checks do not hold to names' characters: a bidi override written
    # as a `\u202e` escape would reorder the picture a reviewer reads, so it is drawn escaped, as curves does.
    return list(dict.fromkeys(text.printable(name) for r, name in zip(restore, names, strict=True)
                              if any(restored(p, r.source) for p in paths)))


def restored(path: str, source: RestoreSource) -> bool:
    """Whether some checkpoint key could restore `path` through `source`: the key `path` itself when no map entry
    matches it (it keeps its name), or a key an entry renames to `path`; never when `exclude` names it."""
    if any(fnmatch.fnmatchcase(path, x) for x in source.exclude):
        return False
    return rename(path, source.map) == path or any(fnmatch.fnmatchcase(path, _written(e)) for e in source.map)


def _written(entry: MapEntry) -> str:
    """The paths a map entry writes, as a glob: a pattern's group references and a prefix's rest become '*'."""
    if isinstance(entry, RenamePattern):
        return re.sub(r"\\(\d+|g<\w+>)", "*", str(entry.to))
    if isinstance(entry, RenameKey):
        return glob_escape(str(entry.to))
    return glob_escape(str(entry.add_prefix or "")) + "*"


def _targets(paths: list[str], ir: ModelIR) -> str:
    for t in ir.training.targets if ir.training else ():
        online = [o for o, tp in t.pairs if tp in paths]
        if online:
            return f"follows {online[0].rpartition('/')[0]}"
    return ""


def _layer_lines(node: Node, paths: list[str], ir: ModelIR) -> list[str]:
    op = node.op + (f"+{node.activation}" if node.activation else "")
    params = 0 if node.shares else sum(v.size for v in node.variables.values())
    facts = [f"{params:,} params"]
    if node.shares:
        facts.append(f"shares {node.shares}")
    facts += [f"opt {o}" for o in _optimizers(paths, ir)]
    facts += [f"restore {r}" for r in _restores(paths, ir)]
    if follows := _targets(paths, ir):
        facts.append(follows)
    return [node.name, f"{op} {text.shape(node.shape)}", ", ".join(facts)]


def drawing(ir: ModelIR, depth: int | None = None) -> Drawing:
    """The boxes and edges of `ir`; with `depth`, layers deeper than `depth` block levels become one box per block."""
    boxes: dict[str, Box] = {}
    for i, inp in enumerate(ir.inputs):
        boxes[inp.name] = Box(inp.name, "input", [inp.name, f"input {inp.dtype} {text.shape(inp.shape)}"], "input",
                              order=i)
    names = {n.name for n in ir.nodes}
    taken = names | {i.name for i in ir.inputs}  # a block's box must not take a layer's name ('enc' and 'enc/fc')
    where: dict[str, str] = {i.name: i.name for i in ir.inputs}  # layer -> the box that draws it
    for node in ir.nodes:
        paths = [v.path for v in node.variables.values()]  # a shared layer's are its owner's: its colour too
        status, tags = _status(paths, ir, not node.inference_mode)
        parts = tuple(node.name.split("/"))
        if depth is not None and len(parts) > depth + 1:
            where[node.name] = _collapse(boxes, parts[:depth + 1], node, status, tags, taken)
            continue
        where[node.name] = node.name
        boxes[node.name] = Box(node.name, "layer", _layer_lines(node, paths, ir), status, tags, parts[:-1], len(boxes))
    edges: list[Edge] = []
    for node in ir.nodes:
        for source in dict.fromkeys(node.inputs):  # a layer reading one tensor twice (add x, x) draws one edge
            src = where[source] if source in where else where[producer(source, names) or source]
            if src != where[node.name]:
                edges.append(Edge(source, src, where[node.name]))
        if node.shares and where[node.shares] != where[node.name]:
            edges.append(Edge(node.shares, where[node.shares], where[node.name], "share"))
    for i, (out, layer) in enumerate(ir.outputs.items()):
        boxes[f"output:{out}"] = Box(f"output:{out}", "output", [out, "output"], "output", order=len(boxes) + i)
        edges.append(Edge(layer, where[layer], f"output:{out}"))
    return _finish(ir.name, list(boxes.values()), list(dict.fromkeys(edges)))


def _collapse(boxes: dict[str, Box], path: tuple[str, ...], node: Node, status: str, tags: tuple[str, ...],
              taken: set[str]) -> str:
    """Fold `node` into the box of its block `path`; the box's status is its layers' when they agree."""
    name = "/".join(path) + ("/" if "/".join(path) in taken else "")
    box = boxes.get(name)
    if box is None:
        box = boxes[name] = Box(name, "block", [name, "", ""], status, tags, path[:-1], len(boxes))
    box.layers += 1
    box.params += 0 if node.shares else sum(v.size for v in node.variables.values())
    box.lines[1] = f"block {text.shape(node.shape)}"  # the block's last layer's output
    box.lines[2] = f"{box.layers} layer{'s' if box.layers > 1 else ''}, {box.params:,} params"
    if status != box.status and "stateless" not in (status, box.status):
        box.status = "partly_frozen" if {status, box.status} <= {"trainable", "frozen", "partly_frozen"} else "block"
    elif box.status == "stateless":
        box.status = status
    box.tags = tuple(t for t in TAGS if t in box.tags or t in tags)
    return name


def _finish(name: str, boxes: list[Box], edges: list[Edge]) -> Drawing:
    first: dict[tuple[str, ...], int] = {}  # block path -> its first box, so blocks are listed in IR order
    for b in boxes:
        for i in range(1, len(b.cluster) + 1):
            first.setdefault(b.cluster[:i], b.order)
    clusters = sorted(first, key=lambda c: (len(c), first[c]))
    counts = {s: sum(b.status == s for b in boxes) for s in STATUSES}
    counts |= {t: sum(t in b.tags for b in boxes) for t in TAGS}
    return Drawing(name, boxes, edges, clusters, counts)
