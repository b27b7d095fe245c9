"""Consumer groups in upstream mode: the coordinator assigns the upstream's topics, learned from
its Metadata (every topic, asked again every ``upstream.metadata.max.age.ms``), by the ids its
clients' Metadata answers give: the upstream's own (Metadata v10+, Kafka 2.8+) or, for a broker
without topic ids (noida-db), the gateway's. A partition count that grows reaches the members
as a new assignment; a deleted topic leaves their assignments and its offsets are deleted.
Against a stub broker whose topics the tests change."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.gateway import codec
from coordinator.gateway.upstream import (
    UNKNOWN_TOPIC_ID,
    Upstream,
    advertised_versions,
    gateway_topic_id,
)
from coordinator.topics import topic_id_for, uuid_from_bytes
from tests.gateway_support import REQUESTS, Running, call, until
from tests.upstream_support import STUB_NODE_ID, STUB_VERSIONS, StubBroker, upstream_gateway

#: How often the gateways here ask the stub for every topic.
MAX_AGE_MS = 100


class TopicsBroker(StubBroker):
    """A stub broker serving Metadata up to v12 with the topics of :attr:`topics` (name ->
    (topic id or None, partition count)), which a test may replace at any time; a topic asked
    for by id is found by its id (none when the broker has no ids, as noida-db answers).
    Records the topics of every Metadata request."""

    def __init__(self, topics: dict[str, tuple[uuid.UUID | None, int]]) -> None:
        self.topics = topics
        self.metadata_asked: list[list[dict[str, Any]] | None] = []
        super().__init__()

    def _answer(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        if api_key == codec.API_VERSIONS:
            table = {**STUB_VERSIONS, codec.METADATA: (1, 12), codec.FETCH: (4, 13)}
            return {
                "error_code": 0,
                "api_keys": [
                    {"api_key": k, "min_version": lo, "max_version": hi}
                    for k, (lo, hi) in sorted(table.items())
                ],
                "throttle_time": 0,
            }
        if api_key != codec.METADATA:
            return super()._answer(api_key, body)
        wanted = body.get("topics")
        self.metadata_asked.append(wanted)
        topics = dict(self.topics)
        by_id = {topic_id: name for name, (topic_id, _) in topics.items() if topic_id}
        entries = []
        for asked in [{"name": n} for n in sorted(topics)] if wanted is None else wanted:
            name = asked.get("name")
            if name is None:
                name = by_id.get(asked.get("topic_id"))
                if name is None:
                    if any(topic_id for topic_id, _ in topics.values()):
                        entries.append(_entry(None, asked.get("topic_id"), None))
                    continue
            topic_id, count = topics.get(name, (None, None))
            entries.append(_entry(name, topic_id, count))
        return {
            "throttle_time": 0,
            "brokers": [
                {"node_id": STUB_NODE_ID, "host": "127.0.0.1", "port": self.port, "rack": None}
            ],
            "cluster_id": "stub-cluster",
            "controller_id": STUB_NODE_ID,
            "topics": entries,
            "cluster_authorized_operations": -(2**31),
        }


def _entry(name: str | None, topic_id: Any, count: int | None) -> dict[str, Any]:
    unknown = 3 if name is not None else UNKNOWN_TOPIC_ID  # 3: UNKNOWN_TOPIC_OR_PARTITION
    error = unknown if count is None else 0
    return {
        "error_code": error,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": p,
                "leader_id": STUB_NODE_ID,
                "leader_epoch": 0,
                "replica_nodes": [STUB_NODE_ID],
                "isr_nodes": [STUB_NODE_ID],
                "offline_replicas": [],
            }
            for p in range(count or 0)
        ],
        "topic_authorized_operations": -(2**31),
    }


ORDERS_ID = uuid.UUID("6c3b0f2e-1a2b-4c5d-8e9f-0a1b2c3d4e5f")


@pytest.fixture(params=["upstream ids", "no ids"])
def broker(request: pytest.FixtureRequest) -> Iterator[TopicsBroker]:
    with_ids = request.param == "upstream ids"
    stub = TopicsBroker({"orders": (ORDERS_ID if with_ids else None, 3)})
    yield stub
    stub.stop()


@pytest.fixture
def fronted(broker: TopicsBroker) -> Iterator[Running]:
    running = upstream_gateway(broker.port, metadata_max_age_ms=MAX_AGE_MS)
    yield running
    running.stop()


def expected_id(broker: TopicsBroker, name: str) -> uuid.UUID:
    topic_id = broker.topics[name][0]
    return topic_id if topic_id is not None else gateway_topic_id(name)


def engine_topics(running: Running) -> list[dict[str, Any]]:
    topics: list[dict[str, Any]] = running.gateway.backend.engine.topics.as_list()
    return topics


def metadata(port: int, topics: list[dict[str, Any]] | None, version: int = 12) -> Any:
    body = {**REQUESTS[codec.METADATA], "topics": topics}
    return call(port, codec.METADATA, version, {**body, "include_cluster_authorized_operations": 0})


def heartbeat(port: int, member_id: str, epoch: int, owned: Any, **fields: Any) -> Any:
    body = {**REQUESTS[codec.CONSUMER_GROUP_HEARTBEAT], "group_id": "cg", "member_id": member_id}
    body.update(member_epoch=epoch, topic_partitions=owned, subscribed_topic_names=["orders"])
    answer = call(port, codec.CONSUMER_GROUP_HEARTBEAT, 1, {**body, **fields})
    assert answer["error_code"] == 0, answer
    return answer


def assigned(answer: Any) -> dict[uuid.UUID, list[int]]:
    assert answer["assignment"] is not None, answer
    return {
        t["topic_id"]: sorted(t["partitions"]) for t in answer["assignment"]["topic_partitions"]
    }


def test_consumer_groups_are_assigned_the_upstreams_topics_by_the_ids_clients_see(
    broker: TopicsBroker, fronted: Running
) -> None:
    """The engine knows the upstream's topics with the ids Metadata answers give clients: the
    upstream's own, or the gateway's for a broker without ids; an assignment names the same
    id, and Metadata asked for by that id (as librdkafka asks for an assignment's topics) is
    answered with the topic."""
    orders = expected_id(broker, "orders")
    assert engine_topics(fronted) == [
        {"name": "orders", "topic_id": uuid_from_bytes(orders.bytes), "partitions": 3}
    ]
    (topic,) = metadata(fronted.port, [{"name": "orders", "topic_id": None}])["topics"]
    assert (topic["name"], topic["topic_id"], len(topic["partitions"])) == ("orders", orders, 3)
    answer = heartbeat(fronted.port, "MmbrMmbrMmbrMmbrMmbr01", 0, [])
    assert answer["member_epoch"] == 1 and assigned(answer) == {orders: [0, 1, 2]}

    (by_id,) = metadata(fronted.port, [{"name": None, "topic_id": orders}])["topics"]
    assert (by_id["error_code"], by_id["name"], by_id["topic_id"]) == (0, "orders", orders)
    if broker.topics["orders"][0] is None:  # asked upstream by the name it knows
        assert broker.metadata_asked[-1] == [{"name": "orders", "topic_id": None}]
    else:  # the upstream's own id, asked as it is
        assert broker.metadata_asked[-1] == [{"name": None, "topic_id": orders}]
    nobody = uuid.UUID(int=12345)
    (unknown,) = metadata(fronted.port, [{"name": None, "topic_id": nobody}])["topics"]
    assert (unknown["error_code"], unknown["name"], unknown["topic_id"]) == (
        UNKNOWN_TOPIC_ID,
        None,
        nobody,
    )


def test_fetch_by_topic_id_is_not_advertised_when_the_ids_are_the_gateways(
    broker: TopicsBroker, fronted: Running
) -> None:
    """Fetch v13+ names topics by id alone: with the gateway's own ids the upstream would not
    know them, so clients are held below it and fetch by name."""
    versions = call(fronted.port, codec.API_VERSIONS, 3, REQUESTS[codec.API_VERSIONS])
    fetch = next(k for k in versions["api_keys"] if k["api_key"] == codec.FETCH)
    assert fetch["max_version"] == (13 if broker.topics["orders"][0] is not None else 12)


def test_a_topic_that_grows_gives_the_group_its_new_partitions(
    broker: TopicsBroker, fronted: Running
) -> None:
    orders = expected_id(broker, "orders")
    member = "MmbrMmbrMmbrMmbrMmbr01"
    first = heartbeat(fronted.port, member, 0, [])
    owned = [{"topic_id": orders, "partitions": [0, 1, 2]}]
    broker.topics = {"orders": (broker.topics["orders"][0], 5)}
    assert until(lambda: engine_topics(fronted)[0]["partitions"] == 5, 10)
    grown = heartbeat(fronted.port, member, first["member_epoch"], owned)
    assert grown["member_epoch"] > first["member_epoch"]
    assert assigned(grown) == {orders: [0, 1, 2, 3, 4]}
    assert engine_topics(fronted)[0]["topic_id"] == uuid_from_bytes(orders.bytes)  # same id


def test_a_deleted_topic_leaves_the_assignment_and_its_offsets_are_deleted(
    broker: TopicsBroker, fronted: Running
) -> None:
    orders = expected_id(broker, "orders")
    commit = {**REQUESTS[codec.OFFSET_COMMIT], "group_id": "plain"}
    commit["topics"] = [{**commit["topics"][0], "name": "orders"}]
    answer = call(fronted.port, codec.OFFSET_COMMIT, 8, commit)
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0
    member = "MmbrMmbrMmbrMmbrMmbr01"
    first = heartbeat(fronted.port, member, 0, [])
    assert assigned(first) == {orders: [0, 1, 2]}

    broker.topics = {"other": (uuid.uuid4() if broker.topics["orders"][0] else None, 1)}
    assert until(lambda: [t["name"] for t in engine_topics(fronted)] == ["other"], 10)
    owned = [{"topic_id": orders, "partitions": [0, 1, 2]}]
    revoke = heartbeat(fronted.port, member, first["member_epoch"], owned)
    assert assigned(revoke) == {}  # revoked first, the epoch kept until the member lets go
    after = heartbeat(fronted.port, member, revoke["member_epoch"], [])
    assert after["member_epoch"] > first["member_epoch"]
    fetch = {**REQUESTS[codec.OFFSET_FETCH], "group_id": "plain"}
    fetch["topics"] = [{"name": "orders", "partition_indexes": [0]}]
    fetched = call(fronted.port, codec.OFFSET_FETCH, 7, fetch)
    assert fetched["topics"][0]["partitions"][0]["committed_offset"] == -1


def test_an_answer_without_ids_never_changes_a_known_id_nor_feeds_a_topic_without_one() -> None:
    """A client's Metadata below v10 carries no ids: a topic known by the upstream's id keeps
    it, and one seen only so is left out of the coordinator's topics until the next listing
    (asked at once) gives its id; with an upstream without ids the gateway's id serves."""
    upstream = Upstream([("127.0.0.1", 1)])
    upstream.api_versions = {codec.METADATA: (0, 12)}
    fed: list[list[dict[str, Any]]] = []
    upstream.on_topics = fed.append

    def answer(**topics: tuple[Any, int]) -> dict[str, Any]:
        return {
            "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
            "topics": [_entry(name, topic_id, n) for name, (topic_id, n) in topics.items()],
        }

    learn = upstream._learn
    asyncio.run(learn(answer(orders=(ORDERS_ID, 3)), everything=True, with_ids=True))
    asyncio.run(learn(answer(orders=(None, 4), fresh=(None, 1)), everything=False, with_ids=False))
    orders = uuid_from_bytes(ORDERS_ID.bytes)
    assert fed == [
        [{"name": "orders", "topic_id": orders, "partitions": 3}],
        [{"name": "orders", "topic_id": orders, "partitions": 4}],  # "fresh" has no id yet
    ]
    assert upstream._refresh_soon.is_set()
    asyncio.run(learn(answer(orders=(ORDERS_ID, 4)), everything=True, with_ids=True))
    assert fed[-1] == [{"name": "orders", "topic_id": orders, "partitions": 4}]  # fresh deleted

    # an upstream without ids: its null ids are the gateway's, from the first answer on
    asyncio.run(learn(answer(orders=(None, 4)), everything=True, with_ids=True))
    assert not upstream.serves_topic_ids
    assert fed[-1] == [{"name": "orders", "topic_id": topic_id_for("orders"), "partitions": 4}]


def test_the_internal_topics_are_not_the_coordinators_to_assign() -> None:
    upstream = Upstream([("127.0.0.1", 1)])
    upstream.api_versions = {codec.METADATA: (0, 12)}
    internal = {**_entry("__consumer_offsets", uuid.uuid4(), 50), "is_internal": True}
    body = {"brokers": [], "topics": [internal, _entry("t", uuid.uuid4(), 1)]}
    asyncio.run(upstream._learn(body, everything=True, with_ids=True))
    assert [t["name"] for t in upstream.topic_list()] == ["t"]


def test_the_versions_naming_topics_by_id_alone_are_held_back_without_upstream_ids() -> None:
    theirs = {codec.FETCH: (4, 16), codec.PRODUCE: (3, 13), codec.METADATA: (0, 12)}
    assert advertised_versions(theirs)[codec.FETCH] == (0, 16)
    assert advertised_versions(theirs, topic_ids=False)[codec.FETCH] == (0, 12)
    assert advertised_versions(theirs)[codec.PRODUCE] == (3, 13)
    assert advertised_versions(theirs, topic_ids=False)[codec.PRODUCE] == (3, 12)


def test_a_max_age_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match=r"upstream.metadata.max.age.ms must be > 0"):
        Upstream([("127.0.0.1", 1)], metadata_max_age_ms=0)
