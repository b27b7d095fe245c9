"""The contract's request and response dicts as Kafka wire bodies, and back: the client-side
inverse of :mod:`coordinator.gateway.apis`.

Pure functions over plain data (the dicts :func:`coordinator.gateway.codec.build` turns into kio
entities and :func:`~coordinator.gateway.codec.plain` makes of them), so that the mapping can be
tested without a socket:

- :func:`choose_version`: the highest version of an API that this client and the broker both
  serve (Kafka's ``ApiVersions`` negotiation), capped at the request's ``api_version`` if given;
- :func:`to_wire`: a contract request as the body of that wire request;
- :func:`from_wire`: the wire response body as the contract response dict the engine would have
  emitted for the same request (same keys, same types: bytes for binary fields).

What a wire response cannot carry is made up as the engine would answer where that is certain,
and otherwise left neutral (documented per API below): ``error_message`` is ``None`` except for
FindCoordinator v1+, which carries one; FindCoordinator's ``offsets_partition`` is computed from
the group id and the broker's ``offsets.topic.num.partitions`` (Kafka's default 50 unless told);
OffsetCommit has no top-level error on the wire (per-partition errors carry it). Partition lists
come back in the order of the request (the wire groups them by topic).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

from coordinator.errors import Error
from coordinator.gateway import codec
from coordinator.log.partitioning import partition_for
from coordinator.requests import MAX_API_VERSION, response

#: The contract's APIs and their Kafka API keys.
API_KEYS: dict[str, int] = {
    "offset_commit": codec.OFFSET_COMMIT,
    "offset_fetch": codec.OFFSET_FETCH,
    "find_coordinator": codec.FIND_COORDINATOR,
    "join_group": codec.JOIN_GROUP,
    "heartbeat": codec.HEARTBEAT,
    "leave_group": codec.LEAVE_GROUP,
    "sync_group": codec.SYNC_GROUP,
    "describe_groups": codec.DESCRIBE_GROUPS,
    "list_groups": codec.LIST_GROUPS,
    "delete_groups": codec.DELETE_GROUPS,
    "offset_delete": codec.OFFSET_DELETE,
}

#: The versions this client speaks, per API key: up to what Kafka's classic coordinator serves
#: (the contract's newest versions), down to kio's floor (OffsetCommit 2, OffsetFetch 1).
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    key: (
        {codec.OFFSET_COMMIT: 2, codec.OFFSET_FETCH: 1}.get(key, 0),
        MAX_API_VERSION[api],
    )
    for api, key in API_KEYS.items()
}
#: ApiVersions, sent first on every connection.
API_VERSIONS_RANGE = (0, 4)

#: Kafka's default ``offsets.topic.num.partitions`` (for FindCoordinator's ``offsets_partition``).
DEFAULT_OFFSETS_PARTITIONS = 50


class Unrepresentable(ValueError):
    """A contract request that the chosen wire version cannot carry."""


def choose_version(request: Mapping[str, Any], broker: Mapping[int, tuple[int, int]]) -> int | None:
    """The version to send ``request`` at: the highest one both sides serve, no higher than the
    request's ``api_version`` (when given); None when there is none (or the API is unknown)."""
    api_key = API_KEYS.get(str(request.get("api")))
    if api_key is None or api_key not in broker:
        return None
    low, high = CLIENT_VERSIONS[api_key]
    their_low, their_high = broker[api_key]
    top = min(high, their_high)
    wanted = request.get("api_version")
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        top = min(top, wanted)
    return top if top >= max(low, their_low) else None


# --- requests ----------------------------------------------------------------------------------


def to_wire(request: Mapping[str, Any], version: int) -> tuple[int, dict[str, Any]]:
    """(API key, plain wire body) of a contract request at ``version``. Keys the version lacks
    are dropped by :func:`codec.build`. Raises :class:`Unrepresentable` (or KeyError for a
    missing required field)."""
    api = str(request.get("api"))
    if api not in API_KEYS:
        raise Unrepresentable(f"unknown api {api!r}")
    return API_KEYS[api], _REQUESTS[api](request, version)


def _join_group(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    session = int(r["session_timeout_ms"])
    rebalance = r.get("rebalance_timeout_ms")
    return {
        "group_id": r["group_id"],
        "session_timeout": session,
        # The contract's null rebalance timeout means the session timeout (JoinGroup v0's rule).
        "rebalance_timeout": session if rebalance is None else int(rebalance),
        "member_id": r.get("member_id") or "",
        "group_instance_id": r.get("group_instance_id"),
        "protocol_type": r["protocol_type"],
        "protocols": [
            {"name": p["name"], "metadata": bytes(p.get("metadata") or b"")} for p in r["protocols"]
        ],
        "reason": r.get("reason"),
    }


def _sync_group(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    return {
        "group_id": r["group_id"],
        "generation_id": r["generation_id"],
        "member_id": r["member_id"],
        "group_instance_id": r.get("group_instance_id"),
        "protocol_type": r.get("protocol_type"),
        "protocol_name": r.get("protocol_name"),
        "assignments": [
            {"member_id": a["member_id"], "assignment": bytes(a.get("assignment") or b"")}
            for a in r.get("assignments") or []
        ],
    }


def _heartbeat(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    return {
        "group_id": r["group_id"],
        "generation_id": r["generation_id"],
        "member_id": r["member_id"],
        "group_instance_id": r.get("group_instance_id"),
    }


def _leave_group(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    members = r.get("members")
    if members is None:
        members = [{"member_id": r["member_id"], "group_instance_id": None, "reason": None}]
    members = [
        {
            "member_id": m.get("member_id", ""),
            "group_instance_id": m.get("group_instance_id"),
            "reason": m.get("reason"),
        }
        for m in members
    ]
    if v < 3:
        if len(members) != 1 or members[0]["group_instance_id"] is not None:
            raise Unrepresentable("LeaveGroup v0-v2 carries one dynamic member")
        return {"group_id": r["group_id"], "member_id": members[0]["member_id"]}
    return {"group_id": r["group_id"], "members": members}


def _topics(
    partitions: list[Mapping[str, Any]], row: Any, key: str = "partitions"
) -> list[dict[str, Any]]:
    """Partitions grouped by topic, topics in order of first appearance (as the gateway does)."""
    topics: dict[str, list[Any]] = {}
    for p in partitions:
        topics.setdefault(p["topic"], []).append(row(p))
    return [{"name": name, key: rows} for name, rows in topics.items()]


def _offset_commit(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    return {
        "group_id": r["group_id"],
        "generation_id_or_member_epoch": r.get("generation_id", -1),
        "member_id": r.get("member_id") or "",
        "group_instance_id": r.get("group_instance_id"),
        "retention_time": r.get("retention_time_ms", -1),
        "topics": _topics(
            r["offsets"],
            lambda p: {
                "partition_index": p["partition"],
                "committed_offset": p["offset"],
                "committed_leader_epoch": -1
                if p.get("leader_epoch") is None
                else p["leader_epoch"],
                "committed_metadata": p.get("metadata", ""),
            },
        ),
    }


def _offset_fetch(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    wanted = r.get("partitions")
    if wanted is None and v < 2:
        raise Unrepresentable("OffsetFetch v0-v1 must list partitions")
    topics = (
        None
        if wanted is None
        else _topics(wanted, lambda p: p["partition"], key="partition_indexes")
    )
    stable = bool(r.get("require_stable", False))
    if v >= 8:
        group = {"group_id": r["group_id"], "topics": topics, "member_id": None, "member_epoch": -1}
        return {"groups": [group], "require_stable": stable}
    return {"group_id": r["group_id"], "topics": topics, "require_stable": stable}


def _offset_delete(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    return {
        "group_id": r["group_id"],
        "topics": _topics(r["partitions"], lambda p: {"partition_index": p["partition"]}),
    }


def _describe_groups(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    return {"groups": [r["group_id"]], "include_authorized_operations": False}


def _list_groups(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    return {
        "states_filter": list(r.get("states_filter") or []),
        "types_filter": list(r.get("types_filter") or []),
    }


def _delete_groups(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    return {"groups_names": [r["group_id"]]}


def _find_coordinator(r: Mapping[str, Any], v: int) -> dict[str, Any]:
    key_type = r.get("key_type", 0)
    if v >= 4:
        return {"key_type": key_type, "coordinator_keys": [r["group_id"]]}
    if v == 0 and key_type != 0:
        raise Unrepresentable("FindCoordinator v0 finds group coordinators only")
    return {"key": r["group_id"], "key_type": key_type}


_REQUESTS = {
    "join_group": _join_group,
    "sync_group": _sync_group,
    "heartbeat": _heartbeat,
    "leave_group": _leave_group,
    "offset_commit": _offset_commit,
    "offset_fetch": _offset_fetch,
    "offset_delete": _offset_delete,
    "describe_groups": _describe_groups,
    "list_groups": _list_groups,
    "delete_groups": _delete_groups,
    "find_coordinator": _find_coordinator,
}


# --- responses ---------------------------------------------------------------------------------


def error_name(code: int) -> str | None:
    """The ``error`` field for an error code (None for success; a made-up name for a code this
    project does not know)."""
    try:
        return Error(code).error_name
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"


def _answer(
    request: Mapping[str, Any],
    error_code: int,
    message: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    api = str(request["api"])
    group_id = "" if api == "list_groups" else request.get("group_id")
    out = response(api, request.get("request_id"), group_id, Error.NONE, message, **fields)
    out["error_code"] = int(error_code)
    out["error"] = error_name(int(error_code))
    return out


def from_wire(
    request: Mapping[str, Any],
    version: int,
    body: Mapping[str, Any],
    offsets_partitions: int = DEFAULT_OFFSETS_PARTITIONS,
) -> dict[str, Any]:
    """The contract response to ``request`` from the plain wire response ``body`` (of
    ``version``): what the engine would have answered the same request in process."""
    api = str(request["api"])
    if api not in _RESPONSES:
        raise Unrepresentable(f"unknown api {api!r}")
    return _RESPONSES[api](request, version, body, offsets_partitions)


def _bytes(value: Any) -> bytes:
    return b"" if value is None else bytes(value)


def _join_group_answer(
    r: Mapping[str, Any], v: int, b: Mapping[str, Any], _: int
) -> dict[str, Any]:
    protocol_name = b.get("protocol_name")
    if v < 7 and not protocol_name:
        protocol_name = None  # before v7 the name is not nullable: "" stands for none
    return _answer(
        r,
        b["error_code"],
        generation_id=b["generation_id"],
        protocol_type=b.get("protocol_type"),  # None before v7: not on the wire
        protocol_name=protocol_name,
        leader=b["leader"],
        skip_assignment=bool(b.get("skip_assignment", False)),
        member_id=b["member_id"],
        members=[
            {
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "metadata": _bytes(m["metadata"]),
            }
            for m in b.get("members") or []
        ],
    )


def _sync_group_answer(
    r: Mapping[str, Any], v: int, b: Mapping[str, Any], _: int
) -> dict[str, Any]:
    return _answer(
        r,
        b["error_code"],
        protocol_type=b.get("protocol_type"),
        protocol_name=b.get("protocol_name"),
        assignment=_bytes(b.get("assignment")),
    )


def _heartbeat_answer(r: Mapping[str, Any], v: int, b: Mapping[str, Any], _: int) -> dict[str, Any]:
    return _answer(r, b["error_code"])


def _leave_group_answer(
    r: Mapping[str, Any], v: int, b: Mapping[str, Any], _: int
) -> dict[str, Any]:
    # v0-v2 carry no per-member results: the response's error is the one member's.
    return _answer(
        r,
        b["error_code"],
        members=[
            {
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "error_code": m["error_code"],
                "error": error_name(m["error_code"]),
            }
            for m in b.get("members") or []
        ],
    )


def _flatten(topics: list[Mapping[str, Any]] | None, row: Any) -> list[dict[str, Any]]:
    return [row(t["name"], p) for t in topics or [] for p in t["partitions"]]


def _in_request_order(
    rows: list[dict[str, Any]], wanted: list[Mapping[str, Any]] | None
) -> list[dict[str, Any]]:
    """``rows`` in the order the request listed their partitions (the engine answers in that
    order; the wire groups partitions by topic). Rows the request did not list go last."""
    if not wanted:
        return rows
    slots: dict[tuple[str, int], deque[int]] = defaultdict(deque)
    for position, p in enumerate(wanted):
        slots[(p["topic"], p["partition"])].append(position)
    keyed = []
    for arrival, row in enumerate(rows):
        positions = slots.get((row["topic"], row["partition"]))
        position = positions.popleft() if positions else len(wanted) + arrival
        keyed.append((position, row))
    return [row for _, row in sorted(keyed, key=lambda item: item[0])]


def _partition_error(topic: str, p: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": p["partition_index"],
        "error_code": p["error_code"],
        "error": error_name(p["error_code"]),
    }


def _offset_commit_answer(
    r: Mapping[str, Any], v: int, b: Mapping[str, Any], _: int
) -> dict[str, Any]:
    # No top-level error on the wire: an error for the whole request is on every partition.
    rows = _flatten(b.get("topics"), _partition_error)
    return _answer(r, 0, partitions=_in_request_order(rows, r.get("offsets")))


def _fetched(topic: str, p: Mapping[str, Any]) -> dict[str, Any]:
    leader_epoch = p.get("committed_leader_epoch", -1)
    return {
        "topic": topic,
        "partition": p["partition_index"],
        "offset": p["committed_offset"],
        "leader_epoch": -1 if leader_epoch is None else leader_epoch,
        "metadata": p.get("metadata") or "",
        "error_code": p["error_code"],
        "error": error_name(p["error_code"]),
    }


def _offset_fetch_answer(
    r: Mapping[str, Any], v: int, b: Mapping[str, Any], _: int
) -> dict[str, Any]:
    if v >= 8:
        groups = b.get("groups") or []
        group = next((g for g in groups if g["group_id"] == r["group_id"]), None)
        if group is None:
            raise Unrepresentable(f"OffsetFetch answered no group {r['group_id']!r}")
        b = group
    rows = _flatten(b.get("topics"), _fetched)
    # v0-v1 have no top-level error: a group-wide error is on every partition.
    return _answer(
        r, b.get("error_code", 0), partitions=_in_request_order(rows, r.get("partitions"))
    )


def _offset_delete_answer(
    r: Mapping[str, Any], v: int, b: Mapping[str, Any], _: int
) -> dict[str, Any]:
    rows = _flatten(b.get("topics"), _partition_error)
    return _answer(r, b["error_code"], partitions=_in_request_order(rows, r.get("partitions")))


def _describe_groups_answer(
    r: Mapping[str, Any], v: int, b: Mapping[str, Any], _: int
) -> dict[str, Any]:
    group = next((g for g in b.get("groups") or [] if g["group_id"] == r["group_id"]), None)
    if group is None:
        raise Unrepresentable(f"DescribeGroups answered no group {r['group_id']!r}")
    return _answer(
        r,
        group["error_code"],
        group.get("error_message"),
        group_state=group["group_state"],
        protocol_type=group["protocol_type"],
        protocol_data=group["protocol_data"],
        members=[
            {
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "client_id": m["client_id"],
                "client_host": m["client_host"],
                "member_metadata": _bytes(m["member_metadata"]),
                "member_assignment": _bytes(m["member_assignment"]),
            }
            for m in group.get("members") or []
        ],
    )


def _list_groups_answer(
    r: Mapping[str, Any], v: int, b: Mapping[str, Any], _: int
) -> dict[str, Any]:
    # Before v4 the state, before v5 the type, are not on the wire (None).
    return _answer(
        r,
        b["error_code"],
        groups=[
            {
                "group_id": g["group_id"],
                "protocol_type": g["protocol_type"],
                "group_state": g.get("group_state"),
                "group_type": g.get("group_type"),
            }
            for g in b.get("groups") or []
        ],
    )


def _delete_groups_answer(
    r: Mapping[str, Any], v: int, b: Mapping[str, Any], _: int
) -> dict[str, Any]:
    result = next((x for x in b.get("results") or [] if x["group_id"] == r["group_id"]), None)
    if result is None:
        raise Unrepresentable(f"DeleteGroups answered no group {r['group_id']!r}")
    return _answer(r, result["error_code"])


def _find_coordinator_answer(
    r: Mapping[str, Any], v: int, b: Mapping[str, Any], offsets_partitions: int
) -> dict[str, Any]:
    if v >= 4:
        found = next((c for c in b.get("coordinators") or [] if c["key"] == r["group_id"]), None)
        if found is None:
            raise Unrepresentable(f"FindCoordinator answered no key {r['group_id']!r}")
        b = found
    return _answer(
        r,
        b["error_code"],
        b.get("error_message"),
        offsets_partition=partition_for(str(r["group_id"]), offsets_partitions),
        node_id=b["node_id"],
        host=b["host"],
        port=b["port"],
    )


_RESPONSES = {
    "join_group": _join_group_answer,
    "sync_group": _sync_group_answer,
    "heartbeat": _heartbeat_answer,
    "leave_group": _leave_group_answer,
    "offset_commit": _offset_commit_answer,
    "offset_fetch": _offset_fetch_answer,
    "offset_delete": _offset_delete_answer,
    "describe_groups": _describe_groups_answer,
    "list_groups": _list_groups_answer,
    "delete_groups": _delete_groups_answer,
    "find_coordinator": _find_coordinator_answer,
}
