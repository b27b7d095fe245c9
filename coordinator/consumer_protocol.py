"""Kafka consumer protocol payloads, protocol type ``consumer`` (section 11).

Owns the byte encodings of the JoinGroup metadata (*Subscription*, v0-v3) and the SyncGroup
assignment (*Assignment*, v0-v3), compatible with the Java client's ``ConsumerProtocol``: an int16
version followed by a non-flexible struct. Newer versions are read with the v3 layout (new versions
only append fields); negative versions are rejected. Also provides the coordinator's v0-prefix
topic parse (section 12.3) and JSON-friendly views for describe output.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from coordinator.serde import DecodeError, Reader, Writer

__all__ = [
    "HIGHEST_VERSION",
    "PROTOCOL_TYPE",
    "Assignment",
    "Subscription",
    "TopicPartitions",
    "assignment_to_json",
    "decode_assignment",
    "decode_subscription",
    "decode_subscription_topics",
    "encode_assignment",
    "encode_subscription",
    "subscription_to_json",
]

PROTOCOL_TYPE = "consumer"
HIGHEST_VERSION = 3
"""Highest Subscription/Assignment version known; higher versions are read with this layout."""


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartitions, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    assigned_partitions: tuple[TopicPartitions, ...]
    user_data: bytes | None = None


# -- helpers -----------------------------------------------------------------------------------


def _check_write_version(version: int) -> None:
    if not 0 <= version <= HIGHEST_VERSION:
        raise ValueError(f"unsupported consumer protocol version {version}")


def _write_topic_partitions(w: Writer, items: tuple[TopicPartitions, ...]) -> None:
    w.array_len(len(items))
    for tp in items:
        w.string(tp.topic)
        w.array_len(len(tp.partitions))
        for p in tp.partitions:
            w.int32(p)


def _read_count(r: Reader, field: str) -> int:
    n = r.array_len()
    if n < 0:
        raise DecodeError(f"non-nullable field {field} was serialized as null")
    return n


def _read_topic_partitions(r: Reader, field: str) -> tuple[TopicPartitions, ...]:
    out: list[TopicPartitions] = []
    for _ in range(_read_count(r, field)):
        topic = r.string()
        partitions = tuple(r.int32() for _ in range(_read_count(r, "partitions")))
        out.append(TopicPartitions(topic, partitions))
    return tuple(out)


def _read_topics(r: Reader) -> tuple[str, ...]:
    return tuple(r.string() for _ in range(_read_count(r, "topics")))


# -- subscription ------------------------------------------------------------------------------


def encode_subscription(s: Subscription, version: int = HIGHEST_VERSION) -> bytes:
    """Encode ``s`` with ``version`` (0-3); fields the version cannot carry are dropped."""
    _check_write_version(version)
    w = Writer()
    w.int16(version)
    w.array_len(len(s.topics))
    for topic in s.topics:
        w.string(topic)
    w.nullable_bytes(s.user_data)
    if version >= 1:
        _write_topic_partitions(w, s.owned_partitions)
    if version >= 2:
        w.int32(s.generation_id)
    if version >= 3:
        w.nullable_string(s.rack_id)
    return w.getvalue()


def _decode_subscription(r: Reader) -> tuple[int, Subscription]:
    raw_version = r.int16()
    if raw_version < 0:
        raise DecodeError(f"Unsupported subscription version: {raw_version}")
    version = min(raw_version, HIGHEST_VERSION)
    topics = _read_topics(r)
    user_data = r.nullable_bytes()
    owned = _read_topic_partitions(r, "owned_partitions") if version >= 1 else ()
    generation_id = r.int32() if version >= 2 else -1
    rack_id = r.nullable_string() if version >= 3 else None
    return raw_version, Subscription(topics, user_data, owned, generation_id, rack_id)


def decode_subscription(data: bytes) -> Subscription:
    return _decode_subscription(Reader(data))[1]


def decode_subscription_topics(data: bytes) -> tuple[str, ...]:
    """Topics of a subscription parsed the way the coordinator does it (section 12.3).

    The int16 version is read and ignored (whatever its value) and the rest is parsed with the v0
    layout (topics, then user data), so any well-formed v0 prefix works for every version.
    """
    r = Reader(data)
    r.int16()
    topics = _read_topics(r)
    r.nullable_bytes()
    return topics


# -- assignment --------------------------------------------------------------------------------


def encode_assignment(a: Assignment, version: int = HIGHEST_VERSION) -> bytes:
    """Encode ``a`` with ``version`` (0-3; all versions share the same layout)."""
    _check_write_version(version)
    w = Writer()
    w.int16(version)
    _write_topic_partitions(w, a.assigned_partitions)
    w.nullable_bytes(a.user_data)
    return w.getvalue()


def _decode_assignment(r: Reader) -> tuple[int, Assignment]:
    raw_version = r.int16()
    if raw_version < 0:
        raise DecodeError(f"Unsupported assignment version: {raw_version}")
    assigned = _read_topic_partitions(r, "assigned_partitions")
    user_data = r.nullable_bytes()
    return raw_version, Assignment(assigned, user_data)


def decode_assignment(data: bytes) -> Assignment:
    return _decode_assignment(Reader(data))[1]


# -- JSON views --------------------------------------------------------------------------------


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _partitions_json(items: tuple[TopicPartitions, ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in items:
        out.setdefault(tp.topic, []).extend(tp.partitions)
    return out


def subscription_to_json(data: bytes) -> dict[str, Any] | None:
    """Readable view of a subscription, or None when the bytes do not parse.

    Keys: ``version`` (as written in the bytes), ``topics``, ``user_data`` (base64 or None),
    ``owned_partitions`` ({topic: [partitions]}), ``generation_id``, ``rack_id``. Fields absent
    from the version carry their defaults.
    """
    try:
        version, s = _decode_subscription(Reader(data))
    except DecodeError:
        return None
    return {
        "version": version,
        "topics": list(s.topics),
        "user_data": _b64(s.user_data),
        "owned_partitions": _partitions_json(s.owned_partitions),
        "generation_id": s.generation_id,
        "rack_id": s.rack_id,
    }


def assignment_to_json(data: bytes) -> dict[str, Any] | None:
    """Readable view of an assignment, or None when the bytes do not parse.

    Keys: ``version`` (as written in the bytes), ``assigned_partitions`` ({topic: [partitions]}),
    ``user_data`` (base64 or None).
    """
    try:
        version, a = _decode_assignment(Reader(data))
    except DecodeError:
        return None
    return {
        "version": version,
        "assigned_partitions": _partitions_json(a.assigned_partitions),
        "user_data": _b64(a.user_data),
    }
