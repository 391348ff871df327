"""The Open Inference Protocol over gRPC: a ModelInferRequest in, a ModelInferResponse out.

The messages are KServe's `inference.GRPCInferenceService` as Triton publishes it (tritonclient's
generated `service_pb2`; see grpc_server.py for that choice). A request is checked exactly as an
HTTP one (protocol.py), with the same messages where the two protocols say the same thing: input
names, datatypes, shapes (batch within max_batch_size), element counts, integer ranges.

Tensor data comes either typed, in `contents` (the field of the datatype: `fp32_contents` for FP32,
`fp64_contents`, `int_contents` for INT32, `int64_contents`, `uint_contents` for UINT8 with values
0..255), or raw, in `raw_input_contents` (one little-endian byte string per input, in the order of
`inputs`; when any input is raw, every input is). Outputs always come back raw in
`raw_output_contents`, as Triton answers and as `tritonclient.grpc` reads them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from specgen.serve.errors import ProtocolError
from specgen.serve.model_config import DATATYPES, ModelConfig
from specgen.serve.parameters import check_parameters, from_grpc, named
from specgen.serve.protocol import InferRequest, RequestedOutput, check_complete, check_shape, input_tensor, place
from specgen.serve.values import show

Arrays = dict[str, np.ndarray]
CONTENTS = {"FP32": "fp32_contents", "FP64": "fp64_contents", "INT32": "int_contents", "INT64": "int64_contents",
            "UINT8": "uint_contents"}
FIXED_WIDTH = {"fp32_contents", "fp64_contents"}  # packed as raw little-endian values on the wire


def _fixed_width(contents: Any, dtype: np.dtype) -> np.ndarray:
    """The values of the one fixed-width field set in `contents`, from its wire bytes (no Python float per value).

    Packed fixed-width fields serialize as tag, byte length (a varint), then the values as little-endian
    bytes: reading them back with numpy takes ~3 ms per million values where iterating the field takes ~55.
    """
    wire = contents.SerializeToString()
    if not wire:
        return np.zeros(0, dtype)
    position, length, shift = 1, 0, 0  # the tag of fields 1..15 is one byte
    while True:
        byte = wire[position]
        length |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if byte < 0x80:
            break
    return np.frombuffer(wire, dtype.newbyteorder("<"), count=length // dtype.itemsize, offset=position).astype(dtype)


def _typed(name: str, datatype: str, contents: Any, count: int, shape: tuple[int, ...]) -> np.ndarray:
    """An input's values from its typed `contents`, checked: the datatype's field only, `count` values, in range."""
    field = CONTENTS[datatype]
    filled = [f.name for f, _ in contents.ListFields()]
    wrong = [f for f in filled if f != field]
    if wrong:
        raise ProtocolError(f"input '{name}': received contents.{wrong[0]}, expected contents.{field} for {datatype} "
                            "(or raw_input_contents)")
    values = getattr(contents, field)
    if len(values) != count:
        raise ProtocolError(f"input '{name}': received {len(values)} values in contents.{field}, expected {count} "
                            f"{datatype} values for shape {list(shape)}")
    dtype = np.dtype(DATATYPES[datatype])
    if field in FIXED_WIDTH:
        return _fixed_width(contents, dtype)
    if datatype == "UINT8":  # carried as uint32: 256 and above are no UINT8
        wide = np.fromiter(values, np.uint32, count=count)
        if count and int(wide.max()) > 255:
            raise ProtocolError(f"input '{name}': received {int(wide.max())} in contents.uint_contents, expected UINT8 "
                                "integers in 0..255")
        return wide.astype(np.uint8)
    return np.fromiter(values, dtype, count=count)


def _raw(name: str, datatype: str, data: bytes, count: int, shape: tuple[int, ...]) -> np.ndarray:
    dtype = np.dtype(DATATYPES[datatype])
    expected = count * dtype.itemsize
    if len(data) != expected:
        raise ProtocolError(f"input '{name}': received {len(data)} bytes of raw_input_contents, expected {expected} "
                            f"({count} {datatype} values of {dtype.itemsize} bytes for shape {list(shape)})")
    return np.frombuffer(data, dtype.newbyteorder("<"), count=count).astype(dtype)


def _outputs(request: Any, config: ModelConfig) -> tuple[RequestedOutput, ...]:
    """The outputs to return (none named: every output, as over HTTP); always raw, as Triton answers gRPC."""
    names = [t.name for t in config.outputs]
    if not request.outputs:
        return tuple(RequestedOutput(n, True) for n in names)
    requested: dict[str, RequestedOutput] = {}
    for item in request.outputs:
        if item.name not in names:
            raise ProtocolError(f"requested output {show(item.name)} is not an output of model '{config.name}'; "
                                f"expected one of {names}")
        if item.name in requested:
            raise ProtocolError(f"output '{item.name}' is requested twice")
        check_parameters(from_grpc(item.parameters), "output", f"output '{item.name}'")
        requested[item.name] = RequestedOutput(item.name, True)
    return tuple(requested.values())


def decode_infer(request: Any, config: ModelConfig) -> InferRequest:
    """A checked InferRequest from a ModelInferRequest, or a ProtocolError naming what is wrong."""
    parameters = check_parameters(from_grpc(request.parameters), "request", "the request")
    tensors = {t.name: t for t in config.inputs}
    if not request.inputs:
        raise ProtocolError(f"'inputs': received none, expected input tensors named {sorted(tensors)}")
    for item in request.inputs:  # before the data: a refused parameter (shared memory) says why the data is missing
        check_parameters(from_grpc(item.parameters), "input", named("input", item.name))
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise ProtocolError(f"received {len(raw)} raw_input_contents for {len(request.inputs)} inputs; expected one per "
                            "input, in the order of 'inputs'")
    arrays: Arrays = {}
    batch: tuple[str, int] | None = None
    for position, item in enumerate(request.inputs):
        name = item.name
        tensor = input_tensor(name, item.datatype, config, arrays)
        shape = check_shape(list(item.shape), config, tensor)
        count = math.prod(shape)
        if raw:
            if item.contents.ListFields():
                raise ProtocolError(f"input '{name}': received both 'contents' and raw_input_contents, expected one of "
                                    "them")
            values = _raw(name, tensor.datatype, raw[position], count, shape)
        else:
            values = _typed(name, tensor.datatype, item.contents, count, shape)
        batch = place(arrays, tensor, values, shape, config, batch)
    check_complete(arrays, config)
    return InferRequest(id=request.id or None, inputs=arrays, rows=batch[1] if batch else 1,
                        outputs=_outputs(request, config), timeout_us=parameters.get("timeout", 0))


def encode_infer(response_type: Any, config: ModelConfig, version: int, request: InferRequest, outputs: Arrays) -> Any:
    """The ModelInferResponse: each requested output's name, datatype and shape, its bytes in raw_output_contents."""
    tensors = {t.name: t for t in config.outputs}
    response = response_type(model_name=config.name, model_version=str(version), id=request.id or "")
    for wanted in request.outputs:
        tensor, value = tensors[wanted.name], outputs[wanted.name]
        if tensor.reshape is not None:
            value = value.reshape([request.rows, *tensor.dims] if config.batched else tensor.dims)
        response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=value.shape)
        response.raw_output_contents.append(np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes())
    return response
