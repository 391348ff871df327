"""`--collections stages`: one collection per obvious group of layers.

A group is a nested model (`<model>/...`) or a stage named by Keras' application naming: the
name up to its first numbered word that is not the last (`conv2_block1_1_conv` -> `conv2`,
`block1a_dwconv` -> `block1`, `expanded_conv_3_expand` -> `expanded_conv_3`); Keras' automatic
names (`conv2d_3`, `re_lu_1`) are not stages. Groups with fewer than two layers that own
variables are left out. A group gets a glob pattern when one matches exactly its variables,
else one `<layer>/*` per layer.
"""

from __future__ import annotations

import fnmatch
import re
from functools import cache

from specgen.importers.keras.names import Namer


@cache
def _automatic() -> re.Pattern[str]:
    """`<class in snake_case>` or `<class in snake_case>_<n>`: the name Keras gives a layer it was not given one, for
    every class the importer converts or names (the only classes an imported spec's layers come from)."""
    from specgen.importers.keras.convert import REFUSED
    from specgen.importers.keras.graph import INPUT, MODELS
    from specgen.importers.keras.layers import APPLICATION_CLASSES, CONVERTERS
    from specgen.importers.keras.take import CLASSES as TAKE_CLASSES
    from specgen.runtime.keras_weights import snake

    classes = {*CONVERTERS, *REFUSED, *(cls for _, cls in APPLICATION_CLASSES), *TAKE_CLASSES, *MODELS, INPUT}
    names = sorted({snake(cls) for cls in classes}, key=lambda s: (-len(s), s))
    return re.compile(f"(?:{'|'.join(map(re.escape, names))})(?:_[0-9]+)?")


def stage_of(name: str) -> str | None:
    if "/" in name:
        return name.split("/", 1)[0]
    if _automatic().fullmatch(name):
        return None
    words = name.split("_")
    for i, word in enumerate(words[:-1]):
        if any(c.isdigit() for c in word):
            head = re.match(r"^([A-Za-z]*\d+)", word)
            return "_".join([*words[:i], head.group(1) if head else word])
    return None


def stages(layer_names: list[str], variables: list[str]) -> dict[str, list[str]]:
    owners = [n for n in layer_names if any(v.startswith(n + "/") for v in variables)]
    groups: dict[str, list[str]] = {}
    for name in owners:
        if (stage := stage_of(name)) is not None:
            groups.setdefault(stage, []).append(name)
    namer, out = Namer(), {}
    for stage, members in groups.items():
        if len(members) < 2:
            continue
        mine = {v for v in variables if any(v.startswith(m + "/") for m in members)}
        patterns = [f"{stage}/*", f"{stage}_*"]
        exact = next((p for p in patterns if {v for v in variables if fnmatch.fnmatchcase(v, p)} == mine), None)
        out[namer.identifier(stage)] = [exact] if exact else [f"{m}/*" for m in members]
    return out
