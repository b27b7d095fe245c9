"""Kafka's v2 record batches (magic 2), as the Fetch API carries them, and the message sets of
magic 0 and 1 that Fetch v0-v3 read, which Kafka down-converts its batches to: encoders, and a
reader of what a broker's Fetch answer holds (:func:`decode_records`, for the down-conversion of
an upstream's answer).

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

Reading (:func:`decode_records`) takes what producers write: batches compressed with gzip
(attributes & 7 = 1) are decompressed with the standard library; snappy, lz4 and zstd are not
(no such library here) and raise :class:`UnsupportedCompression`. Control batches (transaction
markers) hold no records for consumers and are skipped; record headers are dropped, as Kafka's
down-conversion drops them. A batch cut short at the end of a Fetch answer is ignored.
"""

from __future__ import annotations

import gzip
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


#: The compression codecs of a batch's (or a wrapper message's) attributes & 7.
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_CONTROL = 0x20


class UnsupportedCompression(ValueError):
    """A batch compressed with a codec this reader cannot decompress."""

    def __init__(self, codec: int) -> None:
        super().__init__(f"records compressed with {CODECS.get(codec, codec)} cannot be read here")
        self.codec = codec


def fetch_magic(version: int) -> int:
    """The record format a Fetch version reads (Kafka down-converts to it): message sets of
    magic 0 for v0-v1, magic 1 for v2-v3, record batches (magic 2) from v4."""
    return 0 if version <= 1 else 1 if version <= 3 else 2


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


# --- reading ----------------------------------------------------------------------------------


def read_varint(data: bytes | memoryview, at: int) -> tuple[int, int]:
    """Kafka's zig-zag varint (or varlong) at ``at``: (value, where it ends)."""
    shift = n = 0
    while True:
        byte = data[at]
        at += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (n >> 1) ^ -(n & 1), at
        shift += 7


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.decompress(data)
    raise UnsupportedCompression(codec)


def _read_batch_records(batch: bytes) -> list[LogRecord]:
    """The records of one whole v2 batch (its bytes from BaseOffset on)."""
    base_offset = struct.unpack_from(">q", batch, 0)[0]
    attributes, _, base_timestamp, max_timestamp = struct.unpack_from(">hiqq", batch, 21)
    if attributes & _CONTROL:
        return []
    count = struct.unpack_from(">i", batch, 57)[0]
    body = _decompress(attributes & 7, batch[BATCH_OVERHEAD:])
    log_append_time = bool(attributes & 0x08)
    out, at = [], 0
    for _ in range(count):
        length, at = read_varint(body, at)
        end = at + length
        at += 1  # record attributes
        timestamp_delta, at = read_varint(body, at)
        offset_delta, at = read_varint(body, at)
        parts: list[bytes | None] = []
        for _part in (0, 1):
            size, at = read_varint(body, at)
            parts.append(None if size < 0 else bytes(body[at : at + size]))
            at += max(size, 0)
        at = end  # headers dropped
        timestamp = max_timestamp if log_append_time else base_timestamp + timestamp_delta
        out.append(LogRecord(base_offset + offset_delta, timestamp, parts[0], parts[1]))
    return out


def _read_message_set(data: bytes) -> list[LogRecord]:
    """The records of a message set of magic 0/1 (a compressed wrapper's inner messages
    included, their offsets made absolute as Kafka's ``AbstractLegacyRecordBatch`` does)."""
    out: list[LogRecord] = []
    at = 0
    while at + LOG_OVERHEAD <= len(data):
        offset, size = struct.unpack_from(">qi", data, at)
        if at + LOG_OVERHEAD + size > len(data):
            break
        message = data[at + LOG_OVERHEAD : at + LOG_OVERHEAD + size]
        at += LOG_OVERHEAD + size
        magic, attributes = struct.unpack_from(">bb", message, 4)
        pos, timestamp = 6, -1
        if magic == 1:
            timestamp = struct.unpack_from(">q", message, pos)[0]
            pos += 8
        parts: list[bytes | None] = []
        for _part in (0, 1):
            length = struct.unpack_from(">i", message, pos)[0]
            pos += 4
            parts.append(None if length < 0 else bytes(message[pos : pos + length]))
            pos += max(length, 0)
        codec = attributes & 7
        if codec == 0:
            out.append(LogRecord(offset, timestamp, parts[0], parts[1]))
            continue
        inner = _read_message_set(_decompress(codec, parts[1] or b""))
        if inner and magic == 1:  # relative offsets: the wrapper's is the last inner one's
            first = offset - inner[-1].offset
            inner = [r._replace(offset=first + r.offset) for r in inner]
        out.extend(inner)
    return out


def decode_records(data: bytes) -> list[LogRecord]:
    """The records of a Fetch answer's ``records``: v2 batches or message sets of magic 0/1,
    in order (module docstring: what is skipped, and what raises)."""
    out: list[LogRecord] = []
    at = 0
    while at + LOG_OVERHEAD + 5 <= len(data):
        length = struct.unpack_from(">i", data, at + 8)[0]
        end = at + LOG_OVERHEAD + length
        if end > len(data):
            break  # cut short by the answer's size limit
        magic = data[at + 16]
        chunk = bytes(data[at:end])
        out.extend(_read_batch_records(chunk) if magic >= 2 else _read_message_set(chunk))
        at = end
    return out
