"""Reading the job's Delta tables without Spark: delta-rs lists the files, pyarrow reads them.

A reader never sees half a micro-batch. The sink commits the tables one after another, and
``responses`` last: the ``responses`` table's application transaction is the last batch every
table holds (``coordinator.stream.sink``). A :class:`Cut` is such a batch id; the append-only
tables (``consumer_offsets``, ``group_history``, ``responses``, ``rejected_requests``) are read
at their newest version and filtered to ``batch_id <= cut``. That is exact, and it keeps
working after ``VACUUM`` has removed the files that Delta time travel would need.

The past (``--as-of``) is a cut too. A time ``T`` names the last batch whose clock was at or
before ``T``: the batch's clock is Spark's batch timestamp, the ``now`` the engine acted at,
which every append-only table stores with its rows (``schema.BATCH_CLOCK``: the log's record
``timestamp_ms``, ``group_history.updated_at_ms``, ``responses.emitted_at_ms``,
``rejected_requests.rejected_at_ms``). So "as of T" is the warehouse after every batch the
coordinator ran at or before T (batch ids follow the clock), whether or not it had been
committed by then; of the batches still being written now, none is included. The mapping is
read from the rows the history window keeps, with the files' statistics (a file wholly before
``T`` is not opened; a file spanning it is scanned for two integer columns), never from the
Delta log, so it does not depend on ``job.delta.log.retention.ms``. A log version ``N`` names
the batch of version ``N`` of ``consumer_offsets`` (as Delta numbers its commits): that one
does read the Delta log, which keeps ``job.delta.log.retention.ms`` of commits. Group state as
of a cut is the last ``group_history`` row per group at or before it; ``group_state`` (one
current row per group, a merge table) answers only "now", where it is the fast path for
``--list``.

Retention (:mod:`coordinator.stream.retention`) bounds the past: a time older than what the
tables keep (a table's ``keptFromBatch`` property, whose time is on the same batch clock), a
cut before it, or a log version older than the Delta log keeps, is refused with
:class:`AsOfError` naming where history starts and the setting that decides it, rather than
answered from what is left. So is a warehouse written before ``group_history`` existed, whose
past group states come from Delta time travel on ``group_state`` (its newest version holding
no batch after the cut), when its Delta log no longer reaches back to the cut.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable

from coordinator.config import CoordinatorConfig
from coordinator.log.modern_records import TYPE_OF as CONSUMER_GROUP_RECORD_TYPES
from coordinator.log.partitioning import partition_for
from coordinator.log.records import GROUP_METADATA, OFFSET_COMMIT
from coordinator.stream.delta_read import CHECKPOINT_FILE, COMMIT_FILE, data_file, read_table
from coordinator.stream.retention import LOG_RETENTION, KeptFrom
from coordinator.stream.schema import (
    BATCH_CLOCK,
    CONSUMER_OFFSETS,
    GROUP_HISTORY,
    GROUP_STATE,
    PARTITION_BY,
    REJECTED_REQUESTS,
    RESPONSES,
    TABLE_SCHEMAS,
    WRITER_APP_IDS_PROPERTY,
    Warehouse,
)
from coordinator.stream.settings import IDENTITY_FILE

#: What a table's rows are, in a refusal ("offsets as of ... are no longer kept").
_KEPT_WHAT = {
    CONSUMER_OFFSETS: "offsets",
    GROUP_HISTORY: "group states",
    RESPONSES: "responses",
    REJECTED_REQUESTS: "rejected requests",
}


class AsOfError(ValueError):
    """An ``--as-of`` value that names no point of this warehouse."""


def parse_datetime(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 date-time, as ``kafka-consumer-groups.sh`` reads
    ``--to-datetime``: ``YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm]``, UTC when no zone is given
    (Kafka's ``Utils.getDateTime`` appends ``Z``)."""
    if "T" not in text:
        raise ValueError(
            f"Error parsing timestamp '{text}'. It does not contain a 'T' according to "
            "ISO8601 format (YYYY-MM-DDTHH:mm:SS.sss)"
        )
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as problem:
        raise ValueError(f"Error parsing timestamp '{text}': {problem}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class AsOf:
    """A point in the warehouse's past: a time, or a version of the log table."""

    timestamp_ms: int | None = None
    log_version: int | None = None

    @classmethod
    def parse(cls, text: str) -> AsOf:
        """``123`` is version 123 of ``consumer_offsets``; anything else is a date-time."""
        text = text.strip()
        if text.isdigit():
            return cls(log_version=int(text))
        return cls(timestamp_ms=parse_datetime(text))

    def describe(self) -> str:
        if self.log_version is not None:
            return f"log version {self.log_version}"
        assert self.timestamp_ms is not None
        return format_ms(self.timestamp_ms)


@dataclass(frozen=True, slots=True)
class Cut:
    """Everything up to and including ``batch_id`` (None: no batch is complete yet)."""

    batch_id: int | None
    as_of: AsOf | None = None

    @property
    def now(self) -> bool:
        return self.as_of is None


def format_ms(ms: int | None) -> str:
    """ISO-8601 in UTC to the millisecond (``-`` for None), the CLI's one time format."""
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class WarehouseReader:
    """The tables of one warehouse, read at consistent cuts."""

    def __init__(self, warehouse: str | Path, checkpoint: str | Path | None = None) -> None:
        self.paths = Warehouse.at(warehouse, checkpoint=checkpoint)
        self._tables: dict[str, DeltaTable | None] = {}

    # --- tables ---------------------------------------------------------------------------------

    def table(self, name: str) -> DeltaTable | None:
        """The table at its newest version, or None when the job never wrote it."""
        if name not in self._tables:
            path = self.paths.table(name)
            self._tables[name] = (
                DeltaTable(str(path)) if DeltaTable.is_deltatable(str(path)) else None
            )
        return self._tables[name]

    @cached_property
    def _identity(self) -> dict[str, Any]:
        """The checkpoint's ``coordinator.json`` as stored (empty when there is none), read
        once: the app id, its lineage and the pinned partition count all come from it."""
        path = self.paths.checkpoint / IDENTITY_FILE
        stored: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        return stored

    @cached_property
    def app_id(self) -> str | None:
        """The job's Delta application id: from the checkpoint's ``coordinator.json``, else
        from the newest application transaction in the ``responses`` log."""
        if "app_id" in self._identity:
            return str(self._identity["app_id"])
        log_dir = self.paths.table(RESPONSES) / "_delta_log"
        commits = sorted(log_dir.glob("*.json"), reverse=True) if log_dir.exists() else []
        for commit in commits:
            for line in commit.read_text().splitlines():
                action = json.loads(line)
                if "txn" in action:
                    return str(action["txn"]["appId"])
        return None

    @cached_property
    def app_ids(self) -> list[str]:
        """Every app id that wrote these tables: the checkpoint's, and the ones of the
        checkpoints it was rebuilt from (``coordinator run --rebuild-from-log``). Batch ids go
        on rising across a rebuild, so the newest batch of any of them is a cut."""
        earlier = (self._identity.get("rebuilt_from") or {}).get("previous_app_ids") or []
        current = [] if self.app_id is None else [self.app_id]
        return current + [a for a in earlier + self.writer_app_ids if a not in current]

    @cached_property
    def writer_app_ids(self) -> list[str]:
        """The app ids of a gateway cluster's writers (``coordinator gateway --processes``:
        each node writes its own partitions' records, the supervisor the group tables), as the
        supervisor names them on ``responses``; empty for one writer."""
        responses = self.table(RESPONSES)
        if responses is None:
            return []
        named = responses.metadata().configuration.get(WRITER_APP_IDS_PROPERTY, "")
        return [a for a in named.split(",") if a]

    @cached_property
    def offsets_topic_num_partitions(self) -> int:
        """From the checkpoint (pinned there), else Kafka's default."""
        pinned = self._identity.get("offsets_topic_num_partitions")
        if pinned is None:
            return CoordinatorConfig().offsets_topic_num_partitions
        return int(pinned)

    # --- cuts -----------------------------------------------------------------------------------

    def cut(self, as_of: AsOf | None = None) -> Cut:
        """The last whole batch now, at a time, or at a version of the log."""
        app = self.app_id
        if app is None:
            return Cut(None, as_of)
        if as_of is None:
            responses = self.table(RESPONSES)
            if responses is not None and self.writer_app_ids:
                # Several writers, each numbering its own batches: "now" is everything any of
                # them completed (a cut in time across them is not kept: see the README).
                return Cut(self._newest_batch(responses))
            return Cut(None if responses is None else responses.transaction_version(app))
        if as_of.log_version is not None:
            cut = Cut(self._log_version_batch(as_of.log_version), as_of)
        else:
            assert as_of.timestamp_ms is not None
            cut = Cut(self._batch_at(as_of.timestamp_ms), as_of)
        self.check_kept(cut)
        return cut

    # --- what retention kept ---------------------------------------------------------------------

    def kept_from(self, name: str) -> KeptFrom | None:
        """Where table ``name``'s history starts (None: retention never dropped rows there)."""
        table = self.table(name)
        return None if table is None else KeptFrom.of(table.metadata().configuration)

    def history_start(self) -> KeptFrom | None:
        """Where the groups' history starts: the later of the log's and ``group_history``'s."""
        log, states = self.kept_from(CONSUMER_OFFSETS), self.kept_from(GROUP_HISTORY)
        return states if log is None else log.later(states)

    def check_kept(
        self, cut: Cut, names: Iterable[str] = (CONSUMER_OFFSETS, GROUP_HISTORY)
    ) -> None:
        """Refuse a past cut that a table no longer holds whole (``AsOfError``)."""
        if cut.now or cut.batch_id is None:
            return
        assert cut.as_of is not None
        for name in names:
            kept = self.kept_from(name)
            if kept is not None and cut.batch_id < kept.batch_id:
                raise _no_longer_kept(name, cut.as_of, kept)

    def _newest_batch(self, table: DeltaTable) -> int | None:
        """The newest batch of any of our app ids the table holds (at its loaded version)."""
        versions = [table.transaction_version(app) for app in self.app_ids]
        present = [v for v in versions if v is not None]
        return max(present) if present else None

    def _batch_at(self, timestamp_ms: int) -> int | None:
        """The last whole batch whose clock was at or before ``timestamp_ms`` (module
        docstring), from the tables' batch clock columns; refused when the history window no
        longer reaches that time.

        The highest batch id with a row at or before the time, in any append-only table, is
        that batch or one after it that left no row anywhere (so every table reads the same
        at either). Where retention dropped rows before the time, the batch its marker names
        (whose clock is at or before its horizon, so before the time) is a floor: the newest
        rows it dropped may have been the last ones before the time."""
        responses = self.table(RESPONSES)
        complete = None if responses is None else self._newest_batch(responses)
        if complete is None:
            return None
        moment = AsOf(timestamp_ms=timestamp_ms)
        found: int | None = None
        for name, clock in BATCH_CLOCK.items():
            table, kept = self.table(name), self.kept_from(name)
            if table is None:
                continue
            if kept is not None and timestamp_ms < kept.timestamp_ms:
                if name in (CONSUMER_OFFSETS, GROUP_HISTORY):
                    raise _no_longer_kept(name, moment, kept)
            elif kept is not None:
                found = _higher(found, kept.batch_id)
            found = _higher(found, _last_batch_at(table, clock, timestamp_ms, complete))
        return None if found is None else min(found, complete)

    def _log_version_batch(self, version: int) -> int | None:
        log = self.table(CONSUMER_OFFSETS)
        if log is None or version > log.version():
            newest = None if log is None else log.version()
            raise AsOfError(f"the log has no version {version} (newest: {newest})")
        start = _log_start(self.paths.table(CONSUMER_OFFSETS))
        if start is not None and version < start[0]:
            raise AsOfError(
                f"log version {version} is no longer kept: the Delta log of {CONSUMER_OFFSETS} "
                f"starts at version {start[0]} ({format_ms(start[1])}; {_log_retention(log)})"
            )
        try:
            at = DeltaTable(str(self.paths.table(CONSUMER_OFFSETS)), version=version)
        except Exception as problem:  # delta-rs: its commits went meanwhile, or are damaged
            raise AsOfError(
                f"log version {version} cannot be read ({problem}); the Delta log of "
                f"{CONSUMER_OFFSETS} keeps {_log_retention(log)}"
            ) from None
        return self._newest_batch(at)

    def table_at_cut(self, name: str, cut: Cut) -> DeltaTable | None:
        """Table ``name`` by Delta time travel, at its newest version holding no batch after
        the cut (its app transactions), found by bisection over the versions its Delta log
        still holds (None: the table does not exist). Only for ``group_state`` in a warehouse
        written before ``group_history`` existed, whose past is its older versions; refused
        (:class:`AsOfError`, naming the setting) when the oldest version the log still holds
        is already past the cut."""
        path = self.paths.table(name)
        table = self.table(name)
        if table is None or cut.batch_id is None:
            return table
        start, up_to = _log_start(path), cut.batch_id
        if start is None:
            return None

        def holds(version: int) -> tuple[DeltaTable, bool]:
            try:
                at = DeltaTable(str(path), version=version)
            except Exception as problem:  # delta-rs: its commits went meanwhile, or are damaged
                raise AsOfError(
                    f"{name} at version {version} cannot be read by Delta time travel "
                    f"({problem}; {_log_retention(table)})"
                ) from None
            newest = self._newest_batch(at)
            return at, newest is None or newest <= up_to

        low, ok = holds(start[0])
        if not ok:
            assert cut.as_of is not None
            raise AsOfError(
                f"{_KEPT_WHAT.get(name, 'group states')} as of {cut.as_of.describe()} are no "
                f"longer kept: this warehouse has no {GROUP_HISTORY} table, so they come from "
                f"Delta time travel on {name}, whose log starts at version {start[0]} "
                f"({format_ms(start[1])}; {_log_retention(table)})"
            )
        lo, hi = start[0], table.version()
        while lo < hi:  # low holds the cut at version lo; find the newest version that does
            middle = (lo + hi + 1) // 2
            at, ok = holds(middle)
            if ok:
                lo, low = middle, at
            else:
                hi = middle - 1
        return low

    # --- reading --------------------------------------------------------------------------------

    def read(
        self,
        name: str,
        cut: Cut,
        *,
        columns: Sequence[str] | None = None,
        group_ids: Iterable[str] | None = None,
        offsets_partitions: Iterable[int] | None = None,
    ) -> pa.Table:
        """Rows of an append-only table up to the cut (the table's schema when it is absent),
        of some groups only, and on ``consumer_offsets`` of some offsets partitions only (whole
        directories pruned).

        The files the Delta log lists are read as one pyarrow dataset per partition, with the
        table's schema: delta-rs's own ``to_pyarrow_dataset`` builds an expression per file
        (0.8 s for 2,000 files, most of a ``--describe``). Only integer conditions go down to
        the parquet scan: files that delta-rs's merge wrote carry ``string_view`` columns,
        which pyarrow cannot compare with a ``string`` statistic, so group ids are filtered
        batch by batch as the scan streams (memory: the rows kept, not the table)."""
        schema = TABLE_SCHEMAS[name]
        wanted = list(columns) if columns is not None else schema.names
        pieces = [
            piece.select(wanted)
            for piece in self._scan(name, cut, wanted, group_ids, offsets_partitions)
        ]
        if not pieces:
            return schema.empty_table().select(wanted)
        return pa.concat_tables(pieces)

    def _partitions(
        self, name: str, cut: Cut, offsets_partitions: Iterable[int] | None = None
    ) -> Iterator[tuple[Any, ds.Dataset]]:
        """(partition value, dataset of its files) of a table, some offsets partitions only;
        nothing when the table is absent or no batch is complete."""
        table = self.table(name)
        if table is None or cut.batch_id is None:
            return
        schema = TABLE_SCHEMAS[name]
        partition_columns = PARTITION_BY.get(name, [])
        in_files = pa.schema([f for f in schema if f.name not in partition_columns])
        only = None if offsets_partitions is None else set(offsets_partitions)
        for value, paths in _files_by_partition(table, partition_columns).items():
            if only is not None and value not in only:
                continue
            yield value, ds.dataset(paths, schema=in_files, format="parquet")

    def _scan(
        self,
        name: str,
        cut: Cut,
        columns: Sequence[str],
        group_ids: Iterable[str] | None = None,
        offsets_partitions: Iterable[int] | None = None,
        condition: ds.Expression | None = None,
    ) -> Iterator[pa.Table]:
        """The rows up to the cut (and ``condition``) of some groups, streamed: one table per
        scanned record batch that kept any row, with ``columns`` (partition column included)."""
        schema = TABLE_SCHEMAS[name]
        partition_columns = PARTITION_BY.get(name, [])
        groups = None if group_ids is None else sorted(set(group_ids))
        read = [c for c in columns if c not in partition_columns]
        if groups is not None and "group_id" not in read:
            read.append("group_id")
        where = pc.field("batch_id") <= cut.batch_id
        if condition is not None:
            where = where & condition
        for value, dataset in self._partitions(name, cut, offsets_partitions):
            for batch in dataset.to_batches(columns=read, filter=where):
                if batch.num_rows == 0:
                    continue
                rows = _only_groups(pa.Table.from_batches([batch]), groups)
                if rows.num_rows == 0:
                    continue
                for column in partition_columns:  # one partition column: offsets_partition
                    rows = rows.append_column(
                        schema.field(column),
                        pa.array([value] * rows.num_rows, schema.field(column).type),
                    )
                yield rows

    def latest_log(self, cut: Cut, group_ids: Iterable[str] | None = None) -> pa.Table:
        """What Kafka's load of ``__consumer_offsets`` keeps, in log order: of the
        ``consumer_offsets`` rows up to the cut, the last record of every (group, topic,
        partition) commit key (a tombstone included: it deletes the key) and the last
        GroupMetadata record of every group that is not a tombstone. :func:`history
        .committed_offsets` and the newest span of :func:`history.generations` read the same
        from these rows as from the whole log.

        Reduced in pyarrow per offsets partition (a key lives in one), in two scans: the key
        columns, to find the offsets that survive, then every column of those offsets only;
        memory follows the number of keys, not the length of the log."""
        partitions = None
        if group_ids is not None:
            group_ids = sorted(set(group_ids))
            count = self.offsets_topic_num_partitions
            partitions = {partition_for(g, count) for g in group_ids}
        schema = TABLE_SCHEMAS[CONSUMER_OFFSETS]
        pieces: list[pa.Table] = []
        for value, dataset in self._partitions(CONSUMER_OFFSETS, cut, partitions):
            keep = _surviving_offsets(dataset, cut, group_ids)
            if len(keep) == 0:
                continue
            only = pc.field("offset").isin(keep)
            pieces.extend(self._scan(CONSUMER_OFFSETS, cut, schema.names, group_ids, [value], only))
        if not pieces:
            return schema.empty_table()
        rows = pa.concat_tables([p.select(schema.names) for p in pieces])
        return rows.sort_by([("offsets_partition", "ascending"), ("offset", "ascending")])

    def log(self, cut: Cut, group_ids: Iterable[str] | None = None, **kwargs: Any) -> pa.Table:
        """``consumer_offsets`` rows in log order, of some groups (reading only their offsets
        partitions) or of all."""
        partitions = None
        if group_ids is not None:
            group_ids = sorted(set(group_ids))
            count = self.offsets_topic_num_partitions
            partitions = {partition_for(g, count) for g in group_ids}
        rows = self.read(
            CONSUMER_OFFSETS, cut, group_ids=group_ids, offsets_partitions=partitions, **kwargs
        )
        return rows.sort_by([("offsets_partition", "ascending"), ("offset", "ascending")])

    def group_history(self, cut: Cut, group_ids: Iterable[str] | None = None) -> pa.Table:
        """``group_history`` rows (every change of a group's summary) in batch order."""
        rows = self.read(GROUP_HISTORY, cut, group_ids=group_ids)
        return rows.sort_by([("group_id", "ascending"), ("batch_id", "ascending")])

    def group_states(
        self, cut: Cut, group_ids: Iterable[str] | None = None
    ) -> list[dict[str, Any]]:
        """One summary per live group (no Dead ones), sorted by group id.

        Now: the ``group_state`` table itself. As of a cut: each group's last
        ``group_history`` row at or before it (falling back to Delta time travel on
        ``group_state`` for a warehouse written before ``group_history`` existed)."""
        wanted = None if group_ids is None else set(group_ids)
        if cut.now:
            rows = self._current_states(wanted)
        elif self.table(GROUP_HISTORY) is not None:
            rows = self._states_from_history(cut, wanted)
        else:
            rows = self._states_by_time_travel(cut, wanted)
        return sorted((r for r in rows if r.get("state") != "Dead"), key=lambda r: r["group_id"])

    def _current_states(self, wanted: set[str] | None) -> list[dict[str, Any]]:
        table = self.table(GROUP_STATE)
        if table is None:
            return []
        rows: list[dict[str, Any]] = _only_groups(read_table(table), wanted).to_pylist()
        return rows

    def _states_from_history(self, cut: Cut, wanted: set[str] | None) -> list[dict[str, Any]]:
        """Each group's last ``group_history`` row at or before the cut, reduced in pyarrow as
        the scan streams (memory: one row per group, whatever the history's length)."""
        latest: pa.Table | None = None
        names = TABLE_SCHEMAS[GROUP_HISTORY].names
        for piece in self._scan(GROUP_HISTORY, cut, names, wanted):
            piece = piece.select(names)
            if latest is not None:
                piece = pa.concat_tables([latest, piece])
            latest = _last_per_group(piece)
        return [] if latest is None else latest.to_pylist()

    def _states_by_time_travel(self, cut: Cut, wanted: set[str] | None) -> list[dict[str, Any]]:
        table = self.table_at_cut(GROUP_STATE, cut)
        if cut.batch_id is None or table is None:
            return []
        rows: list[dict[str, Any]] = _only_groups(read_table(table), wanted).to_pylist()
        return [r for r in rows if r["batch_id"] <= cut.batch_id]


def _log_start(table: Path) -> tuple[int, int] | None:
    """The oldest version a table's Delta log can still be loaded at, and its commit time in
    epoch ms; None without a log. ``cleanup_metadata`` removes expired commits and checkpoints
    before the newest checkpoint, so once version 0 is gone a version loads only from a
    checkpoint at or before it: the oldest checkpoint left is where the log starts (a commit
    kept before it cannot be loaded)."""
    log_dir = table / "_delta_log"
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return None
    commits = {int(m[1]) for m in map(COMMIT_FILE.match, names) if m}
    checkpoints = {int(m[1]) for m in map(CHECKPOINT_FILE.match, names) if m}
    whole = 0 in commits or not checkpoints
    oldest = min(commits, default=None) if whole else min(checkpoints)
    if oldest is None:
        return None
    try:
        if oldest in commits:
            commit = log_dir / f"{oldest:020d}.json"
            for line in commit.read_text(encoding="utf-8").splitlines():
                info = json.loads(line).get("commitInfo")
                if info and "timestamp" in info:
                    return oldest, int(info["timestamp"])
            return oldest, int(commit.stat().st_mtime * 1000)
        checkpoint = next(log_dir.glob(f"{oldest:020d}.checkpoint*.parquet"))
        return oldest, int(checkpoint.stat().st_mtime * 1000)
    except (FileNotFoundError, StopIteration):  # removed meanwhile: the log starts later still
        return _log_start(table)


def _log_retention(table: DeltaTable | None) -> str:
    value = None if table is None else table.metadata().configuration.get(LOG_RETENTION)
    return f"delta.logRetentionDuration={value or 'interval 30 days'}, job.delta.log.retention.ms"


def _no_longer_kept(name: str, as_of: AsOf, kept: KeptFrom) -> AsOfError:
    return AsOfError(
        f"{_KEPT_WHAT.get(name, name)} as of {as_of.describe()} are no longer kept: history "
        f"starts at {format_ms(kept.timestamp_ms)} ({kept.setting})"
    )


def _higher(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _last_batch_at(table: DeltaTable, clock: str, at_ms: int, up_to: int) -> int | None:
    """The highest ``batch_id`` at most ``up_to`` of the rows whose ``clock`` is at or before
    ``at_ms`` (None: no such row). From the add actions' statistics: a file whose rows all
    qualify gives its highest batch id unread; only the files that may hold a higher one and
    span the bounds are scanned, for two integer columns, record batch by record batch."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return None

    def stat(name: str) -> pa.ChunkedArray | pa.Array:
        if name in actions.column_names:
            return actions.column(name)
        return pa.nulls(actions.num_rows, pa.int64())

    high_clock, high_batch = stat(f"max.{clock}"), stat("max.batch_id")
    whole = pc.fill_null(
        pc.and_(pc.less_equal(high_clock, at_ms), pc.less_equal(high_batch, up_to)), False
    )
    best = pc.max(pc.filter(high_batch, whole)).as_py()
    maybe = pc.and_(
        pc.invert(whole),
        pc.and_(
            pc.fill_null(pc.less_equal(stat(f"min.{clock}"), at_ms), True),
            pc.fill_null(pc.less_equal(stat("min.batch_id"), up_to), True),
        ),
    )
    if best is not None:
        maybe = pc.and_(maybe, pc.fill_null(pc.greater(high_batch, best), True))
    paths = pc.filter(actions.column("path"), maybe).to_pylist()
    if not paths:
        return None if best is None else int(best)
    in_files = pa.schema([("batch_id", pa.int64()), (clock, pa.int64())])
    dataset = ds.dataset(
        [data_file(table.table_uri, p) for p in paths], schema=in_files, format="parquet"
    )
    where = (pc.field(clock) <= at_ms) & (pc.field("batch_id") <= up_to)
    for batch in dataset.to_batches(columns=["batch_id"], filter=where):
        best = _higher(best, pc.max(batch.column("batch_id")).as_py())
    return None if best is None else int(best)


def _files_by_partition(table: DeltaTable, columns: list[str]) -> dict[Any, list[str]]:
    """The table's data files (local paths), by the value of its one partition column (None
    for an unpartitioned table); the value is read from the Hive-style directory name."""
    out: dict[Any, list[str]] = {}
    for uri in table.file_uris():
        path = uri.removeprefix("file://")
        value: Any = None
        for column in columns:
            match = re.search(rf"/{column}=([^/]*)/", path)
            value = (
                None
                if match is None or match.group(1) == "__HIVE_DEFAULT_PARTITION__"
                else int(match.group(1))
            )
        out.setdefault(value, []).append(path)
    return out


def _surviving_offsets(dataset: ds.Dataset, cut: Cut, group_ids: Sequence[str] | None) -> pa.Array:
    """The offsets, in one offsets partition's files, of the last record per commit key, of
    the last GroupMetadata record per group that is not a tombstone, and of the last record
    per key of a consumer group's (KIP-848) records (key columns only)."""
    keyed = dataset.to_table(
        columns={
            "record_type": pc.field("record_type"),
            "group_id": pc.field("group_id"),
            "topic": pc.field("topic"),
            "partition": pc.field("partition"),
            "offset": pc.field("offset"),
            "tombstone": pc.is_null(pc.field("value")),
            "key": pc.field("key"),
        },
        filter=pc.field("batch_id") <= cut.batch_id,
    )
    keyed = _only_groups(keyed, group_ids)
    kind = keyed.column("record_type").cast(pa.string())
    keyed = keyed.set_column(1, "group_id", keyed.column("group_id").cast(pa.string()))
    keyed = keyed.set_column(2, "topic", keyed.column("topic").cast(pa.string()))
    commits = keyed.filter(pc.equal(kind, OFFSET_COMMIT))
    last_commits = commits.group_by(["group_id", "topic", "partition"]).aggregate(
        [("offset", "max")]
    )
    groups = keyed.filter(
        pc.and_(pc.equal(kind, GROUP_METADATA), pc.invert(keyed.column("tombstone")))
    )
    last_groups = groups.group_by("group_id").aggregate([("offset", "max")])
    consumer = keyed.filter(pc.is_in(kind, pa.array(sorted(CONSUMER_GROUP_RECORD_TYPES))))
    last_consumer = consumer.group_by("key").aggregate([("offset", "max")])
    return pa.concat_arrays(
        [
            last_commits.column("offset_max").combine_chunks(),
            last_groups.column("offset_max").combine_chunks(),
            last_consumer.column("offset_max").combine_chunks().cast(pa.int64()),
        ]
    )


def _last_per_group(rows: pa.Table) -> pa.Table:
    """The row of the highest ``batch_id`` per group (the later one of a tie), in the order
    the rows came."""
    groups = rows.column("group_id").cast(pa.string())
    keys = pa.table(
        {
            "group_id": groups,
            "batch_id": rows.column("batch_id"),
            "at": pa.array(range(rows.num_rows), pa.int64()),
        }
    )
    newest = keys.group_by("group_id").aggregate([("batch_id", "max")])
    where = pc.index_in(groups, value_set=newest.column("group_id").combine_chunks())
    highest = pc.take(newest.column("batch_id_max").combine_chunks(), where)
    tops = keys.filter(pc.equal(keys.column("batch_id"), highest))
    last = tops.group_by("group_id").aggregate([("at", "max")]).column("at_max")
    return rows.take(pc.take(last, pc.sort_indices(last)))


def _only_groups(rows: pa.Table, group_ids: Iterable[str] | None) -> pa.Table:
    if group_ids is None:
        return rows
    ids = pa.array(sorted(set(group_ids)), type=pa.string())
    return rows.filter(pc.is_in(rows.column("group_id").cast(pa.string()), value_set=ids))
