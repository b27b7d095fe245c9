"""TLS contexts from Kafka's PEM settings (``ssl.keystore.*``, ``ssl.truststore.*``,
``ssl.client.auth``), with Python's ``ssl``.

Kafka's PEM values given inline in a properties file lose their line breaks (a continued
line's leading spaces are dropped); they are re-wrapped here before OpenSSL reads them. Python
loads keys and chains only from files, so inline PEM goes through a private temporary file
(``0600``) that is removed at once.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
import textwrap
from collections.abc import Iterator

from coordinator.security.settings import SecuritySettingError, TlsFiles

_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def normalize_pem(text: str) -> str:
    """PEM blocks with their base64 re-wrapped at 64 columns (whitespace in it dropped)."""
    blocks = []
    for match in _BLOCK.finditer(text):
        body = "".join(match[2].split())
        if "Proc-Type" in match[2] or ":" in body:
            raise SecuritySettingError(
                "encrypted legacy PEM headers are not supported; use PKCS#8 (ENCRYPTED PRIVATE "
                "KEY) with ssl.key.password"
            )
        wrapped = "\n".join(textwrap.wrap(body, 64))
        blocks.append(f"-----BEGIN {match[1]}-----\n{wrapped}\n-----END {match[1]}-----\n")
    if not blocks:
        raise SecuritySettingError("no PEM block found")
    return "".join(blocks)


@contextlib.contextmanager
def _pem_file(text: str) -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="gateway-pem-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(normalize_pem(text))
        yield path
    finally:
        os.unlink(path)


def _load_keystore(context: ssl.SSLContext, files: TlsFiles, prefix: str) -> None:
    try:
        if files.keystore_location:
            context.load_cert_chain(files.keystore_location, password=files.key_password)
        elif files.keystore_key and files.keystore_chain:
            with _pem_file(files.keystore_chain) as chain, _pem_file(files.keystore_key) as key:
                context.load_cert_chain(chain, key, password=files.key_password)
    except (OSError, ssl.SSLError) as exc:
        raise SecuritySettingError(f"{prefix}ssl.keystore: cannot load it: {exc}") from exc


def _load_truststore(context: ssl.SSLContext, files: TlsFiles, prefix: str) -> None:
    try:
        if files.truststore_location:
            context.load_verify_locations(cafile=files.truststore_location)
        elif files.truststore_certificates:
            context.load_verify_locations(cadata=normalize_pem(files.truststore_certificates))
    except (OSError, ssl.SSLError) as exc:
        raise SecuritySettingError(f"{prefix}ssl.truststore: cannot load it: {exc}") from exc


def server_context(files: TlsFiles, client_auth: str) -> ssl.SSLContext:
    """The listener's context: its key and chain; with ``ssl.client.auth`` required (or
    requested) the client's certificate is checked against the truststore."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # Kafka's ssl.enabled.protocols
    _load_keystore(context, files, "")
    _load_truststore(context, files, "")
    context.verify_mode = {
        "required": ssl.CERT_REQUIRED,
        "requested": ssl.CERT_OPTIONAL,
        "none": ssl.CERT_NONE,
    }[client_auth]
    return context


def client_context(files: TlsFiles, check_hostname: bool) -> ssl.SSLContext:
    """The gateway's context towards an upstream: the upstream's CAs (the system's without a
    truststore), a client certificate if a keystore is given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if files.truststore_location or files.truststore_certificates:
        _load_truststore(context, files, "upstream.")
    else:
        context.load_default_certs()
    _load_keystore(context, files, "upstream.")
    context.check_hostname = check_hostname
    return context
