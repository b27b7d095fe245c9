"""Parsing and validation of request dicts, and the shape of every response.

A request is one flat dict (contract, section 1). Everything a client can get wrong is caught
here and becomes :class:`BadRequest` with Kafka's error code (``INVALID_REQUEST`` when Kafka has
no better one) and a readable message; nothing past this module sees an ill-typed request. The
engine turns a ``BadRequest`` into an error response and changes no group.

Binary fields (``metadata``, ``assignment``) are ``bytes``; a ``str`` is read as standard base64
(what JSON carries), strictly.
"""

from __future__ import annotations

import base64
import binascii
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.errors import Error
from coordinator.topics import uuid_to_bytes

#: The newest version of each API that Kafka's classic coordinator serves (contract, section 1).
MAX_API_VERSION: dict[str, int] = {
    "join_group": 9,
    "sync_group": 5,
    "heartbeat": 4,
    "leave_group": 5,
    "offset_commit": 9,
    "offset_fetch": 9,
    "offset_delete": 0,
    "describe_groups": 5,
    "list_groups": 5,
    "delete_groups": 2,
    "find_coordinator": 6,
    # Kafka 4.0's consumer groups (KIP-848; contract, section 6).
    "consumer_group_heartbeat": 1,
    "consumer_group_describe": 1,
}
APIS = frozenset(MAX_API_VERSION)
_HEARTBEAT_MAX = MAX_API_VERSION["heartbeat"]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class BadRequest(Exception):
    """A request that cannot be served as sent: answered with ``error`` and ``message``."""

    def __init__(self, error: Error, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(slots=True)
class Request:
    """A validated request: the common fields, and the API's own fields in ``body``."""

    api: str
    request_id: Any
    group_id: str
    api_version: int
    body: dict[str, Any]


# --- field readers ----------------------------------------------------------------------------

_MISSING = object()


def _int(lo: int, hi: int) -> Callable[[str, Any], int]:
    def read(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise BadRequest(
                Error.INVALID_REQUEST, f"{name} must be an integer, got {_show(value)}"
            )
        number = int(value)
        if not lo <= number <= hi:
            raise BadRequest(Error.INVALID_REQUEST, f"{name} {number} is out of range [{lo}, {hi}]")
        return number

    return read


int32 = _int(INT32_MIN, INT32_MAX)
int64 = _int(INT64_MIN, INT64_MAX)


def string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise BadRequest(Error.INVALID_REQUEST, f"{name} must be a string, got {_show(value)}")
    if not _unicode(value):
        raise BadRequest(Error.INVALID_REQUEST, f"{name} is not valid Unicode: {_show(value)}")
    return value


def _unicode(value: str) -> bool:
    """Whether the string can be written as UTF-8, as Kafka's strings are: a JSON escape such as
    ``"\\ud800"`` makes a lone surrogate, which no log record or table could hold."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadRequest(Error.INVALID_REQUEST, f"{name} must be true or false, got {_show(value)}")
    return value


def binary(name: str, value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(Error.INVALID_REQUEST, f"{name} is not valid base64") from None
    raise BadRequest(Error.INVALID_REQUEST, f"{name} must be bytes or base64, got {_show(value)}")


def nullable(read: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    def read_nullable(name: str, value: Any) -> Any:
        return None if value is None else read(name, value)

    return read_nullable


def array(item: Callable[[str, Any], Any]) -> Callable[[str, Any], list[Any]]:
    def read(name: str, value: Any) -> list[Any]:
        if not isinstance(value, (list, tuple)):
            raise BadRequest(Error.INVALID_REQUEST, f"{name} must be a list, got {_show(value)}")
        return [item(f"{name}[{i}]", v) for i, v in enumerate(value)]

    return read


Spec = tuple[tuple[str, Callable[[str, Any], Any], Any], ...]


def struct(spec: Spec) -> Callable[[str, Any], dict[str, Any]]:
    def read(name: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise BadRequest(Error.INVALID_REQUEST, f"{name} must be an object, got {_show(value)}")
        return _read_fields(value, spec, prefix=f"{name}.")

    return read


def _read_fields(raw: dict[str, Any], spec: Spec, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, read, default in spec:
        value = raw.get(name, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise BadRequest(Error.INVALID_REQUEST, f"missing field {prefix}{name}")
            out[name] = default
        else:
            out[name] = read(prefix + name, value)
    return out


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


# --- per-API fields ---------------------------------------------------------------------------

REQUIRED = _MISSING

PROTOCOL = struct((("name", string, REQUIRED), ("metadata", binary, b"")))
ASSIGNMENT = struct((("member_id", string, REQUIRED), ("assignment", binary, b"")))
LEAVE_MEMBER = struct(
    (
        ("member_id", string, ""),
        ("group_instance_id", nullable(string), None),
        ("reason", nullable(string), None),
    )
)
COMMIT_PARTITION = struct(
    (
        ("topic", string, REQUIRED),
        ("partition", int32, REQUIRED),
        ("offset", int64, REQUIRED),
        ("leader_epoch", nullable(int32), -1),
        ("metadata", nullable(string), ""),
        ("commit_timestamp_ms", int64, -1),
    )
)
TOPIC_PARTITION = struct((("topic", string, REQUIRED), ("partition", int32, REQUIRED)))


def topic_id(name: str, value: Any) -> str:
    """A Kafka ``Uuid`` in its 22-character string form (contract, section 6)."""
    text = string(name, value)
    try:
        uuid_to_bytes(text)
    except ValueError as exc:
        raise BadRequest(Error.INVALID_REQUEST, f"{name}: {exc}") from None
    return text


OWNED_PARTITIONS = struct(
    (("topic_id", topic_id, REQUIRED), ("partitions", array(int32), REQUIRED))
)

API_FIELDS: dict[str, Spec] = {
    "join_group": (
        ("member_id", string, ""),
        ("group_instance_id", nullable(string), None),
        ("client_id", string, ""),
        ("client_host", string, ""),
        ("session_timeout_ms", int32, REQUIRED),
        ("rebalance_timeout_ms", nullable(int32), None),
        ("protocol_type", string, REQUIRED),
        ("protocols", array(PROTOCOL), REQUIRED),
        ("reason", nullable(string), None),
    ),
    "sync_group": (
        ("member_id", string, REQUIRED),
        ("group_instance_id", nullable(string), None),
        ("generation_id", int32, REQUIRED),
        ("protocol_type", nullable(string), None),
        ("protocol_name", nullable(string), None),
        ("assignments", nullable(array(ASSIGNMENT)), None),
    ),
    "heartbeat": (
        ("member_id", string, REQUIRED),
        ("group_instance_id", nullable(string), None),
        ("generation_id", int32, REQUIRED),
    ),
    "leave_group": (
        ("member_id", nullable(string), None),
        ("members", nullable(array(LEAVE_MEMBER)), None),
    ),
    "offset_commit": (
        ("member_id", string, ""),
        ("group_instance_id", nullable(string), None),
        ("generation_id", int32, -1),
        ("retention_time_ms", int64, -1),
        ("offsets", array(COMMIT_PARTITION), REQUIRED),
    ),
    "offset_fetch": (
        ("partitions", nullable(array(TOPIC_PARTITION)), None),
        ("require_stable", boolean, False),
        # v9+: a consumer group's member asks with its id and epoch (null id: an admin fetch).
        ("member_id", nullable(string), None),
        ("member_epoch", int32, -1),
    ),
    "offset_delete": (("partitions", array(TOPIC_PARTITION), REQUIRED),),
    "describe_groups": (),
    "delete_groups": (),
    "list_groups": (
        ("states_filter", nullable(array(string)), None),
        ("types_filter", nullable(array(string)), None),
    ),
    "find_coordinator": (("key_type", int32, 0),),
    "consumer_group_heartbeat": (
        ("member_id", string, ""),
        ("member_epoch", int32, REQUIRED),
        ("instance_id", nullable(string), None),
        ("rack_id", nullable(string), None),
        ("rebalance_timeout_ms", int32, -1),
        ("subscribed_topic_names", nullable(array(string)), None),
        ("subscribed_topic_regex", nullable(string), None),
        ("server_assignor", nullable(string), None),
        ("topic_partitions", nullable(array(OWNED_PARTITIONS)), None),
        ("client_id", string, ""),
        ("client_host", string, ""),
    ),
    "consumer_group_describe": (("include_authorized_operations", boolean, False),),
}


def parse(raw: Any) -> Request:
    """Validate one request dict. Raises :class:`BadRequest`; never anything else."""
    if type(raw) is dict and raw.get("api") == "heartbeat":
        request = _plain_heartbeat(raw)
        if request is not None:
            return request
    return parse_in_full(raw)


def parse_in_full(raw: Any) -> Request:
    """:func:`parse` through the general field readers only (what its fast path must match)."""
    if not isinstance(raw, dict):
        raise BadRequest(Error.INVALID_REQUEST, f"a request must be an object, got {_show(raw)}")
    api = raw.get("api")
    if not isinstance(api, str) or api not in APIS:  # a list or dict is not even hashable
        known = ", ".join(sorted(APIS))
        shown = repr(api) if len(repr(api)) <= 60 else _show(api)
        raise BadRequest(Error.INVALID_REQUEST, f"unknown api {shown}; expected one of {known}")
    request_id = raw.get("request_id")
    if request_id is None:
        raise BadRequest(Error.INVALID_REQUEST, "missing field request_id")
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        raise BadRequest(Error.INVALID_REQUEST, "request_id must be a string or an integer")
    if isinstance(request_id, str) and not _unicode(request_id):
        raise BadRequest(Error.INVALID_REQUEST, "request_id is not valid Unicode")

    version = raw.get("api_version")
    max_version = MAX_API_VERSION[api]
    if version is None:
        version = max_version
    elif isinstance(version, bool) or not isinstance(version, numbers.Integral):
        raise BadRequest(
            Error.INVALID_REQUEST, f"api_version must be an integer, got {_show(version)}"
        )
    elif not 0 <= int(version) <= max_version:
        raise BadRequest(
            Error.UNSUPPORTED_VERSION,
            f"{api} version {version} is not supported; versions 0 to {max_version} are",
        )

    group_id = raw.get("group_id")
    if api == "list_groups":
        group_id = ""
    elif group_id is None:
        raise BadRequest(Error.INVALID_GROUP_ID, "group_id is missing or null")
    else:
        group_id = string("group_id", group_id)

    body = _read_fields(raw, API_FIELDS[api])
    request = Request(api, request_id, group_id, int(version), body)
    _VERSIONED[api](request)
    return request


def plain_heartbeat_fields(raw: Any) -> tuple[str | int, str, str, int] | None:
    """(request id, group id, member id, generation) of the commonest request, read without the
    general field readers: a heartbeat with no version (the newest) or a supported one as a
    plain int (what the gateway hands on), ASCII ids, a plain int generation and no instance id.
    None for anything else, which :func:`parse` reads in full (so every error and its message
    stay the same). Serving it does not depend on its version: no version of Heartbeat
    changes what a heartbeat without an instance id does or answers."""
    if type(raw) is not dict or raw.get("api") != "heartbeat":
        return None
    request_id = raw.get("request_id")
    group_id = raw.get("group_id")
    member_id = raw.get("member_id")
    generation = raw.get("generation_id")
    version = raw.get("api_version")
    if (
        (version is None or (type(version) is int and 0 <= version <= _HEARTBEAT_MAX))
        and raw.get("group_instance_id") is None
        and (type(request_id) is int or (type(request_id) is str and request_id.isascii()))
        and type(group_id) is str
        and group_id.isascii()
        and type(member_id) is str
        and member_id.isascii()
        and type(generation) is int
        and INT32_MIN <= generation <= INT32_MAX
    ):
        return request_id, group_id, member_id, generation
    return None


def _plain_heartbeat(raw: dict[str, Any]) -> Request | None:
    """Exactly the Request :func:`parse` builds for a :func:`plain_heartbeat_fields` heartbeat,
    or None for anything else."""
    fields = plain_heartbeat_fields(raw)
    if fields is None:
        return None
    request_id, group_id, member_id, generation = fields
    version = raw.get("api_version")
    body = {"member_id": member_id, "group_instance_id": None, "generation_id": generation}
    return Request(
        "heartbeat", request_id, group_id, _HEARTBEAT_MAX if version is None else version, body
    )


# --- behaviour Kafka ties to versions -----------------------------------------------------------


def _join_group(request: Request) -> None:
    body, version = request.body, request.api_version
    body["protocols"] = [(p["name"], p["metadata"]) for p in body["protocols"]]
    if version < 5:
        body["group_instance_id"] = None  # the field does not exist before v5
    if version == 0 or body["rebalance_timeout_ms"] is None:
        # v0 has no rebalance timeout: Kafka's JoinGroupRequest uses the session timeout.
        body["rebalance_timeout_ms"] = body["session_timeout_ms"]
    if body["rebalance_timeout_ms"] < 0:
        raise BadRequest(Error.INVALID_REQUEST, "rebalance_timeout_ms must not be negative")
    if body["reason"] is not None and len(body["reason"]) > 255:
        body["reason"] = body["reason"][:255]  # JoinGroupRequest.maybeTruncateReason


def _sync_group(request: Request) -> None:
    body = request.body
    if request.api_version < 3:
        body["group_instance_id"] = None
    if body["assignments"] is None:
        body["assignments"] = []
    if request.api_version < 5:
        # v5 made protocol type and name mandatory (KIP-559); older clients do not send them.
        body["protocol_type"] = None
        body["protocol_name"] = None
    elif body["protocol_type"] is None or body["protocol_name"] is None:
        raise BadRequest(
            Error.INCONSISTENT_GROUP_PROTOCOL,
            "SyncGroup v5+ must carry protocol_type and protocol_name",
        )


def _heartbeat(request: Request) -> None:
    if request.api_version < 3:
        request.body["group_instance_id"] = None


def _leave_group(request: Request) -> None:
    body = request.body
    if request.api_version < 3:
        if body["member_id"] is None:
            raise BadRequest(Error.INVALID_REQUEST, "missing field member_id (LeaveGroup v0-v2)")
        body["members"] = [
            {"member_id": body["member_id"], "group_instance_id": None, "reason": None}
        ]
    elif body["members"] is None:
        raise BadRequest(Error.INVALID_REQUEST, "missing field members (LeaveGroup v3+)")
    elif request.api_version < 5:
        for member in body["members"]:
            member["reason"] = None


def _offset_commit(request: Request) -> None:
    body, version = request.body, request.api_version
    if version < 7:
        body["group_instance_id"] = None
    if not 2 <= version <= 4:
        body["retention_time_ms"] = -1  # only OffsetCommit v2-v4 carry a retention time
    elif body["retention_time_ms"] < -1:
        raise BadRequest(Error.INVALID_REQUEST, "retention_time_ms must be -1 or >= 0")
    for partition in body["offsets"]:
        if partition["leader_epoch"] is None or version < 6:
            partition["leader_epoch"] = -1
        if version != 1:
            partition["commit_timestamp_ms"] = -1  # only OffsetCommit v1 carries one
        if partition["metadata"] is None:
            partition["metadata"] = ""


def _offset_fetch(request: Request) -> None:
    body = request.body
    if request.api_version < 2 and body["partitions"] is None:
        raise BadRequest(Error.INVALID_REQUEST, "OffsetFetch v0-v1 must list partitions")
    if request.api_version < 7:
        body["require_stable"] = False
    if request.api_version < 9:
        body["member_id"] = None
        body["member_epoch"] = -1


def _list_groups(request: Request) -> None:
    if request.api_version < 4:
        request.body["states_filter"] = None
    if request.api_version < 5:
        request.body["types_filter"] = None


def _find_coordinator(request: Request) -> None:
    if request.body["key_type"] != 0:
        raise BadRequest(
            Error.INVALID_REQUEST,
            f"key_type {request.body['key_type']} is not served: only groups (0) are coordinated here",
        )


def _consumer_group_heartbeat(request: Request) -> None:
    if request.api_version < 1:
        request.body["subscribed_topic_regex"] = None  # v1 added SubscribedTopicRegex


def _nothing(request: Request) -> None:
    return None


_VERSIONED: dict[str, Callable[[Request], None]] = {
    "join_group": _join_group,
    "sync_group": _sync_group,
    "heartbeat": _heartbeat,
    "leave_group": _leave_group,
    "offset_commit": _offset_commit,
    "offset_fetch": _offset_fetch,
    "offset_delete": _nothing,
    "describe_groups": _nothing,
    "delete_groups": _nothing,
    "list_groups": _list_groups,
    "find_coordinator": _find_coordinator,
    "consumer_group_heartbeat": _consumer_group_heartbeat,
    "consumer_group_describe": _nothing,
}


# --- responses --------------------------------------------------------------------------------


def response(
    api: str,
    request_id: Any,
    group_id: Any,
    error: Error = Error.NONE,
    message: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One response dict: the common fields first, then the API's own."""
    out: dict[str, Any] = {
        "api": api,
        "request_id": request_id,
        "group_id": group_id,
        "error_code": int(error),
        "error": error.error_name,
        "error_message": message,
    }
    out.update(fields)
    return out


def error_fields(api: str, body: dict[str, Any] | None, error: Error) -> dict[str, Any]:
    """The API's own fields in a response that failed as a whole."""
    body = body or {}
    if api == "join_group":
        return failed_join_fields(body.get("member_id", ""))
    if api == "sync_group":
        return {"protocol_type": None, "protocol_name": None, "assignment": b""}
    if api == "offset_commit":
        return {"partitions": partition_results(body.get("offsets", []), error)}
    if api in ("leave_group",):
        return {"members": []}
    if api in ("offset_fetch", "offset_delete"):
        return {"partitions": []}
    if api == "describe_groups":
        return {"group_state": "", "protocol_type": "", "protocol_data": "", "members": []}
    if api == "list_groups":
        return {"groups": []}
    if api == "find_coordinator":
        return {"offsets_partition": -1, "node_id": -1, "host": "", "port": -1}
    if api == "consumer_group_heartbeat":
        return {
            "member_id": None,
            "member_epoch": 0,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }
    if api == "consumer_group_describe":
        return {
            "group_state": "",
            "group_epoch": 0,
            "assignment_epoch": 0,
            "assignor_name": "",
            "members": [],
        }
    return {}


def failed_response(request: dict[str, Any], error: Error, message: str | None) -> dict[str, Any]:
    """The answer to a request (a dict, not parsed) that failed as a whole with ``error``: what
    a transport makes up when a request or its answer was lost, and what a gateway back end
    answers when it cannot serve. An OffsetCommit's partitions each carry the error."""
    api = str(request.get("api", "unknown"))
    return response(
        api,
        request.get("request_id"),
        request.get("group_id"),
        error,
        message,
        **error_fields(api, request, error),
    )


def failed_join_fields(member_id: str) -> dict[str, Any]:
    """A JoinGroup answer that did not join: no generation, no protocol, no leader."""
    return {
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def partition_results(partitions: list[dict[str, Any]], error: Error) -> list[dict[str, Any]]:
    return [
        {
            "topic": p["topic"],
            "partition": p["partition"],
            "error_code": int(error),
            "error": error.error_name,
        }
        for p in partitions
    ]


def error_response(request: Request, error: Error, message: str | None = None) -> dict[str, Any]:
    return response(
        request.api,
        request.request_id,
        request.group_id,
        error,
        message,
        **error_fields(request.api, request.body, error),
    )


def bad_request_response(raw: Any, problem: BadRequest) -> dict[str, Any]:
    """The answer to a request that did not parse, built from whatever of it can be read."""
    fields = raw if isinstance(raw, dict) else {}
    api = fields.get("api") if isinstance(fields.get("api"), str) else None
    request_id = fields.get("request_id")
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        request_id = None
    group_id = fields.get("group_id") if isinstance(fields.get("group_id"), str) else None
    extra = error_fields(api, None, problem.error) if api in APIS else {}
    return response(api or "unknown", request_id, group_id, problem.error, problem.message, **extra)
