"""A micro-batch's operator rows as the rows of the Delta tables, and as Delta data files.

One piece of code serves both ways the job writes (``job.sink.write``):

- ``driver``: ``foreachBatch`` collects the batch on the driver, :meth:`BatchRows.split` sorts
  its rows out, and :class:`coordinator.stream.sink.DeltaSink` appends the tables built by the
  ``*_table`` functions below with delta-rs, one commit per table;
- ``executors``: every Spark task of the batch runs :func:`write_partition` over its own rows
  (``mapInArrow``): the same split and the same tables, written as parquet files straight into
  the tables' directories. The task returns one small row per file (its add action: path,
  size, partition values, statistics) plus what only the driver can use (group summaries for
  the ``group_state`` MERGE, ListGroups requests, counts). The driver then commits one Delta
  transaction per table from those add actions (:meth:`DeltaSink.write_batch` with
  :class:`BatchFiles`), in the same order and with the same app transaction as ``driver``.

A file is not part of a table until a commit names it, so a task that fails, a task attempt
that loses to another (retry, speculation), or a batch that dies before its commit leaves files
that no version references; ``vacuum`` (full mode, in the sink's housekeeping) deletes them once
they are older than ``job.vacuum.retention.hours``. A replayed batch writes no file for a table
that already holds it (:class:`FilePlan` names those tables).

The log's offsets are numbered where the records are: a task numbers the records of every
offsets partition it holds from that partition's end offset when the batch began (in the plan).
That is right only when all of a partition's records are in one task, which holds when the
stateful operator is keyed by offsets partition (``job.state.key=shard``); keyed by group id,
the job repartitions the batch by offsets partition first. The driver refuses a batch in which
two tasks wrote records of one partition (:class:`BatchFiles`).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from coordinator import jsonio
from coordinator.log.records import RECORD_FIELDS, record_from_bytes
from coordinator.stream import operator, schema
from coordinator.stream.schema import (
    CONSUMER_OFFSETS,
    GROUP_HISTORY,
    REJECTED_REQUESTS,
    RESPONSES,
)

DRIVER = "driver"
EXECUTORS = "executors"
#: ``job.sink.write``: where a batch's rows become Delta data files.
SINK_WRITES = (DRIVER, EXECUTORS)

_LOG_COLUMNS = [name for name in RECORD_FIELDS if name != "offset"]
_GROUP_COLUMNS = [
    n for n in schema.GROUP_STATE_SCHEMA.names if n not in ("batch_id", "updated_at_ms")
]


#: The stateful operator's output rows (``operator.OUTPUT_DDL``) as Arrow sees them.
OPERATOR_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("group_id", pa.string()),
        ("seq", pa.int32()),
        ("offsets_partition", pa.int32()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp_ms", pa.int64()),
        ("body", pa.string()),
    ]
)


# --- the operator's rows, sorted out ------------------------------------------------------------


@dataclass
class BatchRows:
    """One batch's (or one task's part of a batch's) operator rows by kind, in the order the
    tables are written in: records by (offsets partition, group, emission), responses by
    (group, emission), group summaries by group id (Spark hands partitions over in no promised
    order: the order is what the operator decided)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    #: The ListGroups requests as their inbox lines (answered on the driver, from
    #: ``group_state`` after the batch's MERGE).
    list_groups: list[str] = field(default_factory=list)
    timers_fired: int = 0
    #: The batch's clock (Spark's batch timestamp, on every row; 0 with no rows).
    emitted_at_ms: int = 0
    rows: int = 0

    @classmethod
    def split(cls, rows: Iterable[Mapping[str, Any]]) -> BatchRows:
        out = cls()
        records: list[tuple[int, str, int, dict[str, Any]]] = []
        responses: list[tuple[str, int, dict[str, Any]]] = []
        for row in rows:
            out.rows += 1
            kind = row["kind"]
            out.emitted_at_ms = row["timestamp_ms"]
            if kind == operator.RESPONSE:
                responses.append((row["group_id"], row["seq"], json.loads(row["body"])))
            elif kind == operator.RECORD:
                record = record_from_bytes(row["key"], row["value"])
                if record is None:  # pragma: no cover - the engine writes only known types
                    continue
                record["offsets_partition"] = row["offsets_partition"]
                record["timestamp_ms"] = row["timestamp_ms"]
                records.append((row["offsets_partition"], row["group_id"], row["seq"], record))
            elif kind == operator.GROUP:
                out.groups.append(json.loads(row["body"]))
            elif kind == operator.REJECTED:
                out.rejected.append(json.loads(row["body"]))
            elif kind == operator.LIST_GROUPS:
                out.list_groups.append(row["body"])
            elif kind == operator.TICK:
                out.timers_fired += 1
        records.sort(key=lambda r: r[:3])
        responses.sort(key=lambda r: r[:2])
        out.groups.sort(key=lambda g: g["group_id"])
        out.records = [r[3] for r in records]
        out.responses = [r[2] for r in responses]
        return out

    @property
    def anything(self) -> bool:
        """Whether the batch writes anything (an idle batch's timers-only rows do not)."""
        return bool(
            self.records or self.responses or self.groups or self.rejected or self.list_groups
        )


# --- the tables' rows ---------------------------------------------------------------------------


def log_table(
    records: Sequence[Mapping[str, Any]],
    log_end: Mapping[int, int],
    batch_id: int,
    written_at_ms: int,
) -> tuple[pa.Table, dict[int, int]]:
    """``consumer_offsets`` rows of ``records`` (in order), numbered per offsets partition from
    ``log_end``; and the end offsets after them (of the partitions written only)."""
    columns: dict[str, list[Any]] = {name: [r[name] for r in records] for name in _LOG_COLUMNS}
    ends: dict[int, int] = {}
    offsets = []
    for partition in columns["offsets_partition"]:
        offset = ends.get(partition, log_end.get(partition, 0))
        offsets.append(offset)
        ends[partition] = offset + 1
    columns["offset"] = offsets
    columns["batch_id"] = [batch_id] * len(records)
    columns["written_at_ms"] = [written_at_ms] * len(records)
    return pa.table(columns, schema=schema.CONSUMER_OFFSETS_SCHEMA), ends


def rejected_table(rejected: Sequence[Mapping[str, Any]], batch_id: int, at_ms: int) -> pa.Table:
    columns = {name: [r.get(name) for r in rejected] for name in ("raw", "source_file", "reason")}
    columns["batch_id"] = [batch_id] * len(rejected)
    # The batch's clock rather than the wall clock: a replay writes the same row.
    columns["rejected_at_ms"] = [at_ms] * len(rejected)
    return pa.table(columns, schema=schema.REJECTED_REQUESTS_SCHEMA)


def group_table(groups: Sequence[Mapping[str, Any]], batch_id: int, at_ms: int) -> pa.Table:
    """Group summaries as ``group_state`` / ``group_history`` rows (absent = null)."""
    columns = {name: [g.get(name) for g in groups] for name in _GROUP_COLUMNS}
    # The batch's clock rather than the wall clock: a replay writes the same row.
    columns["updated_at_ms"] = [at_ms] * len(groups)
    columns["batch_id"] = [batch_id] * len(groups)
    return pa.table(columns, schema=schema.GROUP_STATE_SCHEMA)


def responses_table(
    answered: Sequence[Mapping[str, Any]], batch_id: int, emitted_at_ms: int, written_at_ms: int
) -> pa.Table:
    columns: dict[str, list[Any]] = {
        "api": [r["api"] for r in answered],
        "request_id": [schema.response_request_id(r["request_id"]) for r in answered],
        "group_id": [r["group_id"] for r in answered],
        "error_code": [r["error_code"] for r in answered],
        "error": [r["error"] for r in answered],
        "body": [jsonio.dumps(r) for r in answered],
        "batch_id": [batch_id] * len(answered),
        "emitted_at_ms": [emitted_at_ms] * len(answered),
        "written_at_ms": [written_at_ms] * len(answered),
    }
    return pa.table(columns, schema=schema.RESPONSES_SCHEMA)


# --- data files ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataFile:
    """A parquet file written into a table's directory, not yet committed: what its add
    action says."""

    table: str
    #: Relative to the table's directory (``offsets_partition=3/part-...parquet``).
    path: str
    size: int
    partition_values: dict[str, str | None]
    modification_time: int
    #: Delta's per-file statistics (JSON): numRecords, minValues, maxValues, nullCount.
    stats: str
    num_rows: int

    def add_action(self) -> Any:
        from deltalake.transaction import AddAction

        return AddAction(
            self.path, self.size, self.partition_values, self.modification_time, True, self.stats
        )


def _has_stats(kind: pa.DataType) -> bool:
    """Columns Delta keeps min/max/null counts of (as delta-rs writes them): flat numbers,
    strings and booleans; not binary, lists or structs."""
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_boolean(kind)
    )


def file_stats(data: pa.Table) -> str:
    """A data file's Delta statistics, as delta-rs writes them for the same rows (partition
    columns are not in the file and so not in its statistics)."""
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for column_field, column in zip(data.schema, data.columns, strict=True):
        if not _has_stats(column_field.type):
            continue
        nulls[column_field.name] = column.null_count
        if column.null_count < len(column):
            extremes = pc.min_max(column)
            minimum[column_field.name] = extremes["min"].as_py()
            maximum[column_field.name] = extremes["max"].as_py()
    return json.dumps(
        {
            "numRecords": data.num_rows,
            "minValues": minimum,
            "maxValues": maximum,
            "nullCount": nulls,
        },
        separators=(",", ":"),
    )


def write_files(
    table_dir: str | Path,
    name: str,
    data: pa.Table,
    batch_id: int,
    partition_by: Sequence[str] = (),
) -> list[DataFile]:
    """``data`` as parquet files in ``table_dir``, one per partition value (partition columns
    are in the path, not in the file, as Delta lays them out). Names are unique per call
    (``part-<batch>-<uuid>``), so a retried task never overwrites a file another attempt
    wrote, and an orphan names the batch that left it."""
    if data.num_rows == 0:
        return []
    parts: list[tuple[dict[str, str | None], pa.Table]] = []
    if not partition_by:
        parts.append(({}, data))
    else:
        (column,) = partition_by  # one partition column is all the tables use
        values = data.column(column)
        for value in pc.unique(values).to_pylist():
            mask = pc.is_null(values) if value is None else pc.equal(values, value)
            parts.append(
                (
                    {column: None if value is None else str(value)},
                    data.filter(mask).drop_columns([column]),
                )
            )
    files = []
    for partition_values, part in parts:
        directory = "/".join(
            f"{key}={'__HIVE_DEFAULT_PARTITION__' if value is None else value}"
            for key, value in partition_values.items()
        )
        relative = f"part-{batch_id:012d}-{uuid.uuid4()}-c000.snappy.parquet"
        if directory:
            relative = f"{directory}/{relative}"
        path = Path(table_dir) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, path, compression="snappy")
        files.append(
            DataFile(
                name,
                relative,
                os.path.getsize(path),
                partition_values,
                int(time.time() * 1000),
                file_stats(part),
                part.num_rows,
            )
        )
    return files


# --- executor writes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FilePlan:
    """What the driver tells a batch's tasks (pickled into the ``mapInArrow`` function)."""

    batch_id: int
    tables_dir: str
    #: Tables that already hold this batch (a replay): no file is written for them.
    skip: tuple[str, ...]
    #: Every offsets partition's next offset when the batch began.
    log_end: dict[int, int]
    #: Whether to send back a digest of every response, record and rejected line (for the
    #: job's Prometheus metrics; off by default: it is per-request data on the driver).
    digests: bool = False


FILE = "file"
LOG_END = "log_end"
COUNTS = "counts"
DIGEST = "digest"

#: ``mapInArrow``'s output: one row per data file, per partition end, group summary,
#: ListGroups request, per task counts (and digests).
META_DDL = (
    "kind string, tbl string, path string, size long, partition_values string, stats string, "
    "num_rows long, modification_time long, offsets_partition int, log_end long, body string"
)
META_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("tbl", pa.string()),
        ("path", pa.string()),
        ("size", pa.int64()),
        ("partition_values", pa.string()),
        ("stats", pa.string()),
        ("num_rows", pa.int64()),
        ("modification_time", pa.int64()),
        ("offsets_partition", pa.int32()),
        ("log_end", pa.int64()),
        ("body", pa.string()),
    ]
)


def write_partition(batches: Iterator[pa.RecordBatch], plan: FilePlan) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function: one task's operator rows written as data files (see the
    module docstring); yields their add actions and the rest as :data:`META_SCHEMA` rows."""
    rows = [row for batch in batches for row in batch.to_pylist()]
    if not rows:
        return
    started = time.perf_counter()
    part = BatchRows.split(rows)
    metas = list(task_files(part, plan))
    # The task's own time (rows in hand to files written), in its counts row (the last).
    at = _counts_index(metas)
    counts = json.loads(metas[at]["body"])
    counts["write_ms"] = (time.perf_counter() - started) * 1000
    metas[at]["body"] = json.dumps(counts)
    yield pa.RecordBatch.from_pylist(metas, schema=META_SCHEMA)


def _counts_index(metas: list[dict[str, Any]]) -> int:
    return next(i for i, meta in enumerate(metas) if meta["kind"] == COUNTS)


def task_files(part: BatchRows, plan: FilePlan) -> Iterator[dict[str, Any]]:
    """Write one task's rows as files of every table that takes them (not those the plan
    skips; ``group_state`` is a MERGE, made by the driver); yield the meta rows."""
    batch_id, at_ms = plan.batch_id, part.emitted_at_ms
    # ``written_at_ms`` is the wall clock of the write: the task's, as it writes.
    written_at_ms = int(time.time() * 1000)
    tables: list[tuple[str, pa.Table]] = []
    if part.records and CONSUMER_OFFSETS not in plan.skip:
        log, ends = log_table(part.records, plan.log_end, batch_id, written_at_ms)
        tables.append((CONSUMER_OFFSETS, log))
        for partition, end in ends.items():
            yield {"kind": LOG_END, "offsets_partition": partition, "log_end": end}
    if part.rejected and REJECTED_REQUESTS not in plan.skip:
        tables.append((REJECTED_REQUESTS, rejected_table(part.rejected, batch_id, at_ms)))
    if part.groups and GROUP_HISTORY not in plan.skip:
        tables.append((GROUP_HISTORY, group_table(part.groups, batch_id, at_ms)))
    if part.responses and RESPONSES not in plan.skip:
        answered = responses_table(part.responses, batch_id, at_ms, written_at_ms)
        tables.append((RESPONSES, answered))
    for name, data in tables:
        for written in write_files(
            Path(plan.tables_dir) / name,
            name,
            data,
            batch_id,
            schema.PARTITION_BY.get(name, ()),
        ):
            yield {
                "kind": FILE,
                "tbl": name,
                "path": written.path,
                "size": written.size,
                "partition_values": json.dumps(written.partition_values),
                "stats": written.stats,
                "num_rows": written.num_rows,
                "modification_time": written.modification_time,
            }
    for group in part.groups:
        yield {"kind": operator.GROUP, "body": jsonio.dumps(group)}
    for line in part.list_groups:
        yield {"kind": operator.LIST_GROUPS, "body": line}
    counts = {
        "rows": part.rows,
        "records": len(part.records),
        "responses": len(part.responses),
        "rejected": len(part.rejected),
        "timers_fired": part.timers_fired,
        "emitted_at_ms": part.emitted_at_ms,
    }
    yield {"kind": COUNTS, "body": json.dumps(counts)}
    if plan.digests:
        for response in part.responses:
            digest = {k: response.get(k) for k in ("request_id", "api", "group_id", "error")}
            digest["error_code"] = response.get("error_code")
            yield {"kind": DIGEST, "tbl": RESPONSES, "body": jsonio.dumps(digest)}
        for record in part.records:
            digest = {
                "record_type": record.get("record_type"),
                "group_id": record.get("group_id"),
                "value": None if record.get("value") is None else True,
            }
            yield {"kind": DIGEST, "tbl": CONSUMER_OFFSETS, "body": jsonio.dumps(digest)}
        for rejected in part.rejected:
            source = {"source_file": rejected.get("source_file")}
            yield {"kind": DIGEST, "tbl": REJECTED_REQUESTS, "body": jsonio.dumps(source)}


class SplitPartitionError(RuntimeError):
    """Two tasks of one batch wrote records of the same offsets partition: their offsets
    overlap. The operator's key and the write's partitioning disagree (a bug); the batch
    fails before anything is committed."""


@dataclass
class BatchFiles:
    """What a batch's tasks wrote and sent back, gathered on the driver."""

    files: dict[str, list[DataFile]] = field(default_factory=dict)
    #: Offsets partition -> its next offset after this batch (partitions written only).
    log_end: dict[int, int] = field(default_factory=dict)
    groups: list[dict[str, Any]] = field(default_factory=list)
    list_groups: list[str] = field(default_factory=list)
    rows: int = 0
    records: int = 0
    responses: int = 0
    rejected: int = 0
    timers_fired: int = 0
    emitted_at_ms: int = 0
    #: The longest time a task took to turn its rows into files (ms).
    task_write_ms: float = 0.0
    #: Per table, the digests of its rows (only with ``FilePlan.digests``).
    digests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def gather(cls, meta: pa.Table) -> BatchFiles:
        out = cls()
        for row in meta.to_pylist():
            kind = row["kind"]
            if kind == FILE:
                name = row["tbl"]
                out.files.setdefault(name, []).append(
                    DataFile(
                        name,
                        row["path"],
                        row["size"],
                        json.loads(row["partition_values"]),
                        row["modification_time"],
                        row["stats"],
                        row["num_rows"],
                    )
                )
            elif kind == LOG_END:
                partition = row["offsets_partition"]
                if partition in out.log_end:
                    raise SplitPartitionError(
                        f"offsets partition {partition}'s records were written by two tasks"
                    )
                out.log_end[partition] = row["log_end"]
            elif kind == operator.GROUP:
                out.groups.append(json.loads(row["body"]))
            elif kind == operator.LIST_GROUPS:
                out.list_groups.append(row["body"])
            elif kind == COUNTS:
                counts = json.loads(row["body"])
                out.rows += counts["rows"]
                out.records += counts["records"]
                out.responses += counts["responses"]
                out.rejected += counts["rejected"]
                out.timers_fired += counts["timers_fired"]
                out.emitted_at_ms = max(out.emitted_at_ms, counts["emitted_at_ms"])
                out.task_write_ms = max(out.task_write_ms, counts.get("write_ms", 0.0))
            elif kind == DIGEST:
                out.digests.setdefault(row["tbl"], []).append(json.loads(row["body"]))
        out.groups.sort(key=lambda g: g["group_id"])
        return out

    def rows_in(self, name: str) -> int:
        return sum(f.num_rows for f in self.files.get(name, ()))

    @property
    def anything(self) -> bool:
        return bool(
            self.records or self.responses or self.groups or self.rejected or self.list_groups
        )
