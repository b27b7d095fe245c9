"""The gateway's connection protocol, driven byte by byte: frames split anywhere or several in
one read, the frame size cap, answers in request order when one request waits, and reading
paused and resumed under backpressure. A fake transport records what the connection writes and
whether it reads; every wait is on a condition (turns of the event loop), never on a clock."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.gateway import codec
from coordinator.gateway.connection import Connection
from coordinator.gateway.embedded import EmbeddedBackend
from coordinator.gateway.server import Gateway
from tests.gateway_support import REQUESTS, TOPICS, Running, read_frame
from tests.gateway_support import until as until_true


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


class HeldBackend(EmbeddedBackend):
    """The embedded engine, except that the APIs in ``hold`` wait for ``release``."""

    def __init__(self, hold: set[str]) -> None:
        super().__init__(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
        self.hold = hold
        self.release = asyncio.Event()
        self.held = 0

    async def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("api") in self.hold:
            self.held += 1
            await self.release.wait()
        return await super().submit(request)


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


async def until(predicate: Callable[[], bool], turns: int = 1000) -> None:
    """Let the event loop run until ``predicate`` holds (a bounded number of turns)."""
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


def request(api_key: int, version: int, correlation_id: int, **changes: Any) -> bytes:
    return codec.encode_request(api_key, version, correlation_id, {**REQUESTS[api_key], **changes})


def correlation_ids(frames: list[bytes]) -> list[int]:
    return [struct.unpack_from(">i", frame)[0] for frame in frames]


#: ApiVersions, a heartbeat of an unknown member, a commit and an offset fetch: every one
#: answered by the engine at once.
PIPELINE = [
    request(codec.API_VERSIONS, 3, 1),
    request(codec.HEARTBEAT, 4, 2),
    request(codec.OFFSET_COMMIT, 8, 3),
    request(codec.OFFSET_FETCH, 7, 4),
]
STREAM = b"".join(PIPELINE)


def test_requests_answered_at_once_are_answered_within_the_read_in_one_write():
    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.data_received(STREAM)
        # no turn of the event loop: answered inside data_received, all in one write
        assert correlation_ids(transport.answers()) == [1, 2, 3, 4]
        assert transport.writes == 1
        assert transport.reading and not transport.closing

    run(test)


def test_frames_split_at_every_byte_boundary_get_the_same_answers():
    async def test(gateway: Gateway) -> None:
        connection, reference = connect(gateway)
        connection.data_received(STREAM)
        expected = reference.answers()
        for cut in range(1, len(STREAM)):
            connection, transport = connect(gateway)
            connection.data_received(STREAM[:cut])
            connection.data_received(STREAM[cut:])
            assert transport.answers() == expected, cut
        connection, transport = connect(gateway)
        for i in range(len(STREAM)):  # one byte per read
            connection.data_received(STREAM[i : i + 1])
        assert transport.answers() == expected
        assert gateway.closed_for_bad_input == 0

    run(test)


def test_a_frame_larger_than_the_cap_closes_the_connection_after_the_answers_before_it():
    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        oversized = struct.pack(">i", 4097) + b"\0" * 16  # refused on its size alone
        connection.data_received(PIPELINE[0] + oversized)
        assert correlation_ids(transport.answers()) == [1]
        assert transport.closing
        assert gateway.closed_for_bad_input == 1
        connection.data_received(PIPELINE[1])  # nothing more is served
        assert correlation_ids(transport.answers()) == [1]
        at_cap = bytearray(request(codec.API_VERSIONS, 3, 5))
        at_cap += b"\0" * (4096 + 4 - len(at_cap))  # exactly the cap: read (then refused as
        struct.pack_into(">i", at_cap, 0, 4096)  # trailing bytes: the frame does not decode)
        connection, transport = connect(gateway)
        connection.data_received(bytes(at_cap[:100]))
        assert not transport.closing  # a frame at the cap is waited for
        connection.data_received(bytes(at_cap[100:]))
        assert transport.closing and gateway.closed_for_bad_input == 2

    run(test, max_request_bytes=4096)


def test_answers_keep_request_order_when_an_earlier_request_waits():
    backend = HeldBackend({"join_group"})

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        join = request(codec.JOIN_GROUP, 5, 1, member_id="")
        connection.data_received(join + PIPELINE[1] + PIPELINE[0])
        await until(lambda: backend.held == 1)
        # the join waits; the heartbeat and ApiVersions behind it are not answered before it
        for _ in range(20):
            await asyncio.sleep(0)
        assert transport.answers() == []
        backend.release.set()
        await until(lambda: len(transport.answers()) == 3)
        assert correlation_ids(transport.answers()) == [1, 2, 1]
        _, joined = codec.decode_response(codec.JOIN_GROUP, 5, transport.answers()[0])
        assert int(joined.error_code) == 79  # MEMBER_ID_REQUIRED: the join was served
        connection.data_received(PIPELINE[2])  # then at once again
        assert correlation_ids(transport.answers()) == [1, 2, 1, 3]

    run(test, backend=backend)


def test_reading_pauses_with_too_many_requests_behind_a_waiting_one_and_resumes():
    backend = HeldBackend({"join_group"})

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.data_received(request(codec.JOIN_GROUP, 5, 1, member_id=""))
        await until(lambda: backend.held == 1)
        heartbeat = PIPELINE[1]
        connection.data_received(heartbeat + heartbeat[:10])  # two in flight, and a part
        assert transport.reading
        connection.data_received(heartbeat[10:])  # three in flight: the limit
        assert not transport.reading and connection.reading_paused
        backend.release.set()
        await until(lambda: len(transport.answers()) == 3)
        assert transport.reading and not connection.reading_paused
        assert correlation_ids(transport.answers()) == [1, 2, 2]

    run(test, backend=backend, max_in_flight=3)


def test_reading_pauses_while_the_write_buffer_is_full_and_resumes_below_it():
    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.pause_writing()  # what the transport calls above its high-water mark
        assert not transport.reading
        connection.data_received(STREAM)  # read before the pause took effect: kept, unserved
        assert transport.answers() == []
        connection.resume_writing()  # below the low-water mark again
        assert correlation_ids(transport.answers()) == [1, 2, 3, 4]
        assert transport.reading

    run(test)


def test_a_client_that_stops_sending_gets_its_waiting_answer_then_the_close():
    backend = HeldBackend({"heartbeat"})

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.data_received(PIPELINE[0] + PIPELINE[1] + PIPELINE[2][:7])
        assert connection.eof_received() is True  # half-closed: the answers still go out
        await until(lambda: backend.held == 1)
        assert not transport.closing
        backend.release.set()
        await until(lambda: transport.closing)
        assert correlation_ids(transport.answers()) == [1, 2]  # the partial frame is dropped
        assert gateway.closed_for_bad_input == 0

    run(test, backend=backend)


def test_stop_cancels_a_waiting_request_and_closes_its_connection():
    backend = HeldBackend({"join_group"})

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.data_received(request(codec.JOIN_GROUP, 5, 1, member_id=""))
        await until(lambda: backend.held == 1)
        await gateway.stop()
        assert transport.closing and connection.lost.done()
        assert transport.answers() == []

    run(test, backend=backend)


def test_pipelined_requests_on_a_real_socket_are_answered_in_order():
    running = Running()
    try:
        with socket.create_connection(("127.0.0.1", running.port), timeout=10) as sock:
            sock.sendall(STREAM * 50)
            got = [read_frame(sock) for _ in range(4 * 50)]
        assert correlation_ids([frame for frame in got if frame is not None]) == [1, 2, 3, 4] * 50
    finally:
        running.stop()


@pytest.mark.parametrize("cut", [0, 1, 3, 4, 5])
def test_a_bad_size_prefix_split_anywhere_closes_only_that_connection(cut: int):
    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        bad = struct.pack(">i", -1) + b"\0\0"
        connection.data_received(bad[:cut])
        connection.data_received(bad[cut:])
        assert transport.closing and transport.answers() == []
        other, healthy = connect(gateway)
        other.data_received(STREAM)
        assert len(healthy.answers()) == 4

    run(test)


@pytest.mark.slow
def test_a_client_that_does_not_read_its_answers_pauses_reading_until_it_does():
    running = Running()
    try:
        with socket.create_connection(("127.0.0.1", running.port), timeout=30) as sock:
            # answers of ~20 MB: beyond the kernel's buffers and the transport's
            rounds = 25_000
            sender = threading.Thread(target=sock.sendall, args=(STREAM * rounds,), daemon=True)
            sender.start()
            assert until_true(
                lambda: any(c.reading_paused for c in list(running.gateway._open)), 60
            )
            got = [read_frame(sock) for _ in range(4 * rounds)]
            sender.join(30)
            assert not sender.is_alive()
            assert correlation_ids([f for f in got if f is not None]) == [1, 2, 3, 4] * rounds
            assert until_true(
                lambda: not any(c.reading_paused for c in list(running.gateway._open)), 30
            )
    finally:
        running.stop()
