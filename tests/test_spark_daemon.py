"""The job's PySpark daemon (``coordinator/stream/spark_daemon.py``): a worker whose UNIX socket
the JVM closed exits without a traceback, where PySpark's own daemon prints one.

Each test plays the JVM's part against a real daemon process: it reads the daemon's socket path
from its stdout, connects as the JVM does to get a worker, reads the worker's pid, and closes
the connection, as the JVM closes its idle workers' sockets when a SparkContext stops."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from coordinator.stream import spark_daemon

ROOT = Path(__file__).resolve().parents[1]
BOUND_S = 60.0


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def closed_idle_worker(module: str) -> tuple[int, str]:
    """The daemon ``module``'s stderr after one of its workers had its connection closed
    before any task, and that worker's pid."""
    # A UNIX socket's path holds at most 107 bytes, and the daemon's is this directory plus
    # 43: pytest's own temporary directories can be too long.
    sockets = tempfile.mkdtemp(prefix="daemon-", dir="/tmp")
    env = dict(
        os.environ,
        PYTHON_UNIX_DOMAIN_ENABLED="true",
        PYTHON_WORKER_FACTORY_SOCK_DIR=sockets,
        SPARK_REUSE_WORKER="1",
        # What the JVM sets with spark.python.daemon.killWorkerOnFlushFailure (the default).
        PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE="true",
    )
    daemon = subprocess.Popen(
        [sys.executable, "-m", module],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    try:
        assert daemon.stdout is not None
        prefix = daemon.stdout.read(4)
        if len(prefix) < 4:
            _, stderr = daemon.communicate(timeout=BOUND_S)
            raise AssertionError(f"the daemon said no socket path: {stderr.decode()[-3000:]}")
        (length,) = struct.unpack(">i", prefix)
        path = daemon.stdout.read(length).decode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(path)
            (pid,) = struct.unpack(">i", connection.recv(4))
        deadline = time.monotonic() + BOUND_S
        while not _gone(pid):
            assert time.monotonic() < deadline, f"worker {pid} still running after {BOUND_S} s"
            time.sleep(0.01)
        # Closing its stdin (communicate does) is the JVM's stop: the daemon shuts down.
        _, stderr = daemon.communicate(timeout=BOUND_S)
        return pid, stderr.decode()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(sockets, ignore_errors=True)


def test_pysparks_own_daemon_prints_a_traceback_for_it() -> None:
    """The behaviour the job's daemon exists for. When a PySpark release stops printing this,
    this test fails, and the job's daemon can go."""
    _, stderr = closed_idle_worker("pyspark.daemon")
    assert "Traceback" in stderr and "BrokenPipeError" in stderr, stderr


def test_the_jobs_daemon_ends_the_worker_quietly() -> None:
    pid, stderr = closed_idle_worker(spark_daemon.MODULE)
    assert _gone(pid)
    assert stderr == ""


def test_any_other_failure_of_a_worker_still_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(sock: socket.socket, authenticated: bool) -> int:
        raise ValueError("not a closed connection")

    monkeypatch.setattr(spark_daemon, "_spark_worker", fails)
    with socket.socket() as sock, pytest.raises(ValueError, match="not a closed connection"):
        spark_daemon.worker(sock, True)


@pytest.mark.parametrize("error", spark_daemon.CLOSED_BY_THE_JVM)
def test_a_closed_connection_is_a_failure_code(
    monkeypatch: pytest.MonkeyPatch, error: type[OSError]
) -> None:
    def closed(sock: socket.socket, authenticated: bool) -> int:
        raise error()

    monkeypatch.setattr(spark_daemon, "_spark_worker", closed)
    with socket.socket() as sock:
        assert spark_daemon.worker(sock, True) == 1


def test_the_benches_tell_a_daemons_processes_by_their_command_line() -> None:
    python = "/venv/bin/python -m"
    assert spark_daemon.is_daemon_process(f"{python} {spark_daemon.MODULE} pyspark.worker")
    assert spark_daemon.is_daemon_process(f"{python} pyspark.daemon pyspark.worker")
    assert spark_daemon.is_daemon_process(f"{python} pyspark.daemon", "pyspark.worker") is False
    assert spark_daemon.is_daemon_process(f"{python} pyspark.daemon")
    assert not spark_daemon.is_daemon_process(f"{python} pyspark.daemonic pyspark.worker")
    assert not spark_daemon.is_daemon_process(f"{python} coordinator run")
    # Only PySpark's own daemon (the data source's planners), as the stop ends them.
    pyspark_only = (spark_daemon.PYSPARK_DAEMON,)
    planner = f"{python} pyspark.daemon pyspark.sql.worker.plan_data_source_read"
    assert spark_daemon.is_daemon_process(planner, modules=pyspark_only)
    tasks = f"{python} {spark_daemon.MODULE} pyspark.worker"
    assert not spark_daemon.is_daemon_process(tasks, modules=pyspark_only)


#: Run by the test below in a Python of its own (the run's shared session must keep its
#: daemons): a session as the job builds it reads a Python data source (so Spark starts the
#: planners' daemons), ends PySpark's daemons, then stops. Prints one JSON line.
_END_DAEMONS = """
import json, os
from pyspark.sql.datasource import DataSource, DataSourceReader
from coordinator.stream import job, spark_daemon
from coordinator.stream.settings import load_settings

class One(DataSourceReader):
    def read(self, partition):
        yield (1,)

class Tiny(DataSource):
    @classmethod
    def name(cls):
        return "tiny"
    def schema(self):
        return "x int"
    def reader(self, schema):
        return One()

spark = job.spark_session(load_settings([], shards=2))
spark.dataSource.register(Tiny)
rows = [r.x for r in spark.read.format("tiny").load().collect()]
def children():
    out = {}
    for handle in spark.sparkContext._jvm.java.lang.ProcessHandle.current().children().toArray():
        command = handle.info().commandLine()
        forked = [int(d.pid()) for d in handle.descendants().toArray()]
        out[int(handle.pid())] = (command.get() if command.isPresent() else "", forked)
    return out
before = children()
query = spark.readStream.format("rate").load().writeStream.format("noop").start()
while_active = spark_daemon.end_pyspark_daemons(spark)  # a query runs: none ended
query.stop()
ended = spark_daemon.end_pyspark_daemons(spark)
forked = [p for pid in ended for p in before[pid][1]]
import time
def living():
    out = []
    for p in ended + forked:
        try:
            with open(f"/proc/{p}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(p)
        except FileNotFoundError:
            pass
    return out
deadline = time.monotonic() + 30  # a kill is delivered, not waited for
while living() and time.monotonic() < deadline:
    time.sleep(0.05)
alive = living()
stopped = job.stop_session(spark, 60)
print(json.dumps({"while_active": while_active, "rows": rows, "before": {str(k): v[0] for k, v in before.items()}, "ended": ended, "forked": forked, "alive": alive, "stopped": stopped}))
"""


@pytest.mark.slow
def test_pysparks_daemons_are_ended_before_the_session_stops() -> None:
    """The data source's planners run under PySpark's own daemon, which the job's module does
    not reach; :func:`spark_daemon.end_pyspark_daemons` ends them (and their workers) and
    leaves the tasks' daemon, and the session then stops without a word on stderr."""
    import json

    done = subprocess.run(
        [sys.executable, "-c", _END_DAEMONS],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == [1]
    assert result["while_active"] == []
    commands = result["before"]
    planners = sorted(int(p) for p, c in commands.items() if "-m pyspark.daemon " in c)
    assert len(planners) >= 2, commands  # lookup, create, plan: one daemon each
    assert sorted(result["ended"]) == planners
    assert result["forked"] and result["alive"] == []
    # The tasks' daemon (the job's module) was left to Spark's own stop.
    assert any(f"-m {spark_daemon.MODULE} " in c for c in commands.values()), commands
    assert result["stopped"] is True
    noise = [
        line
        for line in done.stderr.splitlines()
        if line.strip() and "Using incubator modules" not in line
    ]
    assert not [line for line in noise if "Traceback" in line or "Error" in line], noise
