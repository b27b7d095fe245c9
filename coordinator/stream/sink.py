"""The Spark job's Delta writer: each micro-batch lands in every table at most once.

``foreachBatch`` evaluates a micro-batch once and hands :class:`DeltaSink` either plain Python
data (``job.sink.write=driver``: log records, responses, group summaries, rejected lines and the
batch's ``list_groups`` requests, collected on the driver) or, besides the group summaries and
``list_groups`` requests, the data files the batch's tasks already wrote into the tables
(``executors``: :mod:`coordinator.stream.datafiles`), which each table's commit then adds. The
sink owns everything between that data and the five tables of :mod:`coordinator.stream.schema`;
it knows nothing of Spark and decides nothing about groups. What follows holds for both.

Order (contract, section 5). Kafka acknowledges a commit only once ``__consumer_offsets`` holds
it, so the tables are committed in the order of ``schema.TABLES``: ``consumer_offsets``,
``rejected_requests``, ``group_history``, ``group_state``, and ``responses`` last. ListGroups is
answered here, from ``group_state`` after this batch's merge, so its answer includes the batch's
own changes.

Groups. Each group summary the operator emits (one per group whose summary changed in the
batch, a ``Dead`` one for a group that is gone) is appended to ``group_history`` as it is, and
merged into ``group_state``, which keeps one current row per live group. The history comes
first so that a reader who sees a group's current row in ``group_state`` finds that row's
change in ``group_history`` too.

Exactly once. Delta cannot commit several tables atomically, and Spark re-runs the last batch
after a crash with the same id and the same input (spark-notes, "Restart and exactly-once").
Every commit carries the app transaction ``(app_id, batch_id)``; before writing a table the
sink reads that table's ``transaction_version(app_id)`` and skips the table when it already
holds the batch. delta-rs does not enforce this itself (it accepts an equal or older version),
so the check here is the whole guarantee, and it relies on there being one writer per table.

One writer. With an :class:`coordinator.stream.ownership.Ownership` (the job's and the embedded
gateway's), every table is fenced with the owner's epoch when opened, and each commit is made
on a snapshot checked to carry that epoch, with the epoch in its commit info: a newer owner's
fence makes the commit fail, and the sink raises ``OwnershipLost`` instead of retrying.

Completeness (how a reader finds a consistent cut). Tables with no rows in a batch get no
commit, so a table's transaction version says nothing about batches it had no rows for, and
the minimum over the tables would lag (``consumer_offsets`` can go many batches without a
record). Instead ``responses``, written last, is the batch's completion marker: every batch
that writes anything commits to ``responses``, an app-transaction-only commit when it has no
response (rare: e.g. only offset expiry or only rejected lines). Because the other tables
are written before it, ``responses`` holding batch N means every table holds every batch up
to N: :func:`last_complete_batch` is the ``responses`` table's transaction version. Rows with
``batch_id`` above it belong to a batch that is still being written (or will be replayed).
Idle batches (Spark runs one on every trigger once timeouts are on) write nothing and do not
move the marker; a cut at the marker is still consistent.

Housekeeping (retention, compaction, checkpoints, vacuum, log cleanup) runs from here, every N
batch ids, so that the stream stays the only writer of its tables. Vacuum (full mode) also
deletes the data files no version references: those a killed or failed write left, whether the
driver's or a task's, once older than ``job.vacuum.retention.hours``. Retention
(:mod:`coordinator.stream.retention`) compacts ``consumer_offsets`` as Kafka's log cleaner does
outside the history window, trims ``group_history``, deletes old ``responses`` and
``rejected_requests`` and old archived inbox files; none of its commits carries an app
transaction, so the batch markers stay where they are.

Schema evolution. Opening a table written by an older release adds the columns it lacks
(nullable, at the end; older rows read them as null), e.g. ``group_state``'s
``rebalance_reason``; a table that does not exist yet (``group_history`` in an older warehouse)
is created. Both are plain commits without an app transaction, so they do not move any batch
marker.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Field, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from coordinator.engine import list_groups_response
from coordinator.requests import Request
from coordinator.stream import schema
from coordinator.stream.datafiles import (
    BatchFiles,
    DataFile,
    FilePlan,
    answers_from_dicts,
    group_table,
    log_table,
    records_from_dicts,
    rejected_table,
    responses_table,
    write_files,
)
from coordinator.stream.delta_read import read_table
from coordinator.stream.ownership import (
    EPOCH_PROPERTY,
    Ownership,
    OwnershipLost,
    PartitionWriter,
)
from coordinator.stream.retention import DEFAULT_RETENTION, Retainer, Retention
from coordinator.stream.schema import (
    CONSUMER_OFFSETS,
    GROUP_HISTORY,
    GROUP_STATE,
    REJECTED_REQUESTS,
    RESPONSES,
)

log = logging.getLogger(__name__)

DEAD = "Dead"
#: Delta's default ``delta.deletedFileRetentionDuration`` (one week): vacuum below it must
#: switch off delta-rs's retention check.
DEFAULT_DELETED_FILE_RETENTION_HOURS = 168.0

_MERGE_PREDICATE = "t.group_id = s.group_id"
#: A node's commit that lost to a move of partition writers is made again at most this often.
WRITER_RETRIES = 5


class BatchOrderError(RuntimeError):
    """A table already holds a batch newer than the one being written.

    Spark only ever re-runs the last batch, so this means the tables were written under the
    same ``app_id`` by another query (e.g. the Spark checkpoint was deleted and batch ids
    restarted at 0). Skipping would silently drop every batch until the ids catch up, so the
    sink refuses instead; use a fresh ``app_id`` per Spark checkpoint."""


@dataclass(frozen=True)
class Housekeeping:
    """How often (in batch ids) each maintenance task runs; 0 disables a task.

    Never on every batch: each task costs from a few ms (checkpoint) to a rewrite of small
    files (compaction), and each append leaves one small file per table (per partition for
    ``consumer_offsets``). delta-rs also checkpoints by itself every 100 table versions
    (``delta.checkpointInterval``). Retention runs first (it removes rows, which compaction
    then packs), every ``retention_every_batches``."""

    compact_every_batches: int = 100
    checkpoint_every_batches: int = 100
    vacuum_every_batches: int = 1000
    #: Removed files are kept this long (``delta.deletedFileRetentionDuration``): readers list
    #: a table's files and read them within seconds, and none time-travels to old data files.
    vacuum_retention_hours: int = 1
    retention_every_batches: int = 100
    retention: Retention = DEFAULT_RETENTION

    def __post_init__(self) -> None:
        for name in (
            "compact_every_batches",
            "checkpoint_every_batches",
            "vacuum_every_batches",
            "vacuum_retention_hours",
            "retention_every_batches",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    @staticmethod
    def due(every: int, batch_id: int) -> bool:
        return every > 0 and batch_id > 0 and batch_id % every == 0


DEFAULT_HOUSEKEEPING = Housekeeping()


@dataclass
class BatchReport:
    """What one :meth:`DeltaSink.write_batch` did (for the job's progress and status)."""

    batch_id: int
    records_written: int = 0
    #: Including the answers to the batch's ``list_groups`` requests.
    responses_written: int = 0
    groups_upserted: int = 0
    groups_deleted: int = 0
    #: Rows appended to ``group_history`` (every summary of the batch, Dead ones included).
    history_written: int = 0
    rejected_written: int = 0
    #: Tables committed by this call, in commit order.
    tables_written: list[str] = field(default_factory=list)
    #: Tables that already held this batch (a replay after a crash) and were left alone.
    tables_skipped: list[str] = field(default_factory=list)
    #: One line per maintenance task run, with its duration.
    housekeeping: list[str] = field(default_factory=list)
    #: Milliseconds per committed table.
    table_ms: dict[str, float] = field(default_factory=dict)
    write_ms: float = 0.0
    housekeeping_ms: float = 0.0


class DeltaSink:
    """Writes micro-batches to the warehouse's Delta tables; the only writer of those tables.

    Each table stays open as one :class:`DeltaTable` whose snapshot every commit of ours
    advances (delta-rs updates the object it writes through), so a batch costs no reload and
    ``transaction_version`` is an in-memory read. After any failure the snapshots and the log
    end offsets are reloaded from storage before the next batch, since a failed call may or
    may not have committed."""

    def __init__(
        self,
        tables_dir: Path,
        app_id: str,
        housekeeping: Housekeeping = DEFAULT_HOUSEKEEPING,
        ownership: Ownership | None = None,
        writer: PartitionWriter | None = None,
    ) -> None:
        self.tables_dir = Path(tables_dir)
        self.app_id = app_id
        self.housekeeping = housekeeping
        #: The warehouse's owner epoch this sink writes under (None: unfenced, for tools
        #: and tests that write a warehouse of their own).
        self.ownership = ownership
        #: One node of a gateway cluster: it writes only the offsets partitions the log names
        #: it the writer of (:class:`PartitionWriter`); None: every partition.
        self.writer = writer
        self._tables: dict[str, DeltaTable] = {}
        self._log_end: dict[int, int] = {}
        self._tables_stale = True
        #: Test-only (``job.fault_injection``): called with (table, batch id) right after each
        #: commit of a batch's rows; None (the default) costs one check per commit.
        self.after_commit: Callable[[str, int], None] | None = None
        self._retainer = Retainer(housekeeping.retention, housekeeping.vacuum_retention_hours)
        self._load()

    # --- the public surface ---------------------------------------------------------------------

    def write_batch(
        self,
        batch_id: int,
        *,
        records: Sequence[Mapping[str, Any]] | pa.Table,
        responses: Sequence[Mapping[str, Any]] | pa.Table,
        groups: list[dict[str, Any]],
        rejected: list[dict[str, Any]],
        list_groups: list[Request],
        emitted_at_ms: int,
        written_at_ms: int,
        files: BatchFiles | None = None,
    ) -> BatchReport:
        """Commit one micro-batch to every table that has rows for it and does not hold it yet.

        ``records`` are the engine's log records in emission order (their ``offset`` is
        ignored: the sink numbers them), as dicts or as the operator's columns
        (:data:`datafiles.RECORD_SCHEMA`, from :func:`datafiles.records_from_rows`);
        ``responses`` the engine's response dicts, or the operator's answers as columns
        (:data:`datafiles.ANSWER_SCHEMA`, from :func:`datafiles.answers_from_bodies`);
        ``groups`` one summary per group touched, a ``Dead`` one deleting the group's row;
        ``emitted_at_ms`` is the batch's clock (Spark's batch timestamp, the same on a replay),
        ``written_at_ms`` the wall clock of this write.

        With ``files`` (``job.sink.write=executors``), the rows of ``consumer_offsets``,
        ``rejected_requests``, ``group_history`` and ``responses`` are already in data files
        that the batch's tasks wrote (under :meth:`file_plan`'s plan): each table's commit adds
        those files instead (``records``, ``responses`` and ``rejected`` are then empty); the
        ``group_state`` MERGE and the ListGroups answers are made here from ``groups`` and
        ``list_groups`` either way.

        Raises on any Delta failure, so that the batch fails and Spark re-runs it; the replay
        then completes the tables this call did not reach."""
        report = BatchReport(batch_id)
        if self._tables_stale:
            self._load()
        try:
            started = time.perf_counter()
            anything = len(records) or len(responses) or groups or rejected or list_groups
            if anything or (files is not None and files.anything):
                self._check_order(batch_id)
                self._write_log(batch_id, records, written_at_ms, report, files)
                self._write_rejected(batch_id, rejected, emitted_at_ms, report, files)
                self._write_group_history(batch_id, groups, emitted_at_ms, report, files)
                self._write_group_state(batch_id, groups, emitted_at_ms, report)
                self._write_responses(
                    batch_id, responses, list_groups, emitted_at_ms, written_at_ms, report, files
                )
            report.write_ms = _ms_since(started)
        except OwnershipLost:
            self._tables_stale = True
            raise
        except BaseException as error:
            self._tables_stale = True
            lost = self.ownership.superseded() if self.ownership is not None else None
            if lost is not None:
                raise lost from error
            raise
        self._housekeep(batch_id, report, emitted_at_ms)
        return report

    def reopen(self) -> None:
        """Reread the tables and the log's end offsets before the next write (another writer
        wrote partitions this sink now writes)."""
        self._tables_stale = True

    def file_plan(self, batch_id: int, digests: bool = False) -> FilePlan:
        """What the tasks of batch ``batch_id`` need to write its data files
        (``job.sink.write=executors``): the tables that already hold the batch (a replay writes
        none of their files) and the log's end offsets. Raises ``BatchOrderError`` as
        :meth:`write_batch` does."""
        if self._tables_stale:
            self._load()
        try:
            self._check_order(batch_id)
            versions = {n: t.transaction_version(self.app_id) for n, t in self._tables.items()}
            skip = tuple(n for n, v in versions.items() if v is not None and v >= batch_id)
        except BaseException:
            self._tables_stale = True
            raise
        return FilePlan(
            batch_id,
            str(self.tables_dir),
            skip,
            dict(self._log_end),
            digests,
        )

    def last_batch(self) -> int | None:
        """The last batch present in every table (see the module docstring)."""
        if self._tables_stale:
            self._load()
        return self._tables[RESPONSES].transaction_version(self.app_id)

    def log_end_offsets(self) -> dict[int, int]:
        """The next offset of every offsets partition written so far (a copy)."""
        return dict(self._log_end)

    # --- the tables, in commit order ------------------------------------------------------------

    def _write_log(
        self,
        batch_id: int,
        records: Sequence[Mapping[str, Any]] | pa.Table,
        written_at_ms: int,
        report: BatchReport,
        files: BatchFiles | None = None,
    ) -> None:
        written = files.files.get(CONSUMER_OFFSETS) if files is not None else None
        if not (len(records) or written) or self._replayed(CONSUMER_OFFSETS, batch_id, report):
            return
        if files is not None:
            self._commit_files(CONSUMER_OFFSETS, written or [], batch_id, report)
            # Only now: a failed or skipped commit must leave the numbering where the table is.
            self._log_end.update(files.log_end)
            report.records_written = files.rows_in(CONSUMER_OFFSETS)
            return
        logged = records if isinstance(records, pa.Table) else records_from_dicts(records)
        data, ends = log_table(logged, self._log_end, batch_id, written_at_ms)
        self._append(CONSUMER_OFFSETS, data, batch_id, report, set(ends))
        # Only now: a failed or skipped commit must leave the numbering where the table is.
        self._log_end.update(ends)
        report.records_written = data.num_rows

    def _write_rejected(
        self,
        batch_id: int,
        rejected: list[dict[str, Any]],
        at_ms: int,
        report: BatchReport,
        files: BatchFiles | None = None,
    ) -> None:
        written = files.files.get(REJECTED_REQUESTS) if files is not None else None
        if not (rejected or written) or self._replayed(REJECTED_REQUESTS, batch_id, report):
            return
        if files is not None:
            self._commit_files(REJECTED_REQUESTS, written or [], batch_id, report)
            report.rejected_written = files.rows_in(REJECTED_REQUESTS)
            return
        self._append(REJECTED_REQUESTS, rejected_table(rejected, batch_id, at_ms), batch_id, report)
        report.rejected_written = len(rejected)

    def _write_group_history(
        self,
        batch_id: int,
        groups: list[dict[str, Any]],
        at_ms: int,
        report: BatchReport,
        files: BatchFiles | None = None,
    ) -> None:
        """Every summary of the batch, in order, Dead ones included: one append."""
        written = files.files.get(GROUP_HISTORY) if files is not None else None
        if not (groups or written) or self._replayed(GROUP_HISTORY, batch_id, report):
            return
        if files is not None:
            self._commit_files(GROUP_HISTORY, written or [], batch_id, report)
            report.history_written = files.rows_in(GROUP_HISTORY)
            return
        self._append(GROUP_HISTORY, group_table(groups, batch_id, at_ms), batch_id, report)
        report.history_written = len(groups)

    def _write_group_state(
        self, batch_id: int, groups: list[dict[str, Any]], at_ms: int, report: BatchReport
    ) -> None:
        """One MERGE keeps one row per live group: update, insert, or delete a Dead group.

        A MERGE is one commit, so the app transaction covers updates and deletes together
        (a delete then an append would be two commits and not idempotent as a pair)."""
        if not groups or self._replayed(GROUP_STATE, batch_id, report):
            return
        # A MERGE rejects two source rows for one target row: the last summary wins.
        latest = list({g["group_id"]: g for g in groups}.values())
        source = group_table(latest, batch_id, at_ms)
        started = time.perf_counter()
        self._fence(GROUP_STATE)
        metrics = (
            self._tables[GROUP_STATE]
            .merge(
                source,
                _MERGE_PREDICATE,
                source_alias="s",
                target_alias="t",
                commit_properties=self._commit_properties(batch_id),
            )
            .when_matched_delete(predicate=f"s.state = '{DEAD}'")
            .when_matched_update_all()
            .when_not_matched_insert_all(predicate=f"s.state <> '{DEAD}'")
            .execute()
        )
        report.table_ms[GROUP_STATE] = _ms_since(started)
        report.tables_written.append(GROUP_STATE)
        if self.after_commit is not None:
            self.after_commit(GROUP_STATE, batch_id)
        report.groups_upserted = int(metrics["num_target_rows_updated"]) + int(
            metrics["num_target_rows_inserted"]
        )
        report.groups_deleted = int(metrics["num_target_rows_deleted"])

    def _write_responses(
        self,
        batch_id: int,
        responses: Sequence[Mapping[str, Any]] | pa.Table,
        list_groups: list[Request],
        emitted_at_ms: int,
        written_at_ms: int,
        report: BatchReport,
        files: BatchFiles | None = None,
    ) -> None:
        """The batch's responses, then the ListGroups answers; always one commit, even empty,
        because this commit is the batch's completion marker (module docstring)."""
        if self._replayed(RESPONSES, batch_id, report):
            return
        answered = responses if isinstance(responses, pa.Table) else answers_from_dicts(responses)
        if list_groups:
            rows = self._group_rows()
            listed = [list_groups_response(request, rows) for request in list_groups]
            answered = pa.concat_tables([answered, answers_from_dicts(listed)])
        data = responses_table(answered, batch_id, emitted_at_ms, written_at_ms)
        if files is None:
            self._append(RESPONSES, data, batch_id, report)
            report.responses_written = data.num_rows
            return
        # The tasks' files, and one written here with the ListGroups answers.
        written = list(files.files.get(RESPONSES, ()))
        written += write_files(self.tables_dir / RESPONSES, RESPONSES, data, batch_id)
        self._commit_files(RESPONSES, written, batch_id, report)
        report.responses_written = sum(f.num_rows for f in written)

    def _group_rows(self) -> list[tuple[str, str | None, str, str]]:
        """(group id, protocol type, state, group type) of every live group, by group id."""
        names = ["group_id", "protocol_type", "state", "group_type"]
        table = read_table(self._tables[GROUP_STATE], columns=names).sort_by("group_id")
        rows = zip(*(table.column(name).to_pylist() for name in names), strict=True)
        return [(g, p, s, t or "classic") for g, p, s, t in rows]

    # --- plumbing -------------------------------------------------------------------------------

    def _load(self) -> None:
        """Open (or create) every table and read the log end offsets from the log itself."""
        self._tables = {
            name: _open_or_create(self.tables_dir / name, name, self.ownership)
            for name in schema.TABLES
        }
        self._log_end = _log_end(self._tables[CONSUMER_OFFSETS])
        self._tables_stale = False

    def _check_order(self, batch_id: int) -> None:
        for name, table in self._tables.items():
            version = table.transaction_version(self.app_id)
            if version is not None and version > batch_id:
                raise BatchOrderError(
                    f"table {name} already holds batch {version} of {self.app_id!r}; "
                    f"refusing to write batch {batch_id}"
                )

    def _replayed(self, name: str, batch_id: int, report: BatchReport) -> bool:
        """Whether the table already holds this batch (a replay): then it is left alone."""
        version = self._tables[name].transaction_version(self.app_id)
        if version is not None and version >= batch_id:
            report.tables_skipped.append(name)
            return True
        return False

    def _append(
        self,
        name: str,
        data: pa.Table,
        batch_id: int,
        report: BatchReport,
        partitions: set[int] | None = None,
    ) -> None:
        started = time.perf_counter()
        for attempt in range(WRITER_RETRIES + 1):
            self._fence(name, partitions or set())
            try:
                write_deltalake(
                    self._tables[name],
                    data,
                    mode="append",
                    commit_properties=self._commit_properties(batch_id),
                )
                break
            except CommitFailedError as error:
                # A node's commit read before the supervisor moved some partitions' writers (a
                # metadata commit): read the table again and check that this node still
                # writes these partitions; the commit did not happen, so it is made again.
                if self.writer is None or attempt == WRITER_RETRIES:
                    raise
                if "Metadata changed" not in str(error):
                    raise
                self._tables[name].update_incremental()
        self._committed(name, batch_id, report, started)

    def _commit_files(
        self, name: str, files: list[DataFile], batch_id: int, report: BatchReport
    ) -> None:
        """One commit adding data files already in the table's directory (an empty list still
        commits: the app transaction alone). delta-rs does not advance the table object on
        this path, so it is brought up to the new version (one log file read)."""
        started = time.perf_counter()
        self._fence(name)
        table = self._tables[name]
        table.create_write_transaction(
            [f.add_action() for f in files],
            "append",
            table.schema(),
            partition_by=schema.PARTITION_BY.get(name),
            commit_properties=self._commit_properties(batch_id),
        )
        table.update_incremental()
        self._committed(name, batch_id, report, started)

    def _committed(self, name: str, batch_id: int, report: BatchReport, started: float) -> None:
        report.table_ms[name] = _ms_since(started)
        report.tables_written.append(name)
        if self.after_commit is not None:
            self.after_commit(name, batch_id)

    def _fence(self, name: str, partitions: Iterable[int] = ()) -> None:
        """Check (in memory) that the snapshot the next commit reads carries our epoch, and,
        for a node of a gateway cluster, names it the writer of ``partitions``."""
        if self.ownership is not None:
            self.ownership.fence_table(self._tables[name])
        if self.writer is not None:
            self.writer.check(self._tables[CONSUMER_OFFSETS], partitions)

    def _commit_properties(self, batch_id: int) -> CommitProperties:
        return CommitProperties(
            app_transactions=[Transaction(self.app_id, batch_id)],
            custom_metadata=None
            if self.ownership is None
            else {EPOCH_PROPERTY: str(self.ownership.epoch)},
        )

    def _housekeep(self, batch_id: int, report: BatchReport, now_ms: int) -> None:
        """Maintenance on the batch ids the schedule names, idle batches included (Spark's
        batch ids are contiguous, so every multiple comes once; an idle batch is the cheapest
        time). Retention first (on the batch's clock ``now_ms``), then compaction (fewer,
        larger files), then a checkpoint of the result, then vacuum of the files compaction,
        merges and retention removed, then expired log files.

        A failed task is logged and reported, not raised: the batch's data is already
        committed, and raising would make Spark re-run the batch, which would fail the same
        way on every replay and stall the stream. Compaction does not touch app transactions
        (it commits with none, and the snapshot keeps the latest per app id)."""
        hk = self.housekeeping
        tasks: list[tuple[str, Callable[[str, DeltaTable], str]]] = []
        if hk.due(hk.retention_every_batches, batch_id):
            tasks.append(("retention", lambda name, dt: self._retain(name, dt, now_ms)))
        if hk.due(hk.compact_every_batches, batch_id):
            tasks.append(("compact", lambda _, dt: _compact(dt)))
        if hk.due(hk.checkpoint_every_batches, batch_id):
            tasks.append(("checkpoint", lambda _, dt: _checkpoint(dt)))
        if hk.due(hk.vacuum_every_batches, batch_id):
            tasks.append(("vacuum", lambda _, dt: _vacuum(dt, hk.vacuum_retention_hours)))
        if hk.due(hk.checkpoint_every_batches, batch_id):
            tasks.append(("cleanup_metadata", self._cleanup_metadata))
        if not tasks or (self.ownership is not None and self.ownership.lost is not None):
            return
        all_started = time.perf_counter()
        if hk.due(hk.retention_every_batches, batch_id):
            self._archive_retention(report, now_ms)
        for task, run in tasks:
            for name in schema.TABLES:
                started = time.perf_counter()
                try:
                    detail = run(name, self._tables[name])
                except Exception as error:  # see the docstring: never stall the stream
                    self._tables_stale = True
                    log.warning("housekeeping %s on %s failed", task, name, exc_info=True)
                    report.housekeeping.append(f"{task} {name}: FAILED {error}")
                    continue
                suffix = f" ({detail})" if detail else ""
                report.housekeeping.append(f"{task} {name}: {_ms_since(started):.1f} ms{suffix}")
        report.housekeeping_ms = _ms_since(all_started)

    def _retain(self, name: str, table: DeltaTable, now_ms: int) -> str:
        """Retention of one table, on a snapshot checked to carry our owner epoch (a newer
        owner's fence then fails its commits, as it fails a batch's)."""
        self._fence(name)
        return self._retainer.table_task(name, table, now_ms)

    def _cleanup_metadata(self, name: str, table: DeltaTable) -> str:
        """Delta log files expired by the table's ``delta.logRetentionDuration`` go (those
        before its newest checkpoint: the checkpoint just made). The property is set first
        (fenced, as any commit) when it differs from ``job.delta.log.retention.ms``, on the
        first cleanup of this sink: even with retention off, and on a table an older release
        configured with a longer one."""
        self._fence(name)
        detail = self._retainer.configure_once(name, table)
        table.cleanup_metadata()
        return detail

    def _archive_retention(self, report: BatchReport, now_ms: int) -> None:
        started = time.perf_counter()
        try:
            detail = self._retainer.archive_task(now_ms)
        except Exception as error:  # as a table's task: never stall the stream
            log.warning("housekeeping retention on the archive failed", exc_info=True)
            report.housekeeping.append(f"retention archive: FAILED {error}")
            return
        if detail is not None:
            report.housekeeping.append(f"retention archive: {_ms_since(started):.1f} ms ({detail})")


# --- readers ------------------------------------------------------------------------------------


def last_complete_batch(tables_dir: Path, app_id: str) -> int | None:
    """The last batch of ``app_id`` that every table holds completely (None before the first).

    That is the ``responses`` table's transaction version: the sink commits there last, on
    every batch that writes anything (module docstring). Read rows with ``batch_id`` at or
    below it for a consistent cut."""
    path = Path(tables_dir) / RESPONSES
    if not DeltaTable.is_deltatable(str(path)):
        return None
    return DeltaTable(path).transaction_version(app_id)


def log_end_offsets(tables_dir: Path) -> dict[int, int]:
    """offsets partition -> next offset (max offset + 1), from the ``consumer_offsets`` table."""
    path = Path(tables_dir) / CONSUMER_OFFSETS
    if not DeltaTable.is_deltatable(str(path)):
        return {}
    return _log_end(DeltaTable(path))


def _log_end(table: DeltaTable) -> dict[int, int]:
    """max(offset) + 1 per offsets partition.

    From the files' statistics in the Delta log when every file has them (delta-rs writes
    min/max for the first 32 columns): no data file is opened, which matters because between
    compactions the log is one small file per partition per batch (300 files: 9 ms from the
    statistics, 630 ms reading the two columns). Otherwise only the two columns are read."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return {}
    partition, maximum = "partition.offsets_partition", "max.offset"
    names = actions.column_names
    if partition in names and maximum in names and actions.column(maximum).null_count == 0:
        ends = actions.group_by(partition).aggregate([(maximum, "max")])
        keys, maxima = ends.column(partition), ends.column(f"{maximum}_max")
    else:
        data = read_table(table, columns=["offsets_partition", "offset"])
        ends = data.group_by("offsets_partition").aggregate([("offset", "max")])
        keys, maxima = ends.column("offsets_partition"), ends.column("offset_max")
    return {
        int(p): int(m) + 1
        for p, m in zip(keys.to_pylist(), maxima.to_pylist(), strict=True)
        if m is not None
    }


# --- tables and maintenance ---------------------------------------------------------------------


def _open_or_create(path: Path, name: str, ownership: Ownership | None = None) -> DeltaTable:
    """Open a table (fenced first when owned, so that a stale owner changes nothing), or
    create it carrying the owner's epoch."""
    if DeltaTable.is_deltatable(str(path)):
        table = DeltaTable(path)
        if ownership is not None:
            ownership.fence_table(table)
        return _evolve(table, name)
    path.mkdir(parents=True, exist_ok=True)
    if ownership is not None:
        ownership.check()
    return DeltaTable.create(
        path,
        schema.TABLE_SCHEMAS[name],
        partition_by=schema.PARTITION_BY.get(name),
        configuration=None if ownership is None else {EPOCH_PROPERTY: str(ownership.epoch)},
        raise_if_key_not_exists=ownership is None,
    )


def _evolve(table: DeltaTable, name: str) -> DeltaTable:
    """Add the columns of ``schema.TABLE_SCHEMAS[name]`` that a table written by an older
    release lacks (all nullable; Delta appends them after the existing ones)."""
    present = {f.name for f in table.schema().fields}
    missing = [f for f in schema.TABLE_SCHEMAS[name] if f.name not in present]
    if missing:
        log.info("table %s: adding columns %s", name, [f.name for f in missing])
        table.alter.add_columns([Field.from_arrow(f) for f in missing])
    return table


def _compact(table: DeltaTable) -> str:
    metrics = table.optimize.compact()
    return f"{metrics['numFilesRemoved']} -> {metrics['numFilesAdded']} files"


def _checkpoint(table: DeltaTable) -> str:
    table.create_checkpoint()
    return f"version {table.version()}"


def _vacuum(table: DeltaTable, retention_hours: int) -> str:
    # delta-rs refuses a retention below the table's delta.deletedFileRetentionDuration unless
    # told not to check; below it is the operator's explicit choice (Housekeeping), so allow it.
    # full: every file the table's current version does not reference, older than the
    # retention. The default ("lite") only reads the tombstones since the last checkpoint, and
    # a checkpoint drops expired tombstones: files replaced before it stayed on disk forever.
    # One writer per warehouse, and vacuum runs between its batches: no write is in flight.
    minimum = _deleted_file_retention_hours(table.metadata().configuration)
    deleted = table.vacuum(
        retention_hours=retention_hours,
        dry_run=False,
        enforce_retention_duration=retention_hours >= minimum,
        full=True,
    )
    return f"{len(deleted)} files deleted"


_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*$", re.IGNORECASE)
_HOURS_PER_UNIT = {
    "nanosecond": 1 / 3.6e12,
    "microsecond": 1 / 3.6e9,
    "millisecond": 1 / 3.6e6,
    "second": 1 / 3600,
    "minute": 1 / 60,
    "hour": 1.0,
    "day": 24.0,
    "week": 168.0,
}


def _deleted_file_retention_hours(configuration: Mapping[str, str]) -> float:
    """The table's ``delta.deletedFileRetentionDuration`` ("interval 7 days") in hours."""
    value = configuration.get("delta.deletedFileRetentionDuration")
    match = _INTERVAL.match(value) if value else None
    if match is None or match.group(2).lower() not in _HOURS_PER_UNIT:
        return DEFAULT_DELETED_FILE_RETENTION_HOURS
    return float(match.group(1)) * _HOURS_PER_UNIT[match.group(2).lower()]


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0
