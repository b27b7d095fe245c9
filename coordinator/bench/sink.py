"""The driver's work per row of a batch (``coordinator bench sink``).

With ``job.sink.write=driver``, ``foreachBatch`` runs on the driver between one micro-batch's
tasks and the next batch, so its cost per row lengthens every batch. This runs that path without
Spark, over one batch of the operator's rows (:data:`datafiles.OPERATOR_SCHEMA`, as ``toArrow()``
hands them over) of one kind at a time:

- ``answers``: heartbeat answers, written as the operator writes them;
- ``commits``: offset commit records, as the engine encodes them.

For each it times three ways, in turns, in one process:

- ``sink``: the job's own path, :meth:`BatchRows.split` and :meth:`DeltaSink.write_batch`;
- ``per row``: the same rows made into a dict each (``to_pylist``), decoded with ``json`` or
  :func:`record_from_bytes` and written from those dicts (the sink's way before its rows
  stayed columns), for comparison;
- ``floor``: only the Delta append of the finished table (delta-rs, the same table), which
  neither way can avoid.

It prints microseconds per row and each way over the floor. No Spark, no JVM: the collect
(``toArrow()``) is the JVM's and is not in these figures.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from coordinator import jsonio
from coordinator.log import codec
from coordinator.log.records import record_from_bytes
from coordinator.requests import response
from coordinator.stream import datafiles, operator, schema
from coordinator.stream.schema import CONSUMER_OFFSETS, RESPONSES
from coordinator.stream.sink import DeltaSink

#: The batch's clock on every row (any fixed time).
BATCH_MS = 1_700_000_000_000
#: The kinds of rows, and the table each is written to.
TABLE_OF = {"answers": RESPONSES, "commits": CONSUMER_OFFSETS}
KINDS = tuple(TABLE_OF)
WAYS = ("sink", "per row", "floor")


@dataclass(frozen=True)
class SinkBenchOptions:
    #: Rows in the batch.
    rows: int = 50_000
    groups: int = 1_000
    #: Each way is timed this many times, in turns; the median is reported.
    rounds: int = 5
    kinds: tuple[str, ...] = KINDS


@dataclass
class SinkBenchResult:
    options: dict[str, Any]
    #: kind -> way -> microseconds per row (the median round).
    us_per_row: dict[str, dict[str, float]] = field(default_factory=dict)
    #: kind -> the sink's split and write apart (µs per row, the median round).
    sink_parts: dict[str, dict[str, float]] = field(default_factory=dict)


def operator_rows(kind: str, rows: int, groups: int) -> pa.Table:
    """One batch of ``rows`` operator rows of ``kind`` over ``groups`` groups."""
    out = []
    for i in range(rows):
        group = f"group-{i % groups:05d}"
        partition = i % 50
        if kind == "answers":
            answer = response("heartbeat", f"member-{i}-{i // groups}", group)
            key, value, body = b"", b"", jsonio.dumps_response(answer)
            row_kind = operator.RESPONSE
        elif kind == "commits":
            committed = codec.OffsetCommitValue(i, 5, "", BATCH_MS, None)
            key = codec.encode_offset_commit_key(group, "orders", i % 12)
            value, body = codec.encode_offset_commit_value(committed), None
            row_kind = operator.RECORD
        else:
            raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
        out.append((row_kind, group, i // groups, partition, key, value, BATCH_MS, body))
    columns = zip(datafiles.OPERATOR_SCHEMA, zip(*out, strict=True), strict=True)
    return pa.table(
        {f.name: pa.array(c, f.type) for f, c in columns}, schema=datafiles.OPERATOR_SCHEMA
    )


def _per_row_tables(kind: str, table: pa.Table, batch_id: int) -> pa.Table:
    """The per-row way: a dict per row, decoded, and the table built from those dicts."""
    rows = table.to_pylist()
    if kind == "answers":
        answers = [json.loads(row["body"]) for row in rows]
        return datafiles.responses_table(
            datafiles.answers_from_dicts(answers), batch_id, BATCH_MS, BATCH_MS
        )
    records = []
    for row in rows:
        record = record_from_bytes(row["key"], row["value"])
        assert record is not None
        record["offsets_partition"] = row["offsets_partition"]
        record["timestamp_ms"] = row["timestamp_ms"]
        records.append(record)
    log, _ = datafiles.log_table(datafiles.records_from_dicts(records), {}, batch_id, BATCH_MS)
    return log


def sink_bench(options: SinkBenchOptions) -> SinkBenchResult:
    result = SinkBenchResult(asdict(options))
    with tempfile.TemporaryDirectory(prefix="bench-sink-") as directory:
        for kind in options.kinds:
            table = operator_rows(kind, options.rows, options.groups)
            times, parts = _time_ways(kind, table, Path(directory) / kind, options.rounds)
            scale = 1e6 / options.rows
            result.us_per_row[kind] = {
                way: statistics.median(spent) * scale for way, spent in times.items()
            }
            result.sink_parts[kind] = {
                part: statistics.median(spent) * scale for part, spent in parts.items()
            }
    return result


def _time_ways(
    kind: str, table: pa.Table, root: Path, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds each way took in each round, and the sink's split and write apart."""
    sink = DeltaSink(root / "sink", f"bench-{kind}")
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    parts: dict[str, list[float]] = {"split": [], "write": []}
    finished: list[pa.Table] = []

    def the_sink(batch_id: int) -> None:
        started = time.perf_counter()
        batch = datafiles.BatchRows.split(table)
        split = time.perf_counter()
        sink.write_batch(
            batch_id,
            records=batch.records,
            responses=batch.responses,
            groups=[],
            rejected=[],
            list_groups=[],
            emitted_at_ms=BATCH_MS,
            written_at_ms=BATCH_MS,
        )
        parts["split"].append(split - started)
        parts["write"].append(time.perf_counter() - split)

    def per_row(batch_id: int) -> None:
        data = _per_row_tables(kind, table, batch_id)
        _append(root / "per-row", kind, data)
        finished[:] = [data]

    def floor(batch_id: int) -> None:
        _append(root / "floor", kind, finished[0])

    ways: dict[str, Callable[[int], None]] = {"sink": the_sink, "per row": per_row, "floor": floor}
    for batch_id in range(rounds):
        for way in WAYS:
            started = time.perf_counter()
            ways[way](batch_id)
            times[way].append(time.perf_counter() - started)
    return times, parts


def _append(path: Path, kind: str, data: pa.Table) -> None:
    """One append, partitioned as the sink's table of ``kind``'s rows is."""
    partition_by = schema.PARTITION_BY.get(TABLE_OF[kind]) or None
    write_deltalake(str(path), data, mode="append", partition_by=partition_by)


def format_report(result: SinkBenchResult) -> str:
    options = result.options
    lines = [
        f"sink benchmark: one batch of {options['rows']:,} operator rows over "
        f"{options['groups']:,} groups, each way {options['rounds']} times in turns "
        "(median); µs per row, no Spark",
        "",
        f"{'rows':10s} {'sink':>8s} {'(split':>8s} {'write)':>8s} {'per row':>9s} "
        f"{'floor':>8s} {'sink/floor':>11s} {'per row/floor':>14s} {'per row/sink':>13s}",
    ]
    for kind, ways in result.us_per_row.items():
        parts = result.sink_parts[kind]
        floor = ways["floor"]
        lines.append(
            f"{kind:10s} {ways['sink']:8.2f} {parts['split']:8.2f} {parts['write']:8.2f} "
            f"{ways['per row']:9.2f} {floor:8.2f} {ways['sink'] / floor:11.2f} "
            f"{ways['per row'] / floor:14.2f} {ways['per row'] / ways['sink']:13.2f}"
        )
    lines += [
        "",
        "sink = the job's driver path (BatchRows.split, then DeltaSink.write_batch); per row =",
        "a dict per row, json / record_from_bytes, tables from the dicts, the same Delta append;",
        "floor = the Delta append of the finished table alone",
    ]
    return "\n".join(lines)
