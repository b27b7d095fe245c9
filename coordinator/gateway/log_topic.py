"""``__consumer_offsets`` as a topic: the log's Delta table served to Fetch and ListOffsets.

The ``consumer_offsets`` Delta table holds one row per log record with its offsets partition,
its offset (contiguous per partition, sparse once compacted), its timestamp and the
byte-exact Kafka record key and value (a tombstone's value is null). :class:`LogTopic` keeps every partition's records in
memory, (offset, timestamp, key, value) in offset order, and follows the table incrementally:
when the table's version moves it reads only the data files added since (the files of
compactions, which rewrite rows already held, are skipped by their offset statistics, and any
row already held is dropped by its offset), never the whole table again. It looks at most every
``interval_s`` (and at once when the ``changed`` hint moves: the embedded back end's count of
log writes, so that a commit a client saw acknowledged is in the next Fetch). The same code
follows a table written by the embedded back end or by the Spark job.

Without a table (no warehouse, or a table not created yet) every partition is empty: log start
and end offset 0.

Offsets may be sparse: the sink's retention compacts the table as Kafka's log cleaner compacts
``__consumer_offsets`` (:mod:`coordinator.log.cleaner`), keeping the survivors' offsets and the
last record of every partition. As in Kafka, the log start stays 0 (the cleaner never moves
it), the end offset is the last offset + 1, and a fetch from an offset that was cleaned away
returns the records after it. Records the cleaner removes after they were read stay served
until the table is read whole again (a consumer of a compacted topic may see either).

The answers follow Kafka's broker: ListOffsets' EARLIEST (-2) is the log start, LATEST (-1)
the end offset (last offset + 1), MAX_TIMESTAMP (-3) the record with the highest timestamp and
a timestamp the first record at or after it; Fetch returns one v2 record batch from the fetch
offset, as large as the partition's ``max_bytes`` (and what the response has left) allows but
at least one record for the first partition with data (Kafka's ``minOneMessage``),
``high_watermark = last_stable_offset`` = the end offset, and ``OFFSET_OUT_OF_RANGE`` outside
``[log start, end]`` (with -1 offsets, as Kafka answers a failed read).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from coordinator.gateway.record_batch import LogRecord, encode_records

log = logging.getLogger(__name__)

LOG_TOPIC = "__consumer_offsets"
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
#: How often the table's version is looked at, at most (unless the hint moves or on demand).
DEFAULT_INTERVAL_S = 0.15

_COLUMNS = ["offset", "timestamp_ms", "key", "value"]
_PARTITION = "offsets_partition"


@dataclass
class _Scan:
    """What one look at the table found: rows per partition, and whether they replace all."""

    rows: dict[int, list[LogRecord]] = field(default_factory=dict)
    replace: bool = False
    version: int | None = None


class LogTopic:
    """The ``__consumer_offsets`` partitions, fed from a ``consumer_offsets`` Delta table.

    Reads of the table run in a worker thread, one at a time; the records they find are added
    on the event loop's thread, which also serves every read."""

    def __init__(
        self,
        table: str | Path | None,
        partitions: int,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        changed: Callable[[], object] | None = None,
    ) -> None:
        self.path = None if table is None else Path(table)
        self.partitions = partitions
        self.interval_s = interval_s
        self._changed = changed
        self._start = [0] * partitions
        self._end = [0] * partitions
        self._records: list[list[LogRecord]] = [[] for _ in range(partitions)]
        self._table: Any = None  # a deltalake.DeltaTable once the table exists
        self._seen: set[str] = set()
        self._reload = False
        self._checked = float("-inf")
        self._last_hint: object = None
        self._lock: asyncio.Lock | None = None
        self.version: int | None = None
        #: How many times the table was read whole, and how many data files were read since.
        self.full_reads = 0
        self.files_read = 0

    # --- what the partitions hold --------------------------------------------------------------

    def has(self, partition: int) -> bool:
        return 0 <= partition < self.partitions

    def log_start(self, partition: int) -> int:
        return self._start[partition]

    def end_offset(self, partition: int) -> int:
        return self._end[partition]

    def records(self, partition: int, offset: int = 0) -> list[LogRecord]:
        """The records of ``partition`` from ``offset`` on (a copy)."""
        return self._records[partition][self._index(partition, offset) :]

    def iter_records(self, partition: int, offset: int = 0) -> Iterator[LogRecord]:
        """The records of ``partition`` from ``offset`` on, without copying the list."""
        held = self._records[partition]
        return itertools.islice(held, self._index(partition, offset), None)

    def _index(self, partition: int, offset: int) -> int:
        """Where the first record at or after ``offset`` is held (offsets may be sparse)."""
        return bisect.bisect_left(self._records[partition], offset, key=lambda r: r.offset)

    # --- the answers ---------------------------------------------------------------------------

    def list_offset(self, partition: int, timestamp: int) -> dict[str, Any]:
        """A ListOffsets partition answer (``partition_index``, ``error_code``, ``timestamp``,
        ``offset``, ``leader_epoch``) for the timestamp asked."""
        answer: dict[str, Any] = {
            "partition_index": partition,
            "error_code": 0,
            "timestamp": -1,
            "offset": -1,
            "leader_epoch": 0,
        }
        if not self.has(partition):
            answer["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
        elif timestamp == EARLIEST_TIMESTAMP:
            answer["offset"] = self.log_start(partition)
        elif timestamp == LATEST_TIMESTAMP or timestamp < MAX_TIMESTAMP:
            answer["offset"] = self.end_offset(partition)  # (-4, -5: no tiered storage here)
        elif timestamp == MAX_TIMESTAMP:
            best = max(self.iter_records(partition), key=lambda r: r.timestamp, default=None)
            if best is not None:  # the first record of the highest timestamp
                answer.update(offset=best.offset, timestamp=best.timestamp)
        else:
            hit = next((r for r in self.iter_records(partition) if r.timestamp >= timestamp), None)
            if hit is not None:
                answer.update(offset=hit.offset, timestamp=hit.timestamp)
        return answer

    def fetch_partition(
        self, partition: int, fetch_offset: int, max_bytes: int, min_one: bool = True
    ) -> dict[str, Any]:
        """A Fetch partition answer: the records from ``fetch_offset`` as one batch of at most
        ``max_bytes``, or of one record whatever its size when ``min_one`` (Kafka's
        ``minOneMessage``: the first partition of a response with data)."""
        if not self.has(partition):
            return _failed(partition, UNKNOWN_TOPIC_OR_PARTITION)
        start, end = self.log_start(partition), self.end_offset(partition)
        if not start <= fetch_offset <= end:
            return _failed(partition, OFFSET_OUT_OF_RANGE)
        data, _ = encode_records(self.iter_records(partition, fetch_offset), max(max_bytes, 0))
        if not min_one and len(data) > max_bytes:
            data = b""
        return {
            "partition_index": partition,
            "error_code": 0,
            "high_watermark": end,
            "last_stable_offset": end,
            "log_start_offset": start,
            "aborted_transactions": [],
            "preferred_read_replica": -1,
            "records": data,
        }

    # --- following the table -------------------------------------------------------------------

    async def refresh(self, force: bool = False) -> None:
        """Take in what the table gained, if its version moved: when ``force``d, when the
        ``changed`` hint moved, or when the last look is older than ``interval_s``."""
        if self.path is None:
            return
        asked = time.monotonic()
        if not force and not self._due(asked):
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._checked >= asked or (not force and not self._due(time.monotonic())):
                return  # another look began after this one was asked for
            hint = self._changed() if self._changed is not None else None
            self._checked = time.monotonic()
            ends = [self.end_offset(p) for p in range(self.partitions)]
            try:
                scan = await asyncio.to_thread(self._scan, ends)
            except Exception:
                log.exception("reading %s failed; it is read whole next time", self.path)
                self._table, self._reload = None, True
                return
            self._last_hint = hint
            if scan is not None:
                self._apply(scan)

    def refresh_now(self) -> None:
        """:meth:`refresh` without an event loop (tools and tests): look at the table now."""
        if self.path is None:
            return
        self._checked = time.monotonic()
        scan = self._scan([self.end_offset(p) for p in range(self.partitions)])
        if scan is not None:
            self._apply(scan)

    def _due(self, now: float) -> bool:
        if self._changed is not None and self._changed() != self._last_hint:
            return True
        return now - self._checked >= self.interval_s

    def _scan(self, ends: list[int]) -> _Scan | None:
        """In a worker thread: the rows the table gained since the last look (None: nothing)."""
        from deltalake import DeltaTable

        assert self.path is not None
        if self._table is None or self._reload:
            if not DeltaTable.is_deltatable(str(self.path)):
                return None
            self._table = DeltaTable(str(self.path))
            return self._read_whole()
        before = self._table.version()
        self._table.update_incremental()
        version = self._table.version()
        if version == before:
            return None
        if version < before:
            return self._read_whole()  # the table was replaced
        return self._read_added(ends, version)

    def _read_whole(self) -> _Scan:
        import pyarrow as pa

        from coordinator.stream.delta_read import read_table

        table = self._table
        actions = pa.table(table.get_add_actions(flatten=True))
        self._seen = set(actions.column("path").to_pylist())
        rows = read_table(table, columns=[_PARTITION, *_COLUMNS])
        self._reload = False
        self.full_reads += 1
        scan = _Scan(replace=True, version=table.version())
        self._collect(scan, rows.column(_PARTITION).to_pylist(), rows)
        return scan

    def _read_added(self, ends: list[int], version: int) -> _Scan:
        import pyarrow as pa
        import pyarrow.parquet as pq

        actions = pa.table(self._table.get_add_actions(flatten=True))
        paths = actions.column("path").to_pylist()
        names = set(actions.column_names)
        partitions = (
            actions.column(f"partition.{_PARTITION}").to_pylist()
            if f"partition.{_PARTITION}" in names
            else [None] * len(paths)
        )
        highest = (
            actions.column("max.offset").to_pylist()
            if "max.offset" in names
            else [None] * len(paths)
        )
        scan = _Scan(version=version)
        for path, partition, top in zip(paths, partitions, highest, strict=True):
            if path in self._seen:
                continue
            if (
                partition is not None
                and top is not None
                and 0 <= partition < self.partitions
                and top < ends[partition]
            ):
                continue  # a rewrite (compaction) of rows already held
            columns = _COLUMNS if partition is not None else [_PARTITION, *_COLUMNS]
            rows = pq.read_table(self._file(path), columns=columns)
            self.files_read += 1
            owners = (
                [partition] * rows.num_rows
                if partition is not None
                else rows.column(_PARTITION).to_pylist()
            )
            self._collect(scan, owners, rows)
        self._seen = set(paths)
        return scan

    def _file(self, path: str) -> str:
        assert self.path is not None
        parsed = urlparse(path)
        if parsed.scheme == "file":
            return unquote(parsed.path)
        if parsed.scheme:
            raise ValueError(f"a data file outside the local file system: {path}")
        if path.startswith("/"):
            return unquote(path)
        return str(self.path / unquote(path))

    def _collect(self, scan: _Scan, owners: Iterable[Any], rows: Any) -> None:
        columns = [rows.column(name).to_pylist() for name in _COLUMNS]
        for owner, offset, timestamp, key, value in zip(owners, *columns, strict=True):
            if owner is None or offset is None:
                continue
            record = LogRecord(
                int(offset),
                -1 if timestamp is None else int(timestamp),
                None if key is None else bytes(key),
                None if value is None else bytes(value),
            )
            scan.rows.setdefault(int(owner), []).append(record)

    def _apply(self, scan: _Scan) -> None:
        """On the event loop's thread: add the rows found (offset order, no duplicates)."""
        if scan.replace:
            self._start = [0] * self.partitions
            self._end = [0] * self.partitions
            self._records = [[] for _ in range(self.partitions)]
        for partition, rows in scan.rows.items():
            if not self.has(partition):
                log.warning(
                    "%s has records in offsets partition %d, beyond the %d partitions "
                    "configured (offsets.topic.num.partitions): not served",
                    self.path,
                    partition,
                    self.partitions,
                )
                continue
            rows.sort(key=lambda r: r.offset)
            held = self._records[partition]
            for row in rows:
                if row.offset < self._end[partition]:
                    continue  # held already (or a rewrite of what was held)
                held.append(row)
                self._end[partition] = row.offset + 1
        self.version = scan.version


def _failed(partition: int, error_code: int) -> dict[str, Any]:
    """A failed partition read, as Kafka answers it: no records and unknown (-1) offsets."""
    return {
        "partition_index": partition,
        "error_code": error_code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": [],
        "preferred_read_replica": -1,
        "records": b"",
    }


def for_backend(backend: object) -> LogTopic:
    """The log topic of a gateway back end: the ``consumer_offsets`` table of its warehouse (the
    embedded back end's own log, or the Spark job's), ``offsets.topic.num.partitions`` from its
    coordinator config; empty partitions when it has no warehouse. The embedded back end's count
    of log writes is the hint that the table moved."""
    from coordinator.config import CoordinatorConfig

    config = getattr(backend, "config", None)
    if not isinstance(config, CoordinatorConfig):
        config = CoordinatorConfig()
    warehouse = getattr(backend, "warehouse", None)
    table = None
    if warehouse is not None:
        from coordinator.stream.schema import CONSUMER_OFFSETS, Warehouse

        table = Warehouse.at(warehouse).table(CONSUMER_OFFSETS)
    changed = None
    if hasattr(backend, "batches_written"):

        def changed() -> object:
            return getattr(backend, "batches_written", None)

    return LogTopic(table, config.offsets_topic_num_partitions, changed=changed)
