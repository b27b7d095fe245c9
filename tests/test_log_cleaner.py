"""Kafka's log cleaner over ``__consumer_offsets`` rows, as the pure function
:mod:`coordinator.log.cleaner`: the last record per key, tombstones kept for the delete
retention, nothing younger than the compaction lag touched, the last record of a partition
(its active segment) never touched, and offsets left as they were. A log cleaned at any time
loads into the same groups as the whole log."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator import CoordinatorConfig
from coordinator.log import records as log
from coordinator.log.cleaner import CleanerPolicy, clean, loaded, plan_partition
from tests.support import Ctx

MINUTE = 60_000
CONFIG = CoordinatorConfig(
    group_initial_rebalance_delay_ms=0,
    group_min_session_timeout_ms=10,
    offsets_topic_num_partitions=4,
    offsets_retention_minutes=30,
    offsets_retention_check_interval_ms=MINUTE,
)


def numbered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as the log holds them: offsets contiguous per offsets partition, log order
    (partition, offset)."""
    ends: dict[int, int] = {}
    out = []
    for record in records:
        partition = record["offsets_partition"]
        out.append(dict(record, offset=ends.get(partition, 0)))
        ends[partition] = ends.get(partition, 0) + 1
    return sorted(out, key=lambda r: (r["offsets_partition"], r["offset"]))


def row(partition: int, offset: int, key: bytes, value: bytes | None, ts: int) -> dict[str, Any]:
    return {
        "offsets_partition": partition,
        "offset": offset,
        "key": key,
        "value": value,
        "timestamp_ms": ts,
    }


# --- the rules, on hand-made rows ---------------------------------------------------------------

POLICY = CleanerPolicy(min_compaction_lag_ms=100, delete_retention_ms=50)


def kept_offsets(rows: list[dict[str, Any]], now_ms: int, policy: CleanerPolicy = POLICY) -> list:
    return [(r["offsets_partition"], r["offset"]) for r in clean(rows, now_ms, policy)]


def test_the_last_record_of_each_key_survives_with_its_offset() -> None:
    rows = [
        row(0, 0, b"a", b"1", 0),
        row(0, 1, b"b", b"1", 0),
        row(0, 2, b"a", b"2", 0),
        row(0, 3, b"a", b"3", 0),
        row(0, 4, b"c", b"1", 0),
    ]
    assert kept_offsets(rows, now_ms=1_000) == [(0, 1), (0, 3), (0, 4)]


def test_records_younger_than_the_lag_are_not_compacted() -> None:
    rows = [
        row(0, 0, b"a", b"1", 0),
        row(0, 1, b"a", b"2", 950),  # young: ends the cleanable part
        row(0, 2, b"a", b"3", 960),
        row(0, 3, b"b", b"1", 0),  # old, but after a young one: not cleanable either
    ]
    # At 1,000 the horizon is 900: only offset 0 is cleanable, and it is the last "a" there.
    assert kept_offsets(rows, now_ms=1_000) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    # Later, all but the last record are cleanable: the last "a" and the active record stay.
    assert kept_offsets(rows, now_ms=2_000) == [(0, 2), (0, 3)]


def test_the_last_record_of_a_partition_is_never_cleaned() -> None:
    """Kafka never cleans the active segment, nor does a record there supersede an older one
    (the cleaner's offset map stops before it): the log end offset stays where it was."""
    rows = [row(1, 0, b"a", b"1", 0), row(1, 1, b"a", None, 0)]
    assert kept_offsets(rows, now_ms=10_000) == [(1, 0), (1, 1)]
    rows.append(row(1, 2, b"b", b"1", 0))
    assert kept_offsets(rows, now_ms=10_000) == [(1, 2)]


def test_tombstones_are_kept_for_the_delete_retention_after_the_lag() -> None:
    rows = [
        row(0, 0, b"a", b"1", 0),
        row(0, 1, b"a", None, 0),
        row(0, 2, b"b", b"1", 0),  # the active record
    ]
    # Cleanable from 100 (the lag); the tombstone goes once older than lag + retention (150).
    assert kept_offsets(rows, now_ms=120) == [(0, 1), (0, 2)]
    assert kept_offsets(rows, now_ms=150) == [(0, 2)]


def test_partitions_are_cleaned_apart() -> None:
    """A key's records are compared within its offsets partition only."""
    rows = [
        row(0, 0, b"a", b"1", 0),
        row(0, 1, b"z", b"1", 0),
        row(1, 0, b"a", b"2", 0),
        row(1, 1, b"z", b"2", 0),
    ]
    assert kept_offsets(rows, now_ms=1_000) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_a_plan_counts_what_it_removes() -> None:
    plan = plan_partition(7, [b"a", b"a", b"a"], [False, False, False], [0, 0, 0], 500, POLICY)
    assert (plan.offsets_partition, plan.keep, plan.cleanable, plan.removed) == (
        7,
        [False, True, True],
        2,
        1,
    )


def test_policies_refuse_negative_times() -> None:
    with pytest.raises(ValueError):
        CleanerPolicy(min_compaction_lag_ms=-1)


# --- the engine's own log: a cleaned log loads into the same groups ------------------------------


def busy_coordinator() -> Ctx:
    """Groups that form, commit again and again, rebalance, leave, are deleted, lose offsets
    by OffsetDelete and by expiry, and a simple (standalone) consumer's commits."""
    ctx = Ctx(CONFIG, owned_partitions=None)
    timeouts = {"session": 10 * MINUTE, "rebalance": MINUTE}
    members: dict[str, tuple[str, int]] = {}
    for group_id in ("orders", "payments", "audit", "gone", "expiring"):
        members[group_id] = ctx.join_and_sync_single(group_id=group_id, **timeouts)
    for round_ in range(6):
        ctx.sleep(MINUTE // 2)
        for group_id, (member, generation) in members.items():
            ctx.commit(
                {("t", p): round_ * 10 + p for p in range(3)},
                group_id=group_id,
                member_id=member,
                generation=generation,
            )
            ctx.heartbeat(member, generation, group_id=group_id)
        ctx.commit({("s", 0): round_, ("s", 1): round_}, group_id="standalone")
    # payments rebalances: a second member joins, the first rejoins, both sync generation 2.
    member, _ = members["payments"]
    second, _ = ctx.dynamic_join(group_id="payments", **timeouts)
    first_join = ctx.join(member, group_id="payments", **timeouts)
    joined = ctx.answer(first_join)
    assert joined is not None and joined["error"] is None, joined
    generation = joined["generation_id"]
    ctx.sync(member, generation, {member: b"p0", second: b"p1"}, group_id="payments")
    ctx.sync(second, generation, group_id="payments")
    assert ctx.group("payments").state.value == "Stable"
    # standalone loses an offset; gone leaves and is deleted; expiring leaves, its offsets expire.
    ctx.delete_offsets([("s", 0)], group_id="standalone")
    for group_id in ("gone", "expiring"):
        ctx.leave([(members[group_id][0], None)], group_id=group_id)
    ctx.delete_group("gone")
    ctx.sleep(CONFIG.offsets_retention_ms + 2 * MINUTE)
    return ctx


def test_the_scenario_writes_what_the_cases_need() -> None:
    ctx = busy_coordinator()
    assert ctx.c.group("gone") is None
    assert ctx.c.group("expiring") is None, "its offsets expired and the empty group went"
    tombstones = [r for r in ctx.records if r["value"] is None]
    assert {r["group_id"] for r in tombstones} >= {"gone", "expiring", "standalone"}


@pytest.mark.parametrize("lag_minutes", [0, 3, 10_000])
@pytest.mark.parametrize("delete_retention_minutes", [0, 2, 10_000])
def test_a_cleaned_log_loads_into_the_same_groups(
    lag_minutes: int, delete_retention_minutes: int
) -> None:
    """Every group at rest equals a load of its cleaned log, whatever the lag and the tombstone
    retention, and whenever the cleaning ran (at every point of the scenario)."""
    ctx = busy_coordinator()
    whole = numbered(ctx.records)
    policy = CleanerPolicy(lag_minutes * MINUTE, delete_retention_minutes * MINUTE)
    for now in range(0, ctx.now + 2 * MINUTE, MINUTE // 2):
        cleaned = clean(whole, now, policy)
        assert len(cleaned) <= len(whole)
        loaded = log.replay(cleaned, ctx.now)
        expected = log.replay(whole, ctx.now)
        assert loaded.keys() == expected.keys(), now
        for group_id, group in expected.items():
            assert log.durable_view(loaded[group_id]) == log.durable_view(group), (group_id, now)


def test_a_group_at_rest_equals_a_load_of_its_compacted_log() -> None:
    ctx = busy_coordinator()
    cleaned = clean(numbered(ctx.records), ctx.now, CleanerPolicy(0, 0))
    rebuilt = log.replay(cleaned, ctx.now)
    for group_id in ctx.c.group_ids():
        live = ctx.c.group(group_id)
        assert live is not None
        if live.state.value in ("Stable", "Empty"):
            assert log.durable_view(rebuilt.get(group_id)) == log.durable_view(live), group_id
    # What is gone from the engine is gone from the compacted log's load too.
    assert "gone" not in rebuilt and "expiring" not in rebuilt


def test_expired_offsets_leave_no_record_once_their_tombstones_are_past_retention() -> None:
    """The expired group's offsets and the deleted group were tombstoned; once the tombstones
    are past their retention (and no longer in the active segment) nothing of either is left,
    and a load knows neither."""
    ctx = busy_coordinator()
    whole = numbered(ctx.records)
    ends: dict[int, int] = {}
    for r in whole:
        ends[r["offsets_partition"]] = r["offset"] + 1
    later = ctx.now + 10 * MINUTE
    # Another group's record in every partition: the active segment moves past the tombstones.
    active = [
        dict(row(p, end, b"other-" + bytes([p]), b"v", later), group_id="other")
        for p, end in ends.items()
    ]
    cleaned = clean(whole + active, later, CleanerPolicy(0, MINUTE))
    assert not [r for r in cleaned if r["group_id"] in ("expiring", "gone")]
    assert {"expiring", "gone"}.isdisjoint(log.replay(cleaned[: -len(active)] or [], later))
    # Before the tombstones' retention is over, they are still there.
    kept = clean(whole + active, ctx.now, CleanerPolicy(0, 60 * MINUTE))
    assert {r["group_id"] for r in kept if r["value"] is None} >= {"expiring", "gone"}


def test_offsets_and_log_end_are_unchanged() -> None:
    ctx = busy_coordinator()
    whole = numbered(ctx.records)
    cleaned = clean(whole, ctx.now + 10 * MINUTE, CleanerPolicy(0, 0))
    original = {(r["offsets_partition"], r["offset"]): r for r in whole}
    for r in cleaned:
        assert original[(r["offsets_partition"], r["offset"])] is r
    ends = {}
    for records in (whole, cleaned):
        end: dict[int, int] = {}
        for r in records:
            end[r["offsets_partition"]] = max(end.get(r["offsets_partition"], 0), r["offset"] + 1)
        ends[id(records)] = end
    assert ends[id(whole)] == ends[id(cleaned)]
    assert len(cleaned) < len(whole) / 3


def test_what_a_load_needs_is_a_cleaning_with_nothing_to_protect() -> None:
    """The rebuild's compaction (:func:`loaded`): the last record of each key per partition,
    tombstoned keys gone, the active record included; it loads into the same groups."""
    ctx = busy_coordinator()
    whole = numbered(ctx.records)
    keep = loaded(
        [r["offsets_partition"] for r in whole],
        [r["key"] for r in whole],
        [r["value"] is None for r in whole],
    )
    kept = [r for r, k in zip(whole, keep, strict=True) if k]
    assert all(r["value"] is not None for r in kept)
    assert len({(r["offsets_partition"], r["key"]) for r in kept}) == len(kept)
    expected = log.replay(whole, ctx.now)
    rebuilt = log.replay(kept, ctx.now)
    assert rebuilt.keys() == expected.keys()
    for group_id, group in expected.items():
        assert log.durable_view(rebuilt[group_id]) == log.durable_view(group)
