"""The protocol's known parameters, in one table that both decoders check: HTTP's JSON `parameters` objects
(protocol.py) and gRPC's `map<string, InferParameter>` (grpc_protocol.py, through `from_grpc`).

Why one table: a parameter that changes what a request means (where its outputs go, how long it may wait) and is
silently ignored gives a client wrong results with a 200. So every parameter the Open Inference Protocol or Triton
defines is checked by name and type, the same way whichever protocol carries it, and a parameter this server does
not implement is refused with one line rather than ignored. Keys the table does not know are custom parameters
(Triton passes them to the backend) and pass untouched.

The decisions, per key:

- `binary_data_output` (request), `binary_data` (output): booleans. HTTP honours them; gRPC outputs are always raw.
- `binary_data_size` (input): an unsigned integer (protocol.py then checks it against the shape).
- `timeout` (request): an unsigned integer, microseconds, as Triton's. Honoured as a queue deadline: a request still
  waiting in its model's queue when it passes is dropped unrun and answered UNAVAILABLE / 503, as Triton's dynamic
  batcher answers it (batcher.py); 0 means no timeout. A request whose batch has started runs to its end.
- `priority` (request): an unsigned integer, accepted and ignored: this server has one priority level (Triton's
  default, `priority_levels` unset).
- `sequence_id` (an unsigned integer or a string), `sequence_start`, `sequence_end` (booleans): Triton's types,
  accepted and ignored, as Triton ignores them on a model without a sequence batcher (every model here).
- `shared_memory_region`, `shared_memory_byte_size`, `shared_memory_offset` (inputs and outputs): refused. This
  server has no shared-memory extension; answering 200 would leave a client reading a region nothing wrote.
- `classification` (outputs): refused, as before: the classification extension is not implemented.
- request keys starting with `triton_`: refused as reserved, as Triton's HTTP endpoint refuses them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from specgen.serve.errors import ProtocolError
from specgen.serve.values import cut, kind, show

UINT64_LIMIT = 2**64


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_uint(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < UINT64_LIMIT


def _is_uint_or_string(value: Any) -> bool:
    return _is_uint(value) or isinstance(value, str)


@dataclass(frozen=True)
class Rule:
    """What a known parameter's value must be, and the words saying so in a refusal."""

    valid: Callable[[Any], bool]
    expected: str


BOOL = Rule(_is_bool, "a boolean (true or false)")
UINT = Rule(_is_uint, "an unsigned integer")
REQUEST = {
    "binary_data_output": BOOL,
    "timeout": Rule(_is_uint, "an unsigned integer: the microseconds the request may wait in the queue (0: no limit)"),
    "priority": UINT,
    "sequence_id": Rule(_is_uint_or_string, "an unsigned integer or a string"),
    "sequence_start": BOOL,
    "sequence_end": BOOL,
}
INPUT = {"binary_data_size": UINT}
UNLOAD = {"unload_dependents": BOOL}  # Triton's repository unload parameter
OUTPUT = {"binary_data": BOOL}
SHARED_MEMORY = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")
RESERVED_PREFIX = "triton_"


def from_grpc(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A gRPC parameter map as plain values (the set member of each InferParameter's oneof; None when none is set),
    so the table checks them as it checks JSON: int64_param and uint64_param are integers, bool_param a boolean."""
    values: dict[str, Any] = {}
    for key, parameter in parameters.items():
        field = parameter.WhichOneof("parameter_choice")
        values[key] = getattr(parameter, field) if field is not None else None
    return values


def named(kind: str, name: Any) -> str:
    """`input 'image'` for a message; a name that is not a string (HTTP's JSON may hold anything) shown as JSON."""
    return f"{kind} '{cut(name)}'" if isinstance(name, str) else f"{kind} {show(name)}"


def _refuse_unsupported(key: str, where: str, scope: str) -> None:
    """Keys this server refuses whatever their value: shared memory, classification, Triton's reserved prefix."""
    if key in SHARED_MEMORY and scope != "request":
        remedy = "send the data in the request" if scope == "input" else "leave it out: outputs come back in the response"
        raise ProtocolError(f"parameter '{key}' of {where}: shared memory is not supported by this server; {remedy}")
    if key == "classification" and scope == "output":
        raise ProtocolError(f"{where}: the classification extension is not supported; request the raw output instead")
    if scope == "request" and key.startswith(RESERVED_PREFIX):
        raise ProtocolError(f"parameter '{cut(key)}' of {where}: parameter keys starting with 'triton_' are reserved "
                            "for Triton's own use")


def check_parameters(parameters: Mapping[str, Any], scope: str, where: str) -> Mapping[str, Any]:
    """`parameters` (of the request, an input or an output: `scope`), each known key checked; refused with a
    ProtocolError naming the key and `where` (`the request`, `input 'image'`). Returned unchanged."""
    rules = {"request": REQUEST, "input": INPUT, "output": OUTPUT}[scope]
    for key in sorted(parameters):  # sorted: a gRPC map has no order, and both protocols must name the same key
        _refuse_unsupported(key, where, scope)
        check_value(f"parameter '{key}' of {where}", parameters[key], rules.get(key))
    return parameters


def check_value(what: str, value: Any, rule: Rule | None) -> None:
    """A ProtocolError naming `what` unless `value` keeps `rule` (None: anything goes)."""
    if rule is not None and not rule.valid(value):
        shown = show(value) + (" (a string)" if isinstance(value, str) else "")  # "true" is no true
        raise ProtocolError(f"{what}: received {shown}, expected {rule.expected}")


def check_unload_parameters(parameters: Any) -> None:
    """A repository unload's parameters (HTTP's JSON object, gRPC's map as plain values): `unload_dependents` is
    Triton's one, a boolean (this server has no ensembles, so no model depends on another: accepted, and changes
    nothing); other keys pass, as custom parameters do."""
    if not isinstance(parameters, Mapping):
        raise ProtocolError(f"'parameters' of an unload request: received {kind(parameters)}, expected an object")
    for key in sorted(parameters):
        check_value(f"parameter '{cut(key)}' of the unload request", parameters[key], UNLOAD.get(key))
