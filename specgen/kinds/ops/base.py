"""What every op definition is made of (the shape helpers the rules share are shapes.py).

No TensorFlow, onnx or jinja2 here: `specgen validate` imports this through the spec union.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from specgen.errors import SpecgenError
from specgen.fields.base import SpecModel
from specgen.kinds.ops.nodes import Init, Node, Shape

FLOAT = "float32"
INTEGER = ("int32", "int64")


class OpError(SpecgenError):
    """A problem with one layer; `key` names the spec key it concerns, so the diagnostic points there."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class VarDecl:
    """A variable an op owns, in TensorFlow layout, and how ONNX wants it.

    `onnx_perm` is the transpose from the TensorFlow value to the ONNX operator's input
    (None: the same layout) and `onnx_shape` the shape after it (None: `shape`). `onnx_split`
    reshapes before the transpose, and `onnx_order` then reorders equal blocks of axis 0
    (an LSTM's gates: Keras i, f, c, o are ONNX i, o, f, c).
    """

    role: str
    shape: tuple[int, ...]
    init: Init
    kind: str = "weight"  # "weight" (trained unless frozen), "update" (batch-norm statistics) or "constant"
    onnx_perm: tuple[int, ...] | None = None
    onnx_shape: tuple[int, ...] | None = None
    onnx_split: tuple[int, ...] | None = None
    onnx_order: tuple[int, ...] | None = None


@dataclass
class OpResult:
    shape: Shape
    dtype: str = FLOAT
    params: dict[str, Any] = field(default_factory=dict)
    variables: list[VarDecl] = field(default_factory=list)
    flops: int = 0
    # Outputs beside the main one (an LSTM's state_h and state_c): name -> (shape, dtype), in the order the
    # renderings return them. A reader names one `<layer>/<name>` (as a block instance's outputs); each
    # becomes a node of op EXTRA_OUTPUT reading the layer (ir/resolve.py), so reach, pruning, export and
    # the report treat it as any layer. The layer's templates assign it: TfStep.extra / OnnxStep.extra.
    extra_outputs: dict[str, tuple[Shape, str]] = field(default_factory=dict)


class OnnxContext(Protocol):
    """What ONNX attribute functions may ask of the lowering (render/onnx_plan.py)."""

    @property
    def opset(self) -> int: ...

    def constant(self, name: str, values: list[int]) -> str:
        """Declare an int64 constant tensor in the graph; returns its name."""
        ...

    def float_constant(self, name: str, value: float) -> str:
        """Declare a float scalar constant in the graph; returns its name."""
        ...

    def zero_padded(self, layer: str) -> bool:
        """Whether `layer`'s output reaches this node as the output of an ONNX Pad (see max_pool)."""
        ...


Rule = Callable[[Any, list[Shape], list[str]], OpResult]
TfAttrs = Callable[[Node], dict[str, Any]]
OnnxAttrs = Callable[[Node, bool, OnnxContext], dict[str, Any]]  # (node, held channels-first, lowering)


def no_tf_attrs(node: Node) -> dict[str, Any]:
    return {}


def no_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class AsActivation:
    """How an op runs when a layer names it in `activation:` (with its default parameters)."""

    flops: int  # per output element
    tf_attrs: Mapping[str, Any] = field(default_factory=dict)
    # (held channels-first, lowering, output tensor name) -> ONNX template attributes
    onnx_attrs: Callable[[bool, OnnxContext, str], dict[str, Any]] = lambda first, ctx, out: {}
    keras: bool = True  # Keras has an activation of this name, which the Keras importer reads (importers/keras/args.py)
    keras2: bool = True  # Keras 2's activation of that name is the same function (hard_sigmoid's is not)


MaskAfter = Literal["first", "union", "none"]
MaskCheck = Callable[[Any, tuple[bool, ...], int], str]  # (layer, which inputs carry a mask, output rank) -> why not
MaskRender = Literal["recurrent", "both_directions", "masked_mean", "attention", "product"]


@dataclass(frozen=True)
class MaskRule:
    """How an op treats the padding mask of a `mask_zero` embedding on its inputs: Keras' `compute_mask`, as
    ir/masks.py follows it through the graph. The default refuses the mask.

    - `after`: the mask after the op: "first" (its first input's, as a Keras compute_mask that returns the mask it
      received), "union" (the union of its inputs' when every input carries one, else none: Keras' Merge and
      Concatenate), "none" (no mask after it: the op consumes or drops it) or None (the op cannot take a mask:
      `reason` says why).
    - `keeps`: with "first", (layer) -> whether the mask goes on (a recurrent layer: when it returns sequences).
    - `check`: (layer, which inputs carry a mask, output rank) -> why this layer cannot take the mask, '' when it can
      (concat along another axis than the last one).
    - `consumes`: how the op's renderings take the mask (Node.mask; render/mask_plan.py builds its attributes, the
      templates/onnx/masks.onnx.j2 macros its ONNX nodes); None: they take none.
    - `reason`: why the op cannot take a mask, for the refusal ('' says specgen does not carry a mask through it).
    - `keras_drops`: the Keras class that drops the mask at this op (it does not support masking), '' when Keras uses
      it: the Keras importer then writes mask_zero false where no other layer uses the mask (importers/keras/masks.py).
    """

    after: MaskAfter | None = None
    keeps: Callable[[Any], bool] | None = None
    check: MaskCheck | None = None
    consumes: MaskRender | None = None
    reason: str = ""
    keras_drops: str = ""


PASSES_MASK = MaskRule("first")  # element-wise ops, dense, dropout, ...: Keras hands the mask on unchanged


Moments = tuple[float, float]  # (mean, second moment E[x^2]) of a value's distribution
# How an op moves the moments (OpDef.moments), each rule's math in ir/scales.py (docs/spec.md#lints):
# - "same": its first input's (an identity, a copy or selection of values, a pool or resize: positions along the
#   spatial and time axes are taken as equal, as neighbouring pixels of an image nearly are);
# - "pointwise": an element-wise function of its input, by OpDef.pointwise;
# - "affine" (rescale's x * scale + offset), "standardize" ((x - mean) / sqrt(variance)), "gain" (a constant gamma);
# - "normalized": gamma * (x - mean) / sqrt(variance + epsilon) + beta over the example's own values (layer_norm),
#   whose scale does not depend on its input's but through epsilon: the propagation restarts there (after an
#   unmodelled input, that input's variance is taken as far above epsilon); "batch_normalized": the same over the
#   batch in training, while in inference mode (Node.inference_mode) its moving statistics, mean 0 and variance 1 at
#   initialization, leave gamma * x / sqrt(1 + epsilon) + beta; "rms_normalized": x / sqrt(mean(x^2) + epsilon) *
#   scale, restarting too (E[y^2] is E[scale^2]; after an unmodelled input its mean is taken as 0);
# - "lookup": a table's rows (an embedding's): the initializer's moments, whatever the input (only its shape or
#   indices are read), and the reference the layers after it are compared with;
# - "sum", "difference", "product", "joined" (concatenated, weighted by each input's size along the axis);
# - "extra": one of its producer's extra outputs (EXTRA_OUTPUT), whose moments the producer's Derived rule gives.
MomentRule = Literal["same", "pointwise", "affine", "standardize", "gain", "normalized", "batch_normalized",
                     "rms_normalized", "lookup", "sum", "difference", "product", "joined", "extra"]
WeightMoments = Callable[[str], Moments]  # a variable role of the node -> the mean and E[w^2] of one initial weight
ActivationMoments = Callable[[str, Moments], Moments]  # (element-wise op, a Gaussian's moments) -> its output's
Outputs = dict[str, Moments]  # "": the main output; then each extra output (OpResult.extra_outputs) by name


@dataclass(frozen=True)
class Derived:
    """An op whose own module computes its outputs' moments (a recurrent layer, attention, a reduction).

    - `moments`: (node, its inputs' moments, its weights' moments, the element-wise ops' moments) -> Outputs, or a
      str saying why this node's cannot be modelled. The inputs it `reads` are never None; the others may be (not
      modelled).
    - `reads`: (node) -> the input positions its output's scale depends on (an attention's value input, not its
      query, key or mask): the lint marks the output not modelled only when one of these is.
    - `bounded`: its outputs are held within +-1 by its own gates (a recurrent layer): a small spread at
      initialization is the layer's design (Keras' defaults give a stacked LSTM 0.05), not an initializer's
      mistake, so the lint does not warn that it shrinks (it still warns about saturation: ir/lints.py).

    Each module's docstring of the function says what it assumes (docs/spec.md#lints lists them).
    """

    moments: Callable[[Node, list[Moments | None], WeightMoments, ActivationMoments], Outputs | str]
    reads: Callable[[Node], tuple[int, ...]]
    bounded: bool = False


@dataclass(frozen=True)
class Unmodelled:
    """An op whose output scale the lint cannot model from its input's mean and variance: `reason` says why
    (`specgen report` prints it under its table, for the '-' of the op and of the layers after it)."""

    reason: str


@dataclass(frozen=True)
class Weighted:
    """An op whose output is a weighted sum of its input's values (the initialization-scale lint, ir/scales.py).

    - `kernels`: the roles of its kernels, applied in this order (separable_conv2d: depthwise, then pointwise).
    - `fan`: the terms each output sums per kernel: "all" (every input value the kernel reads: a dense layer,
      conv2d), "window" (one input channel's window: a depthwise kernel, which a `depthwise_kernel` role always is)
      or "strided" (a transposed convolution's window over its strides).
    - `init_key`: the spec key of the last kernel's initializer, named in the lint's advice.
    """

    kernels: tuple[str, ...] = ("kernel",)
    fan: Literal["all", "window", "strided"] = "all"
    init_key: str = "kernel_init"


@dataclass(frozen=True)
class Pointwise:
    """An element-wise op as the initialization-scale lint sees it (ir/gains.py, ir/scales.py; docs/spec.md#lints).

    - `moments`: (mean, std, the node's params) -> the mean and E[y^2] of the op's output for a Gaussian input
      (kinds/ops/moments.py: in closed form, or by Simpson's rule).
    - `he`: He initialization keeps the scale before it (relu-like); the lint suggests Glorot's otherwise.
    - `saturates`: (|x| beyond which its slope is under a tenth of its peak, what happens there) for an activation
      that flattens on both sides (tanh, sigmoid, hard_sigmoid); None for the others.
    """

    moments: Callable[[float, float, Mapping[str, Any]], Moments]
    he: bool = False
    saturates: tuple[float, str] | None = None


PadFolding = Literal["zero_pad", "zeros", "max"]


def needs_none(node: Node) -> tuple[tuple[str, int], ...]:
    return ()


def never(layer: Any) -> bool:
    return False


@dataclass(frozen=True)
class OpDef:
    """Everything specgen knows about one op; the registry derives every op list from these.

    - `spec`: the pydantic model of the layer (a family may share one, e.g. max_pool/avg_pool).
    - `infer`: the shape rule: (layer, input shapes, input dtypes) -> OpResult with the output
      shape and dtype, render params, variables (with their ONNX layout) and forward FLOPs,
      computed together because they need the same derived sizes.
    - `tf_attrs` / `onnx_attrs`: the literals templates/tf/ops and templates/onnx/ops place.
    - `layout`: the ONNX layout the op wants: "first" (channels-first: Conv, pools,
      BatchNormalization), "any" (element-wise: runs in its input's layout) or "last".
    - `tf_template` / `onnx_template`: template names when not the op's own name; an
      `onnx_template` of None means the op adds no ONNX node (dropout: the identity at inference).
    - `onnx_variant`: picks the ONNX template per node among `onnx_template` and `onnx_variants`.
    - `as_activation`: set when the op may be named in a layer's `activation:` key.
    - `activation_after`: a layer's `activation:` key runs as a step after the op (True, the default);
      False when the op uses it itself (a recurrent cell's activation).
    - `symbolic`: the rule handles str dimensions (named dynamic ones) in its input shapes.
    - `gradient`: which inputs the op passes gradients to: True (all, the default), False (none,
      e.g. stop_gradient) or one flag per input position (e.g. a gather's index input carries none).
      Integer tensors never carry a gradient whatever this says (ir/reach.py, the reachability check).

    Capabilities the modules outside this package ask of an op (they name no op; tests/test_op_registry.py
    fails on an op name compared or listed outside specgen/kinds/ops). The defaults fit most ops:
    - `mask`: how it treats a Keras padding mask (MaskRule; ir/masks.py, render/mask_plan.py); the default refuses one.
    - `compute_dtype`: "float32" when it computes in float32 under a mixed-precision policy (normalizations; its
      variables are then read uncast: render/train_plan.py, runtime/lib/layers.py's in_float32); "policy" otherwise.
    - `moments`: how the initialization-scale lint (ir/scales.py) takes its output's moments from its inputs': every
      op declares one (tests/test_init_scale_ops.py): Weighted (a kernel's weighted sum), a MomentRule (above:
      "same", "pointwise", "normalized", ...), Derived (its module computes them: recurrent layers, attention) or
      Unmodelled (softmax: the reason the report prints for its '-'). None: undeclared, which the lint reports as
      not modelled.
    - `pointwise`: an element-wise op's moments on a Gaussian, and what the lint says of it (Pointwise).
    - `non_negative`: its output is never below 0 (relu, relu6): a max_pool after it may take a zero pad into its
      own pads (ir/pad_folding.py).
    - `probabilities`: its output is a probability in [0, 1] (softmax, sigmoid, hard_sigmoid), as an op or an
      `activation:`: a loss that takes logits warns reading it (ir/lints_logits.py).
    - `pad_folding`: "zero_pad" (its ONNX node is a zero Pad that the reader may take into its own pads), "zeros" (it
      pads with zeros, so it takes any such Pad: convolutions), "max" (it pads with -inf: takes one only after a
      `non_negative` op, when each window keeps a real value) or None. ir/pad_folding.py, render/onnx_plan.py.
    - `flatten_order`: "flattens" (it flattens its input, which ir/flatten_order.py may leave channels-first),
      "kernel_rows" (its `kernel`'s rows are its input's features, so that flatten's order is undone by permuting
      them at export: dense) or None.
    - `id_limit`: the param bounding the integer ids it reads (embedding: vocab_size), '' when none: the parity
      check draws its random ids below it (runtime/parity.py); `ids_checked`: training data is checked against it
      first (runtime/sources/context.py).
    - `bounds_steps`: its time dimension (param `steps`) is at most param `max_length` at run time; export records
      the bound of a named one (runtime/lengths.py).
    - `needs_sizes`: (node) -> the named dimensions of its inputs it needs a smallest size of, for a reason other than
      a window (which the shape rules already write as a derived dimension): (dimension, least size) pairs, e.g.
      take's index along a named axis. runtime/sample_sizes.py adds them to the lower bounds that export records,
      parity draws from, infer/serve enforce and `specgen diff` compares.
    - `keras`: the Keras classes (keras.layers) the Keras importer turns into this op (importers/keras).
    - `xla_refusal`: why train.jit_compile cannot compile its training step with XLA, '' when it can
      (ir/training/jit_compile.py).
    - `stateful`: (layer) -> whether a training call draws random numbers or changes state (dropout with a rate,
      batch_norm's moving statistics), which Levenberg-Marquardt refuses by the compat row of the op's name
      (kinds/features/levenberg_marquardt.py REFUSED).
    - `folds_away`: the export may fold its variables into the layer before it (batch_norm: runtime/onnx_export.py),
      so a pruning mask on them would leave no zero in the model; `prune` refuses them (ir/pruning.py).
    - `variance`: (variable, params key of the epsilon added first, '' for none): the variance it takes the square
      root of, which the export refuses below what that root takes, naming it (runtime/onnx_export.py).
    - `training_only`: the spec keys (a key covers its sub-keys: `kernel_init` its `kernel_init.kind`) that change
      only how the layer trains, never what it computes from given weights: the initializers of variables a
      checkpoint restores, batch-norm momentum, dropout rates. `specgen diff` lists a change to one under
      `training`, not as a `layers` break (review/layers.py); tests/test_diff_sections_r4.py checks that every
      initializer key of every op is listed.
    """

    name: str
    spec: type[SpecModel]
    infer: Rule
    tf_attrs: TfAttrs = no_tf_attrs
    onnx_attrs: OnnxAttrs = no_onnx_attrs
    layout: Literal["first", "any", "last"] = "last"
    tf_template: str = ""
    onnx_template: str | None = ""
    onnx_variant: Callable[[Node], str] | None = None
    onnx_variants: tuple[str, ...] = ()
    as_activation: AsActivation | None = None
    gradient: bool | tuple[bool, ...] = True
    activation_after: bool = True
    # Whether the rule takes named dynamic dimensions (kinds/dims.py); an op that does not is refused
    # one with a positioned error naming the symbol (kinds/ops/__init__.py `infer`), never mis-sized.
    symbolic: bool = False
    mask: MaskRule = MaskRule()
    compute_dtype: Literal["policy", "float32"] = "policy"
    moments: Weighted | MomentRule | Derived | Unmodelled | None = None
    pointwise: Pointwise | None = None
    non_negative: bool = False
    probabilities: bool = False
    pad_folding: PadFolding | None = None
    flatten_order: Literal["flattens", "kernel_rows"] | None = None
    id_limit: str = ""
    ids_checked: bool = False
    bounds_steps: bool = False
    needs_sizes: Callable[[Node], tuple[tuple[str, int], ...]] = needs_none
    keras: tuple[str, ...] = ()
    xla_refusal: str = ""
    stateful: Callable[[Any], bool] = never
    folds_away: bool = False
    variance: tuple[str, str] | None = None
    training_only: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.tf_template:
            object.__setattr__(self, "tf_template", self.name)
        if self.onnx_template == "":
            object.__setattr__(self, "onnx_template", self.name)

    @property
    def onnx_templates(self) -> tuple[str, ...]:
        """Every ONNX template this op may render through (for the completeness test)."""
        return () if self.onnx_template is None else (self.onnx_template, *self.onnx_variants)

    def onnx_template_for(self, node: Node) -> str | None:
        return self.onnx_variant(node) if self.onnx_variant else self.onnx_template

    def passes_gradient(self, position: int) -> bool:
        """Whether a gradient at this op's output reaches its input at `position` (dtype aside)."""
        if isinstance(self.gradient, bool):
            return self.gradient
        return position < len(self.gradient) and self.gradient[position]


def resolve_init(spec: Any) -> Init:
    if isinstance(spec, str):
        return Init(spec)
    args = tuple((k, float(v)) for k, v in spec.model_dump(exclude={"kind"}).items())
    return Init(spec.kind, args)


# The op of the nodes ir/resolve.py adds for OpResult.extra_outputs. Not in the registry (no spec may
# write it): kinds/ops/__init__.py `op_def` returns it; the renderings assign its tensor in its producer's step.
EXTRA_OUTPUT = "extra_output"


def _extra_infer(layer: Any, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    raise AssertionError("extra outputs are made by their producer's rule")  # never called: see EXTRA_OUTPUT


EXTRA_OUTPUT_DEF = OpDef(EXTRA_OUTPUT, SpecModel, _extra_infer, onnx_template=EXTRA_OUTPUT, moments="extra")
