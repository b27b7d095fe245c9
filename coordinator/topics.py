"""The topics the coordinator knows: Kafka's metadata image, as far as consumer groups need it.

A consumer group's coordinator assigns partitions itself, so it must know every topic's name,
id and partition count (Kafka reads them from its metadata image). The caller hands the whole
current list to ``GroupCoordinator.update_topics`` (contract, section 6); this module validates
it and holds it. Topic ids are Kafka's ``Uuid``: 16 bytes, written as 22 characters of URL-safe
base64 without padding (``Uuid.toString()``).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Kafka's ``Uuid.ZERO_UUID`` as a string: "no topic id".
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


def uuid_to_bytes(topic_id: str) -> bytes:
    """The 16 bytes of a Kafka ``Uuid`` from its string form. Raises ValueError."""
    if not isinstance(topic_id, str) or len(topic_id) != 22:
        raise ValueError(f"a topic id is 22 characters of URL-safe base64, got {topic_id!r}")
    try:
        raw = base64.urlsafe_b64decode(topic_id + "==")
    except (binascii.Error, ValueError):
        raise ValueError(f"topic id {topic_id!r} is not URL-safe base64") from None
    if len(raw) != 16 or uuid_from_bytes(raw) != topic_id:
        raise ValueError(f"topic id {topic_id!r} is not the string form of a Kafka Uuid")
    return raw


def uuid_from_bytes(raw: bytes) -> str:
    """Kafka's ``Uuid.toString()`` of 16 bytes."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def topic_id_for(name: str) -> str:
    """The topic id of a topic known only by its name and partition count (the gateway's
    ``--topic`` list, the job's ``job.topics``): a name-based UUID, the same in every process
    and release, so that the ids the gateway's Metadata gives are the ones the coordinator
    assigns, whichever back end runs it."""
    return uuid_from_bytes(uuid.uuid5(uuid.NAMESPACE_URL, f"coordinator-gateway/{name}").bytes)


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic as a consumer group sees it (Kafka's ``TopicMetadata``)."""

    topic_id: str
    name: str
    partitions: int


class TopicImage:
    """The current topics, by name and by id. Immutable once built."""

    __slots__ = ("_by_id", "_by_name", "version")

    def __init__(self, topics: Iterable[TopicMetadata] = (), version: int = 0) -> None:
        #: How many times the caller has changed the topics (a RegularExpression record's
        #: ``version``, where Kafka writes its metadata image's offset).
        self.version = version
        self._by_name: dict[str, TopicMetadata] = {}
        self._by_id: dict[str, TopicMetadata] = {}
        for topic in topics:
            if topic.name in self._by_name:
                raise ValueError(f"topic {topic.name!r} is listed twice")
            if topic.topic_id in self._by_id:
                raise ValueError(f"topic id {topic.topic_id} is listed twice")
            self._by_name[topic.name] = topic
            self._by_id[topic.topic_id] = topic

    @classmethod
    def parse(cls, topics: Iterable[Mapping[str, Any]], version: int = 0) -> TopicImage:
        """From the contract's ``[{name, topic_id, partitions}]``; raises ValueError."""
        parsed = []
        for index, raw in enumerate(topics):
            if not isinstance(raw, Mapping):
                raise ValueError(f"topics[{index}] must be an object")
            name, topic_id, partitions = raw.get("name"), raw.get("topic_id"), raw.get("partitions")
            if not isinstance(name, str) or not name:
                raise ValueError(f"topics[{index}].name must be a non-empty string")
            if not isinstance(topic_id, str):
                raise ValueError(f"topics[{index}].topic_id must be a string")
            uuid_to_bytes(topic_id)
            if topic_id == ZERO_UUID:
                raise ValueError(f"topics[{index}].topic_id must not be the zero UUID")
            if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 0:
                raise ValueError(f"topics[{index}].partitions must be an integer >= 0")
            parsed.append(TopicMetadata(topic_id, name, partitions))
        return cls(parsed, version)

    def by_name(self, name: str) -> TopicMetadata | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: str) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def __iter__(self) -> Any:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicImage) and self._by_name == other._by_name

    def __hash__(self) -> int:  # pragma: no cover - images are not dict keys
        return hash(tuple(sorted(self._by_name)))

    def as_list(self) -> list[dict[str, Any]]:
        return [
            {"name": t.name, "topic_id": t.topic_id, "partitions": t.partitions}
            for t in sorted(self._by_name.values(), key=lambda t: t.name)
        ]


EMPTY_IMAGE = TopicImage()
