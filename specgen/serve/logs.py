"""Structured logs: one JSON object per line, through the logging module.

Code logs with `extra={"fields": {...}}`; the formatter puts those fields next to the time,
level, logger and message. uvicorn's own messages go through the same formatter.

A string a client chose goes into a field through `client_text` (the request id) or cut into a message
(values.cut / show: names, values): a request's id may be as long as its body, and a line that long is one
log shippers drop or split.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar
from typing import Any

from specgen.serve.values import SHOWN_CHARS, cut
from specgen.text import printable

GRPC_AIO_LOGGER = "grpc._cython.cygrpc"  # the logger of grpc.aio's server and call machinery
# The inference call a gRPC task answers (its model, id and outcome: grpc_server.py). grpc.aio runs a call's method and
# then sends its answer in one task, so a line grpc.aio logs about that send can name the call (UnsentAnswers).
GRPC_CALL: ContextVar[dict[str, Any] | None] = ContextVar("specgen_grpc_call", default=None)


def client_text(text: str | None) -> str | None:
    """A string a client sent (a request id) as a log field: escaped and cut to 80 characters, as every other client
    string a line carries; only what is kept is escaped. The response still echoes it as sent."""
    return None if text is None else cut(printable(text[:SHOWN_CHARS + 1]))


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


def quiet_unsent_answers() -> None:
    """Install UnsentAnswers on grpc.aio's logger, once (the gRPC server does as it starts: grpc_server.py)."""
    grpc_aio = logging.getLogger(GRPC_AIO_LOGGER)
    if not any(isinstance(f, UnsentAnswers) for f in grpc_aio.filters):
        grpc_aio.addFilter(UnsentAnswers())


class UnsentAnswers(logging.Filter):
    """grpc.aio's error with a traceback for an answer core could not send, made one info line without it.

    A unary call's answer is sent by grpc.aio after the method returns. When the call has ended meanwhile (its deadline
    passed, or its client cancelled, a few microseconds before the send), core fails the send and grpc.aio logs
    "ExecuteBatchError raised in core by servicer method [...]" at error level with a traceback, unless it had
    already seen the client's close. Nothing failed in the server: the client had gone, and its own deadline or
    cancel told it so. An inference that failed has its own `infer` line, so this one is dropped; one counted answered
    (200: the send failed after the method returned, grpc_server.py) gets it, with its model and id."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or type(exc).__name__ != "ExecuteBatchError":
            return True
        call = GRPC_CALL.get()
        if call is not None and call["status"] != 200:  # a failed inference: its own `infer` line says so already
            return False
        method = record.getMessage().rpartition("[")[2].rstrip("]") or None
        record.msg, record.args, record.exc_info, record.exc_text = "gRPC answer not sent", None, None, None
        record.levelno, record.levelname = logging.INFO, "INFO"
        fields: dict[str, Any] = {"event": "answer_unsent", "protocol": "grpc", "method": method}
        if call is not None:  # an inference counted answered (200): which one (docs/serve.md, Statistics)
            fields.update(model=call["model"], id=client_text(call["id"]), status=call["status"])
        fields["error"] = "the call ended (its deadline passed or its client cancelled) as its answer went out"
        record.fields = fields
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)  # an info line now: --log-level warning drops it


def _with_fields(record: logging.LogRecord, fields: dict[str, Any]) -> bool:
    record.fields = {**fields, **(getattr(record, "fields", None) or {})}
    return True
