"""confluent-kafka 2.16.1 (librdkafka 2.16.0) against the gateway (interoperability):
its Consumer and AdminClient, with librdkafka's own codec (never kio), through the scenarios of
tests/client_scenarios.py and its admin API.

confluent-kafka's AdminClient has no delete-offsets call (librdkafka has
``rd_kafka_DeleteConsumerGroupOffsets``, the Python binding does not expose it), and its
Consumer does not expose the generation."""

from __future__ import annotations

from typing import Any

import pytest

from tests import client_scenarios as sc
from tests.gateway_support import Running

CLIENT = "confluent-kafka"


@pytest.mark.slow
def test_group_forms_and_rebalances_on_join_leave_and_kill(running: Running):
    observed = sc.scenario_membership(CLIENT, running.port)
    assert observed["leave_rebalance_s"] < 5, observed  # LeaveGroup, not a session timeout


@pytest.mark.slow
def test_commits_read_back_after_a_gateway_restart(tmp_path: Any):
    sc.scenario_commits_survive_restart(CLIENT, str(tmp_path / "wh"))


@pytest.mark.slow
def test_static_member_restarts_without_a_rebalance(running: Running):
    sc.scenario_static_restart(CLIENT, running.port)


def _one(futures: dict[Any, Any]) -> Any:
    [future] = futures.values()
    return future.result(timeout=30)


@pytest.mark.slow
def test_admin_client_on_live_and_empty_group(running: Running):
    from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition
    from confluent_kafka import ConsumerGroupTopicPartitions as Group
    from confluent_kafka.admin import AdminClient

    group = "confluent-admin"
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{running.port}", "log_level": 0})
    members = [sc.ConfluentMember(running.port, group, f"admin-m{i}") for i in range(2)]

    def offsets() -> dict[tuple[str, int], tuple[int, str | None]]:
        answer = _one(admin.list_consumer_group_offsets([Group(group)]))
        return {
            (tp.topic, tp.partition): (tp.offset, tp.metadata) for tp in answer.topic_partitions
        }

    try:
        sc.wait_for(
            lambda: sc.disjoint_cover(list(members)), sc.SETTLE_S, lambda: sc.shares(list(members))
        )
        for m in members:
            m.commit({tp: 7 for tp in m.assigned()})

        listed = admin.list_consumer_groups().result(timeout=30)
        assert listed.errors == []
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1 and mine[0].state == ConsumerGroupState.STABLE, listed.valid
        assert not mine[0].is_simple_consumer_group

        described = _one(admin.describe_consumer_groups([group]))
        assert described.group_id == group and described.state == ConsumerGroupState.STABLE
        assert described.partition_assignor in ("range", "roundrobin"), described
        assert not described.is_simple_consumer_group
        by_client = {d.client_id: d for d in described.members}
        assert sorted(by_client) == ["admin-m0", "admin-m1"], described.members
        for m in members:
            entry = by_client[m.name]
            assert entry.host == "/127.0.0.1"
            assert entry.member_id == m.member_id()
            got = {(tp.topic, tp.partition) for tp in entry.assignment.topic_partitions}
            assert got == set(m.assigned()), (got, m.assigned())
        # (librdkafka commits null metadata, which Kafka stores and returns as "", and
        # librdkafka reads "" back as None.)
        assert offsets() == {("t", p): (7, None) for p in range(sc.PARTITIONS)}

        # Kafka refuses an admin commit (generation -1, no member) into a live group ...
        # (a partition-level error, which confluent-kafka reports on the partition).
        refused_tps = _one(
            admin.alter_consumer_group_offsets([Group(group, [TopicPartition("t", 0, 1)])])
        ).topic_partitions
        assert [tp.error.code() for tp in refused_tps] == [KafkaError.UNKNOWN_MEMBER_ID]
        # ... and deleting a live group.
        with pytest.raises(KafkaException) as refused:
            _one(admin.delete_consumer_groups([group]))
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP, refused.value
        assert offsets()[("t", 0)] == (7, None)
    finally:
        for m in members:
            m.close()

    # Empty now (both members left): it is altered, then deleted.
    described = _one(admin.describe_consumer_groups([group]))
    assert described.state == ConsumerGroupState.EMPTY and described.members == []
    wanted = [TopicPartition("t", p, 40 + p, metadata="m") for p in range(sc.PARTITIONS)]
    altered = _one(admin.alter_consumer_group_offsets([Group(group, wanted)]))
    assert [tp.error for tp in altered.topic_partitions] == [None] * sc.PARTITIONS
    assert offsets() == {("t", p): (40 + p, "m") for p in range(sc.PARTITIONS)}
    _one(admin.delete_consumer_groups([group]))
    listed = admin.list_consumer_groups().result(timeout=30)
    assert [g for g in listed.valid if g.group_id == group] == []
    described = _one(admin.describe_consumer_groups([group]))
    assert described.state == ConsumerGroupState.DEAD, described
    with pytest.raises(KafkaException) as refused:
        _one(admin.delete_consumer_groups([group]))
    assert refused.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND, refused.value
