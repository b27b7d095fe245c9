"""The Spark job's /metrics and /readyz end to end: scraped while a group forms, commits and
heartbeats through the job, then across a restart."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tests.metrics_support import Scrape, get
from tests.stream_support import RunningCoordinator
from tests.test_stream_job import commit, form_group, heartbeat

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def describe(c: RunningCoordinator, rid: str, group: str) -> dict[str, Any]:
    return c.request({"api": "describe_groups", "request_id": rid, "group_id": group})


def test_job_metrics_follow_a_group_and_survive_a_restart(spark, tmp_path, capsys):
    port = free_port()
    c = RunningCoordinator(spark, tmp_path / "warehouse", metrics=f"127.0.0.1:{port}")
    during_first_batch: list[int] = []

    def readiness_while_writing(figures: Any) -> None:
        if not during_first_batch:
            during_first_batch.append(get(port, "/readyz")[0])

    c.after_write = readiness_while_writing
    # Waiting in the inbox before the start: the first batch has it.
    c.client.submit([{"api": "list_groups", "request_id": "first", "group_id": ""}])
    c.start()
    try:
        assert get(port, "/livez")[0] == 200
        assert c.client.wait(["first"], timeout_s=120)["first"]["error"] is None
        c.wait_for(lambda: get(port, "/readyz")[0] == 200, what="/readyz 200")
        assert during_first_batch == [503]
        assert "coordinator ready: query" in capsys.readouterr().out

        generation, (leader, follower) = form_group(c, "g", 2)
        committed = c.request(commit("c1", "g", leader, generation, {0: 5, 1: 7, 2: 9}))
        assert {p["error"] for p in committed["partitions"]} == {None}
        for i in range(3):
            assert c.request(heartbeat(f"h{i}", "g", follower, generation))["error"] is None
        assert describe(c, "d1", "g")["group_state"] == "Stable"

        def settled() -> Scrape | None:
            scrape = Scrape(port)
            done = scrape.value("coordinator_offset_commits_total") == 3
            return scrape if done and scrape.value("coordinator_job_inbox_files") == 0 else None

        scrape = c.wait_for(settled, what="the commits and an empty inbox in /metrics")
        assert scrape.value("coordinator_groups", state="Stable") == 1
        assert scrape.sum("coordinator_groups") == 1
        assert scrape.value("coordinator_rebalances_total") == 1
        assert scrape.value("coordinator_offsets") == 3
        assert scrape.value("coordinator_joins_total") == 2
        assert scrape.value("coordinator_group_requests_total", api="heartbeat", error="NONE") == 3
        answered = scrape.value("coordinator_job_responses_total")
        assert answered >= 12  # list, 2 x 2 joins, 2 syncs, a commit, 3 heartbeats, describe
        assert scrape.value("coordinator_job_request_latency_seconds_count") == answered
        assert scrape.value("coordinator_job_batches_total") >= 1
        assert scrape.value("coordinator_job_batch_requests_sum") == answered
        assert 1 <= scrape.value("coordinator_job_files_total") <= answered
        assert scrape.value("coordinator_job_delta_write_seconds_count", table="consumer_offsets")
        assert scrape.value("coordinator_job_delta_write_seconds_count", table="responses")
        assert scrape.value("coordinator_job_state_rows") >= 1
        assert scrape.value("coordinator_job_restarts_total") == 0
        assert scrape.value("coordinator_ready") == 1

        c.stop()
        with pytest.raises(OSError):
            get(port, "/livez")  # the server went with the job

        # A restart: the groups come back from group_state, and no rebalance is counted.
        c.start()
        assert c.request({"api": "list_groups", "request_id": "again", "group_id": ""})["groups"]
        c.wait_for(lambda: get(port, "/readyz")[0] == 200, what="/readyz 200 again")
        scrape = Scrape(port)
        assert scrape.value("coordinator_job_restarts_total") == 1
        assert scrape.value("coordinator_groups", state="Stable") == 1
        assert scrape.value("coordinator_offsets") == 3
        assert scrape.value("coordinator_rebalances_total") == 0
    finally:
        c.stop()
