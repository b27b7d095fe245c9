"""``KafkaWireTransport``: :class:`~coordinator.client.member.GroupMember` talking to a Kafka
broker (this project's gateway, or any broker with the classic group APIs) over Kafka's wire
protocol, with kio as the codec (:mod:`coordinator.gateway.codec`).

It keeps every rule of :mod:`coordinator.client.transport`, so a member cannot tell it from the
in-process transport:

- ``send`` never calls the callback: it hands the request to the transport's I/O thread (an
  asyncio loop, :class:`WireLoop`) and returns. Answers come back through a thread-safe queue
  and are handed to their callbacks by :meth:`KafkaWireTransport.deliver`, which the member's
  runner calls (the same thread as the member's ``poll``/``tick``);
- every request gets its callback called exactly once: with the response (a contract dict, as
  the engine makes it: :func:`coordinator.client.wire_mapping.from_wire`), or with
  ``NETWORK_EXCEPTION`` when its connection fails or closes before the answer, or with
  ``REQUEST_TIMED_OUT`` once ``request_timeout_ms`` has passed on the transport's clock (a
  JoinGroup waits at least its rebalance timeout plus 5 s, Kafka's ``JOIN_GROUP_TIMEOUT_LAPSE``,
  since the coordinator parks it that long). As Kafka's ``NetworkClient`` does, a timed-out
  request's connection is closed, so the other requests on it fail with ``NETWORK_EXCEPTION``.
  A late answer is dropped: the callback has had its answer;
- ``node_id=None`` goes to a bootstrap server (the next one in the list after a failure); a node
  id is reachable once a FindCoordinator answer has named it (node id, host, port), through a
  connection of its own even when the host is the bootstrap's, as Kafka's consumer keeps its
  coordinator connection apart (``Integer.MAX_VALUE - nodeId``). A node never named answers
  ``NETWORK_EXCEPTION``.

Every connection starts with ApiVersions (at the newest version this client knows, once more at
the broker's newest if it answers UNSUPPORTED_VERSION, as Kafka clients do), then each request
goes at the highest version both sides serve, no higher than its ``api_version`` when it has
one. A request no common version can carry gets ``UNSUPPORTED_VERSION``; one the chosen version
cannot carry gets ``INVALID_REQUEST``. Requests are pipelined; a Kafka broker serves one request
per connection at a time, so a parked JoinGroup holds back what follows it on its connection.

One transport is one client's network (Kafka's ``NetworkClient`` of one consumer): give each
member its own, or a parked JoinGroup of one would hold back the others' requests on the shared
coordinator connection. Transports can share one I/O thread (``io=``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import threading
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TypeVar

from coordinator.client.transport import (
    Callback,
    Clock,
    SystemClock,
    answer_timeout_ms,
    transport_error,
)
from coordinator.client.wire_mapping import (
    API_KEYS,
    API_VERSIONS_RANGE,
    DEFAULT_OFFSETS_PARTITIONS,
    choose_version,
    from_wire,
    to_wire,
)
from coordinator.errors import Error
from coordinator.gateway import codec

#: Kafka's ``socket.connection.setup.timeout.ms`` default.
DEFAULT_CONNECT_TIMEOUT_MS = 10_000
#: The largest response frame accepted (Kafka's ``socket.request.max.bytes`` default).
MAX_RESPONSE_BYTES = 104_857_600
UNSUPPORTED_VERSION = 35
SOFTWARE_NAME = "coordinator-wire"
#: Requests the coordinator may hold for a whole rebalance: ``close`` does not wait for them.
_PARKED = frozenset({"join_group", "sync_group"})

T = TypeVar("T")


def _software_version() -> str:
    try:
        return metadata.version("kafka-group-coordinator")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source checkout
        return "0.0.0"


class WireLoop:
    """An asyncio event loop in a daemon thread: the sockets of one or more transports."""

    def __init__(self, name: str = "kafka-wire-io") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the loop's thread (raises RuntimeError once stopped)."""
        self.loop.call_soon_threadsafe(fn, *args)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        """Run ``coro`` in the loop and wait for its result (not from the loop's own thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(10)


@dataclass(eq=False, slots=True)
class _InFlight:
    request: dict[str, Any]
    callback: Callback
    timeout_ms: int
    deadline_ms: int
    node_id: int | None
    done: bool = False
    connection: _Connection | None = None
    api_key: int = -1
    version: int = -1


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``"host:port"`` (``"[v6]:port"`` too) or ``(host, port)`` as ``(host, port)``."""
    if isinstance(address, tuple):
        return str(address[0]), int(address[1])
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"a broker address is HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


class KafkaWireTransport:
    """The :class:`~coordinator.client.transport.Transport` of a member whose coordinator is a
    Kafka broker reached over the wire protocol (module docstring: the rules it keeps).

    ``bootstrap``: one ``"host:port"`` (or a comma-separated list, or a sequence of addresses).
    ``clock`` times requests out (the member's clock). ``offsets_topic_num_partitions`` is the
    broker's ``offsets.topic.num.partitions``, for FindCoordinator's ``offsets_partition``
    (which the wire does not carry). ``client_id`` goes into request headers unless the request
    names its own (JoinGroup does).
    """

    def __init__(
        self,
        bootstrap: str | tuple[str, int] | Sequence[str | tuple[str, int]],
        clock: Clock | None = None,
        *,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        client_id: str = "consumer",
        offsets_topic_num_partitions: int = DEFAULT_OFFSETS_PARTITIONS,
        io: WireLoop | None = None,
    ) -> None:
        if isinstance(bootstrap, str):
            addresses: list[str | tuple[str, int]] = [a for a in bootstrap.split(",") if a.strip()]
        elif isinstance(bootstrap, tuple):
            addresses = [bootstrap]
        else:
            addresses = list(bootstrap)
        self.bootstrap = [parse_address(a) for a in addresses]
        if not self.bootstrap:
            raise ValueError("at least one bootstrap server is needed")
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.client_id = client_id
        self.offsets_topic_num_partitions = offsets_topic_num_partitions
        self._owns_io = io is None
        self._io = io if io is not None else WireLoop()
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)
        self._owed: dict[Any, _InFlight] = {}
        self._ready: deque[tuple[Callback, dict[str, Any]]] = deque()
        self._nodes: dict[int, tuple[str, int]] = {}
        self._closed = False
        # The I/O thread's own state.
        self._connections: dict[tuple[Any, ...], _Connection] = {}
        self._io_closed = False
        self._bootstrap_next = 0
        self._correlation = itertools.count(1)
        #: Requests sent so far, and connections set up (TCP and ApiVersions done).
        self.sent = 0
        self.connects = 0

    # -- the Transport protocol -------------------------------------------------------------

    def send(self, request: dict[str, Any], callback: Callback, node_id: int | None = None) -> None:
        """Hand ``request`` to the I/O thread for ``node_id`` (a bootstrap server if None);
        never calls ``callback`` itself."""
        if request.get("request_id") is None:
            request = {**request, "request_id": uuid.uuid4().hex}
        timeout = answer_timeout_ms(request, self.request_timeout_ms)
        entry = _InFlight(request, callback, timeout, self.clock.now_ms() + timeout, node_id)
        with self._lock:
            request_id = request["request_id"]
            if request_id in self._owed:
                raise ValueError(f"request id {request_id!r} is already in flight")
            self._owed[request_id] = entry
            self.sent += 1
            closed = self._closed
            address = None if node_id is None else self._nodes.get(node_id)
        if closed:
            self._complete(entry, self._error(entry, Error.NETWORK_EXCEPTION, "transport closed"))
        elif request.get("api") not in API_KEYS:
            message = f"api {request.get('api')!r} has no Kafka request"
            self._complete(entry, self._error(entry, Error.INVALID_REQUEST, message))
        elif node_id is not None and address is None:
            message = f"node {node_id} is unknown: no FindCoordinator answer named it"
            self._complete(entry, self._error(entry, Error.NETWORK_EXCEPTION, message))
        else:
            try:
                self._io.call(self._dispatch, entry, address)
            except RuntimeError:  # the I/O loop is gone
                message = "the transport's I/O thread has stopped"
                self._complete(entry, self._error(entry, Error.NETWORK_EXCEPTION, message))

    def deliver(self) -> int:
        """Time out what waited too long, then hand every answer that came to its callback (in
        arrival order, timeouts last); returns how many. Answers to requests the callbacks send
        wait for the next ``deliver``. If a callback raises, the exception propagates; the
        answers not yet handed over go to the next ``deliver``."""
        now = self.clock.now_ms()
        with self._lock:
            expired = [e for e in self._owed.values() if e.deadline_ms <= now]
        for entry in expired:
            message = f"no response within {entry.timeout_ms} ms"
            if self._complete(entry, self._error(entry, Error.REQUEST_TIMED_OUT, message)):
                with contextlib.suppress(RuntimeError):
                    self._io.call(self._abandon, entry)
        with self._lock:
            due = len(self._ready)
        for _ in range(due):
            with self._lock:
                callback, answer = self._ready.popleft()
            callback(answer)
        return due

    # -- for runners and tests --------------------------------------------------------------

    def wait(self, timeout_s: float) -> bool:
        """Block until an answer is ready for :meth:`deliver` (True) or ``timeout_s`` passed."""
        with self._answered:
            return self._answered.wait_for(lambda: bool(self._ready), timeout_s)

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered (answers waiting for ``deliver`` not counted)."""
        with self._lock:
            return len(self._owed)

    @property
    def nodes(self) -> dict[int, tuple[str, int]]:
        """The nodes FindCoordinator answers named: node id -> (host, port)."""
        with self._lock:
            return dict(self._nodes)

    def disconnect(self, node_id: int | None = None) -> None:
        """Close the connection to ``node_id`` (a bootstrap one if None), as a broken network
        would: its requests in flight get ``NETWORK_EXCEPTION``. Kafka's
        ``NetworkClient.disconnect``; the next request reconnects."""
        self._io.run(self._disconnect(node_id))

    def close(self, timeout_s: float = 5.0) -> None:
        """Close every connection, after waiting up to ``timeout_s`` for the answers to what is
        in flight (a LeaveGroup, a last commit; not a JoinGroup or SyncGroup, which the
        coordinator may park for long), as Kafka's consumer closes. What is still in flight
        then gets ``NETWORK_EXCEPTION``; answers go to callbacks on the next ``deliver``.
        Requests sent after ``close`` fail the same way."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._answered.wait_for(
                lambda: all(e.request.get("api") in _PARKED for e in self._owed.values()),
                timeout_s,
            )
        if self._io.running:
            with contextlib.suppress(Exception):
                self._io.run(self._close_all())
        if self._owns_io:
            self._io.stop()

    def __enter__(self) -> KafkaWireTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- completion (any thread) ------------------------------------------------------------

    def _error(self, entry: _InFlight, error: Error, message: str) -> dict[str, Any]:
        return transport_error(entry.request, error, message)

    def _complete(self, entry: _InFlight, answer: dict[str, Any]) -> bool:
        """Queue ``answer`` for ``entry``'s callback unless it has had one; True if queued."""
        with self._lock:
            if entry.done or self._owed.get(entry.request["request_id"]) is not entry:
                return False
            entry.done = True
            del self._owed[entry.request["request_id"]]
            if answer.get("api") == "find_coordinator" and answer.get("error_code") == 0:
                self._nodes[int(answer["node_id"])] = (str(answer["host"]), int(answer["port"]))
            self._ready.append((entry.callback, answer))
            self._answered.notify_all()
        return True

    # -- the I/O thread ---------------------------------------------------------------------

    def _dispatch(self, entry: _InFlight, address: tuple[str, int] | None) -> None:
        if entry.done:
            return
        if self._io_closed:  # sent before close(), dispatched after: too late
            self._complete(entry, self._error(entry, Error.NETWORK_EXCEPTION, "transport closed"))
            return
        if entry.node_id is None:
            key: tuple[Any, ...] = ("bootstrap",)
        else:
            assert address is not None
            key = ("node", entry.node_id, *address)
        connection = self._connections.get(key)
        if connection is None:
            if address is None:
                address = self.bootstrap[self._bootstrap_next % len(self.bootstrap)]
            connection = _Connection(self, key, *address)
            self._connections[key] = connection
        connection.submit(entry)

    def _abandon(self, entry: _InFlight) -> None:
        """A request timed out: close its connection, as Kafka's client does."""
        connection = entry.connection
        if connection is not None:
            connection.abort(f"request {entry.request['request_id']!r} timed out")

    def _closed_connection(self, connection: _Connection, failed: bool) -> None:
        if self._connections.get(connection.key) is connection:
            del self._connections[connection.key]
        if failed and connection.key == ("bootstrap",):
            self._bootstrap_next += 1  # the next bootstrap server, next time

    async def _disconnect(self, node_id: int | None) -> None:
        for connection in list(self._connections.values()):
            if (node_id is None and connection.key == ("bootstrap",)) or (
                node_id is not None and connection.key[:2] == ("node", node_id)
            ):
                connection.abort("disconnected")
                await asyncio.gather(connection.task, return_exceptions=True)

    async def _close_all(self) -> None:
        self._io_closed = True
        connections = list(self._connections.values())
        for connection in connections:
            connection.abort("transport closed")
        await asyncio.gather(*(c.task for c in connections), return_exceptions=True)


class _Connection:
    """One TCP connection to one broker; lives in the I/O thread."""

    def __init__(self, owner: KafkaWireTransport, key: tuple[Any, ...], host: str, port: int):
        self.owner = owner
        self.key = key
        self.host = host
        self.port = port
        self.versions: dict[int, tuple[int, int]] | None = None
        self.waiting: list[_InFlight] = []
        self.in_flight: dict[int, _InFlight] = {}
        self.writer: asyncio.StreamWriter | None = None
        self.closed = False
        self.reason = "connection closed by the broker"
        self.task = asyncio.get_running_loop().create_task(self._run())

    def submit(self, entry: _InFlight) -> None:
        entry.connection = self
        if self.closed:
            self._fail(entry, Error.NETWORK_EXCEPTION, self.reason)
        elif self.versions is None:
            self.waiting.append(entry)
        else:
            self._write(entry)

    def abort(self, reason: str) -> None:
        if not self.closed:
            self.reason = reason
            self.task.cancel()

    def _fail(self, entry: _InFlight, error: Error, message: str) -> None:
        self.owner._complete(entry, self.owner._error(entry, error, message))

    def _write(self, entry: _InFlight) -> None:
        if entry.done:
            return
        assert self.versions is not None and self.writer is not None
        request = entry.request
        version = choose_version(request, self.versions)
        if version is None:
            message = f"{self.host}:{self.port} serves no version of {request['api']} we speak"
            return self._fail(entry, Error.UNSUPPORTED_VERSION, message)
        correlation_id = next(self.owner._correlation)
        try:
            api_key, body = to_wire(request, version)
            client_id = request.get("client_id") or self.owner.client_id
            frame = codec.encode_request(api_key, version, correlation_id, body, client_id)
        except Exception as exc:  # a request the wire cannot carry: the broker never sees it
            message = f"{request['api']} v{version} cannot carry this request: {exc}"
            return self._fail(entry, Error.INVALID_REQUEST, message)
        entry.api_key, entry.version = api_key, version
        self.in_flight[correlation_id] = entry
        self.writer.write(frame)

    async def _run(self) -> None:
        failed = True
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port),
                self.owner.connect_timeout_ms / 1000,
            )
            self.writer = writer
            self.versions = await asyncio.wait_for(
                self._handshake(reader, writer), self.owner.request_timeout_ms / 1000
            )
            self.owner.connects += 1
            waiting, self.waiting = self.waiting, []
            for entry in waiting:
                self._write(entry)
            while True:
                frame = await _read_frame(reader)
                (correlation_id,) = struct.unpack_from(">i", frame, 0)
                found = self.in_flight.pop(correlation_id, None)
                if found is None:
                    raise codec.FrameError(f"a response to no request ({correlation_id})")
                entry = found
                _, wire = codec.decode_response(entry.api_key, entry.version, frame)
                answer = from_wire(
                    entry.request,
                    entry.version,
                    codec.plain(wire),
                    self.owner.offsets_topic_num_partitions,
                )
                self.owner._complete(entry, answer)
        except asyncio.CancelledError:
            failed = self.reason != "transport closed"
        except asyncio.IncompleteReadError:
            self.reason = "connection closed by the broker"
        except TimeoutError:
            self.reason = "connection or ApiVersions timed out"
        except OSError as exc:
            self.reason = f"connection failed: {exc}"
        except Exception as exc:  # an answer that does not decode: the stream is not trusted
            self.reason = f"bad response: {exc!r}"
        finally:
            self.closed = True
            self.owner._closed_connection(self, failed)
            stranded = self.waiting + list(self.in_flight.values())
            self.waiting, self.in_flight = [], {}
            message = f"{self.host}:{self.port}: {self.reason}"
            for entry in stranded:
                self._fail(entry, Error.NETWORK_EXCEPTION, message)
            if self.writer is not None:
                self.writer.close()

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> dict[int, tuple[int, int]]:
        """ApiVersions: what the broker serves, per API key."""
        version = API_VERSIONS_RANGE[1]
        body = {"client_software_name": SOFTWARE_NAME, "client_software_version": _VERSION}
        while True:
            correlation_id = next(self.owner._correlation)
            writer.write(
                codec.encode_request(
                    codec.API_VERSIONS, version, correlation_id, body, self.owner.client_id
                )
            )
            frame = await _read_frame(reader)
            answer = _decode_api_versions(frame, version)
            if answer["correlation_id"] != correlation_id:
                raise codec.FrameError("ApiVersions answered another request")
            served = {
                int(k["api_key"]): (int(k["min_version"]), int(k["max_version"]))
                for k in answer["api_keys"]
            }
            if answer["error_code"] == UNSUPPORTED_VERSION:
                theirs = served.get(codec.API_VERSIONS, (0, 0))[1]
                if theirs >= version or theirs < API_VERSIONS_RANGE[0]:
                    raise codec.FrameError("no ApiVersions version in common")
                version = theirs
                continue
            if answer["error_code"] != 0:
                raise codec.FrameError(f"ApiVersions failed with error {answer['error_code']}")
            return served


_VERSION = _software_version()


def _decode_api_versions(frame: bytes, version: int) -> dict[str, Any]:
    """An ApiVersions answer: at the version sent, or v0 (how a broker answers a version it
    does not serve, with UNSUPPORTED_VERSION)."""
    try:
        correlation_id, body = codec.decode_response(codec.API_VERSIONS, version, frame)
    except Exception:
        correlation_id, body = codec.decode_response(codec.API_VERSIONS, 0, frame)
    plain: dict[str, Any] = codec.plain(body)
    plain["correlation_id"] = correlation_id
    return plain


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    if not 4 <= size <= MAX_RESPONSE_BYTES:
        raise codec.FrameError(f"a response frame of {size} bytes")
    return await reader.readexactly(size)
