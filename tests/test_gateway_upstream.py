"""Upstream mode without a real broker: the Metadata rewrite, correlation ids remapped per
upstream connection, the ApiVersions intersection, transactions refused and an unreachable
upstream (retriable errors, group coordination unharmed), against a stub broker."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.gateway import codec
from coordinator.gateway.cli import add_parser, run
from coordinator.gateway.log_topic import LOG_TOPIC
from coordinator.gateway.upstream import (
    GATEWAY_NODE_ID,
    BrokerConnection,
    advertised_versions,
    parse_bootstrap,
    rewrite_brokers,
    with_request_correlation_id,
)
from tests.gateway_support import REQUESTS, Running, call
from tests.upstream_support import (
    STUB_NODE_ID,
    STUB_PARTITIONS,
    STUB_PRODUCER_ID,
    STUB_VERSIONS,
    StubBroker,
    call_on,
    closed_port,
    upstream_gateway,
)

TRANSACTION_REFUSED = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
INIT_PRODUCER_ID, TXN_OFFSET_COMMIT, ADD_OFFSETS_TO_TXN = 22, 28, 25


@pytest.fixture
def stub() -> Iterator[StubBroker]:
    broker = StubBroker()
    yield broker
    broker.stop()


@pytest.fixture
def fronted(stub: StubBroker) -> Iterator[Running]:
    running = upstream_gateway(stub.port)
    yield running
    running.stop()


@pytest.fixture
def orphaned() -> Iterator[Running]:
    """A gateway whose upstream never answers (nothing listens there)."""
    running = upstream_gateway(closed_port(), connect_timeout_s=2.0)
    yield running
    running.stop()


def _metadata(port: int, version: int = 9, topics: list[str] | None = None) -> dict:
    body = dict(REQUESTS[codec.METADATA])
    body["topics"] = None if topics is None else [{"name": t, "topic_id": None} for t in topics]
    body["include_cluster_authorized_operations"] = False
    answer: dict = call(port, codec.METADATA, version, body)
    return answer


# --- the Metadata rewrite ----------------------------------------------------------------------


def test_rewrite_keeps_node_ids_and_racks_and_puts_the_gateway_listeners():
    body = {
        "brokers": [
            {"node_id": 1, "host": "kafka-1.internal", "port": 9092, "rack": "a"},
            {"node_id": 2, "host": "kafka-2.internal", "port": 9092, "rack": None},
        ],
        "controller_id": 2,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "leader_id": 2}]}],
    }
    out = rewrite_brokers(body, {1: ("gw", 19093), 2: ("gw", 19094)})
    assert out["brokers"] == [
        {"node_id": 1, "host": "gw", "port": 19093, "rack": "a"},
        {"node_id": 2, "host": "gw", "port": 19094, "rack": None},
    ]
    assert out["topics"] == body["topics"] and out["controller_id"] == 2
    assert body["brokers"][0]["host"] == "kafka-1.internal"  # the input is left alone


def test_metadata_through_the_gateway_names_only_gateway_listeners(
    stub: StubBroker, fronted: Running
):
    answer = _metadata(fronted.port)
    broker, gateway = answer["brokers"]
    assert broker["node_id"] == STUB_NODE_ID and broker["rack"] == "r1"
    assert broker["host"] == "127.0.0.1" and broker["port"] not in (stub.port, fronted.port)
    # the log topic's leader: the gateway's own node, its bootstrap listener
    assert (gateway["node_id"], gateway["port"]) == (GATEWAY_NODE_ID, fronted.port)
    topic, log = answer["topics"]
    assert [p["leader_id"] for p in topic["partitions"]] == [STUB_NODE_ID] * STUB_PARTITIONS
    assert (log["name"], log["is_internal"], len(log["partitions"])) == (LOG_TOPIC, True, 50)
    assert answer["cluster_id"] == "stub-cluster"
    # the broker's listener serves: a Produce through it reaches the stub (its leader)
    produce = call(broker["port"], codec.PRODUCE, 8, REQUESTS[codec.PRODUCE])
    assert produce["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert any(k == codec.PRODUCE for k, _ in stub.seen)


def test_find_coordinator_points_at_the_listener_of_a_known_broker(fronted: Running):
    broker = _metadata(fronted.port)["brokers"][0]
    for version in (1, 4):
        answer = call(
            fronted.port, codec.FIND_COORDINATOR, version, REQUESTS[codec.FIND_COORDINATOR]
        )
        found = answer["coordinators"][0] if version >= 4 else answer
        assert found["error_code"] == 0
        assert (found["node_id"], found["host"], found["port"]) == (
            broker["node_id"],
            broker["host"],
            broker["port"],
        )


# --- the log topic ------------------------------------------------------------------------------


def test_the_log_topic_is_the_coordinators_led_by_the_gateways_node(
    stub: StubBroker, fronted: Running
):
    named = _metadata(fronted.port, topics=[LOG_TOPIC])
    [log] = named["topics"]
    assert {p["leader_id"] for p in log["partitions"]} == {GATEWAY_NODE_ID}
    assert GATEWAY_NODE_ID in [b["node_id"] for b in named["brokers"]]
    others = _metadata(fronted.port, topics=["t"])  # not asked: not there
    assert [t["name"] for t in others["topics"]] == ["t"]
    assert [b["node_id"] for b in others["brokers"]] == [STUB_NODE_ID]
    assert [t["name"] for t in _metadata(fronted.port, version=0, topics=[])["topics"]] == [
        "t",
        LOG_TOPIC,
    ]
    # its Fetch and ListOffsets are the gateway's, on any listener: the stub sees none
    broker_port = named["brokers"][0]["port"]
    before = len(stub.seen)
    for port in (fronted.port, broker_port):
        fetch = dict(REQUESTS[codec.FETCH], max_wait=0)
        fetch["topics"] = [
            {
                "topic": LOG_TOPIC,
                "partitions": [{"partition": 7, "fetch_offset": 0, "partition_max_bytes": 1024}],
            }
        ]
        fetched = call(port, codec.FETCH, 11, fetch)["responses"][0]["partitions"][0]
        assert (fetched["error_code"], fetched["high_watermark"], fetched["records"]) == (0, 0, b"")
        offsets = dict(REQUESTS[codec.LIST_OFFSETS])
        offsets["topics"] = [
            {"name": LOG_TOPIC, "partitions": [{"partition_index": 7, "timestamp": -1}]}
        ]
        listed = call(port, codec.LIST_OFFSETS, 5, offsets)["topics"][0]["partitions"][0]
        assert (listed["error_code"], listed["offset"]) == (0, 0)
    assert stub.seen[before:] == []


def test_the_log_topic_holds_the_groups_commits_in_upstream_mode(stub: StubBroker, tmp_path: Path):
    running = upstream_gateway(stub.port, warehouse=str(tmp_path / "wh"))
    try:
        commit = dict(REQUESTS[codec.OFFSET_COMMIT], generation_id_or_member_epoch=-1, member_id="")
        assert (
            call(running.port, codec.OFFSET_COMMIT, 9, commit)["topics"][0]["partitions"][0][
                "error_code"
            ]
            == 0
        )
        ends = []
        for index in range(50):
            body = dict(REQUESTS[codec.LIST_OFFSETS])
            body["topics"] = [
                {"name": LOG_TOPIC, "partitions": [{"partition_index": index, "timestamp": -1}]}
            ]
            listed = call(running.port, codec.LIST_OFFSETS, 5, body)
            ends.append(listed["topics"][0]["partitions"][0]["offset"])
        assert sum(ends) == 1  # the one commit record, in the group's partition
        fetch = dict(REQUESTS[codec.FETCH], max_wait=0)
        fetch["topics"] = [
            {
                "topic": LOG_TOPIC,
                "partitions": [
                    {"partition": ends.index(1), "fetch_offset": 0, "partition_max_bytes": 1024}
                ],
            }
        ]
        fetched = call(running.port, codec.FETCH, 11, fetch)["responses"][0]["partitions"][0]
        assert fetched["error_code"] == 0 and fetched["high_watermark"] == 1
        assert fetched["records"]
        assert not any(k == codec.FETCH for k, _ in stub.seen)
    finally:
        running.stop()


# --- correlation ids ---------------------------------------------------------------------------


def test_client_correlation_ids_are_remapped_per_upstream_connection(
    stub: StubBroker, fronted: Running
):
    broker_port = _metadata(fronted.port)["brokers"][0]["port"]
    before = len(stub.seen)
    sent = [1_000_000, 1_000_000, 7, 2_000_000_000]  # any ids, even repeated, come back as sent
    with socket.create_connection(("127.0.0.1", broker_port), timeout=10) as sock:
        for cid in sent:
            answer = call_on(sock, codec.PRODUCE, 8, REQUESTS[codec.PRODUCE], cid)
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    upstream_ids = [c for k, c in stub.seen[before:] if k == codec.PRODUCE]
    assert len(upstream_ids) == len(sent)
    assert len(set(upstream_ids)) == len(sent), "one upstream connection: ids never repeat"
    assert upstream_ids != sent


def test_answers_are_matched_to_requests_by_correlation_id_not_arrival():
    stub = StubBroker(swap_pairs=True)  # answers each pair of requests second first
    produce = codec.encode_request(codec.PRODUCE, 8, 0, REQUESTS[codec.PRODUCE])[4:]
    versions = codec.encode_request(codec.API_VERSIONS, 3, 0, REQUESTS[codec.API_VERSIONS])[4:]

    async def both() -> tuple[bytes | None, bytes | None]:
        connection = BrokerConnection(("127.0.0.1", stub.port))
        try:
            first = asyncio.ensure_future(connection.call(with_request_correlation_id(produce, 41)))
            second = asyncio.ensure_future(
                connection.call(with_request_correlation_id(versions, 42))
            )
            return await first, await second
        finally:
            await connection.close()

    try:
        produced, listed = asyncio.run(both())
    finally:
        stub.stop()
    assert produced is not None and listed is not None
    cid, answer = codec.decode_response(codec.PRODUCE, 8, produced)
    assert cid == 41 and answer.responses[0].name == "t"
    cid, answer = codec.decode_response(codec.API_VERSIONS, 3, listed)
    assert cid == 42 and int(answer.error_code) == 0


# --- ApiVersions -------------------------------------------------------------------------------


def test_api_versions_intersection():
    table = advertised_versions(STUB_VERSIONS)
    # forwarded APIs: what both the upstream and the gateway serve
    assert table[codec.PRODUCE] == (3, 8)
    # Fetch 4-11 upstream: v0-v3 asked at v4 (tests/test_gateway_upstream_old_versions.py)
    assert table[codec.FETCH] == (0, 11)
    assert table[codec.METADATA] == (1, 9)
    assert table[INIT_PRODUCER_ID] == (0, 4)
    # group APIs are the coordinator's, whatever the upstream serves (JoinGroup 0-3 there)
    assert table[codec.JOIN_GROUP] == codec.SUPPORTED[codec.JOIN_GROUP]
    assert table[codec.OFFSET_DELETE] == codec.SUPPORTED[codec.OFFSET_DELETE]
    # not served upstream: not advertised; transactions: never
    assert 19 not in table  # CreateTopics
    assert TXN_OFFSET_COMMIT not in table
    # an upstream that never answered: only what the gateway answers alone
    alone = advertised_versions(None)
    assert alone[codec.FETCH] == codec.SUPPORTED[codec.FETCH]
    assert INIT_PRODUCER_ID not in alone


def test_api_versions_through_the_gateway_is_the_intersection(fronted: Running):
    answer = call(fronted.port, codec.API_VERSIONS, 3, REQUESTS[codec.API_VERSIONS])
    table = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert table == advertised_versions(STUB_VERSIONS)


# --- transactions ------------------------------------------------------------------------------


def test_transactions_are_refused_with_kafkas_fatal_error(stub: StubBroker, fronted: Running):
    before = len(stub.seen)
    init = call(
        fronted.port,
        INIT_PRODUCER_ID,
        4,
        {
            "transactional_id": "tx",
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert (init["error_code"], init["producer_id"]) == (TRANSACTION_REFUSED, -1)
    found = call(
        fronted.port, codec.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx"]}
    )
    [coordinator] = found["coordinators"]
    assert coordinator["error_code"] == TRANSACTION_REFUSED
    assert "__consumer_offsets" in coordinator["error_message"]
    committed = call(
        fronted.port,
        TXN_OFFSET_COMMIT,
        3,
        {
            "transactional_id": "tx",
            "group_id": "g",
            "producer_id": 1,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 5,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    assert committed["topics"][0]["partitions"][0]["error_code"] == TRANSACTION_REFUSED
    added = call(
        fronted.port,
        ADD_OFFSETS_TO_TXN,
        3,
        {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "group_id": "g"},
    )
    assert added["error_code"] == TRANSACTION_REFUSED
    assert all(k == codec.METADATA or k == codec.API_VERSIONS for k, _ in stub.seen[before:])
    # nothing reached a group either
    fetched = call(fronted.port, codec.OFFSET_FETCH, 8, REQUESTS[codec.OFFSET_FETCH])
    assert fetched["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == -1


def test_an_idempotent_producers_init_producer_id_goes_upstream(stub: StubBroker, fronted: Running):
    """Not a transaction (no transactional id): the broker hands out the producer id."""
    answer = call(
        fronted.port,
        INIT_PRODUCER_ID,
        4,
        {
            "transactional_id": None,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert (answer["error_code"], answer["producer_id"]) == (0, STUB_PRODUCER_ID)
    assert any(k == INIT_PRODUCER_ID for k, _ in stub.seen)


# --- an unreachable upstream -------------------------------------------------------------------


def test_unreachable_upstream_answers_retriable_errors(orphaned: Running):
    produce = call(orphaned.port, codec.PRODUCE, 8, REQUESTS[codec.PRODUCE])
    assert produce["responses"][0]["partition_responses"][0]["error_code"] == 6
    fetch = call(orphaned.port, codec.FETCH, 11, REQUESTS[codec.FETCH])
    partition = fetch["responses"][0]["partitions"][0]
    assert (partition["error_code"], partition["records"]) == (6, b"")
    offsets = call(orphaned.port, codec.LIST_OFFSETS, 5, REQUESTS[codec.LIST_OFFSETS])
    assert offsets["topics"][0]["partitions"][0]["error_code"] == 6
    metadata = _metadata(orphaned.port, topics=["t"])
    assert [(t["name"], t["error_code"]) for t in metadata["topics"]] == [("t", 5)]
    assert [b["node_id"] for b in metadata["brokers"]] == [GATEWAY_NODE_ID]
    [log] = _metadata(orphaned.port, topics=[LOG_TOPIC])["topics"]  # the gateway's own: served
    assert log["error_code"] == 0 and {p["leader_id"] for p in log["partitions"]} == {
        GATEWAY_NODE_ID
    }
    versions = call(orphaned.port, codec.API_VERSIONS, 3, REQUESTS[codec.API_VERSIONS])
    table = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions["api_keys"]}
    assert table == advertised_versions(None)


def test_group_coordination_works_while_the_upstream_is_unreachable(orphaned: Running):
    found = call(orphaned.port, codec.FIND_COORDINATOR, 3, REQUESTS[codec.FIND_COORDINATOR])
    assert (found["error_code"], found["node_id"], found["port"]) == (
        0,
        GATEWAY_NODE_ID,
        orphaned.port,
    )
    join = dict(REQUESTS[codec.JOIN_GROUP], member_id="")
    first = call(orphaned.port, codec.JOIN_GROUP, 9, join)
    assert first["error_code"] == 79  # MEMBER_ID_REQUIRED
    joined = call(orphaned.port, codec.JOIN_GROUP, 9, dict(join, member_id=first["member_id"]))
    assert joined["error_code"] == 0 and joined["leader"] == first["member_id"]
    member, generation = joined["member_id"], joined["generation_id"]
    synced = call(
        orphaned.port,
        codec.SYNC_GROUP,
        5,
        {
            "group_id": "g",
            "generation_id": generation,
            "member_id": member,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": b"a"}],
        },
    )
    assert (synced["error_code"], synced["assignment"]) == (0, b"a")
    commit = dict(
        REQUESTS[codec.OFFSET_COMMIT],
        generation_id_or_member_epoch=generation,
        member_id=member,
    )
    committed = call(orphaned.port, codec.OFFSET_COMMIT, 9, commit)
    assert committed["topics"][0]["partitions"][0]["error_code"] == 0
    fetched = call(orphaned.port, codec.OFFSET_FETCH, 8, REQUESTS[codec.OFFSET_FETCH])
    assert fetched["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 5
    beat = call(
        orphaned.port,
        codec.HEARTBEAT,
        4,
        {"group_id": "g", "generation_id": generation, "member_id": member},
    )
    assert beat["error_code"] == 0


def test_metadata_from_the_last_answer_when_the_upstream_goes_away():
    stub = StubBroker()
    running = upstream_gateway(stub.port, connect_timeout_s=2.0)
    try:
        seen = _metadata(running.port, topics=["t"])
        listener = seen["brokers"][0]
        stub.stop()
        gone = _metadata(running.port, topics=["t", "never-seen"])
        assert gone["brokers"] == seen["brokers"]
        t, never = gone["topics"]
        assert t["error_code"] == 0
        assert [(p["error_code"], p["leader_id"]) for p in t["partitions"]] == [
            (5, -1)
        ] * STUB_PARTITIONS
        assert never["error_code"] == 5
        produce = call(listener["port"], codec.PRODUCE, 8, REQUESTS[codec.PRODUCE])
        assert produce["responses"][0]["partition_responses"][0]["error_code"] == 6
        found = call(running.port, codec.FIND_COORDINATOR, 3, REQUESTS[codec.FIND_COORDINATOR])
        assert (found["error_code"], found["node_id"], found["port"]) == (
            0,
            STUB_NODE_ID,
            listener["port"],
        )
    finally:
        running.stop()


# --- settings ----------------------------------------------------------------------------------


def test_bootstrap_servers_parse_and_refuse_bad_input():
    assert parse_bootstrap("a:1, b:2,") == [("a", 1), ("b", 2)]
    for bad in ("", "a", "a:x", ":1"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


def _gateway_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["gateway", *argv])


def test_settings_the_gateway_does_not_serve_are_refused_by_name(tmp_path: Path):
    conf = tmp_path / "gateway.properties"
    conf.write_text(
        "upstream.bootstrap.servers=127.0.0.1:1\nupstream.sasl.kerberos.service.name=kafka\n"
    )
    with pytest.raises(ValueError, match=r"not a gateway setting: upstream\.sasl\.kerberos"):
        run(_gateway_args("--gateway-conf", str(conf)))


def test_topics_of_the_coordinator_only_mode_are_refused_with_an_upstream(tmp_path: Path):
    with pytest.raises(ValueError, match="topics are the upstream's"):
        run(_gateway_args("--gateway-conf", os.devnull, "--upstream", "h:1", "--topic", "t:3"))
