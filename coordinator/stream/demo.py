"""``coordinator demo``: the Spark job on the embedded default, with live members.

Starts the job (``local[2]``, delta-rs, ``./warehouse/demo``), then three ``GroupMember``s over
the job's own transport (request files into the inbox, answers from the ``responses`` table).
They find the coordinator, join (KIP-394's two steps, then the initial rebalance delay), sync a
range assignment, heartbeat and commit. Then one member's process dies: no LeaveGroup, nothing
more sent. Its session runs out inside the job (a processing-time timeout, with no input for the
group), the group rebalances and the two survivors share its partitions and commit again.
Finally the timeline of the group as the ``responses`` table recorded it, and the tables.

A producer writes to the topic all along, each partition at its own rate; the coordinator holds
no topic data, so the demo samples the partitions' log-end offsets every second into
``<warehouse>/topic_offsets.csv`` (the operator's topic-offsets file, see
:mod:`coordinator.admin.topic_offsets`). A member commits the log end it has consumed up to,
never beyond it: ``notebooks/offsets_history.ipynb`` plots the lag from the two.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from coordinator.cli.timeline import Timeline, short_member_id
from coordinator.client.assignors import TopicPartition
from coordinator.client.member import GroupMember, MemberConfig
from coordinator.client.simulation import MemberLink
from coordinator.client.transport import SystemClock
from coordinator.stream import job
from coordinator.stream.client import ResponseReader, StreamClient, decode_response
from coordinator.stream.settings import Settings, load_settings
from coordinator.stream.transport import StreamTransport

GROUP = "demo-orders"
TOPIC = "orders"
PARTITIONS = 6
MARKER = ".coordinator-demo"
#: The producer's log-end samples, in the warehouse (a topic-offsets CSV).
TOPIC_OFFSETS = "topic_offsets.csv"
#: How long the group may take to form, or to rebalance (a minute is typical; a loaded machine
#: runs slower micro-batches).
SETTLE_S = 180


def prepare_warehouse(path: Path) -> None:
    """A fresh demo warehouse; refuses to wipe a directory the demo did not make."""
    if path.exists():
        if not (path / MARKER).exists() and any(path.iterdir()):
            raise ValueError(f"{path} exists and is not a demo warehouse; choose another")
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / MARKER).write_text("made by coordinator demo; wiped by the next one\n")


class Producer:
    """The topic's producer, as far as the demo needs one: partition ``p`` grows by
    ``5 + 3p`` messages a second from the demo's start. :meth:`sample` appends every
    partition's log-end offset at the wall-clock time (the job's clock) to a topic-offsets CSV."""

    COLUMNS = ("topic", "partition", "timestamp_ms", "log_start_offset", "log_end_offset")

    def __init__(self, path: Path, sample_every_s: float = 1.0) -> None:
        self.path = path
        self.sample_every_s = sample_every_s
        self.started = time.monotonic()
        self.next_sample = 0.0
        with path.open("w", newline="") as f:
            csv.writer(f).writerow(self.COLUMNS)

    def sample(self) -> dict[int, int]:
        """Every partition's log end now (also written as one sample row each)."""
        now = time.monotonic()
        at_ms = int(time.time() * 1000)
        log_end = {p: int((5 + 3 * p) * (now - self.started)) for p in range(PARTITIONS)}
        with self.path.open("a", newline="") as f:
            writer = csv.writer(f)
            for p, end in log_end.items():
                writer.writerow((TOPIC, p, at_ms, 0, end))
        self.next_sample = now + self.sample_every_s
        return log_end

    def tick(self) -> None:
        if time.monotonic() >= self.next_sample:
            self.sample()


class Demo:
    def __init__(self, settings: Settings, out: TextIO) -> None:
        self.settings = settings
        self.out = out
        self.clock = SystemClock()
        self.client = StreamClient(settings.job.paths.root)
        self.transport = StreamTransport(self.client, self.clock)
        self.links: dict[str, MemberLink] = {}
        self.members: dict[str, GroupMember] = {}
        self.started = time.monotonic()
        self.producer = Producer(settings.job.paths.root / TOPIC_OFFSETS)

    def say(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.started:6.1f} s] {text}\n")
        self.out.flush()

    def add_member(self, name: str) -> GroupMember:
        link = MemberLink(self.transport)
        member = GroupMember(
            GROUP,
            [TOPIC],
            link,
            self.clock,
            metadata={TOPIC: PARTITIONS},
            client_id=name,
            assignors=["range"],
            config=MemberConfig(session_timeout_ms=10_000, heartbeat_interval_ms=2_000),
        )
        self.links[name] = link
        self.members[name] = member
        return member

    def crash(self, name: str) -> None:
        self.links[name].alive = False
        del self.members[name]

    def pump(self, seconds: float, until: Callable[[], bool] | None = None) -> bool:
        """Drive the live members (heartbeat thread and poll loop) for up to ``seconds``."""
        end = time.monotonic() + seconds
        next_poll = 0.0
        while time.monotonic() < end:
            self.producer.tick()
            self.transport.deliver()
            now = time.monotonic()
            for member in self.members.values():
                member.tick()
                if now >= next_poll:
                    member.poll()
            if now >= next_poll:
                next_poll = now + 0.2
            self.transport.flush()
            if until is not None and until():
                return True
            time.sleep(0.05)
        return until is None

    def stable(self) -> bool:
        members = list(self.members.values())
        owned = sorted(tp for m in members for tp in m.assignment)
        return (
            all(m.state.value == "STABLE" and not m.rejoin_needed for m in members)
            and len({m.generation_id for m in members}) == 1
            and owned == [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        )

    def show_assignment(self) -> None:
        for name, member in sorted(self.members.items()):
            parts = ", ".join(str(tp.partition) for tp in member.assignment)
            self.say(
                f"  {name} ({short_member_id(member.member_id)}) generation {member.generation_id}: "
                f"{TOPIC} [{parts}]"
            )

    def commit_all(self) -> None:
        """Every member commits the log end of its partitions: it consumed all there was."""
        done: list[str] = []
        log_end = self.producer.sample()
        for name, member in self.members.items():
            offsets = {tp: log_end[tp.partition] for tp in member.assignment}

            def callback(committed: Any, error: Exception | None, name: str = name) -> None:
                done.append(name if error is None else f"{name}: {error}")

            member.commit(offsets, callback)
        self.pump(30, lambda: len(done) == len(self.members))
        self.say(f"commits acknowledged (the log holds them): {sorted(done)}")


def demo_settings(warehouse: Path) -> Settings:
    return load_settings([], warehouse=str(warehouse), trigger_interval_ms=200)


def run_demo(warehouse: Path, out: TextIO, verbose: bool = False, prepared: bool = False) -> int:
    """The whole demo on a session of its own; ``prepared``: the warehouse was already made
    afresh (:func:`prepare_warehouse`). Spark's log lines go to ``<warehouse>/logs/``."""
    if not prepared:
        prepare_warehouse(warehouse)
    settings = demo_settings(warehouse)
    reader = ResponseReader(settings.job.paths.table("responses"), start_version=0)
    out.write(f"Starting the coordinator job (Spark local[{settings.job.shards}], delta-rs)...\n")
    spark = job.spark_session(settings, verbose=verbose)
    try:
        code = play(spark, settings, out)
    finally:
        if not job.stop_session(spark, settings.job.shutdown_timeout_ms / 1000):
            out.write("the Spark session did not stop in time\n")
            code = 1
    if code != 0:
        return code
    print_timeline(reader, out)
    print_tables(settings, out)
    return 0


def play(spark: Any, settings: Settings, out: TextIO) -> int:
    """The scenario on ``spark`` (the demo's own session, or a test's shared one): start the
    job, form the group, commit, crash a member, rebalance, commit again, stop the job (not the
    session). 0 when it went so; 1 when the group did not form or rebalance in time."""
    spark.conf.set("spark.sql.shuffle.partitions", str(settings.job.shards))
    running = job.start(spark, settings)
    demo = Demo(settings, out)
    try:
        demo.say("job running; three members start: find the coordinator, join, sync")
        for i in range(1, 4):
            demo.add_member(f"consumer-{i}")
        if not demo.pump(SETTLE_S, demo.stable):
            demo.say(f"the group did not stabilise in {SETTLE_S} s")
            return 1
        demo.say("the group is Stable; range assignment:")
        demo.show_assignment()
        demo.commit_all()
        demo.pump(3)
        demo.say("consumer-3 crashes (kill -9: no LeaveGroup); its session is 10 s")
        demo.crash("consumer-3")
        if not demo.pump(SETTLE_S, demo.stable):
            demo.say(f"the group did not rebalance in {SETTLE_S} s")
            return 1
        demo.say("session expired in the job; the group rebalanced:")
        demo.show_assignment()
        demo.commit_all()
        demo.pump(2)
    finally:
        running.stop()
    return 0


def print_timeline(reader: ResponseReader, out: TextIO) -> None:
    rows = reader.poll()
    rows.sort(key=lambda r: (r["emitted_at_ms"], r["batch_id"]))
    start = rows[0]["emitted_at_ms"] if rows else 0
    timeline = Timeline(out)
    timeline.heading(f"the group as the responses table recorded it ({len(rows)} responses)")
    last = None
    for row in rows:
        response = decode_response(row)
        if response["api"] == "heartbeat" and response["error"] is None:
            continue  # the steady state: shown as a count below
        if response["api"] == "find_coordinator" and last == "find_coordinator":
            continue
        last = response["api"]
        timeline.response(row["emitted_at_ms"] - start, response)
    beats = sum(1 for r in rows if r["api"] == "heartbeat" and r["error"] is None)
    out.write(f"  (and {beats} successful heartbeats)\n")


def print_tables(settings: Settings, out: TextIO) -> None:
    from coordinator.cli.status import collect

    paths = settings.job.paths
    status = collect(paths.root)
    out.write("\n=== the tables (Delta, readable from Spark while the job runs)\n")
    for name, table in status["tables"].items():
        out.write(f"  {paths.table(name)}  (version {table['version']})\n")
    out.write(f"  last batch in every table: {status.get('last_complete_batch')}\n")
    from coordinator.stream.delta_read import read_table

    state = read_table(paths.table("group_state")).to_pylist()
    for row in state:
        members = ", ".join(short_member_id(m["member_id"]) for m in row["members"])
        out.write(
            f"  group_state: {row['group_id']} {row['state']}, generation "
            f"{row['generation_id']}, members [{members}], {row['num_committed_offsets']} "
            f"committed offsets\n"
        )
    log = read_table(paths.table("consumer_offsets"))
    kinds: dict[str, int] = {}
    for kind in log.column("record_type").to_pylist():
        kinds[kind] = kinds.get(kind, 0) + 1
    out.write(f"  consumer_offsets: {log.num_rows} records {json.dumps(kinds)}\n")
    out.write(
        f"\nInspect: coordinator status --warehouse {paths.root}\n"
        f"Query:   spark.read.parquet(*DeltaTable('{paths.table('consumer_offsets')}')"
        f".file_uris())\n"
    )
