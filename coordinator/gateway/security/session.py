"""Who is on a connection, and what they may do.

:class:`GatewaySecurity` holds the listener's settings, the TLS context, the store of ACLs and
SCRAM credentials and the authorizer built from it. Each connection gets a :class:`Session`,
which the server asks two things: while ``authenticated`` is false, what to do with a frame
(:meth:`Session.receive`: answer it, close, or serve it as usual), and afterwards whether the
principal may do an operation on a resource (:meth:`Session.authorize`).

Authentication follows Kafka's ``SaslServerAuthenticator``: on a SASL listener a client may
send ApiVersions, then must send SaslHandshake (v0: the SASL tokens follow as bare
size-prefixed frames; v1: wrapped in SaslAuthenticate requests). Any other request before the
exchange completes closes the connection; so does a failed exchange, after its answer
(SASL_AUTHENTICATION_FAILED with a message, or UNSUPPORTED_SASL_MECHANISM with the enabled
ones). On an SSL listener the principal is the client certificate's subject, or ANONYMOUS
without one; on PLAINTEXT, ANONYMOUS.
"""

from __future__ import annotations

import logging
import secrets
import ssl
import struct
from dataclasses import dataclass
from typing import Any

from coordinator.gateway import codec
from coordinator.security import errors, principal
from coordinator.security.acl import Authorizer, Operation, ResourceType
from coordinator.security.plain import PlainServer
from coordinator.security.scram import MECHANISMS, SaslFailure, ScramServer
from coordinator.security.settings import Listener, SecuritySettings
from coordinator.security.store import SecurityStore

log = logging.getLogger(__name__)

SASL_HANDSHAKE, SASL_AUTHENTICATE = codec.SASL_HANDSHAKE, codec.SASL_AUTHENTICATE
#: Kafka's sasl.server.max.receive.size: the largest frame before authentication completes.
SASL_MAX_RECEIVE_BYTES = 524_288


class GatewaySecurity:
    """The gateway's security: one per gateway, shared by its connections."""

    def __init__(
        self, settings: SecuritySettings | None = None, store: SecurityStore | None = None
    ):
        self.settings = settings or SecuritySettings()
        self.store = store or SecurityStore()
        listener = self.settings.listener
        #: the main listener's protocol
        self.protocol = listener.protocol if listener is not None else "PLAINTEXT"
        self.ssl_context: ssl.SSLContext | None = None
        if any(listener.tls for listener in self.settings.listeners):
            from coordinator.gateway.security.tls import server_context

            self.ssl_context = server_context(self.settings.tls, self.settings.client_auth)
        self.mapper = principal.PrincipalMapper(self.settings.principal_mapping_rules)
        self._authorizer: Authorizer | None = None
        self._generation = -1

    @property
    def listener(self) -> Listener | None:
        """The main listener (None: a PLAINTEXT one on ``--listen``)."""
        return self.settings.listener

    @property
    def other_listeners(self) -> tuple[Listener, ...]:
        return self.settings.listeners[1:]

    def context_for(self, listener: Listener | None) -> ssl.SSLContext | None:
        """The TLS context of ``listener`` (None: the main one), or None for plaintext."""
        listener = listener or self.listener
        return self.ssl_context if listener is not None and listener.tls else None

    @property
    def enforcing(self) -> bool:
        """Whether ACLs are enforced (``authorizer.class.name`` set)."""
        return self.settings.authorizer

    def authorizer(self) -> Authorizer:
        self.store.refresh()
        if self._authorizer is None or self._generation != self.store.generation:
            self._generation = self.store.generation
            self._authorizer = Authorizer(
                self.store.acls(), self.settings.super_users, self.settings.allow_if_no_acl
            )
        return self._authorizer

    def open_session(
        self,
        peer: Any,
        ssl_object: Any,
        listener: Listener | None = None,
        advertised: tuple[str, int] | None = None,
    ) -> Session:
        """A connection's session on ``listener`` (None: the main one); ``advertised`` is the
        address of a listener other than the main one, which Metadata and FindCoordinator
        then name instead of the main listener's."""
        host = peer[0] if isinstance(peer, tuple) else "unknown"
        listener = listener or self.listener
        protocol = listener.protocol if listener is not None else "PLAINTEXT"
        session = Session(self, host, listener, advertised)
        if protocol == "SSL":
            try:
                session.principal = _certificate_principal(ssl_object, self.mapper)
            except principal.NoMatchingRule as exc:  # Kafka refuses the connection
                log.info("refusing %s: %s", host, exc)
                session.authenticated = False
                session.refused = True
        if protocol.startswith("SASL_"):
            session.authenticated = False
        return session


def _certificate_principal(ssl_object: Any, mapper: principal.PrincipalMapper) -> str:
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return principal.ANONYMOUS
    return principal.from_certificate(der, mapper)


@dataclass
class Outcome:
    """What the server does with a frame received before authentication: write ``reply``
    (a whole framed answer) if any, then close, serve the frame as usual, or read on."""

    reply: bytes | None = None
    close: bool = False
    serve: bool = False
    #: how long to wait before writing the reply and closing (a failed authentication)
    delay_s: float = 0.0
    #: "success" or "failure" when this frame ended a SASL exchange (for the metrics)
    result: str | None = None


class Session:
    """One connection's principal and authentication state."""

    def __init__(
        self,
        security: GatewaySecurity,
        host: str,
        listener: Listener | None = None,
        advertised: tuple[str, int] | None = None,
    ) -> None:
        self.security = security
        self.listener = listener
        #: the address Metadata and FindCoordinator give for this gateway (None: the main one)
        self.advertised = advertised
        #: the client's address, as ACL hosts name it
        self.host = host
        self.principal = principal.ANONYMOUS
        self.authenticated = True
        #: a connection Kafka would not serve at all (no principal mapping rule applies)
        self.refused = False
        self.mechanism: str | None = None
        self._server: PlainServer | ScramServer | None = None
        #: handshake v0: tokens come as bare frames, without SaslAuthenticate around them
        self._bare_tokens = False

    # --- authorization ----------------------------------------------------------------------

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        if not self.security.enforcing:
            return True
        return self.security.authorizer().authorize(
            self.principal, self.host, operation, resource_type, name
        )

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        return self.security.authorizer().authorized_operations(
            self.principal, self.host, resource_type, name
        )

    # --- authentication ---------------------------------------------------------------------

    def receive(self, frame: bytes) -> Outcome:
        """A frame (without its size prefix) received before authentication completed."""
        if self.refused:
            return Outcome(close=True)
        if self._server is not None:
            if self._bare_tokens:
                return self._token(frame, None)
            return self._authenticate_request(frame)
        api_key, version, _ = codec.peek_header(frame)
        if api_key == codec.API_VERSIONS:
            return Outcome(serve=True)
        if api_key != SASL_HANDSHAKE:
            log.info("closing %s: request %s before SASL authentication", self.host, api_key)
            return Outcome(close=True)
        request = codec.decode_request(frame)
        mechanism = codec.plain(request.body)["mechanism"]
        enabled = list(self.security.settings.mechanisms)
        if mechanism not in enabled:
            answer = {"error_code": errors.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}
            reply = codec.encode_response(SASL_HANDSHAKE, version, request.correlation_id, answer)
            return Outcome(reply=reply, close=True)
        self.mechanism = mechanism
        self._bare_tokens = version == 0
        if mechanism == "PLAIN":
            name = self.listener.name if self.listener is not None else ""
            self._server = PlainServer(self.security.settings.plain_users.get(name, {}))
        else:
            self._server = ScramServer(
                MECHANISMS[mechanism],
                lambda user: self.security.store.credential(user, mechanism),
                secrets.token_urlsafe(24).replace("-", "A").replace("_", "B"),
            )
        answer = {"error_code": 0, "mechanisms": enabled}
        reply = codec.encode_response(SASL_HANDSHAKE, version, request.correlation_id, answer)
        return Outcome(reply=reply)

    def _authenticate_request(self, frame: bytes) -> Outcome:
        api_key, version, correlation_id = codec.peek_header(frame)
        if api_key == SASL_HANDSHAKE:
            answer = {"error_code": errors.ILLEGAL_SASL_STATE, "mechanisms": []}
            reply = codec.encode_response(api_key, version, correlation_id, answer)
            return Outcome(reply=reply, close=True)
        if api_key != SASL_AUTHENTICATE:
            log.info("closing %s: request %s during SASL authentication", self.host, api_key)
            return Outcome(close=True)
        request = codec.decode_request(frame)
        token = codec.plain(request.body)["auth_bytes"]
        return self._token(token, (version, correlation_id))

    def _token(self, token: bytes, wrapped: tuple[int, int] | None) -> Outcome:
        server = self._server
        assert server is not None
        try:
            answer = server.evaluate(token)
        except SaslFailure as failure:
            message = (
                str(failure)
                if failure.public
                else "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}"
            )
            log.info("SASL authentication of %s failed: %s", self.host, failure)
            delay_s = self.security.settings.failed_authentication_delay_ms / 1000
            if wrapped is None:
                return Outcome(close=True, delay_s=delay_s, result="failure")
            body = {
                "error_code": errors.SASL_AUTHENTICATION_FAILED,
                "error_message": message,
                "auth_bytes": b"",
                "session_lifetime": 0,
            }
            reply = codec.encode_response(SASL_AUTHENTICATE, wrapped[0], wrapped[1], body)
            return Outcome(reply=reply, close=True, delay_s=delay_s, result="failure")
        if server.complete:
            assert server.authorization_id is not None
            self.principal = principal.from_sasl(server.authorization_id)
            self.authenticated = True
            log.info("%s authenticated as %s (%s)", self.host, self.principal, self.mechanism)
        result = "success" if server.complete else None
        if wrapped is None:
            return Outcome(reply=struct.pack(">i", len(answer)) + answer, result=result)
        body = {"error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime": 0}
        reply = codec.encode_response(SASL_AUTHENTICATE, wrapped[0], wrapped[1], body)
        return Outcome(reply=reply, result=result)
