"""Structured logs: one JSON object per line, through the logging module.

Code logs with `extra={"fields": {...}}`; the formatter puts those fields next to the time,
level, logger and message. uvicorn's own messages go through the same formatter.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

GRPC_AIO_LOGGER = "grpc._cython.cygrpc"  # the logger of grpc.aio's server and call machinery


class JsonFormatter(logging.Formatter):
    """`{"time": ..., "level": ..., "logger": ..., "message": ..., <fields>}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        entry: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str = "info", fields: dict[str, Any] | None = None) -> None:
    """JSON lines on stderr for specgen's and uvicorn's loggers (the process-wide setup of `specgen serve`).

    `fields` are added to every line (a worker of `--workers N` adds its index).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    if fields:
        handler.addFilter(lambda record: _with_fields(record, fields))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    # grpc.aio's Cython layer logs at debug once per call ("[_cygrpc] Loaded running loop", "RPC cancelled for
    # servicer method"): at --log-level debug a health probe every few seconds would fill the log with lines that
    # say nothing. Its warnings and errors still come through; specgen's own debug lines are untouched.
    logging.getLogger(GRPC_AIO_LOGGER).setLevel(max(logging.INFO, root.level))


def _with_fields(record: logging.LogRecord, fields: dict[str, Any]) -> bool:
    record.fields = {**fields, **(getattr(record, "fields", None) or {})}
    return True
