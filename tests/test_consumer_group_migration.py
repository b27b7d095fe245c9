"""Classic-protocol members of consumer groups and online migration between the two kinds
(``group.consumer.migration.policy``), ported from Kafka 4.0's GroupMetadataManagerTest:
testConsumerGroupHeartbeatWithStableClassicGroup, ...WithPreparingRebalanceClassicGroup,
testLastConsumerProtocolMemberLeavingConsumerGroup, ...SessionTimeoutInConsumerGroup,
testJoiningConsumerGroup*, testReconciliationInJoiningConsumerGroupWithEagerProtocol,
testClassicGroupSyncToConsumerGroup*, testClassicGroupHeartbeatToConsumer*,
testConsumerGroupMemberUsingClassicProtocol* (session, join timeout, batch leave), scenario by
scenario, with this engine's assignor in place of Kafka's mock one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from coordinator.group.model import ClassicGroup
from coordinator.group.states import GroupState
from coordinator.log import modern_codec
from coordinator.log.records import durable_view
from coordinator.modern.model import ClassicMemberMetadata, ConsumerGroup, MemberState
from tests.consumer_groups import BAR, FOO, GROUP, M1, M2, Context, kinds, owned

SESSION_MS, REBALANCE_MS = 10_000, 20_000


def subscription(topics: tuple[str, ...] = ("foo", "bar"), **owned_: list[int]) -> bytes:
    ownership = tuple(TopicPartitions(t, tuple(p)) for t, p in owned_.items())
    return encode_subscription(Subscription(topics, None, ownership))


def classic_join(
    ctx: Context,
    member_id: str = "",
    *,
    metadata: bytes | None = None,
    instance_id: str | None = None,
    api_version: int = 5,
    protocols: tuple[str, ...] = ("range",),
) -> dict[str, Any]:
    data = subscription() if metadata is None else metadata
    return ctx.send(
        {
            "api": "join_group",
            "api_version": api_version,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": REBALANCE_MS,
            "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": data} for name in protocols],
        }
    )


def sync(ctx: Context, member_id: str, generation: int, **fields: Any) -> dict[str, Any]:
    request = {
        "api": "sync_group",
        "member_id": member_id,
        "generation_id": generation,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [],
        **fields,
    }
    return ctx.send(request)


def classic_heartbeat(ctx: Context, member_id: str, generation: int) -> dict[str, Any]:
    return ctx.send({"api": "heartbeat", "member_id": member_id, "generation_id": generation})


def assignment_of(answer: dict[str, Any]) -> dict[str, list[int]]:
    return {
        tp.topic: list(tp.partitions)
        for tp in decode_assignment(answer["assignment"]).assigned_partitions
    }


def stable_classic_group(ctx: Context, count: int = 1) -> list[str]:
    """A classic group (generation 1) of ``count`` members, the first owning foo 0-5 and
    bar 0-2."""
    out: list[dict[str, Any]] = []
    for n in range(count):
        request = {
            "api": "join_group",
            "request_id": f"first-join-{n}",
            "group_id": GROUP,
            "api_version": 3,
            "member_id": "",
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": REBALANCE_MS,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription()}],
        }
        out += ctx.c.handle(request, ctx.now)
    out += ctx.sleep(0)
    for _ in range(10):  # the initial rebalance delay, if any
        if len([r for r in out if r["api"] == "join_group"]) == count:
            break
        out += ctx.sleep(100)
    joined = {r["request_id"]: r for r in out}
    members = [joined[f"first-join-{n}"]["member_id"] for n in range(count)]
    leader = joined["first-join-0"]["leader"]
    everything = Assignment(
        (TopicPartitions("foo", tuple(range(6))), TopicPartitions("bar", (0, 1, 2)))
    )
    given = {m: encode_assignment(Assignment(())) for m in members}
    given[members[0]] = encode_assignment(everything)
    for member in sorted(members, key=lambda m: m != leader):  # the leader first
        fields = {}
        if member == leader:
            fields["assignments"] = [{"member_id": m, "assignment": a} for m, a in given.items()]
        ctx.rid += 1
        out = ctx.c.handle(
            {
                "api": "sync_group",
                "request_id": ctx.rid,
                "group_id": GROUP,
                "member_id": member,
                "generation_id": 1,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [],
                **fields,
            },
            ctx.now,
        )
    group = ctx.c.group(GROUP)
    assert isinstance(group, ClassicGroup) and group.state is GroupState.STABLE
    ctx.records()
    return members


def mixed_group(ctx: Context) -> str:
    """A consumer group of M1 (consumer protocol) and a classic member, both settled."""
    ctx.join(M1)
    joined = classic_join(ctx)
    member = classic_join(ctx, joined["member_id"])["member_id"]
    epoch = ctx.group().members[M1].member_epoch
    ctx.heartbeat(M1, epoch, topic_partitions=owned({FOO: list(range(6)), BAR: [0, 1, 2]}))
    settle(ctx, M1)  # it revokes what moved
    assert ctx.group().members[M1].state is MemberState.STABLE
    rejoined = classic_join(ctx, member)
    assert sync(ctx, member, rejoined["generation_id"])["error"] is None
    ctx.records()
    return member


def settle(ctx: Context, *member_ids: str) -> None:
    """Each consumer-protocol member heartbeats owning what it is assigned (having let go of
    what it was asked to revoke)."""
    for member_id in member_ids:
        member = ctx.group().members[member_id]
        answer = ctx.heartbeat(
            member_id, member.member_epoch, topic_partitions=owned(_assigned(ctx, member_id))
        )
        assert answer["error"] is None, answer


def _assigned(ctx: Context, member_id: str) -> dict[str, list[int]]:
    member = ctx.group().members[member_id]
    return {t: sorted(p) for t, p in member.assigned_partitions.items()}


# --- the upgrade --------------------------------------------------------------------------------


def test_a_heartbeat_upgrades_a_stable_classic_group() -> None:
    """testConsumerGroupHeartbeatWithStableClassicGroup."""
    ctx = Context(group_initial_rebalance_delay_ms=0)
    (classic_member,) = stable_classic_group(ctx)
    answer = ctx.join(M2, server_assignor="range")
    assert answer["error"] is None and answer["member_epoch"] == 2
    written = kinds(ctx.records())
    written[9:11] = sorted(written[9:11])  # the new target: members in the engine's order
    assert written == [
        ("group_metadata", None, True),
        # the consumer group of the classic member, at the classic group's generation
        ("member_metadata", classic_member, False),
        ("metadata", None, False),
        ("target_assignment_member", classic_member, False),
        ("target_assignment_metadata", None, False),
        ("current_member_assignment", classic_member, False),
        # the new member joins it
        ("member_metadata", M2, False),
        ("partition_metadata", None, False),
        ("metadata", None, False),
        *sorted(
            [
                ("target_assignment_member", M2, False),
                ("target_assignment_member", classic_member, False),
            ]
        ),
        ("target_assignment_metadata", None, False),
        ("current_member_assignment", M2, False),
    ]
    group = ctx.group()
    converted = group.members[classic_member]
    assert (converted.member_epoch, converted.previous_member_epoch) == (1, 1)
    assert converted.state is MemberState.STABLE
    assert converted.classic == ClassicMemberMetadata(SESSION_MS, (("range", subscription()),))
    assert _assigned(ctx, classic_member) == {FOO: list(range(6)), BAR: [0, 1, 2]}
    assert converted.subscribed_topic_names == ("bar", "foo")
    assert converted.rebalance_timeout_ms == REBALANCE_MS
    assert group.members[M2].state is MemberState.UNRELEASED_PARTITIONS
    # the converted member's session is its classic one; the new member's the group's
    assert group.timers[f"session-timeout-{classic_member}"].deadline_ms == ctx.now + SESSION_MS
    assert group.timers[f"session-timeout-{M2}"].deadline_ms == ctx.now + 45_000
    ctx.assert_at_rest_equals_load()
    # The classic member is asked to rejoin (the epoch moved on), rejoins, revokes what moved.
    assert classic_heartbeat(ctx, classic_member, 1)["error"] == "REBALANCE_IN_PROGRESS"
    kept = {n: p for n, p in {"foo": [], "bar": []}.items()}  # an eager client owns nothing
    rejoined = classic_join(ctx, classic_member, metadata=subscription(**kept))
    assert rejoined["error"] is None and rejoined["generation_id"] == 2
    synced = sync(ctx, classic_member, 2)
    target = ctx.group().target_assignment[classic_member]
    names = {FOO: "foo", BAR: "bar"}
    assert assignment_of(synced) == {names[t]: sorted(p) for t, p in sorted(target.items())}
    ctx.assert_at_rest_equals_load()


def test_an_upgrade_answers_the_classic_groups_parked_joins_rebalance_in_progress() -> None:
    """testConsumerGroupHeartbeatWithPreparingRebalanceClassicGroup."""
    ctx = Context(group_initial_rebalance_delay_ms=100)
    member, _ = stable_classic_group(ctx, 2)
    parked = ctx.c.handle(
        {
            "api": "join_group",
            "request_id": "parked",
            "group_id": GROUP,
            "api_version": 5,
            "member_id": member,
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": REBALANCE_MS,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription()}],
        },
        ctx.now,
    )
    assert parked == []  # the leader's rejoin begins a rebalance; it waits for the other one
    ctx.rid += 1
    out = ctx.c.handle(
        {
            "api": "consumer_group_heartbeat",
            "request_id": ctx.rid,
            "group_id": GROUP,
            "member_id": M2,
            "member_epoch": 0,
            "rebalance_timeout_ms": 5000,
            "subscribed_topic_names": ["foo"],
            "topic_partitions": [],
        },
        ctx.now,
    )
    by_id = {r["request_id"]: r for r in out}
    assert by_id["parked"]["error"] == "REBALANCE_IN_PROGRESS"
    assert by_id[ctx.rid]["error"] is None
    assert isinstance(ctx.c.group(GROUP), ConsumerGroup)


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_the_policy_can_forbid_the_upgrade(policy: str) -> None:
    ctx = Context(group_initial_rebalance_delay_ms=0, group_consumer_migration_policy=policy)
    stable_classic_group(ctx)
    answer = ctx.join(M2)
    assert (answer["error"], answer["error_message"]) == (
        "GROUP_ID_NOT_FOUND",
        f"Group {GROUP} is not a consumer group.",
    )
    assert ctx.records() == [] and isinstance(ctx.c.group(GROUP), ClassicGroup)


def test_a_classic_group_larger_than_the_consumer_group_limit_is_not_upgraded() -> None:
    ctx = Context(group_initial_rebalance_delay_ms=0, group_consumer_max_size=1)
    stable_classic_group(ctx)
    assert ctx.join(M2)["error"] == "GROUP_MAX_SIZE_REACHED"  # one member converted, full
    assert ctx.records() == [] and isinstance(ctx.c.group(GROUP), ClassicGroup)


def test_a_failed_heartbeat_leaves_the_classic_group_as_it_was() -> None:
    ctx = Context(group_initial_rebalance_delay_ms=0)
    stable_classic_group(ctx)
    before = durable_view(ctx.c.group(GROUP))
    answer = ctx.join(M2, server_assignor="nope")
    assert answer["error"] == "UNSUPPORTED_ASSIGNOR"
    assert ctx.records() == [] and durable_view(ctx.c.group(GROUP)) == before


# --- classic members joining a consumer group ------------------------------------------------


def test_a_classic_member_joins_a_consumer_group() -> None:
    """testJoiningConsumerGroupWithNewDynamicMember: MEMBER_ID_REQUIRED first (v4+), then the
    member epoch as the generation, no leader, the first protocol's name; its record carries
    its ClassicMemberMetadata."""
    ctx = Context()
    ctx.join(M1)
    ctx.records()
    first = classic_join(ctx)
    assert first["error"] == "MEMBER_ID_REQUIRED" and ctx.records() == []
    joined = classic_join(ctx, first["member_id"])
    assert (joined["error"], joined["generation_id"], joined["protocol_name"]) == (None, 2, "range")
    assert (joined["leader"], joined["members"], joined["protocol_type"]) == ("", [], "consumer")
    records = ctx.records()
    (metadata,) = [r for r in records if r["record_type"] == "consumer_group_member_metadata"]
    assert metadata["classic_member_metadata"] == {
        "session_timeout_ms": SESSION_MS,
        "supported_protocols": [{"name": "range", "metadata": subscription()}],
    }
    described = ctx.send({"api": "consumer_group_describe"})
    assert sorted(m["member_type"] for m in described["members"]) == [0, 1]
    ctx.assert_at_rest_equals_load()


def test_a_classic_members_protocols_must_be_shared_by_the_other_classic_members() -> None:
    """testJoiningConsumerGroupThrowsExceptionIfProtocolIsNotSupported."""
    ctx = Context()
    ctx.join(M1)
    classic_join(ctx, classic_join(ctx)["member_id"])
    answer = classic_join(ctx, api_version=3, protocols=("roundrobin",))
    assert answer["error"] == "INCONSISTENT_GROUP_PROTOCOL"
    assert answer["error_message"].endswith("'s protocols are not supported.")


def test_a_full_consumer_group_refuses_a_classic_member() -> None:
    """testJoiningConsumerGroupThrowsExceptionIfGroupOverMaxSize."""
    ctx = Context(group_consumer_max_size=1)
    ctx.join(M1)
    answer = classic_join(ctx, api_version=3)
    assert (answer["error"], answer["error_message"]) == (
        "GROUP_MAX_SIZE_REACHED",
        "The consumer group has reached its maximum capacity of 1 members.",
    )


def test_a_static_classic_member_must_be_known_and_not_fenced() -> None:
    """testStaticMemberJoiningConsumerGroupWithUnknownInstanceId / ...WithUnmatchedMemberId."""
    ctx = Context()
    ctx.join(M1)
    joined = classic_join(ctx, instance_id="i1")
    assert joined["error"] is None
    unknown = classic_join(ctx, "someone", instance_id="i2")
    assert (unknown["error"], unknown["error_message"]) == (
        "UNKNOWN_MEMBER_ID",
        "Instance id i2 is unknown.",
    )
    fenced = classic_join(ctx, "someone", instance_id="i1")
    assert fenced["error"] == "FENCED_INSTANCE_ID"
    # an unknown member id with a known instance id replaces the static member
    replaced = classic_join(ctx, instance_id="i1")
    assert replaced["error"] is None and replaced["member_id"] != joined["member_id"]
    assert joined["member_id"] not in ctx.group().members
    ctx.assert_at_rest_equals_load()


def test_an_eager_classic_member_revokes_by_rejoining_with_nothing_owned() -> None:
    """testReconciliationInJoiningConsumerGroupWithEagerProtocol: a member that owns partitions
    another one is to get is asked to rejoin; rejoining with none owned releases them."""
    ctx = Context(topics={"foo": 2})
    ctx.join(M1, ["foo"])
    member = classic_join(ctx, api_version=3, metadata=subscription(("foo",)))["member_id"]
    assert ctx.group().members[member].state is MemberState.UNRELEASED_PARTITIONS
    # M1 revokes partition 1 to it
    ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1]}))
    ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0]}))
    assert classic_heartbeat(ctx, member, 2)["error"] == "REBALANCE_IN_PROGRESS"
    rejoined = classic_join(ctx, member, metadata=subscription(("foo",)))
    assert sync(ctx, member, rejoined["generation_id"])["assignment"] == encode_assignment(
        Assignment((TopicPartitions("foo", (1,)),))
    )
    assert classic_heartbeat(ctx, member, rejoined["generation_id"])["error"] is None
    ctx.assert_at_rest_equals_load()


def test_a_cooperative_classic_member_revokes_then_rejoins_for_the_next_epoch() -> None:
    """testReconciliationInJoiningConsumerGroupWithCooperativeProtocol: a classic member that
    rejoins still owning what moved stays at its epoch (UNREVOKED_PARTITIONS) and syncs what
    it keeps; rejoining without the revoked partitions moves it on."""
    ctx = Context(topics={"foo": 4}, group_consumer_migration_policy="upgrade")
    ctx.join(M1, ["foo"])
    member = classic_join(ctx, metadata=subscription(("foo",)))["member_id"]
    classic_join(ctx, member, metadata=subscription(("foo",)))
    ctx.heartbeat(M1, -1)  # the classic member is left with everything
    rejoined = classic_join(ctx, member, metadata=subscription(("foo",)))
    generation = rejoined["generation_id"]
    held = {FOO: [0, 1, 2, 3]}
    assert _assigned(ctx, member) == held
    assert sync(ctx, member, generation)["error"] is None
    ctx.join(M2, ["foo"])  # some of the classic member's partitions move to M2
    assert classic_heartbeat(ctx, member, generation)["error"] == "REBALANCE_IN_PROGRESS"
    still = classic_join(
        ctx, member, metadata=subscription(("foo",), foo=held[FOO])
    )  # owns them all
    assert still["generation_id"] == generation  # revoking first
    assert ctx.group().members[member].state is MemberState.UNREVOKED_PARTITIONS
    kept = assignment_of(sync(ctx, member, generation))["foo"]
    assert set(kept) < set(held[FOO])
    moved_on = classic_join(ctx, member, metadata=subscription(("foo",), foo=kept))
    assert moved_on["generation_id"] > generation
    ctx.assert_at_rest_equals_load()


# --- SyncGroup, Heartbeat, LeaveGroup of classic members ---------------------------------------


def test_sync_group_errors() -> None:
    """testClassicGroupSyncToConsumerGroupWith{UnknownMemberId, FencedInstanceId,
    InconsistentGroupProtocol, IllegalGeneration} and ...RebalanceInProgress."""
    ctx = Context()
    ctx.join(M1)
    static = classic_join(ctx, instance_id="i1")
    member, generation = static["member_id"], static["generation_id"]
    assert sync(ctx, "nobody", generation)["error"] == "UNKNOWN_MEMBER_ID"
    fenced = {"group_instance_id": "i1"}
    assert sync(ctx, "nobody", generation, **fenced)["error"] == "FENCED_INSTANCE_ID"
    assert sync(ctx, member, generation, protocol_type="connect")["error"] == (
        "INCONSISTENT_GROUP_PROTOCOL"
    )
    assert sync(ctx, member, generation, protocol_name="roundrobin")["error"] == (
        "INCONSISTENT_GROUP_PROTOCOL"
    )
    illegal = sync(ctx, member, generation + 1)
    assert (illegal["error"], illegal["error_message"]) == (
        "ILLEGAL_GENERATION",
        f"The request generation id {generation + 1} is not equal to the member epoch "
        f"{generation} of member {member}.",
    )
    ctx.join(M2)  # a new epoch: the classic member must rejoin before it syncs
    behind = sync(ctx, member, generation)
    assert behind["error"] == "REBALANCE_IN_PROGRESS" and behind["assignment"] == b""
    assert f"join-timeout-{member}" in ctx.group().timers


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_sync_answers_the_assignment_at_the_subscriptions_version(version: int) -> None:
    """testClassicGroupSyncToConsumerGroupWithAllConsumerProtocolVersions."""
    ctx = Context(topics={"foo": 2})
    metadata = encode_subscription(Subscription(("foo",)), version)
    ctx.join(M1, ["foo"])
    ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1]}))
    joined = classic_join(ctx, api_version=3, metadata=metadata)
    ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0]}))
    rejoined = classic_join(ctx, joined["member_id"], metadata=metadata)
    answer = sync(ctx, joined["member_id"], rejoined["generation_id"])
    assert answer["assignment"][:2] == version.to_bytes(2, "big")
    assert assignment_of(answer) == {"foo": [1]}


def test_heartbeat_keeps_the_session_and_asks_to_rejoin_when_the_epoch_moves() -> None:
    """testClassicGroupHeartbeatToConsumerGroupMaintainsSession / ...RebalanceInProgress /
    ...WithUnknownMember / ...WithIllegalGenerationId / ...WithMemberNotUsingClassicProtocol."""
    ctx = Context()
    ctx.join(M1)
    joined = classic_join(ctx, api_version=3)
    member, generation = joined["member_id"], joined["generation_id"]
    ctx.sleep(5_000)
    classic_heartbeat(ctx, member, generation)
    timer = ctx.group().timers[f"session-timeout-{member}"]
    assert timer.deadline_ms == ctx.now + SESSION_MS
    assert classic_heartbeat(ctx, "nobody", generation)["error"] == "UNKNOWN_MEMBER_ID"
    assert classic_heartbeat(ctx, member, generation + 7)["error"] == "ILLEGAL_GENERATION"
    assert classic_heartbeat(ctx, M1, 1)["error"] == "UNKNOWN_MEMBER_ID"
    ctx.join(M2)
    assert classic_heartbeat(ctx, member, generation)["error"] == "REBALANCE_IN_PROGRESS"
    assert f"join-timeout-{member}" in ctx.group().timers


def test_a_classic_member_is_fenced_when_its_session_or_its_join_times_out() -> None:
    """testConsumerGroupMemberUsingClassicProtocolFencedWhenSessionTimeout / ...JoinTimeout."""
    ctx = Context(group_initial_rebalance_delay_ms=0)
    member = mixed_group(ctx)
    ctx.sleep(SESSION_MS)  # M1's session is 45 s
    assert set(ctx.group().members) == {M1}
    ctx.records()
    # join timeout: asked to rejoin, it heartbeats but never rejoins within its rebalance timeout
    ctx.heartbeat(M1, -1)
    member = mixed_group(ctx)
    generation = ctx.group().members[member].member_epoch
    ctx.join(M2)
    settle(ctx, M1, M1, M2)
    assert classic_heartbeat(ctx, member, generation)["error"] == "REBALANCE_IN_PROGRESS"
    for _ in range(REBALANCE_MS // 5_000 - 1):
        ctx.sleep(5_000)
        settle(ctx, M1, M2)
        assert classic_heartbeat(ctx, member, generation)["error"] == "REBALANCE_IN_PROGRESS"
    ctx.sleep(5_000)
    assert set(ctx.group().members) == {M1, M2}
    ctx.assert_at_rest_equals_load()


def test_a_classic_member_that_joins_but_never_syncs_is_fenced() -> None:
    ctx = Context()
    ctx.join(M1)
    member = classic_join(ctx, api_version=3)["member_id"]
    ctx.sleep(REBALANCE_MS)
    assert member not in ctx.group().members


def test_leave_group_removes_classic_members_only() -> None:
    """testConsumerGroupMemberUsingClassicProtocolBatchLeaveGroup and
    testClassicGroupLeaveToConsumerGroupWithoutValidLeaveGroupMember."""
    ctx = Context()
    ctx.join(M1)
    dynamic = classic_join(ctx, api_version=3)["member_id"]
    static = classic_join(ctx, instance_id="i1")["member_id"]
    epoch = ctx.group().group_epoch
    ctx.records()
    leave = ctx.send(
        {
            "api": "leave_group",
            "members": [
                {"member_id": dynamic, "group_instance_id": None},
                {"member_id": "", "group_instance_id": "i1"},  # an admin's, by instance id
                {"member_id": M1, "group_instance_id": None},
                {"member_id": "ghost", "group_instance_id": "i9"},
            ],
        }
    )
    assert [(m["member_id"], m["error"]) for m in leave["members"]] == [
        (dynamic, None),
        (static, None),
        (M1, "UNKNOWN_MEMBER_ID"),
        ("ghost", "UNKNOWN_MEMBER_ID"),
    ]
    assert set(ctx.group().members) == {M1} and ctx.group().group_epoch == epoch + 1
    assert kinds(ctx.records())[-1] == ("metadata", None, False)
    nothing = ctx.send(
        {"api": "leave_group", "members": [{"member_id": M1, "group_instance_id": None}]}
    )
    assert ctx.records() == [] and nothing["members"][0]["error"] == "UNKNOWN_MEMBER_ID"
    ctx.assert_at_rest_equals_load()


def test_a_classic_members_commits_use_its_epoch_as_the_generation() -> None:
    """ConsumerGroup.validateOffsetCommit: any version for a classic member, and
    ILLEGAL_GENERATION (not STALE_MEMBER_EPOCH) for a wrong epoch."""
    ctx = Context()
    ctx.join(M1)
    joined = classic_join(ctx, api_version=3)
    commit = {
        "api": "offset_commit",
        "api_version": 7,
        "member_id": joined["member_id"],
        "offsets": [{"topic": "foo", "partition": 0, "offset": 3}],
    }
    ok = ctx.send({**commit, "generation_id": joined["generation_id"]})
    assert ok["partitions"][0]["error"] is None
    wrong = ctx.send({**commit, "generation_id": joined["generation_id"] - 1})
    assert wrong["partitions"][0]["error"] == "ILLEGAL_GENERATION"


# --- the downgrade ------------------------------------------------------------------------------


def _assert_downgraded(ctx: Context, classic_member: str, records: list[dict[str, Any]]) -> None:
    assert [r["record_type"] for r in records][-1] == "group_metadata"
    assert all(r["value"] is None for r in records[:-1])
    group = ctx.c.group(GROUP)
    assert isinstance(group, ClassicGroup)
    assert group.state is GroupState.PREPARING_REBALANCE
    assert list(group.members) == [classic_member]
    assert group.protocol_name == "range" and group.generation_id == records[-1]["generation_id"]
    loaded = ctx.reloaded().group(GROUP)
    assert durable_view(loaded)[1:] == durable_view(group)[1:]  # but the rebalance under way


def test_the_last_consumer_protocol_member_leaving_downgrades_the_group() -> None:
    """testLastConsumerProtocolMemberLeavingConsumerGroup."""
    ctx = Context(group_initial_rebalance_delay_ms=0)
    member = mixed_group(ctx)
    target = dict(ctx.group().target_assignment[member])
    epoch = ctx.group().group_epoch
    assert ctx.heartbeat(M1, -1)["error"] is None
    records = ctx.records()
    _assert_downgraded(ctx, member, records)
    group = ctx.c.group(GROUP)
    assert isinstance(group, ClassicGroup) and group.generation_id == epoch
    names = {FOO: "foo", BAR: "bar"}
    assert {
        tp.topic: sorted(tp.partitions)
        for tp in decode_assignment(group.members[member].assignment).assigned_partitions
    } == {names[t]: sorted(p) for t, p in target.items()}
    # the classic member carries on in the classic group: rejoin, sync, stable
    assert classic_heartbeat(ctx, member, epoch)["error"] == "REBALANCE_IN_PROGRESS"
    rejoined = classic_join(ctx, member)
    assert rejoined["error"] is None and rejoined["generation_id"] == epoch + 1
    everything = Assignment(
        (TopicPartitions("bar", (0, 1, 2)), TopicPartitions("foo", tuple(range(6))))
    )
    done = sync(
        ctx,
        member,
        epoch + 1,
        assignments=[{"member_id": member, "assignment": encode_assignment(everything)}],
    )
    assert done["error"] is None
    ctx.assert_at_rest_equals_load()


def test_the_last_consumer_protocol_members_session_timeout_downgrades_the_group() -> None:
    """testLastConsumerProtocolMemberSessionTimeoutInConsumerGroup."""
    ctx = Context(group_initial_rebalance_delay_ms=0)
    member = mixed_group(ctx)
    epoch = ctx.group().members[member].member_epoch
    for _ in range(8):  # the classic member heartbeats, M1 does not
        ctx.sleep(5_000)
        classic_heartbeat(ctx, member, epoch)
    ctx.sleep(5_000)  # M1's 45 s session is over
    _assert_downgraded(ctx, member, ctx.records())


@pytest.mark.parametrize("policy", ["disabled", "upgrade"])
def test_the_policy_can_forbid_the_downgrade(policy: str) -> None:
    ctx = Context(group_initial_rebalance_delay_ms=0, group_consumer_migration_policy=policy)
    member = mixed_group(ctx)
    ctx.heartbeat(M1, -1)
    assert set(ctx.group().members) == {member}  # still a consumer group
    ctx.assert_at_rest_equals_load()


def test_a_consumer_group_of_one_consumer_member_leaving_is_not_downgraded() -> None:
    ctx = Context()
    ctx.join(M1)
    ctx.heartbeat(M1, -1)
    assert ctx.group().members == {}


# --- the record ---------------------------------------------------------------------------------


def test_the_classic_member_metadata_is_kafkas_tagged_field_byte_for_byte() -> None:
    """ConsumerGroupMemberMetadataValue with ClassicMemberMetadata (tag 0): the tagged field's
    size counts the nullable struct's presence varint, as Kafka's generated code writes it."""
    member = {
        "instance_id": None,
        "rack_id": None,
        "client_id": "c",
        "client_host": "/h",
        "subscribed_topic_names": ["t"],
        "subscribed_topic_regex": None,
        "rebalance_timeout_ms": 5000,
        "server_assignor": None,
        "classic_member_metadata": {
            "session_timeout_ms": 45000,
            "supported_protocols": [{"name": "range", "metadata": b"\x00\x01"}],
        },
    }
    value = modern_codec.encode_member_metadata(member)
    assert value.hex() == (
        "0000"
        "00"
        "00"
        "0263"
        "032f68"
        "02"
        "0274"
        "00"
        "00001388"
        "00"
        # tagged fields: one; tag 0, 17 bytes: present (1), session, [range, 0x0001]
        "01"
        "00"
        "11"
        "01"
        "0000afc8"
        "02"
        "0672616e6765"
        "03"
        "0001"
        "00"
        "00"
    )
    assert modern_codec.decode_value(modern_codec.CONSUMER_GROUP_MEMBER_METADATA, value) == member


def test_a_classic_member_replacing_the_last_consumer_protocol_static_member_downgrades() -> None:
    """testLastStaticConsumerProtocolMemberReplacedByClassicProtocolMember: the classic
    group is Stable at once, the joining member with the replaced one's target."""
    ctx = Context(group_initial_rebalance_delay_ms=0)
    ctx.join(M1, instance_id="i1")
    classic_member = classic_join(ctx, classic_join(ctx)["member_id"])["member_id"]
    settle(ctx, M1)
    target = dict(ctx.group().target_assignment[M1])
    epoch = ctx.group().group_epoch
    assert ctx.heartbeat(M1, -2, instance_id="i1")["member_epoch"] == -2
    ctx.records()
    joined = classic_join(ctx, instance_id="i1")
    assert joined["error"] is None
    records = ctx.records()
    assert records[-1]["record_type"] == "group_metadata"
    assert ("current_member_assignment", joined["member_id"], True) in kinds(records)
    group = ctx.c.group(GROUP)
    assert isinstance(group, ClassicGroup) and group.state is GroupState.STABLE
    assert group.generation_id == epoch
    assert sorted(group.members) == sorted([classic_member, joined["member_id"]])
    names = {FOO: "foo", BAR: "bar"}
    mine = decode_assignment(group.members[joined["member_id"]].assignment)
    assert {tp.topic: sorted(tp.partitions) for tp in mine.assigned_partitions} == {
        names[t]: sorted(p) for t, p in target.items()
    }
    ctx.assert_at_rest_equals_load()


def test_a_consumer_protocol_member_takes_over_a_classic_static_members_instance() -> None:
    """testConsumerGroupHeartbeatFromExistingClassicStaticMember: the upgrade converts the
    classic static member, and the heartbeat with its instance id replaces it (a classic member
    has no static leave to wait for)."""
    ctx = Context(group_initial_rebalance_delay_ms=0)
    request = {
        "api": "join_group",
        "request_id": "static-join",
        "group_id": GROUP,
        "api_version": 5,
        "member_id": "",
        "group_instance_id": "i1",
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": REBALANCE_MS,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription()}],
    }
    out = ctx.c.handle(request, ctx.now) + ctx.sleep(0)
    (joined,) = [r for r in out if r["request_id"] == "static-join"]
    everything = Assignment((TopicPartitions("foo", (0, 1)),))
    given = [{"member_id": joined["member_id"], "assignment": encode_assignment(everything)}]
    assert (
        sync(ctx, joined["member_id"], 1, group_instance_id="i1", assignments=given)["error"]
        is None
    )
    answer = ctx.join(M1, instance_id="i1")
    assert answer["error"] is None
    group = ctx.group()
    assert list(group.members) == [M1] and group.static_members == {"i1": M1}
    assert group.members[M1].classic is None  # it took the instance over, consumer protocol
    ctx.assert_at_rest_equals_load()


# --- invariants of mixed groups (a Hypothesis state machine) ------------------------------------

CLIENTS = [f"client{i}" + "x" * 15 for i in range(4)]


@dataclass
class MixedClient:
    """A consumer-protocol client, or an eager classic one (it gives up everything before it
    rejoins, and consumes what SyncGroup gives it)."""

    name: str
    classic: bool
    member_id: str = ""
    epoch: int = 0
    joined: bool = False
    consuming: set[tuple[str, int]] = field(default_factory=set)
    target: set[tuple[str, int]] = field(default_factory=set)

    def drop(self) -> None:
        self.joined, self.epoch, self.member_id = False, 0, ""
        self.consuming.clear()
        self.target.clear()


class MixedGroupMachine(RuleBasedStateMachine):
    """Consumer-protocol and classic clients in one consumer group, under joins, heartbeats,
    rejoins, slow revocations, leaves, crashes and time. Invariants after every step: no
    partition consumed by two clients, none owned twice in the books, the group epoch never
    down, the group equal to a load of its log."""

    @initialize()
    def setup(self) -> None:
        self.ctx = Context(topics={"foo": 3, "bar": 2}, group_consumer_migration_policy="upgrade")
        self.clients = {name: MixedClient(name, i % 2 == 1) for i, name in enumerate(CLIENTS)}
        self.group_epoch = 0
        self.join(0)  # a consumer group for the classic clients to join

    def consumer_group(self) -> ConsumerGroup | None:
        group = self.ctx.c.group(GROUP)
        return group if isinstance(group, ConsumerGroup) else None

    @rule(index=st.integers(0, len(CLIENTS) - 1))
    def join(self, index: int) -> None:
        client = self.clients[CLIENTS[index]]
        if client.joined:
            return
        if not client.classic:
            client.member_id = client.name
            answer = self.ctx.join(client.name, rebalance_timeout_ms=20_000)
            self._consumer_answer(client, answer)
            return
        group = self.consumer_group()
        if group is None or group.is_empty():
            return  # a classic join would make a classic group: not this machine's subject
        first = classic_join(self.ctx)
        if first["error"] != "MEMBER_ID_REQUIRED":
            return
        client.member_id = first["member_id"]
        self._classic_rejoin(client)

    def _classic_rejoin(self, client: MixedClient) -> None:
        client.consuming.clear()  # eager: everything given up before the join
        answer = classic_join(self.ctx, client.member_id)
        if answer["error"] is not None:
            client.drop()
            return
        client.joined, client.epoch = True, answer["generation_id"]
        synced = sync(self.ctx, client.member_id, client.epoch)
        if synced["error"] is None:
            names = {FOO: "foo", BAR: "bar"}
            given = decode_assignment(synced["assignment"]).assigned_partitions
            client.consuming = {
                (t, p)
                for tp in given
                for t in [k for k, v in names.items() if v == tp.topic]
                for p in tp.partitions
            }
        elif synced["error"] != "REBALANCE_IN_PROGRESS":
            client.drop()

    def _consumer_answer(self, client: MixedClient, answer: dict[str, Any]) -> None:
        if answer["error"] is not None or answer["member_epoch"] < 0:
            client.drop()
            return
        client.joined, client.epoch = True, answer["member_epoch"]
        new = answer["assignment"]
        if new is not None:
            client.target = {
                (t["topic_id"], p) for t in new["topic_partitions"] for p in t["partitions"]
            }
            client.consuming |= client.target

    @rule(index=st.integers(0, len(CLIENTS) - 1))
    def heartbeat(self, index: int) -> None:
        client = self.clients[CLIENTS[index]]
        if not client.joined:
            return
        if client.classic:
            answer = classic_heartbeat(self.ctx, client.member_id, client.epoch)
            if answer["error"] == "REBALANCE_IN_PROGRESS":
                self._classic_rejoin(client)
            elif answer["error"] is not None:
                client.drop()
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(client.consuming):
            by_topic.setdefault(topic, []).append(partition)
        answer = self.ctx.heartbeat(client.name, client.epoch, topic_partitions=owned(by_topic))
        self._consumer_answer(client, answer)

    @rule(index=st.integers(0, len(CLIENTS) - 1))
    def revoke(self, index: int) -> None:
        client = self.clients[CLIENTS[index]]
        if not client.classic:
            client.consuming &= client.target

    @rule(index=st.integers(0, len(CLIENTS) - 1))
    def leave(self, index: int) -> None:
        client = self.clients[CLIENTS[index]]
        if not client.joined:
            return
        client.consuming.clear()
        if client.classic:
            self.ctx.send(
                {
                    "api": "leave_group",
                    "members": [{"member_id": client.member_id, "group_instance_id": None}],
                }
            )
        else:
            self.ctx.heartbeat(client.name, -1)
        client.drop()

    @rule(index=st.integers(0, len(CLIENTS) - 1))
    def crash(self, index: int) -> None:
        self.clients[CLIENTS[index]].drop()

    @rule(ms=st.sampled_from([1_000, 5_000, 11_000, 21_000, 46_000]))
    def sleep(self, ms: int) -> None:
        self.ctx.sleep(ms)
        group = self.consumer_group()
        members = group.members if group is not None else {}
        for client in self.clients.values():
            if client.joined and client.member_id not in members:
                client.drop()  # fenced: its own timers have stopped it too

    @invariant()
    def nobody_consumes_a_partition_another_one_consumes(self) -> None:
        seen: dict[tuple[str, int], str] = {}
        for client in self.clients.values():
            for tp in client.consuming:
                assert tp not in seen, f"{tp} consumed by {seen[tp]} and {client.name}"
                seen[tp] = client.name

    @invariant()
    def the_books_own_each_partition_once(self) -> None:
        group = self.consumer_group()
        if group is None:
            return
        owners: set[tuple[str, int]] = set()
        for member in group.members.values():
            for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                for topic, parts in assignment.items():
                    for p in parts:
                        assert (topic, p) not in owners
                        owners.add((topic, p))
        assert owners == set(group.partition_epochs)

    @invariant()
    def the_group_epoch_never_goes_down(self) -> None:
        group = self.consumer_group()
        if group is not None:
            assert group.group_epoch >= self.group_epoch
            self.group_epoch = group.group_epoch

    @invariant()
    def the_group_equals_a_load_of_its_log(self) -> None:
        loaded = self.ctx.reloaded()
        assert durable_view(loaded.group(GROUP)) == durable_view(self.ctx.c.group(GROUP))


MixedGroupMachine.TestCase.settings = settings(
    settings.default,
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMixedGroupMachine = MixedGroupMachine.TestCase
