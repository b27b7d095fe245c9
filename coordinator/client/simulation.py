"""Many members and the engine on one simulated clock: deterministic, faster than real time.

The harness for tests, demos and benchmarks. Each step moves the clock, fires the engine's
timers, delivers responses, and lets every live member run its heartbeat thread and, when due,
its application ``poll()``. A crashed member's process is gone: it neither polls, nor ticks, nor
sends (what it had in flight is dropped), exactly like a ``kill -9``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from coordinator.client.member import GroupMember
from coordinator.client.transport import Callback, InProcessTransport, SimClock, Transport
from coordinator.config import CoordinatorConfig
from coordinator.engine import GroupCoordinator
from coordinator.group.model import ClassicGroup
from coordinator.ids import SequentialIds


class Network(Transport, Protocol):
    """A transport the simulation drives: ``advance`` fires timers (or runs a micro-batch) at
    the clock's time, ``deliver`` hands over the answers."""

    sent: int  # requests sent so far

    def advance(self) -> None: ...

    def deliver(self) -> int: ...


class MemberLink:
    """One member's connection: it can be cut, as when the member's process dies."""

    def __init__(self, network: Transport) -> None:
        self.network = network
        self.alive = True

    def send(self, request: dict[str, Any], callback: Callback, node_id: int | None = None) -> None:
        if not self.alive:
            return

        def deliver(answer: dict[str, Any]) -> None:
            if self.alive:
                callback(answer)

        self.network.send(request, deliver, node_id)


@dataclass
class SimMember:
    member: GroupMember
    link: MemberLink
    poll_every_ms: int
    next_poll_ms: int

    @property
    def alive(self) -> bool:
        return self.link.alive


class Simulation:
    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        step_ms: int = 10,
        seed: int = 0,
        coordinator: GroupCoordinator | None = None,
        network: Callable[[SimClock], Network] | None = None,
        start_ms: int = 0,
    ) -> None:
        self.clock = SimClock(start_ms)
        self.coordinator = coordinator or GroupCoordinator(
            config or CoordinatorConfig(), id_source=SequentialIds()
        )
        #: The engine in process by default; ``network`` builds another on the clock (e.g.
        #: ``coordinator.stream.local.LocalNetwork``: the job's micro-batches, no Spark).
        self.network: Network = (
            InProcessTransport(self.coordinator, self.clock)
            if network is None
            else network(self.clock)
        )
        self.step_ms = step_ms
        self.rng = random.Random(seed)
        self.members: list[SimMember] = []
        self.records: list[dict[str, Any]] = []
        #: Called after every step (with the simulation), to check invariants as it runs.
        self.checks: list[Callable[[Simulation], None]] = []

    def add_member(
        self,
        group_id: str,
        topics: Collection[str] | None,
        *,
        metadata: Mapping[str, int],
        poll_every_ms: int = 100,
        **kwargs: Any,
    ) -> GroupMember:
        link = MemberLink(self.network)
        member = GroupMember(
            group_id,
            topics,
            link,
            self.clock,
            metadata=metadata,
            rng=random.Random(self.rng.random()),
            **kwargs,
        )
        now = self.clock.now_ms()
        self.members.append(SimMember(member, link, poll_every_ms, now))
        return member

    def crash(self, member: GroupMember) -> None:
        """The member's process dies: no LeaveGroup, nothing more sent or received."""
        self._entry(member).link.alive = False

    def set_poll_interval(self, member: GroupMember, poll_every_ms: int) -> None:
        self._entry(member).poll_every_ms = poll_every_ms

    def live_members(self, group_id: str | None = None) -> list[GroupMember]:
        return [
            e.member
            for e in self.members
            if e.alive
            and not e.member.closed
            and (group_id is None or e.member.group_id == group_id)
        ]

    def step(self) -> None:
        now = self.clock.advance(self.step_ms)
        self.network.advance()
        self.network.deliver()
        for entry in self.members:
            if not entry.alive or entry.member.closed or entry.member.failed is not None:
                continue
            entry.member.tick()
            if now >= entry.next_poll_ms:
                entry.next_poll_ms = now + entry.poll_every_ms
                entry.member.poll()
            self.network.deliver()
        self.records.extend(self.coordinator.drain_records())
        for check in self.checks:
            check(self)

    def run(self, ms: int, until: Callable[[], bool] | None = None) -> bool:
        """Run for ``ms`` simulated milliseconds, or until ``until()`` holds; returns whether it
        did (True when no condition was given)."""
        end = self.clock.now_ms() + ms
        while self.clock.now_ms() < end:
            self.step()
            if until is not None and until():
                return True
        return until is None

    def stable(self, group_id: str) -> bool:
        """Every live member of the group is STABLE in one generation, and the coordinator
        agrees that the group is Stable with exactly them."""
        members = self.live_members(group_id)
        group = self.coordinator.group(group_id)
        if not members or not isinstance(group, ClassicGroup) or group.state.value != "Stable":
            return False
        if any(m.state.value != "STABLE" or m.rejoin_needed for m in members):
            return False
        if (
            len({m.generation_id for m in members}) != 1
            or members[0].generation_id != group.generation_id
        ):
            return False
        return sorted(m.member_id for m in members) == sorted(group.members)

    def _entry(self, member: GroupMember) -> SimMember:
        for entry in self.members:
            if entry.member is member:
                return entry
        raise ValueError("not a member of this simulation")
