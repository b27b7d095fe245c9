"""What the upstream-mode tests share: a stub broker (a few APIs, answered with kio, recording
what it was sent), a noida-db broker from its PyPI wheel, and a gateway in front of either."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from typing import Any

import pytest

from coordinator.gateway import codec
from coordinator.gateway.upstream import Upstream
from tests.gateway_support import Running, read_frame

#: The stub broker's ApiVersions (narrower than the gateway's on purpose, and with a
#: transaction API the gateway must not advertise).
STUB_VERSIONS = {
    codec.PRODUCE: (3, 8),
    codec.FETCH: (4, 11),
    codec.LIST_OFFSETS: (1, 5),
    codec.METADATA: (1, 9),
    codec.JOIN_GROUP: (0, 3),
    codec.API_VERSIONS: (0, 3),
    22: (0, 4),  # InitProducerId
    28: (0, 3),  # TxnOffsetCommit
}
STUB_NODE_ID = 5
STUB_TOPIC, STUB_PARTITIONS = "t", 3
STUB_PRODUCER_ID = 1000
STUB_LOG_START, STUB_LOG_END, STUB_TIME_OFFSET = 10, 13, 11


class StubBroker:
    """A one-node Kafka broker of a few APIs on its own event loop: ApiVersions, Metadata (topic
    ``t``, leader itself), Produce (appended at offset 0), Fetch (``records`` for partition 0 of
    ``t``, from any offset up to :data:`STUB_LOG_END`) and ListOffsets (:data:`STUB_LOG_START`,
    :data:`STUB_LOG_END`, :data:`STUB_TIME_OFFSET` for a time); records (api key, correlation
    id) and (api key, version) of every request. A version below :data:`STUB_VERSIONS`' floor
    closes the connection, as Kafka 4 and noida-db do for Fetch v0-v3. With ``swap_pairs`` each
    second answer goes out before the first."""

    def __init__(self, *, swap_pairs: bool = False, records: bytes = b"") -> None:
        self.swap_pairs = swap_pairs
        self.records = records
        self.seen: list[tuple[int, int]] = []
        self.versions: list[tuple[int, int]] = []
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self._server = self.loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", 0)
            )
            started.set()
            self.loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert started.wait(10)
        assert self._server is not None
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held: bytes | None = None
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, correlation_id = codec.peek_header(frame)
                self.seen.append((api_key, correlation_id))
                self.versions.append((api_key, version))
                if version < STUB_VERSIONS.get(api_key, (0, 0))[0]:
                    break
                readable = codec.readable_versions(api_key)
                assert readable is not None
                request = codec.decode_request(frame, {api_key: readable})
                answer = self._answer(api_key, codec.plain(request.body))
                out = codec.encode_response(api_key, version, correlation_id, answer)
                if self.swap_pairs and held is None:
                    held = out
                    continue
                writer.write(out + (held or b""))
                held = None
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._connections.discard(task)

    def _answer(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        if api_key == codec.API_VERSIONS:
            return {
                "error_code": 0,
                "api_keys": [
                    {"api_key": k, "min_version": lo, "max_version": hi}
                    for k, (lo, hi) in sorted(STUB_VERSIONS.items())
                ],
                "throttle_time": 0,
            }
        if api_key == codec.METADATA:
            wanted = body.get("topics")
            names = [STUB_TOPIC] if wanted is None else [t["name"] for t in wanted]
            return {
                "throttle_time": 0,
                "brokers": [
                    {"node_id": STUB_NODE_ID, "host": "127.0.0.1", "port": self.port, "rack": "r1"}
                ],
                "cluster_id": "stub-cluster",
                "controller_id": STUB_NODE_ID,
                "topics": [
                    {
                        "error_code": 0 if name == STUB_TOPIC else 3,
                        "name": name,
                        "is_internal": False,
                        "partitions": [
                            {
                                "error_code": 0,
                                "partition_index": p,
                                "leader_id": STUB_NODE_ID,
                                "leader_epoch": 0,
                                "replica_nodes": [STUB_NODE_ID],
                                "isr_nodes": [STUB_NODE_ID],
                                "offline_replicas": [],
                            }
                            for p in (range(STUB_PARTITIONS) if name == STUB_TOPIC else [])
                        ],
                        "topic_authorized_operations": -(2**31),
                    }
                    for name in names
                ],
                "cluster_authorized_operations": -(2**31),
            }
        if api_key == codec.PRODUCE:
            return {
                "throttle_time": 0,
                "responses": [
                    {
                        "name": t["name"],
                        "partition_responses": [
                            {
                                "index": p["index"],
                                "error_code": 0,
                                "base_offset": 0,
                                "log_append_time": -1,
                                "log_start_offset": 0,
                                "record_errors": [],
                                "error_message": None,
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
                        "topic": t["topic"],
                        "partitions": [
                            {
                                "partition_index": p["partition"],
                                "error_code": 0,
                                "high_watermark": STUB_LOG_END,
                                "last_stable_offset": STUB_LOG_END,
                                "log_start_offset": STUB_LOG_START,
                                "aborted_transactions": [],
                                "preferred_read_replica": -1,
                                "records": self.records
                                if p["partition"] == 0 and p["fetch_offset"] < STUB_LOG_END
                                else b"",
                            }
                            for p in t["partitions"]
                        ],
                    }
                    for t in body["topics"]
                ],
            }
        if api_key == codec.LIST_OFFSETS:
            found = {-1: STUB_LOG_END, -2: STUB_LOG_START}
            return {
                "throttle_time": 0,
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {
                                "partition_index": p["partition_index"],
                                "error_code": 0,
                                "timestamp": -1,
                                "offset": found.get(p["timestamp"], STUB_TIME_OFFSET),
                                "leader_epoch": 0,
                            }
                            for p in t["partitions"]
                        ],
                    }
                    for t in body["topics"]
                ],
            }
        if api_key == 22:  # InitProducerId
            return {
                "throttle_time": 0,
                "error_code": 0,
                "producer_id": STUB_PRODUCER_ID,
                "producer_epoch": 0,
            }
        raise AssertionError(f"the stub broker does not serve API {api_key}")

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def upstream_gateway(port: int, warehouse: str | None = None, **options: Any) -> Running:
    """A gateway (embedded engine, no initial rebalance delay, its log in ``warehouse`` when
    given) in front of 127.0.0.1:``port``; ``options`` are the :class:`Upstream`'s."""
    return Running(warehouse, upstream=Upstream([("127.0.0.1", port)], **options))


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call_on(sock: socket.socket, api_key: int, version: int, body: dict[str, Any], cid: int) -> Any:
    """One request on an open connection; the answer's correlation id must be ``cid``."""
    sock.sendall(codec.encode_request(api_key, version, cid, body))
    frame = read_frame(sock)
    assert frame is not None, "connection closed"
    correlation_id, response = codec.decode_response(api_key, version, frame)
    assert correlation_id == cid
    return codec.plain(response)


def noida_broker() -> Any:
    """A started noida-db broker (``coordinator.bench.gateway.Server``), or a skip when its
    binary is not installed (the dev extra brings it)."""
    from coordinator.bench.gateway import NOIDA, Server

    server = Server(NOIDA, "noida")
    try:
        server.start({}, timeout_s=60)
    except FileNotFoundError as exc:
        pytest.skip(f"noida-db is not installed: {exc}")
    return server
