"""``coordinator status``: the job's last micro-batch and its Delta tables, at a glance.

Reads ``<warehouse>/status/progress.json`` (written by the job after every micro-batch) and the
tables' Delta logs; needs no Spark and works while the job runs. ``last complete batch`` is the
newest batch every table holds (readers wanting a consistent cut filter on ``batch_id`` up to
it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="show the Spark job's progress and its tables",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--warehouse", default="warehouse", metavar="DIR")
    parser.add_argument("--checkpoint", metavar="DIR", help="default <warehouse>/checkpoints/...")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.set_defaults(run=run)


def collect(warehouse: str | Path, checkpoint: str | Path | None = None) -> dict[str, Any]:
    """Everything ``status`` shows, as one dict."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from coordinator.stream import ownership
    from coordinator.stream.schema import TABLES, Warehouse
    from coordinator.stream.settings import IDENTITY_FILE, read_identity
    from coordinator.stream.sink import last_complete_batch
    from coordinator.stream.source import files_read

    paths = Warehouse.at(warehouse, checkpoint=checkpoint)
    out: dict[str, Any] = {"warehouse": str(paths.root), "tables": {}}
    identity_file = paths.checkpoint / IDENTITY_FILE
    identity = read_identity(identity_file) if identity_file.exists() else None
    progress_file = paths.status / "progress.json"
    if progress_file.exists():
        progress = json.loads(progress_file.read_text())
        out["progress"] = {
            "batch_id": progress.get("batchId"),
            "timestamp": progress.get("timestamp"),
            "age_s": round(time.time() - progress_file.stat().st_mtime, 1),
            "input_rows": progress.get("numInputRows"),
            "input_files": files_read(progress),
            "batch_duration_ms": progress.get("batchDuration"),
            **progress.get("coordinator", {}),
        }
    for name in TABLES:
        try:
            table = DeltaTable(str(paths.table(name)))
        except TableNotFoundError:
            continue
        app = identity.app_id if identity else None
        out["tables"][name] = {
            "version": table.version(),
            "files": len(table.file_uris()),
            "last_batch": table.transaction_version(app) if app else None,
        }
    if identity:
        out["checkpoint"] = {
            "path": str(paths.checkpoint),
            "state_key": identity.state_key,
            "shards": identity.shards,
            "offsets_topic_num_partitions": identity.offsets_topic_num_partitions,
            "state_store": identity.state_store,
        }
        out["last_complete_batch"] = last_complete_batch(paths.tables, identity.app_id)
    verdict = ownership.current_verdict(paths.root)
    if verdict.owner is not None:
        out["owner"] = {
            "describe": verdict.owner.describe(),
            "epoch": verdict.owner.epoch,
            "pid": verdict.owner.pid,
            "host": verdict.owner.host,
            "owned": not verdict.free,
            # Why another process could take over now (None while the owner's lease runs).
            "free_because": verdict.reason if verdict.free else None,
            "lease_expires_at_ms": verdict.expires_at_ms,
        }
    return out


def run(args: argparse.Namespace) -> int:
    status = collect(args.warehouse, args.checkpoint)
    if args.output == "json":
        print(json.dumps(status, indent=2))
        return 0
    print(f"warehouse: {status['warehouse']}")
    owner = status.get("owner")
    if owner is not None and owner["owned"]:
        left = (owner["lease_expires_at_ms"] - time.time() * 1000) / 1000
        print(f"owner: {owner['describe']}, lease runs (expires in {left:.1f} s unless renewed)")
    elif owner is not None:
        print(f"owner: none live ({owner['free_because']})")
    checkpoint = status.get("checkpoint")
    if checkpoint is None:
        print("no checkpoint: the job has not run here")
    else:
        print(
            f"checkpoint: {checkpoint['path']} ({checkpoint['state_key']}-keyed, "
            f"{checkpoint['shards']} shards, {checkpoint['offsets_topic_num_partitions']} "
            f"offsets partitions, {checkpoint['state_store']} state store)"
        )
    progress = status.get("progress")
    if progress:
        print(
            f"last batch: {progress['batch_id']} at {progress['timestamp']} "
            f"({progress['age_s']} s ago): {progress['input_files']} files in, "
            f"{progress.get('responses', 0)} responses out, {progress.get('records', 0)} "
            f"records, {progress.get('timers_fired', 0)} timers fired, "
            f"{progress['batch_duration_ms']} ms"
        )
    print(f"last complete batch (in every table): {status.get('last_complete_batch')}")
    print(f"{'TABLE':<20} {'VERSION':>8} {'FILES':>6} {'LAST BATCH':>11}")
    for name, table in status["tables"].items():
        print(f"{name:<20} {table['version']:>8} {table['files']:>6} {table['last_batch']!s:>11}")
    return 0
