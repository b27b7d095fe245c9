"""Scenarios 72-120 and 185-192 of kafka-group-protocol.md (sections 14.3, 14.4, 14.10): static
membership, timers, DescribeGroups and ListGroups, each checked against what Kafka's own test
asserts (``GroupCoordinatorTest.scala`` at 3.9, and its 4.x port in ``GroupMetadataManagerTest``
where the engine follows 4.x).

Scenarios 84 and 85 (a GroupMetadata append that fails) are not here: the engine's appends are
synchronous and always succeed (doc 1.2), so their outcome cannot be produced.

Timings follow section 8.6: a timer fires once the clock reaches its deadline, at the advanced
clock. Kafka's ``sendJoinGroup`` (3.x) and ``sendClassicGroupJoin`` (4.x) send a dynamic member's
JoinGroup as version 3 unless told otherwise (no MEMBER_ID_REQUIRED); ``NEW_V`` mirrors that.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from coordinator.group.states import GroupState
from tests.support import (
    GROUP_ID,
    OTHER_GROUP_ID,
    P_PLUS,
    REBALANCE,
    SESSION,
    STANDARD,
    Ctx,
    P,
)

DELAY = STANDARD.group_initial_rebalance_delay_ms  # 50
NEW_V = 3  # JoinGroup version of Kafka's test helpers for a new dynamic member
ROUNDROBIN = [("roundrobin", b"")]
LEADER, FOLLOWER = "leader", "follower"
CR, PR, ST = (
    GroupState.COMPLETING_REBALANCE,
    GroupState.PREPARING_REBALANCE,
    GroupState.STABLE,
)
ALL_STATES = ["PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty"]


# --- helpers -----------------------------------------------------------------------------------


def got(ctx: Ctx, rid: str) -> dict[str, Any]:
    """The response to ``rid``, which must have been emitted by now."""
    response = ctx.answer(rid)
    assert response is not None, f"request {rid} is still parked"
    return response


def parked(ctx: Ctx, rid: str) -> None:
    assert ctx.answer(rid) is None, f"request {rid} was answered: {ctx.answer(rid)}"


def instances(response: dict[str, Any]) -> set[str | None]:
    """The group instance ids of a JoinGroup response's member list (Kafka's
    ``checkJoinGroupResult`` compares them as a set)."""
    return {m["group_instance_id"] for m in response["members"]}


def check_join(
    ctx: Ctx,
    response: dict[str, Any],
    generation: int,
    instance_ids: set[str | None],
    group_state: GroupState,
    *,
    error: str | None = None,
    leader: str | None = None,
    member: str | None = None,
    skip_assignment: bool = False,
) -> None:
    """Kafka's ``checkJoinGroupResult`` (3.x GroupCoordinatorTest): the protocol type is
    ``consumer`` on success and null with an error."""
    assert response["error"] == error, response
    assert response["generation_id"] == generation, response
    assert len(response["members"]) == len(instance_ids), response
    assert instances(response) == instance_ids, response
    assert ctx.group().state is group_state
    assert response["protocol_type"] == (None if error else "consumer"), response
    assert response["skip_assignment"] is skip_assignment, response
    if leader is not None:
        assert response["leader"] == leader, response
    if member is not None:
        assert response["member_id"] == member, response


def state(ctx: Ctx) -> str:
    return ctx.group().state.value


def sjoin(ctx: Ctx, instance_id: str, member_id: str = "", advance: int = DELAY + 1, **kw: Any):
    """Kafka's ``staticJoinGroup``: send, advance the clock, return the (awaited) response."""
    rid = ctx.join(member_id, instance_id=instance_id, **kw)
    ctx.sleep(advance)
    return got(ctx, rid)


def single_dynamic(ctx: Ctx, **kw: Any) -> tuple[str, int]:
    """Kafka's ``dynamicJoinGroup`` then ``syncGroupLeader``: one member, Stable."""
    member, gen = ctx.join_and_sync_single(**kw)
    assert state(ctx) == "Stable"
    return member, gen


def dynamic_joined(ctx: Ctx, **kw: Any) -> dict[str, Any]:
    """Kafka's ``dynamicJoinGroup``: JoinGroup v4+ twice, then 51 ms: CompletingRebalance."""
    _member, rid = ctx.dynamic_join(**kw)
    ctx.sleep(DELAY + 1)
    joined = got(ctx, rid)
    assert joined["error"] is None, joined
    return joined


def members_of(ctx: Ctx) -> set[str]:
    return set(ctx.group().members)


def last_group_record(ctx: Ctx) -> dict[str, Any]:
    records = [r for r in ctx.records if r["record_type"] == "group_metadata"]
    assert records, "no GroupMetadata record"
    return records[-1]


def join_n_members(ctx: Ctx, n: int) -> list[dict[str, Any]]:
    """Kafka's ``joinWithNMembers``: n v4 joins, n rejoins with the ids, 51 then 501 ms."""
    ids = []
    for _ in range(n):
        first = got(ctx, ctx.join(""))
        assert first["error"] == "MEMBER_ID_REQUIRED", first
        ids.append(first["member_id"])
    rids = [ctx.join(member_id) for member_id in ids]
    ctx.sleep(DELAY + 1)
    ctx.sleep(REBALANCE + 1)
    results = [got(ctx, rid) for rid in rids]
    assert [r["error"] for r in results] == [None] * n, results
    return results


def heartbeat_of(ctx: Ctx, joined: dict[str, Any]) -> str | None:
    """Kafka's ``verifyHeartbeat``: a Heartbeat with the join response's id and generation."""
    return got(ctx, ctx.heartbeat(joined["member_id"], joined["generation_id"]))["error"]


def commit_errors(ctx: Ctx, rid: str) -> list[str | None]:
    return [p["error"] for p in got(ctx, rid)["partitions"]]


# --- 14.3 Static membership ---------------------------------------------------------------------


def test_s72_static_member_join_as_first_member():
    """staticMemberJoinAsFirstMember"""
    ctx = Ctx()
    joined = sjoin(ctx, "groupInstanceId")
    assert joined["error"] is None
    assert joined["generation_id"] == 1
    assert joined["member_id"].startswith("groupInstanceId-")


def test_s73_static_rejoin_with_explicit_unknown_member_id():
    """staticMemberReJoinWithExplicitUnknownMemberId"""
    ctx = Ctx()
    assert sjoin(ctx, "groupInstanceId")["error"] is None
    again = sjoin(ctx, "groupInstanceId", member_id="unknown_member")
    assert again["error"] == "FENCED_INSTANCE_ID"


def test_s74_fence_duplicate_rejoined_follower():
    """staticMemberFenceDuplicateRejoinedFollower"""
    ctx = Ctx()
    _leader, follower = ctx.static_pair()
    # A third member joins: rebalance.
    ctx.join("", version=NEW_V)
    ctx.sleep(1)
    assert state(ctx) == "PreparingRebalance"
    ctx.sleep(1)
    old_follower = ctx.join(follower, instance_id=FOLLOWER)
    ctx.sleep(1)
    parked(ctx, old_follower)
    duplicate = ctx.join("", instance_id=FOLLOWER)
    ctx.sleep(1)
    fenced = got(ctx, old_follower)
    check_join(ctx, fenced, -1, set(), PR, error="FENCED_INSTANCE_ID", leader="")
    assert fenced["member_id"] == follower
    assert fenced["protocol_name"] is None
    parked(ctx, duplicate)


def test_s75_fence_duplicate_syncing_follower_after_member_id_changed():
    """staticMemberFenceDuplicateSyncingFollowerAfterMemberIdChanged"""
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    leader_join = ctx.join(leader, instance_id=LEADER)
    ctx.sleep(1)
    assert state(ctx) == "PreparingRebalance"
    ctx.sleep(1)
    old_follower_join = ctx.join(follower, instance_id=FOLLOWER)
    ctx.sleep(1)

    leader_joined = got(ctx, leader_join)
    check_join(ctx, leader_joined, 2, {LEADER, FOLLOWER}, CR, leader=leader, member=leader)
    follower_joined = got(ctx, old_follower_join)
    check_join(ctx, follower_joined, 2, set(), CR, leader=leader, member=follower)

    old_follower_sync = ctx.sync(follower, 2, instance_id=FOLLOWER)
    parked(ctx, old_follower_sync)
    duplicate_join = ctx.join("", instance_id=FOLLOWER)
    ctx.sleep(1)
    assert got(ctx, old_follower_sync)["error"] == "FENCED_INSTANCE_ID"
    assert state(ctx) == "PreparingRebalance"

    ctx.sleep(DELAY + 1)
    ctx.sleep(REBALANCE + 1)
    duplicate = got(ctx, duplicate_join)
    check_join(ctx, duplicate, 3, {FOLLOWER}, CR, leader=duplicate["member_id"])
    assert duplicate["member_id"] not in (leader, follower)
    assert members_of(ctx) == {duplicate["member_id"]}


def test_s76_fence_duplicate_rejoining_follower_after_member_id_changed():
    """staticMemberFenceDuplicateRejoiningFollowerAfterMemberIdChanged"""
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    leader_join = ctx.join(leader, instance_id=LEADER)
    ctx.sleep(1)
    assert state(ctx) == "PreparingRebalance"
    duplicate_join = ctx.join("", instance_id=FOLLOWER)
    ctx.sleep(1)
    old_follower_join = ctx.join(follower, instance_id=FOLLOWER)

    check_join(ctx, got(ctx, leader_join), 2, {LEADER, FOLLOWER}, CR)
    duplicate = got(ctx, duplicate_join)
    check_join(ctx, duplicate, 2, set(), CR)
    assert duplicate["member_id"] != follower
    assert duplicate["member_id"].startswith("follower-")
    check_join(
        ctx, got(ctx, old_follower_join), -1, set(), CR, error="FENCED_INSTANCE_ID", member=follower
    )


def _leader_rejoins_with_unknown_member_id(ctx: Ctx, version: int) -> tuple[str, str, dict]:
    leader, follower = ctx.static_pair()
    records_before = len(ctx.records)
    rejoined = sjoin(ctx, LEADER, protos=P_PLUS, advance=1, version=version)
    new_records = ctx.records[records_before:]
    # As the group was Stable and the member id changed, one GroupMetadata record is written:
    # the group as it now is, with every member's current assignment.
    assert len(new_records) == 1, new_records
    record = new_records[0]
    assert record["record_type"] == "group_metadata" and record["value"] is not None
    assert record["generation_id"] == 1
    assert record["protocol_type"] == "consumer" and record["protocol_name"] == "range"
    assert record["leader"] == rejoined["member_id"]
    assert {m["member_id"]: m["assignment"] for m in record["members"]} == {
        rejoined["member_id"]: b"leader-assignment",
        follower: b"follower-assignment",
    }
    return leader, follower, rejoined


def test_s77_static_leader_rejoin_unknown_member_id_v9():
    """staticMemberRejoinWithLeaderIdAndUnknownMemberId[supportSkippingAssignment=true]"""
    ctx = Ctx()
    leader, _follower, rejoined = _leader_rejoins_with_unknown_member_id(ctx, 9)
    new_leader = rejoined["member_id"]
    assert new_leader != leader and new_leader.startswith("leader-")
    check_join(
        ctx,
        rejoined,
        1,
        {LEADER, FOLLOWER},
        ST,
        leader=new_leader,
        member=new_leader,
        skip_assignment=True,
    )
    assert rejoined["protocol_name"] == "range"
    assert ctx.group().leader_id == new_leader


def test_s78_static_leader_rejoin_unknown_member_id_before_v9():
    """staticMemberRejoinWithLeaderIdAndUnknownMemberId[supportSkippingAssignment=false]"""
    ctx = Ctx()
    leader, _follower, rejoined = _leader_rejoins_with_unknown_member_id(ctx, 8)
    new_leader = rejoined["member_id"]
    assert new_leader != leader
    # The old leader id is named so that an old client does not run an assignment.
    check_join(ctx, rejoined, 1, set(), ST, leader=leader, member=new_leader, skip_assignment=False)
    assert rejoined["protocol_name"] == "range"


@pytest.mark.parametrize("version", [9, 8])
def test_s79_old_leader_id_fenced_after_static_rejoin(version: int):
    """staticMemberRejoinWithLeaderIdAndUnknownMemberId (old leader id fenced)"""
    ctx = Ctx()
    leader, _follower, _rejoined = _leader_rejoins_with_unknown_member_id(ctx, version)
    records_before = len(ctx.records)
    old = sjoin(ctx, LEADER, member_id=leader, protos=P_PLUS, advance=1, version=version)
    assert old["error"] == "FENCED_INSTANCE_ID"
    assert got(ctx, ctx.sync(leader, 1, instance_id=LEADER))["error"] == "FENCED_INSTANCE_ID"
    assert got(ctx, ctx.sync(leader, 1))["error"] == "UNKNOWN_MEMBER_ID"
    assert ctx.records[records_before:] == []
    assert state(ctx) == "Stable"


def test_s80_static_leader_rejoin_known_member_id_follower_expires():
    """staticMemberRejoinWithLeaderIdAndKnownMemberId"""
    ctx = Ctx()
    leader, follower = ctx.static_pair(session=REBALANCE // 2)
    rejoined = sjoin(ctx, LEADER, member_id=leader, protos=P_PLUS, advance=REBALANCE + 1)
    assert FOLLOWER not in ctx.group().static_members
    assert follower not in ctx.group().members
    check_join(ctx, rejoined, 2, {LEADER}, CR, leader=leader, member=leader)


def test_s81_static_leader_rejoin_unexpected_dead_or_empty_group():
    """staticMemberRejoinWithLeaderIdAndUnexpectedDeadGroup, ...UnexpectedEmptyGroup"""
    dead = Ctx()
    leader, _ = dead.static_pair()
    dead.group().state = GroupState.DEAD
    assert sjoin(dead, LEADER, member_id=leader, advance=1)["error"] == "COORDINATOR_NOT_AVAILABLE"

    empty = Ctx()
    leader, _ = empty.static_pair()
    empty.group().state = GroupState.EMPTY  # Kafka: PreparingRebalance, then Empty; members kept
    assert sjoin(empty, LEADER, member_id=leader, advance=1)["error"] == "UNKNOWN_MEMBER_ID"


def test_s82_static_follower_rejoin_with_change_of_protocol():
    """staticMemberRejoinWithFollowerIdAndChangeOfProtocol"""
    ctx = Ctx()
    _leader, follower = ctx.static_pair(session=SESSION * 2)
    rejoined = sjoin(ctx, FOLLOWER, member_id=follower, protos=ROUNDROBIN, advance=SESSION + 1)
    assert rejoined["member_id"] == follower
    assert LEADER in ctx.group().static_members
    assert ctx.group().leader_id == follower
    check_join(ctx, rejoined, 2, {LEADER, FOLLOWER}, CR, leader=follower, member=follower)
    assert rejoined["protocol_name"] == "roundrobin"


def test_s83_static_follower_unknown_id_change_of_protocol_changes_vote():
    """staticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWithSelectedProtocolChanged"""
    ctx = Ctx()
    rebalance, session = 10_000, 15_000
    _leader, follower = ctx.static_pair(session=session, rebalance=rebalance)
    assert ctx.group().select_protocol() != "roundrobin"
    records_before = len(ctx.records)
    rid = ctx.join(
        "", instance_id=FOLLOWER, protos=ROUNDROBIN, session=session, rebalance=rebalance
    )
    assert ctx.records[records_before:] == []
    parked(ctx, rid)
    assert state(ctx) == "PreparingRebalance"
    assert ctx.group().select_protocol() == "roundrobin"

    ctx.sleep(rebalance)
    joined = got(ctx, rid)
    new_follower = joined["member_id"]
    assert joined["error"] is None
    assert LEADER in ctx.group().static_members
    assert ctx.group().leader_id == new_follower
    assert new_follower != follower
    check_join(ctx, joined, 2, {LEADER, FOLLOWER}, CR, leader=new_follower, member=new_follower)
    assert joined["protocol_name"] == "roundrobin"


def test_s86_static_rejoins_persist_updated_timeouts():
    """staticMemberRejoinWithUpdatedSessionAndRebalanceTimeoutsAndPersistChange"""
    ctx = Ctx()
    ctx.static_pair()
    doubled = {"session": 2 * SESSION, "rebalance": 2 * REBALANCE}
    follower = sjoin(ctx, FOLLOWER, protos=P_PLUS, advance=1, **doubled)
    check_join(ctx, follower, 1, set(), ST)
    leader = sjoin(ctx, LEADER, protos=P_PLUS, advance=1, **doubled)
    check_join(
        ctx,
        leader,
        1,
        {LEADER, FOLLOWER},
        ST,
        leader=leader["leader"],
        member=leader["member_id"],
        skip_assignment=True,
    )
    assert leader["leader"] == leader["member_id"]
    for member in ctx.group().members.values():
        assert member.session_timeout_ms == 1000
        assert member.rebalance_timeout_ms == 1000
    persisted = last_group_record(ctx)
    assert [(m["session_timeout_ms"], m["rebalance_timeout_ms"]) for m in persisted["members"]] == [
        (1000, 1000),
        (1000, 1000),
    ]


def test_s87_static_follower_unknown_id_protocol_change_vote_unchanged():
    """staticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWhileSelectProtocolUnchanged"""
    ctx = Ctx()
    _leader, follower = ctx.static_pair()
    selected = ctx.group().select_protocol()
    new_protocols = [(selected, b"")]
    joined = sjoin(ctx, FOLLOWER, protos=new_protocols, advance=1)
    check_join(ctx, joined, 1, set(), ST)
    assert joined["member_id"] != follower

    old = sjoin(ctx, FOLLOWER, member_id=follower, protos=new_protocols, advance=1)
    assert old["error"] == "FENCED_INSTANCE_ID"
    old_sync = got(ctx, ctx.sync(follower, 1, instance_id=FOLLOWER))
    assert old_sync["error"] == "FENCED_INSTANCE_ID"
    new_sync = got(ctx, ctx.sync(joined["member_id"], 1, instance_id=FOLLOWER))
    assert new_sync["error"] is None
    assert new_sync["assignment"] == b"follower-assignment"


def test_s88_known_leader_rebalance_then_follower_changes_protocol():
    """staticMemberRejoinWithKnownLeaderIdToTriggerRebalanceAndFollowerWithChangeofProtocol"""
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    leader_join = ctx.join(leader, instance_id=LEADER, protos=P_PLUS)
    follower_join = ctx.join(follower, instance_id=FOLLOWER, protos=P_PLUS)
    ctx.sleep(1)
    check_join(ctx, got(ctx, leader_join), 2, {LEADER, FOLLOWER}, CR, leader=leader, member=leader)
    check_join(ctx, got(ctx, follower_join), 2, set(), CR, leader=leader, member=follower)
    changed = ctx.join(follower, instance_id=FOLLOWER, protos=P)
    assert state(ctx) == "PreparingRebalance"
    ctx.sleep(REBALANCE + 1)
    check_join(ctx, got(ctx, changed), 3, {FOLLOWER}, CR, leader=follower, member=follower)


def test_s89_static_follower_rejoin_with_unknown_member_id():
    """staticMemberRejoinAsFollowerWithUnknownMemberId"""
    ctx = Ctx()
    _leader, follower = ctx.static_pair()
    joined = sjoin(ctx, FOLLOWER, protos=P_PLUS, advance=1)
    assert LEADER in ctx.group().static_members
    check_join(ctx, joined, 1, set(), ST)
    assert joined["member_id"] != follower
    synced = got(ctx, ctx.sync(joined["member_id"], 1))
    assert synced["error"] is None
    assert synced["assignment"] == b"follower-assignment"


def test_s90_static_follower_rejoin_known_id_no_protocol_change():
    """staticMemberRejoinAsFollowerWithKnownMemberIdAndNoProtocolChange"""
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    rid = ctx.join(follower, instance_id=FOLLOWER, protos=P_PLUS)
    answered_at_once = ctx.answer(rid)
    ctx.sleep(1)
    assert answered_at_once is not None
    assert LEADER in ctx.group().static_members
    check_join(ctx, answered_at_once, 1, set(), ST, leader=leader, member=follower)


def test_s91_static_rejoin_with_mismatched_member_id():
    """staticMemberRejoinAsFollowerWithMismatchedMemberId, ...AsLeaderWithMismatchedMemberId"""
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    as_leader = sjoin(ctx, LEADER, member_id=follower, protos=P_PLUS, advance=1)
    assert as_leader["error"] == "FENCED_INSTANCE_ID"
    as_follower = sjoin(ctx, FOLLOWER, member_id=leader, protos=P_PLUS, advance=1)
    assert as_follower["error"] == "FENCED_INSTANCE_ID"
    assert state(ctx) == "Stable"


def test_s92_static_sync_as_leader_with_invalid_member_id():
    """staticMemberSyncAsLeaderWithInvalidMemberId"""
    ctx = Ctx()
    ctx.static_pair()
    assert got(ctx, ctx.sync("invalid", 1, instance_id=LEADER))["error"] == "FENCED_INSTANCE_ID"


def test_s93_static_heartbeat_leader_with_invalid_member_id():
    """staticMemberHeartbeatLeaderWithInvalidMemberId"""
    ctx = Ctx()
    leader, _ = ctx.static_pair()
    assert got(ctx, ctx.sync(leader, 1))["error"] is None
    assert got(ctx, ctx.heartbeat(leader, 1))["error"] is None
    invalid = got(ctx, ctx.heartbeat("invalidMember", 1, instance_id=LEADER))
    assert invalid["error"] == "FENCED_INSTANCE_ID"


def test_s94_different_static_member_id_after_each_rejoin():
    """shouldGetDifferentStaticMemberIdAfterEachRejoin"""
    ctx = Ctx()
    last, _ = ctx.static_pair()
    seen = {last}
    for _ in range(5):
        joined = sjoin(ctx, LEADER, protos=P, advance=1)
        assert joined["error"] is None
        assert joined["member_id"].startswith(LEADER)
        assert joined["member_id"] != last
        assert joined["member_id"] not in seen
        last = joined["member_id"]
        seen.add(last)
    assert ctx.group().static_members[LEADER] == last
    assert state(ctx) == "Stable"


def test_s95_static_commit_offset_with_invalid_member_id():
    """staticMemberCommitOffsetWithInvalidMemberId"""
    ctx = Ctx()
    leader, _ = ctx.static_pair()
    assert got(ctx, ctx.sync(leader, 1))["error"] is None
    valid = ctx.commit({("topic", 0): 0}, member_id=leader, generation=1)
    assert commit_errors(ctx, valid) == [None]
    invalid = ctx.commit(
        {("topic", 0): 0}, member_id="invalidMember", generation=1, instance_id=LEADER
    )
    assert commit_errors(ctx, invalid) == ["FENCED_INSTANCE_ID"]


def test_s96_static_join_with_unknown_instance_id_and_known_member_id():
    """staticMemberJoinWithUnknownInstanceIdAndKnownMemberId"""
    ctx = Ctx()
    leader, _ = ctx.static_pair()
    joined = sjoin(ctx, "unknown_instance", member_id=leader, protos=P_PLUS, advance=1)
    assert joined["error"] == "UNKNOWN_MEMBER_ID"


def _static_rejoin_into_forced_empty_group(ctx: Ctx) -> list[dict[str, Any]]:
    """Scenario 97's setup and request, sent with ``ctx.c.handle`` (the harness would reject
    the internal error it is expected to cause)."""
    ctx.static_pair()
    ctx.group().state = GroupState.EMPTY  # Kafka: PreparingRebalance, then Empty; mapping kept
    request = {
        "api": "join_group",
        "request_id": "illegal",
        "group_id": GROUP_ID,
        "member_id": "",
        "group_instance_id": FOLLOWER,
        "client_id": "consumer",
        "client_host": "/127.0.0.1",
        "session_timeout_ms": SESSION,
        "rebalance_timeout_ms": REBALANCE,
        "protocol_type": "consumer",
        "protocols": [{"name": n, "metadata": m} for n, m in P_PLUS],
    }
    return ctx.c.handle(request, ctx.now)


def test_s97_static_rejoin_in_illegal_empty_state_is_an_internal_error():
    """staticMemberReJoinWithIllegalStateAsUnknownMember"""
    ctx = Ctx()
    out = _static_rejoin_into_forced_empty_group(ctx)
    assert [(r["request_id"], r["error"]) for r in out] == [("illegal", "UNKNOWN_SERVER_ERROR")]
    assert len(ctx.c.internal_errors) == 1
    assert GROUP_ID in ctx.c.internal_errors[0]


def test_s97_internal_error_names_group_and_instance():
    """staticMemberReJoinWithIllegalStateAsUnknownMember (exception message)"""
    ctx = Ctx()
    _static_rejoin_into_forced_empty_group(ctx)
    [message] = ctx.c.internal_errors
    assert GROUP_ID in message
    assert FOLLOWER in message


def _group_stuck_in_rebalance(ctx: Ctx) -> tuple[str, str, dict[str, Any]]:
    """groupStuckInRebalanceTimeoutDueToNonjoinedStaticMember (scenario 98)."""
    long_session = 2 * SESSION
    leader, follower = ctx.static_pair(session=long_session)
    dynamic_join = ctx.join("", protos=P_PLUS, session=long_session, version=NEW_V)
    ctx.sleep(REBALANCE + 1)
    dynamic = got(ctx, dynamic_join)
    assert dynamic["error"] is None
    assert dynamic["leader"] == dynamic["member_id"]
    assert len(dynamic["members"]) == 3
    assert dynamic["generation_id"] == 2
    assert state(ctx) == "CompletingRebalance"
    group = ctx.group()
    assert members_of(ctx) == {leader, follower, dynamic["member_id"]}
    assert set(group.static_members.values()) == {leader, follower}

    left = got(ctx, ctx.leave([(follower, None)]))
    assert left["error"] is None
    assert [m["error"] for m in left["members"]] == [None]
    assert state(ctx) == "PreparingRebalance"

    ctx.sleep(REBALANCE + 1)
    # Only the static leader is kept and the group is stuck in PreparingRebalance.
    assert members_of(ctx) == {leader}
    assert ctx.group().generation_id == 2
    assert state(ctx) == "PreparingRebalance"
    return leader, follower, dynamic


def test_s98_group_stuck_in_rebalance_due_to_nonjoined_static_member():
    """groupStuckInRebalanceTimeoutDueToNonjoinedStaticMember"""
    ctx = Ctx()
    _leader, _follower, dynamic = _group_stuck_in_rebalance(ctx)
    assert dynamic["member_id"] not in ctx.group().members


def test_s99_leader_fails_to_rejoin_before_final_rebalance_timeout():
    """testLeaderFailToRejoinBeforeFinalRebalanceTimeoutWithLongSessionTimeout"""
    ctx = Ctx()
    _group_stuck_in_rebalance(ctx)
    ctx.sleep(REBALANCE + 1)
    group = ctx.group()
    assert group.members == {}
    assert group.leader_id is None
    assert group.generation_id == 3
    assert state(ctx) == "Empty"


def test_s100_leader_rejoins_before_final_rebalance_timeout():
    """testLeaderRejoinBeforeFinalRebalanceTimeoutWithLongSessionTimeout"""
    ctx = Ctx()
    _group_stuck_in_rebalance(ctx)
    rejoined = sjoin(ctx, LEADER, protos=P)
    check_join(ctx, rejoined, 3, {LEADER}, CR)
    assert members_of(ctx) == {rejoined["member_id"]}
    assert ctx.group().leader_id is not None
    assert ctx.group().generation_id == 3


def test_s101_static_follower_fails_to_rejoin_before_rebalance_timeout():
    """testStaticMemberFollowerFailToRejoinBeforeRebalanceTimeout"""
    ctx = Ctx()
    leader, _follower = ctx.static_pair(session=REBALANCE * 2)
    new_member = ctx.join("", instance_id="newMember", protos=P_PLUS)
    assert state(ctx) == "PreparingRebalance"
    rejoined = sjoin(ctx, LEADER, member_id=leader, protos=P_PLUS, advance=REBALANCE + 1)
    check_join(ctx, rejoined, 2, {LEADER, FOLLOWER, "newMember"}, CR, leader=leader, member=leader)
    joined = got(ctx, new_member)
    check_join(ctx, joined, 2, set(), CR, leader=leader)


def test_s102_static_leader_fails_to_rejoin_before_rebalance_timeout():
    """testStaticMemberLeaderFailToRejoinBeforeRebalanceTimeout"""
    ctx = Ctx()
    leader, follower = ctx.static_pair(session=REBALANCE * 2)
    new_member = ctx.join("", instance_id="newMember", protos=P_PLUS)
    ctx.sleep(1)
    assert state(ctx) == "PreparingRebalance"
    old_follower = sjoin(ctx, FOLLOWER, member_id=follower, protos=P_PLUS, advance=REBALANCE + 1)
    new_joined = got(ctx, new_member)
    if old_follower["leader"] == old_follower["member_id"]:
        new_leader, new_follower = old_follower, new_joined
    else:
        new_leader, new_follower = new_joined, old_follower
    assert new_leader["member_id"] != leader
    check_join(
        ctx, new_leader, 2, {LEADER, FOLLOWER, "newMember"}, CR, leader=new_leader["member_id"]
    )
    check_join(ctx, new_follower, 2, set(), CR, leader=new_leader["member_id"])
    assert leader in ctx.group().members  # not rejoined, but static: kept


# --- 14.4 Timers --------------------------------------------------------------------------------


def test_s103_initial_rebalance_delayed_on_empty_group():
    """shouldDelayInitialRebalanceByGroupInitialRebalanceDelayOnEmptyGroup"""
    ctx = Ctx()
    rid = ctx.join("", version=NEW_V)
    ctx.sleep(DELAY // 2)
    parked(ctx, rid)
    ctx.sleep(DELAY // 2 + 1)
    assert got(ctx, rid)["error"] is None


def test_s104_rebalance_delay_reset_when_new_member_joins_initial_rebalance():
    """shouldResetRebalanceDelayWhenNewMemberJoinsGroupInInitialRebalance"""
    ctx = Ctx()
    rebalance = DELAY * 3
    first = ctx.join("", rebalance=rebalance, version=NEW_V)
    ctx.sleep(DELAY - 1)
    second = ctx.join("", rebalance=rebalance, version=NEW_V)
    ctx.sleep(2)
    ctx.sleep(DELAY // 2 + 1)
    parked(ctx, first)
    parked(ctx, second)
    ctx.sleep(DELAY // 2)
    assert got(ctx, first)["error"] is None
    assert got(ctx, second)["error"] is None
    assert got(ctx, first)["generation_id"] == 1


def test_s105_initial_rebalance_delayed_up_to_rebalance_timeout():
    """shouldDelayRebalanceUptoRebalanceTimeout"""
    ctx = Ctx()
    rebalance = DELAY * 2
    first = ctx.join("", rebalance=rebalance, version=NEW_V)
    second = ctx.join("", rebalance=rebalance, version=NEW_V)
    ctx.sleep(DELAY + 1)
    third = ctx.join("", rebalance=rebalance, version=NEW_V)
    ctx.sleep(DELAY - 1)  # clock 100
    for rid in (first, second, third):
        parked(ctx, rid)
    ctx.sleep(1)  # clock 101: the remaining time is used up
    for rid in (first, second, third):
        assert got(ctx, rid)["error"] is None
        assert got(ctx, rid)["generation_id"] == 1
    assert len(ctx.group().members) == 3


def test_s106_new_member_timeout_completion():
    """testNewMemberTimeoutCompletion"""
    # Kafka's test starts the coordinator with enableMetadataExpiration = false: no sweep.
    ctx = Ctx(dataclasses.replace(STANDARD, offsets_retention_check_interval_ms=10**12))
    session = 300_000 + 5_000
    rid = ctx.join("", session=session, version=NEW_V)
    ctx.sleep(DELAY + 1)
    joined = got(ctx, rid)
    assert joined["error"] is None
    group = ctx.group()
    assert sum(m.is_new for m in group.members.values()) == 0
    member = joined["member_id"]
    synced = got(ctx, ctx.sync(member, joined["generation_id"], {member: b""}))
    assert synced["error"] is None
    assert len(ctx.group().members) == 1

    ctx.sleep(300_000 + 100)
    assert len(ctx.group().members) == 1  # the new-member timeout no longer applies

    ctx.sleep(session + 100)
    assert len(ctx.group().members) == 0


def test_s107_new_member_join_expiration():
    """testNewMemberJoinExpiration"""
    ctx = Ctx()
    session = 300_000 + 5_000
    rebalance = 2 * 300_000
    first = dynamic_joined(ctx, session=session, rebalance=rebalance)
    first_id = first["member_id"]
    assert first["leader"] == first_id
    assert sum(m.is_new for m in ctx.group().members.values()) == 0

    rid = ctx.join("", session=session, rebalance=rebalance, version=NEW_V)
    parked(ctx, rid)
    group = ctx.group()
    assert len(group.members) == 2
    new_members = [m for m in group.members.values() if m.is_new]
    assert len(new_members) == 1 and new_members[0].member_id != first_id

    ctx.sleep(300_000 + 1)
    assert got(ctx, rid)["error"] == "UNKNOWN_MEMBER_ID"
    group = ctx.group()
    assert list(group.members) == [first_id]
    assert sum(m.is_new for m in group.members.values()) == 0


def _stable_then_second_member_joined(ctx: Ctx) -> tuple[dict[str, Any], dict[str, Any]]:
    first, gen = single_dynamic(ctx)
    assert gen == 1
    other = ctx.join("", version=NEW_V)
    rejoin = ctx.join(first, version=NEW_V)
    first_joined, other_joined = got(ctx, rejoin), got(ctx, other)
    assert first_joined["error"] is None and other_joined["error"] is None
    assert first_joined["generation_id"] == other_joined["generation_id"] == 2
    return first_joined, other_joined


def _session_expiration(ctx: Ctx) -> None:
    """Kafka's ``verifySessionExpiration``."""
    ctx.sleep(SESSION + 1)
    assert state(ctx) == "Empty"
    assert ctx.group().members == {}


def test_s108_new_member_failure_after_join_group_completion():
    """testNewMemberFailureAfterJoinGroupCompletion"""
    ctx = Ctx()
    _stable_then_second_member_joined(ctx)
    _session_expiration(ctx)


def test_s109_new_member_failure_after_sync_group_completion():
    """testNewMemberFailureAfterSyncGroupCompletion"""
    ctx = Ctx()
    first, other = _stable_then_second_member_joined(ctx)
    follower_sync = ctx.sync(other["member_id"], 2)
    leader_sync = ctx.sync(
        first["member_id"], 2, {first["member_id"]: b"", other["member_id"]: b""}
    )
    assert got(ctx, leader_sync)["error"] is None
    assert got(ctx, follower_sync)["error"] is None
    assert state(ctx) == "Stable"
    _session_expiration(ctx)


def test_s110_session_timeout():
    """testSessionTimeout"""
    ctx = Ctx()
    member, gen = single_dynamic(ctx)
    ctx.sleep(SESSION + 100)
    assert got(ctx, ctx.heartbeat(member, gen))["error"] == "UNKNOWN_MEMBER_ID"


def test_s111_heartbeat_maintains_session():
    """testHeartbeatMaintainsSession"""
    ctx = Ctx()
    member, gen = single_dynamic(ctx, session=1000, rebalance=1000)
    ctx.sleep(500)
    assert got(ctx, ctx.heartbeat(member, gen))["error"] is None
    ctx.sleep(500 + 100)
    assert got(ctx, ctx.heartbeat(member, gen))["error"] is None


def test_s112_commit_maintains_session():
    """testCommitMaintainsSession"""
    ctx = Ctx()
    member, gen = single_dynamic(ctx, session=1000, rebalance=1000)
    ctx.sleep(500)
    commit = ctx.commit({("topic", 0): 0}, member_id=member, generation=gen)
    assert commit_errors(ctx, commit) == [None]
    ctx.sleep(500 + 100)
    assert got(ctx, ctx.heartbeat(member, gen))["error"] is None


def test_s113_session_timeout_during_rebalance():
    """testSessionTimeoutDuringRebalance"""
    ctx = Ctx()
    first, gen = single_dynamic(ctx, session=1000, rebalance=2000)
    other = ctx.join("", version=NEW_V)
    ctx.sleep(500)
    assert got(ctx, ctx.heartbeat(first, gen))["error"] == "REBALANCE_IN_PROGRESS"
    ctx.sleep(1100)
    assert got(ctx, ctx.heartbeat(first, gen))["error"] == "UNKNOWN_MEMBER_ID"
    other_joined = got(ctx, other)
    assert other_joined["error"] is None
    assert list(ctx.group().members) == [other_joined["member_id"]]


def test_s114_rebalance_completes_before_member_joins():
    """testRebalanceCompletesBeforeMemberJoins (4.x timings)"""
    ctx = Ctx()
    joined = sjoin(ctx, LEADER, session=5000, rebalance=10_000)
    first, first_gen = joined["member_id"], joined["generation_id"]
    assert joined["error"] is None and joined["leader"] == first and first_gen == 1
    assert got(ctx, ctx.sync(first, first_gen, {first: b""}))["error"] is None
    assert state(ctx) == "Stable"

    # A new dynamic member: rebalance. The join timer's deadline is t0 + 10000.
    other = ctx.join("", session=2500, rebalance=10_000, version=NEW_V)
    parked(ctx, other)
    assert state(ctx) == "PreparingRebalance"
    for _ in range(2):
        ctx.sleep(2500)
        assert got(ctx, ctx.heartbeat(first, first_gen))["error"] == "REBALANCE_IN_PROGRESS"

    # The join timer (armed before the last heartbeat, same deadline) fires first.
    ctx.sleep(8000)
    other_joined = got(ctx, other)
    assert other_joined["error"] is None
    group = ctx.group()
    assert len(group.members) == 2
    assert group.generation_id == 2
    assert state(ctx) == "CompletingRebalance"
    other_id = other_joined["member_id"]
    assert other_joined["leader"] == other_id

    assert got(ctx, ctx.sync(other_id, 2, {other_id: b""}))["error"] is None
    assert state(ctx) == "Stable"
    # The static member that did not rejoin is still there, at the old generation.
    assert got(ctx, ctx.heartbeat(first, first_gen))["error"] == "ILLEGAL_GENERATION"

    for expected in (None, None, "REBALANCE_IN_PROGRESS"):
        ctx.sleep(2000)
        assert got(ctx, ctx.heartbeat(other_id, 2))["error"] == expected
    assert list(ctx.group().members) == [other_id]
    assert state(ctx) == "PreparingRebalance"

    rejoin = ctx.join(other_id, session=2500, rebalance=10_000, version=NEW_V)
    rejoined = got(ctx, rejoin)
    assert rejoined["error"] is None
    assert rejoined["generation_id"] == 3
    assert state(ctx) == "CompletingRebalance"
    assert got(ctx, ctx.sync(other_id, 3, {other_id: b""}))["error"] is None
    assert state(ctx) == "Stable"
    for _ in range(20):
        ctx.sleep(2000)
        assert got(ctx, ctx.heartbeat(other_id, 3))["error"] is None


def _three_joined_then_heartbeat(ctx: Ctx) -> list[dict[str, Any]]:
    results = join_n_members(ctx, 3)
    ctx.sleep(REBALANCE // 2)
    for joined in results:
        assert heartbeat_of(ctx, joined) is None
    return results


def test_s115_rebalance_times_out_when_sync_not_received():
    """testRebalanceTimesOutWhenSyncRequestIsNotReceived"""
    ctx = Ctx()
    results = _three_joined_then_heartbeat(ctx)
    ctx.sleep(REBALANCE // 2 + 1)
    for joined in results:
        assert heartbeat_of(ctx, joined) == "UNKNOWN_MEMBER_ID"
    assert ctx.group().members == {}


def test_s116_rebalance_times_out_when_sync_not_received_from_followers():
    """testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromFollowers"""
    ctx = Ctx()
    results = _three_joined_then_heartbeat(ctx)
    leader = results[0]
    assert leader["leader"] == leader["member_id"]
    assignments = {r["member_id"]: b"" for r in results}
    assert got(ctx, ctx.sync(leader["member_id"], 1, assignments))["error"] is None
    assert heartbeat_of(ctx, leader) is None
    ctx.sleep(REBALANCE // 2 + 1)
    assert heartbeat_of(ctx, leader) == "REBALANCE_IN_PROGRESS"
    for follower in results[1:]:
        assert heartbeat_of(ctx, follower) == "UNKNOWN_MEMBER_ID"
    assert state(ctx) == "PreparingRebalance"


def test_s117_rebalance_times_out_when_sync_not_received_from_leader():
    """testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromLeaders"""
    ctx = Ctx()
    results = _three_joined_then_heartbeat(ctx)
    leader, followers = results[0], results[1:]
    assert leader["leader"] == leader["member_id"]
    syncs = [ctx.sync(f["member_id"], f["generation_id"]) for f in followers]
    for rid in syncs:
        parked(ctx, rid)
    ctx.sleep(REBALANCE // 2 + 1)
    assert [got(ctx, rid)["error"] for rid in syncs] == ["REBALANCE_IN_PROGRESS"] * 2
    assert heartbeat_of(ctx, leader) == "UNKNOWN_MEMBER_ID"
    for follower in followers:
        assert heartbeat_of(ctx, follower) == "REBALANCE_IN_PROGRESS"


def test_s118_rebalance_does_not_time_out_when_all_syncs_received():
    """testRebalanceDoesNotTimeOutWhenAllSyncAreReceived"""
    ctx = Ctx()
    results = _three_joined_then_heartbeat(ctx)
    leader, followers = results[0], results[1:]
    assignments = {r["member_id"]: b"" for r in results}
    assert got(ctx, ctx.sync(leader["member_id"], 1, assignments))["error"] is None
    syncs = [ctx.sync(f["member_id"], f["generation_id"]) for f in followers]
    assert [got(ctx, rid)["error"] for rid in syncs] == [None, None]
    ctx.sleep(REBALANCE // 2 + 1)
    for joined in results:
        assert heartbeat_of(ctx, joined) is None
    ctx.sleep(REBALANCE // 2)
    for joined in results:
        assert heartbeat_of(ctx, joined) is None
    assert state(ctx) == "Stable"
    assert len(ctx.group().members) == 3


def test_s119_heartbeat_expiry_with_group_dead_is_a_no_op():
    """testCompleteHeartbeatWithGroupDead"""
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    assert got(ctx, ctx.heartbeat(leader, 1))["error"] is None
    ctx.group().state = GroupState.DEAD
    records_before = len(ctx.records)
    fired = ctx.sleep(SESSION + 1)  # past both members' session deadlines
    assert fired == []
    assert leader in ctx.group().members and follower in ctx.group().members
    assert ctx.group().state is GroupState.DEAD
    assert ctx.records[records_before:] == []


def test_s120_heartbeat_expiry_of_removed_member_is_a_no_op():
    """testCompleteHeartbeatWithMemberAlreadyRemoved"""
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    assert got(ctx, ctx.heartbeat(leader, 1))["error"] is None  # leader's deadline: now + 500
    ctx.sleep(250)
    assert got(ctx, ctx.heartbeat(follower, 1))["error"] is None  # keeps the follower alive
    ctx.group().remove(leader)
    records_before = len(ctx.records)
    fired = ctx.sleep(250 + 1)  # the removed leader's heartbeat timer is due
    assert fired == []
    assert members_of(ctx) == {follower}
    assert state(ctx) == "Stable"
    assert ctx.records[records_before:] == []


# --- 14.10 Describe and List --------------------------------------------------------------------


def test_s185_describe_group_wrong_coordinator():
    """testDescribeGroupWrongCoordinator"""
    ctx = Ctx()
    assert ctx.describe(OTHER_GROUP_ID)["error"] == "NOT_COORDINATOR"


def test_s186_describe_group_inactive_group():
    """testDescribeGroupInactiveGroup"""
    ctx = Ctx()
    described = ctx.describe()
    assert described["error"] is None
    assert described["group_state"] == "Dead"
    assert described["protocol_type"] == ""
    assert described["protocol_data"] == ""
    assert described["members"] == []


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_s187_describe_group_stable(static: bool):
    """testDescribeGroupStableForDynamicMember, testDescribeGroupStableForStaticMember"""
    ctx = Ctx()
    metadata = b"subscription"
    if static:
        joined = sjoin(ctx, LEADER, protos=[("range", metadata)])
        member = joined["member_id"]
        assert joined["error"] is None
        synced = ctx.sync(member, joined["generation_id"], {member: b"assignment"})
        assert got(ctx, synced)["error"] is None
    else:
        member, _gen = single_dynamic(ctx, protos=[("range", metadata)])
    described = ctx.describe()
    assert described["error"] is None
    assert described["group_state"] == "Stable"
    assert described["protocol_type"] == "consumer"
    assert described["protocol_data"] == "range"
    assert described["members"] == [
        {
            "member_id": member,
            "group_instance_id": LEADER if static else None,
            "client_id": "consumer",
            "client_host": "/127.0.0.1",
            "member_metadata": metadata,
            "member_assignment": b"assignment",
        }
    ]


def test_s188_describe_group_rebalancing():
    """testDescribeGroupRebalancing (3.x; and the 4.x port: assignment kept while rebalancing)"""
    ctx = Ctx()
    joined = dynamic_joined(ctx)
    described = ctx.describe()
    assert described["error"] is None
    assert described["protocol_type"] == "consumer"
    assert described["protocol_data"] == ""
    assert described["group_state"] == "CompletingRebalance"
    assert joined["member_id"] in [m["member_id"] for m in described["members"]]
    assert all(m["member_metadata"] == b"" for m in described["members"])
    assert all(m["member_assignment"] == b"" for m in described["members"])

    # 4.x: a member's current assignment is described in PreparingRebalance (3.x: empty).
    member = joined["member_id"]
    assert got(ctx, ctx.sync(member, joined["generation_id"], {member: b"a"}))["error"] is None
    ctx.join("", version=NEW_V)
    assert state(ctx) == "PreparingRebalance"
    described = ctx.describe()
    assert described["group_state"] == "PreparingRebalance"
    assert described["protocol_type"] == "consumer"
    assert described["protocol_data"] == ""
    first = described["members"][0]
    assert first["member_id"] == member
    assert first["member_metadata"] == b""
    assert first["member_assignment"] == b"a"


def _overview(state_name: str) -> dict[str, str]:
    return {
        "group_id": GROUP_ID,
        "protocol_type": "consumer",
        "group_state": state_name,
        "group_type": "classic",
    }


def _listed(ctx: Ctx, **kw: Any) -> list[dict[str, Any]]:
    listed = ctx.list_groups(**kw)
    assert listed["error"] is None
    return listed["groups"]


def test_s189_list_groups_includes_stable_groups():
    """testListGroupsIncludesStableGroups"""
    ctx = Ctx()
    single_dynamic(ctx)
    assert _listed(ctx) == [_overview("Stable")]


def test_s190_list_groups_includes_rebalancing_groups():
    """testListGroupsIncludesRebalancingGroups"""
    ctx = Ctx()
    dynamic_joined(ctx)
    assert _listed(ctx) == [_overview("CompletingRebalance")]


def test_s191_list_groups_with_states():
    """testListGroupsWithStates"""
    ctx = Ctx()
    joined = dynamic_joined(ctx)
    member, gen = joined["member_id"], joined["generation_id"]

    def check(current: str) -> None:
        assert len(_listed(ctx, states=[current])) == 1
        assert _listed(ctx, states=[s for s in ALL_STATES if s != current]) == []

    check("CompletingRebalance")
    assert got(ctx, ctx.sync(member, gen, {member: b""}))["error"] is None
    check("Stable")
    left = got(ctx, ctx.leave([(member, None)]))
    assert left["error"] is None and [m["error"] for m in left["members"]] == [None]
    check("Empty")


def test_s192_list_groups_with_types():
    """testListGroupsWithTypes"""
    ctx = Ctx()
    single_dynamic(ctx)
    assert _listed(ctx, types=["classic"]) == [_overview("Stable")]
    assert _listed(ctx, types=["consumer"]) == []
    assert _listed(ctx, types=["Invalid"]) == []
    assert _listed(ctx) == [_overview("Stable")]
    assert _listed(ctx, types=["Classic"]) == [_overview("Stable")]
