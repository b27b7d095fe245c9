"""Straight-line codecs for the hot group APIs, equal to kio's, which stays the reference.

A consumer's steady traffic is Heartbeat and OffsetCommit, with OffsetFetch, JoinGroup and
SyncGroup at each rebalance, and Metadata (an answer listing every partition) before it joins.
kio reads and writes any message by walking its schema field by field (and
:mod:`coordinator.gateway.codec` then turns entities into plain data and back); for these six
APIs, at every version the gateway serves from kio's specs, this module has one
specialised function per message and version that reads a frame straight into the plain data
:mod:`coordinator.gateway.apis` consumes, and writes plain data straight into a frame: no
entities, no per-field dispatch.

The functions are not typed by hand: they are generated once, at import, from kio's own schema
classes (the same field order, types, nullability and flexible encoding kio uses), as Python
source with every decision taken in advance, so that a field costs a ``struct`` call or a slice.
``source(api_key, version, kind)`` shows one.

Equality with kio is the rule (``tests/test_gateway_fastpath.py`` proves it with random
messages of every version served, and with random corruptions of them):

* a request is read here only when kio would read it to the same data; anything unusual (a
  tagged field, kio rejects every one these schemas do not name; a negative length; a bool byte
  other than 0 or 1; a short or long frame; bytes that are not UTF-8) makes :func:`decode_request`
  decline (None), and kio reads the frame and rejects it, or not, as it always did;
* a response is written here only when kio would write it: any value kio would refuse (an error
  code Kafka does not know, a string where bytes belong, a missing required field) makes
  :func:`encode_response` decline and kio writes it, or raises as it always did.

Nothing here decides what to answer.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from coordinator.gateway import codec, legacy

#: The APIs served here: Heartbeat, OffsetCommit, OffsetFetch, JoinGroup, SyncGroup, and
#: Metadata, which every consumer sends before it joins and whose answer lists every partition
#: (kio's generic writer took ~1.5 ms for one of 250 partitions) (all their kio versions within
#: :data:`codec.SUPPORTED`; codec imports this module, hence the numbers).
HOT_APIS = (12, 8, 9, 11, 14, 3)

#: False: kio reads and writes everything (to measure what this module saves).
enabled = True

_FORMATS = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "error_code": "h"}
_FORMATS |= {"timedelta_i32": "i", "timedelta_i64": "q", "bool": "B"}
_KNOWN_ERRORS = frozenset(int(code.value) for code in ErrorCode)


class _Decline(Exception):
    """This frame or body is not one kio would treat exactly as this module does."""


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos`` (at most 5 bytes, as Kafka's readUnsignedVarint)."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise _Decline("varint too long")


def _put_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _exact_ms(value: int) -> int:
    """An INT64 duration as kio reads it (a timedelta) and :func:`codec.plain` returns it."""
    return round(datetime.timedelta(milliseconds=value).total_seconds() * 1000)


_NAMESPACE: dict[str, Any] = {
    "_Decline": _Decline,
    "_uvarint": _uvarint,
    "_put_uvarint": _put_uvarint,
    "_exact_ms": _exact_ms,
    "_KNOWN_ERRORS": _KNOWN_ERRORS,
    "_pack": struct.pack,
    "_unpack": struct.unpack_from,
    "_UUID": uuid.UUID,
    "_ZERO_UUID": bytes(16),
}


# --- the generator ----------------------------------------------------------------------------


class _Source:
    """Python source under construction: functions of one message, one per struct."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.functions: list[str] = []
        self.defaults: dict[str, Any] = {}
        self._count = 0

    def name(self, what: str) -> str:
        self._count += 1
        return f"_{self.prefix}_{what}_{self._count}"


def _kafka_type(field: dataclasses.Field[Any]) -> str:
    return str(field.metadata["kafka_type"])


def _check_untagged(cls: type) -> None:
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None:
            raise TypeError(f"{cls.__qualname__}.{field.name} is a tagged field")


def _reader(cls: type, flexible: bool, src: _Source) -> str:
    """The name of a generated ``(buf, pos) -> (plain dict, pos)`` for entity ``cls``."""
    _check_untagged(cls)
    fn = src.name("read")
    lines = [f"def {fn}(buf, pos):"]
    names = []
    for field in dataclasses.fields(cls):
        names.append(field.name)
        var = f"f_{field.name}"
        kind = classify_field(field)
        nullable = is_optional(field)
        if isinstance(kind, EntityField):
            raise TypeError(f"{cls.__qualname__}.{field.name}: a struct field (not served)")
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            lines += _read_length(flexible, nullable, "n", array=True)
            if isinstance(kind, EntityTupleField):
                item = _reader(kind.type_, flexible, src)
                lines.append("    if n is None:")
                lines.append(f"        {var} = None")
                lines.append("    else:")
                lines.append(f"        {var} = []")
                lines.append("        for _ in range(n):")
                lines.append(f"            x, pos = {item}(buf, pos)")
                lines.append(f"            {var}.append(x)")
            else:
                fmt = _FORMATS[_kafka_type(field)]
                size = struct.calcsize(fmt)
                lines.append("    if n is None:")
                lines.append(f"        {var} = None")
                lines.append("    else:")
                lines.append(f"        {var} = list(_unpack('>%d{fmt}' % n, buf, pos))")
                lines.append(f"        pos += {size} * n")
            continue
        lines += _read_primitive(_kafka_type(field), flexible, nullable, var)
    if flexible:
        lines.append("    if buf[pos] != 0:")
        lines.append("        raise _Decline('tagged fields')")
        lines.append("    pos += 1")
    body = ", ".join(f"{name!r}: f_{name}" for name in names)
    lines.append(f"    return {{{body}}}, pos")
    src.functions.append("\n".join(lines))
    return fn


def _read_length(flexible: bool, nullable: bool, var: str, *, array: bool) -> list[str]:
    """Lines reading a length into ``var`` (None for null), declining what kio may not read."""
    null = f"        {var} = None" if nullable else "        raise _Decline('null')"
    if flexible:
        return [
            "    n = buf[pos]",
            "    if n < 0x80:",
            "        pos += 1",
            "    else:",
            "        n, pos = _uvarint(buf, pos)",
            "    if n == 0:",
            null,
            "    else:",
            f"        {var} = n - 1",
        ]
    fmt = ">i" if array else ">h"
    return [
        f"    (n,) = _unpack({fmt!r}, buf, pos)",
        f"    pos += {4 if array else 2}",
        "    if n == -1:",
        null,
        "    elif n < 0:",
        "        raise _Decline('negative length')",
        "    else:",
        f"        {var} = n",
    ]


def _read_primitive(kafka_type: str, flexible: bool, nullable: bool, var: str) -> list[str]:
    if kafka_type in ("string", "bytes"):
        bytes_length = kafka_type == "bytes" and not flexible
        lines = (
            _read_bytes_length(nullable, "m")
            if bytes_length
            else _read_length(flexible, nullable, "m", array=False)
        )
        convert = "bytes(buf[pos:end])" if kafka_type == "bytes" else "buf[pos:end].decode()"
        lines += [
            "    if m is None:",
            f"        {var} = None",
            "    else:",
            "        end = pos + m",
            "        if end > len(buf):",
            "            raise _Decline('short')",
            f"        {var} = {convert}",
            "        pos = end",
        ]
        return lines
    if kafka_type == "uuid":  # kio reads the zero uuid as None, nullable or not
        return [
            "    end = pos + 16",
            "    if end > len(buf):",
            "        raise _Decline('short')",
            f"    {var} = bytes(buf[pos:end])",
            f"    {var} = None if {var} == _ZERO_UUID else _UUID(bytes={var})",
            "    pos = end",
        ]
    fmt = _FORMATS.get(kafka_type)
    if fmt is None or nullable:
        raise TypeError(f"{kafka_type} (nullable={nullable}) is not served")
    size = struct.calcsize(fmt)
    lines = [f"    ({var},) = _unpack('>{fmt}', buf, pos)", f"    pos += {size}"]
    if kafka_type == "bool":
        lines += [f"    if {var} > 1:", "        raise _Decline('bool')", f"    {var} = {var} == 1"]
    elif kafka_type == "timedelta_i64":
        lines.append(f"    {var} = _exact_ms({var})")
    elif kafka_type == "error_code":
        lines += [f"    if {var} not in _KNOWN_ERRORS:", "        raise _Decline('error code')"]
    return lines


def _read_bytes_length(nullable: bool, var: str) -> list[str]:
    return [
        "    (n,) = _unpack('>i', buf, pos)",
        "    pos += 4",
        "    if n == -1:",
        f"        {var} = None" if nullable else "        raise _Decline('null')",
        "    elif n < 0:",
        "        raise _Decline('negative length')",
        "    else:",
        f"        {var} = n",
    ]


def _writer(cls: type, flexible: bool, src: _Source) -> str:
    """The name of a generated ``(out: bytearray, data: dict) -> None`` for entity ``cls``,
    taking what :func:`codec.build` takes: absent fields get the schema default."""
    _check_untagged(cls)
    fn = src.name("write")
    lines = [f"def {fn}(out, data):"]
    for field in dataclasses.fields(cls):
        var = f"f_{field.name}"
        if field.default is not dataclasses.MISSING:
            default = src.name("default")
            src.defaults[default] = field.default
            lines.append(f"    {var} = data.get({field.name!r}, {default})")
        elif field.default_factory is not dataclasses.MISSING:
            default = src.name("default")
            src.defaults[default] = field.default_factory
            lines.append(
                f"    {var} = data[{field.name!r}] if {field.name!r} in data else {default}()"
            )
        else:
            lines.append(f"    {var} = data[{field.name!r}]")
        kind = classify_field(field)
        nullable = is_optional(field)
        if isinstance(kind, EntityField):
            raise TypeError(f"{cls.__qualname__}.{field.name}: a struct field (not served)")
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            # kio writes a None array as null whatever the schema says (codec.build passes it)
            lines.append(f"    if {var} is None:")
            lines.append(
                "        out += b'\\x00'" if flexible else "        out += b'\\xff\\xff\\xff\\xff'"
            )
            lines.append("    else:")
            if flexible:
                lines.append(f"        _put_uvarint(out, len({var}) + 1)")
            else:
                lines.append(f"        out += _pack('>i', len({var}))")
            if isinstance(kind, EntityTupleField):
                item = _writer(kind.type_, flexible, src)
                lines.append(f"        for x in {var}:")
                lines.append(f"            {item}(out, x)")
            else:
                fmt = _FORMATS[_kafka_type(field)]
                lines.append(f"        out += _pack('>%d{fmt}' % len({var}), *{var})")
            continue
        lines += _write_primitive(_kafka_type(field), flexible, nullable, var)
    if flexible:
        lines.append("    out.append(0)")
    src.functions.append("\n".join(lines))
    return fn


def _write_primitive(kafka_type: str, flexible: bool, nullable: bool, var: str) -> list[str]:
    if kafka_type in ("string", "bytes"):
        # kio: a compact length (+1, 0 for null) when flexible; else INT16 for strings and
        # INT32 for bytes (-1 for null)
        if flexible:
            null, length = "out.append(0)", "_put_uvarint(out, len(e) + 1)"
        elif kafka_type == "string":
            null, length = "out += b'\\xff\\xff'", "out += _pack('>h', len(e))"
        else:
            null, length = "out += b'\\xff\\xff\\xff\\xff'", "out += _pack('>i', len(e))"
        lines = []
        if kafka_type == "bytes":
            lines += [f"    if {var} is not None and not isinstance({var}, bytes):"]
            lines += ["        raise _Decline('not bytes')"]
        lines += [
            f"    if {var} is None:",
            f"        {null}" if nullable else "        raise _Decline('None')",
            "    else:",
            f"        e = {var}.encode()" if kafka_type == "string" else f"        e = {var}",
            f"        {length}",
            "        out += e",
        ]
        return lines
    if kafka_type == "uuid":  # kio writes None as the zero uuid, nullable or not
        return [
            f"    if {var} is None:",
            "        out += _ZERO_UUID",
            f"    elif type({var}) is _UUID:",
            f"        out += {var}.bytes",
            "    else:  # codec.build parses other values: kio's path",
            "        raise _Decline('not a UUID')",
        ]
    fmt = _FORMATS.get(kafka_type)
    if fmt is None or nullable:
        raise TypeError(f"{kafka_type} (nullable={nullable}) is not served")
    if kafka_type == "bool":
        return [f"    out += _pack('>?', {var})"]
    if kafka_type == "error_code":
        return [
            f"    {var} = int({var})",
            f"    if {var} not in _KNOWN_ERRORS:",
            "        raise _Decline('error code')",
            f"    out += _pack('>h', {var})",
        ]
    if kafka_type == "timedelta_i32":
        return [f"    out += _pack('>i', int({var}))"]
    if kafka_type == "timedelta_i64":
        return [f"    out += _pack('>q', _exact_ms(int({var})))"]
    return [f"    out += _pack('>{fmt}', {var})"]


# --- what is served ---------------------------------------------------------------------------

_READERS: dict[tuple[int, int], Callable[[bytes, int], tuple[dict[str, Any], int]]] = {}
_WRITERS: dict[tuple[int, int], Callable[[bytearray, dict[str, Any]], None]] = {}
#: (api key, version): (request header is v2, response header is v1).
_FLEXIBLE: dict[tuple[int, int], tuple[bool, bool]] = {}
_SOURCES: dict[tuple[int, int, str], str] = {}


def _compile(schema: type, prefix: str, write: bool) -> tuple[Callable[..., Any], str]:
    src = _Source(prefix)
    flexible = bool(schema.__flexible__)  # type: ignore[attr-defined]
    top = _writer(schema, flexible, src) if write else _reader(schema, flexible, src)
    text = "\n\n".join(src.functions)
    namespace = dict(_NAMESPACE, **src.defaults)
    exec(compile(text, f"<fastpath {prefix}>", "exec"), namespace)
    return namespace[top], text


def _served_versions(api_key: int) -> range:
    low, high = codec.SUPPORTED[api_key]
    return range(low, high + 1)


def _build() -> None:
    for api_key in HOT_APIS:
        for version in _served_versions(api_key):
            if legacy.serves(api_key, version):
                continue
            request = codec.load_request_schema(api_key, version)
            response = codec.load_response_schema(api_key, version)
            key = (api_key, version)
            _READERS[key], _SOURCES[(*key, "Request")] = _compile(
                request, f"req{api_key}v{version}", write=False
            )
            _WRITERS[key], _SOURCES[(*key, "Response")] = _compile(
                response, f"resp{api_key}v{version}", write=True
            )
            _FLEXIBLE[key] = (
                bool(request.__header_schema__.__flexible__),
                bool(response.__header_schema__.__flexible__),
            )


def served() -> list[tuple[int, int]]:
    """Every (api key, version) read and written here."""
    if not _READERS:
        _build()
    return sorted(_READERS)


def source(api_key: int, version: int, kind: str) -> str:
    """The generated source of the reader ("Request") or writer ("Response")."""
    served()
    return _SOURCES[(api_key, version, kind)]


# --- the codec ------------------------------------------------------------------------------

_HEADER = struct.Struct(">hhih")


def decode_request(frame: bytes) -> codec.DecodedRequest | None:
    """The request of ``frame`` (without its size prefix) as :func:`codec.decode_request`
    gives it, its body already plain data; None when this module does not serve it (another
    API or version, or anything kio may read differently)."""
    read = read_request(frame)
    return None if read is None else codec.DecodedRequest(*read)


def read_request(frame: bytes) -> tuple[int, int, int, str | None, dict[str, Any]] | None:
    """What :func:`decode_request` reads, as (api key, version, correlation id, client id,
    plain body), without building its DecodedRequest."""
    if not _READERS:  # generated on first use (codec imports this module)
        _build()
    try:
        api_key, version, correlation_id, client_length = _HEADER.unpack_from(frame, 0)
        read = _READERS.get((api_key, version))
        if read is None:
            return None
        pos = 10
        if client_length == -1:
            client_id = None
        elif client_length < 0:
            return None
        else:
            pos += client_length
            if pos > len(frame):
                return None
            client_id = frame[10:pos].decode()
        if _FLEXIBLE[(api_key, version)][0]:
            if frame[pos] != 0:  # header tagged fields: kio names none
                return None
            pos += 1
        body, end = read(frame, pos)
    except (_Decline, struct.error, IndexError, UnicodeDecodeError, MemoryError, OverflowError):
        return None
    if end != len(frame):
        return None
    return api_key, version, correlation_id, client_id, body


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


#: What :func:`read_heartbeat` reads: (version, correlation id, group id, generation id, member
#: id, instance id).
ShortHeartbeat = tuple[int, int, str, int, str, str | None]


def read_heartbeat(frame: bytes) -> ShortHeartbeat | None:
    """(version, correlation id, group id, generation id, member id, instance id) of a
    Heartbeat frame (no size prefix) whose ids are shorter than 127 bytes, each exactly as
    :func:`read_request` reads it; None for any other frame, which :func:`read_request` then
    reads. The commonest frame a gateway reads, without a body dict or a generated reader's
    generality (proven equal to them, and so to kio, over random frames of every version)."""
    try:
        api_key, version, correlation_id, client_length = _HEADER.unpack_from(frame, 0)
        if api_key != 12 or not 0 <= version <= 4 or client_length < -1:
            return None
        pos = 10
        if client_length > 0:
            pos += client_length
            if pos > len(frame):
                return None
            frame[10:pos].decode()  # kio refuses a client id that is not UTF-8
        if version == 4:  # flexible: header tags, compact strings, body tags
            if frame[pos] != 0:
                return None
            size = frame[pos + 1] - 1
            if not 0 <= size < 0x7F:
                return None  # null, or a varint length
            pos += 2
            group_id = frame[pos : pos + size].decode()
            pos += size
            (generation_id,) = _INT32.unpack_from(frame, pos)
            size = frame[pos + 4] - 1
            if not 0 <= size < 0x7F:
                return None
            pos += 5
            member_id = frame[pos : pos + size].decode()
            pos += size
            size = frame[pos] - 1
            if size == -1:
                instance_id = None
                pos += 1
            elif size < 0x7F:
                pos += 1
                instance_id = frame[pos : pos + size].decode()
                pos += size
            else:
                return None
            if frame[pos] != 0 or pos + 1 != len(frame):  # tagged fields: none, then the end
                return None
        else:
            (size,) = _INT16.unpack_from(frame, pos)
            if size < 0:
                return None
            pos += 2
            group_id = frame[pos : pos + size].decode()
            pos += size
            (generation_id,) = _INT32.unpack_from(frame, pos)
            (size,) = _INT16.unpack_from(frame, pos + 4)
            if size < 0:
                return None
            pos += 6
            member_id = frame[pos : pos + size].decode()
            pos += size
            instance_id = None
            if version == 3:
                (size,) = _INT16.unpack_from(frame, pos)
                pos += 2
                if size >= 0:
                    instance_id = frame[pos : pos + size].decode()
                    pos += size
                elif size != -1:
                    return None
            if pos != len(frame):
                return None
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
    return version, correlation_id, group_id, generation_id, member_id, instance_id


def encode_response(
    api_key: int, api_version: int, correlation_id: int, body: dict[str, Any]
) -> bytes | None:
    """The framed response, as :func:`codec.encode_response` writes it; None when this module
    does not serve the API and version, or the body holds anything kio may write otherwise."""
    if not _WRITERS:
        _build()
    write = _WRITERS.get((api_key, api_version))
    if write is None:
        return None
    out = bytearray(b"\0\0\0\0")
    try:
        out += struct.pack(">i", correlation_id)
        if _FLEXIBLE[(api_key, api_version)][1]:
            out.append(0)
        write(out, body)
    except Exception:  # kio writes it, or says why not
        return None
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)
