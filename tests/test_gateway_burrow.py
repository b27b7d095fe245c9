"""Burrow 1.2.1 (Debian's ``burrow``) evaluates the lag of our groups through the gateway in
upstream mode: its cluster module asks the log ends (ListOffsets v0, asked of noida-db at v1),
its consumer module reads the commits from the coordinator's ``__consumer_offsets`` (the
gateway's log topic, led by the gateway's own node), and its HTTP API answers the lag.

Burrow needs ZooKeeper: the ZooKeeper jars inside the pyspark wheel run one. Burrow 1.2.1 does
not decode group-metadata records of value version 3 (Kafka 2.3 and newer write them, and so do
we): it logs "failed to decode" for them and shows no owner for the partitions; the lag, from
the offset-commit records, is right. The test says so too."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway_support import Running
from tests.upstream_support import closed_port, upstream_gateway

pytestmark = pytest.mark.slow

PARTITIONS, MESSAGES = 4, 100
WAIT_S = 90.0
#: The ZooKeeper server and what it needs at run time among pyspark's jars (name, then version).
ZOOKEEPER_JARS = (
    "zookeeper-",
    "zookeeper-jute-",
    "slf4j-api-",
    "log4j-slf4j2-impl-",
    "log4j-api-",
    "log4j-core-",
    "netty-handler-",
    "netty-transport-",
    "metrics-core-",
    "commons-cli-",
    "snappy-java-",
)


def until(predicate: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:g} s: {what}")
        time.sleep(0.2)


def zookeeper_classpath() -> str:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    chosen = []
    for prefix in ZOOKEEPER_JARS:
        found = sorted(j for j in jars.glob(f"{prefix}*.jar") if j.name[len(prefix)].isdigit())
        if not found:
            pytest.skip(f"no {prefix}*.jar among pyspark's jars ({jars})")
        chosen.append(str(found[-1]))
    return os.pathsep.join(chosen)


def serves_sessions(port: int) -> bool:
    """Whether ZooKeeper serves sessions: ``srvr`` names its mode once it does. (``ruok``
    answers ``imok`` as soon as the process runs, before it serves: Burrow connecting then
    had its session closed, "Authentication failed: EOF", and exited.)"""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"srvr")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
            return b"Mode: " in answer
    except OSError:
        return False


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A standalone ZooKeeper from pyspark's jars; its port."""
    if shutil.which("java") is None:
        pytest.skip("no java to run ZooKeeper")
    classpath = zookeeper_classpath()
    root = tmp_path_factory.mktemp("zookeeper")
    port = closed_port()
    config = root / "zoo.cfg"
    config.write_text(
        f"tickTime=2000\ndataDir={root / 'data'}\nclientPort={port}\n"
        "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n"
    )
    with (root / "zookeeper.log").open("w") as out:
        server = subprocess.Popen(
            ["nice", "-n", "19", "java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp",
             classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        until(lambda: server.poll() is not None or serves_sessions(port), "ZooKeeper serves")
        assert server.poll() is None, (root / "zookeeper.log").read_text()
        yield port
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture
def fronted(noida: Any, tmp_path: Path) -> Iterator[Running]:
    """The gateway in front of noida-db, its log in a warehouse (the log topic Burrow reads)."""
    running = upstream_gateway(noida.port, warehouse=str(tmp_path / "warehouse"))
    yield running
    running.stop()


def lagging_group(bootstrap: str, topic: str, group: str) -> Any:
    """A member of ``group`` (so a group-metadata record is written) that has read 10 + p of
    partition p's 25 messages and committed there; the caller closes it."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
         "log_level": 0}
    )  # fmt: skip
    consumer.subscribe([topic])
    until(lambda: consumer.poll(0.1) is None and consumer.assignment(), "an assignment")
    offsets = [TopicPartition(topic, p, 10 + p) for p in range(PARTITIONS)]
    consumer.commit(offsets=offsets, asynchronous=False)
    return consumer


def burrow_config(root: Path, zookeeper: int, bootstrap: str, http: int, version: str) -> None:
    (root / "burrow.toml").write_text(
        f"""
[general]
pidfile="{root}/burrow.pid"
[logging]
level="info"
[zookeeper]
servers=["127.0.0.1:{zookeeper}"]
timeout=6
root-path="/burrow-{root.name}"
[client-profile.gateway]
client-id="burrow"
kafka-version="{version}"
[cluster.gateway]
class-name="kafka"
servers=["{bootstrap}"]
client-profile="gateway"
topic-refresh=5
offset-refresh=1
[consumer.gateway]
class-name="kafka"
cluster="gateway"
servers=["{bootstrap}"]
client-profile="gateway"
[httpserver.default]
address="127.0.0.1:{http}"
[storage.default]
class-name="inmemory"
workers=2
intervals=10
expire-group=604800
min-distance=1
"""
    )


def http_json(port: int, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return json.loads(answer.read())
    except OSError:
        return None


@pytest.mark.parametrize(
    "version",
    ["0.8", "2.1.0"],  # Burrow's default (Metadata, Fetch and ListOffsets v0), and a newer one
)
def test_burrow_evaluates_the_lag_of_our_groups(
    zookeeper: int, fronted: Running, tmp_path: Path, version: str
) -> None:
    binary = shutil.which("Burrow")
    if binary is None:
        pytest.skip("Burrow is not installed (Debian's burrow; .ci/run installs it)")
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = f"burrowed-{version}", f"lagging-{version}"
    bootstrap = f"127.0.0.1:{fronted.port}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    [created] = admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values()
    created.result(WAIT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for i in range(MESSAGES):
        producer.produce(topic, b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(WAIT_S) == 0
    member = lagging_group(bootstrap, topic, group)

    root = tmp_path / "burrow"
    root.mkdir()
    http = closed_port()
    burrow_config(root, zookeeper, bootstrap, http, version)
    log = root / "burrow.log"
    with log.open("w") as out:
        burrow = subprocess.Popen(
            [binary, "--config-dir", str(root)], stdout=out, stderr=subprocess.STDOUT, cwd=root
        )
    try:
        per_partition = MESSAGES // PARTITIONS
        expected = [(p, per_partition - 10 - p) for p in range(PARTITIONS)]
        seen: list[Any] = []

        def lag() -> Any:
            assert burrow.poll() is None, log.read_text()[-4000:]
            answer = http_json(http, f"/v3/kafka/gateway/consumer/{group}/lag")
            status = (answer or {}).get("status") or {}
            seen[:] = [status]
            lags = sorted(
                (p["partition"], p["current_lag"]) for p in status.get("partitions") or []
            )
            return status if lags == expected else None

        try:
            status = until(lag, f"Burrow's lag of the group {expected}")
        except AssertionError as late:
            raise AssertionError(f"{late}; last seen: {seen}") from None
        assert status["totallag"] == sum(lag for _, lag in expected)
        ends = http_json(http, f"/v3/kafka/gateway/topic/{topic}")
        assert ends["offsets"] == [per_partition] * PARTITIONS  # asked of noida-db
        consumers = http_json(http, "/v3/kafka/gateway/consumer")
        assert group in consumers["consumers"]

        # Burrow 1.2.1's limit: group-metadata records of value version 3 are not decoded
        def refused() -> list[dict[str, Any]]:
            lines = [json.loads(line) for line in log.read_text().splitlines() if line[:1] == "{"]
            return [
                line
                for line in lines
                if line.get("msg") == "failed to decode"
                and line.get("message_type") == "metadata"
                and line.get("version") == 3
            ]

        assert until(refused, "Burrow's log of the group-metadata records")[0]["group"] == group
        assert all(p["owner"] == "" for p in status["partitions"])
    finally:
        burrow.terminate()
        burrow.wait(30)
        member.close()
