"""Lint warnings that several instances of one block repeat, reported once (docs/spec.md#lints).

A block layer expanded N times (`repeat: 12`) gives N layers whose findings differ only by the instance's
name, each a warning at the same place in the file. As the expansion's errors are (spec/expand.py `_unique`),
such a warning is reported once: the first instance's, naming the block's layer and the instances that
repeat it, in instance order ('encoder/2' before 'encoder/10').
"""

from __future__ import annotations

from dataclasses import replace

from specgen.diagnostics import Diagnostic, Position, natural_key
from specgen.ir.model import Node
from specgen.spec.load import LoadedSpec
from specgen.spec.origins import Origin, Origins
from specgen.spec.source_map import PathKey

SHOWN = 3  # instances named in a merged warning; the rest are counted

Finding = tuple[Node, str, Diagnostic]  # the layer, the lint's words (without the instance note), the warning
GroupKey = tuple[Position | None, PathKey, str] | tuple[int]


def once_per_block_layer(loaded: LoadedSpec, found: list[Finding]) -> list[Diagnostic]:
    """`found`'s warnings, those of one block layer that say the same but for the instance's name merged."""
    origins = loaded.origins
    if origins is None:  # no blocks: every layer is written once
        return [diagnostic for _, _, diagnostic in found]
    groups: dict[GroupKey, list[tuple[Node, Origin, Diagnostic]]] = {}
    for n, (node, message, diagnostic) in enumerate(found):
        origin = origins.items[node.index]
        key: GroupKey = (n,)
        if origin.sites:  # in an instance: its name is the only part of the words that differs between instances
            site = origin.sites[0].name
            key = (diagnostic.position, origin.loc, message.replace(f"'{site}/", "'\0/"))
        groups.setdefault(key, []).append((node, origin, diagnostic))
    return [_merged(origins, group) for group in groups.values()]


def _merged(origins: Origins, group: list[tuple[Node, Origin, Diagnostic]]) -> Diagnostic:
    """One warning for the instances in `group`: the first instance's, then which instances repeat it."""
    node, origin, diagnostic = min(group, key=lambda item: natural_key(item[1].sites[0].name if item[1].sites else ""))
    if len(group) == 1:
        return diagnostic
    site = origin.sites[0]
    names = sorted((o.sites[0].name for _, o, _ in group), key=natural_key)
    total = len({o.sites[0].name for o in origins.items if o.loc == origin.loc and o.sites})
    share = ("both" if total == 2 else f"all {total}") if len(names) == total else f"{len(names)} of the {total}"
    shown = ", ".join(f"'{name}'" for name in names[:SHOWN])
    rest = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    local = node.name.removeprefix(f"{site.name}/")
    return replace(diagnostic, message=f"{diagnostic.message}; the same in {share} instances of block "
                                       f"'{site.block}' (its layer '{local}'): {shown}{rest}")
