"""The request and response versions kio does not generate, read from Kafka 3.9's message specs.

kio is generated from Kafka 4's specs, which dropped the versions KIP-896 removed: Produce v0-v2,
Fetch v0-v3, ListOffsets v0, OffsetCommit v0-v1 and OffsetFetch v0. Kafka 3.9 still served them,
and deployed clients still send them (sarama's default OffsetCommit v1 and Fetch v3, kafka-go's
Fetch v2, Burrow's ListOffsets v0). This module encodes and decodes those versions from Kafka
3.9's own JSON specs (``kafka_messages/``, copied unchanged from apache/kafka at the 3.9 branch,
commit c821449fb7c1) by one interpreter of the non-flexible encoding: big-endian integers,
INT16-length strings, INT32-length bytes, records and arrays (-1 for null), fields in spec order,
each present in the versions the spec gives it.

Bodies are plain data with kio's field names (snake_case, a trailing ``Ms`` dropped, as kio
names ``ThrottleTimeMs`` ``throttle_time``), so :mod:`coordinator.gateway.apis` reads an old
version's request as it reads kio's. Headers are kio's (request header v1, response header v0:
every version here is non-flexible). Nothing here decides what to answer.
"""

from __future__ import annotations

import io
import json
import re
import struct
import uuid
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

#: The versions served from these specs, per API key: those below kio's floor.
VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 2),  # Produce
    1: (0, 3),  # Fetch
    2: (0, 0),  # ListOffsets
    8: (0, 1),  # OffsetCommit
    9: (0, 0),  # OffsetFetch
}

_SPEC_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    8: "OffsetCommit",
    9: "OffsetFetch",
}


class SpecError(Exception):
    """Bytes that do not decode as the spec says, or data that does not fit it."""


def serves(api_key: int, api_version: int) -> bool:
    """Whether ``api_version`` of ``api_key`` is encoded and decoded here rather than by kio."""
    low, high = VERSIONS.get(api_key, (0, -1))
    return low <= api_version <= high


# --- the specs ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # kio's name
    type: str  # "int32", "string", "records", "[]int64", or a struct's name / "[]Struct"
    versions: tuple[int, int]
    nullable: tuple[int, int]
    default: str | None
    fields: tuple[Field, ...]  # a struct's own fields
    tagged: bool

    def present(self, version: int) -> bool:
        return not self.tagged and self.versions[0] <= version <= self.versions[1]

    def nullable_in(self, version: int) -> bool:
        return self.nullable[0] <= version <= self.nullable[1]


@dataclass(frozen=True, slots=True)
class Message:
    name: str
    valid: tuple[int, int]
    flexible: tuple[int, int]
    fields: tuple[Field, ...]


_NONE = (0, -1)


def _range(text: str | None) -> tuple[int, int]:
    """Kafka's version ranges: ``"0+"``, ``"1"``, ``"2-4"``, ``"none"``."""
    if text is None or text == "none":
        return _NONE
    if text.endswith("+"):
        return int(text[:-1]), 2**15 - 1
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def kio_name(spec_name: str) -> str:
    """``GenerationIdOrMemberEpoch`` -> ``generation_id_or_member_epoch``; ``ThrottleTimeMs`` ->
    ``throttle_time`` (kio drops the unit of its timedelta and datetime fields)."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", spec_name).lower()
    return snake[: -len("_ms")] if snake.endswith("_ms") else snake


def _field(raw: dict[str, Any]) -> Field:
    return Field(
        name=kio_name(raw["name"]),
        type=raw["type"],
        versions=_range(raw["versions"]),
        nullable=_range(raw.get("nullableVersions")),
        default=None if raw.get("default") is None else str(raw["default"]),
        fields=tuple(_field(f) for f in raw.get("fields", ())),
        tagged="taggedVersions" in raw,
    )


@cache
def message(api_key: int, kind: str) -> Message:
    """The spec of ``kind`` ("Request" or "Response") of ``api_key``, from Kafka 3.9's JSON."""
    name = f"{_SPEC_NAMES[api_key]}{kind}"
    text = resources.files(__package__).joinpath(f"kafka_messages/{name}.json").read_text("utf-8")
    # Kafka's spec files are JSON with // line comments.
    raw = json.loads(
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    )
    if raw["apiKey"] != api_key:
        raise SpecError(f"{name}.json has api key {raw['apiKey']}, not {api_key}")
    return Message(
        name=name,
        valid=_range(raw["validVersions"]),
        flexible=_range(raw["flexibleVersions"]),
        fields=tuple(_field(f) for f in raw["fields"]),
    )


def _checked(api_key: int, kind: str, version: int) -> Message:
    spec = message(api_key, kind)
    if not spec.valid[0] <= version <= spec.valid[1]:
        raise SpecError(f"{spec.name} has no version {version}")
    if spec.flexible[0] <= version <= spec.flexible[1]:
        raise SpecError(f"{spec.name} v{version} is flexible: kio's to encode")
    return spec


# --- reading ------------------------------------------------------------------------------------

_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "uint32": struct.Struct(">I"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
    "bool": struct.Struct(">?"),
}
_INT16 = _FIXED["int16"]
_INT32 = _FIXED["int32"]


class _Reader:
    def __init__(self, data: bytes, offset: int) -> None:
        self.data = data
        self.offset = offset

    def fixed(self, layout: struct.Struct) -> Any:
        if self.offset + layout.size > len(self.data):
            raise SpecError(f"{layout.size} bytes wanted at {self.offset}, the frame ends")
        (value,) = layout.unpack_from(self.data, self.offset)
        self.offset += layout.size
        return value

    def take(self, size: int) -> bytes:
        if self.offset + size > len(self.data):
            raise SpecError(f"{size} bytes wanted at {self.offset}, the frame ends")
        chunk = bytes(self.data[self.offset : self.offset + size])
        self.offset += size
        return chunk


def _read_value(reader: _Reader, field: Field, type_: str, version: int) -> Any:
    if type_.startswith("[]"):
        count = reader.fixed(_INT32)
        if count < 0:
            if count == -1 and field.nullable_in(version):
                return None
            raise SpecError(f"{field.name}: array length {count}")
        return [_read_value(reader, field, type_[2:], version) for _ in range(count)]
    if type_ in _FIXED:
        return reader.fixed(_FIXED[type_])
    if type_ == "string":
        size = reader.fixed(_INT16)
        if size < 0:
            if size == -1 and field.nullable_in(version):
                return None
            raise SpecError(f"{field.name}: string length {size}")
        try:
            return reader.take(size).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError(f"{field.name}: not UTF-8") from exc
    if type_ in ("bytes", "records"):
        size = reader.fixed(_INT32)
        if size < 0:
            if size == -1 and field.nullable_in(version):
                return None
            raise SpecError(f"{field.name}: {type_} length {size}")
        return reader.take(size)
    if type_ == "uuid":
        return uuid.UUID(bytes=reader.take(16))
    return _read_struct(reader, field.fields, version)  # a struct, named by its type


def _read_struct(reader: _Reader, fields: tuple[Field, ...], version: int) -> dict[str, Any]:
    return {f.name: _read_value(reader, f, f.type, version) for f in fields if f.present(version)}


def read(api_key: int, kind: str, version: int, data: bytes, offset: int = 0) -> tuple[Any, int]:
    """(body as plain data, bytes read) of a ``kind`` body of ``api_key`` v``version``."""
    spec = _checked(api_key, kind, version)
    reader = _Reader(data, offset)
    body = _read_struct(reader, spec.fields, version)
    return body, reader.offset - offset


# --- writing ------------------------------------------------------------------------------------


def _default(field: Field, type_: str) -> Any:
    if field.default is None:
        raise SpecError(f"{field.name} is required")
    if field.default == "null":
        return None
    if type_ == "bool":
        return field.default == "true"
    if type_ in _FIXED:
        return int(field.default, 0)
    return field.default


def _write_value(out: io.BytesIO, field: Field, type_: str, value: Any, version: int) -> None:
    if value is None and type_ not in _FIXED:
        if not field.nullable_in(version):
            raise SpecError(f"{field.name} is not nullable in v{version}")
        out.write(_INT16.pack(-1) if type_ == "string" else _INT32.pack(-1))
    elif type_.startswith("[]"):
        out.write(_INT32.pack(len(value)))
        for item in value:
            _write_value(out, field, type_[2:], item, version)
    elif type_ in _FIXED:
        out.write(_FIXED[type_].pack(value))
    elif type_ == "string":
        encoded = str(value).encode("utf-8")
        out.write(_INT16.pack(len(encoded)))
        out.write(encoded)
    elif type_ in ("bytes", "records"):
        out.write(_INT32.pack(len(value)))
        out.write(bytes(value))
    elif type_ == "uuid":
        out.write(value.bytes if isinstance(value, uuid.UUID) else uuid.UUID(str(value)).bytes)
    else:
        _write_struct(out, field.fields, value, version)


def _write_struct(
    out: io.BytesIO, fields: tuple[Field, ...], data: dict[str, Any], version: int
) -> None:
    for f in fields:
        if f.present(version):
            value = data[f.name] if f.name in data else _default(f, f.type)
            _write_value(out, f, f.type, value, version)


def write(api_key: int, kind: str, version: int, body: dict[str, Any]) -> bytes:
    """The bytes of a ``kind`` body of ``api_key`` v``version`` from plain data (as
    :func:`coordinator.gateway.codec.build` reads it: keys this version lacks are ignored, absent
    ones take the spec's default, and one without a default is an error)."""
    spec = _checked(api_key, kind, version)
    out = io.BytesIO()
    _write_struct(out, spec.fields, body, version)
    return out.getvalue()
