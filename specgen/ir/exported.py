"""What the ONNX export holds: the outputs `export.onnx.outputs` names, and only what they read.

Left out, every output is exported. With a selection, the exported graph keeps the layers the
selected outputs read (directly or not), the spec inputs those layers read and the model variables
those layers use; everything else (a target network that only the training loss reads, for one)
is left out of `model.onnx`, its Triton config and the parity checks. The generated TensorFlow
module keeps every output: training needs them.
"""

from __future__ import annotations

from dataclasses import replace

from specgen.diagnostics import Diagnostic, did_you_mean
from specgen.ir.model import ModelIR
from specgen.spec.load import LoadedSpec


def check_export_outputs(loaded: LoadedSpec) -> list[Diagnostic]:
    """Each name in `export.onnx.outputs` is a spec output, written once."""
    names = loaded.spec.export.onnx.outputs or []
    problems, seen = [], set()
    for i, name in enumerate(names):
        loc = ("export", "onnx", "outputs", i)
        if name not in loaded.spec.outputs:
            problems.append(loaded.diagnostic(loc, (
                f"export output '{name}' is not an output{did_you_mean(name, loaded.spec.outputs)} "
                f"(outputs: {', '.join(loaded.spec.outputs)})")))
        elif name in seen:
            problems.append(loaded.diagnostic(loc, f"export output '{name}' is listed twice"))
        seen.add(name)
    return problems


def exported(ir: ModelIR) -> ModelIR:
    """`ir` reduced to what the exported outputs read (itself when every output is exported)."""
    selected = ir.training.export.outputs if ir.training else ()
    if not selected or set(selected) == set(ir.outputs):
        return ir
    sources = {n.name: n.inputs for n in ir.nodes}
    reached: set[str] = set()
    todo = [ir.outputs[name] for name in selected]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += sources.get(name, ())
    nodes = tuple(n for n in ir.nodes if n.name in reached)
    used = {v.path for n in nodes for v in n.variables.values()}
    return replace(
        ir, inputs=tuple(i for i in ir.inputs if i.name in reached), nodes=nodes,
        outputs={name: layer for name, layer in ir.outputs.items() if name in selected},
        variables=tuple(v for v in ir.variables if "model" not in v.collections or v.path in used),
    )
