"""Scenarios 1-23 (state machine and group model) and 25-71 (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) of section 14 of kafka-group-protocol.md.

Each test names the Kafka test it is derived from: ``GroupMetadataTest.scala`` and
``GroupCoordinatorTest.scala`` (3.9), or the 4.x port in ``GroupMetadataManagerTest.java`` where
the two differ. Scenario 24 (transactional offsets) is out of scope.

Timings follow the standard fixture (section 14): initial rebalance delay 50 ms, session and
rebalance timeouts 500 ms, ``group.max.size`` 4; timers fire when the clock reaches their deadline.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds
from coordinator.consumer_protocol import Subscription, encode_subscription
from coordinator.context import GroupContext
from coordinator.group.model import ClassicGroup, Member, OffsetAndMetadata, ParkedRequest
from coordinator.group.states import GroupState, IllegalStateTransition, can_rebalance
from coordinator.offsets.manager import expire_offsets
from tests.support import (
    GROUP_ID,
    OTHER_GROUP_ID,
    P_PLUS,
    REBALANCE,
    STANDARD,
    Ctx,
    P,
    error,
)

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

DELAY = STANDARD.group_initial_rebalance_delay_ms + 1  # 51 ms: the initial rebalance completes
DEAD_GROUP_ID = "deadGroupId"  # offsets partition 0, as in Kafka's tests


# --- helpers: the model (GroupMetadataTest) ---------------------------------------------------


def model_group(group_id: str = GROUP_ID) -> ClassicGroup:
    return ClassicGroup(group_id=group_id, current_state_timestamp_ms=0)


def model_member(
    member_id: str = "memberId",
    protocols: list[tuple[str, bytes]] | None = None,
    *,
    instance_id: str | None = None,
    protocol_type: str = "consumer",
) -> Member:
    """``new MemberMetadata(memberId, ..., rebalanceTimeoutMs = 60000, sessionTimeoutMs = 10000)``."""
    return Member(
        member_id=member_id,
        group_instance_id=instance_id,
        client_id="clientId",
        client_host="clientHost",
        rebalance_timeout_ms=60_000,
        session_timeout_ms=10_000,
        protocol_type=protocol_type,
        protocols=list(P_PLUS if protocols is None else protocols),
    )


def in_state(state: GroupState) -> ClassicGroup:
    """A fresh group walked to ``state`` through legal transitions only."""
    group = model_group()
    path = {
        EMPTY: [],
        PREPARING: [PREPARING],
        COMPLETING: [PREPARING, COMPLETING],
        STABLE: [PREPARING, COMPLETING, STABLE],
        DEAD: [PREPARING, DEAD],
    }[state]
    for target in path:
        group.transition_to(target, 0)
    assert group.state is state
    return group


def sweep(group: ClassicGroup, config: CoordinatorConfig, now_ms: int) -> list[dict]:
    """Run the offset-expiry sweep on a bare group at ``now_ms``; the records it wrote."""
    seq = itertools.count(1)
    records: list[dict] = []
    ctx = GroupContext(
        config, now_ms, SequentialIds(), lambda: next(seq), group.group_id, group, 0, [], records
    )
    expire_offsets(ctx, group)
    return records


# --- helpers: the engine (GroupCoordinatorTest) -----------------------------------------------


def join_single(ctx: Ctx, **kwargs) -> tuple[str, dict]:
    """``dynamicJoinGroup``: JoinGroup v9 twice (MEMBER_ID_REQUIRED), then 51 ms."""
    member_id, rid = ctx.dynamic_join(**kwargs)
    ctx.sleep(DELAY)
    answer = ctx.answer(rid)
    assert answer is not None and answer["error"] is None, answer
    return member_id, answer


def two_members(ctx: Ctx) -> tuple[str, str, int]:
    """Leader A alone Stable at generation 1; then B (old-style join) and A rejoin: generation 2,
    CompletingRebalance, A leader. Returns (A, B, 2)."""
    first, gen = ctx.join_and_sync_single()
    assert gen == 1
    other = ctx.join("", version=3)
    again = ctx.join(first, version=3)
    joined, other_joined = ctx.answer(again), ctx.answer(other)
    assert error(joined) is None and error(other_joined) is None
    assert joined["generation_id"] == other_joined["generation_id"] == 2
    assert joined["leader"] == other_joined["leader"] == first
    assert ctx.group().state is COMPLETING
    return first, other_joined["member_id"], 2


def group_with_pending_member(ctx: Ctx) -> tuple[str, str, str]:
    """``setupGroupWithPendingMember``: members A and B rejoined in PreparingRebalance and a
    pending member C (session 100). Returns (A, B, C)."""
    first, answer = join_single(ctx)
    assert ctx.group().state is COMPLETING
    assert error(ctx.answer(ctx.sync(first, answer["generation_id"], {first: b""}))) is None
    assert ctx.group().state is STABLE

    second_rid = ctx.join("", version=3)
    first_rid = ctx.join(first, version=3)
    first_joined, second_joined = ctx.answer(first_rid), ctx.answer(second_rid)
    assert error(first_joined) is None and error(second_joined) is None
    assert ctx.group().state is COMPLETING
    second = second_joined["member_id"]
    synced = ctx.sync(first, first_joined["generation_id"], {first: b""})
    assert error(ctx.answer(synced)) is None
    assert ctx.group().state is STABLE

    ctx.join(first, version=3)  # the leader's rejoin starts a rebalance
    assert ctx.group().state is PREPARING

    pending_rid = ctx.join("", session=100)
    pending = ctx.answer(pending_rid)
    assert error(pending) == "MEMBER_ID_REQUIRED"
    assert len(ctx.group().pending_members) == 1

    ctx.join(second, version=3)
    assert ctx.group().state is PREPARING
    assert len(ctx.group().pending_members) == 1
    return first, second, pending["member_id"]


def dead_group(ctx: Ctx, group_id: str = DEAD_GROUP_ID) -> ClassicGroup:
    """A group that exists and is Dead (Kafka's tests ``addGroup(new GroupMetadata(.., Dead))``)."""
    assert error(ctx.answer(ctx.join("", group_id=group_id))) == "MEMBER_ID_REQUIRED"
    group = ctx.group(group_id)
    group.state = DEAD
    return group


def member_errors(response: dict | None) -> list[str | None]:
    assert response is not None, "no LeaveGroup response"
    return [m["error"] for m in response["members"]]


def group_records(ctx: Ctx) -> list[dict]:
    return [r for r in ctx.records if r["record_type"] == "group_metadata"]


# ==============================================================================================
# 14.1 State machine and group model (GroupMetadataTest.scala)
# ==============================================================================================


def test_s01_new_group_can_rebalance():
    """testCanRebalanceWhenStable"""
    group = model_group()
    assert group.state is EMPTY
    assert group.generation_id == 0
    assert group.protocol_name is None
    assert group.protocol_type is None
    assert can_rebalance(group.state)


def test_s02_can_rebalance_by_state():
    """testCanRebalanceWhenCompletingRebalance, testCannotRebalanceWhenPreparingRebalance,
    testCannotRebalanceWhenDead"""
    assert can_rebalance(in_state(COMPLETING).state)
    assert can_rebalance(in_state(STABLE).state)
    assert not can_rebalance(in_state(PREPARING).state)
    group = in_state(PREPARING)
    group.transition_to(EMPTY, 0)
    group.transition_to(DEAD, 0)
    assert not can_rebalance(group.state)


@pytest.mark.parametrize("target", [PREPARING, DEAD])
def test_s03_stable_transitions(target):
    """testStableToPreparingRebalanceTransition, testStableToDeadTransition"""
    # Kafka's "Stable" fixture is a fresh (Empty) group; both the fresh group and a real Stable
    # group accept the move.
    for group in (model_group(), in_state(STABLE)):
        group.transition_to(target, 7)
        assert group.state is target
        assert group.current_state_timestamp_ms == 7


@pytest.mark.parametrize("target", [PREPARING, STABLE])
def test_s04_completing_rebalance_transitions(target):
    """testAwaitingRebalanceToPreparingRebalanceTransition, testAwaitingRebalanceToStableTransition"""
    group = in_state(COMPLETING)
    group.transition_to(target, 3)
    assert group.state is target
    assert group.previous_state is COMPLETING


def test_s05_preparing_and_empty_transitions():
    """testPreparingRebalanceToDeadTransition, testPreparingRebalanceToEmptyTransition,
    testEmptyToDeadTransition"""
    group = in_state(PREPARING)
    group.transition_to(DEAD, 0)
    assert group.state is DEAD

    group = in_state(PREPARING)
    group.transition_to(EMPTY, 0)
    assert group.state is EMPTY
    group.transition_to(DEAD, 0)
    assert group.state is DEAD


@pytest.mark.parametrize("target", [STABLE, COMPLETING])
def test_s06_empty_illegal_transitions(target):
    """testEmptyToStableIllegalTransition, testEmptyToAwaitingRebalanceIllegalTransition"""
    group = model_group()
    with pytest.raises(IllegalStateTransition):
        group.transition_to(target, 0)
    assert group.state is EMPTY


@pytest.mark.parametrize(
    ("source", "target"),
    [(STABLE, STABLE), (PREPARING, PREPARING), (PREPARING, STABLE), (COMPLETING, COMPLETING)],
)
def test_s07_illegal_transitions(source, target):
    """testStableToStableIllegalTransition, testPreparingRebalanceToPreparingRebalanceIllegalTransition,
    testPreparingRebalanceToStableIllegalTransition,
    testAwaitingRebalanceToAwaitingRebalanceIllegalTransition"""
    group = in_state(source)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(target, 0)
    assert group.state is source


def test_s08_dead_transitions():
    """testDeadToDeadIllegalTransition, testDeadToStableIllegalTransition,
    testDeadToPreparingRebalanceIllegalTransition, testDeadToAwaitingRebalanceIllegalTransition"""
    group = in_state(DEAD)
    group.transition_to(DEAD, 0)
    assert group.state is DEAD
    for target in (STABLE, PREPARING, COMPLETING):
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target, 0)
        assert group.state is DEAD


def test_s09_select_protocol_single_member():
    """testSelectProtocol"""
    group = model_group()
    group.add(model_member("memberId", [("range", b""), ("roundrobin", b"")]))
    assert group.select_protocol() == "range"


def test_s10_select_protocol_tie():
    """testSelectProtocol"""
    group = model_group()
    group.add(model_member("memberId", [("range", b""), ("roundrobin", b"")]))
    group.add(model_member("otherMemberId", [("roundrobin", b""), ("range", b"")]))
    choice = group.select_protocol()
    assert choice in {"range", "roundrobin"}  # Kafka: either
    assert choice == "range"  # engine tie rule (7.6): the leader's (memberId's) preference


def test_s11_select_protocol_majority():
    """testSelectProtocol"""
    group = model_group()
    group.add(model_member("memberId", [("range", b""), ("roundrobin", b"")]))
    group.add(model_member("otherMemberId", [("roundrobin", b""), ("range", b"")]))
    group.add(model_member("lastMemberId", [("roundrobin", b""), ("range", b"")]))
    assert group.select_protocol() == "roundrobin"


def test_s12_select_protocol_no_members():
    """testSelectProtocolRaisesIfNoMembers"""
    with pytest.raises(RuntimeError):
        model_group().select_protocol()


def test_s13_select_protocol_compatible():
    """testSelectProtocolChoosesCompatibleProtocol"""
    group = model_group()
    group.add(model_member("memberId", [("range", b""), ("roundrobin", b"")]))
    group.add(model_member("otherMemberId", [("roundrobin", b""), ("blah", b"")]))
    assert group.select_protocol() == "roundrobin"


def test_s14_supports_protocols():
    """testSupportsProtocols"""
    group = model_group()
    # An Empty group supports any non-empty protocol type with a non-empty protocol list.
    assert group.supports_protocols("consumer", [("roundrobin", b""), ("range", b"")])
    assert group.supports_protocols("anything", [("foo", b"")])
    assert not group.supports_protocols("", [("range", b"")])
    assert not group.supports_protocols("consumer", [])

    group.add(model_member("memberId", [("range", b""), ("roundrobin", b"")]))
    group.transition_to(PREPARING, 0)
    assert group.supports_protocols("consumer", [("roundrobin", b""), ("foo", b"")])
    assert group.supports_protocols("consumer", [("range", b""), ("foo", b"")])
    assert not group.supports_protocols("consumer", [("foo", b""), ("bar", b"")])

    group.add(model_member("otherMemberId", [("roundrobin", b""), ("blah", b"")]))
    assert group.supports_protocols("consumer", [("roundrobin", b""), ("foo", b"")])
    assert not group.supports_protocols("invalid_type", [("roundrobin", b""), ("foo", b"")])
    assert not group.supports_protocols("consumer", [("range", b""), ("foo", b"")])


def test_s15_init_next_generation():
    """testInitNextGeneration"""
    group = model_group()
    member = model_member("memberId", [("range", b""), ("roundrobin", b"")])
    member.protocols = [("roundrobin", b"")]
    group.transition_to(PREPARING, 0)
    group.add(member)
    assert group.generation_id == 0
    assert group.protocol_name is None

    group.init_next_generation(5)
    assert group.generation_id == 1
    assert group.protocol_name == "roundrobin"
    assert group.state is COMPLETING


def test_s16_init_next_generation_empty_group():
    """testInitNextGenerationEmptyGroup"""
    group = model_group()
    assert group.state is EMPTY
    assert group.generation_id == 0
    assert group.protocol_name is None
    group.transition_to(PREPARING, 0)
    group.init_next_generation(5)
    assert group.generation_id == 1
    assert group.protocol_name is None
    assert group.state is EMPTY


def test_s17_subscribed_topics():
    """testSubscribedTopics"""
    group = model_group()
    assert group.subscribed_topics is None  # unknown for a new group

    foo = encode_subscription(Subscription(topics=("foo",)))
    group.transition_to(PREPARING, 0)
    group.add(model_member("memberId", [("range", foo)]))
    group.init_next_generation(0)
    assert group.subscribed_topics == frozenset({"foo"})

    group.transition_to(PREPARING, 0)
    group.remove("memberId")
    group.init_next_generation(0)
    assert group.subscribed_topics == frozenset()

    group.transition_to(PREPARING, 0)
    group.add(model_member("memberId", [("range", b"")]))  # not a parsable subscription
    group.init_next_generation(0)
    assert group.subscribed_topics is None


def test_s18_subscribed_topics_non_consumer_group():
    """testSubscribedTopicsNonConsumerGroup"""
    group = model_group()
    assert group.subscribed_topics is None
    group.transition_to(PREPARING, 0)
    group.add(model_member("memberId", [("range", b"")], protocol_type="My Protocol"))
    group.init_next_generation(0)
    assert group.subscribed_topics is None


def test_s19_offset_removal_during_transition_from_empty_to_non_empty():
    """testOffsetRemovalDuringTransitionFromEmptyToNonEmpty"""
    # Kafka's test uses a 50000 ms retention; the engine's retention is in whole minutes.
    config = CoordinatorConfig(offsets_retention_minutes=1, offsets_topic_num_partitions=2)
    retention = config.offsets_retention_ms
    foo = encode_subscription(Subscription(topics=("foo",)))
    group = model_group()
    group.transition_to(PREPARING, 0)
    group.add(model_member("memberId", [("range", foo)]))
    group.init_next_generation(0)
    assert group.subscribed_topics == frozenset({"foo"})

    committed_at = 0
    group.offsets[("foo", 0)] = OffsetAndMetadata(37, None, "", committed_at, None)

    # The group becomes Empty once the retention has passed since the commit.
    empty_at = committed_at + retention + 1
    group.transition_to(PREPARING, empty_at)
    group.remove("memberId")
    group.init_next_generation(empty_at)
    assert group.state is EMPTY
    # Retention counts from the moment the group became Empty: nothing expires yet.
    assert sweep(group, config, empty_at) == []
    assert ("foo", 0) in group.offsets

    # A member is added back: while rebalancing, nothing expires.
    group.transition_to(PREPARING, empty_at)
    group.add(model_member("memberId", [("range", foo)]))
    assert sweep(group, config, empty_at) == []
    assert sweep(group, config, empty_at + 10 * retention) == []
    assert ("foo", 0) in group.offsets

    # Control: once Empty for the whole retention, the same offset does expire (and the Empty
    # group left without offsets is deleted by the same sweep).
    group.remove("memberId")
    group.init_next_generation(empty_at)
    assert group.state is EMPTY
    assert sweep(group, config, empty_at + retention - 1) == []
    written = sweep(group, config, empty_at + retention)
    assert [(r["record_type"], r["topic"], r["value"]) for r in written] == [
        ("offset_commit", "foo", None),
        ("group_metadata", None, None),
    ]
    assert ("foo", 0) not in group.offsets


def test_s20_pending_members():
    """testCannotAddPendingMemberIfStable, testRemovalFromPendingAfterMemberIsStable,
    testRemovalFromPendingWhenMemberIsRemoved"""
    group = model_group()
    group.add(model_member("memberId"))
    with pytest.raises(RuntimeError):
        group.add_pending_member("memberId")
    assert "memberId" not in group.pending_members

    group = model_group()
    group.add_pending_member("memberId")
    assert "memberId" not in group.members
    assert "memberId" in group.pending_members
    group.add(model_member("memberId"))
    assert "memberId" in group.members
    assert "memberId" not in group.pending_members

    group = model_group()
    group.add_pending_member("memberId")
    assert "memberId" in group.pending_members
    group.remove("memberId")
    assert "memberId" not in group.members
    assert "memberId" not in group.pending_members


def test_s21_cannot_add_static_member_twice():
    """testCannotAddStaticMemberIfAlreadyPresent"""
    group = model_group()
    member = model_member("memberId", [("range", b"")], instance_id="groupInstanceId")
    group.add(member)
    assert "memberId" in group.members
    assert group.static_members == {"groupInstanceId": "memberId"}
    with pytest.raises(RuntimeError):
        group.add(member)
    with pytest.raises(RuntimeError):
        group.add(model_member("otherMemberId", [("range", b"")], instance_id="groupInstanceId"))
    assert group.static_members == {"groupInstanceId": "memberId"}
    assert list(group.members) == ["memberId"]


def test_s22_pending_sync_members():
    """testRemovalFromPendingSyncWhenMemberIsRemoved, testNewGenerationClearsPendingSyncMembers,
    testCanAddAndRemovePendingSyncMember"""
    # The model has no checked add/remove of pending-sync ids (Kafka's addPendingSyncMember and
    # removePendingSyncMember throw for an unknown member); only the engine fills the set, at
    # join completion. What can be checked: removal and a new generation clear it.
    group = model_group()
    group.add(model_member("memberId", [("range", b"")], instance_id="groupInstanceId"))
    group.pending_sync_members["memberId"] = None
    group.remove("memberId")
    assert not group.pending_sync_members

    group = model_group()
    group.add(model_member("memberId", [("range", b"")], instance_id="groupInstanceId"))
    group.transition_to(PREPARING, 0)
    group.pending_sync_members["memberId"] = None
    group.init_next_generation(0)
    assert not group.pending_sync_members

    # Through the engine: join completion makes every member pending-sync, SyncGroup and
    # LeaveGroup take them out, and nothing that is not a member is ever pending-sync.
    ctx = Ctx()
    first, second, gen = two_members(ctx)
    assert set(ctx.group().pending_sync_members) == {first, second}
    ctx.sync(second, gen, version=4)  # parked until the leader syncs
    assert set(ctx.group().pending_sync_members) == {first}
    ctx.leave([(first, None)])
    group = ctx.group()
    assert first not in group.members
    assert set(group.pending_sync_members) <= set(group.members)
    assert not group.pending_sync_members  # the rebalance that followed cleared the set


def test_s23_replace_static_member():
    """testReplaceGroupInstance, testReplaceGroupInstanceWithNonExistingMember"""
    with pytest.raises(RuntimeError):
        model_group().replace_static_member("groupInstanceId", "memberId", "newMemberId")

    group = model_group()
    old = model_member("memberId", instance_id="groupInstanceId")
    old.assignment = b"assigned"
    old.awaiting_join.append(ParkedRequest("join-1", 9))
    old.awaiting_sync.append(ParkedRequest("sync-1", 5))
    group.add(old)
    assert group.is_leader("memberId")
    assert group.static_members["groupInstanceId"] == "memberId"

    replaced, new = group.replace_static_member("groupInstanceId", "memberId", "newMemberId")
    assert replaced is old
    assert group.is_leader("newMemberId")
    assert group.static_members["groupInstanceId"] == "newMemberId"
    assert list(group.members) == ["newMemberId"]
    assert (new.protocols, new.assignment, new.session_timeout_ms, new.rebalance_timeout_ms) == (
        old.protocols,
        b"assigned",
        old.session_timeout_ms,
        old.rebalance_timeout_ms,
    )
    assert not new.awaiting_join and not new.awaiting_sync
    # The old id's parked JoinGroup is still counted until the caller fences (takes) it.
    assert group.num_awaiting_join == 1
    assert [p.request_id for p in group.take_awaiting_join(replaced)] == ["join-1"]
    assert group.num_awaiting_join == 0

    # The parked requests of the replaced id are answered FENCED_INSTANCE_ID (the engine does
    # it where Kafka's replaceStaticMember does). A parked SyncGroup:
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    ctx.join(follower, instance_id="follower", protos=[("roundrobin", b"")])  # changed: rebalance
    ctx.join(leader, instance_id="leader", protos=P_PLUS)
    assert ctx.group().state is COMPLETING
    parked_sync = ctx.sync(follower, 2, instance_id="follower", protocol_name="roundrobin")
    assert ctx.answer(parked_sync) is None
    ctx.join("", instance_id="follower", protos=[("roundrobin", b"")])
    fenced = ctx.answer(parked_sync)
    assert error(fenced) == "FENCED_INSTANCE_ID"
    assert fenced["assignment"] == b""
    new_follower = ctx.group().static_members["follower"]
    assert new_follower != follower and follower not in ctx.group().members

    # A parked JoinGroup, of the leader (leadership follows the instance):
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    parked_join = ctx.join(leader, instance_id="leader", protos=P_PLUS)
    assert ctx.group().state is PREPARING and ctx.answer(parked_join) is None
    ctx.join("", instance_id="leader", protos=P_PLUS)
    fenced = ctx.answer(parked_join)
    assert error(fenced) == "FENCED_INSTANCE_ID"
    assert fenced["member_id"] == leader and fenced["generation_id"] == -1
    group = ctx.group()
    assert group.leader_id == group.static_members["leader"] != leader


# ==============================================================================================
# 14.2 Membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup (GroupCoordinatorTest.scala)
# ==============================================================================================


def test_s25_request_handling_while_loading_in_progress():
    """testRequestHandlingWhileLoadingInProgress"""
    ctx = Ctx()
    assert ctx.c.partition_for(OTHER_GROUP_ID) != ctx.c.partition_for(GROUP_ID)
    ctx.c.begin_loading(ctx.c.partition_for(OTHER_GROUP_ID))

    joined = ctx.answer(
        ctx.join("memberId", group_id=OTHER_GROUP_ID, session=10_000, rebalance=60_000)
    )
    assert error(joined) == "COORDINATOR_LOAD_IN_PROGRESS"
    joined = ctx.answer(
        ctx.join(
            "memberId",
            group_id=OTHER_GROUP_ID,
            instance_id="groupInstanceId",
            session=10_000,
            rebalance=60_000,
        )
    )
    assert error(joined) == "COORDINATOR_LOAD_IN_PROGRESS"

    synced = ctx.answer(ctx.sync("memberId", 1, group_id=OTHER_GROUP_ID))
    assert error(synced) == "REBALANCE_IN_PROGRESS"

    committed = ctx.answer(
        ctx.commit({("foo", 0): 15}, group_id=OTHER_GROUP_ID, member_id="memberId", generation=1)
    )
    assert error(committed) == "COORDINATOR_LOAD_IN_PROGRESS"
    assert [(p["topic"], p["partition"], p["error"]) for p in committed["partitions"]] == [
        ("foo", 0, "COORDINATOR_LOAD_IN_PROGRESS")
    ]

    beat = ctx.answer(ctx.heartbeat("memberId", 1, group_id=OTHER_GROUP_ID))
    assert error(beat) is None  # answered blindly

    assert ctx.describe(OTHER_GROUP_ID)["error"] == "COORDINATOR_LOAD_IN_PROGRESS"
    assert ctx.list_groups()["error"] == "COORDINATOR_LOAD_IN_PROGRESS"
    assert ctx.delete_group(OTHER_GROUP_ID)["error"] == "COORDINATOR_LOAD_IN_PROGRESS"

    # Groups of partitions that are not loading are still served.
    assert ctx.describe(GROUP_ID)["error"] is None

    # Once loaded, the group can be reached.
    assert ctx.c.load_partition(ctx.c.partition_for(OTHER_GROUP_ID), [], ctx.now)
    assert ctx.describe(OTHER_GROUP_ID)["error"] is None


def test_s26_join_group_wrong_coordinator():
    """testJoinGroupWrongCoordinator"""
    ctx = Ctx()
    assert error(ctx.answer(ctx.join("", group_id=OTHER_GROUP_ID))) == "NOT_COORDINATOR"
    joined = ctx.answer(ctx.join("", group_id=OTHER_GROUP_ID, instance_id="groupInstanceId"))
    assert error(joined) == "NOT_COORDINATOR"
    assert ctx.c.group(OTHER_GROUP_ID) is None
    assert ctx.records == []


@pytest.mark.parametrize("session", [9, 600_001])
def test_s27_join_group_session_timeout_out_of_range(session):
    """testJoinGroupSessionTimeoutTooSmall, testJoinGroupSessionTimeoutTooLarge"""
    ctx = Ctx()
    assert error(ctx.answer(ctx.join("", session=session))) == "INVALID_SESSION_TIMEOUT"
    assert ctx.c.group(GROUP_ID) is None
    assert ctx.records == []


def test_s28_join_group_unknown_consumer_new_group():
    """testJoinGroupUnknownConsumerNewGroup"""
    ctx = Ctx()
    assert error(ctx.answer(ctx.join("memberId"))) == "UNKNOWN_MEMBER_ID"
    joined = ctx.answer(ctx.join("memberId", instance_id="groupInstanceId"))
    assert error(joined) == "UNKNOWN_MEMBER_ID"
    assert joined["member_id"] == "memberId"
    assert ctx.c.group(GROUP_ID) is None
    assert ctx.records == []  # 4.x: no records either


def test_s29_invalid_group_id():
    """testInvalidGroupId"""
    ctx = Ctx()
    assert error(ctx.answer(ctx.join("", group_id=""))) == "INVALID_GROUP_ID"
    assert ctx.c.group("") is None


def test_s30_valid_join_group():
    """testValidJoinGroup"""
    ctx = Ctx()
    member_id, joined = join_single(ctx)
    assert joined["error"] is None
    assert joined["generation_id"] == 1
    assert joined["leader"] == member_id
    assert joined["member_id"] == member_id
    assert joined["protocol_type"] == "consumer"
    assert joined["protocol_name"] == "range"
    assert [m["member_id"] for m in joined["members"]] == [member_id]
    assert ctx.group().state is COMPLETING


def test_s31_join_group_inconsistent_protocol_type():
    """testJoinGroupInconsistentProtocolType"""
    ctx = Ctx()
    join_single(ctx)
    other = ctx.answer(ctx.join("", protocol_type="connect", version=3))
    assert error(other) == "INCONSISTENT_GROUP_PROTOCOL"
    assert other["member_id"] == ""
    assert len(ctx.group().members) == 1


def test_s32_join_group_with_empty_protocol_type():
    """testJoinGroupWithEmptyProtocolType"""
    ctx = Ctx()
    assert error(ctx.answer(ctx.join("", protocol_type=""))) == "INCONSISTENT_GROUP_PROTOCOL"
    joined = ctx.answer(ctx.join("", protocol_type="", instance_id="groupInstanceId"))
    assert error(joined) == "INCONSISTENT_GROUP_PROTOCOL"
    # 4.x (6.2.2 step 8, 15.2 item 17): the group the first request created stays behind, Empty,
    # with its empty GroupMetadata record.
    group = ctx.group()
    assert group.state is EMPTY and not group.members
    assert [(r["generation_id"], r["members"]) for r in group_records(ctx)] == [(0, [])]


def test_s33_join_group_with_empty_group_protocol():
    """testJoinGroupWithEmptyGroupProtocol"""
    ctx = Ctx()
    assert error(ctx.answer(ctx.join("", protos=[]))) == "INCONSISTENT_GROUP_PROTOCOL"


def test_s34_join_group_inconsistent_group_protocol():
    """testJoinGroupInconsistentGroupProtocol"""
    ctx = Ctx()
    first = ctx.join("", protos=P, version=3)
    other = ctx.answer(ctx.join("", protos=[("roundrobin", b"")]))
    assert error(other) == "INCONSISTENT_GROUP_PROTOCOL"
    assert ctx.answer(first) is None
    ctx.sleep(DELAY)
    assert error(ctx.answer(first)) is None
    assert len(ctx.group().members) == 1


def test_s35_join_group_unknown_consumer_existing_group():
    """testJoinGroupUnknownConsumerExistingGroup"""
    ctx = Ctx()
    join_single(ctx)
    other = ctx.answer(ctx.join("memberId", version=3))
    assert error(other) == "UNKNOWN_MEMBER_ID"
    assert other["member_id"] == "memberId"


def test_s36_join_group_unknown_consumer_new_dead_group():
    """testJoinGroupUnknownConsumerNewDeadGroup"""
    ctx = Ctx()
    dead_group(ctx)
    joined = ctx.answer(ctx.join("", group_id=DEAD_GROUP_ID))
    assert error(joined) == "COORDINATOR_NOT_AVAILABLE"
    assert joined["member_id"] == ""
    joined = ctx.answer(ctx.join("", group_id=DEAD_GROUP_ID, version=3))
    assert error(joined) == "COORDINATOR_NOT_AVAILABLE"
    assert ctx.group(DEAD_GROUP_ID).state is DEAD
    assert not ctx.group(DEAD_GROUP_ID).members


def test_s37_join_group_second_join_inconsistent_protocol():
    """testJoinGroupSecondJoinInconsistentProtocol"""
    ctx = Ctx()
    first = ctx.answer(ctx.join("", version=4))
    assert error(first) == "MEMBER_ID_REQUIRED"
    member_id = first["member_id"]
    assert member_id

    second = ctx.answer(ctx.join(member_id, protos=[], version=4))
    assert error(second) == "INCONSISTENT_GROUP_PROTOCOL"

    third = ctx.join(member_id, version=4)
    ctx.sleep(DELAY)
    answer = ctx.answer(third)
    assert error(answer) is None
    assert answer["member_id"] == member_id


def test_s38_join_group_from_unchanged_follower_does_not_rebalance():
    """testJoinGroupFromUnchangedFollowerDoesNotRebalance"""
    ctx = Ctx()
    first, second, gen = two_members(ctx)
    followed = ctx.answer(ctx.join(second, version=3))
    assert error(followed) is None
    assert followed["generation_id"] == gen
    assert followed["leader"] == first
    assert followed["members"] == []
    assert ctx.group().state is COMPLETING
    assert ctx.group().generation_id == gen


def test_s39_join_group_from_unchanged_leader_should_rebalance():
    """testJoinGroupFromUnchangedLeaderShouldRebalance, testGenerationIdIncrementsOnRebalance"""
    ctx = Ctx()
    member_id, gen = ctx.join_and_sync_single()
    assert gen == 1
    rejoined = ctx.answer(ctx.join(member_id, version=3))  # answered at once: all joined
    assert error(rejoined) is None
    assert rejoined["generation_id"] == 2
    assert rejoined["leader"] == member_id
    assert ctx.group().state is COMPLETING


def test_s40_heartbeat_during_rebalance_causes_rebalance_in_progress():
    """testHeartbeatDuringRebalanceCausesRebalanceInProgress"""
    ctx = Ctx()
    member_id, joined = join_single(ctx)
    ctx.join("", version=3)
    assert ctx.group().state is PREPARING
    assert error(ctx.answer(ctx.heartbeat(member_id, joined["generation_id"]))) == (
        "REBALANCE_IN_PROGRESS"
    )


def test_s41_static_member_rejoin_with_known_member_id():
    """staticMemberRejoinWithKnownMemberId"""
    ctx = Ctx()
    rid = ctx.join("", instance_id="groupInstanceId")
    ctx.sleep(DELAY)
    joined = ctx.answer(rid)
    assert error(joined) is None
    member_id = joined["member_id"]

    rejoin = ctx.join(member_id, instance_id="groupInstanceId")
    ctx.sleep(1)
    rejoined = ctx.answer(rejoin)
    assert error(rejoined) is None
    assert rejoined["generation_id"] == joined["generation_id"]
    assert rejoined["leader"] == member_id
    assert [m["group_instance_id"] for m in rejoined["members"]] == ["groupInstanceId"]
    assert ctx.group().state is COMPLETING

    synced = ctx.sync(
        member_id, rejoined["generation_id"], {member_id: b""}, instance_id="groupInstanceId"
    )
    ctx.sleep(1)
    assert error(ctx.answer(synced)) is None
    assert ctx.group().state is STABLE


def test_s42_second_member_partially_join_and_timeout():
    """testSecondMemberPartiallyJoinAndTimeout"""
    ctx = Ctx()
    first, gen = ctx.join_and_sync_single()
    ctx.sleep(100)
    group = ctx.group()
    assert list(group.members) == [first]
    assert not group.pending_members
    assert group.state is STABLE

    partial = ctx.answer(ctx.join(""))
    assert error(partial) == "MEMBER_ID_REQUIRED"
    assert list(group.pending_members) == [partial["member_id"]]
    assert group.state is STABLE

    ctx.sleep(300)
    assert error(ctx.answer(ctx.heartbeat(first, gen))) is None
    ctx.sleep(300)  # past the pending member's 500 ms session

    group = ctx.group()
    assert list(group.members) == [first]
    assert not group.pending_members
    assert group.state is STABLE


def test_s43_join_group_completion_when_pending_member_joins():
    """testJoinGroupCompletionWhenPendingMemberJoins"""
    ctx = Ctx()
    _first, _second, pending = group_with_pending_member(ctx)
    rid = ctx.join(pending, version=3)
    joined = ctx.answer(rid)
    assert error(joined) is None
    assert joined["generation_id"] == 3
    group = ctx.group()
    assert group.state is COMPLETING
    assert group.generation_id == 3
    assert len(group.members) == 3
    assert not group.pending_members


def test_s44_join_group_completion_when_pending_member_times_out():
    """testJoinGroupCompletionWhenPendingMemberTimesOut"""
    ctx = Ctx()
    first, second, _pending = group_with_pending_member(ctx)
    ctx.sleep(120)
    group = ctx.group()
    assert group.state is COMPLETING
    assert group.generation_id == 3
    assert set(group.members) == {first, second}
    assert not group.pending_members


def test_s45_pending_members_leaves_group():
    """testPendingMembersLeavesGroup"""
    ctx = Ctx()
    first, second, pending = group_with_pending_member(ctx)
    left = ctx.answer(ctx.leave([(pending, None)]))
    assert error(left) is None
    assert member_errors(left) == [None]
    group = ctx.group()
    assert group.state is COMPLETING
    assert set(group.members) == {first, second}
    assert all(not m.is_static for m in group.members.values())
    assert not group.pending_members


def test_s46_pending_member_batch_leave_group():
    """testPendingMemberBatchLeaveGroup"""
    ctx = Ctx()
    _first, _second, pending = group_with_pending_member(ctx)
    left = ctx.answer(ctx.leave([("", "unknown-instance"), (pending, None)]))
    assert error(left) is None
    assert [(m["member_id"], m["group_instance_id"], m["error"]) for m in left["members"]] == [
        ("", "unknown-instance", "UNKNOWN_MEMBER_ID"),
        (pending, None, None),
    ]
    assert not ctx.group().pending_members


def test_s47_join_group_should_receive_error_if_group_over_max_size():
    """testJoinGroupShouldReceiveErrorIfGroupOverMaxSize (4.x form)"""
    ctx = Ctx()
    rids = [ctx.join("", version=3) for _ in range(STANDARD.group_max_size)]
    group = ctx.group()
    assert group.state is PREPARING
    assert group.num_awaiting_join == 4
    assert all(ctx.answer(rid) is None for rid in rids)
    records_before = len(ctx.records)

    rejected = ctx.answer(ctx.join("", version=3))
    assert error(rejected) == "GROUP_MAX_SIZE_REACHED"
    assert rejected["member_id"] == ""
    assert len(ctx.records) == records_before
    assert len(ctx.group().members) == 4


def test_s48_dynamic_members_join_group_with_max_size_and_required_known_member():
    """testDynamicMembersJoinGroupWithMaxSizeAndRequiredKnownMember"""
    ctx = Ctx()
    firsts = [ctx.answer(ctx.join("")) for _ in range(5)]
    assert [error(a) for a in firsts] == ["MEMBER_ID_REQUIRED"] * 5
    member_ids = [a["member_id"] for a in firsts]
    assert ctx.group().state is EMPTY and len(ctx.group().pending_members) == 5

    rids = [ctx.join(m) for m in member_ids]
    # The fifth is refused at once (4 members already await the join) and is no longer pending.
    early = {rid: ctx.answer(rid) for rid in rids if ctx.answer(rid) is not None}
    assert [(a["error"], a["member_id"]) for a in early.values()] == [
        ("GROUP_MAX_SIZE_REACHED", "")
    ]
    assert ctx.group().state is PREPARING and not ctx.group().pending_members
    ctx.sleep(DELAY)  # first initial delay: extended (members joined)
    ctx.sleep(DELAY)  # second: completes
    errors = [error(ctx.answer(rid)) for rid in rids]
    assert errors.count(None) == 4
    assert errors.count("GROUP_MAX_SIZE_REACHED") == 1
    group = ctx.group()
    assert group.state is COMPLETING
    assert len(group.members) == 4 and not group.pending_members

    rejoins = [ctx.answer(ctx.join(m)) for m in member_ids]  # answered at once
    assert [error(a) for a in rejoins] == errors
    assert ctx.group().state is COMPLETING


def test_s49_dynamic_members_join_group_with_max_size():
    """testDynamicMembersJoinGroupWithMaxSize (testDynamicMembersJoinGroupWithMaxSizeAndNotRequiredKnownMember)"""
    ctx = Ctx()
    rids = [ctx.join("", version=3) for _ in range(5)]
    group = ctx.group()
    assert group.state is PREPARING
    assert len(group.members) == 4 and group.num_awaiting_join == 4
    ctx.sleep(DELAY)
    ctx.sleep(DELAY)
    answers = [ctx.answer(rid) for rid in rids]
    errors = [error(a) for a in answers]
    assert errors.count(None) == 4
    assert errors.count("GROUP_MAX_SIZE_REACHED") == 1

    rejoins = [ctx.answer(ctx.join(a["member_id"], version=3)) for a in answers]
    assert [error(a) for a in rejoins] == errors
    assert ctx.group().state is COMPLETING
    assert len(ctx.group().members) == 4
    assert ctx.group().num_awaiting_join == 0


def test_s50_static_members_join_group_with_max_size():
    """testStaticMembersJoinGroupWithMaxSize"""
    ctx = Ctx()
    instances = [f"instance-id-{i}" for i in range(1, 6)]
    rids = [ctx.join("", instance_id=i) for i in instances]
    assert len(ctx.group().members) == 4 and ctx.group().state is PREPARING
    ctx.sleep(DELAY)
    ctx.sleep(DELAY)
    answers = [ctx.answer(rid) for rid in rids]
    errors = [error(a) for a in answers]
    assert errors.count(None) == 4
    assert errors.count("GROUP_MAX_SIZE_REACHED") == 1

    rejoins = [
        ctx.answer(ctx.join(a["member_id"], instance_id=i))
        for a, i in zip(answers, instances, strict=True)
    ]
    assert [error(a) for a in rejoins] == errors
    assert ctx.group().state is COMPLETING
    assert len(ctx.group().members) == 4


def test_s51_dynamic_members_can_rejoin_group_with_max_size_while_rebalancing():
    """testDynamicMembersCanReJoinGroupWithMaxSizeWhileRebalancing"""
    ctx = Ctx()
    member_ids = [ctx.answer(ctx.join(""))["member_id"] for _ in range(5)]
    assert len(ctx.group().pending_members) == 5 and ctx.group().state is EMPTY

    second_round = [ctx.join(m) for m in member_ids]
    refused = [ctx.answer(rid) for rid in second_round if ctx.answer(rid) is not None]
    assert [error(a) for a in refused] == ["GROUP_MAX_SIZE_REACHED"]
    assert len(ctx.group().members) == 4 and ctx.group().num_awaiting_join == 4
    assert ctx.group().state is PREPARING

    rids = [ctx.join(m) for m in member_ids]  # rejoin while rebalancing
    ctx.sleep(DELAY)
    ctx.sleep(DELAY)
    errors = [error(ctx.answer(rid)) for rid in rids]
    assert errors.count(None) == 4
    assert errors.count("GROUP_MAX_SIZE_REACHED") == 1
    group = ctx.group()
    assert group.state is COMPLETING
    assert len(group.members) == 4 and group.num_awaiting_join == 0


def test_s52_last_joining_members_are_kicked_out_when_rejoining_group_with_max_size():
    """testLastJoiningMembersAreKickedOutWhenReJoiningGroupWithMaxSize"""
    # A Stable group of 6 is built under a larger limit, then loaded under the fixture's limit
    # of 4: the load sends it to PreparingRebalance (Kafka's test calls prepareRebalance).
    big = Ctx(replace(STANDARD, group_max_size=10))
    rids = [big.join("", version=3, session=600_000) for _ in range(6)]
    big.sleep(DELAY)
    big.sleep(DELAY)
    answers = [big.answer(rid) for rid in rids]
    assert all(error(a) is None for a in answers)
    member_ids = [a["member_id"] for a in answers]
    leader = answers[0]["leader"]
    assert error(big.answer(big.sync(leader, 1, {m: b"" for m in member_ids}))) is None
    assert big.group().state is STABLE

    ctx = Ctx()
    ctx.now = big.now
    ctx.c = GroupCoordinator.from_records(
        big.records, STANDARD, ctx.now, owned_partitions={0}, id_source=SequentialIds()
    )
    group = ctx.group()
    assert group.state is PREPARING
    assert len(group.members) == 6

    rids = [ctx.join(m, version=3, session=600_000) for m in member_ids]
    # The last two rejoiners are refused at once and removed from the group.
    assert [error(ctx.answer(rid)) for rid in rids[4:]] == ["GROUP_MAX_SIZE_REACHED"] * 2
    assert all(ctx.answer(rid) is None for rid in rids[:4])
    assert set(ctx.group().members) == set(member_ids[:4])
    ctx.sleep(REBALANCE + 1)
    errors = [error(ctx.answer(rid)) for rid in rids]
    assert errors[:4] == [None] * 4
    assert errors[4:] == ["GROUP_MAX_SIZE_REACHED"] * 2
    group = ctx.group()
    assert group.state is COMPLETING
    assert set(group.members) == set(member_ids[:4])


def test_s53_sync_group_follower_after_leader():
    """testSyncGroupFollowerAfterLeader"""
    ctx = Ctx()
    leader, follower, gen = two_members(ctx)
    led = ctx.answer(ctx.sync(leader, gen, {leader: b"\x00", follower: b"\x01"}))
    assert error(led) is None
    assert led["assignment"] == b"\x00"
    assert ctx.group().state is STABLE
    followed = ctx.answer(ctx.sync(follower, gen, version=4))
    assert error(followed) is None
    assert followed["assignment"] == b"\x01"


def test_s54_sync_group_leader_after_follower():
    """testSyncGroupLeaderAfterFollower"""
    ctx = Ctx()
    leader, follower, gen = two_members(ctx)
    follower_rid = ctx.sync(follower, gen, version=4)
    assert ctx.answer(follower_rid) is None  # parked until the leader syncs
    led = ctx.answer(ctx.sync(leader, gen, {leader: b"\x00", follower: b"\x01"}))
    assert error(led) is None
    assert led["assignment"] == b"\x00"
    followed = ctx.answer(follower_rid)
    assert error(followed) is None
    assert followed["assignment"] == b"\x01"
    assert ctx.group().state is STABLE


def test_s55_sync_group_empty_assignment():
    """testSyncGroupEmptyAssignment"""
    ctx = Ctx()
    member_id, joined = join_single(ctx)
    synced = ctx.answer(ctx.sync(member_id, joined["generation_id"], {}))
    assert error(synced) is None
    assert synced["assignment"] == b""
    assert error(ctx.answer(ctx.heartbeat(member_id, 1))) is None


def test_s56_leader_failure_in_sync_group():
    """testLeaderFailureInSyncGroup"""
    ctx = Ctx()
    leader, follower, gen = two_members(ctx)
    follower_rid = ctx.sync(follower, gen, version=4)
    assert ctx.answer(follower_rid) is None
    ctx.sleep(600)
    failed = ctx.answer(follower_rid)
    assert error(failed) == "REBALANCE_IN_PROGRESS"
    assert failed["assignment"] == b""
    group = ctx.group()  # 4.x: the leader expired, the follower stays for the next generation
    assert list(group.members) == [follower]
    assert group.state is PREPARING
    assert leader not in group.members


def test_s57_sync_group_errors():
    """testSyncGroupNotCoordinator, testSyncGroupFromUnknownGroup, testSyncGroupFromUnknownMember,
    testSyncGroupFromIllegalGeneration, testSyncDeadGroup"""
    ctx = Ctx()
    assert error(ctx.answer(ctx.sync("memberId", 1, group_id=OTHER_GROUP_ID))) == "NOT_COORDINATOR"
    assert error(ctx.answer(ctx.sync("memberId", 1))) == "UNKNOWN_MEMBER_ID"

    ctx = Ctx()
    member_id, gen = ctx.join_and_sync_single()
    assert error(ctx.answer(ctx.sync("blah", gen, version=4))) == "UNKNOWN_MEMBER_ID"

    ctx = Ctx()
    member_id, joined = join_single(ctx)
    gen = joined["generation_id"]
    illegal = ctx.answer(ctx.sync(member_id, gen + 1, {member_id: b""}))
    assert error(illegal) == "ILLEGAL_GENERATION"
    assert ctx.group().state is COMPLETING

    ctx = Ctx()
    dead_group(ctx)
    synced = ctx.answer(ctx.sync("memberId", 1, group_id=DEAD_GROUP_ID, version=4))
    assert error(synced) == "COORDINATOR_NOT_AVAILABLE"


def _static_leader_and_follower(ctx: Ctx) -> tuple[str, str, int]:
    """The start of ``testSyncGroupProtocolTypeAndNameWith``: static leader and follower with
    P+, joined (51 + 501 ms), not synced."""
    lead = ctx.join("", instance_id="leader", protos=P_PLUS)
    follow = ctx.join("", instance_id="follower", protos=P_PLUS)
    ctx.sleep(DELAY)
    ctx.sleep(REBALANCE + 1)
    led, followed = ctx.answer(lead), ctx.answer(follow)
    assert error(led) is None and error(followed) is None
    assert ctx.group().state is COMPLETING
    return led["member_id"], followed["member_id"], led["generation_id"]


@pytest.mark.parametrize(
    ("protocol_type", "protocol_name"),
    [
        ("whatever", None),  # as Kafka's test sends it (null name: rejected at parse, v5)
        ("whatever", "range"),  # the coordinator's own check
        (None, "whatever"),
        ("consumer", "whatever"),
    ],
)
def test_s58_sync_group_inconsistent_protocol(protocol_type, protocol_name):
    """testSyncGroupReturnsAnErrorWhenProtocolTypeIsInconsistent,
    testSyncGroupReturnsAnErrorWhenProtocolNameIsInconsistent"""
    ctx = Ctx()
    leader, follower, gen = _static_leader_and_follower(ctx)
    led = ctx.answer(
        ctx.sync(
            leader, gen, {leader: b""}, protocol_type=protocol_type, protocol_name=protocol_name
        )
    )
    followed = ctx.answer(
        ctx.sync(follower, gen, protocol_type=protocol_type, protocol_name=protocol_name)
    )
    for answer in (led, followed):
        assert error(answer) == "INCONSISTENT_GROUP_PROTOCOL"
        assert answer["protocol_type"] is None
        assert answer["protocol_name"] is None
    assert ctx.group().state is COMPLETING


@pytest.mark.parametrize(
    ("protocol_type", "protocol_name", "version"),
    [(None, None, 4), ("consumer", "range", 5)],
)
def test_s59_sync_group_protocol_consistent(protocol_type, protocol_name, version):
    """testSyncGroupSucceedWhenProtocolTypeAndNameAreNotProvided,
    testSyncGroupSucceedWhenProtocolTypeAndNameAreConsistent"""
    ctx = Ctx()
    leader, follower, gen = _static_leader_and_follower(ctx)
    led = ctx.answer(
        ctx.sync(
            leader,
            gen,
            {leader: b""},
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            version=version,
        )
    )
    followed = ctx.answer(
        ctx.sync(
            follower, gen, protocol_type=protocol_type, protocol_name=protocol_name, version=version
        )
    )
    for answer in (led, followed):
        assert error(answer) is None
        assert answer["protocol_type"] == "consumer"
        assert answer["protocol_name"] == "range"
    assert ctx.group().state is STABLE


def test_s60_heartbeat_errors():
    """testHeartbeatWrongCoordinator, testHeartbeatUnknownGroup, testHeartbeatDeadGroup"""
    ctx = Ctx()
    assert error(ctx.answer(ctx.heartbeat("memberId", -1, group_id=OTHER_GROUP_ID))) == (
        "NOT_COORDINATOR"
    )
    assert error(ctx.answer(ctx.heartbeat("memberId", -1))) == "UNKNOWN_MEMBER_ID"
    dead_group(ctx)
    assert error(ctx.answer(ctx.heartbeat("memberId", 1, group_id=DEAD_GROUP_ID))) == (
        "COORDINATOR_NOT_AVAILABLE"
    )


def test_s61_heartbeat_empty_group():
    """testHeartbeatEmptyGroup"""
    ctx = Ctx()
    assert error(ctx.answer(ctx.join(""))) == "MEMBER_ID_REQUIRED"  # creates the Empty group
    group = ctx.group()
    assert group.state is EMPTY
    group.add(model_member("memberId", instance_id="groupInstanceId"))
    assert error(ctx.answer(ctx.heartbeat("memberId", 0))) == "UNKNOWN_MEMBER_ID"


def test_s62_heartbeat_stable_group():
    """testHeartbeatUnknownConsumerExistingGroup, testHeartbeatIllegalGeneration, testValidHeartbeat"""
    ctx = Ctx()
    member_id, gen = ctx.join_and_sync_single()
    assert gen == 1
    assert error(ctx.answer(ctx.heartbeat("memberId", 1))) == "UNKNOWN_MEMBER_ID"
    assert error(ctx.answer(ctx.heartbeat(member_id, 2))) == "ILLEGAL_GENERATION"
    assert error(ctx.answer(ctx.heartbeat(member_id, 1))) is None


def test_s63_heartbeat_rebalance_in_progress():
    """testHeartbeatRebalanceInProgress"""
    ctx = Ctx()
    member_id, _joined = join_single(ctx)
    assert ctx.group().state is COMPLETING
    assert error(ctx.answer(ctx.heartbeat(member_id, 1))) is None


def test_s64_leave_group_errors():
    """testLeaveGroupWrongCoordinator, testLeaveGroupUnknownGroup,
    testLeaveGroupUnknownConsumerExistingGroup"""
    ctx = Ctx()
    left = ctx.answer(ctx.leave([("", None)], group_id=OTHER_GROUP_ID))
    assert error(left) == "NOT_COORDINATOR"
    assert left["members"] == []

    left = ctx.answer(ctx.leave([("memberId", None)]))
    assert error(left) is None
    assert member_errors(left) == ["UNKNOWN_MEMBER_ID"]

    join_single(ctx)
    left = ctx.answer(ctx.leave([("consumerId", None)]))
    assert error(left) is None
    assert member_errors(left) == ["UNKNOWN_MEMBER_ID"]
    assert len(ctx.group().members) == 1


def test_s65_leave_dead_group():
    """testSingleLeaveDeadGroup, testBatchLeaveDeadGroup"""
    ctx = Ctx()
    dead_group(ctx)
    for members in ([("memberId", None)], [("memberId", None), ("memberId", None)]):
        left = ctx.answer(ctx.leave(members, group_id=DEAD_GROUP_ID))
        assert error(left) == "COORDINATOR_NOT_AVAILABLE"
        assert left["members"] == []


def test_s66_valid_leave_group():
    """testValidLeaveGroup"""
    ctx = Ctx()
    member_id, _joined = join_single(ctx)
    records_before = len(ctx.records)
    left = ctx.answer(ctx.leave([(member_id, None)]))
    assert error(left) is None
    assert [(m["member_id"], m["group_instance_id"], m["error"]) for m in left["members"]] == [
        (member_id, None, None)
    ]
    assert len(ctx.records) == records_before + 1  # the Empty group's GroupMetadata record
    group = ctx.group()
    assert group.state is EMPTY
    assert group.generation_id == 2
    assert not group.members
    last = group_records(ctx)[-1]
    assert last["value"] is not None
    assert last["generation_id"] == 2
    assert last["members"] == []
    assert last["protocol_name"] is None
    assert last["protocol_type"] == "consumer"
    assert last["leader"] is None
    assert last["current_state_timestamp_ms"] == ctx.now


def test_s67_leave_group_static_member():
    """testLeaveGroupWithFencedInstanceId, testLeaveGroupStaticMemberWithUnknownMemberId"""
    ctx = Ctx()
    rid = ctx.join("", instance_id="leader", protos=P_PLUS)
    ctx.sleep(DELAY)
    assert error(ctx.answer(rid)) is None

    left = ctx.answer(ctx.leave([("some_member", "leader")]))
    assert error(left) is None
    assert member_errors(left) == ["FENCED_INSTANCE_ID"]
    assert "leader" in ctx.group().static_members

    left = ctx.answer(ctx.leave([("", "leader")]))
    assert error(left) is None
    assert member_errors(left) == [None]
    assert "leader" not in ctx.group().static_members


def test_s68_static_members_batch_leave_group():
    """testStaticMembersValidBatchLeaveGroup, testStaticMembersWrongCoordinatorBatchLeaveGroup,
    testStaticMembersUnknownGroupBatchLeaveGroup"""
    ctx = Ctx()
    ctx.static_pair()
    left = ctx.answer(ctx.leave([("", "leader"), ("", "follower")], group_id="invalid-group"))
    assert error(left) == "NOT_COORDINATOR"
    assert left["members"] == []

    left = ctx.answer(ctx.leave([("", "leader"), ("", "follower")]))
    assert error(left) is None
    assert member_errors(left) == [None, None]
    assert not ctx.group().members

    ctx = Ctx()
    left = ctx.answer(ctx.leave([("", "leader"), ("", "follower")]))
    assert error(left) is None
    assert member_errors(left) == ["UNKNOWN_MEMBER_ID", "UNKNOWN_MEMBER_ID"]


def test_s69_static_members_batch_leave_partial():
    """testStaticMembersFencedInstanceBatchLeaveGroup,
    testStaticMembersUnknownInstanceBatchLeaveGroup"""
    ctx = Ctx()
    ctx.static_pair()
    left = ctx.answer(ctx.leave([("", "leader"), ("invalid-member", "follower")]))
    assert error(left) is None
    assert member_errors(left) == [None, "FENCED_INSTANCE_ID"]
    assert set(ctx.group().static_members) == {"follower"}

    ctx = Ctx()
    ctx.static_pair()
    left = ctx.answer(ctx.leave([("", "unknown-instance"), ("", "follower")]))
    assert error(left) is None
    assert member_errors(left) == ["UNKNOWN_MEMBER_ID", None]
    assert set(ctx.group().static_members) == {"leader"}


def test_s70_generate_records_on_new_classic_group():
    """testGenerateRecordsOnNewClassicGroup (GroupMetadataManagerTest.java)"""
    ctx = Ctx()
    assert error(ctx.answer(ctx.join("", version=4))) == "MEMBER_ID_REQUIRED"
    assert len(ctx.records) == 1
    record = ctx.records[0]
    assert record["record_type"] == "group_metadata"
    assert record["group_id"] == GROUP_ID
    assert record["value"] is not None
    assert record["generation_id"] == 0
    assert record["protocol_type"] == ""
    assert record["protocol_name"] is None
    assert record["leader"] is None
    assert record["members"] == []
    assert record["current_state_timestamp_ms"] == 0  # the group's creation time
    group = ctx.group()
    assert group.state is EMPTY and not group.members and len(group.pending_members) == 1


def test_s71_join_group_protocol_type_in_response():
    """testJoinGroupProtocolTypeIsNotProvidedWhenAnErrorOccurs, testJoinGroupReturnsTheProtocolType"""
    ctx = Ctx()
    failed = ctx.answer(ctx.join("fake-id", instance_id="leader", protos=P_PLUS))
    assert error(failed) == "UNKNOWN_MEMBER_ID"
    assert failed["protocol_type"] is None

    ctx = Ctx()
    lead = ctx.join("", instance_id="leader", protos=P_PLUS)
    follow = ctx.join("", instance_id="follower", protos=P_PLUS)
    ctx.sleep(DELAY)
    ctx.sleep(REBALANCE + 1)
    for rid in (lead, follow):
        answer = ctx.answer(rid)
        assert error(answer) is None
        assert answer["protocol_type"] == "consumer"
