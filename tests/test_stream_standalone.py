"""The job on a Spark standalone cluster with its writes on the executors.

A master and two workers (one core each) run as separate JVM processes, started from the
installed pyspark's own ``bin/spark-class`` (:class:`coordinator.bench.cluster.StandaloneCluster`);
the job runs as ``coordinator run --master spark://...`` with ``job.sink.write=executors``, so
every data file of ``consumer_offsets``, ``group_history``, ``rejected_requests`` and
``responses`` is written by a task on an executor (the driver holds no executor in standalone
mode) and only committed by the driver.

- A group forms, syncs, heartbeats, commits and fetches through it.
- The kill -9 loop of tests/test_kill_recovery.py, reduced to one kill of each kind that
  matters to executor writes (a kill after the log's commit with the other tables' files
  written on the executors and not committed, a kill once every table is committed and Spark
  has not committed the batch, and a wall-clock kill, usually in the recovery of the one
  before): nothing lost, nothing twice, and the files the killed batches wrote but never
  committed go with one vacuum. ``COORDINATOR_KILLS`` raises the number of kills (the rest
  wall-clock). The local loop (tests/test_kill_recovery.py) kills after every table's commit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.bench.cluster import StandaloneCluster
from coordinator.stream.client import StreamClient
from coordinator.stream.schema import CONSUMER_OFFSETS, RESPONSES
from tests.test_executor_writes import written_by_the_tasks
from tests.test_kill_recovery import kill_loop
from tests.test_stream_job import one_member_commits_and_reads_back, wait_until_ready

pytestmark = pytest.mark.slow

EXECUTOR_WRITES = ["--set", "job.sink.write=executors"]
#: The kill points of the reduced loop (chance per batch of dying there).
CLUSTER_TARGETS = {"after:consumer_offsets": 0.3, "after:write": 0.3}
CLUSTER_KILLS = int(os.environ.get("COORDINATOR_KILLS", str(len(CLUSTER_TARGETS) + 1)))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(
        workers=2, cores=1, memory="1g", directory=tmp_path_factory.mktemp("cluster")
    ) as running:
        yield running


def test_a_group_forms_and_commits_with_writes_on_the_executors(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    conf = tmp_path / "test.properties"
    conf.write_text("group.initial.rebalance.delay.ms=0\n")
    log = tmp_path / "job.log"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    command = [
        sys.executable,
        "-m",
        "coordinator",
        "run",
        "--master",
        cluster.master_url,
        "--warehouse",
        str(warehouse),
        "--conf",
        str(conf),
        "--stop-when-idle",
        "300",
        *EXECUTOR_WRITES,
    ]
    with log.open("w") as out:
        job = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until_ready(job, log)
        client = StreamClient(warehouse)
        one_member_commits_and_reads_back(client, "standalone")
        listed = client.request({"api": "list_groups", "request_id": "l1"}, timeout_s=60)
        assert [g["group_id"] for g in listed["groups"]] == ["standalone"]
    finally:
        job.terminate()
        job.wait(timeout=90)
    text = log.read_text()
    started = re.search(r"coordinator started on (\S+) \((\d+) executors\)", text)
    assert started is not None, text[-3000:]
    assert started.groups() == (cluster.master_url, "2")
    tables = warehouse / "tables"
    assert written_by_the_tasks(tables / CONSUMER_OFFSETS)
    assert written_by_the_tasks(tables / RESPONSES)


def test_the_kill_9_loop_on_the_cluster_with_writes_on_the_executors(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    report = kill_loop(
        tmp_path,
        CLUSTER_KILLS,
        CLUSTER_TARGETS,
        ["--master", cluster.master_url, *EXECUTOR_WRITES],
    )
    tables = tmp_path / "warehouse" / "tables"
    assert written_by_the_tasks(tables / CONSUMER_OFFSETS)
    assert report["kills"] >= CLUSTER_KILLS
