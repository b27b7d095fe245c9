"""The Delta sink: offsets numbered per partition, each batch in each table at most once,
one current row per group and every change in the history, ListGroups from the table, older
tables evolved, and housekeeping on schedule.

No Spark: the sink takes plain Python data. The data is what the engine really emits: a
:class:`tests.support.Ctx` coordinator runs joins, syncs and commits, and :class:`Feed` cuts
its responses and log records into batches (offsets cleared: the sink numbers them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from coordinator import CoordinatorConfig, jsonio
from coordinator.log.records import RECORD_FIELDS
from coordinator.requests import Request, parse
from coordinator.stream import schema, sink
from coordinator.stream.operator import group_summary
from coordinator.stream.schema import (
    CONSUMER_OFFSETS,
    GROUP_HISTORY,
    GROUP_STATE,
    REJECTED_REQUESTS,
    RESPONSES,
)
from coordinator.stream.sink import (
    BatchOrderError,
    BatchReport,
    DeltaSink,
    Housekeeping,
    last_complete_batch,
    log_end_offsets,
)
from tests.support import Ctx

APP = "coordinator-test"
CONFIG = CoordinatorConfig(
    group_initial_rebalance_delay_ms=0,
    group_min_session_timeout_ms=10,
    offsets_topic_num_partitions=3,
)
NO_HOUSEKEEPING = Housekeeping(0, 0, 0, retention_every_batches=0)
GROUPS = ["alpha", "beta", "gamma", "delta", "epsilon"]


# --- the engine's output, cut into batches ------------------------------------------------------


def summary(ctx: Ctx, group_id: str) -> dict[str, Any]:
    """The group_state row of one group as the job builds it (Dead once it is gone)."""
    return group_summary(group_id, ctx.c.group(group_id), ctx.c.partition_for(group_id))


class Feed:
    """One engine; ``batch()`` returns what it emitted since the last call, as sink input."""

    def __init__(self) -> None:
        self.ctx = Ctx(CONFIG, owned_partitions=None)
        self._records = 0
        self._answers = 0
        #: group id -> (member id, generation) of the groups joined through :meth:`join`.
        self.members: dict[str, tuple[str, int]] = {}

    def batch(self, **extra: Any) -> dict[str, Any]:
        records = [dict(r, offset=None) for r in self.ctx.records[self._records :]]
        responses = list(self.ctx.answers.values())[self._answers :]
        self._records, self._answers = len(self.ctx.records), len(self.ctx.answers)
        touched = dict.fromkeys(r["group_id"] for r in [*records, *responses])
        data: dict[str, Any] = {
            "records": records,
            "responses": responses,
            "groups": [summary(self.ctx, g) for g in touched],
            "rejected": [],
            "list_groups": [],
            "emitted_at_ms": self.ctx.now,
            "written_at_ms": 1_000_000 + self.ctx.now,
        }
        data.update(extra)
        return data

    def join(self, group_id: str) -> None:
        """A new group with one dynamic member, joined and synced (generation 1)."""
        self.members[group_id] = self.ctx.join_and_sync_single(group_id=group_id)

    def commit(self, group_id: str, offset: int) -> None:
        """Two offsets committed, by the group's member, or as a simple group if it has none."""
        member, generation = self.members.get(group_id, ("", -1))
        rid = self.ctx.commit(
            {("orders", 0): offset, ("orders", 1): offset + 1},
            group_id=group_id,
            member_id=member,
            generation=generation,
        )
        answer = self.ctx.answer(rid)
        assert answer is not None and answer["error"] is None, answer

    def join_and_commit(self, group_id: str, offset: int) -> None:
        self.join(group_id)
        self.commit(group_id, offset)


def write(s: DeltaSink, batch_id: int, data: dict[str, Any]) -> BatchReport:
    return s.write_batch(batch_id, **data)


def read(tables: Path, name: str) -> pa.Table:
    return pa.table(DeltaTable(tables / name).to_pyarrow_table())


def rows(tables: Path, name: str, *order: str) -> list[dict[str, Any]]:
    table = read(tables, name)
    if order:
        table = table.sort_by([(c, "ascending") for c in order])
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def content(tables: Path) -> dict[str, list[str]]:
    """Every table's rows, order aside (compaction may reorder files)."""
    return {name: sorted(jsonio.dumps(r) for r in rows(tables, name)) for name in schema.TABLES}


def versions(tables: Path) -> dict[str, int]:
    return {name: DeltaTable(tables / name).version() for name in schema.TABLES}


def txn(tables: Path, name: str) -> int | None:
    return DeltaTable(tables / name).transaction_version(APP)


def assert_log_is_numbered(tables: Path, emitted: list[dict[str, Any]]) -> None:
    """Per offsets partition: offsets 0..n-1 in emission order, each row the engine's record."""
    log = rows(tables, CONSUMER_OFFSETS, "offsets_partition", "offset")
    for partition in {r["offsets_partition"] for r in emitted}:
        written = [r for r in log if r["offsets_partition"] == partition]
        expected = [r for r in emitted if r["offsets_partition"] == partition]
        assert [r["offset"] for r in written] == list(range(len(expected)))
        fields = [f for f in RECORD_FIELDS if f != "offset"]
        assert [{f: r[f] for f in fields} for r in written] == [
            {f: r[f] for f in fields} for r in expected
        ]
    assert len(log) == len(emitted)


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    return tmp_path / "tables"


@pytest.fixture
def feed() -> Feed:
    return Feed()


# --- the log --------------------------------------------------------------------------------------


def test_new_sink_creates_every_table_empty_with_its_schema(tables: Path) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    for name in schema.TABLES:
        dt = DeltaTable(tables / name)
        assert pa.schema(dt.schema().to_arrow()) == schema.TABLE_SCHEMAS[name]
        assert dt.metadata().partition_columns == schema.PARTITION_BY.get(name, [])
        assert dt.to_pyarrow_table().num_rows == 0
    assert s.last_batch() is None
    assert s.log_end_offsets() == {}
    assert last_complete_batch(tables, APP) is None
    assert log_end_offsets(tables) == {}
    assert last_complete_batch(tables / "nowhere", APP) is None


def test_offsets_are_contiguous_per_partition_across_batches_and_a_restart(
    tables: Path, feed: Feed
) -> None:
    emitted: list[dict[str, Any]] = []
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    for group_id in GROUPS[:3]:
        feed.join_and_commit(group_id, 10)
    first = feed.batch()
    emitted += first["records"]
    assert len({r["offsets_partition"] for r in emitted}) > 1, "the test needs several partitions"
    report = write(s, 0, first)
    assert report.records_written == len(first["records"])

    feed.join("delta")
    for group_id in GROUPS:
        feed.commit(group_id, 20)
    second = feed.batch()
    emitted += second["records"]
    write(s, 1, second)
    assert_log_is_numbered(tables, emitted)
    assert s.log_end_offsets() == log_end_offsets(tables)

    restarted = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    assert restarted.log_end_offsets() == s.log_end_offsets()
    for group_id in GROUPS:
        feed.commit(group_id, 30)
    third = feed.batch()
    emitted += third["records"]
    write(restarted, 2, third)
    assert_log_is_numbered(tables, emitted)
    log = read(tables, CONSUMER_OFFSETS)
    assert set(log.column("batch_id").to_pylist()) == {0, 1, 2}
    assert log.filter(pc.equal(log.column("batch_id"), 2)).column("written_at_ms").to_pylist() == [
        third["written_at_ms"]
    ] * len(third["records"])


@pytest.mark.parametrize("stats", [True, False], ids=["from-file-statistics", "from-the-data"])
def test_the_log_end_is_read_back_with_or_without_file_statistics(
    tables: Path, feed: Feed, stats: bool
) -> None:
    if not stats:  # a log written by a writer that keeps no min/max statistics
        DeltaTable.create(
            tables / CONSUMER_OFFSETS,
            schema.CONSUMER_OFFSETS_SCHEMA,
            partition_by=schema.CONSUMER_OFFSETS_PARTITION_BY,
            configuration={"delta.dataSkippingNumIndexedCols": "0"},
        )
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    for batch_id, group_id in enumerate(GROUPS):
        feed.join_and_commit(group_id, batch_id)
        write(s, batch_id, feed.batch())
    actions = pa.table(DeltaTable(tables / CONSUMER_OFFSETS).get_add_actions(flatten=True))
    assert ("max.offset" in actions.column_names) is stats
    expected: dict[int, int] = {}
    for record in feed.ctx.records:
        partition = record["offsets_partition"]
        expected[partition] = expected.get(partition, 0) + 1
    assert log_end_offsets(tables) == s.log_end_offsets() == expected
    assert DeltaSink(tables, APP, NO_HOUSEKEEPING).log_end_offsets() == expected


# --- exactly once ---------------------------------------------------------------------------------


def test_a_replayed_batch_writes_nothing_twice(tables: Path, feed: Feed) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    feed.join_and_commit("alpha", 1)
    data = feed.batch(rejected=[{"raw": "{oops", "source_file": "f1.json", "reason": "bad json"}])
    first = write(s, 7, data)
    assert first.tables_written == list(schema.TABLES)
    assert first.tables_skipped == []
    before = content(tables)
    ends, table_versions = s.log_end_offsets(), versions(tables)

    again = write(s, 7, data)
    assert again.tables_skipped == list(schema.TABLES)
    assert again.tables_written == []
    assert (again.records_written, again.responses_written, again.rejected_written) == (0, 0, 0)
    assert (first.history_written, again.history_written) == (1, 0)
    assert content(tables) == before
    assert s.log_end_offsets() == ends
    assert versions(tables) == table_versions

    # The same after a restart (Spark re-runs the batch in a new process).
    restarted = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    assert write(restarted, 7, data).tables_skipped == list(schema.TABLES)
    assert versions(tables) == table_versions


class Crash(Exception):
    pass


def crash_when_writing(monkeypatch: pytest.MonkeyPatch, table_name: str) -> None:
    """Make the sink's appends to one table fail, as a crash before that commit would."""

    def failing(table: DeltaTable, data: Any, **kwargs: Any) -> None:
        if Path(table.table_uri.removeprefix("file://")).name == table_name:
            raise Crash(table_name)
        deltalake.write_deltalake(table, data, **kwargs)

    monkeypatch.setattr("coordinator.stream.sink.write_deltalake", failing)


def test_a_partial_batch_is_completed_by_its_replay(
    tables: Path, feed: Feed, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    feed.join_and_commit("alpha", 1)
    write(s, 0, feed.batch())
    feed.join_and_commit("beta", 2)
    feed.commit("alpha", 5)
    data = feed.batch(rejected=[{"raw": "[]", "source_file": "f2.json", "reason": "not an object"}])

    crash_when_writing(monkeypatch, REJECTED_REQUESTS)
    with pytest.raises(Crash):
        write(s, 1, data)
    assert txn(tables, CONSUMER_OFFSETS) == 1
    assert txn(tables, REJECTED_REQUESTS) is None
    assert last_complete_batch(tables, APP) == 0
    monkeypatch.undo()

    # The same sink object (reloaded after the failure) completes the batch.
    report = write(s, 1, data)
    assert report.tables_skipped == [CONSUMER_OFFSETS]
    assert report.tables_written == [REJECTED_REQUESTS, GROUP_HISTORY, GROUP_STATE, RESPONSES]
    assert_log_is_numbered(tables, feed.ctx.records)
    assert len(rows(tables, REJECTED_REQUESTS)) == 1
    responses = rows(tables, RESPONSES)
    assert len(responses) == len({r["request_id"] for r in responses}) == len(feed.ctx.answers)
    assert last_complete_batch(tables, APP) == s.last_batch() == 1


def test_a_crash_before_the_responses_leaves_the_batch_incomplete_until_replayed(
    tables: Path, feed: Feed, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    feed.join_and_commit("alpha", 1)
    write(s, 0, feed.batch())
    feed.commit("alpha", 9)
    data = feed.batch()
    crash_when_writing(monkeypatch, RESPONSES)
    with pytest.raises(Crash):
        write(s, 1, data)
    monkeypatch.undo()
    assert txn(tables, CONSUMER_OFFSETS) == txn(tables, GROUP_HISTORY) == txn(tables, GROUP_STATE)
    assert txn(tables, GROUP_STATE) == 1
    # The log holds the commit, but no reader treats batch 1 as complete before its answer.
    assert last_complete_batch(tables, APP) == 0

    ends = log_end_offsets(tables)
    restarted = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    assert restarted.log_end_offsets() == ends
    report = write(restarted, 1, data)
    assert report.tables_skipped == [CONSUMER_OFFSETS, GROUP_HISTORY, GROUP_STATE]
    assert report.tables_written == [RESPONSES]
    assert restarted.log_end_offsets() == ends
    assert last_complete_batch(tables, APP) == 1
    assert_log_is_numbered(tables, feed.ctx.records)


def test_a_batch_older_than_the_tables_is_refused(tables: Path, feed: Feed) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    feed.commit("alpha", 1)
    write(s, 5, feed.batch())
    feed.commit("alpha", 2)
    table_versions = versions(tables)
    with pytest.raises(BatchOrderError):
        write(s, 4, feed.batch())
    assert versions(tables) == table_versions
    # Another app id (a new Spark checkpoint) starts its own count.
    other = DeltaSink(tables, "another-query", NO_HOUSEKEEPING)
    feed.commit("alpha", 3)
    assert write(other, 0, feed.batch()).tables_written == [
        CONSUMER_OFFSETS,
        GROUP_HISTORY,
        GROUP_STATE,
        RESPONSES,
    ]


# --- completeness and empty batches -----------------------------------------------------------------


def test_an_empty_batch_writes_nothing(tables: Path, feed: Feed) -> None:
    s = DeltaSink(tables, APP, Housekeeping())
    feed.join_and_commit("alpha", 1)
    write(s, 0, feed.batch())
    table_versions = versions(tables)
    for batch_id in (1, 2, 3):
        report = write(s, batch_id, feed.batch())
        assert report.tables_written == report.tables_skipped == report.housekeeping == []
    assert versions(tables) == table_versions
    assert last_complete_batch(tables, APP) == 0


def test_a_batch_without_responses_still_marks_itself_complete(tables: Path, feed: Feed) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    feed.join_and_commit("alpha", 1)
    write(s, 0, feed.batch())
    # Records and a summary but no response (as an offset expiry gives).
    feed.commit("alpha", 2)
    data = feed.batch(responses=[])
    report = write(s, 1, data)
    assert report.tables_written == [CONSUMER_OFFSETS, GROUP_HISTORY, GROUP_STATE, RESPONSES]
    assert report.responses_written == 0
    assert txn(tables, RESPONSES) == last_complete_batch(tables, APP) == s.last_batch() == 1
    assert {r["batch_id"] for r in rows(tables, RESPONSES)} == {0}
    # Tables without rows in a batch keep an older transaction version: the marker is what counts.
    rejected_only = {**feed.batch(), "rejected": [{"raw": "x", "source_file": "f", "reason": "r"}]}
    assert write(s, 2, rejected_only).tables_written == [REJECTED_REQUESTS, RESPONSES]
    assert txn(tables, CONSUMER_OFFSETS) == txn(tables, GROUP_STATE) == 1
    assert txn(tables, GROUP_HISTORY) == 1
    assert last_complete_batch(tables, APP) == 2
    assert rows(tables, REJECTED_REQUESTS) == [
        {
            "raw": "x",
            "source_file": "f",
            "reason": "r",
            "batch_id": 2,
            "rejected_at_ms": feed.ctx.now,
        }
    ]


# --- responses ------------------------------------------------------------------------------------


def test_responses_carry_their_columns_and_the_whole_response(tables: Path, feed: Feed) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    feed.join_and_commit("alpha", 1)
    data = feed.batch()
    numbered = {**data["responses"][0], "request_id": 42}
    data["responses"] = [*data["responses"], numbered]
    assert write(s, 3, data).responses_written == len(data["responses"])
    written = rows(tables, RESPONSES)
    assert [jsonio.loads(r["body"]) for r in written] == [
        jsonio.loads(jsonio.dumps(r)) for r in data["responses"]
    ]
    assert [r["request_id"] for r in written] == [
        schema.response_request_id(r["request_id"]) for r in data["responses"]
    ]
    assert written[-1]["request_id"] == "42"
    for row, response in zip(written, data["responses"], strict=True):
        assert (row["api"], row["group_id"], row["error_code"], row["error"]) == (
            response["api"],
            response["group_id"],
            response["error_code"],
            response["error"],
        )
        assert (row["batch_id"], row["emitted_at_ms"], row["written_at_ms"]) == (
            3,
            data["emitted_at_ms"],
            data["written_at_ms"],
        )


def list_groups(request_id: str, states: list[str] | None = None) -> Request:
    return parse({"api": "list_groups", "request_id": request_id, "states_filter": states})


def test_list_groups_is_answered_from_group_state_including_this_batch(
    tables: Path, feed: Feed
) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    feed.join_and_commit("beta", 1)
    feed.commit("alpha", 1)  # a simple group: Empty, no protocol type
    write(s, 0, feed.batch())
    feed.join_and_commit("gamma", 1)  # only in this batch
    requests = [
        list_groups("all"),
        list_groups("stable", ["Stable"]),
        list_groups("empty", ["empty"]),
    ]
    data = feed.batch(list_groups=requests)
    report = write(s, 1, data)
    assert report.responses_written == len(data["responses"]) + len(requests)
    answers = {
        r["request_id"]: jsonio.loads(r["body"])
        for r in rows(tables, RESPONSES)
        if r["api"] == "list_groups"
    }
    listed = {
        rid: [(g["group_id"], g["group_state"]) for g in a["groups"]] for rid, a in answers.items()
    }
    assert listed == {
        "all": [("alpha", "Empty"), ("beta", "Stable"), ("gamma", "Stable")],
        "stable": [("beta", "Stable"), ("gamma", "Stable")],
        "empty": [("alpha", "Empty")],
    }
    assert answers["all"]["groups"][1] == {
        "group_id": "beta",
        "protocol_type": "consumer",
        "group_state": "Stable",
        "group_type": "classic",
    }
    assert all(a["error_code"] == 0 and a["group_id"] == "" for a in answers.values())
    assert {r["batch_id"] for r in rows(tables, RESPONSES) if r["api"] == "list_groups"} == {1}


def test_a_batch_of_list_groups_alone_is_answered(tables: Path) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    report = s.write_batch(
        0,
        records=[],
        responses=[],
        groups=[],
        rejected=[],
        list_groups=[list_groups("lg")],
        emitted_at_ms=5,
        written_at_ms=6,
    )
    assert report.tables_written == [RESPONSES]
    (row,) = rows(tables, RESPONSES)
    assert jsonio.loads(row["body"])["groups"] == []


# --- group_state ----------------------------------------------------------------------------------


def test_group_state_keeps_one_current_row_per_group(tables: Path, feed: Feed) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    feed.join_and_commit("alpha", 1)
    feed.commit("beta", 1)
    report = write(s, 0, feed.batch())
    assert (report.groups_upserted, report.groups_deleted) == (2, 0)
    first = {r["group_id"]: r for r in rows(tables, GROUP_STATE)}
    assert first["alpha"]["state"] == "Stable" and first["alpha"]["generation_id"] == 1
    assert first["alpha"]["members"][0]["member_id"] == feed.ctx.group("alpha").leader_id
    assert (first["beta"]["state"], first["beta"]["num_committed_offsets"]) == ("Empty", 2)
    assert first["alpha"]["batch_id"] == 0
    assert first["alpha"]["updated_at_ms"] == feed.ctx.now

    # alpha rebalances to generation 2; beta commits again; gamma appears.
    member = feed.ctx.group("alpha").leader_id
    assert member is not None
    rid = feed.ctx.join(member, group_id="alpha", protos=[("range", b"v2")])
    assert feed.ctx.answer(rid) is not None
    feed.ctx.sync(member, 2, {member: b"a2"}, group_id="alpha")
    feed.members["alpha"] = (member, 2)
    feed.commit("beta", 2)
    feed.commit("gamma", 1)
    report = write(s, 1, feed.batch())
    assert (report.groups_upserted, report.groups_deleted) == (3, 0)
    second = {r["group_id"]: r for r in rows(tables, GROUP_STATE)}
    assert sorted(second) == ["alpha", "beta", "gamma"]
    assert (second["alpha"]["generation_id"], second["alpha"]["batch_id"]) == (2, 1)
    assert second["beta"]["num_committed_offsets"] == 2

    # Deleting beta: the engine tombstones it; its summary says Dead and the row goes.
    assert feed.ctx.delete_group("beta")["error"] is None
    data = feed.batch()
    assert [g["state"] for g in data["groups"]] == ["Dead"]
    report = write(s, 2, data)
    assert (report.groups_upserted, report.groups_deleted) == (0, 1)
    assert sorted(r["group_id"] for r in rows(tables, GROUP_STATE)) == ["alpha", "gamma"]
    # A Dead summary for a group the table never had inserts nothing.
    ghost = {"group_id": "ghost", "offsets_partition": 0, "state": "Dead"}
    report = write(s, 3, {**feed.batch(), "groups": [ghost]})
    assert (report.groups_upserted, report.groups_deleted) == (0, 0)
    assert sorted(r["group_id"] for r in rows(tables, GROUP_STATE)) == ["alpha", "gamma"]


def test_the_last_summary_of_a_group_in_a_batch_wins(tables: Path) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    early = {"group_id": "g", "offsets_partition": 0, "state": "PreparingRebalance"}
    late = {**early, "state": "Stable", "generation_id": 3}
    s.write_batch(
        0,
        records=[],
        responses=[],
        groups=[early, late],
        rejected=[],
        list_groups=[],
        emitted_at_ms=1,
        written_at_ms=2,
    )
    ((state, generation),) = [(r["state"], r["generation_id"]) for r in rows(tables, GROUP_STATE)]
    assert (state, generation) == ("Stable", 3)
    # The history keeps both, in the order they came.
    assert [r["state"] for r in rows(tables, GROUP_HISTORY)] == ["PreparingRebalance", "Stable"]


# --- group_history --------------------------------------------------------------------------------


def test_group_history_appends_every_summary_once_dead_ones_included(
    tables: Path, feed: Feed
) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    feed.join_and_commit("alpha", 1)
    feed.commit("beta", 1)
    first = feed.batch()
    report = write(s, 0, first)
    assert report.history_written == 2
    assert report.tables_written.index(GROUP_HISTORY) < report.tables_written.index(GROUP_STATE)
    history = rows(tables, GROUP_HISTORY)
    assert [(r["group_id"], r["state"], r["batch_id"]) for r in history] == [
        ("alpha", "Stable", 0),
        ("beta", "Empty", 0),
    ]
    # The same columns as group_state, and the same values for the batch's last summary.
    current = {r["group_id"]: r for r in rows(tables, GROUP_STATE)}
    assert history == [current["alpha"], current["beta"]]
    alpha = feed.ctx.group("alpha")
    assert history[0]["rebalance_reason"] == alpha.rebalance_reason is not None
    assert history[0]["rebalance_reason"].startswith(f"Adding new member {alpha.leader_id} ")
    assert history[1]["rebalance_reason"] is None  # a simple group never rebalanced

    # A replay of the batch (the same sink, or a restarted one) appends nothing.
    assert GROUP_HISTORY in write(s, 0, first).tables_skipped
    assert GROUP_HISTORY in write(DeltaSink(tables, APP, NO_HOUSEKEEPING), 0, first).tables_skipped
    assert len(rows(tables, GROUP_HISTORY)) == 2

    # alpha's leader rejoins: the rebalance shows as a new row with its reason.
    member = alpha.leader_id
    assert member is not None
    feed.ctx.join(member, group_id="alpha")
    data = feed.batch()
    assert write(s, 1, data).history_written == 1
    row = rows(tables, GROUP_HISTORY, "batch_id")[-1]
    assert (row["group_id"], row["state"], row["generation_id"], row["batch_id"]) == (
        "alpha",
        "CompletingRebalance",
        2,
        1,
    )
    assert row["rebalance_reason"] == (
        f"Leader {member} re-joining group during Stable; client reason: not provided"
    )
    assert row["updated_at_ms"] == data["emitted_at_ms"]

    # beta is deleted: group_state loses its row, group_history keeps a Dead one.
    assert feed.ctx.delete_group("beta")["error"] is None
    report = write(s, 2, feed.batch())
    assert (report.history_written, report.groups_deleted) == (1, 1)
    dead = rows(tables, GROUP_HISTORY, "batch_id")[-1]
    assert dead["group_id"] == "beta" and dead["state"] == "Dead" and dead["batch_id"] == 2
    assert dead["offsets_partition"] == feed.ctx.c.partition_for("beta")
    assert dead["updated_at_ms"] == feed.ctx.now
    nulls = set(schema.GROUP_HISTORY_SCHEMA.names) - {
        "group_id",
        "offsets_partition",
        "state",
        "updated_at_ms",
        "batch_id",
    }
    assert {name: dead[name] for name in nulls} == dict.fromkeys(nulls)
    assert [(r["group_id"], r["state"]) for r in rows(tables, GROUP_HISTORY, "batch_id")] == [
        ("alpha", "Stable"),
        ("beta", "Empty"),
        ("alpha", "CompletingRebalance"),
        ("beta", "Dead"),
    ]
    assert sorted(r["group_id"] for r in rows(tables, GROUP_STATE)) == ["alpha"]


def test_a_crash_between_history_and_state_is_completed_by_the_replay(
    tables: Path, feed: Feed, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    feed.join_and_commit("alpha", 1)
    data = feed.batch()

    def failing_merge(*args: Any, **kwargs: Any) -> Any:
        raise Crash(GROUP_STATE)

    monkeypatch.setattr(DeltaTable, "merge", failing_merge)
    with pytest.raises(Crash):
        write(s, 0, data)
    monkeypatch.undo()
    assert (txn(tables, GROUP_HISTORY), txn(tables, GROUP_STATE)) == (0, None)
    report = write(s, 0, data)
    assert report.tables_skipped == [CONSUMER_OFFSETS, GROUP_HISTORY]
    assert report.tables_written == [GROUP_STATE, RESPONSES]
    assert len(rows(tables, GROUP_HISTORY)) == 1 == len(rows(tables, GROUP_STATE))


# --- tables written by an older release -----------------------------------------------------------

#: ``group_state`` as releases before ``rebalance_reason`` created it.
OLD_GROUP_STATE_SCHEMA = pa.schema(
    [f for f in schema.GROUP_STATE_SCHEMA if f.name != "rebalance_reason"]
)


def test_an_old_group_state_table_gains_the_reason_column(tables: Path, feed: Feed) -> None:
    feed.join_and_commit("alpha", 1)
    feed.commit("beta", 1)
    old_rows = [
        {k: v for k, v in dict(g, updated_at_ms=1, batch_id=0).items() if k != "rebalance_reason"}
        for g in feed.batch()["groups"]
    ]
    path = tables / GROUP_STATE
    path.mkdir(parents=True)
    DeltaTable.create(path, OLD_GROUP_STATE_SCHEMA)
    deltalake.write_deltalake(
        path, pa.Table.from_pylist(old_rows, schema=OLD_GROUP_STATE_SCHEMA), mode="append"
    )
    assert "rebalance_reason" not in DeltaTable(path).schema().to_arrow().names
    assert not (tables / GROUP_HISTORY).exists()

    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    evolved = DeltaTable(path)
    assert "rebalance_reason" in evolved.schema().to_arrow().names
    assert evolved.transaction_version(APP) is None  # the evolution marks no batch
    before = {r["group_id"]: r for r in rows(tables, GROUP_STATE)}
    assert {g: r["rebalance_reason"] for g, r in before.items()} == {"alpha": None, "beta": None}
    assert before["alpha"]["state"] == "Stable"
    assert DeltaTable(tables / GROUP_HISTORY).to_pyarrow_table().num_rows == 0

    # The old rows merge with new summaries; the reason arrives with alpha's next rebalance.
    member = feed.ctx.group("alpha").leader_id
    assert member is not None
    feed.ctx.join(member, group_id="alpha")
    feed.commit("beta", 2)
    report = write(s, 1, feed.batch())
    assert (report.groups_upserted, report.groups_deleted) == (2, 0)
    after = {r["group_id"]: r for r in rows(tables, GROUP_STATE)}
    assert after["alpha"]["rebalance_reason"] == feed.ctx.group("alpha").rebalance_reason
    assert after["alpha"]["rebalance_reason"].startswith(f"Leader {member} re-joining")
    assert after["beta"]["rebalance_reason"] is None
    assert after["beta"]["num_committed_offsets"] == 2
    # Opening it again changes nothing more.
    version = DeltaTable(path).version()
    DeltaSink(tables, APP, NO_HOUSEKEEPING)
    assert DeltaTable(path).version() == version


# --- housekeeping ---------------------------------------------------------------------------------


def test_housekeeping_runs_on_schedule_and_keeps_rows_and_transactions(
    tables: Path, feed: Feed
) -> None:
    s = DeltaSink(tables, APP, Housekeeping(3, 3, 6, vacuum_retention_hours=0))
    for batch_id in (1, 2):
        for group_id in GROUPS:
            feed.commit(group_id, batch_id)
        batch = feed.batch()
        assert write(s, batch_id, batch).housekeeping == []
    before = content(tables)
    files_before = len(DeltaTable(tables / CONSUMER_OFFSETS).file_uris())

    # Batch 3 is idle: housekeeping still runs on it (every multiple comes exactly once).
    report = write(s, 3, feed.batch())
    assert report.tables_written == []
    tasks = [line.split(":")[0] for line in report.housekeeping]
    expected = [f"{task} {name}" for task in ("compact", "checkpoint") for name in schema.TABLES]
    expected += [f"cleanup_metadata {name}" for name in schema.TABLES]
    assert tasks == expected
    assert not any("FAILED" in line for line in report.housekeeping)
    assert len(DeltaTable(tables / CONSUMER_OFFSETS).file_uris()) < files_before
    assert content(tables) == before
    assert {name: txn(tables, name) for name in schema.TABLES} == {
        CONSUMER_OFFSETS: 2,
        REJECTED_REQUESTS: None,
        GROUP_HISTORY: 2,
        GROUP_STATE: 2,
        RESPONSES: 2,
    }
    assert last_complete_batch(tables, APP) == 2
    assert s.log_end_offsets() == log_end_offsets(tables)

    # A replay of batch 2 after the compaction is still recognised, by a restarted sink too.
    assert write(s, 2, batch).tables_skipped == [
        CONSUMER_OFFSETS,
        GROUP_HISTORY,
        GROUP_STATE,
        RESPONSES,
    ]
    restarted = DeltaSink(tables, APP, Housekeeping(3, 3, 6, vacuum_retention_hours=0))
    assert write(restarted, 2, batch).tables_written == []
    assert content(tables) == before

    for batch_id in (4, 5, 6):
        feed.commit("alpha", batch_id)
        report = write(restarted, batch_id, feed.batch())
    vacuumed = [line for line in report.housekeeping if line.startswith("vacuum")]
    assert [line.split(":")[0] for line in vacuumed] == [f"vacuum {n}" for n in schema.TABLES]
    # Retention 0: the files compaction replaced in batch 3 (and merges replaced) are gone.
    assert vacuumed[0].endswith(" files deleted)") and " (0 files" not in vacuumed[0]
    assert report.housekeeping_ms > 0
    assert txn(tables, CONSUMER_OFFSETS) == last_complete_batch(tables, APP) == 6
    assert_log_is_numbered(tables, feed.ctx.records)


def test_a_failed_housekeeping_task_is_reported_not_raised(
    tables: Path, feed: Feed, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = DeltaSink(tables, APP, Housekeeping(2, 0, 0))

    def broken(table: DeltaTable) -> str:
        raise OSError("disk full")

    monkeypatch.setattr("coordinator.stream.sink._compact", broken)
    feed.commit("alpha", 1)
    write(s, 1, feed.batch())
    feed.commit("alpha", 2)
    report = write(s, 2, feed.batch())
    assert report.tables_written == [CONSUMER_OFFSETS, GROUP_HISTORY, GROUP_STATE, RESPONSES]
    assert report.housekeeping == [f"compact {n}: FAILED disk full" for n in schema.TABLES]
    feed.commit("alpha", 3)
    assert write(s, 3, feed.batch()).records_written == 2
    assert_log_is_numbered(tables, feed.ctx.records)


def test_housekeeping_is_off_when_its_interval_is_zero(tables: Path, feed: Feed) -> None:
    s = DeltaSink(tables, APP, NO_HOUSEKEEPING)
    for batch_id in (100, 1000):
        feed.commit("alpha", batch_id)
        assert write(s, batch_id, feed.batch()).housekeeping == []
    with pytest.raises(ValueError):
        Housekeeping(compact_every_batches=-1)


def test_deleted_file_retention_is_read_from_the_table_configuration() -> None:
    hours = sink._deleted_file_retention_hours
    assert hours({}) == 168
    assert hours({"delta.deletedFileRetentionDuration": "interval 2 days"}) == 48
    assert hours({"delta.deletedFileRetentionDuration": "interval 1 hour"}) == 1
    assert hours({"delta.deletedFileRetentionDuration": "30 minutes"}) == 0.5
    assert hours({"delta.deletedFileRetentionDuration": "nonsense"}) == 168
