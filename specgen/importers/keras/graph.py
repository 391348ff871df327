"""A Keras model config (plain JSON) as a flat DAG of layers.

Reads both config formats: Keras 3 (`.keras` config.json, `model.get_config()`: inbound nodes
are `{"args": [...], "kwargs": {...}}` with `__keras_tensor__` references) and Keras 2 (legacy
`.h5` `model_config`: inbound nodes are lists of `[layer, node, tensor, kwargs]`). Nested models
(a Sequential or functional model used as a layer) are flattened: their layers are named
`<model>/<layer>`, the way the weight files name their variables. Nothing here imports Keras.

Tensors are keyed `<scope><layer>:<node>:<tensor>`; an alias table sends the keys of input
layers and nested-model outputs on to the layer (or model input) that really produces them.
A layer or nested model called k > 1 times gives a layer per call: later calls are named
`<layer>/call<k>` and share the first call's weights (`KLayer.shares`, `share:` in the spec).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specgen.importers.keras.errors import ImportProblem, layer_problem

MODELS = ("Functional", "Model", "Sequential")
INPUT = "InputLayer"


@dataclass
class Ref:
    """A tensor argument of a layer call, before aliases are resolved."""

    key: str


@dataclass
class KLayer:
    name: str  # Keras path: "dense", or "inner/dense" inside the nested model "inner"
    cls: str
    module: str
    config: dict[str, Any]
    args: list[Any]  # Ref for tensors, plain values for constants (operations like `x + 3.0`)
    inputs: list[str] = field(default_factory=list)  # producers (layer paths or input names), resolved
    shares: str | None = None  # a later call of a shared layer: the path of the first call, whose weights it uses

    @property
    def constants(self) -> list[Any]:
        return [a for a in self.args if not isinstance(a, Ref)]


@dataclass
class KInput:
    name: str
    shape: list[Any]  # without the batch dimension; None where Keras leaves a size open
    dtype: str


@dataclass
class KGraph:
    name: str
    inputs: list[KInput]
    layers: list[KLayer]
    outputs: list[tuple[str, str]]  # (output name, producer)


def _key(scope: str, ref: list[Any]) -> str:
    return f"{scope}{ref[0]}:{ref[1]}:{ref[2]}"


def _is_ref(value: Any) -> bool:
    return isinstance(value, list) and len(value) >= 3 and isinstance(value[0], str) and isinstance(value[1], int)


def _model_refs(value: Any) -> list[tuple[str | None, list[Any]]]:
    """`input_layers` / `output_layers`: one ref, a list of refs, or a dict {name: ref} (Keras 3)."""
    if isinstance(value, dict):
        return [(str(k), v) for k, v in value.items()]
    if _is_ref(value):
        return [(None, value)]
    return [(None, v) for v in value]


class _Flattener:
    def __init__(self) -> None:
        self.layers: list[KLayer] = []
        self.inputs: list[KInput] = []
        self.alias: dict[str, str] = {}  # tensor key -> tensor key, or "=producer"
        self.shared_scopes: dict[str, str] = {}  # scope of a nested model's later call -> scope of its first

    # --- one call of a layer -------------------------------------------------------------

    def _call_args(self, name: str, cls: str, node: Any, scope: str) -> list[Any]:
        if isinstance(node, dict):  # Keras 3
            # A recorded `training` gives way to the flag the model is called with (functional.py's
            # operation_fn), as specgen layers follow the step's flag: nothing to refuse.
            kwargs = {k: v for k, v in node.get("kwargs", {}).items() if k != "training"}
            self._check_kwargs(name, cls, kwargs)
            args = node.get("args", [])
            if len(args) == 1 and isinstance(args[0], list):  # Add, Concatenate, ...: one list of tensors
                args = args[0]
            return [self._k3_arg(name, cls, a, scope) for a in args]
        out: list[Any] = []  # Keras 2: [[layer, node, tensor, kwargs], ...]
        for entry in node:
            if len(entry) > 3:
                self._check_kwargs(name, cls, entry[3])
            out.append(Ref(_key(scope, entry)))
        return out

    def _k3_arg(self, name: str, cls: str, arg: Any, scope: str) -> Any:
        if isinstance(arg, dict) and arg.get("class_name") == "__keras_tensor__":
            return Ref(_key(scope, arg["config"]["keras_history"]))
        if isinstance(arg, bool) or not isinstance(arg, int | float):
            raise layer_problem(name, cls, f"a call argument {str(arg)[:80]!r} is neither a tensor nor a number")
        return arg

    @staticmethod
    def _check_kwargs(name: str, cls: str, kwargs: dict[str, Any]) -> None:
        for key, value in kwargs.items():
            if value is None:
                continue
            if key == "training":  # Keras 2 honours it over the model's flag (frozen-BN fine-tuning)
                raise layer_problem(name, cls, f"called with training={value}: specgen layers follow the "
                                    "step's training flag (a fixed training mode cannot be expressed)")
            raise layer_problem(name, cls, f"call argument '{key}' ({str(value)[:80]}) cannot be expressed")

    # --- models --------------------------------------------------------------------------

    def functional(self, config: dict[str, Any], scope: str, bound: list[str] | None) -> list[tuple[str, str]]:
        input_refs = _model_refs(config.get("input_layers", []))
        input_names = [ref[0] for _, ref in input_refs]
        for entry in config["layers"]:
            name, cls = entry.get("name") or entry["config"]["name"], entry["class_name"]
            nodes = entry.get("inbound_nodes", [])
            if cls == INPUT:
                self._input(entry, scope, bound, input_names, dict(input_refs))
                continue
            if not nodes:
                continue  # not called in this model (Keras keeps such layers in the config)
            # A layer called several times (shared weights): call k (k > 0) becomes `<name>/call<k+1>`, a spec
            # layer with `share:` the first call. No other path is `<name>/...`: that would be a nested model
            # named like this layer, and names in one Keras model are unique.
            for call, node in enumerate(nodes):
                args = self._call_args(scope + name, cls, node, scope)
                self._layer_or_model(entry, name, cls, scope, args, call)
        # model.output_names: the dict keys when outputs are a dict, else the producing layers' names
        return [(out or str(ref[0]), _key(scope, ref)) for out, ref in _model_refs(config["output_layers"])]

    def _input(self, entry: dict[str, Any], scope: str, bound: list[str] | None, names: list[str],
               keyed: dict[str | None, list[Any]]) -> None:
        name = entry.get("name") or entry["config"]["name"]
        if bound is None:
            config = entry["config"]
            shape = config.get("batch_shape") or config.get("batch_input_shape")
            public = next((k for k, ref in keyed.items() if k is not None and ref[0] == name), name)
            self.inputs.append(KInput(public, list(shape[1:]), str(config.get("dtype", "float32"))))
            self.alias[f"{scope}{name}:0:0"] = "=" + public
        elif name in names:
            self.alias[f"{scope}{name}:0:0"] = bound[names.index(name)]

    def _layer_or_model(self, entry: dict[str, Any], name: str, cls: str, scope: str, args: list[Any],
                        call: int = 0) -> None:
        own = f"{name}/call{call + 1}" if call else name
        if cls in MODELS:
            tensors = [a.key for a in args if isinstance(a, Ref)]
            if len(tensors) != len(args):
                raise layer_problem(scope + name, cls, "a nested model called with constants")
            if call:  # its layers again, each sharing the same layer of the first call
                self.shared_scopes[f"{scope}{own}/"] = f"{scope}{name}/"
            inner = self.model(entry, f"{scope}{own}/", tensors)
            for index, (_, key) in enumerate(inner):
                self.alias[f"{scope}{name}:{call}:{index}"] = key
            return
        # The first call's path owns the weights (itself mapped when this model is a later call of a nested one).
        first = self._first_call(scope + name)
        shares = (first or scope + name) if call else first
        self.layers.append(KLayer(scope + own, cls, str(entry.get("module") or "keras.layers"),
                                  entry.get("config", {}), args, shares=shares))
        self.alias[f"{scope}{name}:{call}:0"] = "=" + scope + own

    def _first_call(self, path: str) -> str | None:
        """The first call's path for a `path` inside a nested model's later call; None outside such calls."""
        for later, first in self.shared_scopes.items():
            if path.startswith(later):
                return self._first_call(first + path[len(later):]) or first + path[len(later):]
        return None

    def sequential(self, config: dict[str, Any], scope: str, bound: list[str] | None) -> list[tuple[str, str]]:
        entries = list(config["layers"])
        if bound is None:
            first = entries[0]
            if first["class_name"] == INPUT:
                entries.pop(0)
                shape, dtype, name = (first["config"].get("batch_shape") or first["config"].get("batch_input_shape"),
                                      first["config"].get("dtype", "float32"), first["config"]["name"])
            else:  # Keras 2 keeps the input shape on the first layer; Keras 3 in build_input_shape
                shape = first["config"].get("batch_input_shape") or config.get("build_input_shape")
                dtype, name = first["config"].get("dtype", "float32"), "input"
                if shape is None:
                    raise ImportProblem("the Sequential model has no input shape (it was never built)")
            self.inputs.append(KInput(name, list(shape[1:]), dtype if isinstance(dtype, str) else "float32"))
            previous = f"{scope}{name}:0:0"
            self.alias[previous] = "=" + name
        else:
            (previous,) = bound
        last = previous.rsplit(":", 2)[0].rsplit("/", 1)[-1]
        for entry in entries:
            cls = entry["class_name"]
            if cls == INPUT:
                continue
            last = entry.get("name") or entry["config"]["name"]
            self._layer_or_model(entry, last, cls, scope, [Ref(previous)])
            previous = f"{scope}{last}:0:0"
        return [(last, previous)]

    def model(self, entry: dict[str, Any], scope: str, bound: list[str] | None) -> list[tuple[str, str]]:
        if entry["class_name"] == "Sequential":
            return self.sequential(entry["config"], scope, bound)
        return self.functional(entry["config"], scope, bound)

    # --- resolution ----------------------------------------------------------------------

    def producer(self, key: str, seen: int = 0) -> str:
        target = self.alias.get(key)
        if target is None or seen > 10_000:
            raise ImportProblem(f"the model config refers to tensor '{key}', which no layer in it produces")
        return target[1:] if target.startswith("=") else self.producer(target, seen + 1)


def flatten(config: dict[str, Any]) -> KGraph:
    """The DAG of a model config: {"class_name": "Functional" | "Sequential" | ..., "config": {...}}."""
    if config.get("class_name") not in MODELS:
        raise ImportProblem(f"expected a Keras model config (Functional or Sequential); received class "
                            f"'{config.get('class_name')}' (subclassed models have no graph to read)")
    flat = _Flattener()
    outputs = flat.model(config, "", None)
    for layer in flat.layers:
        layer.inputs = [flat.producer(a.key) for a in layer.args if isinstance(a, Ref)]
    return KGraph(config["config"].get("name", "model"), flat.inputs, flat.layers,
                  [(name, flat.producer(key)) for name, key in outputs])
