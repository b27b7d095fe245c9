"""What the log and the group history say about a group over time: pure functions over rows.

Rows are plain dicts with the column names of the Delta tables (``consumer_offsets`` for the
log, ``group_history`` for summaries), as ``pyarrow.Table.to_pylist()`` gives them. The CLI
calls these on rows it read with pyarrow; :mod:`coordinator.queries` calls the very same
functions per group inside Spark (``applyInArrow``), so the two can never disagree.

- :func:`committed_offsets`: the offsets a group has now, Kafka's load of ``__consumer_offsets``
  restricted to commits: the last record per (group, topic, partition) wins and a tombstone
  (value null: a deletion or an expiry) removes the key.
- :func:`generations`: every GroupMetadata record opens a span of the group's life (until the
  next record of the group), with its members and their decoded assignments: who held which
  partition when.
- :func:`rebalances`: from ``group_history``, each rebalance from the moment the group left a
  state at rest (Stable or Empty) to the moment it came back to one, with the members who
  joined and left and the reason the coordinator gave (Kafka's ``prepareRebalance`` reason).
- :func:`partition_commits` and :func:`commit_rate`: commit activity, from the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import groupby
from operator import itemgetter
from typing import Any

from coordinator.consumer_protocol import assignment_to_json, subscription_to_json
from coordinator.log.records import GROUP_METADATA, OFFSET_COMMIT

Row = Mapping[str, Any]

PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
#: A consumer group's (KIP-848) states between a new group epoch and every member reconciled.
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
REBALANCING = (PREPARING, COMPLETING, ASSIGNING, RECONCILING)
AT_REST = ("Stable", "Empty")
DEAD = "Dead"


def _by_group(rows: Iterable[Row]) -> Iterable[tuple[str, list[Row]]]:
    """Rows grouped by group id, keeping each group's rows in the order given."""
    ordered = sorted(rows, key=itemgetter("group_id"))  # stable: keeps the order within a group
    for group_id, items in groupby(ordered, key=itemgetter("group_id")):
        yield group_id, list(items)


# --- offsets ----------------------------------------------------------------------------------


def committed_offsets(log_rows: Iterable[Row]) -> list[dict[str, Any]]:
    """The committed offset of every (group, topic, partition), from log rows in log order."""
    latest: dict[tuple[str, str, int], Row] = {}
    for row in log_rows:
        if row["record_type"] != OFFSET_COMMIT:
            continue
        key = (row["group_id"], row["topic"], row["partition"])
        if row["value"] is None:
            latest.pop(key, None)
        else:
            latest[key] = row
    return [
        {
            "group_id": group_id,
            "topic": topic,
            "partition": partition,
            "committed_offset": row["committed_offset"],
            "leader_epoch": row["leader_epoch"],
            "metadata": row["metadata"],
            "commit_timestamp_ms": row["commit_timestamp_ms"],
            "expire_timestamp_ms": row["expire_timestamp_ms"],
            "offsets_partition": row["offsets_partition"],
            "log_offset": row["offset"],
            "batch_id": row.get("batch_id"),
        }
        for (group_id, topic, partition), row in sorted(latest.items())
    ]


def partition_commits(log_rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Per (group, topic, partition): how many commits, the first and last, and where the
    offset went (deletions and expiries counted apart)."""
    seen: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in log_rows:
        if row["record_type"] != OFFSET_COMMIT:
            continue
        key = (row["group_id"], row["topic"], row["partition"])
        entry = seen.setdefault(
            key,
            {
                "group_id": key[0],
                "topic": key[1],
                "partition": key[2],
                "commits": 0,
                "tombstones": 0,
                "first_commit_ms": None,
                "last_commit_ms": None,
                "first_offset": None,
                "last_offset": None,
            },
        )
        if row["value"] is None:
            entry["tombstones"] += 1
            continue
        entry["commits"] += 1
        at = row["commit_timestamp_ms"]
        if entry["first_commit_ms"] is None:
            entry["first_commit_ms"], entry["first_offset"] = at, row["committed_offset"]
        entry["last_commit_ms"], entry["last_offset"] = at, row["committed_offset"]
    return [seen[key] for key in sorted(seen)]


def commit_rate(log_rows: Iterable[Row], bucket_ms: int) -> list[dict[str, Any]]:
    """Commits per group per time bucket (``bucket_start_ms``, ``commits``, ``partitions``:
    distinct partitions committed), by the commit's own timestamp."""
    if bucket_ms <= 0:
        raise ValueError("bucket_ms must be positive")
    buckets: dict[tuple[str, int], tuple[int, set[tuple[str, int]]]] = {}
    for row in log_rows:
        if row["record_type"] != OFFSET_COMMIT or row["value"] is None:
            continue
        start = row["commit_timestamp_ms"] // bucket_ms * bucket_ms
        count, partitions = buckets.get((row["group_id"], start), (0, set()))
        partitions.add((row["topic"], row["partition"]))
        buckets[(row["group_id"], start)] = (count + 1, partitions)
    return [
        {"group_id": g, "bucket_start_ms": s, "commits": n, "partitions": len(p)}
        for (g, s), (n, p) in sorted(buckets.items())
    ]


# --- membership from the log --------------------------------------------------------------------


def _member(member: Row) -> dict[str, Any]:
    assignment = assignment_to_json(member["assignment"]) if member.get("assignment") else None
    subscription = (
        subscription_to_json(member["subscription"]) if member.get("subscription") else None
    )
    assigned = [] if assignment is None else assignment["assigned_partitions"].items()
    return {
        "member_id": member["member_id"],
        "group_instance_id": member["group_instance_id"],
        "client_id": member["client_id"],
        "client_host": member["client_host"],
        "session_timeout_ms": member["session_timeout_ms"],
        "rebalance_timeout_ms": member["rebalance_timeout_ms"],
        "topics": [] if subscription is None else subscription["topics"],
        "assigned_partitions": [
            {"topic": topic, "partition": p} for topic, parts in sorted(assigned) for p in parts
        ],
    }


def generations(log_rows: Iterable[Row]) -> list[dict[str, Any]]:
    """One span per GroupMetadata record, in log order per group: ``valid_from_ms`` is the
    record's timestamp, ``valid_to_ms`` the next GroupMetadata record's of the same group
    (None while it is the newest); a tombstone (the group deleted) ends the last span and
    opens none. Members carry their subscribed topics and decoded assignment."""
    spans: list[dict[str, Any]] = []
    records = (row for row in log_rows if row["record_type"] == GROUP_METADATA)
    for group_id, rows in _by_group(records):
        previous: dict[str, Any] | None = None
        for row in rows:
            if previous is not None:
                previous["valid_to_ms"] = row["timestamp_ms"]
                previous = None
            if row["value"] is None:
                continue
            members = [_member(m) for m in row["members"] or []]
            previous = {
                "group_id": group_id,
                "generation_id": row["generation_id"],
                "protocol_type": row["protocol_type"],
                "protocol_name": row["protocol_name"],
                "leader": row["leader"],
                "state": "Stable" if members else "Empty",
                "valid_from_ms": row["timestamp_ms"],
                "valid_to_ms": None,
                "members": members,
                "log_offset": row["offset"],
            }
            spans.append(previous)
    return spans


def members_history(log_rows: Iterable[Row]) -> list[dict[str, Any]]:
    """One row per member per span of :func:`generations` (``assigned_partitions`` a list of
    {topic, partition}): "who held partition 3 at noon" is a filter on this."""
    return [
        {
            "group_id": span["group_id"],
            "generation_id": span["generation_id"],
            "protocol_name": span["protocol_name"],
            "is_leader": member["member_id"] == span["leader"],
            "valid_from_ms": span["valid_from_ms"],
            "valid_to_ms": span["valid_to_ms"],
            **member,
        }
        for span in generations(log_rows)
        for member in span["members"]
    ]


# --- rebalances from the group history ------------------------------------------------------------


def _at_ms(row: Row) -> int | None:
    at = row.get("state_timestamp_ms")
    return at if at is not None else row.get("updated_at_ms")


def _member_ids(row: Row | None) -> list[str]:
    return [] if row is None else sorted(m["member_id"] for m in row.get("members") or [])


def _rebalance(
    group_id: str,
    before: Row | None,
    start: Row,
    end: Row | None,
    reason: str | None,
    latest: Row | None = None,
) -> dict[str, Any]:
    """One rebalance; ``latest`` is its newest row while it is still under way (a group in
    CompletingRebalance already has its new generation)."""
    last = end if end is not None else (latest or start)
    old, new = set(_member_ids(before)), set(_member_ids(end))
    start_ms, end_ms = _at_ms(start), None if end is None else _at_ms(end)
    return {
        "group_id": group_id,
        "generation_id": last.get("generation_id"),
        "previous_generation_id": None if before is None else before.get("generation_id"),
        "start_ms": start_ms,
        "end_ms": end_ms,
        "duration_ms": None if end_ms is None or start_ms is None else end_ms - start_ms,
        "outcome": None if end is None else end["state"],
        "leader": None if end is None else end.get("leader"),
        "protocol_name": None if end is None else end.get("protocol_name"),
        "members_before": len(old),
        "members_after": None if end is None else len(new),
        "joined": [] if end is None else sorted(new - old),
        "left": [] if end is None else sorted(old - new),
        "reason": reason,
        "start_batch": start.get("batch_id"),
        "end_batch": None if end is None else end.get("batch_id"),
    }


def rebalances(history_rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Every rebalance of every group, from ``group_history`` rows in batch order.

    A rebalance starts when the group leaves a state at rest (or first appears rebalancing:
    PreparingRebalance or CompletingRebalance, Assigning or Reconciling for a consumer group,
    whose generation is its group epoch) and ends when it is at rest again (Stable, or Empty
    once every member is gone) or Dead; one
    still under way has no end. A rebalance that began and ended within one micro-batch shows
    only as a new generation at rest: it is reported with a zero duration, at the batch's
    time. ``reason`` is the coordinator's reason for starting it (the first one given)."""
    out: list[dict[str, Any]] = []
    for group_id, rows in _by_group(history_rows):
        at_rest: Row | None = None  # the group's last summary at rest
        start: Row | None = None
        latest: Row | None = None
        reason: str | None = None
        for row in rows:
            state = row["state"]
            if state in REBALANCING:
                if start is None:
                    start, reason = row, row.get("rebalance_reason")
                latest = row
                continue
            if state in AT_REST:
                if at_rest is None:
                    moved = state == "Stable"  # first seen with a generation already made
                else:
                    moved = row.get("generation_id") != at_rest.get("generation_id")
                if start is not None or moved:
                    began = start if start is not None else row
                    why = reason if start is not None else row.get("rebalance_reason")
                    out.append(_rebalance(group_id, at_rest, began, row, why))
                at_rest, start, reason = row, None, None
            elif state == DEAD:
                if start is not None:
                    out.append(_rebalance(group_id, at_rest, start, row, reason))
                at_rest, start, reason = None, None, None
        if start is not None:
            out.append(_rebalance(group_id, at_rest, start, None, reason, latest))
    return out
