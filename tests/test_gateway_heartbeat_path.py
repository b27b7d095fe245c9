"""The gateway's short way for a Heartbeat (``Gateway.heartbeat_now``: the fast path's reader,
the embedded back end's ``answer_now``, a cached framed answer) answers every heartbeat byte for
byte as the general dispatch does (``Gateway.answer``), on the same engine and at the same state:
every version, a member in and out of its generation, unknown members and groups, a static
member's instance id, an empty group id, a group rebalancing; and it leaves to the general way
what it does not serve (a session not authenticated yet, a principal the ACLs deny, a frame the
fast path does not read)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from coordinator.gateway import apis, codec, fastpath
from coordinator.gateway.connection import Connection
from coordinator.gateway.embedded import EmbeddedBackend
from coordinator.gateway.security.session import GatewaySecurity
from coordinator.gateway.server import Gateway
from coordinator.security.settings import parse
from tests.connection_support import connect, run
from tests.gateway_support import TOPICS

ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 22, 25, 27
GROUP_AUTHORIZATION_FAILED = 30


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


async def _join(gateway: Gateway, member_id: str = "") -> dict[str, Any]:
    body = {
        "group_id": "g",
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
        "reason": None,
    }
    return await apis.join_group(gateway._ctx, 3, body, "c", "/127.0.0.1")


async def _stable_member(gateway: Gateway) -> tuple[str, int]:
    joined = await _join(gateway)
    member, generation = joined["member_id"], joined["generation_id"]
    sync = {
        "group_id": "g",
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
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
