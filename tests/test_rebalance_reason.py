"""Why a group rebalances: every path into ``prepare_rebalance`` leaves Kafka's reason text on the
group (``ClassicGroup.rebalance_reason``), which outlives the rebalance, is not in the log, and
travels in the snapshot blob.

The texts are Kafka 4.x's (``GroupMetadataManager``), except LeaveGroup's, which is Kafka 3.x's
(``GroupCoordinator.removeCurrentMemberFromGroup``: it keeps the client's reason). Driven through
the ``GroupCoordinator`` facade with the standard fixture (tests.support).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinator import GroupCoordinator, SequentialIds
from coordinator.group.snapshot import decode_group, encode_group
from coordinator.group.states import GroupState
from coordinator.log import records as log
from coordinator.stream.operator import group_summary
from tests.support import GROUP_ID, P_PLUS, REBALANCE, SESSION, STANDARD, Ctx, P, error

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DELAY = STANDARD.group_initial_rebalance_delay_ms + 1


def join(
    ctx: Ctx,
    member_id: str = "",
    *,
    reason: str | None = None,
    instance_id: str | None = None,
    protos: list[tuple[str, bytes]] | None = None,
    session: int = SESSION,
) -> str:
    """JoinGroup v9 (the newest, with KIP-800's ``reason``), as ``Ctx.join`` sends it."""
    rid = ctx.rid()
    ctx.send(
        {
            "api": "join_group",
            "request_id": rid,
            "group_id": GROUP_ID,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "client_id": "consumer",
            "client_host": "/127.0.0.1",
            "session_timeout_ms": session,
            "rebalance_timeout_ms": REBALANCE,
            "protocol_type": "consumer",
            "protocols": [{"name": n, "metadata": m} for n, m in (P if protos is None else protos)],
            "reason": reason,
        }
    )
    return rid


def leave(ctx: Ctx, *members: tuple[str, str | None, str | None]) -> str:
    """LeaveGroup v5 with (member id, group instance id, reason) identities."""
    rid = ctx.rid()
    ctx.send(
        {
            "api": "leave_group",
            "request_id": rid,
            "group_id": GROUP_ID,
            "members": [
                {"member_id": m, "group_instance_id": i, "reason": r} for m, i, r in members
            ],
        }
    )
    return rid


def reason(ctx: Ctx) -> str | None:
    return ctx.group().rebalance_reason


def member_of(ctx: Ctx, rid: str) -> str:
    answer = ctx.answer(rid)
    assert answer is not None
    member_id: str = answer["member_id"]
    return member_id


def stable_single(ctx: Ctx) -> str:
    """One dynamic member joined (KIP-394's two steps) and synced: Stable, generation 1."""
    member = member_of(ctx, join(ctx))
    join(ctx, member)
    ctx.sleep(DELAY)
    assert error(ctx.answer(ctx.sync(member, 1, {member: b"a"}))) is None
    assert ctx.group().state is STABLE
    return member


def assert_log_has_no_reason(ctx: Ctx) -> None:
    """A group rebuilt from the log has no reason (nothing in the log carries it) but is
    otherwise what the live group is at rest."""
    rebuilt = ctx.rebuilt().group(GROUP_ID)
    live = ctx.group()
    assert rebuilt is not None and rebuilt.rebalance_reason is None
    assert log.durable_view(rebuilt) == log.durable_view(live)


# --- JoinGroup ----------------------------------------------------------------------------------


def test_a_group_that_never_rebalanced_has_no_reason() -> None:
    ctx = Ctx()
    first = join(ctx)
    assert error(ctx.answer(first)) == "MEMBER_ID_REQUIRED"
    assert ctx.group().state is EMPTY and reason(ctx) is None
    assert group_summary(GROUP_ID, ctx.group(), 0)["rebalance_reason"] is None


def test_the_first_member_of_an_empty_group() -> None:
    ctx = Ctx()
    member = member_of(ctx, join(ctx))
    join(ctx, member, reason="rebalance failed due to MemberIdRequiredException")
    assert ctx.group().state is PREPARING
    assert reason(ctx) == (
        f"Adding new member {member} with group instance id null; "
        "client reason: rebalance failed due to MemberIdRequiredException"
    )


def test_without_a_client_reason_kafka_says_not_provided() -> None:
    for given in (None, ""):  # JoinGroupRequest.joinReason: null or empty
        ctx = Ctx()
        member = member_of(ctx, join(ctx))
        join(ctx, member, reason=given)
        assert reason(ctx) == (
            f"Adding new member {member} with group instance id null; client reason: not provided"
        )


def test_a_static_member_names_its_instance_id() -> None:
    ctx = Ctx()
    join(ctx, instance_id="i-1")  # parked: a static member gets its id with the generation
    member = ctx.group().static_members["i-1"]
    assert reason(ctx) == (
        f"Adding new member {member} with group instance id i-1; client reason: not provided"
    )


def test_the_reason_outlives_the_rebalance_and_later_joins_in_it() -> None:
    ctx = Ctx()
    first = member_of(ctx, join(ctx))
    join(ctx, first, reason="first")
    started = reason(ctx)
    second = member_of(ctx, join(ctx))
    join(ctx, second, reason="second")  # joins the rebalance in flight: no new one
    assert reason(ctx) == started
    ctx.sleep(DELAY)
    ctx.sleep(DELAY)  # a member that arrives during the initial delay extends it once
    assert ctx.group().state is COMPLETING
    ctx.sync(first, 1, {first: b"a", second: b"b"})
    ctx.sync(second, 1)
    assert ctx.group().state is STABLE
    assert reason(ctx) == started
    assert started is not None and first in started and "client reason: first" in started
    assert group_summary(GROUP_ID, ctx.group(), 0)["rebalance_reason"] == started
    assert_log_has_no_reason(ctx)


def test_a_new_member_joins_a_stable_group() -> None:
    ctx = Ctx()
    stable_single(ctx)
    newcomer = member_of(ctx, join(ctx))
    assert ctx.group().state is STABLE  # a pending id alone changes nothing
    join(ctx, newcomer, reason="need to rejoin")
    assert ctx.group().state is PREPARING
    assert reason(ctx) == (
        f"Adding new member {newcomer} with group instance id null; client reason: need to rejoin"
    )


def test_the_leader_rejoins_a_stable_group() -> None:
    ctx = Ctx()
    leader, _ = ctx.static_pair()
    join(ctx, leader, instance_id="leader", protos=P_PLUS, reason="cached metadata has changed")
    assert ctx.group().state is PREPARING
    assert reason(ctx) == (
        f"Leader {leader} re-joining group during Stable; "
        "client reason: cached metadata has changed"
    )


def test_a_follower_changes_its_metadata_in_a_stable_group() -> None:
    ctx = Ctx()
    _, follower = ctx.static_pair()
    join(ctx, follower, instance_id="follower", protos=[("range", b"new")])
    assert ctx.group().state is PREPARING
    assert reason(ctx) == (
        f"Updating metadata for member {follower} during Stable; client reason: not provided"
    )


def test_a_follower_changes_its_metadata_while_completing() -> None:
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    join(ctx, leader, instance_id="leader", protos=P_PLUS)
    join(ctx, follower, instance_id="follower", protos=P_PLUS)
    assert ctx.group().state is COMPLETING
    join(ctx, follower, instance_id="follower", protos=[("range", b"new")], reason="subscription")
    assert ctx.group().state is PREPARING
    assert reason(ctx) == (
        f"Updating metadata for member {follower} during CompletingRebalance; "
        "client reason: subscription"
    )


def test_a_follower_rejoining_unchanged_in_a_stable_group_keeps_the_old_reason() -> None:
    ctx = Ctx()
    _, follower = ctx.static_pair()
    before = reason(ctx)
    join(ctx, follower, instance_id="follower", protos=P_PLUS, reason="ignored")
    assert ctx.group().state is STABLE and reason(ctx) == before


# --- static members -----------------------------------------------------------------------------


def test_a_static_member_replaced_with_a_change_of_protocol() -> None:
    ctx = Ctx()
    ctx.static_pair()
    rid = join(ctx, instance_id="follower", protos=[("roundrobin", b"")], reason="restarted")
    assert ctx.group().state is PREPARING
    replacement = ctx.group().static_members["follower"]
    assert reason(ctx) == (
        f"Group's selectedProtocol will change because static member {replacement} with "
        "instance id follower joined with change of protocol; client reason: restarted"
    )
    assert ctx.answer(rid) is None  # parked for the rebalance


def test_a_static_member_replaced_without_a_change_keeps_the_group_and_its_reason() -> None:
    ctx = Ctx()
    ctx.static_pair()
    before = reason(ctx)
    rid = join(ctx, instance_id="follower", protos=P_PLUS, reason="restarted")
    assert error(ctx.answer(rid)) is None
    assert ctx.group().state is STABLE and reason(ctx) == before


def test_a_static_member_replaced_while_completing() -> None:
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    join(ctx, leader, instance_id="leader", protos=P_PLUS)
    join(ctx, follower, instance_id="follower", protos=P_PLUS)
    assert ctx.group().state is COMPLETING
    join(ctx, instance_id="follower", protos=P_PLUS)
    assert ctx.group().state is PREPARING
    replacement = ctx.group().static_members["follower"]
    assert replacement != follower
    assert reason(ctx) == (
        f"Updating metadata for static member {replacement} with instance id follower; "
        "client reason: not provided"
    )


# --- LeaveGroup ---------------------------------------------------------------------------------


def test_a_member_leaves_with_a_client_reason() -> None:
    ctx = Ctx()
    _, follower = ctx.static_pair()
    leave(ctx, (follower, "follower", "the consumer is being closed"))
    assert ctx.group().state is PREPARING
    assert reason(ctx) == (
        f"Removing member {follower} on LeaveGroup; client reason: the consumer is being closed"
    )


def test_a_member_leaves_without_a_client_reason() -> None:
    ctx = Ctx()
    _, follower = ctx.static_pair()
    leave(ctx, (follower, "follower", None))
    assert reason(ctx) == f"Removing member {follower} on LeaveGroup; client reason: not provided"


def test_an_old_leave_group_carries_no_reason() -> None:
    ctx = Ctx()
    member = stable_single(ctx)
    ctx.leave([(member, None)], version=2)  # v0-v2: one member, no reason field
    assert ctx.group().state is EMPTY
    assert reason(ctx) == f"Removing member {member} on LeaveGroup; client reason: not provided"


def test_several_members_leave_at_once_the_first_one_names_the_rebalance() -> None:
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    leave(ctx, ("unknown", None, "x"), ("", "follower", "going"), (leader, "leader", "too"))
    assert ctx.group().state is EMPTY  # everyone left: the rebalance completed at once
    assert reason(ctx) == f"Removing member {follower} on LeaveGroup; client reason: going"


# --- timers -------------------------------------------------------------------------------------


def test_a_session_expires() -> None:
    ctx = Ctx()
    member = stable_single(ctx)
    ctx.sleep(SESSION + 1)
    # The only member is gone: the rebalance completes at once and the group is Empty, the
    # reason still saying why.
    assert ctx.group().state is EMPTY and not ctx.group().members
    assert reason(ctx) == f"removing member {member} on heartbeat expiration."
    assert_log_has_no_reason(ctx)


def test_a_session_expires_in_a_group_that_stays() -> None:
    ctx = Ctx()
    leader, follower = ctx.static_pair()
    # The follower's session runs from the end of the join phase; the leader's from its sync.
    ctx.sleep(SESSION // 2)
    ctx.heartbeat(leader, 1, instance_id="leader")
    ctx.sleep(SESSION // 2 + 1)
    assert set(ctx.group().members) == {leader}
    assert ctx.group().state is PREPARING
    assert reason(ctx) == f"removing member {follower} on heartbeat expiration."


def test_members_that_never_sync_are_removed() -> None:
    ctx = Ctx()
    leader_rid = join(ctx, instance_id="leader", session=10 * SESSION)
    follower_rid = join(ctx, instance_id="follower", session=10 * SESSION)
    ctx.sleep(DELAY)
    ctx.sleep(REBALANCE + 1)
    assert ctx.group().state is COMPLETING
    leader, follower = member_of(ctx, leader_rid), member_of(ctx, follower_rid)
    ctx.sync(leader, 1, {leader: b"l", follower: b"f"}, instance_id="leader")
    ctx.sleep(REBALANCE + 1)  # the follower's SyncGroup never comes
    assert follower not in ctx.group().members
    assert reason(ctx) == f"Removing [{follower}] on pending sync request expiration"


# --- load ---------------------------------------------------------------------------------------


def test_a_group_loaded_over_group_max_size() -> None:
    big = Ctx(replace(STANDARD, group_max_size=10))
    rids = [big.join("", version=3, session=600_000) for _ in range(6)]
    big.sleep(DELAY)
    big.sleep(DELAY)
    members = [member_of(big, rid) for rid in rids]
    big.sync(members[0], 1, {m: b"" for m in members})
    assert big.group().state is STABLE
    loaded = GroupCoordinator.from_records(
        big.records, STANDARD, big.now, owned_partitions={0}, id_source=SequentialIds()
    )
    group = loaded.group(GROUP_ID)
    assert group is not None and group.state is PREPARING
    assert group.rebalance_reason == (
        f"Freshly-loaded group {GROUP_ID} (size 6) is over capacity 4. Rebalancing in order to "
        "give a chance for consumers to commit offsets"
    )
    # Under the limit it was written with, the same log loads at rest, with no reason.
    again = GroupCoordinator.from_records(big.records, big.config, big.now, owned_partitions={0})
    at_rest = again.group(GROUP_ID)
    assert at_rest is not None and at_rest.state is STABLE and at_rest.rebalance_reason is None


# --- the snapshot keeps it ----------------------------------------------------------------------


def test_the_reason_survives_a_snapshot_and_is_not_in_any_record() -> None:
    ctx = Ctx()
    _, follower = ctx.static_pair()
    leave(ctx, (follower, "follower", "a reason nobody logs"))
    group = ctx.group()
    assert decode_group(encode_group(group)).rebalance_reason == group.rebalance_reason
    written: list[Any] = [r.get("value") for r in ctx.records]
    assert not any(v is not None and b"a reason nobody logs" in v for v in written)
