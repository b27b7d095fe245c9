"""The asyncio TCP server: Kafka's framing, answers in request order per connection.

Each connection (:class:`~coordinator.gateway.connection.Connection`, an ``asyncio.Protocol``)
splits ``INT32 size`` + frame out of what it reads and serves its requests one at a time, as a
Kafka broker does (so answers come back in request order): a request the back end answers at
once is answered within the read, the first one that waits (a parked JoinGroup) goes on in a
task without blocking other connections, and the frames behind it wait their turn. With a back
end that keeps the order it is handed requests in (the Spark job's), the group APIs that hand
it one request are pipelined instead: the frames behind them are served while they wait, their
answers still written in request order (the connection module's "Pipelined dispatch").

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
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from coordinator.engine import CoordinatorNode, GroupCoordinator
from coordinator.errors import Error
from coordinator.gateway import apis, codec, fastpath
from coordinator.gateway.backend import Backend, cannot_serve
from coordinator.gateway.connection import DEFAULT_MAX_IN_FLIGHT, Answer, Connection
from coordinator.gateway.log_topic import LOG_TOPIC, LogTopic, for_backend
from coordinator.gateway.security import enforce
from coordinator.gateway.security.session import GatewaySecurity, Session
from coordinator.gateway.upstream import LOCAL, LogTopicShape, Upstream
from coordinator.security.settings import Listener

if TYPE_CHECKING:
    from coordinator.metrics.gateway import GatewayMetrics

log = logging.getLogger(__name__)

#: Kafka's socket.request.max.bytes default (100 MiB) is far beyond what a coordinator needs;
#: the gateway's default bounds a connection's buffer at 1 MiB (Kafka's max.request.size).
DEFAULT_MAX_REQUEST_BYTES = 1_048_576
#: Kafka's connections.max.idle.ms default.
DEFAULT_IDLE_TIMEOUT_S = 600.0
#: The listening sockets' accept queue (Kafka's ``socket.listen.backlog.size``). Kafka's default
#: is 50, with an acceptor thread that does nothing but accept; here the event loop that serves
#: the requests also accepts, so connections arriving while it is busy wait in this queue. When
#: it is full the kernel drops the SYN and the client sends it again only after a second (TCP's
#: initial retransmission timeout): a hundred consumers starting together (each opens two or
#: three connections) overflowed asyncio's default of 100 and the last ones joined a second late.
#: The kernel caps it at ``net.core.somaxconn`` (4096 on current Linux).
DEFAULT_LISTEN_BACKLOG = 1024
#: On stop, how long a connection's last answers may take to go out before it is aborted.
STOP_FLUSH_S = 2.0


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
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        listen_backlog: int = DEFAULT_LISTEN_BACKLOG,
    ) -> None:
        """``node_id`` and ``brokers`` (node id, host, port of every node, this one included):
        one node of several (:mod:`coordinator.gateway.cluster`); by default the only one.
        ``max_in_flight``: requests on one connection while one of them waits (served and not
        answered, and read behind them), before reading pauses; with a pipelining back end, also
        the most served at once (:mod:`coordinator.gateway.connection`). ``listen_backlog``:
        the accept queue of each listening socket (:data:`DEFAULT_LISTEN_BACKLOG`)."""
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
        self.max_in_flight = max_in_flight
        if listen_backlog < 1:
            raise ValueError(f"listen_backlog must be at least 1, got {listen_backlog}")
        self.listen_backlog = listen_backlog
        #: connections opened so far, and those open
        self.connections = 0
        self._open: set[Connection] = set()
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
        #: Closed connections' upstream links being closed: never cancelled (a task cancelled
        #: before its first step would leave the link's sockets open), waited for on stop.
        self._closing: set[asyncio.Task[Any]] = set()
        #: Upstream mode (:mod:`coordinator.gateway.upstream`): data to the upstream's brokers,
        #: one listener per broker (node id -> server), groups to the back end.
        self.upstream = upstream
        self._broker_servers: dict[int, asyncio.Server] = {}
        self._listener_lock = asyncio.Lock()
        self._stopping = False
        #: Pipelined dispatch (:mod:`coordinator.gateway.connection`): a back end that keeps
        #: the order it is handed requests in, and not upstream mode (a task per request).
        self.pipelines = upstream is None and backend.pipelines_requests
        #: request dicts handed to the back end so far (counted only when pipelining): a
        #: connection compares it around the first step of a request's answer
        self.handed = 0
        #: The back end's ``answer_now`` once ready, when a heartbeat may skip the general
        #: dispatch (:meth:`heartbeat_now`): the embedded engine, not upstream mode.
        self.answers_now: Callable[[dict[str, Any]], Any] | None = None
        #: The back end's ``heartbeat_in_place`` (with ``answers_now``): a heartbeat its engine
        #: serves in place, with no request dict (:meth:`heartbeat_now`).
        self._heartbeat_in_place: Callable[[str, str, int, str | None], int | None] | None = None
        #: The back end's ``renewal`` (with ``_heartbeat_in_place``): the same heartbeat served
        #: in place again without its lookups (:meth:`heartbeat_repeater`).
        self._renewal: Callable[[str, str, int, str | None], Callable[[], Any] | None] | None = None
        #: (api key, version, id) of a shared answer -> (the answer, its framed response before
        #: and after the correlation id): :meth:`_encode`
        self._shared_frames: dict[tuple[int, int, int], tuple[dict[str, Any], bytes, bytes]] = {}
        #: (version, error code) -> the framed Heartbeat response around its correlation id
        self._heartbeat_frames: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        #: the listeners of ``listeners`` after the main one, and their ports once listening
        self._other_servers: list[asyncio.Server] = []
        self.listener_ports: dict[str, int] = {}
        if upstream is not None and self.security.other_listeners:
            raise ValueError("upstream mode serves one listener (the first of listeners)")

    async def start(self) -> None:
        """Listen, then start the back end; connections meanwhile get LOAD_IN_PROGRESS for
        group APIs (module doc). Returns once ready."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            functools.partial(self._protocol, None, None),
            self.host,
            self.port,
            ssl=self.security.context_for(None),
            backlog=self.listen_backlog,
        )
        self.port = _port(self._server)
        for listener in self.security.other_listeners:  # Kafka's further listeners
            server = await loop.create_server(
                functools.partial(self._protocol, None, listener),
                listener.host,
                listener.port,
                ssl=self.security.context_for(listener),
                backlog=self.listen_backlog,
            )
            self._other_servers.append(server)
            self.listener_ports[listener.name] = _port(server)
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
        self._ctx.submit = self._hand if self.pipelines else self.backend.submit
        if self.upstream is None and not self.pipelines:
            self.answers_now = getattr(self.backend, "answer_now", None)
            if self.answers_now is not None:
                self._heartbeat_in_place = getattr(self.backend, "heartbeat_in_place", None)
                self._renewal = getattr(self.backend, "renewal", None)
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
                server = await asyncio.get_running_loop().create_server(
                    functools.partial(self._protocol, node_id, None),
                    self.host,
                    port,
                    ssl=self.security.context_for(None),
                    backlog=self.listen_backlog,
                )
                self._broker_servers[node_id] = server
                log.info(
                    "listening on %s:%s for upstream node %s",
                    self.host,
                    _port(server),
                    node_id,
                )
            return self.host, _port(server)

    def _hand(self, request: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        """The back end's ``submit``, counted (:attr:`handed`). Handlers await it at once, so a
        request whose answer suspends right after one such call waits inside it, its request
        dict already in the back end's queue (``JobBackend.submit`` queues before it waits)."""
        self.handed += 1
        return self.backend.submit(request)

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
        while self._open:  # (one accepted as the listeners closed is stopped on opening)
            connections = list(self._open)
            for connection in connections:
                connection.stop()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            # a client that reads nothing more is not waited for long
            lost = [c.lost for c in connections]
            _, unflushed = await asyncio.wait(lost, timeout=STOP_FLUSH_S)
            for connection in connections:
                if not connection.lost.done() and connection.transport is not None:
                    connection.transport.abort()
            if unflushed:
                await asyncio.wait(lost)
        await asyncio.gather(*self._handlers, *self._closing, return_exceptions=True)
        for server in servers:
            await server.wait_closed()
        if self.upstream is not None:
            await self.upstream.stop()
        await self.backend.stop()

    # --- connections (coordinator.gateway.connection) --------------------------------------

    def _protocol(self, node_id: int | None, listener: Listener | None) -> Connection:
        return Connection(self, node_id, listener)

    def opened(self, connection: Connection) -> None:
        self.connections += 1
        self._open.add(connection)
        if self.metrics is not None:
            self.metrics.opened()
        if self._stopping:  # accepted as the listeners closed
            connection.stop()

    def closed(self, connection: Connection) -> None:
        self._open.discard(connection)
        if connection.link.brokers:  # its connections upstream
            closing = asyncio.ensure_future(_quietly(connection.link.close()))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        if self.metrics is not None:
            self.metrics.closed(connection.bad_input)

    def track(self, task: asyncio.Task[Any]) -> None:
        """A task serving a connection, cancelled on stop."""
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def answer(self, frame: bytes, connection: Connection) -> bytes | None:
        """The framed answer to one request frame (without its size prefix), None when Kafka
        sends none. Raises FrameError for a frame to close the connection on."""
        started = time.perf_counter()
        metrics = self.metrics
        session = connection.session
        assert session is not None
        if not session.authenticated:  # SASL: ApiVersions and the exchange only
            outcome = session.receive(frame)
            if outcome.result is not None and metrics is not None:
                metrics.authenticated(session.mechanism or "", outcome.result)
            if outcome.delay_s:
                await asyncio.sleep(outcome.delay_s)
            if outcome.close:
                connection.close_after_answer = True
            if outcome.close or not outcome.serve:
                return outcome.reply
        api_key = codec.peek_header(frame)[0]
        upstream = self.upstream
        if upstream is not None and upstream.routes(api_key):
            forwarded = await upstream.serve(connection.link, frame, session)
            if forwarded is not LOCAL:  # LOCAL: the log topic, answered below
                if metrics is not None:  # the broker's answer is passed on, not decoded
                    metrics.answered(api_key, None, time.perf_counter() - started)
                return forwarded
        request = codec.decode_request(frame)
        if self.pipelines:
            connection.submits_once = apis.submits_once(request)
        answer = await enforce.dispatch(self._ctx, request, connection.client_host, session)
        if answer is None:
            if metrics is not None:
                metrics.answered(request.api_key, None, time.perf_counter() - started)
            return None
        # ApiVersions above its range is answered in v0 (request.body is None).
        version = 0 if request.body is None else request.api_version
        response = self._encode(request.api_key, version, request.correlation_id, answer)
        if metrics is not None:  # before the client can see the answer
            metrics.answered(request.api_key, answer, time.perf_counter() - started)
        return response

    def _encode(
        self, api_key: int, version: int, correlation_id: int, answer: dict[str, Any]
    ) -> bytes:
        """The framed response to ``answer``. A :class:`~coordinator.gateway.apis.SharedAnswer`
        (Metadata's, the same for the same topics, nodes and cluster) is encoded once per
        version and kept, and each request's correlation id is put in: a hundred consumers
        joining at once each ask for the same Metadata, 0.4 ms each to encode for a topic of
        200 partitions."""
        if type(answer) is not apis.SharedAnswer:
            return codec.encode_response(api_key, version, correlation_id, answer)
        key = (api_key, version, id(answer))
        kept = self._shared_frames.get(key)
        if kept is None or kept[0] is not answer:
            whole = codec.encode_response(api_key, version, 0, answer)
            if len(self._shared_frames) >= apis.SHARED_ANSWERS:
                self._shared_frames.clear()
            kept = self._shared_frames[key] = (answer, whole[:4], whole[8:])
        return kept[1] + _CORRELATION.pack(correlation_id) + kept[2]

    def heartbeat_now(self, frame: bytes, connection: Connection) -> bytes | Answer | None:
        """A Heartbeat frame served the short way, as :meth:`answer` serves it: its framed
        answer when the back end gives it at once, a coroutine for it when it waits; None,
        having done nothing, for any frame this does not serve (another API, a frame the fast
        path does not read or the fast path off, a session not authenticated, a principal the
        ACLs deny), which :meth:`answer` then serves. Only with :attr:`answers_now`."""
        answer_now = self.answers_now
        session = connection.session
        if answer_now is None or session is None or not session.authenticated:
            return None
        if not fastpath.enabled:  # kio reads and writes every message (to measure the codec)
            return None
        started = time.perf_counter() if self.metrics is not None else 0.0
        short = None if self._heartbeat_in_place is None else fastpath.read_heartbeat(frame)
        if short is not None:
            made = self.heartbeat_again(short, frame[4:8], session)
            if made is not None:
                return made
        body: dict[str, Any]
        if short is not None:
            version, correlation_id, group_id, generation_id, member_id, instance_id = short
            body = {
                "group_id": group_id,
                "generation_id": generation_id,
                "member_id": member_id,
                "group_instance_id": instance_id,
            }
        else:
            read = fastpath.read_request(frame)
            if read is None or read[0] != codec.HEARTBEAT:
                return None
            _, version, correlation_id, _, body = read
        if not session.authorize(enforce.READ, enforce.GROUP, body["group_id"]):
            return None  # denied: the general way answers it
        made = answer_now(apis.heartbeat_request(self._ctx, version, body))
        correlation = _CORRELATION.pack(correlation_id)
        if isinstance(made, dict):
            return self._heartbeat_frame(version, correlation, made["error_code"], started)
        return self._heartbeat_later(version, correlation, made, started)

    def heartbeat_in_place(
        self, frame: bytes, session: Session | None
    ) -> tuple[bytes, Callable[[bytes], bytes | None]] | None:
        """A Heartbeat frame (no size prefix) that the back end's engine serves in place
        (:meth:`heartbeat_again`): its framed answer, and what serves the same frame again
        (:meth:`heartbeat_repeater`); else None, having done nothing, and :meth:`answer`
        serves it. A connection's read of one whole Heartbeat frame
        (:class:`~coordinator.gateway.connection.Connection`), which has nothing else to do,
        so no coroutine: a heartbeat that would wait goes the general way."""
        if self._heartbeat_in_place is None:
            return None
        short = fastpath.read_heartbeat(frame)
        if short is None:
            return None
        made = self.heartbeat_again(short, frame[4:8], session)
        return None if made is None else (made, self.heartbeat_repeater(short, session))

    def heartbeat_repeater(
        self, short: fastpath.ShortHeartbeat, session: Session | None
    ) -> Callable[[bytes], bytes | None]:
        """What serves a heartbeat just served in place (:meth:`heartbeat_again`, ``short``
        being what the fast path read of it) again on the same session, given the repeat's
        correlation id (its four bytes): its framed answer, or None, having done nothing, as
        :meth:`heartbeat_again` gives. A member sends the same heartbeat but for its
        correlation id while its generation lasts
        (:class:`~coordinator.gateway.connection.Connection` remembers it).

        The session is checked each time, as :meth:`heartbeat_again` checks it; then the back
        end's renewal serves it (:meth:`~coordinator.gateway.embedded.EmbeddedBackend.renewal`,
        without the engine's lookups), and when that declines (the group changed),
        :meth:`heartbeat_again` does, and a new renewal is taken."""
        version, _, group_id, generation_id, member_id, instance_id = short
        renewal = self._renewal
        renew = (
            None if renewal is None else renewal(group_id, member_id, generation_id, instance_id)
        )
        # whether ACLs are enforced is the gateway's setting (authorizer.class.name), fixed
        enforcing = session is not None and session.security.enforcing
        frames = self._heartbeat_frames

        def again(correlation: bytes) -> bytes | None:
            nonlocal renew
            if (
                renew is not None
                and session is not None
                and session.authenticated
                and fastpath.enabled
                and (not enforcing or session.authorize(enforce.READ, enforce.GROUP, group_id))
            ):
                metrics = self.metrics
                started = 0.0 if metrics is None else time.perf_counter()
                error = renew()
                if error is not None:
                    framed = None if metrics is not None else frames.get((version, error))
                    if framed is not None:  # what _heartbeat_frame makes, without metrics
                        return framed[0] + correlation + framed[1]
                    return self._heartbeat_frame(version, correlation, error, started)
            made = self.heartbeat_again(short, correlation, session)
            if made is not None and renewal is not None:
                renew = renewal(group_id, member_id, generation_id, instance_id)
            return made

        return again

    def heartbeat_again(
        self, short: fastpath.ShortHeartbeat, correlation: bytes, session: Session | None
    ) -> bytes | None:
        """A Heartbeat already read by :func:`~coordinator.gateway.fastpath.read_heartbeat`
        (``short``; ``correlation``, the frame's correlation id as its four bytes) when the back
        end's engine serves it in place: its framed answer; else None, having done nothing.

        :meth:`heartbeat_now`'s in-place way, and a connection's when a frame repeats the last
        heartbeat it served in place byte for byte but for its correlation id (so reading it
        again would give ``short`` again: :class:`~coordinator.gateway.connection.Connection`).
        The session is checked here each time (authenticated; READ on the group when ACLs are
        enforced), and the engine checks the member, its generation and the group's state."""
        in_place = self._heartbeat_in_place
        if in_place is None or session is None or not session.authenticated:
            return None
        if not fastpath.enabled:  # kio reads and writes every message (to measure the codec)
            return None
        version, _, group_id, generation_id, member_id, instance_id = short
        if not session.authorize(enforce.READ, enforce.GROUP, group_id):
            return None  # denied: the general way answers it
        started = time.perf_counter() if self.metrics is not None else 0.0
        error = in_place(group_id, member_id, generation_id, instance_id)
        if error is None:
            return None
        return self._heartbeat_frame(version, correlation, error, started)

    async def _heartbeat_later(
        self, version: int, correlation: bytes, made: Awaitable[dict[str, Any]], started: float
    ) -> bytes:
        answer = await made
        return self._heartbeat_frame(version, correlation, answer["error_code"], started)

    def _heartbeat_frame(
        self, version: int, correlation: bytes, error: int, started: float
    ) -> bytes:
        """The framed Heartbeat response with ``error``: the one kio wrote for this version and
        error, kept, with the correlation id (its four bytes) put in."""
        framed = self._heartbeat_frames.get((version, error))
        if framed is None:
            answer = apis.heartbeat_answer({"error_code": error})
            whole = codec.encode_response(codec.HEARTBEAT, version, 0, answer)
            framed = self._heartbeat_frames[version, error] = (whole[:4], whole[8:])
        if self.metrics is not None:
            answer = apis.heartbeat_answer({"error_code": error})
            self.metrics.answered(codec.HEARTBEAT, answer, time.perf_counter() - started)
        return framed[0] + correlation + framed[1]


_CORRELATION = struct.Struct(">i")


def _port(server: Any) -> int:
    """The port a server listens on (its first socket's). ``Any``: uvloop's ``sockets`` is a
    list where asyncio's, and typeshed's, is a tuple (a compiled build checks that type)."""
    return int(server.sockets[0].getsockname()[1])


async def _quietly(closing: Coroutine[Any, Any, None]) -> None:
    with contextlib.suppress(Exception):
        await closing


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
