"""The engine's speed, measured through its public API (``coordinator bench engine`` and
``coordinator bench group``).

Figures, not tests: each is the best of a few timed runs on one core (the engine is single
threaded), through ``handle`` with request dicts exactly as adapters send them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from coordinator.config import CoordinatorConfig
from coordinator.engine import GroupCoordinator
from coordinator.ids import SequentialIds

# Kafka's defaults: the initial rebalance delay lets a whole group join before generation 1.
CONFIG = CoordinatorConfig()
SESSION = 30_000
REBALANCE = 60_000


def _join(group: str, rid: int, member_id: str = "") -> dict[str, Any]:
    return {
        "api": "join_group",
        "request_id": rid,
        "group_id": group,
        "member_id": member_id,
        "client_id": "bench",
        "session_timeout_ms": SESSION,
        "rebalance_timeout_ms": REBALANCE,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00"}],
    }


class Harness:
    """One coordinator and a clock; forms groups through the public API."""

    def __init__(self) -> None:
        self.c = GroupCoordinator(CONFIG, id_source=SequentialIds())
        self.now = 0
        self.rid = 0

    def call(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        return self.c.handle(request, self.now)

    def next_id(self) -> int:
        self.rid += 1
        return self.rid

    def form_group(self, group: str, size: int) -> tuple[list[str], int]:
        """A Stable group of ``size`` members; returns (member ids, generation)."""
        ids = []
        for _ in range(size):
            (answer,) = self.call(_join(group, self.next_id()))
            ids.append(answer["member_id"])
            self.call(_join(group, self.next_id(), answer["member_id"]))
        joined: list[dict[str, Any]] = []
        while not joined:  # KIP-134 extends the delay while members keep arriving
            self.now += CONFIG.group_initial_rebalance_delay_ms
            joined = self.c.advance(self.now)
        generation = joined[0]["generation_id"]
        self.sync_all(group, ids, generation)
        return ids, generation

    def sync_all(self, group: str, ids: list[str], generation: int) -> None:
        leader = self.c.group(group).leader_id  # type: ignore[union-attr]
        for member_id in [leader] + [m for m in ids if m != leader]:
            self.call(
                {
                    "api": "sync_group",
                    "request_id": self.next_id(),
                    "group_id": group,
                    "member_id": member_id,
                    "generation_id": generation,
                    "protocol_type": "consumer",
                    "protocol_name": "range",
                    "assignments": [{"member_id": m, "assignment": b"\x00\x00"} for m in ids]
                    if member_id == leader
                    else [],
                }
            )


def _best(runs: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(runs))


def heartbeats_per_s(count: int) -> float:
    h = Harness()
    groups = [f"g{i}" for i in range(100)]
    members = {g: h.form_group(g, 10) for g in groups}
    requests = [
        {"api": "heartbeat", "request_id": i, "group_id": g, "member_id": m, "generation_id": gen}
        for i, (g, (ids, gen)) in enumerate((g, members[g]) for g in groups)
        for m in ids
    ]
    handle, now = h.c.handle, h.now

    def once() -> float:
        start = time.perf_counter()
        done = 0
        while done < count:
            for request in requests:
                handle(request, now)
            done += len(requests)
        return (time.perf_counter() - start) / done

    return 1.0 / _best(3, once)


def joins_per_s(members: int) -> float:
    def once() -> float:
        h = Harness()
        requests = [_join("joins", i) for i in range(members)]
        start = time.perf_counter()
        for request in requests:
            (answer,) = h.call(request)
            h.call(_join("joins", -1, answer["member_id"]))
        return (time.perf_counter() - start) / (2 * members)

    return 1.0 / _best(3, once)


def rebalance_ms(members: int) -> float:
    """A Stable group's leader rejoins; every member rejoins and syncs: time to Stable again."""

    def once() -> float:
        h = Harness()
        ids, generation = h.form_group("rebalance", members)
        start = time.perf_counter()
        for member_id in ids:
            h.call(_join("rebalance", h.next_id(), member_id))
        h.sync_all("rebalance", ids, generation + 1)
        elapsed = time.perf_counter() - start
        assert h.c.group("rebalance").state.value == "Stable"  # type: ignore[union-attr]
        return elapsed

    return 1000.0 * _best(3, once)


def commits_per_s(partitions: int, count: int) -> float:
    h = Harness()
    ids, generation = h.form_group("commits", 1)
    requests = [
        {
            "api": "offset_commit",
            "request_id": i,
            "group_id": "commits",
            "member_id": ids[0],
            "generation_id": generation,
            "offsets": [{"topic": "t", "partition": p, "offset": i} for p in range(partitions)],
        }
        for i in range(100)
    ]

    def once() -> float:
        start = time.perf_counter()
        for i in range(count):
            h.call(requests[i % 100])
        h.c.drain_records()
        return (time.perf_counter() - start) / count

    return 1.0 / _best(3, once)


def fetches_per_s(count: int) -> float:
    h = Harness()
    h.call(
        {
            "api": "offset_commit",
            "request_id": 0,
            "group_id": "fetches",
            "offsets": [{"topic": "t", "partition": p, "offset": p} for p in range(10)],
        }
    )
    request = {
        "api": "offset_fetch",
        "request_id": 1,
        "group_id": "fetches",
        "partitions": [{"topic": "t", "partition": p} for p in range(10)],
    }

    def once() -> float:
        start = time.perf_counter()
        for _ in range(count):
            h.call(request)
        return (time.perf_counter() - start) / count

    return 1.0 / _best(3, once)


def load_records_per_s(records: int) -> float:
    """Rebuild a coordinator from ``records`` offset-commit records of 1,000 groups."""
    h = Harness()
    per_commit = 100
    rid = 0
    while len(h.c._records) < records:
        rid += 1
        h.call(
            {
                "api": "offset_commit",
                "request_id": rid,
                "group_id": f"load-{rid % 1000}",
                "offsets": [
                    {"topic": f"topic-{p % 10}", "partition": p, "offset": rid}
                    for p in range(per_commit)
                ],
            }
        )
    log = h.c.drain_records()[:records]

    def once() -> float:
        start = time.perf_counter()
        GroupCoordinator.from_records(log, CONFIG, h.now)
        return time.perf_counter() - start

    return len(log) / _best(2, once)


def stabilise_group(members: int, assignor: str) -> dict[str, float]:
    """Members join a new group through GroupMember and the in-process engine, on a simulated
    clock: simulated time until every member is STABLE, and the wall time it took to run."""
    from coordinator.client.member import MemberConfig
    from coordinator.client.simulation import Simulation

    topics = {f"topic-{i}": 100 for i in range(10)}
    sim = Simulation(CoordinatorConfig(), step_ms=10)
    config = MemberConfig(session_timeout_ms=45_000, heartbeat_interval_ms=3_000)
    for i in range(members):
        sim.add_member(
            "bench",
            topics,
            metadata=topics,
            client_id=f"c{i}",
            config=config,
            assignors=[assignor],
            poll_every_ms=100,
        )
    start = time.perf_counter()
    if not sim.run(600_000, until=lambda: sim.stable("bench")):
        raise RuntimeError("the group did not stabilise in 10 simulated minutes")
    return {
        "members": members,
        "simulated_ms": sim.clock.now_ms(),
        "wall_s": round(time.perf_counter() - start, 3),
        "requests": sim.network.sent,
    }
