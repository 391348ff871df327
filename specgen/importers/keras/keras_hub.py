"""KerasHub backbones (`BertBackbone`, `GPT2Backbone`, `RobertaBackbone`) as flat spec layers.

A backbone saved with `model.save()` keeps its constructor arguments in config.json, not a layer graph:
KerasHub rebuilds the graph in Python. specgen never runs that code on a user's file, so this module
writes the graph KerasHub's constructors build (keras-hub 0.32), from the checked arguments alone:
ReversibleEmbedding (tied, one table) -> `embedding`, PositionEmbedding -> `positional_embedding` +
`add`, TokenAndPositionEmbedding -> the two, BERT's segment `embedding`, the embeddings layer norm,
TransformerEncoder (post-norm, BERT and RoBERTa) / TransformerDecoder (pre-norm, causal, GPT-2)
spelled as `multi_head_attention`, `dropout`, `add`, `layer_norm` and `dense` layers. Layer names are
KerasHub's weight paths (`transformer_layer_0/self_attention_layer` holds `query/kernel`, ...), so
every spec variable path equals the Keras weight's `path`. keras-hub itself is not imported.

KerasHub's `padding_mask` input [batch, seq] (1 = a real token) is a spec input of that name: one
`padding_attention_mask` layer (`attention_mask`) expands it to [batch, seq, seq] and every attention layer
reads it, as KerasHub's merge_padding_and_attention_mask does (and-ed with the causal mask for GPT-2).
BERT's `pooled_output` is `take` (index 0, KerasHub's cls_token_index) then `pooled_dense` (tanh).
Flat layers, not the shipped transformer_encoder/decoder blocks: those take no attention mask, so an
instance would drop padding_mask again (docs/import.md says so).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from specgen.diagnostics import one_line, quoted
from specgen.fields.base import MAX_INT, is_identifier
from specgen.importers.keras.args import FLOAT_POLICIES, short
from specgen.importers.keras.convert import Imported
from specgen.importers.keras.errors import ImportProblem, listed
from specgen.importers.keras.names import Namer
from specgen.importers.keras.objects import finite, is_integer
from specgen.kinds.ops import Layer, OpError, infer
from specgen.spec.expand import MAX_LAYERS

_LAYER: TypeAdapter[Any] = TypeAdapter(Layer)
SEQ = "seq"  # the named dynamic dimension of every sequence input
MASK = "attention_mask"  # the layer that turns padding_mask into every attention layer's [batch, seq, seq] mask
CLS_TOKEN_INDEX = 0  # BertBackbone's pooler reads x[:, 0, :] (keras-hub 0.32, a constant there)


@dataclass(frozen=True)
class Args:
    vocabulary_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    intermediate_dim: int
    dropout: float
    max_sequence_length: int
    num_segments: int = 0


def is_backbone(config: dict[str, Any]) -> bool:
    """Whether a config.json describes a KerasHub model (its module or registered name says so)."""
    return str(config.get("module", "")).startswith("keras_hub.") or \
        str(config.get("registered_name", "")).startswith("keras_hub>")


# --- the constructor arguments, checked before anything is built ---------------------------------------------

REQUIRED: Any = object()  # no default: config.json must hold the argument
Kind = Literal["size", "rate", "flag", "name", "dtype"]
EXPECTED: dict[Kind, str] = {
    "size": f"an integer from 1 to {MAX_INT}",
    "rate": "a number from 0 to below 1",
    "flag": "true or false",
    "name": "a string",
    "dtype": f"{' or '.join(FLOAT_POLICIES)}, as a string or Keras' DTypePolicy (specgen runs float32)",
}


@dataclass(frozen=True)
class Arg:
    """One constructor argument: how its value is checked, and the default KerasHub's constructor gives it."""

    kind: Kind
    default: Any = REQUIRED


def _policy(value: Any) -> Any:
    """A dtype as Keras serializes it, a string or {module: keras, class_name: DTypePolicy, config: {name}},
    as its policy name; anything else as itself (then refused)."""
    if isinstance(value, dict) and value.get("class_name") == "DTypePolicy" and \
            set(value) <= {"module", "class_name", "config", "registered_name"} and isinstance(value.get("config"), dict) \
            and set(value["config"]) == {"name"}:
        return value["config"]["name"]
    return value


CHECKS: dict[Kind, Callable[[Any], bool]] = {
    "size": lambda v: is_integer(v, 1),
    "rate": lambda v: finite(v) is not None and 0 <= v < 1,
    "flag": lambda v: isinstance(v, bool),
    "name": lambda v: isinstance(v, str),
    "dtype": lambda v: v is None or _policy(v) in FLOAT_POLICIES,
}
COMMON = {"name": Arg("name", None), "trainable": Arg("flag", True), "dtype": Arg("dtype", None)}
SIZES = {key: Arg("size") for key in ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim")}


def _arguments(max_sequence_length: int, **extra: Arg) -> dict[str, Arg]:
    """A backbone's accepted arguments (keras-hub 0.32's constructor and get_config), with its defaults."""
    return {**COMMON, **SIZES, "dropout": Arg("rate", 0.1), "max_sequence_length": Arg("size", max_sequence_length),
            **extra}


def _received(config: dict[str, Any], key: str) -> str:
    return f"received {short(config[key])}" if key in config else "missing"


def _checked(cls: str, config: dict[str, Any], accepted: dict[str, Arg]) -> dict[str, Any]:
    """Every argument of `config` against the table: unknown keys, missing required ones, types and ranges
    (booleans are not integers), one line naming the first wrong key."""
    unknown = sorted(set(config) - set(accepted))
    if unknown:
        raise ImportProblem(f"KerasHub {cls}: config.json has arguments that specgen does not know: "
                            f"{listed(unknown)}; expected only {', '.join(accepted)}")
    values = {}
    for key, arg in accepted.items():
        value = config.get(key, arg.default)
        if value is REQUIRED or not (CHECKS[arg.kind](value) or (value is None and arg.default is None)):
            raise ImportProblem(f"KerasHub {cls}: argument {key}: {_received(config, key)} in config.json, "
                                f"expected {EXPECTED[arg.kind]}")
        values[key] = value
    return values


def _args(cls: str, config: dict[str, Any]) -> tuple[Args, dict[str, Any]]:
    """The checked arguments: the sizes as Args, and the rest (name, trainable) by key."""
    backbone = BACKBONES[cls]
    values = _checked(cls, config, backbone.arguments)
    if values["hidden_dim"] % values["num_heads"]:
        raise ImportProblem(f"KerasHub {cls}: hidden_dim {values['hidden_dim']} is not a multiple of num_heads "
                            f"{values['num_heads']} (each head's key_dim is hidden_dim / num_heads)")
    most = backbone.max_layers()
    if values["num_layers"] > most:
        raise ImportProblem(f"KerasHub {cls}: argument num_layers: received {values['num_layers']} in config.json, "
                            f"expected an integer from 1 to {most} (each makes {backbone.per_layer()} spec layers, "
                            f"and a spec holds at most {MAX_LAYERS})")
    sizes = {f.name: values[f.name] for f in fields(Args) if f.name in values}
    return Args(**sizes | {"dropout": float(values["dropout"])}), values


def _init(kind: str) -> dict[str, Any]:
    return {"kind": kind, "stddev": 0.02}  # KerasHub's kernel initializers for these backbones


class _Layers:
    """The spec layers of one backbone, appended in order; `x` is the latest tensor."""

    def __init__(self, args: Args, init: dict[str, Any]):
        self.args, self.init, self.x = args, init, ""
        self.layers: list[dict[str, Any]] = []

    def add(self, name: str, op: str, source: str | None = None, **keys: Any) -> str:
        wiring = {"inputs": keys.pop("inputs")} if "inputs" in keys else {"input": source or self.x}
        self.layers.append({"name": name, "op": op, **wiring, **keys})
        self.x = name
        return name

    def embeddings(self, token: str, position: str, ids: str) -> str:
        a = self.args
        self.add(MASK, "padding_attention_mask", "padding_mask")
        tokens = self.add(token, "embedding", ids, vocab_size=a.vocabulary_size, dim=a.hidden_dim,
                          embeddings_init=self.init)
        self.add(position, "positional_embedding", tokens, max_length=a.max_sequence_length,
                 embeddings_init=self.init)
        return tokens

    def block(self, i: int, epsilon: float, activation: str, decoder: bool) -> None:
        """KerasHub's TransformerEncoder (post-norm) or TransformerDecoder without cross-attention (pre-norm,
        causal), as GPT-2 builds it (normalize_first=True)."""
        a, p, residual = self.args, f"transformer_layer_{i}/", self.x
        attention = p + ("self_attention" if decoder else "self_attention_layer")
        causal: dict[str, Any] = {"causal": True} if decoder else {}
        if decoder:
            self.add(p + "self_attention_layer_norm", "layer_norm", epsilon=epsilon)
        self.add(attention, "multi_head_attention", num_heads=a.num_heads, key_dim=a.hidden_dim // a.num_heads,
                 attention_mask=MASK, dropout=a.dropout, **causal, kernel_init=self.init)
        self.add(p + "self_attention_dropout", "dropout", rate=a.dropout)
        residual = self.add(p + "self_attention_residual", "add", inputs=[self.x, residual])
        if not decoder:
            residual = self.add(p + "self_attention_layer_norm", "layer_norm", epsilon=epsilon)
        else:
            self.add(p + "feedforward_layer_norm", "layer_norm", epsilon=epsilon)
        self.add(p + "feedforward_intermediate_dense", "dense", units=a.intermediate_dim, activation=activation,
                 kernel_init=self.init)
        self.add(p + "feedforward_output_dense", "dense", units=a.hidden_dim, kernel_init=self.init)
        self.add(p + "feedforward_dropout", "dropout", rate=a.dropout)
        self.add(p + "feedforward_residual", "add", inputs=[self.x, residual])
        if not decoder:
            self.add(p + "feedforward_layer_norm", "layer_norm", epsilon=epsilon)


def _bert(a: Args) -> Built:
    b = _Layers(a, _init("truncated_normal"))
    tokens = b.embeddings("token_embedding", "position_embedding", "token_ids")
    b.add("segment_embedding", "embedding", "segment_ids", vocab_size=a.num_segments, dim=a.hidden_dim,
          embeddings_init=b.init)
    b.add("embeddings_add", "add", inputs=[tokens, "position_embedding", "segment_embedding"])
    b.add("embeddings_layer_norm", "layer_norm", epsilon=1e-12)
    b.add("embeddings_dropout", "dropout", rate=a.dropout)
    for i in range(a.num_layers):
        b.block(i, 1e-12, "gelu_approximate", decoder=False)
    sequence = b.x
    b.add("pooled_token", "take", axis=1, index=CLS_TOKEN_INDEX)
    b.add("pooled_dense", "dense", units=a.hidden_dim, activation="tanh", kernel_init=b.init)
    return _inputs("token_ids", "segment_ids"), b.layers, {"sequence_output": sequence, "pooled_output": b.x}


def _gpt2(a: Args) -> Built:
    b = _Layers(a, _init("random_normal"))
    tokens = b.embeddings("token_embedding", "position_embedding", "token_ids")
    b.add("embeddings_add", "add", inputs=[tokens, "position_embedding"])
    b.add("embeddings_dropout", "dropout", rate=a.dropout)
    for i in range(a.num_layers):
        b.block(i, 1e-5, "gelu_approximate", decoder=True)
    b.add("layer_norm", "layer_norm", epsilon=1e-5)
    return _inputs("token_ids"), b.layers, {"sequence_output": b.x}


def _roberta(a: Args) -> Built:
    b = _Layers(a, _init("truncated_normal"))
    # TokenAndPositionEmbedding 'embeddings': its two sublayers, summed as it does.
    tokens = b.embeddings("embeddings/token_embedding", "embeddings/position_embedding", "token_ids")
    b.add("embeddings/add", "add", inputs=[tokens, "embeddings/position_embedding"])
    b.add("embeddings_layer_norm", "layer_norm", epsilon=1e-5)
    b.add("embeddings_dropout", "dropout", rate=a.dropout)
    for i in range(a.num_layers):
        b.block(i, 1e-5, "gelu", decoder=False)
    return _inputs("token_ids"), b.layers, {"sequence_output": b.x}


def _inputs(*ids: str) -> dict[str, Any]:
    """The id inputs and KerasHub's padding_mask, all [batch, seq] int32 (KerasHub's dtypes)."""
    return {name: {"shape": [SEQ], "dtype": "int32"} for name in (*ids, "padding_mask")}


Built = tuple[dict[str, Any], list[dict[str, Any]], dict[str, str]]  # inputs, layers, outputs
Builder = Callable[[Args], Built]


@dataclass(frozen=True)
class Backbone:
    build: Builder
    arguments: dict[str, Arg]

    def layers(self, num_layers: int) -> int:
        """The spec layers of this backbone with `num_layers` blocks (built with tiny sizes: counting is cheap)."""
        return len(self.build(Args(1, num_layers, 1, 1, 1, 0.0, 1, 1))[1])

    def per_layer(self) -> int:
        return self.layers(1) - self.layers(0)

    def max_layers(self) -> int:
        """The most blocks whose spec stays within MAX_LAYERS, the bound every import and spec has."""
        return (MAX_LAYERS - self.layers(0)) // self.per_layer()


BACKBONES: dict[str, Backbone] = {  # keras-hub 0.32's constructors: the defaults are theirs
    "BertBackbone": Backbone(_bert, _arguments(512, num_segments=Arg("size", 2))),
    "GPT2Backbone": Backbone(_gpt2, _arguments(1024)),
    "RobertaBackbone": Backbone(_roberta, _arguments(512)),
}


def _model_name(cls: str, value: str | None, imp: Imported) -> str:
    """The spec's name: the backbone's when the spec's own name pattern takes it, else renamed as the importer
    renames every Keras name (names.py: deterministic, and listed in the spec's header)."""
    if value is None:  # Keras' automatic name: the class in snake case
        return re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", cls).lower()
    if is_identifier(value):
        return value
    name = Namer().identifier(value)
    imp.renamed.append(("model", value, name))
    return name


def convert_backbone(config: dict[str, Any]) -> Imported:
    """The spec layers of a KerasHub backbone's config.json; `keys` maps each variable to its Keras path."""
    cls = config.get("class_name")
    if cls not in BACKBONES:
        raise ImportProblem(f"KerasHub class {quoted(cls)}: specgen imports {', '.join(BACKBONES)} (their configs, "
                            "never their code)")
    inner = config.get("config")
    if not isinstance(inner, dict):
        raise ImportProblem(f"KerasHub {cls}: config.json holds no constructor arguments (expected an object under "
                            f"'config', received {short(inner)})")
    args, values = _args(cls, inner)
    inputs, layers, outputs = BACKBONES[cls].build(args)
    imp = Imported("", inputs, outputs, layers)
    imp.name = _model_name(cls, values["name"], imp)
    imp.layer_names = {entry["name"]: entry["name"] for entry in layers}
    if values["trainable"] is False:  # Keras' trainable=False freezes every weight of the backbone
        imp.frozen = ["backbone"]
    return imp


def variables(imp: Imported) -> dict[str, tuple[int, ...]]:
    """Every variable's path and shape, by specgen's own shape rules (as convert.py checks each layer)."""
    shapes: dict[str, Any] = {n: (None, *spec["shape"]) for n, spec in imp.inputs.items()}
    dtypes: dict[str, str] = {n: spec["dtype"] for n, spec in imp.inputs.items()}
    found: dict[str, tuple[int, ...]] = {}
    for entry in imp.layers:
        ins = [*(entry.get("inputs") or [entry["input"]]), *([entry[MASK]] if MASK in entry else [])]
        try:
            result = infer(_LAYER.validate_python(entry), [shapes[i] for i in ins], [dtypes[i] for i in ins])
        except (ValidationError, OpError) as exc:  # the arguments are checked: a sum of them the rules refuse
            first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise ImportProblem(f"KerasHub backbone: layer {quoted(entry['name'])} ({entry['op']}) that its "
                                f"arguments give cannot be built: {one_line(first)}") from None
        shapes[entry["name"]], dtypes[entry["name"]] = result.shape, result.dtype
        found.update({f"{entry['name']}/{v.role}": v.shape for v in result.variables})
    return found


def collections(imp: Imported) -> dict[str, list[str]]:
    """`backbone`: every imported variable, by its top-level layer (what docs/finetune.md freezes)."""
    tops = dict.fromkeys("transformer_layer_*" if path.startswith("transformer_layer_") else path.split("/", 1)[0] + "/*"
                         for path in imp.keys)
    return {"backbone": list(tops)}


def key_candidates(path: str) -> tuple[str, str]:
    """The two keys specgen's Keras reader may give a weight: by name (`.../query/kernel`) where the class
    is known from its group, by index (`.../query/vars/0`) otherwise (runtime/keras_weights.py)."""
    owner, role = path.rsplit("/", 1)
    return path, f"{owner}/vars/{ROLE_INDEX[role]}"


ROLE_INDEX = {"kernel": 0, "bias": 1, "gamma": 0, "beta": 1, "embeddings": 0}  # Keras' variable order


def weight_keys(imp: Imported, variables: dict[str, tuple[int, ...]], stored: dict[str, tuple[int, ...]]) -> None:
    """Fill `imp.keys` (spec path -> stored key) from the weights file's keys; every variable must be there
    with its shape (a config and weights that disagree are refused, never half restored)."""
    missing = []
    for path, shape in variables.items():
        found = [k for k in key_candidates(path) if k in stored]
        if not found:
            missing.append(path)
            continue
        if tuple(stored[found[0]]) != tuple(shape):
            raise ImportProblem(f"weight {found[0]!r} has shape {list(stored[found[0]])}, the config gives "
                                f"{list(shape)}")
        imp.keys[path] = found[0]
    if missing:
        raise ImportProblem(f"the weights hold no value for {listed(missing)} of the {len(variables)} variables "
                            "config.json gives (each looked for by its path and as <layer>/vars/<i>): config.json "
                            "and the weights disagree")
    # The other way round: a weight no spec variable reads (a deeper backbone's layers) was written by another
    # model; Keras' load_weights would skip it, and the export would only count it as unused.
    used = set(imp.keys.values())
    if unused := [key for key in stored if key not in used]:
        raise ImportProblem(f"the weights hold {listed(unused)} that none of the {len(variables)} variables "
                            "config.json gives reads (a backbone with more layers or other sizes wrote them): "
                            "config.json and the weights disagree")
