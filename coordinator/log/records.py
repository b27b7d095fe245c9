"""The ``__consumer_offsets`` log: building records, reading Kafka's bytes, and the one replay.

A record is a flat dict (contract, section 3): its Kafka key and value bytes, and the decoded
value fields beside them so the log can be queried without decoding. :func:`apply_record` is the
only way a record changes state, for the live engine and for a load after failover alike (Kafka
4.x ``GroupMetadataManager.replay`` / ``OffsetMetadataManager.replay``).

One asymmetry is Kafka's own: a GroupMetadata record describes a group only at rest (Stable or
Empty) and cannot carry a rebalance in flight (parked requests, pending members, timers). Kafka's
classic groups therefore apply membership changes in memory and write the record for durability
(``CoordinatorResult.replayRecords = false``); only a load builds a group from it. Here too: the
live path skips that case (``live=True``), and the tests check after every step that a group at
rest equals what a load of its last record would give.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.group.model import ClassicGroup, Member, OffsetAndMetadata
from coordinator.group.states import GroupState
from coordinator.log import codec, modern_records
from coordinator.log.codec import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
)
from coordinator.log.modern_codec import ConsumerGroupKey
from coordinator.modern.model import ConsumerGroup

#: What one group id's state is: a classic group or a consumer group.
Group = ClassicGroup | ConsumerGroup

OFFSET_COMMIT = "offset_commit"
GROUP_METADATA = "group_metadata"

#: The record types a log holds, classic and consumer groups.
RECORD_TYPES = frozenset({OFFSET_COMMIT, GROUP_METADATA, *modern_records.TYPE_OF})

#: Every column of a record, in table order (the Spark job's schema follows it).
RECORD_FIELDS = (
    "record_type",
    "group_id",
    "topic",
    "partition",
    "offsets_partition",
    "offset",
    "timestamp_ms",
    "key",
    "value",
    "committed_offset",
    "leader_epoch",
    "metadata",
    "commit_timestamp_ms",
    "expire_timestamp_ms",
    "protocol_type",
    "generation_id",
    "protocol_name",
    "leader",
    "current_state_timestamp_ms",
    "members",
)

_BLANK: dict[str, Any] = dict.fromkeys(RECORD_FIELDS)
#: A record with every column null: the base of every record built.
BLANK_RECORD: Mapping[str, Any] = _BLANK


# --- building ---------------------------------------------------------------------------------


def offset_commit_record(
    group_id: str, topic: str, partition: int, offset: OffsetAndMetadata, now_ms: int
) -> dict[str, Any]:
    value = OffsetCommitValue(
        offset=offset.committed_offset,
        leader_epoch=offset.leader_epoch,
        metadata=offset.metadata,
        commit_timestamp_ms=offset.commit_timestamp_ms,
        expire_timestamp_ms=offset.expire_timestamp_ms,
    )
    record = offset_tombstone(group_id, topic, partition, now_ms)
    record["value"] = codec.encode_offset_commit_value(value)
    _offset_fields(record, value)
    return record


def offset_tombstone(group_id: str, topic: str, partition: int, now_ms: int) -> dict[str, Any]:
    """An OffsetCommit key with a null value; the base of every offset record."""
    record = dict(_BLANK)
    record.update(
        record_type=OFFSET_COMMIT,
        group_id=group_id,
        topic=topic,
        partition=partition,
        timestamp_ms=now_ms,
        key=codec.encode_offset_commit_key(group_id, topic, partition),
    )
    return record


def group_metadata_record(
    group: ClassicGroup, assignment: dict[str, bytes], now_ms: int
) -> dict[str, Any]:
    """Kafka's ``newGroupMetadataRecord``: the group with every member and the given assignment."""
    protocol = group.protocol_name
    value = GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation_id=group.generation_id,
        protocol_name=protocol,
        leader=group.leader_id,
        current_state_timestamp_ms=group.current_state_timestamp_ms,
        members=tuple(
            MemberMetadataValue(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata(protocol),
                assignment=assignment.get(m.member_id, b""),
            )
            for m in group.members.values()
        ),
    )
    return _group_record(group.group_id, value, now_ms)


def empty_group_record(group: ClassicGroup, now_ms: int) -> dict[str, Any]:
    """Kafka 4.x's ``newEmptyGroupMetadataRecord`` for a group a JoinGroup just created."""
    value = GroupMetadataValue(
        protocol_type="",
        generation_id=0,
        protocol_name=None,
        leader=None,
        current_state_timestamp_ms=group.current_state_timestamp_ms,
        members=(),
    )
    return _group_record(group.group_id, value, now_ms)


def group_tombstone(group_id: str, now_ms: int) -> dict[str, Any]:
    """A GroupMetadata key with a null value; the base of every group record."""
    record = dict(_BLANK)
    record.update(
        record_type=GROUP_METADATA,
        group_id=group_id,
        timestamp_ms=now_ms,
        key=codec.encode_group_metadata_key(group_id),
    )
    return record


def _group_record(group_id: str, value: GroupMetadataValue, now_ms: int) -> dict[str, Any]:
    record = group_tombstone(group_id, now_ms)
    record["value"] = codec.encode_group_metadata_value(value)
    _group_fields(record, value)
    return record


def _offset_fields(record: dict[str, Any], value: OffsetCommitValue) -> None:
    record.update(
        committed_offset=value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp_ms=value.commit_timestamp_ms,
        expire_timestamp_ms=value.expire_timestamp_ms,
    )


def _group_fields(record: dict[str, Any], value: GroupMetadataValue) -> None:
    record.update(
        protocol_type=value.protocol_type,
        generation_id=value.generation_id,
        protocol_name=value.protocol_name,
        leader=value.leader,
        current_state_timestamp_ms=value.current_state_timestamp_ms,
        members=[
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "session_timeout_ms": m.session_timeout_ms,
                "subscription": m.subscription,
                "assignment": m.assignment,
            }
            for m in value.members
        ],
    )


# --- reading Kafka's bytes --------------------------------------------------------------------


def record_from_bytes(key: bytes, value: bytes | None) -> dict[str, Any] | None:
    """A record dict from Kafka's key and value bytes; None for a key type this log does not use
    (Kafka skips unknown record types on load). Raises ``DecodeError`` on malformed bytes."""
    decoded_key = codec.decode_key(key)
    record = dict(_BLANK)
    record.update(key=key, value=value)
    if isinstance(decoded_key, UnknownKey):
        return None
    if isinstance(decoded_key, ConsumerGroupKey):
        return modern_records.record(decoded_key, value, 0, _BLANK) | {
            "key": key,
            "timestamp_ms": None,
        }
    if isinstance(decoded_key, OffsetCommitKey):
        record.update(
            record_type=OFFSET_COMMIT,
            group_id=decoded_key.group,
            topic=decoded_key.topic,
            partition=decoded_key.partition,
        )
        if value is not None:
            _offset_fields(record, codec.decode_offset_commit_value(value))
        return record
    assert isinstance(decoded_key, GroupMetadataKey)
    record.update(record_type=GROUP_METADATA, group_id=decoded_key.group)
    if value is not None:
        _group_fields(record, codec.decode_group_metadata_value(value))
    return record


# --- the replay -------------------------------------------------------------------------------


def apply_record(
    group: Group | None, record: dict[str, Any], now_ms: int, *, live: bool
) -> Group | None:
    """Apply one record to the state of its group id; returns that id's new state.

    ``live`` says the record was just written by the engine (not read back at a load); see the
    module docstring for the one case where that matters.
    """
    if modern_records.is_consumer_record(record):
        return modern_records.apply(group, record)
    tombstone = record["value"] is None
    if record["record_type"] == OFFSET_COMMIT:
        key = (record["topic"], record["partition"])
        if tombstone:
            if group is not None:
                group.offsets.pop(key, None)
            return group
        if group is None:
            # An offset without a group: a simple (standalone) consumer's group (10.6 step 1).
            group = ClassicGroup(group_id=record["group_id"], current_state_timestamp_ms=now_ms)
        group.offsets[key] = OffsetAndMetadata(
            committed_offset=record["committed_offset"],
            leader_epoch=record["leader_epoch"],
            metadata=record["metadata"],
            commit_timestamp_ms=record["commit_timestamp_ms"],
            expire_timestamp_ms=record["expire_timestamp_ms"],
        )
        return group

    if isinstance(group, ConsumerGroup):
        # A classic record for a consumer group's id (Kafka writes none): the group stays.
        return group
    if tombstone:
        if group is None or not group.offsets:
            return None
        # Kafka always tombstones offsets first; offsets that survive a group tombstone (a
        # hand-made log) come back as a simple group, as Kafka 3.x loads them.
        survivor = ClassicGroup(group_id=group.group_id, current_state_timestamp_ms=now_ms)
        survivor.offsets = group.offsets
        return survivor
    if live:
        return group
    loaded = group_from_record(record, now_ms)
    if group is not None:
        loaded.offsets = group.offsets
    return loaded


def group_from_record(record: dict[str, Any], now_ms: int) -> ClassicGroup:
    """A group at rest as a GroupMetadata value describes it (Kafka's ``ClassicGroup.fromRecord``)."""
    members = record["members"] or []
    protocol = record["protocol_name"]
    group = ClassicGroup(
        group_id=record["group_id"],
        current_state_timestamp_ms=record["current_state_timestamp_ms"],
        state=GroupState.STABLE if members else GroupState.EMPTY,
        generation_id=record["generation_id"],
        protocol_type=record["protocol_type"] or None,
        protocol_name=protocol,
        leader_id=record["leader"],
    )
    for m in members:
        group.add(
            Member(
                member_id=m["member_id"],
                group_instance_id=m["group_instance_id"],
                client_id=m["client_id"],
                client_host=m["client_host"],
                rebalance_timeout_ms=m["rebalance_timeout_ms"],
                session_timeout_ms=m["session_timeout_ms"],
                protocol_type=group.protocol_type or "",
                protocols=[(protocol or "", m["subscription"])],
                assignment=m["assignment"],
            )
        )
    group.subscribed_topics = group.compute_subscribed_topics()
    return group


def durable_view(group: Group | None) -> tuple[Any, ...] | None:
    """What a group at rest must agree on with a load of its last record (used by tests)."""
    if group is None:
        return None
    if isinstance(group, ConsumerGroup):
        return modern_durable_view(group)
    return (
        group.state.value,
        group.generation_id,
        group.protocol_type,
        group.protocol_name,
        group.leader_id,
        tuple(
            (
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                # During a rebalance a member may no longer offer the previous protocol.
                dict(m.protocols).get(group.protocol_name or "", b""),
                m.assignment,
            )
            for m in group.members.values()
        ),
        group.subscribed_topics,
        tuple(sorted(group.offsets.items())),
    )


def modern_durable_view(group: ConsumerGroup) -> tuple[Any, ...]:
    """Everything a consumer group's records carry: all of it must survive a load."""
    return (
        "consumer",
        group.group_epoch,
        group.assignment_epoch,
        tuple(sorted(group.members.items())),
        tuple(sorted(group.static_members.items())),
        tuple(sorted(group.subscription_metadata.items())),
        tuple(sorted((m, tuple(sorted(a.items()))) for m, a in group.target_assignment.items())),
        tuple(sorted(group.resolved_regexes.items())),
        tuple(sorted(group.offsets.items())),
    )


def replay(
    records: Iterable[dict[str, Any]], now_ms: int, groups: dict[str, Group] | None = None
) -> dict[str, Group]:
    """Load: apply records in log order into ``groups`` (Kafka's load of an offsets partition)."""
    groups = {} if groups is None else groups
    for record in records:
        group_id = record["group_id"]
        state = apply_record(groups.get(group_id), record, now_ms, live=False)
        if state is None:
            groups.pop(group_id, None)
        else:
            groups[group_id] = state
    return groups
