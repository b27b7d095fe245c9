"""The inbox source in the Spark job: a checkpoint that does not grow with the files read, late
files with small names, and re-run batches that read exactly what their first run read."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.stream import job
from coordinator.stream.source import parse_sequenced
from tests.stream_support import RunningCoordinator, simple_commit

pytestmark = pytest.mark.slow


def drop(
    inbox: Path, name: str, requests: list[dict[str, Any]], mtime_ns: int | None = None
) -> None:
    """A request file, written hidden (finished at ``mtime_ns``, when given) and renamed in
    (the documented way)."""
    inbox.mkdir(parents=True, exist_ok=True)
    tmp = inbox / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in requests))
    if mtime_ns is not None:
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
    os.rename(tmp, inbox / name)


def fetch(rid: str, group: str) -> dict[str, Any]:
    return {"api": "offset_fetch", "request_id": rid, "group_id": group, "partitions": None}


def size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def archived(c: RunningCoordinator) -> int:
    archive = c.settings.job.paths.archive
    return sum(1 for _ in archive.iterdir()) if archive.is_dir() else 0


#: Files per trigger in the growth test: a few batches per thousand files (the per-batch logs
#: are what ``minBatchesToRetain`` bounds), yet a test of a few minutes.
FILES_PER_TRIGGER = 50
#: ``minBatchesToRetain`` in the growth test (the job's is 100): the warm-up only has to pass
#: it, and what it bounds (Spark's per-batch logs) is the same at any value.
RETAINED_BATCHES = 10


def test_the_checkpoint_does_not_grow_with_the_files_read(spark, tmp_path):
    """Spark's file source grew the checkpoint by about 120 bytes per file, forever. Here the
    growth after warm-up (past ``minBatchesToRetain`` batches) is Spark's per-batch logs only,
    which that setting bounds: at most 10 KB per 1,000 files."""
    retained = RETAINED_BATCHES
    setting = "spark.sql.streaming.minBatchesToRetain"
    shared = spark.conf.get(setting)  # the shared session's, restored at the end
    spark.conf.set(setting, str(retained))  # read when the query starts
    c = RunningCoordinator(spark, tmp_path / "warehouse", max_files_per_trigger=FILES_PER_TRIGGER)
    inbox = c.settings.job.paths.inbox
    checkpoint = c.settings.job.paths.checkpoint
    sent = 0

    def send(files: int) -> None:
        nonlocal sent
        for _ in range(files):
            drop(inbox, f"{sent:08d}.jsonl", [fetch(f"r{sent}", f"g{sent % 5}")])
            sent += 1
        # Every file read and committed (the last batch's are archived at the next batch,
        # which may not come without input: the last one may still be waiting).
        c.wait_for(lambda: read_all(sent), timeout_s=900, what=f"{sent} files read")

    def read_all(files: int) -> bool:
        query = c.running.query  # type: ignore[union-attr]
        if not query.isActive:
            raise AssertionError(f"the query stopped: {query.exception()}")
        return archived(c) >= files - FILES_PER_TRIGGER

    c.start()
    try:
        # Warm-up: more batches than Spark keeps logs of, so its logs are at their bound.
        send(FILES_PER_TRIGGER * (retained + 5))
        warm = size(checkpoint)
        measured = 1500
        send(measured)
        grown = size(checkpoint) - warm
        progress = c.running.query.recentProgress  # type: ignore[union-attr]
    finally:
        c.stop()
        spark.conf.set(setting, shared)
    print(f"checkpoint {warm} bytes after warm-up, then {grown:+d} bytes over {measured} files")
    assert all(p["numInputRows"] <= FILES_PER_TRIGGER for p in progress)
    assert grown <= 10 * 1024 * measured / 1000, (
        f"the checkpoint grew {grown} bytes over {measured} files (warm: {warm} bytes)"
    )
    assert not (checkpoint / "sources").exists()  # no file list anywhere


def test_a_file_renamed_in_late_with_a_smaller_name_is_answered(spark, tmp_path):
    late, slow = "9999999999999-fast-client-000002.jsonl", "0000000000001-slow-client-000001.jsonl"
    c = RunningCoordinator(spark, tmp_path / "warehouse").start()
    try:
        inbox = c.settings.job.paths.inbox
        drop(inbox, late, [simple_commit("b", "ledger", 2)])
        assert c.client.wait(["b"], timeout_s=60)["b"]["partitions"][0]["error"] is None
        assert c.request(fetch("f1", "ledger"))["partitions"][0]["offset"] == 2
        # Renamed in after that file was read, with a name that sorts before it (a client
        # whose clock is behind, a hand-dropped file): read all the same, and applied after.
        drop(inbox, slow, [simple_commit("a", "ledger", 1)])
        assert c.client.wait(["a"], timeout_s=60)["a"]["partitions"][0]["error"] is None
        assert c.request(fetch("f2", "ledger"))["partitions"][0]["offset"] == 1
        archive = c.settings.job.paths.archive

        def archived_names() -> list[str]:
            parsed = [parse_sequenced(p.name) for p in sorted(archive.iterdir())]
            return [o[1] for o in parsed if o and o[1] in (late, slow)]

        # Sequence order, not name order.
        assert c.wait_for(lambda: len(archived_names()) == 2, what="both archived")
        assert archived_names() == [late, slow]
    finally:
        c.stop()


def test_a_rerun_batch_reads_the_same_rows_even_after_its_files_moved(spark, tmp_path, monkeypatch):
    """A crash between Spark's offsets/N and commits/N re-runs batch N: it must see the same
    files in the same order, even when they were moved to the archive meanwhile, and nothing
    that arrived after (here a file whose name sorts first)."""
    written: dict[int, list[list[str]]] = {}
    original_write = job.BatchSink.write

    def recording_write(self: job.BatchSink, table: Any, batch_id: int) -> Any:
        rows = table.to_pylist()
        if any(r["kind"] != "tick" for r in rows):
            written.setdefault(batch_id, []).append(
                sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
            )
        return original_write(self, table, batch_id)

    monkeypatch.setattr(job.BatchSink, "write", recording_write)
    crashed: list[int] = []

    def crash_once(figures: job.BatchFigures) -> None:
        if figures.records and not crashed:
            crashed.append(figures.batch_id)
            raise RuntimeError("simulated crash between the Delta writes and Spark's commit")

    c = RunningCoordinator(spark, tmp_path / "warehouse")
    c.after_write = crash_once
    inbox = c.settings.job.paths.inbox
    # Three files in one batch, their commits to one simple group: the order decides the winner.
    # They arrived at one instant, so the source numbers them by name.
    arrived = time.time_ns()
    for name, offset in (("b.jsonl", 2), ("c.jsonl", 3), ("a.jsonl", 1)):
        commits = [simple_commit(f"{name}-{i}", "audit", offset * 10 + i) for i in range(3)]
        drop(inbox, name, commits, arrived)
    c.start()
    try:
        c.wait_for(lambda: not c.running.query.isActive, what="the query to fail")  # type: ignore[union-attr]
        c.stop()
        assert crashed
        # The batch's files move to the archive while the job is down, and a new file arrives.
        paths = c.settings.job.paths
        sequenced = inbox / "_sequenced"
        moved = sorted(p.name for p in sequenced.iterdir() if not p.name.startswith("."))
        assert [parse_sequenced(n)[1] for n in moved] == ["a.jsonl", "b.jsonl", "c.jsonl"]  # type: ignore[index]
        paths.archive.mkdir(parents=True, exist_ok=True)
        for name in moved:
            shutil.move(str(sequenced / name), str(paths.archive / name))
        drop(inbox, "0.jsonl", [simple_commit("late", "audit", 99)])
        c.after_write = None
        c.start()
        answers = c.client.wait(["late"], timeout_s=120)
        assert answers["late"]["partitions"][0]["error"] is None
    finally:
        c.stop()
    batch = crashed[0]
    first, rerun = written[batch][:2]
    assert rerun == first
    log = [r for r in c.rows("consumer_offsets") if r["record_type"] == "offset_commit"]
    in_order = [r["committed_offset"] for r in sorted(log, key=lambda r: r["offset"])]
    assert in_order == [10, 11, 12, 20, 21, 22, 30, 31, 32, 99]
