"""A model's `config.pbtxt`: read with protobuf's `text_format` into Triton's own `ModelConfig` message.

The message comes from `tritonclient.grpc.model_config_pb2` (which the `serve` extra installs): the schema Triton
itself reads the file with, so a misspelled field or a wrong type is an error naming the line and column, and the
message is what the gRPC `ModelConfig` RPC answers. The fields serving needs are then taken into `ModelConfig`
below, each checked; nothing of the file is quoted but the one value at fault, escaped and cut.

The rest of the message is not ignored blindly. A field that would change what a request is answered (an error
instead of a 200, other values, state kept across requests) is either honoured (`default_queue_policy`: batcher.py)
or refused at load, naming the field (`NOT_SERVED`), as a request parameter that changes what a request means is
(parameters.py). A field that changes only order or speed (`priority_levels`, `response_cache`) is accepted and named in `notes`,
which the load logs as one warning line (models.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specgen.errors import SpecgenError
from specgen.paths import plain_name
from specgen.text import printable

# KServe v2 datatype -> numpy dtype name, for the tensor types the onnxruntime backend here serves.
DATATYPES = {"FP32": "float32", "FP64": "float64", "INT32": "int32", "INT64": "int64", "UINT8": "uint8"}
_ITEM_BYTES = {"FP32": 4, "FP64": 8, "INT32": 4, "INT64": 8, "UINT8": 1}  # numpy's itemsize, without numpy here
ONNX_PLATFORMS = {"onnxruntime_onnx"}
ONNX_BACKENDS = {"onnxruntime"}
# A request waits at most this long for company in its batch. Triton takes any uint64; a delay beyond a client's
# usual deadline serves no one, and a retired version's queue must drain in bounded time (registry.py).
MAX_QUEUE_DELAY_US = 10_000_000
# The largest request the server accepts (ServeOptions.max_body_bytes, the gRPC message limit's cap): a config whose
# one example is larger could never be sent, and its warm-up alone would allocate that much (limits.py).
MAX_REQUEST_BYTES = 64 << 20
# protobuf's description of a config problem, cut: it quotes the token it stopped at, which can be a whole line
PROBLEM_CHARS = 160
MAX_LINE = 2000  # characters of one line of a RepositoryError, as diagnostics.MAX_MESSAGE


class RepositoryError(SpecgenError, ValueError):
    """A model repository, folder or config that cannot be served, naming the file. Each line (several for a whole
    repository) is cut to MAX_LINE characters: a config's lists (versions, dims, names) are as long as its author
    made them, and the message reaches a load's answer, gRPC details and the log."""

    def __init__(self, message: str):
        super().__init__("\n".join(line if len(line) <= MAX_LINE else f"{line[:MAX_LINE - 3]}..."
                                   for line in message.split("\n")))


def quoted(text: str) -> str:
    """A string of a config (a name, a platform) in quotes for a message: escaped (protobuf decodes `\\n` into a
    line break) and cut to 80 characters."""
    text = printable(text)
    return f"'{text}'" if len(text) <= 80 else f"'{text[:77]}...'"


@dataclass(frozen=True)
class TensorConfig:
    """One `input` / `output` entry: `dims` leave the batch out when the model batches."""

    name: str
    datatype: str  # KServe name: FP32, INT64, ...
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None  # the model's own per-example shape when it differs from dims

    @property
    def model_dims(self) -> tuple[int, ...]:
        return self.dims if self.reshape is None else self.reshape


@dataclass(frozen=True)
class VersionPolicy:
    """Which version folders are served: `latest` N (Triton's default, N = 1), `all`, or `specific` ones."""

    kind: str = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def select(self, available: list[int]) -> list[int]:
        """The served versions among `available` (sorted ascending)."""
        if self.kind == "all":
            return list(available)
        if self.kind == "specific":
            return [v for v in available if v in self.versions]
        return list(available[-self.num_versions:]) if available else []

    def describe(self) -> str:
        if self.kind == "specific":
            return f"specific {{ versions: {list(self.versions)} }}"
        return "all { }" if self.kind == "all" else f"latest {{ num_versions: {self.num_versions} }}"


@dataclass(frozen=True)
class QueuePolicy:
    """The timeout of `dynamic_batching.default_queue_policy`: how long a request may wait in the queue, and what
    then (Triton's PriorityQueue::PolicyQueue::Enqueue and ApplyPolicy, core/src/scheduler_utils.cc)."""

    timeout_us: int = 0  # default_timeout_microseconds; 0: the config sets none
    delay: bool = False  # timeout_action DELAY: run after the requests still in time; REJECT: answered unrun
    allow_override: bool = False  # allow_timeout_override: a request's own `timeout` may shorten timeout_us

    def timeout(self, requested_us: int) -> tuple[int, bool]:
        """The microseconds a request asking `requested_us` (0: none) may wait (0: no limit), and whether that limit
        is the config's. Where the config sets a timeout, Triton's rule: the config's, or the request's own if the
        config allows overriding and it is shorter. Where the config sets none, the request's own (Triton would
        ignore it there; docs/serve.md says why this server does not)."""
        if not self.timeout_us:
            return requested_us, False
        if self.allow_override and 0 < requested_us < self.timeout_us:
            return requested_us, False
        return self.timeout_us, True


@dataclass(frozen=True)
class ModelConfig:
    """The fields of a Triton model configuration that serving an ONNX model needs, and the message itself."""

    name: str
    max_batch_size: int
    inputs: tuple[TensorConfig, ...]
    outputs: tuple[TensorConfig, ...]
    dynamic_batching: bool = False
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_size: int = 0  # dynamic_batching.default_queue_policy.max_queue_size; 0: not set
    model_filename: str = "model.onnx"
    version_policy: VersionPolicy = VersionPolicy()
    queue_policy: QueuePolicy = QueuePolicy()
    # Fields accepted though not honoured, each changing only order or speed: (field, why), one warning line each
    notes: tuple[tuple[str, str], ...] = ()
    # Triton's ModelConfig message as read (what the gRPC ModelConfig RPC returns); None for configs built in code.
    message: Any = field(default=None, compare=False, repr=False)

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0

    def wire_shape(self, tensor: TensorConfig) -> list[int]:
        """The shape clients see: -1 for the batch dimension when the model batches."""
        return [-1, *tensor.dims] if self.batched else list(tensor.dims)

    def signature(self) -> tuple[tuple[TensorConfig, ...], tuple[TensorConfig, ...], int]:
        """What a request and a model version must agree on: the tensors and the batching."""
        return self.inputs, self.outputs, self.max_batch_size


def _pb2() -> Any:
    try:
        from tritonclient.grpc import model_config_pb2
    except ImportError as exc:  # the serve extra installs it; a partial install says what is missing
        raise RepositoryError("reading config.pbtxt needs Triton's ModelConfig schema from tritonclient[grpc]: "
                              f"pip install 'specgen[serve]' ({exc})") from None
    return model_config_pb2


def read_message(text: str, source: str = "config.pbtxt") -> Any:
    """Triton's ModelConfig message from `config.pbtxt` text, or a RepositoryError naming the line and column."""
    from google.protobuf import text_format

    try:
        return text_format.Parse(text, _pb2().ModelConfig())
    except text_format.ParseError as exc:
        raise _parse_error(exc, text, source) from None


def _parse_error(exc: Any, text: str, source: str) -> RepositoryError:
    """`source:line:column: ...` and protobuf's description, one bounded line. protobuf puts the whole source line in
    its tokenizer's messages ("1:32 : '<the line>': Expected identifier"): the position already says where, and a
    line may be 300 KB, so it is dropped, and what is left (which quotes the token) is escaped and cut."""
    line, column = exc.GetLine(), exc.GetColumn()
    where = source if line is None else f"{source}:{line}" if column is None else f"{source}:{line}:{column}"
    description = str(exc)
    if line is not None:
        description = description.removeprefix(f"{line}:{column} : " if column is not None else f"{line} : ")
        lines = text.split("\n")  # as protobuf's tokenizer splits them
        if 0 < line <= len(lines):
            description = description.removeprefix(f"'{lines[line - 1]}': ")
    description = printable(description)
    if len(description) > PROBLEM_CHARS:
        description = f"{description[:PROBLEM_CHARS - 3]}... ({len(description):,} characters)"
    return RepositoryError(f"{where}: not a Triton model configuration: {description}")


def _datatype(value: int, where: str, pb2: Any) -> str:
    name: str = pb2.DataType.Name(value)
    datatype = name.removeprefix("TYPE_")
    if datatype not in DATATYPES:
        raise RepositoryError(f"{where}: data_type {name} is not served; expected one of "
                              f"{', '.join('TYPE_' + d for d in DATATYPES)}")
    return datatype


def _dims(values: Any, where: str) -> tuple[int, ...]:
    dims = tuple(int(v) for v in values)
    if any(d < -1 or d == 0 for d in dims):
        raise RepositoryError(f"{where}: dims {list(dims)} must be positive, or -1 for a variable size")
    return dims


def _tensor(entry: Any, kind: str, source: str, pb2: Any) -> TensorConfig:
    if not entry.name:
        raise RepositoryError(f"{source}: an {kind} has no name")
    where = f"{source}: {kind} {quoted(entry.name)}"
    return TensorConfig(name=entry.name, datatype=_datatype(entry.data_type, where, pb2), dims=_dims(entry.dims, where),
                        reshape=_dims(entry.reshape.shape, f"{where} reshape") if entry.HasField("reshape") else None)


def _policy(message: Any, source: str) -> VersionPolicy:
    policy = message.version_policy
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return VersionPolicy("all")
    if kind == "specific":
        versions = tuple(sorted(set(int(v) for v in policy.specific.versions)))
        if not versions or versions[0] < 1:
            raise RepositoryError(f"{source}: version_policy specific lists versions {list(policy.specific.versions)}; "
                                  "expected one or more positive version numbers")
        return VersionPolicy("specific", versions=versions)
    if kind == "latest":
        if policy.latest.num_versions < 1:
            raise RepositoryError(f"{source}: version_policy latest has num_versions {policy.latest.num_versions}; "
                                  "expected 1 or more")
        return VersionPolicy("latest", num_versions=policy.latest.num_versions)
    return VersionPolicy()


def _filename(message: Any, source: str) -> str:
    """default_model_filename: a file of the version folder, so one plain name (never a path out of the folder)."""
    name = message.default_model_filename or "model.onnx"
    if not plain_name(name):
        raise RepositoryError(f"{source}: default_model_filename {quoted(name)} is not a plain file name; expected the "
                              "name of the model file inside each version folder (model.onnx)")
    return str(name)


def _queue_delay(batching: Any, source: str) -> int:
    if batching is None:
        return 0
    delay = int(batching.max_queue_delay_microseconds)
    if delay > MAX_QUEUE_DELAY_US:
        raise RepositoryError(f"{source}: dynamic_batching max_queue_delay_microseconds {delay} is more than "
                              f"{MAX_QUEUE_DELAY_US:,} (10 s); expected at most that (a few hundred to a few "
                              "thousand is usual)")
    return delay


def _check_example_bytes(inputs: tuple[TensorConfig, ...], source: str) -> None:
    """Refuse a config whose one example (batch 1; 1 for a -1 size) is larger than any request the server accepts:
    no client could send it, and the warm-up would allocate it (2^28 FP32 values: 1 GiB at load, for a dimension
    the graph leaves open, where nothing else bounds the config's size)."""
    def example_bytes(tensor: TensorConfig) -> int:
        elements = max(math.prod(max(d, 1) for d in dims) for dims in (tensor.dims, tensor.model_dims))
        return elements * _ITEM_BYTES[tensor.datatype]

    total = sum(example_bytes(t) for t in inputs)
    if total > MAX_REQUEST_BYTES:
        largest = max(inputs, key=example_bytes)
        reshape = f", reshape {list(largest.reshape)}" if largest.reshape is not None else ""
        raise RepositoryError(f"{source}: one example of the inputs takes {total:,} bytes (input {quoted(largest.name)}: "
                              f"dims {list(largest.dims)}{reshape} of {largest.datatype}), more than the largest request "
                              f"the server accepts ({MAX_REQUEST_BYTES:,} bytes); expected dims whose example fits in "
                              "one request (-1 where the client chooses the size)")


# Fields that change what a request is answered and that specgen serve does not implement: (path, whether the
# message sets it, what it does in Triton). Each is refused at load rather than ignored with a 200.
NOT_SERVED: tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...] = (
    (("sequence_batching",), lambda m: m.HasField("sequence_batching"),
     "Triton's sequence batcher: requests of one sequence routed by their correlation ID, state kept across them, "
     "a request without one refused"),
    (("ensemble_scheduling",), lambda m: m.HasField("ensemble_scheduling"), "a pipeline of other models"),
    (("dynamic_batching", "priority_queue_policy"), lambda m: bool(m.dynamic_batching.priority_queue_policy),
     "a queue policy of its own per priority level"),
    (("batch_input",), lambda m: bool(m.batch_input), "inputs Triton makes up from the batch (ragged batching)"),
    (("batch_output",), lambda m: bool(m.batch_output), "outputs Triton scatters by batch_output rules"),
    (("model_transaction_policy", "decoupled"), lambda m: m.model_transaction_policy.decoupled,
     "a decoupled model: any number of responses per request, over a stream"),
    (("input", "optional"), lambda m: any(t.optional for t in m.input), "a request may leave the input out"),
    (("input", "allow_ragged_batch"), lambda m: any(t.allow_ragged_batch for t in m.input),
     "requests of different shapes joined without padding"),
    (("input", "is_shape_tensor"), lambda m: any(t.is_shape_tensor for t in m.input), "a shape tensor (TensorRT)"),
    (("output", "is_shape_tensor"), lambda m: any(t.is_shape_tensor for t in m.output), "a shape tensor (TensorRT)"),
    (("optimization", "execution_accelerators"), lambda m: bool(m.optimization.execution_accelerators.gpu_execution_accelerator
                   or m.optimization.execution_accelerators.cpu_execution_accelerator),
     "another execution provider (TensorRT, OpenVINO) with its own precision; choose the onnxruntime provider with "
     "specgen serve --provider"),
    (("model_repository_agents",), lambda m: bool(m.model_repository_agents.agents),
     "agents that check or transform the model files before they load"),
)
_OPEN, _CLOSE = ("{", "<", "["), ("}", ">", "]")


def _position(text: str, path: tuple[str, ...]) -> str:
    """`:line:column` of the first field at `path` (`("input", "optional")`: in any input) in config.pbtxt text
    that parsed, read with protobuf's own tokenizer (comments, strings, `<>` blocks, lists); "" if not found."""
    from google.protobuf import text_format

    tokens: list[tuple[str, int, int]] = []
    tokenizer = text_format.Tokenizer(text.split("\n"))
    while not tokenizer.AtEnd():
        # the tokenizer's one public account of where its token is (1-based); its stub mistypes the message
        here = tokenizer.ParseError("")  # type: ignore[arg-type]
        tokens.append((tokenizer.token, here.GetLine() or 0, here.GetColumn() or 0))
        tokenizer.NextToken()
    stack: list[str] = []  # the field each open bracket belongs to; "" for an element of a list
    for index, (token, line, column) in enumerate(tokens):
        before = [t for t, _, _ in tokens[max(index - 2, 0):index]]
        if token in _OPEN:  # `field {`, `field: {` or, in a list, `[ {` / `, {`
            if before[-1:] == [":"]:
                stack.append(before[0] if len(before) == 2 else "")
            else:
                stack.append(before[-1] if before and before[-1] not in (",", *_OPEN) else "")
        elif token in _CLOSE:
            stack = stack[:-1]
        elif (index + 1 < len(tokens) and tokens[index + 1][0] in (":", *_OPEN)
              and (*[s for s in stack if s], token) == path):
            return f":{line}:{column}"
    return ""


def _refuse_not_served(message: Any, text: str, source: str) -> None:
    for path, present, what in NOT_SERVED:
        if present(message):
            raise RepositoryError(f"{source}{_position(text, path)}: {'.'.join(path)} is set, and specgen serve does "
                                  f"not implement it ({what}); expected a config without it: remove it, or serve this "
                                  "model with Triton")


def _queue_policy(message: Any, text: str, source: str, pb2: Any) -> QueuePolicy:
    """default_queue_policy's timeout, refused where Triton refuses it with preserve_ordering
    (core/src/model_config_utils.cc ValidateModelConfig)."""
    batching = message.dynamic_batching
    policy = batching.default_queue_policy
    queue = QueuePolicy(int(policy.default_timeout_microseconds), policy.timeout_action == pb2.ModelQueuePolicy.DELAY,
                        bool(policy.allow_timeout_override))
    if batching.preserve_ordering and queue.timeout_us and queue.delay:
        where = _position(text, ("dynamic_batching", "default_queue_policy", "timeout_action"))
        raise RepositoryError(f"{source}{where}: dynamic_batching default_queue_policy has timeout_action DELAY with "
                              "preserve_ordering: true; expected REJECT, or preserve_ordering false: a delayed request "
                              "would be answered after later ones (Triton refuses the same config)")
    return queue


def _priority_notes(message: Any, text: str, source: str) -> tuple[tuple[str, str], ...]:
    """priority_levels, checked as Triton checks it; accepted with a note: it changes only the order of requests."""
    batching = message.dynamic_batching
    levels, default = int(batching.priority_levels), int(batching.default_priority_level)
    if not levels:
        return ()
    if not 1 <= default <= levels:
        raise RepositoryError(f"{source}{_position(text, ('dynamic_batching', 'default_priority_level'))}: "
                              f"dynamic_batching default_priority_level is {default}; expected a level in 1..{levels} "
                              f"(priority_levels {levels}), as Triton requires")
    if batching.preserve_ordering and levels > 1:
        raise RepositoryError(f"{source}{_position(text, ('dynamic_batching', 'priority_levels'))}: dynamic_batching "
                              f"has priority_levels {levels} with preserve_ordering: true; expected one level, as "
                              "Triton requires (a request of a higher priority would be answered before earlier ones)")
    return (("dynamic_batching.priority_levels", "one queue in arrival order: a request's priority does not move it "
             "ahead of others (order only), and max_queue_size bounds that one queue, not each level"),)


def _cache_note(message: Any) -> tuple[tuple[str, str], ...]:
    """response_cache { enable: true }: accepted with a note. Triton's cache answers a repeated request with the
    answer the model gave it, so serving without one changes speed and the cache statistics, never an answer."""
    if not message.response_cache.enable:
        return ()
    return (("response_cache.enable", "no response cache: every request runs the model (the same answers; only "
             "speed and Triton's cache statistics differ)"),)


def parse_config(text: str, source: str = "config.pbtxt") -> ModelConfig:
    """A `ModelConfig` from `config.pbtxt` text, or a RepositoryError naming `source` and the field."""
    pb2 = _pb2()
    message = read_message(text, source)
    _refuse_not_served(message, text, source)
    platform, backend = message.platform, message.backend
    if (platform or backend) and platform not in ONNX_PLATFORMS and backend not in ONNX_BACKENDS:
        raise RepositoryError(f"{source}: platform {quoted(platform)} / backend {quoted(backend)} is not served; "
                              "expected backend: \"onnxruntime\" or platform: \"onnxruntime_onnx\"")
    if message.max_batch_size < 0:
        raise RepositoryError(f"{source}: max_batch_size must be 0 or more; received {message.max_batch_size}")
    inputs = tuple(_tensor(t, "input", source, pb2) for t in message.input)
    outputs = tuple(_tensor(t, "output", source, pb2) for t in message.output)
    if not inputs or not outputs:
        raise RepositoryError(f"{source}: the config must list the model's inputs and outputs "
                              f"(received {len(inputs)} inputs, {len(outputs)} outputs)")
    _check_example_bytes(inputs, source)
    batching = message.dynamic_batching if message.HasField("dynamic_batching") else None
    return ModelConfig(
        name=message.name,
        max_batch_size=message.max_batch_size,
        inputs=inputs,
        outputs=outputs,
        dynamic_batching=batching is not None and message.max_batch_size > 0,
        max_queue_delay_us=_queue_delay(batching, source),
        preferred_batch_sizes=tuple(batching.preferred_batch_size) if batching is not None else (),
        max_queue_size=batching.default_queue_policy.max_queue_size if batching is not None else 0,
        model_filename=_filename(message, source),
        version_policy=_policy(message, source),
        queue_policy=_queue_policy(message, text, source, pb2) if batching is not None else QueuePolicy(),
        notes=(*(_priority_notes(message, text, source) if batching is not None else ()), *_cache_note(message)),
        message=message,
    )
