"""The sticky assignment algorithm behind ``sticky`` and ``cooperative-sticky`` (section 11.3).

Behaviour of Kafka's ``AbstractStickyAssignor`` (clients, trunk), without rack awareness
(KIP-881). Given every member's subscribed topics and the partitions it claims to own (with the
generation of that claim), it produces an assignment that is first as balanced as the
subscriptions allow and second keeps as many partitions as possible with their owner.

* **Previous ownership.** A claim counts only for an existing partition of an existing topic.
  When several members claim one partition, the claim of the highest generation wins; a tie at
  the highest generation leaves the partition unowned (Kafka: "claimed by multiple consumers in the
  same generation"). Kafka resolves claims in ``HashMap`` order; here the outcome does not depend
  on the order.
* **Equal subscriptions** (``constrainedAssign``): every member keeps up to its quota (``floor`` or,
  for the first ``total % members`` members that can, ``ceil`` of ``total / members``) of what it
  owns, owned partitions taken in (partition, topic) order (KAFKA-16277); the rest is dealt
  round-robin, topics sorted and partitions ascending, to the members below the lower quota and
  then to those that may still take one more, both in member-id order. A partition revoked from a
  member (or claimed twice) and given to another is reported as *transferring ownership*.
* **Unequal subscriptions** (``generalAssign``): owned partitions of still-subscribed topics stay;
  the others go one by one (topics by number of potential members, then name) to the subscribed
  member with the fewest partitions (ties by member id); then partitions are moved towards members
  with 2+ fewer partitions until no move is possible, preferring to give a partition back to its
  owner of an older generation and to undo earlier moves (Kafka's ``PartitionMovements``). A
  rebalance that does not lower the balance score is undone.

Where Kafka iterates a ``HashMap`` this takes members by member id. Departures from Kafka, all on
inputs Kafka mishandles: subscriptions are "equal" only if they are equal sets (Kafka counts a
first member with no topics as equal to anything); a claim of a partition beyond the topic's
partition count is ignored (Kafka would keep it); a partition goes back to its older-generation
owner only if that member still subscribes to the topic and takes part in balancing (Kafka could
assign it to a non-subscriber or fail on a null lookup); and Kafka's balancing loop can revisit a
state and then never end (it undoes an earlier move between two members that are not out of
balance, which the next step redoes). Here a state seen before at the start of a pass switches to
taking only moves that improve the balance, and once balancing ends, partitions of one topic moved
both ways between two members are given back to their owners.

Kafka's scans of its sorted member set are replaced by heaps keyed (size, member id) per group of
members with identical subscriptions, and its ``isBalanced`` scan by per-topic bookkeeping, so one
balancing step costs about O(topics x log members) instead of O(partitions x members).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Generic, TypeVar

__all__ = [
    "DEFAULT_GENERATION",
    "StickyMember",
    "StickyResult",
    "sticky_assign",
]

DEFAULT_GENERATION = -1
"""Kafka's ``AbstractStickyAssignor.DEFAULT_GENERATION``: no (known) generation."""

_MAX_BALANCE_PASSES = 1_000
"""Safety stop for the balancing loop (Kafka has none; it always ends in practice)."""

P = TypeVar("P", bound=tuple[str, int])


@dataclass(frozen=True, slots=True)
class StickyMember(Generic[P]):
    """One member as the algorithm sees it: Kafka's subscription plus its ``MemberData``."""

    member_id: str
    topics: frozenset[str]
    """Subscribed topics as sent (existing or not); equality of these picks the algorithm."""
    owned: Sequence[P]
    """Partitions the member claims to own (any order; invalid or duplicate entries are ignored)."""
    generation: int = DEFAULT_GENERATION


@dataclass(frozen=True, slots=True)
class StickyResult(Generic[P]):
    assignment: dict[str, list[P]]
    transferring: dict[P, str] | None
    """Equal subscriptions: partitions given to a member other than the one that owned them, with
    their new owner (Kafka's ``partitionsTransferringOwnership``). ``None`` otherwise (Kafka sets it
    to null for the general algorithm so the cooperative assignor computes it from scratch)."""
    all_subscriptions_equal: bool


def sticky_assign(
    partitions: Mapping[str, Sequence[P]], members: Sequence[StickyMember[P]]
) -> StickyResult[P]:
    """Assign ``partitions`` (topic -> its partitions in index order) to ``members``.

    Only topics someone subscribes to should be passed (as Kafka's ``AbstractPartitionAssignor``
    builds ``partitionsPerTopic``); topics absent from ``partitions`` do not exist.
    """
    if not members:
        return StickyResult({}, {}, True)
    ordered = sorted(members, key=lambda m: m.member_id)
    for a, b in pairwise(ordered):
        if a.member_id == b.member_id:
            raise ValueError(f"duplicate member id {a.member_id!r}")
    first = ordered[0].topics
    equal = all(m.topics == first for m in ordered)
    owned, multi = _resolve_owned(partitions, ordered)
    if equal:
        assignment, transferring = _constrained_assign(
            partitions, [m.member_id for m in ordered], owned, multi
        )
        return StickyResult(assignment, transferring, True)
    return StickyResult(_GeneralAssignment(partitions, ordered, owned).build(), None, False)


# -- previous ownership ------------------------------------------------------------------------


def _resolve_owned(
    partitions: Mapping[str, Sequence[P]], members: Sequence[StickyMember[P]]
) -> tuple[dict[str, list[P]], set[P]]:
    """Each member's trusted owned partitions (in its own order) and the doubly claimed ones.

    A claim counts for an existing partition only; between claimants the highest generation wins
    and a tie at the highest generation leaves the partition unowned.
    """
    owner: dict[P, str | None] = {}
    generation = {m.member_id: m.generation for m in members}
    tie_generation: dict[P, int] = {}
    claimed: dict[str, list[P]] = {}
    conflict = False
    for m in members:
        gen, mid = m.generation, m.member_id
        mine: list[P] = []
        for tp in m.owned:
            parts = partitions.get(tp[0])
            if parts is None or not 0 <= tp[1] < len(parts):
                continue
            mine.append(tp)
            if tp not in owner:
                owner[tp] = mid
                continue
            conflict = True
            cur = owner[tp]
            if cur == mid:
                continue  # listed twice by the same member
            cur_gen = tie_generation[tp] if cur is None else generation[cur]
            if gen > cur_gen:
                owner[tp] = mid
            elif gen == cur_gen:
                owner[tp] = None
                tie_generation[tp] = gen
        claimed[mid] = mine
    if not conflict:
        return claimed, set()
    owned: dict[str, list[P]] = {}
    for mid, mine in claimed.items():
        kept: list[P] = []
        seen: set[P] = set()
        for tp in mine:
            if owner[tp] == mid and tp not in seen:
                seen.add(tp)
                kept.append(tp)
        owned[mid] = kept
    return owned, {tp for tp, who in owner.items() if who is None}


# -- equal subscriptions -----------------------------------------------------------------------


def _partition_then_topic(tp: tuple[str, int]) -> tuple[int, str]:
    return tp[1], tp[0]


def _constrained_assign(
    partitions: Mapping[str, Sequence[P]],
    member_ids: Sequence[str],
    owned: Mapping[str, list[P]],
    multi: set[P],
) -> tuple[dict[str, list[P]], dict[P, str]]:
    topics = sorted(partitions)
    total = sum(len(partitions[t]) for t in topics)
    min_quota, expected_over = divmod(total, len(member_ids))
    max_quota = min_quota + 1 if expected_over else min_quota
    current_over = 0

    assignment: dict[str, list[P]] = {}
    under_min: list[str] = []
    exactly_min: list[str] = []
    maybe_revoked: dict[P, str] = {}
    assigned: set[P] = set()

    # 1. Members keep what they own, up to their quota.
    for mid in member_ids:
        mine = owned[mid]
        if len(mine) > 1:
            mine = sorted(mine, key=_partition_then_topic)
        if len(mine) < min_quota:
            kept = mine
            under_min.append(mid)
        else:
            if len(mine) >= max_quota and current_over < expected_over:
                current_over += 1
                if current_over == expected_over:
                    exactly_min.clear()
                quota = max_quota
            else:
                quota = min_quota
                if current_over < expected_over:
                    exactly_min.append(mid)
            kept = mine[:quota]
            for tp in mine[quota:]:
                maybe_revoked[tp] = mid
        assignment[mid] = list(kept)
        assigned.update(kept)

    if assigned:
        unassigned = [tp for t in topics for tp in partitions[t] if tp not in assigned]
    else:
        unassigned = [tp for t in topics for tp in partitions[t]]

    # 2. Round-robin the rest: members under the lower quota first, then those that may take one
    #    more (Kafka's LinkedList iterator over the under-quota members, restarted when exhausted).
    transferring: dict[P, str] = {}
    pending = under_min
    pos = 0
    survivors: list[str] = []
    at_min = deque(exactly_min)
    for tp in unassigned:
        if pos < len(pending):
            mid = pending[pos]
            pos += 1
            from_under = True
        elif survivors:
            pending, survivors = survivors, []
            mid = pending[0]
            pos = 1
            from_under = True
        elif at_min:
            mid = at_min.popleft()
            from_under = False
        else:
            raise RuntimeError("sticky assignment: no more unfilled members to assign to")
        mine_now = assignment[mid]
        mine_now.append(tp)
        revoked_from = maybe_revoked.get(tp)
        if (revoked_from is not None and revoked_from != mid) or tp in multi:
            transferring[tp] = mid
        count = len(mine_now)
        if count == min_quota:
            at_min.append(mid)
        elif from_under:
            survivors.append(mid)
        elif count == max_quota:
            current_over += 1

    # 3. Kafka's verifyUnfilledMembers: nobody may be left under the lower quota.
    if pending[pos:] or survivors:
        raise RuntimeError("sticky assignment: members left below the minimum quota")
    return assignment, transferring


# -- unequal subscriptions ---------------------------------------------------------------------


class _PartitionMovements(Generic[P]):
    """Kafka's ``PartitionMovements``: net moves this rebalance, per topic and (src, dst) pair."""

    __slots__ = ("_by_partition", "_by_topic", "digest")

    def __init__(self) -> None:
        self._by_partition: dict[P, tuple[str, str]] = {}
        self._by_topic: dict[str, dict[tuple[str, str], dict[P, None]]] = {}
        self.digest = 0
        """XOR of the hashes of the records: equal record sets have equal digests."""

    def _remove(self, tp: P) -> tuple[str, str]:
        pair = self._by_partition.pop(tp)
        self.digest ^= hash((tp, pair))
        per_topic = self._by_topic[tp[0]]
        moved = per_topic[pair]
        del moved[tp]
        if not moved:
            del per_topic[pair]
            if not per_topic:
                del self._by_topic[tp[0]]
        return pair

    def _add(self, tp: P, pair: tuple[str, str]) -> None:
        self._by_partition[tp] = pair
        self.digest ^= hash((tp, pair))
        self._by_topic.setdefault(tp[0], {}).setdefault(pair, {})[tp] = None

    def move(self, tp: P, old: str, new: str) -> None:
        if tp in self._by_partition:
            src, _ = self._remove(tp)
            if src != new:
                self._add(tp, (src, new))
        else:
            self._add(tp, (old, new))

    def swaps(self) -> list[tuple[P, str, P, str]]:
        """Pairs of partitions of one topic moved in opposite directions between two members:
        (a, a's original owner, b, b's original owner), each pair at most once."""
        out: list[tuple[P, str, P, str]] = []
        for per_topic in self._by_topic.values():
            for (src, dst), moved in per_topic.items():
                if src < dst and (dst, src) in per_topic:
                    back = per_topic[(dst, src)]
                    out.extend(
                        (a, src, b, dst) for a, b in zip(sorted(moved), sorted(back), strict=False)
                    )
        return out

    def partition_to_move(self, tp: P, old: str, new: str) -> P:
        """Moving ``tp`` from ``old`` to ``new``; undo an earlier move from ``new`` instead if any."""
        per_topic = self._by_topic.get(tp[0])
        if per_topic is None:
            return tp
        earlier = self._by_partition.get(tp)
        if earlier is not None:
            old = earlier[0]
        reverse = per_topic.get((new, old))
        if not reverse:
            return tp
        return min(reverse)  # Kafka takes any (HashSet order); the smallest keeps runs repeatable


class _GeneralAssignment(Generic[P]):
    """Kafka's ``GeneralAssignmentBuilder`` with heap-based member selection."""

    def __init__(
        self,
        partitions: Mapping[str, Sequence[P]],
        members: Sequence[StickyMember[P]],
        owned: Mapping[str, list[P]],
    ) -> None:
        self._partitions = partitions
        self._members = members
        self._owned = owned
        self._ids = [m.member_id for m in members]
        self._subs: dict[str, frozenset[str]] = {
            m.member_id: frozenset(t for t in m.topics if t in partitions) for m in members
        }
        self._potential: dict[str, int] = dict.fromkeys(partitions, 0)
        groups: dict[frozenset[str], int] = {}
        self._group_of: dict[str, int] = {}
        self._topic_groups: dict[str, list[int]] = {t: [] for t in partitions}
        group_max: list[int] = []
        for mid in self._ids:
            subs = self._subs[mid]
            for t in subs:
                self._potential[t] += 1
            g = groups.get(subs)
            if g is None:
                g = groups[subs] = len(groups)
                group_max.append(sum(len(partitions[t]) for t in subs))
                for t in subs:
                    self._topic_groups[t].append(g)
            self._group_of[mid] = g
        self._max_size = {mid: group_max[self._group_of[mid]] for mid in self._ids}
        self._group_heaps: list[list[tuple[int, str]]] = [[] for _ in groups]

        self._current: dict[str, dict[P, None]] = {mid: {} for mid in self._ids}
        self._owner: dict[P, str] = {}
        self._size: dict[str, int] = dict.fromkeys(self._ids, 0)
        self._topic_counts: dict[str, dict[str, int]] = {mid: {} for mid in self._ids}
        self._active: dict[str, bool] = dict.fromkeys(self._ids, True)
        self._min_heap: list[tuple[int, str]] = []
        self._max_heap: list[tuple[int, str]] = []
        self._owner_heaps: dict[str, list[tuple[int, str]]] = {t: [] for t in partitions}
        self._dirty: set[str] = set(partitions)
        self._violated: set[str] = set()
        self._movements: _PartitionMovements[P] = _PartitionMovements()
        self._prev: dict[P, tuple[int, str]] = {}
        self._revocation_required = False
        self._owner_digest = 0  # XOR of hash((partition, owner)) changes since balancing began
        self._cycle_guard = False

    # -- state updates -------------------------------------------------------------------------

    def _place(self, tp: P, mid: str) -> None:
        self._current[mid][tp] = None
        self._owner[tp] = mid
        self._size[mid] += 1
        counts = self._topic_counts[mid]
        counts[tp[0]] = counts.get(tp[0], 0) + 1

    def _unplace(self, tp: P, mid: str) -> None:
        del self._current[mid][tp]
        self._size[mid] -= 1
        counts = self._topic_counts[mid]
        left = counts[tp[0]] - 1
        if left:
            counts[tp[0]] = left
        else:
            del counts[tp[0]]

    def _touch(self, mid: str) -> None:
        """Record ``mid``'s new size in every heap it appears in; its topics need re-checking."""
        size = self._size[mid]
        heapq.heappush(self._group_heaps[self._group_of[mid]], (size, mid))
        heapq.heappush(self._min_heap, (size, mid))
        heapq.heappush(self._max_heap, (-size, mid))
        for t in self._topic_counts[mid]:
            heapq.heappush(self._owner_heaps[t], (-size, mid))
        self._dirty.update(self._subs[mid])

    def _rebuild_heaps(self, full: bool = True) -> None:
        """Heaps from the current state (active members only); ``full=False``: group heaps only."""
        live = [mid for mid in self._ids if self._active[mid]]
        size = self._size
        for h in self._group_heaps:
            h.clear()
        for mid in live:
            self._group_heaps[self._group_of[mid]].append((size[mid], mid))
        for h in self._group_heaps:
            heapq.heapify(h)
        if not full:
            return
        for h in self._owner_heaps.values():
            h.clear()
        for mid in live:
            entry = (-size[mid], mid)
            for t in self._topic_counts[mid]:
                self._owner_heaps[t].append(entry)
        for h in self._owner_heaps.values():
            heapq.heapify(h)
        self._min_heap = [(size[mid], mid) for mid in live]
        self._max_heap = [(-size[mid], mid) for mid in live]
        heapq.heapify(self._min_heap)
        heapq.heapify(self._max_heap)
        self._dirty = set(self._partitions)
        self._violated.clear()

    # -- queries ---------------------------------------------------------------------------------

    def _top(self, heap: list[tuple[int, str]], sign: int) -> tuple[int, str] | None:
        size, active = self._size, self._active
        while heap:
            s, mid = heap[0]
            if active[mid] and size[mid] == sign * s:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _least_loaded(self, topic: str) -> tuple[int, str] | None:
        """The active subscriber of ``topic`` first in (size, member id) order."""
        best: tuple[int, str] | None = None
        for g in self._topic_groups[topic]:
            top = self._top(self._group_heaps[g], 1)
            if top is not None and (best is None or top < best):
                best = top
        return best

    def _largest_owner_size(self, topic: str) -> int | None:
        heap = self._owner_heaps[topic]
        size, active, counts = self._size, self._active, self._topic_counts
        while heap:
            s, mid = heap[0]
            if active[mid] and size[mid] == -s and topic in counts[mid]:
                return -s
            heapq.heappop(heap)
        return None

    def _is_balanced(self) -> bool:
        """Kafka's ``isBalanced``: sizes within one, or no partition can go to a member with 2+ fewer.

        The second test holds iff, for every topic, its most loaded owner has at most one more
        partition than its least loaded active subscriber; only topics touched since the last call
        are re-examined.
        """
        low = self._top(self._min_heap, 1)
        high = self._top(self._max_heap, -1)
        if low is None or high is None or low[0] >= -high[0] - 1:
            return True
        for topic in self._dirty:
            violated = False
            if self._potential[topic] >= 2:
                largest = self._largest_owner_size(topic)
                least = self._least_loaded(topic) if largest is not None else None
                violated = largest is not None and least is not None and largest > least[0] + 1
            if violated:
                self._violated.add(topic)
            else:
                self._violated.discard(topic)
        self._dirty.clear()
        return not self._violated

    def _can_participate(self, mid: str) -> bool:
        if self._size[mid] < self._max_size[mid]:
            return True
        return any(self._potential[t] >= 2 for t in self._topic_counts[mid])

    # -- the algorithm ---------------------------------------------------------------------------

    def build(self) -> dict[str, list[P]]:
        partitions = self._partitions
        max_generation = max(m.generation for m in self._members)
        max_generation = max(max_generation, DEFAULT_GENERATION)
        # prepopulateCurrentAssignments: claims of older generations, the newest such claim wins.
        for m in self._members:
            if m.generation < max_generation:
                for tp in m.owned:
                    cur = self._prev.get(tp)
                    if cur is not None and m.generation <= cur[0]:
                        continue
                    parts = partitions.get(tp[0])
                    if parts is not None and 0 <= tp[1] < len(parts):
                        self._prev[tp] = (m.generation, m.member_id)

        # assignOwnedPartitions: keep owned partitions of still-subscribed topics.
        assigned: set[P] = set()
        for mid in self._ids:
            subs = self._subs[mid]
            for tp in self._owned[mid]:
                if tp[0] in subs:
                    self._place(tp, mid)
                    assigned.add(tp)
                else:
                    self._revocation_required = True
        initializing = not assigned

        potential = self._potential
        topics = sorted(partitions, key=lambda t: (potential[t], t))
        sorted_all = [tp for t in topics for tp in partitions[t]]
        unassigned = [tp for tp in sorted_all if tp not in assigned] if assigned else sorted_all
        self._rebuild_heaps(full=False)
        self._balance(sorted_all, unassigned, initializing)
        return {mid: list(self._current[mid]) for mid in self._ids}

    def _balance(self, sorted_all: list[P], unassigned: list[P], initializing: bool) -> None:
        # Assign every unassigned partition to its least loaded subscriber.
        # Only the group heaps are read here; the others are rebuilt below.
        group_heaps, group_of, size = self._group_heaps, self._group_of, self._size
        for tp in unassigned:
            best = self._least_loaded(tp[0])
            if best is not None:
                mid = best[1]
                self._place(tp, mid)
                heapq.heappush(group_heaps[group_of[mid]], (size[mid], mid))

        # Only topics with 2+ potential members and members that can change take part.
        fixed_topics = {t for t, n in self._potential.items() if n < 2}
        if fixed_topics:
            sorted_all = [tp for tp in sorted_all if tp[0] not in fixed_topics]
            unassigned = [tp for tp in unassigned if tp[0] not in fixed_topics]
        for mid in self._ids:
            if not self._can_participate(mid):
                self._active[mid] = False
        self._rebuild_heaps()

        live = [mid for mid in self._ids if self._active[mid]]
        before = {mid: list(self._current[mid]) for mid in live}
        before_owner = dict(self._owner)

        if not self._revocation_required:
            self._perform_reassignments(unassigned)
        performed = self._perform_reassignments(sorted_all)
        if self._cycle_guard:
            self._undo_swaps()

        if (
            not initializing
            and performed
            and _balance_score(len(self._current[mid]) for mid in live)
            >= _balance_score(len(parts) for parts in before.values())
        ):
            for mid, parts in before.items():
                self._current[mid] = dict.fromkeys(parts)
            self._owner = before_owner

    def _perform_reassignments(self, reassignable: list[P]) -> bool:
        performed = False
        size, active, subs = self._size, self._active, self._subs
        seen: set[tuple[int, int]] = set()
        for _ in range(_MAX_BALANCE_PASSES):
            # Kafka's loop can revisit a state and then never ends: same assignment and moves at
            # the start of a pass. From then on only moves that improve the balance are made.
            state = (self._owner_digest, self._movements.digest)
            if state in seen:
                self._cycle_guard = True
            seen.add(state)
            modified = False
            for tp in reassignable:
                if self._is_balanced():
                    break
                topic = tp[0]
                owner = self._owner[tp]
                prev = self._prev.get(tp)
                if prev is not None:
                    prev_owner = prev[1]
                    # Kafka assumes the older owner is still a candidate; check it.
                    if (
                        active.get(prev_owner, False)
                        and topic in subs[prev_owner]
                        and size[owner] > size[prev_owner] + 1
                    ):
                        self._reassign(tp, prev_owner)
                        performed = modified = True
                        continue
                best = self._least_loaded(topic)
                if best is not None and size[owner] > best[0] + 1:
                    self._reassign(tp, best[1])
                    performed = modified = True
            if not modified:
                break
        return performed

    def _undo_swaps(self) -> None:
        """Give both partitions of a swap back to their owners (sizes do not change)."""
        for a, a_owner, b, b_owner in self._movements.swaps():
            for tp, back in ((a, a_owner), (b, b_owner)):
                current = self._owner[tp]
                self._movements.move(tp, current, back)
                self._unplace(tp, current)
                self._place(tp, back)

    def _reassign(self, tp: P, new: str) -> None:
        actual = self._movements.partition_to_move(tp, self._owner[tp], new)
        old = self._owner[actual]
        if self._cycle_guard and actual is not tp and self._size[old] <= self._size[new] + 1:
            # Undoing an earlier move whose holder is not overloaded cannot improve the balance;
            # it is what makes Kafka's loop cycle (tp's overloaded owner stays overloaded).
            actual, old = tp, self._owner[tp]
        self._owner_digest ^= hash((actual, old)) ^ hash((actual, new))
        self._movements.move(actual, old, new)
        self._unplace(actual, old)
        self._place(actual, new)
        self._touch(old)
        self._touch(new)


def _balance_score(sizes: Iterable[int]) -> int:
    """Kafka's ``getBalanceScore``: the sum of |a - b| over all pairs of members."""
    ordered = sorted(sizes)
    n = len(ordered)
    return sum(s * (2 * i - n + 1) for i, s in enumerate(ordered))
