"""The pure security model: SCRAM's math and exchange (RFC 5802/7677), Kafka's ACL decisions
and filters, principals from certificates, the security settings, and the durable store."""

from __future__ import annotations

import base64
import os
import ssl
import stat
from pathlib import Path

import pytest

from coordinator.security import principal
from coordinator.security.acl import (
    AclBinding,
    AclFilter,
    Authorizer,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate,
)
from coordinator.security.plain import PlainServer
from coordinator.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SaslFailure,
    ScramClient,
    ScramCredential,
    ScramServer,
    upsertion_error,
)
from coordinator.security.settings import SecuritySettingError, parse, parse_jaas
from coordinator.security.store import SecurityStore
from tests.security_support import CLIENT_PRINCIPAL, make_certificates

# --- SCRAM ----------------------------------------------------------------------------------

# RFC 7677, section 3: user "user", password "pencil".
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_scram_sha_256_server_reproduces_the_rfc_7677_exchange():
    credential = ScramCredential.from_password(SCRAM_SHA_256, "pencil", SALT, 4096)
    server = ScramServer(SCRAM_SHA_256, {"user": credential}.get, SERVER_NONCE)
    assert server.evaluate(CLIENT_FIRST) == SERVER_FIRST
    assert server.evaluate(CLIENT_FINAL) == SERVER_FINAL
    assert server.complete and server.authorization_id == "user"


def test_scram_sha_256_client_reproduces_the_rfc_7677_exchange():
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)
    with pytest.raises(SaslFailure, match="server signature"):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_wrong_password_fails_with_a_private_message(mechanism):
    credential = ScramCredential.from_password(mechanism, "right", b"salt", 4096)
    server = ScramServer(mechanism, {"alice": credential}.get, "servernonce")
    client = ScramClient(mechanism, "alice", "wrong", "clientnonce")
    first = server.evaluate(client.first())
    with pytest.raises(SaslFailure) as failure:
        server.evaluate(client.final(first))
    assert not failure.value.public and not server.complete


def test_scram_unknown_user_and_garbage_fail():
    server = ScramServer(SCRAM_SHA_512, {}.get, "n")
    with pytest.raises(SaslFailure):
        server.evaluate(b"n,,n=nobody,r=abc")
    with pytest.raises(SaslFailure):
        ScramServer(SCRAM_SHA_512, {}.get, "n").evaluate(b"\xff\x00garbage")


def test_scram_username_escapes_and_a_foreign_authorization_id():
    credential = ScramCredential.from_password(SCRAM_SHA_512, "pw", b"salt", 4096)
    users = {"a,b=c": credential}
    client = ScramClient(SCRAM_SHA_512, "a,b=c", "pw", "nonce1")
    server = ScramServer(SCRAM_SHA_512, users.get, "nonce2")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.authorization_id == "a,b=c"
    with pytest.raises(SaslFailure) as failure:
        ScramServer(SCRAM_SHA_512, users.get, "x").evaluate(b"n,a=other,n=a=2Cb=3Dc,r=n")
    assert failure.value.public


def test_scram_credential_from_salted_password_equals_from_password():
    salted = __import__("hashlib").pbkdf2_hmac("sha512", b"pw", b"salt", 8192)
    assert ScramCredential.from_salted_password(
        SCRAM_SHA_512, b"salt", salted, 8192
    ) == ScramCredential.from_password(SCRAM_SHA_512, "pw", b"salt", 8192)


def test_scram_upsertions_kafka_refuses():
    assert upsertion_error("", 2, 4096) == (93, "Username must not be empty")
    assert upsertion_error("a", 9, 4096) == (33, "Unknown SCRAM mechanism")
    assert upsertion_error("a", 2, 4095) == (93, "Too few iterations")
    assert upsertion_error("a", 2, 16385) == (93, "Too many iterations")
    assert upsertion_error("a", 1, 16384) is None


def test_plain_checks_the_listeners_users():
    assert PlainServer({"alice": "pw"}).evaluate(b"\0alice\0pw") == b""
    for token, message in (
        (b"\0alice\0nope", "Invalid username or password"),
        (b"\0bob\0pw", "Invalid username or password"),
        (b"bob\0alice\0pw", "authorization id that is different"),
        (b"\0\0pw", "username not specified"),
        (b"only-one-token", "expected 3 tokens, got 1"),
    ):
        with pytest.raises(SaslFailure, match=message):
            PlainServer({"alice": "pw"}).evaluate(token)


# --- ACLs -----------------------------------------------------------------------------------

G, T, C = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def acl(rt, name, pt, who, op, perm=ALLOW, host="*"):
    return AclBinding(rt, name, pt, who, host, op, perm)


def test_no_acl_is_denied_unless_allow_everyone_if_no_acl_found():
    assert not Authorizer().authorize("User:a", "1.2.3.4", Op.READ, G, "g")
    assert Authorizer(allow_if_no_acl=True).authorize("User:a", "1.2.3.4", Op.READ, G, "g")
    # an ACL on the resource for someone else: no longer "no ACL found"
    other = [acl(G, "g", LIT, "User:b", Op.READ)]
    assert not Authorizer(other, allow_if_no_acl=True).authorize("User:a", "h", Op.READ, G, "g")


def test_deny_wins_over_allow_and_super_users_pass_everything():
    acls = [acl(G, "g", LIT, "User:a", Op.ALL), acl(G, "g", PRE, "User:a", Op.READ, DENY)]
    auth = Authorizer(acls, super_users={"User:root"})
    assert not auth.authorize("User:a", "h", Op.READ, G, "g")
    assert auth.authorize("User:a", "h", Op.DELETE, G, "g")
    assert auth.authorize("User:root", "h", Op.READ, G, "g")


def test_operation_implications_apply_to_allow_only():
    acls = [acl(T, "t", LIT, "User:a", op) for op in (Op.WRITE,)] + [
        acl(T, "c", LIT, "User:a", Op.ALTER_CONFIGS),
        acl(T, "d", LIT, "User:a", Op.READ, DENY),
        acl(T, "d", LIT, "User:a", Op.DESCRIBE),
    ]
    auth = Authorizer(acls)
    assert auth.authorize("User:a", "h", Op.DESCRIBE, T, "t")
    assert not auth.authorize("User:a", "h", Op.READ, T, "t")
    assert auth.authorize("User:a", "h", Op.DESCRIBE_CONFIGS, T, "c")
    assert not auth.authorize("User:a", "h", Op.DESCRIBE, T, "c")
    assert auth.authorize("User:a", "h", Op.DESCRIBE, T, "d")  # a DENY of READ denies no DESCRIBE
    assert not auth.authorize("User:a", "h", Op.READ, T, "d")


def test_patterns_wildcards_principals_and_hosts():
    acls = [
        acl(T, "orders-", PRE, "User:a", Op.READ),
        acl(T, "*", LIT, "User:*", Op.DESCRIBE),
        acl(G, "g", LIT, "User:a", Op.READ, host="10.0.0.1"),
    ]
    auth = Authorizer(acls)
    assert auth.authorize("User:a", "h", Op.READ, T, "orders-eu")
    assert not auth.authorize("User:a", "h", Op.READ, T, "order")
    assert auth.authorize("User:zed", "h", Op.DESCRIBE, T, "anything")
    assert auth.authorize("User:a", "10.0.0.1", Op.READ, G, "g")
    assert not auth.authorize("User:a", "10.0.0.2", Op.READ, G, "g")


def test_authorized_operations_of_a_group():
    auth = Authorizer([acl(G, "g", LIT, "User:a", Op.READ)])
    bits = auth.authorized_operations("User:a", "h", G, "g")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_filters_match_as_kafkas_acl_binding_filter():
    lit = acl(T, "orders", LIT, "User:a", Op.READ)
    star = acl(T, "*", LIT, "User:a", Op.READ)
    pre = acl(T, "ord", PRE, "User:b", Op.WRITE, DENY)
    everything = AclFilter()
    assert all(everything.matches(a) for a in (lit, star, pre))
    match = AclFilter(T, "orders", PatternType.MATCH)
    assert [a for a in (lit, star, pre) if match.matches(a)] == [lit, star, pre]
    exact = AclFilter(T, "orders", PatternType.ANY)
    assert [a for a in (lit, star, pre) if exact.matches(a)] == [lit]
    by_entry = AclFilter(principal="User:b", operation=Op.WRITE, permission=DENY)
    assert [a for a in (lit, star, pre) if by_entry.matches(a)] == [pre]
    with pytest.raises(InvalidAcl):
        AclFilter(operation=Op.UNKNOWN).validate()


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (acl(ResourceType.ANY, "g", LIT, "User:a", Op.READ), "Invalid resourceType"),
        (acl(G, "g", PatternType.MATCH, "User:a", Op.READ), "Invalid patternType"),
        (acl(G, "g", LIT, "User:a", Op.ANY), "Invalid operation"),
        (acl(G, "g", LIT, "User:a", Op.READ, Permission.ANY), "Invalid permissionType"),
        (acl(C, "other", LIT, "User:a", Op.ALTER), "only valid name for the CLUSTER"),
        (acl(G, "", LIT, "User:a", Op.READ), "empty resource name"),
        (acl(G, "g", LIT, "alice", Op.READ), "Could not parse principal"),
    ],
)
def test_acls_kafka_refuses_to_create(binding, message):
    with pytest.raises(InvalidAcl, match=message):
        validate(binding)


# --- principals -----------------------------------------------------------------------------


def test_certificate_principal_is_javas_rfc_2253_name(tmp_path: Path):
    certificates = make_certificates(tmp_path)
    der = ssl.PEM_cert_to_DER_cert(Path(certificates.path("client.crt")).read_text())
    assert principal.from_certificate(der) == CLIENT_PRINCIPAL


def test_rfc_2253_escapes_and_oid_forms():
    assert principal._escape(" a,b+c=d#e ") == "\\ a\\,b\\+c\\=d\\#e\\ "
    # e-mail addresses are not an RFC 2253 keyword in Java: OID and DER value in hex
    assert principal._ava("1.2.840.113549.1.9.1", 0x16, b"a@x", b"\x16\x03a@x") == (
        "1.2.840.113549.1.9.1=#1603614078"
    )


def test_not_a_certificate_is_refused():
    with pytest.raises(principal.CertificateError):
        principal.rfc2253_name(b"\x30\x03\x02\x01\x00")


# --- settings -------------------------------------------------------------------------------

JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret" user_alice="alice secret";'
)


def test_jaas_configuration_is_read_as_kafka_writes_it():
    module, options = parse_jaas(JAAS)
    assert module.endswith("PlainLoginModule")
    assert options["user_alice"] == "alice secret"


def test_a_sasl_ssl_listener_with_plain_and_scram():
    settings = parse(
        {
            "listeners": "CLIENT://127.0.0.1:9093",
            "listener.security.protocol.map": "CLIENT:SASL_SSL",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.client.plain.sasl.jaas.config": JAAS,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": "/k.pem",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:CN=ops",
        }
    )
    assert settings.listener is not None
    assert (settings.listener.protocol, settings.listener.port) == ("SASL_SSL", 9093)
    assert settings.plain_users == {"CLIENT": {"admin": "admin-secret", "alice": "alice secret"}}
    assert settings.authorizer and settings.super_users == {"User:admin", "User:CN=ops"}
    assert not settings.allow_if_no_acl


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"listeners": "SSL://h:1,SSL://h:2"}, "given twice"),
        ({"listeners": "CLIENT://h:1"}, "no security protocol"),
        ({"listeners": "SASL_PLAINTEXT://h:1"}, "sasl.enabled.mechanisms"),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI is not supported"),
        ({"listeners": "SSL://h:1"}, "ssl.keystore.location"),
        ({"ssl.keystore.type": "JKS"}, "only PEM"),
        ({"ssl.client.auth": "required"}, "truststore"),
        ({"allow.everyone.if.no.acl.found": "yes"}, "true or false"),
        ({"upstream.sasl.mechanism": "PLAIN"}, "need upstream.security.protocol"),
        (
            {"upstream.security.protocol": "SASL_SSL", "upstream.sasl.mechanism": "PLAIN"},
            "upstream.sasl.jaas.config",
        ),
    ],
)
def test_security_settings_kafka_would_not_run_are_refused_by_name(properties, message):
    with pytest.raises(SecuritySettingError, match=message):
        parse(properties)


# --- the store ------------------------------------------------------------------------------


def test_store_keeps_acls_and_credentials_durably_and_privately(tmp_path: Path):
    store = SecurityStore(tmp_path)
    binding = acl(G, "g", LIT, "User:a", Op.READ)
    store.add_acls([binding, binding])
    credential = ScramCredential.from_password(SCRAM_SHA_512, "pw", b"salt", 4096)
    store.alter_scram([("alice", credential)], [])
    assert store.path is not None
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.path.parent).st_mode) == 0o700
    assert b"pw" not in store.path.read_bytes().replace(b"password", b"")
    again = SecurityStore(tmp_path)
    assert again.acls() == [binding]
    assert again.credential("alice", "SCRAM-SHA-512") == credential
    # a second store on the same warehouse sees the other's change
    other = SecurityStore(tmp_path, reload_interval_s=0)
    other.delete_acls([AclFilter(G, "g")])
    again.refresh(force=True)
    assert again.acls() == []
    again.alter_scram([], [("alice", "SCRAM-SHA-512")])
    assert other.credential("alice", "SCRAM-SHA-512") is None


def _scan(acls, super_users, allow_if_no_acl, principal, host, op, rt, name) -> bool:
    """Kafka's rule by a plain scan of every ACL (what the index must agree with)."""
    if principal in super_users:
        return True
    matching = [a for a in acls if a.matches_resource(rt, name)]
    results = [a.result(frozenset((principal, "User:*")), host, op) for a in matching]
    if False in results:
        return False
    return True in results or (not matching and allow_if_no_acl)


def test_indexed_decisions_agree_with_a_scan_of_every_acl():
    import random

    rng = random.Random(7)
    names = ["a", "ab", "abc", "b", "*", "ba", ""]
    ops = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.DELETE, Op.ALTER_CONFIGS]
    for _ in range(40):
        acls = [
            acl(
                rng.choice([G, T]),
                rng.choice(names[:-1]),
                rng.choice([LIT, PRE]),
                rng.choice(["User:a", "User:b", "User:*"]),
                rng.choice(ops),
                rng.choice([ALLOW, DENY]),
                rng.choice(["*", "h1"]),
            )
            for _ in range(rng.randrange(0, 8))
        ]
        no_acl = rng.random() < 0.5
        auth = Authorizer(acls, {"User:root"}, no_acl)
        for _ in range(50):
            query = (
                rng.choice(["User:a", "User:b", "User:root"]),
                rng.choice(["h1", "h2"]),
                rng.choice([*ops[:3], Op.DELETE, Op.DESCRIBE_CONFIGS]),
                rng.choice([G, T]),
                rng.choice([*names[:-1], "abcd", "c"]),
            )
            expected = _scan(acls, {"User:root"}, no_acl, *query)
            assert auth.authorize(*query) == expected, (acls, query)
            assert auth.authorize(*query) == expected  # remembered


# Kafka's SslPrincipalMapperTest cases.
MAPPING_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, "
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, "
    "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, "
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=JavaSoft,dc=sun,dc=com", "DUKE@JAVASOFT"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_principal_mapping_rules_as_kafkas(name, expected):
    assert principal.PrincipalMapper(MAPPING_RULES).name(name) == expected


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    ],
)
def test_invalid_principal_mapping_rules_are_refused(rules):
    with pytest.raises(SecuritySettingError, match=r"ssl\.principal\.mapping\.rules"):
        parse({"ssl.principal.mapping.rules": rules})


def test_no_matching_rule_and_literal_back_references():
    mapper = principal.PrincipalMapper("RULE:^CN=([^,]*),.*$/$1@x$2/")
    assert mapper.name("CN=bob,O=A") == "bob@x$2"
    with pytest.raises(principal.NoMatchingRule):
        mapper.name("O=A")


def test_security_bench_prints_its_figures(capsys):
    import json

    from coordinator.cli import main

    assert main(["bench", "security", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert len(figures) == 3 and all(value > 0 for value in figures.values())
