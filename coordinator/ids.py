"""Where the UUID part of member ids comes from.

Kafka mints ``<client id or instance id>-<random UUID>``. The engine asks an id source for the
UUID so that tests can be deterministic and so that the Spark job can make ids a function of its
inputs: a batch Spark re-runs after a crash must hand out the same ids, while ids stay
unguessable to other clients (a keyed hash of a secret seed).
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from typing import Any, Protocol


class IdSource(Protocol):
    def __call__(self, group_id: str, request_id: Any) -> str:
        """A canonical 36-character lowercase UUID string for a new member id."""
        ...


def random_ids(group_id: str, request_id: Any) -> str:
    """Kafka's choice: a random UUID (version 4)."""
    return str(uuid.uuid4())


class SequentialIds:
    """Deterministic, readable UUIDs for tests: 00000000-0000-4000-8000-000000000001, ..."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self, group_id: str, request_id: Any) -> str:
        self._next += 1
        return str(uuid.UUID(int=self._next, version=4))


class KeyedIds:
    """UUIDs derived from a secret seed, the group id, the request id and a per-request counter.

    The same inputs give the same id (a re-run batch re-mints the same ids); without the seed
    they cannot be predicted.
    """

    def __init__(self, seed: bytes) -> None:
        if len(seed) < 16:
            raise ValueError("the seed must be at least 16 bytes")
        self._seed = seed

    def __call__(self, group_id: str, request_id: Any) -> str:
        message = f"{len(group_id)}:{group_id}|{type(request_id).__name__}:{request_id}".encode()
        digest = hmac.new(self._seed, message, hashlib.sha256).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))
