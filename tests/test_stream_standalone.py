"""The job on a Spark standalone cluster with its writes on the executors.

A master and two workers (one core each) run as separate JVM processes, started from the
installed pyspark's own ``bin/spark-class`` (:class:`coordinator.bench.cluster.StandaloneCluster`);
the job runs as ``coordinator run --master spark://...`` with ``job.sink.write=executors``, so
every data file of ``consumer_offsets``, ``group_history``, ``rejected_requests`` and
``responses`` is written by a task on an executor (the driver holds no executor in standalone
mode) and only committed by the driver.

- The kill -9 loop of tests/test_kill_recovery.py, reduced to one kill of each kind that
  matters to executor writes (a wall-clock kill, a kill after the log's commit with the other
  tables' files written on the executors and not committed, and a kill once every table is
  committed and Spark has not committed the batch): nothing lost, nothing twice, and the
  files the killed batches wrote but never committed go with one vacuum. The local loop
  (tests/test_kill_recovery.py) kills after every table's commit. ``COORDINATOR_KILLS`` raises
  the number of kills (the rest wall-clock). The loop's groups form, sync, heartbeat, commit
  and fetch through the cluster, and every run of the job has the cluster's two executors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.bench.cluster import StandaloneCluster
from coordinator.stream.schema import CONSUMER_OFFSETS, RESPONSES
from tests.test_executor_writes import written_by_the_tasks
from tests.test_kill_recovery import kill_loop

pytestmark = pytest.mark.slow

EXECUTOR_WRITES = ["--set", "job.sink.write=executors"]
#: The kill points of the reduced loop (chance per batch of dying there).
CLUSTER_TARGETS = {"after:consumer_offsets": 0.5, "after:write": 0.5}
CLUSTER_KILLS = int(os.environ.get("COORDINATOR_KILLS", str(len(CLUSTER_TARGETS) + 1)))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(
        workers=2, cores=1, memory="1g", directory=tmp_path_factory.mktemp("cluster")
    ) as running:
        yield running


def test_the_kill_9_loop_on_the_cluster_with_writes_on_the_executors(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    report = kill_loop(
        tmp_path,
        CLUSTER_KILLS,
        CLUSTER_TARGETS,
        ["--master", cluster.master_url, *EXECUTOR_WRITES],
    )
    # Every run that started had the cluster's two executors (the driver holds none in
    # standalone mode).
    pattern = re.compile(r"coordinator started on (\S+) \((\d+) executors\)")
    logs = sorted((tmp_path / "logs").glob("job-*.log"))
    started = [m.groups() for m in map(pattern.search, (log.read_text() for log in logs)) if m]
    assert started, [log.name for log in logs]
    assert set(started) == {(cluster.master_url, "2")}
    tables = tmp_path / "warehouse" / "tables"
    assert written_by_the_tasks(tables / CONSUMER_OFFSETS)
    assert written_by_the_tasks(tables / RESPONSES)
    assert report["kills"] >= CLUSTER_KILLS
