"""ConsumerGroupHeartbeat as Kafka 4.0 serves it: Kafka's GroupMetadataManagerTest consumer-group
scenarios, ported one by one (with the real assignors where Kafka's tests mock one)."""

from __future__ import annotations

import pytest

from coordinator.modern.model import ConsumerGroupState, MemberState
from tests.consumer_groups import (
    BAR,
    FOO,
    GROUP,
    M1,
    M2,
    M3,
    Context,
    assigned,
    kinds,
    owned,
)

HB = "consumer_group_heartbeat"


# --- request validation (testConsumerHeartbeatRequestValidation) --------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"group_id": "", "member_epoch": 0}, "GroupId can't be empty."),
        ({"group_id": "   ", "member_epoch": 0}, "GroupId can't be empty."),
        (
            {"member_id": M1, "member_epoch": 0},
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        (
            {"member_id": M1, "member_epoch": 0, "rebalance_timeout_ms": 5000},
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            {
                "member_id": M1,
                "member_epoch": 0,
                "rebalance_timeout_ms": 5000,
                "topic_partitions": [],
            },
            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
        ),
        ({"member_epoch": 1}, "MemberId can't be empty."),
        ({"member_id": M1, "member_epoch": 1, "instance_id": ""}, "InstanceId can't be empty."),
        ({"member_id": M1, "member_epoch": 1, "rack_id": " "}, "RackId can't be empty."),
        ({"member_id": M1, "member_epoch": -2}, "InstanceId can't be null."),
        ({"member_id": M1, "member_epoch": -3}, "MemberEpoch is invalid."),
        # v1: the member id is the client's own, even to join
        (
            {
                "member_epoch": 0,
                "rebalance_timeout_ms": 5000,
                "topic_partitions": [],
                "subscribed_topic_names": ["foo"],
            },
            "MemberId can't be empty.",
        ),
    ],
)
def test_an_invalid_heartbeat_is_refused_with_kafkas_message(fields: dict, message: str) -> None:
    ctx = Context()
    answer = ctx.send({"api": HB, **fields})
    assert (answer["error"], answer["error_message"]) == ("INVALID_REQUEST", message)
    assert answer["member_id"] is None and answer["assignment"] is None
    assert ctx.records() == [] and ctx.c.group_ids() == []


def test_an_unknown_server_assignor_is_refused() -> None:
    ctx = Context()
    answer = ctx.join(M1, server_assignor="sticky")
    assert answer["error"] == "UNSUPPORTED_ASSIGNOR"
    assert answer["error_message"] == (
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range."
    )


def test_an_invalid_regular_expression_is_refused() -> None:
    """testConsumerHeartbeatRegexValidation."""
    ctx = Context()
    answer = ctx.join(M1, subscribed_topic_regex="[")
    assert answer["error"] == "INVALID_REGULAR_EXPRESSION"
    assert answer["error_message"] == (
        "SubscribedTopicRegex `[` is not a valid regular expression: missing closing ]."
    )
    assert ctx.records() == []


def test_a_v0_member_joining_without_an_id_gets_one_in_kafkas_uuid_form() -> None:
    """testMemberIdGeneration."""
    ctx = Context()
    answer = ctx.join("", api_version=0)
    assert answer["error"] is None
    assert len(answer["member_id"]) == 22 and answer["member_epoch"] == 1
    assert list(ctx.group().members) == [answer["member_id"]]


def test_a_heartbeat_to_an_unknown_group_is_group_id_not_found() -> None:
    """testUnknownGroupId."""
    ctx = Context()
    answer = ctx.heartbeat(M1, 100, subscribed_topic_names=["foo"])
    assert answer["error"] == "GROUP_ID_NOT_FOUND"


def test_an_unknown_member_heartbeating_is_unknown_member_id() -> None:
    """testUnknownMemberIdJoinsConsumerGroup."""
    ctx = Context()
    ctx.join(M1)
    answer = ctx.heartbeat(M2, 1)
    assert answer["error"] == "UNKNOWN_MEMBER_ID"
    assert answer["error_message"] == f"Member {M2} is not a member of group {GROUP}."


def test_member_epoch_validation() -> None:
    """testConsumerGroupMemberEpochValidation: a greater or a smaller epoch is fenced; the previous
    epoch with a subset of the assignment is accepted (the bumped epoch's answer was lost)."""
    ctx = Context(topics={"foo": 6})
    assert ctx.join(M1, ["foo"])["member_epoch"] == 1
    ctx.join(M2, ["foo"])  # epoch 2: M1 must give up 3 of its partitions
    m1 = ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1, 2, 3, 4, 5]}))
    assert (m1["member_epoch"], assigned(m1)) == (1, {FOO: [0, 1, 2]})
    m1 = ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1, 2]}))
    assert m1["member_epoch"] == 2
    for epoch in (3, 0 + 5):
        answer = ctx.heartbeat(M1, epoch)
        assert answer["error"] == "FENCED_MEMBER_EPOCH"
        assert "greater member epoch" in answer["error_message"]
    # A rejoin (0) that is not the previous epoch; the previous one without partitions, or with
    # partitions beyond its assignment.
    assert ctx.join(M1, ["foo"])["error"] == "FENCED_MEMBER_EPOCH"
    for epoch, parts in ((1, None), (1, owned({FOO: [0, 1, 2, 3]}))):
        answer = ctx.heartbeat(M1, epoch, topic_partitions=parts)
        assert answer["error"] == "FENCED_MEMBER_EPOCH", (epoch, parts)
    answer = ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1]}))
    assert (answer["error"], answer["member_epoch"]) == (None, 2)


def test_a_member_joins_an_empty_group() -> None:
    """testMemberJoinsEmptyConsumerGroup: response and records, in Kafka's order."""
    ctx = Context()
    answer = ctx.join(M1, server_assignor="range")
    assert answer["error"] is None
    assert (answer["member_id"], answer["member_epoch"], answer["heartbeat_interval_ms"]) == (
        M1,
        1,
        5000,
    )
    assert assigned(answer) == {FOO: [0, 1, 2, 3, 4, 5], BAR: [0, 1, 2]}
    assert kinds(ctx.records()) == [
        ("member_metadata", M1, False),
        ("partition_metadata", None, False),
        ("metadata", None, False),
        ("target_assignment_member", M1, False),
        ("target_assignment_metadata", None, False),
        ("current_member_assignment", M1, False),
    ]
    member = ctx.group().members[M1]
    assert (member.member_epoch, member.previous_member_epoch, member.state) == (
        1,
        0,
        MemberState.STABLE,
    )
    assert member.subscribed_topic_names == ("bar", "foo") and member.server_assignor == "range"
    assert ctx.group().state is ConsumerGroupState.STABLE
    ctx.assert_at_rest_equals_load()


def test_updating_the_subscription_triggers_a_new_target_assignment() -> None:
    """testUpdatingSubscriptionTriggersNewTargetAssignment."""
    ctx = Context()
    ctx.join(M1, ["foo"])
    ctx.records()
    answer = ctx.heartbeat(M1, 1, subscribed_topic_names=["foo", "bar"])
    assert answer["member_epoch"] == 2
    assert assigned(answer) == {FOO: [0, 1, 2, 3, 4, 5], BAR: [0, 1, 2]}
    assert kinds(ctx.records()) == [
        ("member_metadata", M1, False),
        ("partition_metadata", None, False),
        ("metadata", None, False),
        ("target_assignment_member", M1, False),
        ("target_assignment_metadata", None, False),
        ("current_member_assignment", M1, False),
    ]


def test_a_new_member_gets_partitions_only_once_their_owner_released_them() -> None:
    """testNewJoiningMemberTriggersNewTargetAssignment and testReconciliationProcess: revocation
    comes before reassignment, and the members move through their states."""
    ctx = Context(topics={"foo": 6, "bar": 3})
    ctx.join(M1, server_assignor="range")
    ctx.join(M2, server_assignor="range")
    group = ctx.group()
    assert (group.group_epoch, group.assignment_epoch) == (2, 2)
    assert group.state is ConsumerGroupState.RECONCILING
    m2 = group.members[M2]
    # The target gives M2 foo 3-5 and bar 2, still M1's: nothing yet, epoch 2.
    assert m2.state is MemberState.UNRELEASED_PARTITIONS and m2.assigned_partitions == {}
    # M1 is asked to revoke and stays at its epoch until it has.
    m1 = ctx.heartbeat(M1, 1)
    assert (m1["member_epoch"], assigned(m1)) == (1, {FOO: [0, 1, 2], BAR: [0, 1]})
    assert ctx.group().members[M1].state is MemberState.UNREVOKED_PARTITIONS
    still = ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1, 2, 3, 4, 5], BAR: [0, 1, 2]}))
    assert (still["member_epoch"], still["assignment"]) == (1, None)
    assert ctx.heartbeat(M2, 2)["assignment"] is None  # still unreleased
    done = ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1, 2], BAR: [0, 1]}))
    assert (done["member_epoch"], done["assignment"]) == (2, None)
    m2_answer = ctx.heartbeat(M2, 2)
    assert (m2_answer["member_epoch"], assigned(m2_answer)) == (2, {FOO: [3, 4, 5], BAR: [2]})
    assert ctx.group().state is ConsumerGroupState.STABLE
    ctx.assert_at_rest_equals_load()


def test_a_third_member_takes_partitions_from_both_others() -> None:
    """testReconciliationProcess with three members: each keeps what stays its own."""
    ctx = Context(topics={"foo": 6, "bar": 3})
    ctx.join(M1, server_assignor="range")
    ctx.join(M2, server_assignor="range")
    ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1, 2], BAR: [0, 1]}))
    ctx.heartbeat(M2, 2)
    ctx.join(M3, server_assignor="range")
    m1 = ctx.heartbeat(M1, 2, topic_partitions=owned({FOO: [0, 1, 2], BAR: [0, 1]}))
    assert assigned(m1) == {FOO: [0, 1], BAR: [0]}
    m2 = ctx.heartbeat(M2, 2, topic_partitions=owned({FOO: [3, 4, 5], BAR: [2]}))
    assert assigned(m2) == {FOO: [3]}
    m3 = ctx.heartbeat(M3, 3)
    assert m3["assignment"] is None or assigned(m3) == {}
    ctx.heartbeat(M1, 2, topic_partitions=owned({FOO: [0, 1], BAR: [0]}))
    m2 = ctx.heartbeat(M2, 2, topic_partitions=owned({FOO: [3]}))  # M1 released foo-2, bar-1
    assert (m2["member_epoch"], assigned(m2)) == (3, {FOO: [2, 3], BAR: [1]})
    m3 = ctx.heartbeat(M3, 3)
    assert assigned(m3) == {FOO: [4, 5], BAR: [2]}
    assert ctx.group().state is ConsumerGroupState.STABLE


def test_a_leaving_member_bumps_the_group_epoch() -> None:
    """testLeavingMemberBumpsGroupEpoch."""
    ctx = Context()
    ctx.join(M1)
    ctx.join(M2, ["foo"])
    ctx.records()
    answer = ctx.heartbeat(M2, -1)
    assert (answer["member_id"], answer["member_epoch"], answer["error"]) == (M2, -1, None)
    assert kinds(ctx.records()) == [
        ("current_member_assignment", M2, True),
        ("target_assignment_member", M2, True),
        ("member_metadata", M2, True),
        ("metadata", None, False),
    ]
    assert ctx.group().group_epoch == 3 and M2 not in ctx.group().members
    ctx.assert_at_rest_equals_load()


def test_a_member_leaving_with_the_last_subscription_of_a_topic_updates_the_metadata() -> None:
    ctx = Context()
    ctx.join(M1, ["foo"])
    ctx.join(M2, ["bar"])
    ctx.records()
    ctx.heartbeat(M2, -1)
    assert ("partition_metadata", None, False) in kinds(ctx.records())
    assert set(ctx.group().subscription_metadata) == {"foo"}


def test_a_full_request_gets_the_whole_assignment_back() -> None:
    """testConsumerGroupHeartbeatFullResponse."""
    ctx = Context(topics={"foo": 2})
    ctx.join(M1, ["foo"])
    plain = ctx.heartbeat(M1, 1)
    assert plain["assignment"] is None
    full = ctx.heartbeat(
        M1,
        1,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=["foo"],
        topic_partitions=owned({FOO: [0, 1]}),
    )
    assert assigned(full) == {FOO: [0, 1]}


def test_a_new_member_is_refused_once_the_group_is_full() -> None:
    """testNewMemberIsRejectedWithMaximumMembersIsReached."""
    ctx = Context(group_consumer_max_size=2)
    ctx.join(M1)
    ctx.join(M2)
    answer = ctx.join(M3)
    assert answer["error"] == "GROUP_MAX_SIZE_REACHED"
    assert answer["error_message"] == (
        "The consumer group has reached its maximum capacity of 2 members."
    )
    assert ctx.heartbeat(M1, 1)["error"] is None  # a member of a full group still heartbeats


def test_group_states_follow_epochs_and_reconciliation() -> None:
    """testConsumerGroupStates."""
    ctx = Context(topics={"foo": 2})
    ctx.join(M1, ["foo"])
    assert ctx.group().state is ConsumerGroupState.STABLE
    ctx.join(M2, ["foo"])
    assert ctx.group().state is ConsumerGroupState.RECONCILING
    ctx.heartbeat(M2, -1)
    # The epoch moved on and no member has heartbeated since: Assigning.
    assert ctx.group().state is ConsumerGroupState.ASSIGNING
    ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0]}))
    assert ctx.group().state is ConsumerGroupState.STABLE
    ctx.heartbeat(M1, 3, topic_partitions=owned({FOO: [0, 1]}))
    ctx.heartbeat(M1, -1)
    assert ctx.group().state is ConsumerGroupState.EMPTY


# --- static members ------------------------------------------------------------------------------


def test_a_new_static_member_bumps_the_group_epoch() -> None:
    """testGroupEpochBumpWhenNewStaticMemberJoins."""
    ctx = Context()
    ctx.join(M1, instance_id="instance-1")
    answer = ctx.join(M2, instance_id="instance-2")
    assert answer["member_epoch"] == 2
    assert ctx.group().static_members == {"instance-1": M1, "instance-2": M2}


def test_a_static_member_leaving_temporarily_keeps_its_epoch_and_gets_its_partitions_back() -> None:
    """testNoGroupEpochBumpWhenStaticMemberTemporarilyLeaves and
    testStaticMemberGetsBackAssignmentUponRejoin."""
    ctx = Context(topics={"foo": 6})
    ctx.join(M1, ["foo"], instance_id="instance-1")
    ctx.join(M2, ["foo"], instance_id="instance-2")
    ctx.heartbeat(M1, 1, instance_id="instance-1", topic_partitions=owned({FOO: [0, 1, 2]}))
    ctx.heartbeat(M2, 2, instance_id="instance-2")
    ctx.records()
    left = ctx.heartbeat(M2, -2, instance_id="instance-2")
    assert (left["member_id"], left["member_epoch"]) == (M2, -2)
    assert kinds(ctx.records()) == [("current_member_assignment", M2, False)]
    assert ctx.group().group_epoch == 2
    # It comes back with a new member id and epoch 0, and gets its partitions straight back.
    new_id = "member2-rebooted" + "x" * 6
    back = ctx.join(new_id, ["foo"], instance_id="instance-2")
    assert back["error"] is None
    assert (back["member_epoch"], assigned(back)) == (2, {FOO: [3, 4, 5]})
    assert kinds(ctx.records())[:6] == [
        ("current_member_assignment", M2, True),
        ("target_assignment_member", M2, True),
        ("member_metadata", M2, True),
        ("member_metadata", new_id, False),
        ("target_assignment_member", new_id, False),
        ("current_member_assignment", new_id, False),
    ]
    group = ctx.group()
    assert group.group_epoch == 2 and set(group.members) == {M1, new_id}
    assert group.static_members["instance-2"] == new_id
    ctx.assert_at_rest_equals_load()


def test_a_static_member_rejoining_with_new_topics_bumps_the_epoch() -> None:
    """testStaticMemberRejoinsWithNewSubscribedTopics."""
    ctx = Context()
    ctx.join(M1, ["foo"], instance_id="i1")
    ctx.heartbeat(M1, -2, instance_id="i1")
    back = ctx.join(M2, ["foo", "bar"], instance_id="i1")
    assert back["member_epoch"] == 2
    assert assigned(back) == {FOO: [0, 1, 2, 3, 4, 5], BAR: [0, 1, 2]}


def test_a_leaving_static_member_bumps_the_group_epoch() -> None:
    """testLeavingStaticMemberBumpsGroupEpoch."""
    ctx = Context()
    ctx.join(M1, instance_id="i1")
    answer = ctx.heartbeat(M1, -1, instance_id="i1")
    assert (answer["member_epoch"], answer["error"]) == (-1, None)
    assert ctx.group().group_epoch == 2 and ctx.group().static_members == {}


def test_an_instance_id_still_in_use_is_unreleased() -> None:
    """testShouldThrownUnreleasedInstanceIdExceptionWhenNewMemberJoinsWithInUseInstanceId."""
    ctx = Context()
    ctx.join(M1, instance_id="i1")
    answer = ctx.join(M2, instance_id="i1")
    assert answer["error"] == "UNRELEASED_INSTANCE_ID"
    assert answer["error_message"] == (
        f"Static member {M2} with instance id i1 cannot join the group because the instance id "
        f"is owned by {M1} member."
    )


def test_an_unknown_static_member_is_unknown_member_id() -> None:
    """testShouldThrownUnknownMemberIdExceptionWhenUnknownStaticMemberJoins and
    testShouldThrowUnknownMemberIdExceptionWhenUnknownStaticMemberLeaves."""
    ctx = Context()
    ctx.join(M1, instance_id="i1")
    for epoch in (1, -1, -2):
        answer = ctx.heartbeat(M2, epoch, instance_id="i2")
        assert (answer["error"], answer["error_message"]) == (
            "UNKNOWN_MEMBER_ID",
            "Instance id i2 is unknown.",
        )


def test_a_static_member_with_another_member_id_is_fenced() -> None:
    """testShouldThrowFencedInstanceIdExceptionWhenStaticMemberWithDifferentMemberIdJoins and
    ...Leaves."""
    ctx = Context()
    ctx.join(M1, instance_id="i1")
    for epoch in (1, -1, -2):
        answer = ctx.heartbeat(M2, epoch, instance_id="i1")
        assert answer["error"] == "FENCED_INSTANCE_ID"
        assert answer["error_message"] == (
            f"Static member {M2} with instance id i1 was fenced by member {M1}."
        )


def test_static_member_epoch_validation() -> None:
    """testConsumerGroupMemberEpochValidationForStaticMember."""
    ctx = Context()
    ctx.join(M1, instance_id="i1")
    assert ctx.heartbeat(M1, 9, instance_id="i1")["error"] == "FENCED_MEMBER_EPOCH"
    assert ctx.heartbeat(M1, 1, instance_id="i1")["error"] is None


# --- timers ----------------------------------------------------------------------------------------


def test_a_session_is_renewed_by_heartbeats_and_expires_without_them() -> None:
    """testSessionTimeoutLifecycle and testSessionTimeoutExpiration."""
    ctx = Context()
    ctx.join(M1, ["foo"])
    ctx.join(M2, ["bar"])
    epoch = 1
    for _ in range(5):
        ctx.sleep(40_000)
        answer = ctx.heartbeat(M1, epoch)
        assert answer["error"] is None
        epoch = answer["member_epoch"]
    assert set(ctx.group().members) == {M1}  # M2 sent nothing for 200 s; its 45 s ran out
    ctx.records()
    ctx.sleep(45_000)
    assert ctx.c.group(GROUP) is not None and ctx.group().members == {}
    assert kinds(ctx.records())[-5:] == [
        ("current_member_assignment", M1, True),
        ("target_assignment_member", M1, True),
        ("member_metadata", M1, True),
        ("partition_metadata", None, False),
        ("metadata", None, False),
    ]
    assert ctx.group().state is ConsumerGroupState.EMPTY


def test_a_static_member_that_left_is_fenced_when_its_session_expires() -> None:
    """testSessionTimeoutExpirationStaticMember."""
    ctx = Context()
    ctx.join(M1, instance_id="i1")
    ctx.heartbeat(M1, -2, instance_id="i1")
    ctx.sleep(44_999)
    assert M1 in ctx.group().members
    ctx.sleep(1)
    assert ctx.group().members == {} and ctx.group().static_members == {}


def test_the_session_timeout_setting_is_used() -> None:
    ctx = Context(
        group_consumer_session_timeout_ms=10_000,
        group_consumer_min_session_timeout_ms=10_000,
        group_consumer_heartbeat_interval_ms=1_000,
        group_consumer_min_heartbeat_interval_ms=1_000,
    )
    assert ctx.join(M1)["heartbeat_interval_ms"] == 1_000
    ctx.sleep(9_999)
    assert M1 in ctx.group().members
    ctx.sleep(1)
    assert M1 not in ctx.group().members


def test_a_member_that_does_not_revoke_in_time_is_fenced() -> None:
    """testRebalanceTimeoutLifecycle and testRebalanceTimeoutExpiration."""
    ctx = Context(topics={"foo": 3})
    ctx.join(M1, ["foo"], rebalance_timeout_ms=180_000)
    ctx.join(M2, ["foo"], rebalance_timeout_ms=90_000)
    m1 = ctx.heartbeat(M1, 1)  # asked to revoke: its rebalance timeout starts
    assert ctx.group().members[M1].state is MemberState.UNREVOKED_PARTITIONS
    assert assigned(m1) == {FOO: [0, 1]}
    for _ in range(4):  # it keeps heartbeating but never revokes
        ctx.sleep(40_000)
        ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1, 2]}))
        ctx.heartbeat(M2, 2)
    assert M1 in ctx.group().members
    ctx.sleep(20_000)
    assert M1 not in ctx.group().members  # 180 s after it was asked
    answer = ctx.heartbeat(M2, 2)
    assert assigned(answer) == {FOO: [0, 1, 2]} and answer["member_epoch"] == 3


def test_a_member_that_revokes_in_time_keeps_going() -> None:
    ctx = Context(topics={"foo": 3})
    ctx.join(M1, ["foo"], rebalance_timeout_ms=10_000)
    ctx.join(M2, ["foo"])
    ctx.heartbeat(M1, 1)
    ctx.sleep(5_000)
    ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1]}))
    ctx.heartbeat(M2, 2)
    ctx.sleep(10_000)
    assert set(ctx.group().members) == {M1, M2}
    assert "rebalance-timeout-" + M1 not in ctx.group().timers


def test_a_load_arms_sessions_and_rebalance_timeouts_again() -> None:
    """testOnLoaded."""
    ctx = Context(topics={"foo": 3})
    ctx.join(M1, ["foo"], rebalance_timeout_ms=30_000)
    ctx.join(M2, ["foo"])
    ctx.heartbeat(M1, 1)
    loaded = ctx.reloaded()
    group = loaded.group(GROUP)
    assert group is not None
    assert set(group.timers) >= {
        "session-timeout-" + M1,
        "session-timeout-" + M2,
        "rebalance-timeout-" + M1,
    }
    loaded.advance(ctx.now + 30_000)
    assert set(loaded.group(GROUP).members) == {M2}  # type: ignore[union-attr]


# --- topics ---------------------------------------------------------------------------------------


def test_a_partition_count_that_grows_triggers_a_new_target_assignment() -> None:
    """testSubscriptionMetadataRefreshedAfterGroupIsLoaded / testOnNewMetadataImage: the next
    heartbeat sees the new metadata, bumps the epoch and assigns the new partitions."""
    ctx = Context(topics={"foo": 2})
    ctx.join(M1, ["foo"])
    ctx.set_topics({"foo": 4})
    assert ctx.records() == []
    answer = ctx.heartbeat(M1, 1)
    assert (answer["member_epoch"], assigned(answer)) == (2, {FOO: [0, 1, 2, 3]})
    assert ctx.group().subscription_metadata["foo"].partitions == 4


def test_a_topic_created_after_the_subscription_is_assigned_once_it_exists() -> None:
    ctx = Context(topics={"foo": 2})
    ctx.join(M1, ["foo", "bar"])
    ctx.set_topics({"foo": 2, "bar": 1})
    answer = ctx.heartbeat(M1, 1)
    assert assigned(answer) == {FOO: [0, 1], BAR: [0]}


def test_a_deleted_topic_is_unassigned_and_its_offsets_deleted() -> None:
    ctx = Context(topics={"foo": 2, "bar": 1})
    ctx.join(M1, ["foo", "bar"])
    commit = ctx.send(
        {
            "api": "offset_commit",
            "member_id": M1,
            "generation_id": 1,
            "offsets": [{"topic": "bar", "partition": 0, "offset": 7}],
        }
    )
    assert commit["partitions"][0]["error"] is None
    ctx.records()
    ctx.set_topics({"foo": 2})
    assert ctx.group().offsets == {}
    answer = ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1], BAR: [0]}))
    assert assigned(answer) == {FOO: [0, 1]}


def test_a_regex_subscription_follows_the_topics_it_matches() -> None:
    ctx = Context(topics={"foo": 1, "bar": 1})
    answer = ctx.join(M1, subscribed_topic_regex="f.*")
    assert assigned(answer) == {FOO: [0]}
    assert ctx.group().resolved_regexes == {"f.*": ("foo",)}
    assert ("regular_expression", "f.*", False) in kinds(ctx.records())
    ctx.set_topics({"foo": 1, "bar": 1, "fizz": 2})
    answer = ctx.heartbeat(M1, 1)
    assert answer["member_epoch"] == 2
    fizz = ctx.c.topics.by_name("fizz")
    assert fizz is not None
    assert assigned(answer) == {FOO: [0], fizz.topic_id: [0, 1]}
    ctx.assert_at_rest_equals_load()
    ctx.heartbeat(M1, -1)
    assert ctx.group().resolved_regexes == {}  # no member uses it: tombstoned


def test_the_preferred_assignor_is_the_one_most_members_ask_for() -> None:
    ctx = Context(topics={"foo": 4, "bar": 4})
    ctx.join(M1, server_assignor="range")
    ctx.join(M2, server_assignor="range")
    describe = ctx.send({"api": "consumer_group_describe"})
    assert describe["assignor_name"] == "range"
    # range: co-partitioned topics line up
    target = ctx.group().target_assignment
    assert target[M1] == {FOO: frozenset({0, 1}), BAR: frozenset({0, 1})}
    assert target[M2] == {FOO: frozenset({2, 3}), BAR: frozenset({2, 3})}
