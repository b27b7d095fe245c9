"""What the security tests share: certificates made with the openssl command line in a
temporary directory (never committed), and a gateway with Kafka's security settings."""

from __future__ import annotations

import itertools
import socket
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.gateway import codec
from coordinator.gateway.security.session import GatewaySecurity
from coordinator.security.scram import MECHANISMS, ScramClient
from coordinator.security.settings import parse
from coordinator.security.store import SecurityStore
from tests.gateway_support import Running, read_frame

CLIENT_SUBJECT = "/C=US/O=Acme, Inc/OU=eng/CN=alice"
#: Kafka's principal for CLIENT_SUBJECT (Java's X500Principal.getName(): RFC 2253, last first).
CLIENT_PRINCIPAL = "User:CN=alice,OU=eng,O=Acme\\, Inc,C=US"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass
class Certificates:
    directory: Path

    @property
    def ca(self) -> str:
        return str(self.directory / "ca.pem")

    def path(self, name: str) -> str:
        return str(self.directory / name)


def make_certificates(directory: Path) -> Certificates:
    """A CA, a server certificate for 127.0.0.1 and localhost (``server.pem`` holds its key
    and chain, as ``ssl.keystore.location`` wants), and a client certificate for
    CLIENT_SUBJECT (``client.key``, ``client.pem``); EC P-256 keys."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=Test CA",
        cwd=directory,
    )
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, subject, extra in (
        ("server", "/CN=localhost", ["-extfile", "san.ext"]),
        ("client", CLIENT_SUBJECT, []),
    ):
        _openssl(
            "req",
            *ec,
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            subject,
            cwd=directory,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "2",
            *extra,
            cwd=directory,
        )
        key = (directory / f"{name}.key").read_text()
        cert = (directory / f"{name}.crt").read_text()
        (directory / f"{name}.pem").write_text(key + cert)
    return Certificates(directory)


def secured(
    properties: dict[str, str],
    warehouse: str | Path | None = None,
    **options: Any,
) -> Running:
    """A gateway (embedded engine) with these Kafka security settings; its listener's host and
    port come from ``listeners`` (port 0: ephemeral)."""
    settings = parse(properties)
    security = GatewaySecurity(settings, SecurityStore(warehouse, reload_interval_s=0.05))
    return Running(security=security, **options)


class RawClient:
    """A Kafka connection speaking through the kio codec (test side), over TLS if given a
    context: for exact error codes and for what happens to a connection."""

    def __init__(self, port: int, context: ssl.SSLContext | None = None) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1") if context else raw
        self._ids = itertools.count(1)

    def close(self) -> None:
        self.sock.close()

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def read(self) -> bytes | None:
        return read_frame(self.sock)

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """The answer as plain data; None when the gateway closed the connection instead."""
        self.send(codec.encode_request(api_key, version, next(self._ids), body))
        frame = self.read()
        if frame is None:
            return None
        _, answer = codec.decode_response(api_key, version, frame)
        return codec.plain(answer)

    def closed(self) -> bool:
        """Whether the gateway has closed the connection (reads EOF)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            return True

    def authenticate(self, mechanism: str, user: str, password: str) -> Any:
        """SaslHandshake v1 and SaslAuthenticate v2; the last SaslAuthenticate answer."""
        handshake = self.call(codec.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        assert handshake["error_code"] == 0, handshake
        if mechanism == "PLAIN":
            token = f"\0{user}\0{password}".encode()
            return self.call(codec.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        client = ScramClient(MECHANISMS[mechanism], user, password, "testnonce")
        first = self.call(codec.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()})
        if first is None or first["error_code"]:
            return first
        final = self.call(
            codec.SASL_AUTHENTICATE, 2, {"auth_bytes": client.final(first["auth_bytes"])}
        )
        if final is not None and final["error_code"] == 0:
            client.verify(final["auth_bytes"])
        return final


def client_context(certificates: Certificates, with_certificate: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certificates.ca)
    if with_certificate:
        context.load_cert_chain(certificates.path("client.crt"), certificates.path("client.key"))
    return context
