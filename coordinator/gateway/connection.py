"""One client connection of the gateway: an ``asyncio.Protocol`` that splits Kafka's frames
(``INT32 size`` + frame) out of the bytes as they arrive and serves them in order.

One request at a time, as a Kafka broker: its network thread mutes a connection once a request
is complete and unmutes it when the answer is sent, so a connection's requests reach the
coordinator in the order sent and their answers go back in that order. Here, a request whose
answer is ready at once (the engine answers synchronously: a heartbeat, a commit without a log,
an offset fetch) is served inside ``data_received``, with no task and no trip through the event
loop; the first request that has to wait (a JoinGroup in purgatory, a commit waiting for its log
write, a forwarded request, the Spark back end, a delayed failed-authentication answer) goes on
in a task, and the frames behind it stay in the buffer until it is answered (unless pipelined,
below).

Every answer made ready while handling one read (several frames may come in one), or when a
waiting request is answered, goes out in a single ``transport.write``.

Pipelined dispatch, with a back end that keeps the order it is handed requests in (its
``pipelines_requests``: the Spark job's :class:`~coordinator.gateway.forwarding.JobBackend`;
never the embedded engine, never in upstream mode). Through the job every answer takes at least
a micro-batch (0.5-3 s on a loaded box), so one request at a time would make a client's requests
queued on one connection each wait for a batch of their own: librdkafka sends OffsetFetch,
OffsetCommit and ConsumerGroupHeartbeat on its coordinator connection, gives up on a heartbeat
after its interval (5 s) and then drops the connection with every request in flight. So a group
API that hands the back end exactly one request dict and then waits for its answer
(:data:`~coordinator.gateway.apis.SINGLE_SUBMIT`: Heartbeat, OffsetCommit, OffsetFetch of one
group, JoinGroup, SyncGroup, LeaveGroup, ConsumerGroupHeartbeat, ListGroups, OffsetDelete) does
not hold the frames behind it: the connection goes on serving them, up to ``max_in_flight``
requests at once, and a client's back-to-back requests go into one inbox file and are answered
by one micro-batch. This differs from a Kafka broker, which reads a connection's next request
only once the previous one is answered; it keeps Kafka's guarantee for one connection, requests
processed in the order sent and answers returned in that order: each request is handed to the
back end before the next frame is served (``JobBackend.submit`` queues it before it waits, so
the connection's requests are in the job's inbox in the order sent), the job applies a group's
requests in (inbox file, line) order, and the answers are written strictly in request order (a
later answer that is ready waits for the earlier ones; those ready together go out in one
write). What a client could notice: a request behind a JoinGroup that the job parks until its
rebalance completes is applied while the join waits, as if it had come on another connection
(a broker would read it after the join's answer); Kafka's clients send nothing more for that
group on that connection meanwhile.

Everything else behind a pipelined request waits as above, until every request before it is
answered: an API not in that set (Metadata, FindCoordinator; DescribeGroups, DeleteGroups and
ConsumerGroupDescribe, which hand a request per group one after another), and, holding the
frames behind it, a request that turns out to hand the back end no request or several, or to
wait for something else (anything before SASL authentication completes, a delayed
failed-authentication answer). A request that fails (bad input, an internal error) closes the
connection once the answers before it are written; the requests in flight behind it are
cancelled, as every request in flight is on stop or when the connection is lost (one already in
the job's inbox is still applied, as a Kafka request whose connection dropped).

Backpressure: reading pauses while the transport's write buffer is above its high-water mark
(the client does not read its answers; no further request is served either, as a stream's
``drain`` would wait), and while requests are in flight with :attr:`Connection.max_in_flight`
requests on the connection (those served and not yet answered, and the complete frames behind
them) or more than a frame's worth of bytes buffered; it resumes once below.

Frame sizes are checked as soon as a frame's size prefix is the next to serve, with the session's
limit at that moment (before authentication, Kafka's ``sasl.server.max.receive.size``); a frame
out of range, or one that does not decode, closes the connection after the answers before it.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from coordinator.gateway.apis import SINGLE_SUBMIT
from coordinator.gateway.codec import FrameError
from coordinator.gateway.security.session import SASL_MAX_RECEIVE_BYTES, Session
from coordinator.gateway.upstream import ClientLink
from coordinator.security.settings import Listener

if TYPE_CHECKING:
    from coordinator.gateway.server import Gateway

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")
#: A Heartbeat frame's first bytes (its API key)
_HEARTBEAT = _API_KEY.pack(12)

#: Requests in flight on one connection (served and not answered, and the complete frames read
#: behind them) at which reading pauses until the first is answered.
DEFAULT_MAX_IN_FLIGHT = 16

Answer = Coroutine[Any, Any, bytes | None]


class _Resume(Coroutine[Any, Any, bytes | None]):
    """The rest of a coroutine that was stepped by hand and suspended on ``first`` (what its
    first ``send`` yielded), as a coroutine for a task to drive from there: the task's first
    step gets ``first``, every later value or exception goes down to the coroutine. A task
    cancelled before its first step throws into the suspended coroutine too (a coroutine
    function wrapping it would end without it ever hearing of the cancel)."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Answer, first: Any) -> None:
        self._coro = coro
        self._first: Any = first

    def send(self, value: Any) -> Any:
        first = self._first
        if first is _STARTED:
            return self._coro.send(value)
        self._first = _STARTED
        return first

    def throw(self, *exc: Any) -> Any:
        self._first = _STARTED
        return self._coro.throw(*exc)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, Any, bytes | None]:
        raise TypeError("driven by a task, not awaited")


_STARTED = object()


class _Made:
    """The outcome of a request served while earlier ones are in flight, made at once: its
    answer, or the error that closes the connection once the answers before it are out."""

    __slots__ = ("answer", "error")

    def __init__(self, answer: bytes | None, error: Exception | None = None) -> None:
        self.answer = answer
        self.error = error


class Connection(asyncio.Protocol):
    """A client's connection to one of the gateway's listeners (module doc)."""

    def __init__(self, gateway: Gateway, node_id: int | None, listener: Listener | None) -> None:
        self.gateway = gateway
        self.listener = listener
        self.link = ClientLink(node_id)
        self.max_in_flight = gateway.max_in_flight
        self.client_host = "/unknown"
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        #: the bytes read and not yet served (whole frames, then the start of the next)
        self._buf = bytearray()
        #: answers made ready and not yet written
        self._out: list[bytes] = []
        #: the requests served and not yet answered, in request order: a task per request that
        #: waits, and the outcomes made at once behind the first of them
        self._in_flight: deque[asyncio.Task[bytes | None] | _Made] = deque()
        #: the newest request in flight is not pipelined: the frames behind it wait in _buf
        self._blocked = False
        #: pipelined dispatch (module doc): the gateway's back end keeps the order of requests
        self._pipelines = gateway.pipelines
        #: set while a request's answer is first stepped: it hands the back end one request
        #: dict at most (:func:`coordinator.gateway.apis.submits_once`)
        self.submits_once = False
        #: while requests are in flight: complete frames in _buf, and where counting goes on
        self._queued = 0
        self._scanned = 0
        self._write_paused = False
        self._read_paused = False
        self._eof = False
        self._tls = False
        #: set once the connection is to close (after writing what is ready)
        self._closing = False
        #: the request being served asked to close after its answer (SASL)
        self.close_after_answer = False
        self.bad_input = False
        self._last_active = 0.0
        #: the last heartbeat served in place from a read of it alone: (the read's length, its
        #: first 8 bytes (size, API key, version), its bytes after the correlation id, and what
        #: serves it again given a correlation id: Gateway.heartbeat_repeater), so the same
        #: heartbeat is not read again
        self._heard: tuple[int, bytes, bytes, Callable[[bytes], bytes | None]] | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self.lost: asyncio.Future[None] = self._loop.create_future()

    # --- asyncio's callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's: not a subclass
        gateway = self.gateway
        peer = transport.get_extra_info("peername")
        self._tls = transport.get_extra_info("ssl_object") is not None
        self.client_host = f"/{peer[0]}" if isinstance(peer, tuple) else "/unknown"
        advertised = None
        if self.listener is not None:  # not the main listener: Metadata names this one
            advertised = (self.listener.host, gateway.listener_ports[self.listener.name])
        self.session = gateway.security.open_session(
            peer, transport.get_extra_info("ssl_object"), self.listener, advertised
        )
        gateway.opened(self)
        loop = asyncio.get_running_loop()
        self._last_active = loop.time()
        self._idle = loop.call_later(gateway.idle_timeout_s, self._check_idle)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if not self._in_flight and not self._buf and not self._write_paused:
            # The commonest read of all: one whole Heartbeat frame, which the engine serves in
            # place (what _serve_buffered and _serve would do with it, in one step).
            heard = self._heard
            made = None
            try:
                if (
                    heard is not None
                    and len(data) == heard[0]
                    and data.startswith(heard[1])
                    and data.endswith(heard[2])
                ):
                    # The last heartbeat served in place, again but for its correlation id (a
                    # member's every heartbeat while its generation lasts): served as it was.
                    made = heard[3](data[8:12])
                elif (
                    data[4:6] == _HEARTBEAT
                    and len(data) - 4
                    == _SIZE.unpack_from(data)[0]
                    <= self.gateway.max_request_bytes
                ):
                    served = self.gateway.heartbeat_in_place(data[4:], self.session)
                    if served is not None:
                        made = served[0]
                        self._heard = (len(data), data[:8], data[12:], served[1])
            except Exception as exc:  # as _serve_buffered fails it: nothing is in flight
                self._fail(exc)
                return
            if made is not None:
                self._last_active = self._loop.time()
                self.transport.write(made)  # type: ignore[union-attr]
                return
            self._serve_buffered(data)  # the usual case: whole frames, nothing before them
            return
        self._buf += data
        if not self._blocked:
            self._serve_buffered()
        else:  # a request waits: count what piles up behind it
            self._count_queued()
            self._update_reading()

    def eof_received(self) -> bool:
        """The client will send no more: serve what is complete, then close."""
        self._eof = True
        if not self._in_flight and not self._write_paused:
            self._close()
        # closed by us once the complete frames are answered (TLS transports close anyway)
        return not self._tls

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self._blocked:
            self._serve_buffered()
        else:
            self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._idle is not None:
            self._idle.cancel()
        self._cancel_in_flight()
        self.gateway.closed(self)
        if not self.lost.done():
            self.lost.set_result(None)

    # --- serving -------------------------------------------------------------------------------

    def _serve_buffered(self, data: bytes | None = None) -> None:
        """Serve the buffer's complete frames (or those of ``data``, read into an empty
        buffer) in order while they may be served (module doc), then write every answer made
        ready at once."""
        buf: bytes | bytearray = self._buf if data is None else data
        pos = 0
        session = self.session
        assert session is not None
        in_flight = self._in_flight
        try:
            while not self._closing and not self._write_paused:
                if in_flight and (self._blocked or len(in_flight) >= self.max_in_flight):
                    break
                have = len(buf) - pos
                if have < 4:
                    break
                (size,) = _SIZE.unpack_from(buf, pos)
                # before SASL completes, Kafka's sasl.server.max.receive.size bounds a frame
                authenticated = session.authenticated
                limit = self.gateway.max_request_bytes if authenticated else SASL_MAX_RECEIVE_BYTES
                if size < 0 or size > limit or (size < 8 and authenticated):
                    raise FrameError(f"frame size {size} outside 8..{limit}")
                end = pos + 4 + size
                if end > len(buf):
                    break
                pipelinable = (
                    self._pipelines
                    and authenticated
                    and _API_KEY.unpack_from(buf, pos + 4)[0] in SINGLE_SUBMIT
                )
                if in_flight and not pipelinable:
                    break  # served once everything before it is answered
                frame = bytes(buf[pos + 4 : end])
                pos = end
                self._serve(frame, pipelinable)
        except Exception as exc:
            self._failed(exc)
        if data is not None:
            if pos < len(data):
                self._buf += data[pos:] if pos else data
        elif pos:
            del self._buf[:pos]
        if in_flight:
            self._scanned = self._queued = 0
            self._count_queued()
        elif self._eof and not self._write_paused:
            self._close()  # whatever is left is not a whole frame
        self._write_out()
        self._update_reading()

    def _serve(self, frame: bytes, pipelinable: bool) -> None:
        """Serve one frame: answered at once when nothing in it waits, else in a task, which
        holds the frames behind it unless it is pipelined (module doc)."""
        self._last_active = -1.0  # busy; the idle clock starts again once answered
        gateway = self.gateway
        answer: Answer | None = None
        if frame.startswith(_HEARTBEAT) and gateway.answers_now is not None:
            made = gateway.heartbeat_now(frame, self)  # the commonest request, the short way
            if isinstance(made, bytes):
                if self._in_flight:
                    self._in_flight.append(_Made(made))
                else:
                    self._answered(made)
                return
            answer = made
        if answer is None:
            answer = gateway.answer(frame, self)
        if gateway.upstream is not None:
            # upstream requests run in a task from the start (asyncio.timeout needs one)
            self._wait(asyncio.ensure_future(answer), pipelined=False)
            return
        handed = 0
        if pipelinable:
            handed = gateway.handed
            self.submits_once = False
        try:
            suspended = answer.send(None)
        except StopIteration as done:
            if self._in_flight:  # behind earlier requests: written after their answers
                self._in_flight.append(_Made(done.value))
            else:
                self._answered(done.value)
            return
        # pipelined: it waits inside the one request dict it handed the back end, which holds
        # it in the order of this connection's requests
        pipelined = pipelinable and self.submits_once and gateway.handed == handed + 1
        self._wait(asyncio.ensure_future(_Resume(answer, suspended)), pipelined)

    def _wait(self, task: asyncio.Task[bytes | None], pipelined: bool) -> None:
        self._in_flight.append(task)
        self._blocked = not pipelined
        self.gateway.track(task)
        task.add_done_callback(self._resumed)

    def _answered(self, response: bytes | None) -> None:
        if response is not None:
            self._out.append(response)
        if self.close_after_answer:
            self._close()
        elif self._last_active < 0:
            self._last_active = self._loop.time()

    def _resumed(self, task: asyncio.Task[bytes | None]) -> None:
        if self._closing:
            return
        self._pass_on()
        self._serve_buffered()

    def _pass_on(self) -> None:
        """Take the outcomes of the requests in flight, in request order, up to the first that
        still waits: answers to write, or a failure that closes the connection."""
        in_flight = self._in_flight
        error: BaseException | None
        while in_flight and not self._closing:
            head = in_flight[0]
            if isinstance(head, _Made):
                answer, error = head.answer, head.error
            elif not head.done():
                break
            elif head.cancelled():  # by the gateway's stop
                self._close()
                return
            else:
                error = head.exception()
                answer = None if error is not None else head.result()
            in_flight.popleft()
            if error is not None:
                self._fail(error)
                return
            self._answered(answer)
        if not in_flight:
            self._blocked = False

    def _failed(self, exc: Exception) -> None:
        """A request failed as it was served: at once when nothing is in flight before it,
        else once the answers before it are out."""
        if self._in_flight:
            self._in_flight.append(_Made(None, exc))
            self._blocked = True
        else:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if isinstance(exc, FrameError):
            self._bad_input(exc)
        elif isinstance(exc, ConnectionError | TimeoutError):
            self._close()
        else:
            log.error("closing %s after an internal error", self.client_host, exc_info=exc)
            self._close()

    def _write_out(self) -> None:
        out = self._out
        if out and self.transport is not None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
        if self._closing and self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # after what is written

    def _count_queued(self) -> None:
        """While requests are in flight: count the complete frames read behind them."""
        buf = self._buf
        pos = self._scanned
        while len(buf) - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or pos + 4 + size > len(buf):
                break  # incomplete (or bad: refused when its turn comes)
            pos += 4 + size
            self._queued += 1
        self._scanned = pos

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self._closing:
            return
        in_flight = len(self._in_flight)
        pause = self._write_paused or (
            in_flight > 0
            and (
                in_flight + self._queued >= self.max_in_flight
                or len(self._buf) > self.gateway.max_request_bytes + 4
            )
        )
        if pause != self._read_paused:
            self._read_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    @property
    def reading_paused(self) -> bool:
        return self._read_paused

    @property
    def in_flight(self) -> int:
        """The requests served and not yet answered."""
        return len(self._in_flight)

    # --- closing -------------------------------------------------------------------------------

    def _bad_input(self, exc: FrameError) -> None:
        self.bad_input = True
        self.gateway.closed_for_bad_input += 1
        log.info("closing %s: %s", self.client_host, exc)
        self._close()

    def _close(self) -> None:
        """Close once the answers made ready are written; what is still in flight is
        cancelled (its answer would come after a failure, or to no one)."""
        self._closing = True
        self._cancel_in_flight()
        self._write_out()

    def _cancel_in_flight(self) -> None:
        for request in self._in_flight:
            if not isinstance(request, _Made):
                request.cancel()
        self._in_flight.clear()
        self._blocked = False

    def _check_idle(self) -> None:
        """Kafka's connections.max.idle.ms: closed after that long without a request (the
        time a request waits does not count)."""
        if self._closing:
            return
        loop = asyncio.get_running_loop()
        timeout = self.gateway.idle_timeout_s
        idle = 0.0 if self._last_active < 0 else loop.time() - self._last_active
        if idle >= timeout and not self._in_flight:
            self._close()
            return
        self._idle = loop.call_later(timeout - idle, self._check_idle)

    def stop(self) -> None:
        """The gateway stops: the requests in flight are cancelled and the connection closed (a
        TLS one aborted: no close_notify exchange with a client that may never answer it)."""
        self._closing = True
        self._cancel_in_flight()
        transport = self.transport
        if transport is None:
            return
        if self._tls:
            transport.abort()
        else:
            self._write_out()
