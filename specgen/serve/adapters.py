"""uvicorn's flow control and transport as a request cycle of connection.py's BoundedProtocol holds them: each asks
the protocol first, so that uvicorn's own calls to resume reading and to close go through the protocol's rules.

The protocol is typed here by the one method each uses, so this module imports nothing of connection.py."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from uvicorn.protocols.http.flow_control import FlowControl


class Reader(Protocol):
    def may_read(self) -> bool: ...


class Closer(Protocol):
    def close_after_body(self) -> None: ...


class ClosingTransport:
    """The transport as a request cycle sees it: its `close()` lets a request body still arriving finish first."""

    def __init__(self, transport: asyncio.Transport, protocol: Closer):
        self._transport, self._protocol = transport, protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def close(self) -> None:
        self._protocol.close_after_body()


class GatedFlow(FlowControl):
    """uvicorn's flow control, whose `resume_reading` asks the protocol first."""

    def __init__(self, transport: asyncio.Transport, protocol: Reader):
        super().__init__(transport)
        self.protocol = protocol

    def resume_reading(self) -> None:
        if self.protocol.may_read():
            super().resume_reading()
