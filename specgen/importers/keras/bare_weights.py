"""Name a bare Keras 3 `.weights.h5`'s variables by each layer's config (`import keras --weights`).

Such a file stores a layer's variables by index only (`bn/vars/0`, ...). The weight reader names them
from the class's variable order, but where an option removes one (`BatchNormalization(scale=False)`
has no gamma, `center=False` no beta) three indexed arrays fit two orders and it cannot tell which:
it leaves them as `<layer>/vars/<i>`, and a restore would leave those variables to their initializers.
The importer has the model's config, so it knows the order: it writes one restore-map entry per such
variable. A file whose count contradicts the config is refused (it was written by another model).
"""

from __future__ import annotations

from pathlib import Path

from specgen.importers.keras.dag import KGraph
from specgen.importers.keras.errors import ImportProblem, layer_problem
from specgen.runtime.keras_weights import OPTIONS, VARIABLES, KerasFileError, read_weights
from specgen.runtime.weight_files import is_keras_file

__all__ = ["indexed_map"]


def indexed_map(weights: Path, graph: KGraph, keys: dict[str, str]) -> list[dict[str, str]]:
    """Restore-map entries `{from: <layer>/vars/<i>, to: <spec path>}`; `keys` is spec path -> Keras key."""
    if not is_keras_file(weights):
        return []  # a TensorFlow checkpoint names its variables
    try:
        stored = read_weights(weights)
    except KerasFileError as exc:
        raise ImportProblem(f"--weights: {exc}") from None
    spec_path = {key: path for path, key in keys.items()}
    entries = []
    for layer in graph.layers:
        prefix = f"{layer.name}/vars/"
        indexed = sorted((k for k in stored if k.startswith(prefix) and k[len(prefix):].isdigit()),
                         key=lambda k: int(k[len(prefix):]))
        if layer.shares is not None or not indexed or layer.cls not in VARIABLES:
            continue
        order = [name for name, option in VARIABLES[layer.cls] if option is None or OPTIONS[option](layer.config)]
        if [k[len(prefix):] for k in indexed] != [str(i) for i in range(len(order))]:
            raise layer_problem(layer.name, layer.cls, f"--weights {weights.name} holds {len(indexed)} variables for "
                                f"this layer, but its config gives {len(order)} ({', '.join(order)}): the file was "
                                "written by a different model")
        entries += [{"from": key, "to": spec_path[f"{layer.name}/{name}"]}
                    for key, name in zip(indexed, order, strict=True) if f"{layer.name}/{name}" in spec_path]
    return entries
