"""Kafka's wire framing and headers, with kio (generated from Kafka's message specs) as the codec.

A request frame is ``INT32 size`` then the request header and body. The header's version follows
from the API key and version (flexible versions use header v2, with tagged fields); kio's request
class of that version names its header schema (``__header_schema__``), as it does for responses
(ApiVersions' response header is always v0, whatever the version). The versions Kafka 3.9 served
and kio (generated from Kafka 4's specs) lacks are read and written by
:mod:`coordinator.gateway.legacy` from Kafka 3.9's specs, as plain data. This module only encodes
and decodes; what to answer is :mod:`coordinator.gateway.apis`' business. The hot group APIs
(Heartbeat, OffsetCommit, OffsetFetch, JoinGroup, SyncGroup) and Metadata are read and written first by
:mod:`coordinator.gateway.fastpath`, equal to kio, which takes whatever it declines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import struct
import typing
import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema as _load_request_schema
from kio.index import load_response_schema as _load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial import entity_reader, entity_writer

from coordinator.gateway import fastpath, legacy

#: kio resolves a schema's module by name on every call (a few µs, per request and response).
load_request_schema = cache(_load_request_schema)
load_response_schema = cache(_load_response_schema)

#: Kafka's API keys, for the APIs this gateway serves.
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP = 8, 9, 10, 11
HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 12, 13, 14, 15, 16
API_VERSIONS, DELETE_GROUPS, OFFSET_DELETE = 18, 42, 47
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69

#: What the gateway advertises: (min, max) per API key. Every version Kafka 3.9 serves, from its
#: floor (older clients still send the versions Kafka 4 removed, KIP-896); the group APIs up to
#: the versions Kafka's classic coordinator serves; ListOffsets, Fetch and Produce only as far up
#: as real clients need them (Fetch 13+ carries topic ids; kafka-clients-notes 3). The security
#: APIs as Kafka 4 serves them (ACL v0, without pattern types, is gone), answered by
#: :mod:`coordinator.gateway.security`.
SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (0, 9),
    FETCH: (0, 12),
    LIST_OFFSETS: (0, 7),
    METADATA: (0, 12),
    OFFSET_COMMIT: (0, 9),
    OFFSET_FETCH: (0, 9),
    FIND_COORDINATOR: (0, 6),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 5),
    API_VERSIONS: (0, 4),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 2),
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    # Kafka 4.0's consumer groups (KIP-848); librdkafka's group.protocol=consumer needs 68.
    CONSUMER_GROUP_HEARTBEAT: (0, 1),
    CONSUMER_GROUP_DESCRIBE: (0, 1),
}


#: Requests whose trailing bytes are ignored, as Kafka ignores them: librdkafka 2.16 ends its
#: AlterUserScramCredentials with one more empty tagged-field byte than the schema has.
TRAILING_BYTES_IGNORED = frozenset({ALTER_USER_SCRAM_CREDENTIALS})


class FrameError(Exception):
    """A frame that cannot be served: the connection is closed (as Kafka does)."""


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: a kio request entity (plain data for the versions kio lacks, :mod:`legacy`); None for an
    #: ApiVersions above the supported range
    body: Any


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the fields every header version starts with."""
    if len(frame) < 8:
        raise FrameError(f"a request of {len(frame)} bytes has no header")
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    return int(api_key), int(api_version), int(correlation_id)


def readable_versions(api_key: int) -> tuple[int, int] | None:
    """The versions of ``api_key`` this codec reads and writes (kio's, and the older ones of
    :mod:`legacy`), as (min, max); None for a key neither knows."""
    versions: set[int] = set()
    with contextlib.suppress(KeyError):
        versions.update(schema_name_map[api_key_map[api_key]])
    low, high = legacy.VERSIONS.get(api_key, (0, -1))
    versions.update(range(low, high + 1))
    if not versions:
        return None
    # a contiguous range: kio's floor meets legacy's ceiling for every key legacy serves
    return min(versions), max(versions)


def decode_request(
    frame: bytes, supported: dict[int, tuple[int, int]] | None = None
) -> DecodedRequest:
    """The header and body of one request frame (without its size prefix), for the versions in
    ``supported`` (default :data:`SUPPORTED`).

    Raises :class:`FrameError` for an unknown API key, a version out of range (except
    ApiVersions, which Kafka answers), an undecodable header or body, or trailing bytes."""
    supported = SUPPORTED if supported is None else supported
    api_key, api_version, correlation_id = peek_header(frame)
    if api_key not in supported:
        raise FrameError(f"unknown or unsupported API key {api_key}")
    low, high = supported[api_key]
    if not low <= api_version <= high:
        if api_key == API_VERSIONS and api_version > high:
            return DecodedRequest(api_key, api_version, correlation_id, None, None)
        raise FrameError(f"API key {api_key} version {api_version} is outside {low}-{high}")
    fast = fastpath.decode_request(frame) if fastpath.enabled else None
    if fast is not None:
        return fast
    try:
        header, body, end = _read_message(api_key, api_version, "Request", frame)
    except Exception as exc:
        raise FrameError(f"API key {api_key} v{api_version} does not decode: {exc!r}") from exc
    if end != len(frame) and api_key not in TRAILING_BYTES_IGNORED:
        raise FrameError(f"{len(frame) - end} trailing bytes after the request")
    return DecodedRequest(api_key, api_version, correlation_id, header.client_id, body)


def _schemas(api_key: int, api_version: int, kind: str) -> tuple[Any, Any]:
    """(the kio schema of ``kind`` ("Request" or "Response"), None for a version
    :mod:`legacy` serves; the schema of its header)."""
    if legacy.serves(api_key, api_version):
        return None, RequestHeaderV1 if kind == "Request" else ResponseHeaderV0
    load = load_request_schema if kind == "Request" else load_response_schema
    schema = load(api_key, api_version)
    return schema, schema.__header_schema__


def _read_message(api_key: int, api_version: int, kind: str, frame: bytes) -> tuple[Any, Any, int]:
    """(header, body, where the body ends) of a frame without its size prefix."""
    schema, header_schema = _schemas(api_key, api_version, kind)
    header, used = entity_reader(header_schema)(frame, 0)
    if schema is None:
        body, size = legacy.read(api_key, kind, api_version, frame, used)
    else:
        body, size = entity_reader(schema)(frame, used)
    return header, body, used + size


def encode_response(
    api_key: int, api_version: int, correlation_id: int, body: dict[str, Any]
) -> bytes:
    """The framed response (size prefix, header of the response's header version, body) of the
    plain data ``body`` (:func:`build`) at ``api_version``."""
    fast = (
        fastpath.encode_response(api_key, api_version, correlation_id, body)
        if fastpath.enabled
        else None
    )
    if fast is not None:
        return fast
    schema, header_schema = _schemas(api_key, api_version, "Response")
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    entity_writer(header_schema)(buffer, build(header_schema, {"correlation_id": correlation_id}))
    if schema is None:
        buffer.write(legacy.write(api_key, "Response", api_version, body))
    else:
        entity_writer(schema)(buffer, build(schema, body))
    data = bytearray(buffer.getvalue())
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: dict[str, Any],
    client_id: str | None = "test",
) -> bytes:
    """A framed request (for tests and tools: the gateway itself only decodes requests)."""
    schema, header_schema = _schemas(api_key, api_version, "Request")
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header = build(
        header_schema,
        {
            "request_api_key": api_key,
            "request_api_version": api_version,
            "correlation_id": correlation_id,
            "client_id": client_id,
        },
    )
    entity_writer(header_schema)(buffer, header)
    if schema is None:
        buffer.write(legacy.write(api_key, "Request", api_version, body))
    else:
        entity_writer(schema)(buffer, build(schema, body))
    data = bytearray(buffer.getvalue())
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio response entity; plain data for the versions kio lacks) of a
    response frame without its size prefix."""
    header, body, end = _read_message(api_key, api_version, "Response", frame)
    if end != len(frame):
        raise FrameError("trailing bytes after the response")
    return int(header.correlation_id), body


# --- plain data <-> kio entities ---------------------------------------------------------------


@cache
def _fields(cls: type) -> tuple[tuple[str, str | None, type | None, bool, bool], ...]:
    """Per field: name, kafka type, nested entity class (if any), nested-is-array, has default."""
    out = []
    for f in dataclasses.fields(cls):
        nested, many = _nested(f.type)
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        out.append((f.name, f.metadata.get("kafka_type"), nested, many, has_default))
    return tuple(out)


def _nested(tp: Any) -> tuple[type | None, bool]:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is tuple:
        inner = args[0] if args else None
        if isinstance(inner, type) and dataclasses.is_dataclass(inner):
            return inner, True
        return None, False
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp, False
    if len(args) == 1:
        return _nested(args[0])
    return None, False


def build(cls: type, data: dict[str, Any]) -> Any:
    """A kio entity of ``cls`` from plain data: ints for ``*_ms`` timedeltas and error codes,
    dicts and lists for nested entities; fields absent from ``data`` take the schema default.
    Keys that ``cls`` (this version) lacks are ignored."""
    kwargs: dict[str, Any] = {}
    for name, kafka_type, nested, many, has_default in _fields(cls):
        if name not in data:
            if not has_default:
                raise ValueError(f"{cls.__qualname__}.{name} is required")
            continue
        value = data[name]
        if value is None:
            kwargs[name] = None
        elif nested is not None:
            kwargs[name] = (
                tuple(build(nested, item) for item in value) if many else build(nested, value)
            )
        elif kafka_type in ("timedelta_i32", "timedelta_i64"):
            kwargs[name] = datetime.timedelta(milliseconds=int(value))
        elif kafka_type == "error_code":
            kwargs[name] = ErrorCode(int(value))
        elif kafka_type in ("datetime_i64",):
            kwargs[name] = datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
        elif kafka_type == "uuid" and not isinstance(value, uuid.UUID):
            kwargs[name] = uuid.UUID(str(value))
        elif isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


@cache
def _names(cls: type) -> tuple[str, ...] | None:
    """A dataclass's field names; None for any other type."""
    if not dataclasses.is_dataclass(cls):
        return None
    return tuple(f.name for f in dataclasses.fields(cls))


def plain(entity: Any) -> Any:
    """A kio entity as plain data: dicts, lists, ints (timedeltas as milliseconds)."""
    names = _names(type(entity))  # type: ignore[arg-type]  # types are hashable
    if names is not None:
        return {name: plain(getattr(entity, name)) for name in names}
    if isinstance(entity, tuple):
        return [plain(item) for item in entity]
    if isinstance(entity, datetime.timedelta):
        return round(entity.total_seconds() * 1000)
    if isinstance(entity, datetime.datetime):
        return round(entity.timestamp() * 1000)
    if isinstance(entity, ErrorCode):
        return int(entity.value)
    return entity
