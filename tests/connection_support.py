"""A gateway connection driven without a socket: a fake transport recording what the
connection writes and whether it reads, and a started gateway to run a test against."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Coroutine
from typing import Any

from coordinator.config import CoordinatorConfig
from coordinator.gateway.connection import Connection
from coordinator.gateway.embedded import EmbeddedBackend
from coordinator.gateway.server import Gateway
from tests.gateway_support import TOPICS


class FakeTransport:
    """What a connection needs of a transport, recording writes and reading state."""

    def __init__(self, protocol: Connection) -> None:
        self.protocol = protocol
        self.written = bytearray()
        self.writes = 0
        self.reading = True
        self.closing = False

    def write(self, data: bytes) -> None:
        assert not self.closing, "written after close"
        self.written += data
        self.writes += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        assert self.reading
        self.reading = False

    def resume_reading(self) -> None:
        assert not self.reading
        self.reading = True

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def answers(self) -> list[bytes]:
        """The frames written so far (without their size prefix)."""
        frames, pos = [], 0
        while pos + 4 <= len(self.written):
            (size,) = struct.unpack_from(">i", self.written, pos)
            frames.append(bytes(self.written[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        assert pos == len(self.written), "a partial frame written"
        return frames


def run(test: Callable[..., Coroutine[Any, Any, None]], **options: Any) -> None:
    """Run ``test(gateway)`` with a started gateway (embedded engine, or ``backend``)."""

    async def main() -> None:
        backend = options.pop("backend", None) or EmbeddedBackend(
            CoordinatorConfig(group_initial_rebalance_delay_ms=0)
        )
        gateway = Gateway(backend, TOPICS, "127.0.0.1", 0, **options)
        await gateway.start()
        try:
            await test(gateway)
        finally:
            await gateway.stop()

    asyncio.run(main())


def connect(gateway: Gateway) -> tuple[Connection, FakeTransport]:
    connection = Connection(gateway, None, None)
    transport = FakeTransport(connection)
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport
