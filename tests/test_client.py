"""GroupMember through the engine, on a simulated clock: groups forming, members crashing,
static members restarting, slow members leaving, and cooperative rebalances; then the client's
reaction to each error code, with a scripted transport."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from coordinator import CoordinatorConfig
from coordinator.client.assignors import TopicPartition
from coordinator.client.member import (
    CommitFailedError,
    ConsumerRebalanceListener,
    GroupError,
    GroupMember,
    MemberConfig,
    MemberState,
    RebalanceInProgressError,
    RetriableCommitError,
)
from coordinator.client.simulation import Simulation
from coordinator.client.transport import SimClock
from coordinator.errors import Error
from coordinator.requests import failed_join_fields

CONFIG = CoordinatorConfig(group_initial_rebalance_delay_ms=500)
TOPICS = {"orders": 60, "payments": 40}
FAST = MemberConfig(
    session_timeout_ms=6_000, heartbeat_interval_ms=1_000, max_poll_interval_ms=20_000
)


def form(sim: Simulation, n: int, group: str = "g", **kwargs: Any) -> list[GroupMember]:
    members = [
        sim.add_member(group, TOPICS, metadata=TOPICS, client_id=f"c{i}", config=FAST, **kwargs)
        for i in range(n)
    ]
    assert sim.run(60_000, until=lambda: sim.stable(group)), [m.state for m in members]
    return members


def owners(members: list[GroupMember]) -> Counter[TopicPartition]:
    return Counter(tp for m in members for tp in m.assignment)


def all_partitions() -> set[TopicPartition]:
    return {TopicPartition(t, p) for t, n in TOPICS.items() for p in range(n)}


def assert_exactly_once(members: list[GroupMember]) -> None:
    counts = owners(members)
    assert set(counts) == all_partitions()
    assert set(counts.values()) == {1}


def no_partition_owned_twice(group: str):
    def check(sim: Simulation) -> None:
        counts = owners(sim.live_members(group))
        assert not [tp for tp, n in counts.items() if n > 1], "a partition has two owners"

    return check


# --- groups through the engine -------------------------------------------------------------------


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_fifty_members_form_a_group(assignor: str) -> None:
    sim = Simulation(CONFIG)
    members = form(sim, 50, assignors=[assignor])
    assert {m.generation_id for m in members} == {members[0].generation_id}
    assert_exactly_once(members)
    sizes = {len(m.assignment) for m in members}
    assert max(sizes) - min(sizes) <= 2  # two topics: within one per topic
    described = sim.coordinator.handle(
        {"api": "describe_groups", "request_id": "d", "group_id": "g"}, sim.clock.now_ms()
    )
    assert described[0]["protocol_data"] == assignor and len(described[0]["members"]) == 50


def test_members_commit_and_fetch_their_offsets() -> None:
    sim = Simulation(CONFIG)
    members = form(sim, 3)
    results: list[Any] = []
    for m in members:
        m.commit(
            {tp: 100 + tp.partition for tp in m.assignment},
            lambda ok, err: results.append((ok, err)),
        )
    sim.run(100)
    assert len(results) == 3 and all(err is None for _, err in results)
    fetched: list[Any] = []
    members[0].fetch_committed(
        sorted(all_partitions()), lambda res, err: fetched.append((res, err))
    )
    sim.run(50)
    ((result, error),) = fetched
    assert error is None
    assert result == {tp: (100 + tp.partition, "") for tp in all_partitions()}


def test_crashed_members_are_removed_and_the_rest_take_over() -> None:
    sim = Simulation(CONFIG)
    members = form(sim, 10)
    generation = members[0].generation_id
    for m in members[:3]:
        sim.crash(m)
    assert sim.run(
        30_000,
        until=lambda: sim.stable("g") and sim.live_members("g")[0].generation_id > generation,
    )
    survivors = sim.live_members("g")
    assert len(survivors) == 7 and len(sim.coordinator.group("g").members) == 7
    assert_exactly_once(survivors)


def test_a_static_member_restarts_within_its_session_without_a_rebalance() -> None:
    sim = Simulation(CONFIG)
    members = [
        sim.add_member(
            "g",
            TOPICS,
            metadata=TOPICS,
            client_id=f"c{i}",
            group_instance_id=f"worker-{i}",
            config=FAST,
        )
        for i in range(4)
    ]
    assert sim.run(60_000, until=lambda: sim.stable("g"))
    generation, old = members[0].generation_id, members[2]
    owned = old.assignment
    sim.crash(old)
    sim.run(2_000)  # less than the 6 s session
    restarted = sim.add_member(
        "g", TOPICS, metadata=TOPICS, client_id="c2", group_instance_id="worker-2", config=FAST
    )
    assert sim.run(10_000, until=lambda: sim.stable("g"))
    assert restarted.member_id != old.member_id
    assert restarted.generation_id == generation and restarted.assignment == owned
    assert all(m.generation_id == generation for m in sim.live_members("g"))
    assert not [e for m in sim.live_members("g") for e in m.events if e[1] == "revoked"]


def test_a_slow_member_leaves_after_max_poll_interval_and_rejoins_when_it_polls() -> None:
    sim = Simulation(CONFIG)
    members = form(sim, 4)
    slow = members[3]
    sim.set_poll_interval(slow, 60_000)  # the application is stuck in processing
    generation = members[0].generation_id
    assert sim.run(
        30_000,
        until=lambda: (
            (members[0].generation_id > generation and sim.stable("g") is False)
            or (members[0].generation_id > generation and members[0].state is MemberState.STABLE)
        ),
    )
    assert [e for e in slow.events if e[1] == "poll-timeout"]
    assert [e for e in slow.events if e[1] == "leave"]
    assert slow.member_id not in sim.coordinator.group("g").members
    # When the application finally polls, the member rejoins as a new member.
    sim.set_poll_interval(slow, 100)
    slow.poll()
    assert sim.run(30_000, until=lambda: sim.stable("g"))
    assert len(sim.coordinator.group("g").members) == 4
    assert_exactly_once(sim.live_members("g"))


def test_cooperative_rebalances_never_give_a_partition_two_owners() -> None:
    sim = Simulation(CONFIG)
    sim.checks.append(no_partition_owned_twice("g"))
    members = form(sim, 5, assignors=["cooperative-sticky"])
    assert all(m.rebalance_protocol == "COOPERATIVE" for m in members)
    before = {m.member_id: set(m.assignment) for m in members}
    # Three more members join: partitions move in two phases (revoke, then assign).
    for i in range(5, 8):
        sim.add_member(
            "g",
            TOPICS,
            metadata=TOPICS,
            client_id=f"c{i}",
            config=FAST,
            assignors=["cooperative-sticky"],
        )
    assert sim.run(
        60_000,
        until=lambda: (
            sim.stable("g")
            and len(sim.live_members("g")) == 8
            and sum(len(m.assignment) for m in sim.live_members("g")) == 100
        ),
    )
    everyone = sim.live_members("g")
    assert_exactly_once(everyone)
    # Sticky: the original members kept a subset of what they had (nothing moved between them).
    for m in members:
        assert set(m.assignment) <= before[m.member_id]
    # Eager revocation of everything never happened.
    assert not [e for m in members for e in m.events if e[1] == "lost"]
    # And a crash is handled the same way.
    sim.crash(everyone[0])
    assert sim.run(
        60_000,
        until=lambda: (
            sim.stable("g")
            and len(sim.coordinator.group("g").members) == 7
            and sum(len(m.assignment) for m in sim.live_members("g")) == 100
        ),
    )
    assert_exactly_once(sim.live_members("g"))


def test_rebalance_listener_sees_revoke_then_assign() -> None:
    calls: list[tuple[str, list[TopicPartition]]] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
            calls.append(("revoked", partitions))

        def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
            calls.append(("assigned", partitions))

    sim = Simulation(CONFIG)
    first = sim.add_member(
        "g",
        TOPICS,
        metadata=TOPICS,
        client_id="a",
        config=FAST,
        listener=Listener(),
        assignors=["range"],
    )
    assert sim.run(30_000, until=lambda: sim.stable("g"))
    assert calls == [("assigned", sorted(all_partitions()))]
    sim.add_member("g", TOPICS, metadata=TOPICS, client_id="b", config=FAST, assignors=["range"])
    assert sim.run(30_000, until=lambda: sim.stable("g") and len(sim.live_members("g")) == 2)
    kinds = [kind for kind, _ in calls]
    assert kinds == ["assigned", "revoked", "assigned"]  # eager: everything back, then the new half
    assert calls[1][1] == sorted(all_partitions()) and set(calls[2][1]) == set(first.assignment)


def test_a_standalone_consumer_commits_as_a_simple_group() -> None:
    sim = Simulation(CONFIG)
    standalone = sim.add_member("manual", None, metadata=TOPICS, client_id="m")
    sim.run(50)
    results: list[Any] = []
    standalone.commit(
        {TopicPartition("orders", 3): (42, "checkpoint")}, lambda ok, err: results.append(err)
    )
    sim.run(50)
    assert results == [None]
    group = sim.coordinator.group("manual")
    assert group.state.value == "Empty" and group.generation_id == 0
    assert group.offsets[("orders", 3)].committed_offset == 42


def test_members_rejoin_after_an_outage_longer_than_their_session() -> None:
    """The coordinator unreachable for longer than session.timeout.ms: the members' sessions
    run out on both sides. Finding the coordinator again resets the member's session timer
    (Kafka's ``FindCoordinatorResponseHandler.onSuccess``), so they rejoin instead of
    forgetting the coordinator on every tick and looking it up forever."""
    sim = Simulation(CONFIG, seed=7)
    members = form(sim, 3)
    sim.network.down = {0}
    sim.run(3 * FAST.session_timeout_ms)
    assert all(m.coordinator is None for m in members)
    sim.network.down = set()
    assert sim.run(60_000, until=lambda: sim.stable("g")), [m.state for m in members]
    assert_exactly_once(members)


def test_every_member_ends_in_the_same_generation_through_churn() -> None:
    sim = Simulation(CONFIG, seed=7)
    members = form(sim, 12, assignors=["range", "cooperative-sticky"])
    for round_ in range(3):
        sim.crash(members[round_])
        sim.add_member("g", TOPICS, metadata=TOPICS, client_id=f"new{round_}", config=FAST)
        sim.run(1_500)
    assert sim.run(60_000, until=lambda: sim.stable("g"))
    live = sim.live_members("g")
    assert len({m.generation_id for m in live}) == 1
    assert_exactly_once(live)


# --- the client's reaction to each error (scripted transport) ----------------------------------


class Scripted:
    """A transport whose answers the test writes: it records requests and holds callbacks."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, Any], Any]] = []

    def send(self, request: dict[str, Any], callback: Any, node_id: int | None = None) -> None:
        self.requests.append((request, callback))

    def answer(self, api: str, error: Error = Error.NONE, **fields: Any) -> dict[str, Any]:
        for i, (request, callback) in enumerate(self.requests):
            if request["api"] == api:
                del self.requests[i]
                base = {
                    "api": api,
                    "request_id": request["request_id"],
                    "group_id": request["group_id"],
                    "error_code": int(error),
                    "error": error.error_name,
                    "error_message": None,
                }
                base.update(fields)
                callback(base)
                return request
        raise AssertionError(f"no {api} request in flight: {[r['api'] for r, _ in self.requests]}")

    def pending(self) -> list[str]:
        return [r["api"] for r, _ in self.requests]


def scripted_member(clock: SimClock, **options: Any) -> tuple[GroupMember, Scripted]:
    """A member of group "g" subscribed to "orders" (2 partitions), on a scripted transport."""
    transport = Scripted()
    member = GroupMember(
        "g", ["orders"], transport, clock, metadata={"orders": 2}, config=FAST, **options
    )
    return member, transport


def joined_member(
    assignors: tuple[str, ...] = ("range",),
) -> tuple[GroupMember, Scripted, SimClock]:
    clock = SimClock(1_000)
    member, transport = scripted_member(clock, client_id="c", assignors=assignors)
    member.poll()
    transport.answer("find_coordinator", node_id=0, host="h", port=1, offsets_partition=0)
    member.poll()
    transport.answer("join_group", Error.MEMBER_ID_REQUIRED, **failed_join_fields("c-1"))
    return member, transport, clock


def complete_join(member: GroupMember, transport: Scripted) -> None:
    """Answer the pending JoinGroup as leader, then the SyncGroup with the leader's assignment."""
    ((request, _),) = [(r, c) for r, c in transport.requests if r["api"] == "join_group"]
    metadata = request["protocols"][0]["metadata"]
    transport.answer(
        "join_group",
        member_id=member.member_id or "c-1",
        generation_id=3,
        protocol_type="consumer",
        protocol_name=request["protocols"][0]["name"],
        leader=member.member_id or "c-1",
        skip_assignment=False,
        members=[
            {
                "member_id": member.member_id or "c-1",
                "group_instance_id": None,
                "metadata": metadata,
            }
        ],
    )
    ((sync, _),) = [(r, c) for r, c in transport.requests if r["api"] == "sync_group"]
    (assignment,) = sync["assignments"]
    transport.answer(
        "sync_group",
        protocol_type="consumer",
        protocol_name=sync["protocol_name"],
        assignment=assignment["assignment"],
    )


@pytest.fixture
def stable() -> tuple[GroupMember, Scripted, SimClock]:
    member, transport, clock = joined_member()
    complete_join(member, transport)
    assert member.state is MemberState.STABLE and member.generation_id == 3
    assert member.assignment == [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    return member, transport, clock


def beat(member: GroupMember, transport: Scripted, clock: SimClock, error: Error) -> dict[str, Any]:
    clock.advance(FAST.heartbeat_interval_ms)
    member.tick()
    return transport.answer("heartbeat", error)


def test_member_id_required_rejoins_at_once_with_the_id() -> None:
    _member, transport, _ = joined_member()
    ((request, _),) = transport.requests
    assert request["api"] == "join_group" and request["member_id"] == "c-1"


def test_heartbeat_none_keeps_the_session(stable) -> None:
    member, transport, clock = stable
    sent = beat(member, transport, clock, Error.NONE)
    assert (sent["member_id"], sent["generation_id"]) == ("c-1", 3)
    assert member.state is MemberState.STABLE and not member.rejoin_needed


def test_heartbeat_rebalance_in_progress_rejoins(stable) -> None:
    member, transport, clock = stable
    beat(member, transport, clock, Error.REBALANCE_IN_PROGRESS)
    assert member.rejoin_needed
    member.poll()
    assert transport.pending() == ["join_group"]
    assert transport.requests[0][0]["member_id"] == "c-1"
    assert member.assignment == []  # eager: revoked before rejoining


def test_heartbeat_illegal_generation_keeps_the_member_id(stable) -> None:
    member, transport, clock = stable
    beat(member, transport, clock, Error.ILLEGAL_GENERATION)
    assert (member.generation_id, member.member_id) == (-1, "c-1")
    member.poll()
    assert transport.requests[-1][0]["member_id"] == "c-1"
    assert [e for e in member.events if e[1] == "lost"]  # generation lost: partitions lost


def test_heartbeat_unknown_member_resets_the_member_id(stable) -> None:
    member, transport, clock = stable
    beat(member, transport, clock, Error.UNKNOWN_MEMBER_ID)
    assert (member.generation_id, member.member_id) == (-1, "")
    member.poll()
    assert transport.requests[-1][0]["member_id"] == ""


def test_heartbeat_fenced_instance_is_fatal(stable) -> None:
    member, transport, clock = stable
    beat(member, transport, clock, Error.FENCED_INSTANCE_ID)
    with pytest.raises(GroupError) as raised:
        member.poll()
    assert raised.value.error is Error.FENCED_INSTANCE_ID


@pytest.mark.parametrize("error", [Error.COORDINATOR_NOT_AVAILABLE, Error.NOT_COORDINATOR])
def test_heartbeat_coordinator_errors_rediscover(stable, error: Error) -> None:
    member, transport, clock = stable
    beat(member, transport, clock, error)
    assert member.coordinator is None
    clock.advance(FAST.retry_backoff_max_ms)
    member.poll()
    assert "find_coordinator" in transport.pending()


@pytest.mark.parametrize(
    "error",
    [
        Error.INCONSISTENT_GROUP_PROTOCOL,
        Error.INVALID_SESSION_TIMEOUT,
        Error.GROUP_MAX_SIZE_REACHED,
        Error.FENCED_INSTANCE_ID,
        Error.INVALID_GROUP_ID,
        Error.GROUP_AUTHORIZATION_FAILED,
    ],
)
def test_fatal_join_errors_reach_the_application(error: Error) -> None:
    member, transport, _ = joined_member()
    transport.answer("join_group", error, **failed_join_fields("c-1"))
    with pytest.raises(GroupError) as raised:
        member.poll()
    assert raised.value.error is error


@pytest.mark.parametrize(
    "error", [Error.UNKNOWN_MEMBER_ID, Error.ILLEGAL_GENERATION, Error.REBALANCE_IN_PROGRESS]
)
def test_join_errors_retry_at_once(error: Error) -> None:
    _member, transport, _ = joined_member()
    transport.answer("join_group", error, **failed_join_fields("c-1"))
    assert transport.pending() == ["join_group"]
    expected = "" if error is Error.UNKNOWN_MEMBER_ID else "c-1"
    assert transport.requests[0][0]["member_id"] == expected


def test_join_coordinator_load_backs_off_then_retries() -> None:
    member, transport, clock = joined_member()
    transport.answer("join_group", Error.COORDINATOR_LOAD_IN_PROGRESS, **failed_join_fields("c-1"))
    assert transport.pending() == []
    clock.advance(FAST.retry_backoff_max_ms * 2)
    member.poll()
    assert transport.pending() == ["join_group"] and member.coordinator == 0


@pytest.mark.parametrize(
    ("error", "member_id"),
    [
        (Error.UNKNOWN_MEMBER_ID, ""),
        (Error.ILLEGAL_GENERATION, "c-1"),
        (Error.REBALANCE_IN_PROGRESS, "c-1"),
    ],
)
def test_sync_errors_rejoin(error: Error, member_id: str) -> None:
    _member, transport, _ = joined_member()
    ((_request, _),) = transport.requests
    transport.answer(
        "join_group",
        member_id="c-1",
        generation_id=3,
        protocol_type="consumer",
        protocol_name="range",
        leader="other",
        skip_assignment=False,
        members=[],
    )
    assert transport.pending() == ["sync_group"]
    transport.answer("sync_group", error, protocol_type=None, protocol_name=None, assignment=b"")
    assert transport.pending() == ["join_group"]
    assert transport.requests[0][0]["member_id"] == member_id


def test_an_empty_assignment_from_the_leader_is_fatal() -> None:
    member, transport, _ = joined_member()
    transport.answer(
        "join_group",
        member_id="c-1",
        generation_id=3,
        protocol_type="consumer",
        protocol_name="range",
        leader="other",
        skip_assignment=False,
        members=[],
    )
    transport.answer("sync_group", protocol_type="consumer", protocol_name="range", assignment=b"")
    with pytest.raises(GroupError, match="empty assignment"):
        member.poll()


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (Error.REBALANCE_IN_PROGRESS, RebalanceInProgressError),
        (Error.ILLEGAL_GENERATION, CommitFailedError),
        (Error.UNKNOWN_MEMBER_ID, CommitFailedError),
        (Error.COORDINATOR_NOT_AVAILABLE, RetriableCommitError),
        (Error.COORDINATOR_LOAD_IN_PROGRESS, RetriableCommitError),
        (Error.OFFSET_METADATA_TOO_LARGE, GroupError),
    ],
)
def test_commit_errors(stable, error: Error, raised: type) -> None:
    member, transport, _ = stable
    results: list[Any] = []
    member.commit({TopicPartition("orders", 0): 5}, lambda ok, err: results.append(err))
    request = transport.answer(
        "offset_commit",
        partitions=[
            {"topic": "orders", "partition": 0, "error_code": int(error), "error": error.error_name}
        ],
    )
    assert (request["generation_id"], request["member_id"]) == (3, "c-1")
    (outcome,) = results
    assert isinstance(outcome, raised)
    if error in (Error.ILLEGAL_GENERATION, Error.UNKNOWN_MEMBER_ID, Error.REBALANCE_IN_PROGRESS):
        assert member.rejoin_needed
    if error is Error.COORDINATOR_NOT_AVAILABLE:
        assert member.coordinator is None


def test_close_revokes_and_leaves(stable) -> None:
    member, transport, _ = stable
    member.close()
    ((leave, _),) = [(r, c) for r, c in transport.requests if r["api"] == "leave_group"]
    assert leave["members"] == [
        {"member_id": "c-1", "group_instance_id": None, "reason": "the consumer is being closed"}
    ]
    assert member.assignment == [] and [e for e in member.events if e[1] == "revoked"]


def test_a_static_member_does_not_leave_on_close() -> None:
    member, transport = scripted_member(SimClock(0), group_instance_id="w-1")
    member.coordinator = 0
    member.generation = member.generation.__class__(3, "w-1-x", "range")
    member.close()
    assert transport.pending() == []
