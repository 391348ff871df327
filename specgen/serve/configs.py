"""A model's configuration as both protocols answer it, from one source: Triton's `ModelConfig` message.

gRPC's ModelConfig RPC answers the message; HTTP's `GET /v2/models/{name}[/versions/{v}]/config` answers the
same message as JSON, as Triton answers both from one ModelConfig. Before, HTTP rebuilt a JSON of the fields this
server reads, so a tool reading the config over HTTP (perf_analyzer, model_analyzer, a deploy check) saw another
configuration than over gRPC: without the `parameters`, `instance_group`, `default_model_filename` or
`dynamic_batching.default_queue_policy` that config.pbtxt holds and that are in force.

The JSON is protobuf's JSON mapping with the proto field names (`max_batch_size`, `data_type`), every field
without presence printed even at its default (`max_batch_size: 0`, empty lists: Triton prints its config with
`always_print_primitive_fields` too, so clients find the keys they index), and 64-bit integers as JSON numbers
(protobuf writes them as strings; Triton's HTTP writes `dims`, `max_queue_delay_microseconds` as numbers, and
tritonclient.http users compare them with numbers).

What config.pbtxt leaves out and Triton fills in before answering either protocol is filled here the same way for
both: the name (the folder's), `platform: "onnxruntime_onnx"`, `backend: "onnxruntime"`, and the default
`version_policy` (`latest { num_versions: 1 }`).
"""

from __future__ import annotations

from typing import Any

from specgen.serve.model_config import ModelConfig
from specgen.serve.models import ServedModel

# FieldDescriptor.TYPE_INT64, TYPE_UINT64, TYPE_FIXED64, TYPE_SFIXED64, TYPE_SINT64: fixed numbers of protobuf's
# descriptor.proto, so this module imports protobuf and the schema only where used (model_config.py's way: a config was
# read with them before any is answered).
INT64_TYPES = {3, 4, 6, 16, 18}


def _from_fields(config: ModelConfig) -> Any:
    """The message of a config built in code (tests; one read from config.pbtxt keeps its own): its fields."""
    from tritonclient.grpc import model_config_pb2 as schema

    message = schema.ModelConfig(name=config.name, max_batch_size=config.max_batch_size,
                              default_model_filename=config.model_filename)
    for kind, tensors in (("input", config.inputs), ("output", config.outputs)):
        for tensor in tensors:
            entry = getattr(message, kind).add(name=tensor.name, data_type=schema.DataType.Value(f"TYPE_{tensor.datatype}"),
                                               dims=tensor.dims)
            if tensor.reshape is not None:
                entry.reshape.shape.extend(tensor.reshape)
    policy = config.version_policy
    if policy.kind == "all":
        message.version_policy.all.SetInParent()
    elif policy.kind == "specific":
        message.version_policy.specific.versions.extend(policy.versions)
    else:
        message.version_policy.latest.num_versions = policy.num_versions
    if config.dynamic_batching:
        batching = message.dynamic_batching
        batching.max_queue_delay_microseconds = config.max_queue_delay_us
        batching.preferred_batch_size.extend(config.preferred_batch_sizes)
        if config.max_queue_size:
            batching.default_queue_policy.max_queue_size = config.max_queue_size
    return message


def config_message(model: ServedModel) -> Any:
    """The ModelConfig message both protocols answer for `model` (a copy: the one read stays as read)."""
    from tritonclient.grpc import model_config_pb2

    message = model_config_pb2.ModelConfig()
    message.CopyFrom(model.config.message if model.config.message is not None else _from_fields(model.config))
    message.name = model.name
    message.platform = message.platform or "onnxruntime_onnx"
    message.backend = message.backend or "onnxruntime"
    if not message.HasField("version_policy"):
        message.version_policy.latest.num_versions = 1
    return message


def _numbers(value: dict[str, Any], descriptor: Any) -> dict[str, Any]:
    """`value` (protobuf's JSON of a message of `descriptor`) with its 64-bit integers as numbers, in place."""
    for field in descriptor.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:  # a map: keys stay strings (JSON's), values converted
            target = entry.fields_by_name["value"]
            if target.message_type is not None:
                value[field.name] = {k: _numbers(v, target.message_type) for k, v in item.items()}
            elif target.type in INT64_TYPES:
                value[field.name] = {k: int(v) for k, v in item.items()}
        elif entry is not None:
            value[field.name] = [_numbers(v, entry) for v in item] if field.is_repeated else _numbers(item, entry)
        elif field.type in INT64_TYPES:
            value[field.name] = [int(v) for v in item] if field.is_repeated else int(item)
    return value


def config_json(model: ServedModel) -> dict[str, Any]:
    """The configuration as HTTP answers it: `config_message` as JSON (see the module docstring)."""
    from google.protobuf import json_format

    message = config_message(model)
    value = json_format.MessageToDict(message, preserving_proto_field_name=True,
                                      always_print_fields_with_no_presence=True)
    return _numbers(value, message.DESCRIPTOR)
