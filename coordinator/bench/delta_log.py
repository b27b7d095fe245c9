"""What the length of a ``_delta_log`` costs the job, and how long the sink keeps it.

delta-rs on a local file system lists the whole ``_delta_log`` directory on every commit and
every load, so each commit of the job costs more as the log grows; the log holds about one
commit per table per micro-batch for ``job.delta.log.retention.ms``. Two measurements, figures
rather than a test, so that the default can be chosen (and re-checked) by anyone:

``python -m coordinator.bench.delta_log cost [--sizes 1000,10000,...] [--appends 5]``
    For each size N: a table whose log holds N commit files and then a checkpoint (the state
    ``cleanup_metadata`` leaves when N commits are younger than the retention), then the time
    of a fresh load and of appends through an open handle (the sink's way), as medians and as
    a ratio against the smallest size.

``python -m coordinator.bench.delta_log sustained [--minutes M] [--log-retention-ms R]
[--trigger-ms T] [--every-s S]``
    The job's sink (:class:`DeltaSink`, the job's default housekeeping: checkpoint and log
    cleanup every 100 batch ids) writing a batch every T ms of wall clock (the job's trigger,
    200 ms: the job when busy), each batch writing every table but ``rejected_requests``;
    every S seconds a row: per table the ``_delta_log`` files and KiB, and the batch write time
    (p50, p99) since the previous row. ``delta.logRetentionDuration`` is judged by the files'
    modification times against the wall clock, so this one runs in real time: the log should
    level off after R plus one checkpoint interval, at about (commits per second) x R.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from coordinator.stream import schema
from coordinator.stream.retention import DEFAULT_RETENTION, Retention
from coordinator.stream.sink import DEFAULT_HOUSEKEEPING, DeltaSink

APP = "bench-delta-log"
GROUPS = 20
PARTITIONS = 50


# --- commit cost against the log's length -------------------------------------------------------


def commit_cost(size: int, appends: int, root: Path) -> tuple[float, float]:
    """(fresh load s, median append s) on a table whose log holds ``size`` commits and a
    checkpoint."""
    path = root / f"log-{size}"
    shutil.rmtree(path, ignore_errors=True)
    row = pa.table({"a": pa.array([1], pa.int64())})
    write_deltalake(str(path), row)
    log = path / "_delta_log"
    commit = json.dumps(
        {
            "commitInfo": {
                "timestamp": int(time.time() * 1000),
                "operation": "WRITE",
                "operationParameters": {"mode": "Append"},
            }
        }
    )
    for version in range(1, size + 1):
        (log / f"{version:020d}.json").write_text(commit + "\n")
    DeltaTable(str(path)).create_checkpoint()
    loads = []
    for _ in range(3):
        started = time.perf_counter()
        table = DeltaTable(str(path))
        loads.append(time.perf_counter() - started)
    times = []
    for _ in range(appends):
        started = time.perf_counter()
        write_deltalake(table, row, mode="append")
        times.append(time.perf_counter() - started)
    shutil.rmtree(path, ignore_errors=True)
    return statistics.median(loads), statistics.median(times)


def run_cost(sizes: Sequence[int], appends: int, root: Path) -> list[dict[str, float]]:
    rows = []
    print(f"{'log files':>10} {'load ms':>9} {'append ms':>10} {'x load':>7} {'x append':>9}")
    floor: tuple[float, float] | None = None
    for size in sizes:
        load, append = commit_cost(size, appends, root)
        floor = floor or (load, append)
        row = {
            "log_files": size,
            "load_ms": load * 1000,
            "append_ms": append * 1000,
            "load_ratio": load / floor[0],
            "append_ratio": append / floor[1],
        }
        rows.append(row)
        print(
            f"{size:>10,} {row['load_ms']:>9.1f} {row['append_ms']:>10.1f} "
            f"{row['load_ratio']:>7.1f} {row['append_ratio']:>9.1f}",
            flush=True,
        )
    return rows


# --- the log's size under sustained load ------------------------------------------------------


def _batch(batch_id: int, now_ms: int) -> dict[str, object]:
    """One busy batch: a commit of two partitions by every group, their responses, and a
    summary of one group (so that group_history and group_state are written too)."""
    records = []
    responses = []
    for g in range(GROUPS):
        group_id = f"group-{g}"
        for partition in (0, 1):
            records.append(
                {
                    "record_type": "offset_commit",
                    "group_id": group_id,
                    "topic": "events",
                    "partition": partition,
                    "offsets_partition": g % PARTITIONS,
                    "timestamp_ms": now_ms,
                    "key": f"{group_id}/{partition}".encode(),
                    "value": str(batch_id).encode(),
                    "committed_offset": batch_id,
                    "leader_epoch": -1,
                    "metadata": "",
                    "commit_timestamp_ms": now_ms,
                    "expire_timestamp_ms": None,
                    "protocol_type": None,
                    "generation_id": None,
                    "protocol_name": None,
                    "leader": None,
                    "current_state_timestamp_ms": None,
                    "members": None,
                }
            )
        responses.append(
            {
                "api": "offset_commit",
                "request_id": f"{batch_id}-{g}",
                "group_id": group_id,
                "error_code": 0,
                "error": None,
            }
        )
    group = {
        "group_id": f"group-{batch_id % GROUPS}",
        "offsets_partition": batch_id % GROUPS % PARTITIONS,
        "state": "Stable",
        "generation_id": batch_id,
        "num_members": 1,
    }
    return {"records": records, "responses": responses, "groups": [group]}


def _log_size(table: Path) -> tuple[int, int]:
    """(files, bytes) in a table's ``_delta_log``."""
    files = size = 0
    with os.scandir(table / "_delta_log") as entries:
        for entry in entries:
            try:
                size += entry.stat().st_size
            except FileNotFoundError:
                continue
            files += 1
    return files, size


def run_sustained(
    minutes: float, log_retention_ms: int, trigger_ms: int, every_s: float, root: Path
) -> list[dict[str, object]]:
    housekeeping = replace(
        DEFAULT_HOUSEKEEPING, retention=Retention(delta_log_retention_ms=log_retention_ms)
    )
    sink = DeltaSink(root, APP, housekeeping)
    tables = [n for n in schema.TABLES if n != schema.REJECTED_REQUESTS]
    print(
        f"log retention {log_retention_ms / 60_000:g} min, a batch every {trigger_ms} ms, "
        f"checkpoint and cleanup every {housekeeping.checkpoint_every_batches} batches"
    )
    print(
        f"{'minute':>6} {'batches':>7} "
        + " ".join(f"{n[:16] + ' files':>22} {'KiB':>6}" for n in tables)
        + f" {'write p50':>9} {'p99':>6}"
    )
    rows: list[dict[str, object]] = []
    started = time.monotonic()
    next_batch = next_row = started
    writes: list[float] = []
    batch_id = 0
    while time.monotonic() - started < minutes * 60:
        now = time.monotonic()
        if now < next_batch:
            time.sleep(next_batch - now)
        next_batch += trigger_ms / 1000
        now_ms = int(time.time() * 1000)
        report = sink.write_batch(
            batch_id,
            rejected=[],
            list_groups=[],
            emitted_at_ms=now_ms,
            written_at_ms=now_ms,
            **_batch(batch_id, now_ms),  # type: ignore[arg-type]
        )
        writes.append(report.write_ms)
        batch_id += 1
        if time.monotonic() >= next_row:
            next_row += every_s
            sizes = {n: _log_size(root / n) for n in tables}
            ordered = sorted(writes)
            row: dict[str, object] = {
                "minute": (time.monotonic() - started) / 60,
                "batches": batch_id,
                "log_files": {n: s[0] for n, s in sizes.items()},
                "log_kib": {n: s[1] // 1024 for n, s in sizes.items()},
                "write_p50_ms": statistics.median(ordered),
                "write_p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            }
            writes = []
            rows.append(row)
            print(
                f"{row['minute']:>6.1f} {batch_id:>7} "
                + " ".join(f"{sizes[n][0]:>22} {sizes[n][1] // 1024:>6}" for n in tables)
                + f" {row['write_p50_ms']:>9.0f} {row['write_p99_ms']:>6.0f}",
                flush=True,
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coordinator.bench.delta_log")
    commands = parser.add_subparsers(dest="command", required=True)
    cost = commands.add_parser("cost", help="commit and load time against the log's length")
    cost.add_argument("--sizes", default="1000,2000,5000,10000,20000,50000,100000")
    cost.add_argument("--appends", type=int, default=5)
    sustained = commands.add_parser("sustained", help="the log's size under the job's sink")
    sustained.add_argument("--minutes", type=float, default=40.0)
    sustained.add_argument(
        "--log-retention-ms", type=int, default=DEFAULT_RETENTION.delta_log_retention_ms
    )
    sustained.add_argument("--trigger-ms", type=int, default=200)
    sustained.add_argument("--every-s", type=float, default=60.0)
    for command in (cost, sustained):
        command.add_argument("--dir", help="where to write (default: a temporary directory)")
        command.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-delta-log-", dir=args.dir) as root:
        if args.command == "cost":
            sizes = [int(s) for s in args.sizes.split(",")]
            rows: Sequence[object] = run_cost(sizes, args.appends, Path(root))
        else:
            rows = run_sustained(
                args.minutes, args.log_retention_ms, args.trigger_ms, args.every_s, Path(root)
            )
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
