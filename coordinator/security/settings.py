"""The gateway's security settings, under Kafka's broker names, read from its properties.

Supported (anything else security-related is refused by name at start, never ignored):

- ``listeners`` (``NAME://HOST:PORT,...``: the first is the gateway's main listener, the one
  upstream mode serves on), ``listener.security.protocol.map`` (``NAME:PROTOCOL,...``; a
  listener named after a protocol needs no entry);
- ``sasl.enabled.mechanisms`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; Kafka's default GSSAPI is
  not served, so it must be set for a SASL listener);
- ``listener.name.<listener>.<mechanism>.sasl.jaas.config``: for PLAIN, Kafka's
  ``PlainLoginModule`` with ``user_<name>="<password>"`` entries; for SCRAM, Kafka's
  ``ScramLoginModule`` (the credentials are the warehouse's);
- ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (key and chain in one file) or
  ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain`` (PEM text), ``ssl.key.password``,
  ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` or ``ssl.truststore.certificates``,
  ``ssl.client.auth`` (required, requested, none; default none),
  ``ssl.principal.mapping.rules`` (Kafka's ``DEFAULT``/``RULE:pattern/replacement/[LU]``);
- ``connection.failed.authentication.delay.ms`` (default 100: a failed authentication is
  answered, and its connection closed, that much later, as Kafka slows password guessing);
- ``authorizer.class.name`` (any non-empty value enforces ACLs), ``super.users``
  (``User:a;User:b``), ``allow.everyone.if.no.acl.found`` (default false);
- for upstream mode, how the gateway reaches the upstream, with a Kafka client's names after
  ``upstream.``: ``upstream.security.protocol``, ``upstream.sasl.mechanism``,
  ``upstream.sasl.jaas.config`` (``PlainLoginModule`` or ``ScramLoginModule`` with ``username``
  and ``password``), ``upstream.ssl.truststore.location``/``.certificates``,
  ``upstream.ssl.keystore.location`` or ``.key``/``.certificate.chain`` (PEM),
  ``upstream.ssl.key.password``, ``upstream.ssl.endpoint.identification.algorithm``
  (``https``, the default, checks the broker's host name; empty does not).

Pure: no file is read here (the TLS files are opened by :mod:`coordinator.gateway.security.tls`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from coordinator.security.principal import PrincipalMapper

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

SECURITY_SETTINGS = frozenset(
    {
        "listeners",
        "listener.security.protocol.map",
        "sasl.enabled.mechanisms",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.client.auth",
        "ssl.principal.mapping.rules",
        "connection.failed.authentication.delay.ms",
        "authorizer.class.name",
        "super.users",
        "allow.everyone.if.no.acl.found",
        "upstream.security.protocol",
        "upstream.sasl.mechanism",
        "upstream.sasl.jaas.config",
        "upstream.ssl.truststore.type",
        "upstream.ssl.truststore.location",
        "upstream.ssl.truststore.certificates",
        "upstream.ssl.keystore.type",
        "upstream.ssl.keystore.location",
        "upstream.ssl.keystore.key",
        "upstream.ssl.keystore.certificate.chain",
        "upstream.ssl.key.password",
        "upstream.ssl.endpoint.identification.algorithm",
    }
)
_JAAS_KEY = re.compile(r"listener\.name\.([^.]+)\.([a-z0-9-]+)\.sasl\.jaas\.config\Z")


def is_security_setting(key: str) -> bool:
    return key in SECURITY_SETTINGS or _JAAS_KEY.match(key) is not None


class SecuritySettingError(ValueError):
    pass


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    protocol: str

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


@dataclass(frozen=True)
class TlsFiles:
    """PEM material: a file (``location``) or the PEM text itself."""

    keystore_location: str | None = None
    keystore_key: str | None = None
    keystore_chain: str | None = None
    key_password: str | None = None
    truststore_location: str | None = None
    truststore_certificates: str | None = None


@dataclass(frozen=True)
class UpstreamSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    tls: TlsFiles = field(default_factory=TlsFiles)
    check_hostname: bool = True


@dataclass(frozen=True)
class SecuritySettings:
    listeners: tuple[Listener, ...] = ()
    mechanisms: tuple[str, ...] = ()
    #: PLAIN's users per listener name: name -> password (from the listener's JAAS config).
    plain_users: dict[str, dict[str, str]] = field(default_factory=dict)
    tls: TlsFiles = field(default_factory=TlsFiles)
    client_auth: str = "none"
    principal_mapping_rules: str = "DEFAULT"
    failed_authentication_delay_ms: int = 100
    authorizer: bool = False
    super_users: frozenset[str] = frozenset()
    allow_if_no_acl: bool = False
    upstream: UpstreamSecurity = field(default_factory=UpstreamSecurity)

    @property
    def listener(self) -> Listener | None:
        """The main listener (the first of ``listeners``); None: ``--listen``, PLAINTEXT."""
        return self.listeners[0] if self.listeners else None


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """Kafka's ``sasl.jaas.config``: ``<LoginModule class> <flag> key="value" ...;`` as
    (module, options)."""
    match = re.match(
        r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*\Z", text, re.S
    )
    if match is None:
        raise SecuritySettingError(f"not a JAAS login module configuration: {text!r}")
    options: dict[str, str] = {}
    rest = match[3].strip()
    for option in re.finditer(r'\s*([^\s=]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s"]+))', rest):
        value = option[2] if option[2] is not None else option[3]
        options[option[1]] = re.sub(r"\\(.)", r"\1", value)
    leftover = re.sub(r'\s*([^\s=]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s"]+))', "", rest).strip()
    if leftover:
        raise SecuritySettingError(f"cannot read {leftover!r} in the JAAS configuration")
    return match[1], options


def _listeners(properties: dict[str, str]) -> tuple[Listener, ...]:
    text = properties.get("listeners", "").strip()
    if not text:
        return ()
    mapping: dict[str, str] = {}
    for entry in properties.get("listener.security.protocol.map", "").split(","):
        if entry.strip():
            key, sep, protocol = entry.strip().partition(":")
            if not sep:
                raise SecuritySettingError(
                    f"listener.security.protocol.map: expected NAME:PROTOCOL, got {entry!r}"
                )
            mapping[key.strip().upper()] = protocol.strip().upper()
    listeners: list[Listener] = []
    for item in (item.strip() for item in text.split(",")):
        if not item:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):([0-9]+)", item)
        if match is None:
            raise SecuritySettingError(f"listeners: expected NAME://HOST:PORT, got {item!r}")
        name, host, port = match[1].upper(), match[2].strip("[]") or "0.0.0.0", int(match[3])
        protocol = mapping.get(name, name if name in PROTOCOLS else "")
        if protocol not in PROTOCOLS:
            raise SecuritySettingError(
                f"listeners: no security protocol for listener {name} "
                f"(listener.security.protocol.map; one of {', '.join(PROTOCOLS)})"
            )
        if any(other.name == name for other in listeners):
            raise SecuritySettingError(f"listeners: listener {name} is given twice")
        if port and any((other.host, other.port) == (host, port) for other in listeners):
            raise SecuritySettingError(f"listeners: {host}:{port} is given twice")
        listeners.append(Listener(name, host, port, protocol))
    return tuple(listeners)


def _tls_files(properties: dict[str, str], prefix: str) -> TlsFiles:
    for kind in ("keystore", "truststore"):
        value = properties.get(f"{prefix}ssl.{kind}.type", "PEM").strip().upper()
        if value != "PEM":
            raise SecuritySettingError(
                f"{prefix}ssl.{kind}.type={value}: only PEM is supported (convert JKS or "
                "PKCS12 stores with keytool/openssl)"
            )
    files = TlsFiles(
        keystore_location=properties.get(f"{prefix}ssl.keystore.location") or None,
        keystore_key=properties.get(f"{prefix}ssl.keystore.key") or None,
        keystore_chain=properties.get(f"{prefix}ssl.keystore.certificate.chain") or None,
        key_password=properties.get(f"{prefix}ssl.key.password") or None,
        truststore_location=properties.get(f"{prefix}ssl.truststore.location") or None,
        truststore_certificates=properties.get(f"{prefix}ssl.truststore.certificates") or None,
    )
    if files.keystore_location and (files.keystore_key or files.keystore_chain):
        raise SecuritySettingError(
            f"{prefix}ssl.keystore.location and {prefix}ssl.keystore.key/.certificate.chain "
            "are alternatives: give one"
        )
    if bool(files.keystore_key) != bool(files.keystore_chain):
        raise SecuritySettingError(
            f"{prefix}ssl.keystore.key and {prefix}ssl.keystore.certificate.chain go together"
        )
    if files.truststore_location and files.truststore_certificates:
        raise SecuritySettingError(
            f"{prefix}ssl.truststore.location and {prefix}ssl.truststore.certificates are "
            "alternatives: give one"
        )
    return files


def _bool(properties: dict[str, str], key: str, default: bool) -> bool:
    value = properties.get(key, "").strip().lower()
    if not value:
        return default
    if value not in ("true", "false"):
        raise SecuritySettingError(f"{key}: expected true or false, got {value!r}")
    return value == "true"


def _upstream(properties: dict[str, str]) -> UpstreamSecurity:
    protocol = properties.get("upstream.security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise SecuritySettingError(
            f"upstream.security.protocol={protocol}: one of {', '.join(PROTOCOLS)}"
        )
    tls = _tls_files(properties, "upstream.")
    mechanism = properties.get("upstream.sasl.mechanism", "").strip().upper() or None
    username = password = None
    if protocol.startswith("SASL_"):
        mechanism = mechanism or "GSSAPI"
        if mechanism not in SUPPORTED_MECHANISMS:
            raise SecuritySettingError(
                f"upstream.sasl.mechanism={mechanism}: one of {', '.join(SUPPORTED_MECHANISMS)}"
            )
        jaas = properties.get("upstream.sasl.jaas.config", "")
        if not jaas.strip():
            raise SecuritySettingError(
                f"upstream.security.protocol={protocol} needs upstream.sasl.jaas.config"
            )
        module, options = parse_jaas(jaas)
        expected = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
        if module != expected:
            raise SecuritySettingError(
                f"upstream.sasl.jaas.config: {mechanism} takes {expected}, got {module}"
            )
        username, password = options.get("username"), options.get("password")
        if not username or password is None:
            raise SecuritySettingError("upstream.sasl.jaas.config needs username and password")
    elif mechanism or properties.get("upstream.sasl.jaas.config"):
        raise SecuritySettingError(
            f"upstream.sasl.* settings need upstream.security.protocol SASL_PLAINTEXT or "
            f"SASL_SSL (it is {protocol})"
        )
    if not protocol.endswith("SSL") and any(
        key.startswith("upstream.ssl.") and value.strip() for key, value in properties.items()
    ):
        raise SecuritySettingError(
            f"upstream.ssl.* settings need upstream.security.protocol SSL or SASL_SSL "
            f"(it is {protocol})"
        )
    algorithm = properties.get("upstream.ssl.endpoint.identification.algorithm", "https")
    if algorithm.strip().lower() not in ("https", ""):
        raise SecuritySettingError("upstream.ssl.endpoint.identification.algorithm: https or empty")
    return UpstreamSecurity(
        protocol, mechanism, username, password, tls, algorithm.strip().lower() == "https"
    )


def parse(properties: dict[str, str]) -> SecuritySettings:
    """The security settings among ``properties`` (others are ignored here: the caller
    refuses the ones nobody reads). Raises :class:`SecuritySettingError` naming the setting."""
    listeners = _listeners(properties)
    by_name = {listener.name: listener for listener in listeners}
    mechanisms = tuple(
        m.strip().upper()
        for m in properties.get("sasl.enabled.mechanisms", "").split(",")
        if m.strip()
    )
    for mechanism in mechanisms:
        if mechanism not in SUPPORTED_MECHANISMS:
            raise SecuritySettingError(
                f"sasl.enabled.mechanisms: {mechanism} is not supported (only "
                f"{', '.join(SUPPORTED_MECHANISMS)})"
            )
    sasl_listeners = [listener for listener in listeners if listener.sasl]
    if sasl_listeners and not mechanisms:
        raise SecuritySettingError(
            f"listener {sasl_listeners[0].name} is {sasl_listeners[0].protocol}: set "
            f"sasl.enabled.mechanisms (Kafka's default GSSAPI is not served; "
            f"{', '.join(SUPPORTED_MECHANISMS)})"
        )
    plain_users: dict[str, dict[str, str]] = {}
    for key, value in properties.items():
        match = _JAAS_KEY.match(key)
        if match is None:
            continue
        name, mechanism = match[1].upper(), match[2].upper()
        if name not in by_name:
            raise SecuritySettingError(f"{key}: there is no listener {match[1]}")
        if mechanism not in mechanisms:
            raise SecuritySettingError(f"{key}: {mechanism} is not in sasl.enabled.mechanisms")
        module, options = parse_jaas(value)
        expected = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
        if module != expected:
            raise SecuritySettingError(f"{key}: {mechanism} takes {expected}, got {module}")
        if mechanism == "PLAIN":
            plain_users[name] = {k[5:]: v for k, v in options.items() if k.startswith("user_")}
    for listener in sasl_listeners:
        if "PLAIN" in mechanisms and not plain_users.get(listener.name):
            raise SecuritySettingError(
                f"PLAIN is enabled: set listener.name.{listener.name.lower()}.plain.sasl.jaas."
                'config with user_<name>="<password>" entries'
            )
    client_auth = properties.get("ssl.client.auth", "none").strip().lower() or "none"
    if client_auth not in ("required", "requested", "none"):
        raise SecuritySettingError(
            f"ssl.client.auth={client_auth}: one of required, requested, none"
        )
    tls = _tls_files(properties, "")
    for listener in listeners:
        if listener.tls and not (tls.keystore_location or tls.keystore_key):
            raise SecuritySettingError(
                f"listener {listener.name} is {listener.protocol}: set ssl.keystore.location "
                "(PEM key and certificate chain) or ssl.keystore.key and "
                "ssl.keystore.certificate.chain"
            )
    if client_auth != "none" and not (tls.truststore_location or tls.truststore_certificates):
        raise SecuritySettingError(
            f"ssl.client.auth={client_auth} needs ssl.truststore.location or "
            "ssl.truststore.certificates (the CAs client certificates are checked against)"
        )
    rules = properties.get("ssl.principal.mapping.rules", "").strip() or "DEFAULT"
    try:
        PrincipalMapper(rules)
    except (ValueError, re.error) as exc:
        raise SecuritySettingError(f"ssl.principal.mapping.rules: {exc}") from exc
    delay = properties.get("connection.failed.authentication.delay.ms", "100").strip() or "100"
    if not delay.isdigit():
        raise SecuritySettingError(
            f"connection.failed.authentication.delay.ms: a number of ms, got {delay!r}"
        )
    super_users = frozenset(
        u.strip() for u in properties.get("super.users", "").split(";") if u.strip()
    )
    for user in super_users:
        if ":" not in user:
            raise SecuritySettingError(f"super.users: {user!r} is not Type:name (User:alice)")
    return SecuritySettings(
        listeners=listeners,
        mechanisms=mechanisms,
        plain_users=plain_users,
        tls=tls,
        client_auth=client_auth,
        principal_mapping_rules=rules,
        failed_authentication_delay_ms=int(delay),
        authorizer=bool(properties.get("authorizer.class.name", "").strip()),
        super_users=super_users,
        allow_if_no_acl=_bool(properties, "allow.everyone.if.no.acl.found", False),
        upstream=_upstream(properties),
    )
