"""One client connection of the gateway: an ``asyncio.Protocol`` that splits Kafka's frames
(``INT32 size`` + frame) out of the bytes as they arrive and serves them one at a time.

One request at a time, as a Kafka broker: its network thread mutes a connection once a request
is complete and unmutes it when the answer is sent, so a connection's requests reach the
coordinator in the order sent and their answers go back in that order. Here, a request whose
answer is ready at once (the engine answers synchronously: a heartbeat, a commit without a log,
an offset fetch) is served inside ``data_received``, with no task and no trip through the event
loop; the first request that has to wait (a JoinGroup in purgatory, a commit waiting for its log
write, a forwarded request, the Spark back end, a delayed failed-authentication answer) goes on
in a task, and the frames behind it stay in the buffer until it is answered.

Every answer made ready while handling one read (several frames may come in one) goes out in a
single ``transport.write``.

Backpressure: reading pauses while the transport's write buffer is above its high-water mark
(the client does not read its answers; no further request is served either, as a stream's
``drain`` would wait), and while a request waits with :attr:`Connection.max_in_flight` requests
in flight (the one waiting and the complete frames behind it) or more than a frame's worth of
bytes buffered; it resumes once below.

Frame sizes are checked as soon as a frame's size prefix is the next to serve, with the session's
limit at that moment (before authentication, Kafka's ``sasl.server.max.receive.size``); a frame
out of range, or one that does not decode, closes the connection after the answers already made.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any

from coordinator.gateway.codec import FrameError
from coordinator.gateway.security.session import SASL_MAX_RECEIVE_BYTES, Session
from coordinator.gateway.upstream import ClientLink
from coordinator.security.settings import Listener

if TYPE_CHECKING:
    from coordinator.gateway.server import Gateway

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")

#: A request waiting, and this many requests in flight on its connection (itself and the
#: complete frames read behind it): reading pauses until it is answered.
DEFAULT_MAX_IN_FLIGHT = 16

Answer = Coroutine[Any, Any, bytes | None]


class _Resume:
    """The rest of a coroutine that was stepped by hand and suspended on ``first`` (what its
    first ``send`` yielded), for a task to drive from there: each value it yields goes up to
    the task, each value or exception the task sends back goes down to it."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Answer, first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, bytes | None]:
        inner = self._coro.__await__()
        pending = self._first
        while True:
            try:
                value = yield pending
            except GeneratorExit:
                self._coro.close()
                raise
            except BaseException as exc:  # CancelledError, passed down
                try:
                    pending = inner.throw(exc)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                continue
            try:
                pending = inner.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]


async def _finish(coro: Answer, first: Any) -> bytes | None:
    return await _Resume(coro, first)


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
        #: the request being served in a task (it waits); the frames behind it wait in _buf
        self._task: asyncio.Task[bytes | None] | None = None
        #: while a request waits: complete frames in _buf, and where counting them goes on
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
        self._idle: asyncio.TimerHandle | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

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
        if self._task is None and not self._buf and not self._write_paused:
            self._serve_buffered(data)  # the usual case: whole frames, nothing before them
            return
        self._buf += data
        if self._task is None:
            self._serve_buffered()
        else:  # a request waits: count what piles up behind it
            self._count_queued()
            self._update_reading()

    def eof_received(self) -> bool:
        """The client will send no more: serve what is complete, then close."""
        self._eof = True
        if self._task is None and not self._write_paused:
            self._close()
        # closed by us once the complete frames are answered (TLS transports close anyway)
        return not self._tls

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._task is None:
            self._serve_buffered()
        else:
            self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._idle is not None:
            self._idle.cancel()
        if self._task is not None:
            self._task.cancel()
        self.gateway.closed(self)
        if not self.lost.done():
            self.lost.set_result(None)

    # --- serving -------------------------------------------------------------------------------

    def _serve_buffered(self, data: bytes | None = None) -> None:
        """Serve the buffer's complete frames (or those of ``data``, read into an empty
        buffer) in order until one has to wait (or none is left), then write every answer
        made ready at once."""
        buf: bytes | bytearray = self._buf if data is None else data
        pos = 0
        session = self.session
        assert session is not None
        try:
            while not self._closing and not self._write_paused:
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
                frame = bytes(buf[pos + 4 : end])
                pos = end
                if self._serve(frame):  # waits: the rest stays buffered
                    break
        except FrameError as exc:
            self._bad_input(exc)
        except (ConnectionError, TimeoutError):
            self._close()
        except Exception:
            log.exception("closing %s after an internal error", self.client_host)
            self._close()
        if data is not None:
            if pos < len(data):
                self._buf += data[pos:] if pos else data
        elif pos:
            del self._buf[:pos]
        if self._task is not None:
            self._scanned = self._queued = 0
            self._count_queued()
        elif self._eof and not self._write_paused:
            self._close()  # whatever is left is not a whole frame
        self._write_out()
        self._update_reading()

    def _serve(self, frame: bytes) -> bool:
        """Serve one frame: answered at once when nothing in it waits, else in a task.
        True when it waits."""
        self._last_active = -1.0  # busy; the idle clock starts again once answered
        answer = self.gateway.answer(frame, self)
        if self.gateway.upstream is not None:
            # upstream requests run in a task from the start (asyncio.timeout needs one)
            self._wait(asyncio.ensure_future(answer))
            return True
        try:
            suspended = answer.send(None)
        except StopIteration as done:
            self._answered(done.value)
            return False
        self._wait(asyncio.ensure_future(_finish(answer, suspended)))
        return True

    def _wait(self, task: asyncio.Task[bytes | None]) -> None:
        self._task = task
        self.gateway.track(task)
        task.add_done_callback(self._resumed)

    def _answered(self, response: bytes | None) -> None:
        if response is not None:
            self._out.append(response)
        if self.close_after_answer:
            self._close()
        elif self._last_active < 0:
            self._last_active = asyncio.get_running_loop().time()

    def _resumed(self, task: asyncio.Task[bytes | None]) -> None:
        self._task = None
        if task.cancelled() or self._closing:
            return
        exc = task.exception()
        if exc is None:
            self._answered(task.result())
        elif isinstance(exc, FrameError):
            self._bad_input(exc)
        elif isinstance(exc, ConnectionError | TimeoutError):
            self._close()
        else:
            log.error("closing %s after an internal error", self.client_host, exc_info=exc)
            self._close()
        self._serve_buffered()

    def _write_out(self) -> None:
        out = self._out
        if out and self.transport is not None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
        if self._closing and self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # after what is written

    def _count_queued(self) -> None:
        """While a request waits: count the complete frames read behind it."""
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
        pause = self._write_paused or (
            self._task is not None
            and (
                self._queued + 1 >= self.max_in_flight
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

    # --- closing -------------------------------------------------------------------------------

    def _bad_input(self, exc: FrameError) -> None:
        self.bad_input = True
        self.gateway.closed_for_bad_input += 1
        log.info("closing %s: %s", self.client_host, exc)
        self._close()

    def _close(self) -> None:
        """Close once the answers made ready are written."""
        self._closing = True
        self._write_out()

    def _check_idle(self) -> None:
        """Kafka's connections.max.idle.ms: closed after that long without a request (the
        time a request waits does not count)."""
        if self._closing:
            return
        loop = asyncio.get_running_loop()
        timeout = self.gateway.idle_timeout_s
        idle = 0.0 if self._last_active < 0 else loop.time() - self._last_active
        if idle >= timeout and self._task is None:
            self._close()
            return
        self._idle = loop.call_later(timeout - idle, self._check_idle)

    def stop(self) -> None:
        """The gateway stops: the waiting request is cancelled and the connection closed (a TLS
        one aborted: no close_notify exchange with a client that may never answer it)."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
        transport = self.transport
        if transport is None:
            return
        if self._tls:
            transport.abort()
        else:
            self._write_out()
