"""One group's whole live state as one versioned, compact, deterministic blob.

The Spark job keeps each group id's :class:`~coordinator.group.model.ClassicGroup` in its state
store between micro-batches as one binary value. :func:`encode_group` writes it and
:func:`decode_group` reads it back: ``decode_group(encode_group(g)) == g`` for every group, timers
and every dict's order included, so a step continues from the decoded copy exactly as it would
have from the original; and equal groups encode to the same bytes (with the same zlib: the
uncompressed body is canonical, zlib's output may differ between its builds). The timer heap is
written as the live timers' own entries (:meth:`~coordinator.group.timers.TimerBook.
live_timer_entries`), in order: the heap a group holds (stale entries, anchors of timers re-armed
later) is not its state (:mod:`coordinator.group.timers`), and a blob of an earlier release, with
its stale entries, reads as before.

Blob layout of a classic group (version 7)::

    version    unsigned varint (7); decode_group dispatches on it, so a later release can
               still read this layout after it writes a newer one
    codec      1 byte: 0 = the untimed part stored as is, 1 = zlib-compressed
    length     unsigned varint: the stored untimed part's length in bytes
    untimed    the body up to the group's timers (:func:`_write_untimed`), compressed when
               that makes it smaller
    timed      the rest of the body (:func:`_write_timed`), never compressed
    crc        4 bytes, big-endian CRC-32 of everything before it

The body (untimed, then timed) is version 5's. Version 7 splits it so that a step which
changed only the group's timers (a heartbeat: :attr:`coordinator.step.StepResult.timers_only`)
writes only the timed part again, with no compression, behind the stored untimed part it
kept (:class:`UntimedPart`), and so that a reader holding the group of an earlier blob with
the same stored untimed part reads only the timed part (:func:`decode_timed`).

Older layouts (versions 1, 2, 3 and 5), still read::

    version    unsigned varint (1, 2, 3 or 5)
    codec      1 byte: 0 = body stored as is, 1 = body zlib-compressed
    body       the group (below), compressed when that makes the blob smaller
    crc        4 bytes, big-endian CRC-32 of everything before it

The body is the fields of each dataclass in declaration order, one writer and one reader per
dataclass (``_write_member`` / ``_read_member_v1``, ...), built from these primitives. Version 2
appends one field to version 1's body, the group's ``rebalance_reason`` (an ``opt_text``); a
version-1 blob decodes with ``rebalance_reason`` None. Version 3 appends the group's
``clock_ms`` (an ``opt_time``) to version 2's body; older blobs decode with ``clock_ms`` None.
Version 5 appends the group's ``undelivered`` timers (:class:`~coordinator.group.timers.
Undelivered`): an ``opt_time`` (None: none), then when there are some a ``seq`` and a ``time``
(its ``answered_ms``, ``after_seq`` and ``tag``); older blobs decode with ``undelivered`` None.
Version 4 is a consumer group's layout; version 6 appends the same field to it.

- ``uint``: unsigned LEB128 varint of up to 2048 bytes (Python ints are unbounded; 14336 bits
  is more than Python parses from a string); counts and enum codes.
- ``sint``: zigzag ``uint``; ``opt_sint``: 0 = None, else zigzag + 1.
- ``time`` / ``opt_time`` (timestamps and deadlines) and ``seq`` (timer sequence numbers): a
  ``sint`` / ``opt_sint`` of the difference from the previous one of its kind in the blob
  (from 0 for the first), so that epoch milliseconds take a byte or two, not six.
- ``text``: a string, interned per blob. A varint header h: odd = the (h >> 1)-th string already
  in this blob; h & 3 == 2 = a new string of h >> 2 UTF-8 bytes that follow (``surrogatepass``:
  any ``str`` round-trips); h == 4 = a new string made of the two texts that follow (written
  for "<prefix>-<a string already in the blob>": a heartbeat timer's key is "heartbeat-" + a
  member id); h == 0 = None (``opt_text`` only). Member ids recur in timer keys, timer payloads,
  the heap, the leader and the static mapping: each is spelt out once.
- ``blob``: bytes, interned the same way in a table of their own (members usually subscribe with
  identical metadata); odd = reference, h & 3 == 2 = new.
- ``value``: a tagged value for the fields typed ``Any`` (a parked request's id, a timer's
  payload): None, bool, int, float, str, bytes, list, tuple and dict, tuple kept apart from list.
- group states are codes in :data:`_STATES_V1`, independent of the enum's order.

A frozenset (``subscribed_topics``) is written sorted; everything else keeps its order. A
member is followed by its key in ``members`` as an ``opt_text``: None (one byte) when the key is
its member id, as it always is in the engine.

The primitives are this module's own rather than :mod:`coordinator.serde`'s: those are Kafka's
wire rules (varints of at most 32 bits, strings of at most 32767 strict UTF-8 bytes, fixed-width
integers), while a snapshot must hold any value the engine holds, and compactly.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.group.model import (
    ClassicGroup,
    Member,
    OffsetAndMetadata,
    ParkedRequest,
)
from coordinator.group.states import GroupState
from coordinator.group.timers import Timer, Undelivered
from coordinator.log import records as log
from coordinator.log.modern_records import RecordBuilder
from coordinator.log.records import Group
from coordinator.modern.model import ConsumerGroup

__all__ = [
    "SNAPSHOT_VERSION",
    "SnapshotError",
    "UntimedPart",
    "decode_group",
    "decode_timed",
    "encode_classic_group",
    "encode_group",
]

SNAPSHOT_VERSION = 7
"""The layout :func:`encode_group` writes for a classic group (the blob's first byte)."""
CONSUMER_SNAPSHOT_VERSION = 6
"""The layout of a consumer group's blob: the records that rebuild it, then its timers (version
6 appends its undelivered timers to version 4's)."""


class SnapshotError(ValueError):
    """The bytes are not a group snapshot this release can read (unknown version, corrupt)."""


# -- constants of versions 1 to 5 ------------------------------------------------------------------

#: Group states by their code in versions 1, 2, 3 and 5 (the position in this tuple).
_STATES_V1: tuple[GroupState, ...] = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)
_STATE_CODES_V1: dict[GroupState, int] = {state: code for code, state in enumerate(_STATES_V1)}

_CODEC_RAW = 0
_CODEC_ZLIB = 1
#: Bodies shorter than this are not worth a compression attempt.
_COMPRESS_MIN_BYTES = 128
_ZLIB_LEVEL = 6
_CRC = struct.Struct(">I")
#: Integers up to 2048 varint bytes: more digits than Python parses from a string (4300).
_MAX_VARINT_BITS = 7 * 2048

# Headers of ``text`` and ``blob`` (odd: a reference to an earlier one).
_H_NONE = 0
_H_LITERAL = 2  # (length << 2) | 2, the bytes follow
_H_CONCAT = 4  # a text made of two texts that follow (text only)

# Tags of ``value``.
_V_NONE = 0
_V_FALSE = 1
_V_TRUE = 2
_V_INT = 3
_V_FLOAT = 4
_V_STR = 5
_V_BYTES = 6
_V_LIST = 7
_V_TUPLE = 8
_V_DICT = 9
_FLOAT = struct.Struct(">d")


# -- primitives ------------------------------------------------------------------------------------


class _Out:
    """Append-only body writer with per-blob string and bytes tables."""

    __slots__ = ("_blobs", "_last_seq", "_last_time", "_texts", "buf")

    def __init__(self) -> None:
        self.buf = bytearray()
        self._texts: dict[str, int] = {}
        self._blobs: dict[bytes, int] = {}
        self._last_time = 0
        self._last_seq = 0

    def uint(self, n: int) -> None:
        if 0 <= n <= 0x7F:  # most counts, codes and deltas: one byte, no checks
            self.buf.append(n)
            return
        if n < 0 or n.bit_length() > _MAX_VARINT_BITS:
            raise ValueError(f"integer out of a snapshot's range ({n.bit_length()} bits)")
        buf = self.buf
        while n > 0x7F:
            buf.append((n & 0x7F) | 0x80)
            n >>= 7
        buf.append(n)

    def sint(self, n: int) -> None:
        zigzag = n << 1 if n >= 0 else ((-n) << 1) - 1
        if zigzag <= 0x7F:
            self.buf.append(zigzag)
        else:
            self.uint(zigzag)

    def opt_sint(self, n: int | None) -> None:
        if n is None:
            self.buf.append(0)
        else:
            self.uint((n << 1 if n >= 0 else ((-n) << 1) - 1) + 1)

    def time(self, ms: int) -> None:
        self.sint(ms - self._last_time)
        self._last_time = ms

    def opt_time(self, ms: int | None) -> None:
        if ms is None:
            self.buf.append(0)
        else:
            self.opt_sint(ms - self._last_time)
            self._last_time = ms

    def seq(self, n: int) -> None:
        self.sint(n - self._last_seq)
        self._last_seq = n

    def flag(self, b: bool) -> None:
        self.buf.append(1 if b else 0)

    def text(self, s: str) -> None:
        texts = self._texts
        index = texts.get(s)
        if index is not None:
            header = (index << 1) | 1
            if header <= 0x7F:
                self.buf.append(header)
            else:
                self.uint(header)
            return
        cut = s.find("-") + 1
        if 0 < cut < len(s) and s[cut:] in texts:  # "heartbeat-" + a member id seen before
            self.buf.append(_H_CONCAT)
            self.text(s[:cut])
            self.text(s[cut:])
        else:
            data = s.encode("utf-8", "surrogatepass")
            self.uint((len(data) << 2) | _H_LITERAL)
            self.buf += data
        texts[s] = len(texts)

    def opt_text(self, s: str | None) -> None:
        if s is None:
            self.buf.append(0)
        else:
            self.text(s)

    def blob(self, b: bytes) -> None:
        index = self._blobs.get(b)
        if index is not None:
            self.uint((index << 1) | 1)
            return
        self._blobs[b] = len(self._blobs)
        self.uint((len(b) << 2) | _H_LITERAL)
        self.buf += b

    def value(self, v: Any) -> None:
        """A tagged value; raises TypeError for a type outside the list in the module doc."""
        buf = self.buf
        if v is None:
            buf.append(_V_NONE)
        elif v is True:
            buf.append(_V_TRUE)
        elif v is False:
            buf.append(_V_FALSE)
        elif isinstance(v, int):
            buf.append(_V_INT)
            self.sint(v)
        elif isinstance(v, float):
            buf.append(_V_FLOAT)
            buf += _FLOAT.pack(v)
        elif isinstance(v, str):
            buf.append(_V_STR)
            self.text(v)
        elif isinstance(v, bytes):
            buf.append(_V_BYTES)
            self.blob(v)
        elif isinstance(v, (list, tuple)):
            buf.append(_V_TUPLE if isinstance(v, tuple) else _V_LIST)
            self.uint(len(v))
            for item in v:
                self.value(item)
        elif isinstance(v, dict):
            buf.append(_V_DICT)
            self.uint(len(v))
            for key, item in v.items():
                self.value(key)
                self.value(item)
        else:
            raise TypeError(f"cannot snapshot a value of type {type(v).__name__}: {v!r}")


class _In:
    """Cursor over a body; every malformed read raises SnapshotError."""

    __slots__ = ("_blobs", "_data", "_last_seq", "_last_time", "_pos", "_texts")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0
        self._texts: list[str] = []
        self._blobs: list[bytes] = []
        self._last_time = 0
        self._last_seq = 0

    @property
    def position(self) -> int:
        return self._pos

    def remaining(self) -> int:
        return len(self._data) - self._pos

    def _take(self, n: int) -> bytes:
        pos = self._pos
        end = pos + n
        if end > len(self._data):
            raise SnapshotError(f"truncated snapshot: {n} bytes wanted at offset {pos}")
        self._pos = end
        return self._data[pos:end]

    def uint(self) -> int:
        pos = self._pos
        try:
            b = self._data[pos]
        except IndexError:
            raise SnapshotError(f"truncated snapshot: varint wanted at offset {pos}") from None
        if b < 0x80:  # the common case: one byte
            self._pos = pos + 1
            return b
        data = self._data
        value = 0
        shift = 0
        while True:
            if pos >= len(data):
                raise SnapshotError(f"truncated snapshot: varint cut at offset {pos}")
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift >= _MAX_VARINT_BITS:
                raise SnapshotError(f"corrupt snapshot: varint too long at offset {self._pos}")
        self._pos = pos
        return value

    def count(self) -> int:
        """A count of items that each take at least one byte."""
        n = self.uint()
        if n > self.remaining():
            raise SnapshotError(f"corrupt snapshot: {n} items cannot fit in the bytes left")
        return n

    def sint(self) -> int:
        z = self.uint()
        return -((z + 1) >> 1) if z & 1 else z >> 1

    def opt_sint(self) -> int | None:
        z = self.uint()
        if z == 0:
            return None
        z -= 1
        return -((z + 1) >> 1) if z & 1 else z >> 1

    def time(self) -> int:
        self._last_time += self.sint()
        return self._last_time

    def opt_time(self) -> int | None:
        delta = self.opt_sint()
        if delta is None:
            return None
        self._last_time += delta
        return self._last_time

    def seq(self) -> int:
        self._last_seq += self.sint()
        return self._last_seq

    def flag(self) -> bool:
        b = self.uint()
        if b > 1:
            raise SnapshotError(f"corrupt snapshot: boolean byte {b}")
        return b == 1

    def opt_text(self) -> str | None:
        h = self.uint()
        if h & 1:
            index = h >> 1
            if index >= len(self._texts):
                raise SnapshotError(f"corrupt snapshot: string reference {index}")
            return self._texts[index]
        if h & 3 == _H_LITERAL:
            try:
                s = self._take(h >> 2).decode("utf-8", "surrogatepass")
            except UnicodeDecodeError as exc:
                raise SnapshotError(f"corrupt snapshot: {exc}") from exc
        elif h == _H_CONCAT:
            s = self.text()
            s += self.text()
        elif h == _H_NONE:
            return None
        else:
            raise SnapshotError(f"corrupt snapshot: string header {h}")
        self._texts.append(s)
        return s

    def text(self) -> str:
        s = self.opt_text()
        if s is None:
            raise SnapshotError("corrupt snapshot: null where a string is required")
        return s

    def blob(self) -> bytes:
        h = self.uint()
        if h & 1:
            index = h >> 1
            if index >= len(self._blobs):
                raise SnapshotError(f"corrupt snapshot: bytes reference {index}")
            return self._blobs[index]
        if h & 3 != _H_LITERAL:
            raise SnapshotError(f"corrupt snapshot: bytes header {h}")
        b = self._take(h >> 2)
        self._blobs.append(b)
        return b

    def value(self) -> Any:
        tag = self.uint()
        if tag == _V_NONE:
            return None
        if tag == _V_FALSE:
            return False
        if tag == _V_TRUE:
            return True
        if tag == _V_INT:
            return self.sint()
        if tag == _V_FLOAT:
            (f,) = _FLOAT.unpack(self._take(_FLOAT.size))
            return f
        if tag == _V_STR:
            return self.text()
        if tag == _V_BYTES:
            return self.blob()
        if tag in (_V_LIST, _V_TUPLE):
            items = [self.value() for _ in range(self.count())]
            return tuple(items) if tag == _V_TUPLE else items
        if tag == _V_DICT:
            n = self.count()
            out: dict[Any, Any] = {}
            for _ in range(n):
                key = self.value()
                out[key] = self.value()
            return out
        raise SnapshotError(f"corrupt snapshot: unknown value tag {tag}")


# -- versions 1 to 5: one writer and one reader per dataclass --------------------------------------
#
# The writers write the newest layout (SNAPSHOT_VERSION). To change it: bump SNAPSHOT_VERSION,
# change the writers, add ``_read_*_v<N>`` readers where the layout changed and an entry in
# ``_DECODERS``, and keep every older reader (with the primitives it uses) so that older
# checkpoints still load. Versions 2, 3 and 5 changed only the group (``_read_group_v2``,
# ``_read_group_v3``, ``_read_group_v5``; 4 and 6 are consumer groups'); members, offsets,
# timers and parked requests are still read by their version-1 readers.


def _write_parked(out: _Out, parked: ParkedRequest) -> None:
    out.value(parked.request_id)
    out.sint(parked.api_version)


def _read_parked_v1(inp: _In) -> ParkedRequest:
    return ParkedRequest(request_id=inp.value(), api_version=inp.sint())


def _write_member(out: _Out, member: Member) -> None:
    # Written on every step of the group: a text already in the blob (a client id, a protocol,
    # the metadata members share) is a one-byte reference, appended here without a call.
    buf = out.buf
    texts = out._texts
    out.text(member.member_id)
    if member.group_instance_id is None:
        buf.append(0)
    else:
        out.text(member.group_instance_id)
    for text in (member.client_id, member.client_host):
        index = texts.get(text)
        if index is not None and index <= 0x3F:
            buf.append((index << 1) | 1)
        else:
            out.text(text)
    out.sint(member.rebalance_timeout_ms)
    out.sint(member.session_timeout_ms)
    index = texts.get(member.protocol_type)
    if index is not None and index <= 0x3F:
        buf.append((index << 1) | 1)
    else:
        out.text(member.protocol_type)
    out.uint(len(member.protocols))
    blobs = out._blobs
    for name, metadata in member.protocols:
        index = texts.get(name)
        if index is not None and index <= 0x3F:
            buf.append((index << 1) | 1)
        else:
            out.text(name)
        index = blobs.get(metadata)
        if index is not None and index <= 0x3F:
            buf.append((index << 1) | 1)
        else:
            out.blob(metadata)
    out.blob(member.assignment)
    buf.append(1 if member.is_new else 0)
    if member.awaiting_join:
        out.uint(len(member.awaiting_join))
        for parked in member.awaiting_join:
            _write_parked(out, parked)
    else:
        buf.append(0)
    if member.awaiting_sync:
        out.uint(len(member.awaiting_sync))
        for parked in member.awaiting_sync:
            _write_parked(out, parked)
    else:
        buf.append(0)


def _read_member_v1(inp: _In) -> Member:
    return Member(
        member_id=inp.text(),
        group_instance_id=inp.opt_text(),
        client_id=inp.text(),
        client_host=inp.text(),
        rebalance_timeout_ms=inp.sint(),
        session_timeout_ms=inp.sint(),
        protocol_type=inp.text(),
        protocols=[(inp.text(), inp.blob()) for _ in range(inp.count())],
        assignment=inp.blob(),
        is_new=inp.flag(),
        awaiting_join=[_read_parked_v1(inp) for _ in range(inp.count())],
        awaiting_sync=[_read_parked_v1(inp) for _ in range(inp.count())],
    )


def _write_offset(out: _Out, offset: OffsetAndMetadata) -> None:
    out.sint(offset.committed_offset)
    out.opt_sint(offset.leader_epoch)
    out.text(offset.metadata)
    out.time(offset.commit_timestamp_ms)
    out.opt_time(offset.expire_timestamp_ms)


def _read_offset_v1(inp: _In) -> OffsetAndMetadata:
    return OffsetAndMetadata(
        committed_offset=inp.sint(),
        leader_epoch=inp.opt_sint(),
        metadata=inp.text(),
        commit_timestamp_ms=inp.time(),
        expire_timestamp_ms=inp.opt_time(),
    )


def _write_timer(out: _Out, timer: Timer) -> None:
    out.time(timer.deadline_ms)
    out.seq(timer.seq)
    out.text(timer.kind)
    out.value(timer.payload)


def _read_timer_v1(inp: _In) -> Timer:
    return Timer(deadline_ms=inp.time(), seq=inp.seq(), kind=inp.text(), payload=inp.value())


def _write_state(out: _Out, state: GroupState) -> None:
    out.uint(_STATE_CODES_V1[state])


def _read_state_v1(inp: _In) -> GroupState:
    code = inp.uint()
    if code >= len(_STATES_V1):
        raise SnapshotError(f"corrupt snapshot: unknown group state code {code}")
    return _STATES_V1[code]


def _write_untimed(out: _Out, group: ClassicGroup) -> None:
    """A classic group's body up to its timers: what a step that only re-arms timers (a
    heartbeat) leaves as it was."""
    out.text(group.group_id)
    out.opt_time(group.current_state_timestamp_ms)
    _write_state(out, group.state)
    _write_state(out, group.previous_state)
    out.sint(group.generation_id)
    out.opt_text(group.protocol_type)
    out.opt_text(group.protocol_name)
    out.opt_text(group.leader_id)
    out.uint(len(group.members))
    for key, member in group.members.items():
        _write_member(out, member)
        # The key is the member's id in every group the engine builds: say so in one byte.
        out.opt_text(None if key == member.member_id else key)
    out.uint(len(group.static_members))
    for instance_id, member_id in group.static_members.items():
        out.text(instance_id)
        out.text(member_id)
    out.uint(len(group.pending_members))
    for member_id in group.pending_members:
        out.text(member_id)
    out.uint(len(group.pending_sync_members))
    for member_id in group.pending_sync_members:
        out.text(member_id)
    out.sint(group.num_awaiting_join)
    out.uint(len(group.supported_protocols))
    for name, count in group.supported_protocols.items():
        out.text(name)
        out.sint(count)
    if group.subscribed_topics is None:
        out.uint(0)
    else:
        out.uint(len(group.subscribed_topics) + 1)
        for topic in sorted(group.subscribed_topics):
            out.text(topic)
    out.flag(group.new_member_added)
    out.uint(len(group.offsets))
    for (topic, partition), offset in group.offsets.items():
        out.text(topic)
        out.sint(partition)
        _write_offset(out, offset)


def _write_timed(out: _Out, group: ClassicGroup) -> None:
    """The rest of a classic group's body after :func:`_write_untimed`: its timers, the heap,
    the timer sequence, the rebalance reason and the clock."""
    # Timers and the heap are most of a busy group's blob and rewritten on every heartbeat:
    # ``_write_timer``, ``out.text(key)`` and ``out.time`` / ``out.seq`` inlined for the
    # commonest cases (one-byte references, deltas and zigzags); the bytes are the same.
    buf = out.buf
    texts = out._texts
    last_time = out._last_time
    last_seq = out._last_seq
    out.uint(len(group.timers))
    for key, timer in group.timers.items():
        index = texts.get(key)
        if index is not None and index <= 0x3F:
            buf.append((index << 1) | 1)
        else:
            # Most often a key first seen here, "heartbeat-" + a member id: what ``text``
            # writes then when both parts are one-byte references.
            head = rest = 0x40  # no reference yet
            cut = key.find("-") + 1
            if index is None and 0 < cut < len(key):
                head = texts.get(key[:cut], 0x40)
                if head <= 0x3F:
                    rest = texts.get(key[cut:], 0x40)
            if rest <= 0x3F:
                buf.append(_H_CONCAT)
                buf.append((head << 1) | 1)
                buf.append((rest << 1) | 1)
                texts[key] = len(texts)
            else:
                out.text(key)
        delta = timer.deadline_ms - last_time
        zigzag = delta << 1 if delta >= 0 else ((-delta) << 1) - 1
        if zigzag <= 0x7F:
            buf.append(zigzag)
        else:
            out.uint(zigzag)
        last_time = timer.deadline_ms
        delta = timer.seq - last_seq
        zigzag = delta << 1 if delta >= 0 else ((-delta) << 1) - 1
        if zigzag <= 0x7F:
            buf.append(zigzag)
        else:
            out.uint(zigzag)
        last_seq = timer.seq
        index = texts.get(timer.kind)
        if index is not None and index <= 0x3F:
            buf.append((index << 1) | 1)
        else:
            out.text(timer.kind)
        payload = timer.payload
        index = texts.get(payload) if type(payload) is str else None
        if index is not None and index <= 0x3F:
            buf.append(_V_STR)
            buf.append((index << 1) | 1)
        else:
            out.value(payload)
    heap = group.live_timer_entries()
    out.uint(len(heap))
    for deadline_ms, seq, key in heap:
        delta = deadline_ms - last_time
        zigzag = delta << 1 if delta >= 0 else ((-delta) << 1) - 1
        if zigzag <= 0x7F:
            buf.append(zigzag)
        else:
            out.uint(zigzag)
        last_time = deadline_ms
        delta = seq - last_seq
        zigzag = delta << 1 if delta >= 0 else ((-delta) << 1) - 1
        if zigzag <= 0x7F:
            buf.append(zigzag)
        else:
            out.uint(zigzag)
        last_seq = seq
        index = texts.get(key)
        if index is not None and index <= 0x3F:
            buf.append((index << 1) | 1)
        else:
            out.text(key)
    out._last_time = last_time
    out._last_seq = last_seq
    out.seq(group.timer_seq)
    # Version 2.
    out.opt_text(group.rebalance_reason)
    # Version 3.
    out.opt_time(group.clock_ms)
    # Version 5.
    _write_undelivered(out, group.undelivered)


def _write_undelivered(out: _Out, undelivered: Undelivered | None) -> None:
    """Versions 5 and 6: the timers waiting for their answers' delivery (``opt_time``, then
    the timer sequence and the tag when there are some)."""
    if undelivered is None:
        out.opt_time(None)
        return
    out.opt_time(undelivered.answered_ms)
    out.seq(undelivered.after_seq)
    out.time(undelivered.tag)


def _read_undelivered_v5(inp: _In) -> Undelivered | None:
    answered_ms = inp.opt_time()
    if answered_ms is None:
        return None
    return Undelivered(answered_ms, inp.seq(), inp.time())


def _read_members_v1(inp: _In) -> dict[str, Member]:
    members: dict[str, Member] = {}
    for _ in range(inp.count()):
        member = _read_member_v1(inp)
        key = inp.opt_text()
        members[member.member_id if key is None else key] = member
    return members


def _read_subscribed_topics_v1(inp: _In) -> frozenset[str] | None:
    n = inp.uint()
    if n == 0:
        return None
    if n - 1 > inp.remaining():
        raise SnapshotError(f"corrupt snapshot: {n - 1} topics cannot fit in the bytes left")
    return frozenset(inp.text() for _ in range(n - 1))


def _read_group_v1(inp: _In) -> ClassicGroup:
    group = _read_untimed_v1(inp)
    _read_timed_v1(inp, group)
    return group


def _read_untimed_v1(inp: _In) -> ClassicGroup:
    """What :func:`_write_untimed` wrote: the group without its timers."""
    return ClassicGroup(
        group_id=inp.text(),
        current_state_timestamp_ms=inp.opt_time(),
        state=_read_state_v1(inp),
        previous_state=_read_state_v1(inp),
        generation_id=inp.sint(),
        protocol_type=inp.opt_text(),
        protocol_name=inp.opt_text(),
        leader_id=inp.opt_text(),
        members=_read_members_v1(inp),
        static_members={inp.text(): inp.text() for _ in range(inp.count())},
        pending_members={inp.text(): None for _ in range(inp.count())},
        pending_sync_members={inp.text(): None for _ in range(inp.count())},
        num_awaiting_join=inp.sint(),
        supported_protocols={inp.text(): inp.sint() for _ in range(inp.count())},
        subscribed_topics=_read_subscribed_topics_v1(inp),
        new_member_added=inp.flag(),
        offsets={(inp.text(), inp.sint()): _read_offset_v1(inp) for _ in range(inp.count())},
    )


def _read_timed_v1(inp: _In, group: ClassicGroup) -> None:
    group.timers = {inp.text(): _read_timer_v1(inp) for _ in range(inp.count())}
    group.timer_heap = [(inp.time(), inp.seq(), inp.text()) for _ in range(inp.count())]
    group.timer_seq = inp.seq()


def _read_timed_v5(inp: _In, group: ClassicGroup) -> None:
    """What :func:`_write_timed` wrote (version 5's end of the body, version 7's timed part),
    onto ``group``: every field it holds is set."""
    _read_timed_v1(inp, group)
    group.rebalance_reason = inp.opt_text()
    group.clock_ms = inp.opt_time()
    group.undelivered = _read_undelivered_v5(inp)


def _read_group_v2(inp: _In) -> ClassicGroup:
    group = _read_group_v1(inp)
    group.rebalance_reason = inp.opt_text()
    return group


def _read_group_v3(inp: _In) -> ClassicGroup:
    group = _read_group_v2(inp)
    group.clock_ms = inp.opt_time()
    return group


def _read_group_v5(inp: _In) -> ClassicGroup:
    group = _read_group_v3(inp)
    group.undelivered = _read_undelivered_v5(inp)
    return group


# -- consumer groups (version 4) --------------------------------------------------------------
#
# A consumer group is what its records make it, so its blob holds the records that rebuild it
# (Kafka's own key and value bytes, as a load reads them: the one replay path) and then what no
# record carries: its timers, their heap entries, the timer sequence and its clock.


def consumer_group_records(group: ConsumerGroup) -> list[dict[str, Any]]:
    """Records that rebuild ``group`` when replayed from nothing, in an order the replay takes."""
    build = RecordBuilder(group.group_id, 0, log.BLANK_RECORD)
    records = [
        build.epoch(group.group_epoch),
        build.subscription_metadata(group.subscription_metadata),
    ]
    for regex, topics in group.resolved_regexes.items():
        records.append(build.regular_expression(regex, list(topics), 0))
    for member in group.members.values():
        records.append(build.member_subscription(member))
        if member.member_id in group.target_assignment:
            records.append(
                build.target_assignment(member.member_id, group.target_assignment[member.member_id])
            )
        records.append(build.current_assignment(member))
    for member_id, assignment in group.target_assignment.items():
        if member_id not in group.members:
            records.append(build.target_assignment(member_id, assignment))
    if group.assignment_epoch == -1:
        records.append(build.target_assignment_epoch_tombstone())
    else:
        records.append(build.target_assignment_epoch(group.assignment_epoch))
    for (topic, partition), offset in group.offsets.items():
        records.append(log.offset_commit_record(group.group_id, topic, partition, offset, 0))
    return records


def _write_consumer_group(out: _Out, group: ConsumerGroup) -> None:
    out.text(group.group_id)
    records = consumer_group_records(group)
    out.uint(len(records))
    for record in records:
        out.blob(record["key"])
        out.flag(record["value"] is None)
        out.blob(record["value"] or b"")
    out.uint(len(group.timers))
    for key, timer in group.timers.items():
        out.text(key)
        _write_timer(out, timer)
    heap = group.live_timer_entries()
    out.uint(len(heap))
    for deadline_ms, seq, key in heap:
        out.time(deadline_ms)
        out.seq(seq)
        out.text(key)
    out.seq(group.timer_seq)
    out.opt_time(group.clock_ms)
    # Version 6.
    _write_undelivered(out, group.undelivered)


def _read_consumer_group_v4(inp: _In) -> ConsumerGroup:
    group_id = inp.text()
    state: Group | None = None
    for _ in range(inp.count()):
        record_key, tombstone, value = inp.blob(), inp.flag(), inp.blob()
        record = log.record_from_bytes(record_key, None if tombstone else value)
        if record is None or record["group_id"] != group_id:
            raise SnapshotError("corrupt snapshot: a record of another group or type")
        state = log.apply_record(state, record, 0, live=False)
    if not isinstance(state, ConsumerGroup):
        raise SnapshotError("corrupt snapshot: the records do not make a consumer group")
    state.timers = {}
    for _ in range(inp.count()):
        key = inp.text()
        state.timers[key] = _read_timer_v1(inp)
    state.timer_heap = [(inp.time(), inp.seq(), inp.text()) for _ in range(inp.count())]
    state.timer_seq = inp.seq()
    state.clock_ms = inp.opt_time()
    return state


def _read_consumer_group_v6(inp: _In) -> ConsumerGroup:
    group = _read_consumer_group_v4(inp)
    group.undelivered = _read_undelivered_v5(inp)
    return group


# -- framing ---------------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = _Out()
    out.uint(n)
    return bytes(out.buf)


@dataclass(frozen=True, slots=True)
class UntimedPart:
    """The start of a version-7 blob up to its timed part, as :func:`encode_classic_group`
    wrote it for a classic group: the version, codec, length and stored untimed part
    (``head``), their CRC-32, and the writer's string and bytes tables and deltas where the
    timed part begins. With it, the blob of the group with other timers is ``head``, the new
    timed part and a CRC (:func:`encode_classic_group`), and a blob that starts with ``head``
    is read from its timed part on (:func:`decode_timed`)."""

    head: bytes
    head_crc: int
    texts: dict[str, int]
    blobs: dict[bytes, int]
    last_time: int
    last_seq: int


def encode_classic_group(
    group: ClassicGroup, untimed: UntimedPart | None = None
) -> tuple[bytes, UntimedPart]:
    """:func:`encode_group` of a classic group, and the start of its blob up to the timers.

    With ``untimed`` (the part an earlier call returned for this group), the untimed part is
    neither written nor compressed again, only the timed part (timers, heap, timer sequence,
    rebalance reason, clock) is: the caller vouches that nothing else of the group has changed
    since (no field and nothing in a member, an offset or a table), as after a step that served
    only heartbeats and fired no timer (:attr:`coordinator.step.StepResult.timers_only`). The
    bytes are then exactly :func:`encode_group`'s."""
    out = _Out()
    if untimed is None:
        _write_untimed(out, group)
        codec, stored = _compressed(bytes(out.buf))
        head = _PREFIXES[SNAPSHOT_VERSION] + bytes((codec,)) + _varint(len(stored)) + stored
        untimed = UntimedPart(
            head, zlib.crc32(head), dict(out._texts), dict(out._blobs), out._last_time,
            out._last_seq,
        )  # fmt: skip
        out.buf = bytearray()
    else:
        out._texts = dict(untimed.texts)
        out._blobs = dict(untimed.blobs)
        out._last_time = untimed.last_time
        out._last_seq = untimed.last_seq
    _write_timed(out, group)
    timed = bytes(out.buf)
    return untimed.head + timed + _CRC.pack(zlib.crc32(timed, untimed.head_crc)), untimed


def decode_timed(blob: bytes, group: ClassicGroup, untimed: UntimedPart) -> ClassicGroup:
    """The group of ``blob``, a blob that starts with ``untimed.head``, from ``group``: the
    group whose blob ``untimed`` was written for, taken as it is (the caller gives it up: its
    timed fields are replaced by ``blob``'s). Equal to :func:`decode_group` of ``blob``,
    because the two blobs' untimed parts are the same bytes; only the timed part is read.

    Raises :class:`SnapshotError` when ``blob`` does not start with ``untimed.head`` or is
    corrupt (``group`` may then be partly changed)."""
    if not blob.startswith(untimed.head):
        raise SnapshotError("the blob does not start with the given untimed part")
    _check_crc(blob)
    inp = _In(blob[len(untimed.head) : len(blob) - _CRC.size])
    inp._texts = list(untimed.texts)
    inp._blobs = list(untimed.blobs)
    inp._last_time = untimed.last_time
    inp._last_seq = untimed.last_seq
    try:
        _read_timed_v5(inp, group)
    except SnapshotError:
        raise
    except Exception as exc:  # as decode_group: whatever else malformed bytes trip over
        raise SnapshotError(f"corrupt snapshot: {type(exc).__name__}: {exc}") from exc
    if inp.remaining():
        raise SnapshotError("corrupt snapshot: bytes left over after the group")
    return group


def encode_group(group: Group) -> bytes:
    """The group as a version-:data:`SNAPSHOT_VERSION` blob (deterministic); a consumer group
    as a version-:data:`CONSUMER_SNAPSHOT_VERSION` one.

    Raises TypeError if a parked request id or a timer payload is of a type a snapshot cannot
    hold (see the module doc; the engine only ever puts str, int, None and tuples of ints there),
    ValueError for an integer of 14336 bits or more.
    """
    if not isinstance(group, ConsumerGroup):
        return encode_classic_group(group)[0]
    out = _Out()
    _write_consumer_group(out, group)
    return _frame(CONSUMER_SNAPSHOT_VERSION, out.buf)


#: The version prefixes of the layouts this release writes.
_PREFIXES = {v: _varint(v) for v in (SNAPSHOT_VERSION, CONSUMER_SNAPSHOT_VERSION)}


def _compressed(body: bytes) -> tuple[int, bytes]:
    """(codec, stored bytes): ``body`` compressed when that makes it smaller."""
    if len(body) >= _COMPRESS_MIN_BYTES:
        packed = zlib.compress(body, _ZLIB_LEVEL)
        if len(packed) < len(body):
            return _CODEC_ZLIB, packed
    return _CODEC_RAW, body


def _frame(version: int, written: bytearray) -> bytes:
    """A body in its frame: version, codec (compressed when that makes it smaller), CRC-32."""
    codec, body = _compressed(bytes(written))
    head = _PREFIXES[version] + bytes((codec,))
    return head + body + _CRC.pack(zlib.crc32(body, zlib.crc32(head)))


def _decode_v1(blob: bytes, pos: int) -> Group:
    """Version 1: ``codec`` byte, body, CRC-32 (``pos`` is just past the version)."""
    return _decode_framed(blob, pos, _read_group_v1)


def _decode_v2(blob: bytes, pos: int) -> Group:
    """Version 2: version 1's frame around version 2's body."""
    return _decode_framed(blob, pos, _read_group_v2)


def _decode_v3(blob: bytes, pos: int) -> Group:
    """Version 3: version 1's frame around version 3's body."""
    return _decode_framed(blob, pos, _read_group_v3)


def _decode_v4(blob: bytes, pos: int) -> Group:
    """Version 4 (a consumer group): version 1's frame around a consumer group's body."""
    return _decode_framed(blob, pos, _read_consumer_group_v4)


def _decode_v5(blob: bytes, pos: int) -> Group:
    """Version 5: version 1's frame around version 5's body."""
    return _decode_framed(blob, pos, _read_group_v5)


def _decode_v6(blob: bytes, pos: int) -> Group:
    """Version 6 (a consumer group): version 4's body and its undelivered timers."""
    return _decode_framed(blob, pos, _read_consumer_group_v6)


def _decode_v7(blob: bytes, pos: int) -> Group:
    """Version 7: ``codec`` byte, the stored untimed part's length and bytes, the timed part,
    CRC-32 (``pos`` is just past the version)."""
    _check_crc(blob, pos)
    codec = blob[pos]
    header = _In(blob[pos + 1 : len(blob) - _CRC.size])
    length = header.uint()
    start = pos + 1 + header.position
    if length > header.remaining():
        raise SnapshotError(f"truncated snapshot: an untimed part of {length} bytes")
    untimed = _inflated(codec, blob[start : start + length])
    inp = _In(untimed + blob[start + length : len(blob) - _CRC.size])
    group = _read_untimed_v1(inp)
    if inp.position != len(untimed):
        raise SnapshotError("corrupt snapshot: the untimed part does not end where it should")
    _read_timed_v5(inp, group)
    if inp.remaining():
        raise SnapshotError("corrupt snapshot: bytes left over after the group")
    return group


def _check_crc(blob: bytes, pos: int = 0) -> None:
    """The CRC-32 at the end of ``blob``, of everything before it; ``pos`` is where the codec
    byte is (just past the version), which must leave room for it and the CRC."""
    if len(blob) < pos + 1 + _CRC.size:
        raise SnapshotError(f"truncated snapshot: {len(blob)} bytes")
    (crc,) = _CRC.unpack_from(blob, len(blob) - _CRC.size)
    if zlib.crc32(memoryview(blob)[: len(blob) - _CRC.size]) != crc:
        raise SnapshotError("corrupt snapshot: CRC-32 mismatch (truncated or damaged)")


def _inflated(codec: int, stored: bytes) -> bytes:
    """The bytes ``stored`` under ``codec``."""
    if codec == _CODEC_RAW:
        return stored
    if codec != _CODEC_ZLIB:
        raise SnapshotError(f"corrupt snapshot: unknown codec {codec}")
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(stored)
    except zlib.error as exc:
        raise SnapshotError(f"corrupt snapshot: {exc}") from exc
    if not inflater.eof or inflater.unused_data:
        raise SnapshotError("corrupt snapshot: the compressed body does not end where it should")
    return body


def _decode_framed(blob: bytes, pos: int, read_group: Callable[[_In], Group]) -> Group:
    """``codec`` byte, body (read by ``read_group``), CRC-32; ``pos`` is just past the version."""
    _check_crc(blob, pos)
    inp = _In(_inflated(blob[pos], blob[pos + 1 : len(blob) - _CRC.size]))
    group = read_group(inp)
    if inp.remaining():
        raise SnapshotError("corrupt snapshot: bytes left over after the group")
    return group


#: Every layout this release reads: version -> reader of what follows the version number.
_DECODERS: dict[int, Callable[[bytes, int], Group]] = {
    1: _decode_v1,
    2: _decode_v2,
    3: _decode_v3,
    4: _decode_v4,
    5: _decode_v5,
    6: _decode_v6,
    7: _decode_v7,
}


def decode_group(blob: bytes) -> Group:
    """The group in a blob from :func:`encode_group` of this or an earlier release.

    Raises :class:`SnapshotError`, and nothing else, for an unknown version or corrupt bytes.
    """
    try:
        data = bytes(blob)
        if not data:
            raise SnapshotError("empty snapshot")
        version_reader = _In(data)
        version = version_reader.uint()
        decoder = _DECODERS.get(version)
        if decoder is None:
            raise SnapshotError(
                f"unknown snapshot version {version} (this release reads versions "
                f"{', '.join(map(str, sorted(_DECODERS)))})"
            )
        return decoder(data, version_reader.position)
    except SnapshotError:
        raise
    except Exception as exc:  # a backstop: whatever else malformed bytes trip over
        raise SnapshotError(f"corrupt snapshot: {type(exc).__name__}: {exc}") from exc
