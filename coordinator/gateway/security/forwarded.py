"""Upstream mode: what a client may send on to the upstream, checked as the upstream's own
``KafkaApis`` would check it, before a byte reaches it.

Per forwarded API (TOPIC_AUTHORIZATION_FAILED for a topic, CLUSTER_AUTHORIZATION_FAILED for the
cluster, per element where Kafka answers per element; the allowed elements are forwarded and
the answers merged):

- Produce: WRITE per topic. Fetch: READ per topic; fetch sessions are turned off (the request
  is sent as a full, sessionless fetch, ``session_id`` 0, epoch -1), so that every fetch names
  every partition and is checked whole. ListOffsets, OffsetForLeaderEpoch: DESCRIBE per topic.
- Metadata: only topics with DESCRIBE (asked-for ones without it are not sent on and answer
  TOPIC_AUTHORIZATION_FAILED; left out of "all topics"); automatic topic creation only with
  CREATE on the cluster or on each topic asked for.
- InitProducerId (idempotence): IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
- CreateTopics: CREATE on the cluster or on the topic. DeleteTopics, DeleteRecords: DELETE on
  the topic. CreatePartitions: ALTER on the topic. DescribeConfigs: DESCRIBE_CONFIGS,
  AlterConfigs and IncrementalAlterConfigs: ALTER_CONFIGS, on the topic (topic resources), the
  cluster (broker and broker-logger resources) or the group (group resources).

:func:`guard` returns the request as it may be forwarded (or None when nothing of it may) and
the answer for the refused part; :func:`merge` puts the two answers together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.gateway import codec
from coordinator.gateway.security.enforce import denied_topic_metadata
from coordinator.gateway.security.session import Session
from coordinator.security import errors
from coordinator.security.acl import CLUSTER_NAME, Operation, ResourceType

# Kafka's API keys of the forwarded APIs (as coordinator.gateway.upstream names them).
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 19, 20, 21, 22
OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS, ALTER_CONFIGS = 23, 32, 33
CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 37, 44

#: ConfigResource types: the ACL resource they are checked on, and the error when denied.
CONFIG_RESOURCES: dict[int, tuple[ResourceType, int]] = {
    2: (ResourceType.TOPIC, errors.TOPIC_AUTHORIZATION_FAILED),
    4: (ResourceType.CLUSTER, errors.CLUSTER_AUTHORIZATION_FAILED),
    8: (ResourceType.CLUSTER, errors.CLUSTER_AUTHORIZATION_FAILED),
    16: (ResourceType.CLUSTER, errors.CLUSTER_AUTHORIZATION_FAILED),
    32: (ResourceType.GROUP, errors.GROUP_AUTHORIZATION_FAILED),
}


@dataclass
class Decision:
    #: the request body to forward (the client's own bytes when unchanged); None: nothing
    forward: dict[str, Any] | None
    changed: bool
    #: the answer for the refused elements (merged into the upstream's), or None
    refused: dict[str, Any] | None
    answer_key: str = ""


def _message(code: int) -> str:
    return errors.MESSAGES.get(code, "authorization failed")


@dataclass(frozen=True)
class _Spec:
    request_key: str
    answer_key: str
    #: the error code refusing an element (0: allowed)
    check: Callable[[Session, dict[str, Any], Any], int]
    #: the answer element of a refused request element
    refuse: Callable[[dict[str, Any], int], dict[str, Any] | list[dict[str, Any]]]


def _topic_check(operation: Operation) -> Callable[[Session, dict[str, Any], Any], int]:
    def check(session: Session, element: dict[str, Any], names: Any) -> int:
        name = _name(element, names)
        if name is None:
            return errors.UNKNOWN_TOPIC_ID
        if session.authorize(operation, ResourceType.TOPIC, name):
            return 0
        return errors.TOPIC_AUTHORIZATION_FAILED

    return check


def _name(element: dict[str, Any] | str, names: Any) -> str | None:
    """A topic element's name; by its id (Fetch 13+, DeleteTopics 6+) from the upstream's
    Metadata as last seen (None: an id never seen)."""
    if isinstance(element, str):
        return element
    name = element.get("name") or element.get("topic")
    if name:
        return str(name)
    topic_id = element.get("topic_id")
    return None if topic_id is None else names.get(str(topic_id))


def _create_check(session: Session, element: dict[str, Any], names: Any) -> int:
    if session.authorize(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    if session.authorize(Operation.CREATE, ResourceType.TOPIC, element["name"]):
        return 0
    return errors.TOPIC_AUTHORIZATION_FAILED


def _config_check(operation: Operation) -> Callable[[Session, dict[str, Any], Any], int]:
    def check(session: Session, element: dict[str, Any], names: Any) -> int:
        resource, error = CONFIG_RESOURCES.get(
            int(element["resource_type"]), (ResourceType.CLUSTER, errors.INVALID_REQUEST)
        )
        name = CLUSTER_NAME if resource == ResourceType.CLUSTER else element["resource_name"]
        return 0 if session.authorize(operation, resource, name) else error

    return check


def _partitions(element: dict[str, Any], code: int, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"partition_index": p["partition_index"], "error_code": code, **extra}
        for p in element["partitions"]
    ]


SPECS: dict[int, _Spec] = {
    CREATE_TOPICS: _Spec(
        "topics",
        "topics",
        _create_check,
        lambda t, code: {
            "name": t["name"],
            "topic_id": None,
            "error_code": code,
            "error_message": _message(code),
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        },
    ),
    DELETE_RECORDS: _Spec(
        "topics",
        "topics",
        _topic_check(Operation.DELETE),
        lambda t, code: {"name": t["name"], "partitions": _partitions(t, code, low_watermark=-1)},
    ),
    CREATE_PARTITIONS: _Spec(
        "topics",
        "results",
        _topic_check(Operation.ALTER),
        lambda t, code: {"name": t["name"], "error_code": code, "error_message": _message(code)},
    ),
    DESCRIBE_CONFIGS: _Spec(
        "resources",
        "results",
        _config_check(Operation.DESCRIBE_CONFIGS),
        lambda r, code: {
            "error_code": code,
            "error_message": _message(code),
            "resource_type": r["resource_type"],
            "resource_name": r["resource_name"],
            "configs": [],
        },
    ),
    ALTER_CONFIGS: _Spec(
        "resources",
        "responses",
        _config_check(Operation.ALTER_CONFIGS),
        lambda r, code: {
            "error_code": code,
            "error_message": _message(code),
            "resource_type": r["resource_type"],
            "resource_name": r["resource_name"],
        },
    ),
}
SPECS[INCREMENTAL_ALTER_CONFIGS] = SPECS[ALTER_CONFIGS]

#: The APIs whose refused part :func:`coordinator.gateway.upstream.error_answer` builds:
#: (operation on each topic, the request's list, the answer's list).
PER_TOPIC: dict[int, tuple[Operation, str, str]] = {
    codec.PRODUCE: (Operation.WRITE, "topic_data", "responses"),
    codec.FETCH: (Operation.READ, "topics", "responses"),
    codec.LIST_OFFSETS: (Operation.DESCRIBE, "topics", "topics"),
    OFFSET_FOR_LEADER_EPOCH: (Operation.DESCRIBE, "topics", "topics"),
}


def guard(
    session: Session, api_key: int, version: int, body: dict[str, Any], names: dict[str, str]
) -> Decision:
    """What of ``body`` may be forwarded (see the module doc); ``names`` maps topic ids (as
    strings) to names."""
    from coordinator.gateway.upstream import error_answer

    if api_key == codec.METADATA:
        return _metadata(session, version, body)
    if api_key == INIT_PRODUCER_ID:
        authorizer = session.security.authorizer()
        if session.authorize(
            Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
        ) or authorizer.authorize_any(
            session.principal, session.host, Operation.WRITE, ResourceType.TOPIC
        ):
            return Decision(body, False, None)
        code = errors.CLUSTER_AUTHORIZATION_FAILED
        return Decision(None, False, error_answer(api_key, body, code, _message(code)))
    if api_key == DELETE_TOPICS:
        return _delete_topics(session, version, body, names)
    changed = False
    if api_key == codec.FETCH and (body.get("session_id") or body.get("session_epoch", -1) != -1):
        body = {**body, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": []}
        changed = True
    if api_key in PER_TOPIC:
        operation, request_key, answer_key = PER_TOPIC[api_key]
        check = _topic_check(operation)
        allowed, refused_answers = [], []
        for element in body[request_key]:
            code = check(session, element, names)
            if code:
                refused_answers.append(
                    error_answer(api_key, {**body, request_key: [element]}, code, _message(code))
                )
            else:
                allowed.append(element)
        if not refused_answers:
            return Decision(body, changed, None, answer_key)
        refused = {
            **refused_answers[0],
            answer_key: [e for a in refused_answers for e in a[answer_key]],
        }
        forward = {**body, request_key: allowed} if allowed else None
        return Decision(forward, True, refused, answer_key)
    spec = SPECS.get(api_key)
    if spec is None:
        return Decision(body, False, None)
    allowed, refused_elements = [], []
    for element in body[spec.request_key]:
        code = spec.check(session, element, names)
        if code:
            refused_element = spec.refuse(element, code)
            refused_elements.append(refused_element)
        else:
            allowed.append(element)
    if not refused_elements:
        return Decision(body, False, None, spec.answer_key)
    refused = {"throttle_time": 0, spec.answer_key: refused_elements}
    forward = {**body, spec.request_key: allowed} if allowed else None
    return Decision(forward, True, refused, spec.answer_key)


def _delete_topics(
    session: Session, version: int, body: dict[str, Any], names: dict[str, str]
) -> Decision:
    key = "topics" if body.get("topics") is not None else "topic_names"
    check = _topic_check(Operation.DELETE)
    allowed, refused = [], []
    for element in body.get(key) or []:
        code = check(session, element if isinstance(element, dict) else {"name": element}, names)
        if code:
            name = element if isinstance(element, str) else element.get("name")
            topic_id = None if isinstance(element, str) else element.get("topic_id")
            refused.append(
                {
                    "name": name,
                    "topic_id": topic_id,
                    "error_code": code,
                    "error_message": _message(code),
                }
            )
        else:
            allowed.append(element)
    if not refused:
        return Decision(body, False, None, "responses")
    forward = {**body, key: allowed} if allowed else None
    return Decision(forward, True, {"throttle_time": 0, "responses": refused}, "responses")


def _metadata(session: Session, version: int, body: dict[str, Any]) -> Decision:
    topics = body.get("topics")
    if topics is None or (version == 0 and not topics):
        forward = body
    else:
        allowed = [
            t
            for t in topics
            if t.get("name") is None
            or session.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t["name"])
        ]
        if not allowed and version == 0:  # v0's empty list means every topic
            allowed = topics
        forward = {**body, "topics": allowed}
    if forward.get("allow_auto_topic_creation") and not session.authorize(
        Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        named = [t.get("name") for t in forward.get("topics") or []]
        if not named or not all(
            n is not None and session.authorize(Operation.CREATE, ResourceType.TOPIC, n)
            for n in named
        ):
            forward = {**forward, "allow_auto_topic_creation": False}
    return Decision(forward, forward is not body, None, "topics")


def merge(decision: Decision, answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """The upstream's answer (None: it sent none) with the refused elements added."""
    if decision.refused is None:
        return answer
    if answer is None:
        return None if decision.forward is not None else decision.refused
    key = decision.answer_key
    return {**answer, key: list(answer.get(key) or []) + list(decision.refused[key])}


def named_denied_metadata(
    session: Session, version: int, body: dict[str, Any], answer: dict[str, Any]
) -> dict[str, Any]:
    """A Metadata answer with the asked-for topics that were not sent on answered
    TOPIC_AUTHORIZATION_FAILED."""
    topics = body.get("topics")
    if not topics:
        return answer
    present = {t.get("name") for t in answer["topics"]}
    extra = [
        denied_topic_metadata(t["name"])
        for t in topics
        if t.get("name") is not None
        and t["name"] not in present
        and not session.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t["name"])
    ]
    return {**answer, "topics": list(answer["topics"]) + extra}
