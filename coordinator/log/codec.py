"""Byte-exact ``__consumer_offsets`` record keys and values (sections 10.2 - 10.4).

Owns the version-prefixed encodings of ``OffsetCommitKey`` (v0/v1), ``GroupMetadataKey`` (v2),
``OffsetCommitValue`` (v0-v4) and ``GroupMetadataValue`` (v0-v4), as Kafka's generated message
classes write and read them. Fields a version cannot carry are dropped on write (they are all
``ignorable`` in Kafka's schemas). Trailing bytes after a value are ignored, as Kafka does.
Malformed input raises :class:`coordinator.serde.DecodeError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from coordinator.log.modern_codec import KEY_FIELDS, ConsumerGroupKey, decode_key_fields
from coordinator.serde import DecodeError, Reader, Writer

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "UnknownKey",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
]

OFFSET_COMMIT_KEY_VERSION = 1
"""Key version Kafka writes for offset commits (0 and 1 decode identically)."""
GROUP_METADATA_KEY_VERSION = 2
"""Key version (= record type) of group metadata records."""

_NO_EPOCH = -1
_NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key of a record type this log does not use (share or streams groups, ...); skip it."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str  # "" = none, exactly as stored
    generation_id: int
    protocol_name: str | None
    leader: str | None
    current_state_timestamp_ms: int | None
    members: tuple[MemberMetadataValue, ...]


# -- keys --------------------------------------------------------------------------------------


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = Writer()
    w.int16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return w.getvalue()


def encode_group_metadata_key(group: str) -> bytes:
    w = Writer()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return w.getvalue()


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | UnknownKey:
    """Decode a record key: the classic types (0, 1, 2), Kafka 4.0's consumer-group types
    (3 to 8, 16); any other version gives :class:`UnknownKey` (share and streams groups, ...)."""
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        group = r.string()
        topic = r.string()
        partition = r.int32()
        return OffsetCommitKey(group, topic, partition)
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(r.string())
    if version in KEY_FIELDS:
        return decode_key_fields(version, r)
    return UnknownKey(version)


# -- offset commit value -----------------------------------------------------------------------


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    """Encode with ``version``, or with what Kafka writes (v1 if expiring, else v3) when None.

    v0, v2, v3 and v4 cannot carry the expire timestamp and v0-v2 cannot carry the leader epoch:
    those fields are silently dropped (they are ``ignorable`` in Kafka's schema).
    """
    if version is None:
        version = 1 if value.expire_timestamp_ms is not None else 3
    if not 0 <= version <= 4:
        raise ValueError(f"unsupported offset commit value version {version}")
    w = Writer()
    w.int16(version)
    w.int64(value.offset)
    if version >= 3:
        w.int32(_NO_EPOCH if value.leader_epoch is None else value.leader_epoch)
    if version >= 4:
        w.compact_string(value.metadata)
    else:
        w.string(value.metadata)
    w.int64(value.commit_timestamp_ms)
    if version == 1:
        expire = value.expire_timestamp_ms
        w.int64(_NO_TIMESTAMP if expire is None else expire)
    if version >= 4:
        w.empty_tagged_fields()
    return w.getvalue()


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise DecodeError(f"Unknown offset commit message version: {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else _NO_EPOCH
    metadata = r.compact_string() if version >= 4 else r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else _NO_TIMESTAMP
    if version >= 4:
        r.skip_tagged_fields()
    return OffsetCommitValue(
        offset=offset,
        leader_epoch=None if leader_epoch == _NO_EPOCH else leader_epoch,
        metadata=metadata,
        commit_timestamp_ms=commit_timestamp,
        expire_timestamp_ms=None if expire_timestamp == _NO_TIMESTAMP else expire_timestamp,
    )


#: An offset commit's fields as :func:`read_offset_commit` gives them: group, topic, partition,
#: then the value's committed offset, leader epoch, metadata, commit and expire timestamps (all
#: None for a tombstone).
OffsetCommitFields = tuple[
    str, str, int, int | None, int | None, str | None, int | None, int | None
]

_KEY_HEAD = struct.Struct(">hh")  # version, the group's length
_LENGTH = struct.Struct(">h")
_PARTITION = struct.Struct(">i")
_V1_HEAD = struct.Struct(">hqh")  # version, offset, the metadata's length
_V1_TAIL = struct.Struct(">qq")  # commit and expire timestamps
_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, the metadata's length
_V3_TAIL = struct.Struct(">q")  # commit timestamp


def read_offset_commit(key: bytes, value: bytes | None) -> OffsetCommitFields | None:
    """The fields of an offset commit record in the forms Kafka writes (key v0 or v1; value v1,
    v3 or a tombstone), read with ``struct`` alone: what :func:`decode_key` and
    :func:`decode_offset_commit_value` give for the same bytes. None for any other record or
    form, and for any bytes that are not exactly such a record (short, long, a negative length,
    invalid UTF-8): the general decoders read those, and refuse what they refuse."""
    try:
        version, length = _KEY_HEAD.unpack_from(key, 0)
        if version not in (0, 1) or length < 0:
            return None
        end = 4 + length
        group = key[4:end].decode("utf-8")
        (length,) = _LENGTH.unpack_from(key, end)
        if length < 0:
            return None
        start, end = end + 2, end + 2 + length
        topic = key[start:end].decode("utf-8")
        (partition,) = _PARTITION.unpack_from(key, end)
        if end + 4 != len(key):
            return None
        if value is None:
            return (group, topic, partition, None, None, None, None, None)
        (version,) = _LENGTH.unpack_from(value, 0)
        if version == 3:
            _, offset, epoch, length = _V3_HEAD.unpack_from(value, 0)
            start = _V3_HEAD.size
            expire = _NO_TIMESTAMP
        elif version == 1:
            _, offset, length = _V1_HEAD.unpack_from(value, 0)
            start = _V1_HEAD.size
            epoch = _NO_EPOCH
        else:
            return None
        if length < 0:
            return None
        end = start + length
        metadata = value[start:end].decode("utf-8")
        if version == 3:
            (committed_at,) = _V3_TAIL.unpack_from(value, end)
            end += _V3_TAIL.size
        else:
            committed_at, expire = _V1_TAIL.unpack_from(value, end)
            end += _V1_TAIL.size
        if end != len(value):
            return None
    except (struct.error, UnicodeDecodeError):
        return None
    return (
        group,
        topic,
        partition,
        offset,
        None if epoch == _NO_EPOCH else epoch,
        metadata,
        committed_at,
        None if expire == _NO_TIMESTAMP else expire,
    )


# -- group metadata value ----------------------------------------------------------------------


def encode_group_metadata_value(value: GroupMetadataValue, version: int = 3) -> bytes:
    """Encode with ``version`` (Kafka writes 3).

    Fields a version cannot carry are dropped: the rebalance timeout before v1, the current state
    timestamp before v2, the group instance id before v3.
    """
    if not 0 <= version <= 4:
        raise ValueError(f"unsupported group metadata value version {version}")
    flexible = version >= 4
    w = Writer()
    string = w.compact_string if flexible else w.string
    nullable_string = w.compact_nullable_string if flexible else w.nullable_string
    bytes_ = w.compact_bytes if flexible else w.bytes_

    w.int16(version)
    string(value.protocol_type)
    w.int32(value.generation_id)
    nullable_string(value.protocol_name)
    nullable_string(value.leader)
    if version >= 2:
        ts = value.current_state_timestamp_ms
        w.int64(_NO_TIMESTAMP if ts is None else ts)
    if flexible:
        w.compact_array_len(len(value.members))
    else:
        w.array_len(len(value.members))
    for m in value.members:
        string(m.member_id)
        if version >= 3:
            nullable_string(m.group_instance_id)
        string(m.client_id)
        string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        bytes_(m.subscription)
        bytes_(m.assignment)
        if flexible:
            w.empty_tagged_fields()
    if flexible:
        w.empty_tagged_fields()
    return w.getvalue()


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 4:
        raise DecodeError(f"Unknown group metadata message version: {version}")
    flexible = version >= 4
    string = r.compact_string if flexible else r.string
    nullable_string = r.compact_nullable_string if flexible else r.nullable_string
    bytes_ = r.compact_bytes if flexible else r.bytes_

    protocol_type = string()
    generation = r.int32()
    protocol = nullable_string()
    leader = nullable_string()
    ts = r.int64() if version >= 2 else _NO_TIMESTAMP
    count = r.compact_array_len() if flexible else r.array_len()
    if count < 0:
        raise DecodeError("non-nullable field members was serialized as null")
    members: list[MemberMetadataValue] = []
    for _ in range(count):
        member_id = string()
        instance_id = nullable_string() if version >= 3 else None
        client_id = string()
        client_host = string()
        rebalance_timeout = r.int32() if version >= 1 else None
        session_timeout = r.int32()
        subscription = bytes_()
        assignment = bytes_()
        if flexible:
            r.skip_tagged_fields()
        members.append(
            MemberMetadataValue(
                member_id=member_id,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host=client_host,
                rebalance_timeout_ms=(
                    session_timeout if rebalance_timeout is None else rebalance_timeout
                ),
                session_timeout_ms=session_timeout,
                subscription=subscription,
                assignment=assignment,
            )
        )
    if flexible:
        r.skip_tagged_fields()
    return GroupMetadataValue(
        protocol_type=protocol_type,
        generation_id=generation,
        protocol_name=protocol,
        leader=leader,
        current_state_timestamp_ms=None if ts == _NO_TIMESTAMP else ts,
        members=tuple(members),
    )
