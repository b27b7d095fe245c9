"""The job's Delta writer alone, batch after batch: does the driver's memory grow with batches?

``python -m coordinator.bench.sink_memory BATCHES DIR [EVERY]`` writes BATCHES micro-batches
through :class:`~coordinator.stream.sink.DeltaSink` (what ``BatchSink`` calls in the job's
driver) into ``DIR/tables``: each batch the log records of 10 groups' commits (4 partitions
each, made by the engine), 40 responses and one group summary, with compaction and checkpoint
every 100 batches and vacuum every 1,000. Every EVERY batches (250) it prints one JSON line: the
batch, seconds so far, RSS, memory traced by Python (``tracemalloc``) and pyarrow's pool. No
Spark: what is left of the driver's memory without the JVM, py4j and the stateful operator.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from coordinator.bench.soak import _rss_mb
from coordinator.config import CoordinatorConfig
from coordinator.engine import GroupCoordinator
from coordinator.stream.sink import DeltaSink, Housekeeping

GROUPS = 10
PARTITIONS = 4
RESPONSES = 40


def _commit_records(engine: GroupCoordinator, group: str, now_ms: int) -> list[dict[str, Any]]:
    request = {
        "api": "offset_commit",
        "request_id": f"c-{group}-{now_ms}",
        "group_id": group,
        "api_version": 9,
        "member_id": "",
        "group_instance_id": None,
        "generation_id": -1,
        "retention_time_ms": -1,
        "offsets": [
            {"topic": "t", "partition": p, "offset": now_ms, "leader_epoch": -1, "metadata": ""}
            for p in range(PARTITIONS)
        ],
    }
    engine.handle(request, now_ms)
    return engine.drain_records()


def run(batches: int, root: Path, every: int = 250) -> list[dict[str, Any]]:
    import os

    import pyarrow as pa

    (root / "tables").mkdir(parents=True, exist_ok=True)
    engine = GroupCoordinator(CoordinatorConfig())
    sink = DeltaSink(root / "tables", "sink-memory", Housekeeping(100, 100, 1000, 168))
    tracemalloc.start(1)
    started = time.monotonic()
    lines = []
    for batch in range(batches):
        now = 1_000_000 + 500 * batch
        records = [r for g in range(GROUPS) for r in _commit_records(engine, f"g{g}", now)]
        responses = [
            {
                "api": "heartbeat",
                "request_id": f"h{batch}-{i}",
                "group_id": f"g{i % GROUPS}",
                "error_code": 0,
                "error": None,
                "throttle_time_ms": 0,
            }
            for i in range(RESPONSES)
        ]
        summary = {
            "group_id": f"g{batch % GROUPS}",
            "offsets_partition": 1,
            "state": "Stable",
            "protocol_type": "consumer",
            "generation_id": batch,
            "members": [],
        }
        sink.write_batch(
            batch,
            records=records,
            responses=responses,
            groups=[summary],
            rejected=[],
            list_groups=[],
            emitted_at_ms=now,
            written_at_ms=now,
        )
        if batch % every == 0 or batch == batches - 1:
            gc.collect()
            line = {
                "batch": batch,
                "s": round(time.monotonic() - started),
                "rss_mb": round(_rss_mb(os.getpid()), 1),
                "traced_mb": round(tracemalloc.get_traced_memory()[0] / 2**20, 2),
                "arrow_mb": round(pa.total_allocated_bytes() / 2**20, 2),
            }
            print(json.dumps(line), flush=True)
            lines.append(line)
    return lines


if __name__ == "__main__":
    run(int(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 250)
