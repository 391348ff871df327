"""Static lints on a resolved model: initialization scale, batch-norm momentum and a metric that cannot vary
(docs/spec.md#lints).

Pure Python, no TensorFlow: `specgen validate` and `specgen report` run these; `specgen build`
does not (it renders the IR and never needs them).

Initialization scale: the model of each layer's output scale at initialization is scales.py's; the lint
flags the first layer on each path whose std leaves BAND, or whose activation saturates. Layers whose scale a
strict restore sets (`restored_scales`) are not judged: their initializers never run. A residual branch is
judged by the sum it goes into (`_residual`): that sum is what the next layer reads. Warnings that several
instances of a block repeat are reported once (lints_instances.py).
"""

from __future__ import annotations

import fnmatch
from dataclasses import replace

from specgen.diagnostics import Diagnostic
from specgen.fields.base import FLOAT32_MAX
from specgen.ir.gains import describe_init, mean_std, saturated
from specgen.ir.lints_instances import once_per_block_layer
from specgen.ir.model import ModelIR, Node
from specgen.ir.scales import OVERFLOW, Scale, kernels_of, propagate, resets
from specgen.kinds.features import accumulate as accumulation
from specgen.kinds.metrics import REGISTRY as METRICS
from specgen.kinds.metrics import args_of, name_of
from specgen.kinds.ops import REGISTRY, op_def
from specgen.kinds.ops.base import Derived, MomentRule, Pointwise, Unmodelled, Weighted
from specgen.spec.load import LoadedSpec

BAND = (0.1, 10.0)  # the std ratio to the input outside which a layer is flagged
MOST = 0.5  # a batch norm whose moving statistics keep more than this share of their initial values is flagged
SATURATED = 0.5  # a saturating activation with more than this share of its units saturated is flagged


def _consumers(ir: ModelIR) -> dict[str, list[Node]]:
    table: dict[str, list[Node]] = {}
    for node in ir.nodes:
        for source in node.inputs:
            table.setdefault(source, []).append(node)
    return table


def _outside(std: float | None) -> bool:
    return std is not None and not BAND[0] <= std <= BAND[1]


def strictly_restored(ir: ModelIR) -> frozenset[str]:
    """The model variables a `strict: true` restore entry holds a key for, known from the spec alone: a strict
    entry covers every variable its `exclude` does not name, or the run stops before training (restore_rules.py's
    `_strict`). A non-strict entry restores what its file happens to hold, which validate never reads."""
    strict = [r.source for r in ir.training.checkpoint.restore if r.source.strict] if ir.training else []
    return frozenset(v.path for node in ir.nodes for v in node.variables.values()
                     if any(not any(fnmatch.fnmatchcase(v.path, p) for p in s.exclude) for s in strict))


def restored_scales(ir: ModelIR) -> set[str]:
    """The layers whose output scale at the first step a strict restore sets rather than the initializers: one
    with a restored variable, and every layer after such a one (its input's scale is the checkpoint's, which
    validate cannot know), so a new head on a restored backbone is not judged either."""
    restored, settled = strictly_restored(ir), set[str]()
    for node in ir.nodes:
        if any(v.path in restored for v in node.variables.values()) or any(s in settled for s in node.inputs):
            settled.add(node.name)
    return settled


def init_scale_findings(ir: ModelIR) -> list[tuple[Node, str]]:
    """(layer, message) where the std leaves the band: the first such layer on each path. A residual branch
    whose sums stay within the band (`_residual`) is not flagged, nor does it stop the layers after it being
    judged: the sum is what they read."""
    scales, readers, outputs = propagate(ir), _consumers(ir), set(ir.outputs.values())
    nodes, settled = {node.name: node for node in ir.nodes}, restored_scales(ir)
    found, branches = [], set[str]()  # branches: residual branches outside the band whose sums are within it
    for node in ir.nodes:
        if node.name in settled:  # its initializers never run, or its input is a checkpoint's: nothing to judge
            continue
        std = scales[node.name].std
        if any(_outside(scales[s].std) and s not in branches for s in node.inputs):
            continue
        saturation = _saturation(node, scales, nodes)
        if saturation is not None:
            found.append((node, saturation))
            continue
        if not _outside(std):
            continue
        rule = _rule(node)
        if isinstance(rule, Derived) and rule.bounded and std is not None and std < 1:  # gated: small by design
            continue
        after = readers.get(node.name, [])
        # Read only by normalizations (which reset the scale) or by multiplies (a gate, whose mean
        # rather than spread scales the other branch): a small or large spread here is harmless.
        if after and node.name not in outputs and (all(resets(r) for r in after)
                                                   or all(_rule(r) == "product" for r in after)):
            continue
        if _residual(node.name, readers, outputs, scales):
            branches.add(node.name)
            continue
        found.append((node, _message(node, scales[node.name], after)))
    return found


def _residual(name: str, readers: dict[str, list[Node]], outputs: set[str], scales: dict[str, Scale]) -> bool:
    """Whether layer `name` is a residual branch whose sums are within the band: every path from it reaches an
    `add` through ops that keep the moments (a dropout, a reshape), and every such add's std is within BAND.
    The next layer reads the sum, not the branch: a branch that starts small beside its skip connection
    (KerasHub's attention at glorot_uniform, a zero-initialized last gamma) leaves the sum near the skip's
    scale, which is what the lint judges. A sum outside the band flags the branch as before (its initializer is
    the one to change); a model output is judged as it is."""
    sums, todo = [], [name]
    while todo:
        here = todo.pop()
        after = readers.get(here, [])
        if here in outputs or not after:
            return False
        for reader in after:
            if _rule(reader) == "sum":
                sums.append(reader.name)
            elif _rule(reader) == "same" and reader.inputs[0] == here:  # its output has this layer's moments
                todo.append(reader.name)
            else:
                return False
    return all(scales[s].std is not None and not _outside(scales[s].std) for s in sums)


def _rule(node: Node) -> Weighted | MomentRule | Derived | Unmodelled | None:
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
    weighted = kernels_of(node)
    if (weighted is None or scale.gain is None) and node.variables:
        return head + "; check its initializers and those of the layers before it"
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
    kernels = kernels_of(weighted) if weighted is not None else None
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
    """`specgen validate`'s warnings, each at its layer (at the kernel initializer when written); one for the
    instances of a block that repeat it."""
    warnings = []
    for node, message in init_scale_findings(ir):
        layer = loaded.layers[node.index]
        keys = [k for k in ("kernel_init", "depthwise_init", "pointwise_init") if k in layer.model_fields_set]
        diagnostic = loaded.diagnostic(("layers", node.index, keys[-1]) if keys else ("layers", node.index), message)
        warnings.append((node, message, replace(diagnostic, severity="warning")))
    return once_per_block_layer(loaded, warnings)


# --- batch-norm momentum ----------------------------------------------------------------------


def held_share(momentum: float, updates: int, accumulate: int = 1) -> float:
    """The share of their initial values (mean 0, variance 1) that moving statistics still hold after `updates`
    optimizer updates of `accumulate` training batches each. The statistics move once per training batch (micro-batch),
    `moving = moving * momentum + batch * (1 - momentum)`, as Keras' BatchNormalization does: `specgen train`'s warning
    and `specgen report`'s note both count with this, so they cannot disagree."""
    return momentum ** (max(updates, 0) * accumulate)


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


def momentum_warnings(ir: ModelIR, updates: int, restored: frozenset[str] = frozenset(),
                      accumulate: int = 1) -> list[str]:
    """Lines for `specgen train` to print before training when the planned `updates` (optimizer steps, since
    initialization) leave the batch-norm statistics mostly at their initial values. The statistics move once per
    training batch, `accumulate` of them per update. Statistics a fine-tuning restore set (`restored`) did not
    start there: they are left out. A run that plans no update (`--steps 0`) gets none: no momentum helps there."""
    if updates <= 0:
        return []
    batches = updates * accumulate
    # "updates" means optimizer updates everywhere else in train's output: with accumulation, say what is counted
    counted = (f"{batches} planned training batches ({updates} updates x accumulate {accumulate})" if accumulate > 1
               else f"{updates} planned updates")
    lines = []
    for momentum, names in momenta(ir, restored).items():
        share = held_share(momentum, updates, accumulate)
        if share > MOST:
            fit = 0.05 ** (1 / batches)  # the momentum that leaves 5%
            lines.append(f"warning: batch-norm momentum {momentum:g} ({_names(names)}): after the {counted} "
                         f"the moving statistics still hold {share:.0%} of their initial values (mean 0, "
                         f"variance 1), so evaluation and export normalize with mostly wrong statistics; "
                         f"momentum {fit:.3g} or lower leaves under 5%")
    return lines


def momentum_note(ir: ModelIR, counts: tuple[int, ...] = (100, 1000)) -> str:
    """`specgen report`'s hint: the share held after 100 and 1000 optimizer updates, per momentum. Under
    `train.accumulate` each update is that many training batches, and the line says how many batches it counted."""
    steps = accumulation.of(ir.training.train) if ir.training is not None and ir.training.train is not None else 1
    lines = [f"batch-norm momentum {m:g} ({_names(names)}): the moving statistics still hold "
             + ", ".join(f"{held_share(m, n, steps):.2%}{' of their initial values' if i == 0 else ''} after "
                         f"{n}{' updates' if i == 0 else ''}{_batches(n, steps, first=i == 0)}"
                         for i, n in enumerate(counts))
             for m, names in momenta(ir).items()]
    return "\n".join(lines)


def _batches(updates: int, steps: int, first: bool) -> str:
    """What an update count means for the statistics under `train.accumulate` (`steps` > 1): its training batches."""
    if steps <= 1:
        return ""
    return f" ({updates * steps} training batches at accumulate {steps})" if first else f" ({updates * steps} batches)"


def _names(names: list[str]) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


# --- metrics ------------------------------------------------------------------------------------


def top_k_warnings(loaded: LoadedSpec, ir: ModelIR) -> list[Diagnostic]:
    """`specgen validate`'s warning for a ranking metric (`top_k_accuracy`: its MetricDef.ranks_key) whose k is at
    least the primary term's class count: every label is then among the k largest logits, so the metric reads 1.0
    whatever the model does (Keras' in_top_k does the same: a constant, not a wrong number, so a warning rather
    than an error)."""
    training, spec = ir.training, loaded.spec
    if training is None or training.loss is None or spec.train is None:
        return []
    output = training.loss.output
    classes = ir.node(ir.outputs[output]).shape[-1] if output in ir.outputs else None
    if type(classes) is not int:  # a named class axis: its size is known only at run time
        return []
    warnings = []
    for i, item in enumerate(spec.train.metrics):
        name = name_of(item)
        key = METRICS[name].ranks_key  # the metric's Def says which key ranks, not a comparison with its name
        k = dict(args_of(item)).get(key) if key else None
        if type(k) is int and k >= classes:
            written = not isinstance(item, str) and key in item.model_fields_set
            message = (f"metric '{name}': {key} {k}{'' if written else ' (the default)'} is at least the "
                       f"{classes} classes of output '{output}', so every label is among the top {k} and the metric "
                       f"always reads 1.0; set {key} below {classes}")
            diagnostic = loaded.diagnostic(("train", "metrics", i, key) if written else ("train", "metrics", i), message)
            warnings.append(replace(diagnostic, severity="warning"))
    return warnings
