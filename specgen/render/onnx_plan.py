"""Lower the IR to ONNX steps, tracking tensor layouts.

Spec tensors are channels-last (NHWC) like TensorFlow; ONNX Conv, pools and
BatchNormalization want channels-first. Each tensor carries its layout and a
Transpose is inserted only where an op needs the other one, so a conv stack
pays one transpose in and one out. Tensors specgen adds are named `<tensor>___<what>`;
spec names cannot contain "___" (fields/base.py), so they never collide. Graph inputs and outputs stay channels-last,
so users feed the same arrays to TensorFlow and onnxruntime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specgen import text
from specgen.ir.exported import exported
from specgen.ir.model import ModelIR, Node, Shape
from specgen.kinds.dims import BATCH, SYMBOL
from specgen.kinds.ops import EXTRA_OUTPUT, REGISTRY, as_activation, op_def
from specgen.kinds.ops.shapes import to_first, to_last
from specgen.render.environment import Fields
from specgen.render.mask_plan import onnx_mask
from specgen.render.tf_plan import extra_outputs

# The ONNX templates of the ops whose node is a zero Pad (OpDef.pad_folding "zero_pad").
ZERO_PADS = frozenset(t for op in REGISTRY.values() if op.pad_folding == "zero_pad" for t in op.onnx_templates)

ONNX_DTYPES = {"float32": "float", "int32": "int32", "int64": "int64", "uint8": "uint8"}
ONNX_TYPE_CODES = {"float32": 1}  # onnx.TensorProto.FLOAT, the `to` of an entry Cast


@dataclass(frozen=True)
class OnnxStep:
    template: str  # templates/onnx/ops/<template>.onnx.j2
    out: str
    ins: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    comment: str = ""

    def __post_init__(self) -> None:  # attribute access from templates without exceptions (see Fields)
        object.__setattr__(self, "attrs", Fields(self.attrs))


@dataclass
class OnnxPlan:
    name: str
    opset: int
    ir_version: int
    inputs: list[str]  # typed declarations, e.g. "float[batch, 8, 8, 1] image"
    weights: list[str]
    outputs: list[str]
    constants: list[str] = field(default_factory=list)
    steps: list[OnnxStep] = field(default_factory=list)


def _declare(dtype: str, shape: Shape, name: str, batch: str) -> str:
    dims = ", ".join(batch if d is None else _dim(d) for d in shape)
    return f"{ONNX_DTYPES[dtype]}[{dims}] {name}"


def _dim(d: int | str) -> str:
    """A fixed size, or a named dynamic dimension as its dim_param: quoted when it is an expression (ceil(h/2))."""
    if isinstance(d, int) or SYMBOL.fullmatch(d):
        return str(d)
    return f'"{d}"'


class Lowering:
    """Walks the nodes in order, emitting steps and remembering each tensor's layout."""

    def __init__(self, ir: ModelIR):
        self.ir = ir
        self.batch = BATCH if ir.dynamic_batch else "1"
        self.plan = OnnxPlan(
            ir.name, ir.opset, ir.ir_version,
            inputs=[_declare(i.dtype, i.shape, i.onnx_name, self.batch) for i in ir.inputs],
            weights=[_declare(v.dtype, v.onnx_shape, v.onnx_name, self.batch) for v in ir.model_variables],
            outputs=[_declare(ir.node(layer).dtype, ir.node(layer).shape, out, self.batch)
                     for out, layer in ir.outputs.items()],
        )
        self.tensor = {i.name: i.onnx_name for i in ir.inputs}  # layer -> tensor (channels-last or first)
        self.first: set[str] = set()  # tensors held channels-first
        self.rank = {i.onnx_name: len(i.shape) for i in ir.inputs}
        self.converted: dict[tuple[str, bool], str] = {}

    def run(self) -> OnnxPlan:
        self.extra = extra_outputs(self.ir, "onnx_name")
        self.cast_inputs()
        for node in self.ir.nodes:
            self.lower(node)
        self.bind_outputs()
        return self.plan

    def cast_inputs(self) -> None:
        """Inputs sent as raw uint8 pixels become float32 in the graph, as the TF model casts them at its entry."""
        for i in self.ir.inputs:
            if i.entry_cast:
                out = f"{i.onnx_name}___{i.entry_cast}"
                self.plan.steps.append(OnnxStep("cast", out, (i.onnx_name,), {"to": ONNX_TYPE_CODES[i.entry_cast]},
                                                f"{i.name}: {i.dtype} in, {i.entry_cast} to the layers"))
                self.tensor[i.name], self.rank[out] = out, len(i.shape)

    def layout_input(self, tensor: str, want_first: bool) -> str:
        """`tensor` in the wanted layout, adding a Transpose once when needed."""
        rank = self.rank[tensor]
        if rank <= 2 or (tensor in self.first) == want_first:
            return tensor
        key = (tensor, want_first)
        if key not in self.converted:
            out = f"{tensor}___{'nchw' if want_first else 'nhwc'}"
            perm = to_first(rank) if want_first else to_last(rank)
            self.plan.steps.append(OnnxStep("transpose", out, (tensor,), {"perm": perm}))
            self.rank[out] = rank
            if want_first:
                self.first.add(out)
            self.converted[key] = out
        return self.converted[key]

    @property
    def opset(self) -> int:
        return self.ir.opset

    def lower(self, node: Node) -> None:
        if node.op == EXTRA_OUTPUT:  # its producer's step made the tensor (attrs["extra"])
            self.tensor[node.name] = node.onnx_name
            self.rank[node.onnx_name] = len(node.shape)
            return
        op = op_def(node.op)  # layout, template and attributes come from the op's definition (specgen/kinds/ops)
        sources = [self.tensor[s] for s in node.inputs]
        if op.layout == "first" or node.name in self.ir.nchw_flattens:  # the latter: ir/flatten_order.py
            want_first = True
        elif op.layout == "any":
            want_first = sources[0] in self.first
        else:
            want_first = False
        # ir/flatten_order.py chose these flattens by this class's layout rule: their input is channels-first
        assert node.name not in self.ir.nchw_flattens or sources[0] in self.first, node.name
        ins = [self.layout_input(s, want_first) for s in sources]
        template = None if node.name in self.ir.folded_pads.pads else op.onnx_template_for(node)
        if template is None:  # no node at inference (dropout, a pad its readers take in): the layer's tensor is its input
            self.tensor[node.name] = ins[0]
            return
        out = node.onnx_name
        first = want_first and len(node.shape) > 2
        pre = f"{out}___preact" if node.activation else out
        weights = [v.onnx_name for v in node.variables.values()]  # in the ONNX operator's input order
        attrs, comment = op.onnx_attrs(node, first, self), _comment(node)
        attrs |= onnx_mask(node, self, attrs)  # the padding masks it takes (ir/masks.py, render/mask_plan.py)
        if node.name in self.extra:  # its extra outputs the template assigns (those the export keeps)
            attrs["extra"] = self.extra[node.name]
        if extra := self.ir.folded_pads.extra.get(node.name):  # ir/pad_folding.py: the zero pad it reads
            attrs["pads"] = [a + b for a, b in zip(attrs["pads"], extra, strict=True)]
            comment += f", with {node.inputs[0]}'s zeros in its pads"
        self.plan.steps.append(OnnxStep(template, pre, (*ins, *weights), attrs, comment))
        if node.activation:
            act = REGISTRY[node.activation]
            assert act.onnx_template is not None
            act_attrs = as_activation(node.activation).onnx_attrs(first, self, out)
            self.plan.steps.append(OnnxStep(act.onnx_template, out, (pre,), act_attrs))
        self.tensor[node.name] = out
        self.rank[out] = len(node.shape)
        if first:
            self.first.add(out)

    def zero_padded(self, layer: str) -> bool:
        """Whether the ONNX tensor that `layer`'s output lives in comes straight from a Pad (through layout
        transposes or node-less layers such as dropout): onnxruntime fuses such a Pad into a following MaxPool."""
        tensor = self.tensor[layer]
        producers = {step.out: step for step in self.plan.steps}
        step = producers.get(tensor)
        while step is not None and step.template == "transpose":
            step = producers.get(step.ins[0])
        return step is not None and step.template in ZERO_PADS

    def constant(self, name: str, values: list[int]) -> str:
        self.plan.constants.append(f"int64[{len(values)}] {name} = {{{', '.join(map(str, values))}}}")
        return name

    def float_constant(self, name: str, value: float) -> str:
        self.plan.constants.append(f"float {name} = {{{value!r}}}")
        return name

    def bind_outputs(self) -> None:
        """Make each graph output a named tensor: rename its producer, or add a Transpose/Identity."""
        graph_inputs = {i.onnx_name for i in self.ir.inputs}
        bound: set[str] = set()  # graph output names already given to a tensor: never renamed again
        for out, layer in self.ir.outputs.items():
            tensor = self.tensor[layer]
            producer = [s for s in self.plan.steps if s.out == tensor]
            if tensor in self.first:
                if tensor == out:  # an output named like its layer: the channels-first tensor gives up the name
                    tensor = self.give_up_name(tensor)
                self.plan.steps.append(OnnxStep("transpose", out, (tensor,), {"perm": to_last(self.rank[tensor])}))
            elif producer and tensor not in graph_inputs and tensor not in bound:
                self.rename(tensor, out)
                self.tensor = {k: (out if v == tensor else v) for k, v in self.tensor.items()}
            else:
                self.plan.steps.append(OnnxStep("identity", out, (tensor,)))
            bound.add(out)

    def give_up_name(self, tensor: str) -> str:
        """Rename a channels-first tensor to `<tensor>___nchw` (a name only specgen makes) so that the
        channels-last graph output can have its name; returns the new name."""
        inner = f"{tensor}___nchw"
        self.rename(tensor, inner)
        self.tensor = {k: (inner if v == tensor else v) for k, v in self.tensor.items()}
        self.first.add(inner)
        self.rank[inner] = self.rank[tensor]
        return inner

    def rename(self, old: str, new: str) -> None:
        self.plan.steps = [
            OnnxStep(s.template, new if s.out == old else s.out, tuple(new if i == old else i for i in s.ins),
                     s.attrs, s.comment)
            for s in self.plan.steps
        ]


def _comment(node: Node) -> str:
    # A shared layer's weights are its owner's attributes/initializers: say whose, where they are read.
    shares = f" (shares {node.shares})" if node.shares else ""
    return f"{node.name}: {node.op} -> {text.shape(node.shape)}{shares}"


def onnx_plan(ir: ModelIR) -> OnnxPlan:
    return Lowering(exported(ir)).run()  # only what export.onnx.outputs read
