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

#: Kafka's group.max.session.timeout.ms default (30 minutes).
LONG_SESSION_MS = 1_800_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def describe(c: RunningCoordinator, rid: str, group: str) -> dict[str, Any]:
    return c.request({"api": "describe_groups", "request_id": rid, "group_id": group})


def test_job_metrics_follow_a_group_and_survive_a_restart(spark, tmp_path):
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
        assert c.running is not None
        said: list[str] = []
        c.running.listener.when_ready(said.append)
        assert said[0].startswith("coordinator ready: query kafka-group-coordinator running")

        # Sessions outlast the restart below, however slow a loaded box makes it: the group
        # must come back Stable from the checkpoint, not expire while the job is down.
        generation, (leader, follower) = form_group(c, "g", 2, session_ms=LONG_SESSION_MS)
        committed = c.request(commit("c1", "g", leader, generation, {0: 5, 1: 7, 2: 9}))
        assert {p["error"] for p in committed["partitions"]} == {None}
        for i in range(3):
            assert c.request(heartbeat(f"h{i}", "g", follower, generation))["error"] is None
        assert describe(c, "d1", "g")["group_state"] == "Stable"

        def settled() -> Scrape | None:
            scrape = Scrape(port)
            done = scrape.value("coordinator_offset_commits_total") == 3
            # Spark's progress reaches the listener after the batch, on its own thread: the
            # state rows are those of the latest progress delivered (0 before the group's).
            progressed = scrape.value("coordinator_job_state_rows") >= 1
            empty = scrape.value("coordinator_job_inbox_files") == 0
            return scrape if done and progressed and empty else None

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


def test_coordinator_run_says_ready_and_serves_metrics_until_it_stops(tmp_path):
    """``coordinator run --metrics``: the ready line on stdout after the first batch, /readyz
    200 then, and the server gone with the process (stopped with SIGINT, as Ctrl-C would)."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from coordinator.stream.client import Inbox
    from coordinator.stream.schema import Warehouse

    warehouse = tmp_path / "warehouse"
    paths = Warehouse.at(warehouse)
    paths.inbox.mkdir(parents=True)
    Inbox(paths.inbox).submit([{"api": "list_groups", "request_id": "l1", "group_id": ""}])
    port = free_port()
    command = [sys.executable, "-m", "coordinator", "run", "--warehouse", str(warehouse)]
    command += ["--metrics", f"127.0.0.1:{port}", "--quiet"]
    root = Path(__file__).resolve().parents[1]
    process = subprocess.Popen(
        command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("coordinator ready: query kafka-group-coordinator running"), line
        assert get(port, "/readyz") == (200, "ready\n")
        assert Scrape(port).value("coordinator_job_batches_total") >= 1
        process.send_signal(signal.SIGINT)
        process.wait(120)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=60)
    with pytest.raises(OSError):
        get(port, "/livez")
