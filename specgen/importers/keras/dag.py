"""The flat DAG of a Keras model that graph.py builds and the converters read: its inputs, layers and outputs.

Tensors are keyed `<scope><layer>:<node>:<tensor>` (tensor_key) while the config is walked; once aliases
are resolved, a layer's inputs name their producers (layer paths or input names). Nothing here imports Keras.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Call arguments by name that a class's converter reads (importers/keras/attention.py): kept, not refused.
# Tensors among them follow the positional ones in KLayer.inputs, in this order.
STATEFUL = ("LSTM", "GRU", "SimpleRNN")
CALL_KWARGS = {"MultiHeadAttention": ("value", "key", "attention_mask", "use_causal_mask"),
               # a list of tensors, the states to start from: the spec's initial_state (recurrent.py's recurrent)
               **{cls: ("initial_state",) for cls in STATEFUL}}


@dataclass
class Ref:
    """A tensor argument of a layer call, before aliases are resolved."""

    key: str


@dataclass
class KLayer:
    name: str  # Keras path: "dense", or "inner/dense" inside the nested model "inner"
    cls: str
    module: str
    config: dict[str, Any]
    args: list[Any]  # Ref for tensors, plain values for constants (operations like `x + 3.0`)
    # Named call arguments a converter reads (CALL_KWARGS): a Ref for a tensor, else the plain value.
    kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)  # producers (layer paths or input names), resolved
    shares: str | None = None  # a later call of a shared layer: the path of the first call, whose weights it uses
    # The mask_zero masks Keras hands this call (`mask`, `query_mask`, ...: masks.py), as the id tensors they are
    # made from: tensor keys while flattening, producers once resolved. None: no record (Sequential, Keras 2).
    masks: dict[str, list[str]] | None = None

    @property
    def constants(self) -> list[Any]:
        return [a for a in self.args if not isinstance(a, Ref)]


@dataclass
class KInput:
    name: str
    shape: list[Any]  # without the batch dimension; None where Keras leaves a size open
    dtype: str


@dataclass
class KGraph:
    name: str
    inputs: list[KInput]
    layers: list[KLayer]
    outputs: list[tuple[str, str]]  # (output name, producer)
    # The layers (KLayer.name) in the order Keras runs them (run_order.py); empty: the order of `layers`
    order: list[str] = field(default_factory=list)


def tensor_key(scope: str, ref: tuple[Any, ...] | list[Any]) -> str:
    """A tensor's key from a Keras reference `[layer, node, tensor, ...]` inside the model at `scope`."""
    return f"{scope}{ref[0]}:{ref[1]}:{ref[2]}"
