"""coordinator.admin.history: offsets, commit activity, generations and rebalances from rows.

Rows are built by hand with the Delta tables' columns and passed through pyarrow with the
tables' own schemas, so they have exactly the shape ``Table.to_pylist()`` gives the CLI.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from coordinator.admin import history
from coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    encode_assignment,
    encode_subscription,
)
from coordinator.log.records import GROUP_METADATA, OFFSET_COMMIT
from coordinator.stream.schema import CONSUMER_OFFSETS_SCHEMA, GROUP_HISTORY_SCHEMA

# --- row builders --------------------------------------------------------------------------------


def _table_rows(rows: list[dict[str, Any]], schema: pa.Schema) -> list[dict[str, Any]]:
    """Rows as the tables give them: every column present, typed by the table's schema."""
    full = [{name: row.get(name) for name in schema.names} for row in rows]
    for row in rows:
        assert set(row) <= set(schema.names), set(row) - set(schema.names)
    return pa.Table.from_pylist(full, schema=schema).to_pylist()


class Log:
    """A ``consumer_offsets`` log under construction: offsets numbered in order."""

    def __init__(self, offsets_partition: int = 7) -> None:
        self.rows: list[dict[str, Any]] = []
        self.offsets_partition = offsets_partition

    def _add(self, **row: Any) -> None:
        row.setdefault("offsets_partition", self.offsets_partition)
        row.setdefault("offset", len(self.rows))
        row.setdefault("key", b"k")
        self.rows.append(row)

    def commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        at: int,
        *,
        epoch: int = -1,
        metadata: str = "",
        expire: int | None = None,
        batch: int | None = 0,
    ) -> Log:
        self._add(
            record_type=OFFSET_COMMIT,
            group_id=group,
            topic=topic,
            partition=partition,
            timestamp_ms=at,
            value=b"v",
            committed_offset=offset,
            leader_epoch=epoch,
            metadata=metadata,
            commit_timestamp_ms=at,
            expire_timestamp_ms=expire,
            batch_id=batch,
        )
        return self

    def delete(self, group: str, topic: str, partition: int, at: int) -> Log:
        self._add(
            record_type=OFFSET_COMMIT,
            group_id=group,
            topic=topic,
            partition=partition,
            timestamp_ms=at,
            value=None,
            batch_id=0,
        )
        return self

    def metadata(
        self,
        group: str,
        generation: int,
        at: int,
        members: list[dict[str, Any]],
        *,
        leader: str | None = None,
        protocol: str | None = "range",
    ) -> Log:
        self._add(
            record_type=GROUP_METADATA,
            group_id=group,
            timestamp_ms=at,
            value=b"v",
            protocol_type="consumer",
            generation_id=generation,
            protocol_name=protocol if members else None,
            leader=leader if members else None,
            current_state_timestamp_ms=at,
            members=members,
            batch_id=0,
        )
        return self

    def group_tombstone(self, group: str, at: int) -> Log:
        self._add(record_type=GROUP_METADATA, group_id=group, timestamp_ms=at, value=None)
        return self

    def table_rows(self) -> list[dict[str, Any]]:
        return _table_rows(self.rows, CONSUMER_OFFSETS_SCHEMA)


def member(
    member_id: str,
    topics: tuple[str, ...] = ("orders",),
    assigned: dict[str, tuple[int, ...]] | None = None,
    *,
    instance: str | None = None,
    client: str = "client",
    host: str = "/10.0.0.1",
    subscription: bytes | None = None,
    assignment: bytes | None = None,
) -> dict[str, Any]:
    if subscription is None:
        subscription = encode_subscription(Subscription(topics))
    if assignment is None and assigned is not None:
        assignment = encode_assignment(
            Assignment(tuple(TopicPartitions(t, ps) for t, ps in assigned.items()))
        )
    return {
        "member_id": member_id,
        "group_instance_id": instance,
        "client_id": client,
        "client_host": host,
        "rebalance_timeout_ms": 60_000,
        "session_timeout_ms": 10_000,
        "subscription": subscription,
        "assignment": assignment,
    }


def hist(
    group: str,
    state: str,
    batch: int,
    at: int | None,
    *,
    generation: int | None = None,
    members: tuple[str, ...] = (),
    leader: str | None = None,
    protocol: str | None = None,
    reason: str | None = None,
    updated: int | None = None,
) -> dict[str, Any]:
    """One ``group_history`` row (a Dead row has only the group, partition and batch columns)."""
    if state == "Dead":
        return {
            "group_id": group,
            "offsets_partition": 3,
            "state": "Dead",
            "updated_at_ms": updated,
            "batch_id": batch,
        }
    return {
        "group_id": group,
        "offsets_partition": 3,
        "state": state,
        "protocol_type": "consumer",
        "protocol_name": protocol,
        "generation_id": generation,
        "leader": leader,
        "num_members": len(members),
        "members": [
            {
                "member_id": m,
                "group_instance_id": None,
                "client_id": "c",
                "client_host": "/h",
                "session_timeout_ms": 10_000,
                "rebalance_timeout_ms": 60_000,
            }
            for m in members
        ],
        "num_committed_offsets": 0,
        "state_timestamp_ms": at,
        "rebalance_reason": reason,
        "updated_at_ms": updated if updated is not None else (at or 0) + 5,
        "batch_id": batch,
    }


def history_rows(*rows: dict[str, Any]) -> list[dict[str, Any]]:
    return _table_rows(list(rows), GROUP_HISTORY_SCHEMA)


def rebalance(**fields: Any) -> dict[str, Any]:
    """An expected rebalance row: the defaults of an in-progress one, overridden."""
    out = {
        "group_id": "g",
        "generation_id": None,
        "previous_generation_id": None,
        "start_ms": None,
        "end_ms": None,
        "duration_ms": None,
        "outcome": None,
        "leader": None,
        "protocol_name": None,
        "members_before": 0,
        "members_after": None,
        "joined": [],
        "left": [],
        "reason": None,
        "start_batch": None,
        "end_batch": None,
    }
    assert set(fields) <= set(out), set(fields) - set(out)
    out.update(fields)
    return out


# --- committed_offsets ---------------------------------------------------------------------------


def test_committed_offsets_last_record_per_key_wins_with_every_column():
    log = (
        Log()
        .commit("g", "t", 0, 5, at=100, epoch=1, metadata="m1", expire=900, batch=1)
        .commit("g", "t", 0, 9, at=200, epoch=2, metadata="m2", expire=1000, batch=2)
        .commit("g", "t", 1, 3, at=150, batch=1)
    )
    assert history.committed_offsets(log.table_rows()) == [
        {
            "group_id": "g",
            "topic": "t",
            "partition": 0,
            "committed_offset": 9,
            "leader_epoch": 2,
            "metadata": "m2",
            "commit_timestamp_ms": 200,
            "expire_timestamp_ms": 1000,
            "offsets_partition": 7,
            "log_offset": 1,
            "batch_id": 2,
        },
        {
            "group_id": "g",
            "topic": "t",
            "partition": 1,
            "committed_offset": 3,
            "leader_epoch": -1,
            "metadata": "",
            "commit_timestamp_ms": 150,
            "expire_timestamp_ms": None,
            "offsets_partition": 7,
            "log_offset": 2,
            "batch_id": 1,
        },
    ]


def test_committed_offsets_tombstone_removes_and_a_later_commit_brings_it_back():
    log = (
        Log()
        .commit("g", "t", 0, 5, at=100)
        .commit("g", "t", 1, 6, at=100)
        .delete("g", "t", 0, at=200)
        .commit("g", "t", 1, 8, at=250)
        .delete("g", "t", 1, at=300)
        .commit("g", "t", 1, 2, at=400)
    )
    rows = history.committed_offsets(log.table_rows())
    assert [(r["topic"], r["partition"], r["committed_offset"], r["log_offset"]) for r in rows] == [
        ("t", 1, 2, 5)
    ]


def test_committed_offsets_tombstone_without_a_commit_is_harmless():
    log = Log().delete("g", "t", 0, at=100).commit("g", "t", 1, 1, at=110)
    rows = history.committed_offsets(log.table_rows())
    assert [(r["partition"], r["committed_offset"]) for r in rows] == [(1, 1)]


def test_committed_offsets_ignore_group_metadata_and_sort_by_group_topic_partition():
    log = (
        Log()
        .commit("g2", "a", 0, 1, at=1)
        .metadata("g1", 1, at=2, members=[member("m1")], leader="m1")
        .commit("g1", "b", 10, 2, at=3)
        .commit("g1", "b", 2, 3, at=4)
        .commit("g1", "a", 5, 4, at=5)
        .group_tombstone("g1", at=6)  # a group tombstone does not touch offsets
    )
    rows = history.committed_offsets(log.table_rows())
    assert [(r["group_id"], r["topic"], r["partition"], r["committed_offset"]) for r in rows] == [
        ("g1", "a", 5, 4),
        ("g1", "b", 2, 3),
        ("g1", "b", 10, 2),
        ("g2", "a", 0, 1),
    ]


def test_committed_offsets_rows_without_batch_id_column():
    row = Log().commit("g", "t", 0, 5, at=100).table_rows()[0]
    del row["batch_id"]
    assert history.committed_offsets([row])[0]["batch_id"] is None


def test_committed_offsets_of_nothing():
    assert history.committed_offsets([]) == []
    assert history.committed_offsets(Log().delete("g", "t", 0, at=1).table_rows()) == []


# --- partition_commits and commit_rate -----------------------------------------------------------


def test_partition_commits_counts_first_last_and_tombstones():
    log = (
        Log()
        .commit("g", "t", 0, 5, at=100)
        .commit("g", "t", 1, 1, at=110)
        .commit("g", "t", 0, 7, at=200)
        .delete("g", "t", 0, at=250)
        .commit("g", "t", 0, 3, at=300)
        .delete("h", "t", 0, at=400)
        .metadata("g", 1, at=500, members=[member("m")], leader="m")
    )
    assert history.partition_commits(log.table_rows()) == [
        {
            "group_id": "g",
            "topic": "t",
            "partition": 0,
            "commits": 3,
            "tombstones": 1,
            "first_commit_ms": 100,
            "last_commit_ms": 300,
            "first_offset": 5,
            "last_offset": 3,
        },
        {
            "group_id": "g",
            "topic": "t",
            "partition": 1,
            "commits": 1,
            "tombstones": 0,
            "first_commit_ms": 110,
            "last_commit_ms": 110,
            "first_offset": 1,
            "last_offset": 1,
        },
        {
            "group_id": "h",
            "topic": "t",
            "partition": 0,
            "commits": 0,
            "tombstones": 1,
            "first_commit_ms": None,
            "last_commit_ms": None,
            "first_offset": None,
            "last_offset": None,
        },
    ]


def test_partition_commits_sorts_partitions_numerically():
    log = Log().commit("g", "t", 10, 1, at=1).commit("g", "t", 2, 1, at=2)
    assert [r["partition"] for r in history.partition_commits(log.table_rows())] == [2, 10]


def test_commit_rate_buckets_by_commit_time_counting_distinct_partitions():
    log = (
        Log()
        .commit("g", "t", 0, 1, at=0)
        .commit("g", "t", 0, 2, at=59_999)
        .commit("g", "t", 1, 1, at=30_000)
        .commit("g", "u", 0, 1, at=60_000)
        .delete("g", "t", 0, at=61_000)  # tombstones are not commits
        .commit("g", "t", 0, 3, at=185_000)
        .commit("a", "t", 0, 1, at=70_000)
        .metadata("g", 1, at=1_000, members=[member("m")], leader="m")
    )
    assert history.commit_rate(log.table_rows(), 60_000) == [
        {"group_id": "a", "bucket_start_ms": 60_000, "commits": 1, "partitions": 1},
        {"group_id": "g", "bucket_start_ms": 0, "commits": 3, "partitions": 2},
        {"group_id": "g", "bucket_start_ms": 60_000, "commits": 1, "partitions": 1},
        {"group_id": "g", "bucket_start_ms": 180_000, "commits": 1, "partitions": 1},
    ]


def test_commit_rate_with_small_buckets():
    log = Log().commit("g", "t", 0, 1, at=5).commit("g", "t", 0, 2, at=15)
    assert history.commit_rate(log.table_rows(), 10) == [
        {"group_id": "g", "bucket_start_ms": 0, "commits": 1, "partitions": 1},
        {"group_id": "g", "bucket_start_ms": 10, "commits": 1, "partitions": 1},
    ]


@pytest.mark.parametrize("bucket_ms", [0, -60_000])
def test_commit_rate_needs_a_positive_bucket(bucket_ms):
    with pytest.raises(ValueError, match=r"^bucket_ms must be positive$"):
        history.commit_rate([], bucket_ms)


# --- generations and members_history -------------------------------------------------------------


def _two_generations() -> Log:
    return (
        Log()
        .metadata(
            "g",
            1,
            at=1_000,
            members=[
                member("m1", ("orders",), {"orders": (0, 1)}, client="c1", host="/h1"),
                member("m2", ("orders", "pay"), {"pay": (0,), "orders": (2,)}, instance="i2"),
            ],
            leader="m1",
        )
        .commit("g", "orders", 0, 10, at=1_500)
        .metadata("h", 4, at=1_600, members=[], protocol=None)
        .metadata(
            "g",
            2,
            at=2_000,
            members=[member("m1", ("orders",), {"orders": (0, 1, 2)}, client="c1", host="/h1")],
            leader="m1",
            protocol="roundrobin",
        )
    )


def test_generations_spans_members_and_decoded_assignments():
    spans = history.generations(_two_generations().table_rows())
    assert spans == [
        {
            "group_id": "g",
            "generation_id": 1,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "leader": "m1",
            "state": "Stable",
            "valid_from_ms": 1_000,
            "valid_to_ms": 2_000,
            "members": [
                {
                    "member_id": "m1",
                    "group_instance_id": None,
                    "client_id": "c1",
                    "client_host": "/h1",
                    "session_timeout_ms": 10_000,
                    "rebalance_timeout_ms": 60_000,
                    "topics": ["orders"],
                    "assigned_partitions": [
                        {"topic": "orders", "partition": 0},
                        {"topic": "orders", "partition": 1},
                    ],
                },
                {
                    "member_id": "m2",
                    "group_instance_id": "i2",
                    "client_id": "client",
                    "client_host": "/10.0.0.1",
                    "session_timeout_ms": 10_000,
                    "rebalance_timeout_ms": 60_000,
                    "topics": ["orders", "pay"],
                    "assigned_partitions": [
                        {"topic": "orders", "partition": 2},
                        {"topic": "pay", "partition": 0},
                    ],
                },
            ],
            "log_offset": 0,
        },
        {
            "group_id": "g",
            "generation_id": 2,
            "protocol_type": "consumer",
            "protocol_name": "roundrobin",
            "leader": "m1",
            "state": "Stable",
            "valid_from_ms": 2_000,
            "valid_to_ms": None,
            "members": [
                {
                    "member_id": "m1",
                    "group_instance_id": None,
                    "client_id": "c1",
                    "client_host": "/h1",
                    "session_timeout_ms": 10_000,
                    "rebalance_timeout_ms": 60_000,
                    "topics": ["orders"],
                    "assigned_partitions": [
                        {"topic": "orders", "partition": 0},
                        {"topic": "orders", "partition": 1},
                        {"topic": "orders", "partition": 2},
                    ],
                }
            ],
            "log_offset": 3,
        },
        {
            "group_id": "h",
            "generation_id": 4,
            "protocol_type": "consumer",
            "protocol_name": None,
            "leader": None,
            "state": "Empty",
            "valid_from_ms": 1_600,
            "valid_to_ms": None,
            "members": [],
            "log_offset": 2,
        },
    ]


def test_generations_tombstone_ends_the_span_and_a_new_life_opens_another():
    log = (
        Log()
        .metadata("g", 3, at=100, members=[member("m", assigned={"t": (0,)})], leader="m")
        .group_tombstone("g", at=200)
        .group_tombstone("g", at=250)  # a second tombstone changes nothing
        .metadata("g", 0, at=300, members=[])
    )
    spans = history.generations(log.table_rows())
    assert [
        (s["generation_id"], s["state"], s["valid_from_ms"], s["valid_to_ms"], s["log_offset"])
        for s in spans
    ] == [(3, "Stable", 100, 200, 0), (0, "Empty", 300, None, 3)]


def test_generations_members_without_or_with_unreadable_payloads():
    log = Log().metadata(
        "g",
        1,
        at=10,
        members=[
            member("none", assignment=None),  # assignment column null (not synced yet)
            member("blank", assignment=b""),
            member("bad", subscription=b"\x00", assignment=b"\x00\x01\x02"),
        ],
        leader="none",
    )
    members = history.generations(log.table_rows())[0]["members"]
    assert [(m["member_id"], m["topics"], m["assigned_partitions"]) for m in members] == [
        ("none", ["orders"], []),
        ("blank", ["orders"], []),
        ("bad", [], []),
    ]


def test_generations_null_members_column_is_empty():
    log = Log().metadata("g", 0, at=10, members=[])
    rows = log.table_rows()
    rows[0]["members"] = None
    assert history.generations(rows)[0]["members"] == []
    assert history.generations(rows)[0]["state"] == "Empty"


def test_generations_keep_log_order_within_a_group_when_groups_interleave():
    log = (
        Log()
        .metadata("b", 1, at=10, members=[])
        .metadata("a", 1, at=20, members=[])
        .metadata("b", 2, at=30, members=[])
        .metadata("a", 2, at=40, members=[])
    )
    spans = history.generations(log.table_rows())
    assert [
        (s["group_id"], s["generation_id"], s["valid_from_ms"], s["valid_to_ms"]) for s in spans
    ] == [
        ("a", 1, 20, 40),
        ("a", 2, 40, None),
        ("b", 1, 10, 30),
        ("b", 2, 30, None),
    ]


def test_members_history_one_row_per_member_per_span():
    rows = history.members_history(_two_generations().table_rows())
    assert [
        (
            r["group_id"],
            r["generation_id"],
            r["protocol_name"],
            r["member_id"],
            r["is_leader"],
            r["valid_from_ms"],
            r["valid_to_ms"],
            [(tp["topic"], tp["partition"]) for tp in r["assigned_partitions"]],
        )
        for r in rows
    ] == [
        ("g", 1, "range", "m1", True, 1_000, 2_000, [("orders", 0), ("orders", 1)]),
        ("g", 1, "range", "m2", False, 1_000, 2_000, [("orders", 2), ("pay", 0)]),
        (
            "g",
            2,
            "roundrobin",
            "m1",
            True,
            2_000,
            None,
            [("orders", 0), ("orders", 1), ("orders", 2)],
        ),
    ]
    assert set(rows[1]) == {
        "group_id",
        "generation_id",
        "protocol_name",
        "is_leader",
        "valid_from_ms",
        "valid_to_ms",
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "session_timeout_ms",
        "rebalance_timeout_ms",
        "topics",
        "assigned_partitions",
    }
    assert rows[1]["group_instance_id"] == "i2"
    assert rows[1]["topics"] == ["orders", "pay"]


def test_members_history_who_held_a_partition_at_a_time():
    rows = history.members_history(_two_generations().table_rows())

    def holder(at: int) -> list[str]:
        return [
            r["member_id"]
            for r in rows
            if r["valid_from_ms"] <= at
            and (r["valid_to_ms"] is None or at < r["valid_to_ms"])
            and {"topic": "orders", "partition": 2} in r["assigned_partitions"]
        ]

    assert holder(1_500) == ["m2"]
    assert holder(2_000) == ["m1"]
    assert holder(999) == []


# --- rebalances ----------------------------------------------------------------------------------


def test_rebalance_across_batches_from_empty_to_stable():
    rows = history_rows(
        hist("g", "Empty", 0, 100, generation=0),
        hist("g", "PreparingRebalance", 1, 200, generation=0, members=("a",), reason="join a"),
        hist("g", "CompletingRebalance", 2, 300, generation=1, members=("a", "b"), reason="join b"),
        hist("g", "Stable", 3, 350, generation=1, members=("a", "b"), leader="a", protocol="range"),
    )
    assert history.rebalances(rows) == [
        rebalance(
            generation_id=1,
            previous_generation_id=0,
            start_ms=200,
            end_ms=350,
            duration_ms=150,
            outcome="Stable",
            leader="a",
            protocol_name="range",
            members_before=0,
            members_after=2,
            joined=["a", "b"],
            left=[],
            reason="join a",
            start_batch=1,
            end_batch=3,
        )
    ]


def test_rebalance_with_members_joining_and_leaving():
    rows = history_rows(
        hist("g", "Stable", 0, 100, generation=1, members=("b", "a"), leader="a"),
        hist("g", "Stable", 1, 100, generation=1, members=("b", "a"), leader="a"),  # no change
        hist("g", "PreparingRebalance", 2, 500, generation=1, members=("a", "b"), reason="r"),
        hist("g", "CompletingRebalance", 3, 520, generation=2, members=("c", "a")),
        hist("g", "Stable", 4, 600, generation=2, members=("c", "a"), leader="c", protocol="p"),
    )
    out = history.rebalances(rows)
    assert out[1:] == [
        rebalance(
            generation_id=2,
            previous_generation_id=1,
            start_ms=500,
            end_ms=600,
            duration_ms=100,
            outcome="Stable",
            leader="c",
            protocol_name="p",
            members_before=2,
            members_after=2,
            joined=["c"],
            left=["b"],
            reason="r",
            start_batch=2,
            end_batch=4,
        )
    ]
    assert len(out) == 2  # the first is the group first seen Stable


def test_rebalance_first_seen_stable_is_one_of_zero_duration():
    rows = history_rows(
        hist(
            "g",
            "Stable",
            5,
            700,
            generation=3,
            members=("m2", "m1"),
            leader="m1",
            protocol="range",
            reason="Adding new member m2",
        )
    )
    assert history.rebalances(rows) == [
        rebalance(
            generation_id=3,
            previous_generation_id=None,
            start_ms=700,
            end_ms=700,
            duration_ms=0,
            outcome="Stable",
            leader="m1",
            protocol_name="range",
            members_before=0,
            members_after=2,
            joined=["m1", "m2"],
            reason="Adding new member m2",
            start_batch=5,
            end_batch=5,
        )
    ]


def test_first_seen_empty_and_summary_changes_at_rest_are_no_rebalance():
    rows = history_rows(
        hist("g", "Empty", 0, 100, generation=0),
        hist("g", "Empty", 1, 100, generation=0),
        hist("g", "Dead", 2, None, updated=300),
    )
    assert history.rebalances(rows) == []


def test_zero_duration_rebalance_inside_one_batch_is_a_generation_change():
    rows = history_rows(
        hist("g", "Stable", 0, 100, generation=1, members=("a",), leader="a", protocol="range"),
        hist(
            "g",
            "Stable",
            4,
            900,
            generation=2,
            members=("a", "b"),
            leader="a",
            protocol="range",
            reason="Adding new member b",
        ),
    )
    assert history.rebalances(rows)[1] == rebalance(
        generation_id=2,
        previous_generation_id=1,
        start_ms=900,
        end_ms=900,
        duration_ms=0,
        outcome="Stable",
        leader="a",
        protocol_name="range",
        members_before=1,
        members_after=2,
        joined=["b"],
        reason="Adding new member b",
        start_batch=4,
        end_batch=4,
    )


def test_zero_duration_rebalance_from_stable_to_empty_in_one_batch():
    rows = history_rows(
        hist("g", "Stable", 0, 100, generation=1, members=("a",), leader="a"),
        hist("g", "Empty", 1, 400, generation=2, reason="Removing member a on LeaveGroup"),
    )
    assert history.rebalances(rows)[1] == rebalance(
        generation_id=2,
        previous_generation_id=1,
        start_ms=400,
        end_ms=400,
        duration_ms=0,
        outcome="Empty",
        members_before=1,
        members_after=0,
        left=["a"],
        reason="Removing member a on LeaveGroup",
        start_batch=1,
        end_batch=1,
    )


def test_zero_duration_rebalance_from_empty():
    rows = history_rows(
        hist("g", "Empty", 0, 100, generation=0),
        hist("g", "Stable", 1, 150, generation=1, members=("a",), leader="a", reason="join"),
    )
    assert history.rebalances(rows) == [
        rebalance(
            generation_id=1,
            previous_generation_id=0,
            start_ms=150,
            end_ms=150,
            duration_ms=0,
            outcome="Stable",
            leader="a",
            members_after=1,
            joined=["a"],
            reason="join",
            start_batch=1,
            end_batch=1,
        )
    ]


def test_rebalance_ending_empty_when_every_member_left():
    rows = history_rows(
        hist("g", "Stable", 0, 100, generation=1, members=("a", "b"), leader="a"),
        hist("g", "PreparingRebalance", 1, 200, generation=1, members=("a",), reason="b left"),
        hist("g", "Empty", 2, 260, generation=2, reason="a left"),
    )
    assert history.rebalances(rows)[1] == rebalance(
        generation_id=2,
        previous_generation_id=1,
        start_ms=200,
        end_ms=260,
        duration_ms=60,
        outcome="Empty",
        members_before=2,
        members_after=0,
        left=["a", "b"],
        reason="b left",
        start_batch=1,
        end_batch=2,
    )


def test_rebalance_ending_dead_then_a_new_life():
    rows = history_rows(
        hist("g", "Empty", 0, 100, generation=0),
        hist("g", "PreparingRebalance", 1, 200, generation=0, members=("a",), reason="join"),
        hist("g", "Dead", 2, None, updated=250),
        hist("g", "Stable", 3, 400, generation=1, members=("z",), leader="z", reason="again"),
    )
    assert history.rebalances(rows) == [
        rebalance(
            generation_id=None,
            previous_generation_id=0,
            start_ms=200,
            end_ms=250,  # a Dead row has no state time: the batch's
            duration_ms=50,
            outcome="Dead",
            members_before=0,
            members_after=0,
            reason="join",
            start_batch=1,
            end_batch=2,
        ),
        rebalance(
            generation_id=1,
            previous_generation_id=None,  # the life before Dead is forgotten
            start_ms=400,
            end_ms=400,
            duration_ms=0,
            outcome="Stable",
            leader="z",
            members_after=1,
            joined=["z"],
            reason="again",
            start_batch=3,
            end_batch=3,
        ),
    ]


def test_dead_at_rest_is_no_rebalance_and_forgets_the_previous_generation():
    rows = history_rows(
        hist("g", "Stable", 0, 100, generation=4, members=("a",), leader="a"),
        hist("g", "Dead", 1, None, updated=200),
        hist("g", "Stable", 2, 300, generation=4, members=("a",), leader="a"),
    )
    out = history.rebalances(rows)
    # Stable again after Dead, even with the same generation id, is a new first sighting.
    assert [(r["start_batch"], r["previous_generation_id"], r["duration_ms"]) for r in out] == [
        (0, None, 0),
        (2, None, 0),
    ]


def test_rebalance_in_progress_has_no_end():
    rows = history_rows(
        hist("g", "Stable", 0, 100, generation=1, members=("a", "b"), leader="a"),
        hist("g", "PreparingRebalance", 1, 200, generation=1, members=("a", "b"), reason="r1"),
        hist("g", "CompletingRebalance", 2, 300, generation=2, members=("a", "b"), reason="r1"),
    )
    # Under way, but the join completed: the rebalance already names its new generation.
    assert history.rebalances(rows)[1] == rebalance(
        generation_id=2,
        previous_generation_id=1,
        start_ms=200,
        members_before=2,
        reason="r1",
        start_batch=1,
    )


def test_rebalance_first_seen_rebalancing_in_progress():
    rows = history_rows(
        hist("g", "CompletingRebalance", 7, 300, generation=1, members=("a",), reason="join")
    )
    assert history.rebalances(rows) == [
        rebalance(generation_id=1, start_ms=300, reason="join", start_batch=7)
    ]


def test_rebalance_reason_is_the_first_of_the_episode():
    rows = history_rows(
        hist("g", "Empty", 0, 0, generation=0),
        hist("g", "PreparingRebalance", 1, 10, generation=0, members=("a",), reason="first"),
        hist("g", "CompletingRebalance", 2, 20, generation=1, members=("a",), reason="first"),
        hist("g", "PreparingRebalance", 3, 30, generation=1, members=("a", "b"), reason="second"),
        hist("g", "CompletingRebalance", 4, 40, generation=2, members=("a", "b"), reason="second"),
        hist("g", "Stable", 5, 50, generation=2, members=("a", "b"), leader="a", reason="second"),
    )
    (only,) = history.rebalances(rows)
    assert (only["reason"], only["start_ms"], only["end_ms"], only["generation_id"]) == (
        "first",
        10,
        50,
        2,
    )
    assert (only["start_batch"], only["end_batch"], only["joined"]) == (1, 5, ["a", "b"])


def test_rebalance_times_fall_back_to_updated_at():
    rows = history_rows(
        hist("g", "Stable", 0, 100, generation=1, members=("a",), leader="a"),
        hist("g", "PreparingRebalance", 1, None, generation=1, members=("a",), updated=1_000),
        hist("g", "Stable", 2, None, generation=2, members=("a",), leader="a", updated=1_700),
    )
    last = history.rebalances(rows)[-1]
    assert (last["start_ms"], last["end_ms"], last["duration_ms"]) == (1_000, 1_700, 700)


def test_rebalance_duration_unknown_without_any_time():
    row = hist("g", "Stable", 0, None, generation=1, members=("a",), leader="a")
    row["updated_at_ms"] = None
    (only,) = history.rebalances(history_rows(row))
    assert (only["start_ms"], only["end_ms"], only["duration_ms"]) == (None, None, None)


def test_rebalances_of_several_groups_keep_each_groups_order():
    rows = history_rows(
        hist("b", "PreparingRebalance", 0, 10, generation=0, members=("x",), reason="rb"),
        hist("a", "Empty", 0, 10, generation=0),
        hist("a", "PreparingRebalance", 1, 20, generation=0, members=("y",), reason="ra"),
        hist("b", "Stable", 1, 25, generation=1, members=("x",), leader="x"),
        hist("a", "Stable", 2, 40, generation=1, members=("y",), leader="y"),
        hist("b", "PreparingRebalance", 3, 50, generation=1, members=("x",), reason="rb2"),
    )
    out = history.rebalances(rows)
    assert [
        (r["group_id"], r["start_ms"], r["end_ms"], r["outcome"], r["reason"]) for r in out
    ] == [
        ("a", 20, 40, "Stable", "ra"),
        ("b", 10, 25, "Stable", "rb"),
        ("b", 50, None, None, "rb2"),
    ]


def test_rebalances_of_nothing():
    assert history.rebalances([]) == []
