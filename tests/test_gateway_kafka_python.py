"""kafka-python 3.0.12 against the gateway (issue 10, interoperability): its KafkaConsumer and
KafkaAdminClient, with its own codec (never kio), through the scenarios of
tests/client_scenarios.py and its admin API."""

from __future__ import annotations

from typing import Any

import pytest

from tests import client_scenarios as sc
from tests.gateway_support import Running

CLIENT = "kafka-python"


@pytest.mark.slow
def test_group_forms_and_rebalances_on_join_leave_and_kill(running: Running):
    observed = sc.scenario_membership(CLIENT, running.port)
    # kafka-python exposes the generation (KafkaConsumer.group_metadata()).
    assert None not in observed["generations"], observed
    assert observed["leave_rebalance_s"] < 5, observed  # LeaveGroup, not a session timeout


@pytest.mark.slow
def test_commits_read_back_after_a_gateway_restart(tmp_path: Any):
    sc.scenario_commits_survive_restart(CLIENT, str(tmp_path / "wh"))


@pytest.mark.slow
def test_static_member_restarts_without_a_rebalance(running: Running):
    sc.scenario_static_restart(CLIENT, running.port)


@pytest.mark.slow
def test_admin_client_on_live_and_empty_group(running: Running):
    import kafka.errors as Errors
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata, TopicPartition

    group = "kafka-python-admin"
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{running.port}", client_id="admin")
    members = [sc.KafkaPythonMember(running.port, group, f"admin-m{i}") for i in range(2)]
    try:
        sc.wait_for(lambda: sc.disjoint_cover(list(members)), 30, lambda: sc.shares(list(members)))
        for m in members:
            m.commit({tp: 7 for tp in m.assigned()})
        t = [TopicPartition("t", p) for p in range(sc.PARTITIONS)]

        listed = admin.list_groups()
        mine = [g for g in listed if g["group_id"] == group]
        assert len(mine) == 1 and mine[0]["protocol_type"] == "consumer", listed

        described = admin.describe_groups([group])[group]
        assert described["error"] is None and described["group_state"] == "Stable", described
        assert described["protocol_type"] == "consumer", described
        assert described["protocol_data"] in ("range", "roundrobin"), described
        by_client = {m["client_id"]: m for m in described["members"]}
        assert sorted(by_client) == ["admin-m0", "admin-m1"], described
        for m in members:
            entry = by_client[m.name]
            assert entry["client_host"] == "/127.0.0.1"
            assignment = entry["member_assignment"]
            got = {
                (a["topic"], p) for a in assignment["assigned_partitions"] for p in a["partitions"]
            }
            assert got == set(m.assigned()), (got, m.assigned())
            assert entry["member_metadata"]["topics"] == ["t"]

        offsets = admin.list_group_offsets(group)[group]
        assert {tp: o.offset for tp, o in offsets.items()} == {tp: 7 for tp in t}

        # Kafka refuses an admin commit (generation -1, no member) into a live group ...
        refused = admin.alter_group_offsets(group, {t[0]: OffsetAndMetadata(1, "", -1)})
        assert refused == {t[0]: Errors.UnknownMemberIdError}
        # ... deleting a live group ...
        assert admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
        # ... and deleting the offsets of a topic the group is subscribed to.
        assert admin.delete_group_offsets(group, [t[0]]) == {
            t[0]: Errors.GroupSubscribedToTopicError
        }
        assert admin.list_group_offsets(group)[group][t[0]].offset == 7
    finally:
        for m in members:
            m.close()

    # Empty now (both members left): it is altered, its offsets deleted, then it is deleted.
    described = admin.describe_groups([group])[group]
    assert described["group_state"] == "Empty" and described["members"] == [], described
    other = [TopicPartition("other", p) for p in range(2)]
    altered = admin.alter_group_offsets(
        group, {tp: OffsetAndMetadata(40 + tp.partition, "m", -1) for tp in [*t, *other]}
    )
    assert set(altered.values()) == {Errors.NoError}, altered
    offsets = admin.list_group_offsets(group)[group]
    assert {tp: (o.offset, o.metadata) for tp, o in offsets.items()} == {
        tp: (40 + tp.partition, "m") for tp in [*t, *other]
    }
    assert admin.delete_group_offsets(group, other) == dict.fromkeys(other, Errors.NoError)
    assert set(admin.list_group_offsets(group)[group]) == set(t)
    assert admin.delete_groups([group]) == {group: "OK"}
    assert [g for g in admin.list_groups() if g["group_id"] == group] == []
    assert admin.describe_groups([group])[group]["group_state"] == "Dead"
    assert admin.delete_groups([group]) == {group: "GroupIdNotFoundError"}
    admin.close()
