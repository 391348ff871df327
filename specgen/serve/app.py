"""The Starlette application: Open Inference Protocol endpoints and /metrics over the Service (service.py).

Endpoints (KServe v2 over HTTP/JSON, as Triton serves them):

    GET  /v2/health/live                       200 while the process serves HTTP
    GET  /v2/health/ready                      200 when the models are loaded and the server is not draining, else 400
    GET  /v2                                   server metadata
    GET  /v2/models/{name}[/versions/{v}]      model metadata (+ the onnxruntime provider in use)
    GET  /v2/models/{name}[/versions/{v}]/ready
    GET  /v2/models/{name}[/versions/{v}]/config   the model configuration as JSON (Triton's extension)
    GET  /v2/models[/{name}[/versions/{v}]]/stats  inference statistics (Triton's statistics extension)
    POST /v2/models/{name}[/versions/{v}]/infer
    POST /v2/repository/index                  the repository's models and their state (Triton's repository extension)
    POST /v2/repository/models/{name}/load     (re)load a model (--model-control explicit)
    POST /v2/repository/models/{name}/unload
    GET  /metrics                              Prometheus text format

A request without a version gets the model's highest served version. Errors are `{"error": message}`
with 400 (bad request), 404 (unknown model, version or path), 408 (the body did not arrive in time),
413 (body larger than the model can accept), 415, 503 (queue full, body budget full, draining, or the request's
`timeout` passed while it was queued) or
500 (onnxruntime failed on this request). A client that leaves before sending its whole body, or closes
its connection while its request waits for its answer, is counted with status 499 (`cancelled`), as gRPC
counts a call its client cancels; a request whose client has gone is dropped from the queue unrun.

The same Service answers gRPC (grpc_server.py): one set of versions, batchers, limits, metrics,
statistics and logs for both protocols (service.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from specgen import __version__
from specgen.serve.answers import EXTENSIONS, REASONS, finished, unavailable_reason
from specgen.serve.batcher import QueueFull, QueueTimeout, ShuttingDown
from specgen.serve.client_watch import ClientGone, unless_gone
from specgen.serve.configs import config_json
from specgen.serve.control import ModelSource
from specgen.serve.errors import MALFORMED, SHUT_DOWN, ProtocolError
from specgen.serve.limits import ENVELOPE_BYTES, check_declared, declared_length, decompress, read_body
from specgen.serve.models import ServedModel
from specgen.serve.options import ServeOptions
from specgen.serve.parameters import BOOL, check_unload_parameters, check_value
from specgen.serve.protocol import (
    HEADER_LENGTH,
    JSON_TYPE,
    InferRequest,
    decode_request,
    dumps,
    encode_response,
    error_body,
    json_only,
    too_deep,
)
from specgen.serve.registry import Version
from specgen.serve.service import Service

log = logging.getLogger("specgen.serve")
CANCELLED = 499  # nginx's "client closed request": the metrics' and logs' status for a client that left


def _json(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status, media_type=JSON_TYPE)


def _error(status: int, message: str, close: bool = False) -> Response:
    headers = {"retry-after": "1"} if status == 503 else {}  # a full queue or a draining server: try again shortly
    if close:  # the body is left unread: closing beats reading and discarding up to 64 MiB
        headers["connection"] = "close"
    return Response(error_body(message), status, headers=headers, media_type=JSON_TYPE)


class HttpService(Service):
    """The Service with its HTTP handlers (create_app routes to them)."""

    async def live(self, request: Request) -> Response:
        return Response(status_code=200)

    async def ready_check(self, request: Request) -> Response:
        return Response(status_code=200 if self.ready else 400)

    async def server_metadata(self, request: Request) -> Response:
        return _json({"name": "specgen", "version": __version__, "extensions": EXTENSIONS})

    async def model_metadata(self, request: Request) -> Response:
        try:
            return _json(self.metadata(request.path_params["name"], request.path_params.get("version")))
        except ProtocolError as exc:
            return _error(exc.status, exc.message)

    async def model_ready(self, request: Request) -> Response:
        try:
            self.registry.lookup(request.path_params["name"], request.path_params.get("version"))
        except ProtocolError as exc:
            return _error(exc.status, exc.message)
        return Response(status_code=200 if self.ready else 400)

    async def model_config(self, request: Request) -> Response:
        try:
            return _json(config_json(self.registry.lookup(request.path_params["name"],
                                                          request.path_params.get("version")).model))
        except ProtocolError as exc:
            return _error(exc.status, exc.message)

    async def model_stats(self, request: Request) -> Response:
        try:
            found = self.statistics(request.path_params.get("name"), request.path_params.get("version"))
        except ProtocolError as exc:
            return _error(exc.status, exc.message)
        return _json({"model_stats": [stats.as_json() for stats in found]})

    async def _small_json(self, request: Request) -> dict[str, Any]:
        """The optional JSON object body of a repository request (at most 64 KiB, within the body deadline)."""
        try:
            async with asyncio.timeout(self.options.body_timeout):
                body = await read_body(request.stream(), ENVELOPE_BYTES, "a repository request")
        except TimeoutError:
            raise ProtocolError(f"the request body did not arrive within {self.options.body_timeout:g} s", 408,
                                close=True) from None
        except ClientDisconnect:  # its answer reaches no one (a malformed body's 400 went out: connection.py)
            if (shut := request.scope.get(SHUT_DOWN)) is not None:  # answered 503 by connection.py
                raise ProtocolError(shut, 503, close=True) from None
            malformed = request.scope.get(MALFORMED)
            raise ProtocolError(malformed or "the client left before sending the whole body",
                                400 if malformed else CANCELLED, close=True) from None
        if not body.strip():
            return {}
        try:
            value = json.loads(body)
        except RecursionError:
            raise ProtocolError(too_deep(body, "a JSON object of a few fields")) from None
        except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
            raise ProtocolError(f"malformed JSON in the request body: {exc}") from None
        if not isinstance(value, dict):
            raise ProtocolError("the request body must be a JSON object")
        return value

    async def repository_index(self, request: Request) -> Response:
        try:
            body = await self._small_json(request)
            ready = body.get("ready", False)
            check_value("'ready' of a repository index request", ready, BOOL)
        except ProtocolError as exc:
            return _error(exc.status, exc.message, exc.close)
        return _json(self.control.index(ready))

    async def repository_load(self, request: Request) -> Response:
        name = request.path_params["name"]
        try:
            parameters = (await self._small_json(request)).get("parameters") or {}
            check_load_parameters(parameters)
            await self.control.load(name)
        except ProtocolError as exc:
            return _error(exc.status, exc.message, exc.close)
        return Response(status_code=200)

    async def repository_unload(self, request: Request) -> Response:
        try:
            check_unload_parameters((await self._small_json(request)).get("parameters", {}))
            await self.control.unload(request.path_params["name"])
        except ProtocolError as exc:
            return _error(exc.status, exc.message, exc.close)
        return Response(status_code=200)

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=self.metrics.content_type)

    async def _decoded(self, request: Request, served: Version) -> InferRequest:
        """Read the body within its bound, budget and deadline, then decode it (large bodies in a thread)."""
        header_length = json_only(request.headers.get(HEADER_LENGTH))  # 0: a JSON body, bounded as one
        declared = declared_length(request.headers.get("content-length"))
        encoding = request.headers.get("content-encoding", "").strip().lower()
        bound = check_declared(declared, header_length, served.limit)
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
                return await self.gate.run(len(body), decode_request, body, header_length, served.model.config)
            except ProtocolError:
                raise
            except Exception as exc:  # a bug: the request is still answered, and logged with its traceback
                log.error("cannot decode request", exc_info=True,
                          extra={"fields": {"event": "error", "model": served.model.name}})
                raise ProtocolError(f"the server failed to read this request ({type(exc).__name__})", 500) from None

    async def _answer(self, request: Request, outcome: dict[str, Any]) -> Response:
        """The response to an inference request; `outcome` gets its status, reason, message, id, rows and version."""
        try:
            with self.registry.use(request.path_params["name"], request.path_params.get("version")) as served:
                outcome["served"] = served
                checked = await self._decoded(request, served)
                outcome.update(id=checked.id, rows=checked.rows)
                model = served.model
                if (problem := model.out_of_range(checked.inputs)) is not None:
                    raise ProtocolError(problem)
                job = served.batcher.submit(checked.inputs, checked.rows, checked.id, checked.timeout_us)
                outcome["ticket"] = job  # admitted: from here on it counts in the version's statistics (answers.py)
                outputs = await unless_gone(request, job)
                content, headers = encode_response(model.config, model.version, checked, outputs)
            outcome.update(status=200, reason=None)
            return Response(content, 200, headers=headers)
        except ProtocolError as exc:
            outcome.update(status=exc.status, reason=REASONS.get(exc.status, "invalid"), message=exc.message)
            if exc.request_id is not None:  # refused by decode_request once its JSON parsed: logged with its id
                outcome["id"] = exc.request_id
            return _error(exc.status, exc.message, exc.close)
        except ClientDisconnect:  # nobody to answer: counted and logged, never a 500
            if (shut := request.scope.get(SHUT_DOWN)) is not None:  # answered 503 by connection.py at shutdown
                outcome.update(status=503, reason="shutting_down", message=shut)
            elif (malformed := request.scope.get(MALFORMED)) is not None:  # answered 400 by connection.py
                outcome.update(status=400, reason="invalid", message=malformed)
            else:
                outcome.update(status=CANCELLED, reason="cancelled",
                               message="the client left before sending the whole body")
        except ClientGone:  # as a gRPC call cancelled by its client: dropped unrun if still queued, a failure
            outcome.update(status=CANCELLED, reason="cancelled",
                           message="the client closed its connection before its answer")
        except (QueueFull, ShuttingDown, QueueTimeout) as exc:
            outcome.update(status=503, reason=unavailable_reason(exc), message=str(exc))
        except Exception as exc:  # onnxruntime failed (values it refuses are a ProtocolError: models.py)
            outcome.update(status=500, reason="inference", message=f"inference failed: {exc}")
        return _error(min(outcome["status"], 503), outcome["message"])

    async def infer(self, request: Request) -> Response:
        started = time.perf_counter_ns()
        name = request.path_params["name"]
        series = self.metrics.model(name)
        outcome: dict[str, Any] = {"status": 500, "reason": "cancelled", "message": None, "id": None, "rows": 0,
                                   "served": None}
        if series.known:
            series.in_flight.inc()
        try:
            return await self._answer(request, outcome)
        except asyncio.CancelledError:
            # Only uvicorn cancels a request's task: at shutdown, once --graceful-timeout has passed (a client that
            # leaves is a disconnect event, not a cancellation). Answered 503 like a draining server's requests,
            # and one line, where re-raising would print a traceback per request.
            outcome.update(status=503, reason="shutting_down",
                           message="the server stopped before answering: its graceful timeout passed")
            return _error(503, outcome["message"], close=True)
        finally:
            ns = time.perf_counter_ns() - started
            finished(series, outcome, ns, "http")


def check_load_parameters(parameters: Any) -> None:
    """Triton's load may carry a config or model files to write; this server loads what the repository holds."""
    if not isinstance(parameters, dict):
        raise ProtocolError("'parameters' of a load request must be an object")
    overrides = sorted(k for k in parameters if k == "config" or str(k).startswith("file:"))
    if overrides:
        raise ProtocolError(f"load parameters {overrides} are not supported: this server loads the model as the "
                            "repository holds it (write config.pbtxt and the version folder, then load)")


async def _http_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        return _error(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}")
    return _error(500, "internal server error")


def create_app(models: Sequence[ServedModel], options: ServeOptions | None = None,
               source: ModelSource | None = None) -> Starlette:
    """The ASGI application serving `models` (from `specgen.serve.models.load_repository`; several versions of a
    model are several entries). `source` (the repository, provider, threads) is needed for --model-control
    poll / explicit, which load from it while serving."""
    service = HttpService(models, options or ServeOptions(), source)
    prefixes = ("/v2/models/{name}", "/v2/models/{name}/versions/{version}")
    routes = [Route(prefix + "/infer", service.infer, methods=["POST"]) for prefix in prefixes]  # the hot path first
    routes += [
        Route("/v2/health/live", service.live, methods=["GET"]),
        Route("/v2/health/ready", service.ready_check, methods=["GET"]),
        Route("/v2", service.server_metadata, methods=["GET"]),
        Route("/metrics", service.metrics_text, methods=["GET"]),
        Route("/v2/models/stats", service.model_stats, methods=["GET"]),  # before /v2/models/{name}
        Route("/v2/repository/index", service.repository_index, methods=["POST"]),
        Route("/v2/repository/models/{name}/load", service.repository_load, methods=["POST"]),
        Route("/v2/repository/models/{name}/unload", service.repository_unload, methods=["POST"]),
    ]
    for prefix in prefixes:
        routes += [
            Route(prefix, service.model_metadata, methods=["GET"]),
            Route(prefix + "/ready", service.model_ready, methods=["GET"]),
            Route(prefix + "/config", service.model_config, methods=["GET"]),
            Route(prefix + "/stats", service.model_stats, methods=["GET"]),
        ]
    app = Starlette(routes=routes, lifespan=service.lifespan, exception_handlers={HTTPException: _http_error})
    # Starlette's router answers a path with a trailing slash (or without one) with a 307 to the other spelling, built
    # from the request's Host header: an open redirect that a client follows with its body. An unknown path is a 404
    # here, as every other (Triton redirects nothing). HEAD, Starlette's other default, stays: GET's answer, no body.
    app.router.redirect_slashes = False
    app.state.service = service
    return app
