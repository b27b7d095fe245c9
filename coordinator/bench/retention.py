"""Retention under steady load: what it keeps, and what a run costs the batch it runs after.

``python -m coordinator.bench.retention [--groups G] [--partitions P] [--batches B]
[--history-s S] [--every N]`` writes B micro-batches through the job's sink
(:class:`DeltaSink`; retention, compaction and checkpoints every N batches, 100 as the job
does by default, vacuum every 1,000) on a simulated clock (a batch every 200 ms, the job's trigger), each batch an offset
commit of every partition of every group (G x P log records) plus their responses, with a
history window of S simulated seconds. Prints the write time of a batch, the time of each
retention run, and what the tables hold at the end against what was written. Figures, not a
test.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from coordinator.group.model import OffsetAndMetadata
from coordinator.log.partitioning import partition_for
from coordinator.log.records import offset_commit_record
from coordinator.stream import schema
from coordinator.stream.delta_read import read_table
from coordinator.stream.retention import Retention
from coordinator.stream.sink import DeltaSink, Housekeeping

TRIGGER_MS = 200
START_MS = 1_800_000_000_000
PARTITIONS = 50


def run(
    groups: int, partitions: int, batches: int, history_s: float, every: int, root: Path
) -> None:
    history_ms = int(history_s * 1000)
    housekeeping = Housekeeping(
        compact_every_batches=every,
        checkpoint_every_batches=every,
        retention_every_batches=every,
        vacuum_retention_hours=0,
        retention=Retention(
            history_ms=history_ms,
            offsets_delete_retention_ms=history_ms,
            responses_ms=history_ms,
            rejected_requests_ms=history_ms,
            delta_log_retention_ms=1,
        ),
    )
    sink = DeltaSink(root, "bench-retention", housekeeping)
    write_ms: list[float] = []
    retention_ms: list[float] = []
    written = 0
    started = time.perf_counter()
    for batch in range(batches):
        now = START_MS + batch * TRIGGER_MS
        records = []
        for g in range(groups):
            group_id = f"group-{g}"
            for p in range(partitions):
                record = offset_commit_record(
                    group_id, "events", p, OffsetAndMetadata(batch, -1, "", now, None), now
                )
                record["offsets_partition"] = partition_for(group_id, PARTITIONS)
                records.append(record)
        responses = [
            {
                "api": "offset_commit",
                "request_id": f"{batch}-{g}",
                "group_id": f"group-{g}",
                "error_code": 0,
                "error": None,
            }
            for g in range(groups)
        ]
        report = sink.write_batch(
            batch,
            records=records,
            responses=responses,
            groups=[],
            rejected=[],
            list_groups=[],
            emitted_at_ms=now,
            written_at_ms=now,
        )
        written += len(records)
        write_ms.append(report.write_ms)
        if any(line.startswith("retention") for line in report.housekeeping):
            retention_ms.append(
                sum(
                    float(line.split(": ")[1].split(" ms")[0])
                    for line in report.housekeeping
                    if line.startswith("retention") and "FAILED" not in line
                )
            )
    elapsed = time.perf_counter() - started
    from deltalake import DeltaTable

    log = DeltaTable(str(root / schema.CONSUMER_OFFSETS))
    window_rows = groups * partitions * min(batches, history_ms // TRIGGER_MS + 1)
    print(
        f"{batches} batches of {groups * partitions} log records "
        f"({batches * TRIGGER_MS / 1000:.0f} s simulated, history window {history_s:g} s = "
        f"{history_ms // TRIGGER_MS} batches) in {elapsed:.1f} s"
    )
    print(
        f"batch write: p50 {statistics.median(write_ms):.0f} ms, max {max(write_ms):.0f} ms; "
        f"retention runs: {len(retention_ms)}, p50 "
        f"{statistics.median(retention_ms) if retention_ms else 0:.0f} ms, "
        f"max {max(retention_ms, default=0):.0f} ms"
    )
    rows = read_table(log, columns=["offset"]).num_rows
    print(
        f"consumer_offsets: {written} records written, {rows} kept (window holds about "
        f"{window_rows}, keys {groups * partitions}), {len(log.file_uris())} live files"
    )
    for name in schema.TABLES:
        table = DeltaTable(str(root / name))
        files = len(list((root / name).rglob("*.parquet")))
        logs = len(list((root / name / "_delta_log").iterdir()))
        rows = read_table(table, columns=["batch_id"]).num_rows
        print(
            f"  {name}: {rows} rows, {len(table.file_uris())} live files, {files} parquet "
            f"files on disk, {logs} _delta_log files, transaction version "
            f"{table.transaction_version('bench-retention')}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coordinator.bench.retention")
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batches", type=int, default=600)
    parser.add_argument("--history-s", type=float, default=30.0)
    parser.add_argument(
        "--every", type=int, default=100, help="retention, compaction, checkpoints (batches)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-retention-") as root:
        run(args.groups, args.partitions, args.batches, args.history_s, args.every, Path(root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
