"""Kafka's error codes, as one table.

Numbers and names are those of Kafka's ``Errors.java``; ``retriable`` says whether the client-side
exception extends ``RetriableException``. Only the errors this coordinator (and its clients) can
meet are listed.
"""

from __future__ import annotations

from enum import IntEnum


class Error(IntEnum):
    """A Kafka error code. ``Error.NONE`` (0) is success."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE

    @property
    def error_name(self) -> str | None:
        """The name a response carries in ``error``: None for success."""
        return _ERROR_NAMES[self]  # every response asks: a lookup, not enum's name property


#: ``error_name`` of every error, by error (an IntEnum hashes as its int).
_ERROR_NAMES: dict[int, str | None] = {e: None if e is Error.NONE else e.name for e in Error}

_RETRIABLE = frozenset(
    {
        Error.UNKNOWN_TOPIC_OR_PARTITION,
        Error.REQUEST_TIMED_OUT,
        Error.NETWORK_EXCEPTION,
        Error.COORDINATOR_LOAD_IN_PROGRESS,
        Error.COORDINATOR_NOT_AVAILABLE,
        Error.NOT_COORDINATOR,
        Error.UNSTABLE_OFFSET_COMMIT,
        Error.UNKNOWN_TOPIC_ID,
    }
)
