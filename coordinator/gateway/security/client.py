"""The gateway as a client of a secured upstream (as Kroxylicious does): its own TLS and SASL
credentials (``upstream.security.protocol``, ``upstream.sasl.*``, ``upstream.ssl.*``), never
the client's. :func:`authenticate` runs Kafka's SASL exchange (SaslHandshake v1, then
SaslAuthenticate v1 requests carrying the tokens) on a fresh connection before anything else
is sent on it."""

from __future__ import annotations

import asyncio
import secrets
import ssl
import struct
from dataclasses import dataclass
from typing import Any

from coordinator.gateway import codec
from coordinator.security.scram import MECHANISMS, SaslFailure, ScramClient
from coordinator.security.settings import UpstreamSecurity


class UpstreamAuthenticationError(Exception):
    """The upstream refused the gateway's credentials (or spoke no SASL)."""


@dataclass(frozen=True)
class UpstreamCredentials:
    """How the gateway connects to the upstream's brokers."""

    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @classmethod
    def from_settings(cls, settings: UpstreamSecurity) -> UpstreamCredentials:
        context = None
        if settings.protocol in ("SSL", "SASL_SSL"):
            from coordinator.gateway.security.tls import client_context

            context = client_context(settings.tls, settings.check_hostname)
        if not settings.protocol.startswith("SASL_"):
            return cls(context)
        return cls(context, settings.mechanism, settings.username, settings.password)


async def _call(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    api_key: int,
    version: int,
    correlation_id: int,
    body: dict[str, Any],
) -> dict[str, Any]:
    writer.write(
        codec.encode_request(api_key, version, correlation_id, body, "coordinator-gateway")
    )
    await writer.drain()
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    frame = await reader.readexactly(size)
    got, answer = codec.decode_response(api_key, version, frame)
    if got != correlation_id:
        raise UpstreamAuthenticationError(f"correlation id {got}, expected {correlation_id}")
    plain: dict[str, Any] = codec.plain(answer)
    return plain


async def authenticate(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, credentials: UpstreamCredentials
) -> None:
    """Authenticate a new connection; raises :class:`UpstreamAuthenticationError`."""
    mechanism = credentials.mechanism
    assert mechanism is not None and credentials.username is not None
    password = credentials.password or ""
    handshake = await _call(reader, writer, codec.SASL_HANDSHAKE, 1, 1, {"mechanism": mechanism})
    if handshake["error_code"]:
        raise UpstreamAuthenticationError(
            f"the upstream refused {mechanism} (error {handshake['error_code']}; it offers "
            f"{handshake['mechanisms']})"
        )

    async def token(data: bytes, correlation_id: int) -> bytes:
        answer = await _call(
            reader, writer, codec.SASL_AUTHENTICATE, 1, correlation_id, {"auth_bytes": data}
        )
        if answer["error_code"]:
            raise UpstreamAuthenticationError(
                f"the upstream refused the gateway's credentials: {answer['error_message']}"
            )
        reply: bytes = answer["auth_bytes"]
        return reply

    if mechanism == "PLAIN":
        await token(f"\0{credentials.username}\0{password}".encode(), 2)
        return
    client = ScramClient(
        MECHANISMS[mechanism], credentials.username, password, secrets.token_hex(16)
    )
    try:
        server_first = await token(client.first(), 2)
        server_final = await token(client.final(server_first), 3)
        client.verify(server_final)
    except SaslFailure as exc:
        raise UpstreamAuthenticationError(f"SCRAM with the upstream failed: {exc}") from exc
