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
413 (body too large), 503 (queue full or draining) or 500 (onnxruntime failed on this request).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from specgen import __version__
from specgen.serve.batcher import Batcher, QueueFull, ShuttingDown
from specgen.serve.metrics import ServerMetrics
from specgen.serve.models import ServedModel
from specgen.serve.protocol import HEADER_LENGTH, JSON_TYPE, ProtocolError, decode_request, dumps, encode_response, error_body

log = logging.getLogger("specgen.serve")
OFFLOAD_BYTES = 1 << 20  # bodies above this are decoded and encoded in a thread, off the event loop
EXTENSIONS = ["binary_tensor_data", "model_configuration"]


@dataclass(frozen=True)
class ServeOptions:
    """Server-wide settings; `queue_size` None: the config's default_queue_policy.max_queue_size, else 4 x max_batch_size."""

    queue_size: int | None = None
    batching: bool = True
    max_body_bytes: int = 64 << 20


def queue_size_of(model: ServedModel, options: ServeOptions) -> int:
    if options.queue_size is not None:
        return options.queue_size
    return model.config.max_queue_size or 4 * max(model.config.max_batch_size, 1)


def _json(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status, media_type=JSON_TYPE)


def _error(status: int, message: str) -> Response:
    headers = {"retry-after": "1"} if status == 503 else None  # a full queue or a draining server: try again shortly
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


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise ProtocolError(f"Content-Encoding: received '{encoding}', expected gzip, deflate or none", 415)
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ProtocolError(f"the body is not valid {encoding} data: {exc}") from None
    if len(data) > limit:
        raise ProtocolError(f"the decompressed body exceeds {limit} bytes", 413)
    if not inflater.eof:
        raise ProtocolError(f"the {encoding} body is truncated")
    return data


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

    async def _body(self, request: Request) -> bytes:
        limit = self.options.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise ProtocolError(f"the request body has {declared} bytes; the limit is {limit}", 413)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ProtocolError(f"the request body exceeds {limit} bytes", 413)
            chunks.append(chunk)
        return _decompress(b"".join(chunks), request.headers.get("content-encoding", "").strip().lower(), limit)

    async def infer(self, request: Request) -> Response:
        started = time.perf_counter()
        name = request.path_params["name"]
        series = self.metrics.model(name)
        status, reason, message, request_id, rows = 500, "cancelled", None, None, 0
        if series.known:
            series.in_flight.inc()
        try:
            model = self.model(request)
            body = await self._body(request)
            header_length = request.headers.get(HEADER_LENGTH)
            if len(body) > OFFLOAD_BYTES:
                checked = await asyncio.to_thread(decode_request, body, header_length, model.config)
            else:
                checked = decode_request(body, header_length, model.config)
            request_id, rows = checked.id, checked.rows
            outputs = await self.batchers[model.name].submit(checked.inputs, checked.rows, checked.id)
            content, headers = encode_response(model.config, model.version, checked, outputs)
            status, reason = 200, None
            return Response(content, 200, headers=headers)
        except ProtocolError as exc:
            status, message = exc.status, exc.message
            reason = {404: "not_found", 413: "too_large", 415: "invalid"}.get(exc.status, "invalid")
        except QueueFull as exc:
            status, reason, message = 503, "queue_full", str(exc)
        except ShuttingDown as exc:
            status, reason, message = 503, "shutting_down", str(exc)
        except Exception as exc:
            status, reason, message = 500, "inference", f"inference failed: {exc}"
            log.exception("inference failed", extra={"fields": {"event": "error", "model": name}})
        finally:
            seconds = time.perf_counter() - started
            series.answered(status, seconds, reason)
            if series.known:
                series.in_flight.dec()
            # One line per failed request; answered ones are in their batch's line (per request at debug level).
            level = logging.DEBUG if status == 200 else logging.INFO
            if log.isEnabledFor(level):
                fields = {"event": "infer", "model": name, "id": request_id, "status": status, "rows": rows,
                          "latency_ms": round(seconds * 1000, 3)}
                if message is not None:
                    fields["error"] = message
                log.log(level, "infer", extra={"fields": fields})
        return _error(status, message or "")


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
