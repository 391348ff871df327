"""The flat Keras DAG as spec layers: names, wiring, shapes (specgen's own rules) and variables.

Each converted layer is checked at once with specgen's spec model and shape rule, so a layer
specgen would refuse is reported as that Keras layer (name and class), not as a spec line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from specgen.diagnostics import quoted
from specgen.importers.keras.args import Args
from specgen.importers.keras.attention import READS, key_lengths, wiring
from specgen.importers.keras.base import Converter, Part
from specgen.importers.keras.dag import KGraph, KLayer
from specgen.importers.keras.errors import WHAT_TO_DO, ImportProblem, custom_problem, keras_hub_problem, layer_problem
from specgen.importers.keras.layers import APPLICATION_CLASSES, CONVERTERS, legacy_roles
from specgen.importers.keras.masks import Inferred, settle
from specgen.importers.keras.names import Namer
from specgen.importers.keras.operations import operation
from specgen.importers.keras.recurrent import INITIAL_STATES
from specgen.importers.keras.take import CLASSES as TAKE_CLASSES
from specgen.kinds.ops import REGISTRY, Layer, OpError, infer
from specgen.spec.expand import MAX_LAYERS

DTYPES = ("float32", "int32", "int64")
# A restore map's `from` is at most 256 characters (fields/base.py's Pattern): room for a layer's path and its
# longest weight name (`/depthwise_kernel`, `/vars/99` in a bare .weights.h5).
MAX_KEYED_NAME = 256 - len("/depthwise_kernel")
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
    other_keys: dict[str, str] = field(default_factory=dict)  # spec variable path -> its key in the other layout
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # spec variable path -> its shape
    layer_names: dict[str, str] = field(default_factory=dict)  # spec layer -> Keras layer path
    frozen: list[str] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (Keras layer, what was dropped)
    renamed: list[tuple[str, str, str]] = field(default_factory=list)  # (what, Keras name, spec name)
    not_imported: list[str] = field(default_factory=list)  # parts of the model the spec lacks (KerasHub backbones)


_LAYER: TypeAdapter[Any] = TypeAdapter(Layer)


def _converter(layer: KLayer) -> Converter | None:
    if layer.module.startswith("keras.src.ops") or (layer.cls in TAKE_CLASSES and layer.cls not in CONVERTERS):
        return None  # operations are handled by operations.py (Keras 3's legacy .h5 writes them with no module)
    known = APPLICATION_CLASSES.get((layer.module, layer.cls))
    if known is not None:
        return known
    if layer.module.startswith("keras_hub."):
        raise keras_hub_problem(layer.name, layer.cls, layer.module)
    if layer.module not in ("keras.layers", "keras", "") and not layer.module.startswith("keras.src.layers"):
        raise custom_problem(layer.name, layer.cls, f"a custom class from module {quoted(layer.module)}")
    if layer.cls in REFUSED:
        raise layer_problem(layer.name, layer.cls, f"refused: {REFUSED[layer.cls]}")
    if layer.cls not in CONVERTERS:
        raise layer_problem(layer.name, layer.cls, "no spec op for this Keras class (docs/import.md, What maps to "
                            f"what, lists those that import); {WHAT_TO_DO}")
    return CONVERTERS[layer.cls]


def _order(graph: KGraph) -> list[KLayer]:
    """The order the layers are converted in (not the order the spec lists them: `_keras_order`): topological,
    in rounds, each round taking every layer whose producers are done, in config order.

    Kahn's algorithm, one round at a time: each layer counts the producers it still waits for, and each
    finished layer counts down its readers, so the order costs O(layers + edges) (Keras writes configs
    in order already; rescanning every pending layer per round made 20,000 chained layers take minutes).
    """
    done = {i.name for i in graph.inputs}
    position = {layer.name: i for i, layer in enumerate(graph.layers)}
    waiting: dict[str, int] = {}
    readers: dict[str, list[KLayer]] = {}
    frontier = []
    for layer in graph.layers:
        # A later call of a shared layer also waits for the first, whose spec name its `share:` names.
        # Output k > 0 of a layer (`<layer>#<k>`, graph.py) waits for that layer.
        needs = {p if p in position or p in done else p.rpartition("#")[0]
                 for p in [*layer.inputs, *([layer.shares] if layer.shares else [])]} - done
        waiting[layer.name] = len(needs)
        for producer in needs:
            readers.setdefault(producer, []).append(layer)
        if not needs:
            frontier.append(layer)
    ordered: list[KLayer] = []
    while frontier:
        ordered += frontier
        following = []
        for layer in frontier:
            for reader in readers.get(layer.name, ()):
                waiting[reader.name] -= 1
                if waiting[reader.name] == 0:
                    following.append(reader)
        frontier = sorted(following, key=lambda layer: position[layer.name])
    if len(ordered) < len(graph.layers):
        stuck = next(layer for layer in graph.layers if waiting[layer.name] > 0)
        raise ImportProblem(f"the model config has a cycle or a missing tensor at {quoted(stuck.name)}")
    return ordered


def _check_keyed(layer: KLayer) -> None:
    """A layer with weights must have a name that a restore map can write (its weight keys start with it)."""
    if len(layer.name) > MAX_KEYED_NAME:
        raise layer_problem(layer.name, layer.cls, f"a name of {len(layer.name)} characters: a spec's restore map "
                            f"names this layer's weights in at most 256 (rename the layer in Keras)")
    if not layer.name.isprintable():
        raise layer_problem(layer.name, layer.cls, "its name holds a control character, which a spec's restore map "
                            "cannot write in the keys of this layer's weights (rename the layer in Keras)")


def _dims(shape: list[Any]) -> list[int | str]:
    """An input's sizes; a size Keras leaves open (None) becomes the named dynamic dimension dim<axis>
    (kinds/dims.py), shared by every input open on that axis, so that a residual add of two inputs
    with open time axes validates as Keras builds it."""
    return [f"dim{axis}" if d is None else int(d) for axis, d in enumerate(shape, start=1)]


class _Converter:
    def __init__(self, graph: KGraph, keras2: bool):
        self.graph, self.keras2, self.namer = graph, keras2, Namer()
        # The spec's name is no input or layer name: a namer of its own, so that an input or layer named as the
        # model keeps its name (the ONNX model's input names are the Keras model's)
        self.out = Imported(Namer().identifier(graph.name), {}, {}, [])
        self.spec_of: dict[str, str] = {}  # Keras producer -> spec name it reads as
        self.made: dict[tuple[str, str], str] = {}  # (Keras layer, part suffix) -> spec layer, for `share:`
        self.shapes: dict[str, tuple[Any, ...]] = {}
        self.dtypes: dict[str, str] = {}
        self.runs_at: list[int] = []  # per spec layer: the place of its Keras layer in Keras' order (graph.order)
        self.position = {name: i for i, name in enumerate(graph.order)}
        # Each layer as checked, for the masks (masks.py `settle`); kept here, not on Imported: an Inferred's index
        # points into the layers as converted, which `_keras_order` reorders once the masks are settled.
        self.inferred: list[Inferred] = []

    def inputs(self) -> None:
        own_steps = key_lengths(self.graph)  # an attention's key/value input: its time axis named apart
        for item in self.graph.inputs:
            if item.dtype not in DTYPES:
                raise ImportProblem(f"input '{item.name}' has dtype {item.dtype}; specgen inputs are "
                                    + ", ".join(DTYPES))
            name = self.namer.identifier(item.name)
            self._renamed("input", item.name, name)
            shape = [own_steps.get(item.name, d) if d == "dim1" else d for d in _dims(item.shape)]
            self.out.inputs[name] = {"shape": shape, "dtype": item.dtype}
            self.spec_of[item.name] = name
            self.shapes[name], self.dtypes[name] = (None, *shape), item.dtype

    def _float_ids(self, layer: KLayer, dtype: str) -> ImportProblem:
        """Keras' Embedding casts float ids to int32 itself, so `keras.Input((n,))` (float32) before it is a common
        model; specgen's embedding takes integer ids, and the fix is the input's dtype."""
        producer = layer.inputs[0]
        if any(item.name == producer for item in self.graph.inputs):
            return layer_problem(layer.name, layer.cls, f"reads input {quoted(producer)}, which is {dtype} in the "
                                 "Keras model (Keras casts the ids to int32 in this layer; specgen's embedding takes "
                                 f"integer ids): save the model with keras.Input(..., dtype=\"int32\") for "
                                 f"{quoted(producer)}")
        return layer_problem(layer.name, layer.cls, f"reads {dtype} ids from {quoted(producer)} (Keras casts them to "
                             "int32 in this layer; specgen's embedding takes integer ids): save the model with int32 "
                             "ids before the Embedding")

    def _renamed(self, what: str, keras: str, spec: str) -> None:
        if keras != spec:
            self.out.renamed.append((what, keras, spec))

    def layer(self, layer: KLayer) -> None:
        ins = [self.read(p, f"Keras layer {quoted(layer.name)} ({layer.cls}): reads") for p in layer.inputs]
        if not ins:
            raise layer_problem(layer.name, layer.cls, "called on no tensor (every spec layer reads one or more)")
        shapes = [self.shapes[i] for i in ins]
        convert = _converter(layer)
        if layer.cls == "Embedding" and self.dtypes[ins[0]] not in ("int32", "int64"):
            raise self._float_ids(layer, self.dtypes[ins[0]])
        if convert is None:
            keys: dict[str, Any] | list[Part] | None = operation(layer)
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
        if len(self.out.layers) >= MAX_LAYERS:
            raise ImportProblem(f"the model makes more than {MAX_LAYERS} spec layers; a spec holds at most {MAX_LAYERS}")
        self._renamed("layer", wanted, name)
        op = REGISTRY.get(keys["op"])
        multi = op is not None and "inputs" in op.spec.model_fields  # a merge: its `inputs:` list
        if READS in keys:  # the converter named each input's role (importers/keras/attention.py)
            wired, ins = wiring(keys, ins)
        elif INITIAL_STATES in keys and len(ins) == 1 + keys.pop(INITIAL_STATES):  # x, then initial_state's tensors
            wired = {"input": ins[0], "initial_state": ins[1:]}
        elif len(ins) < (2 if multi else 1) or (len(ins) > 1 and not multi):
            raise layer_problem(layer.name, layer.cls, f"called on {len(ins)} tensors, where spec op '{keys['op']}' "
                                f"reads {'two or more' if multi else 'one'}")
        else:
            wired = {"inputs": ins} if multi else {"input": ins[0]}
        # A later call of a shared Keras layer: the same keys, and the first call's variables.
        first = self.made.get((layer.shares, part)) if layer.shares else None
        if layer.shares and first is None:
            raise layer_problem(layer.name, layer.cls, f"it shares the weights of {quoted(layer.shares)}, which made "
                                "no spec layer")
        share = {"share": first} if first else {}
        entry = {"name": name, "op": keys.pop("op"), **wired, **share, **keys}
        self.made[(layer.name, part)] = name
        checked, result = self._check(layer, entry, [self.shapes[i] for i in ins], [self.dtypes[i] for i in ins])
        masks = None if layer.masks is None else {k: [self.spec_of.get(p, p) for p in ids]
                                                  for k, ids in layer.masks.items()}
        self.inferred.append(Inferred(checked, len(self.out.layers), ins, result, layer.name, layer.cls, masks))
        self.out.layers.append(entry)
        self.runs_at.append(self.position.get(layer.name, len(self.position)))
        self.out.layer_names[name] = layer.name
        self.spec_of[layer.name], self.shapes[name], self.dtypes[name] = name, result.shape, result.dtype
        self._extra_outputs(layer.name, entry, name, result)
        # LayerScale's unnamed variable ('variable' in Keras) is keyed `gamma` by the weight reader
        legacy = legacy_roles(layer.cls, layer.config)
        if share:
            return  # its variables are the first call's, mapped and frozen there
        if result.variables:
            _check_keyed(layer)
        for var in result.variables:
            path, names = f"{name}/{var.role}", [var.role, legacy.get(var.role, var.role)]
            first, other = reversed(names) if self.keras2 else names  # a Keras 2 file's names first
            self.out.keys[path] = f"{layer.name}/{first}"
            if other != first:  # the other layout's key: the file's own names choose (__init__.py, _fit_keys)
                self.out.other_keys[path] = f"{layer.name}/{other}"
            self.out.shapes[path] = tuple(var.shape)
        if result.variables and layer.config.get("trainable") is False:
            self.out.frozen.append(f"{name}/*")

    def _extra_outputs(self, keras: str, entry: dict[str, Any], name: str, result: Any) -> None:
        """Keras' output k > 0 of a layer (graph.py's `<layer>#<k>`) as the spec's `<name>/<output>`, in Keras'
        list order (kinds/ops/bidirectional.py). Under merge_mode none Keras' output 0 is the forward half,
        which `<name>` also is."""
        extra = list(result.extra_outputs.items())
        if entry.get("merge_mode") == "none":  # a Bidirectional's
            extra = extra[1:]  # `<name>/forward`: Keras' output 0, already `<name>`
        for k, (out, (shape, dtype)) in enumerate(extra, start=1):
            self.spec_of[f"{keras}#{k}"] = f"{name}/{out}"
            self.shapes[f"{name}/{out}"], self.dtypes[f"{name}/{out}"] = shape, dtype

    def read(self, producer: str, what: str) -> str:
        """The spec name of a Keras producer; an output k the spec layer lacks is refused by name."""
        if producer in self.spec_of:
            return self.spec_of[producer]
        owner, _, k = producer.rpartition("#")
        outputs = 1 + sum(1 for p in self.spec_of if p.startswith(owner + "#"))
        raise ImportProblem(f"{what} output {k} of Keras layer {quoted(owner)}, which has {outputs} output(s) as "
                            "specgen imports it")

    def _check(self, layer: KLayer, entry: dict[str, Any], shapes: list[Any], dtypes: list[str]) -> tuple[Any, Any]:
        """The spec layer as specgen reads it, and its shapes and variables."""
        try:
            checked = _LAYER.validate_python(entry)
            return checked, infer(checked, shapes, dtypes)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"][1:])
            raise layer_problem(layer.name, layer.cls, f"as spec op '{entry['op']}': {where}: {first['msg']}") from None
        except OpError as exc:
            raise layer_problem(layer.name, layer.cls, f"as spec op '{entry['op']}': {exc}") from None

    def outputs(self) -> None:
        taken = Namer()  # names an output must not take: inputs, layers it does not name, earlier outputs
        taken.taken |= set(self.out.inputs) | {entry["name"] for entry in self.out.layers}
        for keras_name, producer in self.graph.outputs:
            target = self.read(producer, f"output {quoted(keras_name)} is")
            if target in self.out.inputs:
                raise ImportProblem(f"output '{keras_name}' is a model input itself; specgen outputs read layers")
            name = Namer().identifier(keras_name)  # the Keras name where it is a valid spec name
            if name in self.out.outputs or (not taken.free(name) and name != target):
                name = taken.identifier(name + "_output")
            taken.claim(name)
            self._renamed("output", keras_name, name)
            self.out.outputs[name] = target


def convert(graph: KGraph, keras2: bool) -> Imported:
    """Spec inputs, layers and outputs of a flattened Keras graph; ImportProblem on the first refusal."""
    if not graph.inputs or not graph.outputs:
        raise ImportProblem(f"the model config names no {'inputs' if not graph.inputs else 'outputs'} (a spec needs "
                            "one or more of each)")
    state = _Converter(graph, keras2)
    state.inputs()
    for layer in _order(graph):
        state.layer(layer)
    state.outputs()
    settle(state.inferred, state.out.layers, state.out.notes)  # by index into the converted order: before it changes
    state.out.layers = _keras_order(state.out.layers, state.runs_at)
    return state.out


def _keras_order(layers: list[dict[str, Any]], runs_at: list[int]) -> list[dict[str, Any]]:
    """The spec layers in the order Keras runs their layers (run_order.py), the parts of one layer together.

    specgen runs a spec's layers in spec order, so this order makes a shared layer with state (a `batch_norm`'s
    moving statistics) update it in Keras' order, which is not the config's: when a shared layer reads two calls
    of a shared batch norm, Keras runs the second call first. It is a topological order (Keras' is), where a
    later call may come before the first call it shares (`share:` names a layer anywhere in the spec).
    Layers Keras does not run (none in a config Keras wrote) keep their converted order, after the others.
    """
    ranked = sorted(range(len(layers)), key=runs_at.__getitem__)  # stable: a layer's parts keep their order
    return [layers[i] for i in ranked]
