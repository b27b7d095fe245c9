"""What the security tests share: certificates made with the openssl command line in a
temporary directory (never committed), and a gateway with Kafka's security settings."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.gateway.security.session import GatewaySecurity
from coordinator.security.settings import parse
from coordinator.security.store import SecurityStore
from tests.gateway_support import Running

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
