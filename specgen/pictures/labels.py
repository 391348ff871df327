"""Short names for paths in a picture: the fewest trailing components that tell each path from the others.

A folder's own name is what a reader recognises (`runs/tiny` is "tiny"), but two runs (or restore sources) kept
under different parents often share it (`a/run`, `b/run`); labelled by name alone, their lines or marks would
read as one. `specgen curves` labels its runs and `specgen graph` its restore sources with this.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath


def _suffix(parts: tuple[str, ...], count: int) -> str:
    return str(PurePosixPath(*parts[-count:])) if parts else "."


def distinct_suffixes(paths: Sequence[PurePosixPath]) -> list[str]:
    """For each path, its shortest suffix (whole components) that no other, different path ends in; the same
    path given twice gets the same label. A path with no components (`.`) is `.`."""
    parts = [p.parts for p in paths]
    labels = []
    for mine in parts:
        others = {other for other in parts if other != mine}
        count = 1
        # Distinct paths differ in some component counted from the end (or one is longer): this ends.
        while count < len(mine) and any(_suffix(other, count) == _suffix(mine, count) for other in others):
            count += 1
        labels.append(_suffix(mine, count))
    return labels
