"""GroupMember over Kafka's wire protocol: the contract <-> wire mapping on its own (through the
gateway's own codec and handlers, against the engine in process), then ``KafkaWireTransport``
against the embedded gateway: a group forms and commits, a broken connection is survived,
requests time out, an older broker is spoken to at its versions, and a real kafka-python
consumer shares a group with our members."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coordinator.client.assignors import TopicPartition
from coordinator.client.member import GroupMember, MemberConfig, MemberState
from coordinator.client.transport import Callback, SimClock, SystemClock
from coordinator.client.wire import KafkaWireTransport, parse_address
from coordinator.client.wire_mapping import (
    API_KEYS,
    CLIENT_VERSIONS,
    Unrepresentable,
    choose_version,
    from_wire,
    to_wire,
)
from coordinator.config import CoordinatorConfig
from coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    encode_assignment,
    encode_subscription,
)
from coordinator.engine import CoordinatorNode, GroupCoordinator
from coordinator.errors import Error
from coordinator.gateway import apis, codec, fastpath
from coordinator.ids import SequentialIds
from tests.client_scenarios import KafkaPythonMember
from tests.gateway_support import TOPICS, Running, until

HOST, PORT = "127.0.0.1", 9092
CONFIG = CoordinatorConfig(group_initial_rebalance_delay_ms=0)

# --- the mapping, through the gateway's own codec and handlers -------------------------------


def serve(engine: GroupCoordinator, clock: list[int], request: dict[str, Any]) -> dict[str, Any]:
    """The engine's answer to ``request``, moving the clock until it comes (parked requests)."""
    answers = engine.handle(request, clock[0])
    for _ in range(600):
        mine = [a for a in answers if a["request_id"] == request["request_id"]]
        if mine:
            return mine[0]
        clock[0] += 100
        answers = engine.advance(clock[0])
    raise AssertionError(f"no answer to {request}")


def engine() -> GroupCoordinator:
    return GroupCoordinator(CONFIG, id_source=SequentialIds(), node=CoordinatorNode(0, HOST, PORT))


class Direct:
    """The engine in process: the answers the wire must reproduce."""

    def __init__(self) -> None:
        self.engine, self.clock = engine(), [1_000]

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        return serve(self.engine, self.clock, request)


class OverTheWire:
    """The same requests as wire frames: to_wire, kio encode, the gateway's decode and handler
    (apis.dispatch, over a second engine on the same clock), kio encode and decode, from_wire."""

    def __init__(self) -> None:
        self.engine, self.clock = engine(), [1_000]

        async def submit(request: dict[str, Any]) -> dict[str, Any]:
            return serve(self.engine, self.clock, request)

        self.ctx = apis.GatewayContext(submit, dict(TOPICS), HOST, PORT)
        self.loop = asyncio.new_event_loop()

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        version = choose_version(request, codec.SUPPORTED)
        assert version == request["api_version"]
        api_key, body = to_wire(request, version)
        frame = codec.encode_request(api_key, version, 11, body, request.get("client_id") or "c")
        decoded = codec.decode_request(frame[4:])
        answer = self.loop.run_until_complete(apis.dispatch(self.ctx, decoded, "/127.0.0.1"))
        assert answer is not None
        out = codec.encode_response(api_key, version, 11, answer)
        correlation_id, wire = codec.decode_response(api_key, version, out[4:])
        assert correlation_id == 11
        return from_wire(request, version, codec.plain(wire))


def lossy(answer: dict[str, Any], version: int) -> dict[str, Any]:
    """What of the engine's answer the wire carries at ``version`` (the rest as from_wire
    fills it in)."""
    out = dict(answer)
    api = out["api"]
    if api != "find_coordinator" or version == 0:
        out["error_message"] = None
    if api == "join_group":
        if version < 7:
            out["protocol_type"] = None
        if version < 9:
            out["skip_assignment"] = False
    if api == "sync_group" and version < 5:
        out["protocol_type"] = out["protocol_name"] = None
    if api == "leave_group" and version < 3:
        out["members"] = []
    if api == "offset_fetch" and version < 5:
        out["partitions"] = [dict(p, leader_epoch=-1) for p in out["partitions"]]
    if api == "list_groups":
        out["groups"] = [
            dict(
                g,
                group_state=g["group_state"] if version >= 4 else None,
                group_type=g["group_type"] if version >= 5 else None,
            )
            for g in out["groups"]
        ]
    return out


NEWEST = {api: CLIENT_VERSIONS[key][1] for api, key in API_KEYS.items()}
OLDEST = {
    api: max(CLIENT_VERSIONS[key][0], codec.SUPPORTED[key][0]) for api, key in API_KEYS.items()
}
MIDDLE = {
    "join_group": 5,
    "sync_group": 3,
    "heartbeat": 3,
    "leave_group": 3,
    "offset_commit": 6,
    "offset_fetch": 7,
    "offset_delete": 0,
    "describe_groups": 4,
    "list_groups": 4,
    "delete_groups": 1,
    "find_coordinator": 3,
}


class Pair:
    """Each request both ways; the answers must be equal, as far as the wire carries them."""

    def __init__(self, versions: dict[str, int]) -> None:
        self.versions = versions
        self.direct, self.wire = Direct(), OverTheWire()
        self.ids = iter(range(1, 10_000))
        self.calls: list[str] = []

    def __call__(self, api: str, group_id: str = "g", **fields: Any) -> dict[str, Any]:
        request = {
            "api": api,
            "request_id": f"r{next(self.ids)}",
            "group_id": group_id,
            "api_version": self.versions[api],
            **fields,
        }
        expected = self.direct.call(dict(request))
        got = self.wire.call(dict(request))
        assert got == lossy(expected, self.versions[api]), api
        assert list(got) == list(expected)  # the same keys, in the engine's order
        self.calls.append(api)
        return expected


SUBSCRIPTION = encode_subscription(Subscription(("t",)))
ASSIGNMENT = encode_assignment(Assignment((TopicPartitions("t", (0, 1, 2, 3, 4, 5)),)))


def join(pair: Pair, **overrides: Any) -> dict[str, Any]:
    fields = {
        "member_id": "",
        "group_instance_id": None,
        "client_id": "c1",
        "client_host": "/127.0.0.1",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 20_000,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": SUBSCRIPTION}],
        "reason": "rebalance",
        **overrides,
    }
    answer = pair("join_group", **fields)
    if answer["error"] == "MEMBER_ID_REQUIRED":
        answer = pair("join_group", **dict(fields, member_id=answer["member_id"]))
    return answer


@pytest.mark.parametrize("versions", [NEWEST, MIDDLE, OLDEST], ids=["newest", "middle", "oldest"])
def test_every_api_round_trips_through_the_gateway_as_the_engine_answers(
    versions: dict[str, int],
) -> None:
    pair = Pair(versions)
    assert pair("find_coordinator")["node_id"] == 0
    assert pair("describe_groups", "nope")["group_state"] == "Dead"
    bad = join(pair, session_timeout_ms=1)
    assert bad["error"] == "INVALID_SESSION_TIMEOUT"

    joined = join(pair)
    assert joined["error"] is None and joined["leader"] == joined["member_id"]
    member, generation = joined["member_id"], joined["generation_id"]
    assert [m["metadata"] for m in joined["members"]] == [SUBSCRIPTION]
    sync = {
        "member_id": member,
        "group_instance_id": None,
        "generation_id": generation,
        "protocol_type": "consumer",
        "protocol_name": "range",
    }
    synced = pair(
        "sync_group", **sync, assignments=[{"member_id": member, "assignment": ASSIGNMENT}]
    )
    assert synced["assignment"] == ASSIGNMENT
    assert pair("sync_group", **dict(sync, member_id="who"), assignments=[])["error"] == (
        "UNKNOWN_MEMBER_ID"
    )
    beat = {"member_id": member, "group_instance_id": None, "generation_id": generation}
    assert pair("heartbeat", **beat)["error"] is None
    assert pair("heartbeat", **dict(beat, generation_id=99))["error"] == "ILLEGAL_GENERATION"

    offsets = [  # topics interleaved: the answer keeps this order, as the engine's does
        {"topic": "t", "partition": 1, "offset": 11, "leader_epoch": 3, "metadata": "m1"},
        {"topic": "other", "partition": 0, "offset": 20, "leader_epoch": -1, "metadata": ""},
        {"topic": "t", "partition": 0, "offset": 10, "leader_epoch": -1, "metadata": None},
    ]
    commit = dict(beat, retention_time_ms=-1, offsets=offsets)
    committed = pair("offset_commit", **commit)
    assert [p["error"] for p in committed["partitions"]] == [None, None, None]
    refused = pair("offset_commit", **dict(commit, generation_id=99))
    assert {p["error"] for p in refused["partitions"]} == {"ILLEGAL_GENERATION"}
    wanted = [{"topic": "t", "partition": p} for p in (2, 0, 1)] + [
        {"topic": "other", "partition": 0}
    ]
    fetched = pair("offset_fetch", partitions=wanted, require_stable=True)
    assert [p["offset"] for p in fetched["partitions"]] == [-1, 10, 11, 20]
    if versions["offset_fetch"] >= 2:
        everything = pair("offset_fetch", partitions=None, require_stable=False)
        assert len(everything["partitions"]) == 3

    described = pair("describe_groups")
    assert described["group_state"] == "Stable" and described["members"][0]["client_id"] == "c1"
    listed = pair("list_groups", "", states_filter=["Stable"], types_filter=None)
    assert [g["group_id"] for g in listed["groups"]] == ["g"]
    subscribed = [{"topic": "t", "partition": 0}, {"topic": "other", "partition": 0}]
    refused_delete = pair("offset_delete", partitions=subscribed)
    assert [p["error"] for p in refused_delete["partitions"]] == [
        "GROUP_SUBSCRIBED_TO_TOPIC",
        None,
    ]
    assert pair("delete_groups")["error"] == "NON_EMPTY_GROUP"

    if versions["leave_group"] >= 3:
        left = pair(
            "leave_group",
            members=[
                {"member_id": member, "group_instance_id": None, "reason": "bye"},
                {"member_id": "stranger", "group_instance_id": None, "reason": None},
            ],
        )
        assert [m["error"] for m in left["members"]] == [None, "UNKNOWN_MEMBER_ID"]
    else:
        assert pair("leave_group", member_id=member)["error"] is None
    assert pair("describe_groups")["group_state"] == "Empty"
    assert pair("offset_delete", partitions=subscribed)["partitions"][0]["error"] is None
    assert pair("delete_groups")["error"] is None
    assert pair("list_groups", "", states_filter=None, types_filter=None)["groups"] == []
    assert set(pair.calls) == set(API_KEYS)


def test_choose_version_is_the_highest_both_serve_capped_by_the_request() -> None:
    broker = {codec.JOIN_GROUP: (0, 7), codec.OFFSET_COMMIT: (0, 20)}
    assert choose_version({"api": "join_group"}, broker) == 7
    assert choose_version({"api": "join_group", "api_version": 4}, broker) == 4
    assert choose_version({"api": "offset_commit"}, broker) == 9  # ours is the cap
    assert choose_version({"api": "offset_commit", "api_version": 1}, broker) is None  # kio: 2+
    assert choose_version({"api": "heartbeat"}, broker) is None  # the broker lacks it
    assert choose_version({"api": "produce"}, broker) is None


def test_what_a_version_cannot_carry_is_refused() -> None:
    with pytest.raises(Unrepresentable):
        to_wire({"api": "offset_fetch", "group_id": "g", "partitions": None}, 1)
    with pytest.raises(Unrepresentable):
        two = [{"member_id": "a"}, {"member_id": "b"}]
        to_wire({"api": "leave_group", "group_id": "g", "members": two}, 2)
    # A contract LeaveGroup with member_id only goes as a one-member batch from v3.
    _, body = to_wire({"api": "leave_group", "group_id": "g", "member_id": "a"}, 30)
    assert body["members"] == [{"member_id": "a", "group_instance_id": None, "reason": None}]


def test_unknown_error_codes_keep_their_number() -> None:
    request = {"api": "heartbeat", "request_id": "h", "group_id": "g"}
    answer = from_wire(request, 4, {"error_code": 9999, "throttle_time": 0})
    assert answer["error_code"] == 9999 and answer["error"] == "UNKNOWN_ERROR_CODE_9999"


def test_parse_address() -> None:
    assert parse_address("localhost:9092") == ("localhost", 9092)
    assert parse_address("[::1]:9093") == ("::1", 9093)
    assert parse_address(("h", 1)) == ("h", 1)
    with pytest.raises(ValueError):
        parse_address("no-port")


# --- KafkaWireTransport against the embedded gateway ------------------------------------------

FAST = MemberConfig(session_timeout_ms=10_000, heartbeat_interval_ms=300)


@pytest.fixture
def gateway() -> Iterator[Running]:
    running = Running()
    yield running
    running.stop()


class Recorder:
    """A transport that remembers every answer its member got."""

    def __init__(self, inner: KafkaWireTransport) -> None:
        self.inner = inner
        self.answers: list[dict[str, Any]] = []

    def send(self, request: dict[str, Any], callback: Callback, node_id: int | None = None) -> None:
        def record(answer: dict[str, Any]) -> None:
            self.answers.append(answer)
            callback(answer)

        self.inner.send(request, record, node_id)

    def errors(self) -> list[tuple[str, str]]:
        return [(a["api"], a["error"]) for a in self.answers if a["error"] is not None]


class Members:
    """Members, each over its own wire transport, and their runner: the heartbeat thread's
    tick and the application's poll, then delivery."""

    def __init__(self, port: int, n: int, group: str = "g", **kwargs: Any) -> None:
        self.clock = SystemClock()
        self.transports = [
            KafkaWireTransport(f"127.0.0.1:{port}", self.clock, client_id=f"c{i}") for i in range(n)
        ]
        self.links = [Recorder(t) for t in self.transports]
        self.members = [
            GroupMember(
                group,
                ["t"],
                link,
                self.clock,
                metadata=TOPICS,
                client_id=f"c{i}",
                assignors=["range"],
                config=FAST,
                **kwargs,
            )
            for i, link in enumerate(self.links)
        ]

    def run(self, done: Callable[[], bool], seconds: float = 60.0) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for member in self.members:
                member.tick()
                member.poll()
            for transport in self.transports:
                transport.deliver()
            if done():
                return True
            self.transports[0].wait(0.005)
        return False

    def stable(self) -> bool:
        return (
            all(m.state is MemberState.STABLE and not m.rejoin_needed for m in self.members)
            and len({m.generation_id for m in self.members}) == 1
            and all(m.assignment for m in self.members)
        )

    def close(self) -> None:
        for member in self.members:
            member.close()
        for transport in self.transports:
            transport.deliver()
            transport.close()


@pytest.fixture
def members(gateway: Running) -> Iterator[Members]:
    group = Members(gateway.port, 2)
    yield group
    group.close()


def all_of_t() -> set[TopicPartition]:
    return {TopicPartition("t", p) for p in range(TOPICS["t"])}


def test_members_form_a_group_sync_a_range_assignment_heartbeat_commit_and_fetch(
    gateway: Running, members: Members
) -> None:
    assert members.run(members.stable), [m.events for m in members.members]
    first, second = (set(m.assignment) for m in members.members)
    assert not first & second and first | second == all_of_t()
    assert sorted(len(s) for s in (first, second)) == [3, 3]  # range: contiguous halves
    group = gateway.gateway.backend.engine.group("g")
    assert group is not None and group.state.value == "Stable"
    assert group.protocol_name == "range" and len(group.members) == 2

    generation = members.members[0].generation_id
    beats = sum(1 for link in members.links for a in link.answers if a["api"] == "heartbeat")
    time.sleep(0.05)
    assert members.run(
        lambda: (
            sum(1 for link in members.links for a in link.answers if a["api"] == "heartbeat")
            >= beats + 4
        )
    )
    assert members.members[0].generation_id == generation

    results: list[Any] = []
    for m in members.members:
        m.commit(
            {tp: 100 + tp.partition for tp in m.assignment}, lambda ok, err: results.append(err)
        )
    assert members.run(lambda: len(results) == 2) and results == [None, None]
    fetched: list[Any] = []
    members.members[1].fetch_committed(
        sorted(all_of_t()), lambda res, err: fetched.append((res, err))
    )
    assert members.run(lambda: bool(fetched))
    assert fetched == [({tp: (100 + tp.partition, "") for tp in all_of_t()}, None)]
    assert all(_only_rejoins(link.errors()) for link in members.links), [
        link.errors() for link in members.links
    ]

    # One connection to the bootstrap server, one to the coordinator FindCoordinator named.
    assert [t.connects for t in members.transports] == [2, 2]
    assert all(t.nodes == {0: ("127.0.0.1", gateway.port)} for t in members.transports)
    assert all(t.in_flight == 0 for t in members.transports)


def _only_rejoins(errors: list[tuple[str, str]]) -> bool:
    """What forming a group costs: KIP-394's first join, and rebalance notices."""
    expected = {
        ("join_group", "MEMBER_ID_REQUIRED"),
        ("heartbeat", "REBALANCE_IN_PROGRESS"),
        ("sync_group", "REBALANCE_IN_PROGRESS"),
    }
    return set(errors) <= expected


def test_a_member_whose_connection_dies_gets_network_exception_and_recovers(
    gateway: Running, members: Members, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert members.run(members.stable)
    generation = members.members[0].generation_id
    victim = members.links[0]

    def broken(*args: Any) -> dict[str, Any]:
        raise ConnectionResetError("the network broke")  # the gateway drops the connection

    # a heartbeat, read where the engine serves it in place, and built on the gateway's short
    # way and by the general handler alike
    monkeypatch.setattr(fastpath, "read_heartbeat", broken)
    monkeypatch.setattr(apis, "heartbeat_request", broken)
    assert members.run(lambda: ("heartbeat", "NETWORK_EXCEPTION") in victim.errors())
    monkeypatch.undo()
    found = len([e for e in members.members[0].events if e[1] == "coordinator"])
    assert members.run(
        lambda: (
            len([e for e in members.members[0].events if e[1] == "coordinator"]) > found
            and members.stable()
        )
    )
    kinds = [kind for _, kind, _ in members.members[0].events]
    assert "coordinator-unknown" in kinds
    # The member rediscovered its coordinator and kept its place: no rebalance was needed.
    assert members.members[0].generation_id == generation
    beats = len(victim.answers)
    assert members.run(lambda: len(victim.answers) > beats + 2)
    assert members.members[0].state is MemberState.STABLE
    assert members.transports[0].connects >= 3  # the coordinator connection was made anew


def test_a_broker_that_is_gone_answers_network_exception() -> None:
    gone = Running()
    port = gone.port
    gone.stop()
    transport = KafkaWireTransport(f"127.0.0.1:{port}", request_timeout_ms=5_000)
    calls: list[dict[str, Any]] = []
    transport.send({"api": "find_coordinator", "request_id": "f", "group_id": "g"}, calls.append)
    transport.send({"api": "heartbeat", "request_id": "h", "group_id": "g"}, calls.append, 3)
    assert calls == []  # send never calls back, not even with an error
    assert until(lambda: transport.deliver() >= 0 and len(calls) == 2, 30)
    assert {c["request_id"]: c["error"] for c in calls} == {
        "f": "NETWORK_EXCEPTION",
        "h": "NETWORK_EXCEPTION",  # node 3 was never named by FindCoordinator
    }
    transport.close()
    transport.send({"api": "find_coordinator", "request_id": "x", "group_id": "g"}, calls.append)
    assert (
        len(calls) == 2 and transport.deliver() == 1 and calls[-1]["error"] == "NETWORK_EXCEPTION"
    )


class SilentBroker:
    """Accepts connections, reads, never answers; counts the connections that closed."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.closed = 0
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        with conn:
            while conn.recv(65536):
                pass
        self.closed += 1

    def stop(self) -> None:
        self.server.close()


def test_requests_time_out_exactly_once_and_a_join_waits_its_rebalance_timeout() -> None:
    broker = SilentBroker()
    clock = SimClock(0)
    try:
        plain = KafkaWireTransport(f"127.0.0.1:{broker.port}", clock, request_timeout_ms=1_000)
        joining = KafkaWireTransport(f"127.0.0.1:{broker.port}", clock, request_timeout_ms=1_000)
        calls: list[dict[str, Any]] = []
        heartbeat = {"api": "heartbeat", "request_id": "hb", "group_id": "g", "member_id": "m"}
        plain.send(dict(heartbeat, generation_id=1), calls.append)
        join = {
            "api": "join_group",
            "request_id": "j",
            "group_id": "g",
            "session_timeout_ms": 1_000,
            "rebalance_timeout_ms": 3_000,
        }
        joining.send(join, calls.append)
        assert calls == [] and plain.in_flight == 1 and joining.in_flight == 1
        assert until(lambda: broker.accepted == 2, 30)
        clock.advance(999)
        assert plain.deliver() == 0 and joining.deliver() == 0
        clock.advance(1)
        assert plain.deliver() == 1 and joining.deliver() == 0
        assert calls[0]["request_id"] == "hb" and calls[0]["error"] == "REQUEST_TIMED_OUT"
        assert calls[0]["error_code"] == Error.REQUEST_TIMED_OUT
        assert until(lambda: broker.closed == 1, 30)  # Kafka closes a timed-out connection
        clock.advance(6_999)  # the join: rebalance timeout (3 s) + 5 s
        assert joining.deliver() == 0
        clock.advance(1)
        assert joining.deliver() == 1 and calls[1]["error"] == "REQUEST_TIMED_OUT"
        assert calls[1]["generation_id"] == -1 and calls[1]["members"] == []  # failed-join shape
        clock.advance(60_000)
        time.sleep(0.05)
        assert plain.deliver() == 0 and joining.deliver() == 0 and len(calls) == 2
        plain.close()
        joining.close()
    finally:
        broker.stop()


def test_an_older_broker_is_spoken_to_at_its_versions(
    gateway: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = {
        codec.API_VERSIONS: (0, 2),  # ApiVersions v4 is answered UNSUPPORTED_VERSION, in v0
        codec.JOIN_GROUP: (0, 6),
        codec.SYNC_GROUP: (0, 3),
        codec.HEARTBEAT: (0, 2),
        codec.OFFSET_COMMIT: (2, 6),
        codec.OFFSET_FETCH: (1, 5),
        codec.FIND_COORDINATOR: (0, 3),
        codec.LEAVE_GROUP: (0, 2),
    }
    for key, versions in older.items():
        monkeypatch.setitem(codec.SUPPORTED, key, versions)
    seen: set[tuple[int, int]] = set()
    decode = codec.decode_request

    def spy(frame: bytes) -> codec.DecodedRequest:
        request = decode(frame)
        seen.add((request.api_key, request.api_version))
        return request

    read = fastpath.read_request

    def read_spy(frame: bytes) -> Any:  # a heartbeat's short way reads it here
        request = read(frame)
        if request is not None:
            seen.add((request[0], request[1]))
        return request

    read_heartbeat = fastpath.read_heartbeat

    def heartbeat_spy(frame: bytes) -> Any:  # a heartbeat the engine serves in place
        request = read_heartbeat(frame)
        if request is not None:
            seen.add((codec.HEARTBEAT, request[0]))
        return request

    monkeypatch.setattr(codec, "decode_request", spy)
    monkeypatch.setattr(fastpath, "read_request", read_spy)
    monkeypatch.setattr(fastpath, "read_heartbeat", heartbeat_spy)
    group = Members(gateway.port, 2)
    try:
        assert group.run(group.stable), [m.events for m in group.members]
        results: list[Any] = []
        group.members[0].commit(
            {tp: 7 for tp in group.members[0].assignment}, lambda ok, e: results.append(e)
        )
        assert group.run(lambda: bool(results)) and results == [None]
        fetched: list[Any] = []
        group.members[0].fetch_committed(
            group.members[0].assignment, lambda r, e: fetched.append((r, e))
        )
        assert group.run(lambda: bool(fetched)) and fetched[0][1] is None
        assert group.run(
            lambda: any(
                a["api"] == "heartbeat" and a["error"] is None for a in group.links[0].answers
            )
        )
    finally:
        group.close()
    assert until(lambda: (codec.LEAVE_GROUP, 2) in seen, 30)
    highest: dict[int, int] = {}
    for key, version in seen:
        highest[key] = max(highest.get(key, -1), version)
    assert (codec.API_VERSIONS, 4) in seen  # tried first, then the broker's newest
    for key, (_, newest) in older.items():
        if key != codec.API_VERSIONS:
            assert highest[key] == newest, key
    assert highest[codec.API_VERSIONS] == 4 and (codec.API_VERSIONS, 2) in seen


# --- a mixed group: our members and a real Kafka client ----------------------------------------


@pytest.mark.slow  # ~1 s alone, but kafka-python 3.0.12's own timing is at the machine's mercy
@pytest.mark.parametrize("leader", ["ours", "kafka-python"])
def test_a_mixed_group_of_wire_members_and_kafka_python_covers_the_topic(
    gateway: Running, leader: str
) -> None:
    """Whoever leads decodes the others' ConsumerProtocol subscriptions and hands out
    assignments they decode: the first member in the group is its leader."""
    theirs: KafkaPythonMember | None = None
    ours = Members(gateway.port, 2, group="mixed")
    try:
        if leader == "kafka-python":
            theirs = KafkaPythonMember(gateway.port, "mixed", "kafka-python")
            assert until(
                lambda: theirs is not None and len(theirs.partitions()) == TOPICS["t"], 60
            ), (theirs.events, theirs.error)
        else:
            assert ours.run(ours.stable, 60)
            theirs = KafkaPythonMember(gateway.port, "mixed", "kafka-python")
        kafka_python = theirs

        def covered() -> bool:
            shares = [{tp.partition for tp in m.assignment} for m in ours.members]
            shares.append(kafka_python.partitions())
            group = gateway.gateway.backend.engine.group("mixed")
            return (
                ours.stable()
                and all(shares)
                and sum(map(len, shares)) == TOPICS["t"]
                and set().union(*shares) == set(range(TOPICS["t"]))
                and group is not None
                and group.state.value == "Stable"
                and len(group.members) == 3
            )

        assert ours.run(covered, 90), (
            [m.assignment for m in ours.members],
            kafka_python.partitions(),
            kafka_python.error,
            [m.events for m in ours.members],
        )
        assert kafka_python.error is None
        group = gateway.gateway.backend.engine.group("mixed")
        assert group is not None and group.protocol_name == "range" and group.leader_id
        expected = {"kafka-python"} if leader == "kafka-python" else {"c0", "c1"}
        assert group.members[group.leader_id].client_id in expected
    finally:
        if theirs is not None:
            theirs.close()
        ours.close()
