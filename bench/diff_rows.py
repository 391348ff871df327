"""Time `specgen diff`'s settings rows (review/sections.py `settings_of`) against the number of leaves that differ.

A restore map written entry by entry for a large pretrained model differs in thousands of leaves; the rows were
found by testing each pair of keys (2.7 s at 4,000, 70 s at 20,000), and are now found through an index of the
keys' ancestors (review/keys.py). This prints the best of several runs at each size and the growth from the
smallest size, beside the growth in leaves: near-linear code grows about as the leaves do.

    .venv/bin/python bench/diff_rows.py            # 500, 2,000, 4,000, 20,000 leaves
    .venv/bin/python bench/diff_rows.py --sizes 500 50000
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

from specgen.review.sections import settings_of

Table = dict[str, str]


def restore_map(n: int) -> tuple[Table, Table]:
    """n restore entries whose `from` changed, `to` kept: n differing leaves."""
    to = {f"checkpoint.restore[0].map[{i}].to": f"t{i}" for i in range(n)}
    return ({f"checkpoint.restore[0].map[{i}].from": f"a{i}" for i in range(n)} | to,
            {f"checkpoint.restore[0].map[{i}].from": f"b{i}" for i in range(n)} | to)


def nulls_filled(n: int) -> tuple[Table, Table]:
    """n entries null in OLD, a mapping in NEW (each null a removed leaf that asks what NEW's leaves hold)."""
    return ({f"train.hooks[{i}]": "null" for i in range(n)},
            {f"train.hooks[{i}].every": str(i) for i in range(n)})


def seconds(tables: tuple[Table, Table], repeat: int) -> float:
    """The best of `repeat` runs, without the garbage collector (its passes grow with what else the process holds)."""
    best = float("inf")
    gc.disable()
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            settings_of("training", *tables)
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 2_000, 4_000, 20_000])
    parser.add_argument("-r", "--repeat", type=int, default=5)
    args = parser.parse_args()
    shapes: dict[str, Callable[[int], tuple[Table, Table]]] = {"restore map": restore_map, "nulls filled": nulls_filled}
    print(f"{'case':<14}{'leaves':>8}{'seconds':>10}{'x time':>9}{'x leaves':>10}")
    for name, shape in shapes.items():
        first = None
        for n in args.sizes:
            taken = seconds(shape(n), args.repeat)
            first = first or (n, taken)
            print(f"{name:<14}{n:>8,}{taken:>10.4f}{taken / first[1]:>9.1f}{n / first[0]:>10.1f}")


if __name__ == "__main__":
    main()
