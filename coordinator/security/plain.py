"""SASL/PLAIN (RFC 4616) as Kafka's ``PlainSaslServer`` checks it: one message,
``authzid NUL authcid NUL password``, against the users of the listener's JAAS configuration
(``user_<name>="<password>"``), with Kafka's messages."""

from __future__ import annotations

import hmac

from coordinator.security.scram import SaslFailure


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.authorization_id: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslFailure("Unexpected SASL/PLAIN message after completion")
        parts = token.decode("utf-8", "replace").split("\0")
        if len(parts) != 3:
            raise SaslFailure(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        expected = self._users.get(user)
        # compare even for an unknown user, so that timing does not tell users apart
        good = hmac.compare_digest((expected or "\0").encode(), password.encode())
        if expected is None or not good:
            raise SaslFailure("Authentication failed: Invalid username or password", public=True)
        if authzid and authzid != user:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is different "
                "from username",
                public=True,
            )
        self.authorization_id = user
        self.complete = True
        return b""
