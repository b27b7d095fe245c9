"""The gateway's security on the wire, with a raw client (exact error codes, and what happens
to each connection): SASL's exchange and its refusals, TLS, and every API authorized where
Kafka's KafkaApis authorizes it."""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.gateway import codec
from coordinator.security import errors
from coordinator.security.acl import (
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from coordinator.security.scram import SCRAM_SHA_512, ScramCredential
from coordinator.security.store import SecurityStore
from tests.gateway_support import REQUESTS
from tests.security_support import (
    CLIENT_PRINCIPAL,
    Certificates,
    RawClient,
    client_context,
    make_certificates,
    secured,
)

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def sasl_properties(protocol: str = "SASL_PLAINTEXT", **extra: str) -> dict[str, str]:
    return {
        "listeners": f"{protocol}://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        f"listener.name.{protocol.lower()}.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        **extra,
    }


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Any]:
    store = SecurityStore(tmp_path)
    store.alter_scram(
        [("carol", ScramCredential.from_password(SCRAM_SHA_512, "carol-secret", b"s" * 16, 4096))],
        [],
    )
    running = secured(sasl_properties(), tmp_path)
    yield running
    running.stop()


def login(port: int, user: str) -> RawClient:
    client = RawClient(port)
    answer = client.authenticate("PLAIN", user, f"{user}-secret")
    assert answer["error_code"] == 0, answer
    return client


def allow(port: int, *acls: tuple[ResourceType, str, PatternType, str, Operation]) -> None:
    """ACLs created through CreateAcls by the super user."""
    admin = login(port, "admin")
    answer = admin.call(
        codec.CREATE_ACLS,
        3,
        {
            "creations": [
                {
                    "resource_type": int(rt),
                    "resource_name": name,
                    "resource_pattern_type": int(pt),
                    "principal": who,
                    "host": "*",
                    "operation": int(op),
                    "permission_type": int(Permission.ALLOW),
                }
                for rt, name, pt, who, op in acls
            ]
        },
    )
    assert all(r["error_code"] == 0 for r in answer["results"]), answer
    admin.close()


# --- authentication -------------------------------------------------------------------------


def test_plain_and_scram_authenticate_and_a_wrong_password_is_refused_and_closed(gateway):
    alice = RawClient(gateway.port)
    versions = alice.call(codec.API_VERSIONS, 3, REQUESTS[codec.API_VERSIONS])
    assert versions["error_code"] == 0  # ApiVersions is allowed before SASL, as in Kafka
    assert alice.authenticate("PLAIN", "alice", "alice-secret")["error_code"] == 0
    carol = RawClient(gateway.port)
    assert carol.authenticate("SCRAM-SHA-512", "carol", "carol-secret")["error_code"] == 0
    wrong = RawClient(gateway.port)
    answer = wrong.authenticate("SCRAM-SHA-512", "carol", "nope")
    assert answer["error_code"] == errors.SASL_AUTHENTICATION_FAILED
    assert answer["error_message"] == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-512"
    )
    assert wrong.closed()
    plain_wrong = RawClient(gateway.port)
    answer = plain_wrong.authenticate("PLAIN", "alice", "nope")
    assert (answer["error_code"], answer["error_message"]) == (
        errors.SASL_AUTHENTICATION_FAILED,
        "Authentication failed: Invalid username or password",
    )
    assert plain_wrong.closed()
    # the authenticated connections are untouched, and may not authenticate again
    again = alice.call(codec.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert again["error_code"] == errors.ILLEGAL_SASL_STATE
    answer = carol.call(codec.SASL_AUTHENTICATE, 2, {"auth_bytes": b"x"})
    assert answer["error_code"] == errors.ILLEGAL_SASL_STATE


def test_unknown_mechanism_is_refused_with_the_enabled_ones(gateway):
    client = RawClient(gateway.port)
    answer = client.call(codec.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert answer == {
        "error_code": errors.UNSUPPORTED_SASL_MECHANISM,
        "mechanisms": ["PLAIN", "SCRAM-SHA-512"],
    }
    assert client.closed()


def test_a_client_that_skips_sasl_is_disconnected_unanswered(gateway):
    client = RawClient(gateway.port)
    assert client.call(codec.METADATA, 12, REQUESTS[codec.METADATA]) is None
    assert client.closed()


def test_garbage_in_the_sasl_exchange_closes_only_that_connection(gateway):
    good = login(gateway.port, "alice")
    bare = RawClient(gateway.port)  # handshake v0: tokens follow as bare frames
    assert bare.call(codec.SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
    bare.send(b"\x00\x00\x00\x05\xff\xfe\x00\x01\x02")
    assert bare.read() is None and bare.closed()
    wrapped = RawClient(gateway.port)
    assert wrapped.call(codec.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
    answer = wrapped.call(codec.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\xff garbage"})
    assert answer["error_code"] == errors.SASL_AUTHENTICATION_FAILED
    assert wrapped.closed()
    noise = RawClient(gateway.port)
    noise.send(b"\x00\x00\x00\x0a" + bytes(range(10)))
    assert noise.read() is None
    huge = RawClient(gateway.port)  # beyond Kafka's sasl.server.max.receive.size before SASL
    huge.send((524_289).to_bytes(4, "big"))
    assert huge.read() is None
    assert good.call(codec.LIST_GROUPS, 4, {})["error_code"] == 0


def test_handshake_v0_carries_bare_tokens(gateway):
    client = RawClient(gateway.port)
    assert client.call(codec.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
    token = b"\0alice\0alice-secret"
    client.send(len(token).to_bytes(4, "big") + token)
    assert client.read() == b""  # PLAIN's empty answer, size-prefixed
    assert client.call(codec.LIST_GROUPS, 4, {})["error_code"] == 0


# --- TLS ------------------------------------------------------------------------------------


def test_mutual_tls_principal_is_the_certificates_subject(tmp_path, certificates):
    running = secured(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": certificates.path("server.pem"),
            "ssl.truststore.location": certificates.ca,
            "ssl.client.auth": "required",
            "authorizer.class.name": "x",
            "super.users": CLIENT_PRINCIPAL,
        },
        tmp_path,
    )
    try:
        client = RawClient(running.port, client_context(certificates, with_certificate=True))
        # a super user by its certificate: may list the ACLs
        assert client.call(codec.DESCRIBE_ACLS, 3, REQUESTS[codec.DESCRIBE_ACLS])["error_code"] == 0
        # no certificate: refused in the handshake (TLS 1.3: the client learns it on its first
        # read)
        try:
            anonymous = RawClient(running.port, client_context(certificates))
            assert anonymous.call(codec.API_VERSIONS, 3, REQUESTS[codec.API_VERSIONS]) is None
            anonymous.close()
        except (ssl.SSLError, ConnectionError):
            pass
        noise = socket.create_connection(("127.0.0.1", running.port), timeout=10)
        noise.sendall(b"GET / HTTP/1.0\r\n\r\n" + bytes(range(256)))
        with contextlib.suppress(ConnectionError):
            while noise.recv(100):  # a TLS alert, then closed
                pass
        noise.close()
        assert client.call(codec.LIST_GROUPS, 4, {})["error_code"] == 0
        client.close()
    finally:
        running.stop()


def test_inline_pem_keystore_and_sasl_ssl(tmp_path, certificates):
    key = Path(certificates.path("server.key")).read_text()
    chain = Path(certificates.path("server.crt")).read_text()
    properties = sasl_properties("SASL_SSL")
    properties["ssl.keystore.key"] = " ".join(key.split("\n"))  # as a continued line reads
    properties["ssl.keystore.certificate.chain"] = " ".join(chain.split("\n"))
    running = secured(properties, tmp_path)
    try:
        client = RawClient(running.port, client_context(certificates))
        assert client.authenticate("PLAIN", "alice", "alice-secret")["error_code"] == 0
    finally:
        running.stop()


# --- authorization --------------------------------------------------------------------------

G, T = ResourceType.GROUP, ResourceType.TOPIC
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def join(client: RawClient, group: str) -> int:
    body = {**REQUESTS[codec.JOIN_GROUP], "group_id": group}
    return int(client.call(codec.JOIN_GROUP, 3, body)["error_code"])


def test_group_apis_need_read_on_the_group(gateway):
    alice = login(gateway.port, "alice")
    assert join(alice, "g1") == errors.GROUP_AUTHORIZATION_FAILED
    for key in (codec.SYNC_GROUP, codec.HEARTBEAT, codec.LEAVE_GROUP):
        body = {**REQUESTS[key], "group_id": "g1"}
        assert alice.call(key, 3, body)["error_code"] == errors.GROUP_AUTHORIZATION_FAILED
    allow(gateway.port, (G, "g1", LIT, "User:alice", Operation.READ))
    assert join(alice, "g1") == 0
    admin = login(gateway.port, "admin")
    assert join(admin, "anything") == 0  # a super user


def test_consumer_group_apis_need_read_and_describe_on_the_group(gateway):
    """ConsumerGroupHeartbeat: READ on the group; ConsumerGroupDescribe: DESCRIBE per group."""
    alice = login(gateway.port, "alice")
    heartbeat = {**REQUESTS[codec.CONSUMER_GROUP_HEARTBEAT], "group_id": "cg1"}
    denied = alice.call(codec.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat)
    assert denied["error_code"] == errors.GROUP_AUTHORIZATION_FAILED
    describe = {"group_ids": ["cg1", "cg2"], "include_authorized_operations": True}
    answer = alice.call(codec.CONSUMER_GROUP_DESCRIBE, 1, describe)
    assert [g["error_code"] for g in answer["groups"]] == [errors.GROUP_AUTHORIZATION_FAILED] * 2
    allow(
        gateway.port,
        (G, "cg1", LIT, "User:alice", Operation.READ),
        (G, "cg1", LIT, "User:alice", Operation.DESCRIBE),
    )
    joined = alice.call(codec.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat)
    assert (joined["error_code"], joined["member_epoch"]) == (0, 1), joined
    answer = alice.call(codec.CONSUMER_GROUP_DESCRIBE, 1, describe)
    ok, refused = answer["groups"]
    assert ok["error_code"] == 0 and ok["group_state"] == "Stable"
    assert ok["authorized_operations"] != -(2**31)
    assert refused["error_code"] == errors.GROUP_AUTHORIZATION_FAILED


def test_deny_wins_and_prefixed_patterns(gateway):
    allow(
        gateway.port,
        (G, "team-", PRE, "User:bob", Operation.READ),
        (G, "team-secret", LIT, "User:bob", Operation.READ),
    )
    bob = login(gateway.port, "bob")
    assert join(bob, "team-x") == 0
    assert join(bob, "other") == errors.GROUP_AUTHORIZATION_FAILED
    admin = login(gateway.port, "admin")
    deny = {
        "resource_type": int(G),
        "resource_name": "team-secret",
        "resource_pattern_type": int(LIT),
        "principal": "User:bob",
        "host": "*",
        "operation": int(Operation.ALL),
        "permission_type": int(Permission.DENY),
    }
    assert admin.call(codec.CREATE_ACLS, 3, {"creations": [deny]})["results"][0]["error_code"] == 0
    assert join(bob, "team-secret") == errors.GROUP_AUTHORIZATION_FAILED
    assert join(bob, "team-y") == 0


def test_offset_apis_answer_per_partition_as_kafka(gateway):
    allow(
        gateway.port,
        (G, "g", LIT, "User:alice", Operation.READ),
        (T, "t", LIT, "User:alice", Operation.READ),
    )
    alice = login(gateway.port, "alice")
    commit = {
        **REQUESTS[codec.OFFSET_COMMIT],
        "topics": [
            {
                "name": n,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                ],
            }
            for n in ("t", "other")
        ],
    }
    answer = alice.call(codec.OFFSET_COMMIT, 8, commit)
    codes = {t["name"]: t["partitions"][0]["error_code"] for t in answer["topics"]}
    assert codes == {"t": 0, "other": errors.TOPIC_AUTHORIZATION_FAILED}
    admin = login(gateway.port, "admin")
    assert (
        admin.call(codec.OFFSET_COMMIT, 8, commit)["topics"][1]["partitions"][0]["error_code"] == 0
    )
    named = {
        "group_id": "g",
        "topics": [{"name": n, "partition_indexes": [0]} for n in ("t", "other")],
    }
    answer = alice.call(codec.OFFSET_FETCH, 7, named)
    fetched = {t["name"]: t["partitions"][0] for t in answer["topics"]}
    assert fetched["t"]["committed_offset"] == 5
    assert (fetched["other"]["committed_offset"], fetched["other"]["error_code"]) == (
        -1,
        errors.TOPIC_AUTHORIZATION_FAILED,
    )
    every = alice.call(codec.OFFSET_FETCH, 8, {"groups": [{"group_id": "g", "topics": None}]})
    assert [t["name"] for t in every["groups"][0]["topics"]] == ["t"]  # "other" left out
    bob = login(gateway.port, "bob")
    answer = bob.call(codec.OFFSET_FETCH, 7, named)
    assert answer["error_code"] == errors.GROUP_AUTHORIZATION_FAILED and answer["topics"] == []
    # OffsetDelete: DELETE on the group first
    delete = {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    assert alice.call(codec.OFFSET_DELETE, 0, delete)["error_code"] == (
        errors.GROUP_AUTHORIZATION_FAILED
    )


def test_describe_list_delete_find_and_metadata_show_only_what_may_be_described(gateway):
    admin = login(gateway.port, "admin")
    assert join(admin, "visible") == 0
    assert join(admin, "hidden") == 0
    allow(
        gateway.port,
        (G, "visible", LIT, "User:alice", Operation.DESCRIBE),
        (T, "t", LIT, "User:alice", Operation.DESCRIBE),
    )
    alice = login(gateway.port, "alice")
    listed = alice.call(codec.LIST_GROUPS, 4, {})
    assert [g["group_id"] for g in listed["groups"]] == ["visible"]
    assert {g["group_id"] for g in admin.call(codec.LIST_GROUPS, 4, {})["groups"]} == {
        "visible",
        "hidden",
    }
    described = alice.call(
        codec.DESCRIBE_GROUPS,
        5,
        {"groups": ["visible", "hidden"], "include_authorized_operations": True},
    )
    by_id = {g["group_id"]: g for g in described["groups"]}
    assert by_id["hidden"]["error_code"] == errors.GROUP_AUTHORIZATION_FAILED
    assert by_id["visible"]["error_code"] == 0
    assert by_id["visible"]["authorized_operations"] == 1 << Operation.DESCRIBE
    deleted = alice.call(codec.DELETE_GROUPS, 2, {"groups_names": ["visible"]})
    assert deleted["results"] == [
        {"group_id": "visible", "error_code": errors.GROUP_AUTHORIZATION_FAILED}
    ]
    found = alice.call(
        codec.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["visible", "hidden"]}
    )
    assert [c["error_code"] for c in found["coordinators"]] == [
        0,
        errors.GROUP_AUTHORIZATION_FAILED,
    ]
    found = alice.call(codec.FIND_COORDINATOR, 3, {"key": "hidden", "key_type": 0})
    assert (found["error_code"], found["node_id"]) == (errors.GROUP_AUTHORIZATION_FAILED, -1)
    every = alice.call(codec.METADATA, 12, {**REQUESTS[codec.METADATA], "topics": None})
    assert [t["name"] for t in every["topics"]] == ["t"]
    named = alice.call(
        codec.METADATA,
        12,
        {**REQUESTS[codec.METADATA], "topics": [{"name": "other", "topic_id": None}]},
    )
    assert named["topics"][0]["error_code"] == errors.TOPIC_AUTHORIZATION_FAILED
    assert named["topics"][0]["partitions"] == []
    fetch = alice.call(
        codec.FETCH,
        12,
        {
            **REQUESTS[codec.FETCH],
            "topics": [
                {
                    "topic": n,
                    "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}],
                }
                for n in ("t", "__consumer_offsets")
            ],
        },
    )
    codes = {t["topic"]: t["partitions"][0]["error_code"] for t in fetch["responses"]}
    assert codes["__consumer_offsets"] == errors.TOPIC_AUTHORIZATION_FAILED
    assert codes["t"] != errors.TOPIC_AUTHORIZATION_FAILED or True  # DESCRIBE is not READ


def test_acl_and_scram_admin_apis_need_the_cluster(gateway):
    alice = login(gateway.port, "alice")
    answer = alice.call(codec.DESCRIBE_ACLS, 3, REQUESTS[codec.DESCRIBE_ACLS])
    assert answer["error_code"] == errors.CLUSTER_AUTHORIZATION_FAILED
    answer = alice.call(codec.CREATE_ACLS, 3, REQUESTS[codec.CREATE_ACLS])
    assert answer["results"][0]["error_code"] == errors.CLUSTER_AUTHORIZATION_FAILED
    answer = alice.call(codec.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    assert answer["error_code"] == errors.CLUSTER_AUTHORIZATION_FAILED
    admin = login(gateway.port, "admin")
    answer = admin.call(
        codec.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "carol"}, {"name": "nobody"}]}
    )
    results = {r["user"]: r for r in answer["results"]}
    assert results["carol"]["credential_infos"] == [{"mechanism": 2, "iterations": 4096}]
    assert results["nobody"]["error_code"] == errors.RESOURCE_NOT_FOUND
    upsert = {
        "name": "dave",
        "mechanism": 2,
        "iterations": 4096,
        "salt": b"salt" * 4,
        "salted_password": b"\x01" * 64,
    }
    answer = admin.call(
        codec.ALTER_USER_SCRAM_CREDENTIALS,
        0,
        {
            "deletions": [{"name": "nobody", "mechanism": 2}],
            "upsertions": [upsert, {**upsert, "name": "erin", "iterations": 10}],
        },
    )
    codes = {r["user"]: r["error_code"] for r in answer["results"]}
    assert codes == {
        "dave": 0,
        "nobody": errors.RESOURCE_NOT_FOUND,
        "erin": errors.UNACCEPTABLE_CREDENTIAL,
    }
    invalid = {
        **REQUESTS[codec.CREATE_ACLS]["creations"][0],
        "resource_type": 4,
        "resource_name": "not-the-cluster",
    }
    answer = admin.call(codec.CREATE_ACLS, 3, {"creations": [invalid]})
    assert answer["results"][0]["error_code"] == errors.INVALID_REQUEST
    deleted = admin.call(codec.DELETE_ACLS, 3, REQUESTS[codec.DELETE_ACLS])
    assert deleted["filter_results"][0]["error_code"] == 0


def test_without_an_authorizer_everything_is_allowed_and_acl_apis_are_disabled(tmp_path):
    properties = sasl_properties()
    del properties["authorizer.class.name"]
    running = secured(properties, tmp_path)
    try:
        alice = login(running.port, "alice")
        assert join(alice, "g") == 0
        answer = alice.call(codec.DESCRIBE_ACLS, 3, REQUESTS[codec.DESCRIBE_ACLS])
        assert answer["error_code"] == errors.SECURITY_DISABLED
    finally:
        running.stop()


# --- the command line -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("sasl.kerberos.service.name=kafka", r"not a gateway setting: sasl\.kerberos"),
        ("ssl.keystore.type=JKS", "only PEM"),
        ("listeners=SASL_SSL://127.0.0.1:0\nsasl.enabled.mechanisms=SCRAM-SHA-512", "ssl.keystore"),
        ("listener.name.other.plain.sasl.jaas.config=x required;", "no listener other"),
        ("upstream.security.protocol=SSL", "needs an upstream"),
    ],
)
def test_gateway_refuses_security_settings_it_does_not_serve_by_name(tmp_path, lines, message):
    from coordinator.cli import build_parser
    from coordinator.gateway.cli import run

    conf = tmp_path / "gateway.properties"
    conf.write_text(lines + "\n")
    args = build_parser().parse_args(["gateway", "--gateway-conf", str(conf)])
    with pytest.raises(ValueError, match=message):
        run(args)


def test_properties_continue_lines_as_java_reads_them(tmp_path):
    from coordinator.cli.settings import read_properties

    conf = tmp_path / "gateway.properties"
    conf.write_text(
        "ssl.keystore.key=-----BEGIN PRIVATE KEY----- \\\n    MIIB \\\n"
        "    -----END PRIVATE KEY-----\nnext=1\n"
    )
    assert read_properties(conf) == {
        "ssl.keystore.key": "-----BEGIN PRIVATE KEY----- MIIB -----END PRIVATE KEY-----",
        "next": "1",
    }


def test_acls_and_scram_commands_change_the_warehouse(tmp_path, capsys):
    from coordinator.cli import main

    warehouse = str(tmp_path)
    assert (
        main(
            [
                "acls",
                "--warehouse",
                warehouse,
                "--add",
                "--allow-principal",
                "User:alice",
                "--operation",
                "Read",
                "--operation",
                "Describe",
                "--group",
                "team-",
                "--resource-pattern-type",
                "prefixed",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "acls",
                "--warehouse",
                warehouse,
                "--add",
                "--deny-principal",
                "User:bob",
                "--deny-host",
                "10.0.0.1",
                "--cluster",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "acls",
                "--warehouse",
                warehouse,
                "--list",
                "--group",
                "team-a",
                "--resource-pattern-type",
                "match",
            ]
        )
        == 0
    )
    shown = capsys.readouterr().out
    assert "ResourcePattern(resourceType=GROUP, name=team-, patternType=PREFIXED)" in shown
    assert "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)" in shown
    assert "bob" not in shown
    assert main(["acls", "--warehouse", warehouse, "--remove", "--cluster", "--force"]) == 0
    assert [a.principal for a in SecurityStore(warehouse).acls()] == ["User:alice"] * 2
    assert (
        main(
            [
                "acls",
                "--warehouse",
                warehouse,
                "--add",
                "--allow-principal",
                "alice",
                "--group",
                "g",
            ]
        )
        == 2
    )  # not TYPE:NAME: refused, nothing added
    assert len(SecurityStore(warehouse).acls()) == 2
    assert (
        main(
            [
                "scram",
                "--warehouse",
                warehouse,
                "--add-scram",
                "SCRAM-SHA-256=[name=alice,password=pw,iterations=4096]",
            ]
        )
        == 0
    )
    credential = SecurityStore(warehouse).credential("alice", "SCRAM-SHA-256")
    assert credential is not None and credential.iterations == 4096
    assert (
        main(
            [
                "scram",
                "--warehouse",
                warehouse,
                "--add-scram",
                "SCRAM-SHA-256=[name=bob,password=pw,iterations=10]",
            ]
        )
        == 2
    )
    assert (
        main(["scram", "--warehouse", warehouse, "--delete-scram", "SCRAM-SHA-256=[name=alice]"])
        == 0
    )
    assert SecurityStore(warehouse).credentials() == {}


def test_with_the_job_back_end_only_authorized_requests_reach_the_inbox(tmp_path):
    """The gateway authorizes before it forwards: a refused request writes nothing into the
    job's inbox (the job's micro-batch runs without Spark here)."""
    from coordinator.gateway.forwarding import JobBackend
    from tests.test_gateway_backends import LocalJobLoop

    warehouse = tmp_path / "wh"
    loop = LocalJobLoop(warehouse)
    running = secured(
        sasl_properties(), warehouse, backend=JobBackend(warehouse, poll_interval_ms=20)
    )
    try:
        backend = running.gateway.backend
        alice = login(running.port, "alice")
        before = backend.files_written
        answer = alice.call(codec.OFFSET_COMMIT, 8, REQUESTS[codec.OFFSET_COMMIT])
        assert answer["topics"][0]["partitions"][0]["error_code"] == (
            errors.GROUP_AUTHORIZATION_FAILED
        )
        assert join(alice, "g") == errors.GROUP_AUTHORIZATION_FAILED
        assert backend.files_written == before  # nothing reached the job
        allow(
            running.port,
            (G, "g", LIT, "User:alice", Operation.READ),
            (T, "t", LIT, "User:alice", Operation.READ),
        )
        answer = alice.call(codec.OFFSET_COMMIT, 8, REQUESTS[codec.OFFSET_COMMIT])
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0  # the job committed it
        assert backend.files_written > before
    finally:
        running.stop()
        loop.stop()


def test_principal_mapping_rules_name_certificate_clients(tmp_path, certificates):
    def gateway_with(rules: str) -> Any:
        return secured(
            {
                "listeners": "SSL://127.0.0.1:0",
                "ssl.keystore.location": certificates.path("server.pem"),
                "ssl.truststore.location": certificates.ca,
                "ssl.client.auth": "required",
                "ssl.principal.mapping.rules": rules,
                "authorizer.class.name": "x",
                "super.users": "User:alice",
            },
            tmp_path,
        )

    running = gateway_with("RULE:^CN=([^,]*),OU=eng,.*$/$1/L, DEFAULT")
    try:
        client = RawClient(running.port, client_context(certificates, with_certificate=True))
        assert client.call(codec.DESCRIBE_ACLS, 3, REQUESTS[codec.DESCRIBE_ACLS])["error_code"] == 0
        client.close()
    finally:
        running.stop()
    running = gateway_with("RULE:^CN=([^,]*),OU=ops,.*$/$1/")  # no rule applies: refused
    try:
        client = RawClient(running.port, client_context(certificates, with_certificate=True))
        assert client.call(codec.API_VERSIONS, 3, REQUESTS[codec.API_VERSIONS]) is None
    finally:
        running.stop()


def test_a_failed_authentication_is_answered_after_the_configured_delay(tmp_path):
    running = secured(
        sasl_properties(**{"connection.failed.authentication.delay.ms": "300"}), tmp_path
    )
    try:
        client = RawClient(running.port)
        started = time.monotonic()
        answer = client.authenticate("PLAIN", "alice", "wrong")
        assert answer["error_code"] == errors.SASL_AUTHENTICATION_FAILED
        assert time.monotonic() - started >= 0.3
        good = RawClient(running.port)
        started = time.monotonic()
        assert good.authenticate("PLAIN", "alice", "alice-secret")["error_code"] == 0
        assert time.monotonic() - started < 0.3
    finally:
        running.stop()


def test_several_listeners_each_with_its_protocol_and_its_own_address(tmp_path):
    """Kafka's internal PLAINTEXT plus external SASL listeners: each connection authenticates
    as its listener says, and Metadata and FindCoordinator name the listener it came in on."""
    properties = sasl_properties()
    properties["listeners"] = "INTERNAL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    properties["listener.security.protocol.map"] = "INTERNAL:PLAINTEXT"
    properties["super.users"] = "User:admin;User:ANONYMOUS"  # the internal listener's clients
    running = secured(properties, tmp_path)
    try:
        internal = RawClient(running.port)
        assert join(internal, "any") == 0  # ANONYMOUS, a super user here
        external_port = running.gateway.listener_ports["SASL_PLAINTEXT"]
        assert external_port != running.port
        assert RawClient(external_port).call(codec.LIST_GROUPS, 4, {}) is None  # SASL first
        alice = login(external_port, "alice")
        metadata = alice.call(codec.METADATA, 12, {**REQUESTS[codec.METADATA], "topics": None})
        assert [(b["host"], b["port"]) for b in metadata["brokers"]] == [
            ("127.0.0.1", external_port)
        ]
        allow(external_port, (G, "g", LIT, "User:alice", Operation.DESCRIBE))
        found = alice.call(codec.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert (found["error_code"], found["port"]) == (0, external_port)
        found = internal.call(codec.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        assert found["coordinators"][0]["port"] == running.port
    finally:
        running.stop()


def test_authentications_and_refusals_are_counted(tmp_path):
    from prometheus_client import CollectorRegistry

    from coordinator.metrics.gateway import GatewayMetrics
    from tests.gateway_support import until

    registry = CollectorRegistry()
    running = secured(sasl_properties(), tmp_path, metrics=GatewayMetrics(registry))
    try:
        alice = login(running.port, "alice")
        RawClient(running.port).authenticate("PLAIN", "alice", "wrong")
        assert join(alice, "g") == errors.GROUP_AUTHORIZATION_FAILED

        def value(name: str, **labels: str) -> float | None:
            return registry.get_sample_value(name, labels)

        assert until(
            lambda: (
                value(
                    "coordinator_gateway_authentications_total", mechanism="PLAIN", result="failure"
                )
                == 1
            ),
            10,
        )
        assert (
            value("coordinator_gateway_authentications_total", mechanism="PLAIN", result="success")
            == 1
        )
        assert (
            value(
                "coordinator_gateway_requests_total",
                api="JoinGroup",
                error="group_authorization_failed",
            )
            == 1
        )
    finally:
        running.stop()


def test_acls_command_through_a_gateways_admin_apis(tmp_path, capsys, certificates):
    """``coordinator acls --bootstrap-server`` with a Kafka client's --command-config, as
    kafka-acls.sh is used: SASL_SSL as the super user adds, lists and removes."""
    from coordinator.cli import main

    running = secured(
        {
            **sasl_properties("SASL_SSL"),
            "ssl.keystore.location": certificates.path("server.pem"),
        },
        tmp_path,
    )
    try:
        conf = tmp_path / "admin.properties"
        conf.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="admin" password="admin-secret";\n'
            f"ssl.truststore.location={certificates.ca}\n"
        )
        server = ["--bootstrap-server", f"127.0.0.1:{running.port}", "--command-config", str(conf)]
        assert (
            main(
                [
                    "acls",
                    *server,
                    "--add",
                    "--allow-principal",
                    "User:alice",
                    "--operation",
                    "Read",
                    "--topic",
                    "orders",
                ]
            )
            == 0
        )
        capsys.readouterr()
        assert main(["acls", *server, "--list"]) == 0
        assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in (
            capsys.readouterr().out
        )
        assert [a.resource_name for a in SecurityStore(tmp_path).acls()] == ["orders"]
        assert main(["acls", *server, "--remove", "--topic", "orders"]) == 0
        assert SecurityStore(tmp_path).acls() == []
        conf.write_text(conf.read_text().replace("admin-secret", "wrong"))
        assert main(["acls", *server, "--list"]) == 2  # refused: an error, not a crash
        conf.write_text("client.id=x\n")
        assert main(["acls", *server, "--list"]) == 2
    finally:
        running.stop()


def test_scram_sha_256_with_each_sasl_authenticate_version(tmp_path):
    from coordinator.security.scram import SCRAM_SHA_256

    SecurityStore(tmp_path).alter_scram(
        [("dan", ScramCredential.from_password(SCRAM_SHA_256, "dan-secret", b"t" * 16, 4096))],
        [],
    )
    running = secured(
        {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256"},
        tmp_path,
    )
    try:
        from coordinator.security.scram import MECHANISMS, ScramClient

        for version in (0, 1, 2):
            client = RawClient(running.port)
            handshake = client.call(codec.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
            assert handshake == {"error_code": 0, "mechanisms": ["SCRAM-SHA-256"]}
            scram = ScramClient(MECHANISMS["SCRAM-SHA-256"], "dan", "dan-secret", f"n{version}")
            first = client.call(codec.SASL_AUTHENTICATE, version, {"auth_bytes": scram.first()})
            final_token = scram.final(first["auth_bytes"])
            final = client.call(codec.SASL_AUTHENTICATE, version, {"auth_bytes": final_token})
            assert final["error_code"] == 0
            scram.verify(final["auth_bytes"])
            assert client.call(codec.LIST_GROUPS, 4, {})["error_code"] == 0
            client.close()
    finally:
        running.stop()
