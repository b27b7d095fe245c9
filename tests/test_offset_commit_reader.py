"""The sink's short way through an offset commit record's bytes (:func:`codec.read_offset_commit`)
against the general decoders it stands in for."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.log import codec
from coordinator.log.records import OFFSET_COMMIT, record_from_bytes
from coordinator.serde import DecodeError

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@st.composite
def commits(draw: Any) -> tuple[bytes, bytes | None]:
    key = codec.encode_offset_commit_key(draw(TEXT), draw(TEXT), draw(INT32))
    if draw(st.booleans()):
        key = bytes([0, 0]) + key[2:]  # key v0: the same fields
    if draw(st.integers(0, 5)) == 0:
        return key, None
    value = codec.OffsetCommitValue(
        offset=draw(INT64),
        leader_epoch=draw(st.one_of(st.none(), INT32.filter(lambda e: e != -1))),
        metadata=draw(TEXT),
        commit_timestamp_ms=draw(INT64),
        expire_timestamp_ms=draw(st.one_of(st.none(), INT64.filter(lambda t: t != -1))),
    )
    return key, codec.encode_offset_commit_value(
        value, draw(st.sampled_from([None, 0, 1, 2, 3, 4]))
    )


def general(key: bytes, value: bytes | None) -> tuple[Any, ...] | None:
    """What the general decoders give, in the short way's order (None: not an offset commit)."""
    try:
        record = record_from_bytes(key, value)
    except DecodeError:
        return None
    if record is None or record["record_type"] != OFFSET_COMMIT:
        return None
    names = ["group_id", "topic", "partition", "committed_offset", "leader_epoch", "metadata"]
    names += ["commit_timestamp_ms", "expire_timestamp_ms"]
    return tuple(record[name] for name in names)


@settings(max_examples=400, deadline=None)
@given(commits())
def test_the_forms_kafka_writes_are_read_the_short_way_and_equal(commit: Any) -> None:
    key, value = commit
    fields = codec.read_offset_commit(key, value)
    written_by_kafka = value is None or value[:2] in (b"\x00\x01", b"\x00\x03")
    assert (fields is not None) == written_by_kafka
    if fields is not None:
        assert fields == general(key, value)


@settings(max_examples=600, deadline=None)
@given(commits(), st.data())
def test_bytes_changed_anyhow_are_read_alike_or_left_to_the_general_way(
    commit: Any, data: st.DataObject
) -> None:
    key, value = commit
    which = data.draw(st.sampled_from(["key", "value"] if value is not None else ["key"]))
    raw = bytearray(key if which == "key" else value)
    how = data.draw(st.sampled_from(["cut", "extend", "flip"]))
    if how == "cut":
        del raw[data.draw(st.integers(0, max(0, len(raw) - 1))) :]
    elif how == "extend":
        raw += data.draw(st.binary(min_size=1, max_size=3))
    elif raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    changed = (bytes(raw), value) if which == "key" else (key, bytes(raw))
    fields = codec.read_offset_commit(*changed)
    if fields is not None:
        assert fields == general(*changed)


def test_other_records_are_left_to_the_general_way() -> None:
    group_key = codec.encode_group_metadata_key("g")
    assert codec.read_offset_commit(group_key, None) is None
    key = codec.encode_offset_commit_key("g", "t", 0)
    assert codec.read_offset_commit(key, b"\x00\x07") is None  # an unknown value version
    assert codec.read_offset_commit(key + b"\x00", None) is None  # a byte too many
