"""Go clients through the gateway in upstream mode (noida-db holds the data): sarama, as Debian
packages it (1.22), and segmentio/kafka-go (0.2), built from ``tests/clients/go/`` with
Debian's Go (``tests/go_support.py``).

Both send versions Kafka 4 removed: sarama commits with OffsetCommit v1 (at its defaults and at
V2_1_0_0: ``Consumer.Offsets.Retention`` 0) and fetches with Fetch v3 (V0_10_2_0) or v4
(V2_1_0_0); kafka-go fetches with Fetch v2 and reads only message sets of magic 0/1. noida-db
advertises Fetch v0 yet closes the connection on v0-v3, as a Kafka 4 broker refuses them: the
gateway asks it at Fetch v4 and down-converts the answer (``coordinator.gateway.upstream``).

Each client reads what was produced (through the gateway, by confluent-kafka) once, commits it
to the coordinator, and, run again, reads only what was produced since."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.gateway import codec
from tests.gateway_support import Running
from tests.go_support import GoBuilds, run_fixture
from tests.upstream_support import call_on, upstream_gateway

pytestmark = pytest.mark.slow

PARTITIONS = 4
WAIT_S = 90.0


@pytest.fixture(scope="session")
def go(tmp_path_factory: pytest.TempPathFactory) -> GoBuilds:
    return GoBuilds(tmp_path_factory.mktemp("go"))


@pytest.fixture
def fronted(noida: Any) -> Iterator[Running]:
    running = upstream_gateway(noida.port)
    yield running
    running.stop()


@pytest.fixture
def versions_seen(monkeypatch: pytest.MonkeyPatch) -> set[tuple[int, int]]:
    """Every (API key, version) the gateway decoded a request of, while the test runs."""
    seen: set[tuple[int, int]] = set()
    decode = codec.decode_request

    def recording(frame: bytes, *args: Any, **kwargs: Any) -> codec.DecodedRequest:
        request = decode(frame, *args, **kwargs)
        seen.add((request.api_key, request.api_version))
        return request

    monkeypatch.setattr(codec, "decode_request", recording)
    return seen


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    [future] = admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values()
    future.result(WAIT_S)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Round-robin over the partitions: librdkafka's sticky partitioner would put a burst of
    keyless messages on as few as one partition, leaving others with nothing to commit."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    failures: list[Any] = []
    for i, value in enumerate(values):
        producer.produce(
            topic,
            value,
            partition=i % PARTITIONS,
            on_delivery=lambda error, _: error and failures.append(error),
        )
    assert producer.flush(WAIT_S) == 0 and failures == []


def committed(port: int, group: str) -> dict[int, int]:
    """The group's offsets, asked of the gateway (the coordinator's)."""
    body = {"groups": [{"group_id": group, "topics": None}], "require_stable": False}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        answer = call_on(sock, codec.OFFSET_FETCH, 8, body, 1)
    return {
        p["partition_index"]: p["committed_offset"]
        for t in answer["groups"][0]["topics"]
        for p in t["partitions"]
    }


def read_once(records: list[dict[str, Any]], produced: list[bytes]) -> None:
    values = sorted(r["value"].encode() for r in records)
    assert values == sorted(produced), "every message read once"
    assert len({(r["partition"], r["offset"]) for r in records}) == len(records)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("", {(codec.OFFSET_COMMIT, 1), (codec.FETCH, 3), (codec.JOIN_GROUP, 1)}),
        ("2.1.0", {(codec.OFFSET_COMMIT, 1), (codec.FETCH, 4)}),
    ],
    ids=["defaults", "V2_1_0_0"],
)
def test_a_sarama_group_reads_commits_and_resumes_from_its_commits(
    go: GoBuilds,
    fronted: Running,
    versions_seen: set[tuple[int, int]],
    version: str,
    expected: set[tuple[int, int]],
) -> None:
    binary = go.binary("sarama_group")
    bootstrap = f"127.0.0.1:{fronted.port}"
    name = f"sarama-{version or 'defaults'}"
    create_topic(bootstrap, name)
    first = [b"first-%03d" % i for i in range(200)]
    produce(bootstrap, name, first)

    def run(expect: int) -> list[dict[str, Any]]:
        args = ["-brokers", bootstrap, "-topic", name, "-group", name, "-expect", str(expect)]
        return run_fixture(binary, *args, *(["-version", version] if version else []))

    read_once(run(200), first)
    offsets = committed(fronted.port, name)
    assert sorted(offsets) == list(range(PARTITIONS)) and sum(offsets.values()) == 200
    assert expected <= versions_seen, sorted(versions_seen)

    later = [b"later-%03d" % i for i in range(50)]
    produce(bootstrap, name, later)
    read_once(run(50), later)  # from the commits: nothing read twice
    assert sum(committed(fronted.port, name).values()) == 250


def test_kafka_go_readers_in_a_group_read_and_commit(
    go: GoBuilds, fronted: Running, versions_seen: set[tuple[int, int]]
) -> None:
    binary = go.binary("kafkago_group")
    bootstrap = f"127.0.0.1:{fronted.port}"
    name = "kafka-go"
    create_topic(bootstrap, name)
    first = [b"first-%03d" % i for i in range(200)]
    produce(bootstrap, name, first)

    def run(expect: int) -> list[dict[str, Any]]:
        args = ["-brokers", bootstrap, "-topic", name, "-group", name, "-expect", str(expect)]
        return run_fixture(binary, *args, "-readers", "2")

    records = run(200)
    read_once(records, first)
    offsets = committed(fronted.port, name)
    assert sorted(offsets) == list(range(PARTITIONS)) and sum(offsets.values()) == 200
    assert {(codec.FETCH, 2), (codec.OFFSET_COMMIT, 2)} <= versions_seen, sorted(versions_seen)

    later = [b"later-%03d" % i for i in range(50)]
    produce(bootstrap, name, later)
    read_once(run(50), later)
    assert sum(committed(fronted.port, name).values()) == 250
