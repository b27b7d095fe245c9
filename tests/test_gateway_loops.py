"""The gateway's event loop: uvloop when installed, asyncio's on request, the same answers."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.gateway import codec, loops
from coordinator.gateway.embedded import EmbeddedBackend
from coordinator.gateway.server import Gateway
from tests.gateway_support import REQUESTS, read_frame


def test_auto_picks_uvloop_when_installed() -> None:
    factory = loops.loop_factory("auto")
    loop = factory()
    try:
        kind = type(loop).__module__.split(".")[0]
        assert kind == ("uvloop" if loops.uvloop_installed() else "asyncio")
    finally:
        loop.close()
    assert loops.loop_factory("asyncio") is asyncio.new_event_loop
    with pytest.raises(ValueError, match="one of auto, asyncio, uvloop"):
        loops.loop_factory("trio")


async def _join_and_heartbeat() -> list[int]:
    gateway = Gateway(
        EmbeddedBackend(CoordinatorConfig(group_initial_rebalance_delay_ms=0)),
        {"t": 2},
        "127.0.0.1",
        0,
    )
    await gateway.start()
    loop = asyncio.get_running_loop()

    def client() -> list[int]:
        codes = []
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:

            def call(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
                sock.sendall(codec.encode_request(api_key, version, 1, body))
                frame = read_frame(sock)
                assert frame is not None
                return dict(codec.plain(codec.decode_response(api_key, version, frame)[1]))

            join = call(codec.JOIN_GROUP, 5, dict(REQUESTS[codec.JOIN_GROUP]))
            join = call(
                codec.JOIN_GROUP, 5, dict(REQUESTS[codec.JOIN_GROUP], member_id=join["member_id"])
            )
            codes.append(join["error_code"])
            member, generation = join["member_id"], join["generation_id"]
            sync = {
                "group_id": "g",
                "generation_id": generation,
                "member_id": member,
                "assignments": [{"member_id": member, "assignment": b""}],
            }
            codes.append(call(codec.SYNC_GROUP, 3, sync)["error_code"])
            heartbeat = {
                "group_id": "g",
                "generation_id": generation,
                "member_id": member,
                "group_instance_id": None,
            }
            codes.append(call(codec.HEARTBEAT, 4, heartbeat)["error_code"])
        return codes

    try:
        return await loop.run_in_executor(None, client)
    finally:
        await gateway.stop()


@pytest.mark.parametrize("name", ["asyncio", "uvloop"])
def test_the_gateway_serves_a_group_on_either_loop(name: str) -> None:
    if name == "uvloop" and not loops.uvloop_installed():
        pytest.skip("uvloop is not installed")
    assert loops.run(_join_and_heartbeat(), name) == [0, 0, 0]
