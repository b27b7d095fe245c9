"""Bad input never breaks the engine: one test per kind of bad request.

Each gets an error response with Kafka's code (or INVALID_REQUEST) and a readable
``error_message``, is answered exactly once, and changes no group and writes no record.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from coordinator.log import records as log
from tests.support import GROUP_ID, Ctx


@pytest.fixture
def ctx() -> Ctx:
    """A Stable one-member group with a committed offset, to be left untouched."""
    ctx = Ctx()
    member, generation = ctx.join_and_sync_single()
    ctx.commit({("orders", 0): 7}, member_id=member, generation=generation)
    ctx.member, ctx.generation = member, generation  # type: ignore[attr-defined]
    return ctx


def good_join(ctx: Ctx) -> dict[str, Any]:
    return {
        "api": "join_group",
        "request_id": "bad",
        "group_id": GROUP_ID,
        "member_id": ctx.member,  # type: ignore[attr-defined]
        "session_timeout_ms": 500,
        "rebalance_timeout_ms": 500,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": ""}],
    }


def send_bad(ctx: Ctx, request: Any) -> dict[str, Any]:
    before = log.durable_view(ctx.c.group(GROUP_ID))
    records_before = len(ctx.records)
    out = ctx.c.handle(copy.deepcopy(request), ctx.now)
    assert len(out) == 1, out
    (answer,) = out
    assert answer["error_code"] != 0
    assert answer["error_message"], answer
    assert log.durable_view(ctx.c.group(GROUP_ID)) == before
    assert not ctx.c.drain_records() and len(ctx.records) == records_before
    assert not ctx.c.internal_errors
    return answer


def test_not_an_object(ctx: Ctx) -> None:
    for raw in ("join_group", 42, None, ["api"], b"{}"):
        answer = send_bad(ctx, raw)
        assert (answer["error"], answer["request_id"], answer["api"]) == (
            "INVALID_REQUEST",
            None,
            "unknown",
        )


def test_unknown_api(ctx: Ctx) -> None:
    answer = send_bad(ctx, {"api": "produce", "request_id": 1, "group_id": GROUP_ID})
    assert answer["error"] == "INVALID_REQUEST"
    assert answer["request_id"] == 1 and answer["group_id"] == GROUP_ID
    assert "unknown api 'produce'" in answer["error_message"]


def test_missing_request_id(ctx: Ctx) -> None:
    request = good_join(ctx)
    del request["request_id"]
    answer = send_bad(ctx, request)
    assert answer["error"] == "INVALID_REQUEST" and "request_id" in answer["error_message"]


@pytest.mark.parametrize("field", ["session_timeout_ms", "protocol_type", "protocols"])
def test_missing_field(ctx: Ctx, field: str) -> None:
    request = good_join(ctx)
    del request[field]
    answer = send_bad(ctx, request)
    assert answer["error"] == "INVALID_REQUEST"
    assert answer["error_message"] == f"missing field {field}"
    # The response still has the API's shape, as Kafka's error responses do.
    assert answer["generation_id"] == -1 and answer["members"] == []


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("session_timeout_ms", "500", "must be an integer"),
        ("session_timeout_ms", 500.0, "must be an integer"),
        ("session_timeout_ms", True, "must be an integer"),
        ("session_timeout_ms", 2**31, "out of range"),
        ("member_id", 5, "must be a string"),
        ("protocols", {"name": "range"}, "must be a list"),
        ("protocols", [{"metadata": ""}], "missing field protocols[0].name"),
        ("protocols", ["range"], "must be an object"),
    ],
)
def test_wrong_type(ctx: Ctx, field: str, value: Any, words: str) -> None:
    request = good_join(ctx)
    request[field] = value
    answer = send_bad(ctx, request)
    assert answer["error"] == "INVALID_REQUEST"
    assert words in answer["error_message"]


def test_bad_base64(ctx: Ctx) -> None:
    request = good_join(ctx)
    request["protocols"] = [{"name": "range", "metadata": "not base64!"}]
    answer = send_bad(ctx, request)
    assert answer["error"] == "INVALID_REQUEST"
    assert answer["error_message"] == "protocols[0].metadata is not valid base64"


def test_bad_base64_in_an_assignment(ctx: Ctx) -> None:
    answer = send_bad(
        ctx,
        {
            "api": "sync_group",
            "request_id": "s",
            "group_id": GROUP_ID,
            "member_id": ctx.member,  # type: ignore[attr-defined]
            "generation_id": ctx.generation,  # type: ignore[attr-defined]
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": "m", "assignment": "%%%"}],
        },
    )
    assert answer["error"] == "INVALID_REQUEST"
    assert answer["assignment"] == b""


def test_negative_session_timeout(ctx: Ctx) -> None:
    request = good_join(ctx)
    request["session_timeout_ms"] = -1
    answer = send_bad(ctx, request)
    assert answer["error"] == "INVALID_SESSION_TIMEOUT"
    assert "-1" in answer["error_message"]


def test_negative_rebalance_timeout(ctx: Ctx) -> None:
    request = good_join(ctx)
    request["rebalance_timeout_ms"] = -5
    answer = send_bad(ctx, request)
    assert answer["error"] == "INVALID_REQUEST"
    assert "rebalance_timeout_ms" in answer["error_message"]


def test_negative_retention(ctx: Ctx) -> None:
    answer = send_bad(
        ctx,
        {
            "api": "offset_commit",
            "request_id": "c",
            "group_id": GROUP_ID,
            "api_version": 2,
            "retention_time_ms": -7,
            "offsets": [{"topic": "orders", "partition": 0, "offset": 9}],
        },
    )
    assert answer["error"] == "INVALID_REQUEST"
    assert ctx.fetched([("orders", 0)]) == {("orders", 0): 7}


@pytest.mark.parametrize(
    "api", ["join_group", "sync_group", "heartbeat", "leave_group", "offset_delete"]
)
def test_empty_group_id(ctx: Ctx, api: str) -> None:
    request = {
        "join_group": good_join(ctx),
        "sync_group": {
            "member_id": "m",
            "generation_id": 1,
            "protocol_type": "consumer",
            "protocol_name": "range",
        },
        "heartbeat": {"member_id": "m", "generation_id": 1},
        "leave_group": {"members": [{"member_id": "m"}]},
        "offset_delete": {"partitions": [{"topic": "orders", "partition": 0}]},
    }[api]
    request.update(api=api, request_id="e", group_id="")
    answer = send_bad(ctx, request)
    assert answer["error"] == "INVALID_GROUP_ID"


@pytest.mark.parametrize("api", ["join_group", "heartbeat", "offset_commit", "describe_groups"])
def test_missing_group_id(ctx: Ctx, api: str) -> None:
    answer = send_bad(ctx, {"api": api, "request_id": "m"})
    assert answer["error"] == "INVALID_GROUP_ID"
    assert answer["error_message"] == "group_id is missing or null"


def test_group_id_of_the_wrong_type(ctx: Ctx) -> None:
    answer = send_bad(ctx, {"api": "describe_groups", "request_id": "t", "group_id": 7})
    assert answer["error"] == "INVALID_REQUEST"


def test_unsupported_version(ctx: Ctx) -> None:
    request = good_join(ctx)
    request["api_version"] = 10
    answer = send_bad(ctx, request)
    assert answer["error"] == "UNSUPPORTED_VERSION"
    assert "versions 0 to 9" in answer["error_message"]


def test_sync_v5_without_protocol(ctx: Ctx) -> None:
    """KIP-559: the broker refuses SyncGroup v5 without protocol type and name."""
    answer = send_bad(
        ctx,
        {
            "api": "sync_group",
            "request_id": "p",
            "group_id": GROUP_ID,
            "member_id": ctx.member,  # type: ignore[attr-defined]
            "generation_id": ctx.generation,  # type: ignore[attr-defined]
        },
    )
    assert answer["error"] == "INCONSISTENT_GROUP_PROTOCOL"


def test_leave_v3_without_members(ctx: Ctx) -> None:
    answer = send_bad(
        ctx,
        {"api": "leave_group", "request_id": "l", "group_id": GROUP_ID, "member_id": "x"},
    )
    assert answer["error"] == "INVALID_REQUEST" and "members" in answer["error_message"]


def test_transactional_coordinator_key_is_refused(ctx: Ctx) -> None:
    answer = send_bad(
        ctx, {"api": "find_coordinator", "request_id": "f", "group_id": "txn", "key_type": 1}
    )
    assert answer["error"] == "INVALID_REQUEST"


def test_bad_requests_leave_the_group_working(ctx: Ctx) -> None:
    """After a run of bad input the group carries on as if nothing happened."""
    for raw in (
        {"api": "heartbeat"},
        {"api": "heartbeat", "request_id": "x", "group_id": GROUP_ID},
    ):
        send_bad(ctx, raw)
    beat = ctx.answer(ctx.heartbeat(ctx.member, ctx.generation))  # type: ignore[attr-defined]
    assert beat is not None and beat["error"] is None
