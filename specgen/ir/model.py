"""Resolved, render-ready objects: what templates and the runtime consume."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specgen.ir.training import keys
from specgen.ir.training.model import TrainingIR
from specgen.kinds.ops.base import EXTRA_OUTPUT
from specgen.kinds.ops.nodes import Init, Node, Shape, Variable

# The layer-level dataclasses live with the op registry (below spec/ and ir/); they are part of this model.
__all__ = ["FoldedPads", "Init", "Input", "ModelIR", "Node", "PruneScheduleIR", "PrunedWeight", "PruningIR", "Shape",
           "Variable"]


# Wire dtypes cast at the model's entry: what a client sends -> what the layers see.
ENTRY_CASTS = {"uint8": "float32"}


def value_dtype(dtype: str) -> str:
    """The dtype layers read from an input declared `dtype` (raw uint8 pixels become float32)."""
    return ENTRY_CASTS.get(dtype, dtype)


@dataclass(frozen=True)
class Input:
    name: str
    shape: Shape
    dtype: str
    py_name: str
    onnx_name: str

    @property
    def tf_shape(self) -> tuple[int | None, ...]:
        """The TensorFlow signature's shape: named dynamic dimensions (kinds/dims.py) are None there."""
        return tuple(None if isinstance(d, str) else d for d in self.shape)

    @property
    def value_dtype(self) -> str:
        return value_dtype(self.dtype)

    @property
    def entry_cast(self) -> str | None:
        """The dtype the model casts this input to before its first layer, or None."""
        return ENTRY_CASTS.get(self.dtype)


@dataclass(frozen=True)
class PruneScheduleIR:
    kind: str  # 'constant_sparsity' or 'polynomial_decay'
    begin_step: int
    end_step: int | None  # None: masks keep updating until training stops (constant_sparsity only)
    frequency: int
    initial_sparsity: float  # constant_sparsity: its `sparsity`, as are the two below
    final_sparsity: float
    power: float = 1.0

    def sparsity_at(self, step: int) -> float:
        """The target sparsity at `step` (float64), for reports; training computes it in TensorFlow."""
        if self.kind == "constant_sparsity":
            return self.final_sparsity
        assert self.end_step is not None
        p = min(1.0, max(0.0, (step - self.begin_step) / (self.end_step - self.begin_step)))
        sparsity: float = self.final_sparsity + (self.initial_sparsity - self.final_sparsity) * (1.0 - p) ** self.power
        return sparsity

    @property
    def last_step(self) -> int | None:
        """The last step at which masks are recomputed (None: no end)."""
        if self.end_step is None:
            return None
        return self.end_step - (self.end_step - self.begin_step) % self.frequency


@dataclass(frozen=True)
class PrunedWeight:
    path: str  # the weight's variable path
    mask_key: str  # its mask's variable path and checkpoint key: pruning/<path>
    shape: tuple[int, ...]
    layer: str  # the layer that owns the weight

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class PruningIR:
    weights: tuple[PrunedWeight, ...]  # in variable order
    schedule: PruneScheduleIR

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(w.path for w in self.weights)

    def mask_variables(self) -> list[Variable]:
        return [Variable(w.mask_key, w.shape, "float32", (keys.PRUNING,)) for w in self.weights]


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

    @property
    def layer_count(self) -> int:
        """The spec's layers: the nodes less those of extra outputs (kinds/ops/base.py EXTRA_OUTPUT)."""
        return sum(1 for n in self.nodes if n.op != EXTRA_OUTPUT)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    @property
    def model_variables(self) -> tuple[Variable, ...]:
        return tuple(v for v in self.variables if "model" in v.collections)
