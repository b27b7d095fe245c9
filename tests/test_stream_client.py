"""The stream client without Spark: the inbox, the incremental reader of the ``responses``
table, ``StreamClient``, ``StreamTransport`` under real ``GroupMember``s, and ``coordinator
submit``, all against a fake job that does what the Spark job does (inbox files in, the engine,
one Delta commit of responses out) in a few lines."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds, jsonio
from coordinator.cli import main
from coordinator.client.assignors import TopicPartition
from coordinator.client.member import GroupMember, MemberConfig, MemberState
from coordinator.client.transport import Clock, SimClock, SystemClock
from coordinator.consumer_protocol import Subscription, encode_subscription
from coordinator.errors import Error
from coordinator.stream.client import (
    Inbox,
    ResponseReader,
    ResponseTimeoutError,
    StreamClient,
    decode_response,
    prepare_requests,
)
from coordinator.stream.schema import RESPONSES, RESPONSES_SCHEMA, Warehouse, response_request_id
from coordinator.stream.transport import StreamTransport

CONFIG = CoordinatorConfig(group_initial_rebalance_delay_ms=0)
FAST = MemberConfig(
    session_timeout_ms=6_000, heartbeat_interval_ms=500, max_poll_interval_ms=20_000
)
NAME = re.compile(r"^\d{13}-[A-Za-z0-9.]+-\d{6}\.jsonl$")


class FakeJob:
    """The Spark job's contract in miniature: take the inbox files (by name), move them to the
    archive, run every request through one engine at the clock's time, and append all the
    responses of the call to ``responses`` as ONE Delta commit. ``drop`` holds request ids it
    never answers."""

    def __init__(
        self, warehouse: Warehouse, clock: Clock | None = None, drop: Iterable[Any] = ()
    ) -> None:
        self.warehouse = warehouse
        self.clock = clock or SystemClock()
        self.coordinator = GroupCoordinator(CONFIG, id_source=SequentialIds())
        self.drop = set(drop)
        self.table = str(warehouse.table(RESPONSES))
        self.batch_id = 0

    def run_once(self) -> int:
        now = self.clock.now_ms()
        answers: list[dict[str, Any]] = []
        inbox = self.warehouse.inbox
        files = sorted(inbox.glob("[!._]*")) if inbox.exists() else []
        self.warehouse.archive.mkdir(parents=True, exist_ok=True)
        for path in files:
            moved = path.rename(self.warehouse.archive / path.name)
            for line in moved.read_text(encoding="utf-8").splitlines():
                request = jsonio.loads(line)
                if request.get("request_id") not in self.drop:
                    answers.extend(self.coordinator.handle(request, now))
        answers.extend(self.coordinator.advance(now))  # due timers, including those just armed
        return self.write(answers)

    def write(self, answers: list[dict[str, Any]]) -> int:
        """Append ``answers`` as one commit (none when there is nothing to write)."""
        if not answers:
            return 0
        now = self.clock.now_ms()
        rows = [
            {
                "api": a["api"],
                "request_id": response_request_id(a["request_id"]),
                "group_id": a["group_id"],
                "error_code": a["error_code"],
                "error": a["error"],
                "body": jsonio.dumps(a),
                "batch_id": self.batch_id,
                "emitted_at_ms": now,
                "written_at_ms": now,
            }
            for a in answers
        ]
        write_deltalake(
            self.table, pa.Table.from_pylist(rows, schema=RESPONSES_SCHEMA), mode="append"
        )
        self.batch_id += 1
        return len(rows)


@contextlib.contextmanager
def running(job: FakeJob, interval_s: float = 0.01) -> Iterator[FakeJob]:
    """The fake job in a thread, like the real one beside a client; its errors fail the test."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                job.run_once()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return
            stop.wait(interval_s)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield job
    finally:
        stop.set()
        thread.join(10)
    assert not errors, errors


def heartbeat(rid: str, group: str = "g") -> dict[str, Any]:
    """A response as the engine gives it (a heartbeat: no binary fields)."""
    return {
        "api": "heartbeat",
        "request_id": rid,
        "group_id": group,
        "error_code": 0,
        "error": None,
        "error_message": None,
    }


def ids_of(rows: list[dict[str, Any]]) -> list[str]:
    return [row["request_id"] for row in rows]


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse.at(tmp_path / "warehouse")


# --- the inbox ----------------------------------------------------------------------------------


def test_a_submitted_file_is_invisible_until_complete(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = Inbox(warehouse.inbox)
    seen_at_rename: list[tuple[list[str], str]] = []
    real_rename = os.rename

    def spy(src: Any, dst: Any) -> None:
        visible = [n for n in os.listdir(warehouse.inbox) if not n.startswith((".", "_"))]
        seen_at_rename.append((visible, Path(src).read_text()))
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", spy)
    requests = [{"api": "heartbeat", "request_id": f"r{i}", "group_id": "g"} for i in range(3)]
    path = inbox.submit(requests)
    ((visible, content),) = seen_at_rename
    assert visible == []  # nothing visible before the rename; the temp name was hidden
    assert [json.loads(line) for line in content.splitlines()] == requests
    assert os.listdir(warehouse.inbox) == [path.name] and NAME.match(path.name)


def test_a_failed_submit_leaves_nothing_behind(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = Inbox(warehouse.inbox)

    def broken(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="disk full"):
        inbox.submit([{"api": "heartbeat", "request_id": "r", "group_id": "g"}])
    assert os.listdir(warehouse.inbox) == []
    with pytest.raises(TypeError):  # not serialisable: refused before any file is opened
        inbox.submit([{"api": "heartbeat", "request_id": "r", "group_id": object()}])
    with pytest.raises(ValueError):
        inbox.submit([])
    assert os.listdir(warehouse.inbox) == []


def test_names_sort_in_submission_order_even_when_the_clock_steps_back(
    warehouse: Warehouse,
) -> None:
    times = iter([5_000, 5_000, 4_000, 5_001, 3, 5_001, 9_999_999_999_999] * 5)
    inbox = Inbox(warehouse.inbox, clock=lambda: next(times))
    paths = [inbox.submit([{"api": "list_groups", "request_id": i}]) for i in range(35)]
    assert sorted(p.name for p in paths) == [p.name for p in paths]
    assert all(NAME.match(p.name) for p in paths)
    other = Inbox(warehouse.inbox, clock=lambda: 5_000)
    assert other.client != inbox.client  # two clients never pick the same name


def test_requests_get_ids_and_bytes_travel_as_base64(warehouse: Warehouse) -> None:
    requests = prepare_requests(
        [{"api": "list_groups", "group_id": ""}, {"api": "x", "request_id": 7, "metadata": b"\x01"}]
    )
    assert (
        re.fullmatch(r"[0-9a-f]{32}", requests[0]["request_id"]) and requests[1]["request_id"] == 7
    )
    path = Inbox(warehouse.inbox).submit(requests)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["request_id"] == requests[0]["request_id"]
    assert lines[1] == {"api": "x", "request_id": 7, "metadata": "AQ=="}


def test_submit_lines_writes_what_submit_writes_and_refuses_a_line_with_a_newline(
    warehouse: Warehouse,
) -> None:
    requests = [
        {"api": "heartbeat", "request_id": "h1", "group_id": "g\u00e9\n", "generation_id": 3},
        {"api": "x", "request_id": 7, "metadata": b"\x01"},
    ]
    inbox = Inbox(warehouse.inbox)
    submitted = inbox.submit(requests).read_bytes()
    lines = [jsonio.dumps(r) for r in requests]
    assert inbox.submit_lines(lines).read_bytes() == submitted
    assert submitted.count(b"\n") == 2  # the group id's newline is escaped in its line
    before = sorted(os.listdir(warehouse.inbox))
    with pytest.raises(ValueError, match="newline"):
        inbox.submit_lines([lines[0], '{"api": "x",\n"request_id": "y"}'])
    with pytest.raises(ValueError, match="no requests"):
        inbox.submit_lines([])
    assert sorted(os.listdir(warehouse.inbox)) == before  # nothing written, not even a temp


# --- reading the responses table --------------------------------------------------------------


def test_each_poll_returns_only_new_commits_once_each(warehouse: Warehouse) -> None:
    job = FakeJob(warehouse)
    reader = ResponseReader(warehouse.table(RESPONSES))  # before the table exists
    assert reader.poll() == [] and reader.next_version == 0
    job.write([heartbeat("a")])
    rows = reader.poll()
    assert ids_of(rows) == ["a"] and set(rows[0]) == set(RESPONSES_SCHEMA.names)
    assert json.loads(rows[0]["body"]) == heartbeat("a")
    assert reader.poll() == []
    for batch in (["b", "c"], ["d"], ["e", "f", "g"]):  # several commits between two polls
        job.write([heartbeat(rid) for rid in batch])
    assert ids_of(reader.poll()) == list("bcdefg")
    assert reader.poll() == [] and reader.next_version == 4

    DeltaTable(job.table).optimize.compact()  # rewrites every row with dataChange false
    assert len(DeltaTable(job.table).file_uris()) == 1
    assert reader.poll() == []
    job.write([heartbeat("h")])
    assert ids_of(reader.poll()) == ["h"] and reader.fallbacks == 0


def test_poll_table_reads_the_columns_asked_once_each(warehouse: Warehouse) -> None:
    job = FakeJob(warehouse)
    reader = ResponseReader(warehouse.table(RESPONSES))
    columns = ("request_id", "error_code", "body")
    empty = reader.poll_table(columns)  # no table yet: no rows, the columns asked
    assert empty.num_rows == 0 and empty.column_names == list(columns)
    job.write([heartbeat("a"), heartbeat("b")])
    job.write([heartbeat("c")])
    table = reader.poll_table(columns)
    assert table.column_names == list(columns)
    assert table.column("request_id").to_pylist() == ["a", "b", "c"]
    assert table.column("error_code").to_pylist() == [0, 0, 0]
    assert json.loads(table.column("body")[2].as_py()) == heartbeat("c")
    assert reader.poll_table(columns).num_rows == 0
    with pytest.raises(ValueError, match="not columns"):
        reader.poll_table(("request_id", "nope"))
    job.write([heartbeat("d")])
    assert ids_of(reader.poll()) == ["d"]  # the refused poll read nothing and moved nothing
    # The fall-back read (the commits to read are gone) gives the same columns.
    for version in range(3):
        job.write([heartbeat(f"e{version}")])
    table_path = warehouse.table(RESPONSES)
    DeltaTable(str(table_path)).create_checkpoint()
    behind = ResponseReader(table_path, start_version=1)
    for version in range(4):
        (table_path / "_delta_log" / f"{version:020d}.json").unlink()
    fallen = behind.poll_table(("request_id",))
    assert behind.fallbacks == 1 and fallen.column_names == ["request_id"]
    assert sorted(fallen.column("request_id").to_pylist()) == ["a", "b", "c", "d", "e0", "e1", "e2"]


def test_start_version(warehouse: Warehouse) -> None:
    job = FakeJob(warehouse)
    for rid in "abc":
        job.write([heartbeat(rid)])
    table = warehouse.table(RESPONSES)
    assert ids_of(ResponseReader(table, start_version=0).poll()) == ["a", "b", "c"]
    assert ids_of(ResponseReader(table, start_version=2).poll()) == ["c"]
    assert ResponseReader(table, start_version=9).poll() == []  # waits for version 9
    now = ResponseReader(table)  # "from now": what is there is not returned ...
    assert now.next_version == 3
    job.write([heartbeat("d")])  # ... but what lands before the first poll is
    assert ids_of(now.poll()) == ["d"]
    with pytest.raises(ValueError):
        ResponseReader(table, start_version=-1)


def test_a_reader_behind_a_cleaned_up_log_falls_back_to_a_full_read(warehouse: Warehouse) -> None:
    job = FakeJob(warehouse)
    for rid in "abcd":
        job.write([heartbeat(rid)])
    table = warehouse.table(RESPONSES)
    DeltaTable(str(table)).create_checkpoint()  # at version 3
    for version in range(3):  # what cleanup_metadata does once the logs are old enough
        (table / "_delta_log" / f"{version:020d}.json").unlink()
    reader = ResponseReader(table, start_version=1)
    assert sorted(ids_of(reader.poll())) == ["a", "b", "c", "d"]  # at least once: a comes too
    assert reader.fallbacks == 1 and reader.next_version == 4
    job.write([heartbeat("e")])
    assert ids_of(reader.poll()) == ["e"] and reader.fallbacks == 1
    # A fresh "from now" reader starts after the checkpoint, with no fallback.
    fresh = ResponseReader(table)
    assert fresh.poll() == [] and fresh.fallbacks == 0


def test_a_reader_behind_a_vacuum_falls_back_to_a_full_read(warehouse: Warehouse) -> None:
    job = FakeJob(warehouse)
    table = warehouse.table(RESPONSES)
    reader = ResponseReader(table)
    for rid in "abc":
        job.write([heartbeat(rid)])
    delta = DeltaTable(str(table))
    delta.optimize.compact()
    delta.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert sorted(ids_of(reader.poll())) == ["a", "b", "c"]  # the compacted file, read once
    assert reader.fallbacks == 1 and reader.poll() == []


def test_decode_response_restores_bytes(warehouse: Warehouse) -> None:
    job = FakeJob(warehouse, clock=SimClock(1_000))
    metadata = encode_subscription(Subscription(topics=("orders",)))
    join = {
        "api": "join_group",
        "request_id": "join",
        "group_id": "g",
        "member_id": "",
        "group_instance_id": None,
        "client_id": "c",
        "client_host": "/10.0.0.1",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": metadata}],
        "api_version": 3,  # before MEMBER_ID_REQUIRED: one round trip
    }
    Inbox(warehouse.inbox).submit([join])
    reader = ResponseReader(warehouse.table(RESPONSES), start_version=0)
    job.run_once()
    (row,) = reader.poll()
    joined = decode_response(row)
    assert isinstance(json.loads(row["body"])["members"][0]["metadata"], str)  # base64 in JSON
    assert joined["members"][0]["metadata"] == metadata and joined["leader"] == joined["member_id"]
    member_id = joined["member_id"]
    sync = {
        "api": "sync_group",
        "request_id": "sync",
        "group_id": "g",
        "member_id": member_id,
        "group_instance_id": None,
        "generation_id": joined["generation_id"],
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": member_id, "assignment": b"\x00\x01assigned"}],
    }
    Inbox(warehouse.inbox).submit(
        [sync, {"api": "describe_groups", "request_id": "d", "group_id": "g"}]
    )
    job.run_once()
    synced, described = (decode_response(r) for r in reader.poll())
    assert synced["assignment"] == b"\x00\x01assigned"
    (member,) = described["members"]
    assert (
        member["member_metadata"] == metadata and member["member_assignment"] == b"\x00\x01assigned"
    )
    assert decode_response({"body": jsonio.dumps(heartbeat("h"))}) == heartbeat("h")


# --- StreamClient -----------------------------------------------------------------------------


def test_request_and_requests(warehouse: Warehouse) -> None:
    client = StreamClient(warehouse, poll_interval_s=0.01)
    with running(FakeJob(warehouse)):
        found = client.request({"api": "find_coordinator", "group_id": "g"}, timeout_s=10)
        assert found["api"] == "find_coordinator" and found["error"] is None
        answers = client.requests(
            [
                {"api": "list_groups", "request_id": "l", "group_id": ""},
                {
                    "api": "heartbeat",
                    "request_id": "h",
                    "group_id": "g",
                    "member_id": "m",
                    "generation_id": 1,
                },
                {"api": "nonsense", "request_id": 3, "group_id": "g"},
            ],
            timeout_s=10,
        )
    assert [a["request_id"] for a in answers] == ["l", "h", 3]
    assert [a["error"] for a in answers] == [None, "UNKNOWN_MEMBER_ID", "INVALID_REQUEST"]


def test_wait_names_the_missing_ids_and_keeps_what_came(warehouse: Warehouse) -> None:
    client = StreamClient(warehouse, poll_interval_s=0.01)
    job = FakeJob(warehouse, drop={"b"})
    ids = client.submit(
        [{"api": "list_groups", "request_id": rid, "group_id": ""} for rid in "abc"]
    )
    job.run_once()
    with pytest.raises(ResponseTimeoutError) as failure:
        client.wait(ids, timeout_s=0.05)
    assert isinstance(failure.value, TimeoutError)
    assert failure.value.missing == ["b"] and "'b'" in str(failure.value)
    assert sorted(failure.value.responses) == ["a", "c"]
    # What came is still there for a later wait, and the late answer completes it.
    job.write([{**heartbeat("b"), "api": "list_groups", "groups": []}])
    assert list(client.wait(["c", "b", "a"], timeout_s=1)) == ["c", "b", "a"]
    with pytest.raises(ResponseTimeoutError):
        client.wait(["a"], timeout_s=0)  # handed over once: gone now


def test_responses_out_of_order_and_before_the_wait(warehouse: Warehouse) -> None:
    job = FakeJob(warehouse)
    client = StreamClient(warehouse, poll_interval_s=0.01)
    first = client.submit([{"api": "heartbeat", "request_id": "first", "group_id": "g"}])
    second = client.submit([{"api": "heartbeat", "request_id": "second", "group_id": "g"}])
    job.write([heartbeat("second")])
    job.write([heartbeat("stranger")])  # another client's: kept a while, in case it is asked for
    job.write([heartbeat("first")])
    assert client.wait(second, 1) == {"second": heartbeat("second")}
    assert client.wait(first, 1) == {"first": heartbeat("first")}
    assert client.wait(["stranger"], 0) == {"stranger": heartbeat("stranger")}
    with pytest.raises(ValueError):
        client.submit(
            [{"api": "heartbeat", "request_id": "x"}, {"api": "heartbeat", "request_id": "x"}]
        )


def test_the_client_keeps_bounded_buffers(warehouse: Warehouse) -> None:
    job = FakeJob(warehouse)
    client = StreamClient(warehouse, max_pending=2, max_unclaimed=2)
    client.submit([{"api": "heartbeat", "request_id": rid, "group_id": "g"} for rid in "abc"])
    job.write([heartbeat(rid) for rid in "abcxyz"])
    assert client.poll() == 6
    assert sorted(client.take(["a", "b", "c"])) == ["b", "c"]  # "a" was the oldest pending id
    assert sorted(client.take(["x", "y", "z"])) == ["y", "z"]  # "x" the oldest stranger


# --- StreamTransport --------------------------------------------------------------------------


def run_until(
    clock: SimClock,
    job: FakeJob,
    transport: StreamTransport,
    members: list[GroupMember],
    done: Callable[[], bool],
    steps: int = 200,
) -> bool:
    """The member runner: heartbeat threads and polls, then one job batch, then delivery."""
    for _ in range(steps):
        clock.advance(100)
        for member in members:
            member.tick()
            member.poll()
        transport.flush()
        job.run_once()
        transport.deliver()
        if done():
            return True
    return False


def test_group_members_form_a_group_and_commit_through_the_stream(warehouse: Warehouse) -> None:
    clock = SimClock(1_000)
    job = FakeJob(warehouse, clock=clock)
    transport = StreamTransport(StreamClient(warehouse), clock)
    members = [
        GroupMember(
            "g",
            ["orders"],
            transport,
            clock,
            metadata={"orders": 6},
            client_id=f"c{i}",
            assignors=["range"],
            config=FAST,
        )
        for i in range(2)
    ]

    def stable() -> bool:
        group = job.coordinator.group("g")
        return (
            group is not None
            and group.state.value == "Stable"
            and len(group.members) == 2
            and all(m.state is MemberState.STABLE and not m.rejoin_needed for m in members)
            and len({m.generation_id for m in members}) == 1
        )

    assert run_until(clock, job, transport, members, stable), [m.events for m in members]
    first, second = (set(m.assignment) for m in members)
    assert first and second and not first & second
    assert first | second == {TopicPartition("orders", p) for p in range(6)}
    assert all(len(m.assignment) == 3 for m in members)  # range: 3 + 3, contiguous
    assert [tp.partition for tp in members[0].assignment] in ([0, 1, 2], [3, 4, 5])

    results: list[Any] = []
    for m in members:
        m.commit(
            {tp: 10 + tp.partition for tp in m.assignment}, lambda ok, err: results.append(err)
        )
    assert run_until(clock, job, transport, members, lambda: len(results) == 2)
    assert results == [None, None]
    fetched: list[Any] = []
    members[1].fetch_committed(
        [TopicPartition("orders", p) for p in range(6)], lambda res, err: fetched.append((res, err))
    )
    assert run_until(clock, job, transport, members, lambda: bool(fetched))
    assert fetched == [({TopicPartition("orders", p): (10 + p, "") for p in range(6)}, None)]
    assert not [e for m in members for e in m.events if e[1] in ("fatal", "coordinator-unknown")]


def test_a_request_never_answered_times_out_exactly_once(warehouse: Warehouse) -> None:
    clock = SimClock(0)
    job = FakeJob(warehouse, clock=clock)
    transport = StreamTransport(StreamClient(warehouse), clock, request_timeout_ms=1_000)
    calls: list[dict[str, Any]] = []
    request = {
        "api": "heartbeat",
        "request_id": "hb",
        "group_id": "g",
        "member_id": "m",
        "generation_id": 1,
    }
    transport.send(request, calls.append, node_id=7)  # node_id: there is only the job
    parked = {
        "api": "join_group",
        "request_id": "j",
        "group_id": "g",
        "rebalance_timeout_ms": 3_000,
    }
    transport.send(parked, calls.append)
    assert calls == [] and transport.in_flight == 2  # send never calls back
    clock.advance(999)
    assert transport.deliver() == 0 and calls == []
    clock.advance(1)
    assert transport.deliver() == 1
    (timed_out,) = calls
    assert timed_out["request_id"] == "hb" and timed_out["error"] == "REQUEST_TIMED_OUT"
    assert timed_out["error_code"] == Error.REQUEST_TIMED_OUT
    job.run_once()  # the late answers: the heartbeat's is dropped, the join's is delivered
    assert transport.deliver() == 1
    assert [c["request_id"] for c in calls] == ["hb", "j"] and transport.in_flight == 0
    clock.advance(60_000)
    assert transport.deliver() == 0 and len(calls) == 2


def test_requests_between_two_flushes_share_one_file(warehouse: Warehouse) -> None:
    transport = StreamTransport(StreamClient(warehouse))
    for rid in ("a", "b", "c"):
        transport.send({"api": "list_groups", "request_id": rid, "group_id": ""}, lambda _: None)
    assert not warehouse.inbox.exists()
    transport.flush()
    transport.flush()  # nothing queued: no empty file
    (only,) = warehouse.inbox.iterdir()
    assert [json.loads(line)["request_id"] for line in only.read_text().splitlines()] == [
        "a",
        "b",
        "c",
    ]
    with pytest.raises(ValueError):
        transport.send({"api": "list_groups", "request_id": "a", "group_id": ""}, lambda _: None)


# --- coordinator submit -----------------------------------------------------------------------


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_submit_prints_responses_in_request_order(
    tmp_path: Path, warehouse: Warehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    requests = write_lines(
        tmp_path / "requests.jsonl",
        '{"api": "find_coordinator", "request_id": "f", "group_id": "g"}',
        "",
        '{"api": "list_groups", "group_id": ""}',
        '{"api": "bogus", "request_id": 2, "group_id": "g"}',
    )
    with running(FakeJob(warehouse)):
        status = main(
            ["submit", str(requests), "--warehouse", str(warehouse.root), "--timeout", "10"]
        )
    out = capsys.readouterr()
    assert status == 0, out.err
    answers = [json.loads(line) for line in out.out.splitlines()]
    assert [a["api"] for a in answers] == ["find_coordinator", "list_groups", "bogus"]
    assert answers[0]["request_id"] == "f" and answers[2]["request_id"] == 2
    assert answers[2]["error"] == "INVALID_REQUEST"
    assert len(list(warehouse.archive.iterdir())) == 1  # one file for the three


def test_submit_reads_stdin_and_a_separate_inbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = Warehouse.at(tmp_path / "wh", inbox=tmp_path / "elsewhere")
    monkeypatch.setattr(
        "sys.stdin", io.StringIO('{"api": "list_groups", "request_id": "l", "group_id": ""}\n')
    )
    with running(FakeJob(warehouse)):
        status = main(
            ["submit", "-", "--warehouse", str(warehouse.root), "--inbox", str(warehouse.inbox)]
        )
    assert status == 0
    (answer,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert answer["request_id"] == "l" and answer["groups"] == []


def test_submit_no_wait(
    tmp_path: Path, warehouse: Warehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    requests = write_lines(
        tmp_path / "r.jsonl",
        '{"api": "list_groups", "request_id": "a", "group_id": ""}',
        '{"api": "list_groups", "group_id": ""}',
    )
    assert main(["submit", str(requests), "--warehouse", str(warehouse.root), "--no-wait"]) == 0
    printed = [json.loads(line)["request_id"] for line in capsys.readouterr().out.splitlines()]
    assert printed[0] == "a" and len(printed) == 2
    (submitted,) = warehouse.inbox.iterdir()
    assert [json.loads(x)["request_id"] for x in submitted.read_text().splitlines()] == printed
    reader = ResponseReader(warehouse.table(RESPONSES), start_version=0)
    FakeJob(warehouse).run_once()
    assert ids_of(reader.poll()) == printed


def test_submit_refuses_a_line_that_is_not_json(
    tmp_path: Path, warehouse: Warehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    requests = write_lines(
        tmp_path / "bad.jsonl",
        '{"api": "list_groups", "request_id": "a", "group_id": ""}',
        "{not json",
        "[1, 2]",
    )
    assert main(["submit", str(requests), "--warehouse", str(warehouse.root)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2: not JSON" in err and "bad.jsonl:3: not a JSON object" in err
    assert not warehouse.inbox.exists()  # nothing submitted


def test_submit_times_out_printing_what_came(
    tmp_path: Path, warehouse: Warehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    requests = write_lines(
        tmp_path / "r.jsonl",
        *(f'{{"api": "list_groups", "request_id": "{rid}", "group_id": ""}}' for rid in "abc"),
    )
    with running(FakeJob(warehouse, drop={"b"})):
        status = main(
            ["submit", str(requests), "--warehouse", str(warehouse.root), "--timeout", "1"]
        )
    out = capsys.readouterr()
    assert status == 1
    assert [json.loads(line)["request_id"] for line in out.out.splitlines()] == ["a", "c"]
    assert 'unanswered: "b"' in out.err and "1 of 3" in out.err
