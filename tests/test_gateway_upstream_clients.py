"""Upstream mode with a real broker (noida-db, from its PyPI wheel) and real clients
(confluent-kafka, librdkafka's own codec): records produced through the gateway are stored by
the broker and consumed exactly once by a group the coordinator runs; the commits are ours, and
the broker, asked directly, holds none."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.gateway import codec
from coordinator.modern.model import ConsumerGroup
from coordinator.topics import topic_id_for
from tests.gateway_support import Running
from tests.upstream_support import call_on, upstream_gateway

TOPIC, PARTITIONS = "orders", 4
GROUP = "upstream-readers"
WAIT_S = 90.0  # a loaded 2-core machine


@pytest.fixture
def fronted(noida: Any) -> Iterator[Running]:
    running = upstream_gateway(noida.port)
    yield running
    running.stop()


def _until(predicate: Any, what: str, poll: Any = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:g} s: {what}")
        if poll is not None:
            poll()
        else:
            time.sleep(0.05)


class Reader:
    """A confluent-kafka consumer of the group, polled by the test's thread; with
    ``group.protocol=consumer`` (KIP-848) when ``consumer_protocol``, where the listener is told
    the partitions added and revoked, not the whole assignment."""

    def __init__(
        self,
        bootstrap: str,
        name: str,
        *,
        consumer_protocol: bool = False,
        topic: str = TOPIC,
        group: str = GROUP,
    ) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self.assigned: set[int] = set()
        self.records: list[tuple[int, int, bytes]] = []
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "log_level": 0,
        }
        if consumer_protocol:
            conf["group.protocol"] = "consumer"
        self.consumer = Consumer(conf)

        def on_assign(_: Any, partitions: Any) -> None:
            added = {tp.partition for tp in partitions}
            self.assigned = self.assigned | added if consumer_protocol else added

        def on_revoke(_: Any, partitions: Any) -> None:
            # what an application that reads each record once does: the partitions it gives
            # up are committed where it stopped, so their next owner goes on from there
            revoked = {tp.partition for tp in partitions}
            self.commit(revoked)
            self.assigned = self.assigned - revoked

        self.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)

    def poll(self) -> None:
        message = self.consumer.poll(0.05)
        if message is None:
            return
        if message.error():
            if message.error().retriable() or message.error().code() < 0:
                return  # partition EOF and transient broker states
            raise AssertionError(message.error())
        self.records.append((message.partition(), message.offset(), message.value()))

    def commit(self, partitions: set[int] | None = None) -> None:
        from confluent_kafka import TopicPartition

        wanted = self.assigned if partitions is None else partitions
        positions = self.consumer.position([TopicPartition(self.topic, p) for p in wanted])
        mine = [tp for tp in positions if tp.offset >= 0]
        if mine:
            self.consumer.commit(offsets=mine, asynchronous=False)

    def caught_up(self, ends: dict[int, int]) -> bool:
        from confluent_kafka import TopicPartition

        if not self.assigned:
            return False
        positions = self.consumer.position([TopicPartition(self.topic, p) for p in self.assigned])
        # librdkafka's position is the application's: invalid until a record is read here, as
        # for a partition its previous owner read to the end (and committed on giving it up)
        unread = [tp for tp in positions if tp.offset < 0]
        if unread:
            positions = [tp for tp in positions if tp.offset >= 0]
            positions += self.consumer.committed(unread, timeout=30)
        return all(tp.offset == ends[tp.partition] for tp in positions)

    def close(self) -> None:
        self.consumer.close()


def _produce(bootstrap: str, values: list[bytes], topic: str = TOPIC) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    failures: list[Any] = []
    for i, value in enumerate(values):
        producer.produce(
            topic,
            value=value,
            key=b"k%d" % i,
            on_delivery=lambda err, _msg: failures.append(err) if err is not None else None,
        )
    assert producer.flush(WAIT_S) == 0
    assert failures == []


def _create_topic(bootstrap: str, topic: str = TOPIC) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    [future] = admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values()
    future.result(WAIT_S)


def _end_offsets(bootstrap: str, topic: str = TOPIC) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "log_level": 0})
    try:
        return {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        probe.close()


def _read_until_caught_up(readers: list[Reader], bootstrap: str) -> None:
    """Poll both until they cover every partition between them, disjointly, and each has read
    up to the end of its partitions."""
    ends = _end_offsets(bootstrap, readers[0].topic)

    def settled() -> bool:
        cover = [p for r in readers for p in r.assigned]
        return sorted(cover) == list(range(PARTITIONS)) and all(r.caught_up(ends) for r in readers)

    _until(settled, f"both readers caught up with {ends}", lambda: [r.poll() for r in readers])


def _committed_through_the_gateway(port: int, group: str = GROUP) -> dict[int, int]:
    body = {"groups": [{"group_id": group, "topics": None}], "require_stable": False}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        answer = call_on(sock, codec.OFFSET_FETCH, 8, body, 1)
    return {
        p["partition_index"]: p["committed_offset"]
        for t in answer["groups"][0]["topics"]
        for p in t["partitions"]
    }


def test_records_through_the_gateway_consumed_once_committed_to_the_coordinator(
    noida: Any, fronted: Running
):
    bootstrap = f"127.0.0.1:{fronted.port}"
    _create_topic(bootstrap)

    # a group of two, settled before anything is produced: no rebalance moves a partition
    # while records are read
    readers = [Reader(bootstrap, f"reader-{i}") for i in range(2)]
    _until(
        lambda: (
            sorted(p for r in readers for p in r.assigned) == list(range(PARTITIONS))
            and all(r.assigned for r in readers)
        ),
        "a disjoint cover of the partitions by two readers",
        lambda: [r.poll() for r in readers],
    )
    first = [b"first-%03d" % i for i in range(200)]
    _produce(bootstrap, first)
    _read_until_caught_up(readers, bootstrap)
    read = [value for r in readers for _, _, value in r.records]
    assert sorted(read) == sorted(first), "every record once, none twice"
    assert all(r.records for r in readers), "both readers read"
    for r in readers:
        r.commit()
    committed = _committed_through_the_gateway(fronted.port)
    assert sum(committed.values()) == 200 and sorted(committed) == list(range(PARTITIONS))
    for r in readers:
        r.close()

    # restarted readers resume from the commits: only what came after is read
    later = [b"later-%03d" % i for i in range(20)]
    _produce(bootstrap, later)
    readers = [Reader(bootstrap, f"reader-again-{i}") for i in range(2)]
    try:
        _read_until_caught_up(readers, bootstrap)
        again = [value for r in readers for _, _, value in r.records]
        assert sorted(again) == sorted(later), "resumed from the commits, nothing re-read"
        for r in readers:
            r.commit()
    finally:
        for r in readers:
            r.close()
    assert sum(_committed_through_the_gateway(fronted.port).values()) == 220

    # the broker itself was never told of the group's offsets
    asked = {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0, 1, 2, 3]}]}
    with socket.create_connection(("127.0.0.1", noida.port), timeout=30) as sock:
        direct = call_on(sock, codec.OFFSET_FETCH, 5, asked, 1)
    offsets = [p["committed_offset"] for t in direct["topics"] for p in t["partitions"]]
    assert offsets in ([], [-1] * PARTITIONS), direct
    with socket.create_connection(("127.0.0.1", noida.port), timeout=30) as sock:
        everything = call_on(
            sock,
            codec.OFFSET_FETCH,
            8,
            {"groups": [{"group_id": GROUP, "topics": None}], "require_stable": False},
            2,
        )
    assert everything["groups"][0]["topics"] == []


@pytest.fixture
def refreshing(noida: Any) -> Iterator[Running]:
    """A gateway that asks the upstream for its topics every half second."""
    running = upstream_gateway(noida.port, metadata_max_age_ms=500)
    yield running
    running.stop()


@pytest.mark.slow
def test_a_consumer_protocol_group_reads_the_upstreams_topic_and_commits_to_the_coordinator(
    noida: Any, refreshing: Running
):
    """confluent-kafka with ``group.protocol=consumer``: the coordinator assigns a topic created
    on the upstream (noida-db, which has no topic ids: the ids are the gateway's, the same in
    the members' Metadata and in their assignments), the members read every record once from
    the broker and commit to the coordinator; when the topic grows upstream, the gateway's
    metadata refresh gives the members the new partitions."""
    topic, group = "events", "upstream-consumer-protocol"
    bootstrap = f"127.0.0.1:{refreshing.port}"
    _create_topic(bootstrap, topic)
    readers = [
        Reader(bootstrap, f"member-{i}", consumer_protocol=True, topic=topic, group=group)
        for i in range(2)
    ]
    try:
        _until(
            lambda: (
                sorted(p for r in readers for p in r.assigned) == list(range(PARTITIONS))
                and all(r.assigned for r in readers)
            ),
            "a disjoint cover of the upstream topic's partitions by two members",
            lambda: [r.poll() for r in readers],
        )
        engine = refreshing.gateway.backend.engine
        assert engine.topics.by_name(topic).topic_id == topic_id_for(topic)
        values = [b"event-%03d" % i for i in range(100)]
        _produce(bootstrap, values, topic)
        _read_until_caught_up(readers, bootstrap)
        read = [value for r in readers for _, _, value in r.records]
        assert sorted(read) == sorted(values), "every record once, none twice"
        for r in readers:
            r.commit()
        committed = _committed_through_the_gateway(refreshing.port, group)
        assert sorted(committed) == list(range(PARTITIONS)) and sum(committed.values()) == 100
        assert isinstance(engine.group(group), ConsumerGroup)

        # The topic grows on the upstream: the members are given the new partitions.
        from confluent_kafka.admin import AdminClient, NewPartitions

        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        [grown] = admin.create_partitions([NewPartitions(topic, PARTITIONS + 2)]).values()
        grown.result(WAIT_S)
        _until(
            lambda: sorted(p for r in readers for p in r.assigned) == list(range(PARTITIONS + 2)),
            "the members cover the partitions the topic grew by",
            lambda: [r.poll() for r in readers],
        )
        assert engine.topics.by_name(topic).partitions == PARTITIONS + 2
    finally:
        for r in readers:
            r.close()


def test_transactional_producers_are_refused_with_a_fatal_error(fronted: Running):
    from confluent_kafka import KafkaException, Producer
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    bootstrap = f"127.0.0.1:{fronted.port}"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx", "log_level": 0})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(WAIT_S)
    error = refused.value.args[0]
    assert error.code() == 53 and error.fatal() and not error.retriable()
    assert "__consumer_offsets" in error.str()

    old = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx")
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            old.init_transactions()
    finally:
        old.close(timeout=5)
