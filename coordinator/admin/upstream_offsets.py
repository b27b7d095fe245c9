"""The topics' log offsets asked of a Kafka-protocol cluster, as ``kafka-consumer-groups.sh``
asks its brokers: Metadata for the partitions and their leaders, then ListOffsets to each leader
with Kafka's timestamps (-1 latest, -2 earliest) or a time.

:class:`UpstreamOffsets` answers the questions :class:`~coordinator.admin.topic_offsets.TopicOffsets`
answers from a file (``partitions``, ``latest``, ``earliest``, ``offset_for_time``, ``in``), so
``coordinator groups --upstream HOST:PORT`` works where ``--topic-offsets FILE`` does, with the
cluster's figures of the moment. It is the cluster the gateway's upstream mode fronts (the
gateway's ``upstream.bootstrap.servers``): data lives there, groups in the coordinator.

- latest / earliest: ListOffsets -1 / -2 (read_uncommitted, as Kafka's admin client asks);
- the offset of a time T: ListOffsets T, the first offset whose timestamp is at or after T; when
  no message is that recent, the log end (Kafka's ``getLogTimestampOffsets`` fallback);
- :meth:`UpstreamOffsets.samples` turns times into log-end samples (a :class:`TopicOffsets`) for
  the lag over time: the log end at T is the offset of the first message at or after T, as far
  as the producers' timestamps (CreateTime) follow the clock.

Answers are kept for the life of the object (one command), one request per topic and leader.
Unreachable servers and unknown topics raise :class:`TopicOffsetsError` with the cluster's
address, so the command reports them as errors. Retriable partition errors (a leader moving)
are asked again, after a Metadata refresh, a few times.

Blocking sockets, no threads: an admin command's few requests. Needs the gateway extra (kio).
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from coordinator.admin.topic_offsets import TopicOffsets, TopicOffsetsError, TopicPartitionKey

Address = tuple[str, int]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
UNKNOWN_OFFSET = -1

_API_VERSIONS, _METADATA, _LIST_OFFSETS = 18, 3, 2
#: Metadata from v4 says allow_auto_topic_creation=false: asking never creates a topic.
_METADATA_VERSIONS = (4, 9)
#: ListOffsets from v1 answers one offset per timestamp (v0's were a list).
_LIST_OFFSETS_VERSIONS = (1, 7)
_UNKNOWN_TOPIC_OR_PARTITION = 3
#: Kafka's retriable answers of a partition whose leader is moving or not ready.
_RETRIABLE = frozenset({5, 6, 7, 13, 74, 75, 78})  # LEADER_NOT_AVAILABLE ... OFFSET_NOT_AVAILABLE
_ATTEMPTS = 5
_RETRY_BACKOFF_S = 0.2
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0


def _error_name(code: int) -> str:
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


class BlockingConnection:
    """One blocking connection to one broker, over TLS and SASL when ``credentials`` say so
    (the gateway's ``upstream.security.protocol``, ``upstream.sasl.*``, ``upstream.ssl.*``)."""

    def __init__(
        self,
        address: Address,
        connect_timeout_s: float,
        timeout_s: float,
        credentials: Any = None,
    ) -> None:
        self.address = address
        self._ids = itertools.count(1)
        try:
            sock = socket.create_connection(address, timeout=connect_timeout_s)
            context = None if credentials is None else credentials.ssl_context
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=address[0])
            self._sock = sock
        except OSError as exc:  # TLS refused included (ssl.SSLError is one)
            raise ConnectionError(f"{address[0]}:{address[1]}: {exc}") from exc
        self._sock.settimeout(timeout_s)
        if credentials is not None and credentials.mechanism is not None:
            from coordinator.gateway.security.client import (
                UpstreamAuthenticationError,
                authenticate_blocking,
            )

            try:
                authenticate_blocking(self.call, credentials)
            except UpstreamAuthenticationError as exc:
                self.close()
                raise ConnectionError(f"{address[0]}:{address[1]}: {exc}") from exc

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        from coordinator.gateway import codec

        correlation_id = next(self._ids)
        frame = codec.encode_request(
            api_key, version, correlation_id, body, client_id="coordinator-groups"
        )
        try:
            self._sock.sendall(frame)
            (size,) = struct.unpack(">i", self._read(4))
            answer = self._read(size)
        except OSError as exc:  # timeouts included
            self.close()
            raise ConnectionError(f"{self.address[0]}:{self.address[1]}: {exc!r}") from exc
        got, response = codec.decode_response(api_key, version, answer)
        if got != correlation_id:
            raise ConnectionError(f"answer {got} to request {correlation_id}")
        plain: dict[str, Any] = codec.plain(response)
        return plain

    def _read(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self._sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionResetError("the broker closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self._sock.close()


def _highest(theirs: tuple[int, int] | None, ours: tuple[int, int], what: str, where: str) -> int:
    """The highest version of an API both sides serve."""
    if theirs is not None and max(theirs[0], ours[0]) <= min(theirs[1], ours[1]):
        return min(theirs[1], ours[1])
    served = "not at all" if theirs is None else f"v{theirs[0]}-{theirs[1]}"
    raise TopicOffsetsError(
        f"{where} serves {what} {served}; asking it needs v{ours[0]}-{ours[1]} (Kafka 1.0 or newer)"
    )


def _needs_kio() -> None:
    try:
        import kio  # noqa: F401  # the codec: Kafka's message specs
    except ImportError:
        raise TopicOffsetsError(
            "asking an upstream cluster needs the gateway extra (kio): "
            "pip install 'kafka-group-coordinator[gateway]'"
        ) from None


def sample_times(times_ms: Iterable[int], points: int = 60) -> list[int]:
    """When to sample the log end for a lag plot over ``times_ms`` (a group's commits): each of
    them (lag right after a commit) and ``points`` evenly spread over their span (lag growing
    between commits), sorted, without repeats."""
    given = sorted({int(t) for t in times_ms})
    if not given:
        return []
    first, last = given[0], given[-1]
    steps = max(points - 1, 1)
    grid = {first + (last - first) * i // steps for i in range(steps + 1)}
    return sorted(set(given) | grid)


class UpstreamOffsets:
    """Log offsets from a Kafka-protocol cluster, asked when first needed (module docstring)."""

    def __init__(
        self,
        bootstrap: Sequence[Address],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        credentials: Any = None,
    ) -> None:
        if not bootstrap:
            raise TopicOffsetsError("no upstream bootstrap server given")
        _needs_kio()
        self.bootstrap = list(bootstrap)
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        #: TLS and SASL towards the cluster (an UpstreamCredentials; None: plaintext)
        self.credentials = credentials
        #: How the command names this source in its messages.
        self.name = "the upstream cluster at " + ",".join(f"{h}:{p}" for h, p in self.bootstrap)
        self._connections: dict[Address, BlockingConnection] = {}
        self._brokers: dict[int, Address] = {}
        self._versions: tuple[int, int] | None = None  # (Metadata, ListOffsets)
        #: topic -> {partition: leader} (None: the cluster has no such topic)
        self._topics: dict[str, dict[int, int] | None] = {}
        self._offsets: dict[tuple[str, int], dict[int, int]] = {}  # (topic, timestamp) -> offsets

    @classmethod
    def from_servers(cls, servers: str, **options: Any) -> UpstreamOffsets:
        """From Kafka's ``bootstrap.servers`` form, ``HOST:PORT[,HOST:PORT...]``."""
        _needs_kio()
        from coordinator.gateway.upstream import parse_bootstrap

        try:
            return cls(parse_bootstrap(servers), **options)
        except ValueError as problem:
            raise TopicOffsetsError(str(problem)) from None

    def __enter__(self) -> UpstreamOffsets:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # --- the questions TopicOffsets answers ---------------------------------------------------

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions in the cluster's metadata ([] for a topic it does not have)."""
        return sorted(self._leaders(topic) or {})

    def __contains__(self, key: object) -> bool:
        if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)):
            return False
        return key[1] in (self._leaders(key[0]) or {})

    def latest(self, key: TopicPartitionKey) -> int:
        return self._offset(key, LATEST_TIMESTAMP)

    def earliest(self, key: TopicPartitionKey) -> int:
        return self._offset(key, EARLIEST_TIMESTAMP)

    def offset_for_time(self, key: TopicPartitionKey, timestamp_ms: int) -> int:
        """The first offset whose timestamp is at or after the time; the log end when no
        message is that recent."""
        if timestamp_ms < 0:
            raise TopicOffsetsError(f"a time before 1970 ({timestamp_ms} ms) has no offset")
        offset = self._offset(key, timestamp_ms)
        return self.latest(key) if offset == UNKNOWN_OFFSET else offset

    def samples(self, topics: Iterable[str], times_ms: Iterable[int]) -> TopicOffsets:
        """Log-end samples of every partition of ``topics`` at each of ``times_ms`` (the offset
        of the first message at or after the time, or the log end now when none is), with the
        log start now: what a ``--topic-offsets`` file would hold had it been sampled then.
        Topics the cluster does not have are left out."""
        rows: list[dict[str, Any]] = []
        moments = sorted(set(times_ms))
        for topic in sorted(set(topics)):
            for partition in self.partitions(topic):
                key = (topic, partition)
                start = self.earliest(key)
                rows.extend(
                    {
                        "topic": topic,
                        "partition": partition,
                        "timestamp_ms": at,
                        "log_start_offset": start,
                        "log_end_offset": self.offset_for_time(key, at),
                    }
                    for at in moments
                )
        return TopicOffsets(rows)

    # --- asking --------------------------------------------------------------------------------

    def _offset(self, key: TopicPartitionKey, timestamp: int) -> int:
        topic, partition = key
        leaders = self._leaders(topic)
        if leaders is None:
            raise TopicOffsetsError(f"topic '{topic}' does not exist in {self.name}")
        if partition not in leaders:
            raise TopicOffsetsError(
                f"partition {topic}-{partition} does not exist in {self.name} "
                f"(it has {len(leaders)} partitions)"
            )
        found = self._offsets.get((topic, timestamp))
        if found is None:
            found = self._list_offsets(topic, timestamp)
            self._offsets[(topic, timestamp)] = found
        return found[partition]

    def _list_offsets(self, topic: str, timestamp: int) -> dict[int, int]:
        """Every partition's offset for ``timestamp``: one ListOffsets per leader, the partitions
        whose leader moved asked again after a Metadata refresh."""
        _, version = self._negotiated()
        found: dict[int, int] = {}
        problems: dict[int, str] = {}
        for attempt in range(_ATTEMPTS):
            leaders = self._leaders(topic, refresh=attempt > 0) or {}
            wanted = {p: n for p, n in leaders.items() if p not in found}
            by_leader: dict[int, list[int]] = {}
            for partition, leader in wanted.items():
                by_leader.setdefault(leader, []).append(partition)
            problems = {}
            for leader, partitions in sorted(by_leader.items()):
                address = self._brokers.get(leader)
                if leader < 0 or address is None:
                    problems.update(dict.fromkeys(partitions, "LEADER_NOT_AVAILABLE"))
                    continue
                body = {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": p,
                                    "current_leader_epoch": -1,
                                    "timestamp": timestamp,
                                }
                                for p in sorted(partitions)
                            ],
                        }
                    ],
                }
                try:
                    answer = self._call([address], _LIST_OFFSETS, version, body)
                except TopicOffsetsError as problem:
                    problems.update(dict.fromkeys(partitions, str(problem)))
                    continue
                for t in answer["topics"]:
                    for p in t["partitions"]:
                        code = int(p["error_code"])
                        index = int(p["partition_index"])
                        if code == 0:
                            found[index] = int(p["offset"])
                        elif code in _RETRIABLE:
                            problems[index] = _error_name(code)
                        else:
                            raise TopicOffsetsError(
                                f"ListOffsets of {topic}-{index} from {self.name}: "
                                f"{_error_name(code)}"
                            )
            if not problems:
                return found
            time.sleep(_RETRY_BACKOFF_S * (attempt + 1))
        index, why = sorted(problems.items())[0]
        raise TopicOffsetsError(
            f"no log offset for {topic}-{index} from {self.name} after {_ATTEMPTS} attempts: {why}"
        )

    def _leaders(self, topic: str, *, refresh: bool = False) -> dict[int, int] | None:
        if refresh or topic not in self._topics:
            metadata_version, _ = self._negotiated()
            body = {
                "topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            }
            answer = self._call(self._everyone(), _METADATA, metadata_version, body)
            self._brokers = {
                int(b["node_id"]): (b["host"], int(b["port"])) for b in answer["brokers"]
            }
            for t in answer["topics"]:
                code = int(t["error_code"])
                if code == _UNKNOWN_TOPIC_OR_PARTITION:
                    self._topics[t["name"]] = None
                elif code == 0 or code in _RETRIABLE:
                    self._topics[t["name"]] = {
                        int(p["partition_index"]): int(p["leader_id"]) for p in t["partitions"]
                    }
                else:
                    raise TopicOffsetsError(
                        f"Metadata of topic '{t['name']}' from {self.name}: {_error_name(code)}"
                    )
        return self._topics.get(topic)

    def _negotiated(self) -> tuple[int, int]:
        """(Metadata version, ListOffsets version): the highest both sides serve."""
        if self._versions is None:
            answer = self._call(self._everyone(), _API_VERSIONS, 0, {})
            if int(answer["error_code"]) != 0:
                raise TopicOffsetsError(
                    f"ApiVersions from {self.name}: {_error_name(int(answer['error_code']))}"
                )
            ranges = {
                int(k["api_key"]): (int(k["min_version"]), int(k["max_version"]))
                for k in answer["api_keys"]
            }
            self._versions = (
                _highest(ranges.get(_METADATA), _METADATA_VERSIONS, "Metadata", self.name),
                _highest(
                    ranges.get(_LIST_OFFSETS), _LIST_OFFSETS_VERSIONS, "ListOffsets", self.name
                ),
            )
        return self._versions

    def _everyone(self) -> list[Address]:
        seen = [self._brokers[n] for n in sorted(self._brokers)]
        return seen + [a for a in self.bootstrap if a not in seen]

    def _call(
        self, addresses: list[Address], api_key: int, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        """The answer of the first of ``addresses`` that answers."""
        failures = []
        for address in addresses:
            try:
                connection = self._connections.get(address)
                if connection is None:
                    connection = BlockingConnection(
                        address, self.connect_timeout_s, self.timeout_s, self.credentials
                    )
                    self._connections[address] = connection
                return connection.call(api_key, version, body)
            except ConnectionError as exc:
                self._connections.pop(address, None)
                failures.append(str(exc))
        raise TopicOffsetsError(
            f"{self.name} cannot be reached ({'; '.join(failures) or 'no server'}): is it "
            "running, and is this its bootstrap address?"
        )
