"""The asyncio TCP server: Kafka's framing, one request at a time per connection.

Each connection reads ``INT32 size`` + frame, serves it and writes the answer before reading the
next, as a Kafka broker processes one request per connection at a time (so answers come back in
request order). A parked JoinGroup awaits its future without blocking other connections.

Kafka's answers to bad input: a frame larger than ``max_request_bytes`` (Kafka's
``socket.request.max.bytes``) or smaller than a header, an unknown API key, a version out of range
(other than ApiVersions, which is answered with UNSUPPORTED_VERSION and the ranges), or a frame
that does not decode: the connection is closed; nothing reaches the engine. A connection idle for
``idle_timeout_s`` (Kafka's ``connections.max.idle.ms``) is closed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from typing import Any

from coordinator.engine import CoordinatorNode
from coordinator.gateway import apis, codec
from coordinator.gateway.backend import Backend
from coordinator.gateway.codec import FrameError
from coordinator.gateway.log_topic import LogTopic, for_backend

log = logging.getLogger(__name__)

#: Kafka's socket.request.max.bytes default (100 MiB) is far beyond what a coordinator needs;
#: the gateway's default bounds a connection's buffer at 1 MiB (Kafka's max.request.size).
DEFAULT_MAX_REQUEST_BYTES = 1_048_576
#: Kafka's connections.max.idle.ms default.
DEFAULT_IDLE_TIMEOUT_S = 600.0


class Gateway:
    def __init__(
        self,
        backend: Backend,
        topics: dict[str, int],
        host: str = "127.0.0.1",
        port: int = 9092,
        *,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        log_topic: LogTopic | None = None,
    ) -> None:
        self.backend = backend
        #: ``__consumer_offsets``: by default the back end's warehouse log (empty without one).
        self.log_topic = log_topic if log_topic is not None else for_backend(backend)
        self.topics = dict(topics)
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.idle_timeout_s = idle_timeout_s
        self.connections = 0
        self.closed_for_bad_input = 0
        self._server: asyncio.Server | None = None
        self._ctx: apis.GatewayContext | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        await self.backend.start(CoordinatorNode(0, self.host, self.port))
        await self.log_topic.refresh(force=True)
        self._ctx = apis.GatewayContext(
            self.backend.submit, self.topics, self.host, self.port, log_topic=self.log_topic
        )

    async def serve_forever(self) -> None:
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self._server.wait_closed()
        await self.backend.stop()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        self.connections += 1
        peer = writer.get_extra_info("peername")
        client_host = f"/{peer[0]}" if isinstance(peer, tuple) else "/unknown"
        try:
            await self._serve(reader, writer, client_host)
        except FrameError as exc:
            self.closed_for_bad_input += 1
            log.info("closing %s: %s", client_host, exc)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing %s after an internal error", client_host)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if task is not None:
                self._handlers.discard(task)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_host: str
    ) -> None:
        assert self._ctx is not None
        while True:
            # asyncio.timeout, not wait_for: no task per read (a third of wait_for's cost).
            async with asyncio.timeout(self.idle_timeout_s):
                prefix = await reader.readexactly(4)
            (size,) = struct.unpack(">i", prefix)
            if size < 8 or size > self.max_request_bytes:
                raise FrameError(f"frame size {size} outside 8..{self.max_request_bytes}")
            async with asyncio.timeout(self.idle_timeout_s):
                frame = await reader.readexactly(size)
            request = codec.decode_request(frame)
            answer = await apis.dispatch(self._ctx, request, client_host)
            if answer is None:
                continue
            # ApiVersions above its range is answered in v0 (request.body is None).
            version = 0 if request.body is None else request.api_version
            writer.write(
                codec.encode_response(request.api_key, version, request.correlation_id, answer)
            )
            await writer.drain()


async def run(gateway: Gateway, ready: asyncio.Event | None = None) -> None:
    await gateway.start()
    if ready is not None:
        ready.set()
    try:
        await gateway.serve_forever()
    finally:
        await gateway.stop()
