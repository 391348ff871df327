"""gRPC: KServe's `inference.GRPCInferenceService` beside HTTP, on the same Service (versions, batchers, limits,
metrics, statistics, logs).

**Where the service and messages come from.** tritonclient's generated modules
(`tritonclient.grpc.service_pb2`, `service_pb2_grpc`, `model_config_pb2`), pinned with the `serve`
extra (`tritonclient[grpc]==2.73.0`, which brings grpcio and protobuf). Triton's `grpc_service.proto`
is KServe's `grpc_predict_v2.proto` (same package `inference`, same messages and field numbers for
ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata and ModelInfer) plus Triton's
extensions: ModelConfig (with the `ModelConfig` message `config.pbtxt` is read into, model_config.py),
ModelStatistics and the repository RPCs, which this server also answers. Vendoring KServe's .proto
would have meant compiling it with grpcio-tools, checking the output in, a drift test, and a second
copy of the ModelConfig schema; the published modules are what Triton's own clients are built from,
so a client of either server works here unchanged (the tests use `tritonclient.grpc`). The service
is registered from our own method table, not the generated `add_..._to_server`: a method not in
the table (streaming, shared memory, trace and log settings) is answered UNIMPLEMENTED by gRPC itself.

**Same event loop as uvicorn.** `grpc.aio` runs on any asyncio loop, uvloop included, so the gRPC
server is started by `server.Server` on uvicorn's loop after HTTP is bound: a gRPC request calls
`batcher.submit` directly, as an HTTP one does (the batcher's futures belong to that loop). A thread
with a loop of its own would have needed every submit and answer handed across loops, and two
loops to drain on shutdown.

**Limits**: grpc_limits.py.

**Status codes.** INVALID_ARGUMENT for a bad request (HTTP 400), NOT_FOUND for an unknown model or
version (404), RESOURCE_EXHAUSTED for a message too large or the body budget full (413, 503),
UNAVAILABLE for a full queue, a draining server or a request whose `timeout` passed in the queue (503, retryable,
as Triton answers them), INTERNAL
when onnxruntime fails on the request (500), DEADLINE_EXCEEDED; each failed call is one log line,
never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from specgen import __version__
from specgen.errors import SpecgenError
from specgen.serve.answers import EXTENSIONS, REASONS, finished, unavailable_reason
from specgen.serve.batcher import QueueFull, QueueTimeout, ShuttingDown
from specgen.serve.configs import config_message
from specgen.serve.errors import ProtocolError
from specgen.serve.grpc_limits import MIN_RPCS, bound_send, grpc_options, message_limit
from specgen.serve.grpc_protocol import decode_infer, encode_infer
from specgen.serve.logs import GRPC_CALL, quiet_unsent_answers
from specgen.serve.parameters import check_unload_parameters, from_grpc

if TYPE_CHECKING:
    from specgen.serve.control import ModelControl
    from specgen.serve.limits import ByteBudget, DecodeGate
    from specgen.serve.metrics import ServerMetrics
    from specgen.serve.options import ServeOptions
    from specgen.serve.registry import Registry, Version
    from specgen.serve.stats import VersionStats

log = logging.getLogger("specgen.serve")
SERVICE = "inference.GRPCInferenceService"


class Service(Protocol):
    """What gRPC uses of the server's one Service (serve/service.py), which HTTP shares: typed here by its shape, so
    this module needs nothing of the HTTP application (service.py starts this module's server, not the reverse)."""

    ready: bool

    @property
    def options(self) -> ServeOptions: ...
    @property
    def metrics(self) -> ServerMetrics: ...
    @property
    def budget(self) -> ByteBudget: ...
    @property
    def registry(self) -> Registry: ...
    @property
    def control(self) -> ModelControl: ...
    @property
    def gate(self) -> DecodeGate: ...
    @property
    def models(self) -> dict[str, dict[int, Version]]: ...
    def metadata(self, name: str, version: str | None) -> dict[str, Any]: ...
    def statistics(self, name: str | None, version: str | None) -> list[VersionStats]: ...


CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND, 408: grpc.StatusCode.DEADLINE_EXCEEDED,
         413: grpc.StatusCode.RESOURCE_EXHAUSTED, 415: grpc.StatusCode.INVALID_ARGUMENT,
         500: grpc.StatusCode.INTERNAL, 503: grpc.StatusCode.RESOURCE_EXHAUSTED, 504: grpc.StatusCode.DEADLINE_EXCEEDED}


class GrpcStartError(SpecgenError, OSError):
    """The gRPC server could not start (its address cannot be bound); the message says why."""


def _check_bindable(host: str, port: int) -> None:
    """Raise GrpcStartError with the system's reason when `host:port` cannot be bound (gRPC's own error says less)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise GrpcStartError(f"gRPC cannot listen on {host}:{port}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise GrpcStartError(f"gRPC cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def start_grpc(service: Service) -> tuple[Any, int]:
    """Start the gRPC server of `service` on the running loop; (the server, its port)."""
    options = service.options
    host, port = options.grpc_host, options.grpc_port or 0
    if port and not options.grpc_reuse_port:
        _check_bindable(host, port)
    limit = message_limit(options, service.models)
    rpcs = options.grpc_max_rpcs or max(MIN_RPCS, min(options.buffer_bytes // limit, options.max_connections))
    quiet_unsent_answers()  # a client's deadline is one info line at most, never grpc.aio's traceback
    server = grpc.aio.server(options=grpc_options(options, limit), maximum_concurrent_rpcs=rpcs)
    server.add_generic_rpc_handlers((Servicer(service).handler(),))
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        raise GrpcStartError(f"gRPC cannot listen on {host}:{port}: {exc}") from None
    await server.start()
    log.info("gRPC serving", extra={"fields": {"event": "grpc_started", "address": f"{host}:{bound}",
                                                "max_message_bytes": limit, "max_rpcs": rpcs,
                                                "max_streams": options.grpc_max_streams}})
    return server, bound


def _at_deadline(budget: float, remaining: float | None) -> bool:
    """A guess: whether a cancelled call was cancelled by its deadline rather than by its client.

    gRPC does not tell a server why a call ended: a client whose deadline passes and a client that cancels both send
    RST_STREAM with the same CANCEL code, and grpc.aio only cancels the handler's task (`context.code()` is what the
    servicer set, never the cause). The server's one clue is its copy of the deadline (`time_remaining()`, from the
    grpc-timeout header), which runs later than the client's by the header's transit and its rounding up to the
    header's unit (1 ms under 1 s, 10 ms under 10 s, 100 ms under 100 s, ...; measured up to one unit late). So a
    call cancelled with at most twice that unit plus 20 ms (transit and scheduling under load) left counts as past
    its deadline; one cancelled earlier, as cancelled by its client. A client that cancels within that window of
    its own deadline is counted as a deadline (docs/serve.md, gRPC)."""
    if remaining is None:
        return True
    unit = 0.001 if budget < 1 else 10.0 ** math.floor(math.log10(budget)) / 100
    return remaining <= 0.02 + 2 * unit


class Servicer:
    """The GRPCInferenceService methods over a Service."""

    def __init__(self, service: Service):
        self.service = service

    def handler(self) -> grpc.GenericRpcHandler:
        s = service_pb2
        methods = {
            "ServerLive": (self.server_live, s.ServerLiveRequest, s.ServerLiveResponse),
            "ServerReady": (self.server_ready, s.ServerReadyRequest, s.ServerReadyResponse),
            "ModelReady": (self.model_ready, s.ModelReadyRequest, s.ModelReadyResponse),
            "ServerMetadata": (self.server_metadata, s.ServerMetadataRequest, s.ServerMetadataResponse),
            "ModelMetadata": (self.model_metadata, s.ModelMetadataRequest, s.ModelMetadataResponse),
            "ModelConfig": (self.model_config, s.ModelConfigRequest, s.ModelConfigResponse),
            "ModelStatistics": (self.model_statistics, s.ModelStatisticsRequest, s.ModelStatisticsResponse),
            "ModelInfer": (self.model_infer, s.ModelInferRequest, s.ModelInferResponse),
            "RepositoryIndex": (self.repository_index, s.RepositoryIndexRequest, s.RepositoryIndexResponse),
            "RepositoryModelLoad": (self.repository_load, s.RepositoryModelLoadRequest, s.RepositoryModelLoadResponse),
            "RepositoryModelUnload": (self.repository_unload, s.RepositoryModelUnloadRequest,
                                      s.RepositoryModelUnloadResponse),
        }
        # No request_deserializer: a message that does not parse would fail inside gRPC (UNKNOWN, and a traceback
        # in the log); the method parses the bytes itself and answers INVALID_ARGUMENT.
        return grpc.method_handlers_generic_handler(SERVICE, {
            name: grpc.unary_unary_rpc_method_handler(self._guarded(name, fn, request, response),
                                                      response_serializer=response.SerializeToString)
            for name, (fn, request, response) in methods.items()})

    def _guarded(self, name: str, fn: Any, request_type: Any, response: Any) -> Any:
        """A method that parses its request, answers a ProtocolError with its status code and a bug with INTERNAL:
        it never raises. Its answer must be sent within send_timeout (grpc_limits.bound_send)."""
        send_timeout = self.service.options.send_timeout
        async def method(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                return await answer(raw, context)
            finally:
                bound_send(send_timeout)

        async def answer(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                request = request_type.FromString(raw)
            except DecodeError as exc:
                message = f"{name}: the request is not an inference.{request_type.__name__} message ({exc})"
                log.info("gRPC message refused", extra={"fields": {"event": "invalid_message", "protocol": "grpc",
                                                                   "method": name, "error": message}})
                context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
                context.set_details(message)
                return response()
            try:
                return await fn(request, context)
            except ProtocolError as exc:
                code = getattr(grpc.StatusCode, exc.grpc_code) if exc.grpc_code else CODES.get(exc.status,
                                                                                           grpc.StatusCode.UNKNOWN)
                context.set_code(code)
                context.set_details(exc.message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug: answered, and logged with its traceback
                log.error("gRPC method failed", exc_info=True, extra={"fields": {"event": "error", "protocol": "grpc"}})
                context.set_code(grpc.StatusCode.INTERNAL)
                context.set_details(f"the server failed on this call ({type(exc).__name__})")
            return response()

        return method

    # health and metadata

    async def server_live(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=True)

    async def server_ready(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerReadyResponse(ready=self.service.ready)

    async def model_ready(self, request: Any, context: Any) -> Any:
        try:
            self.service.registry.lookup(request.name, request.version)
        except ProtocolError:
            return service_pb2.ModelReadyResponse(ready=False)
        return service_pb2.ModelReadyResponse(ready=self.service.ready)

    async def server_metadata(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerMetadataResponse(name="specgen", version=__version__, extensions=EXTENSIONS)

    async def model_metadata(self, request: Any, context: Any) -> Any:
        meta = self.service.metadata(request.name, request.version)
        response = service_pb2.ModelMetadataResponse(name=meta["name"], versions=meta["versions"],
                                                     platform=meta["platform"])
        for kind in ("inputs", "outputs"):
            for tensor in meta[kind]:
                getattr(response, kind).add(name=tensor["name"], datatype=tensor["datatype"], shape=tensor["shape"])
        return response

    async def model_config(self, request: Any, context: Any) -> Any:
        model = self.service.registry.lookup(request.name, request.version).model
        return service_pb2.ModelConfigResponse(config=config_message(model))

    async def model_statistics(self, request: Any, context: Any) -> Any:
        found = self.service.statistics(request.name or None, request.version or None)
        return json_format.ParseDict({"model_stats": [stats.as_json() for stats in found]},
                                     service_pb2.ModelStatisticsResponse())

    # repository

    async def repository_index(self, request: Any, context: Any) -> Any:
        response = service_pb2.RepositoryIndexResponse()
        for entry in self.service.control.index(request.ready):
            response.models.add(**entry)
        return response

    async def repository_load(self, request: Any, context: Any) -> Any:
        overrides = sorted(k for k in request.parameters if k == "config" or k.startswith("file:"))
        if overrides:
            raise ProtocolError(f"load parameters {overrides} are not supported: this server loads the model as the "
                                "repository holds it (write config.pbtxt and the version folder, then load)")
        await self.service.control.load(request.model_name)
        return service_pb2.RepositoryModelLoadResponse()

    async def repository_unload(self, request: Any, context: Any) -> Any:
        check_unload_parameters(from_grpc(request.parameters))
        await self.service.control.unload(request.model_name)
        return service_pb2.RepositoryModelUnloadResponse()

    # inference

    async def model_infer(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        started = time.perf_counter_ns()
        series = self.service.metrics.model(request.model_name)
        outcome: dict[str, Any] = {"status": 500, "reason": "cancelled", "message": None, "id": request.id or None,
                                   "rows": 0, "served": None, "code": None, "model": series.model}
        budget = context.time_remaining()  # None: the call has no deadline
        GRPC_CALL.set(outcome)  # this task's call, should grpc.aio fail to send its answer (logs.py UnsentAnswers)
        if series.known:
            series.in_flight.inc()
        try:
            response = await self._infer(request, context, outcome)
            if outcome["status"] == 200 and budget is not None and (context.time_remaining() or 0) <= 0:
                response = self._too_late(context, outcome)
            return response
        except asyncio.CancelledError:  # the deadline passed, or the client cancelled: gRPC answers it
            late = budget is not None and _at_deadline(budget, context.time_remaining())
            outcome.update(status=504 if late else 499, reason="deadline" if late else "cancelled",
                           code="DEADLINE_EXCEEDED" if late else "CANCELLED",
                           message="the call's deadline passed before its answer" if late
                           else "the client cancelled the call")
            raise
        finally:
            finished(series, outcome, time.perf_counter_ns() - started, "grpc")

    @staticmethod
    def _too_late(context: grpc.aio.ServicerContext[Any, Any], outcome: dict[str, Any]) -> Any:
        """The answer is ready but the call's deadline has passed: core has ended the call (or is about to), so the
        answer would not be sent; counted and answered as a deadline, not as a success nobody received."""
        message = "the call's deadline passed before its answer could be sent"
        outcome.update(status=504, reason="deadline", code="DEADLINE_EXCEEDED", message=message)
        context.set_code(grpc.StatusCode.DEADLINE_EXCEEDED)
        context.set_details(message)
        return service_pb2.ModelInferResponse()

    async def _infer(self, request: Any, context: grpc.aio.ServicerContext[Any, Any], outcome: dict[str, Any]) -> Any:
        service = self.service
        code = grpc.StatusCode.INTERNAL
        try:
            with service.registry.use(request.model_name, request.model_version) as served:
                outcome["served"] = served
                size = request.ByteSize()
                async with service.budget.hold(size):
                    checked = await service.gate.run(size, decode_infer, request, served.model.config)
                outcome.update(id=checked.id, rows=checked.rows)
                model = served.model
                if (problem := model.out_of_range(checked.inputs)) is not None:
                    raise ProtocolError(problem)
                remaining = context.time_remaining()
                if remaining is not None and remaining <= 0:
                    raise ProtocolError("the call's deadline passed before its request could be queued", 504)
                job = served.batcher.submit(checked.inputs, checked.rows, checked.id, checked.timeout_us)
                outcome["ticket"] = job  # admitted: from here on it counts in the version's statistics (answers.py)
                outputs = await job
                response = encode_infer(service_pb2.ModelInferResponse, model.config, model.version, checked, outputs)
            outcome.update(status=200, reason=None)
            return response
        except ProtocolError as exc:
            code = getattr(grpc.StatusCode, exc.grpc_code) if exc.grpc_code else CODES.get(exc.status, code)
            reason = "deadline" if exc.status == 504 else REASONS.get(exc.status, "invalid")
            outcome.update(status=exc.status, reason=reason, message=exc.message)
        except (QueueFull, ShuttingDown, QueueTimeout) as exc:  # UNAVAILABLE, as Triton answers all three
            code = grpc.StatusCode.UNAVAILABLE
            outcome.update(status=503, reason=unavailable_reason(exc), message=str(exc))
        except Exception as exc:  # onnxruntime failed (values it refuses are a ProtocolError: models.py)
            outcome.update(status=500, reason="inference", message=f"inference failed: {exc}")
        outcome["code"] = code.name
        context.set_code(code)
        context.set_details(outcome["message"])
        return service_pb2.ModelInferResponse()
