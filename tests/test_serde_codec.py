"""Tests for coordinator.serde and coordinator.log.codec (sections 10.2 - 10.4 of the reference).

Expected bytes are transcribed from the hand-checked examples of the reference document.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.log.codec import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from coordinator.serde import DecodeError, Reader, Writer


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def hx(text: str) -> bytes:
    """Hex with ``|`` field separators, as the reference document writes its examples."""
    return bytes.fromhex(text.replace("|", ""))


TS = 1700000000000  # 00 00 01 8b cf e5 68 00
EXPIRE = 1700086400000  # 00 00 01 8b d5 0b c4 00

# ----------------------------------------------------------------------------------------------
# serde primitives
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "80 01"),
        (300, "ac 02"),
        (16383, "ff 7f"),
        (16384, "80 80 01"),
        (2**31 - 1, "ff ff ff ff 07"),
        (2**32 - 1, "ff ff ff ff 0f"),
    ],
)
def test_uvarint(value: int, encoded: str) -> None:
    w = Writer()
    w.uvarint(value)
    assert w.getvalue() == h(encoded)
    r = Reader(h(encoded))
    assert r.uvarint() == value
    assert r.at_end()


def test_uvarint_errors() -> None:
    w = Writer()
    with pytest.raises(ValueError):
        w.uvarint(-1)
    with pytest.raises(ValueError):
        w.uvarint(2**32)
    with pytest.raises(DecodeError, match="too long"):
        Reader(h("80 80 80 80 80 01")).uvarint()
    with pytest.raises(DecodeError):
        Reader(h("80 80")).uvarint()
    with pytest.raises(DecodeError):
        Reader(b"").uvarint()


def test_fixed_width_big_endian() -> None:
    w = Writer()
    w.int8(-1)
    w.int16(0x0102)
    w.int32(-2)
    w.int64(0x0102030405060708)
    data = w.getvalue()
    assert data == h("ff 01 02 ff ff ff fe 01 02 03 04 05 06 07 08")
    r = Reader(data)
    assert (r.int8(), r.int16(), r.int32(), r.int64()) == (-1, 0x0102, -2, 0x0102030405060708)
    assert r.at_end()
    assert r.remaining() == 0
    with pytest.raises(DecodeError):
        r.int8()


@pytest.mark.parametrize(
    ("method", "value"),
    [("int8", 128), ("int16", 2**15), ("int32", -(2**31) - 1), ("int64", 2**63)],
)
def test_fixed_width_out_of_range(method: str, value: int) -> None:
    with pytest.raises(ValueError):
        getattr(Writer(), method)(value)


def test_classic_strings_and_bytes() -> None:
    w = Writer()
    w.string("")
    w.string("é")
    w.nullable_string(None)
    w.nullable_string("a")
    w.bytes_(b"")
    w.nullable_bytes(None)
    w.nullable_bytes(b"\x01")
    w.array_len(2)
    data = w.getvalue()
    assert data == hx(
        "00 00 | 00 02 c3 a9 | ff ff | 00 01 61 | 00 00 00 00 | ff ff ff ff | 00 00 00 01 01"
        " | 00 00 00 02"
    )
    r = Reader(data + h("00 00 00 00"))
    assert r.string() == ""
    assert r.string() == "é"
    assert r.nullable_string() is None
    assert r.nullable_string() == "a"
    assert r.bytes_() == b""
    assert r.nullable_bytes() is None
    assert r.nullable_bytes() == b"\x01"
    assert r.array_len() == 2
    assert r.remaining() == 4


def test_compact_strings_and_bytes() -> None:
    w = Writer()
    w.compact_string("")
    w.compact_string("ab")
    w.compact_nullable_string(None)
    w.compact_bytes(b"\x07")
    w.compact_nullable_bytes(None)
    w.compact_array_len(0)
    w.empty_tagged_fields()
    data = w.getvalue()
    assert data == h("01 03 61 62 00 02 07 00 01 00")
    r = Reader(data)
    assert r.compact_string() == ""
    assert r.compact_string() == "ab"
    assert r.compact_nullable_string() is None
    assert r.compact_bytes() == b"\x07"
    assert r.compact_nullable_bytes() is None
    assert r.compact_array_len() == 0
    r.skip_tagged_fields()
    assert r.at_end()


def test_string_length_limit() -> None:
    w = Writer()
    w.string("a" * 32767)
    assert w.getvalue()[:2] == h("7f ff")
    with pytest.raises(ValueError):
        Writer().string("a" * 32768)
    with pytest.raises(ValueError):
        Writer().string("é" * 16384)  # 32768 UTF-8 bytes
    with pytest.raises(ValueError):
        Writer().compact_string("a" * 32768)
    with pytest.raises(ValueError):
        Writer().nullable_string("a" * 32768)


def test_null_arrays() -> None:
    assert Reader(h("ff ff ff ff")).array_len() == -1
    assert Reader(h("00")).compact_array_len() == -1


@pytest.mark.parametrize(
    ("data", "read"),
    [
        ("ff ff", Reader.string),  # null where not nullable
        ("ff fe", Reader.string),
        ("00 05 61 62", Reader.string),  # length beyond the buffer
        ("00 05 61 62", Reader.nullable_string),
        ("00 02 c3 28", Reader.string),  # invalid UTF-8
        ("00 01 ff", Reader.nullable_string),
        ("ff ff ff ff", Reader.bytes_),
        ("00 00 00 09 00", Reader.bytes_),
        ("00 00 00 09 00", Reader.nullable_bytes),
        ("00 00 00", Reader.array_len),
        ("00 00 00 05 00", Reader.array_len),  # more elements than bytes left
        ("00", Reader.compact_string),
        ("00", Reader.compact_bytes),
        ("05 61", Reader.compact_string),
        ("05 61", Reader.compact_nullable_bytes),
        ("03 c3 28", Reader.compact_string),
        ("81 80 02 00", Reader.compact_string),  # 32768 bytes: over the string limit
        ("81 80 02 00", Reader.compact_nullable_string),
        ("06 00", Reader.compact_array_len),
        ("01 01 05 00", Reader.skip_tagged_fields),  # tag 1, size 5, one byte present
        ("02 01 00", Reader.skip_tagged_fields),  # declares two fields, has one
        ("", Reader.skip_tagged_fields),
    ],
)
def test_malformed_reads(data: str, read: Callable[[Reader], object]) -> None:
    with pytest.raises(DecodeError):
        read(Reader(h(data)))


def test_skip_tagged_fields() -> None:
    r = Reader(h("02 01 02 aa bb 80 01 00 ff"))
    r.skip_tagged_fields()
    assert r.remaining() == 1
    assert r.int8() == -1


def test_decode_error_is_value_error() -> None:
    assert issubclass(DecodeError, ValueError)


# ----------------------------------------------------------------------------------------------
# keys (10.2, 10.3, 10.4)
# ----------------------------------------------------------------------------------------------

OFFSET_KEY_V1 = h("00 01 00 08 6d 79 2d 67 72 6f 75 70 00 06 6f 72 64 65 72 73 00 00 00 03")
GROUP_KEY = h("00 02 00 08 6d 79 2d 67 72 6f 75 70")


def test_offset_commit_key_example() -> None:
    data = encode_offset_commit_key("my-group", "orders", 3)
    assert data == OFFSET_KEY_V1
    assert len(data) == 24
    assert decode_key(data) == OffsetCommitKey("my-group", "orders", 3)


def test_offset_commit_key_v0_decodes_identically() -> None:
    assert decode_key(h("00 00") + OFFSET_KEY_V1[2:]) == OffsetCommitKey("my-group", "orders", 3)


def test_group_metadata_key_example() -> None:
    assert encode_group_metadata_key("my-group") == GROUP_KEY
    assert decode_key(GROUP_KEY) == GroupMetadataKey("my-group")


@pytest.mark.parametrize(
    "data", ["00 0a 00 00", "00 0a", "7f ff", "7f ff 01 02 03", "ff ff", "00 0f"]
)
def test_unknown_key_versions(data: str) -> None:
    raw = h(data)
    assert decode_key(raw) == UnknownKey(int.from_bytes(raw[:2], "big", signed=True))


def test_unknown_key_values() -> None:
    # 10: a share group's record (Kafka 4.0's ShareGroupMemberMetadata), not kept here.
    assert decode_key(h("00 0a")) == UnknownKey(10)
    assert decode_key(h("7f ff")) == UnknownKey(32767)


def test_key_round_trip_unicode() -> None:
    data = encode_offset_commit_key("消费组", "test-😀", 2**31 - 1)
    assert decode_key(data) == OffsetCommitKey("消费组", "test-😀", 2**31 - 1)
    assert decode_key(encode_group_metadata_key("")) == GroupMetadataKey("")


@pytest.mark.parametrize("data", [OFFSET_KEY_V1, GROUP_KEY])
def test_truncated_keys(data: bytes) -> None:
    for n in range(len(data)):
        with pytest.raises(DecodeError):
            decode_key(data[:n])


def test_keys_ignore_trailing_bytes() -> None:
    assert decode_key(GROUP_KEY + b"\x00\x01") == GroupMetadataKey("my-group")


# ----------------------------------------------------------------------------------------------
# offset commit values (10.3)
# ----------------------------------------------------------------------------------------------

OFFSET_V3 = h("00 03 00 00 00 00 00 00 00 2a 00 00 00 05 00 00 00 00 01 8b cf e5 68 00")
OFFSET_V1 = h(
    "00 01 00 00 00 00 00 00 00 2a 00 01 78 00 00 01 8b cf e5 68 00 00 00 01 8b d5 0b c4 00"
)
OFFSET_V0 = h("00 00 00 00 00 00 00 00 00 2a 00 01 78 00 00 01 8b cf e5 68 00")
OFFSET_V2 = h("00 02 00 00 00 00 00 00 00 2a 00 01 78 00 00 01 8b cf e5 68 00")
OFFSET_V4 = h("00 04 00 00 00 00 00 00 00 2a 00 00 00 05 01 00 00 01 8b cf e5 68 00 00")

V3_VALUE = OffsetCommitValue(42, 5, "", TS, None)
V1_VALUE = OffsetCommitValue(42, None, "x", TS, EXPIRE)
V0_VALUE = OffsetCommitValue(42, None, "x", TS, None)


def test_offset_value_v3_example() -> None:
    assert len(OFFSET_V3) == 24
    assert encode_offset_commit_value(V3_VALUE) == OFFSET_V3  # Kafka's default choice
    assert encode_offset_commit_value(V3_VALUE, 3) == OFFSET_V3
    assert decode_offset_commit_value(OFFSET_V3) == V3_VALUE


def test_offset_value_v1_example() -> None:
    assert encode_offset_commit_value(V1_VALUE) == OFFSET_V1  # expire present -> v1
    assert encode_offset_commit_value(V1_VALUE, 1) == OFFSET_V1
    assert decode_offset_commit_value(OFFSET_V1) == V1_VALUE


def test_offset_value_v0_v2_examples() -> None:
    assert encode_offset_commit_value(V0_VALUE, 0) == OFFSET_V0
    assert encode_offset_commit_value(V0_VALUE, 2) == OFFSET_V2
    assert decode_offset_commit_value(OFFSET_V0) == V0_VALUE
    assert decode_offset_commit_value(OFFSET_V2) == V0_VALUE


def test_offset_value_v4_example() -> None:
    assert encode_offset_commit_value(V3_VALUE, 4) == OFFSET_V4
    assert decode_offset_commit_value(OFFSET_V4) == V3_VALUE


def test_offset_value_default_version_with_epoch_and_expire() -> None:
    # v1 cannot carry the leader epoch; Kafka writes v1 whenever an expire timestamp is present.
    value = OffsetCommitValue(7, 3, "m", TS, EXPIRE)
    data = encode_offset_commit_value(value)
    assert data[:2] == h("00 01")
    assert decode_offset_commit_value(data) == replace(value, leader_epoch=None)


def test_offset_value_drops_fields_the_version_cannot_carry() -> None:
    value = OffsetCommitValue(42, 5, "x", TS, EXPIRE)
    assert encode_offset_commit_value(value, 0) == OFFSET_V0
    assert encode_offset_commit_value(value, 2) == OFFSET_V2
    assert decode_offset_commit_value(encode_offset_commit_value(value, 3)) == replace(
        value, expire_timestamp_ms=None
    )


def test_offset_value_v4_skips_unknown_tagged_fields() -> None:
    body = h("00 04 00 00 00 00 00 00 00 2a 00 00 00 05 02 78 00 00 01 8b cf e5 68 00")
    one_tag = body + h("01 05 03 aa bb cc")
    assert decode_offset_commit_value(one_tag) == OffsetCommitValue(42, 5, "x", TS, None)
    two_tags = body + h("02 00 00 80 01 02 01 02")  # tag 0 (empty), tag 128 (2 bytes)
    assert decode_offset_commit_value(two_tags) == OffsetCommitValue(42, 5, "x", TS, None)
    with pytest.raises(DecodeError):
        decode_offset_commit_value(body + h("01 05 03 aa bb"))


def test_offset_value_sentinels() -> None:
    data = encode_offset_commit_value(OffsetCommitValue(1, -1, "", 0, None), 3)
    assert decode_offset_commit_value(data).leader_epoch is None
    v1 = encode_offset_commit_value(OffsetCommitValue(1, None, "", 0, None), 1)
    assert v1.endswith(h("ff ff ff ff ff ff ff ff"))
    assert decode_offset_commit_value(v1).expire_timestamp_ms is None


@pytest.mark.parametrize("version", [-1, 5, 32767, -32768])
def test_offset_value_unknown_version(version: int) -> None:
    data = version.to_bytes(2, "big", signed=True) + OFFSET_V3[2:]
    with pytest.raises(DecodeError):
        decode_offset_commit_value(data)
    with pytest.raises(ValueError):
        encode_offset_commit_value(V3_VALUE, version)


@pytest.mark.parametrize("data", [OFFSET_V0, OFFSET_V1, OFFSET_V2, OFFSET_V3, OFFSET_V4])
def test_offset_value_truncated(data: bytes) -> None:
    for n in range(len(data)):
        with pytest.raises(DecodeError):
            decode_offset_commit_value(data[:n])


def test_offset_value_ignores_trailing_bytes() -> None:
    assert decode_offset_commit_value(OFFSET_V3 + h("01 02 03")) == V3_VALUE


def test_offset_value_string_limit() -> None:
    with pytest.raises(ValueError):
        encode_offset_commit_value(OffsetCommitValue(1, None, "m" * 32768, 0, None))


# ----------------------------------------------------------------------------------------------
# group metadata values (10.4)
# ----------------------------------------------------------------------------------------------

CONSUMER = "00 08 63 6f 6e 73 75 6d 65 72"  # "consumer"
RANGE = "00 05 72 61 6e 67 65"  # "range"
C1 = "00 03 63 2d 31"  # "c-1"
TS_HEX = "00 00 01 8b cf e5 68 00"
MEMBER_V3 = (
    "00 03 63 2d 31 | ff ff | 00 01 63 | 00 09 2f 31 30 2e 30 2e 30 2e 31 | 00 04 93 e0 |"
    " 00 00 af c8 | 00 00 00 02 00 00 | 00 00 00 02 00 01"
)


GROUP_V3 = hx(
    f"00 03 | {CONSUMER} | 00 00 00 01 | {RANGE} | {C1} | {TS_HEX} | 00 00 00 01 | {MEMBER_V3}"
)
GROUP_V2 = hx(
    "00 02 | 00 08 63 6f 6e 73 75 6d 65 72 | 00 00 00 01 | 00 05 72 61 6e 67 65 | 00 03 63 2d 31 |"
    " 00 00 01 8b cf e5 68 00 | 00 00 00 01 | 00 03 63 2d 31 | 00 01 63 |"
    " 00 09 2f 31 30 2e 30 2e 30 2e 31 | 00 04 93 e0 | 00 00 af c8 | 00 00 00 02 00 00 |"
    " 00 00 00 02 00 01"
)
GROUP_V1 = hx(
    "00 01 | 00 08 63 6f 6e 73 75 6d 65 72 | 00 00 00 01 | 00 05 72 61 6e 67 65 | 00 03 63 2d 31 |"
    " 00 00 00 01 | 00 03 63 2d 31 | 00 01 63 | 00 09 2f 31 30 2e 30 2e 30 2e 31 | 00 04 93 e0 |"
    " 00 00 af c8 | 00 00 00 02 00 00 | 00 00 00 02 00 01"
)
GROUP_V0 = hx(
    "00 00 | 00 08 63 6f 6e 73 75 6d 65 72 | 00 00 00 01 | 00 05 72 61 6e 67 65 | 00 03 63 2d 31 |"
    " 00 00 00 01 | 00 03 63 2d 31 | 00 01 63 | 00 09 2f 31 30 2e 30 2e 30 2e 31 |"
    " 00 00 af c8 | 00 00 00 02 00 00 | 00 00 00 02 00 01"
)
GROUP_V4 = hx(
    "00 04 | 09 63 6f 6e 73 75 6d 65 72 | 00 00 00 01 | 06 72 61 6e 67 65 | 04 63 2d 31 |"
    " 00 00 01 8b cf e5 68 00 | 02 |"
    " 04 63 2d 31 00 02 63 0a 2f 31 30 2e 30 2e 30 2e 31 00 04 93 e0 00 00 af c8 03 00 00"
    " 03 00 01 00 | 00"
)
EMPTY_GROUP_V3 = hx(f"00 03 | {CONSUMER} | 00 00 00 02 | ff ff | ff ff | {TS_HEX} | 00 00 00 00")
NEW_GROUP_V3 = hx(f"00 03 | 00 00 | 00 00 00 00 | ff ff | ff ff | {TS_HEX} | 00 00 00 00")

MEMBER = MemberMetadataValue(
    member_id="c-1",
    group_instance_id=None,
    client_id="c",
    client_host="/10.0.0.1",
    rebalance_timeout_ms=300000,
    session_timeout_ms=45000,
    subscription=h("00 00"),
    assignment=h("00 01"),
)
GROUP = GroupMetadataValue(
    protocol_type="consumer",
    generation_id=1,
    protocol_name="range",
    leader="c-1",
    current_state_timestamp_ms=TS,
    members=(MEMBER,),
)


def test_group_v3_example() -> None:
    assert len(GROUP_V3) == 81
    assert encode_group_metadata_value(GROUP) == GROUP_V3  # Kafka writes v3
    assert encode_group_metadata_value(GROUP, 3) == GROUP_V3
    assert decode_group_metadata_value(GROUP_V3) == GROUP


def test_group_v2_example() -> None:
    assert GROUP_V2[2:] == GROUP_V3[2:45] + GROUP_V3[47:]  # v3 without the ff ff
    assert encode_group_metadata_value(GROUP, 2) == GROUP_V2
    assert decode_group_metadata_value(GROUP_V2) == GROUP


def test_group_v1_example() -> None:
    assert GROUP_V1[2:] == GROUP_V2[2:28] + GROUP_V2[36:]  # v2 without the timestamp
    assert encode_group_metadata_value(GROUP, 1) == GROUP_V1
    assert decode_group_metadata_value(GROUP_V1) == replace(GROUP, current_state_timestamp_ms=None)


def test_group_v0_example() -> None:
    assert GROUP_V0[2:] == GROUP_V1[2:51] + GROUP_V1[55:]  # v1 without the rebalance timeout
    assert encode_group_metadata_value(GROUP, 0) == GROUP_V0
    # v0 has no rebalance timeout: it is taken to be the session timeout.
    expected = replace(
        GROUP,
        current_state_timestamp_ms=None,
        members=(replace(MEMBER, rebalance_timeout_ms=45000),),
    )
    assert decode_group_metadata_value(GROUP_V0) == expected


def test_group_v4_example() -> None:
    assert len(GROUP_V4) == 67
    assert encode_group_metadata_value(GROUP, 4) == GROUP_V4
    assert decode_group_metadata_value(GROUP_V4) == GROUP


def test_empty_group_example() -> None:
    value = GroupMetadataValue("consumer", 2, None, None, TS, ())
    assert len(EMPTY_GROUP_V3) == 32
    assert encode_group_metadata_value(value) == EMPTY_GROUP_V3
    assert decode_group_metadata_value(EMPTY_GROUP_V3) == value


def test_new_group_example() -> None:
    value = GroupMetadataValue("", 0, None, None, TS, ())
    assert len(NEW_GROUP_V3) == 24
    assert encode_group_metadata_value(value) == NEW_GROUP_V3
    decoded = decode_group_metadata_value(NEW_GROUP_V3)
    assert decoded == value
    assert decoded.protocol_type == ""  # kept exactly as stored


def test_group_static_member_v3() -> None:
    member = replace(MEMBER, group_instance_id="instance-1")
    value = replace(GROUP, members=(member,))
    data = encode_group_metadata_value(value)
    assert h("00 0a") + b"instance-1" in data
    assert decode_group_metadata_value(data) == value
    # Versions before 3 cannot carry the instance id: it is dropped.
    assert encode_group_metadata_value(value, 2) == GROUP_V2


def test_group_timestamp_sentinel() -> None:
    value = replace(GROUP, current_state_timestamp_ms=None)
    data = encode_group_metadata_value(value)
    assert h("ff ff ff ff ff ff ff ff") in data
    assert decode_group_metadata_value(data).current_state_timestamp_ms is None


def test_group_v4_skips_unknown_tagged_fields() -> None:
    with_tags = hx(
        "00 04 | 09 63 6f 6e 73 75 6d 65 72 | 00 00 00 01 | 06 72 61 6e 67 65 | 04 63 2d 31 |"
        " 00 00 01 8b cf e5 68 00 | 02 |"
        " 04 63 2d 31 00 02 63 0a 2f 31 30 2e 30 2e 30 2e 31 00 04 93 e0 00 00 af c8 03 00 00"
        " 03 00 01 | 01 07 02 de ad |"  # member: one tagged field (tag 7, 2 bytes)
        " 02 00 01 ff 81 01 00"  # group: tag 0 (1 byte), tag 129 (empty)
    )
    assert decode_group_metadata_value(with_tags) == GROUP
    with pytest.raises(DecodeError):
        decode_group_metadata_value(with_tags[:-1])


@pytest.mark.parametrize("version", [-32768, -1, 5, 32767])
def test_group_unknown_version(version: int) -> None:
    data = version.to_bytes(2, "big", signed=True) + GROUP_V3[2:]
    with pytest.raises(DecodeError, match="Unknown group metadata message version"):
        decode_group_metadata_value(data)
    with pytest.raises(ValueError):
        encode_group_metadata_value(GROUP, version)


def test_group_null_members_array() -> None:
    data = hx(f"00 03 | {CONSUMER} | 00 00 00 02 | ff ff | ff ff | {TS_HEX} | ff ff ff ff")
    with pytest.raises(DecodeError):
        decode_group_metadata_value(data)


@pytest.mark.parametrize(
    "data",
    [GROUP_V0, GROUP_V1, GROUP_V2, GROUP_V3, GROUP_V4, EMPTY_GROUP_V3, NEW_GROUP_V3],
)
def test_group_truncated(data: bytes) -> None:
    for n in range(len(data)):
        with pytest.raises(DecodeError):
            decode_group_metadata_value(data[:n])


def test_group_ignores_trailing_bytes() -> None:
    assert decode_group_metadata_value(GROUP_V3 + b"\x00") == GROUP


def test_group_multiple_members_keep_order() -> None:
    members = tuple(
        replace(MEMBER, member_id=f"m-{i}", group_instance_id=None if i % 2 else f"i-{i}")
        for i in range(5)
    )
    value = replace(GROUP, members=members)
    for version in (3, 4):
        assert decode_group_metadata_value(encode_group_metadata_value(value, version)) == value


# ----------------------------------------------------------------------------------------------
# properties
# ----------------------------------------------------------------------------------------------

int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
texts = st.text(max_size=12)
opt_int32 = st.none() | int32s.filter(lambda x: x != -1)
opt_int64 = st.none() | int64s.filter(lambda x: x != -1)

offset_values = st.builds(OffsetCommitValue, int64s, opt_int32, texts, int64s, opt_int64)
members_st = st.builds(
    MemberMetadataValue,
    texts,
    st.none() | texts,
    texts,
    texts,
    int32s,
    int32s,
    st.binary(max_size=10),
    st.binary(max_size=10),
)
group_values = st.builds(
    GroupMetadataValue,
    texts,
    int32s,
    st.none() | texts,
    st.none() | texts,
    opt_int64,
    st.lists(members_st, max_size=4).map(tuple),
)


def _project_offset(value: OffsetCommitValue, version: int) -> OffsetCommitValue:
    return replace(
        value,
        leader_epoch=value.leader_epoch if version >= 3 else None,
        expire_timestamp_ms=value.expire_timestamp_ms if version == 1 else None,
    )


def _project_group(value: GroupMetadataValue, version: int) -> GroupMetadataValue:
    members = tuple(
        replace(
            m,
            group_instance_id=m.group_instance_id if version >= 3 else None,
            rebalance_timeout_ms=m.rebalance_timeout_ms if version >= 1 else m.session_timeout_ms,
        )
        for m in value.members
    )
    return replace(
        value,
        current_state_timestamp_ms=value.current_state_timestamp_ms if version >= 2 else None,
        members=members,
    )


@given(offset_values)
def test_offset_value_round_trip(value: OffsetCommitValue) -> None:
    default = 1 if value.expire_timestamp_ms is not None else 3
    data = encode_offset_commit_value(value)
    assert int.from_bytes(data[:2], "big") == default
    assert decode_offset_commit_value(data) == _project_offset(value, default)
    for version in range(5):
        data = encode_offset_commit_value(value, version)
        assert decode_offset_commit_value(data) == _project_offset(value, version)


@given(group_values)
def test_group_value_round_trip(value: GroupMetadataValue) -> None:
    for version in range(5):
        data = encode_group_metadata_value(value, version)
        assert decode_group_metadata_value(data) == _project_group(value, version)


@given(texts, texts, int32s)
def test_key_round_trip(group: str, topic: str, partition: int) -> None:
    assert decode_key(encode_offset_commit_key(group, topic, partition)) == OffsetCommitKey(
        group, topic, partition
    )
    assert decode_key(encode_group_metadata_key(group)) == GroupMetadataKey(group)


DECODERS: list[Callable[[bytes], object]] = [
    decode_key,
    decode_offset_commit_value,
    decode_group_metadata_value,
]


def _decode_or_decode_error(data: bytes) -> None:
    for decode in DECODERS:
        with contextlib.suppress(DecodeError):
            decode(data)


@given(st.binary(max_size=64))
def test_random_bytes_only_raise_decode_error(data: bytes) -> None:
    _decode_or_decode_error(data)


@given(st.integers(min_value=0, max_value=4), st.binary(max_size=96))
def test_random_bodies_only_raise_decode_error(version: int, body: bytes) -> None:
    _decode_or_decode_error(version.to_bytes(2, "big") + body)


@given(group_values, st.integers(min_value=0, max_value=4), st.data())
def test_corrupted_values_only_raise_decode_error(
    value: GroupMetadataValue, version: int, data: st.DataObject
) -> None:
    raw = bytearray(encode_group_metadata_value(value, version))
    index = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    raw[index] = data.draw(st.integers(min_value=0, max_value=255))
    _decode_or_decode_error(bytes(raw))
