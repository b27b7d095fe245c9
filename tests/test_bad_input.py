"""Bad input never breaks the engine, nor stops the job: one test per kind of bad input.

The engine: each bad request gets an error response with Kafka's code (or INVALID_REQUEST) and
a readable ``error_message``, is answered exactly once, and changes no group and writes no
record. The job (second half): each bad line or file whose request id can be read is answered,
what cannot be read at all goes to ``rejected_requests``, and no group changes.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from coordinator.consumer_protocol import Subscription, encode_subscription
from coordinator.errors import Error
from coordinator.group.snapshot import decode_group
from coordinator.log import records as log
from coordinator.stream.client import decode_response
from coordinator.stream.local import LocalJob
from coordinator.stream.schema import CONSUMER_OFFSETS, GROUP_STATE, REJECTED_REQUESTS, RESPONSES
from coordinator.stream.settings import load_settings
from coordinator.stream.source import parse_sequenced
from tests.stream_support import TEST_COORDINATOR_SETTINGS
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


# --- the job: bad inbox lines and files never stop it -------------------------------------------
#
# ``LocalJob`` runs the Spark job's own operator and sink (``poll_inbox`` reads the inbox files
# as the job's text source splits them), so each kind of bad input is checked here in
# milliseconds; ``test_the_running_job_survives_every_kind_at_once`` drops them all into the
# real Spark job. Each test forms a healthy group first and checks afterwards that its
# ``group_state`` row, its committed offsets and the log are unchanged and that it still
# serves its member.

START_MS = 1_800_000_000_000
JOB_GROUP = "payments"
TOPIC = "orders"


def _subscription() -> str:
    return base64.b64encode(encode_subscription(Subscription((TOPIC,)))).decode()


class Inbox:
    """A ``LocalJob`` with one Stable two-member group that has committed offsets."""

    def __init__(self, warehouse: Path, **job: Any) -> None:
        self.open(warehouse, **job)
        self.now = START_MS
        self.files = 0
        first = self.run([self.join(f"j{i}") for i in range(2)])
        ids = [first[f"j{i}"]["member_id"] for i in range(2)]
        joined = self.run([self.join(f"k{i}", ids[i]) for i in range(2)])
        self.generation = joined["k0"]["generation_id"]
        leader = joined["k0"]["leader"]
        assignments = [
            {"member_id": m, "assignment": base64.b64encode(m.encode()).decode()} for m in ids
        ]
        synced = self.run(
            [self.sync(f"s{i}", m, assignments if m == leader else None) for i, m in enumerate(ids)]
        )
        assert all(a["error"] is None for a in synced.values()), synced
        self.member, self.other = ids
        committed = self.run([self.commit("c0", {0: 10, 1: 11})])
        assert [p["error"] for p in committed["c0"]["partitions"]] == [None, None]
        self.before = self.snapshot()

    def open(self, warehouse: Path, **job: Any) -> None:
        settings = load_settings(
            [],
            TEST_COORDINATOR_SETTINGS,  # no expiry sweep between the join's two steps
            warehouse=str(warehouse),
            **job,
        )
        self.job = LocalJob(settings)
        self.paths = settings.job.paths

    def copy(self, warehouse: Path, **job: Any) -> Inbox:
        """The same warehouse and job state under ``warehouse`` (a fresh copy per test)."""
        shutil.copytree(self.paths.root, warehouse)
        clone = copy.copy(self)
        clone.open(warehouse, **job)
        clone.job.state = dict(self.job.state)
        return clone

    # -- requests ---------------------------------------------------------------------------------

    def join(self, rid: str, member_id: str = "", **extra: Any) -> dict[str, Any]:
        return {
            "api": "join_group",
            "request_id": rid,
            "group_id": JOB_GROUP,
            "member_id": member_id,
            "client_id": "c",
            "session_timeout_ms": 60_000,
            "rebalance_timeout_ms": 10_000,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": _subscription()}],
            **extra,
        }

    def sync(self, rid: str, member_id: str, assignments: Any = None) -> dict[str, Any]:
        return {
            "api": "sync_group",
            "request_id": rid,
            "group_id": JOB_GROUP,
            "member_id": member_id,
            "generation_id": getattr(self, "generation", 1),
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": assignments or [],
        }

    def heartbeat(self, rid: str, **extra: Any) -> dict[str, Any]:
        return {
            "api": "heartbeat",
            "request_id": rid,
            "group_id": JOB_GROUP,
            "member_id": self.member,
            "generation_id": self.generation,
            **extra,
        }

    def commit(
        self, rid: str, offsets: dict[int, int], metadata: str = "", **extra: Any
    ) -> dict[str, Any]:
        return {
            "api": "offset_commit",
            "request_id": rid,
            "group_id": JOB_GROUP,
            "member_id": self.member,
            "generation_id": self.generation,
            "offsets": [
                {"topic": TOPIC, "partition": p, "offset": o, "metadata": metadata}
                for p, o in offsets.items()
            ],
            **extra,
        }

    # -- batches ----------------------------------------------------------------------------------

    def run(self, requests: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
        """Requests as one well-formed file dropped atomically; their answers by request id
        (parked ones come in later batches)."""
        answers = self.drop("".join(json.dumps(r) + "\n" for r in requests).encode()).answers
        for _ in range(5):
            if len(answers) == len({r["request_id"] for r in requests}):
                break
            answers.update(self.poll().answers)
        return answers

    def drop(self, data: bytes, *, atomic: bool = True, name: str | None = None) -> Batch:
        """A file in the inbox (renamed into it, or written in place), then one micro-batch."""
        self.files += 1
        name = name or f"{self.files:04d}.jsonl"
        if atomic:
            temp = self.paths.inbox / f".{name}.tmp"
            self.paths.inbox.mkdir(parents=True, exist_ok=True)
            temp.write_bytes(data)
            os.rename(temp, self.paths.inbox / name)
        else:
            (self.paths.inbox / name).write_bytes(data)
        return self.poll()

    def poll(self) -> Batch:
        self.now += 100
        batch_id = self.job.batch_id
        self.job.poll_inbox(self.now)
        assert not self.job.internal_errors, self.job.internal_errors
        answers: dict[Any, dict[str, Any]] = {}
        responses = [r for r in self.rows(RESPONSES) if r["batch_id"] == batch_id]
        for row in responses:
            answers.setdefault(decode_response(row)["request_id"], decode_response(row))
        rejected = [r for r in self.rows(REJECTED_REQUESTS) if r["batch_id"] == batch_id]
        return Batch([decode_response(r) for r in responses], answers, rejected)

    def bad(self, *lines: str | bytes) -> Batch:
        """Bad lines (then the file's newline), dropped atomically; the group must not change."""
        data = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
        batch = self.drop(data)
        self.assert_unchanged()
        return batch

    # -- what must not change -----------------------------------------------------------------------

    def rows(self, table: str) -> list[dict[str, Any]]:
        path = self.paths.table(table)
        return pa.table(DeltaTable(str(path)).to_pyarrow_table()).to_pylist()

    def snapshot(self) -> tuple[Any, ...]:
        (state,) = [r for r in self.rows(GROUP_STATE) if r["group_id"] == JOB_GROUP]
        for column in ("batch_id", "updated_at_ms"):
            state.pop(column)
        log_rows = sorted(
            (r["offsets_partition"], r["offset"], r["key"], r["value"])
            for r in self.rows(CONSUMER_OFFSETS)
        )
        _, blob = self.job.state[JOB_GROUP]
        return state, log_rows, log.durable_view(decode_group(blob)), self.groups()

    def groups(self) -> list[str]:
        return sorted(r["group_id"] for r in self.rows(GROUP_STATE))

    def assert_unchanged(self) -> None:
        assert self.snapshot() == self.before
        assert not self.job.internal_errors

    def assert_still_serving(self) -> None:
        """The member heartbeats and fetches its offsets as before."""
        answers = self.run(
            [
                self.heartbeat("alive"),
                {"api": "offset_fetch", "request_id": "f", "group_id": JOB_GROUP},
            ]
        )
        assert answers["alive"]["error"] is None
        fetched = {p["partition"]: p["offset"] for p in answers["f"]["partitions"]}
        assert fetched == {0: 10, 1: 11}


@dataclass
class Batch:
    responses: list[dict[str, Any]]
    answers: dict[Any, dict[str, Any]]
    rejected: list[dict[str, Any]]

    def answer(self, rid: Any, error: str, *words: str) -> dict[str, Any]:
        answer = self.answers[rid]
        assert answer["error"] == error, answer
        assert answer["error_code"] == Error[error].value
        for word in words:
            assert word in answer["error_message"], (word, answer["error_message"])
        return answer

    def rejection(self, raw: str, *words: str) -> dict[str, Any]:
        (row,) = [r for r in self.rejected if r["raw"] == raw]
        for word in words:
            assert word in row["reason"], (word, row["reason"])
        assert row["source_file"].endswith(".jsonl")
        return row


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Inbox:
    return Inbox(tmp_path_factory.mktemp("healthy") / "warehouse")


@pytest.fixture
def inbox(healthy: Inbox, tmp_path: Path) -> Inbox:
    return healthy.copy(tmp_path / "warehouse")


def test_a_line_that_is_not_json_is_rejected(inbox: Inbox) -> None:
    batch = inbox.bad("{not json", "heartbeat please", "{'request_id': 'single quotes'}")
    assert batch.responses == []
    batch.rejection("{not json", "not a JSON object", "Expecting property name")
    batch.rejection("heartbeat please", "not a JSON object")
    batch.rejection("{'request_id': 'single quotes'}", "not a JSON object")
    inbox.assert_still_serving()


def test_broken_json_whose_request_id_can_be_read_is_answered(inbox: Inbox) -> None:
    """The request id is read from the start of the line, up to where the JSON breaks."""
    batch = inbox.bad(
        '{"api": "heartbeat", "request_id": "b1", "group_id": "payments", "member_id": oops}',
        '{"request_id": 17, "api": "offset_commit", "offsets": [1, 2,, 3]}',
        # A number cut short (127 -> 12) is not taken for the id.
        '{"request_id": 12',
    )
    answer = batch.answer("b1", "INVALID_REQUEST", "not a JSON object")
    assert (answer["api"], answer["group_id"]) == ("heartbeat", JOB_GROUP)
    assert batch.answer(17, "INVALID_REQUEST")["partitions"] == []
    assert set(batch.answers) == {"b1", 17}
    batch.rejection('{"request_id": 12', "not a JSON object")
    inbox.assert_still_serving()


def test_json_that_is_not_an_object_is_rejected(inbox: Inbox) -> None:
    values = ["[1, 2]", '"heartbeat"', "42", "null", "true"]
    batch = inbox.bad(*values)
    assert batch.responses == []
    for value, kind in zip(values, ["list", "str", "int", "NoneType", "bool"], strict=True):
        batch.rejection(value, f"not a JSON object but {kind}")
    inbox.assert_still_serving()


def test_a_truncated_last_line_is_refused_and_the_lines_before_it_are_served(inbox: Inbox) -> None:
    """A file cut mid-JSON: its whole lines are served, the cut one is refused (answered when
    its id is readable, else rejected) with a reason that points at a non-atomic drop."""
    line = json.dumps(inbox.commit("cut", {0: 99}))
    for cut_at, rid in ((len(line) // 2, "cut"), (10, None)):
        good = json.dumps(inbox.heartbeat(f"before-{cut_at}"))
        batch = inbox.drop(f"{good}\n{line[:cut_at]}".encode())
        assert batch.answers[f"before-{cut_at}"]["error"] is None
        if rid is None:
            batch.rejection(line[:cut_at], "no trailing newline", "not dropped atomically")
            assert len(batch.responses) == 1
        else:
            batch.answer(rid, "INVALID_REQUEST", "no trailing newline", "not dropped atomically")
        inbox.assert_unchanged()
    inbox.assert_still_serving()


def test_a_file_dropped_non_atomically_is_read_as_it_was(inbox: Inbox) -> None:
    """Written in place and seen half-written: the job reads what was there; the rest of the
    file, written after the job took it, is never read (as Spark's file source marks a file
    seen once). A last line without its newline that is a whole JSON object is served: no
    prefix of an object is itself one, so it was not cut short (JSON Lines allows it)."""
    lines = [json.dumps(inbox.heartbeat(f"h{i}")) for i in range(3)]
    lines.append(json.dumps(inbox.commit("late", {0: 500})))
    data = "".join(x + "\n" for x in lines).encode()
    written = data.index(b'"late"') + 20  # the writer is part-way through the commit
    path = inbox.paths.inbox / "in-place.jsonl"
    with open(path, "wb") as writer:
        writer.write(data[:written])
        writer.flush()
        batch = inbox.poll()  # the job lists the inbox now
        writer.write(data[written:])
    assert [batch.answers[f"h{i}"]["error"] for i in range(3)] == [None, None, None]
    batch.answer("late", "INVALID_REQUEST", "not dropped atomically")
    inbox.assert_unchanged()
    assert (inbox.paths.archive / "in-place.jsonl").read_bytes() == data
    assert inbox.poll().responses == []  # the rest was never read

    whole_but_unterminated = json.dumps(inbox.commit("no-newline", {0: 600}))
    batch = inbox.drop(f"{lines[0]}\n{whole_but_unterminated}".encode(), atomic=False)
    assert batch.answers["no-newline"]["error"] is None
    assert batch.answers["no-newline"]["partitions"][0]["error"] is None
    answers = inbox.run([{"api": "offset_fetch", "request_id": "f2", "group_id": JOB_GROUP}])
    assert {p["partition"]: p["offset"] for p in answers["f2"]["partitions"]} == {0: 600, 1: 11}


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("generation_id", "1", "generation_id must be an integer, got str '1'"),
        ("generation_id", 1.0, "generation_id must be an integer, got float"),
        ("generation_id", 2**40, "out of range"),
        ("member_id", ["m"], "member_id must be a string"),
        ("offsets", {"partition": 0}, "offsets must be a list"),
        ("offsets", [{"topic": "orders", "partition": "0", "offset": 1}], "partition must be"),
        ("offsets", [{"topic": "orders", "partition": 0}], "missing field offsets[0].offset"),
        ("api_version", "9", "api_version must be an integer"),
        ("retention_time_ms", True, "retention_time_ms must be an integer"),
    ],
)
def test_a_field_of_the_wrong_type_is_answered(
    inbox: Inbox, field: str, value: Any, words: str
) -> None:
    request = inbox.commit("typed", {0: 50})
    request[field] = value
    batch = inbox.bad(json.dumps(request))
    answer = batch.answer("typed", "INVALID_REQUEST", words)
    assert answer["api"] == "offset_commit" and answer["group_id"] == JOB_GROUP
    inbox.assert_still_serving()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("session_timeout_ms", 30_000.0, "session_timeout_ms must be an integer, got float"),
        ("session_timeout_ms", "30000", "must be an integer, got str"),
        ("protocols", "range", "protocols must be a list"),
        ("protocols", [{"name": 1}], "protocols[0].name must be a string"),
        ("reason", 5, "reason must be a string"),
    ],
)
def test_a_join_of_the_wrong_types_is_answered(
    inbox: Inbox, field: str, value: Any, words: str
) -> None:
    request = inbox.join("typed-join", inbox.member)
    request[field] = value
    answer = inbox.bad(json.dumps(request)).answer("typed-join", "INVALID_REQUEST", words)
    assert answer["generation_id"] == -1 and answer["members"] == []
    inbox.assert_still_serving()


@pytest.mark.parametrize("api", ["produce", "", "JoinGroup", 11, ["join_group"], {"a": 1}, None])
def test_an_unknown_api_is_answered(inbox: Inbox, api: Any) -> None:
    request = inbox.heartbeat("what")
    request["api"] = api
    answer = inbox.bad(json.dumps(request)).answer("what", "INVALID_REQUEST", "unknown api")
    assert answer["api"] == (api if isinstance(api, str) and api else "unknown")
    assert answer["group_id"] == JOB_GROUP
    inbox.assert_still_serving()


def test_a_missing_or_mistyped_group_id_is_answered(inbox: Inbox) -> None:
    missing = inbox.heartbeat("no-group")
    del missing["group_id"]
    null = {**inbox.commit("null-group", {0: 1}), "group_id": None}
    number = {**inbox.commit("number-group", {0: 1}), "group_id": 7}
    listed = {**inbox.heartbeat("list-group"), "group_id": ["payments"]}
    empty = {**inbox.heartbeat("empty-group"), "group_id": ""}
    batch = inbox.bad(*(json.dumps(r) for r in (missing, null, number, listed, empty)))
    batch.answer("no-group", "INVALID_GROUP_ID", "group_id is missing or null")
    assert batch.answer("null-group", "INVALID_GROUP_ID")["partitions"] == []
    batch.answer("number-group", "INVALID_REQUEST", "group_id must be a string, got int 7")
    batch.answer("list-group", "INVALID_REQUEST", "group_id must be a string")
    batch.answer("empty-group", "INVALID_GROUP_ID", "needs a non-empty group_id")
    assert inbox.groups() == [JOB_GROUP]
    inbox.assert_still_serving()


@pytest.mark.parametrize("request_id", [["r"], True, False, 1.5, 1e3, None, {"id": 1}, "MISSING"])
def test_a_request_id_that_cannot_be_answered_is_rejected(inbox: Inbox, request_id: Any) -> None:
    request = inbox.commit("x", {0: 77})
    if request_id == "MISSING":
        del request["request_id"]
    else:
        request["request_id"] = request_id
    line = json.dumps(request)
    batch = inbox.bad(line)
    assert batch.responses == []
    batch.rejection(line, "no request_id (a string or an integer) to answer to")
    inbox.assert_still_serving()


def test_invalid_base64_is_answered(inbox: Inbox) -> None:
    join = inbox.join("b64-join", inbox.member)
    join["protocols"] = [{"name": "range", "metadata": "not base64!"}]
    sync = inbox.sync("b64-sync", inbox.member, [{"member_id": inbox.member, "assignment": "%%"}])
    padding = inbox.join("b64-padding", inbox.member)
    padding["protocols"] = [{"name": "range", "metadata": "abc"}]
    binary = inbox.join("b64-type", inbox.member)
    binary["protocols"] = [{"name": "range", "metadata": [1, 2]}]
    batch = inbox.bad(*(json.dumps(r) for r in (join, sync, padding, binary)))
    batch.answer("b64-join", "INVALID_REQUEST", "protocols[0].metadata is not valid base64")
    batch.answer("b64-padding", "INVALID_REQUEST", "protocols[0].metadata is not valid base64")
    batch.answer("b64-type", "INVALID_REQUEST", "must be bytes or base64")
    answer = batch.answer("b64-sync", "INVALID_REQUEST", "assignments[0].assignment")
    assert answer["assignment"] == b""
    inbox.assert_still_serving()


def test_oversized_protocol_metadata_is_answered_unparsed(inbox: Inbox) -> None:
    """A JoinGroup whose metadata takes the line over ``job.max.request.bytes`` (1 MiB, Kafka's
    ``max.request.size``) never reaches the engine."""
    huge = base64.b64encode(b"\x00" * 900_000).decode()  # 1.2 MB of base64
    join = inbox.join("fat-join", inbox.member)
    join["protocols"] = [{"name": "range", "metadata": huge}]
    batch = inbox.bad(json.dumps(join))
    answer = batch.answer(
        "fat-join", "INVALID_REQUEST", "over job.max.request.bytes (1048576)", "not parsed"
    )
    assert answer["api"] == "join_group" and answer["generation_id"] == -1
    inbox.assert_still_serving()


def test_commit_metadata_over_offset_metadata_max_bytes_fails_per_partition(inbox: Inbox) -> None:
    """As Kafka: OFFSET_METADATA_TOO_LARGE for that partition only (4096 UTF-16 units)."""
    batch = inbox.bad(json.dumps(inbox.commit("fat", {0: 60, 1: 61}, metadata="m" * 4097)))
    partitions = batch.answers["fat"]["partitions"]
    assert batch.answers["fat"]["error"] is None
    assert [p["error"] for p in partitions] == ["OFFSET_METADATA_TOO_LARGE"] * 2
    inbox.assert_still_serving()

    # In a commit of several partitions the others are committed.
    mixed = inbox.commit("mixed", {0: 70, 1: 71})
    mixed["offsets"][1]["metadata"] = "\U0001f600" * 2049  # 4098 UTF-16 code units
    answers = inbox.run([mixed])
    assert [p["error"] for p in answers["mixed"]["partitions"]] == [
        None,
        "OFFSET_METADATA_TOO_LARGE",
    ]
    fetched = inbox.run([{"api": "offset_fetch", "request_id": "f2", "group_id": JOB_GROUP}])
    assert {p["partition"]: p["offset"] for p in fetched["f2"]["partitions"]} == {0: 70, 1: 11}


def test_an_oversized_line_is_answered_or_rejected_without_being_parsed(
    healthy: Inbox, tmp_path: Path
) -> None:
    inbox = healthy.copy(tmp_path / "warehouse", max_request_bytes=4096)
    filler = "x" * 200_000
    id_first = json.dumps({**inbox.heartbeat("long"), "extra": filler})
    id_last = json.dumps({"api": "heartbeat", "extra": filler, "request_id": "buried"})
    batch = inbox.bad(id_first, id_last)
    batch.answer("long", "INVALID_REQUEST", f"the line is {len(id_first)} bytes, over")
    assert list(batch.answers) == ["long"]  # "buried" is beyond the 64 KiB searched for an id
    (row,) = batch.rejected
    assert id_last.startswith(row["raw"]) and len(row["raw"]) == 64 * 1024
    assert "over job.max.request.bytes (4096)" in row["reason"]
    assert f"(raw: its first 65536 bytes of {len(id_last)})" in row["reason"]
    # The limit counts bytes, not characters: 1500 three-byte characters are 4500 bytes.
    wide = json.dumps({**inbox.heartbeat("wide"), "x": "€" * 1500}, ensure_ascii=False)
    inbox.bad(wide).answer("wide", "INVALID_REQUEST", "over job.max.request.bytes")
    inbox.assert_still_serving()


def test_a_file_that_is_not_utf8_is_refused_line_by_line(inbox: Inbox) -> None:
    """Undecodable bytes become U+FFFD (as Spark's text source makes them) and the lines that
    hold them are refused; the file's other lines are served."""
    latin1 = json.dumps(inbox.commit("latin-1", {0: 80}, metadata="café"), ensure_ascii=False)
    good = json.dumps(inbox.heartbeat("fine"))
    new_group = json.dumps(
        {**inbox.commit("new", {0: 1}), "group_id": "caf\xe9", "member_id": ""},
        ensure_ascii=False,
    )
    data = (
        b"\n".join(
            [
                latin1.encode("latin-1"),
                good.encode(),
                b"\xff\xfe" + good.encode(),
                new_group.encode("latin-1"),
            ]
        )
        + b"\n"
    )
    batch = inbox.drop(data)
    batch.answer("latin-1", "INVALID_REQUEST", "not valid UTF-8")
    batch.answer("new", "INVALID_REQUEST", "not valid UTF-8")
    assert batch.answers["fine"]["error"] is None
    (row,) = batch.rejected
    assert row["raw"].startswith("\ufffd\ufffd{") and "not valid UTF-8" in row["reason"]
    inbox.assert_unchanged()
    assert inbox.groups() == [JOB_GROUP]  # no group "caf\ufffd"
    inbox.assert_still_serving()


def test_a_lone_surrogate_escape_is_refused(inbox: Inbox) -> None:
    """JSON can escape half a UTF-16 pair ("\\ud800"), which is no Unicode string: no table
    could hold it, so the line never reaches the engine."""
    in_group = json.dumps({**inbox.commit("s1", {0: 5}), "group_id": "g\ud800"})
    in_topic = json.dumps(inbox.commit("s2", {0: 5}))
    in_topic = in_topic.replace('"orders"', '"orders\\udfff"')
    in_id = json.dumps({**inbox.heartbeat("x"), "request_id": "\udc00"})
    pair = json.dumps({**inbox.commit("s3", {0: 12}), "group_id": "g\U0001f600"})  # a whole pair
    batch = inbox.bad(in_group, in_topic, in_id)
    assert batch.answer("s1", "INVALID_REQUEST", "lone surrogate")["group_id"] is None
    batch.answer("s2", "INVALID_REQUEST", "lone surrogate")
    batch.rejection(in_id, "lone surrogate")
    assert inbox.groups() == [JOB_GROUP]
    assert inbox.run([json.loads(pair)])["s3"]["partitions"][0]["error"] == "GROUP_ID_NOT_FOUND"
    # A Python caller's dict (LocalJob.run_batch) carries the surrogate itself, unescaped.
    inbox.now += 100
    (answer,) = inbox.job.run_batch([{**inbox.heartbeat("py"), "member_id": "m\udc00"}], inbox.now)
    assert answer["error"] == "INVALID_REQUEST" and "lone surrogate" in answer["error_message"]
    inbox.assert_still_serving()


def test_deeply_nested_json_is_refused(inbox: Inbox) -> None:
    deep = "[" * 20_000 + "]" * 20_000  # far deeper than Python's recursion limit
    with_id = '{"request_id": "deep", "api": "heartbeat", "x": ' + deep + "}"
    batch = inbox.bad(deep, with_id)
    batch.rejection(deep, "not a JSON object")
    batch.answer("deep", "INVALID_REQUEST", "not a JSON object")
    inbox.assert_still_serving()


def test_blank_lines_and_empty_files_are_skipped(inbox: Inbox) -> None:
    batch = inbox.drop(b"")
    assert batch.responses == [] and batch.rejected == []
    batch = inbox.drop(b"\n   \n\r\n" + json.dumps(inbox.heartbeat("between")).encode() + b"\n\n")
    assert list(batch.answers) == ["between"] and batch.rejected == []
    inbox.assert_unchanged()


def test_a_request_id_repeated_in_one_batch_is_answered_each_time(inbox: Inbox) -> None:
    """Every line is a request: a commit sent twice is answered twice and leaves the group as
    one would (Kafka, too, writes a retried commit again); two new members that share a request
    id get two different member ids (the job's ids are a hash of the request id)."""
    commit = json.dumps(inbox.commit("twice", {0: 42}))
    batch = inbox.drop(f"{commit}\n{commit}\n".encode())
    assert [r["request_id"] for r in batch.responses] == ["twice", "twice"]
    assert all(r["partitions"][0]["error"] is None for r in batch.responses)
    state, log_rows, view, _ = inbox.snapshot()
    assert len(log_rows) == len(inbox.before[1]) + 2
    assert dict(view[-1])[(TOPIC, 0)].committed_offset == 42
    assert state == inbox.before[0]

    join = json.dumps({**inbox.join("same-join"), "group_id": "fresh", "api_version": 3})
    # Both are served at the file's instant; the join completes at the end of the same batch
    # (initial delay 0).
    batch = inbox.drop(f"{join}\n{join}\n".encode())
    ids = [r["member_id"] for r in batch.responses]
    assert len(ids) == 2 and len(set(ids)) == 2, batch.responses
    assert not inbox.job.internal_errors
    (fresh,) = [r for r in inbox.rows(GROUP_STATE) if r["group_id"] == "fresh"]
    assert fresh["num_members"] == 2


# --- the Spark job ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_running_job_survives_every_kind_at_once(spark: Any, tmp_path: Path) -> None:
    """One file holding every kind of bad line among good requests, into the running Spark
    job: each good request is served, each bad one answered or rejected, the group unchanged,
    and the job still running."""
    from tests.stream_support import RunningCoordinator
    from tests.test_stream_job import commit, fetch, form_group, heartbeat, join

    c = RunningCoordinator(spark, tmp_path / "warehouse", max_request_bytes=8192)
    c.start()
    try:
        generation, ids = form_group(c, JOB_GROUP, 2)
        first = c.request(commit("c0", JOB_GROUP, ids[0], generation, {0: 10, 1: 11}))
        assert [p["error"] for p in first["partitions"]] == [None, None]
        before_state = _state_row(c)
        log_before = len(c.rows(CONSUMER_OFFSETS))

        def hb(rid: str, **extra: Any) -> dict[str, Any]:
            return {**heartbeat(rid, JOB_GROUP, ids[0], generation), **extra}

        def line(request: dict[str, Any], **dump: Any) -> bytes:
            return json.dumps(request, **dump).encode()

        fat_metadata = commit("fat-meta", JOB_GROUP, ids[0], generation, {0: 99})
        fat_metadata["offsets"][0]["metadata"] = "m" * 4097
        no_group = hb("no-group")
        del no_group["group_id"]
        bad_base64 = join("b64", JOB_GROUP, ids[0])
        bad_base64["protocols"][0]["metadata"] = "not base64!"
        deep = "[" * 2_000 + "]" * 2_000  # deeper than Python's recursion limit
        answered: dict[str, tuple[str, str]] = {
            "bad-json-id": ("INVALID_REQUEST", "not a JSON object"),
            "wrong-gen": ("INVALID_REQUEST", "generation_id must be an integer"),
            "wrong-offsets": ("INVALID_REQUEST", "offsets must be a list"),
            "float-session": ("INVALID_REQUEST", "session_timeout_ms must be an integer"),
            "unknown-api": ("INVALID_REQUEST", "unknown api 'produce'"),
            "list-api": ("INVALID_REQUEST", "unknown api ['join_group']"),
            "no-group": ("INVALID_GROUP_ID", "group_id is missing"),
            "int-group": ("INVALID_REQUEST", "group_id must be a string"),
            "b64": ("INVALID_REQUEST", "not valid base64"),
            "fat-line": ("INVALID_REQUEST", "over job.max.request.bytes (8192)"),
            "latin-1": ("INVALID_REQUEST", "not valid UTF-8"),
            "surrogate": ("INVALID_REQUEST", "lone surrogate"),
            "deep-id": ("INVALID_REQUEST", "not a JSON object"),
            "cut": ("INVALID_REQUEST", "not dropped atomically"),
        }
        rejected = [
            b"{not json",
            b"[1, 2]",
            line({**hb("x"), "request_id": ["r"]}),
            line({**hb("x"), "request_id": True}),
            line({**hb("x"), "request_id": 1.5}),
            # Its id lies beyond the first 64 KiB, all that is searched (and stored).
            line({"api": "heartbeat", "x": "y" * 70_000, "request_id": "buried"}),
            deep.encode(),
            line({**hb("x"), "request_id": "\udc00"}),
        ]
        duplicate = line(commit("dup", JOB_GROUP, ids[0], generation, {0: 10, 1: 11}))
        good = [
            line(hb("ok-0")),
            line(heartbeat("ok-1", JOB_GROUP, ids[1], generation)),
            duplicate,
            duplicate,
            line(fetch("ok-f", JOB_GROUP)),
            line(fat_metadata),
        ]
        bad = [
            b'{"request_id": "bad-json-id", "api": "heartbeat", nope}',
            line(hb("wrong-gen", generation_id=str(generation))),
            line({**commit("wrong-offsets", JOB_GROUP, ids[0], generation, {}), "offsets": {}}),
            line({**join("float-session", JOB_GROUP, ids[0]), "session_timeout_ms": 30000.0}),
            line(hb("unknown-api", api="produce")),
            line(hb("list-api", api=["join_group"])),
            line(no_group),
            line(hb("int-group", group_id=7)),
            line(bad_base64),
            line(hb("fat-line", x="z" * 10_000)),
            line(commit("latin-1", JOB_GROUP, "é", generation, {0: 1}), ensure_ascii=False)
            .decode()
            .encode("latin-1"),
            line(hb("surrogate", group_id="g\ud800")),
            b'{"request_id": "deep-id", "x": ' + deep.encode() + b"}",
        ]
        lines = [*good[:3], *bad[:7], *rejected, *good[3:], *bad[7:]]
        cut = b'{"api": "heartbeat", "request_id": "cut", "group_id": "payments", "member_i'
        inbox = c.settings.job.paths.inbox
        temp = inbox / ".mixed.tmp"
        temp.write_bytes(b"\n".join(lines) + b"\n" + cut)
        os.rename(temp, inbox / "mixed.jsonl")

        answers = c.client.wait(["ok-0", "ok-1", "dup", "ok-f", "fat-meta", *answered], 90)
        assert answers["ok-0"]["error"] is None and answers["ok-1"]["error"] is None
        assert answers["dup"]["error"] is None
        fetched = {p["partition"]: p["offset"] for p in answers["ok-f"]["partitions"]}
        assert fetched == {0: 10, 1: 11}
        assert [p["error"] for p in answers["fat-meta"]["partitions"]] == [
            "OFFSET_METADATA_TOO_LARGE"
        ]
        for rid, (error, words) in answered.items():
            assert answers[rid]["error"] == error, answers[rid]
            assert words in answers[rid]["error_message"], answers[rid]
        rows = c.wait_for(
            lambda: (
                len(c.rows("rejected_requests")) >= len(rejected) and c.rows("rejected_requests")
            ),
            what="rejected rows",
        )
        assert sorted(r["raw"] for r in rows) == sorted(x.decode()[: 64 * 1024] for x in rejected)
        # The file as the inbox source sequenced it: .../_sequenced/<seq>@<arrival>-mixed.jsonl
        # (a file: URI, its "@" escaped).
        names = {unquote(r["source_file"].rsplit("/", 1)[-1]) for r in rows}
        assert [parse_sequenced(name)[1] for name in names] == ["mixed.jsonl"]  # type: ignore[index]
        dup_rows = [r for r in c.rows(RESPONSES) if r["request_id"] == "dup"]
        assert len(dup_rows) == 2  # answered each time

        # The group is as it was: the same summary and offsets; the log grew only by the
        # duplicated commit (2 partitions, twice), and no other group appeared.
        assert _state_row(c) == before_state
        log_rows = c.rows(CONSUMER_OFFSETS)
        assert len(log_rows) == log_before + 4
        assert sorted(r["group_id"] for r in c.rows(GROUP_STATE)) == [JOB_GROUP]
        # ... and the job is still running and serving.
        assert c.running is not None and c.running.query.isActive
        assert c.request(heartbeat("after", JOB_GROUP, ids[0], generation))["error"] is None
    finally:
        c.stop()


def _state_row(c: Any) -> dict[str, Any]:
    (row,) = [r for r in c.rows(GROUP_STATE) if r["group_id"] == JOB_GROUP]
    return {k: v for k, v in row.items() if k not in ("batch_id", "updated_at_ms")}
