"""The gateway as a client of a secured upstream (as Kroxylicious does): its own TLS and SASL
credentials (``upstream.security.protocol``, ``upstream.sasl.*``, ``upstream.ssl.*``), never
the client's. :func:`authenticate` runs Kafka's SASL exchange (SaslHandshake v1, then
SaslAuthenticate v1 requests carrying the tokens) on a fresh connection before anything else
is sent on it."""

from __future__ import annotations

import asyncio
import itertools
import secrets
import ssl
import struct
from collections.abc import Callable, Generator
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


Request = tuple[int, int, dict[str, Any]]


def exchange(credentials: UpstreamCredentials) -> Generator[Request, dict[str, Any], None]:
    """The SASL exchange as the requests to send, each answer sent back in: SaslHandshake v1,
    then SaslAuthenticate v1 carrying PLAIN's token or SCRAM's two. Raises
    :class:`UpstreamAuthenticationError`. One exchange for the gateway's asyncio connections
    (:func:`authenticate`) and for blocking ones (:func:`authenticate_blocking`)."""
    mechanism = credentials.mechanism
    assert mechanism is not None and credentials.username is not None
    password = credentials.password or ""
    handshake = yield codec.SASL_HANDSHAKE, 1, {"mechanism": mechanism}
    if handshake["error_code"]:
        raise UpstreamAuthenticationError(
            f"the upstream refused {mechanism} (error {handshake['error_code']}; it offers "
            f"{handshake['mechanisms']})"
        )

    def token(answer: dict[str, Any]) -> bytes:
        if answer["error_code"]:
            raise UpstreamAuthenticationError(
                f"the upstream refused the gateway's credentials: {answer['error_message']}"
            )
        reply: bytes = answer["auth_bytes"]
        return reply

    if mechanism == "PLAIN":
        plain = f"\0{credentials.username}\0{password}".encode()
        token((yield codec.SASL_AUTHENTICATE, 1, {"auth_bytes": plain}))
        return
    client = ScramClient(
        MECHANISMS[mechanism], credentials.username, password, secrets.token_hex(16)
    )
    try:
        first = token((yield codec.SASL_AUTHENTICATE, 1, {"auth_bytes": client.first()}))
        final = client.final(first)
        client.verify(token((yield codec.SASL_AUTHENTICATE, 1, {"auth_bytes": final})))
    except SaslFailure as exc:
        raise UpstreamAuthenticationError(f"SCRAM with the upstream failed: {exc}") from exc


def authenticate_blocking(
    call: Callable[[int, int, dict[str, Any]], dict[str, Any]], credentials: UpstreamCredentials
) -> None:
    """Authenticate a blocking connection whose ``call(api_key, version, body)`` answers."""
    steps = exchange(credentials)
    try:
        request = next(steps)
        while True:
            request = steps.send(call(*request))
    except StopIteration:
        return


async def authenticate(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, credentials: UpstreamCredentials
) -> None:
    """Authenticate a new asyncio connection; raises :class:`UpstreamAuthenticationError`."""
    ids = itertools.count(1)

    async def call(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        correlation_id = next(ids)
        writer.write(
            codec.encode_request(api_key, version, correlation_id, body, "coordinator-gateway")
        )
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        got, answer = codec.decode_response(api_key, version, await reader.readexactly(size))
        if got != correlation_id:
            raise UpstreamAuthenticationError(f"correlation id {got}, expected {correlation_id}")
        plain: dict[str, Any] = codec.plain(answer)
        return plain

    steps = exchange(credentials)
    try:
        request = next(steps)
        while True:
            request = steps.send(await call(*request))
    except StopIteration:
        return
