"""A layered (Sugiyama-style) layout, hand-written so that a picture needs no system binary and no package.

Why not a library (docs/pictures.md#layout has the figures): Graphviz needs its `dot` binary (what breaks
Keras' plot_model on many machines). grandalf 0.8 (pure Python, last release January 2023) lays ResNet50
out in about 40 ms, deterministically, but knows nothing of clusters, which the picture needs to keep a
block's layers together and outline them; a hand-written layout keeps the base install enough for pictures
(no extra, no dependency) and is about 150 lines.

Steps, the classic ones: ranks by longest path (a chain goes straight down); edges spanning several
ranks get one dummy point per rank so they bend around boxes; barycentre sweeps order each rank to cut
crossings (a fan-out sits side by side); each box then moves towards the mean of its neighbours
under a minimum spacing, solved exactly per rank as an isotonic regression (pool adjacent violators).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

H_GAP = 28.0  # pixels between boxes of one rank
V_GAP = 44.0  # between ranks: room for the edges' curves and a cluster's title
SWEEPS = 8  # barycentre and placement passes; more changed nothing measurable on ResNet50 (bench/graph.py)


@dataclass(frozen=True)
class Placed:
    x: dict[str, float]  # box centre
    y: dict[str, float]  # box top
    routes: list[list[tuple[float, float]]]  # per edge: the points it passes, from the source's bottom
    width: float
    height: float


def layout(sizes: dict[str, tuple[float, float]], edges: Sequence[tuple[str, str]],
           groups: dict[str, tuple[str, ...]] | None = None) -> Placed:
    """Place boxes of `sizes` (id -> (width, height), in a stable order) and route `edges` (source, target);
    `groups`: box id -> its nested cluster path, whose members are kept side by side in each rank."""
    order = {v: i for i, v in enumerate(sizes)}
    rank = _ranks(list(sizes), edges, order)
    chains, ranks = _chains(sizes, edges, rank, order)
    width = {**{v: s[0] for v, s in sizes.items()}, **{d: 0.0 for r in ranks for d in r if d not in sizes}}
    up, down = _neighbours(chains)
    position = {v: i for r in ranks for i, v in enumerate(r)}
    for sweep in range(SWEEPS):  # crossing reduction: down, up, down, ...
        _reorder(ranks[1:] if sweep % 2 == 0 else ranks[-2::-1], up if sweep % 2 == 0 else down, position)
    if groups:
        _gather(ranks, groups, position)
    x = _place(ranks, width, up, down)
    tops, heights, y = [], [], 0.0
    for r in ranks:
        tops.append(y)
        heights.append(max((sizes[v][1] for v in r if v in sizes), default=0.0))
        y += heights[-1] + V_GAP
    top = {v: tops[i] for i, r in enumerate(ranks) for v in r}
    routes = [_route(c, x, top, sizes, heights) for c in chains]
    left = min(x[v] - width[v] / 2 for v in x)
    x = {v: x[v] - left for v in x}
    routes = [[(px - left, py) for px, py in r] for r in routes]
    right = max(x[v] + width[v] / 2 for v in x)
    return Placed({v: x[v] for v in sizes}, {v: top[v] for v in sizes}, routes, right, max(y - V_GAP, 0.0))


def _ranks(vertices: list[str], edges: Sequence[tuple[str, str]], order: dict[str, int]) -> dict[str, int]:
    """Longest path from the sources; an edge against the vertex order (a cycle after collapsing) is ignored.
    A source then moves down to just above its first reader, so an input read late does not float at the top."""
    preds: dict[str, list[str]] = {v: [] for v in vertices}
    succs: dict[str, list[str]] = {v: [] for v in vertices}
    for s, t in edges:
        if order[s] < order[t]:
            preds[t].append(s)
            succs[s].append(t)
    rank: dict[str, int] = {}
    for v in sorted(vertices, key=order.__getitem__):
        rank[v] = max((rank[p] + 1 for p in preds[v]), default=0)
    for v in vertices:
        if not preds[v] and succs[v]:
            rank[v] = min(rank[t] for t in succs[v]) - 1
    return rank


def _chains(sizes: dict[str, tuple[float, float]], edges: Sequence[tuple[str, str]], rank: dict[str, int],
            order: dict[str, int]) -> tuple[list[list[str]], list[list[str]]]:
    """Each edge as the vertices it passes (dummies '\\0<edge>:<rank>' between its ends); the ranks' members."""
    ranks: list[list[str]] = [[] for _ in range(max(rank.values(), default=0) + 1)]
    for v in sorted(sizes, key=order.__getitem__):
        ranks[rank[v]].append(v)
    chains = []
    for i, (s, t) in enumerate(edges):
        dummies = [f"\0{i}:{r}" for r in range(rank[s] + 1, rank[t])]
        for d in dummies:
            ranks[int(d.rpartition(":")[2])].append(d)
        chains.append([s, *dummies, t])
    return chains, ranks


def _neighbours(chains: list[list[str]]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    up: dict[str, list[str]] = {}
    down: dict[str, list[str]] = {}
    for c in chains:
        for a, b in pairwise(c):
            down.setdefault(a, []).append(b)
            up.setdefault(b, []).append(a)
    return up, down


def _reorder(ranks: Sequence[list[str]], fixed: dict[str, list[str]], position: dict[str, int]) -> None:
    """Sort each rank by the mean position of its neighbours in the rank swept before it (ties: current order)."""
    for r in ranks:
        keys = {v: sum(position[n] for n in fixed[v]) / len(fixed[v]) if fixed.get(v) else float(position[v])
                for v in r}
        r.sort(key=lambda v: (keys[v], position[v]))
        position.update({v: i for i, v in enumerate(r)})


def _gather(ranks: list[list[str]], groups: dict[str, tuple[str, ...]], position: dict[str, int]) -> None:
    """Make each cluster's boxes contiguous in every rank, so that its frame holds no other box there.

    A cluster sits where its members sit on average (over all ranks); a box sorts by its clusters' places,
    outer first, then its own, so members of one cluster share a key prefix and stay together.
    """
    places: dict[tuple[str, ...], list[int]] = {}
    for v, path in groups.items():
        for i in range(1, len(path) + 1):
            places.setdefault(path[:i], []).append(position[v])
    mean = {c: sum(p) / len(p) for c, p in places.items()}
    for r in ranks:
        def key(v: str) -> list[tuple[float, int, str]]:
            path = groups.get(v, ())
            return [*((mean[path[:i]], 0, "/".join(path[:i])) for i in range(1, len(path) + 1)), (position[v], 1, v)]
        r.sort(key=key)
        position.update({v: i for i, v in enumerate(r)})


def _place(ranks: list[list[str]], width: dict[str, float], up: dict[str, list[str]],
           down: dict[str, list[str]]) -> dict[str, float]:
    """x centres: packed, then each rank pulled towards its neighbours' mean with spacing kept (isotonic)."""
    x: dict[str, float] = {}
    for r in ranks:
        _solve(r, width, [0.0] * len(r), x)
    for sweep in range(SWEEPS):
        for r in ranks if sweep % 2 == 0 else ranks[::-1]:
            wanted = [sum(x[n] for n in near) / len(near) if (near := up.get(v, []) + down.get(v, [])) else x[v]
                      for v in r]
            _solve(r, width, wanted, x)
    return x


def _solve(r: list[str], width: dict[str, float], wanted: list[float], x: dict[str, float]) -> None:
    """Closest x to `wanted` (least squares) keeping the rank's order and gaps: pool adjacent violators."""
    offsets, at = [], 0.0
    for i, v in enumerate(r):
        if i:
            u = r[i - 1]
            at += (width[u] + width[v]) / 2 + (H_GAP if width[v] and width[u] else H_GAP / 2)
        offsets.append(at)
    blocks: list[list[float]] = []  # [mean, count]
    for want, off in zip(wanted, offsets, strict=True):
        blocks.append([want - off, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, n2 = blocks.pop()
            m1, n1 = blocks[-1]
            blocks[-1] = [(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2]
    i = 0
    for mean, count in blocks:
        for _ in range(int(count)):
            x[r[i]] = mean + offsets[i]
            i += 1


def _route(chain: list[str], x: dict[str, float], top: dict[str, float], sizes: dict[str, tuple[float, float]],
           heights: list[float]) -> list[tuple[float, float]]:
    """From the source's bottom, down each dummy's rank (a vertical run beside the boxes), to the target's top."""
    s, t = chain[0], chain[-1]
    points = [(x[s], top[s] + sizes[s][1])]
    for d in chain[1:-1]:
        r = int(d.rpartition(":")[2])
        points += [(x[d], top[d]), (x[d], top[d] + heights[r])]
    points.append((x[t], top[t]))
    return points
