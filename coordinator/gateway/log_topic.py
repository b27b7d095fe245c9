"""``__consumer_offsets`` as a topic: the log's Delta table served to Fetch and ListOffsets.

The ``consumer_offsets`` Delta table holds one row per log record with its offsets partition,
its offset, its timestamp and the byte-exact Kafka record key and value (a tombstone's value is
null). :class:`LogTopic` does not hold the log: it holds an index per partition, one
:class:`Segment` per live data file (its path, first and last offset, highest timestamp and
row count), built from the Delta add actions' statistics of the table's current version (a
file written without them is indexed once, by reading its offset and timestamp columns). Fetch
and ListOffsets read only the files a request needs, through a small cache of decoded files
bounded in bytes (``cache_bytes``).

When the table's version moves, the index is rebuilt from that version's add actions (files
indexed before keep their entries): files that Delta compaction rewrote, that the log's
compaction thinned or that vacuum removed simply drop out. A file gone under a read (vacuumed
between a look and a Fetch) makes the index be rebuilt at once and the read retried. The table
is looked at (its Delta log only) at most every ``interval_s``, and at once when the
``changed`` hint moves: the embedded back end's count of log writes, so that a commit a client
saw acknowledged is in the next Fetch. The same code follows a table written by the embedded
back end or by the Spark job.

Without a table (no warehouse, or a table not created yet) every partition is empty: log start
and end offset 0.

Offsets may be sparse: the sink's retention compacts the table as Kafka's log cleaner compacts
``__consumer_offsets`` (:mod:`coordinator.log.cleaner`), keeping the survivors' offsets and the
last record of every partition. As in Kafka, the log start stays 0 (the cleaner never moves
it), the end offset is the last offset + 1, and a fetch from an offset that was cleaned away
returns the records after it.

The answers follow Kafka's broker: ListOffsets' EARLIEST (-2) is the log start, LATEST (-1) the end offset (last offset + 1), MAX_TIMESTAMP (-3) the record with
the highest timestamp and a timestamp the first record at or after it; Fetch returns one v2
record batch from the fetch offset, as large as the partition's ``max_bytes`` (and what the
response has left) allows but at least one record for the first partition with data (Kafka's
``minOneMessage``), ``high_watermark = last_stable_offset`` = the end offset, and
``OFFSET_OUT_OF_RANGE`` outside ``[log start, end]`` (with -1 offsets, as Kafka answers a
failed read).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from coordinator.gateway.record_batch import (
    MAGIC,
    LogRecord,
    encode_message_set,
    encode_records,
)

log = logging.getLogger(__name__)

LOG_TOPIC = "__consumer_offsets"
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
#: How often the table's version is looked at, at most (unless the hint moves or on demand).
DEFAULT_INTERVAL_S = 0.15
#: Decoded files kept for the next reads (the tail a consumer follows): at most this many bytes
#: of keys and values, counting :data:`RECORD_OVERHEAD` per record.
DEFAULT_CACHE_BYTES = 32 * 2**20
RECORD_OVERHEAD = 100

_COLUMNS = ["offset", "timestamp_ms", "key", "value"]
_PARTITION = "offsets_partition"


@dataclass(frozen=True, slots=True)
class Segment:
    """The records of one partition in one data file: what the index knows without reading
    the file."""

    path: str
    partition: int
    first: int
    last: int
    max_timestamp: int
    rows: int
    #: The file holds the partition column (an unpartitioned table): its rows are filtered.
    mixed: bool = False


@dataclass
class _Index:
    """Every partition's segments (by first offset), from one version of the table."""

    segments: list[list[Segment]]
    version: int | None
    #: path -> its segments, reused for the files the next version still lists.
    by_path: dict[str, list[Segment]]


class _FileCache:
    """Decoded records per (path, partition), least recently used dropped past ``max_bytes``;
    a file larger than that is read each time and never held."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._held: OrderedDict[tuple[str, int], tuple[list[LogRecord], int]] = OrderedDict()

    def get(self, key: tuple[str, int]) -> list[LogRecord] | None:
        found = self._held.get(key)
        if found is None:
            return None
        self._held.move_to_end(key)
        return found[0]

    def put(self, key: tuple[str, int], records: list[LogRecord]) -> None:
        size = sum(RECORD_OVERHEAD + len(r.key or b"") + len(r.value or b"") for r in records)
        if size > self.max_bytes or key in self._held:
            return
        self._held[key] = (records, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, dropped) = self._held.popitem(last=False)
            self.bytes -= dropped

    def keep_only(self, paths: set[str]) -> None:
        """Drop the files no longer in the table."""
        for key in [k for k in self._held if k[0] not in paths]:
            self.bytes -= self._held.pop(key)[1]

    def __len__(self) -> int:
        return len(self._held)


class LogTopic:
    """The ``__consumer_offsets`` partitions, served from a ``consumer_offsets`` Delta table.

    Looks at the table in a worker thread, one look at a time; the index it builds is swapped
    in on the event loop's thread, which also serves every read."""

    def __init__(
        self,
        table: str | Path | None,
        partitions: int,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        changed: Callable[[], object] | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.path = None if table is None else Path(table)
        self.partitions = partitions
        self.interval_s = interval_s
        self._changed = changed
        self._index = _Index([[] for _ in range(partitions)], None, {})
        self._cache = _FileCache(cache_bytes)
        self._table: Any = None  # a deltalake.DeltaTable once the table exists
        self._checked = float("-inf")
        self._last_hint: object = None
        self._lock: asyncio.Lock | None = None
        #: Looks taken on the loop's thread (:meth:`refresh_now`): a worker's look that began
        #: before one of them ended is older and is dropped.
        self._sync_looks = 0
        #: How many times the index was built from a version's add actions, and how many data
        #: files were read (to serve reads, or to index a file without statistics).
        self.index_builds = 0
        self.files_read = 0

    @property
    def version(self) -> int | None:
        """The table version the index describes (None: no table yet)."""
        return self._index.version

    @property
    def cached_bytes(self) -> int:
        """What the cache of decoded files holds (bytes, as it counts them)."""
        return self._cache.bytes

    # --- what the partitions hold --------------------------------------------------------------

    def has(self, partition: int) -> bool:
        return 0 <= partition < self.partitions

    def segments(self, partition: int) -> list[Segment]:
        """The partition's files (its part of each), by first offset."""
        return list(self._index.segments[partition])

    def log_start(self, partition: int) -> int:
        """0: as in Kafka, compaction never moves the log start (nothing else removes records
        from the log); a Fetch from a cleaned-away offset starts at the next survivor."""
        return 0

    def end_offset(self, partition: int) -> int:
        held = self._index.segments[partition]
        return max(s.last for s in held) + 1 if held else 0

    def records(self, partition: int, offset: int = 0) -> list[LogRecord]:
        """The records of ``partition`` from ``offset`` on (reads every file they are in)."""
        records: list[LogRecord] = self._retrying(
            lambda: list(self.iter_records(partition, offset))
        )
        return records

    def iter_records(self, partition: int, offset: int = 0) -> Iterator[LogRecord]:
        """The records of ``partition`` from ``offset`` on, in offset order, reading each file
        only when the iteration gets to it."""
        for group in self._groups(partition, offset):
            records = self._read_group(group)
            start = bisect.bisect_left(records, offset, key=lambda r: r.offset)
            yield from records[start:]

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
        else:
            if timestamp == MAX_TIMESTAMP:  # the first record of the highest timestamp
                hit = self._retrying(lambda: self._max_timestamp(partition))
            else:
                hit = self._retrying(lambda: self._first_at(partition, timestamp))
            if hit is not None:
                answer.update(offset=hit.offset, timestamp=hit.timestamp)
        return answer

    def offset_times(self, partition: int) -> list[tuple[int, int]]:
        """(start offset, last modified) of each segment, oldest first, then (end offset, now)
        when the log holds anything: what Kafka 3.9's ``legacyFetchOffsetsBefore`` reads for
        ListOffsets v0. Each file of the partition stands for a segment, last modified at its
        highest timestamp; an empty log is one empty segment at the log start."""
        held = self._index.segments[partition]
        start = self.log_start(partition)
        if not held:
            return [(start, 0)]
        times = [(max(s.first, start), s.max_timestamp) for s in held]
        return [*times, (self.end_offset(partition), int(time.time() * 1000))]

    def fetch_partition(
        self,
        partition: int,
        fetch_offset: int,
        max_bytes: int,
        min_one: bool = True,
        magic: int = MAGIC,
    ) -> dict[str, Any]:
        """A Fetch partition answer: the records from ``fetch_offset`` as one batch of at most
        ``max_bytes``, or of one record whatever its size when ``min_one`` (Kafka's
        ``minOneMessage``: the first partition of a response with data). Reads only the files
        from the one holding ``fetch_offset`` (or the next record) to where the budget ends.
        For a ``magic`` below 2 (Fetch v0-v3) the records read are down-converted, as Kafka
        does, to a message set of that magic."""
        if not self.has(partition):
            return _failed(partition, UNKNOWN_TOPIC_OR_PARTITION)
        start, end = self.log_start(partition), self.end_offset(partition)
        if not start <= fetch_offset <= end:
            return _failed(partition, OFFSET_OUT_OF_RANGE)

        def read() -> bytes:
            taken: list[LogRecord] = []

            def records() -> Iterator[LogRecord]:
                for record in self.iter_records(partition, fetch_offset):
                    taken.append(record)
                    yield record

            data, count = encode_records(records(), max(max_bytes, 0))
            if not min_one and len(data) > max_bytes:
                return b""
            return data if magic == MAGIC else encode_message_set(taken[:count], magic)

        data: bytes = self._retrying(read)
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

    def _max_timestamp(self, partition: int) -> LogRecord | None:
        held = self._index.segments[partition]
        if not held:
            return None
        best = max(s.max_timestamp for s in held)
        for group in self._groups(partition, 0):
            if max(s.max_timestamp for s in group) == best:  # only these files are read
                for record in self._read_group(group):
                    if record.timestamp == best:
                        return record
        return None

    def _first_at(self, partition: int, timestamp: int) -> LogRecord | None:
        for group in self._groups(partition, 0):
            if max(s.max_timestamp for s in group) < timestamp:
                continue  # no record of these files is that late: not read
            for record in self._read_group(group):
                if record.timestamp >= timestamp:
                    return record
        return None

    def _retrying(self, read: Callable[[], Any]) -> Any:
        """``read()``; when a file it needs is gone (vacuumed since the index was built), the
        index is rebuilt from the table's current version and ``read()`` runs once more."""
        try:
            return read()
        except FileNotFoundError as gone:
            log.info("%s: %s; looking at the table again", self.path, gone)
            self.refresh_now()
            return read()

    # --- reading files ---------------------------------------------------------------------------

    def _groups(self, partition: int, offset: int) -> Iterator[list[Segment]]:
        """The partition's segments that end at or after ``offset``, in offset order; segments
        whose ranges overlap come together (they are read and merged as one)."""
        held = [s for s in self._index.segments[partition] if s.last >= offset]
        i = 0
        while i < len(held):
            group = [held[i]]
            top = held[i].last
            i += 1
            while i < len(held) and held[i].first <= top:
                group.append(held[i])
                top = max(top, held[i].last)
                i += 1
            yield group

    def _read_group(self, group: Sequence[Segment]) -> list[LogRecord]:
        if len(group) == 1:
            return self._read(group[0])
        merged: dict[int, LogRecord] = {}
        for segment in group:
            for record in self._read(segment):
                merged.setdefault(record.offset, record)
        return [merged[o] for o in sorted(merged)]

    def _read(self, segment: Segment) -> list[LogRecord]:
        """The segment's records in offset order: from the cache, else from its file."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        key = (segment.path, segment.partition)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        columns = [_PARTITION, *_COLUMNS] if segment.mixed else _COLUMNS
        rows = pq.read_table(self._file(segment.path), columns=columns)
        self.files_read += 1
        if segment.mixed:
            rows = rows.filter(pc.equal(rows.column(_PARTITION), segment.partition))
        rows = rows.sort_by("offset")
        records = [
            LogRecord(
                int(offset),
                -1 if timestamp is None else int(timestamp),
                None if k is None else bytes(k),
                None if v is None else bytes(v),
            )
            for offset, timestamp, k, v in zip(
                *(rows.column(c).to_pylist() for c in _COLUMNS), strict=True
            )
            if offset is not None
        ]
        self._cache.put(key, records)
        return records

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

    # --- following the table -------------------------------------------------------------------

    async def refresh(self, force: bool = False) -> None:
        """Take in the table's newest version, if it moved: when ``force``d, when the
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
            looks = self._sync_looks
            try:
                index = await asyncio.to_thread(self._scan)
            except Exception:
                log.exception("reading %s failed; it is opened afresh next time", self.path)
                self._table = None
                return
            self._last_hint = hint
            if index is not None and looks == self._sync_looks:  # else a newer one is in
                self._apply(index)

    def refresh_now(self) -> None:
        """:meth:`refresh` without an event loop (tools, tests, and a read that met a removed
        file): look at the table now."""
        from deltalake import DeltaTable

        if self.path is None or not DeltaTable.is_deltatable(str(self.path)):
            return
        self._checked = time.monotonic()
        self._sync_looks += 1
        # A table object of its own: a look in the worker thread may be using the shared one.
        table = DeltaTable(str(self.path))
        if table.version() != self._index.version:
            self._apply(self._build(table))

    def _due(self, now: float) -> bool:
        if self._changed is not None and self._changed() != self._last_hint:
            return True
        return now - self._checked >= self.interval_s

    def _scan(self) -> _Index | None:
        """In a worker thread: the index of the table's newest version (None: not moved)."""
        from deltalake import DeltaTable

        assert self.path is not None
        if self._table is None:
            if not DeltaTable.is_deltatable(str(self.path)):
                return None
            self._table = DeltaTable(str(self.path))
        else:
            self._table.update_incremental()
        if self._table.version() == self._index.version:
            return None
        return self._build(self._table)

    def _build(self, table: Any) -> _Index:
        """The segments of the add actions of ``table``'s loaded version: a file indexed
        before keeps its segments; a new one is indexed from its statistics (min/max offset,
        max timestamp, rows), or from its columns when it has none."""
        import pyarrow as pa

        version = table.version()
        actions = pa.table(table.get_add_actions(flatten=True))
        names = set(actions.column_names)
        paths = actions.column("path").to_pylist()

        def column(name: str) -> list[Any]:
            return actions.column(name).to_pylist() if name in names else [None] * len(paths)

        owners = column(f"partition.{_PARTITION}")
        known = self._index.by_path
        by_path: dict[str, list[Segment]] = {}
        for path, owner, low, high, top, rows in zip(
            paths,
            owners,
            column("min.offset"),
            column("max.offset"),
            column("max.timestamp_ms"),
            column("num_records"),
            strict=True,
        ):
            if path in known:
                by_path[path] = known[path]
            elif owner is not None and low is not None and high is not None:
                latest = -1 if top is None else int(top)
                by_path[path] = [
                    Segment(path, int(owner), int(low), int(high), latest, int(rows or 0))
                ]
            else:
                by_path[path] = self._index_file(path, owner)
        segments: list[list[Segment]] = [[] for _ in range(self.partitions)]
        for found in by_path.values():
            for segment in found:
                if self.has(segment.partition):
                    segments[segment.partition].append(segment)
                else:
                    log.warning(
                        "%s has records in offsets partition %d, beyond the %d partitions "
                        "configured (offsets.topic.num.partitions): not served",
                        self.path,
                        segment.partition,
                        self.partitions,
                    )
        for held in segments:
            held.sort(key=lambda s: (s.first, s.last))
        self.index_builds += 1
        return _Index(segments, version, by_path)

    def _index_file(self, path: str, owner: Any) -> list[Segment]:
        """Segments of a file without statistics (or of an unpartitioned table), from its
        partition, offset and timestamp columns."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = (
            ["offset", "timestamp_ms"]
            if owner is not None
            else [_PARTITION, "offset", "timestamp_ms"]
        )
        rows = pq.read_table(self._file(path), columns=columns)
        self.files_read += 1
        if owner is not None:
            rows = rows.append_column(
                _PARTITION, pa.array([int(owner)] * rows.num_rows, pa.int32())
            )
        rows = rows.filter(rows.column("offset").is_valid())
        found = []
        for entry in (
            rows.group_by(_PARTITION)
            .aggregate(
                [("offset", "min"), ("offset", "max"), ("timestamp_ms", "max"), ("offset", "count")]
            )
            .to_pylist()
        ):
            if entry[_PARTITION] is None:
                continue
            top = entry["timestamp_ms_max"]
            found.append(
                Segment(
                    path,
                    int(entry[_PARTITION]),
                    int(entry["offset_min"]),
                    int(entry["offset_max"]),
                    -1 if top is None else int(top),
                    int(entry["offset_count"]),
                    mixed=owner is None,
                )
            )
        return found

    def _apply(self, index: _Index) -> None:
        """On the event loop's thread: serve from ``index`` from now on."""
        self._index = index
        self._cache.keep_only(set(index.by_path))


def legacy_offsets_before(
    offset_times: Sequence[tuple[int, int]], timestamp: int, max_num_offsets: int
) -> list[int]:
    """Kafka 3.9's ``UnifiedLog.legacyFetchOffsetsBefore`` (ListOffsets v0): from the (offset,
    last modified) of each segment, oldest first, the newest entry at or before ``timestamp``
    (all of them for LATEST, the first for EARLIEST) and up to ``max_num_offsets`` older ones,
    in descending order."""
    if timestamp == LATEST_TIMESTAMP:
        index = len(offset_times) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        index = 0
    else:
        index = len(offset_times) - 1
        while index >= 0 and offset_times[index][1] > timestamp:
            index -= 1
    count = min(max_num_offsets, index + 1)
    return sorted((offset_times[index - j][0] for j in range(count)), reverse=True)


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
