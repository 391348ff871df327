"""Static lints on a resolved model: initialization scale and batch-norm momentum (docs/spec.md#lints).

Pure Python, no TensorFlow: `specgen validate` and `specgen report` run these; `specgen build`
does not (it renders the IR and never needs them).

Initialization scale: every model input is taken as mean 0, variance 1 (a `normalize` or
`rescale` that reads an input directly is taken to produce that), and the mean and second
moment E[x^2] of each layer's output are propagated through the initializers' distributions
(fan-in as TensorFlow counts it from the kernel shape), the activations (on a Gaussian with
those moments) and the other ops, at inference (dropout is the identity) and with batch norms
normalizing by batch statistics as in training. Weights, inputs and branches are independent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from specgen.diagnostics import Diagnostic
from specgen.fields.base import FLOAT32_MAX
from specgen.ir.gains import activation, describe_init, init_moments, mean_std, saturated
from specgen.ir.model import ModelIR, Node
from specgen.kinds.ops import REGISTRY, op_def
from specgen.kinds.ops.base import MomentRule, Moments, Pointwise, Weighted
from specgen.spec.load import LoadedSpec

BAND = (0.1, 10.0)  # the std ratio to the input outside which a layer is flagged
MOST = 0.5  # a batch norm whose moving statistics keep more than this share of their initial values is flagged
OVERFLOW: Moments = (0.0, math.inf)  # the moments of a layer whose values are inf in float32 (std inf)
SATURATED = 0.5  # a saturating activation with more than this share of its units saturated is flagged


@dataclass(frozen=True)
class Scale:
    """One layer's output at initialization: its moments, and the weighted step that made them."""

    moments: Moments | None  # None: not measured (softmax, or after one)
    gain: float | None = None  # E[y^2] / E[x^2] of the layer's weighted sum (layers with a kernel)
    fan_in: int = 0  # terms summed per output of that step
    reference: float = 1.0  # the std the ratio is taken to: the input's, or an embedding's output's
    pre: Moments | None = None  # the moments before the layer's `activation:` (saturation is judged there)

    @property
    def std(self) -> float | None:
        """The output's standard deviation over the reference's."""
        if self.moments is None:
            return None
        mean, square = self.moments
        return math.sqrt(max(square - mean * mean, 0.0)) / self.reference


def _weighted(moments: Moments, n: float, weight: Moments) -> Moments:
    """Moments of a sum of `n` products w * x with independent w, x (x's share one mean)."""
    (mx, qx), (mw, qw) = moments, weight
    return n * mw * mx, n * qw * qx + n * (n - 1) * (mw * mx) * (mw * mx)


def _plus(a: Moments, b: Moments, sign: float = 1.0) -> Moments:
    return a[0] + sign * b[0], a[1] + b[1] + 2 * sign * a[0] * b[0]


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


def _kernels(node: Node) -> Weighted | None:
    """How the node's op sums its input (OpDef.moments), None when it has no kernel."""
    rule = op_def(node.op).moments
    return rule if isinstance(rule, Weighted) else None


def _layer(node: Node, ins: list[Moments], inputs: set[str]) -> Scale:
    """The moments of one node's output before its `activation:`, by its op's OpDef.moments."""
    rule, first = op_def(node.op).moments, ins[0]
    if isinstance(rule, Weighted):
        out, n = first, 0.0
        for role in rule.kernels:
            n = _fan(node, rule, role)
            out = _weighted(out, n, init_moments(node.variables[role].init, node.variables[role].shape))
        if "bias" in node.variables:
            out = _plus(out, init_moments(node.variables["bias"].init, node.variables["bias"].shape))
        return Scale(out, out[1] / first[1] if first[1] > 0 else math.inf, int(n))
    if rule in ("standardize", "affine") and node.inputs[0] in inputs:
        return Scale((0.0, 1.0))  # preprocessing of raw data: its output is the unit the model assumes
    if rule == "affine":
        s, o = _mean(node.params["scale"]), _mean(node.params["offset"])
        return Scale((s * first[0] + o, s * s * first[1] + 2 * s * o * first[0] + o * o))
    if rule == "standardize" and "mean" in node.params:
        m, v = _mean(node.params["mean"]), max(_mean(node.params["variance"]), 1e-14)
        return Scale(((first[0] - m) / math.sqrt(v), (first[1] - 2 * m * first[0] + m * m) / v))
    if rule == "normalized" and not node.inference_mode:
        gamma = init_moments(node.variables["gamma"].init, ()) if "gamma" in node.variables else (1.0, 1.0)
        beta = init_moments(node.variables["beta"].init, ()) if "beta" in node.variables else (0.0, 0.0)
        return Scale((beta[0], gamma[1] + beta[1]))
    if rule == "gain":
        g = node.variables["gamma"].init.args[0][1] if node.variables["gamma"].init else 1.0
        return Scale((g * first[0], g * g * first[1]))
    if rule == "lookup":
        return Scale(init_moments(node.variables["embeddings"].init, node.variables["embeddings"].shape))
    if rule in ("sum", "difference"):
        out = first
        for other in ins[1:]:
            out = _plus(out, other, -1.0 if rule == "difference" else 1.0)
        return Scale(out)
    if rule == "product":
        return Scale((math.prod(m for m, _ in ins), math.prod(q for _, q in ins)))
    if rule == "joined":
        axis = node.params.get("axis", len(node.shape) - 1)
        sizes = [s[axis] or 0 for s in node.input_shapes]
        total = sum(sizes) or 1
        return Scale((sum(m * w for (m, _), w in zip(ins, sizes, strict=True)) / total,
                      sum(q * w for (_, q), w in zip(ins, sizes, strict=True)) / total))
    if rule in ("same", "normalized", "standardize"):
        return Scale(first)  # pools: neighbours are taken as strongly correlated, as in images
    return Scale(activation(node.op, first, node.params))  # an element-wise op (OpDef.pointwise); None for softmax


def _mean(value: float | list[float]) -> float:
    return sum(value) / len(value) if isinstance(value, list) else float(value)


def propagate(ir: ModelIR) -> dict[str, Scale]:
    """Each node's output scale at initialization, under the model of this module's docstring."""
    known: dict[str, Scale] = {i.name: Scale((0.0, 1.0)) for i in ir.inputs}
    inputs = set(known)
    for node in ir.nodes:
        ins = [known[s].moments for s in node.inputs]
        if any(m is None for m in ins):
            known[node.name] = Scale(None)
            continue
        reference = max(known[s].reference for s in node.inputs) if node.inputs else 1.0
        if any(m is not None and m == OVERFLOW for m in ins):  # inf in float32 stays inf (or nan) after
            known[node.name] = Scale(OVERFLOW, reference=reference)
            continue
        scale = _overflowed(_layer(node, [m for m in ins if m is not None], inputs))
        if node.activation and scale.moments is not None and scale.moments != OVERFLOW:
            scale = replace(scale, moments=activation(node.activation, scale.moments, {}), pre=scale.moments)
        if op_def(node.op).moments == "lookup":  # indices have no scale: the embedding's own is what follows it
            std = scale.std
            reference = std if std is not None and 0 < std < math.inf else 1.0
        known[node.name] = replace(scale, reference=reference)
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


def ratio_column(ir: ModelIR) -> dict[str, str]:
    """`specgen report`'s `activation std (init)` cell of each layer: its std over the input's."""
    return {name: "-" if s.std is None else f"{s.std:.3g}" for name, s in propagate(ir).items()}


def _consumers(ir: ModelIR) -> dict[str, list[Node]]:
    table: dict[str, list[Node]] = {}
    for node in ir.nodes:
        for source in node.inputs:
            table.setdefault(source, []).append(node)
    return table


def _outside(std: float | None) -> bool:
    return std is not None and not BAND[0] <= std <= BAND[1]


def init_scale_findings(ir: ModelIR) -> list[tuple[Node, str]]:
    """(layer, message) where the std leaves the band: the first such layer on each path."""
    scales, readers, outputs = propagate(ir), _consumers(ir), set(ir.outputs.values())
    nodes = {node.name: node for node in ir.nodes}
    found = []
    for node in ir.nodes:
        std = scales[node.name].std
        if any(_outside(scales[s].std) for s in node.inputs):
            continue
        saturation = _saturation(node, scales, nodes)
        if saturation is not None:
            found.append((node, saturation))
            continue
        if not _outside(std):
            continue
        after = readers.get(node.name, [])
        # Read only by normalizations (which reset the scale) or by multiplies (a gate, whose mean
        # rather than spread scales the other branch): a small or large spread here is harmless.
        if after and node.name not in outputs and (all(_rule(r) == "normalized" and not r.inference_mode for r in after)
                                                   or all(_rule(r) == "product" for r in after)):
            continue
        found.append((node, _message(node, scales[node.name], after)))
    return found


def _rule(node: Node) -> Weighted | MomentRule | None:
    return op_def(node.op).moments


def _pointwise(name: str | None) -> Pointwise | None:
    """The element-wise op `name` (an op, or a layer's `activation:`) as the lint sees it; None for other ops."""
    return REGISTRY[name].pointwise if name in REGISTRY else None


def _message(node: Node, scale: Scale, after: list[Node]) -> str:
    std = scale.std or 0.0
    way = f"grows to {std:.3g}x the input's" if std > 1 else f"shrinks to {std:.3g}x the input's"
    if std > FLOAT32_MAX:  # the factor means nothing there: the values are inf at initialization
        way = f"grows past float32's range (over {FLOAT32_MAX:.2g}x the input's)"
    head = (f"layer '{node.name}' ({node.op}): at initialization the activation std {way} (outside "
            f"[{BAND[0]:g}, {BAND[1]:g}]; unit-variance inputs assumed, see docs/spec.md#lints)")
    weighted = _kernels(node)
    if weighted is None or scale.gain is None:
        return head + "; this layer has no kernel: check the initializers of the layers before it"
    role = weighted.kernels[-1]
    act = node.activation or next((r.op for r in after if len(after) == 1 and _pointwise(r.op)), None)
    fit = "he_normal" if (found := _pointwise(act)) and found.he else "glorot_uniform"
    key = weighted.init_key
    return (head + f"; {key} {describe_init(node.variables[role].init)} over fan-in {scale.fan_in} scales "
            f"the second moment by {scale.gain:.3g}; {fit}{f' for {act}' if act else ''} keeps it near 1")


def _saturation(node: Node, scales: dict[str, Scale], nodes: dict[str, Node]) -> str | None:
    """The message for a saturating activation (its own `activation:`, or an activation op) whose
    input puts most units where its slope is nearly 0 at initialization; None if it does not."""
    weighted: Node | None
    if node.activation is not None:
        name, pre, weighted = node.activation, scales[node.name].pre, node
    elif len(node.inputs) == 1:
        name, pre, weighted = node.op, scales[node.inputs[0]].moments, nodes.get(node.inputs[0])
    else:
        return None
    if pre is None or pre == OVERFLOW:
        return None
    found = saturated(name, pre)
    if found is None or found[1] <= SATURATED:  # most units, not the tails every Gaussian has
        return None
    (threshold, share, where), (mean, std) = found, mean_std(pre)
    shift = f" and mean {mean:.3g}" if abs(mean) >= 0.1 * max(std, 1.0) else ""
    subject = f"the input of its {name}" if node.activation else "its input"
    head = (f"layer '{node.name}' ({node.op}): at initialization {subject} has std {std:.3g}{shift} (unit-variance "
            f"inputs assumed, see docs/spec.md#lints), so {share:.1%} of its units start saturated (|x| > "
            f"{threshold:.3g}, {where}) and pass almost no gradient")
    kernels = _kernels(weighted) if weighted is not None else None
    if weighted is None or kernels is None:
        return head + "; check the initializers of the layers before it"
    role = kernels.kernels[-1]
    what = f"{kernels.init_key} {describe_init(weighted.variables[role].init)}"
    if shift and abs(mean) > threshold and "bias" in weighted.variables:
        what = f"bias_init {describe_init(weighted.variables['bias'].init)}"
        return head + f"; {what} of '{weighted.name}' shifts it; zeros keeps the mean at 0"
    return (head + f"; {what} of '{weighted.name}' over fan-in {scales[weighted.name].fan_in} sets that scale; "
            f"glorot_uniform for {name} keeps the std near 1")


def init_scale_warnings(loaded: LoadedSpec, ir: ModelIR) -> list[Diagnostic]:
    """`specgen validate`'s warnings, each at its layer (at the kernel initializer when written)."""
    warnings = []
    for node, message in init_scale_findings(ir):
        layer = loaded.layers[node.index]
        keys = [k for k in ("kernel_init", "depthwise_init", "pointwise_init") if k in layer.model_fields_set]
        diagnostic = loaded.diagnostic(("layers", node.index, keys[-1]) if keys else ("layers", node.index), message)
        warnings.append(replace(diagnostic, severity="warning"))
    return warnings


# --- batch-norm momentum ----------------------------------------------------------------------


def held_share(momentum: float, updates: int) -> float:
    """The share of their initial values (mean 0, variance 1) that moving statistics still hold
    after `updates` updates of `moving = moving * momentum + batch * (1 - momentum)`."""
    return momentum ** max(updates, 0)


def momenta(ir: ModelIR, restored: frozenset[str] = frozenset()) -> dict[float, list[str]]:
    """Batch norms (the layers whose params carry the momentum of their moving statistics) whose statistics
    training updates, by momentum; without those whose statistics a fine-tuning restore set (`restored`: paths)."""
    table: dict[float, list[str]] = {}
    for node in ir.nodes:
        moving = [v.path for role, v in node.variables.items() if role.startswith("moving_")]
        if moving and all(path in restored for path in moving):
            continue
        if "momentum" in node.params and not node.inference_mode and not node.shares:
            table.setdefault(float(node.params["momentum"]), []).append(node.name)
    return table


def momentum_warnings(ir: ModelIR, updates: int, restored: frozenset[str] = frozenset()) -> list[str]:
    """Lines for `specgen train` to print before training when the planned `updates` (optimizer
    steps that update batch-norm statistics) leave them mostly at their initial values. Statistics a
    fine-tuning restore set (`restored`) did not start there: they are left out."""
    lines = []
    for momentum, names in momenta(ir, restored).items():
        share = held_share(momentum, updates)
        if share > MOST:
            fit = 0.05 ** (1 / updates) if updates > 0 else 0.0  # the momentum that leaves 5%
            lines.append(f"warning: batch-norm momentum {momentum:g} ({_names(names)}): after the {updates} planned "
                         f"updates the moving statistics still hold {share:.0%} of their initial values (mean 0, "
                         f"variance 1), so evaluation and export normalize with mostly wrong statistics; "
                         f"momentum {fit:.3g} or lower leaves under 5%")
    return lines


def momentum_note(ir: ModelIR, counts: tuple[int, ...] = (100, 1000)) -> str:
    """`specgen report`'s hint: the share held after 100 and 1000 updates, per momentum."""
    lines = [f"batch-norm momentum {m:g} ({_names(names)}): the moving statistics still hold "
             + ", ".join(f"{held_share(m, n):.2%} of their initial values after {n} updates" if i == 0
                         else f"{held_share(m, n):.2%} after {n}" for i, n in enumerate(counts))
             for m, names in momenta(ir).items()]
    return "\n".join(lines)


def _names(names: list[str]) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")
