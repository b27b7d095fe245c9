"""A new checkpoint rebuilt from the log: a lost or unusable checkpoint, and re-sharding.

Spark's checkpoint holds the groups' state (the state store) and where the query is in its
sources. When it is lost (deleted, or unreadable), or when the number of shards, the state key
or the state store must change (all fixed per checkpoint, as Spark pins its shuffle partitions
and state store provider there), the state is rebuilt from ``consumer_offsets`` as Kafka
rebuilds a coordinator's state when a ``__consumer_offsets`` partition moves to another broker:
groups come back Stable (with their members and generation) or Empty, every member with a
fresh session, committed offsets intact.
A member that keeps heartbeating keeps its place; a rebalance that was in flight is lost (the
log only describes groups at rest) and its members rejoin, as in Kafka.

``coordinator run --rebuild-from-log`` asks for it; the job also does it by itself when the
checkpoint has no Spark state (no ``offsets/``, or no checkpoint at all) while the log has
records. :func:`prepare_checkpoint` decides and :func:`rebuild_checkpoint` does it:

1. Read the log with delta-rs (every row, per offsets partition in offset order) and check
   that it was written with this ``offsets.topic.num.partitions`` (every record's
   ``offsets_partition`` is its group's ``partitionFor``): Kafka cannot change that number
   either, so a mismatch is refused before anything moves.
2. Move the old checkpoint aside to ``<checkpoint>.replaced-<UTC time>`` (never deleted), and
   archive the inbox files its committed batches had already answered (the inbox source's
   committed offset names them; an older release's file source log), so that they are not
   answered twice.
3. Compact the log as Kafka's log cleaner would (the last record per key; a tombstone drops
   the key) and write one bootstrap line per group to ``<warehouse>/bootstrap/<run>/``:
   ``{"group_id": ..., "records": [[key_b64, value_b64], ...]}``, plus an empty one for each
   group that ``group_state`` lists but the log no longer holds (its row is then deleted).
4. Write the new checkpoint's ``coordinator.json``: a new app id and seed, the shards and state
   key asked for (which is how re-sharding is done), the bootstrap directory, and
   ``batch_id_base`` = the highest batch id in any table + 1. The sink writes Spark's batch
   ``n`` as ``batch_id_base + n``, so batch ids keep growing across checkpoints and readers'
   ``batch_id <= last complete batch`` cuts keep working; ``responses`` gets an empty commit
   marking ``batch_id_base - 1`` complete for the new app id, so that readers see everything
   written before the rebuild at once.

The query then reads the bootstrap directory as a second file source, beside the inbox, and
its first batch holds every bootstrap file: the operator loads each group that has no state
(:func:`coordinator.stream.operator.load_group`, the engine's own replay and ``onLoaded`` at
the batch's time) before it applies the batch's requests. Only lines from that directory are
loads; a line in the inbox is always a request.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from coordinator.log.cleaner import loaded
from coordinator.log.partitioning import partition_for
from coordinator.stream import schema
from coordinator.stream import source as inbox_source
from coordinator.stream.delta_read import read_table
from coordinator.stream.operator import load_line
from coordinator.stream.ownership import Ownership, epoch_commit_metadata
from coordinator.stream.settings import (
    CheckpointIdentity,
    Settings,
    checkpoint_identity,
    identity_path,
    new_checkpoint_identity,
    read_identity,
)
from coordinator.stream.sink import DeltaSink, last_complete_batch

log = logging.getLogger("coordinator.rebuild")

#: ``<warehouse>/bootstrap/<run>/part-NNNNN.jsonl``: one directory per rebuild.
BOOTSTRAP = "bootstrap"
#: A bootstrap file holds at most this many groups, or about this many bytes: Spark reads each
#: file whole as one row, then splits it into lines.
GROUPS_PER_FILE = 10_000
BYTES_PER_FILE = 32 * 1024 * 1024
#: The bootstrap source's ``maxFilesPerTrigger``: every bootstrap file goes into the first
#: batch, so that no request reaches a group before its load.
BOOTSTRAP_MAX_FILES = 1_000_000

_LOG_COLUMNS = ["offsets_partition", "offset", "group_id", "key", "value"]


class RebuildError(ValueError):
    """The log cannot be rebuilt into a checkpoint with these settings."""


@dataclass
class RebuildReport:
    """What :func:`rebuild_checkpoint` did, with its timings."""

    identity: CheckpointIdentity
    reason: str
    #: Where the old checkpoint went (None: there was none).
    replaced: Path | None = None
    log_rows: int = 0
    #: Records left after compaction (what the bootstrap carries).
    records: int = 0
    groups: int = 0
    #: Groups in ``group_state`` that the log no longer holds (their rows are deleted).
    absent_groups: int = 0
    bootstrap_files: list[Path] = field(default_factory=list)
    #: Inbox files already answered under the old checkpoint, archived (or deleted).
    inbox_files_cleaned: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        moved = f"; old checkpoint moved to {self.replaced}" if self.replaced else ""
        return (
            f"checkpoint rebuilt from the log ({self.reason}): {self.log_rows} log rows -> "
            f"{self.records} records of {self.groups} groups in {len(self.bootstrap_files)} "
            f"bootstrap files, {self.shards_text()}, batch ids from "
            f"{self.identity.batch_id_base}{moved} "
            f"({sum(self.seconds.values()):.2f} s)"
        )

    def shards_text(self) -> str:
        return f"{self.identity.state_key}-keyed on {self.identity.shards} shards"


# --- deciding ---------------------------------------------------------------------------------


def has_spark_state(checkpoint: Path) -> bool:
    """Whether Spark ever planned a batch in this checkpoint (``offsets/`` holds a file)."""
    offsets = checkpoint / "offsets"
    return offsets.is_dir() and any(not p.name.startswith(".") for p in offsets.iterdir())


def log_has_rows(tables_dir: Path) -> bool:
    path = Path(tables_dir) / schema.CONSUMER_OFFSETS
    if not DeltaTable.is_deltatable(str(path)):
        return False
    return bool(DeltaTable(str(path)).file_uris())


def prepare_checkpoint(
    settings: Settings, rebuild_from_log: bool = False, owner: Ownership | None = None
) -> tuple[CheckpointIdentity, RebuildReport | None]:
    """The checkpoint's identity, after a rebuild from the log when one is asked for or when
    the checkpoint has no Spark state but the log has records (see the module docstring). A
    rebuilt checkpoint that no batch has used yet (the job stopped before Spark's first batch)
    is used as it is, not rebuilt again. ``owner``: the warehouse's owner, whose epoch fences
    the rebuild's one commit (see :func:`mark_complete`)."""
    paths = settings.job.paths
    if rebuild_from_log:
        reason = "--rebuild-from-log"
    elif reads_inbox_with_file_source(paths.checkpoint):
        # An older release's checkpoint: its offsets are the file source's, so the inbox source
        # starts a new checkpoint, rebuilt from the log like any other.
        reason = "the checkpoint read the inbox with the file source of an older release"
    elif not has_spark_state(paths.checkpoint) and log_has_rows(paths.tables):
        if _unused_rebuild(settings):
            # Rebuilt, then stopped before Spark's first batch: that rebuild is still whole.
            return checkpoint_identity(settings), None
        reason = "the checkpoint has no Spark state and the log has records"
    else:
        return checkpoint_identity(settings), None
    report = rebuild_checkpoint(settings, reason=reason, owner=owner)
    log.info("%s", report.describe())
    return report.identity, report


# --- rebuilding -------------------------------------------------------------------------------


def rebuild_checkpoint(
    settings: Settings, *, reason: str = "asked", owner: Ownership | None = None
) -> RebuildReport:
    """Replace the checkpoint by one rebuilt from the log (module docstring). The job must not
    be running on the old checkpoint."""
    paths = settings.job.paths
    checkpoint = paths.checkpoint
    seconds: dict[str, float] = {}
    partitions = settings.coordinator.offsets_topic_num_partitions
    _check_directories(settings)

    started = time.perf_counter()
    old = read_identity(identity_path(settings)) if identity_path(settings).exists() else None
    lineage = _lineage(settings, old)
    if old is not None and old.offsets_topic_num_partitions != partitions:
        raise RebuildError(
            f"the checkpoint {checkpoint} was made with offsets.topic.num.partitions="
            f"{old.offsets_topic_num_partitions}, not {partitions}: every record's offsets "
            f"partition would move, and Kafka cannot change that number either"
        )
    rows = read_log(paths.tables)
    check_partitions(rows, partitions)
    base = next_batch_id(paths.tables, old)
    seconds["read_log"] = time.perf_counter() - started

    started = time.perf_counter()
    groups = compact(rows)
    absent = sorted(_state_group_ids(paths.tables) - groups.keys())
    seconds["compact"] = time.perf_counter() - started

    started = time.perf_counter()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    replaced = None
    cleaned = 0
    if checkpoint.exists():
        replaced = _free_name(checkpoint.with_name(f"{checkpoint.name}.replaced-{stamp}"))
        checkpoint.rename(replaced)
        cleaned = clean_answered_inbox_files(replaced, settings)
    bootstrap_dir = None
    files: list[Path] = []
    if groups or absent:
        # Normalised as Spark's file paths are (no "..": Hadoop's Path normalises its URI).
        root = Path(os.path.normpath(paths.root))
        bootstrap_dir = _free_name(root / BOOTSTRAP / f"{stamp}-{secrets.token_hex(4)}")
        lines = bootstrap_lines(groups, absent)
        files = write_bootstrap(bootstrap_dir, lines)
    identity = new_checkpoint_identity(
        settings,
        batch_id_base=base,
        bootstrap_dir=None if bootstrap_dir is None else str(bootstrap_dir),
        rebuilt_from={
            "reason": reason,
            "at": stamp,
            "replaced_checkpoint": None if replaced is None else str(replaced),
            "replaced_app_id": lineage[-1] if lineage else None,
            # Every earlier app id of this warehouse, oldest first (their transactions mark
            # the batches written before this checkpoint, e.g. for time travel).
            "previous_app_ids": lineage,
            "log_rows": rows.num_rows,
        },
    )
    if base > 0:
        mark_complete(paths.tables, identity.app_id, base - 1, owner)
    seconds["write"] = time.perf_counter() - started
    return RebuildReport(
        identity,
        reason,
        replaced,
        log_rows=rows.num_rows,
        records=sum(len(records) for records in groups.values()),
        groups=len(groups),
        absent_groups=len(absent),
        bootstrap_files=files,
        inbox_files_cleaned=cleaned,
        seconds=seconds,
    )


def read_log(tables_dir: Path) -> pa.Table:
    """Every row of ``consumer_offsets`` (the columns a load needs), per offsets partition in
    offset order; an empty table when there is no log."""
    path = Path(tables_dir) / schema.CONSUMER_OFFSETS
    log_schema = schema.CONSUMER_OFFSETS_SCHEMA
    wanted = pa.schema([log_schema.field(name) for name in _LOG_COLUMNS])
    if not DeltaTable.is_deltatable(str(path)):
        return wanted.empty_table()
    rows = read_table(path, columns=_LOG_COLUMNS)
    rows = rows.select(_LOG_COLUMNS).cast(wanted)
    return rows.sort_by([("offsets_partition", "ascending"), ("offset", "ascending")])


def check_partitions(rows: pa.Table, num_partitions: int) -> None:
    """Refuse a log written with another ``offsets.topic.num.partitions``: every group's
    records must sit in ``partitionFor(group) = abs(hash) % num_partitions``."""
    pairs = rows.group_by(["group_id", "offsets_partition"]).aggregate([])
    groups = pairs.column("group_id").to_pylist()
    found = pairs.column("offsets_partition").to_pylist()
    wrong = [
        (g, p) for g, p in zip(groups, found, strict=True) if partition_for(g, num_partitions) != p
    ]
    if not wrong:
        return
    fits = next(
        (
            n
            for n in range(1, 1001)
            if all(partition_for(g, n) == p for g, p in zip(groups, found, strict=True))
        ),
        None,
    )
    hint = f" (it fits offsets.topic.num.partitions={fits})" if fits is not None else ""
    example = ", ".join(f"{g!r} in {p}" for g, p in wrong[:3])
    raise RebuildError(
        f"the log was not written with offsets.topic.num.partitions={num_partitions}{hint}: "
        f"{len(wrong)} groups sit in other partitions ({example}). Kafka cannot change the "
        f"number of __consumer_offsets partitions either; run with the log's number"
    )


def compact(rows: pa.Table) -> dict[str, list[tuple[bytes, bytes]]]:
    """What a load needs (:func:`coordinator.log.cleaner.loaded`): per offsets partition, the
    last record of every key, and no key whose last record is a tombstone. Returns each
    group's surviving (key, value) pairs in log order, groups in id order. ``rows`` must be in
    log order (:func:`read_log`)."""
    if rows.num_rows == 0:
        return {}
    keep = loaded(
        rows.column("offsets_partition").to_pylist(),
        rows.column("key").to_pylist(),
        pc.is_null(rows.column("value")).to_pylist(),
    )
    kept = rows.filter(pa.array(keep, pa.bool_()))
    groups: dict[str, list[tuple[bytes, bytes]]] = {}
    for group_id, key, value in zip(
        kept.column("group_id").to_pylist(),
        kept.column("key").to_pylist(),
        kept.column("value").to_pylist(),
        strict=True,
    ):
        groups.setdefault(group_id, []).append((key, value))
    return dict(sorted(groups.items()))


def bootstrap_lines(
    groups: dict[str, list[tuple[bytes, bytes]]], absent: Iterable[str] = ()
) -> Iterator[str]:
    """One load line per group (its compacted records), then an empty one per absent group."""
    for group_id, records in groups.items():
        yield load_line(group_id, records)
    for group_id in absent:
        yield load_line(group_id, [])


def write_bootstrap(directory: Path, lines: Iterable[str]) -> list[Path]:
    """The lines as ``part-NNNNN.jsonl`` files (each written under a hidden name, then renamed,
    as inbox files are), at most :data:`GROUPS_PER_FILE` lines or about
    :data:`BYTES_PER_FILE` each."""
    directory.mkdir(parents=True)
    files: list[Path] = []
    batch: list[str] = []
    size = 0

    def flush() -> None:
        nonlocal size
        path = directory / f"part-{len(files):05d}.jsonl"
        tmp = directory / f".{path.name}.tmp"
        tmp.write_text("".join(line + "\n" for line in batch), encoding="utf-8")
        tmp.rename(path)
        files.append(path)
        batch.clear()
        size = 0

    for line in lines:
        batch.append(line)
        size += len(line) + 1
        if len(batch) >= GROUPS_PER_FILE or size >= BYTES_PER_FILE:
            flush()
    if batch:
        flush()
    return files


def next_batch_id(tables_dir: Path, old: CheckpointIdentity | None = None) -> int:
    """The first batch id of a new checkpoint: above every batch id in any table, and above
    the old checkpoint's last complete batch (0 for an empty warehouse)."""
    highest = -1
    for name in schema.TABLES:
        path = Path(tables_dir) / name
        if DeltaTable.is_deltatable(str(path)):
            highest = max(highest, _max_batch_id(DeltaTable(str(path))))
    if old is not None:
        complete = last_complete_batch(Path(tables_dir), old.app_id)
        highest = max(highest, old.batch_id_base - 1, -1 if complete is None else complete)
    return highest + 1


def mark_complete(
    tables_dir: Path, app_id: str, batch_id: int, owner: Ownership | None = None
) -> None:
    """Mark ``batch_id`` complete for ``app_id``: an empty commit to ``responses`` (the sink's
    completion marker) carrying the app transaction, fenced with ``owner``'s epoch. Opening
    the sink creates the tables a warehouse lacks."""
    DeltaSink(Path(tables_dir), app_id, ownership=owner)
    responses = DeltaTable(str(Path(tables_dir) / schema.RESPONSES))
    if owner is not None:
        owner.fence_table(responses)
    write_deltalake(
        responses,
        schema.RESPONSES_SCHEMA.empty_table(),
        mode="append",
        commit_properties=CommitProperties(
            app_transactions=[Transaction(app_id, batch_id)],
            custom_metadata=None if owner is None else epoch_commit_metadata(owner.epoch),
        ),
    )


def clean_answered_inbox_files(old_checkpoint: Path, settings: Settings) -> int:
    """Archive (or delete, as ``job.clean.source`` says) the inbox files that the old
    checkpoint's committed batches read: a new checkpoint would read them again. The job's
    inbox source names them by its committed offset (the sequenced files numbered up to it);
    a checkpoint of an older release, which read the inbox with Spark's file source, by its
    file source log. With ``job.clean.source=off`` they stay, and are read again (logged).
    Returns how many."""
    paths = settings.job.paths
    offset = inbox_source.committed_offset(old_checkpoint)
    if offset is not None:
        inbox = inbox_source.SequencedInbox(paths.inbox, paths.archive, settings.job.clean_source)
        if settings.job.clean_source == "off":
            left = [p for p in inbox.sequenced.glob("*") if _sequenced_upto(p, offset.seq)]
            if left:
                log.warning(
                    "%d inbox files were answered under the old checkpoint and will be read "
                    "again (job.clean.source=off)",
                    len(left),
                )
            return 0
        return inbox.release(offset.seq)
    committed = _committed_batches(old_checkpoint)
    if committed is None:
        return 0
    read: list[Path] = []
    for entry in _source_entries(old_checkpoint):
        if entry.get("batchId", committed + 1) > committed:
            continue
        path = Path(_local_path(str(entry.get("path", ""))))
        if path.parent == paths.inbox and path.is_file():
            read.append(path)
    if not read:
        return 0
    mode = settings.job.clean_source
    if mode == "off":
        log.warning(
            "%d inbox files were answered under the old checkpoint and will be read again "
            "(job.clean.source=off)",
            len(read),
        )
        return 0
    if mode == "archive":
        paths.archive.mkdir(parents=True, exist_ok=True)
    for path in read:
        if mode == "archive":
            shutil.move(str(path), str(paths.archive / path.name))
        else:
            path.unlink()
    return len(read)


def _sequenced_upto(path: Path, seq: int) -> bool:
    parsed = inbox_source.parse_sequenced(path.name)
    return parsed is not None and parsed[0] <= seq


def reads_inbox_with_file_source(checkpoint: Path) -> bool:
    """Whether a checkpoint of an older release read the inbox with Spark's text file source
    (its offsets are file source log positions, which the inbox source cannot take up)."""
    if not has_spark_state(checkpoint):
        return False
    offsets = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    newest = max(offsets, key=lambda p: int(p.name), default=None)
    if newest is None:
        return False
    lines = newest.read_text(encoding="utf-8").splitlines()[2:]
    # The inbox was the query's first source; a bootstrap file source may follow it.
    return bool(lines) and inbox_source.SEQ not in lines[0] and "logOffset" in lines[0]


# --- plumbing ---------------------------------------------------------------------------------


def _check_directories(settings: Settings) -> None:
    paths = settings.job.paths
    bootstrap = paths.root / BOOTSTRAP
    for inner, outer in ((bootstrap, paths.inbox), (paths.inbox, bootstrap)):
        if inner == outer or outer in inner.parents:
            raise RebuildError(
                f"the inbox {paths.inbox} and the bootstrap directory {bootstrap} must not "
                f"contain one another: inbox lines are requests, bootstrap lines are state"
            )


def _max_batch_id(table: DeltaTable) -> int:
    """The highest ``batch_id`` in a table (-1 when empty), from the files' statistics when
    every file has them, else from the column."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return -1
    column = "max.batch_id"
    if column in actions.column_names and actions.column(column).null_count == 0:
        value = pc.max(actions.column(column)).as_py()
    else:
        value = pc.max(read_table(table, columns=["batch_id"]).column("batch_id")).as_py()
    return -1 if value is None else int(value)


def _state_group_ids(tables_dir: Path) -> set[str]:
    path = Path(tables_dir) / schema.GROUP_STATE
    if not DeltaTable.is_deltatable(str(path)):
        return set()
    column = read_table(path, columns=["group_id"]).column("group_id")
    return {str(g) for g in column.to_pylist()}


def _unused_rebuild(settings: Settings) -> bool:
    """Whether the checkpoint is a rebuild that no batch has used yet, made with the pinned
    choices asked for now: nothing was written at or after its first batch id."""
    path = identity_path(settings)
    if not path.exists() or "rebuilt_from" not in json.loads(path.read_text(encoding="utf-8")):
        return False
    identity = read_identity(path)
    wanted = (
        settings.job.state_key,
        settings.job.shards,
        settings.coordinator.offsets_topic_num_partitions,
        settings.job.state_store,
    )
    pinned = (
        identity.state_key,
        identity.shards,
        identity.offsets_topic_num_partitions,
        identity.state_store,
    )
    return pinned == wanted and next_batch_id(settings.job.paths.tables) <= identity.batch_id_base


def _lineage(settings: Settings, old: CheckpointIdentity | None) -> list[str]:
    """The app ids that wrote this warehouse before, oldest first: the old checkpoint's own
    lineage and app id, or, when the checkpoint is lost, the newest app id in ``responses``."""
    if old is not None:
        stored = json.loads(identity_path(settings).read_text(encoding="utf-8"))
        earlier = (stored.get("rebuilt_from") or {}).get("previous_app_ids") or []
        return [*earlier, old.app_id]
    newest = _newest_app_id(settings.job.paths.table(schema.RESPONSES))
    return [] if newest is None else [newest]


def _newest_app_id(table: Path) -> str | None:
    """The app id of the newest application transaction in a table's Delta log."""
    log_dir = table / "_delta_log"
    commits = sorted(log_dir.glob("*.json"), reverse=True) if log_dir.is_dir() else []
    for commit in commits:
        for line in commit.read_text(encoding="utf-8").splitlines():
            action = json.loads(line)
            if "txn" in action:
                return str(action["txn"]["appId"])
    return None


def _free_name(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _committed_batches(checkpoint: Path) -> int | None:
    """The highest batch Spark committed in a checkpoint (None: none)."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return None
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()]
    return max(ids) if ids else None


def _source_entries(checkpoint: Path) -> Iterator[dict[str, Any]]:
    """The file entries of a checkpoint's file source logs (``sources/<n>/<batch>`` and
    ``.compact`` files: a version line, then one JSON object per file)."""
    sources = checkpoint / "sources"
    if not sources.is_dir():
        return
    for source in sorted(sources.iterdir()):
        if not source.is_dir():
            continue
        for batch in sorted(source.iterdir()):
            if batch.name.startswith("."):
                continue
            try:
                text = batch.read_text(encoding="utf-8")
            except (OSError, ValueError):  # not a log file of Spark's
                continue
            for line in text.splitlines()[1:]:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict):
                    yield entry


def _local_path(uri: str) -> str:
    return unquote(urlparse(uri).path) if uri.startswith("file:") else uri
