"""Kafka generated-message primitive encodings (the wire rules of section 10.2).

Owns the byte-level building blocks shared by the ``__consumer_offsets`` record codec
(``coordinator.log.codec``) and the consumer protocol codec (``coordinator.consumer_protocol``):
big-endian fixed-width integers, unsigned varints, classic (int16/int32 length-prefixed) and
compact (varint length + 1) strings, bytes and arrays, and tagged-field sections.

:class:`Writer` raises :class:`ValueError` for values that cannot be encoded; :class:`Reader` raises
:class:`DecodeError` (a :class:`ValueError`) for any truncated or malformed input, never
``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

import struct

__all__ = ["MAX_STRING_BYTES", "DecodeError", "Reader", "Writer"]

MAX_STRING_BYTES = 0x7FFF
"""Longest string (in UTF-8 bytes) Kafka's generated messages can carry."""

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

_UINT32_MAX = 0xFFFFFFFF
_INT32_MAX = 0x7FFFFFFF


class DecodeError(ValueError):
    """The bytes are truncated or malformed for the structure being read."""


def _to_java_int(n: int) -> int:
    """Reinterpret an unsigned 32-bit varint value as a Java ``int`` (two's complement)."""
    return n - 0x1_0000_0000 if n > _INT32_MAX else n


class Writer:
    """Append-only encoder; :meth:`getvalue` returns the bytes written so far."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self._buf)

    def raw(self, value: bytes) -> None:
        """Bytes already encoded (a tagged field's body), as they are."""
        self._buf += value

    # -- fixed width ---------------------------------------------------------------------------

    def _pack(self, fmt: struct.Struct, value: int, what: str) -> None:
        try:
            self._buf += fmt.pack(value)
        except struct.error as exc:
            raise ValueError(f"{what} out of range: {value!r}") from exc

    def int8(self, value: int) -> None:
        self._pack(_I8, value, "int8")

    def uuid(self, value: bytes) -> None:
        """A Kafka ``uuid`` field: its 16 bytes as they are."""
        if len(value) != 16:
            raise ValueError(f"a uuid is 16 bytes, got {len(value)}")
        self._buf += value

    def int16(self, value: int) -> None:
        self._pack(_I16, value, "int16")

    def int32(self, value: int) -> None:
        self._pack(_I32, value, "int32")

    def int64(self, value: int) -> None:
        self._pack(_I64, value, "int64")

    def uvarint(self, value: int) -> None:
        """Unsigned varint (7 bits per byte, least-significant group first), 0 .. 2**32-1."""
        if value < 0 or value > _UINT32_MAX:
            raise ValueError(f"unsigned varint out of range: {value!r}")
        buf = self._buf
        while value > 0x7F:
            buf.append((value & 0x7F) | 0x80)
            value >>= 7
        buf.append(value)

    # -- classic (non-flexible) ----------------------------------------------------------------

    @staticmethod
    def _utf8(value: str) -> bytes:
        data = value.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise ValueError(f"string is too long to be serialized: {len(data)} bytes")
        return data

    def string(self, value: str) -> None:
        data = self._utf8(value)
        self._buf += _I16.pack(len(data))
        self._buf += data

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self._buf += _I16.pack(-1)
        else:
            self.string(value)

    def bytes_(self, value: bytes) -> None:
        if len(value) > _INT32_MAX:
            raise ValueError(f"bytes field is too long to be serialized: {len(value)} bytes")
        self._buf += _I32.pack(len(value))
        self._buf += value

    def nullable_bytes(self, value: bytes | None) -> None:
        if value is None:
            self._buf += _I32.pack(-1)
        else:
            self.bytes_(value)

    def array_len(self, count: int) -> None:
        if count < 0 or count > _INT32_MAX:
            raise ValueError(f"array length out of range: {count!r}")
        self._buf += _I32.pack(count)

    # -- compact (flexible) --------------------------------------------------------------------

    def compact_string(self, value: str) -> None:
        data = self._utf8(value)
        self.uvarint(len(data) + 1)
        self._buf += data

    def compact_nullable_string(self, value: str | None) -> None:
        if value is None:
            self._buf.append(0)
        else:
            self.compact_string(value)

    def compact_bytes(self, value: bytes) -> None:
        if len(value) >= _INT32_MAX:
            raise ValueError(f"bytes field is too long to be serialized: {len(value)} bytes")
        self.uvarint(len(value) + 1)
        self._buf += value

    def compact_nullable_bytes(self, value: bytes | None) -> None:
        if value is None:
            self._buf.append(0)
        else:
            self.compact_bytes(value)

    def compact_array_len(self, count: int) -> None:
        if count < 0 or count >= _INT32_MAX:
            raise ValueError(f"array length out of range: {count!r}")
        self.uvarint(count + 1)

    def empty_tagged_fields(self) -> None:
        self._buf.append(0)


class Reader:
    """Cursor over an immutable byte string; every read past the end raises DecodeError."""

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)
        self._pos = 0

    def remaining(self) -> int:
        return len(self._data) - self._pos

    def at_end(self) -> bool:
        return self._pos >= len(self._data)

    def skip(self, n: int) -> None:
        self._take(n)

    def uuid(self) -> bytes:
        """A Kafka ``uuid`` field (16 bytes)."""
        return self._take(16)

    def _take(self, n: int) -> bytes:
        pos = self._pos
        end = pos + n
        if n < 0 or end > len(self._data):
            raise DecodeError(
                f"tried to read {n} bytes at offset {pos}, "
                f"but only {len(self._data) - pos} bytes are available"
            )
        self._pos = end
        return self._data[pos:end]

    def _unpack(self, fmt: struct.Struct) -> int:
        pos = self._pos
        if pos + fmt.size > len(self._data):
            raise DecodeError(
                f"tried to read {fmt.size} bytes at offset {pos}, "
                f"but only {len(self._data) - pos} bytes are available"
            )
        self._pos = pos + fmt.size
        value: int = fmt.unpack_from(self._data, pos)[0]
        return value

    # -- fixed width ---------------------------------------------------------------------------

    def int8(self) -> int:
        return self._unpack(_I8)

    def int16(self) -> int:
        return self._unpack(_I16)

    def int32(self) -> int:
        return self._unpack(_I32)

    def int64(self) -> int:
        return self._unpack(_I64)

    def uvarint(self) -> int:
        """Unsigned varint of at most 5 bytes (Java ``readUnsignedVarint``), 0 .. 2**32-1."""
        data = self._data
        pos = self._pos
        end = len(data)
        value = 0
        shift = 0
        while True:
            if pos >= end:
                raise DecodeError(f"truncated varint at offset {self._pos}")
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 28:
                raise DecodeError(f"varint is too long at offset {self._pos}")
        self._pos = pos
        return value & _UINT32_MAX

    def _compact_len(self) -> int:
        """Compact length (varint - 1) as Java computes it: negative means null."""
        return _to_java_int(self.uvarint()) - 1

    # -- classic (non-flexible) ----------------------------------------------------------------

    def _utf8(self, n: int) -> str:
        raw = self._take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"invalid UTF-8 in string field: {exc}") from exc

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise DecodeError("non-nullable string field was serialized as null")
        return self._utf8(n)

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        return self._utf8(n)

    def bytes_(self) -> bytes:
        n = self.int32()
        if n < 0:
            raise DecodeError("non-nullable bytes field was serialized as null")
        return self._take(n)

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        return self._take(n)

    def _check_count(self, count: int) -> int:
        if count > self.remaining():
            raise DecodeError(
                f"tried to read {count} elements, but only {self.remaining()} bytes are available"
            )
        return count

    def array_len(self) -> int:
        """Element count of a classic array; -1 for a null array (any negative count)."""
        n = self.int32()
        if n < 0:
            return -1
        return self._check_count(n)

    # -- compact (flexible) --------------------------------------------------------------------

    def compact_string(self) -> str:
        n = self._compact_len()
        if n < 0:
            raise DecodeError("non-nullable compact string field was serialized as null")
        if n > MAX_STRING_BYTES:
            raise DecodeError(f"compact string field had invalid length {n}")
        return self._utf8(n)

    def compact_nullable_string(self) -> str | None:
        n = self._compact_len()
        if n < 0:
            return None
        if n > MAX_STRING_BYTES:
            raise DecodeError(f"compact string field had invalid length {n}")
        return self._utf8(n)

    def compact_bytes(self) -> bytes:
        n = self._compact_len()
        if n < 0:
            raise DecodeError("non-nullable compact bytes field was serialized as null")
        return self._take(n)

    def compact_nullable_bytes(self) -> bytes | None:
        n = self._compact_len()
        if n < 0:
            return None
        return self._take(n)

    def compact_array_len(self) -> int:
        """Element count of a compact array; -1 for a null array."""
        n = self._compact_len()
        if n < 0:
            return -1
        return self._check_count(n)

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes as they are (a tagged field's body)."""
        return self._take(n)

    def skip_tagged_fields(self) -> None:
        """Read a tagged-field section and discard every field (all tags are unknown to us)."""
        count = self.uvarint()
        for _ in range(count):
            self.uvarint()  # tag
            size = self.uvarint()
            self._take(size)
