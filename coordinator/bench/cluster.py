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
from dataclasses import asdict, dataclass
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


# --- the benchmark: where the sink's work goes -----------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process (all its threads, and its reaped children)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    # utime, stime, cutime, cstime: fields 14-17 of stat(5), 12-15 after the state.
    ticks = sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def session_cpu(
    sessions: set[int], exclude: frozenset[int] | set[int] = frozenset()
) -> dict[int, tuple[str, float]]:
    """pid -> (kind, CPU seconds so far) of every live process of ``sessions`` but
    ``exclude``. Kinds: ``jvm``, ``source`` (the Python processes of a Python data source: the
    inbox reader runs on the driver), ``python`` (the rest)."""
    from coordinator.bench.soak import processes

    out: dict[int, tuple[str, float]] = {}
    for pid, proc in processes().items():
        if proc.session not in sessions or pid in exclude or proc.state in ("Z", "X"):
            continue
        if "java" in proc.cmdline.split(" ", 1)[0]:
            kind = "jvm"
        elif "data_source" in proc.cmdline or "streaming_source" in proc.cmdline:
            kind = "source"
        else:
            kind = "python"
        out[pid] = (kind, cpu_seconds(pid))
    return out


def cpu_between(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds by kind spent between two :func:`session_cpu` snapshots, by the processes
    alive at the second (one started in between counts whole; one that ended in between is
    lost, unless its parent reaped it: then it is in the parent's children's time)."""
    kinds: dict[str, float] = {"jvm": 0.0, "source": 0.0, "python": 0.0}
    for pid, (kind, seconds) in after.items():
        kinds[kind] += max(0.0, seconds - before.get(pid, (kind, 0.0))[1])
    return kinds


@dataclass(frozen=True)
class ClusterBenchOptions:
    groups: int = 20
    members: int = 5
    #: Each member's heartbeat interval; 0 = closed loop (capacity).
    heartbeat_ms: int = 0
    seconds: float = 60.0
    warmup_seconds: float = 20.0
    drain_seconds: float = 30.0
    #: ``job.sink.write`` values, run one after the other on the same cluster (repeat them,
    #: e.g. driver,executors,executors,driver, to even out a busy machine's drift).
    writes: tuple[str, ...] = ("driver", "executors")
    workers: int = 2
    cores: int = 1
    worker_memory: str = "1g"
    shards: int = 2
    trigger_interval_ms: int = 200
    session_timeout_ms: int = 60_000
    #: A master to use instead of starting a standalone cluster (e.g. ``local[2]``).
    master: str | None = None
    warehouse: str | None = None

    def __post_init__(self) -> None:
        from coordinator.stream.datafiles import SINK_WRITES

        unknown = [w for w in self.writes if w not in SINK_WRITES]
        if unknown or not self.writes:
            raise ValueError(f"--writes are {', '.join(SINK_WRITES)}")
        if self.groups < 1 or self.members < 1 or self.seconds <= 0:
            raise ValueError("--groups, --members and --seconds must be positive")


class _Process:
    """What :class:`coordinator.bench.stream.Load` asks of a query, for a job process."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    @property
    def isActive(self) -> bool:  # the name Load reads
        return self.proc.poll() is None

    def exception(self) -> str:
        return f"the job exited {self.proc.returncode}: {self.log.read_text()[-2000:]}"


def run_write(
    index: int,
    write: str,
    master: str,
    options: ClusterBenchOptions,
    root: Path,
    executor_sessions: set[int],
    executor_exclude: set[int],
    say: Any,
) -> dict[str, Any]:
    """One ``coordinator run`` with ``job.sink.write=write`` on ``master`` under the load."""
    from coordinator.bench.soak import kill_session
    from coordinator.bench.stream import (
        Load,
        StreamBenchOptions,
        formation_timeout_s,
        group_ids,
        percentile,
    )
    from coordinator.bench.stream_members import Member
    from coordinator.stream.schema import Warehouse

    warehouse = root / f"{index}-{write}"
    conf = root / "bench.properties"
    conf.write_text("group.initial.rebalance.delay.ms=0\n", encoding="utf-8")
    log = root / f"{index}-{write}.log"
    command = [
        sys.executable,
        "-m",
        "coordinator",
        "run",
        "--master",
        master,
        "--warehouse",
        str(warehouse),
        "--conf",
        str(conf),
        "--shards",
        str(options.shards),
        "--trigger-interval",
        str(options.trigger_interval_ms),
        "--set",
        f"job.sink.write={write}",
    ]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    say(f"[{write}] starting the job on {master}")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 300
        while "coordinator ready" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the job did not start: {log.read_text()[-3000:]}")
            time.sleep(0.2)
        paths = Warehouse.at(warehouse)
        members = [Member(g) for g in group_ids(options.groups) for _ in range(options.members)]
        load_options = StreamBenchOptions(
            groups=options.groups,
            members=options.members,
            heartbeat_ms=options.heartbeat_ms,
            seconds=options.seconds,
            warmup_seconds=options.warmup_seconds,
            session_timeout_ms=options.session_timeout_ms,
            rebalance_timeout_ms=options.session_timeout_ms,
        )
        load = Load(paths, members, load_options, _Process(proc, log), None, joined=False)
        load.start()
        try:
            # The members join, sync and heartbeat as clients do (see bench.stream_members).
            say(f"[{write}] forming {options.groups} groups x {options.members} members")
            timeout = formation_timeout_s(len(members))
            load.sleep(timeout, until=load.formed)
            if not load.formed():
                raise RuntimeError(
                    f"the groups did not form in {timeout:,.0f} s: {load.member_phases()}"
                )
            say(f"[{write}] warm-up {options.warmup_seconds:g} s")
            load.sleep(options.warmup_seconds)
            driver0 = session_cpu({proc.pid})
            python0 = cpu_seconds(proc.pid)
            executors0 = session_cpu(executor_sessions, executor_exclude)
            t0 = time.time()
            say(f"[{write}] measuring {options.seconds:g} s")
            load.sleep(options.seconds)
            t1 = time.time()
            driver1 = session_cpu({proc.pid})
            python1 = cpu_seconds(proc.pid)
            executors1 = session_cpu(executor_sessions, executor_exclude)
            load.sending = False
            load.sleep(options.drain_seconds, until=lambda: load.outstanding() == 0)
        finally:
            load.stop()
        load.check()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=90)
        kill_session(proc)
    with load._lock:
        answered = [(a, b) for a, b in load.m.answered if t0 <= a < t1]
        sent = sum(1 for at in load.m.sent if t0 <= at < t1)
        errors = sum(1 for at, e in load.m.errors if t0 <= at < t1 and e != "NONE")
    window = t1 - t0
    rate = len(answered) / window
    driver_parts = cpu_between(driver0, driver1)
    driver_cpu = sum(driver_parts.values())
    python_cpu = python1 - python0
    executor_cpu = sum(cpu_between(executors0, executors1).values())
    latencies = [b - a for a, b in answered]
    return {
        "write": write,
        "master": master,
        "window_s": round(window, 1),
        "sent_per_s": round(sent / window, 1),
        "answered_per_s": round(rate, 1),
        "errors": errors,
        "latency_p50_s": _round(percentile(latencies, 50)),
        "latency_p99_s": _round(percentile(latencies, 99)),
        "driver_cpu_s": round(driver_cpu, 2),
        "driver_cores": round(driver_cpu / window, 2),
        "driver_cpu_ms_per_request": _round(1000 * driver_cpu / len(answered))
        if answered
        else None,
        "driver_python_cpu_ms_per_request": _round(1000 * python_cpu / len(answered))
        if answered
        else None,
        # The driver's CPU by process: its JVM, the inbox source's Python, the rest (the
        # driver's own Python, which runs the sink, and Spark's Python daemons).
        "driver_cpu_s_by_process": {k: round(v, 2) for k, v in driver_parts.items()},
        "executor_cpu_s": round(executor_cpu, 2),
        "executor_cpu_ms_per_request": _round(1000 * executor_cpu / len(answered))
        if answered
        else None,
    }


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def cluster_bench(options: ClusterBenchOptions, say: Any = None) -> dict[str, Any]:
    """Each ``job.sink.write`` of ``options`` in turn, on one standalone cluster started here
    (or on ``options.master``): capacity (closed loop) or latency at a fixed rate, and the
    CPU the driver (the job's process, its JVM and their children) and the executors (the
    workers' children) spent per answered request over the same window."""
    tell = say or (lambda _: None)
    keep = options.warehouse is not None
    if options.warehouse is not None:
        root = Path(options.warehouse).absolute() / time.strftime("cluster-%Y%m%d-%H%M%S")
        root.mkdir(parents=True)
    else:
        root = Path(tempfile.mkdtemp(prefix="coordinator-cluster-bench-"))
    cluster = None
    try:
        if options.master is None:
            tell(f"starting a standalone cluster: {options.workers} workers x {options.cores} core")
            cluster = StandaloneCluster(
                options.workers, options.cores, options.worker_memory, directory=root / "cluster"
            ).start()
            master = cluster.master_url
            sessions = set(cluster.daemon_pids())
            exclude = set(sessions)
        else:
            master, sessions, exclude = options.master, set(), set()
        runs = [
            run_write(i, w, master, options, root, sessions, exclude, tell)
            for i, w in enumerate(options.writes)
        ]
    finally:
        if cluster is not None:
            cluster.stop()
        if not keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    return {"options": asdict(options), "warehouse": str(root) if keep else None, "runs": runs}


COLUMNS = (
    ("write", "write"),
    ("answered_per_s", "answered/s"),
    ("latency_p50_s", "p50 s"),
    ("latency_p99_s", "p99 s"),
    ("driver_cores", "driver cores"),
    ("driver_cpu_ms_per_request", "driver CPU ms/req"),
    ("driver_python_cpu_ms_per_request", "of it Python ms/req"),
    ("executor_cpu_ms_per_request", "executor CPU ms/req"),
    ("errors", "errors"),
)


def format_cluster_report(result: dict[str, Any]) -> str:
    o = result["options"]
    loop = "closed loop" if o["heartbeat_ms"] == 0 else f"heartbeat every {o['heartbeat_ms']} ms"
    where = o["master"] or f"standalone, {o['workers']} workers x {o['cores']} core"
    lines = [
        f"{o['groups']} groups x {o['members']} members, {loop}, {o['seconds']:g} s measured, "
        f"{where}, {o['shards']} shards",
        "  ".join(f"{title:>20}" for _, title in COLUMNS),
    ]
    for run in result["runs"]:
        lines.append("  ".join(f"{run[key]!s:>20}" for key, _ in COLUMNS))
    return "\n".join(lines)
