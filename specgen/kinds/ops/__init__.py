"""The op registry: one home per op, and every op list derived from it.

Each module in this package (one per op, or per small family that shares a model or a rule)
defines its ops' pydantic spec models and an `OPS` tuple of `OpDef`s (base.py): the shape rule
(output shape, variables with their ONNX layout, FLOPs), the TensorFlow and ONNX template
attributes and the ONNX layout the op wants. Modules are found by listing the package, so adding
an op adds a module and edits no list here (docs/extending.md, Ops, says what else a new op needs).

Why the spec models live here and not in specgen/spec/: an op's model and its rules change
together, and one module per op lets several people add ops without touching shared files.
The spec layer still imports neither jinja2, TensorFlow nor onnx: this package needs only
pydantic, specgen/fields/base.py, fields/unions.py, fields/layers.py (shared field types) and nodes.py
(the resolved layer's dataclasses), and specgen/spec/ takes the `Layer` union from here. It sits
below spec/ and ir/: it imports neither (tests/test_import_graph.py).

Derived here: `REGISTRY` (op name -> OpDef), `Layer` (the discriminated union of spec models);
render/tf_plan.py and render/onnx_plan.py dispatch through `REGISTRY`, ir/resolve.py takes the
weights' ONNX layout from each `VarDecl`, and the tests take their op lists from `REGISTRY`.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias, Union

from pydantic import Field

from specgen import text
from specgen.fields.base import MAX_INT
from specgen.fields.layers import LayerBase, MultiInputBase
from specgen.kinds import dims
from specgen.kinds.ops.base import EXTRA_OUTPUT, EXTRA_OUTPUT_DEF, AsActivation, OpDef, OpError, OpResult, VarDecl
from specgen.kinds.ops.nodes import Shape
from specgen.kinds.ops.shapes import prod

__all__ = ["EXTRA_OUTPUT", "REGISTRY", "Layer", "OpDef", "OpError", "OpResult", "VarDecl", "activation_of", "as_activation",
           "backward_flops", "infer", "op_def"]

# The modules of the first ops, in the order their models appear in the published JSON schema
# (schemas/specgen.schema.json lists the union's members in registry order). Every other module
# follows in alphabetical order, so a new op needs no entry here.
SCHEMA_ORDER = ("dense", "convs", "pools", "reshapes", "norms", "dropout", "embedding", "activations", "merge")
NOT_OPS = ("base", "nodes", "moments", "shapes")  # modules here that define no ops


def _module_names() -> list[str]:
    found = sorted(m.name for m in pkgutil.iter_modules(__path__)
                   if m.name not in NOT_OPS and not m.name.startswith("_"))
    return [*(m for m in SCHEMA_ORDER if m in found), *(m for m in found if m not in SCHEMA_ORDER)]


def _collect() -> dict[str, OpDef]:
    registry: dict[str, OpDef] = {}
    for module_name in _module_names():
        module = importlib.import_module(f"{__name__}.{module_name}")
        for op in module.OPS:
            if op.name in registry:
                raise RuntimeError(f"op '{op.name}' is defined twice (again in specgen/kinds/ops/{module_name}.py)")
            registry[op.name] = op
    return registry


REGISTRY: dict[str, OpDef] = _collect()

# One member per model (families share one, e.g. max_pool/avg_pool), in registry order.
_MODELS = tuple(dict.fromkeys(op.spec for op in REGISTRY.values()))
if TYPE_CHECKING:  # pydantic's discriminated union of the registry's models, built at run time; statically, their base
    Layer: TypeAlias = LayerBase | MultiInputBase
else:
    Layer = Annotated[Union[_MODELS], Field(discriminator="op")]  # noqa: UP007 (built from a tuple)


def op_def(name: str) -> OpDef:
    """The definition of a node's op: the registry's, or EXTRA_OUTPUT's (base.py) for an extra output's node."""
    return EXTRA_OUTPUT_DEF if name == EXTRA_OUTPUT else REGISTRY[name]


def activation_of(layer: Any) -> str | None:
    """The layer's `activation:` (None for ops without one).

    Checked against the model's fields first: getattr on a pydantic model without the field
    goes through pydantic's __getattr__ and an AttributeError, which is slow for every layer.
    """
    if "activation" not in type(layer).model_fields or not REGISTRY[layer.op].activation_after:
        return None  # a recurrent layer's `activation:` is its cell's (specgen/kinds/ops/recurrent.py)
    activation: str | None = layer.activation
    return activation


def as_activation(name: str) -> AsActivation:
    """How op `name` runs from an `activation:` key (fields/layers.py's Activation lists only such ops)."""
    use = REGISTRY[name].as_activation
    if use is None:
        raise KeyError(f"op '{name}' cannot be used as an activation")
    return use


def infer(layer: Any, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    op = REGISTRY[layer.op]
    if not op.symbolic:
        _refuse_symbols(layer, shapes)
    result = op.infer(layer, shapes, dtypes)
    # The bound on an input's size (spec/io.py) holds for every layer's output too: strides or
    # upsampling factors near 2**31 would otherwise multiply past int64, which ONNX text dims are read into.
    if prod(result.shape) > MAX_INT:
        raise OpError(f"its output would be {text.shape(result.shape)}, {prod(result.shape)} values per example; the limit "
                      f"is {MAX_INT}, as for an input (smaller strides, sizes or factors)")
    act = activation_of(layer)
    if act is not None and act != "linear":
        result.flops += as_activation(act).flops * prod(result.shape)
    return result


def _refuse_symbols(layer: Any, shapes: list[Shape]) -> None:
    """An op whose rule needs every size fixed, given a named dynamic dimension (kinds/dims.py)."""
    for shape in shapes:
        if found := dims.symbols(shape):
            key = "inputs" if "inputs" in type(layer).model_fields else "input"
            raise OpError(f"{layer.op} needs fixed sizes; its input {text.shape(shape)} has the named dynamic "
                          f"dimension '{found[0]}', known only at run time", key)


def backward_flops(forward: int, has_weights: bool) -> int:
    """Estimate: layers with weights need gradients for inputs and weights (2x), others 1x."""
    return 2 * forward if has_weights else forward
