"""Tests for coordinator.log.partitioning against section 10.1 of the reference."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.log.partitioning import java_string_hashcode, java_utils_abs, partition_for

# (group id, hashCode, Utils.abs, partition of 50, partition of 2) -- section 10.1 table.
WORKED_EXAMPLES = [
    ("my-group", -1906497762, 1906497762, 12, 0),
    ("groupId", 293428218, 293428218, 18, 0),
    ("otherGroup", -204443313, 204443313, 13, 1),
    ("console-consumer-12345", 158455506, 158455506, 6, 0),
    ("", 0, 0, 0, 0),
    ("polygenelubricants", -2147483648, 0, 0, 0),
    ("\u6d88\u8d39\u7ec4", 28099635, 28099635, 35, 1),
    ("test-\U0001f600", -1420734338, 1420734338, 38, 0),
]


def _reference_hashcode(s: str) -> int:
    """Slow, obviously-correct port: UTF-16 code units, unbounded ints, wrap at the end."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = h * 31 + int.from_bytes(data[i : i + 2], "big")  # no wrapping until the end
    h %= 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(("group", "hashcode", "absval", "p50", "p2"), WORKED_EXAMPLES)
def test_worked_examples(group: str, hashcode: int, absval: int, p50: int, p2: int) -> None:
    assert java_string_hashcode(group) == hashcode
    assert java_utils_abs(hashcode) == absval
    assert partition_for(group, 50) == p50
    assert partition_for(group, 2) == p2


def test_named_characters() -> None:
    assert "消费组".encode("utf-16-be") == bytes.fromhex("6d88 8d39 7ec4")
    assert "😀".encode("utf-16-be") == bytes.fromhex("d83d de00")
    assert java_string_hashcode("消费组") == 28099635
    assert java_string_hashcode("test-😀") == -1420734338
    # The emoji counts as two UTF-16 code units (a surrogate pair).
    assert java_string_hashcode("😀") == 0xD83D * 31 + 0xDE00


def test_min_value_partition_is_not_negative() -> None:
    # Plain Math.abs(Integer.MIN_VALUE) would stay negative and give -48 with 50 partitions.
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert all(partition_for("polygenelubricants", n) == 0 for n in range(1, 200))


def test_utils_abs() -> None:
    assert java_utils_abs(-2147483648) == 0
    assert java_utils_abs(-2147483647) == 2147483647
    assert java_utils_abs(2147483647) == 2147483647
    assert java_utils_abs(0) == 0
    assert java_utils_abs(-5) == 5


def test_single_partition_and_bad_counts() -> None:
    assert partition_for("my-group", 1) == 0
    with pytest.raises(ValueError):
        partition_for("my-group", 0)
    with pytest.raises(ValueError):
        partition_for("my-group", -3)


def test_lone_surrogate_is_one_code_unit() -> None:
    assert java_string_hashcode("\ud83d") == 0xD83D
    assert java_string_hashcode("a\ude00") == 97 * 31 + 0xDE00


def test_long_string_wraps() -> None:
    s = "x" * 10_000
    assert java_string_hashcode(s) == _reference_hashcode(s)
    assert -(2**31) <= java_string_hashcode(s) < 2**31


@given(st.text(max_size=40))
def test_matches_reference(s: str) -> None:
    h = java_string_hashcode(s)
    assert h == _reference_hashcode(s)
    assert -(2**31) <= h < 2**31


@given(st.text(max_size=40), st.integers(min_value=1, max_value=1000))
def test_partition_in_range(s: str, n: int) -> None:
    p = partition_for(s, n)
    assert 0 <= p < n
    assert p == java_utils_abs(_reference_hashcode(s)) % n
