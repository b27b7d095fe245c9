"""What the gateway answers: kio requests in, engine request dicts out, and back.

Each handler takes the decoded request (its body as plain data, :func:`codec.plain`) and returns
the response as plain data, which :func:`codec.build` turns into the kio response of the
client's version (fields that version lacks are dropped). Group APIs go to the back end as the
contract's request dicts, one group per dict: batched requests (DescribeGroups, DeleteGroups,
OffsetFetch v8+, FindCoordinator v4+) become several engine requests whose answers are merged.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.gateway import codec
from coordinator.gateway.codec import DecodedRequest
from coordinator.gateway.log_topic import (
    EARLIEST_TIMESTAMP,
    LOG_TOPIC,
    LogTopic,
    legacy_offsets_before,
)
from coordinator.gateway.record_batch import fetch_magic
from coordinator.gateway.upstream import TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONS_REFUSED
from coordinator.topics import topic_id_for, uuid_from_bytes, uuid_to_bytes

INT32_MIN = -(2**31)
UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
UNSUPPORTED_VERSION = 35
POLICY_VIOLATION = 44
#: FindCoordinator's key type of a transactional id (0 is a group).
TRANSACTION_KEY = 1
#: READ | DELETE | DESCRIBE (Kafka's AclOperation codes 3, 6, 8), for DescribeGroups.
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
#: The longest a Fetch is held (the client's max_wait_ms, capped).
MAX_FETCH_WAIT_MS = 1000

Submit = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class SharedAnswer(dict[str, Any]):
    """An answer a handler hands out again for the same inputs (Metadata's, for the same
    topics, nodes and cluster): never changed once made, so whoever changes an answer copies it
    (as ACL filtering and a listener's address do), and its encoding may be kept
    (:meth:`coordinator.gateway.server.Gateway.answer`)."""

    __slots__ = ()


#: Shared answers kept per context before the memo starts again.
SHARED_ANSWERS = 256


@dataclass
class GatewayContext:
    """What the handlers need besides the request: the back end, topics and the broker."""

    submit: Submit
    topics: dict[str, int]
    host: str
    port: int
    node_id: int = 0
    cluster_id: str = "coordinator-gateway"
    #: ``__consumer_offsets``, served from the log (None: not served).
    log_topic: LogTopic | None = None
    #: Upstream mode: the ApiVersions table (the intersection with the upstream's) and where
    #: FindCoordinator sends clients (node id, host, port); None: the gateway alone.
    versions: Callable[[], Awaitable[dict[int, tuple[int, int]]]] | None = None
    coordinator: Callable[[], Awaitable[tuple[int, str, int]]] | None = None
    #: Every node (id, host, port) of a gateway of several processes; None: this one only.
    brokers: list[tuple[int, str, int]] | None = None
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    #: Metadata's answers by what they are made of (:class:`SharedAnswer`).
    _shared: dict[Any, SharedAnswer] = field(default_factory=dict)
    #: Request ids are unique across runs: the Spark job's responses table and the member ids
    #: the engine derives from request ids outlive one gateway process.
    _run: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def request_id(self) -> str:
        return f"gw-{self._run}-{next(self._ids)}"

    def topic_id(self, name: str) -> uuid.UUID:
        return uuid.UUID(bytes=uuid_to_bytes(topic_id_for(name)))

    def topic_list(self) -> list[dict[str, Any]]:
        """The topics as the engine learns them (contract, section 6): the ids Metadata gives."""
        return [
            {"name": name, "topic_id": topic_id_for(name), "partitions": n}
            for name, n in sorted(self.topics.items())
        ]


async def dispatch(
    ctx: GatewayContext, req: DecodedRequest, client_host: str
) -> dict[str, Any] | None:
    """The response (plain data) to one request; None when Kafka sends none (acks=0)."""
    if req.body is None:  # ApiVersions above the supported range
        return await _api_versions_of(ctx, UNSUPPORTED_VERSION)
    body = codec.plain(req.body)
    handler = HANDLERS[req.api_key]
    return await handler(ctx, req.api_version, body, req.client_id or "", client_host)


def api_versions_table(
    error_code: int = 0, versions: dict[int, tuple[int, int]] | None = None
) -> dict[str, Any]:
    return {
        "error_code": error_code,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted((versions or codec.SUPPORTED).items())
        ],
        "throttle_time": 0,
    }


async def _api_versions_of(ctx: GatewayContext, error_code: int = 0) -> dict[str, Any]:
    versions = None if ctx.versions is None else await ctx.versions()
    return api_versions_table(error_code, versions)


def _base(ctx: GatewayContext, api: str, group_id: str, version: int) -> dict[str, Any]:
    return {
        "api": api,
        "request_id": ctx.request_id(),
        "group_id": group_id,
        "api_version": version,
    }


# --- the broker APIs a consumer needs besides the coordinator --------------------------------


async def api_versions(
    ctx: GatewayContext, v: int, body: dict[str, Any], *_: str
) -> dict[str, Any]:
    return await _api_versions_of(ctx)


async def metadata(ctx: GatewayContext, v: int, body: dict[str, Any], *_: str) -> dict[str, Any]:
    wanted = body.get("topics")
    if wanted is None or (v == 0 and not wanted):
        names = sorted(ctx.topics)
        if ctx.log_topic is not None and LOG_TOPIC not in ctx.topics:
            names.append(LOG_TOPIC)
    else:
        # Metadata v10+ may name a topic by its id alone (librdkafka does, for the topic ids a
        # consumer group assignment carries): an id the gateway does not know stays unknown.
        by_id: dict[uuid.UUID | None, str] = {ctx.topic_id(n): n for n in ctx.topics}
        names = [
            t["name"] if t.get("name") is not None else by_id.get(_as_uuid(t.get("topic_id")), "")
            for t in wanted
        ]
    counts = [_partition_count(ctx, name) if name else None for name in names]
    internal = ctx.log_topic is not None
    nodes = ctx.brokers or [(ctx.node_id, ctx.host, ctx.port)]
    key = (tuple(names), tuple(counts), internal, tuple(nodes), ctx.node_id, ctx.cluster_id)
    shared = ctx._shared.get(key)
    if shared is not None:
        return shared
    topics = []
    for name, count in zip(names, counts, strict=True):
        topics.append(
            {
                "error_code": 0 if count is not None else UNKNOWN_TOPIC_OR_PARTITION,
                "name": name,
                "topic_id": ctx.topic_id(name) if count is not None else uuid.UUID(int=0),
                "is_internal": name == LOG_TOPIC and internal,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": p,
                        "leader_id": ctx.node_id,
                        "leader_epoch": 0,
                        "replica_nodes": [ctx.node_id],
                        "isr_nodes": [ctx.node_id],
                        "offline_replicas": [],
                    }
                    for p in range(count or 0)
                ],
                "topic_authorized_operations": INT32_MIN,
            }
        )
    if len(ctx._shared) >= SHARED_ANSWERS:
        ctx._shared.clear()
    shared = ctx._shared[key] = SharedAnswer(
        throttle_time=0,
        brokers=[
            {"node_id": node, "host": host, "port": port, "rack": None}
            for node, host, port in nodes
        ],
        cluster_id=ctx.cluster_id,
        controller_id=ctx.node_id,
        topics=topics,
        cluster_authorized_operations=INT32_MIN,
    )
    return shared


async def list_offsets(
    ctx: GatewayContext, v: int, body: dict[str, Any], *_: str
) -> dict[str, Any]:
    log_topic = ctx.log_topic
    if log_topic is not None and any(t["name"] == LOG_TOPIC for t in body["topics"]):
        await log_topic.refresh(force=True)
    answer = _old_style_offsets if v == 0 else _list_offset
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [answer(ctx, t["name"], p) for p in t["partitions"]],
            }
            for t in body["topics"]
        ],
    }


def _list_offset(ctx: GatewayContext, topic: str, p: dict[str, Any]) -> dict[str, Any]:
    if ctx.log_topic is not None and topic == LOG_TOPIC:
        return ctx.log_topic.list_offset(p["partition_index"], p["timestamp"])
    return {
        "partition_index": p["partition_index"],
        "error_code": _topic_error(ctx, topic, p["partition_index"]),
        "timestamp": -1,
        "offset": 0,
        "leader_epoch": 0,
    }


def _old_style_offsets(ctx: GatewayContext, topic: str, p: dict[str, Any]) -> dict[str, Any]:
    """ListOffsets v0 (Kafka 3.9's ``handleListOffsetRequestV0``): up to ``max_num_offsets``
    segment start offsets at or before the timestamp, newest first, the log end offset counting
    as the newest. A topic other than the log's is one empty segment at offset 0."""
    index, timestamp = p["partition_index"], p["timestamp"]
    answer: dict[str, Any] = {"partition_index": index, "error_code": 0, "old_style_offsets": []}
    if timestamp < EARLIEST_TIMESTAMP:  # -3 (max timestamp) and below came with v7+
        answer["error_code"] = UNSUPPORTED_VERSION
    elif _topic_error(ctx, topic, index):
        answer["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
    elif p["max_num_offsets"] < 0:  # Java's NegativeArraySizeException, as Kafka answers it
        answer["error_code"] = UNKNOWN_SERVER_ERROR
    else:
        segments = (
            ctx.log_topic.offset_times(index)
            if ctx.log_topic is not None and topic == LOG_TOPIC
            else [(0, 0)]
        )
        answer["old_style_offsets"] = legacy_offsets_before(
            segments, timestamp, p["max_num_offsets"]
        )
    return answer


async def fetch(ctx: GatewayContext, v: int, body: dict[str, Any], *_: str) -> dict[str, Any]:
    """Other topics hold nothing (answered after ``max_wait``); ``__consumer_offsets`` serves
    the log (:mod:`coordinator.gateway.log_topic`), waiting only while it has nothing to give."""
    wait_s = max(0, min(int(body.get("max_wait", 0)), MAX_FETCH_WAIT_MS)) / 1000
    log_topic = ctx.log_topic
    if log_topic is None or all(t["topic"] != LOG_TOPIC for t in body["topics"]):
        await asyncio.sleep(wait_s)
        return _fetch_response(ctx, v, body)
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        await log_topic.refresh()
        response = _fetch_response(ctx, v, body)
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0 or _has_log_data(response):
            return response
        await asyncio.sleep(min(left, log_topic.interval_s))


def _has_log_data(response: dict[str, Any]) -> bool:
    return any(
        p["records"] or p["error_code"]
        for t in response["responses"]
        if t["topic"] == LOG_TOPIC
        for p in t["partitions"]
    )


def _fetch_response(ctx: GatewayContext, v: int, body: dict[str, Any]) -> dict[str, Any]:
    log_topic = ctx.log_topic
    room = int(body.get("max_bytes", 0x7FFFFFFF))  # v0-v2 have no response limit
    # Kafka's minOneMessage, until a partition returned data; v0-v2 limits are hard ones.
    min_one = v >= 3
    magic = fetch_magic(v)

    def log_partition(p: dict[str, Any]) -> dict[str, Any]:
        nonlocal room, min_one
        assert log_topic is not None
        limit = min(int(p.get("partition_max_bytes", room)), room)
        answer = log_topic.fetch_partition(p["partition"], p["fetch_offset"], limit, min_one, magic)
        if answer["records"]:
            min_one = False
            room = max(0, room - len(answer["records"]))
        return answer

    return {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": t["topic"],
                "partitions": [
                    log_partition(p)
                    if log_topic is not None and t["topic"] == LOG_TOPIC
                    else {
                        "partition_index": p["partition"],
                        "error_code": _topic_error(ctx, t["topic"], p["partition"]),
                        "high_watermark": p["fetch_offset"],
                        "last_stable_offset": p["fetch_offset"],
                        "log_start_offset": 0,
                        "aborted_transactions": [],
                        "preferred_read_replica": -1,
                        "records": b"",
                    }
                    for p in t["partitions"]
                ],
            }
            for t in body["topics"]
        ],
    }


async def produce(
    ctx: GatewayContext, v: int, body: dict[str, Any], *_: str
) -> dict[str, Any] | None:
    if body.get("acks") == 0:
        return None  # Kafka sends no response to acks=0
    return {
        "throttle_time": 0,
        "responses": [
            {
                "name": t["name"],
                "partition_responses": [
                    {
                        "index": p["index"],
                        "error_code": POLICY_VIOLATION,
                        "base_offset": -1,
                        "log_append_time": -1,
                        "log_start_offset": -1,
                        "record_errors": [],
                        "error_message": "this gateway is a group coordinator only: it stores "
                        "no records",
                    }
                    for p in t["partition_data"]
                ],
            }
            for t in body["topic_data"]
        ],
    }


def _as_uuid(value: Any) -> uuid.UUID | None:
    if value is None or isinstance(value, uuid.UUID):
        return value
    return uuid.UUID(str(value))


def _partition_count(ctx: GatewayContext, topic: str) -> int | None:
    if topic == LOG_TOPIC and ctx.log_topic is not None:
        return ctx.log_topic.partitions
    return ctx.topics.get(topic)


def _topic_error(ctx: GatewayContext, topic: str, partition: int) -> int:
    count = _partition_count(ctx, topic)
    return 0 if count is not None and 0 <= partition < count else UNKNOWN_TOPIC_OR_PARTITION


# --- the coordinator's APIs -----------------------------------------------------------------


async def find_coordinator(
    ctx: GatewayContext, v: int, body: dict[str, Any], *_: str
) -> dict[str, Any]:
    keys = body["coordinator_keys"] if v >= 4 else [body["key"]]
    key_type = body.get("key_type", 0)
    answers = []
    for key in keys:
        if ctx.coordinator is not None and key_type == TRANSACTION_KEY:
            answers.append(_transactions_refused())
            continue
        request = _base(ctx, "find_coordinator", key, v)
        request["key_type"] = key_type
        answer = await ctx.submit(request)
        if ctx.coordinator is not None and answer["error_code"] == 0:
            node_id, host, port = await ctx.coordinator()
            answer = {**answer, "node_id": node_id, "host": host, "port": port}
        answers.append(answer)
    if v >= 4:
        return {
            "throttle_time": 0,
            "coordinators": [
                {
                    "key": key,
                    "node_id": a["node_id"],
                    "host": a["host"],
                    "port": a["port"],
                    "error_code": a["error_code"],
                    "error_message": a.get("error_message"),
                }
                for key, a in zip(keys, answers, strict=True)
            ],
        }
    a = answers[0]
    return {
        "throttle_time": 0,
        "error_code": a["error_code"],
        "error_message": a.get("error_message"),
        "node_id": a["node_id"],
        "host": a["host"],
        "port": a["port"],
    }


def _transactions_refused() -> dict[str, Any]:
    """Upstream mode: a transaction's coordinator is not looked up through the gateway (its
    TxnOffsetCommit would land in the upstream's log); Kafka's fatal error for producers."""
    return {
        "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        "error_message": TRANSACTIONS_REFUSED,
        "node_id": -1,
        "host": "",
        "port": -1,
    }


async def join_group(
    ctx: GatewayContext, v: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    request = _base(ctx, "join_group", body["group_id"], v)
    request.update(
        member_id=body["member_id"],
        group_instance_id=body.get("group_instance_id"),
        client_id=client_id,
        client_host=client_host,
        session_timeout_ms=body["session_timeout"],
        rebalance_timeout_ms=body.get("rebalance_timeout") if v >= 1 else None,
        protocol_type=body["protocol_type"],
        protocols=[{"name": p["name"], "metadata": p["metadata"]} for p in body["protocols"]],
        reason=body.get("reason"),
    )
    a = await ctx.submit(request)
    return {
        "throttle_time": 0,
        "error_code": a["error_code"],
        "generation_id": a["generation_id"],
        "protocol_type": a["protocol_type"],
        "protocol_name": a["protocol_name"] if v >= 7 else a["protocol_name"] or "",
        "leader": a["leader"],
        "skip_assignment": a["skip_assignment"],
        "member_id": a["member_id"],
        "members": [
            {
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "metadata": m["metadata"],
            }
            for m in a["members"]
        ],
    }


async def sync_group(ctx: GatewayContext, v: int, body: dict[str, Any], *_: str) -> dict[str, Any]:
    request = _base(ctx, "sync_group", body["group_id"], v)
    request.update(
        member_id=body["member_id"],
        group_instance_id=body.get("group_instance_id"),
        generation_id=body["generation_id"],
        protocol_type=body.get("protocol_type"),
        protocol_name=body.get("protocol_name"),
        assignments=[
            {"member_id": x["member_id"], "assignment": x["assignment"]}
            for x in body["assignments"]
        ],
    )
    a = await ctx.submit(request)
    return {
        "throttle_time": 0,
        "error_code": a["error_code"],
        "protocol_type": a.get("protocol_type"),
        "protocol_name": a.get("protocol_name"),
        "assignment": a["assignment"] or b"",
    }


async def heartbeat(ctx: GatewayContext, v: int, body: dict[str, Any], *_: str) -> dict[str, Any]:
    return heartbeat_answer(await ctx.submit(heartbeat_request(ctx, v, body)))


def heartbeat_request(ctx: GatewayContext, v: int, body: dict[str, Any]) -> dict[str, Any]:
    """The request dict of a Heartbeat (also built by the gateway's heartbeat path,
    :meth:`coordinator.gateway.server.Gateway.heartbeat_now`)."""
    return {
        "api": "heartbeat",
        "request_id": ctx.request_id(),
        "group_id": body["group_id"],
        "api_version": v,
        "member_id": body["member_id"],
        "group_instance_id": body.get("group_instance_id"),
        "generation_id": body["generation_id"],
    }


def heartbeat_answer(a: dict[str, Any]) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": a["error_code"]}


async def leave_group(ctx: GatewayContext, v: int, body: dict[str, Any], *_: str) -> dict[str, Any]:
    request = _base(ctx, "leave_group", body["group_id"], v)
    if v >= 3:
        request["members"] = [
            {
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "reason": m.get("reason"),
            }
            for m in body["members"]
        ]
    else:
        request["member_id"] = body["member_id"]
    a = await ctx.submit(request)
    return {
        "throttle_time": 0,
        "error_code": a["error_code"],
        "members": [
            {
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "error_code": m["error_code"],
            }
            for m in a.get("members") or []
        ],
    }


def _by_topic(
    partitions: list[dict[str, Any]], row: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for p in partitions:
        topics.setdefault(p["topic"], []).append(row(p))
    return [{"name": name, "partitions": rows} for name, rows in topics.items()]


async def offset_commit(
    ctx: GatewayContext, v: int, body: dict[str, Any], *_: str
) -> dict[str, Any]:
    request = _base(ctx, "offset_commit", body["group_id"], v)
    generation = body.get("generation_id_or_member_epoch", body.get("generation_id", -1))
    request.update(
        member_id=body.get("member_id", ""),
        group_instance_id=body.get("group_instance_id"),
        generation_id=generation,
        retention_time_ms=body.get("retention_time", -1) if 2 <= v <= 4 else -1,
        offsets=[
            {
                "topic": t["name"],
                "partition": p["partition_index"],
                "offset": p["committed_offset"],
                "leader_epoch": p.get("committed_leader_epoch", -1),
                "metadata": p.get("committed_metadata"),
                "commit_timestamp_ms": p.get("commit_timestamp", -1),
            }
            for t in body["topics"]
            for p in t["partitions"]
        ],
    )
    a = await ctx.submit(request)
    return {
        "throttle_time": 0,
        "topics": _by_topic(
            a["partitions"],
            lambda p: {"partition_index": p["partition"], "error_code": p["error_code"]},
        ),
    }


def _fetched(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "partition_index": p["partition"],
        "committed_offset": p["offset"],
        "committed_leader_epoch": p.get("leader_epoch", -1),
        "metadata": p.get("metadata") if p.get("metadata") is not None else "",
        "error_code": p["error_code"],
    }


async def _offset_fetch_one(
    ctx: GatewayContext,
    v: int,
    group_id: str,
    topics: list[dict[str, Any]] | None,
    stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> dict[str, Any]:
    request = _base(ctx, "offset_fetch", group_id, v)
    request["partitions"] = (
        None
        if topics is None
        else [{"topic": t["name"], "partition": i} for t in topics for i in t["partition_indexes"]]
    )
    request["require_stable"] = stable
    request["member_id"], request["member_epoch"] = member  # v9: a consumer group's member
    a = await ctx.submit(request)
    return {
        "group_id": group_id,
        "error_code": a["error_code"],
        "topics": _by_topic(a.get("partitions") or [], _fetched),
    }


async def offset_fetch(
    ctx: GatewayContext, v: int, body: dict[str, Any], *_: str
) -> dict[str, Any]:
    stable = bool(body.get("require_stable", False))
    if v >= 8:
        groups = [
            await _offset_fetch_one(
                ctx,
                v,
                g["group_id"],
                g.get("topics"),
                stable,
                (g.get("member_id"), g.get("member_epoch", -1)),
            )
            for g in body["groups"]
        ]
        return {"throttle_time": 0, "groups": groups}
    one = await _offset_fetch_one(ctx, v, body["group_id"], body.get("topics"), stable)
    return {"throttle_time": 0, "topics": one["topics"], "error_code": one["error_code"]}


async def offset_delete(
    ctx: GatewayContext, v: int, body: dict[str, Any], *_: str
) -> dict[str, Any]:
    request = _base(ctx, "offset_delete", body["group_id"], v)
    request["partitions"] = [
        {"topic": t["name"], "partition": p["partition_index"]}
        for t in body["topics"]
        for p in t["partitions"]
    ]
    a = await ctx.submit(request)
    return {
        "error_code": a["error_code"],
        "throttle_time": 0,
        "topics": _by_topic(
            a.get("partitions") or [],
            lambda p: {"partition_index": p["partition"], "error_code": p["error_code"]},
        ),
    }


async def describe_groups(
    ctx: GatewayContext, v: int, body: dict[str, Any], *_: str
) -> dict[str, Any]:
    operations = GROUP_OPERATIONS if body.get("include_authorized_operations") else INT32_MIN
    groups = []
    for group_id in body["groups"]:
        a = await ctx.submit(_base(ctx, "describe_groups", group_id, v))
        groups.append(
            {
                "error_code": a["error_code"],
                "group_id": group_id,
                "group_state": a.get("group_state") or "",
                "protocol_type": a.get("protocol_type") or "",
                "protocol_data": a.get("protocol_data") or "",
                "members": [
                    {
                        "member_id": m["member_id"],
                        "group_instance_id": m.get("group_instance_id"),
                        "client_id": m["client_id"],
                        "client_host": m["client_host"],
                        "member_metadata": m["member_metadata"],
                        "member_assignment": m["member_assignment"],
                    }
                    for m in a.get("members") or []
                ],
                "authorized_operations": operations,
            }
        )
    return {"throttle_time": 0, "groups": groups}


async def list_groups(ctx: GatewayContext, v: int, body: dict[str, Any], *_: str) -> dict[str, Any]:
    request = _base(ctx, "list_groups", "", v)
    request["states_filter"] = body.get("states_filter") if v >= 4 else None
    request["types_filter"] = body.get("types_filter") if v >= 5 else None
    a = await ctx.submit(request)
    return {"throttle_time": 0, "error_code": a["error_code"], "groups": a.get("groups") or []}


async def delete_groups(
    ctx: GatewayContext, v: int, body: dict[str, Any], *_: str
) -> dict[str, Any]:
    results = []
    for group_id in body["groups_names"]:
        a = await ctx.submit(_base(ctx, "delete_groups", group_id, v))
        results.append({"group_id": group_id, "error_code": a["error_code"]})
    return {"throttle_time": 0, "results": results}


# --- consumer groups (KIP-848) -----------------------------------------------------------------


def _topic_partitions(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engine's ``[{topic_id (Kafka's string), partitions}]`` as kio's (uuid)."""
    return [
        {"topic_id": uuid.UUID(bytes=uuid_to_bytes(e["topic_id"])), "partitions": e["partitions"]}
        for e in entries
    ]


async def consumer_group_heartbeat(
    ctx: GatewayContext, v: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    request = _base(ctx, "consumer_group_heartbeat", body["group_id"], v)
    owned = body.get("topic_partitions")
    request.update(
        member_id=body["member_id"],
        member_epoch=body["member_epoch"],
        instance_id=body.get("instance_id"),
        rack_id=body.get("rack_id"),
        rebalance_timeout_ms=body.get("rebalance_timeout", -1),
        subscribed_topic_names=body.get("subscribed_topic_names"),
        subscribed_topic_regex=body.get("subscribed_topic_regex"),
        server_assignor=body.get("server_assignor"),
        topic_partitions=None
        if owned is None
        else [
            {
                "topic_id": uuid_from_bytes(uuid.UUID(str(t["topic_id"])).bytes),
                "partitions": t["partitions"],
            }
            for t in owned
        ],
        client_id=client_id,
        client_host=client_host,
    )
    a = await ctx.submit(request)
    assignment = a.get("assignment")
    return {
        "throttle_time": 0,
        "error_code": a["error_code"],
        "error_message": a.get("error_message"),
        "member_id": a.get("member_id"),
        "member_epoch": a.get("member_epoch", 0),
        "heartbeat_interval": a.get("heartbeat_interval_ms", 0),
        "assignment": None
        if assignment is None
        else {"topic_partitions": _topic_partitions(assignment["topic_partitions"])},
    }


def _described_assignment(assignment: dict[str, Any] | None) -> dict[str, Any]:
    entries = (assignment or {}).get("topic_partitions") or []
    return {
        "topic_partitions": [
            {
                "topic_id": uuid.UUID(bytes=uuid_to_bytes(e["topic_id"])),
                "topic_name": e.get("topic_name", ""),
                "partitions": e["partitions"],
            }
            for e in entries
        ]
    }


async def consumer_group_describe(
    ctx: GatewayContext, v: int, body: dict[str, Any], *_: str
) -> dict[str, Any]:
    operations = GROUP_OPERATIONS if body.get("include_authorized_operations") else INT32_MIN
    groups = []
    for group_id in body["group_ids"]:
        request = _base(ctx, "consumer_group_describe", group_id, v)
        a = await ctx.submit(request)
        groups.append(
            {
                "error_code": a["error_code"],
                "error_message": a.get("error_message"),
                "group_id": group_id,
                "group_state": a.get("group_state") or "",
                "group_epoch": a.get("group_epoch", 0),
                "assignment_epoch": a.get("assignment_epoch", 0),
                "assignor_name": a.get("assignor_name") or "",
                "members": [
                    {
                        "member_id": m["member_id"],
                        "instance_id": m.get("instance_id"),
                        "rack_id": m.get("rack_id"),
                        "member_epoch": m["member_epoch"],
                        "client_id": m["client_id"],
                        "client_host": m["client_host"],
                        "subscribed_topic_names": m.get("subscribed_topic_names") or [],
                        "subscribed_topic_regex": m.get("subscribed_topic_regex"),
                        "assignment": _described_assignment(m.get("assignment")),
                        "target_assignment": _described_assignment(m.get("target_assignment")),
                        "member_type": m.get("member_type", 1),
                    }
                    for m in a.get("members") or []
                ],
                "authorized_operations": operations,
            }
        )
    return {"throttle_time": 0, "groups": groups}


#: The APIs whose handler hands the back end one request dict and awaits nothing else (enforce's
#: checks included): a pipelining back end may be handed the requests read behind them before
#: they are answered (:mod:`coordinator.gateway.connection`). Not DescribeGroups, DeleteGroups,
#: ConsumerGroupDescribe (a request dict per group, one after the other), nor OffsetFetch v8+ with
#: several groups (:func:`submits_once`).
SINGLE_SUBMIT = frozenset(
    {
        codec.HEARTBEAT,
        codec.OFFSET_COMMIT,
        codec.OFFSET_FETCH,
        codec.JOIN_GROUP,
        codec.SYNC_GROUP,
        codec.LEAVE_GROUP,
        codec.CONSUMER_GROUP_HEARTBEAT,
        codec.LIST_GROUPS,
        codec.OFFSET_DELETE,
    }
)


def submits_once(req: DecodedRequest) -> bool:
    """Whether answering ``req`` hands the back end one request dict at most (SINGLE_SUBMIT)."""
    if req.api_key not in SINGLE_SUBMIT or req.body is None:
        return False
    if req.api_key == codec.OFFSET_FETCH and req.api_version >= 8:
        return len(codec.plain(req.body)["groups"]) == 1
    return True


Handler = Callable[..., Awaitable[dict[str, Any] | None]]

HANDLERS: dict[int, Handler] = {
    codec.PRODUCE: produce,
    codec.FETCH: fetch,
    codec.LIST_OFFSETS: list_offsets,
    codec.METADATA: metadata,
    codec.OFFSET_COMMIT: offset_commit,
    codec.OFFSET_FETCH: offset_fetch,
    codec.FIND_COORDINATOR: find_coordinator,
    codec.JOIN_GROUP: join_group,
    codec.HEARTBEAT: heartbeat,
    codec.LEAVE_GROUP: leave_group,
    codec.SYNC_GROUP: sync_group,
    codec.DESCRIBE_GROUPS: describe_groups,
    codec.LIST_GROUPS: list_groups,
    codec.API_VERSIONS: api_versions,
    codec.DELETE_GROUPS: delete_groups,
    codec.OFFSET_DELETE: offset_delete,
    codec.CONSUMER_GROUP_HEARTBEAT: consumer_group_heartbeat,
    codec.CONSUMER_GROUP_DESCRIBE: consumer_group_describe,
}
