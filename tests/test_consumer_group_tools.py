"""The operator tools on consumer groups (KIP-848): ``coordinator groups`` reads a warehouse the
gateway's embedded back end wrote (the job's own tables) and shows a consumer group with its
members, their assignments (from its records) and its assignor."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from coordinator import CoordinatorConfig
from coordinator.cli import main
from tests.consumer_groups import M1, M2
from tests.gateway_support import Running

T = "t"


@pytest.mark.slow
def test_coordinator_groups_describes_a_consumer_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = tmp_path / "wh"
    running = Running(
        warehouse=str(warehouse), config=CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    )
    topic_id = running.gateway._ctx.topic_list()[1]["topic_id"]  # "t" (after "other")

    def submit(request: dict[str, Any]) -> dict[str, Any]:
        request = {"group_id": "cg", "request_id": f"r{submit.n}", **request}  # type: ignore[attr-defined]
        submit.n += 1  # type: ignore[attr-defined]
        backend = running.gateway.backend
        return asyncio.run_coroutine_threadsafe(backend.submit(request), running.loop).result(30)

    submit.n = 0  # type: ignore[attr-defined]
    try:
        for member_id in (M1, M2):
            answer = submit(
                {
                    "api": "consumer_group_heartbeat",
                    "member_id": member_id,
                    "member_epoch": 0,
                    "rebalance_timeout_ms": 30_000,
                    "subscribed_topic_names": [T],
                    "topic_partitions": [],
                    "client_id": member_id[:7],
                    "server_assignor": "range",
                }
            )
            assert answer["error"] is None, answer
        owned = [{"topic_id": topic_id, "partitions": list(range(6))}]
        submit(
            {
                "api": "consumer_group_heartbeat",
                "member_id": M1,
                "member_epoch": 1,
                "topic_partitions": owned,
            }
        )
        submit(
            {
                "api": "consumer_group_heartbeat",
                "member_id": M1,
                "member_epoch": 1,
                "topic_partitions": [{"topic_id": topic_id, "partitions": [0, 1, 2]}],
            }
        )
        submit({"api": "consumer_group_heartbeat", "member_id": M2, "member_epoch": 2})
    finally:
        running.stop()
    capsys.readouterr()
    assert main(["groups", "--warehouse", str(warehouse), "--list", "--output", "json"]) == 0
    assert "cg" in capsys.readouterr().out
    args = ["groups", "--warehouse", str(warehouse), "--describe", "--group", "cg"]
    assert main([*args, "--members", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "t(0,1,2)" in out and "t(3,4,5)" in out, out  # range, from the group's records
    assert main([*args, "--state"]) == 0
    state = capsys.readouterr().out
    assert "range" in state and "Stable" in state, state
    # history: the group epochs as generations, Assigning/Reconciling as the rebalancing states
    # (summaries written within one summary interval of each other may show as one).
    history = ["groups", "--warehouse", str(warehouse), "history", "--group", "cg"]
    assert main([*history, "--output", "json"]) == 0
    rebalances = json.loads(capsys.readouterr().out)["rebalances"]
    assert rebalances[-1]["generation_id"] == 2 and rebalances[-1]["outcome"] == "Stable"
    assert sorted(m for r in rebalances for m in r["joined"]) == sorted([M1, M2])
