"""``coordinator bench stream``: heartbeat round trips through the Spark job, against a floor.

For each mode (``group`` and ``shard``: the job keyed by group id or by offsets partition;
``tws``: the experimental ``transformWithStateInPandas`` operator of :mod:`coordinator.bench.tws`
keyed by group id, on RocksDB; ``batchtime``: ``shard`` with every request served at its batch's
time, as before requests carried their arrival, for comparison; ``floor``: the same inbox source
and Delta sink around a state function that answers every line NONE and decides nothing) this
module starts the query on one
shared SparkSession with a fresh warehouse and checkpoint, then drives G groups of M members
(:mod:`coordinator.bench.stream_members`) with raw requests:

- the load runs in a process of its own (:class:`LoadProcess`), not the job's driver, so that
  the query it measures does not slow it (it still shares the machine's cores);
- the members behave as Kafka consumers: they join their groups (the time until every member is
  stable is "groups formed in"), heartbeat from the moment their JoinGroup is answered, through
  the SyncGroup, the warm-up, the measured window and any recovery, and rejoin (JoinGroup, then
  SyncGroup) when an answer tells them to; the report counts their rejoins and their groups'
  rebalances. (The floors form no group: their members start "joined".)
- a driver thread drops one inbox file per tick holding the heartbeats that are due (each member
  every H ms, phases spread at random over the interval; with H = 0 each member sends its next
  heartbeat as soon as the previous one is answered, which measures capacity; a member whose
  JoinGroup is in flight skips its turn) and the members' JoinGroup and SyncGroup requests, and
  records when each file was renamed into the inbox;
- a reader thread follows the ``responses`` table (:class:`ResponseReader`) and records when each
  response became readable: latency = readable - landed;
- probes (job modes only): a few one-member groups with a short session, formed, heartbeating
  once, then silent, over and over. Their session deadline is when their last heartbeat's file
  landed in the inbox (the job serves it at its arrival; ``batchtime``: at its batch's time,
  ``emitted_at_ms``) + the session timeout; the expiry is the ``group_metadata``
  record with no members that the timer writes to ``consumer_offsets``: its ``timestamp_ms`` is
  the batch that fired it, and the time the reader first saw it is when it became readable.

**Overload** (``--overload CAPACITY``, requests/s, e.g. what ``--heartbeat-ms 0`` measured):
instead of a fixed interval per member, the members heartbeat in turn at an offered rate: half
the capacity during the warm-up, twice the capacity for ``--seconds``, then half of it for
``--recover-seconds``. Every member still heartbeats well within its session (the options are
refused otherwise), from its join on, so a heartbeat answered ``UNKNOWN_MEMBER_ID`` that landed
within one session of the member's previous heartbeat (or of its join's answer) is a **false
expiry**: the member was expired although its heartbeats reached the inbox on time. It is
counted once per expiry (the member then rejoins; heartbeats it had in flight are stale). The
job serves each request at its arrival in the inbox, so there should be none however far it
falls behind; ``batchtime`` shows what serving requests at the batch's time did.

Figures come from the requests themselves, ``query.recentProgress`` (batch durations) and the
sink's ``after_write`` hook; nothing here changes what the job does. Absolute times on a shared
2-core box are noisy: the ratios to the floor, measured in the same run, are the figures to read.
Modes run one after the other, the floor first by default; the first one gets a double warm-up
for the fresh JVM. The floor is keyed by group id, like ``group`` mode: it is the floor of one
Spark key per group, and ``shard`` mode (at most ``offsets.topic.num.partitions`` keys) can beat
it once many groups are active in a batch.

``--state-store`` (``job.state.store``) and ``--arrow-batch``
(``spark.sql.execution.arrow.maxRecordsPerBatch``) apply to the job modes only: the floor always
runs with Spark's defaults (the HDFS store, 10,000 rows per Arrow batch), so that it is one fixed
reference and ratios from different runs compare the alternatives with each other. ``tws``
always runs on RocksDB.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from itertools import pairwise, repeat
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from coordinator import jsonio
from coordinator.bench import tws
from coordinator.bench.stream_members import (
    Member,
    MemberEvents,
    Members,
    heartbeat_request,
    join_request,
    sync_request,
)
from coordinator.requests import response
from coordinator.stream import job, operator, source, worker_gc
from coordinator.stream.client import Inbox, ResponseReader, StreamClient
from coordinator.stream.schema import CONSUMER_OFFSETS, RESPONSES, Warehouse
from coordinator.stream.settings import (
    HDFS_STORE,
    ROCKSDB_STORE,
    STATE_STORES,
    Settings,
    load_settings,
)

GROUP = operator.GROUP_KEY
SHARD = operator.SHARD_KEY
FLOOR = "floor"
#: The floor keyed like ``shard`` mode (at most ``offsets.topic.num.partitions`` keys).
FLOOR_SHARD = "floor-shard"
#: The same source and sink with no state at all: every line answered by a ``mapInPandas``.
STATELESS = "stateless"
#: The modes that decide nothing (no group is formed in them; every line is answered NONE).
FLOORS = (FLOOR, FLOOR_SHARD, STATELESS)
TWS = tws.TWS
#: ``shard`` with each request served at its batch's time (its file's arrival stamp ignored).
BATCHTIME = "batchtime"
MODES = (FLOOR, FLOOR_SHARD, STATELESS, GROUP, SHARD, TWS, BATCHTIME)
#: What ``--modes`` runs unless told otherwise (``tws`` is asked for by name).
DEFAULT_MODES = (FLOOR, GROUP, SHARD)

#: Rows per Arrow batch between the JVM and the Python workers (``--arrow-batch``).
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"

#: The issue's goals, as ratios of a job mode's figure to the floor's.
GOALS = {"latency_p50": ("<=", 1.2), "latency_p99": ("<=", 1.5), "throughput": (">=", 0.7)}

#: Coordinator settings for the run: no initial rebalance delay (groups form in a batch or two).
COORDINATOR_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}

#: A backlog "grows" when outstanding requests rise faster than this share of the offered rate
#: per second (at 5 %, a minute's run ends three seconds of load behind).
GROWTH_SHARE = 0.05
#: ``--capacity``: a rate is sustained when the backlog is steady at it and the p99 latency of
#: the requests offered at it is at most this (ms).
CAPACITY_P99_MS = 3000.0
#: The job's capacity goal, as a share of the stateless floor's capacity in the same run.
CAPACITY_GOAL_SHARE = 0.7


@dataclass(frozen=True)
class StreamBenchOptions:
    groups: int = 10
    members: int = 10
    #: Each member's heartbeat interval; 0 = closed loop (next heartbeat once answered).
    heartbeat_ms: int = 3000
    #: The measured window, after the warm-up (doubled for the first mode: a fresh JVM's first
    #: minute is up to 1.5x slower, and a slow start leaves a backlog to drain).
    seconds: float = 60.0
    warmup_seconds: float = 20.0
    #: How long to wait after the window for the last answers (and probe expiries).
    drain_seconds: float = 20.0
    modes: tuple[str, ...] = DEFAULT_MODES
    #: None: the job's settings (``conf/job.properties``).
    trigger_interval_ms: int | None = None
    shards: int | None = None
    #: ``job.state.store`` for the job modes (None: the job's setting; ``tws`` is always
    #: ``rocksdb``, the floor always Spark's default).
    state_store: str | None = None
    #: ``spark.sql.execution.arrow.maxRecordsPerBatch`` for the job modes (None: Spark's
    #: default, 10,000; the floor always runs with the default).
    arrow_batch: int | None = None
    #: One inbox file per tick at most.
    tick_ms: int = 100
    poll_ms: int = 20
    session_timeout_ms: int = 30_000
    rebalance_timeout_ms: int = 60_000
    #: Probe groups (one member each, up to one per measured group) and their session: at
    #: least this, and raised to 4x the warm-up's median round trip (a probe must sync within
    #: its session, which a slow batch would otherwise prevent).
    probes: int = 10
    probe_session_timeout_ms: int = 6_000
    #: Requests/s the job is known to answer (``--overload``): offer twice that for
    #: ``seconds``, then half of it for ``recover_seconds`` (None: the fixed interval above).
    overload_capacity: float | None = None
    recover_seconds: float = 60.0
    #: ``--capacity``: offered rates (requests/s, ascending), each for ``seconds``, members in
    #: turn; a mode stops at the first rate it does not sustain (empty: no capacity steps).
    capacity_rates: tuple[float, ...] = ()
    #: None: a temporary directory, removed afterwards; else a new ``bench-<time>`` under it.
    warehouse: str | None = None
    seed: int = 7

    def __post_init__(self) -> None:
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not self.modes:
            raise ValueError(f"modes are {', '.join(MODES)}; got {', '.join(self.modes) or '-'}")
        if self.groups < 1 or self.members < 1:
            raise ValueError("--groups and --members must be >= 1")
        if self.heartbeat_ms < 0 or self.seconds <= 0 or self.tick_ms < 1:
            raise ValueError("--heartbeat-ms >= 0, --seconds > 0 and a tick >= 1 ms are needed")
        if self.state_store is not None and self.state_store not in STATE_STORES:
            raise ValueError(f"--state-store is one of {', '.join(STATE_STORES)}")
        if self.arrow_batch is not None and self.arrow_batch < 1:
            raise ValueError("--arrow-batch must be >= 1")
        if self.capacity_rates:
            if self.overload_capacity is not None:
                raise ValueError("--capacity and --overload are separate runs")
            rates = self.capacity_rates
            if min(rates) <= 0 or list(rates) != sorted(set(rates)):
                raise ValueError("--capacity takes rates > 0 in ascending order")
            self._check_heartbeat_interval(rates[0], "at the first --capacity rate")
        if self.overload_capacity is not None:
            if self.overload_capacity <= 0 or self.recover_seconds < 0:
                raise ValueError("--overload must be > 0 and --recover-seconds >= 0")
            self._check_heartbeat_interval(self.overload_capacity / 2, "at half of --overload")

    def _check_heartbeat_interval(self, rate: float, where: str) -> None:
        """Members in turn at ``rate``: each must heartbeat within a third of its session, so
        that an UNKNOWN_MEMBER_ID answer is a false expiry."""
        slowest_ms = 1000.0 * self.groups * self.members / rate
        if slowest_ms > self.session_timeout_ms / 3:
            raise ValueError(
                f"{where} each member would heartbeat every {slowest_ms:,.0f} ms, more than a"
                f" third of its {self.session_timeout_ms} ms session: fewer members, or a"
                f" higher rate"
            )

    @classmethod
    def quick(cls, **changes: Any) -> StreamBenchOptions:
        """A smoke-sized run: 3 groups x 2 members, 15 s measured."""
        values: dict[str, Any] = {
            "groups": 3,
            "members": 2,
            "seconds": 15.0,
            "warmup_seconds": 5.0,
            "drain_seconds": 15.0,
        }
        values.update({k: v for k, v in changes.items() if v is not None})
        return cls(**values)

    @property
    def offered_per_s(self) -> float | None:
        """The steady offered rate (None: closed loop; with ``--overload``, the overload's)."""
        if self.overload_capacity is not None:
            return 2 * self.overload_capacity
        if self.heartbeat_ms == 0 or self.capacity_rates:
            return None
        return self.groups * self.members * 1000.0 / self.heartbeat_ms

    def offered_at(self, since_s: float | None) -> float:
        """The overload's offered rate ``since_s`` seconds into the measured window (None:
        still warming up)."""
        assert self.overload_capacity is not None
        if since_s is not None and 0 <= since_s < self.seconds:
            return 2 * self.overload_capacity
        return self.overload_capacity / 2


# --- the floor pipeline -----------------------------------------------------------------------

#: The floor's timer: the job's timeout mode (no-data batches on every trigger) without firing.
FLOOR_TIMEOUT_MS = 600_000


def _answer_none(frames: Iterator[Any], now: int) -> list[tuple[Any, ...]]:
    """Every inbox line of ``frames`` answered NONE, as the job's output rows at ``now``
    (the body as the job writes it: the sink reads its common fields from that form)."""
    rows: list[tuple[Any, ...]] = []
    for frame in frames:
        for value, group_id in zip(
            frame["value"].tolist(), frame["group_id"].tolist(), strict=True
        ):
            raw = json.loads(value)
            # The job's answer to a heartbeat, written as the job writes it.
            body = jsonio.dumps_response(response(raw.get("api"), raw.get("request_id"), group_id))
            rows.append((operator.RESPONSE, group_id, len(rows), 0, None, None, now, body))
    return rows


def floor_function(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """The floors' ``applyInPandasWithState`` function (keyed by group id or by shard): every
    line answered NONE, in the job's output schema; the state is a placeholder holding a timer,
    so that Spark runs the floor with the job's timeout mode (and so its no-data batches).
    Its Python workers' collector is set as the job's are (:mod:`coordinator.stream.worker_gc`),
    so that the floor stays below the job."""
    worker_gc.tune_gc()
    if state.hasTimedOut:
        state.remove()
        return
    rows = _answer_none(frames, state.getCurrentProcessingTimeMs())
    state.update((b"",))
    state.setTimeoutDuration(FLOOR_TIMEOUT_MS)
    if rows:
        yield operator.output_frame(rows)


def floor_stream(spark: Any, settings: Settings, opsettings: operator.OperatorSettings) -> Any:
    """The floor's stream: ``job.inbox_stream`` -> the floor function keyed by group id (or, for
    ``floor-shard``, by shard as ``job.state.key=shard`` keys the job), with the job's timeout
    mode and output schema."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    lines = job.inbox_stream(spark, settings)
    if settings.job.state_key == SHARD:
        grouped = job.with_shard(lines, settings).groupBy("shard")
    else:
        grouped = lines.groupBy("group_id")
    return grouped.applyInPandasWithState(
        floor_function,
        operator.OUTPUT_DDL,
        operator.STATE_DDL,
        "Update",
        GroupStateTimeout.ProcessingTimeTimeout,
    )


def stateless_function(frames: Iterator[Any]) -> Iterator[Any]:
    """The stateless floor's ``mapInPandas`` function: every line answered NONE (its workers'
    collector set as the job's are)."""
    worker_gc.tune_gc()
    rows = _answer_none(frames, int(time.time() * 1000))
    yield operator.output_frame(rows)


def stateless_stream(spark: Any, settings: Settings, opsettings: operator.OperatorSettings) -> Any:
    """The stateless floor's stream: ``job.inbox_stream`` -> :func:`stateless_function`, no
    shuffle and no state store: what the source and the sink cost alone."""
    return job.inbox_stream(spark, settings).mapInPandas(stateless_function, operator.OUTPUT_DDL)


def start_floor(
    spark: Any,
    settings: Settings,
    after_write: Callable[[job.BatchFigures], None] | None = None,
    mode: str = FLOOR,
) -> job.RunningJob:
    """A floor query (``floor``, ``floor-shard`` or ``stateless``): the job's own sink, trigger
    and listener around a trivial function."""
    stream = stateless_stream if mode == STATELESS else floor_stream
    return job.start(
        spark, settings, after_write, stream=stream, query_name=f"{job.QUERY_NAME}-{mode}"
    )


def batchtime_stream(spark: Any, settings: Settings, opsettings: operator.OperatorSettings) -> Any:
    """The job's operator with every request served at its batch's time, and every timer fired
    at it: the arrival stamps are taken out of the rows' file names (``<seq>@<ms>-<name>``
    becomes an older release's ``<seq>-<name>``, whose requests have no arrival) before the
    operator reads them, and the operator does not read the offset log (no input horizons,
    and the timers a batch arms count from its clock, not from its answers' delivery)."""
    from pyspark.sql import functions as F

    lines = job.inbox_stream(spark, settings).withColumn(
        "source_file", F.regexp_replace("source_file", r"/(\d{16})(%40|@)\d+-", "/$1-")
    )
    at_batch_time = dataclasses.replace(opsettings, offsets_dir=None)
    return job.keyed_operator(lines, settings, at_batch_time)


# --- groups ---------------------------------------------------------------------------------


def group_ids(count: int) -> list[str]:
    return [f"bench-{i:05d}" for i in range(count)]


def formation_timeout_s(members: int) -> float:
    """How long the members may take to form their groups: three round trips (JoinGroup,
    JoinGroup with the id, SyncGroup) of a batch that holds every member."""
    return 3 * (120 + 0.02 * members)


# --- following consumer_offsets ---------------------------------------------------------------


class LogFollower:
    """New rows of a delta-rs table, commit by commit: the ``add`` actions of each new
    ``_delta_log/<version>.json`` (compaction's ``dataChange: false`` ones skipped), the given
    columns of their parquet files. Partition columns are not in the files; do not ask for
    them."""

    def __init__(self, table: Path, columns: Sequence[str]) -> None:
        self.table = table
        self.columns = list(columns)
        self.next_version = 0

    def poll(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while True:
            commit = self.table / "_delta_log" / f"{self.next_version:020d}.json"
            try:
                lines = commit.read_text(encoding="utf-8").splitlines()
            except FileNotFoundError:
                return rows
            for line in lines:
                add = json.loads(line).get("add") if line.strip() else None
                if add is not None and add.get("dataChange", True):
                    data = pq.read_table(self.table / unquote(add["path"]), columns=self.columns)
                    rows.extend(data.to_pylist())
            self.next_version += 1


# --- probes: sessions left to expire ----------------------------------------------------------


@dataclass
class _Probe:
    index: int
    group_id: str
    phase: str = "idle"
    cycle: int = 0
    member_id: str = ""
    generation: int = -1
    heartbeat_at_ms: int = 0
    #: When the file of the probe's heartbeat landed in the inbox (0: not yet known).
    heartbeat_landed_ms: int = 0
    deadline_ms: int = 0
    phase_since: float = 0.0


#: A probe's cycle: the request each phase sends and the answer it expects
#: (MEMBER_ID_REQUIRED for the first join, NONE after).
_PROBE_NEXT = {"join0": "join1", "join1": "sync", "sync": "heartbeat", "heartbeat": "expiring"}
_PROBE_EXPECT = {"join0": 79, "join1": 0, "sync": 0, "heartbeat": 0}
#: A probe waiting longer than this for an answer or an expiry gives up and starts again.
_PROBE_STUCK_S = 60.0


class Probes:
    """One-member groups that heartbeat once and then let their session expire, again and
    again; each expiry is a timer-lateness sample. Requests are queued here and sent by the
    driver's next file; answers and log records come from the reader. Thread safe."""

    def __init__(self, count: int, at_batch_time: bool = False) -> None:
        self.session_ms = 0
        #: The job serves requests at their batch's time (``batchtime``), not their arrival.
        self.at_batch_time = at_batch_time
        self.probes = [_Probe(i, f"bench-probe-{i:02d}") for i in range(count)]
        self._by_group = {p.group_id: p for p in self.probes}
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self.active = False
        self.samples: list[dict[str, float]] = []
        self.failures: Counter[str] = Counter()

    def start(self, session_ms: int) -> None:
        with self._lock:
            self.session_ms = session_ms
            self.active = True
            for probe in self.probes:
                self._begin(probe)

    def finish(self) -> None:
        """No new cycles; probes not yet silent stop now, silent ones may still expire."""
        with self._lock:
            self.active = False
            for probe in self.probes:
                if probe.phase not in ("heartbeat", "expiring"):
                    probe.phase = "done"

    def busy(self) -> bool:
        with self._lock:
            return any(p.phase in ("heartbeat", "expiring") for p in self.probes)

    def take(self) -> list[dict[str, Any]]:
        with self._lock:
            pending, self._pending = self._pending, []
            return pending

    def landed(self, requests: list[dict[str, Any]], at_s: float) -> None:
        """The file holding ``requests`` (taken from :meth:`take`) landed at ``at_s``."""
        with self._lock:
            for request in requests:
                index, cycle, phase = str(request["request_id"])[1:].split(".")
                probe = self.probes[int(index)]
                if phase == "heartbeat" and int(cycle) == probe.cycle:
                    probe.heartbeat_landed_ms = round(at_s * 1000)

    def _begin(self, probe: _Probe) -> None:
        probe.cycle += 1
        probe.member_id = ""
        probe.heartbeat_landed_ms = 0
        self._send(probe, "join0")

    def _send(self, probe: _Probe, phase: str) -> None:
        probe.phase = phase
        probe.phase_since = time.time()
        rid = f"p{probe.index}.{probe.cycle}.{phase}"
        session = self.session_ms
        if phase in ("join0", "join1"):
            request = join_request(rid, probe.group_id, probe.member_id, session, session)
        elif phase == "sync":
            request = sync_request(
                rid, probe.group_id, probe.member_id, probe.generation, [probe.member_id]
            )
        else:
            request = heartbeat_request(rid, probe.group_id, probe.member_id, probe.generation)
        self._pending.append(request)

    def _restart(self, probe: _Probe, reason: str) -> None:
        self.failures[reason] += 1
        if self.active:
            self._begin(probe)
        else:
            probe.phase = "done"

    def on_response(self, row: dict[str, Any]) -> None:
        index, cycle, phase = str(row["request_id"])[1:].split(".")
        with self._lock:
            probe = self.probes[int(index)]
            if int(cycle) != probe.cycle or phase != probe.phase:
                return
            if row["error_code"] != _PROBE_EXPECT[phase]:
                self._restart(probe, f"{phase}: {row['error']}")
                return
            body = json.loads(row["body"])
            if phase == "join0":
                probe.member_id = body["member_id"]
            elif phase == "join1":
                probe.generation = body["generation_id"]
            elif phase == "heartbeat":
                probe.heartbeat_at_ms = row["emitted_at_ms"]
                served = probe.heartbeat_landed_ms or probe.heartbeat_at_ms
                if self.at_batch_time:
                    served = probe.heartbeat_at_ms
                probe.deadline_ms = served + self.session_ms
                probe.phase = "expiring"
                probe.phase_since = time.time()
                return
            self._send(probe, _PROBE_NEXT[phase])

    def on_records(self, records: list[dict[str, Any]], readable_s: float) -> None:
        """``consumer_offsets`` rows: a probe's group written with no members after its last
        heartbeat is its expiry."""
        with self._lock:
            for record in records:
                probe = self._by_group.get(record["group_id"])
                if (
                    probe is None
                    or probe.phase != "expiring"
                    or record["record_type"] != "group_metadata"
                    or record["members"]
                    or record["timestamp_ms"] <= probe.heartbeat_at_ms
                ):
                    continue
                self.samples.append(
                    {
                        "deadline_ms": probe.deadline_ms,
                        "fired_ms": record["timestamp_ms"],
                        "written_ms": record["written_at_ms"],
                        "readable_ms": readable_s * 1000.0,
                    }
                )
                if self.active:
                    self._begin(probe)
                else:
                    probe.phase = "done"

    def check(self, now: float) -> None:
        with self._lock:
            for probe in self.probes:
                if probe.phase not in ("idle", "done") and now - probe.phase_since > _PROBE_STUCK_S:
                    self._restart(probe, f"{probe.phase}: no answer in {_PROBE_STUCK_S:g} s")


# --- the load ---------------------------------------------------------------------------------


@dataclass
class _Measured:
    """Everything the threads record (guarded by the load's lock)."""

    #: Outstanding heartbeats: request id -> when its file landed (s).
    landed: dict[str, float] = field(default_factory=dict)
    #: Landing times of every heartbeat sent.
    sent: list[float] = field(default_factory=list)
    #: Per answered heartbeat: (landed, readable) in s, and its error name.
    answered: list[tuple[float, float]] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)
    #: (time, outstanding heartbeats), once a second.
    outstanding: list[tuple[float, int]] = field(default_factory=list)
    files: int = 0
    #: What the members did: rejoins, generations, false expiries (see :class:`Members`).
    members: MemberEvents = field(default_factory=MemberEvents)

    @property
    def false_expiries(self) -> list[tuple[float, int]]:
        """Heartbeats answered UNKNOWN_MEMBER_ID although the member had heartbeated within its
        session since its latest join: (landed, member index)."""
        return self.members.false_expiries


def _sleep(check: Callable[[], None], seconds: float, until: Callable[[], bool] | None) -> None:
    """Wait ``seconds`` or until ``until()``, calling ``check`` (which raises on a failure)
    every tenth of a second."""
    end = time.time() + seconds
    while time.time() < end:
        check()
        if until is not None and until():
            return
        time.sleep(0.1)


#: The columns of ``responses`` the load reads (those :class:`Members` and :class:`Probes` use).
_ANSWER_COLUMNS = ("request_id", "error_code", "error", "body", "emitted_at_ms")
#: Heartbeats' answers taken per hold of the load's lock.
_ANSWERS_A_LOCK = 2_000


class Load:
    """The driver and reader threads over one warehouse (see the module docstring)."""

    def __init__(
        self,
        paths: Warehouse,
        members: Sequence[Member],
        options: StreamBenchOptions,
        query: Any,
        probes: Probes | None,
        joined: bool = True,
    ) -> None:
        self.inbox = Inbox(paths.inbox)
        self.reader = ResponseReader(paths.table(RESPONSES))
        self.log = LogFollower(
            paths.table(CONSUMER_OFFSETS),
            ["record_type", "group_id", "timestamp_ms", "written_at_ms", "members"],
        )
        self.options = options
        self.query = query
        self.probes = probes
        self.m = _Measured()
        #: The members' state machines (formed and driven here: they heartbeat from their join).
        self.members = Members(
            members,
            options.session_timeout_ms,
            options.rebalance_timeout_ms,
            joined=joined,
            now=time.time(),
        )
        self.m.members = self.members.events
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.sending = True
        # Open loop: member i is due at start + phase[i] + n * H, taken in phase order.
        rng = random.Random(options.seed)
        period = options.heartbeat_ms
        phases = [rng.random() * period for _ in members]
        self._order = sorted(range(len(members)), key=phases.__getitem__)
        self._phase = phases
        self._cursor = 0
        self._round = 0
        # Overload and capacity steps: members in turn at the offered rate (``rate`` when set,
        # else the overload's schedule from when the window starts).
        self.rate: float | None = None
        self.window_start: float | None = None
        self._owed = 0.0
        self._next_member = 0
        self._last_due: float | None = None
        self._threads: list[threading.Thread] = []
        self._failure: BaseException | None = None

    # -- threads -------------------------------------------------------------------------------

    def start(self) -> None:
        self._started = time.time()
        for target in (self._drive, self._read):
            thread = threading.Thread(target=self._guard, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _guard(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # reported by check()
            self._failure = exc
            self._stop.set()

    def check(self) -> None:
        """Raise if a thread failed or the query died (None: a :class:`LoadProcess` watches
        it)."""
        if self._failure is not None:
            raise RuntimeError(f"the load failed: {self._failure!r}") from self._failure
        if self.query is not None and not self.query.isActive:
            raise RuntimeError(f"the query stopped: {self.query.exception()}")

    def sleep(self, seconds: float, until: Callable[[], bool] | None = None) -> None:
        _sleep(self.check, seconds, until)

    def formed(self) -> bool:
        """Every member has joined and synced (each group formed)."""
        with self._lock:
            return self.members.formed()

    def member_phases(self) -> dict[str, int]:
        with self._lock:
            return self.members.phases()

    def _due(self, now: float) -> list[int]:
        """The members whose heartbeat is due (those not heartbeating skip their turn)."""
        if not self.sending:
            return []
        if self.options.overload_capacity is not None or self.options.capacity_rates:
            since = None if self.window_start is None else now - self.window_start
            elapsed = 0.0 if self._last_due is None else now - self._last_due
            self._last_due = now
            if self.options.capacity_rates:
                rate = self.rate if self.rate is not None else self.options.capacity_rates[0]
            else:
                rate = self.options.offered_at(since)
            self._owed += rate * elapsed
            count = int(self._owed)
            self._owed -= count
            total = len(self.members)
            due = [(self._next_member + i) % total for i in range(count)]
            self._next_member = (self._next_member + count) % total
            return due
        if self.options.heartbeat_ms == 0:
            with self._lock:
                return self.members.idle()
        due = []
        period = self.options.heartbeat_ms / 1000.0
        while True:
            index = self._order[self._cursor]
            if self._started + self._phase[index] / 1000.0 + self._round * period > now:
                return due
            due.append(index)
            self._cursor += 1
            if self._cursor == len(self._order):
                self._cursor = 0
                self._round += 1

    def _drive(self) -> None:
        tick = self.options.tick_ms / 1000.0
        next_tick = time.time()
        next_sample = next_tick
        while not self._stop.is_set():
            now = time.time()
            if now >= next_sample:
                with self._lock:
                    self.m.outstanding.append((now, len(self.m.landed)))
                if self.probes is not None:
                    self.probes.check(now)
                next_sample += 1.0
            self._send(self._due(now))
            next_tick += tick
            self._stop.wait(max(0.0, next_tick - time.time()))

    def _send(self, due: list[int]) -> None:
        """One inbox file: the due members' heartbeats, the members' JoinGroup and SyncGroup
        requests (sent whatever the schedule, as a client rejoins at once) and the probes'.
        The heartbeats come as their lines (:meth:`Members.heartbeats`), so that the load's own
        CPU per request stays small beside the job's on a box they share."""
        now = time.time()
        with self._lock:
            beats = self.members.heartbeats(due)
            joins = self.members.membership(now) if self.sending else []
        ids = [rid for rid, _ in beats]
        probing = self.probes.take() if self.probes is not None else []
        lines = [line for _, line in beats] + [jsonio.dumps(r) for r in joins + probing]
        if not lines:
            return
        before = time.time()
        landed_at = self.m.landed
        with self._lock:  # before the file exists, so no answer can come unmatched
            landed_at.update(dict.fromkeys(ids, before))
            self.members.landed(ids, before)
        self.inbox.submit_lines(lines)
        landed = time.time()
        if probing and self.probes is not None:
            self.probes.landed(probing, landed)
        with self._lock:
            self.m.files += 1
            for rid in ids:
                if rid in landed_at:  # not answered already
                    landed_at[rid] = landed
            self.m.sent.extend(repeat(landed, len(ids)))

    def _read(self) -> None:
        poll = self.options.poll_ms / 1000.0
        while not self._stop.is_set():
            table = self.reader.poll_table(_ANSWER_COLUMNS)
            records = self.log.poll() if self.probes is not None else []
            now = time.time()
            rids = table.column("request_id").to_pylist()
            heartbeats = []
            for i, rid in enumerate(rids):
                kind = rid[:1] if rid else ""
                if kind == "h":
                    heartbeats.append(i)
                elif kind == "m":
                    row = table.slice(i, 1).to_pylist()[0]
                    with self._lock:
                        self.members.on_membership(row, now)
                elif kind == "p" and self.probes is not None:
                    self.probes.on_response(table.slice(i, 1).to_pylist()[0])
            if heartbeats:
                self._answered(table.take(heartbeats), now)
            if records and self.probes is not None:
                self.probes.on_records(records, now)
            self._stop.wait(poll)

    def _answered(self, answers: Any, now: float) -> None:
        """Heartbeats' answers (a table of :data:`_ANSWER_COLUMNS`), readable at ``now``: each
        one's round trip and error; then the member's reaction (a rejoin; a false expiry
        counted: :class:`Members`). A few thousand at a time under the lock, so that the
        sending thread is not held up for a whole poll's answers."""
        rids = answers.column("request_id").to_pylist()
        codes = answers.column("error_code").to_pylist()
        errors = answers.column("error").to_pylist()
        landed_at, answered, errored = self.m.landed, self.m.answered, self.m.errors
        on_heartbeat = self.members.on_heartbeat
        for start in range(0, len(rids), _ANSWERS_A_LOCK):
            with self._lock:
                for i in range(start, min(start + _ANSWERS_A_LOCK, len(rids))):
                    rid = rids[i]
                    landed = landed_at.pop(rid, None)
                    if landed is None:
                        continue
                    answered.append((landed, now))
                    errored.append((landed, errors[i] or "NONE"))
                    on_heartbeat(rid, codes[i], now)

    def cpu_seconds(self) -> float:
        """CPU time of this process so far (every thread's, user and system), in s."""
        return time.process_time()

    def round_trips(self) -> list[float]:
        """Seconds from landed to readable of every heartbeat answered so far."""
        with self._lock:
            return [readable - landed for landed, readable in self.m.answered]

    def outstanding(self) -> int:
        with self._lock:
            return len(self.m.landed)

    def outstanding_series(self, start: float, end: float) -> list[tuple[float, int]]:
        """(time, outstanding requests) sampled once a second within [start, end)."""
        with self._lock:
            return [(t, n) for t, n in self.m.outstanding if start <= t < end]


@dataclass(frozen=True)
class ProbeFigures:
    """What the figures read of :class:`Probes` once the load has stopped."""

    samples: list[dict[str, float]]
    session_ms: int
    failures: dict[str, int]


def _serve_load(
    conn: Any,
    paths: Warehouse,
    members: list[Member],
    options: StreamBenchOptions,
    probe_count: int | None,
    at_batch_time: bool,
    joined: bool,
) -> None:
    """A :class:`LoadProcess`'s child: a :class:`Load` (and its probes) serving the parent's
    calls, ``(name, args)`` -> ``("ok", value)`` or ``("error", text)``, until ``result``."""
    probes = None if probe_count is None else Probes(probe_count, at_batch_time)
    load = Load(paths, members, options, None, probes, joined)
    # What exists now lives as long as the process (the members, the lists of what is
    # measured): out of the collector's sight, so that it does not scan lists that grow by
    # every request sent at each full collection.
    gc.freeze()
    while True:
        name, args = conn.recv()
        try:
            if name == "set":
                setattr(load, args[0], args[1])
                value: Any = None
            elif name == "probes":
                assert probes is not None
                value = getattr(probes, args[0])(*args[1:])
            elif name == "result":
                value = (
                    load.m,
                    None
                    if probes is None
                    else ProbeFigures(probes.samples, probes.session_ms, dict(probes.failures)),
                )
            else:
                value = getattr(load, name)(*args)
            conn.send(("ok", value))
        except Exception as exc:
            conn.send(("error", repr(exc)))
        if name == "result":
            return


class LoadProcess:
    """The load of :class:`Load` (driver and reader threads, probes) in a process of its own,
    so that it does not share the job's driver process (its interpreter lock and its CPU time)
    with the query it measures: the load is open loop, and a load generator slowed by the
    system under test would offer less than it claims. Times are wall clock, shared by both
    processes. After :meth:`stop`, ``m`` and ``probes`` hold what the child measured."""

    def __init__(
        self,
        paths: Warehouse,
        members: Sequence[Member],
        options: StreamBenchOptions,
        query: Any,
        probes: Probes | None,
        joined: bool = True,
    ) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # no fork of a process running a JVM
        self._conn, child = context.Pipe()
        probe_count = None if probes is None else len(probes.probes)
        at_batch_time = probes is not None and probes.at_batch_time
        self._process = context.Process(
            target=_serve_load,
            args=(child, paths, list(members), options, probe_count, at_batch_time, joined),
            daemon=True,
            name="bench-load",
        )
        self.query = query
        self.m = _Measured()
        self.probes: ProbeFigures | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._failure: RuntimeError | None = None

    def _call(self, name: str, *args: Any) -> Any:
        with self._lock:
            if not self._process.is_alive():
                raise RuntimeError(f"the load process ended (exit {self._process.exitcode})")
            self._conn.send((name, args))
            status, value = self._conn.recv()
        if status != "ok":
            raise RuntimeError(f"the load failed: {value}")
        return value

    def start(self) -> None:
        self._process.start()
        self._call("start")

    def stop(self) -> None:
        """Stop the load's threads and fetch what it measured (a failure of its threads is
        raised by the next :meth:`check`)."""
        if self._stopped or not self._process.is_alive():
            return
        try:
            self._call("check")
        except RuntimeError as exc:
            self._failure = exc
        self._call("stop")
        self.m, self.probes = self._call("result")
        self._stopped = True
        self._process.join(timeout=30)

    def check(self) -> None:
        """Raise if the load failed or the query died."""
        if self._failure is not None:
            raise self._failure
        if self._stopped:
            return
        self._call("check")
        if not self.query.isActive:
            raise RuntimeError(f"the query stopped: {self.query.exception()}")

    def sleep(self, seconds: float, until: Callable[[], bool] | None = None) -> None:
        _sleep(self.check, seconds, until)

    def set(self, name: str, value: Any) -> None:
        """Set the child's ``Load.<name>`` (``rate``, ``window_start``, ``sending``)."""
        self._call("set", name, value)

    def probe(self, method: str, *args: Any) -> Any:
        return self._call("probes", method, *args)

    def outstanding(self) -> int:
        return int(self._call("outstanding")) if not self._stopped else len(self.m.landed)

    def outstanding_series(self, start: float, end: float) -> list[tuple[float, int]]:
        return list(self._call("outstanding_series", start, end))

    def round_trips(self) -> list[float]:
        return list(self._call("round_trips"))

    def cpu_seconds(self) -> float:
        """The load process's CPU time so far (its threads', user and system), in s."""
        return float(self._call("cpu_seconds"))

    def formed(self) -> bool:
        return bool(self._call("formed"))

    def member_phases(self) -> dict[str, int]:
        return dict(self._call("member_phases"))


# --- one mode ---------------------------------------------------------------------------------


def mode_settings(mode: str, root: Path, options: StreamBenchOptions) -> Settings:
    conf = root / "coordinator-bench.properties"
    values = dict(COORDINATOR_SETTINGS)
    values["group.min.session.timeout.ms"] = str(
        min(6000, options.probe_session_timeout_ms, options.session_timeout_ms)
    )
    conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()), encoding="utf-8")
    return load_settings(
        [str(conf)],
        warehouse=str(root / mode),
        state_key=SHARD if mode in (SHARD, BATCHTIME, FLOOR_SHARD) else GROUP,
        state_store=mode_state_store(mode, options),
        trigger_interval_ms=options.trigger_interval_ms,
        shards=options.shards,
    )


def mode_state_store(mode: str, options: StreamBenchOptions) -> str | None:
    """``job.state.store`` for a mode (None: the job's setting)."""
    if mode == TWS:
        return ROCKSDB_STORE
    if mode in FLOORS:
        return HDFS_STORE
    return options.state_store


def mode_arrow_batch(mode: str, options: StreamBenchOptions) -> int | None:
    """Rows per Arrow batch for a mode (None: Spark's default)."""
    return None if mode in FLOORS else options.arrow_batch


#: Each mode's ``query.recentProgress``, one JSON object a line, beside its warehouse.
PROGRESS_FILE = "progress.jsonl"


def run_mode(
    spark: Any,
    mode: str,
    options: StreamBenchOptions,
    root: Path,
    say: Callable[[str], None],
    warmup_s: float,
) -> dict[str, Any]:
    settings = mode_settings(mode, root, options)
    paths = settings.job.paths
    spark.conf.set("spark.sql.shuffle.partitions", str(settings.job.shards))
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    arrow_batch = mode_arrow_batch(mode, options)
    if arrow_batch is None:
        spark.conf.unset(ARROW_BATCH)
    else:
        spark.conf.set(ARROW_BATCH, str(arrow_batch))
    writes: list[tuple[float, job.BatchFigures]] = []

    def after_write(figures: job.BatchFigures) -> None:
        writes.append((time.time(), figures))

    groups = group_ids(options.groups)
    started = time.time()
    say(f"[{mode}] starting the query ({paths.root})")
    if mode in FLOORS:
        running = start_floor(spark, settings, after_write, mode)
    elif mode == TWS:
        running = job.start(
            spark, settings, after_write, stream=tws.tws_stream, query_name=f"{job.QUERY_NAME}-tws"
        )
    elif mode == BATCHTIME:
        running = job.start(
            spark,
            settings,
            after_write,
            stream=batchtime_stream,
            query_name=f"{job.QUERY_NAME}-{BATCHTIME}",
        )
    else:
        running = job.start(spark, settings, after_write)
    try:
        formed_s: float | None = None
        if mode in FLOORS:
            # The floors form no group: every member is "joined" and answered NONE.
            members = [
                Member(g, f"floor-{g}-{k}", 1) for g in groups for k in range(options.members)
            ]
            probes = None
        else:
            client = StreamClient(paths)
            # The query's first batch is slow (a cold start): out of the way before the joins,
            # so that the time to form the groups does not include it.
            client.request(
                {"api": "offset_fetch", "request_id": "warm-up", "group_id": "bench-warm-up"},
                timeout_s=300,
            )
            members = [Member(g) for g in groups for _ in range(options.members)]
            probes = Probes(min(options.probes, options.groups), at_batch_time=mode == BATCHTIME)
        joined = mode in FLOORS
        load = LoadProcess(paths, members, options, running.query, probes, joined=joined)
        load.start()
        try:
            if not joined:
                # The members join and sync as clients do, heartbeating from their JoinGroup's
                # answer on (at the warm-up's schedule), and rejoin when told to.
                say(f"[{mode}] forming {options.groups} groups x {options.members} members")
                formed = time.time()
                timeout = formation_timeout_s(len(members))
                load.sleep(timeout, until=load.formed)
                if not load.formed():
                    raise RuntimeError(
                        f"the groups did not form in {timeout:,.0f} s: members by phase "
                        f"{load.member_phases()}"
                    )
                formed_s = time.time() - formed
            say(f"[{mode}] warm-up {warmup_s:g} s")
            load.sleep(warmup_s)
            t0 = time.time()
            if probes is not None:
                load.probe("start", probe_session_ms(options, load))
            load.set("window_start", t0)
            if options.capacity_rates:
                steps = run_capacity_steps(load, options, lambda m: say(f"[{mode}] {m}"))
            elif options.overload_capacity is None:
                say(f"[{mode}] measuring {options.seconds:g} s")
                load.sleep(options.seconds)
            else:
                capacity = options.overload_capacity
                say(
                    f"[{mode}] overload: {2 * capacity:,.0f} requests/s for {options.seconds:g} s, "
                    f"then {capacity / 2:,.0f}/s for {options.recover_seconds:g} s"
                )
                load.sleep(options.seconds + options.recover_seconds)
            t1 = time.time()
            load.set("sending", False)
            if probes is not None:
                load.probe("finish")
            load.sleep(
                options.drain_seconds,
                until=lambda: (
                    load.outstanding() == 0 and (probes is None or not load.probe("busy"))
                ),
            )
            drained = time.time()
        finally:
            load.stop()
        load.check()
        progress = [json.loads(p.json) for p in running.query.recentProgress]
        # Kept with the mode's warehouse (--warehouse): where each batch's time went, by
        # Spark's phases (durationMs) and its state operator's figures.
        (root / mode / PROGRESS_FILE).write_text(
            "".join(json.dumps(p) + "\n" for p in progress), encoding="utf-8"
        )
    finally:
        running.stop()
    say(f"[{mode}] done in {time.time() - started:.0f} s")
    figures = _mode_figures(
        mode, settings, options, load, load.probes, progress, writes, t0, t1, drained, formed_s
    )
    figures["arrow_batch"] = arrow_batch
    if options.capacity_rates:
        figures["capacity"] = _capacity_figures(load.m, steps)
    return figures


def run_capacity_steps(
    load: LoadProcess, options: StreamBenchOptions, say: Callable[[str], None]
) -> list[tuple[float, float, float, float]]:
    """Offer each of ``options.capacity_rates`` in turn for ``options.seconds`` (members in
    turn, open loop), and stop after the first rate at which the backlog grows: (rate, start,
    end, the load process's CPU in cores) of every rate offered."""
    steps: list[tuple[float, float, float, float]] = []
    for rate in options.capacity_rates:
        load.set("rate", rate)
        start = time.time()
        cpu = load.cpu_seconds()
        say(f"offering {rate:,.0f} requests/s for {options.seconds:g} s")
        load.sleep(options.seconds)
        end = time.time()
        steps.append((rate, start, end, (load.cpu_seconds() - cpu) / max(end - start, 1e-9)))
        slope = _slope([(t - start, float(n)) for t, n in load.outstanding_series(start, end)])
        if slope is not None and slope > GROWTH_SHARE * rate:
            say(f"the backlog grows at {rate:,.0f}/s ({slope:,.0f} requests/s): no higher rate")
            break
    return steps


def probe_session_ms(options: StreamBenchOptions, load: Load | LoadProcess) -> int:
    """The option, or 4x the median round trip so far in whole seconds if that is longer."""
    median = percentile(load.round_trips(), 50) or 0.0
    return max(options.probe_session_timeout_ms, 1000 * math.ceil(4 * median))


# --- figures ----------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), linearly interpolated; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _spread(values: Sequence[float], *qs: float) -> dict[str, Any]:
    figures: dict[str, Any] = {"count": len(values)}
    for q in qs:
        value = percentile(values, q)
        figures[f"p{q:g}"] = None if value is None else round(value, 1)
    figures["max"] = round(max(values), 1) if values else None
    return figures


def _slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    if var == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / var


def _epoch_s(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _mode_figures(
    mode: str,
    settings: Settings,
    options: StreamBenchOptions,
    load: Load | LoadProcess,
    probes: Probes | ProbeFigures | None,
    progress: list[dict[str, Any]],
    writes: list[tuple[float, job.BatchFigures]],
    t0: float,
    t1: float,
    drained: float,
    formed_s: float | None,
) -> dict[str, Any]:
    window = t1 - t0
    m = load.m
    latencies = [1000.0 * (r - s) for s, r in m.answered if t0 <= s < t1]
    answered_in_window = sum(1 for _, r in m.answered if t0 <= r < t1)
    sent_in_window = sum(1 for s in m.sent if t0 <= s < t1)
    errors = Counter(e for s, e in m.errors if t0 <= s < t1)

    batches = [p for p in progress if t0 <= _epoch_s(p["timestamp"]) < t1]
    data = [p for p in batches if p["numInputRows"] > 0]
    idle = [p for p in batches if p["numInputRows"] == 0]
    starts = sorted(_epoch_s(p["timestamp"]) for p in batches)
    period = percentile([1000.0 * (b - a) for a, b in pairwise(starts)], 50)
    written = [f for w, f in writes if t0 <= w < t1 and f.responses]
    responses = {f.batch_id: f.responses for _, f in writes}

    samples = [] if probes is None else probes.samples
    fired = [s["fired_ms"] - s["deadline_ms"] for s in samples]
    visible = [s["readable_ms"] - s["deadline_ms"] for s in samples]
    fired_p99 = percentile(fired, 99)

    in_window = [(t - t0, float(n)) for t, n in m.outstanding if t0 <= t < t1]
    slope = _slope(in_window)
    offered = options.offered_per_s
    threshold = GROWTH_SHARE * (offered if offered else answered_in_window / window)
    return {
        "mode": mode,
        "state_key": None if mode == FLOOR else settings.job.state_key,
        "state_store": settings.job.state_store,
        "shards": settings.job.shards,
        "trigger_interval_ms": settings.job.trigger_interval_ms,
        "formed_s": _round(formed_s),
        "window_s": round(window, 1),
        "offered_per_s": round(sent_in_window / window, 1),
        "answered_per_s": round(answered_in_window / window, 1),
        "latency_ms": _spread(latencies, 50, 95, 99),
        "batches": {
            "count": len(batches),
            "with_data": len(data),
            "duration_ms": _spread([float(p["batchDuration"]) for p in data], 50, 99),
            "idle_duration_ms": _spread([float(p["batchDuration"]) for p in idle], 50),
            "period_ms": None if period is None else round(period, 1),
            "files_per_batch": _round(sum(source.files_read(p) for p in data) / len(data))
            if data
            else None,
            "responses_per_batch": _round(
                sum(f.responses for f in written) / len(written) if written else None
            ),
            "write_ms_p50": _round(percentile([f.write_ms for f in written], 50)),
            "timers_fired": sum(f.timers_fired for w, f in writes if t0 <= w < t1),
        },
        "lateness_ms": None
        if probes is None
        else {
            "fired": _spread(fired, 50, 99),
            "visible": _spread(visible, 50, 99),
            "probe_session_ms": probes.session_ms,
            "probe_failures": dict(probes.failures),
            "goal_p99_within_period": None
            if fired_p99 is None or period is None
            else fired_p99 <= period,
        },
        "backlog": {
            "outstanding_at_start": in_window[0][1] if in_window else None,
            "outstanding_at_end": in_window[-1][1] if in_window else None,
            "outstanding_max": max((n for _, n in in_window), default=None),
            "slope_per_s": _round(slope),
            "growing": None if slope is None else slope > threshold,
            "unanswered_after_drain": load.outstanding(),
            "drain_s": round(drained - t1, 1),
        },
        "errors": dict(errors),
        "membership": None if mode in FLOORS else _membership_figures(m.members, t0, t1),
        "overload": None
        if options.overload_capacity is None
        else _overload_figures(options, m, t0, t1),
        "files": m.files,
        # Seconds from the start of the window: every batch (start, duration ms, files in,
        # responses out) and the outstanding heartbeats once a second, warm-up and drain included.
        "series": {
            "batches": [
                [
                    round(_epoch_s(p["timestamp"]) - t0, 2),
                    p["batchDuration"],
                    source.files_read(p),
                    responses.get(p["batchId"]),
                ]
                for p in progress
            ],
            "outstanding": [[round(t - t0, 1), n] for t, n in m.outstanding],
        },
    }


def _overload_figures(
    options: StreamBenchOptions, m: _Measured, t0: float, t1: float
) -> dict[str, Any]:
    """Per phase of the overload (2x the capacity, then half of it): offered and answered
    rates, latency and false expiries (by when the heartbeat landed), the members' rejoins
    and their groups' rebalances (by when the answer that caused them was read); the run's
    false expiries, rebalances and rejoins in all (forming the groups, warm-up and drain
    included)."""
    assert options.overload_capacity is not None
    boundary = t0 + options.seconds
    rebalances_seen = rebalances(m.members)
    phases = []
    for name, start, end in (("2x", t0, boundary), ("0.5x", boundary, t1)):
        span = max(end - start, 1e-9)
        phases.append(
            {
                "phase": name,
                "seconds": round(end - start, 1),
                "offered_per_s": round(sum(1 for s in m.sent if start <= s < end) / span, 1),
                "answered_per_s": round(
                    sum(1 for _, r in m.answered if start <= r < end) / span, 1
                ),
                "latency_ms": _spread(
                    [1000.0 * (r - s) for s, r in m.answered if start <= s < end], 50, 99
                ),
                "false_expiries": sum(1 for s, _ in m.false_expiries if start <= s < end),
                "rejoins": sum(1 for t, _, _ in m.members.rejoins if start <= t < end),
                "rebalances": sum(1 for t, _, _ in rebalances_seen if start <= t < end),
            }
        )
    return {
        "capacity_per_s": options.overload_capacity,
        "phases": phases,
        "false_expiries": len(m.false_expiries),
        "members_falsely_expired": len({index for _, index in m.false_expiries}),
        "goal_no_false_expiry": not m.false_expiries,
        "rebalances": len(rebalances_seen),
        "rejoins": len(m.members.rejoins),
    }


def rebalances(events: MemberEvents) -> list[tuple[float, str, int]]:
    """Every generation after a group's first, as (read at, group, generation): the group's
    rebalances (those the bench's members joined)."""
    first: dict[str, int] = {}
    for _, group, generation in events.generations:
        first[group] = min(first.get(group, generation), generation)
    return [(t, g, n) for t, g, n in events.generations if n > first[g]]


def _membership_figures(events: MemberEvents, t0: float, t1: float) -> dict[str, Any]:
    """The members' rebalances and rejoins (their causes: the answer and the request it
    answered), the whole run's and split by when they happened: before the measured window
    (forming the groups, warm-up), in it, after it (drain)."""

    def split(times: list[float]) -> dict[str, int]:
        return {
            "before_window": sum(1 for t in times if t < t0),
            "window": sum(1 for t in times if t0 <= t < t1),
            "after_window": sum(1 for t in times if t >= t1),
        }

    done = rebalances(events)
    return {
        "rebalances": len(done),
        "groups_rebalanced": len({g for _, g, _ in done}),
        "rebalances_by_phase": split([t for t, _, _ in done]),
        "rejoins": len(events.rejoins),
        "members_rejoined": len({i for _, i, _ in events.rejoins}),
        "rejoins_by_phase": split([t for t, _, _ in events.rejoins]),
        "rejoin_causes": dict(Counter(cause for _, _, cause in events.rejoins)),
        "membership_errors": dict(Counter(e for _, e in events.membership_errors)),
        "false_expiries": len(events.false_expiries),
        "expiries_after_silence": len(events.expiries),
    }


def _capacity_figures(
    m: _Measured, steps: list[tuple[float, float, float, float]]
) -> dict[str, Any]:
    """Per offered rate: the rates sent and answered, the latency of the requests sent at it,
    the backlog's slope; the capacity is the highest rate of the unbroken run of sustained
    rates from the first (steady backlog, p99 <= :data:`CAPACITY_P99_MS`)."""
    rows = []
    capacity: float | None = None
    broken = False
    for rate, start, end, load_cores in steps:
        span = max(end - start, 1e-9)
        latencies = [1000.0 * (r - s) for s, r in m.answered if start <= s < end]
        # Requests sent at this rate and never answered count as slower than any answered.
        unanswered = sum(1 for s in m.sent if start <= s < end) - len(latencies)
        latencies += [math.inf] * max(unanswered, 0)
        slope = _slope([(t - start, float(n)) for t, n in m.outstanding if start <= t < end])
        p99 = _nearest_rank(latencies, 99)
        steady = slope is not None and slope <= GROWTH_SHARE * rate
        sustained = steady and p99 is not None and p99 <= CAPACITY_P99_MS
        if sustained and not broken:
            capacity = rate
        broken = broken or not sustained
        rows.append(
            {
                "rate_per_s": rate,
                "offered_per_s": round(sum(1 for s in m.sent if start <= s < end) / span, 1),
                "answered_per_s": round(
                    sum(1 for _, r in m.answered if start <= r < end) / span, 1
                ),
                "latency_ms": _spread([x for x in latencies if x != math.inf], 50, 99)
                | {"p99_all": None if p99 is None or p99 == math.inf else round(p99, 1)},
                "unanswered": max(unanswered, 0),
                "backlog_slope_per_s": _round(slope),
                "steady": steady,
                "sustained": sustained,
                "load_cpu_cores": round(load_cores, 2),
            }
        )
    return {"steps": rows, "capacity_per_s": capacity, "p99_goal_ms": CAPACITY_P99_MS}


def _nearest_rank(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile by nearest rank (defined for infinite values too); None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100.0 * len(ordered)) - 1)]


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


# --- the run ----------------------------------------------------------------------------------


def stream_bench(
    options: StreamBenchOptions,
    spark: Any | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run every mode of ``options`` in turn on ``spark`` (or on a session started here and
    stopped afterwards); returns the figures (see :func:`format_report`)."""
    tell = say or (lambda _: None)
    own_session = spark is None
    if spark is None:
        tell("starting Spark")
        spark = job.spark_session(load_settings([], shards=options.shards))
    keep = options.warehouse is not None
    if options.warehouse is not None:
        root = Path(options.warehouse).absolute() / time.strftime("bench-%Y%m%d-%H%M%S")
        root.mkdir(parents=True)
    else:
        root = Path(tempfile.mkdtemp(prefix="coordinator-bench-"))
    try:
        modes = {
            mode: run_mode(
                spark, mode, options, root, tell, options.warmup_seconds * (2 if i == 0 else 1)
            )
            for i, mode in enumerate(options.modes)
        }
    finally:
        if own_session:
            job.stop_session(spark, 60.0)  # the data source's daemons first: a quiet stop
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    settings = asdict(options)
    settings["modes"] = list(options.modes)
    settings["offered_per_s"] = options.offered_per_s
    return {
        "options": settings,
        "warehouse": str(root) if keep else None,
        "modes": modes,
        "ratios": ratios(modes),
        "capacity": capacity_ratios(modes),
    }


def capacity_ratios(modes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """With ``--capacity``: each mode's capacity over the stateless floor's, with the goal
    (at least :data:`CAPACITY_GOAL_SHARE` for the job's modes)."""
    base = (modes.get(STATELESS) or {}).get("capacity", {}).get("capacity_per_s")
    out: dict[str, dict[str, Any]] = {}
    for mode, figures in modes.items():
        capacity = (figures.get("capacity") or {}).get("capacity_per_s")
        if mode == STATELESS or "capacity" not in figures:
            continue
        ratio = None if capacity is None or not base else round(capacity / base, 3)
        goal = None if mode in FLOORS else CAPACITY_GOAL_SHARE
        met = None if ratio is None or goal is None else ratio >= goal
        out[mode] = {"capacity_per_s": capacity, "ratio": ratio, "goal": goal, "met": met}
    return out


def ratios(modes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each job mode's latency p50/p99 and throughput over the floor's, with the goals."""
    floor = modes.get(FLOOR)
    if floor is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for mode, figures in modes.items():
        if mode in FLOORS:
            continue
        pairs = {
            "latency_p50": (figures["latency_ms"]["p50"], floor["latency_ms"]["p50"]),
            "latency_p99": (figures["latency_ms"]["p99"], floor["latency_ms"]["p99"]),
            "throughput": (figures["answered_per_s"], floor["answered_per_s"]),
        }
        out[mode] = {}
        for name, (value, base) in pairs.items():
            ratio = None if value is None or not base else round(value / base, 3)
            op, limit = GOALS[name]
            met = None if ratio is None else (ratio <= limit if op == "<=" else ratio >= limit)
            out[mode][name] = {"ratio": ratio, "goal": f"{op} {limit}", "met": met}
    return out


def _cell(value: Any, width: int) -> str:
    text = "-" if value is None else f"{value:,.0f}" if isinstance(value, float) else str(value)
    return text.rjust(width)


def format_report(result: dict[str, Any]) -> str:
    o = result["options"]
    if o["capacity_rates"]:
        rates = ", ".join(f"{r:,.0f}" for r in o["capacity_rates"])
        load = (
            f"capacity steps: members in turn at {rates} requests/s, {o['seconds']:g} s each, "
            f"until a backlog grows"
        )
    elif o["overload_capacity"] is not None:
        capacity = o["overload_capacity"]
        load = (
            f"overload: members in turn at {capacity / 2:,.0f} requests/s (warm-up), "
            f"{2 * capacity:,.0f}/s for {o['seconds']:g} s, then {capacity / 2:,.0f}/s for "
            f"{o['recover_seconds']:g} s (capacity {capacity:,.0f}/s)"
        )
    elif o["heartbeat_ms"] == 0:
        load = "closed loop (each member heartbeats again once answered)"
    else:
        load = (
            f"heartbeat every {o['heartbeat_ms']} ms ({o['offered_per_s']:,.1f} requests/s offered)"
        )
    first = next(iter(result["modes"].values()))
    lines = [
        f"stream benchmark: {o['groups']} groups x {o['members']} members, {load}",
        f"  {o['seconds']:g} s measured after {o['warmup_seconds']:g} s of warm-up (first mode "
        f"{2 * o['warmup_seconds']:g} s); "
        f"trigger {first['trigger_interval_ms']} ms, {first['shards']} shards; "
        f"latency = file renamed into the inbox -> response readable in the table",
        "  state store, rows per Arrow batch: "
        + ", ".join(
            f"{mode} {f.get('state_store') or 'hdfs'}, {f.get('arrow_batch') or 'default'}"
            for mode, f in result["modes"].items()
        ),
        "",
        f"{'mode':<6} {'req/s':>7} {'lat p50':>8} {'p95':>6} {'p99':>6} {'batch p50':>10} "
        f"{'p99':>6} {'period':>7} {'resp/batch':>10} {'late fired p50':>15} {'p99':>6} "
        f"{'visible p50':>12} {'p99':>6} {'backlog/s':>9} {'unanswered':>10}",
    ]
    for mode, f in result["modes"].items():
        late = f["lateness_ms"] or {"fired": {}, "visible": {}}
        b = f["batches"]
        lines.append(
            f"{mode:<6} {_cell(f['answered_per_s'], 7)} {_cell(f['latency_ms']['p50'], 8)} "
            f"{_cell(f['latency_ms']['p95'], 6)} {_cell(f['latency_ms']['p99'], 6)} "
            f"{_cell(b['duration_ms']['p50'], 10)} {_cell(b['duration_ms']['p99'], 6)} "
            f"{_cell(b['period_ms'], 7)} {_cell(b['responses_per_batch'], 10)} "
            f"{_cell(late['fired'].get('p50'), 15)} {_cell(late['fired'].get('p99'), 6)} "
            f"{_cell(late['visible'].get('p50'), 12)} {_cell(late['visible'].get('p99'), 6)} "
            f"{_cell(f['backlog']['slope_per_s'], 9)} "
            f"{_cell(f['backlog']['unanswered_after_drain'], 10)}"
        )
    lines.append("  (times in ms; late = session deadline -> the batch that expired it, and ->")
    lines.append(
        "   its consumer_offsets record readable; backlog/s = slope of outstanding requests)"
    )
    for mode, f in result["modes"].items():
        notes = [f"answered {f['answered_per_s']:,.1f}/s of {f['offered_per_s']:,.1f}/s sent"]
        growing = f["backlog"]["growing"]
        notes.append("backlog GROWING" if growing else "backlog steady")
        if f["formed_s"] is not None:
            notes.append(f"groups formed in {f['formed_s']:g} s")
        late = f["lateness_ms"]
        if late is not None:
            notes.append(f"{late['fired']['count']} expiries")
            within = late["goal_p99_within_period"]
            if within is not None:
                notes.append(
                    f"expiry fired p99 {late['fired']['p99']:,.0f} ms "
                    f"{'within' if within else 'NOT within'} one batch period "
                    f"(p50 {f['batches']['period_ms']:,.0f} ms)"
                )
            if late["probe_failures"]:
                notes.append(f"probe failures {late['probe_failures']}")
        other = {k: v for k, v in f["errors"].items() if k != "NONE"}
        if other:
            notes.append(f"heartbeat errors {other}")
        lines.append(f"  {mode}: " + "; ".join(notes))
        members = f.get("membership")
        if members is not None:
            by, rj = members["rebalances_by_phase"], members["rejoins_by_phase"]
            causes = ", ".join(f"{c} {n:,}" for c, n in sorted(members["rejoin_causes"].items()))
            lines.append(
                f"    members: {members['rebalances']:,} rebalances in "
                f"{members['groups_rebalanced']:,} groups ({by['before_window']:,} while forming"
                f" and warming up, {by['window']:,} measured, {by['after_window']:,} after); "
                f"{members['rejoins']:,} rejoins by {members['members_rejoined']:,} members "
                f"({rj['before_window']:,} / {rj['window']:,} / {rj['after_window']:,}"
                + (f"; {causes}" if causes else "")
                + f"); {members['expiries_after_silence']:,} expiries after a silence"
            )
        overload = f.get("overload")
        if overload is not None:
            for phase in overload["phases"]:
                latency = phase["latency_ms"]
                lines.append(
                    f"    {phase['phase']} for {phase['seconds']:g} s: offered "
                    f"{phase['offered_per_s']:,.0f}/s, answered {phase['answered_per_s']:,.0f}/s, "
                    f"latency p50 {_cell(latency['p50'], 1).strip()} ms, p99 "
                    f"{_cell(latency['p99'], 1).strip()} ms, false expiries "
                    f"{phase['false_expiries']:,}, rebalances {phase['rebalances']:,}, rejoins "
                    f"{phase['rejoins']:,}"
                )
            verdict = "ok" if overload["goal_no_false_expiry"] else "MISSED"
            lines.append(
                f"    false expiries in the whole run (heartbeats answered UNKNOWN_MEMBER_ID "
                f"although the member had heartbeated within its session since its latest "
                f"join): {overload['false_expiries']:,} "
                f"({overload['members_falsely_expired']:,} members; goal 0) {verdict}"
            )
        capacity = f.get("capacity")
        if capacity is not None:
            for step in capacity["steps"]:
                latency = step["latency_ms"]
                p99 = latency["p99_all"]
                lines.append(
                    f"    {step['rate_per_s']:>9,.0f}/s offered: sent {step['offered_per_s']:,.0f}/s,"
                    f" answered {step['answered_per_s']:,.0f}/s, latency p50 "
                    f"{_cell(latency['p50'], 1).strip()} ms, p99 "
                    f"{'unanswered' if p99 is None and step['unanswered'] else _cell(p99, 1).strip()}"
                    f" ms, backlog {_cell(step['backlog_slope_per_s'], 1).strip()}/s, the load"
                    f" {step['load_cpu_cores']:.2f} cores: "
                    f"{'sustained' if step['sustained'] else 'NOT sustained'}"
                )
            best = capacity["capacity_per_s"]
            lines.append(
                f"    capacity: {'-' if best is None else f'{best:,.0f}'} requests/s (the highest"
                f" rate with a steady backlog and p99 <= {capacity['p99_goal_ms']:,.0f} ms)"
            )
    if result.get("capacity"):
        lines += ["", "capacity over the stateless floor's (the job's goal beside it)"]
        for mode, c in result["capacity"].items():
            ratio = "-" if c["ratio"] is None else f"{c['ratio']:.2f}x"
            goal = "" if c["goal"] is None else f" (goal >= {c['goal']}x)"
            verdict = "" if c["met"] is None else (" ok" if c["met"] else " MISSED")
            best = "-" if c["capacity_per_s"] is None else f"{c['capacity_per_s']:,.0f}/s"
            lines.append(f"  {mode:<11} {best} = {ratio}{goal}{verdict}")
    if result["ratios"]:
        lines += ["", "ratios to the floor (goal beside each)"]
        for mode, figures in result["ratios"].items():
            cells = []
            for name, r in figures.items():
                ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
                verdict = "" if r["met"] is None else ("ok" if r["met"] else "MISSED")
                cells.append(f"{name} {ratio} (goal {r['goal']}x) {verdict}".rstrip())
            lines.append(f"  {mode:<6} " + "   ".join(cells))
        if o["heartbeat_ms"] > 0:
            lines.append(
                "  (throughput is the offered load unless a backlog grows: run with "
                "--heartbeat-ms 0 to measure capacity)"
            )
        else:
            lines.append(
                "  (closed loop: throughput = members in flight / round trip; it measures "
                "capacity only with enough members to fill every batch)"
            )
    if result["warehouse"]:
        lines.append(f"warehouses kept under {result['warehouse']}")
    return "\n".join(lines)


def stderr(message: str) -> None:
    print(f"bench stream: {message}", file=sys.stderr, flush=True)
