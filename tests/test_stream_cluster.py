"""The job unchanged on a multi-executor cluster: ``local-cluster[2,1,1024]`` starts two
executor JVMs beside the driver (the pip package has no ``sbin/`` scripts for a standalone
master; see ../shared/spark-notes.md). It runs in its own process: one SparkContext per process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from coordinator.stream.client import StreamClient
from tests.test_stream_job import commit, fetch, heartbeat, join, sync

pytestmark = pytest.mark.slow


def test_a_group_forms_and_commits_through_a_two_executor_cluster(tmp_path):
    warehouse = tmp_path / "warehouse"
    conf = tmp_path / "test.properties"
    conf.write_text("group.initial.rebalance.delay.ms=0\n")
    log = tmp_path / "job.log"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    with log.open("w") as out:
        job = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coordinator",
                "run",
                "--master",
                "local-cluster[2,1,1024]",
                "--warehouse",
                str(warehouse),
                "--conf",
                str(conf),
                "--trigger-interval",
                "200",
                "--stop-when-idle",
                "60",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        # Members meet the job once it has answered its first batch. A session counts from the
        # batch's clock, which is when the batch was planned, and a cold start's first batch
        # on this cluster can run longer than a session under load (35 s with a CPU hog): a
        # member it answers would have lost its session before the answer was readable.
        deadline = time.monotonic() + 240
        while "coordinator ready" not in log.read_text(errors="replace"):
            assert job.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the job did not start in 240 s"
            time.sleep(0.2)
        client = StreamClient(warehouse)
        # The time to sync after the join is answered is bounded by the rebalance timeout,
        # counted from the batch's clock: a batch on this cluster under load can outlast the
        # helpers' 10 s, so the joins give a minute.
        slow = {"session_ms": 60_000, "rebalance_timeout_ms": 60_000}
        first = client.request(join("j1", "cluster", **slow), timeout_s=180)
        assert first["error"] == "MEMBER_ID_REQUIRED"
        member = first["member_id"]
        joined = client.request(join("j2", "cluster", member, **slow), timeout_s=60)
        assert joined["error"] is None and joined["leader"] == member
        assignments = [{"member_id": member, "assignment": ""}]
        synced = client.request(
            sync("s1", "cluster", member, joined["generation_id"], assignments), timeout_s=60
        )
        assert synced["error"] is None
        generation = joined["generation_id"]
        assert client.request(heartbeat("h1", "cluster", member, generation))["error"] is None
        answer = client.request(commit("c1", "cluster", member, generation, {0: 7}))
        assert answer["partitions"][0]["error"] is None
        assert client.request(fetch("f1", "cluster"))["partitions"][0]["offset"] == 7
    finally:
        job.terminate()
        job.wait(timeout=60)
    started = re.search(r"coordinator started on (\S+) \((\d+) executors\)", log.read_text())
    assert started is not None, log.read_text()[-3000:]
    assert started.groups() == ("local-cluster[2,1,1024]", "2")
