"""The Starlette application: Open Inference Protocol endpoints, /metrics, and the batchers' lifetime.

Endpoints (KServe v2 over HTTP/JSON, as Triton serves them):

    GET  /v2/health/live                       200 while the process serves HTTP
    GET  /v2/health/ready                      200 when every model is loaded and the server is not draining, else 400
    GET  /v2                                   server metadata
    GET  /v2/models/{name}[/versions/{v}]      model metadata (+ the onnxruntime provider in use)
    GET  /v2/models/{name}[/versions/{v}]/ready
    GET  /v2/models/{name}[/versions/{v}]/config   the model configuration as JSON (Triton's extension)
    POST /v2/models/{name}[/versions/{v}]/infer
    GET  /metrics                              Prometheus text format

Errors are `{"error": message}` with 400 (bad request), 404 (unknown model, version or path),
408 (the body did not arrive in time), 413 (body larger than the model can accept), 415,
503 (queue full, body budget full, or draining) or 500 (onnxruntime failed on this request).
A client that leaves before sending its whole body is counted with status 499 (`cancelled`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from specgen import __version__
from specgen.serve.batcher import Batcher, QueueFull, ShuttingDown
from specgen.serve.errors import ProtocolError
from specgen.serve.limits import ByteBudget, DecodeGate, body_limit, check_declared, declared_length, decompress, read_body
from specgen.serve.metrics import ServerMetrics
from specgen.serve.models import ServedModel
from specgen.serve.protocol import HEADER_LENGTH, JSON_TYPE, InferRequest, decode_request, dumps, encode_response, error_body

log = logging.getLogger("specgen.serve")
EXTENSIONS = ["binary_tensor_data", "model_configuration"]
REASONS = {404: "not_found", 408: "timeout", 413: "too_large", 500: "internal", 503: "overloaded"}
CANCELLED = 499  # nginx's "client closed request": the metrics' and logs' status for a client that left mid-body


@dataclass(frozen=True)
class ServeOptions:
    """Server-wide settings; `queue_size` None: the config's default_queue_policy.max_queue_size, else 4 x max_batch_size.

    `max_body_bytes` caps every model's body bound (see limits.py); `buffer_bytes` bounds the bytes
    of all bodies being read or decoded at once; `decode_threads` the large bodies decoded at once.
    `header_timeout` / `max_connections`, `max_header_bytes` / `max_headers` (request line and headers; 431
    past them) and `send_timeout` (a client that reads none of its answers for that long is disconnected)
    are enforced by the connection protocol (connection.py, server.py).
    """

    queue_size: int | None = None
    batching: bool = True
    max_body_bytes: int = 64 << 20
    buffer_bytes: int = 256 << 20
    decode_threads: int = 2
    body_timeout: float = 30.0
    header_timeout: float = 10.0
    max_connections: int = 1000
    max_header_bytes: int = 16 << 10
    max_headers: int = 100
    send_timeout: float = 10.0


def queue_size_of(model: ServedModel, options: ServeOptions) -> int:
    if options.queue_size is not None:
        return options.queue_size
    return model.config.max_queue_size or 4 * max(model.config.max_batch_size, 1)


def _json(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status, media_type=JSON_TYPE)


def _error(status: int, message: str, close: bool = False) -> Response:
    headers = {"retry-after": "1"} if status == 503 else {}  # a full queue or a draining server: try again shortly
    if close:  # the body is left unread: closing beats reading and discarding up to 64 MiB
        headers["connection"] = "close"
    return Response(error_body(message), status, headers=headers, media_type=JSON_TYPE)


def _config_json(model: ServedModel) -> dict[str, Any]:
    config = model.config

    def tensors(items: Sequence[Any]) -> list[dict[str, Any]]:
        return [{"name": t.name, "data_type": f"TYPE_{t.datatype}", "dims": list(t.dims)}
                | ({"reshape": {"shape": list(t.reshape)}} if t.reshape is not None else {}) for t in items]

    result: dict[str, Any] = {"name": model.name, "platform": "onnxruntime_onnx", "backend": "onnxruntime",
                              "max_batch_size": config.max_batch_size, "input": tensors(config.inputs),
                              "output": tensors(config.outputs)}
    if config.dynamic_batching:
        result["dynamic_batching"] = {"preferred_batch_size": list(config.preferred_batch_sizes),
                                      "max_queue_delay_microseconds": config.max_queue_delay_us}
    return result


class Service:
    """The models, their batchers and metrics, and the HTTP handlers over them."""

    def __init__(self, models: Sequence[ServedModel], options: ServeOptions):
        self.models = {m.name: m for m in models}
        self.options = options
        self.metrics = ServerMetrics()
        self.ready = False
        self.batchers = {
            m.name: Batcher(m.name, m.run, max_batch_size=m.config.max_batch_size,
                            max_delay=m.config.max_queue_delay_us / 1e6, queue_size=queue_size_of(m, options),
                            batching=options.batching and m.config.dynamic_batching, observer=self.metrics)
            for m in models}
        for m in models:
            self.metrics.model_loaded(m.name, m.version, m.provider)
        self.limits = {m.name: body_limit(m.config, options.max_body_bytes) for m in models}
        largest = max((limit.bound(True) for limit in self.limits.values()), default=0)
        self.budget = ByteBudget(max(options.buffer_bytes, largest))  # one largest body always fits
        self.gate = DecodeGate(options.decode_threads)

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        for batcher in self.batchers.values():
            batcher.start()
        self.ready = True
        for model in self.models.values():
            batcher = self.batchers[model.name]
            log.info("serving model", extra={"fields": {
                "event": "model_ready", "model": model.name, "version": model.version, "provider": model.provider,
                "max_batch_size": model.config.max_batch_size, "dynamic_batching": batcher.batching,
                "max_queue_delay_us": model.config.max_queue_delay_us, "queue_size": batcher.queue_size}})
        try:
            yield
        finally:
            self.ready = False
            await asyncio.gather(*(b.close() for b in self.batchers.values()))
            log.info("batchers drained", extra={"fields": {"event": "drained"}})

    def model(self, request: Request) -> ServedModel:
        name = request.path_params["name"]
        model = self.models.get(name)
        if model is None:
            raise ProtocolError(f"unknown model '{name}'; this server serves {sorted(self.models)}", 404)
        version = request.path_params.get("version")
        if version is not None and version != str(model.version):
            raise ProtocolError(f"model '{name}' has no version '{version}'; the served version is '{model.version}'", 404)
        return model

    async def live(self, request: Request) -> Response:
        return Response(status_code=200)

    async def ready_check(self, request: Request) -> Response:
        return Response(status_code=200 if self.ready else 400)

    async def server_metadata(self, request: Request) -> Response:
        return _json({"name": "specgen", "version": __version__, "extensions": EXTENSIONS})

    async def model_metadata(self, request: Request) -> Response:
        try:
            return _json(self.model(request).metadata())
        except ProtocolError as exc:
            return _error(exc.status, exc.message)

    async def model_ready(self, request: Request) -> Response:
        try:
            self.model(request)
        except ProtocolError as exc:
            return _error(exc.status, exc.message)
        return Response(status_code=200 if self.ready else 400)

    async def model_config(self, request: Request) -> Response:
        try:
            return _json(_config_json(self.model(request)))
        except ProtocolError as exc:
            return _error(exc.status, exc.message)

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=self.metrics.content_type)

    async def _decoded(self, request: Request, model: ServedModel) -> InferRequest:
        """Read the body within its bound, budget and deadline, then decode it (large bodies in a thread)."""
        header_length = request.headers.get(HEADER_LENGTH)
        declared = declared_length(request.headers.get("content-length"))
        encoding = request.headers.get("content-encoding", "").strip().lower()
        bound = check_declared(declared, header_length, self.limits[model.name])
        plain = encoding in ("", "identity")  # a compressed body may inflate to the bound
        async with self.budget.hold(declared if plain and declared is not None else bound):
            try:
                async with asyncio.timeout(self.options.body_timeout):
                    body = await read_body(request.stream(), bound)
            except TimeoutError:
                raise ProtocolError(f"the request body did not arrive within {self.options.body_timeout:g} s",
                                    408, close=True) from None
            body = decompress(body, encoding, bound)
            try:
                return await self.gate.run(len(body), decode_request, body, header_length, model.config)
            except ProtocolError:
                raise
            except Exception as exc:  # a bug: the request is still answered, and logged with its traceback
                log.error("cannot decode request", exc_info=True, extra={"fields": {"event": "error", "model": model.name}})
                raise ProtocolError(f"the server failed to read this request ({type(exc).__name__})", 500) from None

    async def _answer(self, request: Request, outcome: dict[str, Any]) -> Response:
        """The response to an inference request; `outcome` gets its status, reason, message, id and rows."""
        try:
            model = self.model(request)
            checked = await self._decoded(request, model)
            outcome.update(id=checked.id, rows=checked.rows)
            if (too_long := model.too_long(checked.inputs)) is not None:
                raise ProtocolError(too_long)
            outputs = await self.batchers[model.name].submit(checked.inputs, checked.rows, checked.id)
            content, headers = encode_response(model.config, model.version, checked, outputs)
            outcome.update(status=200, reason=None)
            return Response(content, 200, headers=headers)
        except ProtocolError as exc:
            outcome.update(status=exc.status, reason=REASONS.get(exc.status, "invalid"), message=exc.message)
            return _error(exc.status, exc.message, exc.close)
        except ClientDisconnect:  # nobody to answer: counted and logged, never a 500
            outcome.update(status=CANCELLED, reason="cancelled", message="the client left before sending the whole body")
        except (QueueFull, ShuttingDown) as exc:
            reason = "queue_full" if isinstance(exc, QueueFull) else "shutting_down"
            outcome.update(status=503, reason=reason, message=str(exc))
        except Exception as exc:  # onnxruntime refused this request's values
            outcome.update(status=500, reason="inference", message=f"inference failed: {exc}")
        return _error(min(outcome["status"], 503), outcome["message"])

    async def infer(self, request: Request) -> Response:
        started = time.perf_counter()
        name = request.path_params["name"]
        series = self.metrics.model(name)
        outcome: dict[str, Any] = {"status": 500, "reason": "cancelled", "message": None, "id": None, "rows": 0}
        if series.known:
            series.in_flight.inc()
        try:
            return await self._answer(request, outcome)
        finally:
            seconds = time.perf_counter() - started
            series.answered(outcome["status"], seconds, outcome["reason"])
            if series.known:
                series.in_flight.dec()
            _log_infer(name, outcome, seconds)


def _log_infer(name: str, outcome: dict[str, Any], seconds: float) -> None:
    """One line per failed request (errors at error level); answered ones are in their batch's line, or at debug."""
    status = outcome["status"]
    level = logging.DEBUG if status == 200 else logging.ERROR if status == 500 else logging.INFO
    if log.isEnabledFor(level):
        fields = {"event": "infer", "model": name, "id": outcome["id"], "status": status, "rows": outcome["rows"],
                  "latency_ms": round(seconds * 1000, 3)}
        if outcome["message"] is not None:
            fields["error"] = outcome["message"]
        log.log(level, "infer", extra={"fields": fields})


async def _http_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        return _error(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}")
    return _error(500, "internal server error")


def create_app(models: Sequence[ServedModel], options: ServeOptions | None = None) -> Starlette:
    """The ASGI application serving `models` (loaded with `specgen.serve.models.load_repository`)."""
    service = Service(models, options or ServeOptions())
    prefixes = ("/v2/models/{name}", "/v2/models/{name}/versions/{version}")
    routes = [Route(prefix + "/infer", service.infer, methods=["POST"]) for prefix in prefixes]  # the hot path first
    routes += [
        Route("/v2/health/live", service.live, methods=["GET"]),
        Route("/v2/health/ready", service.ready_check, methods=["GET"]),
        Route("/v2", service.server_metadata, methods=["GET"]),
        Route("/metrics", service.metrics_text, methods=["GET"]),
    ]
    for prefix in prefixes:
        routes += [
            Route(prefix, service.model_metadata, methods=["GET"]),
            Route(prefix + "/ready", service.model_ready, methods=["GET"]),
            Route(prefix + "/config", service.model_config, methods=["GET"]),
        ]
    app = Starlette(routes=routes, lifespan=service.lifespan, exception_handlers={HTTPException: _http_error})
    app.state.service = service
    return app
