"""Render one spec's IR into generated files, in memory, each checked before it is returned."""

from __future__ import annotations

from functools import cache
from typing import Any

import onnx
import onnx.checker
import onnx.parser

from specgen import __version__
from specgen.ir.model import ModelIR
from specgen.render.environment import environment
from specgen.render.errors import RenderError
from specgen.render.onnx_plan import onnx_plan
from specgen.render.prune_plan import mask_plans
from specgen.render.tf_plan import tf_steps, tf_variables
from specgen.render.train_plan import train_plan
from specgen.text import header as text_header


@cache
def _op_module(template: str) -> Any:
    return environment().get_template(template).module


def _ops(folder: str, names: set[str], suffix: str) -> dict[str, Any]:
    """Each op kind's macros, by template name (one template per op kind)."""
    return {name: _op_module(f"{folder}/ops/{name}{suffix}") for name in sorted(names)}


def load_templates() -> None:
    """Load every template now (before worker processes fork, so that they share the result)."""
    env = environment()
    for name in env.list_templates(extensions=["j2"]):
        if "/ops/" in name:
            _op_module(name)
        else:
            env.get_template(name)


def _check_python(text: str, name: str) -> None:
    """Compile the generated source (a syntax check: 3-4x cheaper than building the AST)."""
    try:
        compile(text, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise RenderError(f"generated {name} does not compile (line {exc.lineno}): {exc.msg}") from exc


def _header(ir: ModelIR) -> str:
    return text_header(ir.source, "specgen build")  # a file name can hold anything: one escaping rule, one line


def render_model_py(ir: ModelIR) -> str:
    steps = tf_steps(ir)
    doc = ir.doc.strip() or f"Model '{ir.name}'."
    text = environment().get_template("tf/model.py.j2").render(
        ir=ir, header=_header(ir), steps=steps, variables=tf_variables(ir), masks=mask_plans(ir),
        ops=_ops("tf", {s.template for s in steps}, ".py.j2"),
        outputs=list(ir.outputs.items()), layers=[(n.name, n.py_name) for n in ir.nodes],
        module_doc=f"TensorFlow 2 model for the spec '{ir.name}'.\n\n{doc}\n",
        class_doc=doc,
    )
    _check_python(text, "model.py")
    return text


def render_onnx_text(ir: ModelIR) -> str:
    plan = onnx_plan(ir)
    return environment().get_template("onnx/model.onnx.txt.j2").render(
        plan=plan, version=__version__, header=_header(ir),
        ops=_ops("onnx", {s.template for s in plan.steps}, ".onnx.j2"),
    )


def onnx_model(text: str, ir: ModelIR) -> onnx.ModelProto:
    """Parse the ONNX text, add the doc string, and run the full checker."""
    try:
        model = onnx.parser.parse_model(text)
    except (onnx.parser.ParseError, IndexError, ValueError) as exc:  # the parser raises IndexError on huge dims
        raise RenderError(f"generated ONNX text does not parse: {exc}") from exc
    model.doc_string = ir.doc
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise RenderError(f"generated ONNX graph fails onnx.checker: {exc}") from exc
    if unread := _unread_initializers(model.graph):
        raise RenderError(f"generated ONNX graph holds initializers no node reads: {', '.join(unread[:5])}")
    return model


def _unread_initializers(graph: onnx.GraphProto) -> list[str]:
    """Initializers neither a node (or a subgraph's node) nor a graph output reads. The checker allows them, but
    onnxruntime warns about each at every session start and they are bytes for nothing: each op's plan makes only
    the constants its chosen nodes read, and this holds it to that."""
    read = {name for node in _nodes(graph) for name in node.input} | {o.name for o in graph.output}
    return [i.name for i in graph.initializer if i.name not in read]


def _nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    found = []
    for node in graph.node:
        found.append(node)
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                found.extend(_nodes(sub))
    return found


def render_train_py(ir: ModelIR) -> str:
    plan = train_plan(ir)
    names = ", ".join(f"'{o.name}' ({o.kind})" for o in plan.optimizers)
    text = environment().get_template("tf/train.py.j2").render(
        **plan.names(), header=_header(ir),
        module_doc=(f"Training state and steps for the spec '{ir.name}'.\n\nEvery variable here is named by its "
                    "path in collections.yaml: the global step, each optimizer's\nlearning rate, iteration count "
                    "and slots, gradient accumulators and EMA shadows.\n"),
        class_doc=f"Optimizers {names} under one global step.",
    )
    _check_python(text, "train.py")
    return text


def render_collections(ir: ModelIR) -> str:
    return environment().get_template("collections.yaml.j2").render(ir=ir, header=_header(ir))


def render_files(ir: ModelIR) -> dict[str, bytes]:
    """Relative file name -> content for `generated/<name>/`; train.py when the spec can train."""
    onnx_text = render_onnx_text(ir)
    model = onnx_model(onnx_text, ir)
    trainable = ir.training is not None and ir.training.can_train
    return {
        "model.py": render_model_py(ir).encode(),
        **({"train.py": render_train_py(ir).encode()} if trainable else {}),
        "collections.yaml": render_collections(ir).encode(),
        "model.onnx.txt": onnx_text.encode(),
        "model.onnx": model.SerializeToString(deterministic=True),
    }
