"""Which ``__consumer_offsets`` records a compaction keeps: Kafka's log cleaner, as a pure function.

Kafka's ``__consumer_offsets`` is a compacted topic (``cleanup.policy=compact``), and its cleaner
(``storage/.../log/Cleaner.java``, ``LogCleanerManager``) works per partition:

- Only the *cleanable* part of a partition is touched: the records before the first
  uncleanable offset, which is the start of the active segment, or of the first segment
  holding a record newer than ``min.compaction.lag.ms``, whichever comes first. Here every
  record is its own segment and the partition's last record is its active segment: the first
  record younger than the lag ends the cleanable part, and the last record is never cleaned
  (so the log end offset never moves).
- In the cleanable part a record survives when it is the last one of its key there (the
  cleaner's offset map holds the dirty records up to the first uncleanable offset; a key
  superseded only by a record beyond it keeps its older record until that one becomes
  cleanable too). Records after the cleanable part all survive.
- A tombstone (null value) that survives is still kept for ``delete.retention.ms`` after it
  became cleanable (Kafka: after the first cleaning pass that saw it, the batch's delete
  horizon), so that a reader that keeps up sees the deletion; after that it is dropped too.
  Here it became cleanable ``min.compaction.lag.ms`` after its timestamp, so it is dropped
  once older than the lag plus the delete retention.
- Survivors keep their offsets: offsets become sparse, the log end stays where it was.

A record's time is its ``timestamp_ms`` (the record's CreateTime: the engine's clock when it
was written), and ``now_ms`` is the caller's clock: no clock is read here.

Replaying the kept records of a partition (:func:`coordinator.log.records.replay`) rebuilds the
same groups as replaying all of them: a group's state at rest is a function of the last record
of each of its keys, and the cleaner keeps exactly those (or drops a key whose last record is a
tombstone, which a replay also leaves absent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Kafka's ``delete.retention.ms`` default (one day).
DEFAULT_DELETE_RETENTION_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class CleanerPolicy:
    """The two topic settings that decide what a cleaning keeps (Kafka's names)."""

    #: Records younger than this are never compacted (Kafka's ``min.compaction.lag.ms``).
    min_compaction_lag_ms: int
    #: How long a tombstone outlives the lag (Kafka's ``delete.retention.ms``).
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS

    def __post_init__(self) -> None:
        if self.min_compaction_lag_ms < 0 or self.delete_retention_ms < 0:
            raise ValueError("min.compaction.lag.ms and delete.retention.ms must not be negative")

    def horizon_ms(self, now_ms: int) -> int:
        """Records with a timestamp at or before this are cleanable."""
        return now_ms - self.min_compaction_lag_ms

    def tombstone_horizon_ms(self, now_ms: int) -> int:
        """Tombstones with a timestamp at or before this are dropped."""
        return now_ms - self.min_compaction_lag_ms - self.delete_retention_ms


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """What a cleaning of one offsets partition keeps, for rows given in offset order."""

    offsets_partition: int
    #: One flag per row of the partition, in the order given.
    keep: list[bool]
    #: How many leading rows were cleanable (the rest are kept as they are).
    cleanable: int

    @property
    def removed(self) -> int:
        return len(self.keep) - sum(self.keep)


def plan_partition(
    offsets_partition: int,
    keys: Sequence[bytes],
    tombstones: Sequence[bool],
    timestamps_ms: Sequence[int],
    now_ms: int,
    policy: CleanerPolicy,
) -> PartitionPlan:
    """Kafka's cleaning of one partition whose records (key, is-tombstone, timestamp) are given
    in offset order (see the module docstring)."""
    count = len(keys)
    horizon = policy.horizon_ms(now_ms)
    # The last record is the active segment: never cleaned.
    cleanable = max(count - 1, 0)
    for index, timestamp in enumerate(timestamps_ms[:cleanable]):
        if timestamp > horizon:
            cleanable = index
            break
    last = _last_of_each_key(keys, cleanable)
    drop_tombstones_at = policy.tombstone_horizon_ms(now_ms)
    keep = [True] * count
    for index in range(cleanable):
        superseded = last[keys[index]] != index
        expired = tombstones[index] and timestamps_ms[index] <= drop_tombstones_at
        keep[index] = not (superseded or expired)
    return PartitionPlan(offsets_partition, keep, cleanable)


def loaded(
    offsets_partitions: Sequence[int], keys: Sequence[bytes], tombstones: Sequence[bool]
) -> list[bool]:
    """What a load of the log needs (the rebuild's compaction): per offsets partition, the last
    record of each key, none for a key whose last record is a tombstone. A cleaning with
    nothing left to protect: no lag, no tombstone retention, no active segment. Records of one
    partition must be in offset order; partitions may interleave."""
    last: dict[tuple[int, bytes], int] = {}
    for index, (partition, key) in enumerate(zip(offsets_partitions, keys, strict=True)):
        last[(partition, key)] = index
    keep = [False] * len(keys)
    for index in last.values():
        keep[index] = not tombstones[index]
    return keep


def _last_of_each_key(keys: Sequence[bytes], stop: int) -> dict[bytes, int]:
    """The index of the last record of each key among the first ``stop``."""
    last: dict[bytes, int] = {}
    for index in range(stop):
        last[keys[index]] = index
    return last


def clean(
    records: Iterable[Mapping[str, Any]], now_ms: int, policy: CleanerPolicy
) -> list[Mapping[str, Any]]:
    """The records a cleaning keeps, in the order given; ``records`` are log rows
    (``offsets_partition``, ``offset``, ``key``, ``value``, ``timestamp_ms``) of any partitions,
    each partition's in offset order. Their offsets are left as they are."""
    by_partition: dict[int, list[Mapping[str, Any]]] = {}
    ordered = list(records)
    for record in ordered:
        by_partition.setdefault(int(record["offsets_partition"]), []).append(record)
    kept: set[int] = set()
    for partition, rows in by_partition.items():
        plan = plan_partition(
            partition,
            [r["key"] for r in rows],
            [r["value"] is None for r in rows],
            [r["timestamp_ms"] for r in rows],
            now_ms,
            policy,
        )
        kept.update(id(row) for row, keep in zip(rows, plan.keep, strict=True) if keep)
    return [r for r in ordered if id(r) in kept]
