"""How long one ``assign()`` takes per assignor, by group size (figures, not tests).

Every member subscribes to the same 10 topics and the partitions are spread evenly over them. For
``sticky`` and ``cooperative-sticky`` two figures are taken: the first assignment of a fresh group
(key ``"<members>x<partitions>"``) and the rebalance after one member leaves, every other member
claiming what the first assignment gave it (key suffix ``"/rebalance"``): Java-style eager sticky
members send their previous assignment as user data, cooperative members their owned partitions
with generation 1. Building the subscriptions is not timed; decoding member data is (it is part
of ``assign()``). Each figure is one timed call with the garbage collector paused, as ``timeit``
does.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence

from coordinator.client.assignors import (
    ASSIGNORS,
    CooperativeStickyAssignor,
    MemberSubscription,
    StickyAssignor,
    TopicPartition,
    encode_sticky_user_data,
    make_assignment,
)
from coordinator.consumer_protocol import Subscription

__all__ = ["DEFAULT_SIZES", "QUICK_SIZES", "TOPICS", "bench_assignors"]

TOPICS = 10
DEFAULT_SIZES: tuple[tuple[int, int], ...] = tuple(
    (m, p) for m in (100, 1_000, 5_000) for p in (1_000, 10_000, 100_000)
)
QUICK_SIZES: tuple[tuple[int, int], ...] = ((100, 1_000), (1_000, 10_000))
_BUDGET_MS = 20_000.0
"""Skip a combination whose estimated time (from the largest one measured) exceeds this."""


def _topics() -> list[str]:
    return [f"topic-{i:02d}" for i in range(TOPICS)]


def _partitions_per_topic(partitions: int) -> dict[str, int]:
    per, extra = divmod(partitions, TOPICS)
    return {t: per + (1 if i < extra else 0) for i, t in enumerate(_topics())}


def _member_ids(members: int) -> list[str]:
    return [f"consumer-bench-{i:05d}-4f1c2d3e" for i in range(members)]


def _timed(
    call: Callable[[dict[str, int], list[MemberSubscription]], dict[str, list[TopicPartition]]],
    ppt: dict[str, int],
    group: list[MemberSubscription],
) -> tuple[float, dict[str, list[TopicPartition]]]:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        result = call(ppt, group)
        elapsed = (time.perf_counter() - start) * 1000.0
    finally:
        gc.enable()
    return elapsed, result


def _rebalance_members(
    name: str, first: dict[str, list[TopicPartition]], topics: tuple[str, ...]
) -> list[MemberSubscription]:
    """Everyone but the first member rejoins claiming what ``first`` gave it (generation 1)."""
    out: list[MemberSubscription] = []
    for member_id in list(first)[1:]:
        owned = first[member_id]
        if name == StickyAssignor.name:
            sub = Subscription(topics, encode_sticky_user_data(owned, 1), (), 1)
        else:
            assignment = make_assignment(owned)
            sub = Subscription(topics, b"\x00\x00\x00\x01", assignment.assigned_partitions, 1)
        out.append(MemberSubscription(member_id, None, sub))
    return out


def _estimate_ms(seen: dict[tuple[int, int], float], members: int, partitions: int) -> float:
    """Scale the largest measured run linearly in members + partitions (the algorithms' shape)."""
    if not seen:
        return 0.0
    (m, p), ms = max(seen.items(), key=lambda item: item[0][0] + item[0][1])
    return ms * (members + partitions) / max(1, m + p)


def bench_assignors(
    sizes: Sequence[tuple[int, int]] | None = None, quick: bool = False
) -> dict[str, dict[str, float]]:
    """Milliseconds for one ``assign()`` per assignor name and ``"<members>x<partitions>"`` key.

    ``sizes`` defaults to members in 100/1,000/5,000 x partitions in 1,000/10,000/100,000
    (``quick``: 100x1000 and 1000x10000 only); combinations estimated to take more than ~20 s are
    skipped and absent from the result.
    """
    if sizes is None:
        sizes = QUICK_SIZES if quick else DEFAULT_SIZES
    ordered = sorted(sizes, key=lambda s: s[0] + s[1])
    topics = tuple(_topics())
    figures: dict[str, dict[str, float]] = {}
    for name, cls in ASSIGNORS.items():
        sticky = cls in (StickyAssignor, CooperativeStickyAssignor)
        seen: dict[tuple[int, int], float] = {}
        row: dict[str, float] = {}
        for members, partitions in ordered:
            if _estimate_ms(seen, members, partitions) > _BUDGET_MS:
                continue
            key = f"{members}x{partitions}"
            ppt = _partitions_per_topic(partitions)
            group = [
                MemberSubscription(mid, None, Subscription(topics)) for mid in _member_ids(members)
            ]
            elapsed, first = _timed(cls().assign, ppt, group)
            row[key] = round(elapsed, 3)
            worst = elapsed
            if sticky and members > 1:
                rejoined = _rebalance_members(name, first, topics)
                elapsed, _ = _timed(cls().assign, ppt, rejoined)
                row[f"{key}/rebalance"] = round(elapsed, 3)
                worst = max(worst, elapsed)
            seen[(members, partitions)] = worst
        figures[name] = row
    return figures
