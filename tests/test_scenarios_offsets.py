"""Scenarios 121-184 of kafka-group-protocol.md, section 14.5-14.9: committed offsets, retention,
deletion, loading and unloading ``__consumer_offsets``, and the records the engine writes.

One test per scenario, named after the catalogue number (168 has two more, for engine bugs kept
apart so that they do not hide the rest); each docstring quotes the Kafka test it comes from
(``GroupCoordinatorTest`` / ``GroupMetadataManagerTest`` at 3.9, or the 4.x Java port where the
engine follows 4.x). Not modelled by the engine, so not here: transactional offsets
(137-142 and the transactional halves of 164-165), failing log appends (134, 178), logging (150),
and log segments, read buffers and control batches (the mechanics of 172).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds
from coordinator.consumer_protocol import Subscription, encode_subscription
from coordinator.context import EXPIRY_KEY
from coordinator.group.states import GroupState
from coordinator.log import codec
from coordinator.log import records as log
from coordinator.log.codec import GroupMetadataValue, MemberMetadataValue, OffsetCommitValue
from coordinator.log.partitioning import partition_for
from coordinator.serde import DecodeError
from tests.support import GROUP_ID, OTHER_GROUP_ID, SESSION, STANDARD, Ctx, error

# --- helpers ----------------------------------------------------------------------------------

MINUTE_MS = 60_000
#: A sweep at every ``ctx.sleep`` (at the new time), and a one-minute retention.
SWEEPING = dataclasses.replace(
    STANDARD, offsets_retention_check_interval_ms=1, offsets_retention_minutes=1
)
LOAD_BUFFER_SIZE = 5_242_880  # offsets.load.buffer.size default
INSTANCE_ID = "groupInstanceId"  # GroupMetadataManagerTest.groupInstanceId


def partition_errors(response: dict[str, Any] | None) -> dict[tuple[str, int], str | None]:
    assert response is not None, "no response (yet)"
    return {(p["topic"], p["partition"]): p["error"] for p in response["partitions"]}


def commit_errors(ctx: Ctx, rid: str) -> dict[tuple[str, int], str | None]:
    return partition_errors(ctx.answer(rid))


def shape(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(record type, topic, partition, is tombstone) of each record."""
    return [(r["record_type"], r["topic"], r["partition"], r["value"] is None) for r in records]


def value_version(record: dict[str, Any]) -> int:
    value = record["value"]
    assert value is not None
    return int(struct.unpack(">h", value[:2])[0])


def sub(*topics: str) -> bytes:
    return encode_subscription(Subscription(topics=tuple(topics)))


def offset_record(
    topic: str,
    partition: int,
    offset: int,
    *,
    commit_ms: int = 0,
    expire_ms: int | None = None,
    group_id: str = GROUP_ID,
    version: int | None = None,
) -> dict[str, Any]:
    """An OffsetCommit record as Kafka's bytes (``createCommittedOffsetRecords``)."""
    value = OffsetCommitValue(
        offset=offset,
        leader_epoch=None,
        metadata="",
        commit_timestamp_ms=commit_ms,
        expire_timestamp_ms=expire_ms,
    )
    record = log.record_from_bytes(
        codec.encode_offset_commit_key(group_id, topic, partition),
        codec.encode_offset_commit_value(value, version),
    )
    assert record is not None
    return record


def offset_records(offsets: dict[tuple[str, int], int], **kw: Any) -> list[dict[str, Any]]:
    return [offset_record(t, p, o, **kw) for (t, p), o in offsets.items()]


def member_value(
    member_id: str,
    *,
    instance_id: str | None = INSTANCE_ID,
    subscription: bytes = b"",
    assignment: bytes = b"",
    session: int = 10_000,
    rebalance: int = 30_000,
) -> MemberMetadataValue:
    return MemberMetadataValue(
        member_id=member_id,
        group_instance_id=instance_id,
        client_id="clientId",
        client_host="clientHost",
        rebalance_timeout_ms=rebalance,
        session_timeout_ms=session,
        subscription=subscription,
        assignment=assignment,
    )


def group_record(
    generation: int,
    *,
    protocol_type: str = "consumer",
    protocol: str | None = None,
    members: tuple[MemberMetadataValue, ...] = (),
    timestamp_ms: int | None = 0,
    version: int = 3,
    group_id: str = GROUP_ID,
) -> dict[str, Any]:
    """A GroupMetadata record as Kafka's bytes; the leader is the first member."""
    value = GroupMetadataValue(
        protocol_type=protocol_type,
        generation_id=generation,
        protocol_name=protocol,
        leader=members[0].member_id if members else None,
        current_state_timestamp_ms=timestamp_ms,
        members=members,
    )
    record = log.record_from_bytes(
        codec.encode_group_metadata_key(group_id),
        codec.encode_group_metadata_value(value, version),
    )
    assert record is not None
    return record


def stable_record(
    generation: int, member_id: str, *, protocol: str = "range", **kw: Any
) -> dict[str, Any]:
    """``buildStableGroupRecordWithMember``: one static member, empty subscription."""
    assignment = kw.pop("assignment", b"")
    version = kw.pop("version", 3)
    return group_record(
        generation,
        protocol=protocol,
        members=(member_value(member_id, assignment=assignment),),
        version=version,
        **kw,
    )


def group_tombstone_record(group_id: str = GROUP_ID) -> dict[str, Any]:
    record = log.record_from_bytes(codec.encode_group_metadata_key(group_id), None)
    assert record is not None
    return record


def offset_tombstone_record(topic: str, partition: int) -> dict[str, Any]:
    record = log.record_from_bytes(codec.encode_offset_commit_key(GROUP_ID, topic, partition), None)
    assert record is not None
    return record


def loaded(
    records: list[dict[str, Any]], now_ms: int = 1_000, config: CoordinatorConfig = STANDARD
) -> Ctx:
    """A context whose coordinator was loaded from ``records`` (failover) at ``now_ms``."""
    ctx = Ctx(config, now_ms=now_ms)
    ctx.c = GroupCoordinator.from_records(
        records, config, now_ms, id_source=SequentialIds(), owned_partitions=(0,)
    )
    return ctx


def offsets_of(ctx: Ctx, group_id: str = GROUP_ID) -> dict[tuple[str, int], int]:
    return {k: v.committed_offset for k, v in ctx.group(group_id).offsets.items()}


def joined_member(ctx: Ctx, **kwargs: Any) -> tuple[str, int]:
    """*join(x)*: a dynamic member alone in a new group, join completed (CompletingRebalance)."""
    member, rid = ctx.dynamic_join(**kwargs)
    ctx.sleep(STANDARD.group_initial_rebalance_delay_ms + 1)
    answer = ctx.answer(rid)
    assert answer is not None and answer["error"] is None, answer
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    return member, answer["generation_id"]


def unload(ctx: Ctx) -> None:
    """The coordinator resigns partition 0; its answers go through the harness's checks."""
    ctx._seen(ctx.c.unload_partition(0, ctx.now))


def left(ctx: Ctx, member: str) -> None:
    response = ctx.answer(ctx.leave([(member, None)]))
    assert error(response) is None
    assert all(m["error"] is None for m in response["members"]), response
    assert ctx.group().state is GroupState.EMPTY


# --- 14.5 Offsets -----------------------------------------------------------------------------


def test_s121_commit_offset_from_unknown_group() -> None:
    """testCommitOffsetFromUnknownGroup (4.x: testOffsetCommitWithUnknownGroup)."""
    ctx = Ctx()
    v9 = ctx.commit({("topic", 0): 0}, member_id="memberId", generation=1)
    assert commit_errors(ctx, v9) == {("topic", 0): "GROUP_ID_NOT_FOUND"}
    v8 = ctx.commit({("topic", 0): 0}, member_id="memberId", generation=1, version=8)
    assert commit_errors(ctx, v8) == {("topic", 0): "ILLEGAL_GENERATION"}
    assert ctx.c.group(GROUP_ID) is None
    assert ctx.records == []
    assert ctx.fetched([("topic", 0)]) == {("topic", 0): -1}


def test_s122_commit_offset_with_default_generation() -> None:
    """testCommitOffsetWithDefaultGeneration."""
    ctx = Ctx()
    rid = ctx.commit({("topic", 0): 0}, member_id="", generation=-1)
    assert commit_errors(ctx, rid) == {("topic", 0): None}
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.protocol_type is None and group.generation_id == 0
    assert shape(ctx.records) == [("offset_commit", "topic", 0, False)]
    assert ctx.fetched([("topic", 0)]) == {("topic", 0): 0}


def test_s123_commit_offsets_after_group_is_empty() -> None:
    """testCommitOffsetsAfterGroupIsEmpty."""
    ctx = Ctx()
    member, _ = joined_member(ctx)
    left(ctx, member)
    rid = ctx.commit({("topic", 0): 0}, member_id="", generation=-1)
    assert commit_errors(ctx, rid) == {("topic", 0): None}
    response = ctx.fetch([("topic", 0)])
    assert error(response) is None
    assert ctx.fetched([("topic", 0)]) == {("topic", 0): 0}


def test_s124_fetch_offsets() -> None:
    """testFetchOffsets."""
    ctx = Ctx()
    rid = ctx.commit({("topic", 0): (97, "some metadata", 15)})
    assert commit_errors(ctx, rid) == {("topic", 0): None}
    response = ctx.fetch([("topic", 0)])
    assert error(response) is None
    [partition] = response["partitions"]
    assert partition["offset"] == 97
    assert partition["metadata"] == "some metadata"
    assert partition["leader_epoch"] == 15
    assert partition["error"] is None
    # ... and so after a failover.
    rebuilt = ctx.rebuilt().group(GROUP_ID)
    assert rebuilt is not None
    assert rebuilt.offsets[("topic", 0)].leader_epoch == 15
    assert rebuilt.offsets[("topic", 0)].metadata == "some metadata"


def test_s125_commit_and_fetch_offsets_with_empty_group() -> None:
    """testCommitAndFetchOffsetsWithEmptyGroup."""
    ctx = Ctx()
    rid = ctx.commit({("topic", 0): 0}, group_id="")
    assert commit_errors(ctx, rid) == {("topic", 0): None}
    fetched = ctx.fetch([("topic", 0)], group_id="")
    assert error(fetched) is None
    assert ctx.fetched([("topic", 0)], group_id="") == {("topic", 0): 0}
    described = ctx.describe("")
    assert error(described) is None and described["group_state"] == "Empty"
    assert error(ctx.delete_group("")) is None
    after = ctx.fetch([("topic", 0)], group_id="")
    assert error(after) is None
    assert ctx.fetched([("topic", 0)], group_id="") == {("topic", 0): -1}
    assert ctx.c.group("") is None


def test_s126_fetch_offset_for_unknown_partition() -> None:
    """testFetchOffsetForUnknownPartition."""
    ctx = Ctx()
    response = ctx.fetch([("topic", 0)])
    assert error(response) is None
    assert response["partitions"] == [
        {
            "topic": "topic",
            "partition": 0,
            "offset": -1,
            "leader_epoch": -1,
            "metadata": "",
            "error_code": 0,
            "error": None,
        }
    ]


def test_s127_fetch_offset_not_coordinator_for_group() -> None:
    """testFetchOffsetNotCoordinatorForGroup."""
    ctx = Ctx()
    response = ctx.fetch([("topic", 0)], group_id=OTHER_GROUP_ID)
    assert error(response) == "NOT_COORDINATOR"
    assert response["partitions"] == []


def test_s128_fetch_all_offsets() -> None:
    """testFetchAllOffsets."""
    ctx = Ctx()
    empty = ctx.fetch(None)
    assert error(empty) is None and empty["partitions"] == []
    rid = ctx.commit({("topic", 0): 15, ("topic", 1): 16, ("other-topic", 0): 17})
    assert set(commit_errors(ctx, rid).values()) == {None}
    response = ctx.fetch(None)
    assert error(response) is None
    assert all(p["error"] is None for p in response["partitions"])
    assert ctx.fetched(None) == {("topic", 0): 15, ("topic", 1): 16, ("other-topic", 0): 17}
    assert len(response["partitions"]) == 3


def test_s129_commit_offset_in_completing_rebalance() -> None:
    """testCommitOffsetInCompletingRebalance, ...FromUnknownMemberId, ...FromIllegalGeneration."""
    ctx = Ctx()
    member, generation = joined_member(ctx)
    assert generation == 1
    tp = ("topic", 0)
    rid = ctx.commit({tp: 0}, member_id=member, generation=generation)
    assert commit_errors(ctx, rid) == {tp: "REBALANCE_IN_PROGRESS"}
    rid = ctx.commit({tp: 0}, member_id="", generation=generation)
    assert commit_errors(ctx, rid) == {tp: "UNKNOWN_MEMBER_ID"}
    rid = ctx.commit({tp: 0}, member_id=member, generation=generation + 1)
    assert commit_errors(ctx, rid) == {tp: "ILLEGAL_GENERATION"}
    assert [r for r in ctx.records if r["record_type"] == "offset_commit"] == []
    assert ctx.fetched([tp]) == {tp: -1}


def test_s130_manual_commit_offset_should_not_validate_member_id_and_instance_id() -> None:
    """testManualCommitOffsetShouldNotValidateMemberIdAndInstanceId."""
    ctx = Ctx()
    tp = ("topic", 0)
    rid = ctx.commit({tp: 0}, member_id="", generation=-1, instance_id="instance-id")
    assert commit_errors(ctx, rid) == {tp: None}
    rid = ctx.commit({tp: 1}, member_id="unknown", generation=-1)
    assert commit_errors(ctx, rid) == {tp: None}
    assert ctx.fetched([tp]) == {tp: 1}


def test_s131_offset_commit_dead_group() -> None:
    """testOffsetCommitDeadGroup (4.x: testGenericGroupOffsetCommitWithDeadGroup)."""
    ctx = Ctx()
    ctx.commit({("seed", 0): 1})
    ctx.group().transition_to(GroupState.DEAD, ctx.now)  # as the Kafka test does
    written = len(ctx.records)
    rid = ctx.commit({("topic", 0): 0}, member_id="memberId", generation=1)
    assert commit_errors(ctx, rid) == {("topic", 0): "COORDINATOR_NOT_AVAILABLE"}
    rid = ctx.commit({("topic", 0): 0})
    assert commit_errors(ctx, rid) == {("topic", 0): "COORDINATOR_NOT_AVAILABLE"}
    assert len(ctx.records) == written
    # A Dead group has no offsets to fetch (4.x testGenericGroupFetchOffsetsWithDeadGroup).
    assert ctx.fetched([("seed", 0)]) == {("seed", 0): -1}


def test_s132_commit_offset() -> None:
    """testCommitOffset."""
    ctx = loaded([group_record(0, protocol_type="")])  # Kafka: new GroupMetadata(groupId, Empty)
    assert ctx.group().state is GroupState.EMPTY
    rid = ctx.commit({("foo", 0): 37}, member_id="")
    assert commit_errors(ctx, rid) == {("foo", 0): None}
    assert shape(ctx.records) == [("offset_commit", "foo", 0, False)]
    assert ctx.records[0]["committed_offset"] == 37
    assert ctx.records[0]["timestamp_ms"] == ctx.now
    response = ctx.fetch([("foo", 0)])
    assert response["partitions"][0]["error"] is None
    assert ctx.fetched([("foo", 0)]) == {("foo", 0): 37}


def test_s133_commit_offset_when_coordinator_has_moved() -> None:
    """testCommitOffsetWhenCoordinatorHasMoved."""
    ctx = Ctx()
    ctx.commit({("foo", 0): 1})
    assert ctx.c.unload_partition(0, ctx.now) == []
    written = len(ctx.records)
    rid = ctx.commit({("foo", 0): 37})
    assert commit_errors(ctx, rid) == {("foo", 0): "NOT_COORDINATOR"}
    assert error(ctx.answer(rid)) == "NOT_COORDINATOR"
    assert len(ctx.records) == written


def test_s135_offset_metadata_too_large() -> None:
    """testOffsetMetadataTooLarge."""
    ctx = Ctx()
    limit = STANDARD.offset_metadata_max_bytes
    rid = ctx.commit({("foo", 0): (37, "s" * (limit + 1))})
    assert commit_errors(ctx, rid) == {("foo", 0): "OFFSET_METADATA_TOO_LARGE"}
    assert ctx.records == []
    assert ctx.fetched([("foo", 0)]) == {("foo", 0): -1}
    # The limit itself is allowed, counted in UTF-16 code units (an emoji counts two).
    rid = ctx.commit({("foo", 1): (37, "s" * limit)})
    assert commit_errors(ctx, rid) == {("foo", 1): None}
    rid = ctx.commit({("foo", 2): (37, "\U0001f600" * (limit // 2) + "s")})
    assert commit_errors(ctx, rid) == {("foo", 2): "OFFSET_METADATA_TOO_LARGE"}


def test_s136_offset_metadata_too_large_partial_failure() -> None:
    """testOffsetMetadataTooLargePartialFailure."""
    ctx = Ctx()
    too_large = "s" * (STANDARD.offset_metadata_max_bytes + 1)
    rid = ctx.commit({("foo", 0): (37, too_large), ("foo", 1): (37, "")})
    assert ctx.answer(rid)["partitions"] == [
        {"topic": "foo", "partition": 0, "error_code": 12, "error": "OFFSET_METADATA_TOO_LARGE"},
        {"topic": "foo", "partition": 1, "error_code": 0, "error": None},
    ]
    assert shape(ctx.records) == [("offset_commit", "foo", 1, False)]
    response = ctx.fetch([("foo", 0), ("foo", 1)], require_stable=True)
    assert [p["error"] for p in response["partitions"]] == [None, None]
    assert ctx.fetched([("foo", 0), ("foo", 1)]) == {("foo", 0): -1, ("foo", 1): 37}


# --- 14.6 Retention ---------------------------------------------------------------------------


def test_s143_expire_offset() -> None:
    """testExpireOffset."""
    ctx = Ctx(SWEEPING)
    ctx.commit({("foo", 0): 37}, retention_ms=1, version=2)
    ctx.commit({("foo", 1): 37}, retention_ms=3, version=2)
    written = len(ctx.records)
    ctx.sleep(2)
    assert shape(ctx.records[written:]) == [("offset_commit", "foo", 0, True)]
    assert ctx.group().state is GroupState.EMPTY
    assert set(ctx.group().offsets) == {("foo", 1)}
    assert ctx.fetched([("foo", 0), ("foo", 1)]) == {("foo", 0): -1, ("foo", 1): 37}


def test_s144_group_metadata_removal() -> None:
    """testGroupMetadataRemoval, testGroupMetadataRemovalWithLogAppendTime."""
    ctx = loaded([group_record(5, protocol_type="")], now_ms=1_000, config=SWEEPING)
    assert ctx.group().generation_id == 5 and ctx.group().state is GroupState.EMPTY
    ctx.sleep(1)
    assert shape(ctx.records) == [("group_metadata", None, None, True)]
    [tombstone] = ctx.records
    assert tombstone["timestamp_ms"] > 0
    assert codec.decode_key(tombstone["key"]) == codec.GroupMetadataKey(GROUP_ID)
    assert ctx.c.group(GROUP_ID) is None
    assert ctx.fetched([("foo", 0), ("foo", 1)]) == {("foo", 0): -1, ("foo", 1): -1}


def test_s145_expire_group_with_offsets_only() -> None:
    """testExpireGroupWithOffsetsOnly (4.x: the group tombstone is written too)."""
    ctx = Ctx(SWEEPING)
    ctx.commit({("foo", 0): 37}, retention_ms=1, version=2)
    ctx.commit({("foo", 1): 37}, retention_ms=3, version=2)
    written = len(ctx.records)
    ctx.sleep(4)
    new = ctx.records[written:]
    assert shape(new) == [
        ("offset_commit", "foo", 0, True),
        ("offset_commit", "foo", 1, True),
        ("group_metadata", None, None, True),
    ]
    for record in new[:2]:
        key = codec.decode_key(record["key"])
        assert isinstance(key, codec.OffsetCommitKey)
        assert key.group == GROUP_ID and key.topic == "foo"
    assert ctx.c.group(GROUP_ID) is None
    assert ctx.fetched([("foo", 0), ("foo", 1)]) == {("foo", 0): -1, ("foo", 1): -1}


def active_group_with_expiring_offsets(ctx: Ctx, *, unsubscribed: bool = False) -> tuple[str, int]:
    """testOffsetExpirationSemantics' setup: a consumer group of one member subscribed to foo,
    with three offsets committed at once, two with explicit (OffsetCommit v2) expiry two and
    four ms later, one without; then the leader rejoins (CompletingRebalance). With
    ``unsubscribed``, also an offset of topic bar (not subscribed) expiring two ms later.
    Returns (member, commit time)."""
    member, generation = joined_member(ctx, protos=[("range", sub("foo"))])
    assert error(ctx.answer(ctx.sync(member, generation, {member: b""}))) is None
    assert ctx.group().subscribed_topics == frozenset({"foo"})
    start = ctx.now
    expiring = [(("foo", 0), 2), (("foo", 1), 4)]
    if unsubscribed:
        expiring.append((("bar", 0), 2))
    for tp, retention in expiring:
        rid = ctx.commit(
            {tp: 37}, member_id=member, generation=generation, retention_ms=retention, version=2
        )
        assert commit_errors(ctx, rid) == {tp: None}
    rid = ctx.commit({("foo", 2): 37}, member_id=member, generation=generation)
    assert commit_errors(ctx, rid) == {("foo", 2): None}
    ctx.join(member, protos=[("range", sub("foo"))])
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    return member, start


FOO = [("foo", 0), ("foo", 1), ("foo", 2)]


def test_s146_offset_expiration_semantics_active_group() -> None:
    """testOffsetExpirationSemantics (first part: nothing expires while the group is active)."""
    ctx = Ctx(SWEEPING)
    _, start = active_group_with_expiring_offsets(ctx, unsubscribed=True)
    written = len(ctx.records)
    ctx.sleep(2)  # the first offset's expire timestamp is reached
    ctx.sleep(5)  # ... and the second's
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    assert ctx.records[written:] == []
    # Not even the offset of a topic the group does not subscribe to expires.
    assert ctx.fetched([*FOO, ("bar", 0)]) == {tp: 37 for tp in [*FOO, ("bar", 0)]}
    offsets = ctx.group().offsets
    assert offsets[("foo", 0)].expire_timestamp_ms == start + 2
    assert offsets[("foo", 1)].expire_timestamp_ms == start + 4
    assert offsets[("foo", 2)].expire_timestamp_ms is None


def test_s147_offset_expiration_semantics_after_group_is_empty() -> None:
    """testOffsetExpirationSemantics (the group is forced Empty, then offsets expire in turn)."""
    ctx = Ctx(SWEEPING)
    member, start = active_group_with_expiring_offsets(ctx)
    ctx.sleep(2)  # the first offset's expire timestamp; the group is still active
    assert ctx.now == start + 2
    assert ctx.fetched(FOO) == {tp: 37 for tp in FOO}
    left(ctx, member)
    empty_since = ctx.now
    assert ctx.group().current_state_timestamp_ms == empty_since
    written = len(ctx.records)
    ctx.sleep(1)  # start + 3: only the first offset expires
    assert shape(ctx.records[written:]) == [("offset_commit", "foo", 0, True)]
    assert ctx.fetched(FOO) == {("foo", 0): -1, ("foo", 1): 37, ("foo", 2): 37}
    ctx.sleep(1)  # start + 4: the second
    assert ctx.fetched(FOO) == {("foo", 0): -1, ("foo", 1): -1, ("foo", 2): 37}
    written = len(ctx.records)
    ctx.sleep(empty_since + SWEEPING.offsets_retention_ms - ctx.now - 1)
    assert ctx.records[written:] == []
    assert ctx.fetched(FOO) == {("foo", 0): -1, ("foo", 1): -1, ("foo", 2): 37}
    ctx.sleep(2)
    assert shape(ctx.records[written:]) == [
        ("offset_commit", "foo", 2, True),
        ("group_metadata", None, None, True),
    ]
    assert ctx.c.group(GROUP_ID) is None
    assert ctx.describe()["group_state"] == "Dead"
    assert ctx.fetched(FOO) == {tp: -1 for tp in FOO}
    assert ctx.rebuilt().group(GROUP_ID) is None


def test_s148_offset_expiration_of_simple_consumer() -> None:
    """testOffsetExpirationOfSimpleConsumer."""
    ctx = Ctx(SWEEPING)
    ctx.commit({("foo", 0): 37}, member_id="memberId")
    commit_ms = ctx.now
    written = len(ctx.records)
    ctx.sleep(commit_ms + SWEEPING.offsets_retention_ms - ctx.now - 1)
    assert ctx.records[written:] == []
    assert ctx.fetched([("foo", 0)]) == {("foo", 0): 37}
    ctx.sleep(1)  # Kafka sleeps 2; the rule is now - commit >= retention, so 1 is enough
    assert ctx.now == commit_ms + SWEEPING.offsets_retention_ms
    assert shape(ctx.records[written:]) == [
        ("offset_commit", "foo", 0, True),
        ("group_metadata", None, None, True),
    ]
    assert ctx.c.group(GROUP_ID) is None
    assert ctx.fetched([("foo", 0)]) == {("foo", 0): -1}


def test_s149_offset_expiration_of_active_group_semantics() -> None:
    """testOffsetExpirationOfActiveGroupSemantics."""
    ctx = Ctx(SWEEPING)
    long_session = {"session": 4 * MINUTE_MS, "rebalance": 4 * MINUTE_MS}
    member, generation = joined_member(ctx, protos=[("range", sub("foo", "bar"))], **long_session)
    assert error(ctx.answer(ctx.sync(member, generation, {member: b""}))) is None
    assert ctx.group().subscribed_topics == frozenset({"foo", "bar"})
    tps = [("foo", 0), ("foo", 1), ("bar", 0), ("bar", 1)]
    rid = ctx.commit(dict.fromkeys(tps, 37), member_id=member, generation=generation)
    assert set(commit_errors(ctx, rid).values()) == {None}
    written = len(ctx.records)
    ctx.sleep(SWEEPING.offsets_retention_ms + 2)
    assert ctx.group().state is GroupState.STABLE
    assert ctx.records[written:] == []
    assert ctx.fetched(tps) == dict.fromkeys(tps, 37)
    # The member now subscribes to foo only: a new generation, Stable again.
    rejoin = ctx.join(member, protos=[("range", sub("foo"))], **long_session)
    answer = ctx.answer(rejoin)
    assert answer is not None and answer["error"] is None
    assert error(ctx.answer(ctx.sync(member, answer["generation_id"], {member: b""}))) is None
    assert ctx.group().state is GroupState.STABLE
    assert ctx.group().subscribed_topics == frozenset({"foo"})
    written = len(ctx.records)
    ctx.sleep(1)
    assert shape(ctx.records[written:]) == [
        ("offset_commit", "bar", 0, True),
        ("offset_commit", "bar", 1, True),
    ]
    assert ctx.group().state is GroupState.STABLE
    assert ctx.fetched(tps) == {("foo", 0): 37, ("foo", 1): 37, ("bar", 0): -1, ("bar", 1): -1}


# --- 14.7 Deletion ----------------------------------------------------------------------------


def test_s151_delete_non_empty_group() -> None:
    """testDeleteNonEmptyGroup."""
    ctx = Ctx()
    joined_member(ctx)
    written = len(ctx.records)
    assert error(ctx.delete_group()) == "NON_EMPTY_GROUP"
    assert ctx.records[written:] == []
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE


def test_s152_delete_group_with_invalid_group_id_or_wrong_coordinator() -> None:
    """testDeleteGroupWithInvalidGroupId, testDeleteGroupWithWrongCoordinator."""
    ctx = Ctx()
    assert error(ctx.delete_group(None)) == "INVALID_GROUP_ID"  # type: ignore[arg-type]
    assert error(ctx.delete_group(OTHER_GROUP_ID)) == "NOT_COORDINATOR"


def test_s153_delete_empty_group() -> None:
    """testDeleteEmptyGroup."""
    ctx = Ctx()
    member, _ = joined_member(ctx)
    left(ctx, member)
    written = len(ctx.records)
    assert error(ctx.delete_group()) is None
    assert shape(ctx.records[written:]) == [("group_metadata", None, None, True)]
    assert ctx.c.group(GROUP_ID) is None
    assert ctx.rebuilt().group(GROUP_ID) is None


def test_s154_delete_empty_group_with_stored_offsets() -> None:
    """testDeleteEmptyGroupWithStoredOffsets."""
    ctx = Ctx()
    member, generation = joined_member(ctx)
    assert error(ctx.answer(ctx.sync(member, generation, {member: b""}))) is None
    rid = ctx.commit({("topic", 0): 0}, member_id=member, generation=generation)
    assert commit_errors(ctx, rid) == {("topic", 0): None}
    described = ctx.describe()
    assert described["group_state"] == "Stable"
    assert [m["member_id"] for m in described["members"]] == [member]
    left(ctx, member)
    written = len(ctx.records)
    assert error(ctx.delete_group()) is None
    assert shape(ctx.records[written:]) == [
        ("offset_commit", "topic", 0, True),
        ("group_metadata", None, None, True),
    ]
    assert ctx.describe()["group_state"] == "Dead"
    assert ctx.fetched([("topic", 0)]) == {("topic", 0): -1}
    rebuilt = Ctx()
    rebuilt.c = ctx.rebuilt()
    assert rebuilt.describe()["group_state"] == "Dead"
    assert rebuilt.fetched([("topic", 0)]) == {("topic", 0): -1}


def test_s155_delete_offset_of_non_existing_group() -> None:
    """testDeleteOffsetOfNonExistingGroup."""
    ctx = Ctx()
    response = ctx.delete_offsets([("foo", 0)])
    assert error(response) == "GROUP_ID_NOT_FOUND"
    assert response["partitions"] == []
    assert ctx.records == []


def test_s156_delete_offset_of_non_empty_non_consumer_group() -> None:
    """testDeleteOffsetOfNonEmptyNonConsumerGroup."""
    ctx = Ctx()
    ctx.dynamic_join(protocol_type="My Protocol")
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    response = ctx.delete_offsets([("foo", 0)])
    assert error(response) == "NON_EMPTY_GROUP"
    assert response["partitions"] == []
    ctx.sleep(STANDARD.group_initial_rebalance_delay_ms + 1)
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    assert error(ctx.delete_offsets([("foo", 0)])) == "NON_EMPTY_GROUP"


def test_s157_delete_offset_of_empty_non_consumer_group() -> None:
    """testDeleteOffsetOfEmptyNonConsumerGroup."""
    ctx = Ctx()
    member, generation = joined_member(ctx, protocol_type="My Protocol")
    sync = ctx.sync(member, generation, {}, protocol_type="My Protocol")
    assert error(ctx.answer(sync)) is None
    rid = ctx.commit({("foo", 0): 37, ("bar", 0): 37}, member_id=member, generation=generation)
    assert commit_errors(ctx, rid) == {("foo", 0): None, ("bar", 0): None}
    left(ctx, member)
    written = len(ctx.records)
    response = ctx.delete_offsets([("foo", 0)])
    assert error(response) is None
    assert partition_errors(response) == {("foo", 0): None}
    assert shape(ctx.records[written:]) == [("offset_commit", "foo", 0, True)]
    assert ctx.fetched([("foo", 0), ("bar", 0)]) == {("foo", 0): -1, ("bar", 0): 37}


def test_s158_delete_offset_of_consumer_group_with_unparsable_protocol() -> None:
    """testDeleteOffsetOfConsumerGroupWithUnparsableProtocol."""
    ctx = Ctx()
    member, generation = joined_member(ctx)  # subscription metadata b"": unparsable
    assert error(ctx.answer(ctx.sync(member, generation, {}))) is None
    assert ctx.group().state is GroupState.STABLE
    assert ctx.group().subscribed_topics is None
    rid = ctx.commit({("foo", 0): 37}, member_id=member, generation=generation)
    assert commit_errors(ctx, rid) == {("foo", 0): None}
    written = len(ctx.records)
    response = ctx.delete_offsets([("foo", 0)])
    assert error(response) is None
    assert partition_errors(response) == {("foo", 0): "GROUP_SUBSCRIBED_TO_TOPIC"}
    assert ctx.records[written:] == []
    assert ctx.fetched([("foo", 0)]) == {("foo", 0): 37}


def test_s159_delete_offset_of_dead_consumer_group() -> None:
    """testDeleteOffsetOfDeadConsumerGroup."""
    ctx = Ctx()
    member, _ = joined_member(ctx)
    left(ctx, member)
    assert ctx.group().protocol_type == "consumer"
    ctx.group().transition_to(GroupState.DEAD, ctx.now)  # as the Kafka test does
    response = ctx.delete_offsets([("foo", 0)])
    assert error(response) == "GROUP_ID_NOT_FOUND"
    assert response["partitions"] == []


def test_s160_delete_offset_of_empty_consumer_group() -> None:
    """testDeleteOffsetOfEmptyConsumerGroup."""
    ctx = Ctx()
    member, generation = joined_member(ctx)
    assert error(ctx.answer(ctx.sync(member, generation, {}))) is None
    rid = ctx.commit({("foo", 0): 37, ("bar", 0): 37}, member_id=member, generation=generation)
    assert commit_errors(ctx, rid) == {("foo", 0): None, ("bar", 0): None}
    left(ctx, member)
    written = len(ctx.records)
    response = ctx.delete_offsets([("foo", 0)])
    assert error(response) is None
    assert partition_errors(response) == {("foo", 0): None}
    assert shape(ctx.records[written:]) == [("offset_commit", "foo", 0, True)]
    assert ctx.fetched([("foo", 0), ("bar", 0)]) == {("foo", 0): -1, ("bar", 0): 37}
    # Deleting an offset that does not exist answers NONE and writes nothing.
    written = len(ctx.records)
    assert partition_errors(ctx.delete_offsets([("foo", 0)])) == {("foo", 0): None}
    assert ctx.records[written:] == []
    # 4.x: a group left Empty without offsets is kept until the next sweep deletes it.
    assert partition_errors(ctx.delete_offsets([("bar", 0)])) == {("bar", 0): None}
    assert ctx.group().state is GroupState.EMPTY and not ctx.group().offsets
    written = len(ctx.records)
    ctx.sleep(STANDARD.offsets_retention_check_interval_ms)
    assert shape(ctx.records[written:]) == [("group_metadata", None, None, True)]
    assert ctx.c.group(GROUP_ID) is None


def test_s161_delete_offset_of_stable_consumer_group() -> None:
    """testDeleteOffsetOfStableConsumerGroup."""
    ctx = Ctx()
    member, generation = joined_member(ctx, protos=[("protocol", sub("bar"))])
    sync = ctx.sync(member, generation, {}, protocol_name="protocol")
    assert error(ctx.answer(sync)) is None
    rid = ctx.commit({("foo", 0): 37, ("bar", 0): 37}, member_id=member, generation=generation)
    assert commit_errors(ctx, rid) == {("foo", 0): None, ("bar", 0): None}
    assert ctx.group().state is GroupState.STABLE
    written = len(ctx.records)
    response = ctx.delete_offsets([("foo", 0), ("bar", 0)])
    assert error(response) is None
    assert partition_errors(response) == {
        ("foo", 0): None,
        ("bar", 0): "GROUP_SUBSCRIBED_TO_TOPIC",
    }
    assert shape(ctx.records[written:]) == [("offset_commit", "foo", 0, True)]
    assert ctx.fetched([("foo", 0), ("bar", 0)]) == {("foo", 0): -1, ("bar", 0): 37}


# --- 14.8 Load on failover and unload ---------------------------------------------------------

COMMITTED = {("foo", 0): 23, ("foo", 1): 455, ("bar", 0): 8992}


def test_s162_load_offsets_without_group() -> None:
    """testLoadOffsetsWithoutGroup."""
    foreign = offset_record("foo", 0, 1, group_id=OTHER_GROUP_ID)  # partition 1: not owned
    ctx = loaded([*offset_records(COMMITTED), foreign])
    assert ctx.c.group_ids() == [GROUP_ID]
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.protocol_type is None and group.generation_id == 0
    assert offsets_of(ctx) == COMMITTED
    assert ctx.fetched(list(COMMITTED)) == COMMITTED


def test_s163_load_empty_group_with_offsets() -> None:
    """testLoadEmptyGroupWithOffsets (and the records of testLoadOffsetsWithEmptyControlBatch)."""
    ctx = loaded([*offset_records(COMMITTED), group_record(15, protocol_type="consumer")])
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.generation_id == 15
    assert group.protocol_type == "consumer"
    assert group.leader_id is None and group.protocol_name is None
    assert offsets_of(ctx) == COMMITTED
    described = ctx.describe()
    assert (described["group_state"], described["protocol_type"]) == ("Empty", "consumer")


def test_s166_load_offsets_with_tombstones() -> None:
    """testLoadOffsetsWithTombstones."""
    ctx = loaded([*offset_records(COMMITTED), offset_tombstone_record("foo", 1)])
    assert ctx.group().state is GroupState.EMPTY
    expected = {tp: o for tp, o in COMMITTED.items() if tp != ("foo", 1)}
    assert offsets_of(ctx) == expected
    assert ctx.fetched(list(COMMITTED)) == {**expected, ("foo", 1): -1}


def load_offsets_and_group(now_ms: int = 1_000) -> Ctx:
    """``loadOffsetsAndGroup``: three offsets, then a Stable record (generation 935)."""
    member = "98098230493"
    ctx = loaded([*offset_records(COMMITTED), stable_record(935, member)], now_ms=now_ms)
    group = ctx.group()
    assert group.state is GroupState.STABLE
    assert group.leader_id == member
    assert group.generation_id == 935
    assert group.protocol_type == "consumer" and group.protocol_name == "range"
    assert list(group.members) == [member]
    assert offsets_of(ctx) == COMMITTED
    assert all(o.expire_timestamp_ms is None for o in group.offsets.values())
    return ctx


def test_s167_load_offsets_and_group() -> None:
    """testLoadOffsetsAndGroup."""
    ctx = load_offsets_and_group(now_ms=1_000)
    member = "98098230493"
    timer = ctx.group().timers[f"heartbeat-{member}"]
    assert timer.deadline_ms == 1_000 + 10_000
    ctx.sleep(9_999)
    assert ctx.group().state is GroupState.STABLE and member in ctx.group().members
    ctx.sleep(1)  # the session, counted from the load, runs out
    assert member not in ctx.group().members
    assert ctx.group().state is GroupState.EMPTY


def test_s168_load_and_unload_epochs() -> None:
    """testLoadOffsetsAndGroupIgnored, testUnloadOffsetsAndGroup, testUnloadOffsetsAndGroupIgnored,
    testUnloadOffsetsAndGroupIgnoredAfterStopReplica."""
    records = [*offset_records(COMMITTED), stable_record(935, "98098230493")]

    def durable(c: GroupCoordinator) -> Any:
        return log.durable_view(c.group(GROUP_ID))

    # Load at epoch 2, unload at 2, then a stale load at 1 is ignored.
    c = GroupCoordinator(STANDARD, owned_partitions=())
    assert c.load_partition(0, records, 1_000, epoch=2)
    initially = durable(c)
    assert initially is not None
    assert c.unload_partition(0, 1_000, epoch=2) == []
    assert c.group(GROUP_ID) is None and 0 not in c.owned_partitions
    assert not c.load_partition(0, records, 1_000, epoch=1)
    assert not c.begin_loading(0, epoch=1)
    assert c.group(GROUP_ID) is None and 0 not in c.owned_partitions

    # A stale unload is ignored: the group is untouched.
    c = GroupCoordinator(STANDARD, owned_partitions=())
    assert c.load_partition(0, records, 1_000, epoch=2)
    assert c.unload_partition(0, 1_000, epoch=1) == []
    assert durable(c) == initially and 0 in c.owned_partitions

    # An unload without epoch (StopReplica) always unloads, and keeps the epoch.
    c = GroupCoordinator(STANDARD, owned_partitions=())
    assert c.load_partition(0, records, 1_000, epoch=2)
    assert c.unload_partition(0, 1_000) == []
    assert c.group(GROUP_ID) is None
    assert not c.load_partition(0, records, 1_000, epoch=1)
    assert c.load_partition(0, records, 1_000, epoch=3)
    assert durable(c) == initially

    # While loading, requests are told so; the load then serves them.
    c = GroupCoordinator(STANDARD, owned_partitions=())
    assert c.begin_loading(0, epoch=4)
    rid = "while-loading"
    fetch = {"api": "offset_fetch", "request_id": rid, "group_id": GROUP_ID, "partitions": None}
    assert c.handle(fetch, 1_000)[0]["error"] == "COORDINATOR_LOAD_IN_PROGRESS"
    assert c.load_partition(0, records, 1_000, epoch=4)
    [answer] = c.handle(dict(fetch, request_id="loaded"), 1_000)
    assert answer["error"] is None and len(answer["partitions"]) == 3


def test_s168_stale_load_during_loading_is_ignored() -> None:
    """testLoadOffsetsAndGroupIgnored (a stale load while a newer one is in progress)."""
    records = [*offset_records(COMMITTED), stable_record(935, "98098230493")]
    c = GroupCoordinator(STANDARD, owned_partitions=())
    assert c.begin_loading(0, epoch=5)
    loaded_stale = c.load_partition(0, records, 1_000, epoch=3)
    fetch = {"api": "offset_fetch", "request_id": 1, "group_id": GROUP_ID, "partitions": None}
    [answer] = c.handle(fetch, 1_000)
    assert (loaded_stale, c.group_ids()) == (False, [])
    assert answer["error"] == "COORDINATOR_LOAD_IN_PROGRESS"
    assert c.load_partition(0, records, 1_000, epoch=5)
    assert c.group_ids() == [GROUP_ID]


def test_s168_load_of_loaded_partition_is_ignored() -> None:
    """testLoadOffsetsAndGroupIgnored (a new election of an already-loaded partition)."""
    ctx = Ctx()
    member, rid = ctx.dynamic_join()
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    ctx.c.load_partition(0, list(ctx.records), ctx.now, epoch=1)
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    assert member in ctx.group().members
    ctx.sleep(STANDARD.group_initial_rebalance_delay_ms + 1)
    answer = ctx.answer(rid)
    assert error(answer) is None and answer["generation_id"] == 1


def test_s169_load_group_with_tombstone() -> None:
    """testLoadGroupWithTombstone."""
    ctx = loaded([stable_record(15, "98098230493"), group_tombstone_record()])
    assert ctx.c.group(GROUP_ID) is None
    assert ctx.describe()["group_state"] == "Dead"


def test_s170_offset_write_after_group_removed() -> None:
    """testOffsetWriteAfterGroupRemoved."""
    records = [stable_record(293, "98098230493"), group_tombstone_record()]
    ctx = loaded([*records, *offset_records(COMMITTED)])
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.protocol_type is None and not group.members
    assert offsets_of(ctx) == COMMITTED
    # Engine rule (3.x, section 10.6 step 4): offsets a group tombstone leaves behind in a
    # hand-made log come back as a simple group.
    ctx = loaded([*offset_records(COMMITTED), stable_record(293, "m"), group_tombstone_record()])
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.protocol_type is None and not group.members and group.generation_id == 0
    assert offsets_of(ctx) == COMMITTED


def test_s171_load_group_and_offsets_from_different_segments() -> None:
    """testLoadGroupAndOffsetsFromDifferentSegments."""
    segment1 = {("foo", 0): 23, ("foo", 1): 455, ("xxx", 0): 42}
    segment2 = {("foo", 0): 33, ("bar", 0): 8992, ("xxx", 0): 10}
    ctx = loaded(
        [
            *offset_records(segment1),
            stable_record(293, "a"),
            *offset_records(segment2),
            stable_record(293, "b"),
        ]
    )
    group = ctx.group()
    assert group.state is GroupState.STABLE
    assert group.leader_id == "b"
    assert list(group.members) == ["b"]
    assert offsets_of(ctx) == {**segment1, **segment2}


def test_s172_load_large_group_metadata_record_and_empty_log() -> None:
    """testLoadGroupWithLargeGroupMetadataRecord, testLoadGroupAndOffsetsWithCorruptedLog."""
    member = "98098230493"
    large = stable_record(15, member, assignment=bytes(LOAD_BUFFER_SIZE + 16))
    assert len(large["value"]) > LOAD_BUFFER_SIZE
    ctx = loaded([*offset_records(COMMITTED), large])
    assert offsets_of(ctx) == COMMITTED
    assert ctx.group().members[member].assignment == bytes(LOAD_BUFFER_SIZE + 16)
    # An empty log loads, and the partition then serves requests.
    assert GroupCoordinator.from_records([], STANDARD, 0).group_ids() == []
    c = GroupCoordinator(STANDARD, owned_partitions=())
    assert c.begin_loading(0, epoch=2)
    assert c.load_partition(0, [], 0, epoch=2)
    assert c.group_ids() == [] and 0 in c.owned_partitions
    fetch = {"api": "offset_fetch", "request_id": 1, "group_id": GROUP_ID, "partitions": None}
    [answer] = c.handle(fetch, 0)
    assert answer["error"] is None and answer["partitions"] == []


def test_s173_load_groups_and_offsets_will_ignore_unknown_message() -> None:
    """testLoadGroupsAndOffsetsWillIgnoreUnknownMessage, testReadMessageKeyCanReadUnknownMessage."""
    group_key_struct = codec.encode_group_metadata_key(GROUP_ID)[2:]
    unknown = []
    for version in (32767, 10):  # 10: a share group's record type, which this log skips
        message = struct.pack(">h", version) + group_key_struct
        assert codec.decode_key(message) == codec.UnknownKey(version)
        assert log.record_from_bytes(message, message) is None
        unknown.append({"key": message, "value": message})
    member = "98098230493"
    ctx = loaded([*offset_records(COMMITTED), *unknown, stable_record(935, member)])
    group = ctx.group()
    assert group.state is GroupState.STABLE
    assert group.leader_id == member and list(group.members) == [member]
    assert group.generation_id == 935 and group.protocol_name == "range"
    assert offsets_of(ctx) == COMMITTED
    assert all(o.expire_timestamp_ms is None for o in group.offsets.values())


def test_s174_load_group_with_static_member_and_subscriptions() -> None:
    """testloadGroupWithStaticMember, testLoadConsumerGroup, testLoadEmptyConsumerGroup,
    testLoadConsumerGroupWithFaultyConsumerProtocol."""
    members = (
        member_value("staticMemberId", instance_id=INSTANCE_ID),
        member_value("dynamicMemberId", instance_id=None),
    )
    ctx = loaded([group_record(27, protocol="protocol", members=members)])
    group = ctx.group()
    assert group.generation_id == 27 and group.protocol_type == "consumer"
    assert set(group.members) == {"staticMemberId", "dynamicMemberId"}
    assert group.static_members == {INSTANCE_ID: "staticMemberId"}
    assert [m["group_instance_id"] for m in ctx.describe()["members"]] == [INSTANCE_ID, None]

    consumer = (member_value("member1", subscription=sub("foo")),)
    ctx = loaded(
        [
            *offset_records({("foo", 0): 1, ("bar", 0): 1}),
            group_record(27, protocol="protocol", members=consumer),
        ]
    )
    assert ctx.group().state is GroupState.STABLE
    assert ctx.group().protocol_name == "protocol"
    assert ctx.group().subscribed_topics == frozenset({"foo"})
    assert "member1" in ctx.group().members
    assert partition_errors(ctx.delete_offsets([("foo", 0), ("bar", 0)])) == {
        ("foo", 0): "GROUP_SUBSCRIBED_TO_TOPIC",
        ("bar", 0): None,
    }

    ctx = loaded([group_record(27, protocol_type="consumer")])
    assert ctx.group().state is GroupState.EMPTY
    assert ctx.group().protocol_name is None
    assert ctx.group().subscribed_topics == frozenset()

    faulty = (member_value("member1", subscription=b""),)
    ctx = loaded([group_record(27, protocol="protocol", members=faulty)])
    assert ctx.group().state is GroupState.STABLE
    assert ctx.group().subscribed_topics is None
    assert "member1" in ctx.group().members


def test_s175_loaded_group_over_capacity_rebalances() -> None:
    """onGroupLoaded / onLoaded: a freshly-loaded group over group.max.size rebalances."""
    members = tuple(member_value(f"m{i}", instance_id=None) for i in range(5))
    assert len(members) > STANDARD.group_max_size
    ctx = loaded([group_record(3, protocol="range", members=members)])
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    assert ctx.describe()["group_state"] == "PreparingRebalance"
    # At capacity, a loaded group stays Stable.
    ctx = loaded([group_record(3, protocol="range", members=members[:4])])
    assert ctx.group().state is GroupState.STABLE


def test_s176_unload_answers_parked_requests_not_coordinator() -> None:
    """onGroupUnloaded / onUnloaded: parked JoinGroup and SyncGroup get NOT_COORDINATOR."""
    # PreparingRebalance with a parked JoinGroup (the leader rejoins, the follower has not).
    ctx = Ctx()
    leader, _ = ctx.static_pair()
    rejoin = ctx.join(leader, instance_id="leader", protos=[("range", b""), ("roundrobin", b"")])
    assert ctx.answer(rejoin) is None
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    written = len(ctx.records)
    unload(ctx)
    answer = ctx.answer(rejoin)
    assert error(answer) == "NOT_COORDINATOR"
    assert answer["member_id"] == leader
    assert ctx.c.group(GROUP_ID) is None
    assert ctx.records[written:] == []
    assert error(ctx.describe()) == "NOT_COORDINATOR"

    # CompletingRebalance with a parked SyncGroup (the follower synced, the leader has not).
    ctx = Ctx()
    lead = ctx.join(instance_id="leader")
    follow = ctx.join(instance_id="follower")
    ctx.sleep(STANDARD.group_initial_rebalance_delay_ms + 1)
    ctx.sleep(500 + 1)
    follower_join = ctx.answer(follow)
    assert error(ctx.answer(lead)) is None and error(follower_join) is None
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    sync = ctx.sync(follower_join["member_id"], 1, instance_id="follower")
    assert ctx.answer(sync) is None
    unload(ctx)
    assert error(ctx.answer(sync)) == "NOT_COORDINATOR"
    assert ctx.c.group(GROUP_ID) is None
    # Its timers went with it: nothing fires later, nothing is written.
    assert ctx.c.next_deadline() is None
    assert ctx.sleep(10 * SESSION) == []


# --- 14.9 Records and serde -------------------------------------------------------------------


def test_s177_store_empty_group() -> None:
    """testStoreEmptyGroup, testStoreEmptySimpleGroup."""
    # A consumer group whose last member leaves is stored Empty at the next generation.
    ctx = loaded([stable_record(26, "member")])
    ctx.leave([("member", INSTANCE_ID)])
    assert ctx.group().state is GroupState.EMPTY
    [record] = ctx.records
    assert record["record_type"] == "group_metadata"
    stored = log.group_from_record(log.record_from_bytes(record["key"], record["value"]), 0)
    assert stored.state is GroupState.EMPTY
    assert stored.generation_id == 27
    assert stored.protocol_type == "consumer"
    rebuilt = ctx.rebuilt().group(GROUP_ID)
    assert rebuilt is not None and rebuilt.generation_id == 27
    # A group a JoinGroup creates is stored as an Empty group without protocol type (4.x).
    ctx = Ctx()
    ctx.join()
    first = ctx.records[0]
    stored = log.group_from_record(log.record_from_bytes(first["key"], first["value"]), 0)
    assert stored.state is GroupState.EMPTY
    assert stored.generation_id == 0
    assert stored.protocol_type is None


def test_s179_serde_offset_commit_value() -> None:
    """testSerdeOffsetCommitValue, ...WithExpireTimestamp, ...WithNoneExpireTimestamp,
    testSerializeOffsetCommitValueToHighestNonFlexibleVersion."""
    ctx = Ctx()
    ctx.commit({("foo", 0): (537, "metadata", 15)})
    ctx.commit({("foo", 1): (537, "metadata")})
    ctx.commit({("foo", 2): (537, "metadata")}, retention_ms=1_000, version=2)
    with_epoch, without_epoch, expiring = ctx.records
    assert value_version(with_epoch) == 3
    assert value_version(without_epoch) == 3
    assert value_version(expiring) == 1
    assert codec.decode_offset_commit_value(with_epoch["value"]) == OffsetCommitValue(
        537, 15, "metadata", ctx.now, None
    )
    assert codec.decode_offset_commit_value(without_epoch["value"]) == OffsetCommitValue(
        537, None, "metadata", ctx.now, None
    )
    assert codec.decode_offset_commit_value(expiring["value"]) == OffsetCommitValue(
        537, None, "metadata", ctx.now, ctx.now + 1_000
    )
    assert (expiring["expire_timestamp_ms"], with_epoch["leader_epoch"]) == (ctx.now + 1_000, 15)


def test_s180_serialize_group_metadata_value_to_highest_non_flexible_version() -> None:
    """testSerializeGroupMetadataValueToHighestNonFlexibleVersion."""
    ctx = Ctx()
    member, generation = joined_member(ctx)
    ctx.sync(member, generation, {member: b"assignment"})
    group_records = [r for r in ctx.records if r["record_type"] == "group_metadata"]
    assert group_records, "no GroupMetadata record written"
    assert {value_version(r) for r in group_records} == {3}
    stored = codec.decode_group_metadata_value(group_records[-1]["value"])
    assert stored.generation_id == 1 and stored.members[0].assignment == b"assignment"


def test_s181_deserialize_highest_and_future_value_versions() -> None:
    """testDeserializeHighestSupportedGroupMetadataValueVersion, ...OffsetCommitValueVersion,
    testDeserializeFutureOffsetCommitValue, testDeserializeFutureGroupMetadataValue."""
    foo = struct.pack(">h", 3) + b"foo"
    bar = struct.pack(">i", 4000)
    offset_value = (
        struct.pack(">hqi", 4, 1000, 100)
        + bytes([len("metadata") + 1])
        + b"metadata"
        + struct.pack(">q", 2000)
        + bytes([2, 0, len(foo)])
        + foo
        + bytes([1, len(bar)])
        + bar
    )
    assert codec.decode_offset_commit_value(offset_value) == OffsetCommitValue(
        1000, 100, "metadata", 2000, None
    )

    def compact(text: str) -> bytes:
        return bytes([len(text) + 1]) + text.encode()

    member_part = (
        compact("member")
        + b"\x00"  # null group instance id
        + compact("client")
        + compact("host")
        + struct.pack(">ii", 300_000, 45_000)
        + b"\x01"  # empty subscription
        + b"\x01"  # empty assignment
        + bytes([1, 7, 1, 42])  # one unknown tagged field: tag 7, one byte
    )
    group_value = (
        struct.pack(">h", 4)
        + compact("consumer")
        + struct.pack(">i", 935)
        + compact("range")
        + compact("member")
        + struct.pack(">q", 1_700_000_000_000)
        + b"\x02"  # one member
        + member_part
        + bytes([2, 0, len(foo)])
        + foo
        + bytes([1, len(bar)])
        + bar
    )
    decoded = codec.decode_group_metadata_value(group_value)
    assert (decoded.protocol_type, decoded.generation_id) == ("consumer", 935)
    assert (decoded.protocol_name, decoded.leader) == ("range", "member")
    assert decoded.current_state_timestamp_ms == 1_700_000_000_000
    [member] = decoded.members
    assert (member.member_id, member.client_id, member.client_host) == ("member", "client", "host")
    assert (member.rebalance_timeout_ms, member.session_timeout_ms) == (300_000, 45_000)

    # Both load.
    offset_key = codec.encode_offset_commit_key(GROUP_ID, "foo", 0)
    group_key = codec.encode_group_metadata_key(GROUP_ID)
    ctx = loaded(
        [{"key": offset_key, "value": offset_value}, {"key": group_key, "value": group_value}]
    )
    assert ctx.group().state is GroupState.STABLE and ctx.group().generation_id == 935
    response = ctx.fetch([("foo", 0)])
    assert response["partitions"][0]["offset"] == 1000
    assert response["partitions"][0]["leader_epoch"] == 100
    assert response["partitions"][0]["metadata"] == "metadata"


def test_s182_should_throw_exception_for_unsupported_group_metadata_version() -> None:
    """testShouldThrowExceptionForUnsupportedGroupMetadataVersion."""
    record = stable_record(1, "memberId")
    value = struct.pack(">h", -32768) + record["value"][2:]
    with pytest.raises(DecodeError, match="Unknown group metadata message version: -32768"):
        codec.decode_group_metadata_value(value)
    with pytest.raises(ValueError, match="-32768"):
        GroupCoordinator.from_records([{"key": record["key"], "value": value}], STANDARD, 0)


def test_s183_current_state_timestamp_for_all_group_metadata_versions() -> None:
    """testCurrentStateTimestampForAllGroupMetadataVersions, testReadFromOldGroupMetadata."""
    for version in range(5):
        record = stable_record(1, "memberId", timestamp_ms=1_000, version=version)
        decoded = codec.decode_group_metadata_value(record["value"])
        ctx = loaded([record], now_ms=5_000)
        group = ctx.group()
        assert group.generation_id == 1 and group.protocol_type == "consumer"
        assert group.protocol_name == "range"
        assert list(group.members) == ["memberId"]
        if version >= 2:
            assert decoded.current_state_timestamp_ms == 1_000
        else:
            assert decoded.current_state_timestamp_ms is None
        if version >= 3:
            assert group.static_members == {INSTANCE_ID: "memberId"}
        else:  # all members dynamic
            assert group.static_members == {}
            assert group.members["memberId"].group_instance_id is None
        expected_rebalance = 10_000 if version == 0 else 30_000  # v0: the session timeout
        assert group.members["memberId"].rebalance_timeout_ms == expected_rebalance


def test_s184_load_offset_from_old_commit_and_with_explicit_retention() -> None:
    """testLoadOffsetFromOldCommit, testLoadOffsetWithExplicitRetention."""
    member = "98098230493"
    # IBP 1.1: OffsetCommitValue v1 (with an expire timestamp), GroupMetadataValue v1.
    old = offset_records(COMMITTED, commit_ms=500, expire_ms=600, version=1)
    assert {value_version(r) for r in old} == {1}
    ctx = loaded([*old, stable_record(935, member, timestamp_ms=None, version=1)])
    group = ctx.group()
    assert group.state is GroupState.STABLE and group.leader_id == member
    assert group.generation_id == 935
    assert offsets_of(ctx) == COMMITTED
    assert {o.expire_timestamp_ms for o in group.offsets.values()} == {600}
    # Current records of OffsetCommit v2 commits with a retention time.
    ctx = Ctx()
    rid = ctx.commit(dict(COMMITTED), retention_ms=100, version=2)
    assert set(commit_errors(ctx, rid).values()) == {None}
    rebuilt = ctx.rebuilt().group(GROUP_ID)
    assert rebuilt is not None
    assert {o.expire_timestamp_ms for o in rebuilt.offsets.values()} == {ctx.now + 100}


def test_each_offsets_partition_is_swept_at_a_phase_of_its_own() -> None:
    """Kafka sweeps each ``__consumer_offsets`` partition on a schedule of its own (from its
    load); here partition ``p`` of ``n`` is swept at ``k * interval + p * interval // n`` on the
    engine's clock, so a coordinator of every partition sweeps an ``n``-th of its groups at a
    time. The sweep comes again one interval later."""
    interval = STANDARD.offsets_retention_check_interval_ms
    ctx = Ctx(STANDARD, owned_partitions=None, now_ms=1_000)
    groups = {partition_for(g, 2): g for g in (GROUP_ID, OTHER_GROUP_ID)}
    assert sorted(groups) == [0, 1]
    for group_id in groups.values():
        ctx.commit({("t", 0): 5}, group_id=group_id)

    def sweep_at(partition: int) -> int:
        group = ctx.c.group(groups[partition])
        assert group is not None
        return int(group.timers[EXPIRY_KEY].deadline_ms)

    assert (sweep_at(0), sweep_at(1)) == (interval, interval // 2)
    ctx.sleep(interval // 2 - 1_000)  # partition 1's sweep runs, and comes again
    assert (sweep_at(0), sweep_at(1)) == (interval, interval + interval // 2)
