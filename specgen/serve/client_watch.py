"""An HTTP client that leaves while its request waits for its answer: watched, so that its request is not run.

Apart from app.py (the HTTP application) as one job of its own: a gRPC call whose client leaves is cancelled by
grpc.aio itself; an HTTP request's handler is cancelled by nothing, so its connection is watched here.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from starlette.requests import Request

T = TypeVar("T")


class ClientGone(Exception):
    """The client of an HTTP request closed its connection while the request waited for its answer."""


async def disconnected(receive: Any) -> None:
    """Return when the client has gone: once the body is read, the next ASGI message is `http.disconnect`, sent
    when the connection closes (uvicorn; connection.py tells the request being answered too)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except Exception:  # nothing to watch with: the request is answered as if its client stayed
        await asyncio.Event().wait()


async def unless_gone(request: Request, job: asyncio.Future[T]) -> T:
    """The batcher's answer to `job`, or ClientGone when the client closes its connection first.

    A gRPC call whose client leaves is cancelled by grpc.aio, and its job with it, so the batcher drops it unrun
    (batcher.py `_drop_abandoned`); over HTTP nothing cancels the handler, so the connection is watched here
    and the job cancelled the same way: a request whose client has gone is not run (unless its batch already
    runs) and is counted as a failure (`cancelled`, 499), never as a success nobody received."""
    watch = asyncio.ensure_future(disconnected(request.receive))
    try:
        await asyncio.wait((job, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler is cancelled (a shutdown past its graceful timeout)
        job.cancel()  # a no-op once answered
        watch.cancel()
    if watch.done() and not watch.cancelled():
        if not job.cancelled():
            job.exception()  # its batch ran (and may have failed) as the client left: read, so never logged
        raise ClientGone
    return job.result()
