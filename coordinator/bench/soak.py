"""``coordinator bench soak``: a busy day compressed into an hour, to prove the job is bounded.

Not part of CI. The point is a trend, not a figure: whether memory, files on disk, batch time
or latency keep growing once the job has reached its retention, which a short benchmark cannot
show.

**The job** runs as a subprocess (``python -m coordinator.bench.soak run --warehouse W ...``:
``coordinator run`` itself, plus an optional memory tracer), in its own session, on a fresh
warehouse, so its driver's memory is the job's alone (the load runs in this process). During the
run it is restarted: at each point of ``restarts`` (a share of the run) it is stopped cleanly
(SIGINT, as Ctrl-C) or ``kill -9``ed (the driver, then every process of its session) and
started again on the same warehouse and checkpoint. ``job_settings`` (``--set KEY=VALUE``)
reach the job unchanged: retention, compaction and source settings are the job's own, and this
benchmark only measures directories and tables, whatever writes them.

**The load**: live :class:`~coordinator.client.member.GroupMember`\\ s over
:class:`~coordinator.stream.transport.StreamTransport` (G groups of M members, range assignor)
heartbeat and commit all along (a commit every ``commit_every_s`` from the last one sent, as
Kafka's auto-commit). The loop turns ``loops_per_s`` times a second and writes the requests its
members queued into inbox files of at most ``requests_per_file`` requests (the gateway writes one
file per 10 ms of requests while busy): the members' requests bunch up behind each micro-batch
of answers, so one file per loop would be a few files a second. Every ``crash_every_s`` one
member, picked at random, dies as a ``kill -9`` does (its link is cut: no LeaveGroup) and a new
member joins its group in its place. The defaults (70 groups x 5 members, a heartbeat and a
commit per member per second, files of at most 10 requests) offer about 700 requests a second
in about 70 files a second: over 60 minutes, more than 2,000,000 requests and 200,000 request
files, with room for the restarts' outages.

**One row per sample** (every 5 minutes by default), each over the interval since the previous one:
RSS of the job's driver (Python), its JVM and its Python workers (Spark's Python daemons and their
workers, summed), and the JVM heap in use after a full GC (``jcmd GC.run``, then ``GC.heap_info``);
checkpoint bytes (and state store), per Delta table its live files (in the current version), data
files and bytes on disk, ``_delta_log`` files and bytes; ``archive/`` and the whole warehouse on
disk; micro-batches with input and their duration p50/p99 (the job's own log lines); requests sent,
files written, round trip p50/p99 (member ``send`` -> callback) and timeouts; crashes so far and
the job's run number.

Between samples, every ``peek_every_s`` (30 s), a thread reads the sizes and the RSS again,
and each row keeps their **peak** over its interval (``peaks``): compaction (every 100
batches), retention and vacuum make a sawtooth of every size, with a cycle of a few minutes,
which one reading every 5 minutes catches at a different phase each time.

**The verdict** is by slope, over the samples at or after ``settle_minutes`` (set it past the
time the job needs to reach its retention: vacuum, log retention, archive clean-up): every size
must be flat, judged by its peaks (the checkpoint within each run: a restart leaves a
transient in it); memory flat within each run of the job (a restart resets it: the slope is
pooled over the runs long enough for one, each judged from ``settle_minutes`` after it began,
as each start warms up again, and the highest each run reaches must not climb from run to run;
the JVM's RSS is reported, not judged, as the JVM grows its heap towards ``-Xmx`` and keeps it);
and batch time and latency flat (samples whose interval holds a restart are left out of those
two). A figure is flagged when its slope, projected over an
hour, exceeds a share of its level and an absolute floor (:data:`LIMITS`).

``--trace-memory`` (``trace_memory``) also runs ``tracemalloc`` in the job's driver and writes
every ``trace_every_s`` a line to ``<root>/memory-trace.jsonl``: RSS, RSS after glibc's
``malloc_trim(0)`` (what the allocator kept but no one uses is given back: a leak survives it,
allocator retention does not), memory traced by Python, pyarrow's pool, the number of objects
the garbage collector tracks, the most common types, the sink's held figures, and the
allocation sites that grew most since the second trace (each snapshot is dumped beside it).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from coordinator.bench.stream import COORDINATOR_SETTINGS, percentile
from coordinator.client.member import GroupMember, MemberConfig, MemberState
from coordinator.client.simulation import MemberLink
from coordinator.client.transport import Callback, SystemClock
from coordinator.errors import Error
from coordinator.stream import spark_daemon
from coordinator.stream.client import StreamClient
from coordinator.stream.schema import TABLES, Warehouse
from coordinator.stream.transport import StreamTransport

STOP = "stop"
KILL = "kill"

#: A trend is flagged when its slope, projected over an hour, exceeds this share of the level
#: (the mean of the judged samples) and the absolute floor per hour (noise on small values):
#: (share, floor per hour, unit).
LIMITS: dict[str, tuple[float, float, str]] = {
    "driver_rss_mb": (0.10, 30.0, "MB"),
    "jvm_heap_mb": (0.10, 50.0, "MB"),
    "workers_rss_mb": (0.10, 30.0, "MB"),
    "checkpoint_mb": (0.10, 2.0, "MB"),
    "state_mb": (0.25, 2.0, "MB"),
    "live_files": (0.25, 100.0, "files"),
    "log_files": (0.10, 100.0, "files"),
    "log_mb": (0.10, 2.0, "MB"),
    "delta_mb": (0.10, 10.0, "MB"),
    "archive_mb": (0.10, 2.0, "MB"),
    "warehouse_mb": (0.10, 10.0, "MB"),
    "batch_p50_ms": (0.25, 100.0, "ms"),
    "latency_p50_ms": (0.25, 100.0, "ms"),
    "latency_p99_ms": (0.5, 500.0, "ms"),
}
#: Judged within each run of the job (pooled slope over the runs with at least
#: :data:`MIN_RUN_POINTS` samples from ``settle_minutes`` after the run began: each start is a
#: warm-up of its own), and across runs: the highest each run reaches after its warm-up must
#: not climb from run to run by more than the limit.
PER_RUN = ("driver_rss_mb", "jvm_heap_mb", "workers_rss_mb")
MIN_RUN_POINTS = 3
#: Judged within each run too, from its second sample: a restart leaves a transient in the
#: checkpoint (the state store loads, and its maintenance, which snapshots and deletes old
#: versions, starts over a minute later), which is not growth.
RESTART_TRANSIENT = ("checkpoint_mb", "state_mb")
#: Reported, not judged: the JVM grows its heap towards ``-Xmx`` (``spark.driver.memory``)
#: when allocation calls for it and keeps it, so its RSS swings between its start and -Xmx
#: plus native memory whatever the trend; a leak in the JVM shows in its heap after a full GC.
REPORTED_ONLY = ("jvm_rss_mb",)
#: Read every ``peek_every_s`` too, and judged by their peak in each interval: compaction,
#: retention and vacuum make a sawtooth of every size (compaction every 100 batches: a cycle
#: of a few minutes), which a reading every 5 minutes catches at a different phase each time.
PEAKED = (
    "driver_rss_mb",
    "jvm_rss_mb",
    "workers_rss_mb",
    "checkpoint_mb",
    "state_mb",
    "live_files",
    "log_files",
    "log_mb",
    "delta_mb",
    "archive_mb",
    "warehouse_mb",
)
#: Left out of the samples whose interval holds a restart (an outage is not a trend).
OUTAGE_SENSITIVE = ("batch_p50_ms", "latency_p50_ms", "latency_p99_ms")

#: Fewer judged samples than this give no verdict (the slopes are still shown).
MIN_JUDGED = 4
#: The run ends at ``minutes``, but waits this long (s) for the job to be back and answering
#: after a restart still under way (a kill late in a short run), and for the restarts still
#: planned: a restart waits for the job to be ready after the one before, which on a loaded box
#: can take past the planned end (they are then carried out late, never dropped).
RECOVERY_GRACE_S = 300.0
#: What a busy day is, for the report: requests and request files over the run.
BUSY_DAY = (2_000_000, 200_000)

TOPIC = "soak"
TRACE_ENV = "COORDINATOR_SOAK_TRACE"
TRACE_EVERY_ENV = "COORDINATOR_SOAK_TRACE_EVERY"
#: The job's per-batch log line (``coordinator.stream.job``'s progress listener).
BATCH_LINE = re.compile(r"batch (\d+): (\d+) files in, .*?, (\d+) ms")
READY_LINE = "coordinator started on"


@dataclass(frozen=True)
class SoakOptions:
    minutes: float = 60.0
    groups: int = 70
    members: int = 5
    partitions: int = 6
    heartbeat_ms: int = 1_000
    session_ms: int = 15_000
    commit_every_s: float = 1.0
    #: One member crashes (and is replaced) this often; 0: never.
    crash_every_s: float = 20.0
    #: Load loops per second (each ticks every member and writes what they queued).
    loops_per_s: float = 60.0
    #: At most this many requests in one inbox file.
    requests_per_file: int = 10
    sample_every_s: float = 300.0
    #: Sizes and memory are also read this often between samples (0: never), and each row
    #: holds their peak over its interval: the verdict judges a sawtooth by its peaks.
    peek_every_s: float = 30.0
    #: Samples before this are shown but not judged (warm-up, retention not yet reached).
    settle_minutes: float = 15.0
    #: (share of the run, STOP or KILL): when the job is restarted, and how.
    restarts: tuple[tuple[float, str], ...] = ((0.4, STOP), (0.7, KILL))
    #: None: the job's settings (``conf/job.properties``).
    trigger_interval_ms: int | None = None
    shards: int | None = None
    #: ``KEY=VALUE`` settings for the job (its ``--set``), e.g. retention.
    job_settings: tuple[str, ...] = ()
    #: None: a temporary directory, removed afterwards; else a new ``soak-<time>`` under it.
    warehouse: str | None = None
    #: Full GC in the JVM before reading its heap (``jcmd GC.run``).
    heap_after_gc: bool = True
    trace_memory: bool = False
    trace_every_s: float = 60.0
    seed: int = 11

    def __post_init__(self) -> None:
        if self.minutes <= 0 or self.sample_every_s <= 0 or self.loops_per_s <= 0:
            raise ValueError("--minutes, --sample-every and --loops-per-s must be > 0")
        if self.peek_every_s < 0:
            raise ValueError("--peek-every must be >= 0")
        if self.requests_per_file < 1:
            raise ValueError("--requests-per-file must be >= 1")
        if self.groups < 1 or self.members < 1 or self.partitions < 1:
            raise ValueError("--groups, --members and partitions must be >= 1")
        if self.session_ms < 3 * self.heartbeat_ms:
            raise ValueError("the session must be at least three heartbeat intervals")
        for share, kind in self.restarts:
            if not 0 < share < 1 or kind not in (STOP, KILL):
                raise ValueError(f"a restart is (share of the run in (0, 1), stop|kill): {share}")

    @classmethod
    def quick(cls, **changes: Any) -> SoakOptions:
        """A tiny run that checks the machinery (a clean restart and a kill -9), not a verdict."""
        base: dict[str, Any] = {
            "minutes": 1.0,
            "groups": 2,
            "members": 2,
            "heartbeat_ms": 1_000,
            "session_ms": 10_000,
            "commit_every_s": 1.0,
            "crash_every_s": 20.0,
            "loops_per_s": 10.0,
            "sample_every_s": 10.0,
            "peek_every_s": 2.0,
            "settle_minutes": 0.0,
            "restarts": ((0.3, STOP), (0.6, KILL)),
            "trace_every_s": 10.0,
        }
        base.update({k: v for k, v in changes.items() if v is not None})
        return cls(**base)

    @property
    def offered_per_s(self) -> float:
        members = self.groups * self.members
        return members * (1000.0 / self.heartbeat_ms + 1.0 / self.commit_every_s)


def parse_restarts(text: str) -> tuple[tuple[float, str], ...]:
    """``0.4:stop,0.7:kill`` (share of the run : how); ``none`` for no restart."""
    if text.strip().lower() in ("", "none"):
        return ()
    out = []
    for item in text.split(","):
        share, _, kind = item.strip().partition(":")
        out.append((float(share), kind.strip().lower() or KILL))
    return tuple(out)


# --- processes and memory -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Process:
    parent: int
    session: int
    state: str  # /proc's one-letter state: "Z" zombie, "X" dead
    cmdline: str
    name: str = ""  # /proc's command name (``comm``: "java", "python3.11", ...)
    cpu_s: float = 0.0  # its own user + system CPU seconds (its reaped children not counted)


_TICKS = os.sysconf("SC_CLK_TCK")


def processes() -> dict[int, Process]:
    """pid -> what ``/proc`` says of every process we can read (Linux only)."""
    table: dict[int, Process] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...
        table[int(entry)] = Process(
            int(fields[1]),
            int(fields[3]),
            fields[0],
            cmdline.replace(b"\0", b" ").decode(errors="replace"),
            stat[stat.index("(") + 1 : stat.rindex(")")],
            (int(fields[11]) + int(fields[12])) / _TICKS,
        )
    return table


def descendants(table: dict[int, Process], root: int) -> list[int]:
    """The pids of ``table`` below ``root`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for pid, process in table.items():
        children.setdefault(process.parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def session_processes(session: int) -> dict[int, str]:
    """Live (not zombie) processes of ``session``: pid -> command line."""
    return {
        pid: p.cmdline
        for pid, p in processes().items()
        if p.session == session and p.state not in ("Z", "X")
    }


def kill_session(proc: subprocess.Popen[Any], grace_s: float = 0.0) -> None:
    """End the session that ``proc`` leads (``start_new_session``): wait up to ``grace_s`` for
    it to exit by itself, then SIGKILL every process left in it until none is, and reap
    ``proc``. Raises if processes survive 30 s of that."""
    session = proc.pid
    deadline = time.monotonic() + grace_s
    while session_processes(session) and time.monotonic() < deadline:
        time.sleep(0.05)
    deadline = time.monotonic() + 30
    while True:
        left = session_processes(session)
        if not left:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of the session survive a kill: {left}")
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    if proc.poll() is None:
        proc.wait(timeout=30)


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


_HEAP = re.compile(r"total (\d+)K, used (\d+)K")


def jvm_heap_mb(pid: int, after_gc: bool) -> float | None:
    """The JVM's heap in use (MB), after a full GC when ``after_gc``; None without ``jcmd``."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return None
    try:
        if after_gc:
            subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, timeout=60)
        done = subprocess.run(
            [jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _HEAP.search(done.stdout)
    return None if found is None else int(found.group(2)) / 1024.0


def job_memory(session: int, after_gc: bool, heap: bool = True) -> dict[str, float | None]:
    """RSS (MB) of the job's driver (the session leader), its JVM and its Python workers, and
    the JVM's heap in use (``heap``: ``jcmd`` is a JVM of its own, too heavy for each peek)."""
    procs = session_processes(session)
    jvms = [pid for pid, cmd in procs.items() if cmd.split(" ", 1)[0].endswith("java")]
    workers = [pid for pid, cmd in procs.items() if spark_daemon.is_daemon_process(cmd)]
    return {
        "driver_rss_mb": _rss_mb(session) if session in procs else None,
        "jvm_rss_mb": sum(_rss_mb(p) for p in jvms) if jvms else None,
        "jvm_heap_mb": jvm_heap_mb(jvms[0], after_gc) if jvms and heap else None,
        "workers_rss_mb": sum(_rss_mb(p) for p in workers),
        "workers": float(len(workers)),
    }


# --- sizes on disk ----------------------------------------------------------------------------


def tree_size(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path`` (0, 0 when it does not exist)."""
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue  # removed while walking (vacuum, Spark's cleanup)
            files += 1
    return files, size


def live_files(table: Path) -> int | None:
    """Files in the table's current version (None: not a table yet, or unreadable now)."""
    from deltalake import DeltaTable

    try:
        return len(DeltaTable(str(table)).file_uris())
    except Exception:
        return None


def disk(paths: Warehouse) -> dict[str, Any]:
    """Sizes on disk of the checkpoint, each Delta table, ``archive/``, the inbox backlog and
    the whole warehouse."""
    mb = 2**20
    checkpoint_files, checkpoint_bytes = tree_size(paths.checkpoint)
    _, state_bytes = tree_size(paths.checkpoint / "state")
    tables: dict[str, dict[str, Any]] = {}
    for name in TABLES:
        path = paths.table(name)
        files, size = tree_size(path)
        log_files, log_bytes = tree_size(path / "_delta_log")
        tables[name] = {
            "live_files": live_files(path),
            "data_files": files - log_files,
            "data_mb": round((size - log_bytes) / mb, 3),
            "log_files": log_files,
            "log_mb": round(log_bytes / mb, 3),
        }
    archive_files, archive_bytes = tree_size(paths.archive)
    inbox_files, _ = tree_size(paths.inbox)
    _, all_bytes = tree_size(paths.root)
    return {
        "checkpoint_files": checkpoint_files,
        "checkpoint_mb": checkpoint_bytes / mb,
        "state_mb": state_bytes / mb,
        "live_files": sum(t["live_files"] or 0 for t in tables.values()),
        "log_files": sum(t["log_files"] for t in tables.values()),
        "log_mb": sum(t["log_mb"] for t in tables.values()),
        "delta_mb": sum(t["data_mb"] for t in tables.values()),
        "archive_files": archive_files,
        "archive_mb": archive_bytes / mb,
        "inbox_files": inbox_files,
        "warehouse_mb": all_bytes / mb,
        "tables": tables,
    }


# --- the job as a subprocess --------------------------------------------------------------------


class JobProcess:
    """The job (``coordinator run``) in its own session; its pid is the session id."""

    def __init__(self, root: Path, options: SoakOptions) -> None:
        self.root = root
        self.options = options
        self.runs = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = root / "job.log"
        self._log_offset = 0
        self._partial = b""
        self.ready = False
        #: Every restart: kind, minute asked, seconds until the new run was ready.
        self.restarts: list[dict[str, Any]] = []
        #: A restart under way: kind, asked at, minute, requests answered before it.
        self._stopping: tuple[str, float, float, int] | None = None
        #: (monotonic time seen, duration ms) of batches with input, since last taken.
        self.batches: list[tuple[float, float]] = []
        self.batch_ids: set[int] = set()
        self.unplanned_exits: list[int | None] = []
        conf = root / "soak-job.properties"
        values = dict(COORDINATOR_SETTINGS)
        values["group.min.session.timeout.ms"] = str(min(6000, options.session_ms))
        conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()), encoding="utf-8")
        self.command = [
            sys.executable,
            "-m",
            "coordinator.bench.soak",
            "run",
            "--warehouse",
            str(root / "warehouse"),
            "--conf",
            str(conf),
        ]
        if options.trigger_interval_ms is not None:
            self.command += ["--trigger-interval", str(options.trigger_interval_ms)]
        if options.shards is not None:
            self.command += ["--shards", str(options.shards)]
        for setting in options.job_settings:
            self.command += ["--set", setting]

    @property
    def paths(self) -> Warehouse:
        return Warehouse.at(self.root / "warehouse")

    def start(self) -> None:
        assert self.proc is None
        self.runs += 1
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        if self.options.trace_memory:
            env[TRACE_ENV] = str(self.root / "memory-trace.jsonl")
            env[TRACE_EVERY_ENV] = str(self.options.trace_every_s)
        with self.log_path.open("ab") as out:
            out.write(f"--- soak: run {self.runs} starts ---\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.ready = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def session(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def restart(self, kind: str, minute: float, answered: int = 0) -> None:
        """Begin a restart: SIGINT (a clean stop) or kill -9; :meth:`poll` starts the next run
        once this one is gone."""
        assert self.proc is not None and self._stopping is None
        self._stopping = (kind, time.monotonic(), minute, answered)
        if kind == KILL:
            os.kill(self.proc.pid, signal.SIGKILL)
            self._sweep(0.0)
        else:
            os.kill(self.proc.pid, signal.SIGINT)

    def poll(self) -> None:
        """Follow the log (readiness, batch durations), and carry a restart on."""
        self._follow_log()
        if self._stopping is not None:
            kind, asked, minute, answered = self._stopping
            if self.proc is not None:
                if self.proc.poll() is None and time.monotonic() - asked < 90:
                    return
                self._sweep(2.0)
            if self.proc is None:
                self.start()
                self.restarts.append(
                    {
                        "kind": kind,
                        "minute": round(minute, 2),
                        "asked": asked,
                        "answered_before": answered,
                        "ready_s": None,
                    }
                )
                self._stopping = None
            return
        if self.proc is not None and self.proc.poll() is not None:
            self.unplanned_exits.append(self.proc.returncode)
            raise RuntimeError(
                f"the job exited by itself ({self.proc.returncode}); see {self.log_path}"
            )

    def _follow_log(self) -> None:
        try:
            with self.log_path.open("rb") as log_file:
                log_file.seek(self._log_offset)
                chunk = log_file.read()
        except OSError:
            return
        self._log_offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        now = time.monotonic()
        for raw in lines:
            line = raw.decode(errors="replace")
            if READY_LINE in line:
                self.ready = True
                if self.restarts and self.restarts[-1]["ready_s"] is None:
                    self.restarts[-1]["ready_s"] = round(now - self.restarts[-1]["asked"], 1)
                continue
            found = BATCH_LINE.search(line)
            if found is not None and int(found.group(2)) > 0:
                self.batch_ids.add(int(found.group(1)))
                self.batches.append((now, float(found.group(3))))

    def take_batches(self) -> list[float]:
        durations = [d for _, d in self.batches]
        self.batches = []
        return durations

    def stop(self) -> None:
        """A clean stop, then nothing left of the session."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=90)
        self._sweep(2.0)

    def _sweep(self, grace_s: float) -> None:
        """SIGKILL whatever of the session is left (after ``grace_s``), and reap the driver."""
        assert self.proc is not None
        kill_session(self.proc, grace_s)
        self.proc = None
        self.ready = False


# --- the load ---------------------------------------------------------------------------------


class CountingClient(StreamClient):
    """A :class:`StreamClient` that writes at most ``per_file`` requests in one inbox file and
    counts the files it wrote."""

    def __init__(self, warehouse: str | Path, per_file: int) -> None:
        super().__init__(warehouse)
        self.per_file = per_file
        self.files = 0

    def submit(self, requests: Any) -> list[Any]:
        queued = list(requests)
        ids: list[Any] = []
        for start in range(0, len(queued), self.per_file):
            ids.extend(super().submit(queued[start : start + self.per_file]))
            self.files += 1
        return ids


class TimedLink(MemberLink):
    """A member's link that times each request from ``send`` to its callback."""

    def __init__(self, network: StreamTransport, soak: Soak) -> None:
        super().__init__(network)
        self.soak = soak

    def send(self, request: dict[str, Any], callback: Callback, node_id: int | None = None) -> None:
        sent = time.monotonic()

        def timed(answer: dict[str, Any]) -> None:
            self.soak.answered(time.monotonic() - sent, answer)
            callback(answer)

        super().send(request, timed, node_id)


@dataclass
class _Live:
    member: GroupMember
    link: TimedLink
    group: str
    next_commit: float = 0.0
    committing: bool = False


@dataclass
class _Interval:
    """What happened since the last sample."""

    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    timeouts: int = 0


class Soak:
    """The members, their transport, and what their requests met."""

    def __init__(self, options: SoakOptions, paths: Warehouse) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.clock = SystemClock()
        self.client = CountingClient(paths.root, options.requests_per_file)
        self.transport = StreamTransport(self.client, self.clock)
        self.live: list[_Live] = []
        self.names: Counter[str] = Counter()
        self.offsets: Counter[tuple[str, int]] = Counter()
        self.crashes = 0
        self.answered_total = 0
        self.interval = _Interval()
        self.next_poll = 0.0
        self.groups = [f"soak-{i:03d}" for i in range(options.groups)]
        for group in self.groups:
            for _ in range(options.members):
                self.add(group)

    def add(self, group: str) -> None:
        self.names[group] += 1
        link = TimedLink(self.transport, self)
        member = GroupMember(
            group,
            [TOPIC],
            link,
            self.clock,
            metadata={TOPIC: self.options.partitions},
            client_id=f"{group}-{self.names[group]}",
            assignors=["range"],
            config=MemberConfig(
                session_timeout_ms=self.options.session_ms,
                heartbeat_interval_ms=self.options.heartbeat_ms,
                rebalance_timeout_ms=2 * self.options.session_ms,
            ),
            rng=self.rng,
        )
        self.live.append(_Live(member, link, group, next_commit=time.monotonic()))

    def answered(self, seconds: float, answer: dict[str, Any]) -> None:
        if answer.get("error_code") == Error.REQUEST_TIMED_OUT.value:
            self.interval.timeouts += 1
            return
        self.answered_total += 1
        self.interval.latencies.append(1000.0 * seconds)
        self.interval.errors[answer.get("error") or "NONE"] += 1

    def crash(self) -> None:
        """A random member dies (kill -9: its link is cut); a new one joins its group."""
        victim = self.rng.choice(self.live)
        victim.link.alive = False
        self.live.remove(victim)
        self.crashes += 1
        self.add(victim.group)

    def step(self) -> None:
        self.transport.deliver()
        now = time.monotonic()
        polling = now >= self.next_poll
        if polling:
            self.next_poll = now + 0.2
        for live in self.live:
            member = live.member
            member.tick()
            if polling:
                member.poll()
            stable = member.state is MemberState.STABLE and not member.rejoin_needed
            due = not live.committing and now >= live.next_commit
            if stable and due and member.coordinator is not None and member.assignment:
                self.commit(live)
        self.transport.flush()

    def commit(self, live: _Live) -> None:
        offsets = {}
        for tp in live.member.assignment:
            self.offsets[(live.group, tp.partition)] += 1
            offsets[tp] = self.offsets[(live.group, tp.partition)]
        live.committing = True
        # The next one is due an interval after this one was sent (Kafka's auto-commit timer).
        live.next_commit = time.monotonic() + self.options.commit_every_s

        def done(committed: Any, error: Exception | None) -> None:
            live.committing = False

        live.member.commit(offsets, done)

    def take_interval(self) -> _Interval:
        interval, self.interval = self.interval, _Interval()
        return interval


# --- the run ----------------------------------------------------------------------------------


class Peaks:
    """Reads the sizes on disk and the job's memory (RSS) every ``every_s`` seconds in a
    thread of its own (off the load's loop), and keeps each figure of :data:`PEAKED` at its
    highest since the last :meth:`take`."""

    def __init__(self, job: JobProcess, every_s: float) -> None:
        self._job = job
        self._every_s = every_s
        self._lock = threading.Lock()
        self._peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-peaks", daemon=True)

    def start(self) -> None:
        if self._every_s > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            with contextlib.suppress(Exception):  # a reading lost to a restart is no peak
                self.read()

    def read(self) -> None:
        """Take one reading now."""
        figures: dict[str, Any] = dict(disk(self._job.paths))
        session = self._job.session
        if session is not None and self._job.ready:
            figures.update(job_memory(session, after_gc=False, heap=False))
        self.offer(figures)

    def offer(self, figures: dict[str, Any]) -> None:
        with self._lock:
            for name in PEAKED:
                value = figures.get(name)
                if value is not None and value > self._peaks.get(name, float("-inf")):
                    self._peaks[name] = float(value)

    def take(self) -> dict[str, float]:
        with self._lock:
            peaks, self._peaks = self._peaks, {}
        return peaks


def run_soak(
    options: SoakOptions,
    say: Callable[[str], None] | None = None,
    on_sample: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run the soak; returns the samples, the restarts and the verdict."""
    tell = say or (lambda _: None)
    keep = options.warehouse is not None
    if options.warehouse is not None:
        root = Path(options.warehouse).absolute() / time.strftime("soak-%Y%m%d-%H%M%S")
        root.mkdir(parents=True)
    else:
        root = Path(tempfile.mkdtemp(prefix="coordinator-soak-"))
    job = JobProcess(root, options)
    samples: list[dict[str, Any]] = []
    soak: Soak | None = None
    try:
        job.start()
        tell(f"starting the job on {job.paths.root} (log: {job.log_path})")
        deadline = time.monotonic() + 300
        while not job.ready:
            job.poll()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the job did not start in 300 s; see {job.log_path}")
            time.sleep(0.2)
        tell(f"job running; {options.minutes:g} minutes of load")
        soak = Soak(options, job.paths)
        samples = _drive(soak, job, options, on_sample, tell)
    finally:
        job.stop()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    restarts = [{k: v for k, v in r.items() if k != "asked"} for r in job.restarts]
    for restart in restarts:
        restart["answered_after"] = (soak.answered_total if soak else 0) - restart.pop(
            "answered_before"
        )
    result = {
        "options": asdict(options),
        "warehouse": str(root) if keep else None,
        "samples": samples,
        "restarts": restarts,
        "runs": job.runs,
        "requests": soak.transport.sent if soak else 0,
        "request_files": soak.client.files if soak else 0,
        "answered": soak.answered_total if soak else 0,
        "batches": len(job.batch_ids),
        "trend": trend(samples, options.settle_minutes),
    }
    if keep:
        (root / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _drive(
    soak: Soak,
    job: JobProcess,
    options: SoakOptions,
    on_sample: Callable[[dict[str, Any]], None] | None,
    tell: Callable[[str], None],
) -> list[dict[str, Any]]:
    peaks = Peaks(job, options.peek_every_s)
    peaks.start()
    try:
        return _load(soak, job, options, on_sample, tell, peaks)
    finally:
        peaks.stop()


def _load(
    soak: Soak,
    job: JobProcess,
    options: SoakOptions,
    on_sample: Callable[[dict[str, Any]], None] | None,
    tell: Callable[[str], None],
    peaks: Peaks,
) -> list[dict[str, Any]]:
    """The load's loop: ticks, crashes, restarts and a sample every ``sample_every_s``."""
    started = time.monotonic()
    duration = 60.0 * options.minutes
    end = started + duration
    tick = 1.0 / options.loops_per_s
    next_sample = started + options.sample_every_s
    next_log = started + 1.0
    next_crash = started + options.crash_every_s if options.crash_every_s > 0 else float("inf")
    pending = sorted((started + share * duration, kind) for share, kind in options.restarts)
    state = {"sent": 0, "files": 0, "run": job.runs, "restarted": False}
    samples: list[dict[str, Any]] = []
    next_tick = started
    while True:
        now = time.monotonic()
        soak.step()
        if now >= next_crash:
            soak.crash()
            next_crash += options.crash_every_s
        if pending and now >= pending[0][0] and job.ready:
            _, kind = pending.pop(0)
            minute = (now - started) / 60.0
            tell(f"minute {minute:.1f}: restarting the job ({kind})")
            job.restart(kind, minute, soak.answered_total)
            state["restarted"] = True
        if now >= next_log:
            job.poll()
            next_log = now + 1.0
        over = now >= end and ((not pending and _back(soak, job)) or now >= end + RECOVERY_GRACE_S)
        if now >= next_sample or over:
            job.poll()
            sample = _sample(soak, job, options, (now - started) / 60.0, state, peaks.take())
            samples.append(sample)
            if on_sample is not None:
                on_sample(sample)
            next_sample += options.sample_every_s
            if over:
                for _, kind in pending:
                    tell(f"a planned restart ({kind}) was not carried out: the job was not ready")
                return samples
        next_tick += tick
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            next_tick = time.monotonic()  # behind: no catching up in a burst


def _back(soak: Soak, job: JobProcess) -> bool:
    """Whether the job is up and has answered requests since its last restart began."""
    if not job.restarts:
        return True
    return job.ready and soak.answered_total > job.restarts[-1]["answered_before"]


def _sample(
    soak: Soak,
    job: JobProcess,
    options: SoakOptions,
    minute: float,
    state: dict[str, Any],
    peaks: dict[str, float] | None = None,
) -> dict[str, Any]:
    interval = soak.take_interval()
    durations = job.take_batches()
    session = job.session
    memory: dict[str, float | None] = (
        job_memory(session, options.heap_after_gc)
        if session is not None and job.ready
        else dict.fromkeys(("driver_rss_mb", "jvm_rss_mb", "jvm_heap_mb", "workers_rss_mb"))
    )
    sizes = disk(job.paths)
    sent, files = soak.transport.sent, soak.client.files
    restarted = bool(state["restarted"]) or job.runs != state["run"]
    sample: dict[str, Any] = {
        "minute": round(minute, 2),
        "run": job.runs,
        "restart_in_interval": restarted,
        **{k: _r(v) for k, v in memory.items()},
        "checkpoint_mb": _r(sizes["checkpoint_mb"], 2),
        "checkpoint_files": sizes["checkpoint_files"],
        "state_mb": _r(sizes["state_mb"], 2),
        "live_files": sizes["live_files"],
        "log_files": sizes["log_files"],
        "log_mb": _r(sizes["log_mb"], 2),
        "delta_mb": _r(sizes["delta_mb"], 2),
        "archive_files": sizes["archive_files"],
        "archive_mb": _r(sizes["archive_mb"], 2),
        "inbox_files": sizes["inbox_files"],
        "warehouse_mb": _r(sizes["warehouse_mb"], 2),
        "tables": sizes["tables"],
        "batches": len(durations),
        "batch_p50_ms": _r(percentile(durations, 50)),
        "batch_p99_ms": _r(percentile(durations, 99)),
        "requests": sent - state["sent"],
        "files": files - state["files"],
        "answered": len(interval.latencies),
        "latency_p50_ms": _r(percentile(interval.latencies, 50)),
        "latency_p99_ms": _r(percentile(interval.latencies, 99)),
        "timeouts": interval.timeouts,
        "errors": {k: v for k, v in interval.errors.items() if k != "NONE"},
        "crashes": soak.crashes,
        "members": len(soak.live),
        # When this run of the job was asked for (0: the first run).
        "run_started_minute": job.restarts[-1]["minute"] if job.restarts else 0.0,
    }
    reading = dict(peaks or {})
    for name in PEAKED:  # the sample's own reading counts towards the interval's peak
        if sample.get(name) is not None:
            reading[name] = max(reading.get(name, float("-inf")), float(sample[name]))
    sample["peaks"] = {name: _r(value, 2) for name, value in reading.items()}
    state.update(sent=sent, files=files, run=job.runs, restarted=False)
    return sample


def _r(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x."""
    return _pooled_slope([points])


def _pooled_slope(runs: Sequence[Sequence[tuple[float, float]]]) -> float | None:
    """One slope for several series with their own levels (least squares with an intercept per
    series): how a figure moves within each run of the job, whatever a restart reset."""
    num = den = 0.0
    for points in runs:
        if len(points) < 2:
            continue
        mx = sum(x for x, _ in points) / len(points)
        my = sum(y for _, y in points) / len(points)
        num += sum((x - mx) * (y - my) for x, y in points)
        den += sum((x - mx) ** 2 for x, _ in points)
    return None if den == 0 else num / den


def judged_value(sample: dict[str, Any], name: str) -> float | None:
    """What the verdict judges of a sample: the interval's peak for :data:`PEAKED` figures
    (when the sample has peaks), else the reading at the sample's time."""
    value = sample.get("peaks", {}).get(name) if name in PEAKED else None
    if value is None:
        value = sample.get(name)
    return None if value is None else float(value)


def trend(samples: list[dict[str, Any]], settle_minutes: float = 0.0) -> dict[str, Any]:
    """Slope per minute of each judged figure over the samples from ``settle_minutes`` on (all
    but the first when none is that late), and whether it stays within :data:`LIMITS`.

    Sizes and RSS are judged by their peak in each interval (:func:`judged_value`). Memory is
    judged within each run of the job from ``settle_minutes`` after the run began (a restart
    resets it and starts a warm-up of its own), by slope in the runs long enough for one and by
    the highest each run reached (:data:`PER_RUN`); the checkpoint within each run
    (:data:`RESTART_TRANSIENT`); the JVM's RSS is reported only (:data:`REPORTED_ONLY`)."""
    judged = [s for s in samples if s["minute"] >= settle_minutes]
    if settle_minutes <= 0 and len(judged) >= 3:
        judged = judged[1:]  # the first interval holds the JVM's warm-up
    run_starts = _run_starts(samples)
    figures: dict[str, Any] = {}
    flagged = []
    for name, (share, floor, unit) in LIMITS.items():
        usable = [
            (s, value)
            for s in judged
            if (value := judged_value(s, name)) is not None
            and not (name in OUTAGE_SENSITIVE and s.get("restart_in_interval"))
        ]
        highs: list[float] = []
        if name in PER_RUN or name in RESTART_TRANSIENT:
            by_run: dict[int, list[tuple[float, float]]] = {}
            for s, value in usable:
                run = s.get("run", 1)
                if s.get("restart_in_interval"):
                    continue  # a new run's first sample: its start
                if name in PER_RUN and s["minute"] < run_starts.get(run, 0.0) + settle_minutes:
                    continue  # this run's own warm-up
                by_run.setdefault(run, []).append((s["minute"], value))
            highs = [max(y for _, y in run) for run in by_run.values()]
            runs = [
                run for run in by_run.values() if len(run) >= MIN_RUN_POINTS or name not in PER_RUN
            ]
        else:
            runs = [[(s["minute"], value) for s, value in usable]]
        points = [p for run in runs for p in run]
        slope = _pooled_slope(runs)
        if slope is None and len(highs) < 2:
            figures[name] = {"slope_per_min": None, "unit": unit}
            continue
        level = sum(y for _, y in points) / len(points) if points else sum(highs) / len(highs)
        limit = max(share * level, floor)
        creeping = slope is not None and 60.0 * slope > limit
        figure: dict[str, Any] = {
            "slope_per_min": None if slope is None else round(slope, 3),
            "level": round(level, 1),
            "unit": unit,
        }
        if name in PER_RUN and highs:
            # The highest each run reached after its warm-up, run by run: no climb.
            figure["run_highs"] = [round(h, 1) for h in highs]
            creeping = creeping or max(highs) - highs[0] > limit
        figure["creeping"] = creeping
        figures[name] = figure
        if creeping:
            flagged.append(name)
    verdict = "CREEPING" if flagged else "steady"
    if len(judged) < MIN_JUDGED:
        verdict = "inconclusive"
    return {
        "settle_minutes": settle_minutes,
        "samples_judged": len(judged),
        "figures": figures,
        "flagged": flagged,
        "verdict": verdict,
    }


def _run_starts(samples: list[dict[str, Any]]) -> dict[int, float]:
    """The minute each run of the job began: as the samples say, else the minute of the last
    sample of the run before."""
    starts: dict[int, float] = {}
    previous: dict[str, Any] | None = None
    for s in samples:
        run = s.get("run", 1)
        if run not in starts:
            known = s.get("run_started_minute")
            if known is not None:
                starts[run] = float(known)
            else:
                starts[run] = 0.0 if previous is None else float(previous["minute"])
        previous = s
    return starts


# --- the job's side: ``python -m coordinator.bench.soak run ...`` -------------------------------


def _held_by_the_job() -> dict[str, int]:
    """What the job's long-lived objects hold: figures the sink keeps for the listener."""
    import gc

    from coordinator.stream.job import BatchSink

    held: dict[str, int] = {}
    for obj in gc.get_objects():
        if isinstance(obj, BatchSink):
            held["BatchSink.figures"] = held.get("BatchSink.figures", 0) + len(obj.figures)
    return held


def _rss_after_trim() -> float:
    """RSS (MB) after glibc's ``malloc_trim(0)`` hands the free memory of its arenas back to
    the system: memory still in use, apart from what the allocator merely kept (NaN without
    glibc)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):
        return float("nan")
    return _rss_mb(os.getpid())


def trace_memory(
    path: Path, every_s: float, stop: threading.Event | None = None, keep_snapshots: bool = True
) -> None:
    """Every ``every_s``: one JSON line of the driver's memory (see the module's doc), growth
    measured from the second trace; each snapshot is also dumped next to ``path`` (for
    ``tracemalloc.Snapshot.load`` and ``compare_to`` between any two)."""
    import gc
    import tracemalloc

    import pyarrow as pa

    tracemalloc.start(6)
    first: Any = None
    first_types: Counter[str] | None = None
    number = 0
    stop = stop if stop is not None else threading.Event()
    while not stop.wait(every_s):
        number += 1
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        types = Counter(type(o).__name__ for o in gc.get_objects())
        current, _ = tracemalloc.get_traced_memory()
        rss = _rss_mb(os.getpid())
        line: dict[str, Any] = {
            "at": round(time.time(), 1),
            "trace": number,
            "rss_mb": round(rss, 1),
            "rss_after_trim_mb": round(_rss_after_trim(), 1),
            "traced_mb": round(current / 2**20, 2),
            "arrow_mb": round(pa.total_allocated_bytes() / 2**20, 2),
            "gc_objects": sum(types.values()),
            "held": _held_by_the_job(),
            "types": dict(types.most_common(12)),
        }
        if keep_snapshots:
            snapshot.dump(str(path.with_name(f"{path.stem}-{number:03d}.snapshot")))
        if first is None:
            if number >= 2:  # the first trace may come before the job's imports are done
                first, first_types = snapshot, types
        else:
            assert first_types is not None
            grown = types.copy()
            grown.subtract(first_types)
            line["types_grown"] = dict(grown.most_common(8))
            line["sites_grown"] = [
                {
                    "kb": round(stat.size_diff / 1024, 1),
                    "count": stat.count_diff,
                    "where": [f"{f.filename}:{f.lineno}" for f in stat.traceback][-4:],
                }
                for stat in snapshot.compare_to(first, "traceback")[:8]
            ]
        with path.open("a") as out:
            out.write(json.dumps(line) + "\n")


def job_main(argv: Sequence[str]) -> int:
    """``coordinator <argv>`` (``run ...``), with the memory tracer when asked by environment."""
    # Ctrl-C stops the job cleanly even when this process was started with SIGINT ignored
    # (a soak started in the background: the disposition is inherited through exec).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    trace = os.environ.get(TRACE_ENV)
    if trace:
        every = float(os.environ.get(TRACE_EVERY_ENV, "60"))
        threading.Thread(
            target=trace_memory, args=(Path(trace), every), name="soak-trace", daemon=True
        ).start()
    from coordinator.cli import main

    return main(list(argv))


# --- the report -------------------------------------------------------------------------------

_COLUMNS = (
    ("min", "minute", 5, "{:.1f}"),
    ("run", "run", 3, "{}"),
    ("driver", "driver_rss_mb", 7, "{:.0f}"),
    ("jvm", "jvm_rss_mb", 6, "{:.0f}"),
    ("heap", "jvm_heap_mb", 5, "{:.0f}"),
    ("workers", "workers_rss_mb", 8, "{:.0f}"),
    ("ckptMB", "checkpoint_mb", 7, "{:.1f}"),
    ("live#", "live_files", 6, "{}"),
    ("log#", "log_files", 6, "{}"),
    ("logMB", "log_mb", 6, "{:.1f}"),
    ("dataMB", "delta_mb", 7, "{:.1f}"),
    ("archMB", "archive_mb", 7, "{:.1f}"),
    ("batches", "batches", 8, "{}"),
    ("b.p50", "batch_p50_ms", 6, "{:.0f}"),
    ("b.p99", "batch_p99_ms", 6, "{:.0f}"),
    ("requests", "requests", 9, "{}"),
    ("files", "files", 7, "{}"),
    ("l.p50", "latency_p50_ms", 6, "{:.0f}"),
    ("l.p99", "latency_p99_ms", 6, "{:.0f}"),
    ("t/o", "timeouts", 5, "{}"),
    ("crashes", "crashes", 8, "{}"),
)


def header() -> str:
    return " ".join(title.rjust(width) for title, _, width, _ in _COLUMNS)


def row(sample: dict[str, Any]) -> str:
    cells = []
    for _, key, width, fmt in _COLUMNS:
        value = judged_value(sample, key) if key in PEAKED else sample.get(key)
        cells.append(("-" if value is None else fmt.format(value)).rjust(width))
    mark = "  (restart)" if sample.get("restart_in_interval") else ""
    return " ".join(cells) + mark


def table_row(sample: dict[str, Any]) -> str:
    """Per Delta table: live files, data files/MB on disk, ``_delta_log`` files/MB."""
    parts = []
    for name, t in sample.get("tables", {}).items():
        parts.append(
            f"{name} {t['live_files'] if t['live_files'] is not None else '-'} live, "
            f"{t['data_files']}/{t['data_mb']:.1f}MB data, {t['log_files']}/{t['log_mb']:.1f}MB log"
        )
    return "      " + "; ".join(parts)


def format_trend(result: dict[str, Any]) -> str:
    t = result["trend"]
    parts = []
    for name, f in t["figures"].items():
        short = name.removesuffix("_mb").removesuffix("_ms")
        mark = " (!)" if f.get("creeping") else ""
        said = [] if f["slope_per_min"] is None else [f"{f['slope_per_min']:+.2f} {f['unit']}/min"]
        if "run_highs" in f:
            said.append("highest per run " + "/".join(f"{h:g}" for h in f["run_highs"]))
        if said:
            parts.append(f"{short} {', '.join(said)}{mark}")
    flagged = ", ".join(t["flagged"]) or "none"
    verdict = {
        "steady": "steady: every size, memory, batch time and latency flat",
        "CREEPING": f"CREEPING: {flagged} grow beyond the limits",
        "inconclusive": f"inconclusive: fewer than {MIN_JUDGED} samples from minute "
        f"{t['settle_minutes']:g} on to judge by (over the limits on these: {flagged}); "
        "run longer",
    }[t["verdict"]]
    requests, files = BUSY_DAY
    busy = result["requests"] >= requests and result["request_files"] >= files
    restarts = ", ".join(
        f"{r['kind']} at minute {r['minute']:.1f} (ready after {r['ready_s']} s)"
        for r in result["restarts"]
    )
    return "\n".join(
        [
            f"load: {result['requests']:,} requests in {result['request_files']:,} files, "
            f"{result['answered']:,} answered, {result['batches']:,} batches with input "
            f"({'a busy day' if busy else 'less than a busy day'}: >= {requests:,} requests "
            f"and {files:,} files)",
            f"restarts: {restarts or 'none'}",
            f"trend over {t['samples_judged']} samples from minute {t['settle_minutes']:g}: "
            + "; ".join(parts)
            + f" -> {verdict}",
        ]
    )


def format_heading(options: dict[str, Any]) -> str:
    """What the run is, what the columns mean, and the column titles."""
    o = options
    restarts = ", ".join(f"{kind} at {share:.0%}" for share, kind in o["restarts"]) or "none"
    return "\n".join(
        [
            f"soak: {o['groups']} groups x {o['members']} members ({o['partitions']} partitions "
            f"each), heartbeat {o['heartbeat_ms']} ms, session {o['session_ms']} ms, commit every "
            f"{o['commit_every_s']:g} s, a member crash every {o['crash_every_s']:g} s, "
            f"{o['loops_per_s']:g} loops/s, files of at most {o['requests_per_file']} requests, {o['minutes']:g} minutes, restarts: {restarts}; "
            f"judged from minute {o['settle_minutes']:g}",
            "  memory in MB: RSS of the job's driver, JVM and Python workers; heap = JVM heap "
            "in use (after a full GC); sizes and RSS are the interval's peak",
            "  ckptMB = Spark checkpoint; live# = files in the tables' current versions; log# / "
            "logMB = _delta_log; dataMB = data files on disk; archMB = archive/",
            "  batches = micro-batches with input in the interval, b = their duration; requests "
            "and files sent in the interval; l = round trip; t/o = timed out",
            header(),
        ]
    )


def format_report(result: dict[str, Any]) -> str:
    lines = [format_heading(result["options"])]
    for s in result["samples"]:
        lines += [row(s), table_row(s)]
    lines.append(format_trend(result))
    if result["warehouse"]:
        lines.append(f"warehouse kept at {result['warehouse']}")
    return "\n".join(lines)


def stderr(message: str) -> None:
    print(f"bench soak: {message}", file=sys.stderr, flush=True)


def with_changes(options: SoakOptions, **changes: Any) -> SoakOptions:
    return replace(options, **{k: v for k, v in changes.items() if v is not None})


if __name__ == "__main__":
    sys.exit(job_main(sys.argv[1:]))
