"""The other APIs on consumer groups, and classic and consumer groups on one id, as Kafka 4.0
answers them: ConsumerGroupDescribe, ListGroups types, OffsetCommit/OffsetFetch with member
epochs, OffsetDelete, DeleteGroups, DescribeGroups, the classic membership APIs, retention."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.group.model import ClassicGroup
from coordinator.modern.model import ConsumerGroup
from tests.consumer_groups import FOO, GROUP, M1, M2, Context, kinds, owned


def commit(ctx: Context, member_id: str, epoch: int, **fields: Any) -> dict[str, Any]:
    return ctx.send(
        {
            "api": "offset_commit",
            "member_id": member_id,
            "generation_id": epoch,
            "offsets": [{"topic": "foo", "partition": 0, "offset": 42}],
            **fields,
        }
    )


def fetch(ctx: Context, **fields: Any) -> dict[str, Any]:
    return ctx.send({"api": "offset_fetch", "partitions": None, **fields})


def classic_join(ctx: Context, group_id: str = GROUP) -> None:
    """A classic member joins (v3: no member id round trip); Kafka parks the join until the
    initial rebalance delay is over."""
    ctx.c.handle(
        {
            "api": "join_group",
            "request_id": "classic-join",
            "group_id": group_id,
            "member_id": "",
            "session_timeout_ms": 10_000,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
            "api_version": 3,
        },
        ctx.now,
    )
    ctx.sleep(0)


# --- ConsumerGroupDescribe ----------------------------------------------------------------------


def test_describe_shows_epochs_members_and_assignments_with_topic_names() -> None:
    ctx = Context(topics={"foo": 2})
    ctx.join(M1, ["foo"], client_id="app", client_host="/10.0.0.1", instance_id="i1")
    answer = ctx.send({"api": "consumer_group_describe"})
    assert answer["error"] is None
    assert (answer["group_state"], answer["group_epoch"], answer["assignment_epoch"]) == (
        "Stable",
        1,
        1,
    )
    assert answer["assignor_name"] == "uniform"
    [member] = answer["members"]
    expected = {"topic_partitions": [{"topic_id": FOO, "topic_name": "foo", "partitions": [0, 1]}]}
    assert member == {
        "member_id": M1,
        "instance_id": "i1",
        "rack_id": None,
        "member_epoch": 1,
        "client_id": "app",
        "client_host": "/10.0.0.1",
        "subscribed_topic_names": ["foo"],
        "subscribed_topic_regex": None,
        "assignment": expected,
        "target_assignment": expected,
        "member_type": 1,
    }


def test_describe_of_an_unknown_or_classic_group_is_group_id_not_found() -> None:
    ctx = Context()
    assert ctx.send({"api": "consumer_group_describe"})["error"] == "GROUP_ID_NOT_FOUND"
    classic_join(ctx, "classic")
    answer = ctx.send({"api": "consumer_group_describe", "group_id": "classic"})
    assert (answer["error"], answer["error_message"]) == (
        "GROUP_ID_NOT_FOUND",
        "Group classic is not a consumer group.",
    )
    assert ctx.send({"api": "consumer_group_describe", "group_id": ""})["error"] == (
        "INVALID_GROUP_ID"
    )


# --- ListGroups ---------------------------------------------------------------------------------


def test_list_groups_says_each_groups_type_and_filters_by_type_and_state() -> None:
    ctx = Context(topics={"foo": 2}, group_initial_rebalance_delay_ms=0)
    ctx.join(M1, ["foo"])
    ctx.join(M2, ["foo"])
    classic_join(ctx, "classic")

    def listed(**fields: Any) -> list[tuple[str, str, str, str]]:
        answer = ctx.send({"api": "list_groups", **fields})
        return [
            (g["group_id"], g["protocol_type"], g["group_state"], g["group_type"])
            for g in answer["groups"]
        ]

    consumer = (GROUP, "consumer", "Reconciling", "consumer")
    assert listed() == [("classic", "consumer", "CompletingRebalance", "classic"), consumer]
    assert listed(types_filter=["Consumer "]) == [consumer]
    assert listed(types_filter=["classic"])[0][0] == "classic"
    assert listed(types_filter=["share"]) == []
    assert listed(states_filter=["reconciling"]) == [consumer]
    assert listed(states_filter=["Stable"]) == []


# --- OffsetCommit and OffsetFetch -----------------------------------------------------------------


def test_a_member_commits_with_its_current_epoch_only() -> None:
    """OffsetCommit's generation id is the member epoch (testConsumerGroupOffsetCommit...)."""
    ctx = Context(topics={"foo": 2})
    ctx.join(M1, ["foo"])
    ctx.join(M2, ["foo"])  # epoch 2; M1 is still at epoch 1

    def error(answer: dict[str, Any]) -> str | None:
        return answer["partitions"][0]["error"]

    assert error(commit(ctx, M1, 2)) == "STALE_MEMBER_EPOCH"
    assert error(commit(ctx, "nobody", 1)) == "UNKNOWN_MEMBER_ID"
    assert error(commit(ctx, M1, 1, api_version=8)) == "UNSUPPORTED_VERSION"
    assert error(commit(ctx, "", -1)) == "UNKNOWN_MEMBER_ID"  # an admin commit to a live group
    assert error(commit(ctx, M1, 1)) is None
    answer = fetch(ctx)
    assert [(p["topic"], p["partition"], p["offset"]) for p in answer["partitions"]] == [
        ("foo", 0, 42)
    ]
    assert ctx.group().offsets[("foo", 0)].committed_offset == 42
    ctx.assert_at_rest_equals_load()


def test_an_admin_may_commit_to_a_consumer_group_with_no_members() -> None:
    ctx = Context(topics={"foo": 2})
    ctx.join(M1, ["foo"])
    ctx.heartbeat(M1, -1)
    assert commit(ctx, "", -1)["partitions"][0]["error"] is None


def test_offset_fetch_checks_the_member_epoch_from_v9() -> None:
    ctx = Context(topics={"foo": 2})
    ctx.join(M1, ["foo"])
    commit(ctx, M1, 1)
    ok = fetch(ctx, member_id=M1, member_epoch=1)
    assert ok["error"] is None and ok["partitions"][0]["offset"] == 42
    stale = fetch(ctx, member_id=M1, member_epoch=0)
    assert (stale["error"], stale["partitions"]) == ("STALE_MEMBER_EPOCH", [])
    assert fetch(ctx, member_id="", member_epoch=1)["error"] == "UNKNOWN_MEMBER_ID"
    assert fetch(ctx, member_id=None)["error"] is None  # the admin client
    # Before v9 there is no member: the fetch is an admin's.
    assert fetch(ctx, member_id="x", member_epoch=7, api_version=8)["error"] is None


def test_offset_delete_refuses_subscribed_topics_only() -> None:
    ctx = Context(topics={"foo": 2, "bar": 1})
    ctx.join(M1, ["foo"])
    commit(ctx, M1, 1, offsets=[{"topic": "bar", "partition": 0, "offset": 1}])
    commit(ctx, M1, 1)
    answer = ctx.send(
        {
            "api": "offset_delete",
            "partitions": [{"topic": "foo", "partition": 0}, {"topic": "bar", "partition": 0}],
        }
    )
    assert [p["error"] for p in answer["partitions"]] == ["GROUP_SUBSCRIBED_TO_TOPIC", None]
    assert set(ctx.group().offsets) == {("foo", 0)}


# --- DeleteGroups, DescribeGroups and the classic membership APIs --------------------------------


def test_only_an_empty_consumer_group_is_deleted_with_its_offsets() -> None:
    ctx = Context(topics={"foo": 2})
    ctx.join(M1, ["foo"])
    commit(ctx, M1, 1)
    assert ctx.send({"api": "delete_groups"})["error"] == "NON_EMPTY_GROUP"
    ctx.heartbeat(M1, -1)
    ctx.records()
    assert ctx.send({"api": "delete_groups"})["error"] is None
    assert [k for k in kinds(ctx.records()) if k[0] != "offset_commit"] == [
        ("target_assignment_metadata", None, True),
        ("partition_metadata", None, True),
        ("metadata", None, True),
    ]
    assert ctx.c.group(GROUP) is None
    assert ctx.send({"api": "delete_groups"})["error"] == "GROUP_ID_NOT_FOUND"


def test_describe_groups_answers_a_consumer_group_as_dead() -> None:
    ctx = Context()
    ctx.join(M1)
    answer = ctx.send({"api": "describe_groups"})
    assert (answer["error"], answer["group_state"], answer["members"]) == (None, "Dead", [])


def test_classic_requests_of_a_consumer_protocol_member_are_unknown_member() -> None:
    """A consumer-protocol member's classic requests (throwIfMemberDoesNotUseClassicProtocol),
    and a join whose protocol type the group cannot take (throwIfClassicProtocolIsNotSupported)."""
    ctx = Context()
    ctx.join(M1)
    join = ctx.send(
        {
            "api": "join_group",
            "member_id": "",
            "session_timeout_ms": 10_000,
            "protocol_type": "connect",
            "protocols": [{"name": "range", "metadata": b""}],
            "api_version": 5,
        }
    )
    assert join["error"] == "INCONSISTENT_GROUP_PROTOCOL" and join["generation_id"] == -1
    for api, fields in (
        ("heartbeat", {"member_id": M1, "generation_id": 1}),
        (
            "sync_group",
            {
                "member_id": M1,
                "generation_id": 1,
                "protocol_type": "consumer",
                "protocol_name": "range",
            },
        ),
    ):
        answer = ctx.send({"api": api, **fields})
        assert (answer["error"], answer["error_message"]) == (
            "UNKNOWN_MEMBER_ID",
            f"Member {M1} does not use the classic protocol.",
        )
    leave = ctx.send(
        {"api": "leave_group", "members": [{"member_id": M1, "group_instance_id": None}]}
    )
    assert [m["error"] for m in leave["members"]] == ["UNKNOWN_MEMBER_ID"]
    assert set(ctx.group().members) == {M1}


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_a_consumer_member_cannot_join_a_classic_group_with_members_without_upgrades(
    policy: str,
) -> None:
    ctx = Context(group_initial_rebalance_delay_ms=0, group_consumer_migration_policy=policy)
    classic_join(ctx)
    ctx.records()
    answer = ctx.join(M1)
    assert (answer["error"], answer["error_message"]) == (
        "GROUP_ID_NOT_FOUND",
        f"Group {GROUP} is not a consumer group.",
    )
    assert isinstance(ctx.c.group(GROUP), ClassicGroup) and ctx.records() == []


def test_a_classic_group_whose_subscriptions_do_not_parse_is_not_upgraded() -> None:
    ctx = Context(group_initial_rebalance_delay_ms=0)
    classic_join(ctx)  # its metadata is empty: no consumer-protocol subscription
    ctx.records()
    answer = ctx.join(M1)
    assert (answer["error"], answer["error_message"]) == (
        "GROUP_ID_NOT_FOUND",
        f"Cannot upgrade the classic group {GROUP} to consumer group because the embedded "
        "consumer protocol is malformed.",
    )
    assert isinstance(ctx.c.group(GROUP), ClassicGroup) and ctx.records() == []


def test_an_empty_classic_group_becomes_a_consumer_group_and_keeps_its_offsets() -> None:
    """getOrMaybeCreateConsumerGroup: an Empty classic group is deleted and replaced."""
    ctx = Context(topics={"foo": 2})
    simple = ctx.send(
        {
            "api": "offset_commit",
            "generation_id": -1,
            "offsets": [{"topic": "foo", "partition": 1, "offset": 9}],
        }
    )
    assert simple["partitions"][0]["error"] is None
    assert isinstance(ctx.c.group(GROUP), ClassicGroup)
    ctx.records()
    answer = ctx.join(M1, ["foo"])
    assert answer["error"] is None
    assert kinds(ctx.records())[0] == ("group_metadata", None, True)
    group = ctx.group()
    assert isinstance(group, ConsumerGroup) and group.offsets[("foo", 1)].committed_offset == 9
    ctx.assert_at_rest_equals_load()


def test_a_heartbeat_to_a_classic_group_is_group_id_not_found() -> None:
    ctx = Context(group_initial_rebalance_delay_ms=0)
    classic_join(ctx)
    answer = ctx.heartbeat(M1, 3)
    assert answer["error"] == "GROUP_ID_NOT_FOUND"
    assert ctx.heartbeat(M1, -1)["error"] == "GROUP_ID_NOT_FOUND"


# --- retention ------------------------------------------------------------------------------------


def test_an_empty_consumer_group_goes_once_its_offsets_expire() -> None:
    ctx = Context(topics={"foo": 2}, offsets_retention_minutes=1)
    ctx.join(M1, ["foo"])
    commit(ctx, M1, 1)
    # M1 is fenced after 45 s; the group, Empty, keeps its offset until it is a minute old and a
    # retention sweep (every 10 minutes) finds it.
    ctx.sleep(120_000)
    assert ctx.c.group(GROUP) is not None and ctx.group().members == {}
    ctx.sleep(600_000)
    assert ctx.c.group(GROUP) is None
    assert ctx.reloaded().group_ids() == []


def test_offsets_of_a_subscribed_topic_do_not_expire() -> None:
    ctx = Context(topics={"foo": 2, "bar": 1}, offsets_retention_minutes=1)
    ctx.join(M1, ["foo"])
    commit(ctx, M1, 1)
    commit(ctx, M1, 1, offsets=[{"topic": "bar", "partition": 0, "offset": 1}])
    for _ in range(16):
        ctx.sleep(40_000)
        ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1]}))
    assert set(ctx.group().offsets) == {("foo", 0)}


def test_the_replay_tool_takes_topic_lines() -> None:
    import io
    import json

    from coordinator import CoordinatorConfig, GroupCoordinator
    from coordinator.cli.replay import replay

    lines = [
        {"at_ms": 0, "topics": [{"name": "foo", "topic_id": FOO, "partitions": 2}]},
        {
            "at_ms": 1,
            "api": "consumer_group_heartbeat",
            "request_id": 1,
            "group_id": GROUP,
            "member_id": M1,
            "member_epoch": 0,
            "rebalance_timeout_ms": 1000,
            "subscribed_topic_names": ["foo"],
            "topic_partitions": [],
        },
        {"at_ms": 2, "topics": "not a list"},
    ]
    source = io.StringIO("".join(json.dumps(line) + "\n" for line in lines))
    emitted: list[tuple[int, dict[str, Any]]] = []
    warn = io.StringIO()
    engine = GroupCoordinator(CoordinatorConfig())
    problems = replay(
        [("in", source)], engine, lambda at, item: emitted.append((at, item)), None, warn
    )
    assert problems == 1 and "topics refused" in warn.getvalue()
    [(at, answer)] = emitted
    assert at == 1 and answer["assignment"]["topic_partitions"] == [
        {"topic_id": FOO, "partitions": [0, 1]}
    ]
    assert engine.topics.by_name("foo") is not None  # the bad list changed nothing


def test_a_classic_join_replaces_an_empty_consumer_group_and_keeps_its_offsets() -> None:
    """maybeDeleteEmptyConsumerGroup: the consumer group's records are tombstoned and the join
    creates a classic group, which keeps the committed offsets."""
    ctx = Context(topics={"foo": 2}, group_initial_rebalance_delay_ms=0)
    ctx.join(M1, ["foo"])
    commit(ctx, M1, 1)
    ctx.heartbeat(M1, -1)
    ctx.records()
    classic_join(ctx)
    written = kinds(ctx.records())
    assert written[:3] == [
        ("target_assignment_metadata", None, True),
        ("partition_metadata", None, True),
        ("metadata", None, True),
    ]
    group = ctx.c.group(GROUP)
    assert isinstance(group, ClassicGroup) and len(group.members) == 1
    assert group.offsets[("foo", 0)].committed_offset == 42
    loaded = ctx.reloaded().group(GROUP)
    assert isinstance(loaded, ClassicGroup) and ("foo", 0) in loaded.offsets
