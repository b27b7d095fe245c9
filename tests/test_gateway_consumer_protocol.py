"""confluent-kafka 2.16 (librdkafka 2.16) consumers with ``group.protocol=consumer`` (KIP-848)
through the gateway's embedded back end: the coordinator assigns, members join and leave
without stopping the others, a killed member is expired, a static member restarts, commits read
back, and the admin client describes the group as a consumer group.

The gateway's engine runs with a 6 s consumer session and a 1 s heartbeat interval (Kafka's
settings, lowered with their bounds) so that expiry is quick."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator import CoordinatorConfig
from tests import client_scenarios as sc
from tests.gateway_support import Running

CLIENT = "confluent-kafka-consumer"
SESSION_MS = 6_000
CONFIG = CoordinatorConfig(
    group_initial_rebalance_delay_ms=0,
    group_consumer_session_timeout_ms=SESSION_MS,
    group_consumer_min_session_timeout_ms=SESSION_MS,
    group_consumer_heartbeat_interval_ms=1_000,
    group_consumer_min_heartbeat_interval_ms=1_000,
)
SETTLE_S = 60


@pytest.fixture
def running() -> Iterator[Running]:
    gateway = Running(config=CONFIG)
    try:
        yield gateway
    finally:
        gateway.stop()


def member(running: Running, group: str, name: str, **kwargs: Any) -> sc.Member:
    return sc.CLIENTS[CLIENT](running.port, group, name, **kwargs)


def revoked_since(m: sc.Member, mark: int) -> set[tuple[str, int]]:
    return {tp for kind, tps in m.events[mark:] if kind == "revoked" for tp in tps}


@pytest.mark.slow
def test_a_group_forms_and_members_come_and_go_without_stopping_the_others(
    running: Running,
) -> None:
    group = "kip848-membership"
    members = [member(running, group, f"m{i}") for i in range(2)]
    try:
        sc.wait_for(lambda: sc.disjoint_cover(members), SETTLE_S, lambda: sc.shares(members))
        # A third joins: the others give up only what moves to it, and keep the rest throughout.
        before = {m.name: m.partitions() for m in members}
        marks = {m.name: len(m.events) for m in members}
        members.append(member(running, group, "m2"))
        sc.wait_for(lambda: sc.disjoint_cover(members), SETTLE_S, lambda: sc.shares(members))
        third = members[2].partitions()
        for m in members[:2]:
            lost = {p for t, p in revoked_since(m, marks[m.name])}
            assert lost <= before[m.name] & third, (m.name, lost, third)
            assert before[m.name] - lost <= m.partitions()  # kept what did not move
        # One leaves: the others only gain.
        leaving = members.pop(0)
        marks = {m.name: len(m.events) for m in members}
        leaving.close()
        sc.wait_for(lambda: sc.disjoint_cover(members), SETTLE_S, lambda: sc.shares(members))
        for m in members:
            assert revoked_since(m, marks[m.name]) == set(), m.events
        described = running.gateway.backend.engine.group(group)
        assert described is not None and len(described.members) == 2
    finally:
        for m in members:
            m.close()


@pytest.mark.slow
def test_a_killed_member_is_expired_after_its_session(running: Running) -> None:
    group = "kip848-kill"
    alive = member(running, group, "alive")
    killed = sc.ProcessMember(CLIENT, running.port, group, "killed", SESSION_MS)
    both: list[sc.AnyMember] = [alive, killed]
    try:
        sc.wait_for(lambda: sc.disjoint_cover(both), SETTLE_S, lambda: sc.shares(both))
        killed.kill()
        killed_at = time.monotonic()
        sc.wait_for(lambda: sc.disjoint_cover([alive]), SETTLE_S, lambda: sc.shares([alive]))
        elapsed = time.monotonic() - killed_at
        assert elapsed >= SESSION_MS / 1000 - 1.5, elapsed  # not before its session ran out
    finally:
        killed.cleanup()
        alive.close()


@pytest.mark.slow
def test_a_static_member_restarts_and_gets_its_partitions_back(running: Running) -> None:
    group = "kip848-static"
    stays = member(running, group, "stays", instance_id="stays")
    restarts = member(running, group, "restarts", instance_id="restarts")
    try:
        pair: list[sc.AnyMember] = [stays, restarts]
        sc.wait_for(lambda: sc.disjoint_cover(pair), SETTLE_S, lambda: sc.shares(pair))
        kept, theirs = stays.partitions(), restarts.partitions()
        mark = len(stays.events)
        restarts.close()  # a static member leaves with epoch -2: its partitions wait for it
        again = member(running, group, "restarts", instance_id="restarts")
        pair = [stays, again]
        sc.wait_for(lambda: again.partitions() == theirs, SETTLE_S, lambda: sc.shares(pair))
        assert stays.partitions() == kept and stays.events[mark:] == []  # never disturbed
        again.close()
    finally:
        stays.close()


@pytest.mark.slow
def test_commits_are_read_back_and_the_admin_client_sees_a_consumer_group(
    running: Running,
) -> None:
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    group = "kip848-admin"
    one = member(running, group, "admin-m0")
    try:
        sc.wait_for(lambda: sc.disjoint_cover([one]), SETTLE_S, lambda: sc.shares([one]))
        one.commit({("t", p): 100 + p for p in range(6)})  # OffsetCommit v9, with its epoch
        assert one.committed([("t", p) for p in range(6)]) == {("t", p): 100 + p for p in range(6)}
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{running.port}", "log_level": 0})
        [future] = admin.describe_consumer_groups([group]).values()
        described = future.result(timeout=30)
        assert described.group_id == group
        assert described.state == ConsumerGroupState.STABLE
        assert described.type == ConsumerGroupType.CONSUMER
        assert described.partition_assignor == "uniform"
        [entry] = described.members
        assert entry.client_id == "admin-m0" and entry.member_id == one.member_id()
        assert sorted(tp.partition for tp in entry.assignment.topic_partitions) == list(range(6))
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(timeout=30)
        assert [g.group_id for g in listed.valid] == [group]
        assert listed.valid[0].type == ConsumerGroupType.CONSUMER
    finally:
        one.close()


@pytest.mark.slow
def test_a_consumer_group_and_its_commits_survive_a_gateway_restart(tmp_path: Any) -> None:
    """With a warehouse: the group's records go to the consumer_offsets table and a new gateway
    loads them (Kafka's load on failover); group_state shows the consumer group."""
    from coordinator.modern.model import ConsumerGroup
    from coordinator.stream.delta_read import read_table
    from coordinator.stream.schema import GROUP_STATE, Warehouse

    warehouse = str(tmp_path / "wh")
    group = "kip848-restart"
    first = Running(warehouse=warehouse, config=CONFIG)
    try:
        one = member(first, group, "m0")
        sc.wait_for(lambda: sc.disjoint_cover([one]), SETTLE_S, lambda: sc.shares([one]))
        one.commit({("t", 0): 5})
        one.close()
    finally:
        first.stop()
    second = Running(warehouse=warehouse, config=CONFIG)
    try:
        loaded = second.gateway.backend.engine.group(group)
        assert isinstance(loaded, ConsumerGroup) and loaded.members == {}
        assert loaded.offsets[("t", 0)].committed_offset == 5
        again = member(second, group, "m1")
        sc.wait_for(lambda: sc.disjoint_cover([again]), SETTLE_S, lambda: sc.shares([again]))
        assert again.committed([("t", 0)]) == {("t", 0): 5}
        again.close()
        rows = read_table(Warehouse.at(tmp_path / "wh").tables / GROUP_STATE).to_pylist()
        [row] = [r for r in rows if r["group_id"] == group]
        assert row["protocol_type"] == "consumer"
    finally:
        second.stop()


#: The job's consumer-group timing in these tests: a 20 s session (a live member is expired
#: only by a micro-batch lag of that much), Kafka's 5 s heartbeats. Not shorter: librdkafka
#: gives up on a heartbeat that takes longer than its interval and sends another, and an
#: answer it gave up on that carried a new assignment is not sent again (the next one says
#: "unchanged"), so a member whose revocation is lost so waits for its rebalance timeout.
JOB_TIMING = {
    "group.consumer.session.timeout.ms": "20000",
    "group.consumer.min.session.timeout.ms": "6000",
}


def _through_the_job(port: int, group: str, warehouse: Any) -> None:
    """Through the job's back end: two members form a group, a third joins (the others give up
    only what moves to it), one leaves (the others only gain), one is killed and expired after
    its session, commits read back, the admin client describes a consumer group."""
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    wait = SETTLE_S * 3
    members = [member_at(port, group, f"job-m{i}") for i in range(2)]
    killed: sc.ProcessMember | None = None
    try:
        sc.wait_for(lambda: sc.disjoint_cover(members), wait, lambda: sc.shares(members))
        before = {m.name: m.partitions() for m in members}
        marks = {m.name: len(m.events) for m in members}
        members.append(member_at(port, group, "job-m2"))
        sc.wait_for(lambda: sc.disjoint_cover(members), wait, lambda: sc.shares(members))
        third = members[2].partitions()
        for m in members[:2]:
            lost = {p for _, p in revoked_since(m, marks[m.name])}
            assert lost <= before[m.name] & third, (m.name, lost, third)
        leaving = members.pop(0)
        marks = {m.name: len(m.events) for m in members}
        leaving.close()
        sc.wait_for(lambda: sc.disjoint_cover(members), wait, lambda: sc.shares(members))
        for m in members:
            assert revoked_since(m, marks[m.name]) == set(), m.events
        killed = sc.ProcessMember(CLIENT, port, group, "job-killed", 0)
        everyone: list[sc.AnyMember] = [*members, killed]
        sc.wait_for(lambda: sc.disjoint_cover(everyone), wait, lambda: sc.shares(everyone))
        killed.kill()
        sc.wait_for(lambda: sc.disjoint_cover(members), wait, lambda: sc.shares(members))
        stays = members[0]
        stays.commit({("t", p): 7 for p in range(6)})
        try:
            assert _committed(stays, [("t", 0), ("t", 5)]) == [7, 7]
        except Exception as exc:
            raise AssertionError(f"{exc}: the job answered {_fetches(warehouse)}") from exc
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
        [future] = admin.describe_consumer_groups([group]).values()
        described = future.result(timeout=120)
        assert described.type == ConsumerGroupType.CONSUMER
        assert sorted(d.client_id for d in described.members) == ["job-m1", "job-m2"]
    finally:
        if killed is not None:
            killed.cleanup()
        for m in members:
            m.close()


def _fetches(warehouse: Any) -> list[tuple[Any, ...]]:
    """The job's OffsetFetch answers (to explain a failed read-back)."""
    import json

    from coordinator.stream.delta_read import read_table
    from coordinator.stream.schema import RESPONSES, Warehouse

    rows = read_table(Warehouse.at(warehouse).tables / RESPONSES).to_pylist()
    return [
        (r["batch_id"], r["error"], json.loads(r["body"]).get("error_message"))
        for r in rows
        if r["api"] == "offset_fetch"
    ]


def _committed(m: sc.Member, tps: list[tuple[str, int]]) -> list[int]:
    """OffsetFetch through a job: a micro-batch per try, so more patience than the scenarios'."""
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(t, p) for t, p in tps]
    answer = m.call(lambda: m.consumer.committed(wanted, timeout=90), timeout=120)
    return [tp.offset for tp in answer]


def member_at(port: int, group: str, name: str) -> sc.Member:
    return sc.CLIENTS[CLIENT](port, group, name)


@pytest.mark.slow
def test_consumer_groups_through_the_jobs_batch(tmp_path: Any) -> None:
    """The gateway's job back end in front of the job's micro-batch (no Spark), with
    ``job.topics`` naming the gateway's topic: every answer takes a micro-batch."""
    from coordinator.gateway.forwarding import JobBackend
    from tests.test_gateway_backends import LocalJobLoop

    warehouse = tmp_path / "wh"
    loop = LocalJobLoop(warehouse, trigger_ms=100, topics="t:6", coordinator=JOB_TIMING)
    running = Running(backend=JobBackend(warehouse))
    try:
        _through_the_job(running.port, "kip848-job", warehouse)
    finally:
        running.stop()
        loop.stop()


@pytest.mark.slow
def test_consumer_groups_through_the_spark_job(spark: Any, tmp_path: Any) -> None:
    """End to end: confluent-kafka with group.protocol=consumer -> the gateway -> the Spark
    job's inbox -> applyInPandasWithState (the group's blob between micro-batches) -> Delta ->
    the gateway -> the consumers."""
    from coordinator.gateway.forwarding import JobBackend
    from tests.stream_support import RunningCoordinator

    warehouse = tmp_path / "wh"
    job = RunningCoordinator(spark, warehouse, topics="t:6", coordinator=JOB_TIMING).start()
    running = Running(backend=JobBackend(warehouse))
    try:
        _through_the_job(running.port, "kip848-spark", warehouse)
    finally:
        running.stop()
        job.stop()


@pytest.mark.slow
def test_a_regex_subscription_is_resolved_by_the_coordinator() -> None:
    """librdkafka sends a ``^``-pattern subscription as SubscribedTopicRegex (v1); the
    coordinator resolves it against the topics and assigns what it matches."""
    gateway = Running(config=CONFIG, topics={"t": 6, "tother": 2, "x": 3})
    try:
        one = member(gateway, "kip848-regex", "re0", topics=("^t.*",))
        try:
            want = {("t", p) for p in range(6)} | {("tother", 0), ("tother", 1)}
            sc.wait_for(lambda: one.assigned() == want, SETTLE_S, one.assigned)
            group = gateway.gateway.backend.engine.group("kip848-regex")
            assert group is not None and list(group.resolved_regexes.values()) == [("t", "tother")]
        finally:
            one.close()
    finally:
        gateway.stop()


@pytest.mark.slow
def test_a_classic_consumer_joins_a_consumer_protocol_group_and_inherits_it(
    running: Running,
) -> None:
    """librdkafka with the classic protocol joins a group of a consumer-protocol member as a
    classic member of it (JoinGroup, SyncGroup and Heartbeat served from the consumer group);
    when the consumer-protocol member leaves, the group becomes a classic group (the default
    migration policy, bidirectional) and the classic member gets every partition."""
    from coordinator.group.model import ClassicGroup
    from coordinator.modern.model import ConsumerGroup

    group = "kip848-mixed"
    modern = member(running, group, "modern")
    engine = running.gateway.backend.engine
    # The classic consumer starts once the consumer group exists. Started together, its
    # JoinGroup can come first and make a classic group, in a rebalance, whose new member has
    # no assignment yet: the modern member's first heartbeat then cannot upgrade it (as in
    # Kafka: its empty assignment is not a consumer protocol assignment, GROUP_ID_NOT_FOUND),
    # and librdkafka takes that error as fatal.
    try:
        sc.wait_for(lambda: len(modern.partitions()) == 6, SETTLE_S, lambda: sc.shares([modern]))
    except BaseException:
        modern.close()
        raise
    classic = sc.CLIENTS["confluent-kafka"](running.port, group, "classic")
    both: list[sc.Member] = [modern, classic]
    try:
        sc.wait_for(
            lambda: sc.disjoint_cover(both) and all(m.partitions() for m in both),
            SETTLE_S,
            lambda: sc.shares(both),
        )
        mixed = engine.group(group)
        assert isinstance(mixed, ConsumerGroup)
        assert sorted(m.uses_classic_protocol for m in mixed.members.values()) == [False, True]
        modern.close()
        sc.wait_for(lambda: sc.disjoint_cover([classic]), SETTLE_S, lambda: sc.shares([classic]))
        assert isinstance(engine.group(group), ClassicGroup)
    finally:
        for m in both:
            m.close()


@pytest.mark.slow
def test_a_consumer_protocol_member_upgrades_a_classic_group(running: Running) -> None:
    """A classic group of librdkafka consumers becomes a consumer group when a member with
    ``group.protocol=consumer`` joins it; the classic members go on in it."""
    from coordinator.modern.model import ConsumerGroup

    group = "kip848-upgrade"
    classics = [sc.CLIENTS["confluent-kafka"](running.port, group, f"c{i}") for i in range(2)]
    everyone: list[sc.Member] = list(classics)
    engine = running.gateway.backend.engine
    try:
        sc.wait_for(lambda: sc.disjoint_cover(classics), SETTLE_S, lambda: sc.shares(classics))
        everyone.append(member(running, group, "modern"))
        sc.wait_for(
            lambda: sc.disjoint_cover(everyone) and all(m.partitions() for m in everyone),
            SETTLE_S,
            lambda: sc.shares(everyone),
        )
        upgraded = engine.group(group)
        assert isinstance(upgraded, ConsumerGroup) and len(upgraded.members) == 3
    finally:
        for m in everyone:
            m.close()
