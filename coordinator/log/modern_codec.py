"""Byte-exact keys and values of Kafka 4.0's consumer-group records in ``__consumer_offsets``.

A key is its record type as an int16 (the "key version": 3 to 8 and 16) followed by its fields
in the classic, non-flexible encoding; a value is an int16 version (0 for all of them) followed
by its fields in the flexible encoding (compact strings and arrays, a tagged-field section
closing each struct), as Kafka's generated ``ConsumerGroup*Key``/``Value`` classes write them.
Unknown tagged fields are skipped on read; the one tagged field Kafka 4.0 writes, the
classic-member metadata of a member that speaks the classic protocol (tag 0 of
ConsumerGroupMemberMetadataValue), is read and written.
Maps are written in a canonical order: topics by topic id, partitions ascending.
Malformed input raises :class:`coordinator.serde.DecodeError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from coordinator.serde import DecodeError, Reader, Writer
from coordinator.topics import uuid_from_bytes, uuid_to_bytes

#: Record types (the key version) of Kafka 4.0's consumer-group records.
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_REGULAR_EXPRESSION = 16

#: Record type -> the names of its key's string fields after the group id.
KEY_FIELDS: dict[int, tuple[str, ...]] = {
    CONSUMER_GROUP_METADATA: (),
    CONSUMER_GROUP_PARTITION_METADATA: (),
    CONSUMER_GROUP_MEMBER_METADATA: ("member_id",),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: (),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: ("member_id",),
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: ("member_id",),
    CONSUMER_GROUP_REGULAR_EXPRESSION: ("regular_expression",),
}

VALUE_VERSION = 0

#: topic id -> partitions, as the records carry them.
TopicPartitions = Mapping[str, "frozenset[int] | list[int] | set[int]"]


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """The key of any consumer-group record: its type, the group, and the member id or the
    regular expression where the type has one."""

    record_type: int
    group_id: str
    member_id: str | None = None
    regular_expression: str | None = None


def encode_key(key: ConsumerGroupKey) -> bytes:
    w = Writer()
    w.int16(key.record_type)
    w.string(key.group_id)
    for name in KEY_FIELDS[key.record_type]:
        value = getattr(key, name)
        if value is None:
            raise ValueError(f"record type {key.record_type} needs its {name}")
        w.string(value)
    return w.getvalue()


def decode_key_fields(record_type: int, r: Reader) -> ConsumerGroupKey:
    """The rest of a key whose int16 type (``record_type``) has been read."""
    group_id = r.string()
    fields = {name: r.string() for name in KEY_FIELDS[record_type]}
    return ConsumerGroupKey(record_type, group_id, **fields)


# -- values: one encoder and one decoder per record type ----------------------------------------


def _topic_partitions(w: Writer, assignment: TopicPartitions) -> None:
    w.compact_array_len(len(assignment))
    for topic_id in sorted(assignment):
        w.uuid(uuid_to_bytes(topic_id))
        partitions = sorted(assignment[topic_id])
        w.compact_array_len(len(partitions))
        for partition in partitions:
            w.int32(partition)
        w.empty_tagged_fields()


def _read_topic_partitions(r: Reader) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for _ in range(_count(r)):
        topic_id = uuid_from_bytes(r.uuid())
        out[topic_id] = [r.int32() for _ in range(_count(r))]
        r.skip_tagged_fields()
    return out


def _strings(w: Writer, values: list[str] | tuple[str, ...]) -> None:
    w.compact_array_len(len(values))
    for value in values:
        w.compact_string(value)


def _read_strings(r: Reader) -> list[str]:
    return [r.compact_string() for _ in range(_count(r))]


def _count(r: Reader) -> int:
    n = r.compact_array_len()
    if n < 0:
        raise DecodeError("a non-nullable array was serialized as null")
    return n


def _value(body: Callable[[Writer], None]) -> bytes:
    w = Writer()
    w.int16(VALUE_VERSION)
    body(w)
    w.empty_tagged_fields()
    return w.getvalue()


T = TypeVar("T")


def _read_value(data: bytes, body: Callable[[Reader], T], *, own_tags: bool = False) -> T:
    """A value's fields; its tagged fields skipped, unless ``body`` reads them (``own_tags``)."""
    r = Reader(data)
    version = r.int16()
    if version != VALUE_VERSION:
        raise DecodeError(f"unknown consumer group record value version {version}")
    out = body(r)
    if not own_tags:
        r.skip_tagged_fields()
    return out


def encode_group_metadata(epoch: int) -> bytes:
    return _value(lambda w: w.int32(epoch))


def encode_target_assignment_metadata(assignment_epoch: int) -> bytes:
    return _value(lambda w: w.int32(assignment_epoch))


def encode_partition_metadata(topics: list[dict[str, Any]]) -> bytes:
    """``topics``: [{topic_id, topic_name, num_partitions}], written in that order; the
    deprecated per-partition racks are written empty (Kafka 4.0 no longer uses them)."""

    def body(w: Writer) -> None:
        w.compact_array_len(len(topics))
        for topic in topics:
            w.uuid(uuid_to_bytes(topic["topic_id"]))
            w.compact_string(topic["topic_name"])
            w.int32(topic["num_partitions"])
            w.compact_array_len(0)
            w.empty_tagged_fields()

    return _value(body)


#: The tag of ConsumerGroupMemberMetadataValue's ClassicMemberMetadata.
CLASSIC_MEMBER_METADATA_TAG = 0


def encode_member_metadata(member: dict[str, Any]) -> bytes:
    """``member["classic_member_metadata"]``: None, or ``{session_timeout_ms,
    supported_protocols: [{name, metadata}]}``, written as Kafka writes a nullable struct in a
    tagged field (its size + 1, then the varint 1, then the struct)."""

    def body(w: Writer) -> None:
        w.compact_nullable_string(member["instance_id"])
        w.compact_nullable_string(member["rack_id"])
        w.compact_string(member["client_id"])
        w.compact_string(member["client_host"])
        _strings(w, member["subscribed_topic_names"])
        w.compact_nullable_string(member["subscribed_topic_regex"])
        w.int32(member["rebalance_timeout_ms"])
        w.compact_nullable_string(member["server_assignor"])

    classic = member.get("classic_member_metadata")
    if classic is None:
        return _value(body)
    inner = Writer()
    inner.int32(classic["session_timeout_ms"])
    inner.compact_array_len(len(classic["supported_protocols"]))
    for protocol in classic["supported_protocols"]:
        inner.compact_string(protocol["name"])
        inner.compact_bytes(protocol["metadata"])
        inner.empty_tagged_fields()
    inner.empty_tagged_fields()
    struct = inner.getvalue()
    w = Writer()
    w.int16(VALUE_VERSION)
    body(w)
    w.uvarint(1)  # one tagged field
    w.uvarint(CLASSIC_MEMBER_METADATA_TAG)
    w.uvarint(len(struct) + 1)
    w.uvarint(1)  # not null
    w.raw(struct)
    return w.getvalue()


def encode_target_assignment_member(topic_partitions: TopicPartitions) -> bytes:
    return _value(lambda w: _topic_partitions(w, topic_partitions))


def encode_current_member_assignment(
    member_epoch: int,
    previous_member_epoch: int,
    state: int,
    assigned_partitions: TopicPartitions,
    partitions_pending_revocation: TopicPartitions,
) -> bytes:
    def body(w: Writer) -> None:
        w.int32(member_epoch)
        w.int32(previous_member_epoch)
        w.int8(state)
        _topic_partitions(w, assigned_partitions)
        _topic_partitions(w, partitions_pending_revocation)

    return _value(body)


def encode_regular_expression(topics: list[str], version: int, timestamp: int) -> bytes:
    def body(w: Writer) -> None:
        _strings(w, topics)
        w.int64(version)
        w.int64(timestamp)

    return _value(body)


def decode_value(record_type: int, data: bytes) -> dict[str, Any]:
    """A value's fields, named as the record dict names them (snake_case of Kafka's)."""
    own_tags = record_type == CONSUMER_GROUP_MEMBER_METADATA
    return _read_value(data, _DECODERS[record_type], own_tags=own_tags)


def _read_epoch(r: Reader) -> dict[str, Any]:
    return {"epoch": r.int32()}


def _read_assignment_epoch(r: Reader) -> dict[str, Any]:
    return {"assignment_epoch": r.int32()}


def _read_partition_metadata(r: Reader) -> dict[str, Any]:
    topics = []
    for _ in range(_count(r)):
        topic_id = uuid_from_bytes(r.uuid())
        name = r.compact_string()
        partitions = r.int32()
        for _ in range(_count(r)):  # deprecated racks per partition
            r.int32()
            _read_strings(r)
            r.skip_tagged_fields()
        r.skip_tagged_fields()
        topics.append({"topic_id": topic_id, "topic_name": name, "num_partitions": partitions})
    return {"topics": topics}


def _read_member_metadata(r: Reader) -> dict[str, Any]:
    out: dict[str, Any] = {
        "instance_id": r.compact_nullable_string(),
        "rack_id": r.compact_nullable_string(),
        "client_id": r.compact_string(),
        "client_host": r.compact_string(),
        "subscribed_topic_names": _read_strings(r),
        "subscribed_topic_regex": r.compact_nullable_string(),
        "rebalance_timeout_ms": r.int32(),
        "server_assignor": r.compact_nullable_string(),
        "classic_member_metadata": None,
    }
    for _ in range(r.uvarint()):  # the value's tagged fields
        tag, size = r.uvarint(), r.uvarint()
        data = r.take(size)
        if tag == CLASSIC_MEMBER_METADATA_TAG:
            out["classic_member_metadata"] = _read_classic_member_metadata(Reader(data))
    return out


def _read_classic_member_metadata(r: Reader) -> dict[str, Any] | None:
    if r.uvarint() <= 0:
        return None
    session_timeout_ms = r.int32()
    protocols = []
    for _ in range(_count(r)):
        name = r.compact_string()
        protocols.append({"name": name, "metadata": r.compact_bytes()})
        r.skip_tagged_fields()
    r.skip_tagged_fields()
    return {"session_timeout_ms": session_timeout_ms, "supported_protocols": protocols}


def _read_target_member(r: Reader) -> dict[str, Any]:
    return {"topic_partitions": _read_topic_partitions(r)}


def _read_current_assignment(r: Reader) -> dict[str, Any]:
    return {
        "member_epoch": r.int32(),
        "previous_member_epoch": r.int32(),
        "state": r.int8(),
        "assigned_partitions": _read_topic_partitions(r),
        "partitions_pending_revocation": _read_topic_partitions(r),
    }


def _read_regular_expression(r: Reader) -> dict[str, Any]:
    return {"topics": _read_strings(r), "version": r.int64(), "timestamp": r.int64()}


_DECODERS: dict[int, Callable[[Reader], dict[str, Any]]] = {
    CONSUMER_GROUP_METADATA: _read_epoch,
    CONSUMER_GROUP_PARTITION_METADATA: _read_partition_metadata,
    CONSUMER_GROUP_MEMBER_METADATA: _read_member_metadata,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: _read_assignment_epoch,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: _read_target_member,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: _read_current_assignment,
    CONSUMER_GROUP_REGULAR_EXPRESSION: _read_regular_expression,
}
