"""The asyncio TCP server: Kafka's framing, one request at a time per connection.

Each connection reads ``INT32 size`` + frame, serves it and writes the answer before reading the
next, as a Kafka broker processes one request per connection at a time (so answers come back in
request order). A parked JoinGroup awaits its future without blocking other connections.

Kafka's answers to bad input: a frame larger than ``max_request_bytes`` (Kafka's
``socket.request.max.bytes``) or smaller than a header, an unknown API key, a version out of range
(other than ApiVersions, which is answered with UNSUPPORTED_VERSION and the ranges), or a frame
that does not decode: the connection is closed; nothing reaches the engine. A connection idle for
``idle_timeout_s`` (Kafka's ``connections.max.idle.ms``) is closed too.

Security (:mod:`coordinator.gateway.security`) hooks in at three points only: the listener's TLS
context, a :class:`~coordinator.gateway.security.session.Session` per connection that takes the
frames until it has authenticated the client (SASL), and the dispatch through
:func:`~coordinator.gateway.security.enforce.dispatch` (and :meth:`Upstream.serve` with the
session), which asks it whether the principal may do what a request asks.

Readiness, as a Kafka broker loading ``__consumer_offsets``: the gateway listens at once, and
until its back end has started (the embedded engine loaded from its log, the job's responses
table opened) it answers ApiVersions, Metadata, FindCoordinator (itself) and the log topic as
usual, and every group API with COORDINATOR_LOAD_IN_PROGRESS, which Kafka clients retry after a
backoff. ``ready`` turns true, and :func:`run` calls ``on_ready``, once the back end serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordinator.engine import CoordinatorNode, GroupCoordinator
from coordinator.errors import Error
from coordinator.gateway import apis, codec
from coordinator.gateway.backend import Backend, cannot_serve
from coordinator.gateway.codec import FrameError
from coordinator.gateway.log_topic import LOG_TOPIC, LogTopic, for_backend
from coordinator.gateway.security import enforce
from coordinator.gateway.security.session import (
    SASL_MAX_RECEIVE_BYTES,
    GatewaySecurity,
    Session,
)
from coordinator.gateway.upstream import LOCAL, ClientLink, LogTopicShape, Upstream
from coordinator.security.settings import Listener

if TYPE_CHECKING:
    from coordinator.metrics.gateway import GatewayMetrics

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
        metrics: GatewayMetrics | None = None,
        upstream: Upstream | None = None,
        security: GatewaySecurity | None = None,
        node_id: int = 0,
        brokers: list[tuple[int, str, int]] | None = None,
    ) -> None:
        """``node_id`` and ``brokers`` (node id, host, port of every node, this one included):
        one node of several (:mod:`coordinator.gateway.cluster`); by default the only one."""
        self.backend = backend
        #: TLS, authentication and ACLs (:mod:`coordinator.gateway.security`); by default a
        #: PLAINTEXT listener with no authorizer, as a Kafka broker without security settings.
        self.security = security if security is not None else GatewaySecurity()
        #: ``__consumer_offsets``: by default the back end's warehouse log (empty without one).
        self.log_topic = log_topic if log_topic is not None else for_backend(backend)
        self.topics = dict(topics)
        self.host = host
        self.port = port
        self._listen_port = port
        self.max_request_bytes = max_request_bytes
        self.idle_timeout_s = idle_timeout_s
        self.connections = 0
        self.closed_for_bad_input = 0
        self.metrics = metrics
        #: True once the back end serves (until then group APIs answer LOAD_IN_PROGRESS).
        self.ready = False
        self._server: asyncio.Server | None = None
        self._ctx = apis.GatewayContext(
            self._while_loading,
            self.topics,
            self.host,
            self.port,
            node_id=node_id,
            log_topic=self.log_topic,
            brokers=brokers,
        )
        #: Answers FindCoordinator while the back end loads (the gateway is the only node).
        self._finder: GroupCoordinator | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        #: Upstream mode (:mod:`coordinator.gateway.upstream`): data to the upstream's brokers,
        #: one listener per broker (node id -> server), groups to the back end.
        self.upstream = upstream
        self._broker_servers: dict[int, asyncio.Server] = {}
        self._listener_lock = asyncio.Lock()
        self._stopping = False
        #: the listeners of ``listeners`` after the main one, and their ports once listening
        self._other_servers: list[asyncio.Server] = []
        self.listener_ports: dict[str, int] = {}
        if upstream is not None and self.security.other_listeners:
            raise ValueError("upstream mode serves one listener (the first of listeners)")

    async def start(self) -> None:
        """Listen, then start the back end; connections meanwhile get LOAD_IN_PROGRESS for
        group APIs (module doc). Returns once ready."""
        self._server = await asyncio.start_server(
            functools.partial(self._connection, None, None),
            self.host,
            self.port,
            ssl=self.security.context_for(None),
        )
        self.port = self._server.sockets[0].getsockname()[1]
        for listener in self.security.other_listeners:  # Kafka's further listeners
            server = await asyncio.start_server(
                functools.partial(self._connection, None, listener),
                listener.host,
                listener.port,
                ssl=self.security.context_for(listener),
            )
            self._other_servers.append(server)
            self.listener_ports[listener.name] = int(server.sockets[0].getsockname()[1])
        node = CoordinatorNode(self._ctx.node_id, self.host, self.port)
        self._ctx.port = self.port
        if self.upstream is not None:
            self.upstream.attach(
                (self.host, self.port),
                self.broker_listener,
                LogTopicShape(self.log_topic.partitions, self._ctx.topic_id(LOG_TOPIC)),
            )
            self._ctx.versions = self.upstream.advertised
            self._ctx.coordinator = self.upstream.coordinator
            await self.upstream.start()
        self._finder = GroupCoordinator(node=node)
        feed_topics = getattr(self.backend, "update_topics", None)
        if feed_topics is not None:  # consumer groups assign from them
            if self.upstream is not None:
                self.upstream.on_topics = feed_topics
                feed_topics(self.upstream.topic_list())
            elif self._ctx.topics or not getattr(self.backend, "keeps_topics", False):
                feed_topics(self._ctx.topic_list())
        await self.backend.start(node)
        await self.log_topic.refresh(force=True)
        self._ctx.submit = self.backend.submit
        self.ready = True

    def set_brokers(self, brokers: list[tuple[int, str, int]]) -> None:
        """The live nodes (id, host, port) Metadata lists, when one of several has died."""
        self._ctx.brokers = list(brokers)

    async def broker_listener(self, node_id: int) -> tuple[str, int]:
        """The address of the gateway's listener for upstream broker ``node_id``, opened on
        first use: with the bootstrap listener on an ephemeral port, on another one; otherwise
        on the bootstrap port + 1 + the node id (a port per broker, as Kroxylicious does)."""
        async with self._listener_lock:
            server = self._broker_servers.get(node_id)
            if server is None:
                port = 0 if self._listen_port == 0 else self._listen_port + 1 + node_id
                server = await asyncio.start_server(
                    functools.partial(self._connection, node_id, None),
                    self.host,
                    port,
                    ssl=self.security.context_for(None),
                )
                self._broker_servers[node_id] = server
                log.info(
                    "listening on %s:%s for upstream node %s",
                    self.host,
                    server.sockets[0].getsockname()[1],
                    node_id,
                )
            return self.host, int(server.sockets[0].getsockname()[1])

    async def _while_loading(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.ready:  # a request read just before the switch
            return await self.backend.submit(request)
        if request.get("api") == "find_coordinator" and self._finder is not None:
            (answer,) = self._finder.handle(request, 0)
            return answer
        message = "the coordinator is loading its groups"
        return cannot_serve(request, message, Error.COORDINATOR_LOAD_IN_PROGRESS)

    async def serve_forever(self) -> None:
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def stop(self) -> None:
        servers = [
            s
            for s in (self._server, *self._other_servers, *self._broker_servers.values())
            if s is not None
        ]
        self._stopping = True
        for server in servers:
            server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        for server in servers:
            await server.wait_closed()
        if self.upstream is not None:
            await self.upstream.stop()
        await self.backend.stop()

    async def _connection(
        self,
        node_id: int | None,
        listener: Listener | None,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        self.connections += 1
        if self.metrics is not None:
            self.metrics.opened()
        bad_input = False
        peer = writer.get_extra_info("peername")
        client_host = f"/{peer[0]}" if isinstance(peer, tuple) else "/unknown"
        link = ClientLink(node_id)
        advertised = None
        if listener is not None:  # not the main listener: Metadata names this one
            advertised = (listener.host, self.listener_ports[listener.name])
        session = self.security.open_session(
            peer, writer.get_extra_info("ssl_object"), listener, advertised
        )
        try:
            await self._serve(reader, writer, client_host, link, session)
        except FrameError as exc:
            self.closed_for_bad_input += 1
            bad_input = True
            log.info("closing %s: %s", client_host, exc)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing %s after an internal error", client_host)
        finally:
            if self._stopping and writer.get_extra_info("ssl_object") is not None:
                # no TLS close_notify exchange with a client that may never answer it
                writer.transport.abort()
            else:
                writer.close()
            with contextlib.suppress(Exception):
                await link.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if task is not None:
                self._handlers.discard(task)
            if self.metrics is not None:
                self.metrics.closed(bad_input)

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client_host: str,
        link: ClientLink,
        session: Session,
    ) -> None:
        metrics = self.metrics
        upstream = self.upstream
        while True:
            # asyncio.timeout, not wait_for: no task per read (a third of wait_for's cost).
            async with asyncio.timeout(self.idle_timeout_s):
                prefix = await reader.readexactly(4)
            (size,) = struct.unpack(">i", prefix)
            # before SASL completes, Kafka's sasl.server.max.receive.size bounds a frame
            limit = self.max_request_bytes if session.authenticated else SASL_MAX_RECEIVE_BYTES
            if size < 0 or size > limit or (size < 8 and session.authenticated):
                raise FrameError(f"frame size {size} outside 8..{limit}")
            async with asyncio.timeout(self.idle_timeout_s):
                frame = await reader.readexactly(size)
            started = time.perf_counter()
            if not session.authenticated:  # SASL: ApiVersions and the exchange only
                outcome = session.receive(frame)
                if outcome.result is not None and metrics is not None:
                    metrics.authenticated(session.mechanism or "", outcome.result)
                if outcome.delay_s:
                    await asyncio.sleep(outcome.delay_s)
                if outcome.reply is not None:
                    writer.write(outcome.reply)
                    await writer.drain()
                if outcome.close:
                    return
                if not outcome.serve:
                    continue
            api_key = codec.peek_header(frame)[0]
            if upstream is not None and upstream.routes(api_key):
                forwarded = await upstream.serve(link, frame, session)
                if forwarded is not LOCAL:  # LOCAL: the log topic, answered below
                    if metrics is not None:  # the broker's answer is passed on, not decoded
                        metrics.answered(api_key, None, time.perf_counter() - started)
                    if forwarded is not None:
                        writer.write(forwarded)
                        await writer.drain()
                    continue
            request = codec.decode_request(frame)
            answer = await enforce.dispatch(self._ctx, request, client_host, session)
            if answer is None:
                if metrics is not None:
                    metrics.answered(request.api_key, None, time.perf_counter() - started)
                continue
            # ApiVersions above its range is answered in v0 (request.body is None).
            version = 0 if request.body is None else request.api_version
            response = codec.encode_response(
                request.api_key, version, request.correlation_id, answer
            )
            if metrics is not None:  # before the client can see the answer
                metrics.answered(request.api_key, answer, time.perf_counter() - started)
            writer.write(response)
            await writer.drain()


async def run(
    gateway: Gateway,
    ready: asyncio.Event | None = None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Start ``gateway`` and serve until cancelled; ``ready`` is set and ``on_ready`` called
    once it serves (its back end loaded), not merely listens."""
    await gateway.start()
    if ready is not None:
        ready.set()
    if on_ready is not None:
        on_ready()
    try:
        await gateway.serve_forever()
    finally:
        await gateway.stop()
