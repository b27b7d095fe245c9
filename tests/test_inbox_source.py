"""The inbox source's sequencing, without Spark: numbers on discovery, exact re-reads, and
files released only once committed (coordinator/stream/source.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.stream.source import (
    SEQUENCE_FILE,
    SEQUENCED,
    InboxReader,
    MissingInboxFiles,
    Offset,
    SequencedInbox,
    arrival_of,
    committed_offset,
    parse_sequenced,
    read_file,
    split_runs,
)

#: A listing time for tests that set files' modification times.
T0 = 1_800_000_000_000


def drop(inbox: Path, name: str, text: str = "{}\n", mtime_ms: int | None = None) -> Path:
    """A request file dropped the documented way: written hidden (finished at ``mtime_ms``, when
    given), renamed in."""
    inbox.mkdir(parents=True, exist_ok=True)
    tmp = inbox / f".{name}.tmp"
    tmp.write_text(text)
    if mtime_ms is not None:
        os.utime(tmp, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    return tmp.rename(inbox / name)


def rows_between(reader: InboxReader, start: dict, end: dict) -> list[tuple[str, bytes]]:
    """The rows Spark's tasks read for the batch ``(start, end]``, task after task."""
    rows: list[tuple[str, bytes]] = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            labels, contents = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            rows.extend(zip(labels, contents, strict=True))
    return rows


def next_batch(reader: InboxReader, start: dict) -> tuple[list[tuple[str, bytes]], dict]:
    """One micro-batch as Spark plans and reads it: its end at the default limit, its rows."""
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    return rows_between(reader, start, end), end


def names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def originals(paths: list[Path]) -> list[str]:
    return [parse_sequenced(p.name)[1] for p in paths]  # type: ignore[index]


def numbered(paths: Iterable[Path]) -> list[tuple[int, str]]:
    """(sequence number, original name) of sequenced files, in sequence order."""
    return sorted(parse_sequenced(p.name) for p in paths)  # type: ignore[type-var]


class Clock:
    """A listing clock the test moves by hand (epoch milliseconds)."""

    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def inbox(tmp_path: Path) -> SequencedInbox:
    return SequencedInbox(tmp_path / "inbox", tmp_path / "archive", "archive")


def test_files_get_numbers_in_arrival_then_name_order_and_hidden_files_wait(tmp_path: Path):
    clock = Clock()
    inbox = SequencedInbox(tmp_path / "inbox", tmp_path / "archive", "archive", clock)
    inbox.discover()  # a listing that found nothing, at T0
    drop(inbox.inbox, "b.jsonl", mtime_ms=T0 + 50)
    drop(inbox.inbox, "a.jsonl", mtime_ms=T0 + 50)
    drop(inbox.inbox, "z.jsonl", mtime_ms=T0 + 20)
    (inbox.inbox / ".c.jsonl.tmp").write_text("half")
    (inbox.inbox / "_d.jsonl").write_text("{}\n")
    clock.now_ms = T0 + 100
    files, end = inbox.next_batch(inbox.initial(), 100)
    assert names(files) == [
        f"0000000000000001@{T0 + 20}-z.jsonl",
        f"0000000000000002@{T0 + 50}-a.jsonl",
        f"0000000000000003@{T0 + 50}-b.jsonl",
    ]
    assert [arrival_of(str(f)) for f in files] == [T0 + 20, T0 + 50, T0 + 50]
    assert end == Offset(3, 3)
    assert sorted(p.name for p in inbox.inbox.iterdir()) == [".c.jsonl.tmp", "_d.jsonl", SEQUENCED]


def test_an_arrival_is_clamped_between_the_previous_listing_and_this_one(tmp_path: Path):
    clock = Clock()
    inbox = SequencedInbox(tmp_path / "inbox", None, "off", clock)
    drop(inbox.inbox, "first.jsonl", mtime_ms=T0 - 60_000)  # no listing before: as it is
    inbox.discover()
    clock.now_ms = T0 + 1_000
    drop(inbox.inbox, "backdated.jsonl", mtime_ms=T0 - 5_000)  # before the last listing
    drop(inbox.inbox, "inside.jsonl", mtime_ms=T0 + 400)
    drop(inbox.inbox, "ahead.jsonl", mtime_ms=T0 + 90_000)  # a writer's clock ahead of ours
    inbox.discover()
    stamped = {parse_sequenced(p.name)[1]: arrival_of(p.name) for p in inbox.sequenced.glob("0*")}  # type: ignore[index]
    assert stamped == {
        "first.jsonl": T0 - 60_000,
        "backdated.jsonl": T0,
        "inside.jsonl": T0 + 400,
        "ahead.jsonl": T0 + 1_000,
    }
    # Another process (a restarted job) starts from the last listing that sequenced files, and
    # a listing clock that went backwards does not take the stamps back with it.
    again = SequencedInbox(inbox.inbox, None, "off", Clock(T0 + 500))
    drop(inbox.inbox, "later.jsonl", mtime_ms=T0 + 200)
    again.discover()
    (later,) = [p for p in inbox.sequenced.glob("0*") if p.name.endswith("-later.jsonl")]
    assert later.name == f"0000000000000005@{T0 + 1_000}-later.jsonl"


@settings(max_examples=60, deadline=None)
@given(
    listings=st.lists(
        st.tuples(
            st.integers(-2_000, 2_000),  # how far the listing clock moves (even backwards)
            st.lists(st.integers(-5_000, 5_000), max_size=4),  # files' mtimes around it
        ),
        min_size=1,
        max_size=6,
    )
)
def test_stamps_never_decrease_along_the_sequence(tmp_path_factory, listings):
    clock = Clock()
    inbox = SequencedInbox(tmp_path_factory.mktemp("inbox"), None, "off", clock)
    previous = None
    count = 0
    for move, mtimes in listings:
        clock.now_ms += move
        for offset in mtimes:
            count += 1
            drop(inbox.inbox, f"f{count}.jsonl", mtime_ms=clock.now_ms + offset)
        inbox.discover()
        listed = clock.now_ms if previous is None else max(previous, clock.now_ms)
        stamps = [arrival_of(p.name) for p in sorted(inbox.sequenced.glob("0*"))]
        new = stamps[len(stamps) - len(mtimes) :] if mtimes else []
        assert all(s is not None and s <= listed for s in new)
        if previous is not None:
            assert all(s is not None and s >= previous for s in new)
        previous = listed
    stamps = [arrival_of(p.name) for p in sorted(inbox.sequenced.glob("0*"))]
    assert stamps == sorted(stamps)  # type: ignore[type-var]
    assert len(stamps) == count


def test_the_stamp_survives_the_archive_and_a_re_run(tmp_path: Path):
    clock = Clock()
    inbox = SequencedInbox(tmp_path / "inbox", tmp_path / "archive", "archive", clock)
    inbox.discover()
    drop(inbox.inbox, "a.jsonl", "one\n", mtime_ms=T0 + 7)
    clock.now_ms = T0 + 30
    reader = InboxReader(inbox, max_files=10)
    start = {"inbox_seq": 0, "inbox_files": 0}
    rows, end = next_batch(reader, start)
    ((label, _),) = rows
    assert arrival_of(label) == T0 + 7  # from the rows' file: URI, whose "@" is escaped
    reader.commit(end)  # archived under its sequenced name
    assert [arrival_of(p.name) for p in inbox.archive.iterdir()] == [T0 + 7]  # type: ignore[union-attr]
    # A re-run of the batch (a new process, a later clock) reads the same label, same stamp.
    rerun = InboxReader(
        SequencedInbox(inbox.inbox, inbox.archive, "archive", Clock(T0 + 9_000)), 10
    )
    assert [arrival_of(row[0]) for row in rows_between(rerun, start, end)] == [T0 + 7]


def test_a_file_sequenced_by_an_older_release_has_no_arrival(inbox: SequencedInbox):
    inbox.sequenced.mkdir(parents=True)
    (inbox.sequenced / "0000000000000001-old.jsonl").write_text("{}\n")
    start = inbox.initial()
    assert start == Offset(0, 0)
    files, end = inbox.next_batch(start, 10)
    assert names(files) == ["0000000000000001-old.jsonl"]
    assert [label for label, _ in inbox.between(start, end)] == files
    assert arrival_of(read_file(files[0])[0]) is None
    # Nor does anything that is not a sequenced file (a bootstrap file, a local batch).
    assert arrival_of("file:///w/bootstrap/run-1/part-00000.jsonl") is None
    assert arrival_of("0000000000000001-@5-x.jsonl") is None  # an original name "@5-x.jsonl"
    assert parse_sequenced("0000000000000001-@5-x.jsonl") == (1, "@5-x.jsonl")
    assert parse_sequenced("0000000000000001@5-x.jsonl") == (1, "x.jsonl")


def test_a_late_file_with_a_smaller_name_is_read_next(inbox: SequencedInbox):
    drop(inbox.inbox, "0002-b.jsonl")
    first, end = inbox.next_batch(inbox.initial(), 100)
    assert originals(first) == ["0002-b.jsonl"]
    drop(inbox.inbox, "0001-a.jsonl")  # sorts before everything read: a name offset skips it
    second, end2 = inbox.next_batch(end, 100)
    assert originals(second) == ["0001-a.jsonl"]
    assert end2 == Offset(2, 2)


def test_max_files_bounds_a_batch_and_the_rest_waits_in_order(inbox: SequencedInbox):
    for i in range(5):
        drop(inbox.inbox, f"{i}.jsonl")
    first, end = inbox.next_batch(inbox.initial(), 2)
    second, end = inbox.next_batch(end, 2)
    third, end = inbox.next_batch(end, 2)
    fourth, end4 = inbox.next_batch(end, 2)
    assert [originals(b) for b in (first, second, third, fourth)] == [
        ["0.jsonl", "1.jsonl"],
        ["2.jsonl", "3.jsonl"],
        ["4.jsonl"],
        [],
    ]
    assert end4 == end == Offset(5, 5)


def test_a_range_reads_the_same_files_after_they_were_archived(inbox: SequencedInbox):
    for name in ("x.jsonl", "y.jsonl", "z.jsonl"):
        drop(inbox.inbox, name, f'{{"f": "{name}"}}\n')
    start = inbox.initial()
    files, end = inbox.next_batch(start, 100)
    rows = [read_file(p) for p in files]
    inbox.release(2)  # two of the three moved to the archive
    assert sorted(p.name for p in inbox.archive.iterdir()) == names(files[:2])  # type: ignore[union-attr]
    again = [read_file(label, path) for label, path in inbox.between(start, end)]
    assert again == rows  # same labels, same bytes, same order


def test_a_range_whose_files_are_gone_is_refused(tmp_path: Path):
    inbox = SequencedInbox(tmp_path / "inbox", None, "delete")
    drop(inbox.inbox, "a.jsonl")
    start = inbox.initial()
    _, end = inbox.next_batch(start, 100)
    inbox.release(end.seq)
    with pytest.raises(MissingInboxFiles):
        inbox.between(start, end)


def test_a_gap_in_the_numbers_is_not_a_missing_file(inbox: SequencedInbox):
    drop(inbox.inbox, "a.jsonl")
    inbox.last_assigned()
    # Numbers reserved, then a crash before the rename: number 1 is never used.
    (inbox.sequenced).mkdir(parents=True)
    (inbox.sequenced / SEQUENCE_FILE).write_text("1")
    restarted = SequencedInbox(inbox.inbox, inbox.archive, "archive")
    start = Offset(0, 0)
    files, end = restarted.next_batch(start, 100)
    assert numbered(files) == [(2, "a.jsonl")]
    assert end == Offset(2, 1)
    assert [label for label, _ in restarted.between(start, end)] == files


def test_numbers_are_never_reused_once_every_file_is_gone(tmp_path: Path):
    inbox = SequencedInbox(tmp_path / "inbox", None, "delete")
    drop(inbox.inbox, "a.jsonl")
    _, end = inbox.next_batch(inbox.initial(), 100)
    inbox.release(end.seq)
    # A new process, a new checkpoint: the sequence carries on.
    again = SequencedInbox(inbox.inbox, None, "delete")
    assert again.initial() == Offset(1, 0)
    drop(inbox.inbox, "b.jsonl")
    files, _ = again.next_batch(again.initial(), 100)
    assert numbered(files) == [(2, "b.jsonl")]


def test_a_new_checkpoint_starts_before_files_still_waiting(inbox: SequencedInbox):
    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        drop(inbox.inbox, name)
    files, end = inbox.next_batch(inbox.initial(), 1)
    inbox.release(end.seq)  # a.jsonl committed; b and c sequenced, never committed
    fresh = SequencedInbox(inbox.inbox, inbox.archive, "archive")
    assert fresh.initial() == Offset(1, 0)
    files, _ = fresh.next_batch(fresh.initial(), 100)
    assert originals(files) == ["b.jsonl", "c.jsonl"]


@pytest.mark.parametrize("clean", ["archive", "delete", "off"])
def test_release_follows_job_clean_source(tmp_path: Path, clean: str):
    inbox = SequencedInbox(tmp_path / "inbox", tmp_path / "archive", clean)
    drop(inbox.inbox, "a.jsonl")
    drop(inbox.inbox, "b.jsonl")
    files, _ = inbox.next_batch(inbox.initial(), 100)
    inbox.release(1)
    left = sorted(p.name for p in inbox.sequenced.iterdir() if not p.name.startswith("."))
    archived = sorted(p.name for p in (tmp_path / "archive").glob("*"))
    assert left == (names(files) if clean == "off" else names(files[1:]))
    assert archived == (names(files[:1]) if clean == "archive" else [])


def test_the_reader_speaks_spark_offsets(tmp_path: Path):
    clock = Clock()
    inbox = SequencedInbox(tmp_path / "inbox", tmp_path / "archive", "archive", clock)
    reader = InboxReader(inbox, max_files=10)
    start = reader.initialOffset()
    assert start == {"inbox_seq": 0, "inbox_files": 0}
    drop(inbox.inbox, "a.jsonl", "one\n")
    rows, end = next_batch(reader, start)
    assert end == {"inbox_seq": 1, "inbox_files": 1, "inbox_horizon_ms": T0}
    assert [content for _, content in rows] == [b"one\n"]
    assert rows[0][0].startswith("file:///") and rows[0][0].endswith("-a.jsonl")
    assert rows_between(reader, start, end) == rows
    assert next_batch(reader, end)[1] == end  # nothing new, no time passed: the offset stays
    clock.now_ms += 200
    assert next_batch(reader, end)[1] == {**end, "inbox_horizon_ms": T0 + 200}  # the clock moves
    reader.commit(end)
    assert numbered(inbox.archive.iterdir()) == [(1, "a.jsonl")]  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="rebuild"):
        next_batch(reader, {"logOffset": 3})  # an older release's file source offset


def test_a_batch_is_read_by_several_tasks_in_sequence_order(tmp_path: Path):
    inbox = SequencedInbox(tmp_path / "inbox", None, "off", Clock())
    reader = InboxReader(inbox, max_files=5, read_tasks=2)
    start = reader.initialOffset()
    for i in range(7):
        drop(inbox.inbox, f"{i}.jsonl", f"{i}\n")
    # The default limit is job.max.files.per.trigger: five files now, two left waiting.
    partitions = reader.partitions(
        start, end := reader.latestOffset(start, reader.getDefaultReadLimit())
    )
    assert [len(p.files) for p in partitions] == [3, 2]
    rows = rows_between(reader, start, end)
    assert [content for _, content in rows] == [f"{i}\n".encode() for i in range(5)]
    assert [parse_sequenced(unquote(label.rpartition("/")[2])) for label, _ in rows] == [
        (i + 1, f"{i}.jsonl") for i in range(5)
    ]
    # Spark's "all available" (a trigger that drains) takes the rest, whatever the option says.
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

    assert reader.latestOffset(end, ReadMaxFiles(1))["inbox_seq"] == 6
    last = reader.latestOffset(end, ReadAllAvailable())
    assert [c for _, c in rows_between(reader, end, last)] == [b"5\n", b"6\n"]
    # One task per file at most, none for an empty batch.
    assert [len(p.files) for p in InboxReader(inbox, 5, read_tasks=9).partitions(start, end)] == [
        1
    ] * 5
    assert reader.partitions(last, last) == []
    with pytest.raises(ValueError, match="readTasks"):
        InboxReader(inbox, 5, read_tasks=0)


@given(st.integers(0, 40), st.integers(1, 12))
def test_split_runs_keeps_order_and_balance(count: int, parts: int):
    items = list(range(count))
    runs = split_runs(items, parts)
    assert [i for run in runs for i in run] == items
    assert all(runs) and len(runs) == min(parts, count)
    assert not runs or max(map(len, runs)) - min(map(len, runs)) <= 1


def test_committed_offset_is_read_from_the_last_committed_batch(tmp_path: Path):
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    assert committed_offset(checkpoint) is None
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})
    for batch, seq in ((0, 3), (1, 7)):
        offsets = {"inbox_seq": seq, "inbox_files": seq}
        (checkpoint / "offsets" / str(batch)).write_text(
            f"v1\n{meta}\n{json.dumps(offsets)}\n{json.dumps({'logOffset': 0})}\n"
        )
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    assert committed_offset(checkpoint) == Offset(3, 3)  # batch 1 was planned, not committed


def _checkpoint_with_offset(checkpoint: Path, seq: int, committed: bool = True) -> None:
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})
    offsets = json.dumps({"inbox_seq": seq, "inbox_files": seq})
    (checkpoint / "offsets" / "0").write_text(f"v1\n{meta}\n{offsets}\n")
    if committed:
        (checkpoint / "commits" / "0").write_text("v1\n{}\n")


def test_a_rebuild_archives_what_the_old_checkpoint_committed(tmp_path: Path):
    from coordinator.stream import rebuild
    from coordinator.stream.settings import load_settings

    settings = load_settings([], warehouse=str(tmp_path / "wh"))
    paths = settings.job.paths
    inbox = SequencedInbox(paths.inbox, paths.archive, "archive")
    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        drop(paths.inbox, name)
    files, _ = inbox.next_batch(inbox.initial(), 100)
    old = tmp_path / "old"
    _checkpoint_with_offset(old, 2)  # a and b were answered; c was sequenced, never read
    assert not rebuild.reads_inbox_with_file_source(old)
    assert rebuild.clean_answered_inbox_files(old, settings) == 2
    assert sorted(p.name for p in paths.archive.iterdir()) == names(files[:2])
    fresh = SequencedInbox(paths.inbox, paths.archive, "archive")
    assert fresh.next_batch(fresh.initial(), 100)[0] == files[2:]


def test_an_older_release_checkpoint_is_rebuilt_from_the_log(tmp_path: Path):
    from coordinator.stream import rebuild

    old = tmp_path / "old"
    (old / "offsets").mkdir(parents=True)
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})
    (old / "offsets" / "4").write_text(f"v1\n{meta}\n{json.dumps({'logOffset': 4})}\n")
    assert rebuild.reads_inbox_with_file_source(old)
    assert not rebuild.reads_inbox_with_file_source(tmp_path / "none")


def test_the_initial_offset_is_kept_for_a_rerun_of_the_first_batch(inbox: SequencedInbox):
    kept = inbox.inbox.parent / "checkpoint" / "initial.json"
    drop(inbox.inbox, "a.jsonl")
    reader = InboxReader(inbox, 10, kept)
    start = reader.initialOffset()
    _, end = next_batch(reader, start)
    # The first batch's files moved on before Spark re-runs it and asks for the start again.
    inbox.release(Offset.of(end).seq)
    again = InboxReader(SequencedInbox(inbox.inbox, inbox.archive, "archive"), 10, kept)
    assert again.initialOffset() == start
    assert len(rows_between(again, again.initialOffset(), end)) == 1


def test_numbers_continue_past_the_offset_spark_holds(tmp_path: Path):
    # .sequence lost (a restored inbox, a crash before it reached the disk): never reuse a
    # number the checkpoint's offsets already cover.
    inbox = SequencedInbox(tmp_path / "inbox", None, "delete")
    drop(inbox.inbox, "a.jsonl")
    files, end = inbox.next_batch(Offset(41, 7), 10)
    assert numbered(files) == [(42, "a.jsonl")]
    assert end == Offset(42, 8)


class _Query:
    """What ``job.source_start_timed_out`` reads of a StreamingQuery."""

    def __init__(self, messages: list[str], exception: str | None) -> None:
        self.messages = messages
        self.error = exception

    @property
    def isActive(self) -> bool:
        return bool(self.messages)

    @property
    def status(self) -> dict[str, str]:
        return {"message": self.messages.pop(0)}

    def exception(self) -> str | None:
        return self.error


def test_a_query_whose_source_process_did_not_connect_back_is_started_again():
    from coordinator.stream.job import source_start_timed_out

    slow = "org.apache.spark.SparkException: Python worker failed to connect back."
    assert source_start_timed_out(_Query(["Initializing StreamExecution"] * 3, slow))
    assert not source_start_timed_out(_Query(["Initializing sources", "Waiting for data"], None))
    assert not source_start_timed_out(_Query([], "some other failure"))


def test_two_queries_on_one_inbox_never_hand_out_a_number_twice(tmp_path: Path):
    # A job being taken over by its successor: both sources may discover for a moment.
    old = SequencedInbox(tmp_path / "inbox", None, "off")
    new = SequencedInbox(tmp_path / "inbox", None, "off")
    for reader, name in ((old, "x.jsonl"), (new, "y.jsonl"), (old, "z.jsonl")):
        drop(reader.inbox, name)
        assert reader.discover() == 1
    assert numbered(old.sequenced.glob("0*")) == [(1, "x.jsonl"), (2, "y.jsonl"), (3, "z.jsonl")]


def test_a_batch_ends_once_its_files_hold_the_byte_bound(tmp_path: Path):
    """job.max.bytes.per.trigger: no further file once the batch's files hold that many bytes;
    the first file always goes, however large; the horizon is the first waiting file's stamp;
    Spark's "all available" takes everything, and an offset's files are the same on a re-run."""
    clock = Clock()
    inbox = SequencedInbox(tmp_path / "inbox", None, "off", clock)
    reader = InboxReader(inbox, max_files=100, max_bytes=300)
    start = reader.initialOffset()
    sizes = [100, 100, 100, 600, 10, 10]  # bytes of each file, in arrival order
    for i, size in enumerate(sizes):
        drop(inbox.inbox, f"{i}.jsonl", "x" * (size - 1) + "\n", mtime_ms=T0 + 10 * (i + 1))
    clock.now_ms = T0 + 100
    ends = [start]
    taken = []
    for _ in range(4):
        rows, end = next_batch(reader, ends[-1])
        assert rows_between(reader, ends[-1], end) == rows  # a re-run reads the same files
        taken.append([len(content) for _, content in rows])
        ends.append(end)
    # 100 + 100 < 300, so a third file, and then 300 bytes: the bound, reached; then the
    # 600-byte file alone (the first of its batch); then the rest.
    assert taken == [[100, 100, 100], [600], [10, 10], []]
    assert [e["inbox_horizon_ms"] for e in ends[1:]] == [T0 + 40, T0 + 50, T0 + 100, T0 + 100]
    # The files' bound and the bytes' bound together: the first reached ends the batch.
    assert InboxReader(inbox, max_files=2, max_bytes=300).latestOffset(start)["inbox_seq"] == 2
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    assert reader.latestOffset(start, ReadAllAvailable())["inbox_seq"] == len(sizes)
    with pytest.raises(ValueError, match="maxBytesPerTrigger"):
        InboxReader(inbox, max_files=1, max_bytes=0)
    # The job's options reach the reader (job.max.bytes.per.trigger; none: no bound).
    from coordinator.stream.settings import load_settings
    from coordinator.stream.source import InboxDataSource

    options = {"path": str(tmp_path / "inbox"), "maxFilesPerTrigger": "7"}
    assert InboxDataSource(options).streamReader(None).max_bytes is None
    options["maxBytesPerTrigger"] = str(load_settings([]).job.max_bytes_per_trigger)
    bound = InboxDataSource(options).streamReader(None)
    assert (bound.max_files, bound.max_bytes) == (7, 64 * 1024 * 1024)
    assert (
        load_settings([], {"job.max.bytes.per.trigger": "4096"}).job.max_bytes_per_trigger == 4096
    )
    with pytest.raises(ValueError, match=r"job\.max\.bytes\.per\.trigger must be >= 1"):
        load_settings([], {"job.max.bytes.per.trigger": "0"})


def test_a_batch_offset_carries_its_input_horizon(tmp_path: Path):
    """The time up to which the batch holds every request that arrived: the listing's time, or
    the stamp of the first file left waiting (job.max.files.per.trigger)."""
    clock = Clock()
    inbox = SequencedInbox(tmp_path / "inbox", None, "off", clock)
    inbox.discover()
    for i, at in enumerate((T0 + 10, T0 + 20, T0 + 30)):
        drop(inbox.inbox, f"{i}.jsonl", mtime_ms=at)
    clock.now_ms = T0 + 100
    files, end = inbox.next_batch(inbox.initial(), 2)
    assert numbered(files) == [(1, "0.jsonl"), (2, "1.jsonl")]
    assert end == Offset(2, 2) and end.horizon_ms == T0 + 30  # the third file waits
    assert end.json() == {"inbox_seq": 2, "inbox_files": 2, "inbox_horizon_ms": T0 + 30}
    assert Offset.of(end.json()).horizon_ms == T0 + 30
    clock.now_ms = T0 + 200
    files, end = inbox.next_batch(end, 2)
    assert numbered(files) == [(3, "2.jsonl")] and end.horizon_ms == T0 + 200  # this listing
    # No new file: the position stays, the horizon moves on (an idle job's clock).
    clock.now_ms = T0 + 300
    files, idle = inbox.next_batch(end, 2)
    assert files == [] and idle == end and idle.horizon_ms == T0 + 300
    assert idle.json() != end.json()  # Spark sees a new offset: the batch runs at it
    # A listing clock that steps back does not take the horizon back.
    clock.now_ms = T0 + 250
    assert inbox.next_batch(idle, 2)[1].horizon_ms == T0 + 300
    # An offset of an older release has no horizon.
    assert Offset.of({"inbox_seq": 5, "inbox_files": 5}).horizon_ms is None
