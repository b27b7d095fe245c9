"""Retention through the Delta sink, on a temporary warehouse, while batches keep coming.

The sink runs retention in its housekeeping (the single writer): ``consumer_offsets`` compacted
as Kafka's cleaner does outside the history window, ``group_history`` trimmed to each group's
last row before it, old ``responses``, ``rejected_requests`` and archived inbox files deleted,
Delta log and deleted-file retention set and applied. These tests check that the tables stay
bounded, that every table's app transaction survives, that the compacted log loads into the
engine's groups, and that readers refuse a past the warehouse no longer keeps.

The engine's clock is simulated: ``STEP_MS`` per batch, the batch's clock is the sink's.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from deltalake import DeltaTable

from coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.admin.tables import AsOf, AsOfError, WarehouseReader
from coordinator.cli import main
from coordinator.log import records as log
from coordinator.stream import retention, schema
from coordinator.stream.operator import group_summary
from coordinator.stream.rebuild import read_log
from coordinator.stream.retention import Retention
from coordinator.stream.schema import (
    CONSUMER_OFFSETS,
    GROUP_HISTORY,
    REJECTED_REQUESTS,
    RESPONSES,
    Warehouse,
)
from coordinator.stream.settings import IDENTITY_FILE
from coordinator.stream.sink import DeltaSink, Housekeeping, log_end_offsets
from tests.support import Ctx

pytestmark = pytest.mark.slow

APP = "coordinator-retention-test"
STEP_MS = 1_000
CONFIG = CoordinatorConfig(
    group_initial_rebalance_delay_ms=0,
    group_min_session_timeout_ms=10,
    offsets_topic_num_partitions=3,
)
GROUPS = ["alpha", "beta", "gamma", "delta"]
#: Every 5 batches: retention; every 10: compaction, checkpoint (+ log cleanup), vacuum.
RETENTION = Retention(
    history_ms=20 * STEP_MS,
    offsets_delete_retention_ms=10 * STEP_MS,
    responses_ms=10 * STEP_MS,
    rejected_requests_ms=10 * STEP_MS,
    archive_ms=10 * STEP_MS,
    delta_log_retention_ms=1,
)
HOUSEKEEPING = Housekeeping(
    compact_every_batches=10,
    checkpoint_every_batches=10,
    vacuum_every_batches=10,
    vacuum_retention_hours=0,
    retention_every_batches=5,
    retention=RETENTION,
)


class Stream:
    """An engine whose groups commit in every batch, fed through a sink."""

    def __init__(self, warehouse: Path, housekeeping: Housekeeping = HOUSEKEEPING) -> None:
        self.paths = Warehouse.at(warehouse)
        self.ctx = Ctx(CONFIG, owned_partitions=None, now_ms=1_000_000)
        self.sink = DeltaSink(self.paths.tables, APP, housekeeping)
        self.members: dict[str, tuple[str, int]] = {}
        self.batch_id = 0
        self._records = 0
        self._answers = 0
        self.reports: list[Any] = []
        # The readers find the app id where the job keeps it.
        self.paths.checkpoint.mkdir(parents=True, exist_ok=True)
        (self.paths.checkpoint / IDENTITY_FILE).write_text(
            json.dumps({"app_id": APP, "offsets_topic_num_partitions": 3})
        )
        timeouts = {"session": 1_800_000, "rebalance": 60_000}
        for group_id in GROUPS:
            self.members[group_id] = self.ctx.join_and_sync_single(group_id=group_id, **timeouts)

    def step(self, round_: int, *, rejected: int = 0) -> None:
        """One batch: every group commits its two offsets again; some lines are rejected."""
        self.ctx.sleep(STEP_MS)
        for group_id, (member, generation) in self.members.items():
            self.ctx.commit(
                {("orders", 0): round_, ("orders", 1): round_ + 1},
                group_id=group_id,
                member_id=member,
                generation=generation,
            )
        self.write(rejected)

    def write(self, rejected: int = 0) -> None:
        records = [dict(r, offset=None) for r in self.ctx.records[self._records :]]
        responses = list(self.ctx.answers.values())[self._answers :]
        self._records, self._answers = len(self.ctx.records), len(self.ctx.answers)
        touched = dict.fromkeys(r["group_id"] for r in [*records, *responses])
        groups = [
            group_summary(g, self.ctx.c.group(g), self.ctx.c.partition_for(g)) for g in touched
        ]
        self.reports.append(
            self.sink.write_batch(
                self.batch_id,
                records=records,
                responses=responses,
                groups=groups,
                rejected=[
                    {"raw": "{", "source_file": "f", "reason": "not JSON"} for _ in range(rejected)
                ],
                list_groups=[],
                emitted_at_ms=self.ctx.now,
                written_at_ms=self.ctx.now,
            )
        )
        self.batch_id += 1

    def table(self, name: str) -> DeltaTable:
        return DeltaTable(str(self.paths.table(name)))

    def rows(self, name: str) -> int:
        return self.table(name).to_pyarrow_table(columns=["batch_id"]).num_rows


def records_per_partition(ctx: Ctx) -> dict[int, int]:
    counts: dict[int, int] = {}
    for r in ctx.records:
        counts[r["offsets_partition"]] = counts.get(r["offsets_partition"], 0) + 1
    return counts


def assert_log_loads_into_the_engine(stream: Stream) -> None:
    """Every group at rest equals a load of the (compacted) table."""
    loaded = GroupCoordinator.from_records(
        read_log(stream.paths.tables).to_pylist(), CONFIG, stream.ctx.now, owned_partitions=None
    )
    assert loaded.group_ids() == stream.ctx.c.group_ids()
    for group_id in stream.ctx.c.group_ids():
        live = stream.ctx.c.group(group_id)
        assert live is not None and live.state.value in ("Stable", "Empty")
        assert log.durable_view(loaded.group(group_id)) == log.durable_view(live), group_id


def test_tables_stay_bounded_while_batches_keep_coming(tmp_path: Path) -> None:
    """Retention runs in the sink between batches as the stream appends; after every batch the
    log's numbering goes on where it was, and the table loads into the engine's groups."""
    stream = Stream(tmp_path)
    sizes: list[dict[str, int]] = []
    for round_ in range(120):
        stream.step(round_, rejected=1 if round_ % 3 == 0 else 0)
        # The sink numbers the next records from what the table holds: compaction keeps the
        # last record of every partition, so the end never moves back.
        assert log_end_offsets(stream.paths.tables) == records_per_partition(stream.ctx)
        if round_ % 10 == 9:
            assert_log_loads_into_the_engine(stream)
            sizes.append(
                {
                    name: stream.rows(name)
                    for name in (CONSUMER_OFFSETS, GROUP_HISTORY, RESPONSES, REJECTED_REQUESTS)
                }
                | {
                    f"{name} files": len(stream.table(name).file_uris())
                    for name in (CONSUMER_OFFSETS, RESPONSES)
                }
                | {
                    f"{name} log": len(list((stream.paths.table(name) / "_delta_log").iterdir()))
                    for name in schema.TABLES
                }
                | {  # live or not: what vacuum leaves
                    f"{name} on disk": len(list(stream.paths.table(name).rglob("part-*.parquet")))
                    for name in schema.TABLES
                }
            )
    failures = [line for r in stream.reports for line in r.housekeeping if "FAILED" in line]
    assert not failures, failures

    # Every table still knows the last batch it holds (app transactions preserved).
    for name in schema.TABLES:
        wrote = max(r.batch_id for r in stream.reports if name in r.tables_written)
        assert stream.table(name).transaction_version(APP) == wrote, name
    assert stream.table(RESPONSES).transaction_version(APP) == stream.batch_id - 1

    # Bounded: the last measurements are no larger than the ones half way through, and far
    # below what was written (120 batches x 4 groups x 2 offsets = 960 commits).
    middle, last = sizes[len(sizes) // 2], sizes[-1]
    for key, value in last.items():
        assert value <= max(middle[key] * 1.5, middle[key] + 12), (key, middle, last)
    written = sum(records_per_partition(stream.ctx).values())
    assert last[CONSUMER_OFFSETS] < written / 3
    # The window holds 20 batches of 8 records, 5 more age between two runs; before it one
    # record per key (8 commits, 4 groups), and each partition's active record.
    assert last[CONSUMER_OFFSETS] <= 8 * (21 + 5) + 12 + 3
    assert last[RESPONSES] <= 4 * 16
    assert last[REJECTED_REQUESTS] <= 6

    # Offsets survive with their numbers: sparse before the window, contiguous inside it.
    rows = read_log(stream.paths.tables)
    for partition in range(3):
        offsets = [
            o
            for p, o in zip(
                rows.column("offsets_partition").to_pylist(),
                rows.column("offset").to_pylist(),
                strict=True,
            )
            if p == partition
        ]
        if offsets:
            assert offsets == sorted(set(offsets))
            assert offsets[-1] + 1 == records_per_partition(stream.ctx)[partition]

    # Vacuum removed the files retention and compaction dropped: only live files on disk.
    for name in (CONSUMER_OFFSETS, RESPONSES):
        on_disk = [p for p in stream.paths.table(name).rglob("*.parquet")]
        assert len(on_disk) <= len(stream.table(name).file_uris()) + 12, name

    # The table's Delta properties say what retention set.
    configuration = stream.table(CONSUMER_OFFSETS).metadata().configuration
    assert configuration[retention.LOG_RETENTION] == "interval 1 milliseconds"
    assert configuration[retention.DELETED_FILE_RETENTION] == "interval 0 days"
    assert retention.KEPT_FROM_BATCH in configuration


def test_vacuum_removes_every_file_the_tables_no_longer_reference(tmp_path: Path) -> None:
    """Files replaced long before a vacuum (by compaction and retention, then a checkpoint that
    no longer carries their expired tombstones) are deleted all the same: a vacuum that only
    read the tombstones left them on disk forever (found by the soak: ``responses`` kept 2.5 MB
    live and 49 MB on disk after an hour)."""
    schedule = replace(HOUSEKEEPING, vacuum_every_batches=25)  # not with the checkpoints
    stream = Stream(tmp_path, schedule)
    for round_ in range(51):
        stream.step(round_, rejected=1 if round_ % 3 == 0 else 0)
    assert stream.batch_id - 1 == 50  # the last batch vacuumed (after everything else)
    failures = [line for r in stream.reports for line in r.housekeeping if "FAILED" in line]
    assert not failures, failures
    for name in schema.TABLES:
        path = stream.paths.table(name)
        live = {Path(unquote(urlparse(u).path)) for u in stream.table(name).file_uris()}
        on_disk = {p for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}
        assert on_disk == live, (name, sorted(p.name for p in on_disk - live))


def test_a_restarted_sink_and_a_rebuild_load_the_compacted_log(tmp_path: Path) -> None:
    """A new sink (after a restart: its cleaner starts with nothing known as clean) carries on
    numbering and compacting; the log it leaves loads into the engine's groups, also for
    groups that were deleted and whose offsets expired (their tombstones past retention)."""
    stream = Stream(tmp_path)
    for round_ in range(30):
        stream.step(round_)
    # Two groups go: one deleted, one empty whose offsets then expire.
    for group_id in ("gamma", "delta"):
        member, _ = stream.members.pop(group_id)
        stream.ctx.leave([(member, None)], group_id=group_id)
    stream.ctx.delete_group("gamma")
    stream.ctx.commit({("orders", 0): 1}, group_id="delta", retention_ms=5 * STEP_MS)
    stream.write()
    stream.sink = DeltaSink(stream.paths.tables, APP, HOUSEKEEPING)
    for round_ in range(30, 90):
        stream.step(round_)
    assert stream.ctx.c.group("gamma") is None
    assert_log_loads_into_the_engine(stream)
    groups_left = set(read_log(stream.paths.tables).column("group_id").to_pylist())
    assert "gamma" not in groups_left
    # The rebuild of a lost checkpoint compacts the compacted log again and loads each group
    # from its records: the same groups.
    from coordinator.stream.rebuild import compact

    bootstrap = compact(read_log(stream.paths.tables))
    assert sorted(bootstrap) == stream.ctx.c.group_ids()
    for group_id, pairs in bootstrap.items():
        rows = [log.record_from_bytes(key, value) for key, value in pairs]
        loaded = log.replay([r for r in rows if r is not None], stream.ctx.now)[group_id]
        assert log.durable_view(loaded) == log.durable_view(stream.ctx.c.group(group_id))


def test_readers_refuse_a_past_that_is_no_longer_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = Stream(tmp_path, Housekeeping(0, 0, 0, retention_every_batches=5, retention=RETENTION))
    early_version = None
    for round_ in range(60):
        stream.step(round_)
        if round_ == 3:
            early_version = stream.table(CONSUMER_OFFSETS).version()
            early_ms = stream.ctx.now  # the batch's clock, which --as-of TIME reads
    assert early_version is not None
    reader = WarehouseReader(tmp_path)
    kept = reader.history_start()
    assert kept is not None and kept.batch_id > 4
    assert kept.setting == "job.retention.history.ms=20000"

    for point in (
        str(early_version),
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(early_ms / 1000))
        + f".{early_ms % 1000:03d}",
    ):
        with pytest.raises(AsOfError, match="no longer kept: history starts at"):
            WarehouseReader(tmp_path).cut(AsOf.parse(point))
    # Now, and a recent version, are answered.
    assert WarehouseReader(tmp_path).cut().batch_id == stream.batch_id - 1
    recent = stream.table(CONSUMER_OFFSETS).version()
    assert WarehouseReader(tmp_path).cut(AsOf.parse(str(recent))).batch_id is not None

    # coordinator.queries (and so the notebook) refuses when the cut is made, before Spark
    # reads anything, and says where the history of "now" starts.
    from coordinator.queries import Queries

    with pytest.raises(AsOfError, match="no longer kept"):
        Queries(None, tmp_path, as_of=str(early_version))
    now = Queries(None, tmp_path)
    assert (now.history_start() or "").startswith("history starts at ")
    assert now.history_start().endswith("(job.retention.history.ms=20000)")  # type: ignore[union-attr]

    # The CLI says so plainly and exits non-zero.
    code = main(
        [
            "groups",
            "--warehouse",
            str(tmp_path),
            "--describe",
            "--group",
            "alpha",
            "--as-of",
            str(early_version),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1
    assert "Error: offsets as of log version" in out
    assert "no longer kept: history starts at" in out
    # groups history tells where history starts.
    code = main(["groups", "--warehouse", str(tmp_path), "history", "--group", "alpha"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "history starts at" in out


def test_a_cleaned_delta_log_refuses_older_versions_but_not_times_inside_the_window(
    tmp_path: Path,
) -> None:
    """Log cleanup (checkpoint, then cleanup_metadata with the table's log retention) removes
    old commits: a version before the oldest one still loadable is refused, not guessed; a
    time inside the history window is still answered (from the rows, not the log)."""
    stream = Stream(
        tmp_path,
        Housekeeping(0, 10, 0, retention_every_batches=5, retention=RETENTION),
    )
    clocks = []
    for round_ in range(40):
        stream.step(round_)
        clocks.append(stream.ctx.now)
        if round_ % 10 == 8:  # let the commits expire before the next checkpoint's cleanup
            newest = max(p.stat().st_mtime for p in tmp_path.glob("tables/*/_delta_log/*"))
            while time.time() < newest + 0.005:
                time.sleep(0.001)
    log_dir = stream.paths.table(CONSUMER_OFFSETS) / "_delta_log"
    assert not (log_dir / f"{1:020d}.json").exists(), "log cleanup removed the first commits"
    with pytest.raises(AsOfError, match="log version 1 is no longer kept"):
        WarehouseReader(tmp_path).cut(AsOf(log_version=1))
    # Inside the 20-batch window the log's cleanup changes nothing: batch 25 by its clock.
    assert WarehouseReader(tmp_path).cut(AsOf(timestamp_ms=clocks[25])).batch_id == 25
    with pytest.raises(AsOfError, match="no longer kept: history starts at"):
        WarehouseReader(tmp_path).cut(AsOf(timestamp_ms=clocks[5]))
    # What the log still holds is answered: now, by time and by version.
    newest = stream.table(CONSUMER_OFFSETS).version()
    assert WarehouseReader(tmp_path).cut(AsOf(log_version=newest)).batch_id == stream.batch_id - 1
    later = stream.ctx.now + 3_600_000
    assert WarehouseReader(tmp_path).cut(AsOf(timestamp_ms=later)).batch_id == stream.batch_id - 1


def test_old_archive_files_are_deleted(tmp_path: Path) -> None:
    archive = tmp_path / "archive" / "work" / "inbox"
    archive.mkdir(parents=True)
    old, new = archive / "old.jsonl", archive / "new.jsonl"
    for path in (old, new):
        path.write_text("{}\n")
    now_ms = 10_000_000_000
    os.utime(old, (now_ms / 1000 - 3600, now_ms / 1000 - 3600))
    os.utime(new, (now_ms / 1000 - 1, now_ms / 1000 - 1))
    assert retention.remove_old_files(tmp_path / "archive", now_ms, 60_000) == "1 files deleted"
    assert not old.exists() and new.exists()
    new.unlink()
    retention.remove_old_files(tmp_path / "archive", now_ms, 60_000)
    assert not (tmp_path / "archive" / "work").exists(), "emptied directories go too"
    assert (tmp_path / "archive").is_dir()


def test_the_log_topic_serves_a_compacted_partition_with_its_offsets(tmp_path: Path) -> None:
    """Fetch on ``__consumer_offsets`` after compaction: the survivors with their own offsets
    (sparse, as Kafka's cleaner leaves them), log start 0, the log end unchanged, and a fetch
    from a cleaned-away offset starts at the next survivor."""
    from kafka.record import MemoryRecords

    from coordinator.gateway.log_topic import LogTopic

    stream = Stream(tmp_path)
    following = LogTopic(stream.paths.table(CONSUMER_OFFSETS), 3)
    for round_ in range(40):
        stream.step(round_)
        following.refresh_now()
    fresh = LogTopic(stream.paths.table(CONSUMER_OFFSETS), 3)
    fresh.refresh_now()
    rows = read_log(stream.paths.tables).to_pylist()
    ends = records_per_partition(stream.ctx)
    for partition in range(3):
        kept = [r["offset"] for r in rows if r["offsets_partition"] == partition]
        assert kept != list(range(ends[partition])), "compacted: offsets are sparse"
        assert [r.offset for r in fresh.records(partition)] == kept
        assert fresh.log_start(partition) == 0
        assert fresh.end_offset(partition) == following.end_offset(partition) == ends[partition]
        gap = next(o for o in range(ends[partition]) if o not in kept)
        answer = fresh.fetch_partition(partition, gap, 1 << 20)
        assert answer["error_code"] == 0 and answer["high_watermark"] == ends[partition]
        batch = MemoryRecords(answer["records"]).next_batch()
        assert batch is not None and batch.validate_crc()
        assert [r.offset for r in batch] == [o for o in kept if o > gap]
        # The source that followed the table as it was compacted serves the same end and
        # every survivor (it may still hold records cleaned after it read them).
        assert set(kept) <= {r.offset for r in following.records(partition)}


def test_through_the_job_batch_the_operator_tools_answer_inside_the_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job's own micro-batch (LocalJob: the operator and the job's sink, with the job's
    settings from ``job.*`` keys): the log is compacted, ``coordinator groups`` describes the
    offsets committed last, and an ``--as-of`` before the window is refused."""
    from coordinator.stream.local import LocalJob
    from coordinator.stream.settings import load_settings

    settings = load_settings(
        [],
        {
            "job.retention.every.batches": "5",
            "job.retention.history.ms": "20000",
            "job.offsets.delete.retention.ms": "10000",
            "job.retention.responses.ms": "10000",
            "job.compact.every.batches": "10",
            "job.checkpoint.every.batches": "10",
        },
        warehouse=str(tmp_path),
    )
    job = LocalJob(settings)
    start_ms = 1_700_000_000_000
    for n in range(80):
        job.run_batch(
            [
                {
                    "api": "offset_commit",
                    "request_id": f"c{n}-{g}",
                    "group_id": g,
                    "member_id": "",
                    "generation_id": -1,
                    "offsets": [{"topic": "orders", "partition": p, "offset": n} for p in (0, 1)],
                }
                for g in ("alpha", "beta")
            ],
            start_ms + n * STEP_MS,
        )
    tables = Warehouse.at(tmp_path).tables
    rows = DeltaTable(str(tables / CONSUMER_OFFSETS)).to_pyarrow_table(columns=["offset"])
    assert rows.num_rows < 80 * 4 / 2, "compacted outside the window"

    code = main(
        [
            "groups",
            "--warehouse",
            str(tmp_path),
            "--describe",
            "--group",
            "alpha",
            "--output",
            "json",
        ]
    )
    out, _ = capsys.readouterr()
    assert code == 0, out
    described = json.loads(out)
    offsets = {
        (o["topic"], o["partition"]): o["current_offset"]
        for g in described["groups"]
        for o in g["offsets"]
    }
    assert offsets == {("orders", 0): 79, ("orders", 1): 79}

    code = main(
        ["groups", "--warehouse", str(tmp_path), "--describe", "--group", "alpha", "--as-of", "2"]
    )
    out, _ = capsys.readouterr()
    assert code == 1 and "no longer kept" in out


def test_spark_queries_inside_the_window_and_without_what_is_gone(
    tmp_path: Path, spark: Any
) -> None:
    """coordinator.queries over a retained warehouse: now, the committed offsets are the
    engine's; at a cut inside the history window but older than the responses' retention the
    views are there but for responses (left out, not shown in part)."""
    from coordinator.queries import Queries

    stream = Stream(tmp_path, Housekeeping(0, 0, 0, retention_every_batches=5, retention=RETENTION))
    versions = []
    for round_ in range(40):
        stream.step(round_)
        versions.append(stream.table(CONSUMER_OFFSETS).version())
    now = Queries(spark, tmp_path)
    committed = {
        (r["group_id"], r["partition"]): r["committed_offset"]
        for r in now.committed_offsets().collect()
    }
    assert committed == {(g, p): 39 + p for g in GROUPS for p in (0, 1)}
    # Batch 20: inside the 20-batch history window (the last retention ran at batch 35),
    # outside the 10-batch responses one.
    past = Queries(spark, tmp_path, as_of=str(versions[20]))
    assert past.cut.batch_id == 20
    views = past.register_views(prefix="past_")
    assert "past_committed_offsets" in views and "past_responses" not in views
    offsets = spark.sql(
        "SELECT committed_offset FROM past_committed_offsets WHERE group_id = 'alpha' "
        "AND partition = 0"
    ).collect()
    assert [r[0] for r in offsets] == [20]
