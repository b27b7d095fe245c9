"""The versions Kafka 3.9 served and Kafka 4 removed (KIP-896): Produce v0-v2, Fetch v0-v3,
ListOffsets v0, OffsetCommit v0-v1 and OffsetFetch v0, read and written from Kafka 3.9's specs
(coordinator/gateway/legacy.py), checked against kio where they share a version, against
aiokafka's hand-written structs (a real client's codec for these versions) on the wire, and
for what they do to the group."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest
from aiokafka.protocol import commit, fetch, group, metadata, offset, produce
from aiokafka.record.legacy_records import LegacyRecordBatch

from coordinator import GroupCoordinator
from coordinator.config import CoordinatorConfig
from coordinator.gateway import codec, legacy
from coordinator.gateway.log_topic import legacy_offsets_before
from coordinator.gateway.record_batch import LogRecord, encode_message_set
from tests.gateway_support import REQUESTS, Running, call, read_frame

UNSUPPORTED_VERSION = 35
ILLEGAL_GENERATION = 22
UNKNOWN_TOPIC_OR_PARTITION = 3

OLD_VERSIONS = [
    (key, version)
    for key, (low, high) in sorted(legacy.VERSIONS.items())
    for version in range(low, high + 1)
]


# --- the specs: against kio where both have the version, and round trips ----------------------


@pytest.mark.parametrize("api_key", sorted(legacy.VERSIONS))
def test_the_spec_reader_agrees_with_kio_at_kios_lowest_version(gateway: Running, api_key: int):
    """At kio's floor (the version after the old ones, non-flexible in both), a request kio
    encodes reads back through the 3.9 spec as kio's plain data, and the gateway's answer
    encoded by kio is byte for byte what the spec writer makes of the same data: one naming
    (``throttle_time``, ``generation_id_or_member_epoch``) and one layout."""
    version = legacy.VERSIONS[api_key][1] + 1
    frame = codec.encode_request(api_key, version, 3, REQUESTS[api_key])[4:]
    decoded = codec.decode_request(frame)
    header_size = len(frame) - len(frame[frame.index(b"test") + 4 :])
    body, size = legacy.read(api_key, "Request", version, frame, header_size)
    assert header_size + size == len(frame)
    assert body == codec.plain(decoded.body)

    answer = call(gateway.port, api_key, version, REQUESTS[api_key])
    if api_key == codec.PRODUCE:  # kio reads a log append time of -1 (none) as None
        for t in answer["responses"]:
            for p in t["partition_responses"]:
                p["log_append_time"] = -1 if p["log_append_time"] is None else p["log_append_time"]
    kio_bytes = codec.encode_response(api_key, version, 3, answer)[8:]  # size, correlation id
    assert legacy.write(api_key, "Response", version, answer) == kio_bytes
    assert legacy.read(api_key, "Response", version, kio_bytes) == (answer, len(kio_bytes))


SAMPLES: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {
    codec.PRODUCE: (
        {
            "acks": 1,
            "timeout": 1500,
            "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": None}]}],
        },
        {
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {"index": 2, "error_code": 44, "base_offset": -1, "log_append_time": -1}
                    ],
                }
            ],
            "throttle_time": 0,
        },
    ),
    codec.FETCH: (
        {
            "replica_id": -1,
            "max_wait": 500,
            "min_bytes": 1,
            "max_bytes": 52428800,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": 1, "fetch_offset": 9, "partition_max_bytes": 1048576}
                    ],
                }
            ],
        },
        {
            "throttle_time": 0,
            "responses": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition_index": 1,
                            "error_code": 0,
                            "high_watermark": 9,
                            "records": b"\x00\x01",
                        }
                    ],
                }
            ],
        },
    ),
    codec.LIST_OFFSETS: (
        {
            "replica_id": -1,
            "topics": [
                {
                    "name": "t",
                    "partitions": [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 3}],
                }
            ],
        },
        {
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 0, "error_code": 0, "old_style_offsets": [7, 3, 0]}
                    ],
                }
            ]
        },
    ),
    codec.OFFSET_COMMIT: (
        {
            "group_id": "g",
            "generation_id_or_member_epoch": 4,
            "member_id": "m-1",
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 12,
                            "commit_timestamp": 1_700_000_000_000,
                            "committed_metadata": None,
                        }
                    ],
                }
            ],
        },
        {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]},
    ),
    codec.OFFSET_FETCH: (
        {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 5]}]},
        {
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": -1,
                            "metadata": "",
                            "error_code": 35,
                        }
                    ],
                }
            ]
        },
    ),
}


def _present(data: dict[str, Any], fields: tuple[legacy.Field, ...], version: int) -> Any:
    """``data`` cut to the fields the version has (what a round trip can give back)."""
    out: dict[str, Any] = {}
    for f in fields:
        if f.present(version):
            value = data[f.name]
            if f.fields and value is not None:
                value = [_present(item, f.fields, version) for item in value]
            out[f.name] = value
    return out


@pytest.mark.parametrize(("api_key", "version"), OLD_VERSIONS)
def test_old_versions_round_trip(api_key: int, version: int):
    for kind, sample in zip(("Request", "Response"), SAMPLES[api_key], strict=True):
        expected = _present(sample, legacy.message(api_key, kind).fields, version)
        data = legacy.write(api_key, kind, version, sample)
        assert legacy.read(api_key, kind, version, data) == (expected, len(data))
        with pytest.raises(legacy.SpecError):
            legacy.read(api_key, kind, version, data[:-1])


def test_offset_commit_v1_bytes_are_the_specs():
    """OffsetCommit v1, byte by byte from OffsetCommitRequest.json: group, generation, member,
    topics[name, partitions[index, offset, commit timestamp, metadata (null: -1)]]."""
    expected = (
        b"\x00\x01g"
        + struct.pack(">i", 4)
        + b"\x00\x03m-1"
        + struct.pack(">i", 1)
        + b"\x00\x01t"
        + struct.pack(">iiqqh", 1, 0, 12, 1_700_000_000_000, -1)
    )
    sample = SAMPLES[codec.OFFSET_COMMIT][0]
    assert legacy.write(codec.OFFSET_COMMIT, "Request", 1, sample) == expected
    v0 = legacy.write(codec.OFFSET_COMMIT, "Request", 0, sample)  # no generation, member, time
    assert v0 == b"\x00\x01g" + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(
        ">iiqh", 1, 0, 12, -1
    )


def test_flexible_and_unknown_versions_are_refused():
    with pytest.raises(legacy.SpecError, match="flexible"):
        legacy.write(codec.OFFSET_COMMIT, "Request", 8, SAMPLES[codec.OFFSET_COMMIT][0])
    with pytest.raises(legacy.SpecError, match="no version"):
        legacy.read(codec.OFFSET_FETCH, "Request", 10, b"")
    with pytest.raises(legacy.SpecError, match="required"):
        legacy.write(codec.OFFSET_COMMIT, "Request", 1, {"group_id": "g"})


# --- on the wire: aiokafka's structs for the old versions ----------------------------------------


class Wire:
    """One connection, framing requests as aiokafka does and decoding with its response types."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation_id = 0

    def send(self, request: Any) -> Any:
        self.correlation_id += 1
        header = request.build_request_header(self.correlation_id, "sarama")
        message = header.encode() + request.encode()
        self.sock.sendall(struct.pack(">i", len(message)) + message)
        frame = read_frame(self.sock)
        assert frame is not None, "the gateway closed the connection"
        assert struct.unpack_from(">i", frame)[0] == self.correlation_id
        return request.RESPONSE_TYPE.decode(frame[4:])

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def wire(gateway: Running) -> Any:
    connection = Wire(gateway.port)
    yield connection
    connection.close()


def commit_v1(group: str, generation: int, member: str, timestamp: int) -> Any:
    return commit.OffsetCommitRequest_v1(
        consumer_group=group,
        consumer_group_generation_id=generation,
        consumer_id=member,
        topics=[("t", [(0, 42, timestamp, "meta"), (3, 7, timestamp, "")])],
    )


def fetch_v9(port: int, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    body = {"groups": [{"group_id": group, "topics": None}], "require_stable": False}
    answer = call(port, codec.OFFSET_FETCH, 9, body)
    return {
        (t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"])
        for t in answer["groups"][0]["topics"]
        for p in t["partitions"]
    }


def test_api_versions_advertises_every_version_kafka_3_9_serves(gateway: Running):
    answer = call(gateway.port, codec.API_VERSIONS, 3, REQUESTS[codec.API_VERSIONS])
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert ranges[codec.OFFSET_COMMIT] == (0, 9)
    assert ranges[codec.OFFSET_FETCH] == (0, 9)
    assert ranges[codec.LIST_OFFSETS][0] == ranges[codec.FETCH][0] == 0
    assert ranges[codec.PRODUCE][0] == ranges[codec.METADATA][0] == 0


def test_offset_commit_v1_simple_commit_is_read_back_by_v9_and_v1(gateway: Running, wire: Wire):
    """A v1 commit with generation -1 and no member is a simple commit; its explicit commit
    timestamp becomes the offset's (and the record's) commit timestamp."""
    answer = wire.send(commit_v1("simple", -1, "", 1_650_000_000_000))
    assert [(t, [tuple(p) for p in ps]) for t, ps in answer.topics] == [("t", [(0, 0), (3, 0)])]
    assert fetch_v9(gateway.port, "simple") == {("t", 0): (42, "meta"), ("t", 3): (7, "")}
    read = wire.send(commit.OffsetFetchRequest_v1(consumer_group="simple", topics=[("t", [0, 1])]))
    assert [(t, [tuple(p) for p in ps]) for t, ps in read.topics] == [
        ("t", [(0, 42, "meta", 0), (1, -1, "", 0)])
    ]
    committed = gateway.gateway.backend.engine.group("simple").offsets[("t", 0)]
    assert committed.commit_timestamp_ms == 1_650_000_000_000
    assert committed.expire_timestamp_ms is None


def test_offset_commit_v1_without_a_timestamp_is_stamped_now(gateway: Running, wire: Wire):
    before = int(time.time() * 1000)
    answer = wire.send(commit_v1("stamped", -1, "", -1))
    assert all(p[1] == 0 for _, ps in answer.topics for p in ps)
    stamp = gateway.gateway.backend.engine.group("stamped").offsets[("t", 0)].commit_timestamp_ms
    assert before <= stamp <= int(time.time() * 1000)


def test_offset_commit_v1_record_is_kafkas_value_v3_with_the_clients_timestamp():
    engine = GroupCoordinator(CoordinatorConfig())
    request = {
        "api": "offset_commit",
        "request_id": "c1",
        "group_id": "g",
        "api_version": 1,
        "offsets": [
            {"topic": "t", "partition": 0, "offset": 42, "metadata": "m", "commit_timestamp_ms": 5}
        ],
    }
    (response,) = engine.handle(request, 1_000)
    assert response["partitions"][0]["error_code"] == 0
    (record,) = engine.drain_records()
    # OffsetCommitValue v3: version, offset, leader epoch (-1), metadata, commit timestamp.
    assert record["value"] == struct.pack(">hqih", 3, 42, -1, 1) + b"m" + struct.pack(">q", 5)
    assert record["timestamp_ms"] == 1_000  # the batch is appended now
    # Only v1 carries the timestamp: v2 ignores it.
    engine.handle(dict(request, request_id="c2", api_version=2), 2_000)
    assert engine.group("g").offsets[("t", 0)].commit_timestamp_ms == 2_000


def test_offset_commit_v1_member_commit_checks_the_generation(gateway: Running, wire: Wire):
    answer = wire.send(commit_v1("nobody", 3, "m-1", -1))  # no such group, generation >= 0
    assert {p[1] for _, ps in answer.topics for p in ps} == {ILLEGAL_GENERATION}
    assert gateway.gateway.backend.engine.group("nobody") is None


def test_offset_commit_and_fetch_v0_are_unsupported_as_on_a_zookeeperless_kafka_3_9(
    gateway: Running, wire: Wire
):
    """Kafka 3.9 kept v0 offsets in ZooKeeper, apart from the coordinator; without ZooKeeper it
    answers UNSUPPORTED_VERSION for every partition, commits nothing and keeps the connection."""
    request = commit.OffsetCommitRequest_v0(
        consumer_group="zk", topics=[("t", [(0, 42, "meta"), (1, 3, "")])]
    )
    answer = wire.send(request)
    assert [(t, [tuple(p) for p in ps]) for t, ps in answer.topics] == [
        ("t", [(0, UNSUPPORTED_VERSION), (1, UNSUPPORTED_VERSION)])
    ]
    assert gateway.gateway.backend.engine.group("zk") is None
    wire.send(commit_v1("zk", -1, "", -1))  # committed where v1+ reads
    read = wire.send(commit.OffsetFetchRequest_v0(consumer_group="zk", topics=[("t", [0])]))
    assert [(t, [tuple(p) for p in ps]) for t, ps in read.topics] == [
        ("t", [(0, -1, "", UNSUPPORTED_VERSION)])
    ]
    assert fetch_v9(gateway.port, "zk")[("t", 0)] == (42, "meta")


def test_list_offsets_v0_answers_old_style_offsets(wire: Wire):
    request = offset.OffsetRequest_v0(
        replica_id=-1,
        topics=[
            ("t", [(0, -1, 1), (1, -2, 5), (2, 1_000, 1), (3, -1, 0), (4, -3, 1), (9, -1, 1)]),
            ("missing", [(0, -1, 1)]),
        ],
    )
    answer = wire.send(request)
    assert [(t, [tuple(p) for p in ps]) for t, ps in answer.topics] == [
        (
            "t",
            [
                (0, 0, [0]),
                (1, 0, [0]),
                (2, 0, [0]),
                (3, 0, []),  # max_num_offsets 0
                (4, UNSUPPORTED_VERSION, []),  # -3 (max timestamp) came with v7
                (9, UNKNOWN_TOPIC_OR_PARTITION, []),
            ],
        ),
        ("missing", [(0, UNKNOWN_TOPIC_OR_PARTITION, [])]),
    ]


def test_legacy_offsets_before_is_kafkas():
    """(start offset, last modified) per segment, then (end, now): UnifiedLog's algorithm."""
    segments = [(0, 100), (10, 200), (25, 300), (40, 10_000)]
    assert legacy_offsets_before(segments, -1, 1) == [40]
    assert legacy_offsets_before(segments, -1, 10) == [40, 25, 10, 0]
    assert legacy_offsets_before(segments, -2, 3) == [0]
    assert legacy_offsets_before(segments, 250, 2) == [10, 0]
    assert legacy_offsets_before(segments, 50, 2) == []  # older than every segment
    assert legacy_offsets_before(segments, -1, 0) == []


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_v0_to_v3_answers_empty_records(wire: Wire, version: int):
    cls = getattr(fetch, f"FetchRequest_v{version}")
    fields: dict[str, Any] = {"replica_id": -1, "max_wait_time": 10, "min_bytes": 1}
    if version == 3:
        fields["max_bytes"] = 1 << 20
    started = time.monotonic()
    answer = wire.send(cls(topics=[("t", [(1, 17, 1 << 20)]), ("nope", [(0, 0, 100)])], **fields))
    assert time.monotonic() - started >= 0.01  # held for max_wait, as Kafka holds an empty fetch
    topics = answer.topics
    assert [(t, [tuple(p) for p in ps]) for t, ps in topics] == [
        ("t", [(1, 0, 17, b"")]),
        ("nope", [(0, UNKNOWN_TOPIC_OR_PARTITION, 0, b"")]),
    ]
    if version >= 1:
        assert answer.throttle_time_ms == 0


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_is_refused_per_partition(wire: Wire, version: int):
    cls = getattr(produce, f"ProduceRequest_v{version}")
    answer = wire.send(cls(required_acks=1, timeout=1000, topics=[("t", [(0, b"")])]))
    ((topic, partitions),) = answer.topics
    assert topic == "t" and partitions[0][:2] == (0, 44)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_metadata_v0_to_v3(wire: Wire, gateway: Running, version: int):
    cls = getattr(metadata, f"MetadataRequest_v{version}")
    answer = wire.send(cls(topics=[] if version == 0 else None))  # every topic either way
    assert [tuple(b)[:3] for b in answer.brokers] == [(0, "127.0.0.1", gateway.port)]
    names = {t[1] for t in answer.topics}
    assert {"t", "other"} <= names


def test_a_sarama_connection_commits_v1_fetches_v3_and_heartbeats_on_one_socket(
    gateway: Running, wire: Wire
):
    """sarama 1.22's defaults: OffsetCommit v1 and Fetch v3 on the connection it heartbeats on;
    none of them may close it."""
    join = call(gateway.port, codec.JOIN_GROUP, 0, REQUESTS[codec.JOIN_GROUP])
    member, generation = join["member_id"], join["generation_id"]
    assignments = [{"member_id": member, "assignment": b""}]
    body = dict(REQUESTS[codec.SYNC_GROUP], member_id=member, generation_id=generation)
    assert (
        call(gateway.port, codec.SYNC_GROUP, 0, dict(body, assignments=assignments))["error_code"]
        == 0
    )
    for _ in range(2):
        answer = wire.send(commit_v1("g", generation, member, -1))
        assert {p[1] for _, ps in answer.topics for p in ps} == {0}
        request = fetch.FetchRequest_v3(
            replica_id=-1,
            max_wait_time=0,
            min_bytes=1,
            max_bytes=1024,
            topics=[("t", [(0, 0, 1024)])],
        )
        assert wire.send(request).topics[0][1][0][1] == 0
        beat = wire.send(
            group.HeartbeatRequest_v0(group="g", generation_id=generation, member_id=member)
        )
        assert beat.error_code == 0
    assert fetch_v9(gateway.port, "g")[("t", 0)] == (42, "meta")


# --- the message sets Fetch v0-v3 carry ----------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
def test_message_sets_are_read_by_aiokafkas_legacy_reader(magic: int):
    records = [
        LogRecord(5, 1_700_000_000_001, b"k1", b"v1"),
        LogRecord(6, 1_700_000_000_002, b"k2", None),  # a tombstone
    ]
    data = encode_message_set(records, magic)
    read = []
    position = 0
    while position < len(data):
        size = struct.unpack_from(">i", data, position + 8)[0]
        batch = LegacyRecordBatch(data[position : position + 12 + size], magic)
        assert batch.validate_crc()
        read.extend(batch)
        position += 12 + size
    assert [(r.offset, r.key, r.value) for r in read] == [(5, b"k1", b"v1"), (6, b"k2", None)]
    expected_time = [1_700_000_000_001, 1_700_000_000_002] if magic == 1 else [None, None]
    assert [r.timestamp for r in read] == expected_time


def _read_message_set(data: bytes, magic: int) -> list[Any]:
    read, position = [], 0
    while position < len(data):
        size = struct.unpack_from(">i", data, position + 8)[0]
        batch = LegacyRecordBatch(data[position : position + 12 + size], magic)
        assert batch.validate_crc()
        read.extend(batch)
        position += 12 + size
    return read


@pytest.mark.slow
def test_old_versions_read_the_log_topic_as_kafka_3_9_down_converts_it(tmp_path: Any):
    """Fetch v0-v3 of ``__consumer_offsets`` get message sets of magic 0 (v0-v1) or 1 (v2-v3),
    one message per record; ListOffsets v0 takes each file of a partition for a segment."""
    from coordinator.gateway.log_topic import LOG_TOPIC, LogTopic
    from tests.test_gateway_log_topic import PARTITIONS, _rows, _write_log

    path = tmp_path / "consumer_offsets"
    _write_log(path, _rows(4, range(0, 10)), partition_by=["offsets_partition"])
    _write_log(path, _rows(4, range(10, 15)), partition_by=["offsets_partition"])
    running = Running(log_topic=LogTopic(path, PARTITIONS))
    try:
        connection = Wire(running.port)
        for version in range(4):
            cls = getattr(fetch, f"FetchRequest_v{version}")
            fields: dict[str, Any] = {"replica_id": -1, "max_wait_time": 0, "min_bytes": 1}
            if version == 3:
                fields["max_bytes"] = 1 << 20
            answer = connection.send(cls(topics=[(LOG_TOPIC, [(4, 3, 1 << 20)])], **fields))
            ((_, ((partition, error, high_watermark, records),)),) = answer.topics
            assert (partition, error, high_watermark) == (4, 0, 15)
            magic = 0 if version <= 1 else 1
            read = _read_message_set(records, magic)
            assert [(r.offset, r.key, r.value) for r in read] == [
                (o, f"key-{o % 3}".encode(), f"value-{o}".encode()) for o in range(3, 15)
            ]
            assert [r.timestamp for r in read] == (
                [1_000 + o for o in range(3, 15)] if magic else [None] * 12
            )
        # v0-v2 limits are hard: a partition limit smaller than the first record gives nothing.
        tight = connection.send(
            fetch.FetchRequest_v2(
                replica_id=-1, max_wait_time=0, min_bytes=1, topics=[(LOG_TOPIC, [(4, 3, 20)])]
            )
        )
        assert tight.topics[0][1][0][3] == b""

        listed = connection.send(
            offset.OffsetRequest_v0(
                replica_id=-1,
                topics=[
                    (LOG_TOPIC, [(4, -1, 1), (4, -1, 10), (4, -2, 10), (4, 1_012, 10), (5, -1, 3)])
                ],
            )
        )
        assert [tuple(p) for p in listed.topics[0][1]] == [
            (4, 0, [15]),
            (4, 0, [15, 10, 0]),
            (4, 0, [0]),
            (4, 0, [0]),  # the second file was last written at 1_014
            (5, 0, [0]),  # an empty partition: one empty segment at the log start
        ]
        connection.close()
    finally:
        running.stop()
