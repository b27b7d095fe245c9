"""A batch's operator rows as columns, against the per-row ways they equal: the answers read
from their JSON a column at a time (:func:`datafiles.answers_from_bodies` against
:func:`datafiles.answers_from_dicts` over ``json.loads`` of each body), and the log records
(:func:`datafiles.records_from_rows` against :func:`datafiles.records_from_dicts` over
``record_from_bytes``)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import jsonio
from coordinator.log import codec
from coordinator.log.records import RECORD_FIELDS, record_from_bytes
from coordinator.requests import Error, response
from coordinator.stream import datafiles, operator
from tests.consumer_groups import M1, M2, Context

#: Strings with what a JSON string may hold: quotes, backslashes, control characters,
#: non-ASCII and astral characters.
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from('ab-_.:"\\/\n\t\x00\x1f é€😀'),
        st.characters(codec="utf-8"),
    ),
    max_size=12,
)
REQUEST_IDS = st.one_of(
    TEXT,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from("xy"), st.integers(), max_size=2),
)
ERRORS = st.sampled_from(list(Error))


@st.composite
def answers(draw: Any) -> dict[str, Any]:
    error = draw(ERRORS)
    fields = draw(
        st.dictionaries(
            st.sampled_from(["generation_id", "member_id", "members", "assignment"]),
            st.one_of(st.integers(), TEXT, st.lists(TEXT, max_size=2)),
            max_size=3,
        )
    )
    return response(
        draw(st.sampled_from(["heartbeat", "join_group", "offset_commit", "list_groups"])),
        draw(REQUEST_IDS),
        draw(TEXT),
        error,
        draw(st.one_of(st.none(), TEXT)),
        **fields,
    )


def encode(answer: dict[str, Any]) -> str:
    """As the operator writes an answer: the template for the common fields alone."""
    if len(answer) == 6:
        return jsonio.dumps_response(answer)
    return jsonio.dumps(answer)


def per_response(bodies: list[str]) -> pa.Table:
    return datafiles.answers_from_dicts([json.loads(body) for body in bodies])


@settings(max_examples=200, deadline=None)
@given(st.lists(answers(), max_size=12))
def test_the_columns_equal_the_per_response_way_and_keep_each_body(
    drawn: list[dict[str, Any]],
) -> None:
    bodies = [encode(answer) for answer in drawn]
    columns = datafiles.answers_from_bodies(pa.array(bodies, pa.string()))
    assert columns.schema == datafiles.ANSWER_SCHEMA
    assert columns.to_pylist() == per_response(bodies).to_pylist()
    assert columns.column("body").to_pylist() == bodies


def test_plain_answers_are_read_by_the_expression_and_the_rest_parsed() -> None:
    plain = response("heartbeat", "m1-7", "orders", Error.NONE)
    numbered = response("heartbeat", 42, "orders", Error.UNKNOWN_MEMBER_ID)
    unnamed = response("heartbeat", None, "orders", Error.REBALANCE_IN_PROGRESS)
    escaped = response("heartbeat", 'a"b', "or\\ders", Error.NONE)
    nested = response("join_group", {"n": 1}, "orders", Error.NONE, members=[])
    bodies = [encode(a) for a in (plain, numbered, unnamed, escaped, nested)]
    # The first three fit the expression; the last two are parsed.
    heads = pa.compute.extract_regex(pa.array(bodies), datafiles._ANSWER_HEAD)
    assert heads.is_valid().to_pylist() == [True, True, True, False, False]
    columns = datafiles.answers_from_bodies(pa.chunked_array([bodies[:2], bodies[2:]]))
    assert columns.to_pylist() == per_response(bodies).to_pylist()
    assert columns.column("request_id").to_pylist() == ["m1-7", "42", None, 'a"b', '{"n":1}']
    assert columns.column("error").to_pylist()[:3] == [
        None,
        "UNKNOWN_MEMBER_ID",
        "REBALANCE_IN_PROGRESS",
    ]
    assert columns.column("error_code").to_pylist()[:2] == [0, int(Error.UNKNOWN_MEMBER_ID)]


def test_no_answers_is_an_empty_table() -> None:
    assert datafiles.answers_from_bodies(pa.array([], pa.string())).num_rows == 0
    assert datafiles.answers_from_bodies(pa.chunked_array([], pa.string())).num_rows == 0


def operator_row(kind: str, group: str, seq: int, body: str | None = None) -> dict[str, Any]:
    return {
        "kind": kind,
        "group_id": group,
        "seq": seq,
        "offsets_partition": 0,
        "key": b"",
        "value": b"",
        "timestamp_ms": 1_000,
        "body": body,
    }


def test_a_batch_sorts_its_answers_by_group_and_emission() -> None:
    def answer(group: str, request: str) -> str:
        return encode(response("heartbeat", request, group, Error.NONE))

    rows = [
        operator_row(operator.RESPONSE, "b", 1, answer("b", "b1")),
        operator_row(operator.TICK, "", 0),
        operator_row(operator.RESPONSE, "a", 2, answer("a", "a2")),
        operator_row(operator.RESPONSE, "é", 0, answer("é", "é0")),
        operator_row(operator.RESPONSE, "a", 0, answer("a", "a0")),
        operator_row(operator.LIST_GROUPS, "", 0, '{"api":"list_groups"}'),
        operator_row(operator.RESPONSE, "b", 0, answer("b", "b0")),
    ]
    batch = datafiles.BatchRows.split(pa.Table.from_pylist(rows, datafiles.OPERATOR_SCHEMA))
    assert batch.rows == 7
    assert batch.timers_fired == 1
    assert batch.emitted_at_ms == 1_000
    assert batch.list_groups == ['{"api":"list_groups"}']
    # Python's order of the group ids (code points), then the operator's emission order.
    assert batch.responses.column("request_id").to_pylist() == ["a0", "a2", "b0", "b1", "é0"]


@pytest.mark.parametrize("rows", [0, 3])
def test_responses_table_stamps_the_batch(rows: int) -> None:
    bodies = [encode(response("heartbeat", f"r{i}", "g", Error.NONE)) for i in range(rows)]
    answers = datafiles.answers_from_bodies(pa.array(bodies, pa.string()))
    table = datafiles.responses_table(answers, 7, 1_000, 2_000)
    assert table.num_rows == rows
    assert table.column("batch_id").to_pylist() == [7] * rows
    assert table.column("emitted_at_ms").to_pylist() == [1_000] * rows
    assert table.column("written_at_ms").to_pylist() == [2_000] * rows


# --- log records --------------------------------------------------------------------------------


def consumer_group_records() -> list[tuple[bytes, bytes | None]]:
    """Records a KIP-848 group writes (its own record types, tombstones among them)."""
    context = Context()
    context.join(M1)
    context.join(M2)
    context.heartbeat(M2, -1)  # leaves: tombstones
    return [(r["key"], r["value"]) for r in context.records()]


def commit(group: str, partition: int, version: int | None, offset: int) -> tuple[bytes, bytes]:
    value = codec.OffsetCommitValue(offset, 3, "meta é", 1_000 + offset, None)
    key = codec.encode_offset_commit_key(group, "orders", partition)
    return key, codec.encode_offset_commit_value(value, version)


def group_metadata(group: str) -> tuple[bytes, bytes]:
    member = codec.MemberMetadataValue(
        "m-1", None, "client", "/10.0.0.1", 30_000, 10_000, b"sub", b"assign"
    )
    value = codec.GroupMetadataValue("consumer", 4, "range", "m-1", 5_000, (member,))
    return codec.encode_group_metadata_key(group), codec.encode_group_metadata_value(value)


def record_rows(records: list[tuple[bytes, bytes | None]]) -> pa.Table:
    rows = [
        {**operator_row(operator.RECORD, "g", i), "key": key, "value": value}
        for i, (key, value) in enumerate(records)
    ]
    for i, row in enumerate(rows):
        row["offsets_partition"] = i % 3
        row["timestamp_ms"] = 5_000 + i
    return pa.Table.from_pylist(rows, datafiles.OPERATOR_SCHEMA)


def per_record(rows: pa.Table) -> pa.Table:
    records = []
    for row in rows.to_pylist():
        record = record_from_bytes(row["key"], row["value"])
        assert record is not None
        record["offsets_partition"] = row["offsets_partition"]
        record["timestamp_ms"] = row["timestamp_ms"]
        records.append(record)
    return datafiles.records_from_dicts(records)


def test_records_read_the_short_way_or_the_general_one_equal_the_per_record_way() -> None:
    records = [commit("g", p, version, 10 * p) for p in range(3) for version in (None, 1, 3, 4)]
    records.append((codec.encode_offset_commit_key("g", "orders", 9), None))  # a deletion
    records += [group_metadata("g"), (codec.encode_group_metadata_key("gone"), None)]
    records += consumer_group_records()
    rows = record_rows(records)
    columns = datafiles.records_from_rows(rows)
    assert columns.schema == datafiles.RECORD_SCHEMA
    assert columns.to_pylist() == per_record(rows).to_pylist()
    assert columns.num_rows == len(records)
    kinds = set(columns.column("record_type").to_pylist())
    assert {"offset_commit", "group_metadata"} < kinds and len(kinds) > 3


def test_the_record_columns_are_the_logs_and_a_commit_leaves_the_groups_null() -> None:
    assert datafiles.RECORD_SCHEMA.names == [n for n in RECORD_FIELDS if n != "offset"]
    # An offset commit leaves a group's columns null (its own are checked above, value by
    # value, against the per-record way).
    group_only = ["protocol_type", "generation_id", "protocol_name", "leader", "members"]
    assert set(datafiles._GROUP_ONLY) == {*group_only, "current_state_timestamp_ms"}


def test_a_batch_numbers_its_records_per_offsets_partition_in_order() -> None:
    rows = [
        {**operator_row(operator.RECORD, group, seq), "key": key, "value": value}
        for group, seq, (key, value) in [
            ("b", 0, commit("b", 0, None, 1)),
            ("a", 1, commit("a", 1, None, 2)),
            ("a", 0, commit("a", 0, None, 3)),
        ]
    ]
    rows[0]["offsets_partition"] = 4
    batch = datafiles.BatchRows.split(pa.Table.from_pylist(rows, datafiles.OPERATOR_SCHEMA))
    # (offsets partition, group, emission): partition 0's a/0, a/1, then partition 4's b/0.
    assert batch.records.column("committed_offset").to_pylist() == [3, 2, 1]
    table, ends = datafiles.log_table(batch.records, {0: 7}, 2, 9_000)
    assert table.column("offset").to_pylist() == [7, 8, 0]
    assert ends == {0: 9, 4: 1}
    assert table.schema == datafiles.schema.CONSUMER_OFFSETS_SCHEMA
    assert datafiles.record_digests(batch.records)[0] == {
        "record_type": "offset_commit",
        "group_id": "a",
        "value": True,
    }
