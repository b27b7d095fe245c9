"""Real clients configured for a secured Kafka, unchanged, against the gateway: kafka-python
3.0.12, aiokafka 0.14 and confluent-kafka 2.16 (librdkafka) over SASL_SSL with SCRAM-SHA-512,
SASL_PLAINTEXT with PLAIN and mutual TLS, each forming a group of two and committing; users
and ACLs managed with confluent-kafka's and kafka-python's admin clients and with
``coordinator acls``/``coordinator scram``; Kafka's refusals as each client reports them."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli import main as cli
from coordinator.gateway import codec
from tests import client_scenarios as sc
from tests.gateway_support import REQUESTS
from tests.security_support import (
    CLIENT_PRINCIPAL,
    Certificates,
    RawClient,
    make_certificates,
    secured,
)

CLIENTS = ["kafka-python", "aiokafka", "confluent-kafka"]
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)
SETTLE_S = 60


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def client_options(
    client: str,
    protocol: str,
    certificates: Certificates | None = None,
    mechanism: str | None = None,
    user: str | None = None,
    password: str | None = None,
    with_certificate: bool = False,
) -> dict[str, Any]:
    """The settings a client of a secured Kafka has, in the client's own names."""
    ca = certificates.ca if certificates is not None else None
    cert = certificates.path("client.crt") if certificates and with_certificate else None
    key = certificates.path("client.key") if certificates and with_certificate else None
    if client == "confluent-kafka":
        options = {"security.protocol": protocol}
        if mechanism:
            options.update(
                {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
            )
        if ca:
            options["ssl.ca.location"] = ca
        if cert:
            options.update({"ssl.certificate.location": cert, "ssl.key.location": key})
        return options
    options = {"security_protocol": protocol}
    if mechanism:
        options.update(
            {
                "sasl_mechanism": mechanism,
                "sasl_plain_username": user,
                "sasl_plain_password": password,
            }
        )
    if client == "aiokafka":
        if ca:
            from aiokafka.helpers import create_ssl_context

            options["ssl_context"] = create_ssl_context(cafile=ca, certfile=cert, keyfile=key)
        return options
    if ca:
        options["ssl_cafile"] = ca
    if cert:
        options.update({"ssl_certfile": cert, "ssl_keyfile": key})
    return options


def form_group_and_commit(client: str, port: int, group: str, options: dict[str, Any]) -> None:
    """Two members of ``client`` form ``group`` (disjoint cover of topic t's 6 partitions);
    the first commits its partitions and reads the offsets back."""
    members = [sc.CLIENTS[client](port, group, f"{group}-{i}", options=options) for i in range(2)]
    try:
        sc.wait_for(
            lambda: sc.disjoint_cover(list(members)) and all(m.partitions() for m in members),
            SETTLE_S,
            lambda: (sc.shares(list(members)), [m.error for m in members]),
        )
        first = members[0]
        offsets = {tp: 10 + tp[1] for tp in first.assigned()}
        first.commit(offsets)
        assert first.committed(offsets) == offsets
    finally:
        for member in members:
            member.close()


def sasl_ssl_properties(certificates: Certificates) -> dict[str, str]:
    return {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": certificates.path("server.pem"),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }


def confluent_admin(port: int, options: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0, **options})


def kafka_python_admin(port: int, options: dict[str, Any]) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", **options)


def results(futures: dict[Any, Any]) -> list[Any]:
    return [f.result(timeout=30) for f in futures.values()]


@pytest.mark.slow
@pytest.mark.parametrize("client", CLIENTS)
def test_scram_sha_512_over_sasl_ssl_forms_a_group_and_commits(
    client: str, tmp_path: Path, certificates: Certificates
):
    """The super user (PLAIN) creates alice's SCRAM credential and her ACLs with an admin
    client; the gateway restarts (the credential is the warehouse's); alice's consumers, with
    SCRAM-SHA-512 over TLS, form a group and commit."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    properties = sasl_ssl_properties(certificates)
    running = secured(properties, tmp_path)
    admin_options = client_options(
        "confluent-kafka", "SASL_SSL", certificates, "PLAIN", "admin", "admin-secret"
    )
    admin = confluent_admin(running.port, admin_options)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    assert results(
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("alice", info, b"alice-secret")]
        )
    ) == [None]
    if client == "confluent-kafka":
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        results(
            admin.create_acls(
                [
                    AclBinding(
                        ResourceType.GROUP,
                        "scram-",
                        ResourcePatternType.PREFIXED,
                        "User:alice",
                        "*",
                        AclOperation.READ,
                        AclPermissionType.ALLOW,
                    ),
                    AclBinding(
                        ResourceType.TOPIC,
                        "t",
                        ResourcePatternType.LITERAL,
                        "User:alice",
                        "*",
                        AclOperation.READ,
                        AclPermissionType.ALLOW,
                    ),
                ]
            )
        )
    else:
        from kafka.admin import (
            ACL,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePattern,
            ResourceType,
        )

        kp_admin = kafka_python_admin(
            running.port,
            client_options(
                "kafka-python", "SASL_SSL", certificates, "PLAIN", "admin", "admin-secret"
            ),
        )
        answer = kp_admin.create_acls(
            [
                ACL(
                    "User:alice",
                    "*",
                    ACLOperation.READ,
                    ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.GROUP, "scram-", ACLResourcePatternType.PREFIXED),
                ),
                ACL(
                    "User:alice",
                    "*",
                    ACLOperation.READ,
                    ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, "t"),
                ),
            ]
        )
        assert not answer["failed"], answer
        from kafka.admin import ACLFilter, ResourcePatternFilter

        everything = ACLFilter(
            "User:alice",
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        listed, error = kp_admin.describe_acls(everything)
        assert len(listed) == 2 and error.errno == 0, (listed, error)
        nothing = ACLFilter(
            "User:nobody",
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        [(_, deleted, error)] = kp_admin.delete_acls([nothing])
        assert deleted == [] and error.errno == 0
        kp_admin.close()
    running.stop()

    running = secured(properties, tmp_path)  # the same warehouse: credentials and ACLs kept
    try:
        admin = confluent_admin(running.port, admin_options)
        described = admin.describe_user_scram_credentials(["alice"])
        [description] = (
            results(described)
            if isinstance(described, dict)
            else [described.result(timeout=30)["alice"]]
        )
        assert [(i.mechanism, i.iterations) for i in description.scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_512, 8192)
        ]
        options = client_options(
            client, "SASL_SSL", certificates, "SCRAM-SHA-512", "alice", "alice-secret"
        )
        form_group_and_commit(client, running.port, f"scram-{client}", options)
    finally:
        running.stop()


@pytest.mark.slow
@pytest.mark.parametrize("client", CLIENTS)
def test_plain_over_sasl_plaintext_forms_a_group_and_commits(client: str):
    running = secured(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        }
    )
    try:
        options = client_options(client, "SASL_PLAINTEXT", None, "PLAIN", "alice", "alice-secret")
        form_group_and_commit(client, running.port, f"plain-{client}", options)
    finally:
        running.stop()


@pytest.mark.slow
@pytest.mark.parametrize("client", CLIENTS)
def test_mutual_tls_forms_a_group_and_commits(
    client: str, tmp_path: Path, certificates: Certificates
):
    """The principal is the client certificate's subject in Kafka's form; its ACLs are set
    up beforehand with ``coordinator acls``."""
    warehouse = str(tmp_path / "warehouse")
    for args in (["--group", "tls-", "--resource-pattern-type", "prefixed"], ["--topic", "t"]):
        assert (
            cli(
                [
                    "acls",
                    "--warehouse",
                    warehouse,
                    "--add",
                    "--allow-principal",
                    CLIENT_PRINCIPAL,
                    "--operation",
                    "Read",
                    *args,
                ]
            )
            == 0
        )
    running = secured(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.location": certificates.path("server.pem"),
            "ssl.truststore.location": certificates.ca,
            "ssl.client.auth": "required",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        },
        warehouse,
    )
    try:
        options = client_options(client, "SSL", certificates, with_certificate=True)
        form_group_and_commit(client, running.port, f"tls-{client}", options)
    finally:
        running.stop()


@pytest.fixture
def plain_gateway(tmp_path: Path) -> Iterator[Any]:
    running = secured(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "authorizer.class.name": "x",
            "super.users": "User:admin",
        },
        tmp_path,
    )
    yield running
    running.stop()


def _kafka_python_poll_error(port: int, group: str, password: str = "alice-secret") -> Any:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        "t",
        bootstrap_servers=f"127.0.0.1:{port}",
        group_id=group,
        enable_auto_commit=False,
        **client_options("kafka-python", "SASL_PLAINTEXT", None, "PLAIN", "alice", password),
    )
    try:
        for _ in range(100):
            consumer.poll(timeout_ms=200)
        return None
    except Exception as exc:  # what the application sees
        return exc
    finally:
        consumer.close()


@pytest.mark.slow
def test_acls_through_the_admin_clients_decide_what_clients_may_do(plain_gateway):
    """No ACL: Kafka's error; an ACL created by an admin client: allowed; a DENY over an ALLOW:
    denied; the super user needs no ACL; a prefixed pattern covers its groups."""
    import kafka.errors
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    port = plain_gateway.port
    admin = confluent_admin(
        port,
        client_options("confluent-kafka", "SASL_PLAINTEXT", None, "PLAIN", "admin", "admin-secret"),
    )

    def acl(rt: Any, name: str, pattern: Any, op: Any, permission: Any) -> Any:
        return AclBinding(rt, name, pattern, "User:alice", "*", op, permission)

    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    lit, pre = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    results(admin.create_acls([acl(ResourceType.TOPIC, "t", lit, AclOperation.READ, allow)]))
    error = _kafka_python_poll_error(port, "acl-g")
    assert isinstance(error, kafka.errors.GroupAuthorizationFailedError), error

    results(admin.create_acls([acl(ResourceType.GROUP, "acl-", pre, AclOperation.READ, allow)]))
    options = client_options(
        "kafka-python", "SASL_PLAINTEXT", None, "PLAIN", "alice", "alice-secret"
    )
    form_group_and_commit("kafka-python", port, "acl-g", options)  # the prefixed ALLOW

    results(admin.create_acls([acl(ResourceType.GROUP, "acl-g", lit, AclOperation.ALL, deny)]))
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "group.id": "acl-g",
            "log_level": 0,
            **client_options(
                "confluent-kafka", "SASL_PLAINTEXT", None, "PLAIN", "alice", "alice-secret"
            ),
        }
    )
    consumer.subscribe(["t"])
    try:
        codes = set()
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and message.error() is not None:
                codes.add(message.error().code())
                if KafkaError.GROUP_AUTHORIZATION_FAILED in codes:
                    break
        assert KafkaError.GROUP_AUTHORIZATION_FAILED in codes, codes
    finally:
        consumer.close()

    listed = admin.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            "User:alice",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=30)
    assert len(listed) == 3
    super_options = client_options(
        "confluent-kafka", "SASL_PLAINTEXT", None, "PLAIN", "admin", "admin-secret"
    )
    form_group_and_commit("confluent-kafka", port, "acl-g", super_options)  # a super user
    deleted = results(
        admin.delete_acls(
            [
                AclBindingFilter(
                    ResourceType.GROUP,
                    None,
                    ResourcePatternType.ANY,
                    None,
                    None,
                    AclOperation.ANY,
                    AclPermissionType.DENY,
                )
            ]
        )
    )
    assert len(deleted[0]) == 1


def _confluent_errors(port: int, options: dict[str, Any]) -> list[Any]:
    """The errors librdkafka reports to the application (error_cb) while it tries to use
    the gateway with ``options``."""
    from confluent_kafka.admin import AdminClient

    seen: list[Any] = []
    admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "log_level": 0,
            "error_cb": seen.append,
            **options,
        }
    )
    sc.wait_for(lambda: (admin.poll(0.1), bool(seen))[1], 30, lambda: seen)
    return seen


@pytest.mark.slow
def test_wrong_password_unknown_mechanism_and_skipped_sasl_as_a_client_reports_them(
    plain_gateway,
):
    from confluent_kafka import KafkaError

    port = plain_gateway.port
    seen = _confluent_errors(
        port, client_options("confluent-kafka", "SASL_PLAINTEXT", None, "PLAIN", "alice", "wrong")
    )
    assert seen[0].code() == KafkaError._AUTHENTICATION
    assert "Authentication failed: Invalid username or password" in seen[0].str()
    seen = _confluent_errors(
        port,
        client_options(
            "confluent-kafka", "SASL_PLAINTEXT", None, "SCRAM-SHA-256", "alice", "alice-secret"
        ),
    )
    assert seen[0].code() == KafkaError._AUTHENTICATION
    assert "SCRAM-SHA-256" in seen[0].str() and "PLAIN" in seen[0].str()
    # configured without SASL: disconnected after ApiVersions, on its first other request
    seen = _confluent_errors(port, {"security.protocol": "PLAINTEXT"})
    assert {e.code() for e in seen} <= {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}


@pytest.mark.slow
@pytest.mark.parametrize("client", CLIENTS)
def test_clients_of_a_second_listener_stay_on_it(
    client: str, tmp_path: Path, certificates: Certificates
):
    """An internal PLAINTEXT listener first and an external SASL_SSL one: clients bootstrapped
    on the external one are sent (Metadata, FindCoordinator) to the external one only."""
    properties = sasl_ssl_properties(certificates)
    properties["listeners"] = "INTERNAL://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
    properties["listener.security.protocol.map"] = "INTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL"
    del properties["authorizer.class.name"]
    running = secured(properties, tmp_path)
    try:
        port = running.gateway.listener_ports["SASL_SSL"]
        options = client_options(client, "SASL_SSL", certificates, "PLAIN", "alice", "alice-secret")
        form_group_and_commit(client, port, f"external-{client}", options)
    finally:
        running.stop()


@pytest.mark.slow
def test_the_gateway_command_serves_its_listeners_from_the_properties(
    tmp_path: Path, certificates: Certificates
):
    """``coordinator gateway --gateway-conf``: ``listeners`` replaces --listen, SCRAM users
    come from the log warehouse's store (set with ``coordinator scram``), ACLs are enforced."""

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    warehouse = tmp_path / "gw"
    assert (
        cli(
            [
                "scram",
                "--warehouse",
                str(warehouse),
                "--add-scram",
                "SCRAM-SHA-512=[name=alice,password=alice-secret,iterations=4096]",
            ]
        )
        == 0
    )
    conf = tmp_path / "gateway.properties"
    conf.write_text(
        f"listeners=SASL_SSL://127.0.0.1:{port}\n"
        "sasl.enabled.mechanisms=SCRAM-SHA-512\n"
        f"ssl.keystore.location={certificates.path('server.pem')}\n"
        "authorizer.class.name=x\n"
        "topics=t:3\n"
    )
    root = Path(__file__).resolve().parent.parent
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coordinator",
            "gateway",
            "--embedded",
            "--listen",
            "127.0.0.1:1",
            "--log-warehouse",
            str(warehouse),
            "--gateway-conf",
            str(conf),
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(f"coordinator gateway listening on 127.0.0.1:{port}"), line
        assert "SASL_SSL" in line
        context = ssl.create_default_context(cafile=certificates.ca)
        client = RawClient(port, context)
        assert client.authenticate("SCRAM-SHA-512", "alice", "alice-secret")["error_code"] == 0
        body = {**REQUESTS[codec.JOIN_GROUP], "group_id": "g"}
        assert client.call(codec.JOIN_GROUP, 3, body)["error_code"] == 30  # no ACL
        client.close()
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "Traceback" not in err, err
