"""aiokafka 0.14.0 against the gateway (interoperability): its AIOKafkaConsumer and
AIOKafkaAdminClient, with its own codec (never kio), through the scenarios of
tests/client_scenarios.py and its admin API.

aiokafka's admin client has no alter-offsets, delete-offsets or delete-groups call (0.14.0:
``aiokafka/admin/client.py``). Offsets of a group are altered through its consumer instead: a
consumer with a ``group_id`` and manually assigned partitions commits without a generation or
member id (generation -1, member ""), which is the request an admin client's alter-offsets
sends, and Kafka refuses it for a group with members."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests import client_scenarios as sc
from tests.gateway_support import Running

CLIENT = "aiokafka"


@pytest.mark.slow
def test_group_forms_and_rebalances_on_join_leave_and_kill(running: Running):
    observed = sc.scenario_membership(CLIENT, running.port)
    assert None not in observed["generations"], observed  # aiokafka's coordinator.generation
    assert observed["leave_rebalance_s"] < 5, observed  # LeaveGroup, not a session timeout


@pytest.mark.slow
def test_commits_read_back_after_a_gateway_restart(tmp_path: Any):
    sc.scenario_commits_survive_restart(CLIENT, str(tmp_path / "wh"))


@pytest.mark.slow
def test_static_member_restarts_without_a_rebalance(running: Running):
    sc.scenario_static_restart(CLIENT, running.port)


async def _commit_without_membership(port: int, group: str, offsets: dict[sc.TP, int]) -> None:
    """An offset commit with no generation: a consumer of the group with assigned partitions."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{port}", group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(*tp) for tp in offsets])
        await consumer.commit({TopicPartition(*tp): (o, "alt") for tp, o in offsets.items()})
    finally:
        await consumer.stop()


@pytest.mark.slow
def test_admin_client_on_live_and_empty_group(running: Running, caplog: pytest.LogCaptureFixture):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.coordinator.protocol import (
        ConsumerProtocolMemberAssignment,
        ConsumerProtocolMemberMetadata,
    )
    from aiokafka.errors import CommitFailedError
    from aiokafka.structs import TopicPartition

    group = "aiokafka-admin"
    port = running.port
    t = [TopicPartition("t", p) for p in range(sc.PARTITIONS)]

    async def admin_calls(calls: Any) -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", client_id="admin")
        await admin.start()
        try:
            return await calls(admin)
        finally:
            await admin.close()

    members = [sc.AiokafkaMember(port, group, f"admin-m{i}") for i in range(2)]
    try:
        sc.wait_for(
            lambda: sc.disjoint_cover(list(members)), sc.SETTLE_S, lambda: sc.shares(list(members))
        )
        for m in members:
            m.commit({tp: 7 for tp in m.assigned()})

        async def live(admin: Any) -> Any:
            return (
                await admin.list_consumer_groups(),
                await admin.describe_consumer_groups([group]),
                await admin.list_consumer_group_offsets(group),
            )

        listed, described, offsets = asyncio.run(admin_calls(live))
        assert (group, "consumer") in [tuple(g[:2]) for g in listed], listed
        [response] = described
        [(error, group_id, state, protocol_type, protocol, described_members, *_)] = response.groups
        assert (error, group_id, state, protocol_type) == (0, group, "Stable", "consumer")
        assert protocol == "roundrobin"  # aiokafka's only default assignor
        by_client = {d[1]: d for d in described_members}
        assert sorted(by_client) == ["admin-m0", "admin-m1"], described_members
        for m in members:
            _, _, host, metadata, assignment = by_client[m.name]
            assert host == "/127.0.0.1"
            assert ConsumerProtocolMemberMetadata.decode(metadata).subscription == ["t"]
            decoded = ConsumerProtocolMemberAssignment.decode(assignment)
            got = {(topic, p) for topic, ps in decoded.assignment for p in ps}
            assert got == set(m.assigned()), (got, m.assigned())
        assert {tp: o.offset for tp, o in offsets.items()} == dict.fromkeys(t, 7)

        # Kafka refuses a commit without a generation into a live group (UNKNOWN_MEMBER_ID);
        # aiokafka logs the error and raises CommitFailedError (its reaction to error 25).
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="aiokafka"), pytest.raises(CommitFailedError):
            asyncio.run(_commit_without_membership(port, group, {("t", 0): 1}))
        assert "[Error 25] UnknownMemberIdError" in caplog.text

        async def offsets_now(admin: Any) -> Any:
            return await admin.list_consumer_group_offsets(group)

        unchanged = asyncio.run(admin_calls(offsets_now))
        assert {tp: o.offset for tp, o in unchanged.items()} == dict.fromkeys(t, 7)
    finally:
        for m in members:
            m.close()

    # Empty now (both members left): its offsets are altered and read back.
    asyncio.run(
        _commit_without_membership(port, group, {("t", p): 40 + p for p in range(sc.PARTITIONS)})
    )

    async def empty(admin: Any) -> Any:
        return (
            await admin.describe_consumer_groups([group]),
            await admin.list_consumer_group_offsets(group),
        )

    described, offsets = asyncio.run(admin_calls(empty))
    [(error, _, state, _, _, described_members, *_)] = described[0].groups
    assert (error, state, described_members) == (0, "Empty", [])
    assert {tp: (o.offset, o.metadata) for tp, o in offsets.items()} == {
        tp: (40 + tp.partition, "alt") for tp in t
    }
