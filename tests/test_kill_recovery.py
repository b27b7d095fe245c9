"""Crash recovery, tested by killing.

The job runs as a subprocess (``python -m coordinator run``) in its own session, under a steady
workload of live :class:`GroupMember`s over :class:`StreamTransport` in this process: two
groups of three members heartbeating and committing, a third group whose second member leaves
and is replaced every few seconds (so that ``group_history`` and ``group_state`` are written
often), and now and then a line with no request id (for ``rejected_requests``). The driver is
``kill -9``ed again and again and restarted on the same warehouse and checkpoint:

- at a random wall-clock moment after the job reports it started (the first batch then is
  usually Spark's replay of the interrupted one, so some kills land in a recovery);
- at a targeted point, through the job's test-only fault hook (``job.FAULT_ENV``): right after
  one table's commit of a batch (``consumer_offsets``, ``rejected_requests``,
  ``group_history``, ``group_state``, ``responses``: mid-write), or after the whole batch is
  written but before Spark commits it (``write``).

What survives a SIGKILL of the Python driver: the JVM (``spark-submit``, same process group)
exits by itself within about a second, when its gateway sees the driver's pipe close, and the
Python worker daemon (its own process group, same session) follows the JVM. A wall-clock kill
therefore SIGKILLs the driver and then every other process of its session at once; after a
hook's kill (the driver kills only itself) the test notes what was still alive, gives it two
seconds, then SIGKILLs the rest of the session too. No process of a killed run ever overlaps
the next one.

Every commit carries offsets unique per partition (a counter), so an acknowledged commit can be
found in the log. At the end (a clean restart, a quiet period, a last acknowledged commit of
every partition) the checks are: every response in ``responses`` once, and every response a
member received there exactly once; every acknowledged commit in ``consumer_offsets`` exactly
once and no commit twice; ``offset_fetch`` through the job returns the latest acknowledged
offset of every partition, which is also the last one in the log; log offsets contiguous from
0 per offsets partition; every rejected line once; no Delta commit of any table repeats an app
transaction (app id, batch id); every group Stable with the members that kept running (rejoins
through normal rebalances are counted). The summary is printed and, when
``COORDINATOR_KILL_REPORT`` names a path, written there as JSON.

``COORDINATOR_KILLS`` changes the number of kills (default 7: one wall-clock kill of the first
run, then each target once; more kills add wall-clock kills between the targets, which then
often land in a recovery, and go round the targets again; targets a run did not reach in time
are tried again, up to four more runs). The default keeps every kill point in every run of
``make test``; a long hunt is ``COORDINATOR_KILLS=40``.

The members are plain ``GroupMember``s. This test found that they did not reset their session
timer on finding the coordinator, as Kafka's ``AbstractCoordinator`` does: after an outage longer
than ``session.timeout.ms`` (which replayed batches make likelier: a replay keeps the batch's
first timestamp) a member would find the coordinator, forget it on the next tick and look it up
again, forever (fixed in ``coordinator/client/member.py``).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from coordinator.bench.soak import kill_session, session_processes
from coordinator.client.assignors import TopicPartition
from coordinator.client.member import GroupMember, MemberConfig, MemberState
from coordinator.client.transport import SystemClock
from coordinator.stream.client import ResponseReader, StreamClient
from coordinator.stream.job import FAULT_ENV
from coordinator.stream.schema import TABLES, Warehouse, response_request_id
from coordinator.stream.transport import StreamTransport

pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("COORDINATOR_KILLS", "7"))
REPORT_ENV = "COORDINATOR_KILL_REPORT"

WALL_CLOCK = "wall-clock"
#: The hook's points and the chance per batch of dying there (group_history, group_state and
#: rejected_requests are written in fewer batches than the others). Not 1: the run should get
#: some batches done first, and the kill should not always hit a restart's first batch.
TARGETS: dict[str, float] = {
    "after:consumer_offsets": 0.3,
    "after:rejected_requests": 0.5,
    "after:group_history": 0.5,
    "after:group_state": 0.5,
    "after:responses": 0.2,
    "after:write": 0.2,
}
#: A wall-clock kill comes this long after the job reports it started its query (s): some in
#: the first batch (usually Spark's replay of the interrupted one), most after it.
WALL_CLOCK_DELAY_S = (0.5, 10.0)
#: A targeted run not dead this long after it started its query is killed then, as a wall-clock
#: kill (and its target is tried again on a later run).
TARGET_PATIENCE_S = 40.0
#: Extra runs allowed for targets that a run did not reach.
EXTRA_TARGET_RUNS = 4

STARTUP_TIMEOUT_S = 240.0
SESSION_MS = 60_000
HEARTBEAT_MS = 1_500
REBALANCE_MS = 30_000
REQUEST_TIMEOUT_MS = 60_000
COMMIT_EVERY_S = 1.0
CHURN_AFTER_STABLE_S = 3.0
GARBAGE_EVERY_S = 4.0

STEADY_GROUPS = {"kill-a": ("orders", 6), "kill-b": ("payments", 6)}
CHURN_GROUP, CHURN_TOPIC = "kill-churn", ("audit", 2)
MEMBERS_PER_GROUP = 3


# --- the job as a process ---------------------------------------------------------------------


def kind_of(cmdline: str) -> str:
    if not cmdline.strip():
        return "exiting (no command line left)"
    if "java" in cmdline.split(" ", 1)[0]:
        return "jvm"
    if "pyspark.daemon" in cmdline:
        return "python-worker"
    if "coordinator" in cmdline:
        return "driver"
    return "other"


class JobProcess:
    """``python -m coordinator run`` in its own session (its pid is the session id)."""

    def __init__(self, warehouse: Path, conf: Path, logs: Path, extra: Sequence[str] = ()) -> None:
        self.warehouse = warehouse
        #: More ``coordinator run`` arguments (a master, ``--set`` settings).
        self.extra = list(extra)
        self.conf = conf
        self.logs = logs
        self.runs = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.started_at = 0.0
        self.ready_at: float | None = None
        #: What was still alive when the test found the driver dead by the hook's hand.
        self.survivors: Counter[str] = Counter()

    def start(self, fault: str | None) -> None:
        assert self.proc is None
        self.runs += 1
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        env.pop(FAULT_ENV, None)
        if fault is not None:
            env[FAULT_ENV] = fault
        self.log_path = self.logs / f"job-{self.runs:02d}.log"
        command = [
            sys.executable,
            "-m",
            "coordinator",
            "run",
            "--warehouse",
            str(self.warehouse),
            "--conf",
            str(self.conf),
            "--trigger-interval",
            "200",
            "--shards",
            "2",
            *self.extra,
        ]
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.started_at = time.monotonic()
        self.ready_at = None

    def log_text(self) -> str:
        assert self.log_path is not None
        return self.log_path.read_text(errors="replace")

    def ready(self) -> bool:
        """Whether the query has started (the job logs it once ``start`` returns)."""
        if self.ready_at is None and "coordinator started on" in self.log_text():
            self.ready_at = time.monotonic()
        return self.ready_at is not None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """``kill -9`` the driver, then every other process of its session."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self._sweep()

    def reap_crashed(self) -> int:
        """After the hook's SIGKILL of the driver: note what survived it, let it go, then kill
        what is left. Returns the driver's exit status."""
        assert self.proc is not None
        status = self.proc.wait()
        for cmdline in session_processes(self.proc.pid).values():
            kind = kind_of(cmdline)
            self.survivors[kind if kind != "other" else f"other: {cmdline[:60]}"] += 1
        deadline = time.monotonic() + 2
        while session_processes(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._sweep()
        return status

    def stop(self) -> int | None:
        """A clean stop (SIGINT to the driver, as Ctrl-C), then nothing left of the session."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
        status = self.proc.returncode
        self._sweep()
        return status

    def _sweep(self) -> None:
        assert self.proc is not None
        kill_session(self.proc)
        self.proc = None


# --- the workload -----------------------------------------------------------------------------


class RecordingClient(StreamClient):
    """A StreamClient that remembers every response it handed over (a real one: the
    transport's own timeouts never pass through here)."""

    def __init__(self, warehouse: Path) -> None:
        super().__init__(warehouse)
        self.received: set[str] = set()
        self.submitted: set[str] = set()

    def submit(self, requests: Iterable[Mapping[str, Any]]) -> list[Any]:
        ids = super().submit(requests)
        self.submitted.update(str(response_request_id(i)) for i in ids)
        return ids

    def take(self, request_ids: Iterable[Any]) -> dict[Any, dict[str, Any]]:
        answers = super().take(request_ids)
        for request_id in answers:
            key = response_request_id(request_id)
            assert key is not None
            self.received.add(key)
        return answers


@dataclass
class Live:
    member: GroupMember
    group: str
    topic: str
    partitions: int
    next_commit: float = 0.0
    committing: bool = False
    stable_since: float | None = None
    member_ids: list[str] = field(default_factory=list)


Key = tuple[str, str, int]  # (group, topic, partition)


class Workload:
    def __init__(self, warehouse: Path) -> None:
        self.paths = Warehouse.at(warehouse)
        self.client = RecordingClient(warehouse)
        self.clock = SystemClock()
        self.transport = StreamTransport(self.client, self.clock, REQUEST_TIMEOUT_MS)
        self.live: list[Live] = []
        self.closed: list[GroupMember] = []  # kept: their request ids must stay unique
        self.names = Counter[str]()
        self.next_offset: Counter[Key] = Counter()
        self.commits_sent = 0
        self.acked: dict[Key, list[int]] = {}
        self.commit_errors: Counter[str] = Counter()
        self.churns = 0
        self.churning = True
        self.garbage: list[str] = []
        self.next_garbage = time.monotonic() + GARBAGE_EVERY_S
        self.next_poll = 0.0
        for group, (topic, partitions) in STEADY_GROUPS.items():
            for _ in range(MEMBERS_PER_GROUP):
                self.add(group, topic, partitions)
        self.add(CHURN_GROUP, *CHURN_TOPIC)
        self.add(CHURN_GROUP, *CHURN_TOPIC)

    def add(self, group: str, topic: str, partitions: int) -> Live:
        self.names[group] += 1
        member = GroupMember(
            group,
            [topic],
            self.transport,
            self.clock,
            metadata={topic: partitions},
            client_id=f"{group}-{self.names[group]}",
            assignors=["range"],
            config=MemberConfig(
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS,
                rebalance_timeout_ms=REBALANCE_MS,
            ),
        )
        live = Live(member, group, topic, partitions, next_commit=time.monotonic())
        self.live.append(live)
        return live

    def stable(self, live: Live) -> bool:
        m = live.member
        return m.state is MemberState.STABLE and not m.rejoin_needed

    def step(self) -> None:
        """One pass of every member's heartbeat thread and poll loop, commits, churn."""
        self.transport.deliver()
        now = time.monotonic()
        polling = now >= self.next_poll
        if polling:
            self.next_poll = now + 0.2
        for live in list(self.live):
            member = live.member
            member.tick()
            if polling:
                member.poll()
            if member.member_id and (
                not live.member_ids or live.member_ids[-1] != member.member_id
            ):
                live.member_ids.append(member.member_id)
            if self.stable(live):
                live.stable_since = live.stable_since or now
            else:
                live.stable_since = None
            coordinator = live.member.coordinator is not None
            if (
                self.stable(live)
                and coordinator
                and not live.committing
                and now >= live.next_commit
            ):
                self.commit(live)
        self.churn(now)
        if now >= self.next_garbage:
            self.next_garbage = now + GARBAGE_EVERY_S
            self.drop_garbage()
        self.transport.flush()

    def commit(self, live: Live, on_done: Callable[[bool], None] | None = None) -> bool:
        """One commit of every partition the member owns, each at the next counter value
        (False: it owns none, nothing sent)."""
        offsets = {}
        for tp in live.member.assignment:
            key = (live.group, tp.topic, tp.partition)
            self.next_offset[key] += 1
            offsets[tp] = self.next_offset[key]
        if not offsets:
            return False
        live.committing = True
        self.commits_sent += 1

        def done(committed: Mapping[TopicPartition, int] | None, error: Exception | None) -> None:
            live.committing = False
            live.next_commit = time.monotonic() + COMMIT_EVERY_S
            if error is None:
                for tp, offset in offsets.items():
                    self.acked.setdefault((live.group, tp.topic, tp.partition), []).append(offset)
            else:
                self.commit_errors[type(error).__name__] += 1
            if on_done is not None:
                on_done(error is None)

        live.member.commit(offsets, done)
        return True

    def churn(self, now: float) -> None:
        """The churn group's newest member leaves after a few stable seconds; a new one joins."""
        if not self.churning:
            return
        churner = [live for live in self.live if live.group == CHURN_GROUP][-1]
        if churner.stable_since is None or now - churner.stable_since < CHURN_AFTER_STABLE_S:
            return
        if churner.committing:
            return
        churner.member.close()
        self.live.remove(churner)
        self.closed.append(churner.member)
        self.churns += 1
        self.add(CHURN_GROUP, *CHURN_TOPIC)

    def drop_garbage(self) -> None:
        """A line with no request id: the job puts it in rejected_requests."""
        line = f"garbage line {len(self.garbage)} of the kill test"
        name = f"{int(time.time() * 1000):013d}-kill-test-garbage-{len(self.garbage):06d}.jsonl"
        temp = self.paths.inbox / f".{name}.tmp"
        self.paths.inbox.mkdir(parents=True, exist_ok=True)
        temp.write_text(line + "\n")
        os.rename(temp, self.paths.inbox / name)
        self.garbage.append(line)

    def groups_stable(self) -> bool:
        """Every group's live members Stable in one generation, owning all its partitions."""
        for group in [*STEADY_GROUPS, CHURN_GROUP]:
            members = [live for live in self.live if live.group == group]
            if not all(self.stable(live) for live in members):
                return False
            if len({live.member.generation_id for live in members}) != 1:
                return False
            topic, partitions = members[0].topic, members[0].partitions
            owned = sorted(tp for live in members for tp in live.member.assignment)
            if owned != [TopicPartition(topic, p) for p in range(partitions)]:
                return False
        return True

    def describe(self) -> str:
        """Every live member's view, for failure messages."""
        lines = []
        for live in self.live:
            m = live.member
            lines.append(
                f"{m.client_id}: {m.state.value} generation {m.generation_id} rejoin "
                f"{m.rejoin_needed} coordinator {m.coordinator} owns {len(m.assignment)} "
                f"committing {live.committing}; last events {m.events[-4:]}"
            )
        return "\n".join(lines)

    def pump(self, seconds: float, until: Callable[[], bool] | None = None) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.step()
            if until is not None and until():
                return True
            time.sleep(0.05)
        return until is None


# --- the tables -------------------------------------------------------------------------------


def table(warehouse: Warehouse, name: str) -> pa.Table:
    return pa.table(DeltaTable(str(warehouse.table(name))).to_pyarrow_table())


def wait_for_answers(warehouse: Warehouse, request_ids: set[str], timeout_s: float) -> set[str]:
    """The ids among ``request_ids`` that have no row in ``responses`` after ``timeout_s``."""
    reader = ResponseReader(warehouse.table("responses"), start_version=0)
    missing = set(request_ids)
    deadline = time.monotonic() + timeout_s
    while missing and time.monotonic() < deadline:
        missing -= {row["request_id"] for row in reader.poll()}
        time.sleep(0.2)
    return missing


def repeated_app_transactions(warehouse: Warehouse) -> dict[str, int]:
    """Per table, how many (app id, batch id) transactions appear in more than one commit."""
    repeated: dict[str, int] = {}
    for name in TABLES:
        log = warehouse.table(name) / "_delta_log"
        seen: Counter[tuple[str, int]] = Counter()
        for commit in sorted(log.glob("*.json")):
            for line in commit.read_text().splitlines():
                txn = json.loads(line).get("txn") if line.strip() else None
                if txn is not None:
                    seen[(txn["appId"], txn["version"])] += 1
        repeated[name] = sum(1 for n in seen.values() if n > 1)
    return repeated


# --- the test ---------------------------------------------------------------------------------


def kill_schedule(kills: int, targets_odds: Mapping[str, float] = TARGETS) -> list[str]:
    """Every target once (then again in turn), wall-clock kills spread among them. The first
    kill is a wall-clock one: the first run is started without a kill point, so that the
    groups form."""
    targets = list(targets_odds)
    walls = max(kills - len(targets), 1)
    picked = [targets[i % len(targets)] for i in range(kills - walls)]
    schedule: list[str] = []
    for i in range(walls):
        schedule.append(WALL_CLOCK)
        schedule.extend(picked[i * len(picked) // walls : (i + 1) * len(picked) // walls])
    return schedule


def test_the_job_survives_repeated_kill_9_exactly_once(tmp_path: Path) -> None:
    kill_loop(tmp_path, KILLS)


def kill_loop(
    tmp_path: Path,
    kills_wanted: int,
    targets: Mapping[str, float] = TARGETS,
    job_args: Sequence[str] = (),
) -> dict[str, Any]:
    """The test: ``kills_wanted`` kills (every one of ``targets`` at least once, the rest
    wall-clock) of ``coordinator run`` with ``job_args``, then the checks; returns the
    report. After the checks, one vacuum of every table keeps exactly the files the tables
    reference: whatever a killed batch wrote and never committed goes with it."""
    began = time.monotonic()
    rng = random.Random()
    warehouse_dir = tmp_path / "warehouse"
    conf = tmp_path / "kill-test.properties"
    conf.write_text("group.initial.rebalance.delay.ms=0\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    job = JobProcess(warehouse_dir, conf, logs, job_args)
    load = Workload(warehouse_dir)
    warehouse = load.paths
    kills: Counter[str] = Counter()
    fallbacks: Counter[str] = Counter()
    timeline: list[dict[str, Any]] = []
    downtime: list[float] = []

    def wait_ready(what: str) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not job.ready():
            if not job.alive():
                return  # died in its first batch (the hook); the caller sees it
            assert time.monotonic() < deadline, f"{what}: no start in {STARTUP_TIMEOUT_S} s"
            load.pump(0.2)

    try:
        job.start(None)
        wait_ready("first start")
        assert load.pump(240, load.groups_stable), f"the groups did not form:\n{load.describe()}"
        schedule = kill_schedule(kills_wanted, targets)
        extra = 0
        while schedule:
            kind = schedule.pop(0)
            if job.proc is None:
                job.start(None if kind == WALL_CLOCK else f"{kind}:{targets[kind]}")
                wait_ready(f"run {job.runs}")
            started = job.started_at
            if kind == WALL_CLOCK:
                load.pump(rng.uniform(*WALL_CLOCK_DELAY_S), lambda: not job.alive())
                if not job.alive():
                    pytest.fail(f"the job died on its own:\n{job.log_text()[-3000:]}")
                job.kill()
                done = WALL_CLOCK
            else:
                if job.ready_at is not None:
                    load.pump(TARGET_PATIENCE_S, lambda: not job.alive())
                if job.alive():
                    job.kill()
                    done = WALL_CLOCK
                    fallbacks[kind] += 1
                    if extra < EXTRA_TARGET_RUNS:
                        extra += 1
                        schedule.append(kind)
                else:
                    status = job.reap_crashed()
                    text = job.log_text()
                    point = kind.split(":", 1)[1]
                    assert status == -signal.SIGKILL, text[-3000:]
                    hit = re.search(f"fault injection: SIGKILL after {point} of batch (\\d+)", text)
                    assert hit is not None, text[-3000:]
                    done = kind
                    batch = int(hit.group(1))
            kills[done] += 1
            killed_at = time.monotonic()
            timeline.append(
                {"run": job.runs, "kind": done, "after_start_s": round(killed_at - started, 1)}
            )
            if done != WALL_CLOCK:
                timeline[-1]["batch"] = batch
            # Straight back up on the same warehouse and checkpoint (the next run's kind picks
            # the hook), or, after the last kill, a clean start.
            next_kind = schedule[0] if schedule else None
            job.start(
                None if next_kind in (None, WALL_CLOCK) else f"{next_kind}:{targets[next_kind]}"
            )
            wait_ready(f"run {job.runs}")
            if job.ready_at is not None:
                downtime.append(job.ready_at - killed_at)
                timeline[-1]["restarted_in_s"] = round(job.ready_at - killed_at, 1)

        # The final clean run: no more churn, a quiet period until every group is Stable.
        assert job.proc is not None and job.alive() and job.ready_at is not None
        final_run = job.runs
        load.churning = False
        settled = load.pump(180, load.groups_stable)
        assert settled, f"the groups did not settle after the kills:\n{load.describe()}"
        load.pump(3)
        assert load.groups_stable(), f"the groups did not stay Stable:\n{load.describe()}"
        # Wait for commits in flight, then one last acknowledged commit of every partition.
        assert load.pump(90, lambda: not any(live.committing for live in load.live))
        final_acks: list[bool] = []
        sent = sum(load.commit(live, final_acks.append) for live in load.live)
        assert load.pump(90, lambda: len(final_acks) == sent)
        assert all(final_acks), f"a final commit failed: {load.commit_errors}"
        fetched: dict[Key, int] = {}
        described: dict[str, dict[str, Any]] = {}
        for group in [*STEADY_GROUPS, CHURN_GROUP]:
            answer = load.client.request(
                {
                    "api": "offset_fetch",
                    "request_id": f"final-fetch-{group}",
                    "group_id": group,
                    "partitions": None,
                },
                timeout_s=60,
            )
            assert answer["error"] is None, answer
            for p in answer["partitions"]:
                fetched[(group, p["topic"], p["partition"])] = p["offset"]
            described[group] = load.client.request(
                {
                    "api": "describe_groups",
                    "request_id": f"final-describe-{group}",
                    "group_id": group,
                },
                timeout_s=60,
            )
        # Every request ever written to the inbox gets its answer, the timed-out ones included.
        unanswered = wait_for_answers(warehouse, load.client.submitted, 120)
        stop_status = job.stop()
    finally:
        if job.proc is not None:
            job.stop()

    # --- the checks ---------------------------------------------------------------------------
    responses = table(warehouse, "responses")
    response_ids = Counter(responses.column("request_id").to_pylist())
    duplicate_responses = {rid: n for rid, n in response_ids.items() if n > 1}
    lost_responses = sorted(rid for rid in load.client.received if rid not in response_ids)

    log = table(warehouse, "consumer_offsets")
    commits = log.filter(pa.compute.equal(log.column("record_type"), "offset_commit"))
    in_log = Counter(
        zip(
            commits.column("group_id").to_pylist(),
            commits.column("topic").to_pylist(),
            commits.column("partition").to_pylist(),
            commits.column("committed_offset").to_pylist(),
            strict=True,
        )
    )
    duplicate_commits = {k: n for k, n in in_log.items() if n > 1}
    acknowledged = [(*key, o) for key, offsets in load.acked.items() for o in offsets]
    lost_commits = [c for c in acknowledged if in_log[c] != 1]

    gaps = {}
    last_in_log: dict[Key, tuple[int, int, int]] = {}
    rows = log.select(
        [
            "offsets_partition",
            "offset",
            "record_type",
            "group_id",
            "topic",
            "partition",
            "committed_offset",
        ]
    ).to_pylist()
    by_partition: dict[int, list[int]] = {}
    for row in rows:
        by_partition.setdefault(row["offsets_partition"], []).append(row["offset"])
        if row["record_type"] == "offset_commit":
            key = (row["group_id"], row["topic"], row["partition"])
            position = (row["offsets_partition"], row["offset"])
            if key not in last_in_log or last_in_log[key][:2] < position:
                last_in_log[key] = (*position, row["committed_offset"])
    for partition, offsets in by_partition.items():
        if sorted(offsets) != list(range(len(offsets))):
            gaps[partition] = len(set(range(max(offsets) + 1)) - set(offsets))

    latest_acked = {key: max(offsets) for key, offsets in load.acked.items()}
    fetch_mismatches = {
        key: (fetched.get(key), offset, last_in_log.get(key, (0, 0, None))[2])
        for key, offset in latest_acked.items()
        if fetched.get(key) != offset or last_in_log.get(key, (0, 0, None))[2] != offset
    }

    rejected = Counter(table(warehouse, "rejected_requests").column("raw").to_pylist())
    garbage_wrong = {line: rejected[line] for line in load.garbage if rejected[line] != 1}

    repeated_txns = repeated_app_transactions(warehouse)

    state = {row["group_id"]: row for row in table(warehouse, "group_state").to_pylist()}
    group_problems = {}
    for group in [*STEADY_GROUPS, CHURN_GROUP]:
        expected = sorted(live.member.member_id for live in load.live if live.group == group)
        row = state.get(group)
        seen = sorted(m["member_id"] for m in row["members"]) if row else None
        answer = described[group]
        listed = sorted(m["member_id"] for m in answer["members"])
        if not row or row["state"] != "Stable" or seen != expected:
            group_problems[group] = {"group_state": row and row["state"], "members": seen}
        if answer["group_state"] != "Stable" or listed != expected:
            group_problems[f"{group} (describe)"] = {
                "state": answer["group_state"],
                "members": listed,
                "expected": expected,
            }

    steady = [live for live in load.live if live.group in STEADY_GROUPS]
    joins = Counter(e[1] for live in load.live for e in live.member.events)
    replays = [
        f"run {run}: batch {hit.group(1)}: skipped {hit.group(2)}"
        for run in range(1, job.runs + 1)
        for hit in re.finditer(
            r"batch (\d+): .*\(replayed batch: skipped ([^)]*)\)",
            (logs / f"job-{run:02d}.log").read_text(errors="replace"),
        )
    ]
    report = {
        "kills": sum(kills.values()),
        "kills_by_kind": dict(sorted(kills.items())),
        "targets_not_reached_in_time": dict(fallbacks),
        "restarts": job.runs - 1,
        "final_clean_run": final_run,
        "restart_to_started_s": {
            "min": round(min(downtime), 1) if downtime else None,
            "max": round(max(downtime), 1) if downtime else None,
        },
        "alive_after_hook_sigkill_of_driver": dict(job.survivors),
        "replayed_batches_with_skipped_tables": replays,
        "requests_sent": load.transport.sent,
        "responses_in_table": responses.num_rows,
        "responses_received_by_members": len(load.client.received),
        "requests_written_to_the_inbox": len(load.client.submitted),
        "requests_never_answered": len(unanswered),
        "commits_sent": load.commits_sent,
        "acknowledged_commits_checked": len(acknowledged),
        "commit_errors": dict(load.commit_errors),
        "partitions_fetched_and_checked": len(latest_acked),
        "log_records": log.num_rows,
        "rejected_lines_checked": len(load.garbage),
        "churned_members": load.churns,
        "steady_members_rejoined_as_new": sum(len(live.member_ids) - 1 for live in steady),
        "member_events": dict(joins),
        "duplicates": {
            "responses": len(duplicate_responses),
            "commits": len(duplicate_commits),
            "rejected_lines": sum(1 for n in garbage_wrong.values() if n > 1),
            "app_transactions": sum(repeated_txns.values()),
        },
        "losses": {
            "responses": len(lost_responses),
            "requests_never_answered": len(unanswered),
            "acknowledged_commits": len(lost_commits),
            "rejected_lines": sum(1 for n in garbage_wrong.values() if n == 0),
            "log_offset_gaps": sum(gaps.values()),
            "offset_fetch_mismatches": len(fetch_mismatches),
        },
        "group_problems": group_problems,
        "final_stop_status": stop_status,
        "seconds": round(time.monotonic() - began, 1),
        "timeline": timeline,
    }
    # Last: files that killed writes left unreferenced go with one vacuum, and only those.
    report["unreferenced_files_vacuumed"] = {
        name: vacuum_everything_unreferenced(warehouse.table(name)) for name in TABLES
    }
    print("\nkill recovery:", json.dumps(report, indent=2))
    if os.environ.get(REPORT_ENV):
        Path(os.environ[REPORT_ENV]).write_text(json.dumps(report, indent=2) + "\n")

    assert sum(kills.values()) >= min(kills_wanted, 10)
    missing = [kind for kind in [WALL_CLOCK, *targets] if not kills[kind]]
    assert not missing, f"kill points never reached: {missing} ({report['kills_by_kind']})"
    assert not duplicate_responses, duplicate_responses
    assert not lost_responses, lost_responses[:20]
    assert not unanswered, sorted(unanswered)[:20]
    assert not duplicate_commits, duplicate_commits
    assert not lost_commits, lost_commits[:20]
    assert not gaps, gaps
    assert not fetch_mismatches, fetch_mismatches
    assert not garbage_wrong, garbage_wrong
    assert not any(repeated_txns.values()), repeated_txns
    assert not group_problems, group_problems
    assert acknowledged and len(load.client.received) > 0
    return report


def vacuum_everything_unreferenced(table_dir: Path) -> int:
    """Vacuum a table (full, no retention) and check that exactly the files its current
    version references are left; returns how many files went."""
    from coordinator.stream.sink import _vacuum

    table = DeltaTable(str(table_dir))
    before = data_files(table_dir)
    _vacuum(table, 0)
    left = data_files(table_dir)
    paths = pa.table(table.get_add_actions()).column("path").to_pylist()
    assert left == {unquote(p) for p in paths}, table_dir
    return len(before - left)


def data_files(table_dir: Path) -> set[str]:
    """Every parquet file in a table's directory, relative to it."""
    return {
        str(p.relative_to(table_dir))
        for p in table_dir.rglob("*.parquet")
        if "_delta_log" not in p.parts
    }
