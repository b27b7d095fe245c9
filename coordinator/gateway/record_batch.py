"""Kafka's v2 record batches (magic 2), as the Fetch API carries them: an encoder only; and the
message sets of magic 0 and 1 that Fetch v0-v3 read, which Kafka down-converts its batches to.

The layout is Kafka's ``DefaultRecordBatch`` and ``DefaultRecord``::

    RecordBatch => BaseOffset INT64, Length INT32 (the bytes after it), PartitionLeaderEpoch INT32,
                   Magic INT8 (2), CRC UINT32, Attributes INT16, LastOffsetDelta INT32,
                   BaseTimestamp INT64, MaxTimestamp INT64, ProducerId INT64, ProducerEpoch INT16,
                   BaseSequence INT32, RecordsCount INT32, Records
    Record      => Length VARINT, Attributes INT8, TimestampDelta VARLONG, OffsetDelta VARINT,
                   KeyLength VARINT (-1: null), Key, ValueLength VARINT (-1: null), Value,
                   HeadersCount VARINT (0 here)

The CRC is CRC-32C (Castagnoli) over everything from Attributes to the end of the batch.
Batches here are what Kafka's group coordinator writes to ``__consumer_offsets``: not
compressed, not transactional, CreateTime timestamps (attributes 0), no producer id (-1, -1,
-1); a tombstone is a record with a null value.

The older message sets are Kafka's ``LegacyRecord``, one per record, uncompressed::

    LogEntry => Offset INT64, MessageSize INT32, Message
    Message  => CRC UINT32, Magic INT8, Attributes INT8 (0: no compression, CreateTime),
                Timestamp INT64 (magic 1 only), Key BYTES, Value BYTES (-1: null)

with CRC-32 (zlib's, not Castagnoli) over everything from Magic to the end of the message.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from crc32c import crc32c

MAGIC = 2
#: BaseOffset .. RecordsCount: the batch header (Kafka's ``RECORD_BATCH_OVERHEAD``).
BATCH_OVERHEAD = 61
#: BaseOffset and Length, before the part that Length counts (Kafka's ``LOG_OVERHEAD``).
LOG_OVERHEAD = 12
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

# PartitionLeaderEpoch, Magic | CRC | Attributes .. RecordsCount
_HEAD = struct.Struct(">qiib")
_TAIL = struct.Struct(">hiqqqhii")


class LogRecord(NamedTuple):
    """One record of a partition: its offset, CreateTime timestamp, key and value (None for a
    tombstone)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def zigzag_varint(value: int) -> bytes:
    """Kafka's ``ByteUtils.writeVarlong`` (and ``writeVarint`` for values that fit): zig-zag,
    then 7 bits a byte, least significant first."""
    n = (value << 1) ^ (value >> 63)
    n &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None
) -> bytes:
    """One ``DefaultRecord``, its length prefix included (attributes 0, no headers)."""
    body = bytearray(b"\x00")  # attributes
    body += zigzag_varint(timestamp_delta)
    body += zigzag_varint(offset_delta)
    for part in (key, value):
        if part is None:
            body += zigzag_varint(-1)
        else:
            body += zigzag_varint(len(part))
            body += part
    body += b"\x00"  # no headers (varint 0)
    return zigzag_varint(len(body)) + bytes(body)


def encode_batch(records: Sequence[LogRecord], partition_leader_epoch: int = 0) -> bytes:
    """One v2 batch of ``records`` (at least one), in offset order; the first record's offset
    and timestamp are the batch's base offset and base timestamp."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    first = records[0]
    return _batch(
        first.offset,
        first.timestamp,
        [
            encode_record(r.offset - first.offset, r.timestamp - first.timestamp, r.key, r.value)
            for r in records
        ],
        records[-1].offset - first.offset,
        max(r.timestamp for r in records),
        partition_leader_epoch,
    )


def _batch(
    base_offset: int,
    base_timestamp: int,
    encoded: Sequence[bytes],
    last_offset_delta: int,
    max_timestamp: int,
    partition_leader_epoch: int,
) -> bytes:
    after_crc = _TAIL.pack(
        0,  # attributes: no compression, CreateTime, not transactional, not control
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        NO_PRODUCER_ID,
        NO_PRODUCER_EPOCH,
        NO_SEQUENCE,
        len(encoded),
    ) + b"".join(encoded)
    length = 4 + 1 + 4 + len(after_crc)  # PartitionLeaderEpoch, Magic, CRC, the rest
    return (
        _HEAD.pack(base_offset, length, partition_leader_epoch, MAGIC)
        + struct.pack(">I", crc32c(after_crc))
        + after_crc
    )


def encode_records(
    records: Iterable[LogRecord], max_bytes: int, partition_leader_epoch: int = 0
) -> tuple[bytes, int]:
    """``records`` (in offset order) as one batch of at most ``max_bytes``, the first record
    always included (Kafka returns at least one whole batch, whatever the limit): (the batch's
    bytes, the number of records in it). Records are taken only as far as the limit allows.
    Empty input gives ``(b"", 0)``."""
    encoded: list[bytes] = []
    size = BATCH_OVERHEAD
    first = last = None
    max_timestamp = 0
    for r in records:
        if first is None:
            first, max_timestamp = r, r.timestamp
        one = encode_record(r.offset - first.offset, r.timestamp - first.timestamp, r.key, r.value)
        if encoded and size + len(one) > max_bytes:
            break
        encoded.append(one)
        size += len(one)
        last = r
        max_timestamp = max(max_timestamp, r.timestamp)
    if first is None or last is None:
        return b"", 0
    data = _batch(
        first.offset,
        first.timestamp,
        encoded,
        last.offset - first.offset,
        max_timestamp,
        partition_leader_epoch,
    )
    return data, len(encoded)


def encode_message_set(records: Iterable[LogRecord], magic: int) -> bytes:
    """``records`` as a message set of ``magic`` 0 or 1, one message per record at its own
    offset: what Kafka's ``RecordsUtil.downConvert`` makes of an uncompressed batch (magic 0
    drops the timestamp)."""
    if magic not in (0, 1):
        raise ValueError(f"message sets have magic 0 or 1, not {magic}")
    out = bytearray()
    for r in records:
        message = bytearray(struct.pack(">bb", magic, 0))
        if magic == 1:
            message += struct.pack(">q", r.timestamp)
        for part in (r.key, r.value):
            if part is None:
                message += struct.pack(">i", -1)
            else:
                message += struct.pack(">i", len(part)) + part
        crc = zlib.crc32(message)
        out += struct.pack(">qiI", r.offset, 4 + len(message), crc) + message
    return bytes(out)
