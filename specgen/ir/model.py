"""Resolved, render-ready objects: what templates and the runtime consume."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specgen.ir.training.model import TrainingIR

if TYPE_CHECKING:
    from specgen.ir.pruning import PruningIR

Shape = tuple[int | None, ...]  # index 0 is the dynamic batch dimension (None)


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

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Input:
    name: str
    shape: Shape
    dtype: str
    py_name: str
    onnx_name: str


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


@dataclass(frozen=True)
class FoldedPads:
    """Zero pads the ONNX graph writes into their readers' `pads` (ir/pad_folding.py)."""

    pads: frozenset[str] = frozenset()  # pad layers that emit no ONNX node
    extra: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)  # reader -> pads to add (ONNX order)


@dataclass(frozen=True)
class ModelIR:
    """Everything needed to render and report one spec."""

    name: str
    class_name: str
    doc: str
    source: str  # spec file name shown in generated headers
    inputs: tuple[Input, ...]
    nodes: tuple[Node, ...]
    outputs: dict[str, str]  # output name -> layer name
    variables: tuple[Variable, ...]  # model variables, then training state
    collections: dict[str, tuple[str, ...]]  # collection -> variable paths
    opset: int
    ir_version: int
    dynamic_batch: bool
    optimizers: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> paths
    training: TrainingIR | None = None  # set by build_ir; None only for hand-made IRs
    skip_lints: tuple[str, ...] = ()  # the spec's `lints.skip`
    pruning: PruningIR | None = None  # the `prune` section (ir/pruning.py); None: nothing is pruned
    nchw_flattens: frozenset[str] = frozenset()  # flattens ONNX runs channels-first (ir/flatten_order.py)
    folded_pads: FoldedPads = field(default_factory=FoldedPads)  # zero pads ONNX writes into readers' pads

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    @property
    def model_variables(self) -> tuple[Variable, ...]:
        return tuple(v for v in self.variables if "model" in v.collections)
