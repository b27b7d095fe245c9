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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from coordinator import jsonio
from coordinator.log.codec import read_offset_commit
from coordinator.log.records import OFFSET_COMMIT, record_from_bytes
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


#: The ``consumer_offsets`` columns of a batch's log records, before the sink numbers them and
#: stamps the batch.
RECORD_SCHEMA = pa.schema(
    [
        f
        for f in schema.CONSUMER_OFFSETS_SCHEMA
        if f.name not in ("offset", "batch_id", "written_at_ms")
    ]
)

#: The ``responses`` columns of a batch's answers, before the batch's stamps.
ANSWER_SCHEMA = pa.schema(
    [
        f
        for f in schema.RESPONSES_SCHEMA
        if f.name not in ("batch_id", "emitted_at_ms", "written_at_ms")
    ]
)


# --- the operator's rows, sorted out ------------------------------------------------------------


@dataclass
class BatchRows:
    """One batch's (or one task's part of a batch's) operator rows by kind, in the order the
    tables are written in: records by (offsets partition, group, emission), responses by
    (group, emission), group summaries by group id (Spark hands partitions over in no promised
    order: the order is what the operator decided)."""

    #: The log records, in :data:`RECORD_SCHEMA`.
    records: pa.Table = field(default_factory=lambda: RECORD_SCHEMA.empty_table())
    #: The answers, in :data:`ANSWER_SCHEMA` (without the batch's stamps).
    responses: pa.Table = field(default_factory=lambda: ANSWER_SCHEMA.empty_table())
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
    def split(cls, table: pa.Table) -> BatchRows:
        """Sort a batch's operator rows (:data:`OPERATOR_SCHEMA`) out. The answers and the log
        records, nearly every row of a busy batch, stay columns (:func:`answers_from_bodies`,
        :func:`records_from_rows`); the other kinds become dicts."""
        out = cls(rows=table.num_rows)
        if not table.num_rows:
            return out
        # Every row carries the batch's clock.
        out.emitted_at_ms = table.column("timestamp_ms")[-1].as_py()
        kinds = table.column("kind")
        is_response = pc.equal(kinds, operator.RESPONSE)
        is_record = pc.equal(kinds, operator.RECORD)
        is_tick = pc.equal(kinds, operator.TICK)
        out.timers_fired = pc.sum(is_tick).as_py() or 0
        answered = table.filter(is_response).sort_by(
            [("group_id", "ascending"), ("seq", "ascending")]
        )
        out.responses = answers_from_bodies(answered.column("body"))
        logged = table.filter(is_record).sort_by(
            [("offsets_partition", "ascending"), ("group_id", "ascending"), ("seq", "ascending")]
        )
        out.records = records_from_rows(logged)
        others = pc.invert(pc.or_(pc.or_(is_response, is_record), is_tick))
        for row in table.filter(others).to_pylist():
            kind = row["kind"]
            if kind == operator.GROUP:
                out.groups.append(json.loads(row["body"]))
            elif kind == operator.REJECTED:
                out.rejected.append(json.loads(row["body"]))
            elif kind == operator.LIST_GROUPS:
                out.list_groups.append(row["body"])
        out.groups.sort(key=lambda g: g["group_id"])
        return out

    @property
    def anything(self) -> bool:
        """Whether the batch writes anything (an idle batch's timers-only rows do not)."""
        return bool(
            self.records.num_rows
            or self.responses.num_rows
            or self.groups
            or self.rejected
            or self.list_groups
        )


# --- the tables' rows ---------------------------------------------------------------------------


def records_from_dicts(records: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Record dicts (:data:`coordinator.log.records.RECORD_FIELDS`) as :data:`RECORD_SCHEMA`
    rows."""
    columns = {name: [r[name] for r in records] for name in RECORD_SCHEMA.names}
    return pa.table(columns, schema=RECORD_SCHEMA)


#: The columns an offset commit fills, :data:`RECORD_SCHEMA`'s up to its expire timestamp (the
#: row's own columns and the commit's fields, in the order :func:`records_from_rows` builds
#: them); the rest are a group's, null in an offset commit.
_COMMIT_COLUMNS = RECORD_SCHEMA.names[: RECORD_SCHEMA.names.index("expire_timestamp_ms") + 1]
_GROUP_ONLY = RECORD_SCHEMA.names[len(_COMMIT_COLUMNS) :]


def records_from_rows(rows: pa.Table) -> pa.Table:
    """The log records of operator rows of kind ``record`` (:data:`OPERATOR_SCHEMA`, in the
    order they are written), as :data:`RECORD_SCHEMA` rows: the records
    :func:`coordinator.log.records.record_from_bytes` reads from each row's key and value, with
    the row's offsets partition and timestamp; a key of a type this log does not use is
    skipped. An offset commit in the forms Kafka writes is read the short way, into a tuple."""
    tail = (None,) * len(_GROUP_ONLY)
    out: list[tuple[Any, ...]] = []
    for key, value, partition, stamp in zip(
        rows.column("key").to_pylist(),
        rows.column("value").to_pylist(),
        rows.column("offsets_partition").to_pylist(),
        rows.column("timestamp_ms").to_pylist(),
        strict=True,
    ):
        fields = read_offset_commit(key, value)
        if fields is not None:
            group, topic, part, *committed = fields
            out.append(
                (OFFSET_COMMIT, group, topic, part, partition, stamp, key, value, *committed, *tail)
            )
            continue
        record = record_from_bytes(key, value)
        if record is None:  # pragma: no cover - the engine writes only known types
            continue
        record["offsets_partition"] = partition
        record["timestamp_ms"] = stamp
        out.append(tuple(record[name] for name in RECORD_SCHEMA.names))
    if not out:
        return RECORD_SCHEMA.empty_table()
    columns = zip(RECORD_SCHEMA, zip(*out, strict=True), strict=True)
    return pa.table({f.name: pa.array(c, f.type) for f, c in columns}, schema=RECORD_SCHEMA)


def record_digests(records: pa.Table) -> list[dict[str, Any]]:
    """What the metrics read of each log record (:meth:`JobMetrics.batch_written`); ``value``
    is True for a value, None for a tombstone."""
    digests: list[dict[str, Any]] = [
        {"record_type": kind, "group_id": group, "value": None if missing else True}
        for kind, group, missing in zip(
            records.column("record_type").to_pylist(),
            records.column("group_id").to_pylist(),
            pc.is_null(records.column("value")).to_pylist(),
            strict=True,
        )
    ]
    return digests


def log_table(
    records: pa.Table,
    log_end: Mapping[int, int],
    batch_id: int,
    written_at_ms: int,
) -> tuple[pa.Table, dict[int, int]]:
    """``consumer_offsets`` rows of ``records`` (:data:`RECORD_SCHEMA`, in order), numbered per
    offsets partition from ``log_end``; and the end offsets after them (of the partitions
    written only)."""
    ends: dict[int, int] = {}
    offsets = []
    for partition in records.column("offsets_partition").to_pylist():
        offset = ends.get(partition, log_end.get(partition, 0))
        offsets.append(offset)
        ends[partition] = offset + 1
    rows = records.num_rows
    columns = {name: records.column(name) for name in RECORD_SCHEMA.names}
    columns["offset"] = pa.array(offsets, pa.int64())
    columns["batch_id"] = pa.array([batch_id] * rows, pa.int64())
    columns["written_at_ms"] = pa.array([written_at_ms] * rows, pa.int64())
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


#: The start of a response's JSON as :mod:`coordinator.jsonio` writes it (the common keys first,
#: in order: :func:`coordinator.requests.response`), when its strings need no escapes and its
#: request id is a string, an integer or null: then these groups are the column values exactly
#: (a JSON string without a backslash is its own text between the quotes).
_ANSWER_HEAD = (
    r'^\{"api":"(?P<api>[^"\\]*)",'
    r'"request_id":(?P<request_id>"[^"\\]*"|-?[0-9]+|null),'
    r'"group_id":"(?P<group_id>[^"\\]*)",'
    r'"error_code":(?P<error_code>-?[0-9]{1,9}),'
    r'"error":(?P<error>"[^"\\]*"|null)[,}]'
)


def answers_from_dicts(answered: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Response dicts as :data:`ANSWER_SCHEMA` rows, the body their compact JSON."""
    columns: dict[str, list[Any]] = {
        "api": [r["api"] for r in answered],
        "request_id": [schema.response_request_id(r["request_id"]) for r in answered],
        "group_id": [r["group_id"] for r in answered],
        "error_code": [r["error_code"] for r in answered],
        "error": [r["error"] for r in answered],
        "body": [jsonio.dumps(r) for r in answered],
    }
    return pa.table(columns, schema=ANSWER_SCHEMA)


def answers_from_bodies(bodies: pa.Array | pa.ChunkedArray) -> pa.Table:
    """The responses whose JSON the operator wrote, as :data:`ANSWER_SCHEMA` rows: the rows of
    ``answers_from_dicts([json.loads(b) for b in bodies])``, each body kept as written (the
    same text: it is what ``jsonio.dumps`` wrote). The common fields are read for the whole
    column at once by one regular expression (Arrow's RE2) over each body's start; a body it
    does not fit (an escaped string, a request id of another type) is parsed with ``json``."""
    if isinstance(bodies, pa.ChunkedArray):
        bodies = bodies.combine_chunks()
    if not len(bodies):
        return ANSWER_SCHEMA.empty_table()
    heads = pc.extract_regex(bodies, _ANSWER_HEAD)
    # flatten(): the groups, null where the body does not fit (``field()`` would give "").
    head = dict(zip((f.name for f in heads.type), heads.flatten(), strict=True))
    columns = {
        "api": head["api"],
        "request_id": _json_scalar_text(head["request_id"]),
        "group_id": head["group_id"],
        "error_code": pc.cast(head["error_code"], pa.int32()),
        "error": _json_scalar_text(head["error"]),
    }
    missed = pc.invert(pc.is_valid(heads))
    if pc.any(missed).as_py():
        others = answers_from_dicts(
            [json.loads(bodies[i].as_py()) for i in pc.indices_nonzero(missed).to_pylist()]
        )
        columns = {
            name: pc.replace_with_mask(column, missed, others.column(name).combine_chunks())
            for name, column in columns.items()
        }
    columns["body"] = bodies
    return pa.table(columns, schema=ANSWER_SCHEMA)


def _json_scalar_text(texts: pa.Array) -> pa.Array:
    """A JSON string (no escapes) as its text, ``null`` as null, a number's text as it is."""
    quoted = pc.starts_with(texts, '"')
    unquoted = pc.if_else(pc.equal(texts, "null"), pa.scalar(None, pa.string()), texts)
    return pc.if_else(quoted, pc.utf8_slice_codeunits(texts, 1, -1), unquoted)


def answer_digests(answers: pa.Table) -> list[dict[str, Any]]:
    """What the metrics read of each answer (:meth:`JobMetrics.batch_written`)."""
    digests: list[dict[str, Any]] = answers.select(
        ["request_id", "api", "group_id", "error", "error_code"]
    ).to_pylist()
    return digests


def responses_table(
    answers: pa.Table, batch_id: int, emitted_at_ms: int, written_at_ms: int
) -> pa.Table:
    """``responses`` rows: :data:`ANSWER_SCHEMA` rows stamped with the batch."""
    rows = answers.num_rows
    stamps = {
        "batch_id": pa.array([batch_id] * rows, pa.int64()),
        "emitted_at_ms": pa.array([emitted_at_ms] * rows, pa.int64()),
        "written_at_ms": pa.array([written_at_ms] * rows, pa.int64()),
    }
    columns = {name: answers.column(name) for name in ANSWER_SCHEMA.names}
    return pa.table({**columns, **stamps}, schema=schema.RESPONSES_SCHEMA)


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
    chunks = list(batches)
    if not chunks:
        return
    table = pa.Table.from_batches(chunks)
    if not table.num_rows:
        return
    started = time.perf_counter()
    part = BatchRows.split(table)
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
    if part.records.num_rows and CONSUMER_OFFSETS not in plan.skip:
        log, ends = log_table(part.records, plan.log_end, batch_id, written_at_ms)
        tables.append((CONSUMER_OFFSETS, log))
        for partition, end in ends.items():
            yield {"kind": LOG_END, "offsets_partition": partition, "log_end": end}
    if part.rejected and REJECTED_REQUESTS not in plan.skip:
        tables.append((REJECTED_REQUESTS, rejected_table(part.rejected, batch_id, at_ms)))
    if part.groups and GROUP_HISTORY not in plan.skip:
        tables.append((GROUP_HISTORY, group_table(part.groups, batch_id, at_ms)))
    if part.responses.num_rows and RESPONSES not in plan.skip:
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
        "records": part.records.num_rows,
        "responses": part.responses.num_rows,
        "rejected": len(part.rejected),
        "timers_fired": part.timers_fired,
        "emitted_at_ms": part.emitted_at_ms,
    }
    yield {"kind": COUNTS, "body": json.dumps(counts)}
    if plan.digests:
        for digest in answer_digests(part.responses):
            yield {"kind": DIGEST, "tbl": RESPONSES, "body": jsonio.dumps(digest)}
        for digest in record_digests(part.records):
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
