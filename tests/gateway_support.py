"""What the gateway tests share: a gateway served by its own event loop in a thread, raw
request/response calls through the kio codec, and a polling wait."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from typing import Any

from coordinator.config import CoordinatorConfig
from coordinator.gateway import codec
from coordinator.gateway.embedded import EmbeddedBackend
from coordinator.gateway.server import Gateway

TOPICS = {"t": 6, "other": 2}


#: A valid request body per API (kio field names), for raw calls.
REQUESTS: dict[int, dict[str, Any]] = {
    codec.API_VERSIONS: {"client_software_name": "t", "client_software_version": "1"},
    codec.METADATA: {
        "topics": [{"name": "t", "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    },
    codec.FIND_COORDINATOR: {"key": "g", "key_type": 0, "coordinator_keys": ["g", "h"]},
    codec.JOIN_GROUP: {
        "group_id": "g",
        "session_timeout": 10000,
        "rebalance_timeout": 10000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
    },
    codec.SYNC_GROUP: {"group_id": "g", "generation_id": 1, "member_id": "m", "assignments": []},
    codec.HEARTBEAT: {"group_id": "g", "generation_id": 1, "member_id": "m"},
    codec.LEAVE_GROUP: {
        "group_id": "g",
        "member_id": "m",
        "members": [{"member_id": "m", "group_instance_id": None}],
    },
    codec.OFFSET_COMMIT: {
        "group_id": "g",
        "generation_id": -1,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time": -1,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                ],
            }
        ],
    },
    codec.OFFSET_FETCH: {
        "group_id": "g",
        "topics": [{"name": "t", "partition_indexes": [0]}],
        "groups": [{"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}],
    },
    codec.DESCRIBE_GROUPS: {"groups": ["g"], "include_authorized_operations": True},
    codec.LIST_GROUPS: {},
    codec.DELETE_GROUPS: {"groups_names": ["g"]},
    codec.OFFSET_DELETE: {
        "group_id": "g",
        "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}],
    },
    codec.CONSUMER_GROUP_HEARTBEAT: {
        "group_id": "g848",
        "member_id": "AAAAAAAAAAAAAAAAAAAAAQ",
        "member_epoch": 0,
        "rebalance_timeout": 30_000,
        "subscribed_topic_names": ["t"],
        "topic_partitions": [],
    },
    codec.CONSUMER_GROUP_DESCRIBE: {"group_ids": ["g848"], "include_authorized_operations": True},
    codec.LIST_OFFSETS: {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
    },
    codec.FETCH: {
        "replica_id": -1,
        "max_wait": 10,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": "t",
                "partitions": [{"partition": 0, "fetch_offset": 3, "partition_max_bytes": 1024}],
            }
        ],
        "forgotten_topics_data": [],
    },
    codec.SASL_HANDSHAKE: {"mechanism": "PLAIN"},
    codec.SASL_AUTHENTICATE: {"auth_bytes": b"\0u\0p"},
    codec.DESCRIBE_ACLS: {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    },
    codec.CREATE_ACLS: {
        "creations": [
            {
                "resource_type": 3,
                "resource_name": "g",
                "resource_pattern_type": 3,
                "principal": "User:alice",
                "host": "*",
                "operation": 3,
                "permission_type": 3,
            }
        ]
    },
    codec.DELETE_ACLS: {
        "filters": [
            {
                "resource_type_filter": 3,
                "resource_name_filter": "g",
                "pattern_type_filter": 3,
                "principal_filter": None,
                "host_filter": None,
                "operation": 1,
                "permission_type": 1,
            }
        ]
    },
    codec.DESCRIBE_USER_SCRAM_CREDENTIALS: {"users": None},
    codec.ALTER_USER_SCRAM_CREDENTIALS: {"deletions": [], "upsertions": []},
    codec.PRODUCE: {
        "acks": -1,
        "timeout": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b""}]}],
    },
}


class Running:
    """A gateway served by its own event loop in a thread, on an ephemeral port."""

    def __init__(
        self,
        warehouse: str | None = None,
        config: CoordinatorConfig | None = None,
        topics: dict[str, int] | None = None,
        backend: Any = None,
        **options: Any,
    ) -> None:
        config = config or CoordinatorConfig(group_initial_rebalance_delay_ms=0)
        backend = backend or EmbeddedBackend(config, warehouse)
        self.gateway = Gateway(backend, topics or TOPICS, "127.0.0.1", 0, **options)
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(30)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.gateway.start())
        self._ready.set()
        self.loop.run_forever()

    @property
    def port(self) -> int:
        return self.gateway.port

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.gateway.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)


def read_frame(sock: socket.socket) -> bytes | None:
    def exactly(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    prefix = exactly(4)
    if prefix is None:
        return None
    return exactly(struct.unpack(">i", prefix)[0])


def call(port: int, api_key: int, version: int, body: dict[str, Any], timeout_s: float = 10) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(codec.encode_request(api_key, version, 7, body))
        frame = read_frame(sock)
        assert frame is not None, "connection closed"
        correlation_id, response = codec.decode_response(api_key, version, frame)
        assert correlation_id == 7
        return codec.plain(response)


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def until(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
