"""Upstream mode: the gateway in front of a Kafka-protocol cluster, data to its brokers, groups
to our coordinator.

What goes where (the gateway's server asks :meth:`Upstream.routes` for each request):

- **Forwarded** (:data:`FORWARDED`): Produce, Fetch, ListOffsets, OffsetForLeaderEpoch,
  InitProducerId (idempotence only) and the topic admin APIs go, as the client's own bytes, to the
  broker the client addressed: the one whose gateway listener the connection came in on (a
  client only sends a partition's data to its leader, as Metadata named it), any broker from
  the bootstrap listener. Metadata goes too, and its answer's brokers are rewritten to the
  gateway's listeners (one per upstream broker, same node id), so clients connect only through
  the gateway and leaders stay right.
- **Refused** (:data:`TRANSACTIONAL`, InitProducerId with a transactional id, FindCoordinator for
  a transaction): a transaction's offsets go through the transaction coordinator
  (TxnOffsetCommit) into the upstream's ``__consumer_offsets``, not ours; answered
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which producers treat as fatal, not retriable.
- Everything else (ApiVersions, FindCoordinator for groups, every group API) is the gateway's,
  as without an upstream; never upstream.
- ``__consumer_offsets`` is the coordinator's log (:mod:`coordinator.gateway.log_topic`), not
  the upstream's, which holds none of our groups: Metadata names it (in place of the
  upstream's) with its partitions led by the gateway's own node (:data:`GATEWAY_NODE_ID`, the
  bootstrap listener), so clients that read it (Burrow, kcat) send their Fetch and ListOffsets
  for it there, apart from any data topic; a Fetch or ListOffsets of that topic alone is the
  gateway's (:data:`LOCAL`), on any listener. One that mixes it with data topics (which no
  client following the leaders sends) goes upstream whole.

The versions Kafka 4 removed (KIP-896) and deployed clients still send, Fetch v0-v3 (sarama's
default v3, kafka-go 0.2's v2) and ListOffsets v0 (Burrow's, sarama's before 0.10.1), are asked
upstream at Fetch v4 and ListOffsets v1 (:data:`UPCONVERTED`), which every broker since Kafka
0.11 serves, Kafka 4 included, and answered at the client's version as a Kafka 3.9 broker
answers them: Fetch's record batches down-converted to message sets of magic 0 (v0-v1) or 1
(v2-v3) from the offset asked (:func:`down_converted_fetch`), ListOffsets' offset as the one
old-style offset (:func:`down_converted_list_offsets`). So these clients read from brokers
that no longer serve, or never served, those versions.

Correlation ids: each client connection has its own connection to each broker it addresses
(as Kroxylicious does: one client's Fetch held for ``max_wait_ms`` never delays another's
Produce), with its own ids; the client's id is put back on the answer. The server serves one
request per client connection at a time, so answers go back in the client's order.

An unreachable broker (refused, reset, or silent for ``request_timeout_s``) answers as Kafka's
clients expect of a leader that went away: partition errors NOT_LEADER_OR_FOLLOWER (Produce,
Fetch, ListOffsets, OffsetForLeaderEpoch; REQUEST_TIMED_OUT for a Produce that was sent and not
acknowledged, which may have been written), COORDINATOR_NOT_AVAILABLE (InitProducerId), and
Metadata from the last answer seen with every partition LEADER_NOT_AVAILABLE; all are retriable
and make clients refresh their metadata. The admin APIs close the client's connection, as a
dead broker does. Group coordination never needs the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import struct
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from coordinator.gateway import codec
from coordinator.gateway.codec import FrameError
from coordinator.gateway.log_topic import LOG_TOPIC
from coordinator.gateway.record_batch import (
    LogRecord,
    UnsupportedCompression,
    decode_records,
    encode_message_set,
    fetch_magic,
)
from coordinator.topics import topic_id_for, uuid_from_bytes, uuid_to_bytes

if TYPE_CHECKING:
    from coordinator.gateway.security.client import UpstreamCredentials
    from coordinator.gateway.security.forwarded import Decision
    from coordinator.gateway.security.session import Session

log = logging.getLogger(__name__)

# Kafka's API keys beyond codec's (the APIs an upstream serves).
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 19, 20, 21, 22
OFFSET_FOR_LEADER_EPOCH, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 23, 24, 25, 26
TXN_OFFSET_COMMIT, DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS = 28, 32, 33, 37
INCREMENTAL_ALTER_CONFIGS = 44

#: Sent to the partition's leader (the listener's broker) as they are.
FORWARDED = frozenset(
    {
        codec.PRODUCE,
        codec.FETCH,
        codec.LIST_OFFSETS,
        INIT_PRODUCER_ID,
        OFFSET_FOR_LEADER_EPOCH,
        CREATE_TOPICS,
        DELETE_TOPICS,
        DELETE_RECORDS,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        CREATE_PARTITIONS,
        INCREMENTAL_ALTER_CONFIGS,
    }
)
#: The transaction APIs a client may send (none is advertised): refused.
TRANSACTIONAL = frozenset({ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT})

# Kafka's error codes used here.
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
COORDINATOR_NOT_AVAILABLE = 15
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNSUPPORTED_COMPRESSION_TYPE = 76
UNKNOWN_TOPIC_ID = 100

#: The first version of the APIs that name a topic by its id alone: never advertised while the
#: upstream has no topic ids (the ids clients know are then the gateway's own, which its
#: brokers have never heard of), so that clients name topics as the upstream knows them.
BY_TOPIC_ID = {codec.PRODUCE: 13, codec.FETCH: 13}
#: The first Metadata version whose answers carry topic ids (KIP-516, Kafka 2.8).
METADATA_TOPIC_IDS = 10
ZERO_UUID = uuid.UUID(int=0)

#: Per API, (the highest version Kafka 4 removed, the version it is asked upstream at instead).
UPCONVERTED: dict[int, tuple[int, int]] = {codec.FETCH: (3, 4), codec.LIST_OFFSETS: (0, 1)}

TRANSACTIONS_REFUSED = (
    "transactions are not served through this gateway: a transaction's offsets would be "
    "committed to the upstream cluster's __consumer_offsets, not the coordinator's"
)

#: The node id of the gateway's bootstrap listener in Metadata: the leader of the log topic's
#: partitions, and the coordinator while the upstream's brokers have never been seen; far above
#: any broker's id.
GATEWAY_NODE_ID = 2**31 - 2


class Route(enum.Enum):
    """What :meth:`Upstream.serve` answers for a request the gateway serves itself."""

    LOCAL = "local"


#: A request of the log topic alone: the gateway's, as without an upstream.
LOCAL = Route.LOCAL

#: Kafka's default request.timeout.ms (the clients'): how long a broker may take to answer.
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
#: How often every topic is asked of the upstream (``upstream.metadata.max.age.ms``), so that
#: consumer groups see topics created, grown and deleted. Kafka's clients refresh every 5
#: minutes (``metadata.max.age.ms``); a Kafka coordinator sees its metadata image change at
#: once, so the gateway asks more often.
DEFAULT_METADATA_MAX_AGE_MS = 30_000
DEFAULT_CONNECT_TIMEOUT_S = 5.0
#: A Fetch answered with errors is held this long at most (the client's max_wait_ms, capped),
#: so that clients do not spin while the broker is away.
MAX_ERROR_FETCH_WAIT_S = 1.0

Address = tuple[str, int]


class UpstreamUnavailable(Exception):
    """The broker could not be reached, or dropped the connection before answering."""

    def __init__(self, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        #: whether the request had been written (a Produce may then have been appended)
        self.sent = sent


def parse_bootstrap(servers: str) -> list[Address]:
    """``HOST:PORT[,HOST:PORT...]`` (Kafka's ``bootstrap.servers``) as addresses."""
    out: list[Address] = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"an upstream server is HOST:PORT, got {item!r}")
        out.append((host, int(port)))
    if not out:
        raise ValueError("no upstream bootstrap server given")
    return out


# --- correlation ids --------------------------------------------------------------------------


def request_correlation_id(frame: bytes) -> int:
    """The correlation id of a request frame (without its size prefix): after the API key and
    version in every header version."""
    return int(struct.unpack_from(">i", frame, 4)[0])


def with_request_correlation_id(frame: bytes, correlation_id: int) -> bytes:
    """The request frame with another correlation id (nothing else changes)."""
    return frame[:4] + struct.pack(">i", correlation_id) + frame[8:]


def response_correlation_id(frame: bytes) -> int:
    """The correlation id of a response frame: its first field in every header version."""
    return int(struct.unpack_from(">i", frame, 0)[0])


def with_response_correlation_id(frame: bytes, correlation_id: int) -> bytes:
    return struct.pack(">i", correlation_id) + frame[4:]


# --- what is advertised -----------------------------------------------------------------------


def intersect(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    low, high = max(a[0], b[0]), min(a[1], b[1])
    return (low, high) if low <= high else None


def advertised_versions(
    upstream: dict[int, tuple[int, int]] | None, *, topic_ids: bool = True
) -> dict[int, tuple[int, int]]:
    """The ApiVersions table of the gateway in upstream mode: the group APIs and ApiVersions at
    the gateway's own ranges (never upstream); Metadata and every forwarded API at the
    intersection of the upstream's range and the versions the gateway reads and answers, from
    the gateway's floor for the APIs whose old versions it converts (:data:`UPCONVERTED`) when
    the upstream serves the version they are asked at; no transaction API; without
    ``topic_ids`` (an upstream whose topics have none), below the versions that name topics by
    id alone (:data:`BY_TOPIC_ID`). While the upstream has not answered (``upstream`` None) the
    forwarded APIs the gateway can answer alone with retriable errors keep its coordinator-only
    ranges."""
    own = {
        key: span
        for key, span in codec.SUPPORTED.items()
        if key not in FORWARDED and key != codec.METADATA
    }
    if upstream is None:
        alone = {codec.PRODUCE, codec.FETCH, codec.LIST_OFFSETS, codec.METADATA}
        own.update({key: codec.SUPPORTED[key] for key in alone})
        return dict(sorted(own.items()))
    for key in (*FORWARDED, codec.METADATA):
        theirs = upstream.get(key)
        ours = codec.readable_versions(key)
        if key in UPCONVERTED and theirs is not None and ours is not None:
            asked = UPCONVERTED[key][1]
            if theirs[0] <= asked <= theirs[1]:  # the old versions are asked at ``asked``
                theirs = (ours[0], theirs[1])
        both = intersect(theirs, ours) if theirs is not None and ours is not None else None
        if both is not None and not topic_ids and key in BY_TOPIC_ID:
            both = intersect(both, (0, BY_TOPIC_ID[key] - 1))
        if both is not None:
            own[key] = both
    return dict(sorted(own.items()))


# --- Metadata -------------------------------------------------------------------------------


def rewrite_brokers(body: dict[str, Any], listeners: dict[int, Address]) -> dict[str, Any]:
    """A Metadata answer (plain data) whose brokers are the gateway's listeners: each upstream
    broker keeps its node id and rack, with the host and port of its gateway listener, so that
    leaders, replicas and the controller keep naming the same nodes."""
    brokers = []
    for broker in body["brokers"]:
        host, port = listeners[broker["node_id"]]
        brokers.append({**broker, "host": host, "port": port})
    return {**body, "brokers": brokers}


@dataclass(frozen=True)
class LogTopicShape:
    """The coordinator's log as Metadata names it in upstream mode."""

    partitions: int
    topic_id: uuid.UUID


def with_log_topic(
    answer: dict[str, Any],
    everything: bool,
    log_topic: LogTopicShape,
    gateway: dict[str, Any],
) -> dict[str, Any]:
    """A Metadata answer (plain data, brokers already the gateway's) where ``__consumer_offsets``
    is the coordinator's log, led by the ``gateway`` broker (added to the brokers), when the
    request asked for every topic (``everything``) or named it; as it was otherwise."""
    named = any(t["name"] == LOG_TOPIC for t in answer["topics"])
    if not everything and not named:
        return answer
    node = gateway["node_id"]
    topic = {
        "error_code": 0,
        "name": LOG_TOPIC,
        "topic_id": log_topic.topic_id,
        "is_internal": True,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": index,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for index in range(log_topic.partitions)
        ],
        "topic_authorized_operations": -(2**31),
    }
    topics = [t for t in answer["topics"] if t["name"] != LOG_TOPIC] + [topic]
    brokers = [b for b in answer["brokers"] if b["node_id"] != node] + [gateway]
    return {**answer, "brokers": brokers, "topics": topics}


def only_log_topic(api_key: int, body: dict[str, Any]) -> bool:
    """Whether a Fetch or ListOffsets request names the log topic and nothing else."""
    key = "topic" if api_key == codec.FETCH else "name"
    names = {t[key] for t in body.get("topics") or []}
    return names == {LOG_TOPIC}


@dataclass
class TopicShape:
    """What the last upstream Metadata said of a topic, kept for answering without it and for
    the coordinator's consumer groups."""

    #: The upstream's id; :data:`ZERO_UUID` when a Metadata answer that carries ids (v10+) had
    #: none for it (a broker without topic ids); None while only older answers named it.
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: list[int]


def gateway_topic_id(name: str) -> uuid.UUID:
    """The id the gateway gives a topic its upstream names without one: the one the gateway
    without an upstream gives a ``--topic`` (:func:`coordinator.topics.topic_id_for`)."""
    return uuid.UUID(bytes=uuid_to_bytes(topic_id_for(name)))


def _as_uuid(value: Any) -> uuid.UUID | None:
    """A Metadata field's topic id as a UUID; None for none (kio's null, or the zero UUID)."""
    if value is None:
        return None
    found = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    return None if found == ZERO_UUID else found


def unknown_topic_id(topic_id: uuid.UUID) -> dict[str, Any]:
    """Kafka's Metadata entry for a topic asked for by an id no topic has."""
    return {
        "error_code": UNKNOWN_TOPIC_ID,
        "name": None,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": -(2**31),
    }


def unavailable_metadata(
    body: dict[str, Any],
    brokers: list[dict[str, Any]],
    cluster_id: str | None,
    controller_id: int,
    known: dict[str, TopicShape],
) -> dict[str, Any]:
    """Metadata while the upstream cannot be asked: the brokers last seen (the gateway's
    listeners), and each topic asked for as last seen with every partition LEADER_NOT_AVAILABLE
    and no leader, as Kafka answers for partitions without a live leader; a topic never seen is
    LEADER_NOT_AVAILABLE as a whole (Kafka's answer while a topic is being created). Retriable:
    clients keep their assignment and ask again."""
    wanted = body.get("topics")
    names = sorted(known) if not wanted else [t["name"] for t in wanted]
    topics = []
    for name in names:
        shape = known.get(name)
        topics.append(
            {
                "error_code": 0 if shape is not None else LEADER_NOT_AVAILABLE,
                "name": name,
                "topic_id": shape.topic_id if shape is not None else uuid.UUID(int=0),
                "is_internal": shape.is_internal if shape is not None else False,
                "partitions": [
                    {
                        "error_code": LEADER_NOT_AVAILABLE,
                        "partition_index": index,
                        "leader_id": -1,
                        "leader_epoch": -1,
                        "replica_nodes": [],
                        "isr_nodes": [],
                        "offline_replicas": [],
                    }
                    for index in (shape.partitions if shape is not None else [])
                ],
                "topic_authorized_operations": -(2**31),
            }
        )
    return {
        "throttle_time": 0,
        "brokers": brokers,
        "cluster_id": cluster_id,
        "controller_id": controller_id,
        "topics": topics,
        "cluster_authorized_operations": -(2**31),
    }


# --- answers the gateway gives in the broker's place ------------------------------------------


def error_answer(api_key: int, body: dict[str, Any], error: int, message: str) -> dict[str, Any]:
    """The answer (plain data) to a forwarded or refused request that gets ``error`` for every
    partition (or as a whole), echoing the request's topics and partitions. Raises KeyError for
    an API answered only by its broker (the caller closes the connection)."""
    if api_key == codec.PRODUCE:
        return {
            "throttle_time": 0,
            "responses": [
                {
                    "name": t.get("name"),
                    "topic_id": t.get("topic_id"),
                    "partition_responses": [
                        {
                            "index": p["index"],
                            "error_code": error,
                            "base_offset": -1,
                            "log_append_time": -1,
                            "log_start_offset": -1,
                            "record_errors": [],
                            "error_message": message,
                        }
                        for p in t["partition_data"]
                    ],
                }
                for t in body["topic_data"]
            ],
        }
    if api_key == codec.FETCH:
        return {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic": t.get("topic"),
                    "topic_id": t.get("topic_id"),
                    "partitions": [
                        {
                            "partition_index": p["partition"],
                            "error_code": error,
                            "high_watermark": -1,
                            "last_stable_offset": -1,
                            "log_start_offset": -1,
                            "aborted_transactions": [],
                            "preferred_read_replica": -1,
                            "records": b"",  # never null: kafka-python fails on null
                        }
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ],
        }
    if api_key == codec.LIST_OFFSETS:
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {
                            "partition_index": p["partition_index"],
                            "error_code": error,
                            "timestamp": -1,
                            "offset": -1,
                            "leader_epoch": -1,
                            "old_style_offsets": [],
                        }
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ],
        }
    if api_key == OFFSET_FOR_LEADER_EPOCH:
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "topic": t["topic"],
                    "partitions": [
                        {
                            "error_code": error,
                            "partition": p["partition"],
                            "leader_epoch": -1,
                            "end_offset": -1,
                        }
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ],
        }
    if api_key in (INIT_PRODUCER_ID, ADD_OFFSETS_TO_TXN, END_TXN):
        return {"throttle_time": 0, "error_code": error, "producer_id": -1, "producer_epoch": -1}
    if api_key == TXN_OFFSET_COMMIT:
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": error}
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ],
        }
    if api_key == ADD_PARTITIONS_TO_TXN and "v3_and_below_topics" in body:
        return {
            "throttle_time": 0,
            "results_by_topic_v3_and_below": [
                {
                    "name": t["name"],
                    "results_by_partition": [
                        {"partition_index": index, "partition_error_code": error}
                        for index in t["partitions"]
                    ],
                }
                for t in body["v3_and_below_topics"]
            ],
        }
    raise KeyError(api_key)


def unavailable_error(api_key: int, failure: UpstreamUnavailable) -> int:
    """Kafka's retriable error for a request its broker did not answer."""
    if api_key == INIT_PRODUCER_ID:
        return COORDINATOR_NOT_AVAILABLE
    if api_key == codec.PRODUCE and failure.sent:
        return REQUEST_TIMED_OUT  # it may have been appended: the client's retry decides
    return NOT_LEADER_OR_FOLLOWER


# --- the versions Kafka 4 removed ----------------------------------------------------------------


def up_converted_request(api_key: int, body: dict[str, Any]) -> dict[str, Any]:
    """The body of an old Fetch (v0-v3) or ListOffsets (v0) request as the version it is asked
    upstream at (:data:`UPCONVERTED`): read_uncommitted, as clients older than transactions
    read; Fetch v0-v2's unlimited answer size; ListOffsets' max_num_offsets dropped."""
    if api_key == codec.FETCH:
        return {**body, "isolation_level": 0, "max_bytes": body.get("max_bytes", 2**31 - 1)}
    return body


def down_converted_fetch(
    version: int, request: dict[str, Any], answer: dict[str, Any]
) -> dict[str, Any]:
    """A Fetch v4 answer (plain data) as Fetch ``version`` (v0-v3) answers the same request: each
    partition's records as a message set of :func:`fetch_magic`, from the offset it asked for
    (Kafka's ``RecordsUtil.downConvert``), whole messages only, within the partition's
    ``partition_max_bytes`` (message sets are larger than batches of the same records): a hard
    limit for v0-v2, at least one message from v3 (Kafka's ``minOneMessage``). A partition
    whose records cannot be read (a codec this gateway cannot decompress) is answered
    UNSUPPORTED_COMPRESSION_TYPE."""
    magic = fetch_magic(version)
    asked = {
        (t["topic"], p["partition"]): (p["fetch_offset"], p["partition_max_bytes"])
        for t in request["topics"]
        for p in t["partitions"]
    }
    topics = []
    for t in answer["responses"]:
        partitions = []
        for p in t["partitions"]:
            records, error = p.get("records") or b"", p["error_code"]
            if records:
                start, limit = asked.get((t["topic"], p["partition_index"]), (0, 2**31 - 1))
                try:
                    kept = [r for r in decode_records(records) if r.offset >= start]
                except UnsupportedCompression as exc:
                    log.warning("Fetch v%s of %s: %s", version, t["topic"], exc)
                    kept, error = [], UNSUPPORTED_COMPRESSION_TYPE
                records = _message_set_within(kept, magic, limit, min_one=version >= 3)
            partitions.append({**p, "error_code": error, "records": records})
        topics.append({**t, "partitions": partitions})
    return {**answer, "responses": topics}


def _message_set_within(records: list[LogRecord], magic: int, limit: int, min_one: bool) -> bytes:
    out = bytearray()
    for record in records:
        message = encode_message_set([record], magic)
        if len(out) + len(message) > limit and (out or not min_one):
            break
        out += message
    return bytes(out)


def down_converted_list_offsets(request: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """A ListOffsets v1 answer as v0 answers it: the offset found as the one old-style offset
    (none when none was found or none was asked). v0 asked by a time meant "offsets of the
    segments before it"; it is answered with v1's "first offset at or after it"."""
    wanted = {
        (t["name"], p["partition_index"]): p.get("max_num_offsets", 1)
        for t in request["topics"]
        for p in t["partitions"]
    }
    topics = []
    for t in answer["topics"]:
        partitions = []
        for p in t["partitions"]:
            found = int(p.get("offset", -1))
            many = wanted.get((t["name"], p["partition_index"]), 1)
            offsets = [found] if found >= 0 and many > 0 and p["error_code"] == 0 else []
            partitions.append({**p, "old_style_offsets": offsets})
        topics.append({**t, "partitions": partitions})
    return {**answer, "topics": topics}


# --- connections ----------------------------------------------------------------------------


class BrokerConnection:
    """One connection to one upstream broker, with its own correlation ids: requests are
    written with the next id and their answers matched back by it, the client's id restored."""

    def __init__(
        self,
        address: Address,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_MS / 1000,
        credentials: UpstreamCredentials | None = None,
    ) -> None:
        self.address = address
        self.credentials = credentials
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def _next_id(self) -> int:
        return next(self._ids) % 2**31

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._lock:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            host, port = self.address
            credentials = self.credentials
            context = None if credentials is None else credentials.ssl_context
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    reader, writer = await asyncio.open_connection(
                        host, port, ssl=context, server_hostname=host if context else None
                    )
                    if credentials is not None and credentials.mechanism is not None:
                        from coordinator.gateway.security.client import authenticate

                        await authenticate(reader, writer, credentials)
            except Exception as exc:  # refused, TLS or SASL refused, silent, or garbled
                raise UpstreamUnavailable(f"{host}:{port} unreachable: {exc!r}") from exc
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read(reader, writer))
            return writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        failure: BaseException = UpstreamUnavailable("the broker closed the connection", sent=True)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                future = self._pending.pop(response_correlation_id(frame), None)
                if future is not None and not future.done():
                    future.set_result(frame)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            failure = UpstreamUnavailable(f"connection to the broker lost: {exc!r}", sent=True)
        finally:
            writer.close()
            if self._writer is writer:
                self._writer = None
            pending, self._pending = self._pending, {}
            for future in pending.values():
                if not future.done():
                    future.set_exception(failure)

    async def call(self, frame: bytes, *, expect_response: bool = True) -> bytes | None:
        """Send a request frame (without its size prefix) and return the answer frame (without
        its size prefix) carrying the request's own correlation id; None when Kafka sends no
        answer (a Produce with acks=0). Raises :class:`UpstreamUnavailable`."""
        writer = await self._connect()
        ours = self._next_id()
        future: asyncio.Future[bytes] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[ours] = future
        try:
            writer.write(struct.pack(">i", len(frame)) + with_request_correlation_id(frame, ours))
            await writer.drain()
        except (ConnectionError, OSError) as exc:
            self._pending.pop(ours, None)
            raise UpstreamUnavailable(f"could not send to the broker: {exc!r}") from exc
        if future is None:
            return None
        try:
            async with asyncio.timeout(self.request_timeout_s):
                answer = await future
        except TimeoutError as exc:
            self._pending.pop(ours, None)
            raise UpstreamUnavailable(
                f"no answer within {self.request_timeout_s:g} s", sent=True
            ) from exc
        return with_response_correlation_id(answer, request_correlation_id(frame))

    async def close(self) -> None:
        writer, task = self._writer, self._reader_task
        self._writer = None
        if writer is not None:
            writer.close()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


@dataclass
class ClientLink:
    """A client connection's connections upstream, opened when first needed."""

    node_id: int | None  # the broker of the listener it came in on; None: bootstrap
    brokers: dict[Address, BrokerConnection] = field(default_factory=dict)

    async def close(self) -> None:
        for connection in self.brokers.values():
            await connection.close()
        self.brokers.clear()


# --- the cluster ----------------------------------------------------------------------------


#: Opens (once) the gateway listener of an upstream node and returns its address.
EnsureListener = Callable[[int], Awaitable[Address]]


class Upstream:
    """The upstream cluster as the gateway sees it: its bootstrap servers, the brokers and API
    versions it last answered with, and the forwarding of requests to them."""

    def __init__(
        self,
        bootstrap: list[Address],
        *,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        credentials: UpstreamCredentials | None = None,
        metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS,
    ) -> None:
        if metadata_max_age_ms <= 0:
            raise ValueError(f"upstream.metadata.max.age.ms must be > 0, got {metadata_max_age_ms}")
        self.bootstrap = list(bootstrap)
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        #: the gateway's own TLS and SASL towards the upstream (None: plaintext)
        self.credentials = credentials
        self.request_timeout_s = request_timeout_ms / 1000
        self.connect_timeout_s = connect_timeout_s
        #: node id -> the broker's own address (from the last Metadata)
        self.brokers: dict[int, Address] = {}
        self.racks: dict[int, str | None] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.topics: dict[str, TopicShape] = {}
        #: the upstream's ApiVersions table (None until it answered)
        self.api_versions: dict[int, tuple[int, int]] | None = None
        self._ensure_listener: EnsureListener | None = None
        #: Called with the topic list (:meth:`topic_list`) when a Metadata answer changed it
        #: (consumer groups are assigned from the upstream's topics).
        self.on_topics: Callable[[list[dict[str, Any]]], None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        #: Set when a topic needs its id asked for before the next periodic refresh.
        self._refresh_soon = asyncio.Event()
        self._gateway_address: Address = ("127.0.0.1", 0)
        self._log_topic: LogTopicShape | None = None
        self._control = ClientLink(None)

    def attach(
        self,
        gateway_address: Address,
        ensure_listener: EnsureListener,
        log_topic: LogTopicShape | None = None,
    ) -> None:
        """The gateway's bootstrap address, how to open a listener per broker, and the log topic
        it serves itself (None: the upstream's ``__consumer_offsets`` is forwarded)."""
        self._gateway_address = gateway_address
        self._ensure_listener = ensure_listener
        self._log_topic = log_topic

    def _gateway_broker(self) -> dict[str, Any]:
        host, port = self._gateway_address
        return {"node_id": GATEWAY_NODE_ID, "host": host, "port": port, "rack": None}

    def _with_log_topic(self, version: int, body: dict[str, Any], answer: dict[str, Any]) -> Any:
        if self._log_topic is None:
            return answer
        wanted = body.get("topics")
        everything = wanted is None or (version == 0 and not wanted)
        return with_log_topic(answer, everything, self._log_topic, self._gateway_broker())

    def connection(self, link: ClientLink, address: Address) -> BrokerConnection:
        connection = link.brokers.get(address)
        if connection is None:
            connection = BrokerConnection(
                address,
                connect_timeout_s=self.connect_timeout_s,
                request_timeout_s=self.request_timeout_s,
                credentials=self.credentials,
            )
            link.brokers[address] = connection
        return connection

    async def start(self) -> None:
        """Ask the upstream for its API versions, brokers and topics, then again every
        ``metadata_max_age_ms``; an unreachable upstream is logged, and asked again when a
        client needs it and at the next refresh."""
        try:
            await self.refresh()
        except UpstreamUnavailable as exc:
            log.warning("upstream %s unreachable at start: %s", self.bootstrap, exc)
        self._refresher = asyncio.create_task(self._refresh_forever(), name="upstream-metadata")

    async def stop(self) -> None:
        task, self._refresher = self._refresher, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._control.close()

    async def refresh(self) -> None:
        """ApiVersions, then Metadata of every topic (at the highest version both serve, with
        topic ids from v10) from the upstream, on the gateway's own connection. Raises
        :class:`UpstreamUnavailable`."""
        versions = await self._ask(codec.API_VERSIONS, 0, {})
        if int(versions["error_code"]) == 0:
            self.api_versions = {
                int(k["api_key"]): (int(k["min_version"]), int(k["max_version"]))
                for k in versions["api_keys"]
            }
        theirs = (self.api_versions or {}).get(codec.METADATA, (1, 1))
        # v1 at least: v0's "every topic" is an empty list
        version = max(1, min(theirs[1], codec.SUPPORTED[codec.METADATA][1]))
        body = {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        answer = await self._ask(codec.METADATA, version, body)
        await self._learn(answer, everything=True, with_ids=version >= METADATA_TOPIC_IDS)

    async def _refresh_forever(self) -> None:
        """Kafka's metadata refresh: every topic asked again every ``metadata_max_age_ms``,
        or sooner when a client's Metadata named a topic whose id is not known yet."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.metadata_max_age_s):
                    await self._refresh_soon.wait()
            self._refresh_soon.clear()
            try:
                await self.refresh()
            except UpstreamUnavailable as exc:
                log.info("upstream metadata refresh failed: %s", exc)
            except Exception:  # an answer that does not decode: the next refresh tries again
                log.exception("upstream metadata refresh failed")
            await asyncio.sleep(min(1.0, self.metadata_max_age_s))  # never more than once a second

    async def _ask(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        frame = codec.encode_request(api_key, version, 1, body, client_id="coordinator-gateway")
        last: UpstreamUnavailable | None = None
        for address in self._addresses(None):
            try:
                answer = await self.connection(self._control, address).call(frame[4:])
            except UpstreamUnavailable as exc:
                last = exc
                continue
            assert answer is not None
            _, response = codec.decode_response(api_key, version, answer)
            plain: dict[str, Any] = codec.plain(response)
            return plain
        raise last or UpstreamUnavailable("no upstream server")

    def _addresses(self, node_id: int | None) -> list[Address]:
        """Where a request addressed to ``node_id`` goes: that broker; for the bootstrap
        listener, the brokers last seen, then the bootstrap servers."""
        if node_id is not None:
            address = self.brokers.get(node_id)
            return [address] if address is not None else []
        seen = [self.brokers[n] for n in sorted(self.brokers)]
        return seen + [a for a in self.bootstrap if a not in seen]

    async def _learn(self, answer: dict[str, Any], *, everything: bool, with_ids: bool) -> None:
        """Take the brokers and topics of a Metadata answer (plain data, as the upstream gave
        it); open a listener per new broker. ``everything``: the answer lists every topic, so a
        topic it lacks was deleted; otherwise it only adds and updates. ``with_ids``: its
        version carries topic ids (v10+), where a null id means the upstream has none; an older
        answer keeps the id known. The coordinator is told when its topic list changes."""
        self.brokers = {int(b["node_id"]): (b["host"], int(b["port"])) for b in answer["brokers"]}
        self.racks = {int(b["node_id"]): b.get("rack") for b in answer["brokers"]}
        self.cluster_id = answer.get("cluster_id", self.cluster_id)
        self.controller_id = int(answer.get("controller_id", -1))
        listed = self.topic_list()
        before = self.topics
        seen: dict[str, TopicShape] = {}
        for topic in answer.get("topics") or []:
            name = topic.get("name")
            if name is None:
                continue
            if int(topic["error_code"]) != 0:
                if everything and name in before:  # listed, so it exists (no leader, say)
                    seen[name] = before[name]
                continue
            known = before.get(name)
            topic_id: uuid.UUID | None
            if with_ids:
                topic_id = _as_uuid(topic.get("topic_id")) or ZERO_UUID
            else:
                topic_id = None if known is None else known.topic_id
            seen[name] = TopicShape(
                topic_id,
                bool(topic.get("is_internal", False)),
                sorted(int(p["partition_index"]) for p in topic["partitions"]),
            )
        self.topics = seen if everything else {**before, **seen}
        if any(shape.topic_id is None for shape in seen.values()) and self.serves_topic_ids:
            self._refresh_soon.set()  # its id comes with the next listing
        if self.on_topics is not None:
            now = self.topic_list()
            if now != listed:
                self.on_topics(now)
        if self._ensure_listener is not None:
            for node_id in sorted(self.brokers):
                await self._ensure_listener(node_id)

    @property
    def serves_topic_ids(self) -> bool:
        """Whether the upstream names its topics by id: it serves Metadata v10+ and no topic
        it listed so had a null id (noida-db answers v12 with none; Kafka 2.8+ has them)."""
        theirs = (self.api_versions or {}).get(codec.METADATA)
        if theirs is None or theirs[1] < METADATA_TOPIC_IDS:
            return False
        return all(shape.topic_id != ZERO_UUID for shape in self.topics.values())

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id clients and the coordinator know the topic ``name`` by: the upstream's, or
        the gateway's own (:func:`gateway_topic_id`) for an upstream without topic ids; None for
        a topic not seen, or seen only in answers older than v10 from an upstream with ids."""
        shape = self.topics.get(name)
        if shape is None:
            return None
        if shape.topic_id is None:
            return None if self.serves_topic_ids else gateway_topic_id(name)
        return gateway_topic_id(name) if shape.topic_id == ZERO_UUID else shape.topic_id

    def topic_list(self) -> list[dict[str, Any]]:
        """The upstream's topics as the coordinator learns them (contract, section 6): every
        topic but the internal ones, with the ids of :meth:`topic_id` (a topic whose id is
        not known yet is left out until it is)."""
        out = []
        for name, shape in sorted(self.topics.items()):
            topic_id = self.topic_id(name)
            if shape.is_internal or topic_id is None:
                continue
            out.append(
                {
                    "name": name,
                    "topic_id": uuid_from_bytes(topic_id.bytes),
                    "partitions": len(shape.partitions),
                }
            )
        return out

    def named_topics(
        self, body: dict[str, Any], *, any_id: bool = False
    ) -> tuple[dict[str, Any], list[uuid.UUID]]:
        """A Metadata request (plain data) whose topics asked for by the gateway's own ids
        (every known id with ``any_id``) are asked for by name, and the ids asked for that no
        known topic has (Kafka answers them UNKNOWN_TOPIC_ID): an upstream without topic ids
        knows its topics by name only."""
        wanted = body.get("topics")
        if not wanted:
            return body, []
        names: dict[uuid.UUID, tuple[str, bool]] = {}  # id -> (name, the gateway's own id)
        for name, shape in self.topics.items():
            topic_id = self.topic_id(name)
            if topic_id is not None:
                names[topic_id] = (name, shape.topic_id != topic_id)
        topics, unknown = [], []
        for topic in wanted:
            topic_id = _as_uuid(topic.get("topic_id"))
            known = names.get(topic_id) if topic_id is not None else None
            if topic.get("name") is not None or topic_id is None:
                topics.append(topic)
            elif known is None:
                unknown.append(topic_id)
            elif any_id or known[1]:
                topics.append({**topic, "name": known[0], "topic_id": None})
            else:  # the upstream's own id: it answers it
                topics.append(topic)
        if len(topics) == len(wanted) and all(a is b for a, b in zip(topics, wanted, strict=True)):
            return body, []
        return {**body, "topics": topics}, unknown

    def with_topic_ids(self, answer: dict[str, Any], unknown: list[uuid.UUID]) -> dict[str, Any]:
        """A Metadata answer (v10+) whose topics carry the ids of :meth:`topic_id` where the
        upstream gave none, and an UNKNOWN_TOPIC_ID entry for each id in ``unknown``."""
        topics = []
        for topic in answer["topics"]:
            name = topic.get("name")
            if name is not None and _as_uuid(topic.get("topic_id")) is None:
                topic_id = self.topic_id(name)
                if topic_id is not None:
                    topic = {**topic, "topic_id": topic_id}
            topics.append(topic)
        topics += [unknown_topic_id(topic_id) for topic_id in unknown]
        return {**answer, "topics": topics}

    async def listeners(self) -> dict[int, Address]:
        assert self._ensure_listener is not None
        return {n: await self._ensure_listener(n) for n in sorted(self.brokers)}

    async def coordinator(self) -> tuple[int, str, int]:
        """Where FindCoordinator sends clients for a group: the gateway listener of the upstream
        broker with the lowest node id (a node clients know from Metadata), or the bootstrap
        listener as :data:`GATEWAY_NODE_ID` while no broker has been seen."""
        if self.brokers:
            node_id = min(self.brokers)
            host, port = (await self.listeners())[node_id]
            return node_id, host, port
        host, port = self._gateway_address
        return GATEWAY_NODE_ID, host, port

    async def advertised(self) -> dict[int, tuple[int, int]]:
        if self.api_versions is None:
            with contextlib.suppress(UpstreamUnavailable):
                await self.refresh()
        return advertised_versions(self.api_versions, topic_ids=self.serves_topic_ids)

    # --- serving a client's request ---------------------------------------------------------

    @staticmethod
    def routes(api_key: int) -> bool:
        """Whether a request of ``api_key`` is this module's to serve (forwarded or refused)."""
        return api_key in FORWARDED or api_key in TRANSACTIONAL or api_key == codec.METADATA

    async def serve(
        self, link: ClientLink, frame: bytes, session: Session | None = None
    ) -> bytes | Literal[Route.LOCAL] | None:
        """The framed answer to a request frame (without its size prefix) of an API that
        :meth:`routes`; None when Kafka sends none; :data:`LOCAL` for a request of the log
        topic alone, which the gateway answers as without an upstream. Raises FrameError to
        close the client's connection (bad input, or an admin request whose broker is away).
        With ACLs enforced, only what ``session``'s principal may do is forwarded
        (:mod:`coordinator.gateway.security.forwarded`)."""
        api_key, version, correlation_id = codec.peek_header(frame)
        readable = codec.readable_versions(api_key)
        assert readable is not None
        request = codec.decode_request(frame, {api_key: readable})
        body: dict[str, Any] = codec.plain(request.body)
        if api_key in TRANSACTIONAL or (
            api_key == INIT_PRODUCER_ID and body.get("transactional_id") is not None
        ):
            log.info("refused %s from %s: %s", api_key, request.client_id, TRANSACTIONS_REFUSED)
            answer = error_answer(
                api_key, body, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONS_REFUSED
            )
            return codec.encode_response(api_key, version, correlation_id, answer)
        if (
            api_key in (codec.FETCH, codec.LIST_OFFSETS)
            and self._log_topic is not None
            and only_log_topic(api_key, body)
        ):
            return LOCAL  # authorized by the gateway's own dispatch
        asked = body  # before any topic id is put as its name
        unknown_ids: list[uuid.UUID] = []
        if (
            api_key == codec.METADATA
            and version >= METADATA_TOPIC_IDS
            and not self.serves_topic_ids
        ):
            named, unknown_ids = self.named_topics(body)
            if named is not body:
                body = named
                frame = codec.encode_request(
                    api_key, version, correlation_id, body, request.client_id
                )[4:]
        decision = None
        if session is not None and session.security.enforcing:
            from coordinator.gateway.security import forwarded

            names = {str(self.topic_id(name)): name for name in self.topics}
            decision = forwarded.guard(session, api_key, version, body, names)
            if decision.forward is None:
                assert decision.refused is not None
                return codec.encode_response(api_key, version, correlation_id, decision.refused)
            if decision.changed:
                frame = codec.encode_request(
                    api_key, version, correlation_id, decision.forward, request.client_id
                )[4:]
        old = UPCONVERTED.get(api_key)
        if old is not None and version <= old[0]:
            return await self._serve_up_converted(
                link,
                api_key,
                version,
                correlation_id,
                request.client_id,
                body if decision is None else decision.forward or body,
                decision,
            )
        expect = not (api_key == codec.PRODUCE and body.get("acks") == 0)
        try:
            response = await self._forward(link, frame, expect)
        except UpstreamUnavailable as failure:
            return await self._unavailable(
                api_key,
                version,
                correlation_id,
                asked,
                failure,
                None if decision is None else session,
            )
        if response is None:
            return None
        if api_key == codec.METADATA:
            _, decoded = codec.decode_response(api_key, version, response)
            answer = codec.plain(decoded)
            wanted = body.get("topics")
            everything = wanted is None or (version == 0 and not wanted)
            with_ids = version >= METADATA_TOPIC_IDS
            await self._learn(answer, everything=everything, with_ids=with_ids)
            rewritten = rewrite_brokers(answer, await self.listeners())
            rewritten = self._with_log_topic(version, body, rewritten)
            if decision is not None and session is not None:
                from coordinator.gateway.security import enforce, forwarded

                rewritten = enforce.filter_metadata(session, version, body, rewritten)
                rewritten = forwarded.named_denied_metadata(session, version, body, rewritten)
            if with_ids:
                rewritten = self.with_topic_ids(rewritten, unknown_ids)
            return codec.encode_response(api_key, version, correlation_id, rewritten)
        if decision is not None and decision.refused is not None:
            from coordinator.gateway.security import forwarded

            _, decoded = codec.decode_response(api_key, version, response)
            merged = forwarded.merge(decision, codec.plain(decoded))
            assert merged is not None
            return codec.encode_response(api_key, version, correlation_id, merged)
        return struct.pack(">i", len(response)) + response

    async def _serve_up_converted(
        self,
        link: ClientLink,
        api_key: int,
        version: int,
        correlation_id: int,
        client_id: str | None,
        body: dict[str, Any],
        decision: Decision | None = None,
    ) -> bytes:
        """An old Fetch or ListOffsets asked upstream at :data:`UPCONVERTED`'s version, its answer
        down-converted to the client's version (module docstring), with the part
        ``decision`` refused (ACLs) merged in."""
        asked = UPCONVERTED[api_key][1]
        upgraded = up_converted_request(api_key, body)
        frame = codec.encode_request(api_key, asked, correlation_id, upgraded, client_id=client_id)
        try:
            response = await self._forward(link, frame[4:], True)
        except UpstreamUnavailable as failure:
            return await self._unavailable(api_key, version, correlation_id, body, failure)
        assert response is not None
        _, decoded = codec.decode_response(api_key, asked, response)
        answer: dict[str, Any] = codec.plain(decoded)
        if api_key == codec.FETCH:
            answer = down_converted_fetch(version, body, answer)
        else:
            answer = down_converted_list_offsets(body, answer)
        if decision is not None and decision.refused is not None:
            from coordinator.gateway.security import forwarded

            answer = forwarded.merge(decision, answer) or answer
        return codec.encode_response(api_key, version, correlation_id, answer)

    async def _forward(self, link: ClientLink, frame: bytes, expect: bool) -> bytes | None:
        addresses = self._addresses(link.node_id)
        if not addresses:
            raise UpstreamUnavailable(f"node {link.node_id} is not in the upstream's metadata")
        last: UpstreamUnavailable | None = None
        for address in addresses:
            try:
                return await self.connection(link, address).call(frame, expect_response=expect)
            except UpstreamUnavailable as exc:
                if exc.sent:  # answered by no one, but maybe acted upon: never sent twice
                    raise
                last = exc
        assert last is not None
        raise last

    async def _unavailable(
        self,
        api_key: int,
        version: int,
        correlation_id: int,
        body: dict[str, Any],
        failure: UpstreamUnavailable,
        session: Session | None = None,
    ) -> bytes:
        """The gateway's answer while the upstream is away; with ``session`` (ACLs enforced) a
        Metadata answer shows only what its principal may describe."""
        log.info("upstream unavailable for API %s: %s", api_key, failure)
        if api_key == codec.METADATA:
            brokers: list[dict[str, Any]] = [
                {"node_id": node_id, "host": host, "port": port, "rack": self.racks.get(node_id)}
                for node_id, (host, port) in (await self.listeners()).items()
            ]
            if not brokers:
                node_id, host, port = await self.coordinator()
                brokers = [{"node_id": node_id, "host": host, "port": port, "rack": None}]
            controller = self.controller_id if self.brokers else brokers[0]["node_id"]
            body, unknown = self.named_topics(body, any_id=True)
            known = {
                name: TopicShape(
                    self.topic_id(name) or ZERO_UUID, shape.is_internal, shape.partitions
                )
                for name, shape in self.topics.items()
            }
            answer = unavailable_metadata(body, brokers, self.cluster_id, controller, known)
            answer = self._with_log_topic(version, body, answer)
            if session is not None:
                from coordinator.gateway.security import enforce

                answer = enforce.filter_metadata(session, version, body, answer)
            if version >= METADATA_TOPIC_IDS:
                answer = self.with_topic_ids(answer, unknown)
            return codec.encode_response(api_key, version, correlation_id, answer)
        try:
            answer = error_answer(api_key, body, unavailable_error(api_key, failure), str(failure))
        except KeyError:
            raise FrameError(f"API {api_key}: the upstream broker is unavailable") from failure
        if api_key == codec.FETCH:
            wait_ms = max(0, int(body.get("max_wait", 0)))
            await asyncio.sleep(min(wait_ms / 1000, MAX_ERROR_FETCH_WAIT_S))
        return codec.encode_response(api_key, version, correlation_id, answer)
