"""Render-ready steps for the TensorFlow module: names and literals, computed here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specgen import text
from specgen.ir.model import ModelIR, Node, Variable
from specgen.kinds.initializers import REGISTRY as INITIALIZERS
from specgen.kinds.ops import EXTRA_OUTPUT, REGISTRY, as_activation, op_def
from specgen.render.environment import Fields
from specgen.render.mask_plan import tf_mask
from specgen.render.prune_plan import weight_reads


@dataclass(frozen=True)
class TfStep:
    template: str  # templates/tf/ops/<template>.py.j2
    out: str  # local variable assigned
    ins: tuple[str, ...]
    w: dict[str, str]  # role -> "self.<attribute>"
    attrs: dict[str, Any] = field(default_factory=dict)
    comment: str = ""

    def __post_init__(self) -> None:  # attribute access from templates without exceptions (see Fields)
        object.__setattr__(self, "w", Fields(self.w))
        object.__setattr__(self, "attrs", Fields(self.attrs))


LINE_LIMIT = 110


@dataclass(frozen=True)
class TfVariable:
    var: Variable
    arguments: str  # e.g. 'init.he_normal([3, 3, 1, 16], seed=(seed, 123)), name="conv1/kernel"'

    @property
    def one_line(self) -> bool:
        return len(f"        self.{self.var.py_name} = tf.Variable({self.arguments})") <= LINE_LIMIT


def tf_variables(ir: ModelIR) -> list[TfVariable]:
    from specgen.render.environment import py_literal

    result = []
    for var in ir.model_variables:
        init = var.init
        assert init is not None
        kind = INITIALIZERS[init.kind]  # its runtime function and whether it draws (specgen/kinds/initializers)
        args = [py_literal(list(var.shape))]
        args += [f"{k}={py_literal(v)}" for k, v in init.args]
        if kind.seeded:
            args.append(f"seed=(seed, {var.seed})")
        arguments = f"{kind.function}({', '.join(args)}), name={py_literal(var.path)}"
        if "trainable" not in var.collections:
            arguments += ", trainable=False"
        result.append(TfVariable(var, arguments))
    return result


def tf_steps(ir: ModelIR) -> list[TfStep]:
    local = {i.name: i.py_name for i in ir.inputs} | {n.name: n.py_name for n in ir.nodes}
    reads = weight_reads(ir)  # pruned weights are read through their masks
    steps: list[TfStep] = []
    extra = extra_outputs(ir, "py_name")
    for node in ir.nodes:
        if node.op == EXTRA_OUTPUT:
            continue  # its producer's step assigns it (attrs["extra"])
        op = op_def(node.op)  # templates and attributes come from the op's definition (specgen/kinds/ops)
        ins = tuple(local[s] for s in node.inputs)
        w = {role: reads.get(v.path, f"self.{v.py_name}") for role, v in node.variables.items()}
        attrs = op.tf_attrs(node) | tf_mask(node, local)  # the padding mask it takes (ir/masks.py)
        attrs |= {"extra": extra[node.name]} if node.name in extra else {}  # OpResult.extra_outputs
        steps.append(TfStep(op.tf_template, node.py_name, ins, w, attrs, _comment(node)))
        if node.activation:
            act = REGISTRY[node.activation]
            steps.append(TfStep(act.tf_template, node.py_name, (node.py_name,), {},
                                dict(as_activation(node.activation).tf_attrs)))
    return steps


def extra_outputs(ir: ModelIR, naming: str) -> dict[str, dict[str, str]]:
    """Layer -> {extra output name: its tensor's `naming` ("py_name" or "onnx_name")} (OpResult.extra_outputs)."""
    found: dict[str, dict[str, str]] = {}
    for node in ir.nodes:
        if node.op == EXTRA_OUTPUT:
            found.setdefault(node.inputs[0], {})[node.params["output"]] = getattr(node, naming)
    return found


def _comment(node: Node) -> str:
    # A shared layer's weights are its owner's attributes/initializers: say whose, where they are read.
    shares = f" (shares {node.shares})" if node.shares else ""
    return f"{node.name}: {node.op} -> {text.shape(node.shape)}{shares}"
