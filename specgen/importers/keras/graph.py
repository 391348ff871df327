"""A Keras model config (plain JSON) as a flat DAG of layers (dag.py).

Reads both config formats: Keras 3 (`.keras` config.json, `model.get_config()`: inbound nodes
are `{"args": [...], "kwargs": {...}}` with `__keras_tensor__` references) and Keras 2 (legacy
`.h5` `model_config`: inbound nodes are lists of `[layer, node, tensor, kwargs]`). Nested models
(a Sequential or functional model used as a layer) are flattened: their layers are named
`<model>/<layer>`, the way the weight files name their variables. Nothing here imports Keras.

The config is untrusted: every part is checked (entries.py) as the walk reaches it, and the walk
iterates: each model is a generator that yields the nested models it meets to `_Flattener.run`,
which keeps them on a stack of at most MAX_NESTED, so no config can make Python recurse deeply.
Each layer call's arguments are read by calls.py.

Tensors are keyed `<scope><layer>:<node>:<tensor>`; an alias table sends the keys of input
layers and nested-model outputs on to the layer (or model input) that really produces them.
A layer or nested model called k > 1 times gives a layer per call: later calls are named
`<layer>/call<k>` and share the first call's weights (`KLayer.shares`, `share:` in the spec).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from specgen.diagnostics import quoted
from specgen.importers.keras.calls import CallReader, layer_entry
from specgen.importers.keras.dag import CALL_KWARGS, KGraph, KInput, KLayer, Ref, tensor_key
from specgen.importers.keras.entries import (
    FunctionalConfig,
    InputConfig,
    LayerEntry,
    SequentialConfig,
    Shape,
    TopConfig,
    check_depth,
    checked,
    refs,
)
from specgen.importers.keras.errors import ImportProblem, custom_class, custom_problem, keras_hub_problem, layer_problem
from specgen.importers.keras.masks import OTHER_MASKS, mask_ids
from specgen.importers.keras.run_order import ModelRun, RunNode, keras_tensors, run_order
from specgen.spec.expand import MAX_LAYERS

MODELS = ("Functional", "Model", "Sequential")
INPUT = "InputLayer"
MAX_NESTED = 7  # models inside models: layer names then have at most 8 parts, as spec layer names do
TOO_MANY = (f"the model has more than {MAX_LAYERS} layers (each call of a shared layer counts); a spec holds at "
            f"most {MAX_LAYERS}")
MAX_HOPS = 4 * (MAX_NESTED + 1)  # aliases a tensor passes through: into and out of each nested model

# A model's walk: yields (nested model entry, its scope, the tensors it is called on, where), receives that
# model's outputs, returns its own outputs [(output name, tensor key)].
Walk = Generator[tuple[LayerEntry, str, list[str], str], list[tuple[str, str]], list[tuple[str, str]]]


def _starts_with_input(config: dict[str, Any]) -> bool:
    layers = config.get("layers")
    return isinstance(layers, list) and bool(layers) and isinstance(layers[0], dict) \
        and layers[0].get("class_name") == INPUT


class _Flattener:
    def __init__(self) -> None:
        self.layers: list[KLayer] = []
        self.inputs: list[KInput] = []
        self.alias: dict[str, str] = {}  # tensor key -> tensor key, or "=producer"
        self.shared_scopes: dict[str, str] = {}  # scope of a nested model's later call -> scope of its first
        self.calls = CallReader()  # reads each layer call; holds the mask_zero masks and classes met so far
        self.runs: dict[str, ModelRun] = {}  # scope -> its model's nodes, for the order Keras runs them (run_order.py)

    # --- models --------------------------------------------------------------------------

    def functional(self, config: dict[str, Any], scope: str, bound: list[str] | None, where: str) -> Walk:
        model = checked(FunctionalConfig, config, where)
        inputs = refs(model.input_layers, f"{where}.input_layers")
        input_names = [ref[0] for _, ref in inputs]
        seen: set[str] = set()
        run = self.runs.setdefault(scope, ModelRun())
        for index, raw in enumerate(model.layers):
            entry, name = layer_entry(raw, f"{where}.layers[{index}]", seen)
            self.calls.classes[scope + name] = entry.class_name
            if entry.class_name == INPUT:
                self._input(entry, name, scope, bound, input_names, inputs)
                continue
            if (entry.module or "").startswith("keras_hub."):  # before its call arguments: a dict input is no mask
                raise keras_hub_problem(scope + name, entry.class_name, entry.module or "")
            ids = mask_ids(entry, scope, self.calls.zero_masks)
            if ids is not None:  # specgen makes this mask itself from mask_zero (importers/keras/masks.py)
                self.calls.zero_masks[scope + name] = ids
                # a node still, in Keras' order: a layer after it waits for it (no spec layer)
                reads = [tensor_key(scope, h) for h in keras_tensors(entry.inbound_nodes[0])]
                run.nodes[f"{scope}{name}:0"] = RunNode(f"{scope}{name}:0", scope + name, reads, None)
                continue
            # Layers not called in this model have no nodes (Keras keeps them in the config). A layer called
            # several times (shared weights): call k (k > 0) becomes `<name>/call<k+1>`, a spec layer with
            # `share:` the first call. No other path is `<name>/...`: names hold no '/' and are unique here.
            for call, node in enumerate(entry.inbound_nodes):
                node_where = f"{where}.layers[{index}].inbound_nodes[{call}]"
                args, named, masks = self.calls.call_args(scope + name, entry.class_name, node, scope, node_where)
                # every tensor of the call, masks included, in Keras' order (Keras 2: [[layer, node, tensor, ...]])
                reads = [tensor_key(scope, h) for h in
                         (keras_tensors(node) if isinstance(node, dict) else [e[:3] for e in node])]
                yield from self._layer_or_model(entry, name, scope, args, call, isinstance(node, list),
                                                f"{where}.layers[{index}]", named, masks, reads)
        # model.output_names: the dict keys when outputs are a dict, else the producing layers' names
        outputs = [(out or ref[0], tensor_key(scope, ref)) for out, ref in refs(model.output_layers, f"{where}.output_layers")]
        # Keras walks its outputs in tree.flatten order: a dict's by sorted key
        run.outputs = [key for _, key in (sorted(outputs) if isinstance(model.output_layers, dict) else outputs)]
        return outputs

    def _input(self, entry: LayerEntry, name: str, scope: str, bound: list[str] | None, names: list[str],
               refs: list[tuple[str | None, tuple[str, int, int]]]) -> None:
        if bound is None:
            config = checked(InputConfig, entry.config, f"Keras layer {quoted(scope + name)} (InputLayer): config")
            shape = config.batch_shape or config.batch_input_shape
            if not shape:
                raise layer_problem(scope + name, INPUT, "no batch_shape (expected [null, size, ...])")
            public = next((k for k, ref in refs if k is not None and ref[0] == name), name)
            self.inputs.append(KInput(public, list(shape[1:]), config.dtype or "float32"))
            self.alias[f"{scope}{name}:0:0"] = "=" + public
        elif name in names:
            if names.index(name) >= len(bound):
                raise layer_problem(scope + name, INPUT, f"the nested model is called on {len(bound)} tensors, "
                                    f"fewer than its {len(names)} inputs")
            self.alias[f"{scope}{name}:0:0"] = bound[names.index(name)]

    def _layer_or_model(self, entry: LayerEntry, name: str, scope: str, args: list[Any], call: int,
                        keras2: bool, where: str, named: dict[str, Any] | None = None,
                        masks: dict[str, list[str]] | None = None, reads: list[str] | None = None) -> Walk:
        own, cls = f"{name}/call{call + 1}" if call else name, entry.class_name
        nodes = self.runs.setdefault(scope, ModelRun()).nodes
        if (why := custom_class(entry.module, entry.registered_name, cls)) is not None:
            raise custom_problem(scope + name, cls, why)
        if cls in OTHER_MASKS:  # refused here, before a layer after it names its mask as a call argument
            raise layer_problem(scope + name, cls, OTHER_MASKS[cls])
        if cls in MODELS:
            tensors = [a.key for a in args if isinstance(a, Ref)]
            if len(tensors) != len(args):
                raise layer_problem(scope + name, cls, "a nested model called with constants")
            if call:  # its layers again, each sharing the same layer of the first call
                self.shared_scopes[f"{scope}{own}/"] = f"{scope}{name}/"
            inner = yield entry, f"{scope}{own}/", tensors, f"{where}.config"
            # tf_keras leaves out node 0 of a nested model built on its own Input (that Input's call) and counts
            # the calls in the config from 1 (_should_skip_first_node in tf_keras' functional.py).
            node = call + (1 if keras2 and _starts_with_input(entry.config) else 0)
            nodes[f"{scope}{name}:{node}"] = RunNode(f"{scope}{name}:{node}", scope + name, reads or [],
                                                     f"{scope}{own}/", nested=True)
            for index, (_, key) in enumerate(inner):
                self.alias[f"{scope}{name}:{node}:{index}"] = key
            return []
        if len(self.layers) >= MAX_LAYERS:
            raise ImportProblem(TOO_MANY)
        # The first call's path owns the weights (itself mapped when this model is a later call of a nested one).
        first = self._first_call(scope + name)
        shares = (first or scope + name) if call else first
        self.layers.append(KLayer(scope + own, cls, entry.module or "keras.layers", entry.config, args, named or {},
                                  shares=shares, masks=masks))
        self.alias[f"{scope}{name}:{call}:0"] = "=" + scope + own
        nodes[f"{scope}{name}:{call}"] = RunNode(f"{scope}{name}:{call}", scope + name, reads or [], scope + own)
        return []

    def _first_call(self, path: str) -> str | None:
        """The first call's path for a `path` inside a nested model's later call; None outside such calls."""
        found = None
        for _ in range(MAX_NESTED + 1):  # each step removes one `call<k>/` part
            cuts = (i + 1 for i, c in enumerate(path) if c == "/")
            later = next((path[:cut] for cut in cuts if path[:cut] in self.shared_scopes), None)
            if later is None:
                break
            path = found = self.shared_scopes[later] + path[len(later):]
        return found

    def sequential(self, config: dict[str, Any], scope: str, bound: list[str] | None, where: str) -> Walk:
        model = checked(SequentialConfig, config, where)
        entries, start = list(model.layers), 0
        if bound is None:
            first = checked(LayerEntry, entries[0], f"{where}.layers[0]")
            if first.class_name == INPUT:
                entries, start = entries[1:], 1
                input_config = checked(InputConfig, first.config, f"{where}.layers[0].config")
                shape = input_config.batch_shape or input_config.batch_input_shape
                dtype, name = input_config.dtype or "float32", input_config.name or "input"
            else:  # Keras 2 keeps the input shape on the first layer; Keras 3 in build_input_shape
                shape = checked(Shape | None, first.config.get("batch_input_shape"),
                                f"{where}.layers[0].config.batch_input_shape") or model.build_input_shape
                recorded, name = first.config.get("dtype"), "input"
                dtype = recorded if isinstance(recorded, str) else "float32"
            if not shape:
                raise ImportProblem(f"{where}: the Sequential model has no input shape (it was never built)")
            self.inputs.append(KInput(name, list(shape[1:]), dtype))
            previous = f"{scope}{name}:0:0"
            self.alias[previous] = "=" + name
        elif len(bound) != 1:
            raise ImportProblem(f"{where}: a Sequential model called on {len(bound)} tensors (it takes one)")
        else:
            previous = bound[0]
        last, seen = previous.rsplit(":", 2)[0].rsplit("/", 1)[-1], set[str]()
        for index, raw in enumerate(entries, start):
            entry, name = layer_entry(raw, f"{where}.layers[{index}]", seen)
            if entry.class_name == INPUT:
                continue
            yield from self._layer_or_model(entry, name, scope, [Ref(previous)], 0, False, f"{where}.layers[{index}]",
                                            reads=[previous])
            last, previous = name, f"{scope}{name}:0:0"
        self.runs.setdefault(scope, ModelRun()).outputs = [previous]
        return [(last, previous)]

    def model(self, cls: str, config: dict[str, Any], scope: str, bound: list[str] | None, where: str) -> Walk:
        if cls == "Sequential":
            return (yield from self.sequential(config, scope, bound, where))
        return (yield from self.functional(config, scope, bound, where))

    def run(self, top: TopConfig) -> list[tuple[str, str]]:
        """Walk the top model and every nested one, with a stack of generators instead of recursion."""
        stack = [self.model(top.class_name, top.config, "", None, "config")]
        received: list[tuple[str, str]] | None = None
        while True:
            try:
                entry, scope, tensors, where = stack[-1].send(received)  # type: ignore[arg-type]
            except StopIteration as done:
                stack.pop()
                if not stack:
                    return done.value  # type: ignore[no-any-return]
                received = done.value
                continue
            if len(stack) > MAX_NESTED:
                raise layer_problem(scope.rstrip("/"), entry.class_name, f"a model nested {len(stack)} deep in "
                                    f"others; specgen flattens {MAX_NESTED} levels (spec layer names have at most "
                                    f"{MAX_NESTED + 1} parts)")
            stack.append(self.model(entry.class_name, entry.config, scope, tensors, where))
            received = None

    # --- resolution ----------------------------------------------------------------------

    def producer(self, key: str) -> str:
        target = key
        for _ in range(MAX_HOPS):
            target = self.alias.get(target) or self._later_output(target)
            if target.startswith("="):
                return target[1:]
            if not target:
                break
        raise ImportProblem(f"the model config refers to tensor {quoted(key)}, which no layer in it produces")

    def _later_output(self, key: str) -> str:
        """Output k > 0 of a layer call (an LSTM's states: `lstm:0:1`) as `=<layer>#<k>`; the converter maps
        it to the spec layer's extra output (convert.py) or refuses it there, naming the layer."""
        call, _, index = key.rpartition(":")
        first = self.alias.get(call + ":0", "")
        return f"{first}#{index}" if first.startswith("=") and index.isdigit() and index != "0" else ""


def _top_level_calls(config: dict[str, Any]) -> int:
    """The calls of the top model's own layers (nested models left out): fewer than or as many as the layers
    flattening makes, counted before any check, so that a model over the limit is refused at once."""
    inner = config.get("config")
    entries = inner.get("layers") if isinstance(inner, dict) else None
    entries = [e for e in entries if isinstance(e, dict) and e.get("class_name") not in (*MODELS, INPUT)] \
        if isinstance(entries, list) else []
    if config.get("class_name") == "Sequential":
        return len(entries)
    return sum(len(e["inbound_nodes"]) for e in entries if isinstance(e.get("inbound_nodes"), list))


def flatten(config: dict[str, Any]) -> KGraph:
    """The DAG of a model config: {"class_name": "Functional" | "Sequential" | ..., "config": {...}}."""
    if _top_level_calls(config) > MAX_LAYERS:
        raise ImportProblem(TOO_MANY)
    check_depth(config, "the model config")
    top = checked(TopConfig, config, "")
    if (why := custom_class(top.module, top.registered_name, top.class_name)) is not None:
        name = top.config.get("name")
        raise ImportProblem(f"Keras model {quoted(name if isinstance(name, str) else 'model')} ({top.class_name}): "
                            f"{why}: specgen never imports a model's own code; save the model as a Keras Functional "
                            "or Sequential model")
    if top.class_name not in MODELS:
        raise ImportProblem(f"expected a Keras model config (Functional or Sequential); received class "
                            f"{quoted(top.class_name)} (subclassed models have no graph to read)")
    flat = _Flattener()
    outputs = flat.run(top)
    for layer in flat.layers:
        named = [layer.kwargs.get(k) for k in CALL_KWARGS.get(layer.cls, ())]
        tensors = [*layer.args, *(t for arg in named for t in (arg if isinstance(arg, list) else [arg]))]
        layer.inputs = [flat.producer(a.key) for a in tensors if isinstance(a, Ref)]
        if layer.masks is not None:
            layer.masks = {k: sorted({flat.producer(key) for key in keys}) for k, keys in layer.masks.items()}
    name = top.config.get("name")
    return KGraph(name if isinstance(name, str) and name else "model", flat.inputs, flat.layers,
                  [(name, flat.producer(key)) for name, key in outputs], run_order(flat.runs))
