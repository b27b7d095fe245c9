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
from tests.stream_support import NO_SWEEP_MS
from tests.test_stream_job import one_member_commits_and_reads_back, wait_until_ready

pytestmark = pytest.mark.slow


def test_a_group_forms_and_commits_through_a_two_executor_cluster(tmp_path):
    warehouse = tmp_path / "warehouse"
    conf = tmp_path / "test.properties"
    # No expiry sweep between the join's two steps (tests/stream_support.py: NO_SWEEP_MS).
    conf.write_text(
        f"group.initial.rebalance.delay.ms=0\noffsets.retention.check.interval.ms={NO_SWEEP_MS}\n"
    )
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
        wait_until_ready(job, log)
        one_member_commits_and_reads_back(StreamClient(warehouse), "cluster")
    finally:
        job.terminate()
        job.wait(timeout=60)
    started = re.search(r"coordinator started on (\S+) \((\d+) executors\)", log.read_text())
    assert started is not None, log.read_text()[-3000:]
    assert started.groups() == ("local-cluster[2,1,1024]", "2")
