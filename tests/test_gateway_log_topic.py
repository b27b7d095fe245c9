"""The log as a topic: Fetch on ``__consumer_offsets`` serves the ``consumer_offsets``
Delta table as Kafka v2 record batches with the byte-exact keys and values, so that tools that
read Kafka's ``__consumer_offsets`` read ours. Batches are decoded by kafka-python's own record
reader (never by ours), and kcat (librdkafka) reads the topic end to end."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.gateway import codec
from coordinator.gateway.log_topic import LOG_TOPIC, OFFSET_OUT_OF_RANGE, LogTopic
from coordinator.gateway.record_batch import (
    BATCH_OVERHEAD,
    LogRecord,
    encode_batch,
    encode_records,
    zigzag_varint,
)
from coordinator.log import codec as log_codec
from coordinator.log.partitioning import partition_for
from tests.gateway_support import Running, call

PARTITIONS = CoordinatorConfig().offsets_topic_num_partitions


def decode(data: bytes) -> list[tuple[Any, list[Any]]]:
    """kafka-python's reader: (batch, its records) for every batch in ``data``."""
    from kafka.record import MemoryRecords

    records = MemoryRecords(data)
    out = []
    while True:
        batch = records.next_batch()
        if batch is None:
            return out
        assert batch.validate_crc()
        out.append((batch, list(batch)))


def commit(port: int, group: str, offsets: dict[int, int], topic: str = "t") -> None:
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": p, "committed_offset": o, "committed_metadata": f"m{o}"}
                    for p, o in offsets.items()
                ],
            }
        ],
    }
    answer = call(port, codec.OFFSET_COMMIT, 9, body)
    assert all(p["error_code"] == 0 for t in answer["topics"] for p in t["partitions"]), answer


def table_rows(warehouse: Path) -> dict[int, list[LogRecord]]:
    """The ``consumer_offsets`` rows, per offsets partition in offset order (delta-rs)."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(warehouse / "tables" / "consumer_offsets")).to_pyarrow_table(
        columns=["offsets_partition", "offset", "timestamp_ms", "key", "value"]
    )
    out: dict[int, list[LogRecord]] = {}
    for r in sorted(rows.to_pylist(), key=lambda r: (r["offsets_partition"], r["offset"])):
        out.setdefault(r["offsets_partition"], []).append(
            LogRecord(r["offset"], r["timestamp_ms"], r["key"], r["value"])
        )
    return out


def fetch_body(partition: int, offset: int, max_wait: int = 0, max_bytes: int = 1 << 20) -> Any:
    return {
        "replica_id": -1,
        "max_wait": max_wait,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": LOG_TOPIC,
                "partitions": [
                    {
                        "partition": partition,
                        "fetch_offset": offset,
                        "partition_max_bytes": max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
    }


def list_offsets(port: int, partition: int, timestamp: int) -> dict[str, Any]:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": LOG_TOPIC,
                "partitions": [{"partition_index": partition, "timestamp": timestamp}],
            }
        ],
    }
    answer = call(port, codec.LIST_OFFSETS, 7, body)
    return dict(answer["topics"][0]["partitions"][0])


# --- the record batch encoder, read back by kafka-python ---------------------------------------


def test_varints_are_kafkas_zigzag():
    # ByteUtils.writeVarint / writeVarlong: zig-zag, 7 bits a byte, low first.
    assert zigzag_varint(0) == b"\x00"
    assert zigzag_varint(-1) == b"\x01"
    assert zigzag_varint(1) == b"\x02"
    assert zigzag_varint(63) == b"\x7e"
    assert zigzag_varint(-64) == b"\x7f"
    assert zigzag_varint(64) == b"\x80\x01"
    assert zigzag_varint(300) == b"\xd8\x04"
    assert zigzag_varint(-(2**63)) == b"\xff" * 9 + b"\x01"


def test_encoder_round_trip_through_kafka_pythons_reader():
    records = [
        LogRecord(100, 1_700_000_000_000, b"\x00\x01\x00\x01g", b"\x00\x03value"),
        LogRecord(101, 1_699_999_999_000, b"\x00\x02\x00\x01g", None),  # tombstone, older time
        LogRecord(102, 1_700_000_000_500, None, b""),
        LogRecord(103, 1_700_000_000_400, b"k" * 300, bytes(range(256)) * 40),  # multi-byte varints
    ]
    data = encode_batch(records, partition_leader_epoch=7)
    [(batch, read)] = decode(data)
    assert (batch.magic, batch.base_offset, batch.attributes) == (2, 100, 0)
    assert batch.timestamp_type == 0  # CreateTime
    assert batch.compression_type == 0
    assert not batch.is_transactional and not batch.is_control_batch
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.last_offset_delta == 3
    assert batch.first_timestamp == records[0].timestamp
    assert batch.max_timestamp == 1_700_000_000_500
    assert batch.leader_epoch == 7
    assert batch.records_count == 4
    assert len(data) == batch.size_in_bytes
    assert [(r.offset, r.timestamp, r.key, r.value) for r in read] == [tuple(r) for r in records]
    assert read[1].value is None and read[2].key is None
    assert all(r.headers == [] for r in read)


def test_encode_records_respects_max_bytes_but_returns_one_record_at_least():
    records = [LogRecord(i, 1000 + i, b"key", b"v" * 100) for i in range(10)]
    whole, count = encode_records(records, 1 << 20)
    assert count == 10
    one_size = (len(whole) - BATCH_OVERHEAD) // 10
    part, count = encode_records(records, BATCH_OVERHEAD + 3 * one_size)
    assert count == 3 and len(part) == BATCH_OVERHEAD + 3 * one_size
    tiny, count = encode_records(records, 10)  # Kafka returns at least one whole batch
    assert count == 1
    assert [r.offset for _, rs in decode(part + tiny) for r in rs] == [0, 1, 2, 0]
    assert encode_records([], 100) == (b"", 0)


# --- the log source, following a Delta table ----------------------------------------------------


def engine_records(group: str, offsets: dict[int, int], now: int) -> list[dict[str, Any]]:
    """The log records the engine emits for an OffsetCommit (what the Spark job's sink writes)."""
    from coordinator.engine import GroupCoordinator

    engine = GroupCoordinator(CoordinatorConfig())
    request = {
        "api": "offset_commit",
        "request_id": f"r-{group}-{now}",
        "group_id": group,
        "api_version": 9,
        "member_id": "",
        "group_instance_id": None,
        "generation_id": -1,
        "retention_time_ms": -1,
        "offsets": [
            {"topic": "t", "partition": p, "offset": o, "leader_epoch": -1, "metadata": ""}
            for p, o in offsets.items()
        ],
    }
    [answer] = engine.handle(request, now)
    assert answer["error_code"] == 0, answer
    return engine.drain_records()


@pytest.mark.slow
def test_log_source_follows_a_sink_written_table_incrementally(tmp_path: Path):
    """The Spark job's writer (DeltaSink) appends batches; the source indexes each version from
    the Delta log alone (no data file read), reads only the files a read needs, follows a
    compaction's rewrite, and serves the table's rows byte for byte."""
    from deltalake import DeltaTable

    from coordinator.stream.sink import DeltaSink

    tables = tmp_path / "tables"
    tables.mkdir()
    source = LogTopic(tables / "consumer_offsets", PARTITIONS)
    source.refresh_now()  # no table yet: empty partitions
    assert source.index_builds == 0
    assert all(source.end_offset(p) == 0 for p in range(PARTITIONS))
    sink = DeltaSink(tables, "job")

    def write(batch: int, group: str, offsets: dict[int, int]) -> None:
        sink.write_batch(
            batch,
            records=engine_records(group, offsets, 1_000_000 + batch),
            responses=[],
            groups=[],
            rejected=[],
            list_groups=[],
            emitted_at_ms=1_000_000 + batch,
            written_at_ms=1_000_000 + batch,
        )

    write(0, "alpha", {0: 1, 1: 2})
    source.refresh_now()
    assert source.index_builds == 1
    for batch in range(1, 6):
        write(batch, "alpha" if batch % 2 else "beta", {0: 10 * batch})
        source.refresh_now()
    assert source.index_builds == 6 and source.files_read == 0  # the Delta log only
    a, b = partition_for("alpha", PARTITIONS), partition_for("beta", PARTITIONS)
    assert [len(source.segments(p)) for p in (a, b)] == [4, 2]  # one file per append
    # The tail: only the newest file is read, and a second read comes from the cache.
    newest = source.segments(a)[-1]
    tail = source.records(a, newest.first)
    assert source.files_read == 1 and [r.offset for r in tail] == [newest.first]
    assert source.records(a, newest.first) == tail and source.files_read == 1
    table = DeltaTable(str(tables / "consumer_offsets"))
    table.optimize.compact()
    source.refresh_now()  # the rewrite replaces the small files in the index
    assert [len(source.segments(p)) for p in (a, b)] == [1, 1]
    write(6, "beta", {3: 3})
    source.refresh_now()
    expected = table_rows(tmp_path)
    for p in range(PARTITIONS):
        assert source.records(p) == expected.get(p, []), p
    assert source.end_offset(a) == 2 + 3 and source.end_offset(b) == 2 + 1
    # A source opened now serves the same rows.
    fresh = LogTopic(tables / "consumer_offsets", PARTITIONS)
    fresh.refresh_now()
    assert fresh.index_builds == 1
    assert [fresh.records(p) for p in range(PARTITIONS)] == [
        source.records(p) for p in range(PARTITIONS)
    ]


@pytest.mark.slow
def test_gateway_follows_a_table_another_process_writes(tmp_path: Path):
    """The gateway serving a log it does not write (the Spark job's table, written by the job's
    own DeltaSink): a waiting Fetch returns as soon as a new append is seen."""
    import threading

    from coordinator.stream.sink import DeltaSink

    tables = tmp_path / "tables"
    tables.mkdir()
    sink = DeltaSink(tables, "job")
    group = "written-elsewhere"
    p = partition_for(group, PARTITIONS)

    def write(batch: int) -> None:
        sink.write_batch(
            batch,
            records=engine_records(group, {batch: batch}, 2_000_000 + batch),
            responses=[],
            groups=[],
            rejected=[],
            list_groups=[],
            emitted_at_ms=2_000_000 + batch,
            written_at_ms=2_000_000 + batch,
        )

    write(0)
    running = Running(log_topic=LogTopic(tables / "consumer_offsets", PARTITIONS))
    try:
        assert list_offsets(running.port, p, -1)["offset"] == 1
        written_at: list[float] = []
        later = threading.Timer(0.2, lambda: (write(1), written_at.append(time.monotonic())))
        later.start()
        started = time.monotonic()
        answer = call(running.port, codec.FETCH, 12, fetch_body(p, 1, max_wait=1000))
        returned = time.monotonic()
        later.join()
        part = answer["responses"][0]["partitions"][0]
        if part["records"]:  # held until the append was seen, not for all of max_wait
            assert returned - started < 0.95 and returned - written_at[0] < 0.5
        else:  # the append took longer than max_wait (a loaded machine): it is there now
            answer = call(running.port, codec.FETCH, 12, fetch_body(p, 1))
            part = answer["responses"][0]["partitions"][0]
        [(_, [record])] = decode(part["records"])
        assert record.offset == 1 and part["high_watermark"] == 2
        assert log_codec.decode_offset_commit_value(record.value).offset == 1
        assert table_rows(tmp_path)[p][1] == LogRecord(
            record.offset, record.timestamp, record.key, record.value
        )
    finally:
        running.stop()


# --- through the gateway -------------------------------------------------------------------------


def test_metadata_and_offsets_without_a_warehouse(gateway: Running):
    flags = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    answer = call(gateway.port, codec.METADATA, 12, {"topics": None, **flags})
    topics = {t["name"]: t for t in answer["topics"]}
    assert topics[LOG_TOPIC]["is_internal"] is True
    assert len(topics[LOG_TOPIC]["partitions"]) == PARTITIONS
    assert topics["t"]["is_internal"] is False
    by_name = call(
        gateway.port,
        codec.METADATA,
        1,
        {"topics": [{"name": LOG_TOPIC, "topic_id": None}], **flags},
    )
    assert len(by_name["topics"][0]["partitions"]) == PARTITIONS
    assert list_offsets(gateway.port, 3, -2)["offset"] == 0
    assert list_offsets(gateway.port, 3, -1)["offset"] == 0
    assert list_offsets(gateway.port, PARTITIONS, -1)["error_code"] == 3
    started = time.monotonic()
    part = call(gateway.port, codec.FETCH, 12, fetch_body(3, 0, max_wait=300))["responses"][0][
        "partitions"
    ][0]
    assert time.monotonic() - started >= 0.25  # nothing to give: held for max_wait
    assert (part["error_code"], part["high_watermark"], part["records"]) == (0, 0, b"")


@pytest.mark.slow
def test_fetch_serves_the_table_byte_exact(tmp_path: Path):
    warehouse = tmp_path / "wh"
    running = Running(str(warehouse))
    try:
        port = running.port
        group = "reader-1"
        p = partition_for(group, PARTITIONS)
        commit(port, group, {0: 5, 1: 6})
        commit(port, group, {0: 7})
        deleted = call(port, codec.DELETE_GROUPS, 2, {"groups_names": [group]})  # tombstones
        assert deleted["results"][0]["error_code"] == 0
        rows = table_rows(warehouse)[p]
        assert any(r.value is None for r in rows)
        assert list_offsets(port, p, -2)["offset"] == 0
        assert list_offsets(port, p, -1)["offset"] == len(rows)
        middle = list_offsets(port, p, rows[2].timestamp)
        assert middle["offset"] == min(r.offset for r in rows if r.timestamp >= rows[2].timestamp)

        started = time.monotonic()
        answer = call(port, codec.FETCH, 12, fetch_body(p, 0, max_wait=1000))
        assert time.monotonic() - started < 0.5  # data: not held for max_wait
        part = answer["responses"][0]["partitions"][0]
        assert part["error_code"] == 0
        assert part["high_watermark"] == part["last_stable_offset"] == len(rows)
        assert part["log_start_offset"] == 0
        read = [r for _, rs in decode(part["records"]) for r in rs]
        assert [(r.offset, r.timestamp, r.key, r.value) for r in read] == [tuple(r) for r in rows]

        # From the middle, and a partition limit that fits one record only.
        part = call(port, codec.FETCH, 4, fetch_body(p, 1, max_bytes=BATCH_OVERHEAD + 1))
        read = [r for _, rs in decode(part["responses"][0]["partitions"][0]["records"]) for r in rs]
        assert [(r.offset, r.key, r.value) for r in read] == [(1, rows[1].key, rows[1].value)]

        # At the end: nothing, at once when max_wait is 0; beyond it: OFFSET_OUT_OF_RANGE.
        part = call(port, codec.FETCH, 12, fetch_body(p, len(rows)))["responses"][0]
        assert part["partitions"][0]["records"] == b""
        assert part["partitions"][0]["error_code"] == 0
        started = time.monotonic()
        part = call(port, codec.FETCH, 12, fetch_body(p, len(rows) + 1, max_wait=1000))
        assert time.monotonic() - started < 0.5
        beyond = part["responses"][0]["partitions"][0]
        assert beyond["error_code"] == OFFSET_OUT_OF_RANGE
        assert beyond["records"] == b""
        other = call(port, codec.FETCH, 12, fetch_body(p, -1))["responses"][0]["partitions"][0]
        assert other["error_code"] == OFFSET_OUT_OF_RANGE
    finally:
        running.stop()


@pytest.mark.slow
def test_kafka_python_consumer_reads_the_commits_and_our_codec_decodes_them(tmp_path: Path):
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition

    warehouse = tmp_path / "wh"
    running = Running(str(warehouse))
    consumer = None
    try:
        groups = {"kp-a": {0: 11, 1: 12}, "kp-b": {2: 21}, "kp-c": {3: 31, 4: 32, 5: 33}}
        for group, offsets in groups.items():
            commit(running.port, group, offsets)
        consumer = KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{running.port}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            check_crcs=True,
            consumer_timeout_ms=5000,
        )
        # Metadata lists it, as an internal topic (which topics() leaves out, as for Kafka's).
        assert consumer.partitions_for_topic(LOG_TOPIC) == set(range(PARTITIONS))
        assert LOG_TOPIC not in consumer.topics() and "t" in consumer.topics()
        wanted = sorted({partition_for(g, PARTITIONS) for g in groups})
        consumer.assign([TopicPartition(LOG_TOPIC, p) for p in wanted])
        consumer.seek_to_beginning()
        total = sum(len(o) for o in groups.values())
        messages = []
        deadline = time.monotonic() + 20
        while len(messages) < total and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                messages.extend(batch)
        assert len(messages) == total
        commits: dict[str, dict[int, int]] = {}
        for m in messages:
            key = log_codec.decode_key(m.key)
            assert isinstance(key, log_codec.OffsetCommitKey)
            assert m.partition == partition_for(key.group, PARTITIONS)
            value = log_codec.decode_offset_commit_value(m.value)
            assert value.metadata == f"m{value.offset}"
            commits.setdefault(key.group, {})[key.partition] = value.offset
        assert commits == groups
        expected = table_rows(warehouse)
        for m in messages:
            row = expected[m.partition][m.offset]
            assert (m.key, m.value, m.timestamp) == (row.key, row.value, row.timestamp)

        # Tailing: a new commit reaches the waiting consumer.
        commit(running.port, "kp-a", {0: 99})
        more: list[Any] = []
        deadline = time.monotonic() + 10
        while not more and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                more.extend(batch)
        assert [log_codec.decode_offset_commit_value(m.value).offset for m in more] == [99]
    finally:
        if consumer is not None:
            consumer.close()
        running.stop()


# --- kcat (librdkafka) ---------------------------------------------------------------------------

#: Each message as a header line, then its key and value bytes (lengths -1 when null).
KCAT_FORMAT = "%p %o %T %K %S\n%k%s"


def parse_kcat(out: bytes) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
    messages = []
    at = 0
    while at < len(out):
        end = out.index(b"\n", at)
        partition, offset, timestamp, key_len, value_len = map(int, out[at:end].split())
        at = end + 1
        key = None if key_len < 0 else out[at : at + key_len]
        at += max(key_len, 0)
        value = None if value_len < 0 else out[at : at + value_len]
        at += max(value_len, 0)
        messages.append((partition, offset, timestamp, key, value))
    return messages


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat is not installed (apt-get install kcat)"
)
def test_kcat_reads_the_log_topic(tmp_path: Path):
    warehouse = tmp_path / "wh"
    running = Running(str(warehouse))
    try:
        group = "kcat-group"
        p = partition_for(group, PARTITIONS)
        commit(running.port, group, {0: 1, 1: 2, 2: 3})
        commit(running.port, group, {1: 20}, topic="other")
        deleted = call(running.port, codec.DELETE_GROUPS, 2, {"groups_names": [group]})
        assert deleted["results"][0]["error_code"] == 0
        rows = table_rows(warehouse)[p]
        assert any(r.value is None for r in rows)  # the deletion's tombstones
        command = [
            "kcat",
            "-C",
            "-b",
            f"127.0.0.1:{running.port}",
            "-t",
            LOG_TOPIC,
            "-p",
            str(p),
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            KCAT_FORMAT,
        ]
        done = subprocess.run(command, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        got = parse_kcat(done.stdout)
        assert got == [(p, r.offset, r.timestamp, r.key, r.value) for r in rows]
        keys = [log_codec.decode_key(k) for _, _, _, k, _ in got if k is not None]
        assert {
            (k.topic, k.partition) for k in keys if isinstance(k, log_codec.OffsetCommitKey)
        } == {
            ("t", 0),
            ("t", 1),
            ("t", 2),
            ("other", 1),
        }
        # An empty partition: kcat reaches its end at once.
        empty = next(q for q in range(PARTITIONS) if q != p)
        done = subprocess.run(
            [*command[:7], str(empty), *command[8:]], capture_output=True, timeout=60, check=False
        )
        assert done.returncode == 0 and done.stdout == b"", done.stderr
    finally:
        running.stop()


# --- the index: files read as needed, compaction, vacuum, no statistics --------------------------


def _write_log(
    path: Path, rows: list[tuple[int, int, int, bytes, bytes | None]], **kw: Any
) -> None:
    """Append (offsets partition, offset, timestamp, key, value) rows to a log-shaped table."""
    import pyarrow as pa
    from deltalake import write_deltalake

    table = pa.table(
        {
            "offsets_partition": pa.array([r[0] for r in rows], pa.int32()),
            "offset": pa.array([r[1] for r in rows], pa.int64()),
            "timestamp_ms": pa.array([r[2] for r in rows], pa.int64()),
            "key": pa.array([r[3] for r in rows], pa.binary()),
            "value": pa.array([r[4] for r in rows], pa.binary()),
        }
    )
    write_deltalake(str(path), table, mode=kw.pop("mode", "append"), **kw)


def _rows(partition: int, offsets: range, keys: int = 3) -> list[Any]:
    """Records of ``keys`` keys in turn, each value naming its offset; time = 1000 + offset."""
    return [
        (partition, o, 1_000 + o, f"key-{o % keys}".encode(), f"value-{o}".encode())
        for o in offsets
    ]


@pytest.mark.slow
def test_reads_only_the_files_a_request_needs(tmp_path: Path):
    path = tmp_path / "consumer_offsets"
    for first in range(0, 50, 10):  # five files of ten records in partition 4
        _write_log(path, _rows(4, range(first, first + 10)), partition_by=["offsets_partition"])
    source = LogTopic(path, PARTITIONS)
    source.refresh_now()
    assert (source.log_start(4), source.end_offset(4), source.files_read) == (0, 50, 0)
    assert [(s.first, s.last, s.rows) for s in source.segments(4)] == [
        (f, f + 9, 10) for f in range(0, 50, 10)
    ]
    # A Fetch from the middle of the fourth file reads the fourth and the fifth only.
    part = source.fetch_partition(4, 35, 1 << 20)
    read = [r for _, rs in decode(part["records"]) for r in rs]
    assert [r.offset for r in read] == list(range(35, 50)) and source.files_read == 2
    # A byte budget that ends inside the first file reads that file only.
    one = len(encode_records([LogRecord(0, 1000, b"key-0", b"value-0")], 1 << 20)[0])
    part = source.fetch_partition(4, 0, one + 5 * 20)
    read = [r for _, rs in decode(part["records"]) for r in rs]
    assert read[0].offset == 0 and len(read) < 10 and source.files_read == 3
    # By time: the files' highest timestamps (statistics) pick the one file to read.
    assert source.list_offset(4, 1_022)["offset"] == 22 and source.files_read == 4
    assert source.list_offset(4, -3) == {
        "partition_index": 4,
        "error_code": 0,
        "timestamp": 1_049,
        "offset": 49,
        "leader_epoch": 0,
    }
    assert source.files_read == 4  # the newest file: cached since the Fetch
    assert source.list_offset(4, 5_000)["offset"] == -1  # later than every record
    assert source.files_read == 4  # answered from the statistics alone


@pytest.mark.slow
def test_the_cache_is_bounded(tmp_path: Path):
    path = tmp_path / "consumer_offsets"
    for first in range(0, 40, 10):
        _write_log(path, _rows(1, range(first, first + 10)), partition_by=["offsets_partition"])
    one_file = 10 * (100 + len(b"key-0") + len(b"value-10"))  # as the cache counts
    source = LogTopic(path, PARTITIONS, cache_bytes=2 * one_file)
    source.refresh_now()
    assert [r.offset for r in source.records(1)] == list(range(40))
    assert source.files_read == 4 and 0 < source.cached_bytes <= 2 * one_file
    source.records(1, 30)  # the newest file is still held
    assert source.files_read == 4
    source.records(1, 0)  # the oldest was dropped: read again
    assert source.files_read > 4 and source.cached_bytes <= 2 * one_file


@pytest.mark.slow
def test_compaction_leaves_sparse_offsets_and_vacuum_removes_files_under_a_reader(
    tmp_path: Path,
):
    """The log compacted as Kafka's cleaner does (the last record per key survives, with its
    offset) and written back as new files, the old ones vacuumed: the index follows the new
    version, a Fetch from a gap starts at the next record, and a reader whose index still
    names the removed files looks at the table again instead of failing."""
    from deltalake import DeltaTable

    path = tmp_path / "consumer_offsets"
    for first in range(0, 30, 10):
        _write_log(path, _rows(2, range(first, first + 10)), partition_by=["offsets_partition"])
    source = LogTopic(path, PARTITIONS)
    source.refresh_now()
    assert source.end_offset(2) == 30
    survivors = _rows(2, range(27, 30))  # keys 0, 1, 2: their last records
    _write_log(path, survivors, mode="overwrite", partition_by=["offsets_partition"])
    DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    # Not refreshed: the index names vacuumed files; the Fetch rebuilds it and answers.
    part = source.fetch_partition(2, 27, 1 << 20)
    read = [r for _, rs in decode(part["records"]) for r in rs]
    assert [(r.offset, r.value) for r in read] == [(o, f"value-{o}".encode()) for o in (27, 28, 29)]
    assert (source.log_start(2), source.end_offset(2)) == (0, 30)  # Kafka's cleaner: start 0
    # Sparse offsets: a Fetch from a gap starts at the next record; the batch keeps the gaps.
    _write_log(path, [(2, 40, 1_040, b"key-0", b"value-40")], partition_by=["offsets_partition"])
    source.refresh_now()
    assert source.end_offset(2) == 41
    part = source.fetch_partition(2, 30, 1 << 20)
    [(_, records)] = decode(part["records"])
    assert [r.offset for r in records] == [40] and part["high_watermark"] == 41
    part = source.fetch_partition(2, 28, 1 << 20)
    assert [r.offset for _, rs in decode(part["records"]) for r in rs] == [28, 29, 40]
    assert source.list_offset(2, 1_030)["offset"] == 40
    assert source.list_offset(2, -2)["offset"] == 0
    part = source.fetch_partition(2, 0, 1 << 20)  # the earliest: the first survivor on
    assert [r.offset for _, rs in decode(part["records"]) for r in rs] == [27, 28, 29, 40]
    assert source.fetch_partition(2, 42, 1 << 20)["error_code"] == OFFSET_OUT_OF_RANGE


@pytest.mark.slow
def test_files_without_statistics_and_an_unpartitioned_table(tmp_path: Path):
    path = tmp_path / "consumer_offsets"
    no_statistics = {"delta.dataSkippingNumIndexedCols": "0"}
    rows = _rows(0, range(0, 5)) + _rows(7, range(0, 4))
    _write_log(path, rows, configuration=no_statistics)
    source = LogTopic(path, PARTITIONS)
    source.refresh_now()
    assert source.files_read == 1  # indexed once, from its columns
    assert [(s.first, s.last, s.mixed) for s in source.segments(0)] == [(0, 4, True)]
    assert [r.offset for r in source.records(7)] == [0, 1, 2, 3]
    assert [r.value for r in source.records(0, 3)] == [b"value-3", b"value-4"]
    _write_log(path, _rows(7, range(4, 6)))
    before = source.files_read
    source.refresh_now()
    assert source.files_read == before + 1  # only the new file is indexed
    assert source.end_offset(7) == 6 and source.end_offset(0) == 5
    assert [r.offset for r in source.records(7, 2)] == [2, 3, 4, 5]
