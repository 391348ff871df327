"""Layers with several outputs (kinds/ops/base.py OpResult.extra_outputs): `<layer>/<output>` references.

Each extra output becomes a node of op EXTRA_OUTPUT that reads its layer, so everything that walks nodes
(reach, export pruning, lints, the report, the planners) sees an ordinary tensor with a shape and a dtype.
"""

from __future__ import annotations

from specgen.diagnostics import Diagnostic
from specgen.ir.graph import layer_inputs
from specgen.ir.model import Node, Shape
from specgen.ir.naming import onnx_name, py_name
from specgen.kinds.ops import EXTRA_OUTPUT, OpResult
from specgen.spec.load import LoadedSpec


def unknown_output(loaded: LoadedSpec, i: int, source: str, known: dict[str, tuple[Shape, str]]) -> Diagnostic:
    """`source` is `<layer>/<output>` of an inferred layer that has no such output."""
    layer = loaded.layers[i]
    sources, key = layer_inputs(layer)
    loc = ("layers", i, key, sources.index(source)) if key == "inputs" and source in sources else (
        ("layers", i, key) if source in sources else ("layers", i))
    owner, _, out = source.rpartition("/")
    extra = [k for k in known if k.startswith(f"{owner}/") and k.rpartition("/")[0] == owner]
    has = f"its outputs are {owner}, {', '.join(extra)}" if extra else f"its one output is {owner}"
    return loaded.diagnostic(loc, f"layer '{layer.name}' reads '{source}'; layer '{owner}' has no output '{out}' "
                                  f"({has})")


def extra_nodes(node: Node, result: OpResult) -> list[Node]:
    """One node per extra output of `node` (OpResult.extra_outputs), reading it; they follow it in the order."""
    return [Node(name=f"{node.name}/{out}", op=EXTRA_OUTPUT, inputs=(node.name,), input_shapes=(node.shape,),
                 shape=shape, dtype=dtype, params={"output": out}, variables={}, activation=None,
                 py_name=py_name(f"{node.name}/{out}"), onnx_name=onnx_name(f"{node.name}/{out}"), flops=0,
                 index=node.index) for out, (shape, dtype) in result.extra_outputs.items()]
