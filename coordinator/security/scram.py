"""SCRAM (RFC 5802, with SHA-256 and SHA-512 as RFC 7677 and Kafka name them), as Kafka's
``ScramSaslServer`` and ``ScramSaslClient`` speak it: the math, the credential a broker keeps
(salt, StoredKey, ServerKey, iterations: never the password), and the two state machines.

Kafka's particulars: no SASLprep (the password's UTF-8 bytes), usernames with ``=2C`` and
``=3D`` for ``,`` and ``=``, at least 4096 iterations (``ScramMechanism.minIterations``) and at
most 16384 for credentials set through AlterUserScramCredentials, an authorization id only if it
equals the username, and extensions accepted and ignored (only ``tokenauth`` means something to
Kafka, and delegation tokens are not served here).

Pure: nonces and salts come from the caller (``secrets`` at the edge).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True, slots=True)
class Mechanism:
    name: str
    #: Kafka's ``ScramMechanism`` type code (AlterUserScramCredentials, DescribeUser...).
    type: int
    hash_name: str


SCRAM_SHA_256 = Mechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = Mechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE = {m.type: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


class SaslFailure(Exception):
    """The exchange failed; ``message`` is safe to send to the client (Kafka's
    SaslAuthenticationException) only when ``public`` is true, otherwise the client gets
    Kafka's generic "invalid credentials" message."""

    def __init__(self, message: str, public: bool = False) -> None:
        super().__init__(message)
        self.public = public


def _hmac(mechanism: Mechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, mechanism.hash_name).digest()


def _hash(mechanism: Mechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def salted_password(mechanism: Mechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def client_key(mechanism: Mechanism, salted: bytes) -> bytes:
    return _hmac(mechanism, salted, b"Client Key")


def stored_key(mechanism: Mechanism, client: bytes) -> bytes:
    return _hash(mechanism, client)


def server_key(mechanism: Mechanism, salted: bytes) -> bytes:
    return _hmac(mechanism, salted, b"Server Key")


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a broker stores for one user and mechanism (Kafka's ``ScramCredential``)."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: Mechanism, salt: bytes, salted: bytes, iterations: int
    ) -> ScramCredential:
        """From what AlterUserScramCredentials carries (KIP-554: the client salts and hashes)."""
        return cls(
            mechanism.name,
            salt,
            stored_key(mechanism, client_key(mechanism, salted)),
            server_key(mechanism, salted),
            iterations,
        )

    @classmethod
    def from_password(
        cls, mechanism: Mechanism, password: str, salt: bytes, iterations: int
    ) -> ScramCredential:
        salted = salted_password(mechanism, password, salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)


def upsertion_error(name: str, mechanism_type: int, iterations: int) -> tuple[int, str] | None:
    """Kafka's refusal of an AlterUserScramCredentials upsertion (``ScramControlManager``), as
    (error code, message), or None."""
    from coordinator.security import errors

    if not name:
        return errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism_type not in BY_TYPE:
        return errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if iterations < MIN_ITERATIONS:
        return errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if iterations > MAX_ITERATIONS:
        return errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


# --- messages -----------------------------------------------------------------------------------

_VALUE = r"[\x21-\x2B\x2D-\x7E]+"  # printable, no comma
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_VALUE})(?P<ext>{_EXTENSIONS}))\Z"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>[A-Za-z0-9+/=]+),r=(?P<nonce>{_VALUE}){_EXTENSIONS}),"
    r"p=(?P<proof>[A-Za-z0-9+/=]+)\Z"
)
_SERVER_FIRST = re.compile(
    rf"r=(?P<nonce>{_VALUE}),s=(?P<salt>[A-Za-z0-9+/=]+),i=(?P<iterations>[0-9]+){_EXTENSIONS}\Z"
)
_SERVER_FINAL = re.compile(r"(?:e=(?P<error>[^,]+)|v=(?P<signature>[A-Za-z0-9+/=]+))" + _EXTENSIONS)


def username(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


def saslname(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


class ScramServer:
    """One server side of an exchange: :meth:`first` takes the client-first message and
    returns the server-first; :meth:`final` takes the client-final and returns the
    server-final. ``lookup(username)`` gives the user's credential or None. Raises
    :class:`SaslFailure`."""

    def __init__(
        self,
        mechanism: Mechanism,
        lookup: Callable[[str], ScramCredential | None],
        server_nonce: str,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce
        self.mechanism_name = mechanism.name
        self.authorization_id: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self.complete = False

    def evaluate(self, message: bytes) -> bytes:
        """The answer to the client's next message (first, then final)."""
        return self.first(message) if self._credential is None else self.final(message)

    def first(self, message: bytes) -> bytes:
        match = _CLIENT_FIRST.match(message.decode("utf-8", "replace"))
        if match is None:
            raise SaslFailure("Invalid SCRAM client first message")
        user = username(match["saslname"])
        credential = self._lookup(user)
        if credential is None:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        authzid = match["authzid"]
        if authzid and username(authzid) != user:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is different "
                "from username",
                public=True,
            )
        if credential.iterations < MIN_ITERATIONS:
            raise SaslFailure(f"Iterations {credential.iterations} is less than the minimum")
        self._credential = credential
        self.authorization_id = user
        self._gs2_header = match.string[: match.start("bare")]
        self._client_first_bare = match["bare"]
        nonce = match["nonce"] + self._server_nonce
        self._server_first = f"r={nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        credential = self._credential
        if credential is None or self.complete:
            raise SaslFailure("Unexpected SCRAM message")
        match = _CLIENT_FINAL.match(message.decode("utf-8", "replace"))
        if match is None:
            raise SaslFailure("Invalid SCRAM client final message")
        if (
            not match["nonce"].endswith(self._server_nonce)
            or match["nonce"] != (self._server_first[2:].split(",", 1)[0])
        ):
            raise SaslFailure("Invalid client nonce in the final client message.")
        try:
            channel = _unb64(match["channel"])
            proof = _unb64(match["proof"])
        except ValueError as exc:
            raise SaslFailure("Invalid SCRAM client final message") from exc
        if channel != self._gs2_header.encode():
            raise SaslFailure("Invalid channel binding in the final client message")
        auth = ",".join(
            (self._client_first_bare, self._server_first, match["without_proof"])
        ).encode()
        signature = _hmac(self.mechanism, credential.stored_key, auth)
        if len(proof) != len(signature):
            raise SaslFailure("Invalid client credentials")
        computed = stored_key(self.mechanism, _xor(proof, signature))
        if not hmac.compare_digest(computed, credential.stored_key):
            raise SaslFailure("Invalid client credentials")
        self.complete = True
        return f"v={_b64(_hmac(self.mechanism, credential.server_key, auth))}".encode()


class ScramClient:
    """The client side (the gateway reaching a SCRAM-secured upstream, and tests):
    :meth:`first`, then :meth:`final` with the server-first, then :meth:`verify` with the
    server-final. Raises :class:`SaslFailure`."""

    def __init__(self, mechanism: Mechanism, user: str, password: str, nonce: str) -> None:
        self.mechanism = mechanism
        self._password = password
        self._bare = f"n={saslname(user)},r={nonce}"
        self._nonce = nonce
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        match = _SERVER_FIRST.match(text)
        if match is None or not match["nonce"].startswith(self._nonce):
            raise SaslFailure(f"Invalid SCRAM server first message: {text!r}")
        iterations = int(match["iterations"])
        if iterations < MIN_ITERATIONS:
            raise SaslFailure(f"Server iterations {iterations} below the minimum")
        salted = salted_password(self.mechanism, self._password, _unb64(match["salt"]), iterations)
        without_proof = f"c={_b64(b'n,,')},r={match['nonce']}"
        auth = ",".join((self._bare, text, without_proof)).encode()
        key = client_key(self.mechanism, salted)
        signature = _hmac(self.mechanism, stored_key(self.mechanism, key), auth)
        self._server_signature = _hmac(self.mechanism, server_key(self.mechanism, salted), auth)
        return f"{without_proof},p={_b64(_xor(key, signature))}".encode()

    def verify(self, server_final: bytes) -> None:
        match = _SERVER_FINAL.match(server_final.decode("utf-8", "replace"))
        if match is None:
            raise SaslFailure("Invalid SCRAM server final message")
        if match["error"]:
            raise SaslFailure(f"Server rejected the exchange: {match['error']}")
        if not hmac.compare_digest(_unb64(match["signature"]), self._server_signature):
            raise SaslFailure("Invalid server signature in the SCRAM server final message")
