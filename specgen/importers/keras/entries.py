"""The parts of a Keras model config that graph.py and calls.py read, checked before they are used.

A config is untrusted JSON: any value may have any type, any key may be missing. graph.py reads
it only through these pydantic models, one model or layer entry at a time as its walk reaches
them, so the first wrong value is refused in one line saying where it is, what was received and
what was expected. Integers are strict (`true`, `3.5` and `"3"` are no layer index or size);
keys the importer does not read are left alone here (args.py refuses any layer argument that no
converter read). `check_depth` first bounds the nesting of the whole JSON value, without
recursion, so that nothing after it (pydantic, repr, comparisons) can recurse deeply.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, TypeAdapter, ValidationError

from specgen.diagnostics import safe_repr
from specgen.fields.base import MAX_INT
from specgen.importers.keras.errors import ImportProblem

# JSON levels of a whole config: a model nested 7 deep in others (the most graph.py flattens) needs
# about 35 (each adds an entry, its config and its layer list); json.loads itself recurses ~1,000 deep.
MAX_DEPTH = 100

Name = Annotated[str, Field(strict=True, min_length=1)]
Size = Annotated[int, Field(strict=True, gt=0, le=MAX_INT)]
Shape = list[Size | None]  # with the batch dimension first
TensorRef = tuple[StrictStr, StrictInt, StrictInt]  # [layer, node index, tensor index]


class _Checked(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class TopConfig(_Checked):
    class_name: StrictStr
    config: dict[StrictStr, Any]
    module: Any = None  # read by errors.custom_class, any type
    registered_name: Any = None


class FunctionalConfig(_Checked):
    name: Name = "model"
    layers: list[dict[StrictStr, Any]]
    input_layers: Any = []  # read by `refs`
    output_layers: Any


class SequentialConfig(_Checked):
    name: Name = "sequential"
    layers: Annotated[list[dict[StrictStr, Any]], Field(min_length=1)]
    build_input_shape: Shape | None = None


class LayerEntry(_Checked):
    class_name: StrictStr
    name: Name | None = None  # Keras 3 functional models; else config.name
    module: StrictStr | None = None
    registered_name: Any = None  # errors.custom_class: anything but None or class_name names a custom object
    config: dict[StrictStr, Any] = {}
    inbound_nodes: list[Any] = []


class InputConfig(_Checked):
    name: Name | None = None
    batch_shape: Shape | None = None  # Keras 3
    batch_input_shape: Shape | None = None  # Keras 2
    dtype: StrictStr | None = "float32"


class Keras3Node(_Checked):
    args: list[Any] = []
    kwargs: dict[StrictStr, Any] = {}


class Keras3Tensor(_Checked):
    class TensorConfig(_Checked):
        keras_history: TensorRef

    config: TensorConfig


# A Keras 2 node: [[layer, node, tensor], ...] or [[layer, node, tensor, {call kwargs}], ...]
Keras2Node = list[tuple[StrictStr, StrictInt, StrictInt] | tuple[StrictStr, StrictInt, StrictInt, dict[StrictStr, Any]]]
T = TypeVar("T")
_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


@overload
def checked(kind: type[T], value: Any, where: str) -> T: ...
@overload
def checked(kind: Any, value: Any, where: str) -> Any: ...  # a union or an Annotated type: a form, not a class
def checked(kind: Any, value: Any, where: str) -> Any:
    """`value` as `kind`, or ImportProblem naming `where` and the first wrong value in it."""
    adapter = _ADAPTERS.get(kind) or _ADAPTERS.setdefault(kind, TypeAdapter(kind))
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"] if not _union_tag(p))
        loc = (where + loc).removeprefix(".") or "the model config"
        expected = error["msg"].replace("Input should be ", "expected ").replace("Value error, ", "")
        if error["type"] == "missing":
            raise ImportProblem(f"{loc}: missing") from None
        raise ImportProblem(f"{loc}: received {safe_repr(error['input'])}, {expected}") from None


def _union_tag(part: Any) -> bool:
    """pydantic names the member of a union it tried (`tuple[str, int, int]`) among the location's keys."""
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "none"))


def refs(value: Any, where: str) -> list[tuple[str | None, tuple[str, int, int]]]:
    """`input_layers` / `output_layers`: one ref, a list of refs, or {name: ref} (Keras 3), as (name, ref) pairs."""
    if isinstance(value, dict):
        return [(checked(StrictStr, k, where), checked(TensorRef, v, f"{where}.{k}")) for k, v in value.items()]
    if isinstance(value, list) and value and isinstance(value[0], str):
        return [(None, checked(TensorRef, value, where))]
    if not isinstance(value, list):
        raise ImportProblem(f"{where}: received {safe_repr(value)}, expected a tensor reference [layer, node, "
                            "tensor], a list of them or a mapping of names to them")
    return [(None, checked(TensorRef, ref, f"{where}[{i}]")) for i, ref in enumerate(value)]


def check_depth(value: Any, where: str) -> None:
    """Refuse a JSON value nested over MAX_DEPTH levels, walking it with a stack (no recursion)."""
    level, depth = [value], 1
    while level:  # one list per level: no tuple per value (20,000 layers are about 500,000 values)
        if depth > MAX_DEPTH:
            raise ImportProblem(f"{where} nests over {MAX_DEPTH} levels of JSON arrays and objects; a Keras model "
                                "config needs about 35 for models nested 7 deep")
        below: list[Any] = []
        for node in level:
            below += [item for item in (node.values() if isinstance(node, dict) else node)
                      if isinstance(item, dict | list)]
        level, depth = below, depth + 1
