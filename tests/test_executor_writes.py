"""Writes made by the batch's tasks (``job.sink.write=executors``), without Spark.

:class:`LocalJob` with ``job.sink.write=executors`` cuts each batch's operator rows into
``job.shards`` parts by offsets partition, as Spark's shuffle does, runs the job's task function
(:func:`coordinator.stream.datafiles.write_partition`) on each and commits the files they
wrote, as the job's driver does. The tables must come out as the driver's writes make them;
a replay must write nothing twice; files of a batch that died before its commits must be
left unreferenced and go with the next vacuum. The Spark job itself is tested on a standalone
cluster (tests/test_stream_standalone.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from coordinator import jsonio
from coordinator.stream import datafiles, schema
from coordinator.stream.local import LocalJob
from coordinator.stream.schema import CONSUMER_OFFSETS, RESPONSES, TABLES
from coordinator.stream.settings import load_settings
from coordinator.stream.sink import Housekeeping

GROUPS = [f"g{n:02d}" for n in range(10)]
#: Columns that hold the wall clock of the write: the only ones that differ between two runs.
WALL_CLOCK = {"written_at_ms"}


def batch_requests(batch: int) -> list[Any]:
    """Commits of every group (offsets unique per batch), a group deleted now and then, a
    ListGroups, a describe and a line with no request id (rejected)."""
    requests: list[Any] = []
    for group in GROUPS:
        requests.append(
            {
                "api": "offset_commit",
                "request_id": f"{group}/{batch}",
                "group_id": group,
                "member_id": "",
                "generation_id": -1,
                "offsets": [
                    {"topic": "t", "partition": p, "offset": batch * 10 + p, "metadata": ""}
                    for p in range(2)
                ],
            }
        )
    if batch % 3 == 2:
        requests.append({"api": "delete_groups", "request_id": f"del/{batch}", "group_id": "g03"})
    requests.append({"api": "list_groups", "request_id": f"list/{batch}"})
    requests.append({"api": "describe_groups", "request_id": f"d/{batch}", "group_id": "g01"})
    requests.append(f"no request id in batch {batch}")
    return requests


def local_job(warehouse: Path, sink_write: str, **changes: Any) -> LocalJob:
    values = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}
    return LocalJob(
        load_settings([], values, warehouse=str(warehouse), sink_write=sink_write, **changes)
    )


def content(warehouse: Path) -> dict[str, list[str]]:
    """Every table's rows but the wall clock of their write, order aside."""
    out = {}
    for name in TABLES:
        table = pa.table(DeltaTable(warehouse / "tables" / name).to_pyarrow_table())
        kept = table.drop_columns([c for c in table.column_names if c in WALL_CLOCK])
        out[name] = sorted(jsonio.dumps(row) for row in kept.to_pylist())
    return out


def data_files(table_dir: Path) -> set[str]:
    """Every parquet file in a table's directory, relative to it."""
    return {
        str(p.relative_to(table_dir))
        for p in table_dir.rglob("*.parquet")
        if "_delta_log" not in p.parts
    }


def referenced(table_dir: Path) -> set[str]:
    paths = pa.table(DeltaTable(table_dir).get_add_actions()).column("path").to_pylist()
    return {unquote(p) for p in paths}


def batch_files(table_dir: Path) -> list[str]:
    """The data files that the table's batch commits (those with an app transaction) added."""
    added = []
    for commit_file in sorted((table_dir / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit_file.read_text().splitlines() if line]
        if any("txn" in action for action in actions):
            added += [action["add"]["path"] for action in actions if "add" in action]
    return added


def written_by_the_tasks(table_dir: Path) -> bool:
    """Whether the table's batches were written by the job's own file writer (named
    ``part-<batch>-<uuid>``), none by delta-rs's ``write_deltalake`` (``part-00000-<uuid>``).
    Compaction's files are delta-rs's: only what batch commits added counts."""
    paths = batch_files(table_dir)
    return bool(paths) and all(re.search(r"part-\d{12}-", p) for p in paths)


def record_rows(job: LocalJob) -> list[list[dict[str, Any]]]:
    """Have ``job`` keep a copy of every batch's operator rows (to replay one)."""
    seen: list[list[dict[str, Any]]] = []
    original = job._write_as_tasks

    def keep(rows: list[dict[str, Any]]) -> None:
        seen.append(list(rows))
        original(rows)

    job._write_as_tasks = keep  # type: ignore[method-assign]
    return seen


def test_tasks_write_the_same_tables_as_the_driver(tmp_path: Path) -> None:
    driver = local_job(tmp_path / "driver", "driver", shards=3)
    executors = local_job(tmp_path / "executors", "executors", shards=3)
    for batch in range(6):
        assert driver.run_batch(batch_requests(batch), 1_000 + batch) == executors.run_batch(
            batch_requests(batch), 1_000 + batch
        )
    expected, got = content(tmp_path / "driver"), content(tmp_path / "executors")
    for name in TABLES:
        assert got[name] == expected[name], name
    assert got[CONSUMER_OFFSETS] and got[RESPONSES] and got[schema.REJECTED_REQUESTS]
    # One commit per table and batch, as the driver makes them (the tasks' files together).
    for name in TABLES:
        assert (
            DeltaTable(tmp_path / "executors" / "tables" / name).version()
            == DeltaTable(tmp_path / "driver" / "tables" / name).version()
        ), name
    # Several tasks wrote the log's files of one batch: the case that needs one commit of many.
    log = pa.table(
        DeltaTable(tmp_path / "executors" / "tables" / CONSUMER_OFFSETS).get_add_actions()
    )
    assert log.num_rows > 6


def test_the_files_statistics_are_those_delta_rs_writes(tmp_path: Path) -> None:
    rows = {name: [None, None, None] for name in schema.CONSUMER_OFFSETS_SCHEMA.names}
    rows.update(
        offsets_partition=[1, 1, 1],
        offset=[7, 5, 6],
        group_id=["b", "a" * 40, None],
        key=[b"k", b"l", b"m"],
        committed_offset=[None, 3, None],
        members=[[{"member_id": "m", "subscription": b"x"}], None, []],
    )
    data = pa.table(rows, schema=schema.CONSUMER_OFFSETS_SCHEMA)
    write_deltalake(tmp_path / "theirs", data, partition_by=["offsets_partition"])
    theirs = pa.table(DeltaTable(tmp_path / "theirs").get_add_actions()).to_pylist()
    (ours,) = datafiles.write_files(
        tmp_path / "ours", CONSUMER_OFFSETS, data, 0, ["offsets_partition"]
    )
    log = (tmp_path / "theirs" / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    (their_stats,) = [
        json.loads(json.loads(line)["add"]["stats"]) for line in log if '"add"' in line
    ]
    assert json.loads(ours.stats) == their_stats
    assert ours.partition_values == {"offsets_partition": "1"}
    assert ours.num_rows == 3 == theirs[0]["num_records"]


def test_a_replayed_batch_writes_no_file_and_no_row_twice(tmp_path: Path) -> None:
    job = local_job(tmp_path / "w", "executors")
    seen = record_rows(job)
    for batch in range(3):
        job.run_batch(batch_requests(batch), 1_000 + batch)
    tables = tmp_path / "w" / "tables"
    before = content(tmp_path / "w")
    files = {name: data_files(tables / name) for name in TABLES}
    versions = {name: DeltaTable(tables / name).version() for name in TABLES}
    # Spark re-runs the last batch after a crash between the sink and its own commit.
    job.batch_id -= 1
    plan = job.sink.plan_files(job.batch_id)
    assert set(plan.skip) == set(TABLES)
    job._write_as_tasks(seen[-1])
    assert content(tmp_path / "w") == before
    assert {name: data_files(tables / name) for name in TABLES} == files
    assert {name: DeltaTable(tables / name).version() for name in TABLES} == versions


def test_a_batch_that_dies_after_the_log_is_completed_and_its_orphans_vacuumed(
    tmp_path: Path,
) -> None:
    vacuum_now = {"vacuum_every_batches": 4, "vacuum_retention_hours": 0}
    job = local_job(tmp_path / "w", "executors", **vacuum_now)
    job.sink.sink.housekeeping = Housekeeping(0, 0, 4, 0, retention_every_batches=0)
    seen = record_rows(job)
    tables = tmp_path / "w" / "tables"
    job.run_batch(batch_requests(0), 1_000)

    def die_after_the_log(table: str, batch_id: int) -> None:
        if table == CONSUMER_OFFSETS and batch_id == 1:
            raise RuntimeError("killed after the log's commit")

    job.sink.sink.after_commit = die_after_the_log
    with pytest.raises(RuntimeError, match="killed"):
        job.run_batch(batch_requests(1), 1_001)
    job.sink.sink.after_commit = None
    # The tasks wrote every table's files; only the log's were committed.
    orphans = {name: data_files(tables / name) - referenced(tables / name) for name in TABLES}
    assert orphans[RESPONSES] and not orphans[CONSUMER_OFFSETS]
    assert DeltaTable(tables / RESPONSES).transaction_version(job.sink.sink.app_id) == 0
    # The replay (same rows, same batch id) completes the rest and leaves the log alone.
    log_files = data_files(tables / CONSUMER_OFFSETS)
    job._write_as_tasks(seen[-1])
    job.batch_id += 1
    assert data_files(tables / CONSUMER_OFFSETS) == log_files
    log = pa.table(DeltaTable(tables / CONSUMER_OFFSETS).to_pyarrow_table())
    partitions, offsets = log.column("offsets_partition"), log.column("offset")
    positions = list(zip(partitions.to_pylist(), offsets.to_pylist(), strict=True))
    assert len(positions) == len(set(positions))
    answered = pa.table(DeltaTable(tables / RESPONSES).to_pyarrow_table())
    assert answered.column("request_id").to_pylist().count("g00/1") == 1
    still = {name: data_files(tables / name) - referenced(tables / name) for name in TABLES}
    assert still[RESPONSES] == orphans[RESPONSES]
    # The next vacuum (batch 4 here) deletes every file no version references, and only those.
    job.run_batch(batch_requests(2), 1_002)
    job.run_batch(batch_requests(3), 1_003)
    job.run_batch(batch_requests(4), 1_004)
    for name in TABLES:
        assert data_files(tables / name) == referenced(tables / name), name
        assert not (orphans[name] & data_files(tables / name)), name


def test_two_tasks_with_records_of_one_offsets_partition_are_refused(tmp_path: Path) -> None:
    job = local_job(tmp_path / "w", "executors")
    seen = record_rows(job)
    job.run_batch(batch_requests(0), 1_000)
    tables = tmp_path / "w" / "tables"
    versions = {name: DeltaTable(tables / name).version() for name in TABLES}
    rows = [r for r in seen[-1] if r["kind"] == "record"]
    plan = job.sink.plan_files(1)
    batch = pa.RecordBatch.from_pylist(rows, schema=datafiles.OPERATOR_SCHEMA)
    meta = [
        out
        for half in (batch.slice(0, 1), batch.slice(1))
        for out in datafiles.write_partition(iter([half]), plan)
    ]
    with pytest.raises(datafiles.SplitPartitionError):
        job.sink.commit_files(pa.Table.from_batches(meta), plan)
    assert {name: DeltaTable(tables / name).version() for name in TABLES} == versions


def test_an_unknown_sink_write_is_refused() -> None:
    with pytest.raises(ValueError, match=r"job\.sink\.write must be one of driver, executors"):
        load_settings([], {"job.sink.write": "workers"})


# --- the Spark job (local[2]: tasks in the driver's JVM, their Python workers apart) -----------


@pytest.mark.slow
@pytest.mark.parametrize("state_key", ["shard", "group"])
def test_the_spark_job_writes_from_its_tasks_with_either_state_key(
    spark: Any, tmp_path: Path, state_key: str
) -> None:
    from tests.stream_support import RunningCoordinator

    coordinator = RunningCoordinator(
        spark,
        tmp_path / "warehouse",
        sink_write="executors",
        state_key=state_key,
        coordinator={"offsets.topic.num.partitions": "5"},
    ).start()
    try:
        answers = coordinator.requests(
            [r for r in batch_requests(0) if isinstance(r, dict)], timeout_s=180
        )
        assert all(a["error"] is None for a in answers), answers
        coordinator.client.submit([r for r in batch_requests(1) if isinstance(r, dict)])
        listed = coordinator.request({"api": "list_groups", "request_id": "last-list"})
        assert sorted(g["group_id"] for g in listed["groups"]) == GROUPS
    finally:
        coordinator.stop()
    tables = tmp_path / "warehouse" / "tables"
    log = pa.table(DeltaTable(tables / CONSUMER_OFFSETS).to_pyarrow_table())
    by_partition: dict[int, list[int]] = {}
    for partition, offset in zip(
        log.column("offsets_partition").to_pylist(), log.column("offset").to_pylist(), strict=True
    ):
        by_partition.setdefault(partition, []).append(offset)
    assert len(by_partition) > 1
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))
    assert written_by_the_tasks(tables / CONSUMER_OFFSETS)
    assert written_by_the_tasks(tables / RESPONSES)


def test_the_job_metrics_count_the_same_either_way(tmp_path: Path) -> None:
    from coordinator.metrics.job import JobMetrics
    from tests.metrics_support import Scrape

    counted = {}
    for sink_write in ("driver", "executors"):
        job = local_job(tmp_path / sink_write, sink_write)
        metrics = JobMetrics("127.0.0.1:0", job.settings.job.paths)
        job.sink.metrics = metrics
        try:
            for batch in range(4):
                job.run_batch(batch_requests(batch), 1_000 + batch)
            scrape = Scrape(metrics.server.port)
        finally:
            metrics.close()
        counted[sink_write] = {
            key: value
            for key, value in scrape.samples.items()
            if key[0].startswith("coordinator_") and key[0].endswith("_total")
        }
    assert counted["executors"] == counted["driver"]
    requests = {key: v for key, v in counted["driver"].items() if "requests" in key[0]}
    assert sum(requests.values()) > 0, counted["driver"]
