"""The job unchanged on a multi-executor cluster: ``local-cluster[2,1,1024]`` starts two
executor JVMs beside the driver (the pip package has no ``sbin/`` scripts for a standalone
master; see ../shared/spark-notes.md). It runs in its own process: one SparkContext per process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

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
        # The first join goes in before the job is up: it waits in the inbox through the
        # cluster's start-up (over 30 s, its session, on a loaded box) and is served at its
        # arrival, but its pending member's session counts from the answer, so the rejoin
        # finds it.
        client = StreamClient(warehouse)
        first = client.request(join("j1", "cluster", session_ms=30_000), timeout_s=180)
        assert first["error"] == "MEMBER_ID_REQUIRED"
        member = first["member_id"]
        joined = client.request(join("j2", "cluster", member, session_ms=30_000), timeout_s=60)
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
