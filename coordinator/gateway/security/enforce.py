"""Where each API is authorized, as Kafka's ``KafkaApis`` does it, around the handlers of
:mod:`coordinator.gateway.apis` (which know nothing of principals).

Per API (the group's operation first; a partial answer where Kafka gives one):

- JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group, else GROUP_AUTHORIZATION_FAILED.
- OffsetCommit: READ on the group (else every partition GROUP_AUTHORIZATION_FAILED), READ on
  each topic (else its partitions TOPIC_AUTHORIZATION_FAILED; the others are committed).
- OffsetFetch: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED for it); asked for
  topics without DESCRIBE answer TOPIC_AUTHORIZATION_FAILED per partition (offset -1); "all
  offsets" leaves them out.
- OffsetDelete: DELETE on the group, READ on each topic (partitions TOPIC_AUTHORIZATION_FAILED).
- DescribeGroups: DESCRIBE per group; ``authorized_operations`` from the ACLs.
- ListGroups: every group with DESCRIBE on the cluster, else the groups with DESCRIBE.
- DeleteGroups: DELETE per group.
- FindCoordinator: DESCRIBE on the group (on the transactional id for a transaction).
- ConsumerGroupHeartbeat: READ on the group, else GROUP_AUTHORIZATION_FAILED.
- ConsumerGroupDescribe: DESCRIBE per group (else GROUP_AUTHORIZATION_FAILED for it);
  ``authorized_operations`` from the ACLs.
- Metadata: only topics with DESCRIBE: left out of "all topics", TOPIC_AUTHORIZATION_FAILED when
  named.
- Fetch: READ per topic; ListOffsets: DESCRIBE per topic; Produce: WRITE per topic
  (TOPIC_AUTHORIZATION_FAILED per partition).
- The ACL and SCRAM APIs: :mod:`coordinator.gateway.security.admin`.

Without ``authorizer.class.name`` everything is allowed, as in Kafka, and requests go straight
to the handlers.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from coordinator.gateway import apis, codec
from coordinator.gateway.codec import DecodedRequest
from coordinator.gateway.security import admin
from coordinator.gateway.security.session import Session
from coordinator.gateway.upstream import error_answer
from coordinator.security import errors
from coordinator.security.acl import CLUSTER_NAME, Operation, ResourceType

GROUP, TOPIC, CLUSTER = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
READ, WRITE, DESCRIBE, DELETE = (
    Operation.READ,
    Operation.WRITE,
    Operation.DESCRIBE,
    Operation.DELETE,
)
GROUP_DENIED = errors.GROUP_AUTHORIZATION_FAILED
TOPIC_DENIED = errors.TOPIC_AUTHORIZATION_FAILED
TOPIC_DENIED_MESSAGE = errors.MESSAGES[TOPIC_DENIED]


async def dispatch(
    ctx: apis.GatewayContext, req: DecodedRequest, client_host: str, session: Session
) -> dict[str, Any] | None:
    """The answer to an authenticated client's request (None: no answer, acks=0)."""
    own = admin.HANDLERS.get(req.api_key)
    if own is not None:
        return await own(session, req.api_version, codec.plain(req.body))
    check = CHECKS.get(req.api_key)
    if check is None or not session.security.enforcing or req.body is None:
        answer = await apis.dispatch(ctx, req, client_host)
    else:
        body = codec.plain(req.body)
        handler = apis.HANDLERS[req.api_key]

        async def call(changed: dict[str, Any]) -> Any:
            return await handler(ctx, req.api_version, changed, req.client_id or "", client_host)

        answer = await check(session, req.api_version, body, call)
    if session.advertised is not None and answer is not None:
        answer = advertise(ctx, req.api_key, answer, session.advertised)
    return answer


def advertise(
    ctx: apis.GatewayContext, api_key: int, answer: dict[str, Any], address: tuple[str, int]
) -> dict[str, Any]:
    """Metadata and FindCoordinator as seen from a listener other than the main one: the
    gateway's node at that listener's address, as Kafka advertises each listener's own."""
    host, port = address

    def moved(node: dict[str, Any], key: str = "node_id") -> dict[str, Any]:
        if node.get(key) == ctx.node_id and node.get("port", -1) != -1:
            return {**node, "host": host, "port": port}
        return node

    if api_key == codec.METADATA:
        return {**answer, "brokers": [moved(b) for b in answer["brokers"]]}
    if api_key == codec.FIND_COORDINATOR:
        if "coordinators" in answer:
            return {**answer, "coordinators": [moved(c) for c in answer["coordinators"]]}
        return moved(answer)
    return answer


Call = Callable[[dict[str, Any]], Awaitable[Any]]


def _topics_split(
    session: Session, operation: Operation, topics: list[dict[str, Any]], key: str = "name"
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    allowed: list[dict[str, Any]] = []
    denied: list[dict[str, Any]] = []
    for t in topics:
        (allowed if session.authorize(operation, TOPIC, t[key]) else denied).append(t)
    return allowed, denied


# --- the group APIs -------------------------------------------------------------------------


async def join_group(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    if session.authorize(READ, GROUP, body["group_id"]):
        return await call(body)
    return {
        "throttle_time": 0,
        "error_code": GROUP_DENIED,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None if v >= 7 else "",
        "leader": "",
        "skip_assignment": False,
        "member_id": "",
        "members": [],
    }


async def sync_group(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    if session.authorize(READ, GROUP, body["group_id"]):
        return await call(body)
    return {
        "throttle_time": 0,
        "error_code": GROUP_DENIED,
        "protocol_type": None,
        "protocol_name": None,
        "assignment": b"",
    }


async def heartbeat(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    if session.authorize(READ, GROUP, body["group_id"]):
        return await call(body)
    return {"throttle_time": 0, "error_code": GROUP_DENIED}


async def leave_group(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    if session.authorize(READ, GROUP, body["group_id"]):
        return await call(body)
    return {"throttle_time": 0, "error_code": GROUP_DENIED, "members": []}


def _partition_errors(topics: list[dict[str, Any]], error: int) -> list[dict[str, Any]]:
    return [
        {
            "name": t["name"],
            "partitions": [
                {"partition_index": p["partition_index"], "error_code": error}
                for p in t["partitions"]
            ],
        }
        for t in topics
    ]


async def offset_commit(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    if not session.authorize(READ, GROUP, body["group_id"]):
        return {"throttle_time": 0, "topics": _partition_errors(body["topics"], GROUP_DENIED)}
    allowed, denied = _topics_split(session, READ, body["topics"])
    answer: dict[str, Any] = {"throttle_time": 0, "topics": []}
    if allowed:
        answer = await call({**body, "topics": allowed})
    return {**answer, "topics": answer["topics"] + _partition_errors(denied, TOPIC_DENIED)}


async def offset_delete(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    if not session.authorize(DELETE, GROUP, body["group_id"]):
        return {"throttle_time": 0, "error_code": GROUP_DENIED, "topics": []}
    allowed, denied = _topics_split(session, READ, body["topics"])
    answer: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "topics": []}
    if allowed:
        answer = await call({**body, "topics": allowed})
    return {**answer, "topics": answer["topics"] + _partition_errors(denied, TOPIC_DENIED)}


async def offset_fetch(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    groups = (
        body["groups"] if v >= 8 else [{"group_id": body["group_id"], "topics": body.get("topics")}]
    )
    answers = []
    for group in groups:
        answers.append(await _offset_fetch_group(session, v, body, group, call))
    if v >= 8:
        return {"throttle_time": 0, "groups": answers}
    one = answers[0]
    return {"throttle_time": 0, "topics": one["topics"], "error_code": one["error_code"]}


async def _offset_fetch_group(
    session: Session, v: int, body: dict[str, Any], group: dict[str, Any], call: Call
) -> dict[str, Any]:
    group_id = group["group_id"]
    if not session.authorize(DESCRIBE, GROUP, group_id):
        return {"group_id": group_id, "error_code": GROUP_DENIED, "topics": []}
    topics = group.get("topics")
    denied: list[dict[str, Any]] = []
    if topics is not None:
        topics, denied = _topics_split(session, DESCRIBE, topics)
    single = {**group, "topics": topics}
    changed = {**body, "groups": [single]} if v >= 8 else {**body, **single}
    answer = await call(changed)
    one = answer["groups"][0] if v >= 8 else {**answer, "group_id": group_id}
    if one["error_code"]:
        return {"group_id": group_id, "error_code": one["error_code"], "topics": one["topics"]}
    shown = [t for t in one["topics"] if session.authorize(DESCRIBE, TOPIC, t["name"])]
    shown += [
        {
            "name": t["name"],
            "partitions": [
                {
                    "partition_index": i,
                    "committed_offset": -1,
                    "committed_leader_epoch": -1,
                    "metadata": "",
                    "error_code": TOPIC_DENIED,
                }
                for i in t["partition_indexes"]
            ],
        }
        for t in denied
    ]
    return {"group_id": group_id, "error_code": 0, "topics": shown}


async def _describe(
    session: Session,
    body: dict[str, Any],
    call: Call,
    ids_field: str,
    denied: dict[str, Any],
) -> Any:
    """DescribeGroups and ConsumerGroupDescribe: the groups the principal may DESCRIBE asked of
    the back end, the rest answered ``denied`` (with their group id), in the order asked."""
    allowed = [g for g in body[ids_field] if session.authorize(DESCRIBE, GROUP, g)]
    described = {}
    if allowed:
        answer = await call({**body, ids_field: allowed})
        described = {g["group_id"]: g for g in answer["groups"]}
    groups = []
    for group_id in body[ids_field]:
        group = described.get(group_id)
        if group is None:
            groups.append({**denied, "group_id": group_id})
            continue
        if body.get("include_authorized_operations") and group["error_code"] == 0:
            group = {
                **group,
                "authorized_operations": session.authorized_operations(GROUP, group_id),
            }
        groups.append(group)
    return {"throttle_time": 0, "groups": groups}


async def describe_groups(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    denied = {
        "error_code": GROUP_DENIED,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": apis.INT32_MIN,
    }
    return await _describe(session, body, call, "groups", denied)


async def list_groups(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    answer = await call(body)
    if session.authorize(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return answer
    groups = [g for g in answer["groups"] if session.authorize(DESCRIBE, GROUP, g["group_id"])]
    return {**answer, "groups": groups}


async def delete_groups(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    names = list(dict.fromkeys(body["groups_names"]))
    allowed = [g for g in names if session.authorize(DELETE, GROUP, g)]
    results = []
    if allowed:
        results = (await call({**body, "groups_names": allowed}))["results"]
    results += [{"group_id": g, "error_code": GROUP_DENIED} for g in names if g not in set(allowed)]
    return {"throttle_time": 0, "results": results}


async def find_coordinator(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    keys = body["coordinator_keys"] if v >= 4 else [body["key"]]
    key_type = body.get("key_type", 0)
    if key_type == 1:
        resource, error = TRANSACTIONAL_ID, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        resource, error = GROUP, GROUP_DENIED
    allowed = [k for k in keys if session.authorize(DESCRIBE, resource, k)]
    if v < 4:
        if allowed:
            return await call(body)
        return {
            "throttle_time": 0,
            "error_code": error,
            "error_message": errors.MESSAGES.get(error),
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    found = {}
    if allowed:
        found = {
            c["key"]: c for c in (await call({**body, "coordinator_keys": allowed}))["coordinators"]
        }
    coordinators = [
        found.get(k)
        or {
            "key": k,
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_code": error,
            "error_message": None,
        }
        for k in keys
    ]
    return {"throttle_time": 0, "coordinators": coordinators}


# --- the broker APIs ------------------------------------------------------------------------


def denied_topic_metadata(name: str) -> dict[str, Any]:
    """A named topic the principal may not DESCRIBE: its existence is not disclosed."""
    return {
        "error_code": TOPIC_DENIED,
        "name": name,
        "topic_id": uuid.UUID(int=0),
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": apis.INT32_MIN,
    }


def filter_metadata(session: Session, v: int, body: dict[str, Any], answer: dict[str, Any]) -> Any:
    """A Metadata answer as the principal may see it (also for an upstream's answer)."""
    if not session.security.enforcing:
        return answer
    everything = body.get("topics") is None or (v == 0 and not body.get("topics"))
    topics = []
    for t in answer["topics"]:
        if t.get("name") is not None and session.authorize(DESCRIBE, TOPIC, t["name"]):
            if body.get("include_topic_authorized_operations"):
                t = {
                    **t,
                    "topic_authorized_operations": session.authorized_operations(TOPIC, t["name"]),
                }
            topics.append(t)
        elif not everything:
            topics.append(denied_topic_metadata(t.get("name") or ""))
    answer = {**answer, "topics": topics}
    if body.get("include_cluster_authorized_operations") and session.authorize(
        DESCRIBE, CLUSTER, CLUSTER_NAME
    ):
        answer["cluster_authorized_operations"] = session.authorized_operations(
            CLUSTER, CLUSTER_NAME
        )
    return answer


async def metadata(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    return filter_metadata(session, v, body, await call(body))


def _topic_name(t: dict[str, Any]) -> str:
    return str(t.get("name") or t.get("topic") or "")


async def _per_topic(
    session: Session,
    api_key: int,
    operation: Operation,
    body: dict[str, Any],
    list_key: str,
    answer_key: str,
    call: Call,
) -> Any:
    allowed: list[dict[str, Any]] = []
    denied: list[dict[str, Any]] = []
    for t in body[list_key]:
        (allowed if session.authorize(operation, TOPIC, _topic_name(t)) else denied).append(t)
    if not denied:
        return await call(body)
    refused = error_answer(api_key, {**body, list_key: denied}, TOPIC_DENIED, TOPIC_DENIED_MESSAGE)
    answer = await call({**body, list_key: allowed})
    if answer is None:  # acks=0
        return None
    return {**answer, answer_key: answer[answer_key] + refused[answer_key]}


async def produce(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    return await _per_topic(session, codec.PRODUCE, WRITE, body, "topic_data", "responses", call)


async def fetch(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    return await _per_topic(session, codec.FETCH, READ, body, "topics", "responses", call)


async def list_offsets(session: Session, v: int, body: dict[str, Any], call: Call) -> Any:
    return await _per_topic(session, codec.LIST_OFFSETS, DESCRIBE, body, "topics", "topics", call)


async def consumer_group_heartbeat(
    session: Session, v: int, body: dict[str, Any], call: Call
) -> Any:
    if session.authorize(READ, GROUP, body["group_id"]):
        return await call(body)
    return {
        "throttle_time": 0,
        "error_code": GROUP_DENIED,
        "error_message": errors.MESSAGES[GROUP_DENIED],
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval": 0,
        "assignment": None,
    }


async def consumer_group_describe(
    session: Session, v: int, body: dict[str, Any], call: Call
) -> Any:
    denied = {
        "error_code": GROUP_DENIED,
        "error_message": errors.MESSAGES[GROUP_DENIED],
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": [],
        "authorized_operations": apis.INT32_MIN,
    }
    return await _describe(session, body, call, "group_ids", denied)


Check = Callable[[Session, int, dict[str, Any], Call], Awaitable[Any]]

CHECKS: dict[int, Check] = {
    codec.JOIN_GROUP: join_group,
    codec.SYNC_GROUP: sync_group,
    codec.HEARTBEAT: heartbeat,
    codec.LEAVE_GROUP: leave_group,
    codec.OFFSET_COMMIT: offset_commit,
    codec.OFFSET_FETCH: offset_fetch,
    codec.OFFSET_DELETE: offset_delete,
    codec.DESCRIBE_GROUPS: describe_groups,
    codec.LIST_GROUPS: list_groups,
    codec.DELETE_GROUPS: delete_groups,
    codec.FIND_COORDINATOR: find_coordinator,
    codec.METADATA: metadata,
    codec.PRODUCE: produce,
    codec.FETCH: fetch,
    codec.LIST_OFFSETS: list_offsets,
    codec.CONSUMER_GROUP_HEARTBEAT: consumer_group_heartbeat,
    codec.CONSUMER_GROUP_DESCRIBE: consumer_group_describe,
}
