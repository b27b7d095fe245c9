"""Upstream mode and the versions Kafka 4 removed: Fetch v0-v3 and ListOffsets v0 asked of a
stub broker that, like Kafka 4 and noida-db, closes the connection on them, at Fetch v4 and
ListOffsets v1, and answered as Kafka 3.9 answers them. The records are built by a real client's
encoder (aiokafka's record builders), the answers read by aiokafka's structs and legacy record
reader, and the message sets pinned byte for byte."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.protocol import fetch, offset
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

from coordinator.gateway import codec
from coordinator.gateway.record_batch import (
    LogRecord,
    UnsupportedCompression,
    decode_records,
    encode_batch,
)
from coordinator.gateway.upstream import (
    UNSUPPORTED_COMPRESSION_TYPE,
    advertised_versions,
    down_converted_fetch,
    down_converted_list_offsets,
)
from tests.gateway_support import Running
from tests.test_gateway_old_versions import Wire
from tests.upstream_support import (
    STUB_LOG_END,
    STUB_LOG_START,
    STUB_TIME_OFFSET,
    STUB_VERSIONS,
    StubBroker,
    upstream_gateway,
)

T1, T2, T3 = 1_700_000_000_001, 1_700_000_000_002, 1_700_000_000_003
#: What the stub holds at offsets 10-12 of ``t``-0.
RECORDS = [
    LogRecord(10, T1, b"k0", b"v0"),
    LogRecord(11, T2, b"k1", b"v1"),
    LogRecord(12, T3, None, b"v2"),
]
#: Offsets 11 and 12 as Fetch v2-v3 read them (magic 1) ...
MESSAGE_SET_V1 = bytes.fromhex(
    "000000000000000b0000001a"  # offset 11, size 26
    "c586df290100000001 8bcfe56802 000000026b31 000000027631".replace(" ", "")
    + "000000000000000c00000018"  # offset 12, size 24
    "6abe37400100000001 8bcfe56803 ffffffff 000000027632".replace(" ", "")
)
#: ... and as Fetch v0-v1 read them (magic 0: no timestamp).
MESSAGE_SET_V0 = bytes.fromhex(
    "000000000000000b0000001257e7496e0000 000000026b31 000000027631".replace(" ", "")
    + "000000000000000c00000010d5960a780000 ffffffff 000000027632".replace(" ", "")
)


def aiokafka_batch(records: list[LogRecord], compression: int = 0, headers: Any = ()) -> bytes:
    """A v2 batch as aiokafka's producer builds it, at the records' offsets."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    base = records[0].offset
    for r in records:
        builder.append(r.offset - base, r.timestamp, r.key, r.value, list(headers))
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)  # outside the CRC
    return bytes(data)


@pytest.fixture
def stub() -> Iterator[StubBroker]:
    broker = StubBroker(records=aiokafka_batch(RECORDS, headers=[("h", b"x")]))
    yield broker
    broker.stop()


@pytest.fixture
def fronted(stub: StubBroker) -> Iterator[Running]:
    running = upstream_gateway(stub.port)
    yield running
    running.stop()


@pytest.fixture
def wire(fronted: Running) -> Iterator[Wire]:
    connection = Wire(fronted.port)
    yield connection
    connection.close()


def read_message_set(data: bytes, magic: int) -> list[tuple[int, int | None, bytes | None, bytes]]:
    read, at = [], 0
    while at < len(data):
        size = struct.unpack_from(">i", data, at + 8)[0]
        batch = LegacyRecordBatch(data[at : at + 12 + size], magic)
        assert batch.validate_crc()
        read.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)
        at += 12 + size
    return read


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_old_fetch_is_asked_at_v4_and_down_converted_from_the_offset_asked(
    stub: StubBroker, wire: Wire, version: int
) -> None:
    cls = getattr(fetch, f"FetchRequest_v{version}")
    fields: dict[str, Any] = {"replica_id": -1, "max_wait_time": 10, "min_bytes": 1}
    if version == 3:
        fields["max_bytes"] = 1 << 20
    answer = wire.send(cls(topics=[("t", [(0, 11, 1 << 20), (1, 0, 1 << 20)])], **fields))
    [(topic, partitions)] = answer.topics
    assert topic == "t"
    assert [tuple(p[:3]) for p in partitions] == [(0, 0, STUB_LOG_END), (1, 0, STUB_LOG_END)]
    records = partitions[0][3]
    magic = 0 if version <= 1 else 1
    assert records == (MESSAGE_SET_V0 if magic == 0 else MESSAGE_SET_V1)
    assert read_message_set(records, magic) == [
        (11, T2 if magic else None, b"k1", b"v1"),
        (12, T3 if magic else None, None, b"v2"),
    ]
    assert partitions[1][3] == b""
    assert (codec.FETCH, 4) in stub.versions
    assert all(v >= 4 for k, v in stub.versions if k == codec.FETCH)


@pytest.mark.parametrize(
    ("version", "limit", "expected"),
    [
        (2, 38, [11]),  # v0-v2: a hard limit, whole messages only (magic 1: 38 bytes each)
        (1, 30, [11]),  # magic 0: 30 bytes (no timestamp)
        (0, 29, []),
        (3, 10, [11]),  # v3: one message at least
        (3, 2 * 38 + 2, [11, 12]),
    ],
)
def test_old_fetch_answers_whole_messages_within_the_partition_limit(
    wire: Wire, version: int, limit: int, expected: list[int]
) -> None:
    cls = getattr(fetch, f"FetchRequest_v{version}")
    fields: dict[str, Any] = {"replica_id": -1, "max_wait_time": 10, "min_bytes": 1}
    if version == 3:
        fields["max_bytes"] = 1 << 20
    answer = wire.send(cls(topics=[("t", [(0, 11, limit)])], **fields))
    records = answer.topics[0][1][0][3]
    assert len(records) <= limit or version == 3
    read = read_message_set(records, 0 if version <= 1 else 1)
    assert [offset for offset, *_ in read] == expected


@pytest.mark.parametrize(
    ("timestamp", "max_offsets", "expected"),
    [(-1, 1, [STUB_LOG_END]), (-2, 1, [STUB_LOG_START]), (T1, 1, [STUB_TIME_OFFSET]), (-1, 0, [])],
    ids=["latest", "earliest", "time", "none-asked"],
)
def test_list_offsets_v0_is_asked_at_v1_and_answered_old_style(
    stub: StubBroker, wire: Wire, timestamp: int, max_offsets: int, expected: list[int]
) -> None:
    answer = wire.send(
        offset.OffsetRequest_v0(replica_id=-1, topics=[("t", [(0, timestamp, max_offsets)])])
    )
    assert [(t, [tuple(p) for p in ps]) for t, ps in answer.topics] == [("t", [(0, 0, expected)])]
    assert [v for k, v in stub.versions if k == codec.LIST_OFFSETS] == [1]


def test_old_versions_are_advertised_when_the_upstream_serves_what_they_are_asked_at() -> None:
    table = advertised_versions(STUB_VERSIONS)  # Fetch 4-11, ListOffsets 1-5 upstream
    assert table[codec.FETCH] == (0, 11)
    assert table[codec.LIST_OFFSETS] == (0, 5)
    newer = advertised_versions({**STUB_VERSIONS, codec.FETCH: (5, 11), codec.LIST_OFFSETS: (2, 5)})
    assert newer[codec.FETCH] == (5, 11)
    assert newer[codec.LIST_OFFSETS] == (2, 5)


# --- reading what brokers hold --------------------------------------------------------------


def test_batches_of_a_real_client_are_read_compressed_or_not_headers_dropped() -> None:
    for compression in (0, 1):  # none, gzip
        data = aiokafka_batch(RECORDS, compression, headers=[("h", b"x")])
        assert decode_records(data) == RECORDS
    two = aiokafka_batch(RECORDS[:1]) + encode_batch(RECORDS[1:])
    assert decode_records(two + two[:30]) == RECORDS  # a batch cut short at the end: ignored


def test_legacy_message_sets_are_read_a_gzip_wrapper_included() -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 20)
    for i, r in enumerate(RECORDS):
        builder.append(i, r.timestamp, r.key, r.value)
    wrapper = bytearray(builder.build())
    struct.pack_into(">q", wrapper, 0, RECORDS[-1].offset)  # the wrapper: the last inner offset
    assert decode_records(bytes(wrapper)) == RECORDS
    assert decode_records(MESSAGE_SET_V1) == RECORDS[1:]
    assert [r.timestamp for r in decode_records(MESSAGE_SET_V0)] == [-1, -1]


def test_control_batches_hold_nothing_for_consumers() -> None:
    marker = bytearray(encode_batch([LogRecord(13, T3, b"\x00\x00\x00\x00", b"")]))
    struct.pack_into(">h", marker, 21, 0x30)  # transactional, control (the CRC is not checked)
    assert decode_records(bytes(marker)) == []


def test_a_codec_that_cannot_be_read_is_answered_unsupported_compression() -> None:
    snappy = bytearray(encode_batch(RECORDS))
    struct.pack_into(">h", snappy, 21, 2)
    with pytest.raises(UnsupportedCompression, match="snappy"):
        decode_records(bytes(snappy))
    asked = {"partition": 0, "fetch_offset": 10, "partition_max_bytes": 1 << 20}
    request = {"topics": [{"topic": "t", "partitions": [asked]}]}
    answer = {
        "throttle_time": 0,
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 13,
                        "records": bytes(snappy),
                    }
                ],
            }
        ],
    }
    [partition] = down_converted_fetch(2, request, answer)["responses"][0]["partitions"]
    assert (partition["error_code"], partition["records"]) == (UNSUPPORTED_COMPRESSION_TYPE, b"")


def test_list_offsets_down_conversion_gives_no_offset_for_an_error_or_none_found() -> None:
    request = {
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": p, "max_num_offsets": 1} for p in (0, 1)],
            }
        ]
    }
    answer = {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "error_code": 0, "offset": -1},
                    {"partition_index": 1, "error_code": 6, "offset": -1},
                ],
            }
        ]
    }
    converted = down_converted_list_offsets(request, answer)["topics"][0]["partitions"]
    assert [p["old_style_offsets"] for p in converted] == [[], []]
