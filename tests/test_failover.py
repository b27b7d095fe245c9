"""Offsets-partition failover between two coordinators over one log (kafka-group-protocol.md
sections 5, 6.1, 10.6, 10.7; Kafka's ``handleGroupImmigration``/``handleGroupEmigration`` on
LeaderAndIsr).

Two ``GroupCoordinator`` nodes run side by side: A owns offsets partitions {0, 1}, B owns {2, 3},
and each knows who owns the others (FindCoordinator). "The log" is one list shared by the test:
after every call the records of both nodes are drained into it. Consumers are small deterministic
drivers (:class:`Member`) that follow the Java client's rules of section 13.3/13.4 closely enough:
FindCoordinator, JoinGroup v9 (MEMBER_ID_REQUIRED then again with the id), SyncGroup (the leader
assigns round-robin), heartbeats every 100 ms, offset commits every 200 ms, and the client's
reactions to coordinator and rebalance errors. A simulated clock moves in 10 ms steps.
"""

from __future__ import annotations

import itertools
from typing import Any

from coordinator import CoordinatorConfig, CoordinatorNode, GroupCoordinator, KeyedIds
from coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from coordinator.log.partitioning import partition_for

CONFIG = CoordinatorConfig(
    offsets_topic_num_partitions=4,
    group_initial_rebalance_delay_ms=0,
    group_min_session_timeout_ms=10,
)
NODE_A = CoordinatorNode(0, "a", 9092)
NODE_B = CoordinatorNode(1, "b", 9093)
TOPIC = "orders"
TOPIC_PARTITIONS = 6
STEP_MS = 10
HEARTBEAT_MS = 100  # heartbeat.interval.ms
COMMIT_MS = 200  # auto.commit.interval.ms, shortened
BACKOFF_MS = 50  # retry.backoff.ms, shortened
SESSION_MS = 1_000
REBALANCE_MS = 1_000
#: Errors after which the Java client marks the coordinator unknown and looks it up again
#: (the brief's simplification: COORDINATOR_LOAD_IN_PROGRESS too).
COORDINATOR_ERRORS = {
    "NOT_COORDINATOR",
    "COORDINATOR_NOT_AVAILABLE",
    "COORDINATOR_LOAD_IN_PROGRESS",
}


def make_nodes() -> tuple[GroupCoordinator, GroupCoordinator]:
    a = GroupCoordinator(
        CONFIG, id_source=KeyedIds(b"seed-a" * 4), node=NODE_A, owned_partitions={0, 1}
    )
    b = GroupCoordinator(
        CONFIG, id_source=KeyedIds(b"seed-b" * 4), node=NODE_B, owned_partitions={2, 3}
    )
    for p in (2, 3):
        a.set_partition_owner(p, NODE_B)
    for p in (0, 1):
        b.set_partition_owner(p, NODE_A)
    return a, b


def group_on(partition: int, skip: tuple[str, ...] = ()) -> str:
    """The first of group-0 .. group-50 whose offsets partition is ``partition``."""
    for i in range(51):
        group_id = f"group-{i}"
        if group_id not in skip and partition_for(group_id, 4) == partition:
            return group_id
    raise AssertionError(f"no group id on partition {partition}")


# --- the world: two nodes, one log, one clock -------------------------------------------------


class Sim:
    def __init__(self) -> None:
        self.a, self.b = make_nodes()
        self.nodes = {0: self.a, 1: self.b}
        self.now = 0
        self.log: list[dict[str, Any]] = []
        self.log_writer: list[int] = []  # node id that wrote each log record
        self.members: list[Member] = []
        self._rids = itertools.count(1)
        #: request id -> (node id, request, member): where every response is routed.
        self.sent: dict[str, tuple[int, dict[str, Any], Member | None]] = {}
        self.answered: set[str] = set()
        #: (time, node id, request, response) of every response, in emission order.
        self.trace: list[tuple[int, int, dict[str, Any], dict[str, Any]]] = []
        self._inbox: list[dict[str, Any]] = []
        self._ack_seq = itertools.count()

    # -- plumbing ------------------------------------------------------------------------------

    def drain(self) -> None:
        for node_id, node in self.nodes.items():
            assert not node.internal_errors, node.internal_errors
            for record in node.drain_records():
                self.log.append(record)
                self.log_writer.append(node_id)

    def receive(self, out: list[dict[str, Any]]) -> None:
        self.drain()
        self._inbox.extend(out)

    def send(self, node_id: int, request: dict[str, Any], member: Member | None = None) -> str:
        """Send one request; its responses (and any it releases) are queued for :meth:`pump`."""
        rid = f"r{next(self._rids)}"
        request["request_id"] = rid
        self.sent[rid] = (node_id, request, member)
        self.receive(self.nodes[node_id].handle(request, self.now))
        return rid

    def call(self, node_id: int, request: dict[str, Any]) -> dict[str, Any]:
        """A request from the test itself (not a member): its answer, at once."""
        rid = self.send(node_id, request)
        self.pump()
        return self.answer(rid)

    def answer(self, rid: str) -> dict[str, Any]:
        for _, _, request, response in self.trace:
            if request["request_id"] == rid:
                return response
        raise AssertionError(f"request {rid} not answered")

    def pump(self) -> None:
        """Deliver queued responses by request id; members may send more while handling them."""
        while self._inbox:
            response = self._inbox.pop(0)
            rid = response["request_id"]
            assert rid in self.sent, response
            assert rid not in self.answered, f"request {rid} answered twice"
            self.answered.add(rid)
            node_id, request, member = self.sent[rid]
            self.trace.append((self.now, node_id, request, response))
            if member is not None:
                member.on_response(request, response)

    def tick(self) -> None:
        self.now += STEP_MS
        for node in self.nodes.values():
            self.receive(node.advance(self.now))
        self.pump()
        for member in self.members:
            member.tick()
            self.pump()

    def run(self, ms: int) -> None:
        for _ in range(ms // STEP_MS):
            self.tick()

    def next_ack(self) -> int:
        return next(self._ack_seq)

    # -- views ---------------------------------------------------------------------------------

    def owner(self, group_id: str) -> GroupCoordinator:
        partition = partition_for(group_id, 4)
        owners = [n for n in self.nodes.values() if partition in n.owned_partitions]
        assert len(owners) == 1, (group_id, partition)
        return owners[0]

    def group_members(self, group_id: str) -> list[Member]:
        return [m for m in self.members if m.group_id == group_id]

    def stable(self, group_id: str) -> bool:
        group = self.owner(group_id).group(group_id)
        return (
            group is not None
            and group.state.value == "Stable"
            and all(m.state == "stable" for m in self.group_members(group_id))
        )

    def last_acked(self, group_id: str) -> dict[tuple[str, int], int]:
        """The last acknowledged offset of every partition, over every member's acked commits."""
        acks = sorted(a for m in self.group_members(group_id) for a in m.acked)
        last: dict[tuple[str, int], int] = {}
        for _, _, _, offsets in acks:
            last.update(offsets)
        return last

    def fetch_all(self, node_id: int, group_id: str) -> dict[str, Any]:
        return self.call(
            node_id,
            {
                "api": "offset_fetch",
                "group_id": group_id,
                "partitions": None,
                "require_stable": True,
            },
        )

    def member_trace(self, member: Member, since: int = -1):
        return [
            (t, node_id, req, resp)
            for t, node_id, req, resp in self.trace
            if t >= since and self.sent[req["request_id"]][2] is member
        ]


# --- one consumer -----------------------------------------------------------------------------


class Member:
    """A consumer of one group, following the Java client's classic-protocol rules (13.3, 13.4)."""

    def __init__(self, sim: Sim, group_id: str, index: int) -> None:
        self.sim = sim
        self.group_id = group_id
        self.index = index
        self.client_id = f"{group_id}-consumer-{index}"
        self.coordinator: int | None = None
        self.finds: list[dict[str, Any]] = []  # every FindCoordinator answer
        self.find_attempts = 0
        self.member_id = ""
        self.generation = -1
        self.state = "unjoined"  # unjoined | joining | syncing | stable
        self.rejoin_needed = True
        self.in_flight: str | None = None  # a JoinGroup or SyncGroup not answered yet
        self.assigned: list[int] = []
        self.retry_at = 0
        self.next_heartbeat = 0
        self.next_commit = 0
        self.commit_due = False
        #: (ack sequence, time, node id, {(topic, partition): offset}) of acknowledged commits.
        self.acked: list[tuple[int, int, int, dict[tuple[str, int], int]]] = []
        sim.members.append(self)

    # -- sending -------------------------------------------------------------------------------

    def _send(self, request: dict[str, Any]) -> str:
        assert self.coordinator is not None
        request.setdefault("group_id", self.group_id)
        return self.sim.send(self.coordinator, request, self)

    def find_coordinator(self) -> None:
        """Ask either node (alternating, like the least-loaded broker would change)."""
        node_id = (self.index + self.find_attempts) % 2
        self.find_attempts += 1
        self.sim.send(
            node_id, {"api": "find_coordinator", "group_id": self.group_id, "key_type": 0}, self
        )

    def join(self) -> None:
        self.state = "joining"
        self.assigned = []  # onJoinPrepare (eager): every partition is revoked
        subscription = encode_subscription(Subscription(topics=(TOPIC,)))
        self.in_flight = self._send(
            {
                "api": "join_group",
                "api_version": 9,
                "member_id": self.member_id,
                "group_instance_id": None,
                "client_id": self.client_id,
                "client_host": f"/10.0.0.{self.index}",
                "session_timeout_ms": SESSION_MS,
                "rebalance_timeout_ms": REBALANCE_MS,
                "protocol_type": "consumer",
                "protocols": [{"name": "roundrobin", "metadata": subscription}],
                "reason": None,
            }
        )

    def sync(self, response: dict[str, Any]) -> None:
        assignments = []
        if response["leader"] == self.member_id:
            member_ids = sorted(m["member_id"] for m in response["members"])
            for i, member_id in enumerate(member_ids):
                mine = tuple(range(i, TOPIC_PARTITIONS, len(member_ids)))
                payload = encode_assignment(Assignment((TopicPartitions(TOPIC, mine),)))
                assignments.append({"member_id": member_id, "assignment": payload})
        self.state = "syncing"
        self.in_flight = self._send(
            {
                "api": "sync_group",
                "member_id": self.member_id,
                "group_instance_id": None,
                "generation_id": self.generation,
                "protocol_type": "consumer",
                "protocol_name": response["protocol_name"],
                "assignments": assignments,
            }
        )

    def heartbeat(self) -> None:
        self.next_heartbeat = self.sim.now + HEARTBEAT_MS
        self._send(
            {
                "api": "heartbeat",
                "member_id": self.member_id,
                "group_instance_id": None,
                "generation_id": self.generation,
            }
        )

    def commit(self) -> None:
        self.commit_due = False
        self.next_commit = self.sim.now + COMMIT_MS
        if not self.assigned:
            return
        # The consumed position: the clock, so that every later commit is a larger offset.
        position = self.sim.now * 10 + self.index
        self._send(
            {
                "api": "offset_commit",
                "member_id": self.member_id,
                "group_instance_id": None,
                "generation_id": self.generation,
                "retention_time_ms": -1,
                "offsets": [
                    {"topic": TOPIC, "partition": p, "offset": position, "metadata": ""}
                    for p in self.assigned
                ],
            }
        )

    # -- the poll loop -------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.sim.now
        if now < self.retry_at:
            return
        if self.coordinator is None:
            self.find_coordinator()
            return  # the answer comes with the next pump; act on the next tick
        if self.in_flight is None and self.rejoin_needed:
            self.rejoin_needed = False
            self.join()
            return
        # The heartbeat thread runs from the JoinGroup response on (COMPLETING_REBALANCE).
        if self.state in ("syncing", "stable") and now >= self.next_heartbeat:
            self.heartbeat()
            if self.coordinator is None:
                return
        if self.state == "stable" and (self.commit_due or now >= self.next_commit):
            self.commit()

    def lose_coordinator(self) -> None:
        self.coordinator = None
        self.retry_at = self.sim.now + BACKOFF_MS

    def request_rejoin(self, reset_member_id: bool = False) -> None:
        self.generation = -1
        self.state = "unjoined"
        self.assigned = []
        if reset_member_id:
            self.member_id = ""
        self.rejoin_needed = True

    # -- responses -----------------------------------------------------------------------------

    def on_response(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        handler = getattr(self, "on_" + response["api"])
        handler(request, response)

    def on_find_coordinator(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        self.finds.append(response)
        if response["error"] is None:
            self.coordinator = response["node_id"]
        else:
            self.retry_at = self.sim.now + BACKOFF_MS

    def on_join_group(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        assert request["request_id"] == self.in_flight, (request, self.in_flight)
        self.in_flight = None
        error = response["error"]
        if error is None:
            self.member_id = response["member_id"]
            self.generation = response["generation_id"]
            self.next_heartbeat = self.sim.now + HEARTBEAT_MS
            self.sync(response)
        elif error == "MEMBER_ID_REQUIRED":
            self.member_id = response["member_id"]
            self.join()  # at once, with the id
        elif error == "UNKNOWN_MEMBER_ID":
            self.request_rejoin(reset_member_id=True)
        elif error in ("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS"):
            self.request_rejoin()
        elif error in COORDINATOR_ERRORS:
            self.request_rejoin()
            self.lose_coordinator()
        else:
            raise AssertionError(f"{self.client_id}: unexpected JoinGroup answer {response}")

    def on_sync_group(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        assert request["request_id"] == self.in_flight, (request, self.in_flight)
        self.in_flight = None
        error = response["error"]
        if error is None:
            assignment = decode_assignment(response["assignment"])
            self.assigned = [
                p
                for tp in assignment.assigned_partitions
                if tp.topic == TOPIC
                for p in tp.partitions
            ]
            self.state = "stable"
            self.commit_due = True
        elif error == "UNKNOWN_MEMBER_ID":
            self.request_rejoin(reset_member_id=True)
        elif error in ("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS"):
            self.request_rejoin()
        elif error in COORDINATOR_ERRORS:
            self.request_rejoin()
            self.lose_coordinator()
        else:
            raise AssertionError(f"{self.client_id}: unexpected SyncGroup answer {response}")

    def _membership_error(self, request: dict[str, Any], error: str) -> None:
        """What Heartbeat and OffsetCommit errors do to the membership (13.3)."""
        current = request["generation_id"] == self.generation
        if error in COORDINATOR_ERRORS:
            self.lose_coordinator()
        elif error == "REBALANCE_IN_PROGRESS":
            if self.state == "stable" and self.in_flight is None:
                self.request_rejoin()
        elif error == "ILLEGAL_GENERATION":
            if current and self.in_flight is None:
                self.request_rejoin()
        elif error == "UNKNOWN_MEMBER_ID":
            if current and self.in_flight is None:
                self.request_rejoin(reset_member_id=True)
        else:
            raise AssertionError(f"{self.client_id}: unexpected error {error}")

    def on_heartbeat(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        if response["error"] is not None:
            self._membership_error(request, response["error"])

    def on_offset_commit(self, request: dict[str, Any], response: dict[str, Any]) -> None:
        errors = {p["error"] for p in response["partitions"]}
        if response["error"] is None and errors == {None}:
            node_id = self.sim.sent[request["request_id"]][0]
            offsets = {(o["topic"], o["partition"]): o["offset"] for o in request["offsets"]}
            self.acked.append((self.sim.next_ack(), self.sim.now, node_id, offsets))
            return
        error = response["error"] or next(e for e in errors if e is not None)
        if error in COORDINATOR_ERRORS:
            self.commit_due = True  # retry once the coordinator is found again
        self._membership_error(request, error)


def start(sim: Sim, group_ids: list[str], per_group: int = 3) -> None:
    for group_id in group_ids:
        for i in range(per_group):
            Member(sim, group_id, i)


def run_until_stable(sim: Sim, group_ids: list[str], commits: int = 3, limit_ms: int = 10_000):
    deadline = sim.now + limit_ms
    while sim.now < deadline:
        sim.tick()
        if all(sim.stable(g) for g in group_ids) and all(
            len(m.acked) >= commits for g in group_ids for m in sim.group_members(g)
        ):
            return
    raise AssertionError(f"groups did not settle by {sim.now} ms")


# --- test 1: moving a partition from A to B mid-workload --------------------------------------


def test_partition_moves_from_a_to_b_mid_workload() -> None:
    """Three groups of three consumers settle and commit; then A's partition 0 moves to B.
    The moved group's consumers get NOT_COORDINATOR from A, find B, are answered blindly
    (heartbeats) or told to wait (commits) while B loads, and go on with B; the other groups
    never notice; every acknowledged commit survives; the log stays one numbered sequence."""
    moved_partition = 0
    moved = group_on(moved_partition)  # on A's partition 0: moves to B
    stays_on_a = group_on(1)  # on A's partition 1: stays on A
    on_b = group_on(2)  # on B's partition 2
    groups = [moved, stays_on_a, on_b]
    sim = Sim()
    start(sim, groups)

    run_until_stable(sim, groups)
    assert len({m.member_id for m in sim.members}) == len(sim.members) == 9
    assert sim.a.group(moved) is not None and sim.b.group(moved) is None
    for g in groups:
        for m in sim.group_members(g):
            assert m.coordinator == (1 if g == on_b else 0)
    generations = {g: sim.owner(g).group(g).generation_id for g in groups}
    sim.run(500)  # a steady workload before the move
    a_records_on_p = [r["offset"] for r in sim.log if r["offsets_partition"] == moved_partition]
    assert a_records_on_p, "the moved partition must have records before the move"

    # --- the move: LeaderAndIsr makes A a follower and B the leader of the partition ---
    moved_at = sim.now
    sim.receive(sim.a.unload_partition(moved_partition, sim.now))
    sim.pump()
    sim.a.set_partition_owner(moved_partition, NODE_B)
    sim.b.set_partition_owner(moved_partition, None)
    assert sim.b.begin_loading(moved_partition)
    assert sim.a.group(moved) is None
    assert moved_partition not in sim.a.owned_partitions

    sim.run(300)  # requests hit B while it loads
    loading = [
        (req["api"], resp["error"])
        for t, node_id, req, resp in sim.trace
        if t >= moved_at
        and node_id == 1
        and req["group_id"] == moved
        and req["api"] != "find_coordinator"
    ]
    assert ("heartbeat", None) in loading, loading
    assert ("offset_commit", "COORDINATOR_LOAD_IN_PROGRESS") in loading, loading
    for api, error in loading:
        expected = None if api == "heartbeat" else "COORDINATOR_LOAD_IN_PROGRESS"
        assert error == expected, (api, error)
    assert sim.b.group(moved) is None

    loaded_at = sim.now
    records = [r for r in sim.log if r["offsets_partition"] == moved_partition]
    assert sim.b.load_partition(moved_partition, records, sim.now)
    sim.drain()
    # Before anyone commits again: B holds exactly what A acknowledged.
    assert_nothing_lost(sim, moved, owner=1)
    sim.run(3_000)

    # The moved group: every member found B, and the group is Stable on B with all of them.
    movers = sim.group_members(moved)
    for m in movers:
        assert m.finds[-1]["node_id"] == 1, (m.client_id, m.finds[-1])
        assert (m.finds[-1]["host"], m.finds[-1]["port"]) == ("b", 9093)
        assert m.coordinator == 1 and m.state == "stable", m.client_id
        noticed = {resp["error"] for _, _, _, resp in sim.member_trace(m, since=moved_at)}
        assert "NOT_COORDINATOR" in noticed, (m.client_id, noticed)
        assert any(t >= loaded_at and node == 1 for _, t, node, _ in m.acked), m.client_id
    group = sim.b.group(moved)
    assert group is not None and group.state.value == "Stable"
    described = sim.call(1, {"api": "describe_groups", "group_id": moved})
    assert described["error"] is None and described["group_state"] == "Stable"
    assert sorted(d["member_id"] for d in described["members"]) == sorted(
        m.member_id for m in movers
    )
    assert {m.generation for m in movers} == {group.generation_id}

    # Groups on partitions that did not move never noticed.
    for g in (stays_on_a, on_b):
        for m in sim.group_members(g):
            errors = [resp["error"] for _, _, _, resp in sim.member_trace(m, since=moved_at)]
            assert set(errors) == {None}, (m.client_id, errors)
            assert not any(resp["error"] == "NOT_COORDINATOR" for *_, resp in sim.member_trace(m))
            assert m.generation == generations[g]
            assert any(t > moved_at for _, t, _, _ in m.acked)

    # No acknowledged commit is lost: the owner returns the last acknowledged offset of each.
    for g in groups:
        owner_id = 1 if g in (moved, on_b) else 0
        fetched = sim.fetch_all(owner_id, g)
        assert fetched["error"] is None, fetched
        got = {(p["topic"], p["partition"]): p["offset"] for p in fetched["partitions"]}
        assert got == sim.last_acked(g), g
        assert set(got) == {(TOPIC, p) for p in range(TOPIC_PARTITIONS)}

    # One log: offsets contiguous per offsets partition across both nodes; B went on after A.
    for partition in range(4):
        offsets = [r["offset"] for r in sim.log if r["offsets_partition"] == partition]
        assert offsets == list(range(len(offsets))), (partition, offsets)
    on_p = [
        w
        for w, r in zip(sim.log_writer, sim.log, strict=True)
        if r["offsets_partition"] == moved_partition
    ]
    first_b = on_p.index(1)
    assert first_b == len(a_records_on_p) >= 1
    assert set(on_p[:first_b]) == {0} and set(on_p[first_b:]) == {1}

    # A is done with the group and points to B.
    heartbeat = sim.call(
        0,
        {
            "api": "heartbeat",
            "group_id": moved,
            "member_id": movers[0].member_id,
            "generation_id": movers[0].generation,
        },
    )
    assert heartbeat["error"] == "NOT_COORDINATOR"
    assert sim.call(0, {"api": "describe_groups", "group_id": moved})["error"] == "NOT_COORDINATOR"
    found = sim.call(0, {"api": "find_coordinator", "group_id": moved})
    assert found["error"] is None
    assert (found["offsets_partition"], found["node_id"], found["host"], found["port"]) == (
        moved_partition,
        1,
        "b",
        9093,
    )


def move(
    sim: Sim,
    partition: int,
    to: int,
    *,
    epoch: int | None = None,
    loading_ms: int = 100,
) -> list[dict[str, Any]]:
    """LeaderAndIsr moves ``partition`` to node ``to``: unload, re-point, load from the log.
    Returns what the unload answered."""
    src, dst = sim.nodes[1 - to], sim.nodes[to]
    unloaded = src.unload_partition(partition, sim.now, epoch=epoch)
    sim.receive(unloaded)
    sim.pump()
    src.set_partition_owner(partition, dst.node)
    dst.set_partition_owner(partition, None)
    assert dst.begin_loading(partition, epoch=epoch)
    sim.run(loading_ms)
    records = [r for r in sim.log if r["offsets_partition"] == partition]
    assert dst.load_partition(partition, records, sim.now, epoch=epoch)
    sim.drain()
    for group_id in {m.group_id for m in sim.members}:
        if partition_for(group_id, 4) == partition:
            assert_nothing_lost(sim, group_id, owner=to)  # before anyone commits again
    return unloaded


def assert_nothing_lost(sim: Sim, group_id: str, owner: int) -> None:
    fetched = sim.fetch_all(owner, group_id)
    assert fetched["error"] is None, fetched
    got = {(p["topic"], p["partition"]): p["offset"] for p in fetched["partitions"]}
    assert got == sim.last_acked(group_id), group_id


def assert_contiguous(sim: Sim) -> None:
    for partition in range(4):
        offsets = [r["offset"] for r in sim.log if r["offsets_partition"] == partition]
        assert offsets == list(range(len(offsets))), (partition, offsets)


def test_partition_moves_during_a_rebalance() -> None:
    """A fourth member joins the moved group; the move comes while its JoinGroup is parked on A
    (PreparingRebalance). The parked join gets NOT_COORDINATOR, B loads the last Stable
    generation, and the group settles on B with all four members."""
    moved, other = group_on(0), group_on(2)
    sim = Sim()
    start(sim, [moved, other])
    run_until_stable(sim, [moved, other])
    generation = sim.a.group(moved).generation_id
    newcomer = Member(sim, moved, 3)
    for _ in range(50):
        sim.tick()
        if newcomer.in_flight is not None and newcomer.member_id:
            break
    assert sim.a.group(moved).state.value == "PreparingRebalance"
    parked = newcomer.in_flight
    unloaded = move(sim, 0, to=1)
    assert [(r["request_id"], r["error"]) for r in unloaded] == [(parked, "NOT_COORDINATOR")]
    assert sim.b.group(moved).generation_id == generation  # the last SyncGroup record's
    sim.run(3_000)

    group = sim.b.group(moved)
    assert group is not None and group.state.value == "Stable"
    assert group.generation_id > generation
    assert sorted(group.members) == sorted(m.member_id for m in sim.group_members(moved))
    assert all(m.state == "stable" and m.coordinator == 1 for m in sim.group_members(moved))
    assert_nothing_lost(sim, moved, owner=1)
    assert_nothing_lost(sim, other, owner=1)
    assert_contiguous(sim)


def test_partition_moves_back_and_forth() -> None:
    """A -> B -> A -> B with rising leader epochs: each new leader goes on numbering the
    partition where the last one stopped, and no acknowledged commit is lost on the way."""
    moved = group_on(0)
    sim = Sim()
    start(sim, [moved])
    run_until_stable(sim, [moved])
    for epoch, to in ((1, 1), (2, 0), (3, 1)):
        move(sim, 0, to=to, epoch=epoch)
        sim.run(1_000)
        assert sim.stable(moved)
        assert all(m.coordinator == to for m in sim.group_members(moved))
        assert_nothing_lost(sim, moved, owner=to)
        assert_contiguous(sim)
    writers = [w for w, r in zip(sim.log_writer, sim.log, strict=True) if r["group_id"] == moved]
    changes = [w for i, w in enumerate(writers) if i == 0 or writers[i - 1] != w]
    assert changes == [0, 1, 0, 1]


# --- test 2: unload answers parked requests ---------------------------------------------------


def join_request(group_id: str, member_id: str, client: str) -> dict[str, Any]:
    return {
        "api": "join_group",
        "api_version": 9,
        "group_id": group_id,
        "member_id": member_id,
        "client_id": client,
        "client_host": "/10.0.0.1",
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": REBALANCE_MS,
        "protocol_type": "consumer",
        "protocols": [{"name": "roundrobin", "metadata": b""}],
    }


def test_unload_answers_parked_join_and_sync_with_not_coordinator() -> None:
    """Section 10.7: a PreparingRebalance group's parked JoinGroup and a CompletingRebalance
    group's parked SyncGroup are answered NOT_COORDINATOR; both groups are gone from A."""
    preparing = group_on(0)
    completing = group_on(0, skip=(preparing,))
    sim = Sim()

    def new_member(group_id: str, client: str) -> str:
        first = sim.call(0, join_request(group_id, "", client))
        assert first["error"] == "MEMBER_ID_REQUIRED"
        return first["member_id"]

    def joined(rid: str) -> dict[str, Any]:
        """A JoinGroup's answer, once the join completes (at once or by the join timer)."""
        sim.pump()
        if rid not in sim.answered:
            sim.tick()
        answer = sim.answer(rid)
        assert answer["error"] is None, answer
        return answer

    def stable_alone(group_id: str, client: str) -> str:
        member_id = new_member(group_id, client)
        generation = joined(sim.send(0, join_request(group_id, member_id, client)))
        assert generation["leader"] == member_id
        synced = sim.call(
            0,
            {
                "api": "sync_group",
                "group_id": group_id,
                "member_id": member_id,
                "generation_id": generation["generation_id"],
                "protocol_type": "consumer",
                "protocol_name": "roundrobin",
                "assignments": [{"member_id": member_id, "assignment": b""}],
            },
        )
        assert synced["error"] is None
        assert sim.a.group(group_id).state.value == "Stable"
        return member_id

    # `preparing`: m1 is Stable alone, then m2's JoinGroup parks waiting for m1 to rejoin.
    stable_alone(preparing, "c1")
    m2 = new_member(preparing, "c2")
    parked_join = sim.send(0, join_request(preparing, m2, "c2"))
    sim.pump()
    assert parked_join not in sim.answered
    assert sim.a.group(preparing).state.value == "PreparingRebalance"

    # `completing`: n1 Stable alone, n2 joins, n1 rejoins: generation 2 is CompletingRebalance,
    # and the follower's SyncGroup parks until the leader's.
    n1 = stable_alone(completing, "d1")
    n2 = new_member(completing, "d2")
    n2_join = sim.send(0, join_request(completing, n2, "d2"))
    leader = joined(sim.send(0, join_request(completing, n1, "d1")))
    follower = joined(n2_join)
    assert leader["leader"] == n1 and follower["generation_id"] == leader["generation_id"]
    assert sim.a.group(completing).state.value == "CompletingRebalance"
    parked_sync = sim.send(
        0,
        {
            "api": "sync_group",
            "group_id": completing,
            "member_id": n2,
            "generation_id": follower["generation_id"],
            "protocol_type": "consumer",
            "protocol_name": "roundrobin",
        },
    )
    sim.pump()
    assert parked_sync not in sim.answered

    sim.drain()
    written = len(sim.log)
    unloaded = sim.a.unload_partition(0, sim.now)
    assert sorted(r["request_id"] for r in unloaded) == sorted([parked_join, parked_sync])
    sim.receive(unloaded)
    sim.pump()
    join_answer = sim.answer(parked_join)
    assert join_answer["error"] == "NOT_COORDINATOR"
    assert join_answer["member_id"] == m2
    assert sim.answer(parked_sync)["error"] == "NOT_COORDINATOR"
    for group_id in (preparing, completing):
        assert sim.a.group(group_id) is None
        described = sim.call(0, {"api": "describe_groups", "group_id": group_id})
        assert described["error"] == "NOT_COORDINATOR"
    assert 0 not in sim.a.owned_partitions
    # Nothing is written on unload, and no timer of the dead groups fires later.
    sim.run(2 * SESSION_MS)
    assert len(sim.log) == written
    assert len(sim.answered) == len(sim.sent)


# --- test 3: leader epochs --------------------------------------------------------------------


def test_stale_epochs_are_ignored() -> None:
    """A load with an epoch older than the one loading is ignored (the partition stays
    loading); so is an unload with a stale epoch; an unload without epoch always unloads."""
    group_id = group_on(0)
    sim = Sim()
    commit = sim.call(
        0,
        {
            "api": "offset_commit",
            "group_id": group_id,
            "generation_id": -1,
            "offsets": [{"topic": TOPIC, "partition": 0, "offset": 42}],
        },
    )
    assert commit["error"] is None
    records = [r for r in sim.log if r["offsets_partition"] == 0]
    assert [r["offset"] for r in records] == [0]
    sim.receive(sim.a.unload_partition(0, sim.now))
    sim.a.set_partition_owner(0, NODE_B)
    b = sim.b
    fetch = {"api": "offset_fetch", "group_id": group_id, "partitions": None}

    assert b.begin_loading(0, epoch=5)
    assert not b.load_partition(0, records, sim.now, epoch=4)
    assert sim.call(1, dict(fetch))["error"] == "COORDINATOR_LOAD_IN_PROGRESS"
    assert not b.begin_loading(0, epoch=3)
    assert b.load_partition(0, records, sim.now, epoch=5)
    fetched = sim.call(1, dict(fetch))
    assert fetched["error"] is None
    assert [(p["partition"], p["offset"]) for p in fetched["partitions"]] == [(0, 42)]

    assert sim.b.unload_partition(0, sim.now, epoch=4) == []
    assert 0 in b.owned_partitions and b.group(group_id) is not None
    assert sim.call(1, dict(fetch))["error"] is None

    sim.b.unload_partition(0, sim.now)  # no epoch (a stopped replica): always unloads
    assert 0 not in b.owned_partitions and b.group(group_id) is None
    assert sim.call(1, dict(fetch))["error"] == "NOT_COORDINATOR"

    # A newer epoch takes the partition back, and numbering goes on from the log.
    assert b.begin_loading(0, epoch=6)
    assert b.load_partition(0, records, sim.now, epoch=6)
    commit = sim.call(
        1,
        {
            "api": "offset_commit",
            "group_id": group_id,
            "generation_id": -1,
            "offsets": [{"topic": TOPIC, "partition": 0, "offset": 43}],
        },
    )
    assert commit["error"] is None
    assert [r["offset"] for r in sim.log if r["offsets_partition"] == 0] == [0, 1]


# --- test 4: FindCoordinator ------------------------------------------------------------------


def test_find_coordinator_answers_partition_and_owner() -> None:
    """Section 6.1: the partition and its owner's address, this node's or the one it knows;
    COORDINATOR_NOT_AVAILABLE (node -1) when no owner is known."""
    a, b = make_nodes()
    a.set_partition_owner(3, None)  # nobody known for partition 3 on A
    for partition, node, expected in (
        (0, a, (0, "a", 9092)),
        (1, a, (0, "a", 9092)),
        (2, a, (1, "b", 9093)),
        (0, b, (0, "a", 9092)),
        (2, b, (1, "b", 9093)),
        (3, b, (1, "b", 9093)),
    ):
        group_id = group_on(partition)
        [answer] = node.handle(
            {"api": "find_coordinator", "request_id": "f", "group_id": group_id}, 0
        )
        assert answer["error"] is None, answer
        assert answer["offsets_partition"] == partition
        assert (answer["node_id"], answer["host"], answer["port"]) == expected

    [answer] = a.handle({"api": "find_coordinator", "request_id": "f", "group_id": group_on(3)}, 0)
    assert answer["error"] == "COORDINATOR_NOT_AVAILABLE"
    assert answer["offsets_partition"] == 3
    assert (answer["node_id"], answer["host"], answer["port"]) == (-1, "", -1)
