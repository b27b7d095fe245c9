"""``coordinator demo``: the Spark job on the embedded default, with live members.

Starts the job (``local[2]``, delta-rs, ``./warehouse/demo``), then three ``GroupMember``s over
the job's own transport (request files into the inbox, answers from the ``responses`` table).
They find the coordinator, join (KIP-394's two steps, then the initial rebalance delay), sync a
range assignment, heartbeat and commit. Then one member's process dies: no LeaveGroup, nothing
more sent. Its session runs out inside the job (a processing-time timeout, with no input for the
group), the group rebalances and the two survivors share its partitions and commit again.
Finally the timeline of the group as the ``responses`` table recorded it, and the tables.
"""

from __future__ import annotations

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


def prepare_warehouse(path: Path) -> None:
    """A fresh demo warehouse; refuses to wipe a directory the demo did not make."""
    if path.exists():
        if not (path / MARKER).exists() and any(path.iterdir()):
            raise ValueError(f"{path} exists and is not a demo warehouse; choose another")
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / MARKER).write_text("made by coordinator demo; wiped by the next one\n")


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

    def commit_all(self, base: int) -> None:
        done: list[str] = []
        for name, member in self.members.items():
            offsets = {tp: base + tp.partition for tp in member.assignment}

            def callback(committed: Any, error: Exception | None, name: str = name) -> None:
                done.append(name if error is None else f"{name}: {error}")

            member.commit(offsets, callback)
        self.pump(30, lambda: len(done) == len(self.members))
        self.say(f"commits acknowledged (the log holds them): {sorted(done)}")


def run_demo(warehouse: Path, out: TextIO) -> int:
    prepare_warehouse(warehouse)
    settings = load_settings([], warehouse=str(warehouse), trigger_interval_ms=200)
    reader = ResponseReader(settings.job.paths.table("responses"), start_version=0)
    out.write(f"Starting the coordinator job (Spark local[{settings.job.shards}], delta-rs)...\n")
    spark = job.spark_session(settings)
    running = job.start(spark, settings)
    demo = Demo(settings, out)
    try:
        demo.say("job running; three members start: find the coordinator, join, sync")
        for i in range(1, 4):
            demo.add_member(f"consumer-{i}")
        if not demo.pump(90, demo.stable):
            demo.say("the group did not stabilise in 90 s")
            return 1
        demo.say("the group is Stable; range assignment:")
        demo.show_assignment()
        demo.commit_all(100)
        demo.pump(3)
        demo.say("consumer-3 crashes (kill -9: no LeaveGroup); its session is 10 s")
        demo.crash("consumer-3")
        if not demo.pump(90, demo.stable):
            demo.say("the group did not rebalance in 90 s")
            return 1
        demo.say("session expired in the job; the group rebalanced:")
        demo.show_assignment()
        demo.commit_all(200)
        demo.pump(2)
    finally:
        running.stop()
        spark.stop()
    print_timeline(reader, out)
    print_tables(settings, out)
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
    import pyarrow as pa
    from deltalake import DeltaTable

    state = pa.table(DeltaTable(str(paths.table("group_state"))).to_pyarrow_table()).to_pylist()
    for row in state:
        members = ", ".join(short_member_id(m["member_id"]) for m in row["members"])
        out.write(
            f"  group_state: {row['group_id']} {row['state']}, generation "
            f"{row['generation_id']}, members [{members}], {row['num_committed_offsets']} "
            f"committed offsets\n"
        )
    log = pa.table(DeltaTable(str(paths.table("consumer_offsets"))).to_pyarrow_table())
    kinds: dict[str, int] = {}
    for kind in log.column("record_type").to_pylist():
        kinds[kind] = kinds.get(kind, 0) + 1
    out.write(f"  consumer_offsets: {log.num_rows} records {json.dumps(kinds)}\n")
    out.write(
        f"\nInspect: coordinator status --warehouse {paths.root}\n"
        f"Query:   spark.read.parquet(*DeltaTable('{paths.table('consumer_offsets')}')"
        f".file_uris())\n"
    )
