"""The gateway's short way for a Heartbeat (``Gateway.heartbeat_now``: the fast path's reader,
the embedded back end's ``answer_now``, a cached framed answer) answers every heartbeat byte for
byte as the general dispatch does (``Gateway.answer``), on the same engine and at the same state:
every version, a member in and out of its generation, unknown members and groups, a static
member's instance id, an empty group id, a group rebalancing; and it leaves to the general way
what it does not serve (a session not authenticated yet, a principal the ACLs deny, a frame the
fast path does not read). A member's heartbeat in its generation is served in place by the
engine (``EmbeddedBackend.heartbeat_in_place``), never ahead of answers held for the log, and a
read of one whole Heartbeat frame is answered from the connection's ``data_received``, and the
same heartbeat again (but for its correlation id) is not read again."""

from __future__ import annotations

import asyncio
import copy
import struct
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.engine import GroupCoordinator
from coordinator.gateway import apis, codec, embedded, fastpath
from coordinator.gateway.connection import Connection
from coordinator.gateway.embedded import EmbeddedBackend
from coordinator.gateway.security.session import GatewaySecurity
from coordinator.gateway.server import Gateway
from coordinator.security.acl import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from coordinator.security.settings import parse
from tests.connection_support import connect, run
from tests.gateway_support import TOPICS

ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 22, 25, 27
GROUP_AUTHORIZATION_FAILED, FENCED_INSTANCE_ID = 30, 82


def _done(coro: Coroutine[Any, Any, bytes | None]) -> bytes | None:
    """The answer of a coroutine that does not wait."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise AssertionError("the general way waited for a heartbeat")


def _heartbeat(version: int, correlation_id: int, **body: Any) -> bytes:
    """A Heartbeat frame without its size prefix."""
    fields = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
    return codec.encode_request(codec.HEARTBEAT, version, correlation_id, {**fields, **body})[4:]


async def _join(
    gateway: Gateway, member_id: str = "", instance_id: str | None = None
) -> dict[str, Any]:
    body = {
        "group_id": "g",
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": member_id,
        "group_instance_id": instance_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
        "reason": None,
    }
    version = 3 if instance_id is None else 5  # v5: instance ids
    return await apis.join_group(gateway._ctx, version, body, "c", "/127.0.0.1")


async def _stable_member(gateway: Gateway, instance_id: str | None = None) -> tuple[str, int]:
    joined = await _join(gateway, instance_id=instance_id)
    member, generation = joined["member_id"], joined["generation_id"]
    sync = {
        "group_id": "g",
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": instance_id,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": b""}],
    }
    assert (await apis.sync_group(gateway._ctx, 3, sync))["error_code"] == 0
    return member, generation


def _both_ways(gateway: Gateway, connection: Connection, frame: bytes) -> tuple[bytes, bytes]:
    """(the short way's answer, the general way's) to one frame, at the same state."""
    short = gateway.heartbeat_now(frame, connection)
    assert isinstance(short, bytes), "the short way did not answer it at once"
    general = _done(gateway.answer(frame, connection))
    assert general is not None
    return short, general


def _error(framed: bytes, version: int) -> int:
    _, body = codec.decode_response(codec.HEARTBEAT, version, framed[4:])
    return int(codec.plain(body)["error_code"])


def test_every_heartbeat_is_answered_the_short_way_as_the_general_way_answers_it():
    async def test(gateway: Gateway) -> None:
        assert gateway.answers_now is not None
        connection, _ = connect(gateway)
        member, generation = await _stable_member(gateway)
        cases: list[tuple[dict[str, Any], int]] = [
            ({"member_id": member, "generation_id": generation}, 0),
            ({"member_id": member, "generation_id": generation + 1}, ILLEGAL_GENERATION),
            ({"member_id": member, "generation_id": -1}, ILLEGAL_GENERATION),
            ({"member_id": "nobody", "generation_id": generation}, UNKNOWN_MEMBER_ID),
            ({"group_id": "other", "member_id": member}, UNKNOWN_MEMBER_ID),
            ({"group_id": "", "member_id": member}, -1),  # whatever the engine answers
            ({"member_id": "ü-not-ascii", "generation_id": generation}, UNKNOWN_MEMBER_ID),
        ]
        low, high = codec.SUPPORTED[codec.HEARTBEAT]
        correlation_id = 0
        for version in range(low, high + 1):
            with_instance = [({"member_id": member, "group_instance_id": "i1"}, -1)]
            for body, expected in cases + (with_instance if version >= 3 else []):
                correlation_id += 1
                frame = _heartbeat(version, correlation_id, **body)
                short, general = _both_ways(gateway, connection, frame)
                assert short == general, (version, body)
                assert codec.decode_response(codec.HEARTBEAT, version, short[4:])[0] == (
                    correlation_id
                )
                if expected >= 0:
                    assert _error(short, version) == expected, (version, body)
        # a second member joins: the group rebalances, and the first is told so either way
        joining = asyncio.ensure_future(_join(gateway))
        for _ in range(100):
            await asyncio.sleep(0)
        frame = _heartbeat(high, 99, member_id=member, generation_id=generation)
        short, general = _both_ways(gateway, connection, frame)
        assert short == general
        assert _error(short, high) == REBALANCE_IN_PROGRESS
        joining.cancel()
        await asyncio.gather(joining, return_exceptions=True)

    run(test)


def test_a_heartbeat_the_acls_deny_goes_the_general_way():
    security = GatewaySecurity(parse({"authorizer.class.name": "x"}))

    async def test(gateway: Gateway) -> None:
        connection, _ = connect(gateway)
        frame = _heartbeat(4, 7)
        assert gateway.heartbeat_now(frame, connection) is None
        answer = _done(gateway.answer(frame, connection))
        assert answer is not None and _error(answer, 4) == GROUP_AUTHORIZATION_FAILED

    run(test, security=security)


def test_what_the_short_way_does_not_serve_goes_the_general_way():
    async def test(gateway: Gateway) -> None:
        connection, _ = connect(gateway)
        heartbeat = _heartbeat(4, 7)
        # trailing bytes: the fast path declines, kio refuses it, the connection closes
        assert gateway.heartbeat_now(heartbeat + b"\0", connection) is None
        # another API
        other = codec.encode_request(codec.API_VERSIONS, 0, 8, {})[4:]
        assert gateway.heartbeat_now(other, connection) is None
        # with the fast path off (kio reads and writes everything)
        fastpath.enabled = False
        try:
            assert gateway.heartbeat_now(heartbeat, connection) is None
        finally:
            fastpath.enabled = True
        # before a SASL session authenticates
        connection.session.authenticated = False  # type: ignore[union-attr]
        assert gateway.heartbeat_now(heartbeat, connection) is None

    run(test)


def test_upstream_and_pipelining_back_ends_have_no_short_way():
    class Pipelining(EmbeddedBackend):
        pipelines_requests = True

    async def main() -> None:
        gateway = Gateway(Pipelining(), TOPICS, "127.0.0.1", 0)
        await gateway.start()
        try:
            assert gateway.answers_now is None
        finally:
            await gateway.stop()

    asyncio.run(main())


def _no_general_way(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any heartbeat that reaches the back end's general way (its ``answer_now``)."""

    def general(request: dict[str, Any]) -> Any:
        raise AssertionError(f"went the general way: {request}")

    monkeypatch.setattr(gateway, "answers_now", general)


def test_a_member_s_heartbeat_is_served_in_place_by_the_engine(monkeypatch: pytest.MonkeyPatch):
    """A member in its generation, dynamic or static (with its instance id), at every version:
    the engine serves the heartbeat in place, without the back end's general way, with the
    answer the general way gives."""

    async def test(gateway: Gateway) -> None:
        connection, _ = connect(gateway)
        static, generation = await _stable_member(gateway, instance_id="i1")
        low, high = codec.SUPPORTED[codec.HEARTBEAT]
        for version in range(low, high + 1):
            body: dict[str, Any] = {"member_id": static, "generation_id": generation}
            if version >= 3:
                body["group_instance_id"] = "i1"
            frame = _heartbeat(version, 40 + version, **body)
            general = _done(gateway.answer(frame, connection))
            with monkeypatch.context() as patch:
                _no_general_way(gateway, patch)
                served = gateway.heartbeat_in_place(frame, connection.session)
            assert served is not None
            short = served[0]
            assert short == general
            assert _error(short, version) == 0
        # a fenced instance id is not served in place: the general way answers it
        fenced = _heartbeat(high, 50, member_id="other", group_instance_id="i1")
        assert gateway.heartbeat_in_place(fenced, connection.session) is None
        assert _error(_done(gateway.answer(fenced, connection)), high) == FENCED_INSTANCE_ID

    run(test)


def test_a_read_of_one_whole_heartbeat_frame_is_answered_in_one_write(
    monkeypatch: pytest.MonkeyPatch,
):
    """The commonest read of all, one whole Heartbeat frame with nothing before it, is answered
    from ``data_received`` in one write, as the general way answers it; two frames in one read,
    or a heartbeat the engine does not serve in place, go the general way, in order."""

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        member, generation = await _stable_member(gateway)
        frame = _heartbeat(4, 11, member_id=member, generation_id=generation)
        general = _done(gateway.answer(frame, connection))
        with monkeypatch.context() as patch:
            _no_general_way(gateway, patch)

            def buffered(*_: Any) -> None:
                raise AssertionError("went through the connection's general serving")

            patch.setattr(connection, "_serve_buffered", buffered)
            connection.data_received(struct.pack(">i", len(frame)) + frame)
        assert transport.answers() == [general[4:]]
        assert transport.writes == 1 and connection.in_flight == 0
        # two frames in one read, the second of an unknown member: both answered, in order
        unknown = _heartbeat(4, 12, member_id="nobody", generation_id=generation)
        both = b"".join(struct.pack(">i", len(f)) + f for f in (frame, unknown))
        connection.data_received(both)
        answers = transport.answers()[1:]
        assert [codec.decode_response(codec.HEARTBEAT, 4, a)[0] for a in answers] == [11, 12]
        assert [_error(struct.pack(">i", len(a)) + a, 4) for a in answers] == [0, UNKNOWN_MEMBER_ID]
        assert transport.writes == 2

    run(test)


def test_a_heartbeat_is_not_answered_before_answers_held_for_the_log(tmp_path: Path):
    """With a log, an answer goes out only once the records of the requests before it are
    written (and after the answers held for them): a heartbeat that comes while a commit's
    records are being written is held too, not served in place ahead of the commit's answer."""
    backend = EmbeddedBackend(
        CoordinatorConfig(group_initial_rebalance_delay_ms=0), tmp_path / "wh"
    )

    async def test(gateway: Gateway) -> None:
        connection, _ = connect(gateway)
        member, generation = await _stable_member(gateway)
        commit = {
            "group_id": "g",
            "generation_id_or_member_epoch": generation,
            "member_id": member,
            "group_instance_id": None,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                    ],
                }
            ],
        }
        committing = asyncio.ensure_future(apis.offset_commit(gateway._ctx, 8, commit))
        answered: list[str] = []
        committing.add_done_callback(lambda _: answered.append("commit"))
        for _ in range(1000):  # until the engine has served it: its record waits for the log
            if backend._pending_records:
                break
            await asyncio.sleep(0)
        assert backend._pending_records and not committing.done()
        frame = _heartbeat(4, 21, member_id=member, generation_id=generation)
        made = gateway.heartbeat_now(frame, connection)
        assert made is not None and not isinstance(made, bytes)  # held, not served in place
        beat = asyncio.ensure_future(made)
        beat.add_done_callback(lambda _: answered.append("heartbeat"))
        await asyncio.wait_for(asyncio.gather(committing, beat), 30)
        assert answered == ["commit", "heartbeat"]
        assert _error(beat.result(), 4) == 0
        # once written, the next heartbeat is served in place again
        assert gateway.heartbeat_in_place(frame, connection.session) is not None

    run(test, backend=backend)


def _framed(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def test_the_same_heartbeat_again_is_served_without_reading_it_again(
    monkeypatch: pytest.MonkeyPatch,
):
    """A read that repeats the connection's last heartbeat served in place, byte for byte but
    for its correlation id (a member's every heartbeat while its generation lasts), is served
    without the fast path's reader, with what the general way answers: its own correlation id,
    the member's session re-armed at the read's clock; and when the group rebalances, it goes
    the general way as any heartbeat."""
    clock = [1_000_000]
    monkeypatch.setattr(embedded, "wall_clock_ms", lambda: clock[0])

    async def test(gateway: Gateway) -> None:
        connection, transport = connect(gateway)
        member, generation = await _stable_member(gateway)
        group = gateway.backend.engine._groups["g"]  # type: ignore[attr-defined]

        def session_deadline() -> int:
            return int(group.timers[f"heartbeat-{member}"].deadline_ms)

        first = _heartbeat(4, 11, member_id=member, generation_id=generation)
        connection.data_received(_framed(first))  # read, and remembered
        assert _error(_framed(transport.answers()[-1]), 4) == 0
        with monkeypatch.context() as patch:

            def no_reading(*_: Any) -> None:
                raise AssertionError("read again")

            patch.setattr(fastpath, "read_heartbeat", no_reading)
            patch.setattr(fastpath, "read_request", no_reading)
            for correlation_id in (12, 13, -5, 2**31 - 1):
                clock[0] += 1_000
                again = _heartbeat(4, correlation_id, member_id=member, generation_id=generation)
                connection.data_received(_framed(again))
                answer = transport.answers()[-1]
                assert codec.decode_response(codec.HEARTBEAT, 4, answer)[0] == correlation_id
                assert _error(_framed(answer), 4) == 0
                assert session_deadline() == clock[0] + 10_000
        general = _done(gateway.answer(_heartbeat(4, 14, member_id=member), connection))
        connection.data_received(_framed(_heartbeat(4, 14, member_id=member)))
        assert _framed(transport.answers()[-1]) == general
        # a second member joins: the group rebalances, and the same heartbeat is told so
        joining = asyncio.ensure_future(_join(gateway))
        for _ in range(100):
            await asyncio.sleep(0)
        repeat = _heartbeat(4, 16, member_id=member, generation_id=generation)
        general = _done(gateway.answer(_heartbeat(4, 16, member_id=member), connection))
        connection.data_received(_framed(repeat))
        assert _framed(transport.answers()[-1]) == general
        assert _error(general, 4) == REBALANCE_IN_PROGRESS
        joining.cancel()
        await asyncio.gather(joining, return_exceptions=True)

    run(test)


def test_a_read_unlike_the_last_heartbeat_in_any_other_byte_is_read_afresh():
    """The connection that remembers a heartbeat answers every read as one that does not:
    the heartbeat with any one byte changed (but its correlation id), cut short or with bytes
    after it (for each, what a connection with nothing remembered writes, or its closing)."""

    async def test(gateway: Gateway) -> None:
        member, generation = await _stable_member(gateway)
        frame = _framed(_heartbeat(4, 11, member_id=member, generation_id=generation))
        reads = [
            frame[:i] + bytes([frame[i] ^ x]) + frame[i + 1 :]
            for i in range(len(frame))
            if not 8 <= i < 12
            for x in (0x01, 0x80)
        ]
        reads += [frame[:-1], frame + frame[:5], frame + frame, frame[:4] + frame[4:] + b"\0"]
        for read in reads:
            outcomes = []
            for remember in (True, False):
                connection, transport = connect(gateway)
                connection.data_received(frame)
                assert connection._heard is not None
                if not remember:
                    connection._heard = None
                before = len(transport.written)
                connection.data_received(read)
                await asyncio.sleep(0)
                outcomes.append((bytes(transport.written[before:]), transport.closing))
                transport.close()
            assert outcomes[0] == outcomes[1], read

    run(test)


def test_the_same_heartbeat_again_is_authorized_again():
    """The ACLs are checked for every heartbeat, the same one again included: once an ACL
    denies the group, the next is answered GROUP_AUTHORIZATION_FAILED."""
    security = GatewaySecurity(parse({"authorizer.class.name": "x"}))

    def acl(permission: Permission) -> AclBinding:
        return AclBinding(
            ResourceType.GROUP,
            "g",
            PatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            Operation.READ,
            permission,
        )

    async def test(gateway: Gateway) -> None:
        security.store.add_acls([acl(Permission.ALLOW)])
        connection, transport = connect(gateway)
        member, generation = await _stable_member(gateway)
        for correlation_id in (1, 2):
            again = _heartbeat(4, correlation_id, member_id=member, generation_id=generation)
            connection.data_received(_framed(again))
            assert _error(_framed(transport.answers()[-1]), 4) == 0
        assert connection._heard is not None
        security.store.add_acls([acl(Permission.DENY)])
        connection.data_received(_framed(_heartbeat(4, 3, member_id=member)))
        assert _error(_framed(transport.answers()[-1]), 4) == GROUP_AUTHORIZATION_FAILED

    run(test, security=security)


def test_the_same_heartbeat_again_is_renewed_until_its_group_changes(
    monkeypatch: pytest.MonkeyPatch,
):
    """The same heartbeat again is served by the engine's renewal (no lookup of the group, its
    member or its partition), the session re-armed each time; a step of another group leaves
    it so; once its own group changed (a commit), or the engine was replaced (a reload), the
    engine decides afresh, and a new renewal serves the repeats after."""
    clock = [1_000_000]
    monkeypatch.setattr(embedded, "wall_clock_ms", lambda: clock[0])
    decided: list[str] = []
    decide = GroupCoordinator.heartbeat

    def counted(self: GroupCoordinator, *args: Any) -> Any:
        decided.append(args[1])
        return decide(self, *args)

    monkeypatch.setattr(GroupCoordinator, "heartbeat", counted)

    async def test(gateway: Gateway) -> None:
        backend = gateway.backend
        assert isinstance(backend, EmbeddedBackend)
        connection, transport = connect(gateway)
        member, generation = await _stable_member(gateway)
        correlation = iter(range(20, 100))

        def beat() -> int:
            clock[0] += 100  # no timer comes due in this test's heartbeats
            frame = _heartbeat(4, next(correlation), member_id=member, generation_id=generation)
            connection.data_received(_framed(frame))
            group = backend.engine.group("g")
            assert group is not None
            assert group.timers[f"heartbeat-{member}"].deadline_ms == clock[0] + 10_000
            return _error(_framed(transport.answers()[-1]), 4)

        def commit(group_id: str) -> None:
            request = {
                "api": "offset_commit",
                "request_id": f"c{clock[0]}",
                "group_id": group_id,
                "offsets": [{"topic": "t", "partition": 0, "offset": 5}],
            }
            answer = backend.answer_now(request)
            assert isinstance(answer, dict) and answer["error_code"] == 0

        assert [beat() for _ in range(4)] == [0] * 4
        assert decided == [member]  # the first alone: the repeats were renewed
        commit("other")
        assert beat() == 0 and decided == [member]
        commit("g")
        assert [beat() for _ in range(3)] == [0] * 3
        assert decided == [member] * 2  # decided afresh once, then renewed again
        # the engine replaced (a reload from the log makes a new one): renewals made on the
        # one before serve nothing, and the new engine decides
        backend.engine = copy.deepcopy(backend.engine)
        assert [beat() for _ in range(2)] == [0] * 2
        assert decided == [member] * 3

    run(test)
