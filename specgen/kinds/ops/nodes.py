"""A resolved layer and its variables: what an op's rules (this package) produce and read.

They sit here, below spec/ and ir/, because the op modules are spec vocabulary that spec/ imports
(the `Layer` union) while their shape rules build these; specgen/ir/model.py collects them into
the ModelIR. No specgen import here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Index 0 is the dynamic batch dimension (None); a str is a named dynamic dimension (kinds/dims.py).
Shape = tuple[int | str | None, ...]


@dataclass(frozen=True)
class Init:
    """A variable initializer with every argument resolved."""

    kind: str
    args: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Variable:
    """One variable with its spec path, shape, initializer and collections."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    collections: tuple[str, ...]
    init: Init | None = None
    seed: int = 0  # per-variable stream of the stateless initializers
    py_name: str = ""  # attribute on the generated tf.Module
    onnx_name: str = ""  # graph input / initializer name in the ONNX graph
    onnx_perm: tuple[int, ...] | None = None  # TF layout -> ONNX layout
    onnx_shape: tuple[int, ...] = ()
    onnx_split: tuple[int, ...] | None = None  # reshape before onnx_perm (ir/flatten_order.py's kernel rows)
    onnx_order: tuple[int, ...] | None = None  # after onnx_perm, equal blocks of axis 0 in this order (gates)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Node:
    """One layer after resolution: inputs by name, inferred shape, its variables."""

    name: str
    op: str
    inputs: tuple[str, ...]
    input_shapes: tuple[Shape, ...]
    shape: Shape
    dtype: str
    params: dict[str, Any]
    variables: dict[str, Variable]
    activation: str | None
    py_name: str
    onnx_name: str
    flops: int
    index: int  # position in the spec's `layers` list
    shares: str | None = None  # `share:` resolved to the owning layer: `variables` are that layer's
    # Its weights are all frozen in a spec that trains (collections.py `held`): a batch_norm then normalizes
    # with its moving statistics and does not update them, also in training, as Keras' trainable=False.
    inference_mode: bool = False
    # The Keras masks this layer consumes (ir/masks.py), per input position: the id tensors (spec inputs or
    # layers) of the mask_zero embeddings that made each; a mask is "any of them is non-zero" per step.
    input_masks: tuple[tuple[str, ...], ...] = ()

    @property
    def mask(self) -> tuple[str, ...]:
        """The first input's mask (a recurrent layer's, a pool's, an attention's query's); () for none."""
        return self.input_masks[0] if self.input_masks else ()
