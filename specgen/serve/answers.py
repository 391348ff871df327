"""What both protocols answer alike: the server's extensions, the reasons of failed requests, and the bookkeeping of
an answered inference (metrics, statistics, its log line). A model's configuration is configs.py's.

Apart from app.py (HTTP) so that grpc_server.py uses the same without importing the HTTP application.
"""

from __future__ import annotations

import logging
from typing import Any

from specgen.serve.batcher import QueueFull, ShuttingDown
from specgen.serve.logs import client_text

log = logging.getLogger("specgen.serve")
EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics", "model_repository"]
REASONS = {404: "not_found", 408: "timeout", 413: "too_large", 500: "internal", 503: "overloaded"}


def unavailable_reason(exc: Exception) -> str:
    """The metrics' reason for a 503 / UNAVAILABLE from the batcher: queue full, draining, or the request's own
    timeout passed in the queue (counted with the gRPC deadlines: the request's time ran out before it ran)."""
    if isinstance(exc, QueueFull):
        return "queue_full"
    return "shutting_down" if isinstance(exc, ShuttingDown) else "deadline"


def finished(series: Any, outcome: dict[str, Any], ns: int, protocol: str) -> None:
    """An inference request answered (or abandoned): metrics, statistics and its log line."""
    status = outcome["status"]
    series.answered(status, ns / 1e9, outcome["reason"], protocol)
    if series.known:
        series.in_flight.dec()
    served = outcome["served"]
    # Statistics count the requests admitted to a version's queue, as Triton's do: one refused before (a bad request,
    # a full queue, a draining server) never reached the model, and Triton reports no statistics for it (a request
    # that fails InferenceRequest::Run's enqueue records none). The metrics above still count every failure.
    # An admitted request's part of its run (its ticket's `run`) is counted only if it is answered 200 (stats.py).
    ticket = outcome.get("ticket")
    if served is not None and ticket is not None:
        served.stats.answered(status == 200, ns, ticket.run)
    level = logging.DEBUG if status == 200 else logging.ERROR if status == 500 else logging.INFO
    if log.isEnabledFor(level):  # one line per failed request; answered ones are in their batch's line, or at debug
        fields = {"event": "infer", "protocol": protocol, "model": series.model,
                  "version": served.model.version if served is not None else None, "id": client_text(outcome["id"]),
                  "status": status, "rows": outcome["rows"], "latency_ms": round(ns / 1e6, 3)}
        if outcome.get("code") is not None:
            fields["code"] = outcome["code"]
        if outcome["message"] is not None:
            fields["error"] = outcome["message"]
        log.log(level, "infer", extra={"fields": fields})
