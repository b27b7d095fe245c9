"""The inbox as a streaming source whose checkpoint does not grow with the requests it reads.

Spark's built-in file source remembers every file it ever read in the checkpoint
(``sources/0``, about 120 bytes per file, rewritten whole at every compaction): at the
gateway's pace that is about a gigabyte a day. This source remembers one number instead.

**Sequencing on discovery.** Request files still arrive the one way they always did: written
under a hidden name (``.`` or ``_`` first) and renamed into ``<inbox>``. At every trigger the
source lists the inbox and renames each visible file into ``<inbox>/_sequenced/`` under
``<seq:016d>@<arrival_ms>-<name>``, where ``seq`` is a sequence the source assigns itself, in
the order it discovers files (arrival order, then name order, within one listing). The offset
is the last sequence number of a batch, so it is total and needs no file list: a file renamed
into the inbox late, with a name that sorts before everything already read (a hand-dropped
file, a client with a slow clock), simply gets the next number. The highest number ever
assigned is kept in ``_sequenced/.sequence`` (written before the renames), so numbers are never
reused, even after every file was archived or deleted, or by a new checkpoint on the same inbox.

**Arrival stamps.** ``arrival_ms`` is when the file reached the inbox: its modification time
(when its writer finished it; the rename into the inbox keeps it), clamped to the interval
between the previous listing and this one (the file was not there at the previous listing,
and is at this one; a clamp also keeps a writer's clock, or a back-dated file, from putting a
request earlier than that). The stamps therefore never decrease along the sequence. The
operator serves each request at its file's arrival (:func:`coordinator.step.step`), so a
request that waited for a slow batch is served at the time it arrived, not when it was read;
being in the name, the stamp is read again, unchanged, by a re-run of the batch (from
``_sequenced/`` or the archive). The previous listing's time is kept in ``_sequenced/.listed``
with the files it sequenced, for the next process. A name of an older release,
``<seq:016d>-<name>`` (no ``@``: it cannot be mistaken for a stamped one), has no arrival: its
requests are served at their batch's time, as they were.

**Offsets.** ``{"inbox_seq": S, "inbox_files": F, "inbox_horizon_ms": H}``: the last sequence
number read and how many files were read up to it since the checkpoint began. ``F`` lets a
re-read of a range tell a gap in the numbers (a file that vanished between listing and
renaming, a crash between reserving numbers and renaming) from a file that moved. ``H``, the
batch's **input horizon**, is the time up to which the batch holds every request that arrived:
the listing's time, or, when files wait beyond ``job.max.files.per.trigger``, the stamp of the
first one waiting. The operator fires no timer past it (:func:`batch_horizon`): a request
still unread, or not yet listed, may arrive before a deadline and must be served first. A
batch's offset is in Spark's offset log before it runs, so a re-run has the same horizon; the
horizon moves on at every listing, so an idle job's batches still move the clock. A new
checkpoint starts before the oldest file still waiting in ``_sequenced/`` (else after the last
number assigned), and keeps that first offset in ``<checkpoint>/inbox-source-initial.json``:
Spark asks for it again to re-run batch 0.

**Re-runs are exact.** A batch's range ``(start, end]`` is in Spark's offset log before the
batch runs; reading it again (after a crash between ``offsets/N`` and ``commits/N``) reads the
same files, in the same order, with the same names: sequenced files are only archived (or
deleted) once Spark calls :meth:`InboxReader.commit` with an offset at or past theirs, which it
does only after the batch that read them is committed. A range whose files were nevertheless
moved to the archive is read from there; one whose files are gone fails the batch rather than
answer it differently.

**Rows.** One per file, ``(source_file, content)``: the ``file:`` URI of the sequenced file and
its bytes. The job splits them into lines in Spark exactly as it did with the text file source
(:func:`coordinator.stream.job.inbox_stream`), so the rows keep their shape and meaning; the
operator reads each line's arrival from its ``source_file`` (:func:`arrival_of`). With the
option ``lines`` (``job.source.lines=python``) the read yields those line rows itself
(:mod:`coordinator.stream.lines`), with a ``shard`` column when given ``shardKeys``.

**Topics.** ``"topics_version": T``: the newest version of the job's topic store
(:mod:`coordinator.stream.topic_store`) when the batch was planned, never lower than the
previous batch's. The operator assigns the batch's consumer groups from that version's image,
so a re-run batch sees the topics its first run saw, whatever was written since. An offset
without it (an older checkpoint's) means version 0, the seed.

``job.clean.source``: ``archive`` moves a committed file to ``<warehouse>/archive`` under its
sequenced name, ``delete`` deletes it, ``off`` leaves it in ``_sequenced/``.
``job.max.files.per.trigger`` bounds the files of one batch.

:class:`SequencedInbox` is plain Python (no Spark), tested on its own; :class:`InboxDataSource`
is the Spark 4 Python data source around it (``spark.dataSource.register``, then
``readStream.format("coordinator_inbox")``). It plans in a Python process of the driver and
reads in Spark's tasks, so ``PYSPARK_PYTHON`` must be the interpreter with this package,
on the driver and the executors (:func:`coordinator.stream.job.prepare_environment`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from coordinator.stream.client import _fsync_dir, wall_clock_ms
from coordinator.stream.topic_store import newest_version

log = logging.getLogger("coordinator.source")

#: The name the source is registered under (``readStream.format(SOURCE_NAME)``).
SOURCE_NAME = "coordinator_inbox"
#: The rows: one per request file.
SOURCE_SCHEMA = "source_file string, content binary"
#: Where discovered files wait, renamed to their sequence number, until their batch commits.
SEQUENCED = "_sequenced"
#: The highest sequence number assigned so far (in ``_sequenced/``).
SEQUENCE_FILE = ".sequence"
#: Held (``flock``) while numbers are handed out (in ``_sequenced/``).
LOCK_FILE = ".sequence.lock"
#: The time of the last listing that sequenced files (in ``_sequenced/``): the lower bound of
#: the next listing's arrival stamps, across processes.
LISTED_FILE = ".listed"
#: The checkpoint's initial offset, kept beside Spark's own files (``<checkpoint>/INITIAL_FILE``).
INITIAL_FILE = "inbox-source-initial.json"
#: Offset keys (named so that a checkpoint's offset lines say whose they are).
SEQ = "inbox_seq"
FILES = "inbox_files"
HORIZON = "inbox_horizon_ms"
TOPICS_VERSION = "topics_version"
CLEAN_MODES = ("archive", "delete", "off")

#: ``<seq>@<arrival_ms>-<name>``, or an older release's ``<seq>-<name>`` (no arrival).
_SEQUENCED_NAME = re.compile(r"^(\d{16})(?:@(\d{1,18}))?-(.+)$", re.DOTALL)


def sequenced_name(seq: int, name: str, arrival_ms: int | None = None) -> str:
    """The name a file is sequenced under; with no arrival, an older release's form."""
    if arrival_ms is None:
        return f"{seq:016d}-{name}"
    return f"{seq:016d}@{arrival_ms}-{name}"


def parse_sequenced(name: str) -> tuple[int, str] | None:
    """``(seq, original name)`` of a sequenced file name, None for anything else."""
    match = _SEQUENCED_NAME.match(name)
    return (int(match.group(1)), match.group(3)) if match else None


def arrival_of(source_file: str) -> int | None:
    """The arrival stamp (epoch milliseconds) in a sequenced file's name, a path or a ``file:``
    URI (as the rows give it); None for a name without one (an older release's, or a file
    that is not a sequenced one, such as a bootstrap file)."""
    name = source_file.rpartition("/")[2]
    if source_file.startswith("file:"):
        name = unquote(name)  # as_uri() escapes the "@"
    match = _SEQUENCED_NAME.match(name)
    return None if match is None or match.group(2) is None else int(match.group(2))


def visible(name: str) -> bool:
    """Whether a name in the inbox is a request file (hidden names are files being written)."""
    return not name.startswith((".", "_"))


@dataclass(frozen=True)
class Offset:
    """A position in the sequence: the last number read, and the files read up to it."""

    seq: int
    files: int
    #: The batch's input horizon (see the module's doc); not part of the position.
    horizon_ms: int | None = field(default=None, compare=False)
    #: The topic store's version the batch is assigned from (:mod:`coordinator.stream.
    #: topic_store`); None (an older checkpoint's offset): the seed, version 0.
    topics_version: int | None = field(default=None, compare=False)

    def json(self) -> dict[str, int]:
        value = {SEQ: self.seq, FILES: self.files}
        if self.horizon_ms is not None:
            value[HORIZON] = self.horizon_ms
        if self.topics_version is not None:
            value[TOPICS_VERSION] = self.topics_version
        return value

    @classmethod
    def of(cls, value: dict[str, Any]) -> Offset:
        if SEQ not in value:
            raise ValueError(
                f"{value!r} is not an offset of the {SOURCE_NAME} source: this checkpoint was "
                f"made by another source (an older release's text file source?); rebuild it "
                f"from the log: coordinator run --rebuild-from-log"
            )
        horizon = value.get(HORIZON)
        topics = value.get(TOPICS_VERSION)
        return cls(
            int(value[SEQ]),
            int(value.get(FILES, 0)),
            None if horizon is None else int(horizon),
            None if topics is None else int(topics),
        )


class MissingInboxFiles(RuntimeError):
    """A batch's range cannot be read again: some of its files are neither sequenced nor
    archived. Answering the batch without them would make it differ from its first run."""


class SequencedInbox:
    """The inbox directory with its ``_sequenced/`` staging area and its archive."""

    def __init__(
        self,
        inbox: str | Path,
        archive: str | Path | None,
        clean: str,
        clock: Callable[[], int] = wall_clock_ms,
        topics_dir: str | Path | None = None,
    ) -> None:
        if clean not in CLEAN_MODES:
            raise ValueError(f"clean must be one of {CLEAN_MODES}, got {clean!r}")
        if clean == "archive" and archive is None:
            raise ValueError("clean=archive needs an archive directory")
        self.inbox = Path(inbox)
        self.sequenced = self.inbox / SEQUENCED
        self.archive = Path(archive) if archive is not None else None
        self.clean = clean
        #: The listing time (epoch ms) of arrival stamps; injectable for tests.
        self.clock = clock
        #: The job's topic store: its newest version goes into each batch's offset.
        self.topics_dir = None if topics_dir is None else Path(topics_dir)
        self._last: int | None = None
        #: This process's previous listing time (None: none yet).
        self._listed: int | None = None

    # --- discovery ----------------------------------------------------------------------------

    def last_assigned(self) -> int:
        """The highest sequence number ever assigned on this inbox (0: none)."""
        if self._last is None:
            staged = [seq for seq, _ in self._list_sequenced()]
            self._last = max([self._stored_sequence(), *staged])
        return self._last

    def _stored_sequence(self) -> int:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int((self.sequenced / SEQUENCE_FILE).read_text(encoding="ascii"))
        return 0

    def _stored_listing(self) -> int | None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int((self.sequenced / LISTED_FILE).read_text(encoding="ascii"))
        return None

    def _visible_files(self) -> dict[str, int]:
        """The visible files, by name, with their modification times (epoch milliseconds)."""
        found: dict[str, int] = {}
        try:
            with os.scandir(self.inbox) as entries:
                for entry in entries:
                    if not visible(entry.name):
                        continue
                    with contextlib.suppress(FileNotFoundError):  # taken away meanwhile
                        if entry.is_file():
                            found[entry.name] = entry.stat().st_mtime_ns // 1_000_000
        except FileNotFoundError:
            pass
        return found

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive use of the sequence, between processes: two queries on one inbox (a job
        being taken over by its successor) must never hand out one number twice."""
        fd = os.open(self.sequenced / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def discover(self) -> int:
        """Give every visible inbox file the next sequence number and its arrival stamp (see
        the module's doc) by renaming it into ``_sequenced/``, in arrival order, then name
        order. Returns how many were sequenced."""
        if not self._visible_files():
            self._listed = max(self._listed or 0, self.clock())
            return 0
        self.sequenced.mkdir(parents=True, exist_ok=True)
        with self._locked():
            files = self._visible_files()  # again: another process may have taken some
            floors = [t for t in (self._listed, self._stored_listing()) if t is not None]
            floor = max(floors) if floors else None
            listed = self.clock() if floor is None else max(floor, self.clock())
            self._listed = listed
            if not files:
                return 0
            stamps = {
                name: min(listed, mtime if floor is None else max(floor, mtime))
                for name, mtime in files.items()
            }
            names = sorted(files, key=lambda name: (stamps[name], name))
            last = max(self.last_assigned(), self._stored_sequence())
            # Reserve the numbers before using them: a crash after a rename can then never
            # hand the same number out again (a crash before the renames only leaves a gap).
            self._store(SEQUENCE_FILE, last + len(names))
            self._store(LISTED_FILE, listed)
            self._last = last + len(names)
            seq = last
            for name in names:
                target = sequenced_name(seq + 1, name, stamps[name])
                try:
                    os.rename(self.inbox / name, self.sequenced / target)
                except FileNotFoundError:  # taken away between the listing and the rename
                    continue
                seq += 1
            _fsync_dir(self.sequenced)
        log.debug("sequenced %d inbox files as %d..%d", seq - last, last + 1, seq)
        return seq - last

    def _store(self, name: str, value: int) -> None:
        tmp = self.sequenced / f"{name}.tmp"
        tmp.write_text(str(value), encoding="ascii")
        os.replace(tmp, self.sequenced / name)

    # --- reading ------------------------------------------------------------------------------

    def _list_sequenced(self) -> list[tuple[int, str]]:
        try:
            entries = os.scandir(self.sequenced)
        except FileNotFoundError:
            return []
        with entries:
            found = [(parse_sequenced(e.name), e.name) for e in entries if visible(e.name)]
        return sorted((parsed[0], name) for parsed, name in found if parsed is not None)

    def initial(self) -> Offset:
        """Where a new checkpoint starts: before the oldest file still waiting in
        ``_sequenced/`` (files an earlier checkpoint sequenced but never committed), else
        after the last number assigned."""
        staged = self._list_sequenced()
        return Offset(staged[0][0] - 1 if staged else self.last_assigned(), 0)

    def next_batch(
        self, start: Offset, max_files: int, max_bytes: int | None = None
    ) -> tuple[list[Path], Offset]:
        """Sequence what arrived, then the files after ``start`` (at most ``max_files``, in
        sequence order, and once they hold ``max_bytes`` or more no further one: a batch
        always takes the first file, however large) and the offset that ends them, with the
        batch's input horizon: this listing's time, or the arrival of the first file left
        waiting. The offset moves on (its horizon) even when no file came."""
        # Numbers continue past any offset Spark holds, whatever became of .sequence.
        self._last = max(self.last_assigned(), start.seq)
        self.discover()
        staged = [(seq, name) for seq, name in self._list_sequenced() if seq > start.seq]
        take = min(max_files, len(staged))
        if max_bytes is not None:
            held = 0
            for index in range(take):
                if held >= max_bytes:
                    take = index
                    break
                held += self._size(staged[index][1])
        chosen, waiting = staged[:take], staged[take:]
        stamps = [arrival_of(name) for _, name in waiting]
        horizon = next((at for at in stamps if at is not None), self._listed)
        if start.horizon_ms is not None and horizon is not None:
            horizon = max(horizon, start.horizon_ms)  # never back (a wall clock stepped back)
        topics = self.topics_version(start)
        if not chosen:
            return [], Offset(start.seq, start.files, horizon, topics)
        end = Offset(chosen[-1][0], start.files + len(chosen), horizon, topics)
        return [self.sequenced / name for _, name in chosen], end

    def _size(self, name: str) -> int:
        """A sequenced file's bytes (0 when it has gone: its read will say so)."""
        try:
            return (self.sequenced / name).stat().st_size
        except FileNotFoundError:
            return 0

    def topics_version(self, start: Offset) -> int | None:
        """The topic store's newest version now, never older than ``start``'s: the version the
        batch being planned is assigned from (None: no store, as an older release)."""
        newest = None if self.topics_dir is None else newest_version(self.topics_dir)
        if newest is None:
            return start.topics_version
        return newest if start.topics_version is None else max(newest, start.topics_version)

    def between(self, start: Offset, end: Offset) -> list[tuple[Path, Path]]:
        """The files of the range ``(start, end]`` in sequence order, as (sequenced path, where
        the bytes are now): the same files every time it is asked, looked for in
        ``_sequenced/`` and then in the archive. The sequenced path names the file in the rows
        wherever it is read from, so a re-run orders and labels its lines the same way."""
        found: dict[int, tuple[Path, Path]] = {}
        for seq, name in self._list_sequenced():
            if start.seq < seq <= end.seq:
                found[seq] = (self.sequenced / name, self.sequenced / name)
        wanted = end.files - start.files
        if len(found) < wanted and self.archive is not None and self.archive.is_dir():
            with os.scandir(self.archive) as entries:
                for entry in entries:
                    parsed = parse_sequenced(entry.name)
                    if parsed is not None and start.seq < parsed[0] <= end.seq:
                        found.setdefault(parsed[0], (self.sequenced / entry.name, Path(entry.path)))
        if len(found) != wanted:
            raise MissingInboxFiles(
                f"the inbox range ({start.seq}, {end.seq}] held {wanted} files when it was "
                f"read; {len(found)} are left in {self.sequenced} and {self.archive}"
            )
        return [found[seq] for seq in sorted(found)]

    # --- after a commit -----------------------------------------------------------------------

    def release(self, upto: int) -> int:
        """Archive (or delete, or leave, per ``clean``) the sequenced files numbered ``upto`` or
        less: Spark has committed every batch that read them. Returns how many moved."""
        if self.clean == "off":
            return 0
        done = [name for seq, name in self._list_sequenced() if seq <= upto]
        if self.clean == "archive" and done:
            assert self.archive is not None
            self.archive.mkdir(parents=True, exist_ok=True)
        for name in done:
            path = self.sequenced / name
            with contextlib.suppress(FileNotFoundError):
                if self.clean == "archive":
                    assert self.archive is not None
                    os.replace(path, self.archive / name)
                else:
                    path.unlink()
        return len(done)


def read_file(label: Path, path: Path | None = None) -> tuple[str, bytes]:
    """A row of the source: the sequenced file's URI and the bytes (read from ``path`` when
    the file has moved)."""
    return label.absolute().as_uri(), (path or label).read_bytes()


def _source_offset(lines: list[str]) -> Offset | None:
    """This source's offset among the source lines of one of Spark's offset log files."""
    for line in lines:
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict) and SEQ in value:
                return Offset.of(value)
    return None


def batch_horizon(offsets_dir: str | Path, batch_timestamp_ms: int) -> int | None:
    """The input horizon of the batch whose timestamp is ``batch_timestamp_ms`` (see
    :func:`batch_offset`); None when unknown."""
    offset = batch_offset(offsets_dir, batch_timestamp_ms)
    return None if offset is None else offset.horizon_ms


def files_between(start: Any, end: Any) -> int | None:
    """How many inbox files a batch read, from the start and end offsets that Spark's progress
    shows for a source (JSON text, as the listener's progress has them, or the decoded JSON, as
    ``progress.json`` has them; ``"null"`` or None for no start: a checkpoint's first batch
    starts at 0 files); None when ``end`` is not an offset of this source. Spark's
    ``numInputRows`` counts rows, which are lines when the source gives line rows."""
    try:
        ended = json.loads(end) if isinstance(end, str) else end
        started = json.loads(start) if isinstance(start, str) else start
    except ValueError:
        return None
    if not isinstance(ended, dict) or SEQ not in ended:
        return None
    first = Offset.of(started).files if isinstance(started, dict) and SEQ in started else 0
    return max(0, Offset.of(ended).files - first)


def files_read(progress: Any) -> int:
    """The request files a batch read, by Spark's progress of it (the listener's object or its
    JSON as a dict): the inbox source's by its offsets (its rows are lines with
    ``job.source.lines=python``), any other source's (a rebuilt checkpoint's bootstrap files,
    one row each) by its rows."""
    total = 0
    if isinstance(progress, dict):
        reads = [(r.get("startOffset"), r.get("endOffset"), r.get("numInputRows", 0))
                 for r in progress.get("sources", ())]  # fmt: skip
    else:
        reads = [(r.startOffset, r.endOffset, r.numInputRows) for r in progress.sources]
    for start, end, rows in reads:
        files = files_between(start, end)
        total += int(rows or 0) if files is None else files
    return total


def batch_offset(offsets_dir: str | Path, batch_timestamp_ms: int) -> Offset | None:
    """This source's end offset of the batch whose timestamp is ``batch_timestamp_ms`` (its
    input horizon and topics version), from Spark's offset log (``<checkpoint>/offsets/<batch id>``: a version line, the batch's metadata with
    ``batchTimestampMs``, then one JSON line per source), which Spark writes before the batch
    runs and never changes: the same for every task of the batch and for a re-run of it. None
    when unknown (no such batch among the latest, a checkpoint of an older release)."""
    return OffsetLogView(offsets_dir, batch_timestamp_ms).offset


class OffsetLogView:
    """Spark's offset log as the batch whose timestamp is ``batch_timestamp_ms`` sees it: its
    own offset, and the timestamps of the batches before it.

    Spark writes ``offsets/N`` (with ``batchTimestampMs``) before batch N runs, after batch N-1
    has committed, and never changes it; it deletes the oldest files beyond
    ``spark.sql.streaming.minBatchesToRetain``. So while batch N runs, the log holds every
    batch up to N and nothing after it, the same on a re-run of N: what a view answers is a
    function of the batch."""

    #: How far back :meth:`delivered_ms` looks (files read), at most.
    MAX_LOOKBACK = 1_000

    def __init__(self, offsets_dir: str | Path, batch_timestamp_ms: int) -> None:
        self.directory = Path(offsets_dir)
        self.batch_timestamp_ms = batch_timestamp_ms
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            names = []
        #: Batch ids, newest first.
        self.ids = sorted((int(n) for n in names if n.isdigit()), reverse=True)
        self._times: dict[int, int | None] = {}
        self._delivered: dict[int, int | None] = {}
        #: This batch's id and its source offset (None: not among the latest three).
        self.batch_id: int | None = None
        self.offset: Offset | None = None
        for batch_id in self.ids[:3]:  # the batch running now is the latest, or close to it
            lines = self._read(batch_id)
            if lines is not None and self._times[batch_id] == batch_timestamp_ms:
                self.batch_id = batch_id
                self.offset = _source_offset(lines[2:])
                break

    def _read(self, batch_id: int) -> list[str] | None:
        try:
            lines = (self.directory / str(batch_id)).read_text(encoding="utf-8").splitlines()
            stamp = json.loads(lines[1]).get("batchTimestampMs")
        except (OSError, ValueError, IndexError, AttributeError):
            self._times[batch_id] = None
            return None
        self._times[batch_id] = stamp if isinstance(stamp, int) else None
        return lines

    def timestamp(self, batch_id: int) -> int | None:
        """``batchTimestampMs`` of batch ``batch_id`` (None: not in the log, or unreadable)."""
        if batch_id not in self._times:
            self._read(batch_id)
        return self._times[batch_id]

    def delivered_ms(self, batch_timestamp_ms: int) -> int | None:
        """The timestamp of the batch after the one whose timestamp is ``batch_timestamp_ms``:
        Spark planned it once that batch had committed, so its answers were readable by then
        (the sink commits ``responses`` before Spark's commit). None when that batch is not in
        this batch's log (deleted by Spark's retention, or not a batch of this checkpoint),
        or is this batch itself or a later one."""
        if batch_timestamp_ms in self._delivered:
            return self._delivered[batch_timestamp_ms]
        found = None
        if self.batch_id is not None and batch_timestamp_ms < self.batch_timestamp_ms:
            later_ms = self.batch_timestamp_ms
            oldest = max(-1, self.batch_id - self.MAX_LOOKBACK)
            for batch_id in range(self.batch_id - 1, oldest, -1):
                stamp = self.timestamp(batch_id)
                if stamp is None or stamp < batch_timestamp_ms:
                    break  # deleted, unreadable, or no batch had that timestamp
                if stamp == batch_timestamp_ms:
                    found = later_ms
                    break
                later_ms = stamp
        self._delivered[batch_timestamp_ms] = found
        return found


def committed_offset(checkpoint: Path) -> Offset | None:
    """This source's offset in a checkpoint's last committed batch (None: no committed batch,
    or the checkpoint did not read the inbox with this source). Spark's offset log files are a
    version line, the batch's metadata, then one JSON line per source."""
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    if not ids:
        return None
    try:
        text = (checkpoint / "offsets" / str(max(ids))).read_text(encoding="utf-8")
    except OSError:
        return None
    return _source_offset(text.splitlines()[2:])


# --- the Spark data source --------------------------------------------------------------------

try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles
except ImportError:  # pragma: no cover - the engine's users need no Spark
    DataSource = object  # type: ignore[assignment,misc]
    DataSourceStreamReader = object  # type: ignore[assignment,misc]
    InputPartition = object  # type: ignore[assignment,misc]
    ReadLimit = ReadAllAvailable = ReadMaxFiles = object  # type: ignore[assignment,misc]


class InboxDataSource(DataSource):
    """``readStream.format("coordinator_inbox").option("path", inbox)`` with options
    ``archive`` (directory), ``clean`` (archive, delete, off), ``maxFilesPerTrigger``,
    ``readTasks`` (how many tasks read one batch's files; default 1), ``initialOffsetFile``
    (where the query's first offset is kept: in its checkpoint), ``lines`` (``true``: one row
    per line, :mod:`coordinator.stream.lines`, instead of one per file) and ``shardKeys`` (with
    ``lines``: a ``shard`` column, the key of the line's group id's offsets partition in this
    comma-separated list, one key per partition)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _lines(self) -> bool:
        """The ``lines`` option: one row per line rather than per file."""
        return str(self.options.get("lines", "false")).lower() == "true"

    def schema(self) -> str:
        if not self._lines():
            return SOURCE_SCHEMA
        from coordinator.stream import lines

        return lines.SHARD_SCHEMA if self.options.get("shardKeys") else lines.LINE_SCHEMA

    def streamReader(self, schema: Any) -> InboxReader:
        options = self.options
        initial = options.get("initialOffsetFile")
        inbox = SequencedInbox(
            options["path"],
            options.get("archive"),
            options.get("clean", "off"),
            topics_dir=options.get("topicsDir"),
        )
        return InboxReader(
            inbox,
            int(options.get("maxFilesPerTrigger", 1000)),
            Path(initial) if initial else None,
            max_bytes=int(options["maxBytesPerTrigger"])
            if options.get("maxBytesPerTrigger")
            else None,
            read_tasks=int(options.get("readTasks", 1)),
            lines=self._lines(),
            shard_keys=tuple(int(k) for k in options["shardKeys"].split(","))
            if options.get("shardKeys")
            else None,
        )


@dataclass(frozen=True)
class InboxFiles(InputPartition):
    """One read task's share of a batch: consecutive files in sequence order, as (the
    sequenced file's ``file:`` URI, the path its bytes are read from)."""

    files: tuple[tuple[str, str], ...]


class InboxReader(DataSourceStreamReader):
    """Spark's side of :class:`SequencedInbox`. The driver's Python process plans: it sequences
    the new files and ends the batch (:meth:`latestOffset`), then splits the batch's files
    into ``read_tasks`` runs of consecutive files (:meth:`partitions`); Spark's tasks read
    the bytes (:meth:`read`), on the executors. A re-run plans the same files from the
    offsets (:meth:`SequencedInbox.between`), wherever they are by then.

    (Spark's simple reader, which this replaced, reads every byte in the driver's Python and
    hands the whole batch to one task: the request lines were then split, parsed and keyed
    by one core, and on a cluster every request went through the driver.)"""

    def __init__(
        self,
        inbox: SequencedInbox,
        max_files: int,
        initial_file: Path | None = None,
        read_tasks: int = 1,
        lines: bool = False,
        shard_keys: tuple[int, ...] | None = None,
        max_bytes: int | None = None,
    ) -> None:
        if read_tasks < 1:
            raise ValueError(f"readTasks must be at least 1, got {read_tasks}")
        if max_bytes is not None and max_bytes < 1:
            raise ValueError(f"maxBytesPerTrigger must be at least 1, got {max_bytes}")
        self.inbox = inbox
        self.max_files = max_files
        #: A batch's request bytes, at most (but for its first file): None, no bound.
        self.max_bytes = max_bytes
        self.read_tasks = read_tasks
        #: Rows of lines (:mod:`coordinator.stream.lines`), with a shard column when given
        #: ``shard_keys`` (the key of each offsets partition).
        self.lines = lines
        self.shard_keys = shard_keys
        #: Where the checkpoint's initial offset is kept. Spark asks for it again to re-run
        #: batch 0, and by then the files it was computed from may have moved on.
        self.initial_file = initial_file

    def initialOffset(self) -> dict[str, int]:
        if self.initial_file is not None:
            with contextlib.suppress(FileNotFoundError):
                return Offset.of(json.loads(self.initial_file.read_text(encoding="utf-8"))).json()
        offset = self.inbox.initial().json()
        if self.initial_file is not None:
            self.initial_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.initial_file.with_name(f".{self.initial_file.name}.tmp")
            tmp.write_text(json.dumps(offset) + "\n", encoding="utf-8")
            os.replace(tmp, self.initial_file)
        return offset

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxFiles(self.max_files)

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
        """Sequence what arrived and end the batch after at most the limit's files (all of
        them for ``ReadAllAvailable``, as Spark asks; ``job.max.files.per.trigger`` otherwise)
        and, but for ``ReadAllAvailable``, once they hold ``job.max.bytes.per.trigger``."""
        most, most_bytes = self.max_files, self.max_bytes
        if isinstance(limit, ReadMaxFiles):
            most = limit.max_files
        elif isinstance(limit, ReadAllAvailable):
            most, most_bytes = 1 << 62, None
        _, end = self.inbox.next_batch(Offset.of(start), most, most_bytes)
        return end.json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InboxFiles]:
        files = [
            (label.absolute().as_uri(), str(path))
            for label, path in self.inbox.between(Offset.of(start), Offset.of(end))
        ]
        return [InboxFiles(tuple(run)) for run in split_runs(files, self.read_tasks)]

    def read(self, partition: InboxFiles) -> Iterator[Any]:  # type: ignore[override]
        import pyarrow as pa

        from coordinator.stream import worker_gc

        worker_gc.tune_gc()  # a Python worker that runs the source's reads may run the operator
        labels = [label for label, _ in partition.files]
        contents = [Path(path).read_bytes() for _, path in partition.files]
        if self.lines:
            from coordinator.stream import lines

            yield from lines.line_batches(labels, contents, self.shard_keys)
            return
        yield pa.RecordBatch.from_arrays(
            [pa.array(labels, pa.string()), pa.array(contents, pa.binary())],
            names=["source_file", "content"],
        )

    def commit(self, end: dict[str, Any]) -> None:
        self.inbox.release(Offset.of(end).seq)


def split_runs(items: list[Any], parts: int) -> list[list[Any]]:
    """``items`` as at most ``parts`` runs of consecutive items, in order, as even as can be
    (none empty; none at all for no items)."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    runs, at = [], 0
    for index in range(parts):
        count = size + (1 if index < extra else 0)
        runs.append(items[at : at + count])
        at += count
    return [run for run in runs if run]
