"""CPU per answered request, by process, over a fixed backlog (``coordinator bench backlog``).

On a box shared with other work, open-loop latency and capacity figures mostly measure the
neighbours; CPU time does not. This bench starts each mode's query in one Spark session (the
modes of ``coordinator bench stream``: ``floor-shard``, ``shard``, ``group``, ...), forms the
groups (the floors start their members joined), then, ``--rounds`` times, drops ``--files``
inbox files of ``--per-file`` heartbeats at once (members in turn), waits until every one is
answered, and reports the CPU time each kind of process spent meanwhile per answered request:

- ``jvm``: the driver's JVM, which in ``local[N]`` runs the tasks too (its own threads; the
  ``chmod`` children Hadoop starts are not counted);
- ``python_workers``: PySpark's Python workers (the daemon of ``pyspark.worker``, the job's
  :mod:`coordinator.stream.spark_daemon` or PySpark's own, and the workers it forks): the
  source's reads and the state function, with PySpark's Arrow and pandas conversions around
  them;
- ``other_python``: PySpark's other Python processes (the streaming source's planner, the data
  source lookups at a query's start);
- ``driver``: this process (the sink's Delta writes, the progress listener, and this bench's
  own file writing and reading of ``responses``).

Each process's CPU (``/proc/<pid>/stat``, utime + stime) is sampled every 0.2 s, so a process
that exits within a round loses at most one interval. A mode listed twice runs twice, so the
figures of a query that follows others in the same session (with Python workers that ran them)
can be compared with the first.

PySpark starts its Python workers with ``python -m``, which puts the driver's working
directory first on their ``sys.path``: a ``coordinator`` package there is what the workers
import, whatever ``PYTHONPATH`` says. Run this from the checkout whose code is measured (it
refuses to run when the working directory holds another ``coordinator`` package).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.bench import stream as stream_bench
from coordinator.bench.soak import Process, descendants, processes
from coordinator.bench.stream_members import Member
from coordinator.stream import job, spark_daemon
from coordinator.stream.client import StreamClient
from coordinator.stream.settings import SOURCE_LINES, load_settings

#: The kinds of process reported, in report order.
KINDS = ("jvm", "python_workers", "other_python", "driver")


@dataclass(frozen=True)
class BacklogBenchOptions:
    modes: tuple[str, ...] = (stream_bench.FLOOR_SHARD, stream_bench.SHARD)
    files: int = 20
    per_file: int = 1000
    rounds: int = 2
    groups: int = 500
    members: int = 10
    #: ``job.max.files.per.trigger``: files per micro-batch.
    files_per_trigger: int = 10
    #: ``job.shards`` (and ``local[N]``).
    shards: int = 2
    #: Long enough that no member expires while the backlog waits.
    session_timeout_ms: int = 300_000
    #: How long a round may take before the bench gives up.
    round_timeout_s: float = 900.0
    #: ``job.source.lines`` of each query, in turn (query i takes ``source_lines[i % n]``).
    source_lines: tuple[str, ...] = ("python",)

    def __post_init__(self) -> None:
        unknown = set(self.modes) - set(stream_bench.MODES)
        if unknown:
            raise ValueError(f"unknown modes {sorted(unknown)}; any of {stream_bench.MODES}")
        if min(self.files, self.per_file, self.rounds, self.groups, self.members) < 1:
            raise ValueError("--files, --per-file, --rounds, --groups and --members must be >= 1")
        if not self.source_lines or set(self.source_lines) - set(SOURCE_LINES):
            raise ValueError(f"--source-lines: one or more of {SOURCE_LINES}")

    def lines_of(self, index: int) -> str:
        """``job.source.lines`` of the ``index``-th query."""
        return self.source_lines[index % len(self.source_lines)]


def _kind(pid: int, me: int, process: Process) -> str:
    if pid == me:
        return "driver"
    if process.name == "java":
        return "jvm"
    return (
        "python_workers"
        if spark_daemon.is_daemon_process(process.cmdline, "pyspark.worker")
        else "other_python"
    )


class CpuSampler:
    """The CPU of this process, its JVM and the JVM's Python processes, by kind, sampled
    every ``interval_s`` from :meth:`start` to :meth:`finish`."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._kinds: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, initial: bool = False) -> None:
        procs = processes()
        me = os.getpid()
        java = [p for p in descendants(procs, me) if procs[p].name == "java"]
        pids = [me]
        if java:
            pids.append(java[0])
            pids += [p for p in descendants(procs, java[0]) if procs[p].name.startswith("python")]
        for pid in pids:
            if pid not in procs:
                continue
            if pid not in self._first:
                # A process that started after the first sample counts from zero.
                self._first[pid] = procs[pid].cpu_s if initial else 0.0
                self._kinds[pid] = _kind(pid, me, procs[pid])
            self._last[pid] = procs[pid].cpu_s

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> None:
        self._sample(initial=True)
        self._thread.start()

    def finish(self) -> dict[str, float]:
        """CPU seconds by kind since :meth:`start`."""
        self._stop.set()
        self._thread.join()
        self._sample()
        used = dict.fromkeys(KINDS, 0.0)
        for pid, first in self._first.items():
            used[self._kinds[pid]] += self._last[pid] - first
        return used


def check_working_directory(cwd: Path | None = None) -> None:
    """Refuse to run where PySpark's workers would import another ``coordinator`` than this
    process (see the module docstring)."""
    import coordinator

    here = (cwd or Path.cwd()).resolve()
    package = Path(coordinator.__file__).resolve().parent
    if (here / "coordinator" / "__init__.py").exists() and (here / "coordinator") != package:
        raise RuntimeError(
            f"the Python workers would import {here / 'coordinator'} (the working directory "
            f"comes first on their path), not {package}: run from {package.parent}"
        )


def _start(spark: Any, mode: str, settings: Any) -> Any:
    if mode in stream_bench.FLOORS:
        return stream_bench.start_floor(spark, settings, None, mode)
    return job.start(spark, settings, None)


def run_query(
    spark: Any,
    index: int,
    mode: str,
    options: BacklogBenchOptions,
    root: Path,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """One mode's query: form its groups, then the rounds of backlog; one row per round."""
    (root / str(index)).mkdir()
    base = stream_bench.StreamBenchOptions(
        groups=options.groups,
        members=options.members,
        session_timeout_ms=options.session_timeout_ms,
        shards=options.shards,
    )
    settings = stream_bench.mode_settings(mode, root / str(index), base)
    settings = dataclasses.replace(
        settings,
        job=dataclasses.replace(
            settings.job,
            max_files_per_trigger=options.files_per_trigger,
            source_lines=options.lines_of(index),
        ),
    )
    paths = settings.job.paths
    spark.conf.set("spark.sql.shuffle.partitions", str(settings.job.shards))
    spark.conf.unset(stream_bench.ARROW_BATCH)
    say(f"[{index} {mode}] starting the query (job.source.lines={settings.job.source_lines})")
    running = _start(spark, mode, settings)
    rows = []
    try:
        groups = stream_bench.group_ids(options.groups)
        floor = mode in stream_bench.FLOORS
        if floor:
            members = [
                Member(g, f"floor-{g}-{k}", 1) for g in groups for k in range(options.members)
            ]
        else:
            StreamClient(paths).request(
                {"api": "offset_fetch", "request_id": "warm-up", "group_id": "bench-warm-up"},
                timeout_s=300,
            )
            members = [Member(g) for g in groups for _ in range(options.members)]
        load = stream_bench.Load(paths, members, base, running.query, None, joined=floor)
        load.sending = not floor  # the members join and sync, then the load sends nothing
        load.start()
        try:
            if not floor:
                say(f"[{index} {mode}] forming {options.groups} x {options.members}")
                load.sleep(stream_bench.formation_timeout_s(len(members)), until=load.formed)
                if not load.formed():
                    raise RuntimeError(f"the groups did not form: {load.member_phases()}")
                load.sending = False
            load.sleep(120, until=lambda: load.outstanding() == 0)
            cursor = 0
            for round_ in range(options.rounds):
                sampler = CpuSampler()
                sampler.start()
                started = time.time()
                count = 0
                for _ in range(options.files):
                    due = [(cursor + i) % len(members) for i in range(options.per_file)]
                    cursor = (cursor + options.per_file) % len(members)
                    with load._lock:
                        beats = load.members.heartbeats(due)
                        now = time.time()
                        for rid, _ in beats:
                            load.m.landed[rid] = now
                    load.inbox.submit_lines([line for _, line in beats])
                    count += len(beats)
                load.sleep(options.round_timeout_s, until=lambda: load.outstanding() == 0)
                if load.outstanding():
                    raise RuntimeError(f"{load.outstanding()} heartbeats unanswered")
                seconds = time.time() - started
                used = sampler.finish()
                errors: dict[str, int] = {}
                for _, error in load.m.errors[-count:]:
                    errors[error] = errors.get(error, 0) + 1
                row = {
                    "query": index,
                    "mode": mode,
                    "source_lines": settings.job.source_lines,
                    "round": round_,
                    "requests": count,
                    "seconds": round(seconds, 2),
                    "cpu_us_per_request": {
                        kind: round(used[kind] / count * 1e6, 1) for kind in KINDS
                    },
                    "answers": errors,
                    "load_average": round(os.getloadavg()[0], 1),
                }
                say(f"[{index} {mode}] round {round_}: {row['cpu_us_per_request']}")
                rows.append(row)
        finally:
            load.stop()
        load.check()
    finally:
        running.stop()
    return rows


def backlog_bench(
    options: BacklogBenchOptions,
    spark: Any | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every mode of ``options`` in turn, in one Spark session (``spark``, or one started here
    and stopped afterwards; see the module docstring)."""
    tell = say or (lambda _: None)
    check_working_directory()
    root = Path(tempfile.mkdtemp(prefix="coordinator-bench-backlog-"))
    own_session = spark is None
    if spark is None:
        spark = job.spark_session(
            load_settings([], shards=options.shards, warehouse=str(root / "session"))
        )
    try:
        rows = []
        for index, mode in enumerate(options.modes):
            rows += run_query(spark, index, mode, options, root, tell)
    finally:
        if own_session:
            job.stop_session(spark, 60.0)  # the data source's daemons first: a quiet stop
        shutil.rmtree(root, ignore_errors=True)
    settings = dataclasses.asdict(options)
    settings["modes"] = list(options.modes)
    settings["source_lines"] = list(options.source_lines)
    return {"options": settings, "rounds": rows}


def format_report(result: dict[str, Any]) -> str:
    options = result["options"]
    lines = [
        f"{options['files']} files x {options['per_file']} heartbeats a round, "
        f"{options['files_per_trigger']} files a batch, {options['groups']} groups x "
        f"{options['members']} members; CPU per answered request (us)",
        "",
        f"{'query':<25} {'round':>5} {'seconds':>8} "
        + " ".join(f"{k:>14}" for k in KINDS)
        + "  answers",
    ]
    for row in result["rounds"]:
        cpu = row["cpu_us_per_request"]
        label = f"{row['query']} {row['mode']} {row.get('source_lines', 'jvm')}"
        lines.append(
            f"{label:<25} "
            f"{row['round']:>5} {row['seconds']:>8} "
            + " ".join(f"{cpu[k]:>14}" for k in KINDS)
            + f"  {row['answers']}"
        )
    return "\n".join(lines)
