"""Consumer-group records: building them, reading them, and replaying them (the one path).

Kafka 4.0's ``GroupCoordinatorRecordHelpers`` (``newConsumerGroup*Record`` and their tombstones)
and ``GroupMetadataManager.replay`` for the ``ConsumerGroup*`` record types. A consumer group
changes only here: the live engine applies each record it writes through :func:`apply`, and a
load applies the same records in log order, so the two cannot drift.

A record is the flat dict of contract section 3 (``record_type``, ``group_id``, ``key``,
``value``, ``timestamp_ms``, ...) with the decoded fields of its key and value beside them,
named as Kafka's schemas name them in snake_case (``member_id``, ``epoch``, ``member_epoch``,
``assigned_partitions``, ...). Topic ids are Kafka's 22-character ``Uuid`` strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coordinator.group.model import ClassicGroup
from coordinator.log import modern_codec as codec
from coordinator.log.modern_codec import ConsumerGroupKey
from coordinator.modern.model import (
    LEAVE_GROUP_MEMBER_EPOCH,
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    assignment_of,
)
from coordinator.topics import TopicMetadata

if TYPE_CHECKING:
    from collections.abc import Callable

#: ``record_type`` of each consumer-group record type (the key version).
RECORD_TYPES: dict[int, str] = {
    codec.CONSUMER_GROUP_METADATA: "consumer_group_metadata",
    codec.CONSUMER_GROUP_PARTITION_METADATA: "consumer_group_partition_metadata",
    codec.CONSUMER_GROUP_MEMBER_METADATA: "consumer_group_member_metadata",
    codec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: "consumer_group_target_assignment_metadata",
    codec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: "consumer_group_target_assignment_member",
    codec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: "consumer_group_current_member_assignment",
    codec.CONSUMER_GROUP_REGULAR_EXPRESSION: "consumer_group_regular_expression",
}
TYPE_OF: dict[str, int] = {name: number for number, name in RECORD_TYPES.items()}

Group = ClassicGroup | ConsumerGroup


# --- building -----------------------------------------------------------------------------------


def record(
    key: ConsumerGroupKey, value: bytes | None, now_ms: int, blank: Mapping[str, Any]
) -> dict[str, Any]:
    """The record dict of a key and value: bytes and decoded fields, from the bytes."""
    out = dict(blank)
    out.update(
        record_type=RECORD_TYPES[key.record_type],
        group_id=key.group_id,
        timestamp_ms=now_ms,
        key=codec.encode_key(key),
        value=value,
    )
    for name in codec.KEY_FIELDS[key.record_type]:
        out[name] = getattr(key, name)
    if value is not None:
        out.update(codec.decode_value(key.record_type, value))
    return out


class RecordBuilder:
    """Kafka's ``newConsumerGroup*Record`` helpers for one group at one time."""

    __slots__ = ("blank", "group_id", "now_ms")

    def __init__(self, group_id: str, now_ms: int, blank: Mapping[str, Any]) -> None:
        self.group_id = group_id
        self.now_ms = now_ms
        self.blank = blank

    def _record(self, record_type: int, value: bytes | None, **key_fields: str) -> dict[str, Any]:
        key = ConsumerGroupKey(record_type, self.group_id, **key_fields)
        return record(key, value, self.now_ms, self.blank)

    def epoch(self, epoch: int) -> dict[str, Any]:
        return self._record(codec.CONSUMER_GROUP_METADATA, codec.encode_group_metadata(epoch))

    def epoch_tombstone(self) -> dict[str, Any]:
        return self._record(codec.CONSUMER_GROUP_METADATA, None)

    def subscription_metadata(self, metadata: Mapping[str, TopicMetadata]) -> dict[str, Any]:
        topics = [
            {"topic_id": t.topic_id, "topic_name": t.name, "num_partitions": t.partitions}
            for _, t in sorted(metadata.items())
        ]
        return self._record(
            codec.CONSUMER_GROUP_PARTITION_METADATA, codec.encode_partition_metadata(topics)
        )

    def subscription_metadata_tombstone(self) -> dict[str, Any]:
        return self._record(codec.CONSUMER_GROUP_PARTITION_METADATA, None)

    def member_subscription(self, member: ConsumerGroupMember) -> dict[str, Any]:
        classic = member.classic
        value = codec.encode_member_metadata(
            {
                "classic_member_metadata": None
                if classic is None
                else {
                    "session_timeout_ms": classic.session_timeout_ms,
                    "supported_protocols": [
                        {"name": name, "metadata": metadata}
                        for name, metadata in classic.supported_protocols
                    ],
                },
                "instance_id": member.instance_id,
                "rack_id": member.rack_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "subscribed_topic_names": list(member.subscribed_topic_names),
                "subscribed_topic_regex": member.subscribed_topic_regex,
                "rebalance_timeout_ms": member.rebalance_timeout_ms,
                "server_assignor": member.server_assignor,
            }
        )
        return self._record(codec.CONSUMER_GROUP_MEMBER_METADATA, value, member_id=member.member_id)

    def member_subscription_tombstone(self, member_id: str) -> dict[str, Any]:
        return self._record(codec.CONSUMER_GROUP_MEMBER_METADATA, None, member_id=member_id)

    def target_assignment(self, member_id: str, assignment: Assignment) -> dict[str, Any]:
        return self._record(
            codec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
            codec.encode_target_assignment_member(assignment),
            member_id=member_id,
        )

    def target_assignment_tombstone(self, member_id: str) -> dict[str, Any]:
        return self._record(
            codec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, None, member_id=member_id
        )

    def target_assignment_epoch(self, epoch: int) -> dict[str, Any]:
        return self._record(
            codec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
            codec.encode_target_assignment_metadata(epoch),
        )

    def target_assignment_epoch_tombstone(self) -> dict[str, Any]:
        return self._record(codec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, None)

    def current_assignment(self, member: ConsumerGroupMember) -> dict[str, Any]:
        value = codec.encode_current_member_assignment(
            member.member_epoch,
            member.previous_member_epoch,
            int(member.state),
            member.assigned_partitions,
            member.partitions_pending_revocation,
        )
        return self._record(
            codec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, value, member_id=member.member_id
        )

    def current_assignment_tombstone(self, member_id: str) -> dict[str, Any]:
        return self._record(
            codec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, None, member_id=member_id
        )

    def regular_expression(self, regex: str, topics: list[str], version: int) -> dict[str, Any]:
        value = codec.encode_regular_expression(topics, version, self.now_ms)
        return self._record(
            codec.CONSUMER_GROUP_REGULAR_EXPRESSION, value, regular_expression=regex
        )

    def regular_expression_tombstone(self, regex: str) -> dict[str, Any]:
        return self._record(codec.CONSUMER_GROUP_REGULAR_EXPRESSION, None, regular_expression=regex)


# --- the replay ---------------------------------------------------------------------------------


def is_consumer_record(record: Mapping[str, Any]) -> bool:
    return record.get("record_type") in TYPE_OF


def apply(group: Group | None, rec: Mapping[str, Any]) -> Group | None:
    """Apply one consumer-group record to its group id's state; returns the new state.

    Kafka's ``replay(ConsumerGroup*Key, ConsumerGroup*Value)``: a value creates the group when
    there is none, or replaces a simple classic group (one that only holds offsets: the offsets
    move over); a tombstone for a group or member that does not exist is ignored."""
    record_type = TYPE_OF[rec["record_type"]]
    if rec["value"] is None:
        if not isinstance(group, ConsumerGroup):
            return group
        return _TOMBSTONES[record_type](group, rec)
    consumer = _persisted(group, rec["group_id"])
    _VALUES[record_type](consumer, rec)
    return consumer


def _persisted(group: Group | None, group_id: str) -> ConsumerGroup:
    """Kafka's ``getOrMaybeCreatePersistedConsumerGroup``."""
    if isinstance(group, ConsumerGroup):
        return group
    consumer = ConsumerGroup(group_id=group_id)
    if group is not None:
        if group.protocol_type is not None or group.members:
            raise ValueError(f"Group {group_id} is not a consumer group")
        consumer.offsets = group.offsets
        consumer.timers = group.timers
        consumer.timer_heap = group.timer_heap
        consumer.timer_seq = group.timer_seq
        consumer.clock_ms = group.clock_ms
    return consumer


def _partitions(raw: Mapping[str, Any]) -> Assignment:
    return assignment_of(raw)


def _group_epoch(group: ConsumerGroup, rec: Mapping[str, Any]) -> None:
    group.group_epoch = rec["epoch"]


def _subscription_metadata(group: ConsumerGroup, rec: Mapping[str, Any]) -> None:
    group.subscription_metadata = {
        t["topic_name"]: TopicMetadata(t["topic_id"], t["topic_name"], t["num_partitions"])
        for t in rec["topics"]
    }


def _member_metadata(group: ConsumerGroup, rec: Mapping[str, Any]) -> None:
    member_id = rec["member_id"]
    old = group.members.get(member_id) or ConsumerGroupMember(member_id)
    group.update_member(
        old.replace(
            instance_id=rec["instance_id"],
            rack_id=rec["rack_id"],
            client_id=rec["client_id"],
            client_host=rec["client_host"],
            subscribed_topic_names=tuple(sorted(rec["subscribed_topic_names"])),
            subscribed_topic_regex=rec["subscribed_topic_regex"],
            rebalance_timeout_ms=rec["rebalance_timeout_ms"],
            server_assignor=rec["server_assignor"],
            classic=_classic(rec.get("classic_member_metadata")),
        )
    )


def _classic(raw: Mapping[str, Any] | None) -> ClassicMemberMetadata | None:
    if raw is None:
        return None
    return ClassicMemberMetadata(
        raw["session_timeout_ms"],
        tuple((p["name"], bytes(p["metadata"])) for p in raw["supported_protocols"]),
    )


def _target_epoch(group: ConsumerGroup, rec: Mapping[str, Any]) -> None:
    group.assignment_epoch = rec["assignment_epoch"]


def _target_member(group: ConsumerGroup, rec: Mapping[str, Any]) -> None:
    group.set_target(rec["member_id"], _partitions(rec["topic_partitions"]))


def _current_assignment(group: ConsumerGroup, rec: Mapping[str, Any]) -> None:
    member_id = rec["member_id"]
    old = group.members.get(member_id) or ConsumerGroupMember(member_id)
    group.update_member(
        old.replace(
            member_epoch=rec["member_epoch"],
            previous_member_epoch=rec["previous_member_epoch"],
            state=MemberState.from_value(rec["state"]),
            assigned_partitions=_partitions(rec["assigned_partitions"]),
            partitions_pending_revocation=_partitions(rec["partitions_pending_revocation"]),
        )
    )


def _regular_expression(group: ConsumerGroup, rec: Mapping[str, Any]) -> None:
    group.resolved_regexes[rec["regular_expression"]] = tuple(sorted(rec["topics"]))


def _group_epoch_tombstone(group: ConsumerGroup, rec: Mapping[str, Any]) -> Group | None:
    if group.members or group.target_assignment:
        raise ValueError(
            f"Received a tombstone record to delete group {group.group_id} but the group still "
            f"has {len(group.members)} members."
        )
    if not group.offsets:
        return None
    # Offsets that outlive their group (not what Kafka writes) stay, as a simple group's.
    survivor = ClassicGroup(group_id=group.group_id, current_state_timestamp_ms=None)
    survivor.offsets = group.offsets
    return survivor


def _subscription_metadata_tombstone(group: ConsumerGroup, rec: Mapping[str, Any]) -> Group:
    group.subscription_metadata = {}
    return group


def _member_tombstone(group: ConsumerGroup, rec: Mapping[str, Any]) -> Group:
    group.remove_member(rec["member_id"])
    return group


def _target_epoch_tombstone(group: ConsumerGroup, rec: Mapping[str, Any]) -> Group:
    group.assignment_epoch = -1
    return group


def _target_member_tombstone(group: ConsumerGroup, rec: Mapping[str, Any]) -> Group:
    group.remove_target(rec["member_id"])
    return group


def _current_assignment_tombstone(group: ConsumerGroup, rec: Mapping[str, Any]) -> Group:
    old = group.members.get(rec["member_id"])
    if old is not None:
        group.update_member(
            old.replace(
                member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                assigned_partitions={},
                partitions_pending_revocation={},
            )
        )
    return group


def _regular_expression_tombstone(group: ConsumerGroup, rec: Mapping[str, Any]) -> Group:
    group.resolved_regexes.pop(rec["regular_expression"], None)
    return group


_VALUES: dict[int, Callable[[ConsumerGroup, Mapping[str, Any]], None]] = {
    codec.CONSUMER_GROUP_METADATA: _group_epoch,
    codec.CONSUMER_GROUP_PARTITION_METADATA: _subscription_metadata,
    codec.CONSUMER_GROUP_MEMBER_METADATA: _member_metadata,
    codec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: _target_epoch,
    codec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: _target_member,
    codec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: _current_assignment,
    codec.CONSUMER_GROUP_REGULAR_EXPRESSION: _regular_expression,
}
_TOMBSTONES: dict[int, Callable[[ConsumerGroup, Mapping[str, Any]], Group | None]] = {
    codec.CONSUMER_GROUP_METADATA: _group_epoch_tombstone,
    codec.CONSUMER_GROUP_PARTITION_METADATA: _subscription_metadata_tombstone,
    codec.CONSUMER_GROUP_MEMBER_METADATA: _member_tombstone,
    codec.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: _target_epoch_tombstone,
    codec.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: _target_member_tombstone,
    codec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: _current_assignment_tombstone,
    codec.CONSUMER_GROUP_REGULAR_EXPRESSION: _regular_expression_tombstone,
}
