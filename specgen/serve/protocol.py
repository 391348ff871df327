"""The Open Inference Protocol (KServe v2) over HTTP: inference requests in, responses out.

Everything a request says is checked here, against the model's config, before the request
may join a batch: input names, datatypes, shapes (batch size included), the number of data
elements and their JSON types. A ProtocolError carries the HTTP status and a message naming
the input, what was received and what was expected.

Tensor data comes as JSON (`data`: flat row-major or nested lists) or, with Triton's binary
tensor data extension, as raw little-endian bytes after the JSON header (input parameter
`binary_data_size`, header `Inference-Header-Content-Length`). Outputs come back as JSON
`data`, or as bytes when an output asks for `binary_data` (or the request for
`binary_data_output`). JSON numbers that are NaN or infinite are read and written as the bare
tokens `NaN`, `Infinity`, `-Infinity`, as Triton does (rapidjson's NaN/Inf flags) and as
Python's json module reads and writes them.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from specgen.serve.errors import ProtocolError
from specgen.serve.model_config import DATATYPES, ModelConfig, TensorConfig
from specgen.serve.parameters import check_parameters, named
from specgen.serve.values import HugeInt, json_array, kind, show

Arrays = dict[str, np.ndarray]
HEADER_LENGTH = "inference-header-content-length"
JSON_TYPE = "application/json"
BINARY_TYPE = "application/octet-stream"
EXAMPLE = '{"inputs": [{"name": ..., "shape": [...], "datatype": ..., "data": [...]}]}'
JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)  # a string (skipped whole) or a bracket


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    binary: bool = False


@dataclass(frozen=True)
class InferRequest:
    """A checked request: model-shaped arrays (batch first when the model batches) and the outputs to return."""

    id: str | None
    inputs: Arrays
    rows: int
    outputs: tuple[RequestedOutput, ...]
    timeout_us: int = 0  # the request parameter `timeout`: how long it may wait in the queue (0: no limit)


def dumps(value: Any) -> bytes:
    """Compact JSON; NaN and infinities as the bare tokens NaN, Infinity, -Infinity."""
    return json.dumps(value, allow_nan=True, separators=(",", ":")).encode()


def error_body(message: str) -> bytes:
    return dumps({"error": message})


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object; received {kind(value)}")
    return value


def _present(item: Mapping[str, Any], key: str, where: str, expected: str) -> None:
    """A ProtocolError naming the missing `key` of `item` (a misspelt key, `nam`, would otherwise read as null)."""
    if key not in item:
        raise ProtocolError(f"{where} has no '{key}' field (its fields: {show(sorted(item))}); {expected}")


def json_only(header_length: str | None) -> str | None:
    """The Inference-Header-Content-Length header as the body's reading takes it: None where it says 0, which Triton
    reads as "the whole body is the JSON header" (its `header_length != 0` test), so 0 means what no header means."""
    if header_length is not None and header_length.strip().isdigit() and int(header_length) == 0:
        return None
    return header_length


def _split_body(body: bytes | bytearray, header_length: str | None) -> tuple[bytes | bytearray, memoryview]:
    """The JSON header and the binary tensor data that follows it (empty without the extension), not copied."""
    header_length = json_only(header_length)
    if header_length is None:
        return body, memoryview(b"")
    try:
        length = int(header_length)
    except ValueError:
        length = -1
    if not 0 < length <= len(body):
        raise ProtocolError(f"header Inference-Header-Content-Length: received '{header_length[:40]}', expected the "
                            f"byte length of the JSON part of the body (0..{len(body)}; 0: all of it)")
    view = memoryview(body)
    return view[:length].tobytes(), view[length:]


def _integer(text: str) -> int | HugeInt:
    """An integer literal, or a HugeInt where Python refuses to read one that long (the error path only)."""
    limit = sys.get_int_max_str_digits()
    return HugeInt(text) if limit and len(text.lstrip("-")) > limit else int(text)


def _binary_without_header(text: bytes | bytearray) -> ProtocolError | None:
    """The error for binary tensor data sent without its header, or None: the body starts with a whole JSON object
    one of whose inputs declares binary_data_size, and bytes follow it (the error path only)."""
    decoded = bytes(text).decode("utf-8", errors="surrogateescape")
    start = len(decoded) - len(decoded.lstrip())
    try:
        value, end = json.JSONDecoder().raw_decode(decoded, start)
    except (json.JSONDecodeError, RecursionError, ValueError):
        return None
    inputs = value.get("inputs") if isinstance(value, dict) else None
    declaring = [item.get("name") for item in inputs if isinstance(item, dict) and isinstance(item.get("parameters"), dict)
                 and "binary_data_size" in item["parameters"]] if isinstance(inputs, list) else []
    if not declaring:
        return None
    json_bytes = len(decoded[:end].encode("utf-8", errors="surrogateescape"))
    return ProtocolError(f"the request body has {len(text) - json_bytes} bytes after its JSON and "
                         f"{named('input', declaring[0])} declares binary_data_size, but no header "
                         "Inference-Header-Content-Length says where the JSON ends: binary tensor data needs that header, "
                         f"giving the byte length of the JSON part ({json_bytes} here)")


def too_deep(text: bytes | bytearray, expected: str) -> str:
    """The message for JSON that json.loads refused with RecursionError: well-formed, maybe, but nested deeper than its
    C parser goes (each level a call, counted against Python's recursion limit with the server's own calls), whose
    own text ("maximum recursion depth exceeded ...") says neither what was received nor the limit. The depth is
    counted here, on the error path only, and the count stops just past the limit."""
    limit = sys.getrecursionlimit()
    depth = deepest = at = 0
    for token in JSON_TOKENS.finditer(text):
        bracket = token.group()
        if bracket in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest, at = depth, token.start()
                if depth > limit:
                    break
        elif bracket in (b"]", b"}"):
            depth -= 1
    received = f"more than {limit}" if deepest > limit else str(deepest)
    return (f"the JSON in the request body nests {received} levels deep (at byte {at}), deeper than this server's "
            f"JSON parser reads (Python's recursion limit, {limit} levels, less the server's own calls); expected "
            f"{expected}")


def _parse_json(text: bytes | bytearray, header_length: str | None = None) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise _too_deep(text) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        # Bytes after the JSON (or bytes that are not UTF-8) where an input declares binary data: the header that
        # says where the JSON ends is missing, which a parser's "Extra data" does not say.
        missing = _binary_without_header(text) if header_length is None else None
        raise missing or ProtocolError(f"malformed JSON in the request body: {exc}; expected an inference request "
                                       f"{EXAMPLE}") from None
    except ValueError:  # an integer literal beyond the int-string limit: read again, keeping it as a HugeInt
        try:
            return json.loads(text, parse_int=_integer)
        except RecursionError:  # nested too deep after that literal
            raise _too_deep(text) from None


def _too_deep(text: bytes | bytearray) -> ProtocolError:
    return ProtocolError(too_deep(text, f"an inference request {EXAMPLE}, each input's 'data' nested at most as deep "
                                        "as its shape"))


def _expected_shape(config: ModelConfig, tensor: TensorConfig) -> str:
    shape = config.wire_shape(tensor)
    note = f" with a batch size of 1..{config.max_batch_size} for -1" if config.batched else ""
    return f"{shape}{note}"


def input_tensor(name: object, datatype: object, config: ModelConfig, arrays: Arrays) -> TensorConfig:
    """The model input a request's entry names (HTTP's JSON or gRPC's message): known to the model, not given
    before in this request (`arrays`), and of the model's datatype."""
    tensors = {t.name: t for t in config.inputs}
    if not isinstance(name, str) or name not in tensors:
        raise ProtocolError(f"received an input named {show(name)}; model '{config.name}' expects inputs "
                            f"{sorted(tensors)}")
    if name in arrays:
        raise ProtocolError(f"input '{name}' appears twice in 'inputs'")
    tensor = tensors[name]
    if datatype != tensor.datatype:
        raise ProtocolError(f"input '{name}': received datatype {show(datatype)}, expected \"{tensor.datatype}\"")
    return tensor


def place(arrays: Arrays, tensor: TensorConfig, values: np.ndarray, shape: tuple[int, ...], config: ModelConfig,
          batch: tuple[str, int] | None) -> tuple[str, int]:
    """Put one input's values into `arrays`, shaped as the model takes them; its batch size must be that of the
    inputs before it (`batch`: the first input's name and rows). Returns the batch for the next input."""
    rows = shape[0] if config.batched else 1
    if batch is not None and rows != batch[1]:
        raise ProtocolError(f"input '{tensor.name}': received batch size {rows}, expected {batch[1]} like input "
                            f"'{batch[0]}'")
    model_shape = (rows, *tensor.model_dims) if config.batched else tensor.model_dims
    arrays[tensor.name] = values.reshape(shape if tensor.reshape is None else model_shape)
    return batch or (tensor.name, rows)


def check_complete(arrays: Arrays, config: ModelConfig) -> None:
    """Every input of the model was given."""
    expected = sorted(t.name for t in config.inputs)
    missing = sorted(set(expected) - set(arrays))
    if missing:
        raise ProtocolError(f"missing input{'s' if len(missing) > 1 else ''} {missing}: received inputs {list(arrays)}, "
                            f"model '{config.name}' expects {expected}")


def check_shape(raw: Any, config: ModelConfig, tensor: TensorConfig) -> tuple[int, ...]:
    """The request's shape for `tensor`, checked against the config (batch size within max_batch_size)."""
    name = tensor.name
    if not isinstance(raw, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in raw):
        raise ProtocolError(f"input '{name}': received shape {show(raw)}, expected a list of integers "
                            f"{_expected_shape(config, tensor)}")
    shape = tuple(raw)
    expected = config.wire_shape(tensor)
    if any(d < 0 for d in shape):  # the model's -1 copied into a request: printed alike, so said apart
        example = [1 if e < 0 else e for e in expected]
        note = f" (a batch size of 1..{config.max_batch_size} for the first)" if config.batched else ""
        raise ProtocolError(f"input '{name}': received shape {list(shape)} with a negative dimension; a request gives "
                            f"each -1 of the model's shape {expected} its actual size{note}, such as {example}")
    fits = len(shape) == len(expected) and all(d >= 0 and e in (-1, d) for d, e in zip(shape, expected, strict=True))
    if not fits:
        raise ProtocolError(f"input '{name}': received shape {show(list(shape))}, expected {_expected_shape(config, tensor)}")
    if config.batched and not 1 <= shape[0] <= config.max_batch_size:
        raise ProtocolError(f"input '{name}': received batch size {shape[0]} (shape {list(shape)}), expected 1.."
                            f"{config.max_batch_size} (the model's max_batch_size)")
    # A variable dimension (-1) of length 0 is an empty tensor, which kernels refuse (a convolution over no steps)
    # or answer with nothing: refused here, as a client's mistake, not left to fail in onnxruntime.
    if 0 in shape:
        raise ProtocolError(f"input '{name}': received shape {list(shape)} with a dimension of 0, expected "
                            f"{_expected_shape(config, tensor)}, each -1 a length of 1 or more")
    return shape


def _binary_array(name: str, datatype: str, size: Any, binary: memoryview, offset: int, count: int,
                  shape: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """`size` bytes of raw little-endian tensor data at `offset` of the binary part, and the next offset."""
    dtype = np.dtype(DATATYPES[datatype])
    expected = count * dtype.itemsize
    if not isinstance(size, int) or isinstance(size, bool) or size != expected:
        raise ProtocolError(f"input '{name}': received binary_data_size {show(size)}, expected {expected} "
                            f"({count} {datatype} values of {dtype.itemsize} bytes for shape {list(shape)})")
    if offset + size > len(binary):
        raise ProtocolError(f"input '{name}': received {max(len(binary) - offset, 0)} bytes of binary data, "
                            f"expected {size} after the JSON header")
    values = np.frombuffer(binary, dtype=dtype.newbyteorder("<"), count=count, offset=offset)
    return values.astype(dtype), offset + size


def requested_outputs(raw: Any, parameters: Mapping[str, Any], config: ModelConfig) -> tuple[RequestedOutput, ...]:
    """The outputs to return. None or an empty list asks for every output, as Triton (which adds no requested output
    then) and this server's gRPC (an empty repeated field) read it."""
    names = [t.name for t in config.outputs]
    default_binary = parameters.get("binary_data_output") is True
    if raw is None or raw == []:
        return tuple(RequestedOutput(n, default_binary) for n in names)
    if not isinstance(raw, list):
        raise ProtocolError(f"'outputs': received {kind(raw)}, expected a list of "
                            f"{{\"name\": ...}} objects naming outputs of {names}")
    requested: dict[str, RequestedOutput] = {}
    for item in raw:
        item = _object(item, "each entry of 'outputs'")
        _present(item, "name", "an entry of 'outputs'", f"expected {{\"name\": ...}} naming one of {names}")
        name = item["name"]
        if name not in names:
            raise ProtocolError(f"requested output {show(name)} is not an output of model '{config.name}'; "
                                f"expected one of {names}")
        if name in requested:
            raise ProtocolError(f"output '{name}' is requested twice")
        options = check_parameters(_object(item.get("parameters", {}), f"the parameters of output '{name}'"), "output",
                                   f"output '{name}'")
        binary = options.get("binary_data", default_binary)
        requested[name] = RequestedOutput(name, binary is True)
    return tuple(requested.values())


def _input_parameters(raw_inputs: list[Any]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Each entry of 'inputs' with its parameters, checked first (as gRPC checks them, grpc_protocol.py): a refused
    parameter (shared memory) says why before any complaint about the data it replaces."""
    entries = []
    for item in raw_inputs:
        item = _object(item, "each entry of 'inputs'")
        name = item.get("name")
        options = _object(item.get("parameters", {}), f"the parameters of {named('input', name)}")
        entries.append((item, check_parameters(options, "input", named("input", name))))
    return entries


def _input_values(item: Mapping[str, Any], options: Mapping[str, Any], tensor: TensorConfig, shape: tuple[int, ...],
                  binary: memoryview, offset: int) -> tuple[np.ndarray, int]:
    """One input's values, from its JSON `data` or from the binary part at `offset`; and the next offset."""
    name, datatype, count = tensor.name, tensor.datatype, math.prod(shape)
    if "binary_data_size" in options:
        if "data" in item:
            raise ProtocolError(f"input '{name}': received both 'data' and binary_data_size, expected one of them")
        return _binary_array(name, datatype, options["binary_data_size"], binary, offset, count, shape)
    if "data" in item:
        return json_array(name, datatype, np.dtype(DATATYPES[datatype]), item["data"], shape), offset
    raise ProtocolError(f"input '{name}': received no 'data', expected {count} {datatype} values for shape "
                        f"{list(shape)} (or binary_data_size with binary tensor data)")


def decode_request(body: bytes | bytearray, header_length: str | None, config: ModelConfig) -> InferRequest:
    """A checked InferRequest from an HTTP body, or a ProtocolError naming what is wrong."""
    text, binary = _split_body(body, header_length)
    request = _object(_parse_json(text, json_only(header_length)), "the request body")
    request_id = request.get("id")
    try:
        return _checked(request, request_id, binary, config)
    except ProtocolError as exc:  # its log line names the request, as a refused gRPC request's does
        exc.request_id = request_id if isinstance(request_id, str) and request_id else None
        raise


def _checked(request: Mapping[str, Any], request_id: Any, binary: memoryview, config: ModelConfig) -> InferRequest:
    parameters = check_parameters(_object(request.get("parameters", {}), "'parameters'"), "request", "the request")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(f"'id': received {kind(request_id)}, expected a string")
    tensors = {t.name: t for t in config.inputs}
    raw_inputs = request.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError(f"'inputs': received {'nothing' if raw_inputs is None else kind(raw_inputs)}, expected a "
                            f"list of input tensors named {sorted(tensors)}, as in {EXAMPLE}")
    arrays: Arrays = {}
    batch: tuple[str, int] | None = None
    offset = 0
    for item, options in _input_parameters(raw_inputs):
        _present(item, "name", "an entry of 'inputs'", f"model '{config.name}' expects inputs {sorted(tensors)}")
        name = item["name"]
        known = tensors.get(name) if isinstance(name, str) else None  # an unknown name is refused by input_tensor
        if known is not None:
            _present(item, "datatype", named("input", name), f"expected \"{known.datatype}\"")
            _present(item, "shape", named("input", name), f"expected a list of integers {_expected_shape(config, known)}")
        tensor = input_tensor(name, item.get("datatype"), config, arrays)
        shape = check_shape(item.get("shape"), config, tensor)
        values, offset = _input_values(item, options, tensor, shape, binary, offset)
        batch = place(arrays, tensor, values, shape, config, batch)
    check_complete(arrays, config)
    if offset != len(binary):
        raise ProtocolError(f"received {len(binary)} bytes of binary data after the JSON header, expected {offset} "
                            "(the sum of the inputs' binary_data_size)")
    outputs = requested_outputs(request.get("outputs"), parameters, config)
    # An empty id is no id: Triton leaves it out of the response (FinalizeResponse), as gRPC's empty string does here.
    return InferRequest(id=request_id or None, inputs=arrays, rows=batch[1] if batch else 1, outputs=outputs,
                        timeout_us=parameters.get("timeout", 0))


def encode_response(config: ModelConfig, version: int, request: InferRequest, outputs: Arrays) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers: JSON, followed by raw output bytes for binary outputs."""
    tensors = {t.name: t for t in config.outputs}
    entries, chunks = [], []
    for wanted in request.outputs:
        tensor, value = tensors[wanted.name], outputs[wanted.name]
        if tensor.reshape is not None:
            value = value.reshape([request.rows, *tensor.dims] if config.batched else tensor.dims)
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(value.shape)}
        if wanted.binary:
            raw = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = value.reshape(-1).tolist()
        entries.append(entry)
    response: dict[str, Any] = {"model_name": config.name, "model_version": str(version)}
    if request.id is not None:
        response["id"] = request.id
    response["outputs"] = entries
    header = dumps(response)
    if not chunks:
        return header, {"content-type": JSON_TYPE}
    return b"".join([header, *chunks]), {"content-type": BINARY_TYPE, HEADER_LENGTH: str(len(header))}
