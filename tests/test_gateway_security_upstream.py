"""Upstream mode, secured at both ends: the gateway authenticates and authorizes its clients
itself, and reaches the upstream with its own credentials (SCRAM-SHA-512 over TLS), as
Kroxylicious does. The upstream here is another gateway acting as a secured broker (a real
Kafka cannot be installed here): coordination only, so Produce is refused there with
POLICY_VIOLATION, which tells a forwarded Produce from one the front gateway refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.gateway import codec
from coordinator.gateway.security.client import UpstreamCredentials
from coordinator.gateway.upstream import Upstream
from coordinator.security import errors
from coordinator.security.scram import SCRAM_SHA_512, ScramCredential
from coordinator.security.settings import parse
from coordinator.security.store import SecurityStore
from tests.gateway_support import REQUESTS
from tests.security_support import Certificates, RawClient, make_certificates, secured

POLICY_VIOLATION = 44
METADATA = {**REQUESTS[codec.METADATA], "include_cluster_authorized_operations": False}
FRONT_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture
def secured_upstream(tmp_path: Path, certificates: Certificates) -> Iterator[Any]:
    """A SASL_SSL broker (a gateway) that only User:gateway, by SCRAM-SHA-512, may use."""
    warehouse = tmp_path / "upstream"
    SecurityStore(warehouse).alter_scram(
        [
            (
                "gateway",
                ScramCredential.from_password(SCRAM_SHA_512, "gateway-secret", b"s" * 16, 4096),
            )
        ],
        [],
    )
    running = secured(
        {
            "listeners": "SASL_SSL://127.0.0.1:0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "ssl.keystore.location": certificates.path("server.pem"),
            "authorizer.class.name": "x",
            "super.users": "User:gateway",
        },
        warehouse,
        topics={"t": 6, "other": 2},
    )
    yield running
    running.stop()


def front(
    upstream_port: int,
    certificates: Certificates,
    warehouse: Path,
    password: str = "gateway-secret",
) -> Any:
    properties = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": FRONT_JAAS,
        "authorizer.class.name": "x",
        "super.users": "User:admin",
        "upstream.security.protocol": "SASL_SSL",
        "upstream.sasl.mechanism": "SCRAM-SHA-512",
        "upstream.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="gateway" password="{password}";',
        "upstream.ssl.truststore.location": certificates.ca,
    }
    credentials = UpstreamCredentials.from_settings(parse(properties).upstream)
    upstream = Upstream(
        [("127.0.0.1", upstream_port)], credentials=credentials, connect_timeout_s=5.0
    )
    return secured(properties, warehouse, upstream=upstream, topics={})


def login(port: int, user: str) -> RawClient:
    client = RawClient(port)
    assert client.authenticate("PLAIN", user, f"{user}-secret")["error_code"] == 0
    return client


def grant(port: int, resource_type: int, name: str, operation: int) -> None:
    admin = login(port, "admin")
    answer = admin.call(
        codec.CREATE_ACLS,
        3,
        {
            "creations": [
                {
                    "resource_type": resource_type,
                    "resource_name": name,
                    "resource_pattern_type": 3,
                    "principal": "User:alice",
                    "host": "*",
                    "operation": operation,
                    "permission_type": 3,
                }
            ]
        },
    )
    assert answer["results"][0]["error_code"] == 0
    admin.close()


def produce_body(*topics: str) -> dict[str, Any]:
    return {
        "acks": -1,
        "timeout": 1000,
        "transactional_id": None,
        "topic_data": [
            {"name": t, "partition_data": [{"index": 0, "records": b""}]} for t in topics
        ],
    }


def fetch_body(*topics: str) -> dict[str, Any]:
    return {
        **REQUESTS[codec.FETCH],
        "session_id": 5,
        "session_epoch": 3,
        "topics": [
            {
                "topic": t,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}],
            }
            for t in topics
        ],
    }


def test_clients_reach_the_upstream_only_through_the_gateways_checks(
    tmp_path: Path, certificates: Certificates, secured_upstream: Any
):
    running = front(secured_upstream.port, certificates, tmp_path / "front")
    try:
        # not authenticated: disconnected before anything is forwarded
        anonymous = RawClient(running.port)
        assert anonymous.call(codec.METADATA, 9, {**METADATA, "topics": None}) is None
        alice = login(running.port, "alice")
        every = alice.call(codec.METADATA, 9, {**METADATA, "topics": None})
        assert every["topics"] == []  # the upstream answered (the gateway's own credentials)
        assert every["brokers"][0]["port"] != secured_upstream.port  # through our listener
        grant(running.port, 2, "t", 3)  # READ on t
        every = alice.call(codec.METADATA, 9, {**METADATA, "topics": None})
        assert [t["name"] for t in every["topics"]] == ["t"]
        named = alice.call(
            codec.METADATA,
            9,
            {
                **METADATA,
                "topics": [{"name": "t", "topic_id": None}, {"name": "other", "topic_id": None}],
            },
        )
        codes = {t["name"]: t["error_code"] for t in named["topics"]}
        assert codes == {"t": 0, "other": errors.TOPIC_AUTHORIZATION_FAILED}
        fetched = alice.call(codec.FETCH, 11, fetch_body("t", "other"))
        codes = {t["topic"]: t["partitions"][0]["error_code"] for t in fetched["responses"]}
        assert codes == {"t": 0, "other": errors.TOPIC_AUTHORIZATION_FAILED}
        assert fetched["session_id"] == 0  # sessionless: every fetch is checked whole
        # Produce without WRITE: refused here (29), never the upstream's POLICY_VIOLATION (44)
        produced = alice.call(codec.PRODUCE, 8, produce_body("t"))
        assert produced["responses"][0]["partition_responses"][0]["error_code"] == (
            errors.TOPIC_AUTHORIZATION_FAILED
        )
        grant(running.port, 2, "t", 4)  # WRITE on t
        produced = alice.call(codec.PRODUCE, 8, produce_body("t", "other"))
        codes = {
            t["name"]: t["partition_responses"][0]["error_code"] for t in produced["responses"]
        }
        assert codes == {"t": POLICY_VIOLATION, "other": errors.TOPIC_AUTHORIZATION_FAILED}
        listed = alice.call(
            codec.LIST_OFFSETS,
            5,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {"name": n, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                    for n in ("t", "other")
                ],
            },
        )
        codes = {t["name"]: t["partitions"][0]["error_code"] for t in listed["topics"]}
        assert codes == {"t": 0, "other": errors.TOPIC_AUTHORIZATION_FAILED}
        init = alice.call(
            22,
            4,
            {
                "transactional_id": None,
                "transaction_timeout": 60000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        assert init["error_code"] != errors.CLUSTER_AUTHORIZATION_FAILED  # WRITE on a topic
    finally:
        running.stop()


def test_upstream_refusing_the_gateways_credentials_gives_retriable_errors(
    tmp_path: Path, certificates: Certificates, secured_upstream: Any
):
    running = front(secured_upstream.port, certificates, tmp_path / "front", password="wrong")
    try:
        admin = login(running.port, "admin")
        answer = admin.call(
            codec.METADATA,
            9,
            {**METADATA, "topics": [{"name": "t", "topic_id": None}]},
        )
        assert answer["topics"][0]["error_code"] == 5  # LEADER_NOT_AVAILABLE: retriable
    finally:
        running.stop()


# --- what may be forwarded, request by request ------------------------------------------------


def alice_session(*acls: tuple[int, str, int]) -> Any:
    """A session of User:alice on a gateway enforcing these (type, name, operation) ALLOWs."""
    from coordinator.gateway.security.session import GatewaySecurity, Session
    from coordinator.security.acl import (
        AclBinding,
        Operation,
        PatternType,
        Permission,
        ResourceType,
    )

    store = SecurityStore()
    store.add_acls(
        AclBinding(
            ResourceType(rt),
            name,
            PatternType.LITERAL,
            "User:alice",
            "*",
            Operation(op),
            Permission.ALLOW,
        )
        for rt, name, op in acls
    )
    session = Session(GatewaySecurity(parse({"authorizer.class.name": "x"}), store), "10.0.0.1")
    session.principal = "User:alice"
    return session


def test_fetch_goes_on_sessionless_and_by_topic_id_only_when_known():
    from coordinator.gateway.security.forwarded import guard, merge

    session = alice_session((2, "t", 3))
    body = fetch_body("t")
    decision = guard(session, codec.FETCH, 11, body, {})
    assert decision.changed and decision.refused is None
    assert decision.forward is not None
    assert (decision.forward["session_id"], decision.forward["session_epoch"]) == (0, -1)
    by_id = {
        **body,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {"topic_id": "1111", "partitions": [{"partition": 0, "fetch_offset": 0}]},
            {"topic_id": "2222", "partitions": [{"partition": 0, "fetch_offset": 0}]},
        ],
    }
    decision = guard(session, codec.FETCH, 13, by_id, {"1111": "t"})
    assert decision.forward is not None
    assert [t["topic_id"] for t in decision.forward["topics"]] == ["1111"]
    refused = merge(decision, {"throttle_time": 0, "responses": []})
    assert refused is not None
    assert refused["responses"][0]["partitions"][0]["error_code"] == errors.UNKNOWN_TOPIC_ID


def test_admin_apis_forward_only_what_may_be_done():
    from coordinator.gateway.security.forwarded import (
        CREATE_TOPICS,
        DELETE_TOPICS,
        DESCRIBE_CONFIGS,
        guard,
    )

    session = alice_session((2, "mine", 5), (2, "mine", 6), (2, "mine", 10))
    create = {
        "topics": [{"name": "mine"}, {"name": "theirs"}],
        "timeout": 1000,
        "validate_only": False,
    }
    decision = guard(session, CREATE_TOPICS, 7, create, {})
    assert decision.forward is not None and decision.refused is not None
    assert [t["name"] for t in decision.forward["topics"]] == ["mine"]
    assert decision.refused["topics"][0]["error_code"] == errors.TOPIC_AUTHORIZATION_FAILED
    old_delete = {"topic_names": ["mine", "theirs"], "timeout": 1000}
    decision = guard(session, DELETE_TOPICS, 5, old_delete, {})
    assert decision.forward == {**old_delete, "topic_names": ["mine"]}
    configs = {
        "resources": [
            {"resource_type": 2, "resource_name": "mine", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "0", "configuration_keys": None},
        ]
    }
    decision = guard(session, DESCRIBE_CONFIGS, 4, configs, {})
    assert decision.forward is not None and decision.refused is not None
    assert decision.refused["results"][0]["error_code"] == errors.CLUSTER_AUTHORIZATION_FAILED
    nothing = guard(alice_session(), CREATE_TOPICS, 7, create, {})
    assert nothing.forward is None  # nothing of it goes upstream


def test_metadata_names_only_describable_topics_and_creates_only_with_create():
    from coordinator.gateway.security.forwarded import guard

    session = alice_session((2, "t", 8))
    body = {
        **METADATA,
        "allow_auto_topic_creation": True,
        "topics": [{"name": "t", "topic_id": None}, {"name": "secret", "topic_id": None}],
    }
    decision = guard(session, codec.METADATA, 9, body, {})
    assert decision.forward is not None
    assert [t["name"] for t in decision.forward["topics"]] == ["t"]
    assert decision.forward["allow_auto_topic_creation"] is False
    creator = alice_session((2, "t", 8), (4, "kafka-cluster", 5))
    decision = guard(creator, codec.METADATA, 9, body, {})
    assert decision.forward is not None and decision.forward["allow_auto_topic_creation"] is True


def test_coordinator_groups_asks_a_secured_upstream_with_the_gateways_credentials(
    tmp_path: Path, certificates: Certificates, secured_upstream: Any
):
    """``coordinator groups --gateway-conf`` reaches the upstream as the gateway does (its
    upstream.* settings): log offsets over SCRAM-SHA-512 and TLS; wrong credentials are an
    error naming the cluster."""
    from coordinator.admin.topic_offsets import TopicOffsetsError
    from coordinator.admin.upstream_offsets import UpstreamOffsets
    from coordinator.cli.groups import _upstream_credentials

    def properties(password: str) -> dict[str, str]:
        return {
            "upstream.security.protocol": "SASL_SSL",
            "upstream.sasl.mechanism": "SCRAM-SHA-512",
            "upstream.sasl.jaas.config": "org.apache.kafka.common.security.scram."
            f'ScramLoginModule required username="gateway" password="{password}";',
            "upstream.ssl.truststore.location": certificates.ca,
        }

    address = [("127.0.0.1", secured_upstream.port)]
    with UpstreamOffsets(
        address, credentials=_upstream_credentials(properties("gateway-secret"))
    ) as offsets:
        assert offsets.partitions("t") == list(range(6))
        assert offsets.latest(("t", 0)) == 0
    with (
        UpstreamOffsets(address, credentials=_upstream_credentials(properties("wrong"))) as offsets,
        pytest.raises(TopicOffsetsError, match="cannot be reached"),
    ):
        offsets.partitions("t")
    assert _upstream_credentials({}) is None
