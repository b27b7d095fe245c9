"""``coordinator bench soak``: the Spark job under a steady load for N minutes, with crashes.

Not part of CI. The point is a trend, not a figure: whether memory, state, files, batch time or
latency creep up over a long run, which a one-minute benchmark cannot show.

The job runs in this process on its own SparkSession (as ``coordinator bench stream`` runs it)
with a fresh warehouse. Live :class:`~coordinator.client.member.GroupMember`s over
:class:`~coordinator.stream.transport.StreamTransport` (G groups of M members, range assignor)
heartbeat and commit all along. Every ``crash_every_s`` one member, picked at random, dies as a
``kill -9`` does (its link is cut: no LeaveGroup, nothing more sent) and a new member joins its
group in its place: one rebalance when it joins, another when the dead one's session expires in
the job.

One row per sample (a minute by default), each over the interval since the previous one:

- memory: RSS of this process (the driver's Python, which also runs the members), of the JVM
  and of Spark's Python workers (the ``pyspark.daemon`` processes, summed), and the JVM heap in
  use;
- sizes on disk: the state store (``<checkpoint>/state``), the whole checkpoint, and the Delta
  tables (data files and log);
- micro-batches with input: duration p50/p99 (``query.recentProgress``, polled every second);
- requests: round trip p50/p99 from the member's ``send`` to its callback (so it includes up to
  one loop of this process, 50 ms, and one poll of the ``responses`` table), and how many were
  answered;
- crashes and rebalances so far (the sum of the groups' generations in ``group_state``, less
  one per group).

The last line judges the trend: least-squares slopes per minute of memory, state size, batch
duration and latency, over the samples after the first (the first minute holds the JVM's
warm-up), each held against a limit (:data:`LIMITS`). A short run gives few points: read its
verdict as a smoke test.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from coordinator.bench import stream as bench
from coordinator.bench.stream import StreamBenchOptions, percentile
from coordinator.client.member import GroupMember, MemberConfig, MemberState
from coordinator.client.simulation import MemberLink
from coordinator.client.transport import Callback, SystemClock
from coordinator.errors import Error
from coordinator.stream import job
from coordinator.stream.client import StreamClient
from coordinator.stream.delta_read import read_table
from coordinator.stream.schema import GROUP_STATE, TABLES
from coordinator.stream.settings import Settings
from coordinator.stream.transport import StreamTransport

#: A trend is flagged when its slope, projected over an hour, exceeds this share of the level
#: (the mean of the judged samples), and exceeds the absolute floor per hour (noise on small
#: values): (share, floor per hour, unit).
LIMITS: dict[str, tuple[float, float, str]] = {
    "driver_rss_mb": (0.25, 50.0, "MB"),
    "jvm_rss_mb": (0.25, 200.0, "MB"),
    "workers_rss_mb": (0.25, 50.0, "MB"),
    "state_mb": (0.5, 5.0, "MB"),
    "live_files": (0.5, 500.0, "files"),
    "batch_p50_ms": (0.5, 100.0, "ms"),
    "latency_p50_ms": (0.5, 100.0, "ms"),
    "latency_p99_ms": (0.5, 200.0, "ms"),
}

#: Fewer samples after the first than this give no verdict (the slopes are still shown).
MIN_JUDGED = 4

TOPIC = "soak"


@dataclass(frozen=True)
class SoakOptions:
    minutes: float = 10.0
    groups: int = 5
    members: int = 3
    partitions: int = 6
    heartbeat_ms: int = 1_000
    session_ms: int = 10_000
    commit_every_s: float = 2.0
    #: One member crashes (and is replaced) this often; 0: never.
    crash_every_s: float = 30.0
    sample_every_s: float = 60.0
    #: None: the job's settings (``conf/job.properties``).
    trigger_interval_ms: int | None = None
    shards: int | None = None
    #: None: a temporary directory, removed afterwards; else a new ``soak-<time>`` under it.
    warehouse: str | None = None
    seed: int = 11

    def __post_init__(self) -> None:
        if self.minutes <= 0 or self.sample_every_s <= 0:
            raise ValueError("--minutes and --sample-every must be > 0")
        if self.groups < 1 or self.members < 1 or self.partitions < 1:
            raise ValueError("--groups, --members and partitions must be >= 1")
        if self.session_ms < 3 * self.heartbeat_ms:
            raise ValueError("the session must be at least three heartbeat intervals")


# --- measuring --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Process:
    parent: int
    session: int
    state: str  # /proc's one-letter state: "Z" zombie, "X" dead
    cmdline: str


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
        )
    return table


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def memory(spark: Any) -> dict[str, float | None]:
    """RSS (MB) of this process, of its JVM child and of the JVM's Python workers; JVM heap in
    use. Linux only (``/proc``); elsewhere the RSS figures are 0."""
    procs = {pid: (p.parent, p.cmdline) for pid, p in processes().items()}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)

    def descendants(root: int) -> list[int]:
        found, todo = [], list(children.get(root, []))
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    mine = descendants(os.getpid())
    jvms = [p for p in mine if procs[p][1].split(" ", 1)[0].endswith("java")]
    workers = [p for p in mine if "pyspark.daemon" in procs[p][1]]
    heap: float | None
    try:
        runtime = spark._jvm.java.lang.Runtime.getRuntime()
        heap = (runtime.totalMemory() - runtime.freeMemory()) / 2**20
    except Exception:  # the gateway is gone: no figure rather than no sample
        heap = None
    return {
        "driver_rss_mb": _rss_mb(os.getpid()),
        "jvm_rss_mb": sum(_rss_mb(p) for p in jvms),
        "jvm_heap_mb": heap,
        "workers_rss_mb": sum(_rss_mb(p) for p in workers),
        "workers": float(len(workers)),
    }


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


def disk(settings: Settings) -> dict[str, Any]:
    """Sizes of the state store, the checkpoint and each Delta table (files on disk, bytes,
    live files in the current version)."""
    paths = settings.job.paths
    state_files, state_bytes = tree_size(paths.checkpoint / "state")
    checkpoint_files, checkpoint_bytes = tree_size(paths.checkpoint)
    tables: dict[str, dict[str, int]] = {}
    for name in TABLES:
        path = paths.table(name)
        files, size = tree_size(path)
        log_files, log_bytes = tree_size(path / "_delta_log")
        try:
            live = len(DeltaTable(str(path)).file_uris())
        except Exception:  # not created yet
            live = 0
        tables[name] = {
            "files": files - log_files,
            "bytes": size - log_bytes,
            "log_files": log_files,
            "log_bytes": log_bytes,
            "live_files": live,
        }
    return {
        "state_files": state_files,
        "state_mb": state_bytes / 2**20,
        "checkpoint_files": checkpoint_files,
        "checkpoint_mb": checkpoint_bytes / 2**20,
        "delta_files": sum(t["files"] + t["log_files"] for t in tables.values()),
        "delta_mb": sum(t["bytes"] + t["log_bytes"] for t in tables.values()) / 2**20,
        "live_files": sum(t["live_files"] for t in tables.values()),
        "tables": tables,
    }


def rebalances(settings: Settings, groups: int) -> int | None:
    """Generations completed beyond each group's first, from ``group_state``."""
    try:
        table = DeltaTable(str(settings.job.paths.table(GROUP_STATE)))
        generations = pa.table(read_table(table, columns=["generation_id"]))
    except Exception:
        return None
    return max(0, sum(g or 0 for g in generations.column(0).to_pylist()) - groups)


# --- the load ---------------------------------------------------------------------------------


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
    def __init__(self, options: SoakOptions, settings: Settings) -> None:
        self.options = options
        self.settings = settings
        self.rng = random.Random(options.seed)
        self.clock = SystemClock()
        self.client = StreamClient(settings.job.paths.root)
        self.transport = StreamTransport(self.client, self.clock)
        self.live: list[_Live] = []
        self.names: Counter[str] = Counter()
        self.offsets: Counter[tuple[str, int]] = Counter()
        self.crashes = 0
        self.interval = _Interval()
        self.next_poll = 0.0
        self.batches: dict[int, dict[str, Any]] = {}
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

        def done(committed: Any, error: Exception | None) -> None:
            live.committing = False
            live.next_commit = time.monotonic() + self.options.commit_every_s

        live.member.commit(offsets, done)

    def collect_progress(self, query: Any) -> None:
        for progress in query.recentProgress:
            figures = json.loads(progress.json)
            self.batches.setdefault(figures["batchId"], figures)

    def take_interval(self) -> _Interval:
        interval, self.interval = self.interval, _Interval()
        return interval


# --- the run ----------------------------------------------------------------------------------


def soak_settings(root: Path, options: SoakOptions) -> Settings:
    """The stream benchmark's settings for a group-keyed job (no initial rebalance delay)."""
    return bench.mode_settings(
        bench.GROUP,
        root,
        StreamBenchOptions(
            trigger_interval_ms=options.trigger_interval_ms,
            shards=options.shards,
            session_timeout_ms=options.session_ms,
            probe_session_timeout_ms=options.session_ms,
        ),
    )


def run_soak(
    options: SoakOptions,
    say: Callable[[str], None] | None = None,
    on_sample: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run the soak; returns the samples and the verdict (see :func:`format_report`)."""
    tell = say or (lambda _: None)
    keep = options.warehouse is not None
    if options.warehouse is not None:
        root = Path(options.warehouse).absolute() / time.strftime("soak-%Y%m%d-%H%M%S")
        root.mkdir(parents=True)
    else:
        root = Path(tempfile.mkdtemp(prefix="coordinator-soak-"))
    settings = soak_settings(root, options)
    tell("starting Spark")
    spark = job.spark_session(settings)
    samples: list[dict[str, Any]] = []
    try:
        spark.conf.set("spark.sql.shuffle.partitions", str(settings.job.shards))
        running = job.start(spark, settings)
        tell(f"job running on {settings.job.paths.root}; {options.minutes:g} minutes of load")
        soak = Soak(options, settings)
        try:
            samples = _drive(soak, running, spark, settings, options, on_sample)
        finally:
            running.stop()
    finally:
        spark.stop()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    result = {
        "options": asdict(options),
        "warehouse": str(root) if keep else None,
        "samples": samples,
        "trend": trend(samples),
    }
    return result


def _drive(
    soak: Soak,
    running: job.RunningJob,
    spark: Any,
    settings: Settings,
    options: SoakOptions,
    on_sample: Callable[[dict[str, Any]], None] | None,
) -> list[dict[str, Any]]:
    started = time.monotonic()
    end = started + 60.0 * options.minutes
    next_sample = started + options.sample_every_s
    next_progress = started + 1.0
    next_crash = started + options.crash_every_s if options.crash_every_s > 0 else float("inf")
    last_sample_wall = time.time()
    samples: list[dict[str, Any]] = []
    while True:
        now = time.monotonic()
        if not running.query.isActive:
            raise RuntimeError(f"the query stopped: {running.query.exception()}")
        soak.step()
        if now >= next_crash:
            soak.crash()
            next_crash += options.crash_every_s
        if now >= next_progress:
            soak.collect_progress(running.query)
            next_progress = now + 1.0
        if now >= next_sample or now >= end:
            soak.collect_progress(running.query)
            wall = time.time()
            sample = _sample(
                soak, spark, settings, options, (now - started) / 60.0, last_sample_wall, wall
            )
            last_sample_wall = wall
            samples.append(sample)
            if on_sample is not None:
                on_sample(sample)
            next_sample += options.sample_every_s
            if now >= end:
                return samples
        time.sleep(0.05)


def _sample(
    soak: Soak,
    spark: Any,
    settings: Settings,
    options: SoakOptions,
    minute: float,
    since: float,
    until: float,
) -> dict[str, Any]:
    interval = soak.take_interval()
    batches = [
        b
        for b in soak.batches.values()
        if since <= bench._epoch_s(b["timestamp"]) < until and b["numInputRows"] > 0
    ]
    idle = sum(
        1
        for b in soak.batches.values()
        if since <= bench._epoch_s(b["timestamp"]) < until and b["numInputRows"] == 0
    )
    # Keep only what later intervals can still need.
    soak.batches = {
        k: b for k, b in soak.batches.items() if bench._epoch_s(b["timestamp"]) >= until
    }
    durations = [float(b["batchDuration"]) for b in batches]
    sizes = disk(settings)
    sample: dict[str, Any] = {
        "minute": round(minute, 2),
        **{k: _r(v) for k, v in memory(spark).items()},
        "state_files": sizes["state_files"],
        "state_mb": _r(sizes["state_mb"], 2),
        "checkpoint_files": sizes["checkpoint_files"],
        "checkpoint_mb": _r(sizes["checkpoint_mb"], 2),
        "delta_files": sizes["delta_files"],
        "delta_mb": _r(sizes["delta_mb"], 2),
        "live_files": sizes["live_files"],
        "tables": sizes["tables"],
        "batches": len(batches),
        "idle_batches": idle,
        "batch_p50_ms": _r(percentile(durations, 50)),
        "batch_p99_ms": _r(percentile(durations, 99)),
        "answered": len(interval.latencies),
        "latency_p50_ms": _r(percentile(interval.latencies, 50)),
        "latency_p99_ms": _r(percentile(interval.latencies, 99)),
        "timeouts": interval.timeouts,
        "errors": {k: v for k, v in interval.errors.items() if k != "NONE"},
        "crashes": soak.crashes,
        "rebalances": rebalances(settings, options.groups),
        "members": len(soak.live),
    }
    return sample


def _r(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def trend(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Slope per minute of each judged figure over the samples after the first, and whether it
    stays within :data:`LIMITS`."""
    judged = samples[1:] if len(samples) >= 3 else samples
    figures: dict[str, Any] = {}
    flagged = []
    for name, (share, floor, unit) in LIMITS.items():
        points = [(s["minute"], float(s[name])) for s in judged if s.get(name) is not None]
        slope = bench._slope(points)
        if slope is None:
            figures[name] = {"slope_per_min": None, "unit": unit}
            continue
        level = sum(y for _, y in points) / len(points)
        per_hour = 60.0 * slope
        creeping = per_hour > max(share * level, floor)
        figures[name] = {
            "slope_per_min": round(slope, 2),
            "level": round(level, 1),
            "unit": unit,
            "creeping": creeping,
        }
        if creeping:
            flagged.append(name)
    verdict = "CREEPING" if flagged else "steady"
    if len(judged) < MIN_JUDGED:
        verdict = "inconclusive"
    return {
        "samples_judged": len(judged),
        "figures": figures,
        "flagged": flagged,
        "verdict": verdict,
    }


# --- the report -------------------------------------------------------------------------------

_COLUMNS = (
    ("min", "minute", 5, "{:.1f}"),
    ("driver", "driver_rss_mb", 7, "{:.0f}"),
    ("jvm", "jvm_rss_mb", 6, "{:.0f}"),
    ("heap", "jvm_heap_mb", 5, "{:.0f}"),
    ("workers", "workers_rss_mb", 8, "{:.0f}"),
    ("state", "state_mb", 7, "{:.2f}"),
    ("ckpt", "checkpoint_mb", 6, "{:.1f}"),
    ("ckpt#", "checkpoint_files", 6, "{}"),
    ("delta#", "delta_files", 7, "{}"),
    ("deltaMB", "delta_mb", 8, "{:.2f}"),
    ("live#", "live_files", 6, "{}"),
    ("batches", "batches", 8, "{}"),
    ("b.p50", "batch_p50_ms", 6, "{:.0f}"),
    ("b.p99", "batch_p99_ms", 6, "{:.0f}"),
    ("answered", "answered", 9, "{}"),
    ("l.p50", "latency_p50_ms", 6, "{:.0f}"),
    ("l.p99", "latency_p99_ms", 6, "{:.0f}"),
    ("t/o", "timeouts", 4, "{}"),
    ("crashes", "crashes", 8, "{}"),
    ("rebal", "rebalances", 6, "{}"),
)


def header() -> str:
    return " ".join(title.rjust(width) for title, _, width, _ in _COLUMNS)


def row(sample: dict[str, Any]) -> str:
    cells = []
    for _, key, width, fmt in _COLUMNS:
        value = sample.get(key)
        cells.append(("-" if value is None else fmt.format(value)).rjust(width))
    return " ".join(cells)


def format_trend(result: dict[str, Any]) -> str:
    t = result["trend"]
    parts = []
    for name, f in t["figures"].items():
        if f["slope_per_min"] is None:
            continue
        mark = " (!)" if f.get("creeping") else ""
        parts.append(
            f"{name.removesuffix('_mb').removesuffix('_ms')} {f['slope_per_min']:+.2f} "
            f"{f['unit']}/min{mark}"
        )
    flagged = ", ".join(t["flagged"]) or "none"
    verdict = {
        "steady": "steady: no sign of a leak or a creeping slowdown",
        "CREEPING": f"CREEPING: {flagged} grow beyond the limits",
        "inconclusive": f"inconclusive: fewer than {MIN_JUDGED} samples after the first to judge "
        f"by (over the limits on these: {flagged}); run longer",
    }[t["verdict"]]
    return (
        f"trend over {t['samples_judged']} samples (after the first): "
        + "; ".join(parts)
        + f" -> {verdict}"
    )


def format_heading(options: dict[str, Any]) -> str:
    """What the run is, what the columns mean, and the column titles."""
    o = options
    return "\n".join(
        [
            f"soak: {o['groups']} groups x {o['members']} members ({o['partitions']} partitions "
            f"each), heartbeat {o['heartbeat_ms']} ms, session {o['session_ms']} ms, commit every "
            f"{o['commit_every_s']:g} s, a member crash every {o['crash_every_s']:g} s, "
            f"{o['minutes']:g} minutes",
            "  memory in MB (RSS; heap = JVM heap in use), sizes in MB or files (ckpt# = files "
            "in the checkpoint,",
            "  delta# = files of the Delta tables, log included, live# = files in their current "
            "versions);",
            "  batches = micro-batches with input in the interval, b = their duration; l = "
            "request round",
            "  trip (member send -> callback), t/o = requests timed out",
            header(),
        ]
    )


def format_report(result: dict[str, Any]) -> str:
    lines = [format_heading(result["options"])]
    lines += [row(s) for s in result["samples"]]
    lines.append(format_trend(result))
    if result["warehouse"]:
        lines.append(f"warehouse kept at {result['warehouse']}")
    return "\n".join(lines)


def stderr(message: str) -> None:
    print(f"bench soak: {message}", file=sys.stderr, flush=True)
