"""A Spark standalone cluster on this machine, from the installed pyspark's own launcher.

The pip package has no ``sbin/start-master.sh`` / ``start-worker.sh``; the daemons are started
as those scripts start them, with ``bin/spark-class``: one
``org.apache.spark.deploy.master.Master`` and N ``org.apache.spark.deploy.worker.Worker``, each
a separate JVM process (in a session of its own, so that a test killing a job's session never
touches them). The cluster is ready once the master logged every worker's registration.

For tests and benchmarks (``coordinator bench cluster``); a real deployment starts its
daemons its own way. Executors inherit the workers' environment: ``PYTHONPATH`` (so that a
checkout's ``coordinator`` is what their Python imports) and ``PYSPARK_PYTHON``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_class() -> Path:
    """``bin/spark-class`` of the installed pyspark."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores and ``memory`` for executors each)."""

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        host: str = "127.0.0.1",
        directory: Path | None = None,
        daemon_memory: str = "256m",
    ) -> None:
        if workers < 1 or cores < 1:
            raise ValueError("a cluster needs at least one worker with at least one core")
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.host = host
        self.daemon_memory = daemon_memory
        self._own_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="coordinator-cluster-"))
        self.port = 0
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def master_log(self) -> Path:
        return self.directory / "master.log"

    def environment(self) -> dict[str, str]:
        """The daemons' environment (and so the executors')."""
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", self.host)
        env["SPARK_DAEMON_MEMORY"] = self.daemon_memory
        env["SPARK_LOG_DIR"] = str(self.directory)
        # Run from the package that `python` imports here (a checkout on PYTHONPATH included).
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        here = str(Path(__file__).resolve().parents[2])
        if here not in paths:
            paths.insert(0, here)
        env["PYTHONPATH"] = os.pathsep.join(paths)
        return env

    def start(self, timeout_s: float = 180.0) -> StandaloneCluster:
        """Start the master, then the workers; return once all are registered."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.host)
        env = self.environment()
        launcher = str(spark_class())
        self._spawn(
            [
                launcher,
                MASTER_CLASS,
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--webui-port",
                str(free_port(self.host)),
            ],
            self.master_log,
            env,
        )
        for n in range(self.workers):
            work = self.directory / f"worker-{n}"
            work.mkdir(exist_ok=True)
            self._spawn(
                [
                    launcher,
                    WORKER_CLASS,
                    self.master_url,
                    "--host",
                    self.host,
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(work),
                    "--webui-port",
                    str(free_port(self.host)),
                ],
                self.directory / f"worker-{n}.log",
                env,
            )
        deadline = time.monotonic() + timeout_s
        while self.registered() < self.workers:
            dead = [p.args for p in self.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                log = self.master_log.read_text(errors="replace")[-3000:]
                self.stop()
                why = f"exited: {dead}" if dead else f"not ready in {timeout_s:g} s"
                raise RuntimeError(f"standalone cluster {why}\n{log}")
            time.sleep(0.2)
        return self

    def registered(self) -> int:
        """How many workers the master has registered so far."""
        if not self.master_log.exists():
            return 0
        return self.master_log.read_text(errors="replace").count("Registering worker")

    def _spawn(self, command: list[str], log: Path, env: dict[str, str]) -> None:
        with log.open("wb") as out:
            self.processes.append(
                subprocess.Popen(
                    command,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )

    def daemon_pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.poll() is None]

    def stop(self) -> None:
        """Stop the workers (their executors with them), then the master; every process of
        their sessions is gone afterwards."""
        from coordinator.bench.soak import kill_session

        for proc in reversed(self.processes):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for proc in reversed(self.processes):
            kill_session(proc, grace_s=10.0)
        self.processes = []
        if self._own_directory:
            import shutil

            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> Any:
        self.stop()
        return None
