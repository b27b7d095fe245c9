"""Tests for coordinator.consumer_protocol against section 11 (and 12.3) of the reference."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    TopicPartitions,
    assignment_to_json,
    decode_assignment,
    decode_subscription,
    decode_subscription_topics,
    encode_assignment,
    encode_subscription,
    subscription_to_json,
)
from coordinator.serde import DecodeError


def hx(text: str) -> bytes:
    """Hex with ``|`` field separators, as the reference document writes its examples."""
    return bytes.fromhex(text.replace("|", ""))


ORDERS = "00 06 6f 72 64 65 72 73"  # "orders"

# Section 11.1 examples.
SUB_V3 = hx(f"00 03 | 00 00 00 01 {ORDERS} | ff ff ff ff | 00 00 00 00 | 00 00 00 01 | ff ff")
SUB_V0 = hx(f"00 00 | 00 00 00 01 {ORDERS} | ff ff ff ff")
# Section 11.2 example.
ASSIGN_V3 = hx(f"00 03 | 00 00 00 01 | {ORDERS} 00 00 00 02 00 00 00 00 00 00 00 01 | ff ff ff ff")

SUB_V3_VALUE = Subscription(
    topics=("orders",), user_data=None, owned_partitions=(), generation_id=1
)
ASSIGN_VALUE = Assignment((TopicPartitions("orders", (0, 1)),))


def test_protocol_type() -> None:
    assert PROTOCOL_TYPE == "consumer"


def test_subscription_v3_example() -> None:
    assert encode_subscription(SUB_V3_VALUE) == SUB_V3
    assert encode_subscription(SUB_V3_VALUE, 3) == SUB_V3
    assert decode_subscription(SUB_V3) == SUB_V3_VALUE
    assert decode_subscription_topics(SUB_V3) == ("orders",)


def test_subscription_v0_example() -> None:
    value = Subscription(topics=("orders",))
    assert encode_subscription(value, 0) == SUB_V0
    assert encode_subscription(SUB_V3_VALUE, 0) == SUB_V0  # v0 drops generation (and owned)
    assert decode_subscription(SUB_V0) == value
    assert decode_subscription_topics(SUB_V0) == ("orders",)


def test_subscription_v1_v2_layouts() -> None:
    value = Subscription(
        topics=("a", "b"),
        user_data=b"\x01\x02",
        owned_partitions=(TopicPartitions("a", (0, 2)),),
        generation_id=7,
        rack_id="rack-1",
    )
    body_v0 = hx("00 00 00 02 00 01 61 00 01 62 | 00 00 00 02 01 02")
    owned = hx("00 00 00 01 | 00 01 61 | 00 00 00 02 00 00 00 00 00 00 00 02")
    gen = hx("00 00 00 07")
    rack = hx("00 06") + b"rack-1"
    assert encode_subscription(value, 0) == hx("00 00") + body_v0
    assert encode_subscription(value, 1) == hx("00 01") + body_v0 + owned
    assert encode_subscription(value, 2) == hx("00 02") + body_v0 + owned + gen
    assert encode_subscription(value, 3) == hx("00 03") + body_v0 + owned + gen + rack
    assert decode_subscription(encode_subscription(value, 1)) == replace(
        value, generation_id=-1, rack_id=None
    )
    assert decode_subscription(encode_subscription(value, 2)) == replace(value, rack_id=None)
    assert decode_subscription(encode_subscription(value, 3)) == value


def test_assignment_v3_example() -> None:
    assert encode_assignment(ASSIGN_VALUE) == ASSIGN_V3
    assert encode_assignment(ASSIGN_VALUE, 3) == ASSIGN_V3
    assert decode_assignment(ASSIGN_V3) == ASSIGN_VALUE


@pytest.mark.parametrize("version", [0, 1, 2])
def test_assignment_same_layout_all_versions(version: int) -> None:
    data = encode_assignment(ASSIGN_VALUE, version)
    assert data == version.to_bytes(2, "big") + ASSIGN_V3[2:]
    assert decode_assignment(data) == ASSIGN_VALUE


def test_future_versions_read_with_v3_layout() -> None:
    future_sub = hx("00 07") + SUB_V3[2:] + hx("de ad be ef")  # appended unknown fields
    assert decode_subscription(future_sub) == SUB_V3_VALUE
    assert decode_subscription_topics(future_sub) == ("orders",)
    future_assign = hx("7f ff") + ASSIGN_V3[2:] + hx("00 01")
    assert decode_assignment(future_assign) == ASSIGN_VALUE


def test_negative_versions_rejected() -> None:
    with pytest.raises(DecodeError):
        decode_subscription(hx("ff ff") + SUB_V3[2:])
    with pytest.raises(DecodeError):
        decode_assignment(hx("80 00") + ASSIGN_V3[2:])
    assert subscription_to_json(hx("ff ff") + SUB_V3[2:]) is None
    assert assignment_to_json(hx("80 00") + ASSIGN_V3[2:]) is None


def test_topics_parse_ignores_version() -> None:
    # The coordinator reads the int16 version, ignores it and parses the v0 prefix (12.3).
    assert decode_subscription_topics(hx("ff ff") + SUB_V0[2:]) == ("orders",)


@pytest.mark.parametrize("version", [-1, 4])
def test_encode_bad_version(version: int) -> None:
    with pytest.raises(ValueError):
        encode_subscription(SUB_V3_VALUE, version)
    with pytest.raises(ValueError):
        encode_assignment(ASSIGN_VALUE, version)


@pytest.mark.parametrize("data", [SUB_V0, SUB_V3])
def test_subscription_truncated(data: bytes) -> None:
    for n in range(len(data)):
        with pytest.raises(DecodeError):
            decode_subscription(data[:n])
        assert subscription_to_json(data[:n]) is None


def test_subscription_topics_truncated() -> None:
    # Only the v0 prefix (topics + user data) is needed: everything after it may be missing.
    assert decode_subscription_topics(SUB_V3[: len(SUB_V0)]) == ("orders",)
    for n in range(len(SUB_V0)):
        with pytest.raises(DecodeError):
            decode_subscription_topics(SUB_V3[:n])


def test_assignment_truncated() -> None:
    for n in range(len(ASSIGN_V3)):
        with pytest.raises(DecodeError):
            decode_assignment(ASSIGN_V3[:n])
        assert assignment_to_json(ASSIGN_V3[:n]) is None


@pytest.mark.parametrize(
    "data",
    [
        hx("00 00 | ff ff ff ff | ff ff ff ff"),  # null topics array
        hx("00 00 | 00 00 00 01 ff ff | ff ff ff ff"),  # null topic name
        hx("00 00 | 00 00 00 01 00 02 c3 28 | ff ff ff ff"),  # invalid UTF-8
        hx("00 00 | 7f ff ff ff | ff ff ff ff"),  # absurd element count
        hx("00 01 | 00 00 00 00 | ff ff ff ff | ff ff ff ff"),  # null owned_partitions
    ],
)
def test_malformed_subscriptions(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_subscription(data)
    assert subscription_to_json(data) is None


def test_malformed_topics_prefix() -> None:
    with pytest.raises(DecodeError):
        decode_subscription_topics(hx("00 00 | ff ff ff ff | ff ff ff ff"))
    with pytest.raises(DecodeError):
        decode_subscription_topics(hx("00 00 | 00 00 00 00 | 00 00 00 05 01"))  # bad user data


def test_malformed_assignment() -> None:
    data = hx(f"00 03 | 00 00 00 01 | {ORDERS} ff ff ff ff | ff ff ff ff")  # null partitions
    with pytest.raises(DecodeError):
        decode_assignment(data)


def test_empty_assignment_filler_does_not_parse() -> None:
    # The coordinator fills omitted members with b"" (11.2); it is not a valid Assignment.
    with pytest.raises(DecodeError):
        decode_assignment(b"")
    assert assignment_to_json(b"") is None


def test_subscription_json() -> None:
    assert subscription_to_json(SUB_V3) == {
        "version": 3,
        "topics": ["orders"],
        "user_data": None,
        "owned_partitions": {},
        "generation_id": 1,
        "rack_id": None,
    }
    value = Subscription(
        topics=("a", "b"),
        user_data=b"\x00\x01\xff",
        owned_partitions=(TopicPartitions("a", (1, 0)), TopicPartitions("b", (3,))),
        generation_id=4,
        rack_id="r",
    )
    assert subscription_to_json(encode_subscription(value)) == {
        "version": 3,
        "topics": ["a", "b"],
        "user_data": base64.b64encode(b"\x00\x01\xff").decode(),
        "owned_partitions": {"a": [1, 0], "b": [3]},
        "generation_id": 4,
        "rack_id": "r",
    }
    future = subscription_to_json(hx("00 09") + SUB_V3[2:])
    assert future is not None
    assert future["version"] == 9
    assert subscription_to_json(b"garbage") is None


def test_assignment_json() -> None:
    assert assignment_to_json(ASSIGN_V3) == {
        "version": 3,
        "assigned_partitions": {"orders": [0, 1]},
        "user_data": None,
    }
    value = Assignment((TopicPartitions("t", (5,)),), user_data=b"ud")
    assert assignment_to_json(encode_assignment(value, 0)) == {
        "version": 0,
        "assigned_partitions": {"t": [5]},
        "user_data": base64.b64encode(b"ud").decode(),
    }


# ----------------------------------------------------------------------------------------------
# properties
# ----------------------------------------------------------------------------------------------

int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
texts = st.text(max_size=10)
topic_partitions = st.builds(TopicPartitions, texts, st.lists(int32s, max_size=5).map(tuple))
tp_tuples = st.lists(topic_partitions, max_size=4).map(tuple)
subscriptions = st.builds(
    Subscription,
    st.lists(texts, max_size=5).map(tuple),
    st.none() | st.binary(max_size=12),
    tp_tuples,
    int32s,
    st.none() | texts,
)
assignments = st.builds(Assignment, tp_tuples, st.none() | st.binary(max_size=12))


def _project_subscription(s: Subscription, version: int) -> Subscription:
    return replace(
        s,
        owned_partitions=s.owned_partitions if version >= 1 else (),
        generation_id=s.generation_id if version >= 2 else -1,
        rack_id=s.rack_id if version >= 3 else None,
    )


@given(subscriptions)
def test_subscription_round_trip(s: Subscription) -> None:
    assert decode_subscription(encode_subscription(s)) == s
    for version in range(4):
        data = encode_subscription(s, version)
        assert decode_subscription(data) == _project_subscription(s, version)
        assert decode_subscription_topics(data) == s.topics
        view = subscription_to_json(data)
        assert view is not None
        assert view["version"] == version
        assert view["topics"] == list(s.topics)


@given(assignments)
def test_assignment_round_trip(a: Assignment) -> None:
    for version in range(4):
        data = encode_assignment(a, version)
        assert decode_assignment(data) == a
        view = assignment_to_json(data)
        assert view is not None
        assert view["version"] == version


DECODERS: list[Callable[[bytes], object]] = [
    decode_subscription,
    decode_subscription_topics,
    decode_assignment,
]


def _decode_or_decode_error(data: bytes) -> None:
    for decode in DECODERS:
        with contextlib.suppress(DecodeError):
            decode(data)
    for view in (subscription_to_json, assignment_to_json):
        result = view(data)
        assert result is None or isinstance(result, dict)


@given(st.binary(max_size=64))
def test_random_bytes_only_raise_decode_error(data: bytes) -> None:
    _decode_or_decode_error(data)


@given(st.integers(min_value=0, max_value=5), st.binary(max_size=96))
def test_random_bodies_only_raise_decode_error(version: int, body: bytes) -> None:
    _decode_or_decode_error(version.to_bytes(2, "big") + body)


@given(subscriptions, st.data())
def test_corrupted_subscriptions_only_raise_decode_error(
    s: Subscription, data: st.DataObject
) -> None:
    raw = bytearray(encode_subscription(s))
    index = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    raw[index] = data.draw(st.integers(min_value=0, max_value=255))
    _decode_or_decode_error(bytes(raw))
