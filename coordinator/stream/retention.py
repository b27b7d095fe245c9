"""Retention: what the job's tables and its archive keep, enforced by the sink's housekeeping.

The sink (:class:`coordinator.stream.sink.DeltaSink`) is the only writer of the tables, so
everything here runs inside it, between two batches, every ``job.retention.every.batches``
batch ids, on the batch's clock (Spark's batch timestamp; the embedded gateway's wall clock):

- ``consumer_offsets`` is compacted as Kafka's log cleaner compacts ``__consumer_offsets``
  (:mod:`coordinator.log.cleaner`: the last record per key, tombstones kept for
  ``job.offsets.delete.retention.ms``), but only records older than the history window
  ``job.retention.history.ms`` (Kafka's ``min.compaction.lag.ms``): inside the window the log
  is whole, so ``--as-of``, ``groups history`` and the notebook see every record. Survivors
  keep their offsets (offsets become sparse, as in Kafka) and the last record of every
  partition stays, so the log end never moves. As Kafka's cleaner, it picks the partitions
  whose cleanable part is dirty enough (``job.offsets.min.cleanable.dirty.ratio``; what is
  dirty is tracked in memory since the sink opened, so the first run after a start cleans
  every partition once) and reads at most ``job.offsets.cleaner.rows.per.run`` rows per run.
  The partitions of one run are rewritten with one Delta overwrite of the rows before their
  first uncleanable offsets (``(offsets_partition = p AND offset < u) OR ...``): one commit,
  no app transaction, so every table's ``transaction_version`` (the batch markers) is what it
  was.
- ``group_history`` keeps every row inside the window and, before it, each group's last row
  (unless the group was Dead then): a group quiet for longer than the window still has the
  summary a cut inside the window needs.
- ``responses`` and ``rejected_requests`` lose their rows older than
  ``job.retention.responses.ms`` / ``job.retention.rejected.requests.ms`` (a Delta delete),
  except those of the table's newest batch: every table keeps its highest batch id.
- ``archive/`` (processed inbox files) loses its files older than ``job.retention.archive.ms``.
- Every table gets ``delta.logRetentionDuration`` (``job.delta.log.retention.ms``) and
  ``delta.deletedFileRetentionDuration`` (``job.vacuum.retention.hours``), which the sink's
  ``cleanup_metadata`` and vacuum then apply.

What was dropped is recorded on the table itself, as table properties (:data:`KEPT_FROM_BATCH`,
:data:`KEPT_FROM_MS`, :data:`KEPT_BY`): rows of batches up to ``kept_from_batch`` may be gone,
so a cut there can no longer be answered. Readers (:mod:`coordinator.admin.tables`) refuse
such cuts with that time and setting instead of answering from what is left.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable, write_deltalake

from coordinator.log.cleaner import DEFAULT_DELETE_RETENTION_MS, CleanerPolicy, plan_partition
from coordinator.stream import schema
from coordinator.stream.delta_read import data_file
from coordinator.stream.schema import (
    BATCH_CLOCK,
    CONSUMER_OFFSETS,
    GROUP_HISTORY,
    REJECTED_REQUESTS,
    RESPONSES,
)

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
#: Table properties recording what retention dropped (see the module docstring).
KEPT_FROM_BATCH = "coordinator.retention.keptFromBatch"
KEPT_FROM_MS = "coordinator.retention.keptFromMs"
KEPT_BY = "coordinator.retention.keptBy"
LOG_RETENTION = "delta.logRetentionDuration"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"


@dataclass(frozen=True)
class Retention:
    """How long each kind of data is kept (``job.retention.*``, ``job.offsets.*``,
    ``job.delta.log.retention.ms``; ``conf/job.properties`` explains each)."""

    #: The history window: consumer_offsets is not compacted and group_history not trimmed
    #: inside it (Kafka's ``min.compaction.lag.ms`` for the log). A week: ``--as-of``, ``groups
    #: history`` and the notebook answer for the last seven days, the span an operator looks
    #: back over after an incident, and the default of Kafka's offsets retention.
    history_ms: int = 7 * DAY_MS
    #: How long a tombstone outlives the window (Kafka's ``delete.retention.ms``, its default).
    offsets_delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    #: A partition is cleaned when this share of its cleanable rows is new since its last
    #: cleaning (Kafka's ``min.cleanable.dirty.ratio``, its default).
    offsets_min_cleanable_dirty_ratio: float = 0.5
    #: At most this many log rows are read by one run (at least one partition is cleaned).
    offsets_cleaner_rows_per_run: int = 1_000_000
    #: Answers are read by the client waiting for them within seconds.
    responses_ms: int = HOUR_MS
    rejected_requests_ms: int = 7 * DAY_MS
    archive_ms: int = DAY_MS
    #: ``delta.logRetentionDuration``: 10 minutes. delta-rs lists the whole ``_delta_log`` on
    #: every commit, so the log's length is a cost on every batch (``conf/job.properties``,
    #: ``coordinator.bench.delta_log``); ``--as-of`` a time reads the rows the history window
    #: keeps, and only ``--as-of`` a log version needs the Delta log.
    delta_log_retention_ms: int = 10 * 60_000
    #: The processed inbox files (None: no archive to clean, e.g. the embedded gateway).
    archive_dir: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "history_ms",
            "offsets_delete_retention_ms",
            "responses_ms",
            "rejected_requests_ms",
            "archive_ms",
            "delta_log_retention_ms",
            "offsets_cleaner_rows_per_run",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        ratio = self.offsets_min_cleanable_dirty_ratio
        if not 0 < ratio <= 1:
            raise ValueError(f"offsets_min_cleanable_dirty_ratio must be in (0, 1], got {ratio!r}")

    @property
    def policy(self) -> CleanerPolicy:
        return CleanerPolicy(self.history_ms, self.offsets_delete_retention_ms)


DEFAULT_RETENTION = Retention()

#: The setting each table's retention comes from (named in readers' refusals).
SETTING = {
    CONSUMER_OFFSETS: "job.retention.history.ms",
    GROUP_HISTORY: "job.retention.history.ms",
    RESPONSES: "job.retention.responses.ms",
    REJECTED_REQUESTS: "job.retention.rejected.requests.ms",
}


@dataclass(frozen=True)
class KeptFrom:
    """What a table still holds: rows of batches up to ``batch_id`` may be gone (its history
    starts after it, at ``timestamp_ms``), because of ``setting``."""

    batch_id: int
    timestamp_ms: int
    setting: str

    @classmethod
    def of(cls, configuration: Mapping[str, str]) -> KeptFrom | None:
        """From a table's properties (None: retention never dropped anything there)."""
        if KEPT_FROM_BATCH not in configuration:
            return None
        return cls(
            int(configuration[KEPT_FROM_BATCH]),
            int(configuration.get(KEPT_FROM_MS, "0")),
            configuration.get(KEPT_BY, ""),
        )

    def later(self, other: KeptFrom | None) -> KeptFrom:
        return self if other is None or self.batch_id >= other.batch_id else other


def kept_from(table: DeltaTable) -> KeptFrom | None:
    return KeptFrom.of(table.metadata().configuration)


def _record_kept_from(table: DeltaTable, kept: KeptFrom) -> None:
    """Move the table's marker forward (never back): one metadata commit."""
    current = kept_from(table)
    newest = kept.later(current)
    if newest == current:
        return
    table.alter.set_table_properties(
        {
            KEPT_FROM_BATCH: str(newest.batch_id),
            KEPT_FROM_MS: str(newest.timestamp_ms),
            KEPT_BY: newest.setting,
        },
        raise_if_not_exists=False,
    )


def interval(ms: int) -> str:
    """A duration as Delta's interval text, in the largest whole unit."""
    for unit, size in (
        ("days", DAY_MS),
        ("hours", HOUR_MS),
        ("minutes", 60_000),
        ("seconds", 1000),
    ):
        if ms % size == 0:
            return f"interval {ms // size} {unit}"
    return f"interval {ms} milliseconds"


def configure(table: DeltaTable, retention: Retention, deleted_file_retention_hours: int) -> bool:
    """Set the table's log and deleted-file retention when they differ (a metadata commit);
    returns whether it did."""
    wanted = {
        LOG_RETENTION: interval(retention.delta_log_retention_ms),
        DELETED_FILE_RETENTION: interval(deleted_file_retention_hours * HOUR_MS),
    }
    current = table.metadata().configuration
    if all(current.get(k) == v for k, v in wanted.items()):
        return False
    table.alter.set_table_properties(wanted, raise_if_not_exists=False)
    return True


# --- consumer_offsets: Kafka's cleaner --------------------------------------------------------


@dataclass
class LogCleaner:
    """Compacts ``consumer_offsets`` (module docstring). Holds, per offsets partition, the
    first offset not yet cleaned (Kafka's cleaner checkpoint) and the horizon of that cleaning,
    in memory."""

    retention: Retention
    first_dirty: dict[int, tuple[int, int]] = field(default_factory=dict)

    def run(self, table: DeltaTable, now_ms: int) -> str:
        """One cleaning: the partitions dirty enough, within the rows budget, rewritten in
        one Delta commit (an overwrite of each partition's cleaned range)."""
        policy = self.retention.policy
        horizon = policy.horizon_ms(now_ms)
        chosen = self._choose(table, horizon)
        files = _files_by_partition(table) if chosen else {}
        removed = read = 0
        kept: KeptFrom | None = None
        survivors: list[pa.Table] = []
        ranges: list[str] = []
        for partition, rows in chosen:
            if read and read + rows > self.retention.offsets_cleaner_rows_per_run:
                break
            read += rows
            cleaned = self._clean_partition(partition, files.get(partition, []), now_ms, policy)
            if cleaned is None:
                continue
            gone, partition_kept, partition_survivors, end = cleaned
            removed += gone
            kept = partition_kept.later(kept)
            survivors.append(partition_survivors)
            ranges.append(f"(offsets_partition = {partition} AND offset < {end})")
        if ranges:
            predicate = " OR ".join(ranges)
            data = pa.concat_tables(survivors)
            if data.num_rows == 0:
                table.delete(predicate)
            else:
                write_deltalake(table, data, mode="overwrite", predicate=predicate)
        if kept is not None:
            _record_kept_from(table, kept)
        return (
            f"{len(chosen)} partitions dirty, {len(ranges)} rewritten, {read} rows read, "
            f"{removed} removed"
        )

    def _choose(self, table: DeltaTable, horizon: int) -> list[tuple[int, int]]:
        """(partition, rows) of the partitions to clean, dirtiest first (Kafka's choice).

        From the files' statistics alone. Rows below a partition's first dirty offset were
        cleaned (and are cleanable again). Rows from it on were never cleaned and their
        offsets are contiguous, so a file holds ``max.offset - max(min.offset, first dirty)
        + 1`` of them, whose timestamps run from the last cleaning's horizon (or the file's
        oldest) to the file's newest: the share at or before ``horizon`` is taken as spread
        evenly over that span."""
        actions = pa.table(table.get_add_actions(flatten=True))
        needed = (
            "partition.offsets_partition",
            "num_records",
            "min.offset",
            "max.offset",
            "min.timestamp_ms",
            "max.timestamp_ms",
        )
        if actions.num_rows == 0 or not all(n in actions.column_names for n in needed):
            return []
        totals: dict[int, int] = {}
        clean: dict[int, float] = {}
        dirty: dict[int, float] = {}
        columns = [actions.column(name).to_pylist() for name in needed]
        for p, count, low, high, oldest, newest in zip(*columns, strict=True):
            if p is None or not count or None in (low, high, oldest, newest):
                continue
            totals[p] = totals.get(p, 0) + int(count)
            first_dirty, cleaned_at = self.first_dirty.get(p, (0, None))
            fresh = max(0, min(int(count), high - max(low, first_dirty) + 1))
            clean[p] = clean.get(p, 0.0) + (int(count) - fresh)
            start = oldest if cleaned_at is None or low >= first_dirty else max(oldest, cleaned_at)
            if fresh == 0 or start > horizon:
                continue
            share = 1.0 if newest <= horizon else (horizon - start + 1) / (newest - start + 1)
            dirty[p] = dirty.get(p, 0.0) + fresh * share
        ratio = self.retention.offsets_min_cleanable_dirty_ratio
        ready = []
        for p, rows in dirty.items():
            share = rows / (rows + clean.get(p, 0.0))
            if rows >= 1 and share >= ratio:
                ready.append((share, p))
        return [(p, totals[p]) for _, p in sorted(ready, reverse=True)]

    def _clean_partition(
        self, partition: int, files: list[str], now_ms: int, policy: CleanerPolicy
    ) -> tuple[int, KeptFrom, pa.Table, int] | None:
        """Plan one partition's cleaning: (records removed, the history it leaves, the
        survivors of its cleaned range, the first offset after that range), or None when
        nothing goes."""
        if not files:
            return None
        # The partition's files read directly: delta-rs's own dataset builds an expression per
        # file of the whole table, seconds for a few thousand small files.
        in_files = pa.schema(
            [f for f in schema.CONSUMER_OFFSETS_SCHEMA if f.name != "offsets_partition"]
        )
        rows = ds.dataset(files, schema=in_files, format="parquet").to_table()
        field = schema.CONSUMER_OFFSETS_SCHEMA.field("offsets_partition")
        rows = rows.append_column(field, pa.array([partition] * rows.num_rows, field.type))
        rows = rows.sort_by("offset")
        offsets = rows.column("offset").to_pylist()
        plan = plan_partition(
            partition,
            rows.column("key").to_pylist(),
            pc.is_null(rows.column("value")).to_pylist(),
            rows.column("timestamp_ms").to_pylist(),
            now_ms,
            policy,
        )
        end = offsets[plan.cleanable] if plan.cleanable < len(offsets) else offsets[-1] + 1
        self.first_dirty[partition] = (end, policy.horizon_ms(now_ms))
        if plan.removed == 0:
            return None
        cleaned = rows.slice(0, plan.cleanable)
        survivors = cleaned.filter(pa.array(plan.keep[: plan.cleanable], pa.bool_()))
        data = survivors.select(schema.CONSUMER_OFFSETS_SCHEMA.names).cast(
            schema.CONSUMER_OFFSETS_SCHEMA
        )
        newest_batch = int(pc.max(cleaned.column("batch_id")).as_py())
        setting = f"{SETTING[CONSUMER_OFFSETS]}={self.retention.history_ms}"
        return plan.removed, KeptFrom(newest_batch, policy.horizon_ms(now_ms), setting), data, end


def _files_by_partition(table: DeltaTable) -> dict[int, list[str]]:
    """The local paths of ``consumer_offsets``' data files, by offsets partition."""
    out: dict[int, list[str]] = {}
    for path, values in _data_files(table):
        partition = values.get("offsets_partition")
        if partition is not None:
            out.setdefault(int(partition), []).append(path)
    return out


def _data_files(
    table: DeltaTable, oldest_before: tuple[str, int] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(local path, partition values) of the table's data files, from its add actions; with
    ``oldest_before=(column, t)`` only the files whose ``column`` starts before ``t`` (by the
    files' statistics). Read directly: delta-rs's own dataset builds an expression per file of
    the whole table, seconds for a few thousand small files."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return []
    if oldest_before is not None:
        column, before = oldest_before
        name = f"min.{column}"
        if name in actions.column_names:
            actions = actions.filter(pc.fill_null(pc.less(actions.column(name), before), True))
    partitions = [n for n in actions.column_names if n.startswith("partition.")]
    values = [actions.column(n).to_pylist() for n in partitions]
    out = []
    for index, path in enumerate(actions.column("path").to_pylist()):
        local = data_file(table.table_uri, path)  # an absolute path stays as it is
        out.append(
            (
                local,
                {
                    n.removeprefix("partition."): v[index]
                    for n, v in zip(partitions, values, strict=True)
                },
            )
        )
    return out


def _read_old(table: DeltaTable, name: str, column: str, before: int) -> pa.Table:
    """The rows of an unpartitioned table whose ``column`` is before ``before``, reading only
    the files that hold some."""
    files = [path for path, _ in _data_files(table, (column, before))]
    table_schema = schema.TABLE_SCHEMAS[name]
    if not files:
        return table_schema.empty_table()
    data = ds.dataset(files, schema=table_schema, format="parquet")
    return data.to_table(filter=pc.field(column) < before)


# --- the other tables -------------------------------------------------------------------------


def _oldest(table: DeltaTable, column: str) -> int | None:
    """The smallest value of ``column`` in the table, from the files' statistics."""
    actions = pa.table(table.get_add_actions(flatten=True))
    name = f"min.{column}"
    if actions.num_rows == 0 or name not in actions.column_names:
        return None
    value = pc.min(actions.column(name)).as_py()
    return None if value is None else int(value)


def _newest(table: DeltaTable, column: str) -> int | None:
    """The largest value of ``column`` in the table, from the files' statistics."""
    actions = pa.table(table.get_add_actions(flatten=True))
    name = f"max.{column}"
    if actions.num_rows == 0 or name not in actions.column_names:
        return None
    value = pc.max(actions.column(name)).as_py()
    return None if value is None else int(value)


def trim_group_history(table: DeltaTable, now_ms: int, history_ms: int) -> str:
    """Before the window, keep each group's last row (unless Dead); one overwrite commit."""
    horizon = now_ms - history_ms
    clock = BATCH_CLOCK[GROUP_HISTORY]
    oldest = _oldest(table, clock)
    if oldest is None or oldest > horizon:
        return "nothing before the window"
    old = _read_old(table, GROUP_HISTORY, clock, horizon + 1)
    latest: dict[str, int] = {}
    batches = old.column("batch_id").to_pylist()
    for index, group_id in enumerate(old.column("group_id").to_pylist()):
        held = latest.get(group_id)
        if held is None or batches[index] >= batches[held]:
            latest[group_id] = index
    states = old.column("state").to_pylist()
    keep = sorted(i for i in latest.values() if states[i] != "Dead")
    if len(keep) == old.num_rows:
        return f"{old.num_rows} rows before the window, all kept"
    survivors = old.take(pa.array(keep, pa.int64())).cast(schema.GROUP_HISTORY_SCHEMA)
    predicate = f"{clock} <= {horizon}"
    if survivors.num_rows == 0:
        table.delete(predicate)
    else:
        write_deltalake(table, survivors, mode="overwrite", predicate=predicate)
    newest = int(pc.max(old.column("batch_id")).as_py())
    setting = f"{SETTING[GROUP_HISTORY]}={history_ms}"
    _record_kept_from(table, KeptFrom(newest, horizon, setting))
    return f"{old.num_rows - len(keep)} of {old.num_rows} rows before the window removed"


def delete_older(table: DeltaTable, name: str, column: str, now_ms: int, keep_ms: int) -> str:
    """Delete the rows whose ``column`` is older than ``keep_ms``, but never those of the
    table's newest batch (so that the highest batch id written stays readable from the table,
    as a rebuild's ``next_batch_id`` needs): one Delta delete."""
    horizon = now_ms - keep_ms
    oldest, newest = _oldest(table, column), _newest(table, "batch_id")
    if oldest is None or newest is None or oldest >= horizon:
        return "nothing older"
    predicate = f"{column} < {horizon} AND batch_id < {newest}"
    old = _read_old(table, name, column, horizon)
    batches = old.column("batch_id").filter(pc.less(old.column("batch_id"), newest))
    if len(batches) == 0:
        return "nothing older"
    metrics = table.delete(predicate)
    setting = f"{SETTING[name]}={keep_ms}"
    _record_kept_from(table, KeptFrom(int(pc.max(batches).as_py()), horizon, setting))
    return f"{metrics.get('num_deleted_rows', len(batches))} rows deleted"


def remove_old_files(directory: Path, now_ms: int, keep_ms: int) -> str:
    """Delete the files under ``directory`` last modified more than ``keep_ms`` ago, and the
    subdirectories that leaves empty (Spark's archive mirrors the inbox's path below it)."""
    if not directory.is_dir():
        return "no archive"
    horizon_s = (now_ms - keep_ms) / 1000
    removed = 0
    for root, _dirs, files in os.walk(directory, topdown=False):
        for name in files:
            path = Path(root) / name
            try:
                if path.stat().st_mtime < horizon_s:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        if Path(root) != directory:
            with contextlib.suppress(OSError):  # only succeeds when empty
                os.rmdir(root)
    return f"{removed} files deleted"


@dataclass
class Retainer:
    """Every retention task of one sink, with the cleaner's memory between runs."""

    retention: Retention
    deleted_file_retention_hours: int
    cleaner: LogCleaner = field(init=False)
    configured: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.cleaner = LogCleaner(self.retention)

    def configure_once(self, name: str, table: DeltaTable) -> str:
        """The table's Delta retention properties, the first time this sink sees it (so a
        changed ``job.delta.log.retention.ms`` reaches tables an older run configured)."""
        if name in self.configured:
            return ""
        changed = configure(table, self.retention, self.deleted_file_retention_hours)
        self.configured.add(name)
        return "retention properties set" if changed else ""

    def table_task(self, name: str, table: DeltaTable, now_ms: int) -> str:
        """The retention of one table (first its Delta retention properties, once)."""
        notes = [self.configure_once(name, table)]
        r = self.retention
        if name == CONSUMER_OFFSETS:
            notes.append(self.cleaner.run(table, now_ms))
        elif name == GROUP_HISTORY:
            notes.append(trim_group_history(table, now_ms, r.history_ms))
        elif name == RESPONSES:
            notes.append(delete_older(table, name, BATCH_CLOCK[name], now_ms, r.responses_ms))
        elif name == REJECTED_REQUESTS:
            notes.append(
                delete_older(table, name, BATCH_CLOCK[name], now_ms, r.rejected_requests_ms)
            )
        return "; ".join(n for n in notes if n)

    def archive_task(self, now_ms: int) -> str | None:
        if self.retention.archive_dir is None:
            return None
        return remove_old_files(Path(self.retention.archive_dir), now_ms, self.retention.archive_ms)
