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
    """A confluent-kafka consumer of the group, polled by the test's thread."""

    def __init__(self, bootstrap: str, name: str) -> None:
        from confluent_kafka import Consumer

        self.assigned: set[int] = set()
        self.records: list[tuple[int, int, bytes]] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "client.id": name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "log_level": 0,
            }
        )

        def on_assign(_: Any, partitions: Any) -> None:
            self.assigned = {tp.partition for tp in partitions}

        def on_revoke(_: Any, partitions: Any) -> None:
            # what an application that reads each record once does: the partitions it gives
            # up are committed where it stopped, so their next owner goes on from there
            self.commit()
            self.assigned = set()

        self.consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)

    def poll(self) -> None:
        message = self.consumer.poll(0.05)
        if message is None:
            return
        if message.error():
            if message.error().retriable() or message.error().code() < 0:
                return  # partition EOF and transient broker states
            raise AssertionError(message.error())
        self.records.append((message.partition(), message.offset(), message.value()))

    def commit(self) -> None:
        from confluent_kafka import TopicPartition

        positions = self.consumer.position([TopicPartition(TOPIC, p) for p in self.assigned])
        mine = [tp for tp in positions if tp.offset >= 0]
        if mine:
            self.consumer.commit(offsets=mine, asynchronous=False)

    def caught_up(self, ends: dict[int, int]) -> bool:
        from confluent_kafka import TopicPartition

        if not self.assigned:
            return False
        positions = self.consumer.position([TopicPartition(TOPIC, p) for p in self.assigned])
        # librdkafka's position is the application's: invalid until a record is read here, as
        # for a partition its previous owner read to the end (and committed on giving it up)
        unread = [tp for tp in positions if tp.offset < 0]
        if unread:
            positions = [tp for tp in positions if tp.offset >= 0]
            positions += self.consumer.committed(unread, timeout=30)
        return all(tp.offset == ends[tp.partition] for tp in positions)

    def close(self) -> None:
        self.consumer.close()


def _produce(bootstrap: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    failures: list[Any] = []
    for i, value in enumerate(values):
        producer.produce(
            TOPIC,
            value=value,
            key=b"k%d" % i,
            on_delivery=lambda err, _msg: failures.append(err) if err is not None else None,
        )
    assert producer.flush(WAIT_S) == 0
    assert failures == []


def _create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    [future] = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values()
    future.result(WAIT_S)


def _end_offsets(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "log_level": 0})
    try:
        return {
            p: probe.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        probe.close()


def _read_until_caught_up(readers: list[Reader], bootstrap: str) -> None:
    """Poll both until they cover every partition between them, disjointly, and each has read
    up to the end of its partitions."""
    ends = _end_offsets(bootstrap)

    def settled() -> bool:
        cover = [p for r in readers for p in r.assigned]
        return sorted(cover) == list(range(PARTITIONS)) and all(r.caught_up(ends) for r in readers)

    _until(settled, f"both readers caught up with {ends}", lambda: [r.poll() for r in readers])


def _committed_through_the_gateway(port: int) -> dict[int, int]:
    body = {"groups": [{"group_id": GROUP, "topics": None}], "require_stable": False}
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
