"""The flat Keras DAG as spec layers: names, wiring, shapes (specgen's own rules) and variables.

Each converted layer is checked at once with specgen's spec model and shape rule, so a layer
specgen would refuse is reported as that Keras layer (name and class), not as a spec line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from specgen.importers.keras.args import Args
from specgen.importers.keras.errors import ImportProblem, layer_problem
from specgen.importers.keras.graph import KGraph, KLayer
from specgen.importers.keras.layers import APPLICATION_CLASSES, CONVERTERS, KERAS2_ROLES, Converter, Part
from specgen.importers.keras.names import Namer
from specgen.kinds.ops import Layer, OpError, infer

DTYPES = ("float32", "int32", "int64")
MULTI_INPUT = ("add", "multiply", "subtract", "concat")
OPERATIONS = {"Add": "add", "Multiply": "multiply", "Subtract": "subtract"}  # keras.ops calls in a graph
REFUSED = {  # classes people meet often, with why (others: "no spec op")
    "Lambda": "it runs Python code stored in the model, which specgen never runs",
    "TFOpLambda": "it calls a TensorFlow function stored by name, which specgen never runs",
    "SlicingOpLambda": "it calls a TensorFlow function stored by name, which specgen never runs",
}


@dataclass
class Imported:
    name: str
    inputs: dict[str, dict[str, Any]]
    outputs: dict[str, str]
    layers: list[dict[str, Any]]
    keys: dict[str, str] = field(default_factory=dict)  # spec variable path -> Keras weight key
    layer_names: dict[str, str] = field(default_factory=dict)  # spec layer -> Keras layer path
    frozen: list[str] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (Keras layer, what was dropped)
    renamed: list[tuple[str, str, str]] = field(default_factory=list)  # (what, Keras name, spec name)


_LAYER = TypeAdapter(Layer)


def _converter(layer: KLayer) -> Converter | None:
    if layer.module.startswith("keras.src.ops"):
        return None  # operations are handled by _operation
    known = APPLICATION_CLASSES.get((layer.module, layer.cls))
    if known is not None:
        return known
    if layer.module not in ("keras.layers", "keras", "") and not layer.module.startswith("keras.src.layers"):
        raise layer_problem(layer.name, layer.cls, f"a custom class from module '{layer.module}': specgen never "
                            "imports a model's own code; write the layer as spec ops by hand")
    if layer.cls in REFUSED:
        raise layer_problem(layer.name, layer.cls, f"refused: {REFUSED[layer.cls]}")
    if layer.cls not in CONVERTERS:
        raise layer_problem(layer.name, layer.cls, "no spec op for this Keras class")
    return CONVERTERS[layer.cls]


def _operation(layer: KLayer) -> dict[str, Any]:
    """`x + 3.0`, `x * (1 / 6)`, `a * b` in a Keras 3 graph (MobileNetV3's hard sigmoid): exact spec ops."""
    op = OPERATIONS.get(layer.cls)
    if op is None or len(layer.args) != 2 or set(layer.config) - {"name"}:
        raise layer_problem(layer.name, layer.cls, f"the Keras operation ({layer.module}) has no spec form")
    constants = layer.constants
    if not constants:
        return {"op": op}
    if len(constants) != 1:
        raise layer_problem(layer.name, layer.cls, "an operation on two constants")
    c, first = float(constants[0]), not isinstance(layer.args[0], float | int)
    # rescale is x * scale + offset in float32: x * 1.0 is x exactly, so these equal Keras' results.
    if op == "add":
        return {"op": "rescale", "scale": 1.0, "offset": c}
    if op == "multiply":
        return {"op": "rescale", "scale": c}
    return {"op": "rescale", "scale": 1.0, "offset": -c} if first else {"op": "rescale", "scale": -1.0, "offset": c}


def _order(graph: KGraph) -> list[KLayer]:
    """Topological order, ties by config order (Keras writes configs in order already)."""
    done = {i.name for i in graph.inputs}
    pending, ordered = list(graph.layers), []
    while pending:
        # A later call of a shared layer also waits for the first, whose spec name its `share:` names.
        ready = [layer for layer in pending if all(p in done for p in layer.inputs)
                 and (layer.shares is None or layer.shares in done)]
        if not ready:
            raise ImportProblem(f"the model config has a cycle or a missing tensor at '{pending[0].name}'")
        for layer in ready:
            ordered.append(layer)
            done.add(layer.name)
        pending = [layer for layer in pending if layer.name not in done]
    return ordered


class _Converter:
    def __init__(self, graph: KGraph, keras2: bool):
        self.graph, self.keras2, self.namer = graph, keras2, Namer()
        self.out = Imported(self.namer.identifier(graph.name), {}, {}, [])
        self.spec_of: dict[str, str] = {}  # Keras producer -> spec name it reads as
        self.made: dict[tuple[str, str], str] = {}  # (Keras layer, part suffix) -> spec layer, for `share:`
        self.shapes: dict[str, tuple[Any, ...]] = {}
        self.dtypes: dict[str, str] = {}

    def inputs(self) -> None:
        for item in self.graph.inputs:
            if any(d is None for d in item.shape):
                raise ImportProblem(f"input '{item.name}' has open sizes {item.shape}: specgen needs fixed shapes "
                                    "(rebuild the model with a fixed input shape, e.g. --input-shape for constructors)")
            if item.dtype not in DTYPES:
                raise ImportProblem(f"input '{item.name}' has dtype {item.dtype}; specgen inputs are "
                                    + ", ".join(DTYPES))
            name = self.namer.identifier(item.name)
            self._renamed("input", item.name, name)
            self.out.inputs[name] = {"shape": [int(d) for d in item.shape], "dtype": item.dtype}
            self.spec_of[item.name] = name
            self.shapes[name], self.dtypes[name] = (None, *[int(d) for d in item.shape]), item.dtype

    def _renamed(self, what: str, keras: str, spec: str) -> None:
        if keras != spec:
            self.out.renamed.append((what, keras, spec))

    def layer(self, layer: KLayer) -> None:
        ins = [self.spec_of[p] for p in layer.inputs]
        shapes = [self.shapes[i] for i in ins]
        convert = _converter(layer)
        if convert is None:
            keys: dict[str, Any] | list[Part] | None = _operation(layer)
        else:
            args = Args(layer, self.keras2, self.out.notes)
            keys = convert(args, shapes)
            args.finish()
        if keys is None:  # the identity: readers read its input
            if len(ins) != 1:
                raise layer_problem(layer.name, layer.cls, "an identity with several inputs")
            self.spec_of[layer.name] = ins[0]
            return
        if isinstance(keys, dict):
            self._add(layer, layer.name, self.namer.layer(layer.name), keys, ins, "")
            return
        parts: dict[str, str] = {}  # suffix -> spec name
        for i, part in enumerate(keys):  # no variables: nothing to map for the restore
            last = i == len(keys) - 1
            wanted = layer.name if last else f"{layer.name}_{part.suffix}"
            name = self.namer.layer(wanted)
            self._add(layer, wanted, name, dict(part.keys), [ins[r] if isinstance(r, int) else parts[r] for r in part.reads],
                      part.suffix)
            parts[part.suffix] = name

    def _add(self, layer: KLayer, wanted: str, name: str, keys: dict[str, Any], ins: list[str], part: str) -> None:
        self._renamed("layer", wanted, name)
        wiring = {"inputs": ins} if keys["op"] in MULTI_INPUT else {"input": ins[0]}
        # A later call of a shared Keras layer: the same keys, and the first call's variables.
        share = {"share": self.made[(layer.shares, part)]} if layer.shares else {}
        entry = {"name": name, "op": keys.pop("op"), **wiring, **share, **keys}
        self.made[(layer.name, part)] = name
        result = self._check(layer, entry, [self.shapes[i] for i in ins], [self.dtypes[i] for i in ins])
        self.out.layers.append(entry)
        self.out.layer_names[name] = layer.name
        self.spec_of[layer.name], self.shapes[name], self.dtypes[name] = name, result.shape, result.dtype
        # LayerScale's unnamed variable ('variable' in Keras) is keyed `gamma` by the weight reader
        roles = KERAS2_ROLES.get(entry["op"], {}) if self.keras2 else {}
        if share:
            return  # its variables are the first call's, mapped and frozen there
        for var in result.variables:
            self.out.keys[f"{name}/{var.role}"] = f"{layer.name}/{roles.get(var.role, var.role)}"
        if result.variables and layer.config.get("trainable") is False:
            self.out.frozen.append(f"{name}/*")

    def _check(self, layer: KLayer, entry: dict[str, Any], shapes: list[Any], dtypes: list[str]) -> Any:
        try:
            return infer(_LAYER.validate_python(entry), shapes, dtypes)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"][1:])
            raise layer_problem(layer.name, layer.cls, f"as spec op '{entry['op']}': {where}: {first['msg']}") from None
        except OpError as exc:
            raise layer_problem(layer.name, layer.cls, f"as spec op '{entry['op']}': {exc}") from None

    def outputs(self) -> None:
        layer_names = {entry["name"] for entry in self.out.layers}
        for keras_name, producer in self.graph.outputs:
            target = self.spec_of[producer]
            if target in self.out.inputs:
                raise ImportProblem(f"output '{keras_name}' is a model input itself; specgen outputs read layers")
            name = keras_name.replace("/", "_")
            clash = name in self.out.inputs or name in self.out.outputs or (name in layer_names and name != target)
            if clash or not Namer().identifier(name) == name:
                name = Namer().identifier(name + ("_output" if clash else ""))
            self._renamed("output", keras_name, name)
            self.out.outputs[name] = target


def convert(graph: KGraph, keras2: bool) -> Imported:
    """Spec inputs, layers and outputs of a flattened Keras graph; ImportProblem on the first refusal."""
    state = _Converter(graph, keras2)
    state.inputs()
    for layer in _order(graph):
        state.layer(layer)
    state.outputs()
    return state.out
