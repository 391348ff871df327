"""The scale of each layer's output at initialization, as `specgen report`'s column and the init_scale lint read it.

Initialization scale: every model input is taken as mean 0, variance 1 (a `normalize` or
`rescale` that reads an input, directly or through ops that keep the moments, is taken to
produce that), and the mean and second
moment E[x^2] of each layer's output are propagated through the initializers' distributions
(fan-in as TensorFlow counts it from the kernel shape), the activations (on a Gaussian with
those moments) and the other ops, each by its OpDef.moments rule (kinds/ops/base.py), at inference
(dropout is the identity) and with batch norms normalizing by batch statistics as in training.
Weights, inputs, branches and a layer's units are independent; positions along the spatial and
time axes that pools, resizes and attention combine are taken as equal. An op that cannot be
modelled (softmax: OpDef.moments Unmodelled) leaves its output and the layers after it unmodelled,
up to a layer whose output does not depend on its input's scale (a normalization, an embedding),
where the propagation restarts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from specgen.fields.base import FLOAT32_MAX
from specgen.ir.gains import activation, init_moments
from specgen.ir.model import ModelIR, Node
from specgen.kinds.ops import op_def
from specgen.kinds.ops.base import Derived, Moments, Outputs, Unmodelled, Weighted
from specgen.kinds.ops.moments import plus, variance, weighted

OVERFLOW: Moments = (0.0, math.inf)  # the moments of a layer whose values are inf in float32 (std inf)
COMBINES = ("sum", "difference", "product", "joined")  # the rules that read every input


@dataclass(frozen=True)
class Scale:
    """One layer's output at initialization: its moments, and the weighted step that made them."""

    moments: Moments | None  # None: not modelled (`source` is the layer where that began, `why` says why there)
    gain: float | None = None  # E[y^2] / E[x^2] of the layer's weighted sum (layers with a kernel)
    fan_in: int = 0  # terms summed per output of that step
    reference: float = 1.0  # the std the ratio is taken to: the input's, or an embedding's output's
    pre: Moments | None = None  # the moments before the layer's `activation:` (saturation is judged there)
    why: str = ""  # not modelled here first: why (OpDef.moments Unmodelled's reason, or a Derived rule's)
    source: str = ""  # not modelled: the layer where that began (this one's own name there)

    @property
    def std(self) -> float | None:
        """The output's standard deviation over the reference's."""
        if self.moments is None:
            return None
        mean, square = self.moments
        return math.sqrt(max(square - mean * mean, 0.0)) / self.reference


def _fan(node: Node, weighted: Weighted, role: str) -> float:
    """Terms summed per output of one kernel (interior positions; padding ignored)."""
    shape = node.variables[role].shape
    if weighted.fan == "strided":  # each output meets about kh*kw / (sh*sw) positions of each input channel
        sh, sw = node.params["strides"]
        terms: float = shape[0] * shape[1] * shape[3] / (sh * sw)
        return terms
    if role == "depthwise_kernel" or weighted.fan == "window":
        return shape[0] * shape[1]  # one input channel per output, though TensorFlow's fan-in counts all
    return math.prod(shape[:-1])


def kernels_of(node: Node) -> Weighted | None:
    """How the node's op sums its input (OpDef.moments), None when it has no kernel."""
    rule = op_def(node.op).moments
    return rule if isinstance(rule, Weighted) else None


def _reads(node: Node) -> tuple[int, ...]:
    """The positions of the inputs whose scale the node's output depends on, by its OpDef.moments: () where the
    propagation restarts (a normalization, a table lookup)."""
    rule = op_def(node.op).moments
    if isinstance(rule, Derived):
        return rule.reads(node)
    if rule in COMBINES:
        return tuple(range(len(node.inputs)))
    if rule in ("normalized", "rms_normalized", "lookup") or (rule == "batch_normalized" and not node.inference_mode):
        return ()
    return (0,) if node.inputs else ()


def resets(node: Node) -> bool:
    """Whether the node normalizes its input whatever its scale (a spread before it is harmless)."""
    rule = op_def(node.op).moments
    return rule in ("normalized", "rms_normalized") or (rule == "batch_normalized" and not node.inference_mode)


def _unmodelled(op: str) -> str:
    """Why op `op`'s output is not modelled."""
    rule = op_def(op).moments
    if isinstance(rule, Unmodelled):
        return rule.reason
    return f"op '{op}' declares no rule for its moments (OpDef.moments)"


def _elementwise(name: str, moments: Moments) -> Moments:
    """An element-wise op's moments on a Gaussian, for the Derived rules (a recurrent cell's activations)."""
    found = activation(name, moments, {})
    if found is None:
        raise ValueError(f"op '{name}' is not element-wise: it has no Pointwise (OpDef.pointwise)")
    return found


def _layer(node: Node, ins: list[Moments | None], inputs: set[str], made: dict[str, Outputs]) -> tuple[Scale, Outputs]:
    """The moments of one node's output before its `activation:`, by its op's OpDef.moments, and (Derived rules) the
    moments of each of its outputs. The inputs _reads() names are not None."""
    rule, first = op_def(node.op).moments, ins[0] if ins else None
    if isinstance(rule, Derived):
        weight = lambda role: init_moments(node.variables[role].init, node.variables[role].shape)  # noqa: E731
        found = rule.moments(node, ins, weight, _elementwise)
        return (Scale(None, why=found), {}) if isinstance(found, str) else (Scale(found[""]), found)
    if isinstance(rule, Unmodelled) or rule is None:
        return Scale(None, why=_unmodelled(node.op)), {}
    # A normalization's epsilon counts where its input's variance is not far above it; after an unmodelled input
    # that variance is taken to be (and an rms_norm's input to have mean 0).
    if rule == "rms_normalized":  # x / sqrt(mean(x^2) + epsilon) * scale
        scale, eps = init_moments(node.variables["scale"].init, ()), node.params["epsilon"]
        if first is None:
            return Scale((0.0, scale[1])), {}
        return Scale((scale[0] * first[0] / math.sqrt(first[1] + eps), scale[1] * first[1] / (first[1] + eps))), {}
    if rule in ("normalized", "batch_normalized"):
        gamma = init_moments(node.variables["gamma"].init, ()) if "gamma" in node.variables else (1.0, 1.0)
        beta = init_moments(node.variables["beta"].init, ()) if "beta" in node.variables else (0.0, 0.0)
        if rule == "normalized" or not node.inference_mode:  # gamma (x - mean) / sqrt(variance + epsilon) + beta
            kept = 1.0 if first is None else variance(first) / (variance(first) + node.params["epsilon"])
            return Scale((beta[0], gamma[1] * kept + beta[1])), {}
        assert first is not None  # in inference mode its moving statistics, mean 0 and variance 1 at initialization
        root = math.sqrt(1 + node.params["epsilon"])
        return Scale((gamma[0] * first[0] / root + beta[0],
                      gamma[1] * first[1] / (root * root) + 2 * gamma[0] * beta[0] * first[0] / root + beta[1])), {}
    if rule == "lookup":
        return Scale(init_moments(node.variables["embeddings"].init, node.variables["embeddings"].shape)), {}
    if rule == "extra":  # one of its producer's outputs (a recurrent layer's state)
        extra = made.get(node.inputs[0], {}).get(node.params["output"])
        return (Scale(extra) if extra is not None else
                Scale(None, why=f"the rule of '{node.inputs[0]}' gives no moments for its output "
                                f"'{node.params['output']}'")), {}
    assert first is not None
    if isinstance(rule, str) and rule in COMBINES:
        return _combined(node, rule, [m for m in ins if m is not None]), {}
    if isinstance(rule, Weighted):
        out, n = first, 0.0
        for role in rule.kernels:
            n = _fan(node, rule, role)
            out = weighted(out, n, init_moments(node.variables[role].init, node.variables[role].shape))
        if "bias" in node.variables:
            out = plus(out, init_moments(node.variables["bias"].init, node.variables["bias"].shape))
        return Scale(out, out[1] / first[1] if first[1] > 0 else math.inf, int(n)), {}
    if rule in ("standardize", "affine") and node.inputs[0] in inputs:  # an input, or one only resized, cropped...
        return Scale((0.0, 1.0)), {}  # preprocessing of raw data: its output is the unit the model assumes
    if rule == "affine":
        s, o = _mean(node.params["scale"]), _mean(node.params["offset"])
        return Scale((s * first[0] + o, s * s * first[1] + 2 * s * o * first[0] + o * o)), {}
    if rule == "standardize" and "mean" in node.params:
        m, v = _mean(node.params["mean"]), max(_mean(node.params["variance"]), 1e-14)
        return Scale(((first[0] - m) / math.sqrt(v), (first[1] - 2 * m * first[0] + m * m) / v)), {}
    if rule == "gain":
        g = node.variables["gamma"].init.args[0][1] if node.variables["gamma"].init else 1.0
        return Scale((g * first[0], g * g * first[1])), {}
    if rule == "pointwise":
        return Scale(activation(node.op, first, node.params)), {}
    return Scale(first), {}  # "same" (and "standardize" without statistics: adapted to the data, the identity here)


def _combined(node: Node, rule: str, ins: list[Moments]) -> Scale:
    """add, subtract, multiply (independent inputs) and concat (each input's share of the axis)."""
    if rule in ("sum", "difference"):
        out = ins[0]
        for other in ins[1:]:
            out = plus(out, other, -1.0 if rule == "difference" else 1.0)
        return Scale(out)
    if rule == "product":
        return Scale((math.prod(m for m, _ in ins), math.prod(q for _, q in ins)))
    axis = node.params.get("axis", len(node.shape) - 1)
    sizes = [s[axis] or 0 for s in node.input_shapes]
    total = sum(sizes) or 1
    return Scale((sum(m * w for (m, _), w in zip(ins, sizes, strict=True)) / total,
                  sum(q * w for (_, q), w in zip(ins, sizes, strict=True)) / total))


def _mean(value: float | list[float]) -> float:
    return sum(value) / len(value) if isinstance(value, list) else float(value)


def propagate(ir: ModelIR) -> dict[str, Scale]:
    """Each node's output scale at initialization, under the model of this module's docstring."""
    known: dict[str, Scale] = {i.name: Scale((0.0, 1.0)) for i in ir.inputs}
    inputs, made = set(known), dict[str, Outputs]()
    for node in ir.nodes:
        ins = [known[s].moments for s in node.inputs]
        reference = max((known[s].reference for s in node.inputs), default=1.0)
        lost = next((known[node.inputs[i]] for i in _reads(node) if ins[i] is None), None)
        if lost is not None:  # a read input is not modelled: neither is this output
            known[node.name] = Scale(None, reference=reference, source=lost.source)
            continue
        rule = op_def(node.op).moments
        if rule != "lookup" and any(m == OVERFLOW for m in ins):  # inf in float32 stays inf (or nan) after
            known[node.name] = Scale(OVERFLOW, reference=reference)
            continue
        scale, outputs = _layer(node, ins, inputs, made)
        scale, made[node.name] = _overflowed(scale), outputs
        if node.activation and scale.moments is not None and scale.moments != OVERFLOW:
            after = activation(node.activation, scale.moments, {})
            scale = replace(scale, moments=after, pre=scale.moments,
                            why="" if after is not None else f"its activation {node.activation}: "
                                                             f"{_unmodelled(node.activation)}")
        if rule == "same" and node.inputs and node.inputs[0] in inputs:  # raw data still (a resize, a pad)
            inputs.add(node.name)
        if rule == "lookup":  # indices have no scale: the embedding's own is what follows it
            std = scale.std
            reference = std if std is not None and 0 < std < math.inf else 1.0
        elif not _reads(node):  # a normalization: its output is at the unit scale of the model's inputs again
            reference = 1.0
        known[node.name] = replace(scale, reference=reference, source=node.name if scale.moments is None else "",
                                   why=scale.why if scale.moments is None else "")
    return known


def _overflowed(scale: Scale) -> Scale:
    """A layer whose values lie beyond float32's range at initialization (its RMS above FLOAT32_MAX, or
    moments past float64's) holds inf there: OVERFLOW, which every layer after it inherits."""
    if scale.moments is None:
        return scale
    mean, square = scale.moments
    if math.isfinite(mean) and math.isfinite(square) and square <= FLOAT32_MAX * FLOAT32_MAX:
        return scale
    return replace(scale, moments=OVERFLOW)


def ratio_column(scales: dict[str, Scale]) -> dict[str, str]:
    """`specgen report`'s `activation std (init)` cell of each layer (`scales`: propagate's): its std over the
    input's ('-': not modelled)."""
    return {name: "-" if s.std is None else f"{s.std:.3g}" for name, s in scales.items()}


def unmodelled_note(ir: ModelIR, scales: dict[str, Scale]) -> str:
    """`specgen report`'s words for the column's '-' cells (`scales`: propagate's): each layer where the
    propagation stopped, why, and how many layers after it inherit that; '' when every layer is modelled."""
    nodes = {node.name: node for node in ir.nodes}
    after: dict[str, int] = {}
    for name, scale in scales.items():
        if scale.moments is None:
            after[scale.source] = after.get(scale.source, 0) + (scale.source != name)
    parts = []
    for source, count in after.items():
        node = nodes[source]
        op = node.op + (f"+{node.activation}" if node.activation else "")
        tail = ("" if not count else "; nor is the layer that reads it" if count == 1 else
                f"; nor are the {count} layers that read it, directly or through others")
        parts.append(f"'{source}' ({op}): {scales[source].why}{tail}")
    return f"'-': not modelled at {'; at '.join(parts)}." if parts else ""
