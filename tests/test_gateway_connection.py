"""The gateway's connection protocol, driven byte by byte: frames split anywhere or several in
one read, the frame size cap, answers in request order when one request waits, and reading
paused and resumed under backpressure. Then pipelined dispatch, with a fake back end that keeps
the order it is handed requests in (as the Spark job's does) and answers them when a test
releases them: answers in request order whatever order they finish in, the in-flight bound,
what is not pipelined (SASL, other APIs, several requests per group), failures and stop. A fake
transport records what the connection writes and whether it reads; every wait is on a condition
(turns of the event loop), never on a clock."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.gateway import codec
from coordinator.gateway.embedded import EmbeddedBackend
from coordinator.gateway.security.session import GatewaySecurity
from coordinator.gateway.server import Gateway
from coordinator.security.settings import parse
from tests.connection_support import connect, run
from tests.gateway_support import REQUESTS, TOPICS, Running, read_frame
from tests.gateway_support import until as until_true


class HeldBackend(EmbeddedBackend):
    """The embedded engine, except that the APIs in ``hold`` wait for ``release``."""

    def __init__(self, hold: set[str]) -> None:
        super().__init__(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
        self.hold = hold
        self.release = asyncio.Event()
        self.held = 0

    def answer_now(
        self, request: dict[str, Any]
    ) -> dict[str, Any] | Coroutine[Any, Any, dict[str, Any]]:
        if request.get("api") in self.hold:
            return self._released(request)
        return super().answer_now(request)

    async def _released(self, request: dict[str, Any]) -> dict[str, Any]:
        self.held += 1
        await self.release.wait()
        made = super().answer_now(request)
        return made if isinstance(made, dict) else await made


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


# --- pipelined dispatch ---------------------------------------------------------------------------


class OrderedBackend(EmbeddedBackend):
    """A back end that keeps the order it is handed requests in (``pipelines_requests``), as
    the Spark job's: every request is recorded as it is handed, then answered by the engine
    once the test releases it, in whatever order the test chooses (or failed with an error)."""

    pipelines_requests = True

    def __init__(self) -> None:
        super().__init__(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
        self.handed: list[dict[str, Any]] = []
        self._gates: list[asyncio.Future[Exception | None]] = []
        self.answered = 0
        self.cancelled = 0

    def apis(self) -> list[str]:
        return [r["api"] for r in self.handed]

    async def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        self.handed.append(request)
        gate: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self._gates.append(gate)
        try:
            failure = await gate
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if failure is not None:
            raise failure
        answer = await super().submit(request)
        self.answered += 1
        return answer

    def release(self, *handed: int, failure: Exception | None = None) -> None:
        """Let the requests handed at these positions go on (or fail with ``failure``)."""
        for index in handed:
            self._gates[index].set_result(failure)


def heartbeats(*correlation_ids: int) -> bytes:
    return b"".join(request(codec.HEARTBEAT, 4, c) for c in correlation_ids)


async def turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_back_end_that_keeps_order_is_pipelined_only_outside_upstream_mode():
    assert Gateway(OrderedBackend(), TOPICS).pipelines
    assert not Gateway(EmbeddedBackend(), TOPICS).pipelines  # one at a time, as a broker


def test_pipelined_answers_keep_request_order_when_later_requests_finish_first():
    backend = OrderedBackend()

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.data_received(
            request(codec.HEARTBEAT, 4, 1)
            + request(codec.OFFSET_COMMIT, 8, 2)
            + request(codec.OFFSET_FETCH, 7, 3)
        )
        # within the read, no turn of the event loop: all three handed over, in the order sent
        assert backend.apis() == ["heartbeat", "offset_commit", "offset_fetch"]
        assert connection.in_flight == 3 and transport.answers() == []
        backend.release(2)
        backend.release(1)
        await until(lambda: backend.answered == 2)
        await turns()
        assert transport.answers() == []  # ready, but written after the first one's answer
        backend.release(0)
        await until(lambda: len(transport.answers()) == 3)
        assert correlation_ids(transport.answers()) == [1, 2, 3]
        assert transport.writes == 1  # answers ready together go out in one write
        _, fetched = codec.decode_response(codec.OFFSET_FETCH, 7, transport.answers()[2])
        assert int(fetched.topics[0].partitions[0].committed_offset) == 5  # after the commit
        assert connection.in_flight == 0 and transport.reading and not transport.closing
        connection.data_received(PIPELINE[0])  # ApiVersions: answered at once again
        assert correlation_ids(transport.answers()) == [1, 2, 3, 1]

    run(test, backend=backend)


def test_requests_in_flight_are_bounded_reading_pauses_and_resumes_below():
    backend = OrderedBackend()

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.data_received(heartbeats(1, 2, 3, 4, 5))
        assert len(backend.handed) == 3 and connection.in_flight == 3  # the bound
        assert not transport.reading  # and two more frames read behind them
        backend.release(0)
        await until(lambda: len(backend.handed) == 4)  # one answered, one more served
        assert correlation_ids(transport.answers()) == [1] and not transport.reading
        backend.release(1)
        await until(lambda: len(backend.handed) == 5)
        assert connection.in_flight == 3 and not transport.reading  # at the bound still
        backend.release(2)
        await until(lambda: transport.reading)  # below it: reading again
        backend.release(3, 4)
        await until(lambda: len(transport.answers()) == 5)
        assert correlation_ids(transport.answers()) == [1, 2, 3, 4, 5]

    run(test, backend=backend, max_in_flight=3)


def test_an_api_that_is_not_pipelined_waits_for_the_requests_before_it():
    backend = OrderedBackend()

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        metadata = request(codec.METADATA, 9, 2, include_cluster_authorized_operations=False)
        describe = request(codec.DESCRIBE_GROUPS, 5, 4)  # a request to the back end per group
        connection.data_received(
            heartbeats(1) + metadata + heartbeats(3) + describe + heartbeats(5)
        )
        await turns()
        assert backend.apis() == ["heartbeat"]  # Metadata waits, and so does all behind it
        backend.release(0)
        # the heartbeat's answer, Metadata's at once, then the next heartbeat is pipelined
        await until(lambda: len(backend.handed) == 2)
        assert correlation_ids(transport.answers()) == [1, 2]
        assert backend.apis() == ["heartbeat", "heartbeat"]
        backend.release(1)
        await until(lambda: len(backend.handed) == 3)  # DescribeGroups once it is answered
        assert backend.apis()[2] == "describe_groups"
        await turns()
        assert len(backend.handed) == 3  # it is not pipelined: the heartbeat behind it waits
        backend.release(2)
        await until(lambda: len(backend.handed) == 4)
        backend.release(3)
        await until(lambda: len(transport.answers()) == 5)
        assert correlation_ids(transport.answers()) == [1, 2, 3, 4, 5]

    run(test, backend=backend)


def test_an_offset_fetch_of_several_groups_holds_the_requests_behind_it():
    backend = OrderedBackend()
    two_groups = [
        {"group_id": g, "topics": [{"name": "t", "partition_indexes": [0]}]} for g in ("g", "h")
    ]

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        one = request(codec.OFFSET_FETCH, 8, 1, groups=two_groups[:1])
        both = request(codec.OFFSET_FETCH, 8, 2, groups=two_groups)
        connection.data_received(one + both + heartbeats(3))
        # one group: pipelined; two: a request per group, one after the other, so the
        # heartbeat behind it is not handed over before its second group
        assert [r["group_id"] for r in backend.handed] == ["g", "g"]
        backend.release(1)
        await until(lambda: len(backend.handed) == 3)
        assert backend.handed[2]["group_id"] == "h"
        await turns()
        assert len(backend.handed) == 3
        backend.release(0, 2)
        await until(lambda: len(backend.handed) == 4)
        assert backend.apis()[3] == "heartbeat"
        backend.release(3)
        await until(lambda: len(transport.answers()) == 3)
        assert correlation_ids(transport.answers()) == [1, 2, 3]

    run(test, backend=backend)


SASL_PLAIN = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_alice="alice-secret";'
    ),
    "connection.failed.authentication.delay.ms": "20",
}


def sasl_login(password: str) -> bytes:
    token = f"\0alice\0{password}".encode()
    return request(codec.SASL_HANDSHAKE, 1, 1) + request(
        codec.SASL_AUTHENTICATE, 2, 2, auth_bytes=token
    )


def test_nothing_before_sasl_authentication_completes_is_pipelined():
    backend = OrderedBackend()

    async def test(gateway: Gateway) -> None:
        # a failed authentication's answer waits (the delay): the heartbeat behind it is held,
        # and never served (the connection closes after that answer)
        connection, transport = connect(gateway)
        connection.data_received(sasl_login("wrong") + heartbeats(3))
        assert correlation_ids(transport.answers()) == [1] and connection.in_flight == 1
        deadline = asyncio.get_running_loop().time() + 10
        while not transport.closing and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        assert transport.closing and correlation_ids(transport.answers()) == [1, 2]
        assert backend.handed == []
        # once authenticated, the requests behind the exchange are pipelined
        connection, transport = connect(gateway)
        connection.data_received(sasl_login("alice-secret") + heartbeats(3, 4))
        assert correlation_ids(transport.answers()) == [1, 2]
        assert backend.apis() == ["heartbeat", "heartbeat"]
        backend.release(0, 1)
        await until(lambda: len(transport.answers()) == 4)
        assert correlation_ids(transport.answers()) == [1, 2, 3, 4]

    run(test, backend=backend, security=GatewaySecurity(parse(SASL_PLAIN)))


def test_a_bad_frame_behind_pipelined_requests_closes_after_their_answers():
    backend = OrderedBackend()

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        good = request(codec.HEARTBEAT, 4, 2)
        bad = struct.pack(">i", len(good) - 6) + good[4:-2]  # its body cut short
        connection.data_received(heartbeats(1) + bad + heartbeats(3))
        assert backend.apis() == ["heartbeat"] and not transport.closing
        backend.release(0)
        await until(lambda: transport.closing)
        assert correlation_ids(transport.answers()) == [1]
        assert gateway.closed_for_bad_input == 1 and len(backend.handed) == 1

    run(test, backend=backend)


def test_a_pipelined_request_that_fails_closes_after_the_answers_before_it():
    backend = OrderedBackend()

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.data_received(heartbeats(1, 2, 3))
        backend.release(1, failure=RuntimeError("an internal error"))
        await turns()
        assert transport.answers() == [] and not transport.closing
        backend.release(0)
        await until(lambda: transport.closing)
        assert correlation_ids(transport.answers()) == [1]
        await until(lambda: backend.cancelled == 1)  # the one behind it, in flight
        assert gateway.closed_for_bad_input == 0

    run(test, backend=backend)


def test_stop_cancels_every_pipelined_request_in_flight():
    backend = OrderedBackend()

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.data_received(heartbeats(1, 2, 3))
        assert connection.in_flight == 3
        await gateway.stop()
        assert backend.cancelled == 3
        assert transport.closing and connection.lost.done() and transport.answers() == []

    run(test, backend=backend)


def test_connection_lost_cancels_every_pipelined_request_in_flight():
    backend = OrderedBackend()

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.data_received(heartbeats(1, 2, 3))
        backend.release(1)
        await until(lambda: backend.answered == 1)  # the second is answered, waits for the first
        connection.connection_lost(ConnectionResetError())
        await until(lambda: backend.cancelled == 2)
        await turns()
        assert transport.answers() == [] and connection.in_flight == 0

    run(test, backend=backend)


def test_the_embedded_back_end_keeps_one_request_at_a_time():
    backend = HeldBackend({"join_group", "heartbeat"})

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        connection.data_received(request(codec.JOIN_GROUP, 5, 1, member_id="") + heartbeats(2))
        await until(lambda: backend.held == 1)
        await turns()
        assert backend.held == 1  # the heartbeat is not served while the join waits
        backend.release.set()
        await until(lambda: len(transport.answers()) == 2)
        assert backend.held == 2

    run(test, backend=backend)


def test_connections_arriving_while_the_event_loop_is_busy_wait_to_be_accepted():
    """The event loop that serves requests also accepts: connections made while it is busy wait
    in the listening socket's queue. Three hundred of them (a hundred consumers starting
    together open that many) all complete their handshake at once; with asyncio's default
    queue of 100 the kernel dropped the rest, whose clients sent their SYN again a second
    later. Then each is served."""
    count = 300
    somaxconn = Path("/proc/sys/net/core/somaxconn")
    if somaxconn.is_file() and int(somaxconn.read_text()) < count:
        pytest.skip(f"the kernel caps accept queues at {somaxconn.read_text().strip()}")

    async def test(gateway: Gateway) -> None:
        socks: list[socket.socket] = []
        try:
            for _ in range(count):  # on the loop's thread: nothing is accepted meanwhile
                sock = socket.socket()
                socks.append(sock)
                sock.settimeout(0.5)  # below TCP's one-second retransmission of a dropped SYN
                sock.connect(("127.0.0.1", gateway.port))

            def ask_each() -> list[int]:
                for sock in socks:
                    sock.settimeout(10)
                    sock.sendall(request(codec.API_VERSIONS, 3, 7))
                return correlation_ids([read_frame(sock) or b"" for sock in socks])

            assert await asyncio.to_thread(ask_each) == [7] * count
        finally:
            for sock in socks:
                sock.close()

    run(test)


def test_a_listen_backlog_below_one_is_refused():
    with pytest.raises(ValueError, match="listen_backlog"):
        Gateway(EmbeddedBackend(), TOPICS, "127.0.0.1", 0, listen_backlog=0)


def test_the_upstream_links_of_a_connection_closed_as_the_gateway_stops_are_closed() -> None:
    """A client connection closed just before stop: its upstream links are still closed, once
    (their closing was once cancelled with the request handlers before its first step, which
    left their sockets open and warned "coroutine ... was never awaited")."""
    closed: list[str] = []

    class Link:
        def __init__(self) -> None:
            self.brokers = {("127.0.0.1", 1): None}

        async def close(self) -> None:
            await asyncio.sleep(0)
            closed.append("link")

    async def test(gateway: Gateway) -> None:
        connect(gateway)  # open while the gateway stops: its stop cancels the handlers
        gone, _ = connect(gateway)
        gone.link = Link()  # type: ignore[assignment]
        gateway.closed(gone)
        await gateway.stop()
        assert closed == ["link"]

    run(test)
