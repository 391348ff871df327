"""Keras' Bidirectional(LSTM / GRU / SimpleRNN) as a spec `bidirectional` layer.

The wrapped layer's config is read key by key by the recurrent converter (recurrent.py), as if it were a
layer of the graph, and becomes the spec's nested `layer:`. Keras writes the backward copy out in full
(`backward_layer`); it must be the forward layer reading backwards (the same keys but its name and
`go_backwards`), since the spec has one configuration for both halves. merge_mode None (two outputs) is
the spec's `none`: its outputs and the states of return_state map onto `<layer>/forward`,
`<layer>/backward`, `<layer>/forward_state_h`, ... in Keras' list order (convert.py). The weights are
keyed `<layer>/forward/<weight>` and `<layer>/backward/<weight>` by specgen/runtime/keras_weights.py, so
they restore by identity.
"""

from __future__ import annotations

from typing import Any

from specgen.importers.keras.args import Args, short
from specgen.importers.keras.base import Converter, Shapes
from specgen.importers.keras.dag import KLayer
from specgen.importers.keras.errors import custom_class, custom_problem
from specgen.importers.keras.recurrent import RECURRENT_CLASSES, recurrent

MERGE_MODES = ("concat", "sum", "mul", "ave")


def _wrapped(a: Args, key: str) -> tuple[str, dict[str, Any]]:
    value = a.get(key)
    cls = value.get("class_name") if isinstance(value, dict) else None
    config = value.get("config") if isinstance(value, dict) else None
    if cls not in RECURRENT_CLASSES or not isinstance(config, dict):
        raise a.refuse(key, "a wrapped LSTM, GRU or SimpleRNN")
    if (why := custom_class(value.get("module"), value.get("registered_name"), str(cls))) is not None:
        raise custom_problem(a.layer.name, a.layer.cls, f"its {key} is {why}")
    return str(cls), config


def bidirectional(a: Args, shapes: Shapes) -> dict[str, Any]:
    if a.keras2:
        raise a.refuse("layer", "Keras 2 files name a Bidirectional's weights differently; save it with Keras 3")
    merge = a.get("merge_mode", "concat")
    if merge is not None and merge not in MERGE_MODES:
        raise a.refuse("merge_mode", "merge_mode concat, sum, mul, ave or None")
    merge = "none" if merge is None else merge  # Keras' None: the spec's none (both halves as outputs)
    keys = _spec_keys(a, "layer", shapes, a.notes)
    if a.get("backward_layer") is not None:  # compared in spec form: Keras' configs differ in object ids
        back = _spec_keys(a, "backward_layer", shapes, [])
        flipped = {k: v for k, v in keys.items() if k != "go_backwards"} | ({} if keys.get("go_backwards") else
                                                                          {"go_backwards": True})
        if back != flipped:
            raise a.refuse("backward_layer", f"the forward {a.config['layer'].get('class_name')} reading backwards "
                           f"(received {short(a.config['backward_layer'])})")
    return {"op": "bidirectional", "layer": keys, **({"merge_mode": merge} if merge != "concat" else {})}


def _spec_keys(a: Args, key: str, shapes: Shapes, notes: list[tuple[str, str]]) -> dict[str, Any]:
    """The wrapped recurrent layer's spec keys, its config read key by key as a layer of its own."""
    cls, config = _wrapped(a, key)
    inner = Args(KLayer(f"{a.layer.name}/{config.get('name', key)}", cls, "keras.layers", config, []), a.keras2, notes)
    found = recurrent(inner, shapes)
    inner.finish()
    return found


CONVERTERS_BIDIRECTIONAL: dict[str, Converter] = {"Bidirectional": bidirectional}
