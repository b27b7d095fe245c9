"""The operator's answers as ``responses`` columns, read from their JSON a column at a time
(:func:`datafiles.answers_from_bodies`), against the per-response way they equal
(:func:`datafiles.answers_from_dicts` over ``json.loads`` of each body)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import jsonio
from coordinator.requests import Error, response
from coordinator.stream import datafiles, operator

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


@settings(max_examples=300, deadline=None)
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
