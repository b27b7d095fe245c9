"""A warehouse with a known story, written by the job's own operator and sink (no Spark).

:func:`build_story` runs live ``GroupMember``s over :class:`coordinator.stream.local.LocalNetwork`
on a simulated clock, so every table is exactly what the Spark job would write for the same
batches, and the story's moments (log versions, times) are recorded for time-travel tests:

- ``orders-app``: three consumers of ``orders`` (6 partitions) form a group and commit; the
  third one's process dies (no LeaveGroup); its session expires and the other two share its
  partitions and commit again. Ends Stable, generation 2, two members.
- ``billing``: a standalone consumer (manual assignment) commits ``invoices`` 0 and 1 as a
  simple group: Empty, offsets only.
- ``old-app``: one consumer of ``orders`` joins, commits, and closes (LeaveGroup): Empty.

The topics' log offsets are sampled into ``topic_offsets.csv`` as the story runs (log end =
what the consumers will have read a second later, never below a commit).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from coordinator.client.assignors import TopicPartition
from coordinator.client.member import GroupMember, MemberConfig
from coordinator.client.simulation import Simulation
from coordinator.stream.local import LocalJob, LocalNetwork
from coordinator.stream.schema import CONSUMER_OFFSETS, Warehouse
from coordinator.stream.settings import load_settings

START_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z
TOPICS = {"orders": 6, "invoices": 2}
SESSION_MS = 10_000


@dataclass
class Story:
    warehouse: Path
    topic_offsets: Path
    members: dict[str, str] = field(default_factory=dict)  # name -> member id
    #: Moments: name -> {"ms": simulated clock (the batches' clock, which ``--as-of TIME``
    #: reads), "log_version": consumer_offsets version, "batch": the last batch written}.
    moments: dict[str, dict[str, int]] = field(default_factory=dict)
    committed: dict[tuple[str, str, int], int] = field(default_factory=dict)
    #: The live part: the job (its state in memory), the simulation, the surviving consumers.
    driver: Any = None
    survivors: list[GroupMember] = field(default_factory=list)


class _Driver:
    def __init__(self, warehouse: Path) -> None:
        settings = load_settings(
            [],
            {"group.initial.rebalance.delay.ms": "1000", "group.min.session.timeout.ms": "1000"},
            warehouse=str(warehouse),
        )
        self.job = LocalJob(settings)
        self.sim = Simulation(
            network=lambda clock: LocalNetwork(self.job, clock, 200), start_ms=START_MS
        )
        self.warehouse = warehouse
        self.read: dict[tuple[str, int], int] = {}  # how far consumers have read
        self.samples: list[dict[str, Any]] = []

    def member(self, group: str, topics: list[str] | None, **kwargs: Any) -> GroupMember:
        config = MemberConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1_000)
        return self.sim.add_member(group, topics, metadata=TOPICS, config=config, **kwargs)

    @staticmethod
    def settled(members: list[GroupMember], partitions: int) -> bool:
        """Every member STABLE in one generation, all ``partitions`` of the topic held."""
        return (
            all(m.state.value == "STABLE" and not m.rejoin_needed for m in members)
            and len({m.generation_id for m in members}) == 1
            and sorted(tp.partition for m in members for tp in m.assignment)
            == list(range(partitions))
        )

    def run(self, ms: int, until: Any = None) -> None:
        if not self.sim.run(ms, until=until) and until is not None:
            raise AssertionError(f"the story did not reach its condition in {ms} ms")

    def consume(self, member: GroupMember, story: Story, partitions: list[TopicPartition]) -> None:
        """Read 10 more messages of each partition and commit the position."""
        offsets = {}
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self.read[key] = self.read.get(key, 0) + 10
            offsets[tp] = self.read[key]
        member.commit(offsets)
        for tp, offset in offsets.items():
            story.committed[(member.group_id, tp.topic, tp.partition)] = offset

    def sample(self) -> None:
        now = self.sim.clock.now_ms()
        for topic, count in TOPICS.items():
            for partition in range(count):
                end = self.read.get((topic, partition), 0) + 10
                self.samples.append(
                    {
                        "topic": topic,
                        "partition": partition,
                        "timestamp_ms": now,
                        "log_start_offset": 0,
                        "log_end_offset": end,
                    }
                )

    def moment(self, story: Story, name: str) -> None:
        paths = Warehouse.at(self.warehouse)
        log = DeltaTable(str(paths.table(CONSUMER_OFFSETS)))
        story.moments[name] = {
            "ms": self.sim.clock.now_ms(),
            "log_version": log.version(),
            "batch": self.job.batch_id - 1,
        }


def build_story(warehouse: Path) -> Story:
    d = _Driver(warehouse)
    story = Story(warehouse, warehouse / "topic_offsets.csv")

    members = [d.member("orders-app", ["orders"], client_id=f"orders-{i}") for i in (1, 2, 3)]
    d.run(30_000, until=lambda: d.settled(members, TOPICS["orders"]))
    for i, m in enumerate(members, start=1):
        story.members[f"orders-{i}"] = m.member_id
    for _ in range(3):
        d.sample()
        for m in members:
            d.consume(m, story, m.assignment)
        d.run(1_000)
    d.moment(story, "three_members")

    billing = d.member("billing", None, client_id="billing")
    d.run(1_000, until=lambda: billing.coordinator is not None)
    d.consume(billing, story, [TopicPartition("invoices", 0), TopicPartition("invoices", 1)])
    old = d.member("old-app", ["orders"], client_id="old-1")
    d.run(30_000, until=lambda: d.settled([old], TOPICS["orders"]))
    d.consume(old, story, old.assignment)
    d.run(1_000)
    old.close()
    d.run(2_000)

    d.sim.crash(members[2])
    d.moment(story, "crash")
    survivors = members[:2]
    d.run(60_000, until=lambda: d.settled(survivors, TOPICS["orders"]))
    d.moment(story, "rebalanced")
    for _ in range(3):
        d.sample()
        for m in survivors:
            d.consume(m, story, m.assignment)
        d.run(1_000)
    d.sample()
    d.moment(story, "end")
    story.driver, story.survivors = d, survivors
    with story.topic_offsets.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(d.samples[0]))
        writer.writeheader()
        writer.writerows(d.samples)
    return story


class InboxPump:
    """The job's part while a test uses the CLI: from a thread, the story's simulation goes on
    at wall-clock pace (its consumers keep heartbeating, so live groups stay live) and every
    file dropped into the inbox is answered in the next micro-batch of the same job."""

    def __init__(self, story: Story) -> None:
        import threading

        self.driver = story.driver
        self._stop = threading.Event()
        self._calls: list[Any] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> InboxPump:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def call(self, fn: Any) -> None:
        """Run ``fn()`` in the pump's thread (the simulation is not thread safe)."""
        with self._lock:
            self._calls.append(fn)

    def _loop(self) -> None:
        import time

        last = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                calls, self._calls = self._calls, []
            for fn in calls:
                fn()
            now = time.monotonic()
            elapsed = int((now - last) * 1000)
            if elapsed > 0:
                last = now
                self.driver.sim.run(elapsed)
            self.driver.job.poll_inbox(self.driver.sim.clock.now_ms())
            time.sleep(0.02)
