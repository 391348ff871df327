"""What both protocols answer alike: the server's extensions, the reasons of failed requests, a model's
configuration as Triton writes it, and the bookkeeping of an answered inference (metrics, statistics, its log line).

Apart from app.py (HTTP) so that grpc_server.py uses the same without importing the HTTP application.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from specgen.serve.models import ServedModel

log = logging.getLogger("specgen.serve")
EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics", "model_repository"]
REASONS = {404: "not_found", 408: "timeout", 413: "too_large", 500: "internal", 503: "overloaded"}


def config_json(model: ServedModel) -> dict[str, Any]:
    """The model configuration as Triton's model_configuration extension writes it (the fields served)."""
    config = model.config

    def tensors(items: Sequence[Any]) -> list[dict[str, Any]]:
        return [{"name": t.name, "data_type": f"TYPE_{t.datatype}", "dims": list(t.dims)}
                | ({"reshape": {"shape": list(t.reshape)}} if t.reshape is not None else {}) for t in items]

    policy = config.version_policy
    choice: dict[str, Any] = ({"latest": {"num_versions": policy.num_versions}} if policy.kind == "latest"
              else {"all": {}} if policy.kind == "all" else {"specific": {"versions": list(policy.versions)}})
    result: dict[str, Any] = {"name": model.name, "platform": "onnxruntime_onnx", "backend": "onnxruntime",
                              "version_policy": choice, "max_batch_size": config.max_batch_size,
                              "input": tensors(config.inputs), "output": tensors(config.outputs)}
    if config.dynamic_batching:
        result["dynamic_batching"] = {"preferred_batch_size": list(config.preferred_batch_sizes),
                                      "max_queue_delay_microseconds": config.max_queue_delay_us}
    return result


def finished(series: Any, outcome: dict[str, Any], ns: int, protocol: str) -> None:
    """An inference request answered (or abandoned): metrics, statistics and its log line."""
    status = outcome["status"]
    series.answered(status, ns / 1e9, outcome["reason"], protocol)
    if series.known:
        series.in_flight.dec()
    served = outcome["served"]
    if served is not None:
        served.stats.answered(status == 200, ns)
    level = logging.DEBUG if status == 200 else logging.ERROR if status == 500 else logging.INFO
    if log.isEnabledFor(level):  # one line per failed request; answered ones are in their batch's line, or at debug
        fields = {"event": "infer", "protocol": protocol, "model": series.model,
                  "version": served.model.version if served is not None else None, "id": outcome["id"],
                  "status": status, "rows": outcome["rows"], "latency_ms": round(ns / 1e6, 3)}
        if outcome.get("code") is not None:
            fields["code"] = outcome["code"]
        if outcome["message"] is not None:
            fields["error"] = outcome["message"]
        log.log(level, "infer", extra={"fields": fields})
