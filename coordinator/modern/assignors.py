"""The server-side assignors of consumer groups: ``uniform`` and ``range`` (Kafka 4).

Each takes the group spec (every member's subscribed topic ids, instance id and current target
assignment, and whether all members subscribe to the same topics) and the partition count of
each subscribed topic, and returns the new target assignment of every member. Pure functions
with a deterministic result.

- ``range`` (Kafka's ``RangeAssignor``): per topic, members sorted (static members by instance
  id first, then member ids) take consecutive ranges; the first ``partitions % members`` get one
  more. Co-partitioned topics line up. Not sticky, as in Kafka.
- ``uniform`` (Kafka's ``UniformAssignor``): balanced and sticky. With one subscription for all
  (homogeneous, :func:`subscription_type`) it is Kafka's
  ``UniformHomogeneousAssignmentBuilder``; with different subscriptions (heterogeneous) Kafka
  4's ``UniformHeterogeneousAssignmentBuilder``, step for step.

Order, where Kafka's depends on a hash map: members are taken in member id order (as Kafka's
assignor tests order them); a member's current assignment is read topic by topic in Kafka's
``Uuid`` order and partitions ascending (Kafka reads the map it is given, which its tests build
in that order); the homogeneous builder lists the unassigned partitions in the order of the
``HashSet`` of topic ids it builds itself, which :func:`java_hash_set_order` reproduces. With
these, Kafka's assignor tests give the same assignments here, exactly.

Racks: Kafka 4's server-side assignors are not rack-aware (rack awareness was taken out of
them before 4.0, KAFKA-16694, and partition racks out of the topic metadata, KAFKA-17578): a
member's ``rack_id`` is kept and described but never changes an assignment, here as there.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from coordinator.modern.model import Assignment, SubscriptionType


class PartitionAssignorError(Exception):
    """Kafka's ``PartitionAssignorException``."""


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    instance_id: str | None
    subscribed_topic_ids: frozenset[str]
    assignment: Assignment


Assignor = Callable[[list[MemberSpec], SubscriptionType, Mapping[str, int]], dict[str, Assignment]]


def _num_partitions(topics: Mapping[str, int], topic_id: str, message: str) -> int:
    count = topics.get(topic_id, -1)
    if count == -1:
        raise PartitionAssignorError(message)
    return count


# --- Kafka's orders -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)
def _uuid_bits(topic_id: str) -> tuple[int, int]:
    """A topic id's two signed 64-bit halves (Kafka's ``Uuid`` most and least significant
    bits). An id that is not a Kafka ``Uuid`` string (tests' short names) gets halves derived
    from its bytes, so it still has a fixed place."""
    try:
        raw = base64.urlsafe_b64decode(topic_id + "==")
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16 or len(topic_id) != 22:
        raw = hashlib.blake2b(topic_id.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    return (
        int.from_bytes(raw[:8], "big", signed=True),
        int.from_bytes(raw[8:], "big", signed=True),
    )


def uuid_order(topic_id: str) -> tuple[int, int]:
    """The sort key of Kafka's ``Uuid.compareTo``: signed most, then least, significant bits."""
    return _uuid_bits(topic_id)


def _uuid_hash(topic_id: str) -> int:
    """Java's ``HashMap.hash`` of a ``Uuid``: ``Uuid.hashCode`` (the halves xored, folded to an
    int) spread by ``h ^ (h >>> 16)``, as an unsigned 32-bit value."""
    most, least = _uuid_bits(topic_id)
    bits = (most ^ least) & 0xFFFFFFFFFFFFFFFF
    h = ((bits >> 32) ^ bits) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_hash_set_order(topic_ids: Iterable[str]) -> list[str]:
    """The order in which ``new java.util.HashSet<Uuid>(ids)`` iterates: by bucket
    (hash & (capacity - 1)), where the capacity is the power of two the copy constructor picks,
    ``max(size / 0.75 + 1, 16)`` rounded up. Ids sharing a bucket (Java: in insertion order,
    which depends on the caller's collection) are taken in ``Uuid`` order."""
    ids = sorted(set(topic_ids), key=uuid_order)
    wanted = max(len(ids) * 4 // 3 + 1, 16)
    capacity = 1 << (wanted - 1).bit_length()
    return sorted(ids, key=lambda t: _uuid_hash(t) & (capacity - 1))


def subscription_type(
    subscribed_topic_names: Iterable[Iterable[str]], regexes: Iterable[str | None]
) -> SubscriptionType:
    """Kafka 4's ``ConsumerGroup.subscriptionType``, from each member's subscribed topic names
    and regex (one entry per member, in the same order).

    Without regexes the group is homogeneous when every subscribed name (existing or not) is
    subscribed by every member. With regexes it is homogeneous only when all members use one
    and the same regex and none subscribes by name (each topic the regex resolves to is then
    subscribed exactly once, by it); any other mix is heterogeneous."""
    by_name: dict[str, int] = {}
    members = 0
    for names in subscribed_topic_names:
        members += 1
        for name in names:
            by_name[name] = by_name.get(name, 0) + 1
    regex_counts: dict[str, int] = {}
    for regex in regexes:
        if regex:
            regex_counts[regex] = regex_counts.get(regex, 0) + 1
    if not regex_counts:
        homogeneous = all(count == members for count in by_name.values())
    else:
        homogeneous = list(regex_counts.values()) == [members] and not by_name
    return SubscriptionType.HOMOGENEOUS if homogeneous else SubscriptionType.HETEROGENEOUS


# --- range ----------------------------------------------------------------------------------------


def _range_order(members: list[MemberSpec]) -> list[MemberSpec]:
    """Static members first, by instance id; then dynamic ones by member id (``sortMemberIds``)."""
    return sorted(
        members,
        key=lambda m: (0, m.instance_id, "") if m.instance_id is not None else (1, "", m.member_id),
    )


def range_assign(
    members: list[MemberSpec], subscription: SubscriptionType, topics: Mapping[str, int]
) -> dict[str, Assignment]:
    if not members:
        return {}
    ordered = _range_order(members)
    subscribers: dict[str, int] = {}
    for member in ordered:
        for topic_id in member.subscribed_topic_ids:
            subscribers[topic_id] = subscribers.get(topic_id, 0) + 1
    # topic id -> [next start, minimum quota, members still to get an extra partition, count]
    state: dict[str, list[int]] = {}
    for topic_id, count in subscribers.items():
        partitions = _num_partitions(
            topics, topic_id, "Member is subscribed to a non-existent topic"
        )
        state[topic_id] = [0, partitions // count, partitions % count, partitions]
    result: dict[str, Assignment] = {}
    for member in ordered:
        assignment: dict[str, frozenset[int]] = {}
        for topic_id in sorted(member.subscribed_topic_ids):
            topic = state[topic_id]
            start, quota = topic[0], topic[1]
            if topic[2] > 0:
                quota += 1
                topic[2] -= 1
            end = min(start + quota, topic[3])
            topic[0] = end
            if start < end:
                assignment[topic_id] = frozenset(range(start, end))
        result[member.member_id] = assignment
    return result


# --- uniform ------------------------------------------------------------------------------------


def uniform_assign(
    members: list[MemberSpec], subscription: SubscriptionType, topics: Mapping[str, int]
) -> dict[str, Assignment]:
    """Kafka's ``UniformAssignor.assign``: the homogeneous builder when every member subscribes
    to the same topics, the heterogeneous one otherwise (the group's subscription type, as
    :func:`subscription_type` computes it)."""
    if not members:
        return {}
    ordered = sorted(members, key=lambda m: m.member_id)
    if subscription is SubscriptionType.HOMOGENEOUS:
        return _uniform_homogeneous(ordered, topics)
    return _UniformHeterogeneous(ordered, topics).build()


def _kept(assignment: Assignment, topic_id: str, partitions: int) -> frozenset[int]:
    """A member's partitions of a topic that still exist (Kafka never shrinks a topic; the
    caller here may, and a partition past the end is dropped rather than assigned)."""
    parts = assignment[topic_id]
    if parts and max(parts) >= partitions:
        return frozenset(p for p in parts if p < partitions)
    return parts


def _uniform_homogeneous(
    members: list[MemberSpec], topics: Mapping[str, int]
) -> dict[str, Assignment]:
    """Kafka's ``UniformHomogeneousAssignmentBuilder``: every member keeps what it has up to
    its quota (``partitions // members``, one more for the first ``partitions % members``
    members), and the partitions nobody holds are dealt out in order to the members still
    under quota. The unassigned partitions are listed topic by topic in the order Kafka's
    ``HashSet`` of the subscribed topic ids iterates (:func:`java_hash_set_order`)."""
    subscribed = members[0].subscribed_topic_ids
    if not subscribed:
        return {}
    counts: dict[str, int] = {}
    for topic_id in subscribed:
        counts[topic_id] = _num_partitions(
            topics,
            topic_id,
            f"Members are subscribed to topic {topic_id} which doesn't exist in the topic metadata.",
        )
    assigned = {
        (topic_id, p)
        for m in members
        for topic_id, parts in m.assignment.items()
        if topic_id in counts
        for p in parts
    }
    shrunk = any(p >= counts[t] for t, p in assigned)
    unassigned: list[tuple[str, int]] = []
    total = 0
    for topic_id in java_hash_set_order(subscribed):
        count = counts[topic_id]
        unassigned.extend((topic_id, p) for p in range(count) if (topic_id, p) not in assigned)
        total += count
    minimum, extra = divmod(total, len(members))
    # A member's topics in Uuid order (the ones it no longer subscribes to first: all dropped).
    rank = {t: i for i, t in enumerate(sorted(counts, key=uuid_order))}
    result: dict[str, Assignment] = {}
    unfilled: list[tuple[str, int]] = []
    for member in members:
        quota = minimum
        if extra > 0:
            quota += 1
            extra -= 1
        kept: dict[str, frozenset[int]] = {}
        changed = False
        held = member.assignment
        for topic_id in held if len(held) < 2 else sorted(held, key=lambda t: rank.get(t, -1)):
            if topic_id not in counts:
                changed = True
                continue
            partitions = held[topic_id]
            if shrunk:
                partitions = _kept(held, topic_id, counts[topic_id])
                changed = changed or partitions is not held[topic_id]
            if len(partitions) <= quota:
                quota -= len(partitions)
                if partitions:
                    kept[topic_id] = partitions
                continue
            ordered = sorted(partitions)
            keep, give = ordered[:quota], ordered[quota:]
            quota, changed = 0, True
            if keep:
                kept[topic_id] = frozenset(keep)
            unassigned.extend((topic_id, p) for p in give)
        if quota > 0:
            unfilled.append((member.member_id, quota))
        # As Kafka's builder, an assignment that does not change is the same object.
        result[member.member_id] = kept if changed else member.assignment
    index = 0
    for member_id, quota in unfilled:
        adding: dict[str, set[int]] = {}
        for _ in range(quota):
            if index >= len(unassigned):
                break
            topic_id, partition = unassigned[index]
            index += 1
            adding.setdefault(topic_id, set()).add(partition)
        if adding:
            target = dict(result[member_id])
            for topic_id, more in adding.items():
                target[topic_id] = target.get(topic_id, frozenset()) | more
            result[member_id] = target
    if index < len(unassigned):
        raise PartitionAssignorError("Partitions were left unassigned")
    return result


#: Kafka's ``UniformHeterogeneousAssignmentBuilder.MAX_ITERATION_COUNT``: the balancing passes
#: over the topics before it settles for an almost balanced assignment.
MAX_ITERATION_COUNT = 16


class _UniformHeterogeneous:
    """Kafka 4's ``UniformHeterogeneousAssignmentBuilder`` (members subscribed to different
    topics), step for step:

    1. every member keeps its partitions of the topics it still subscribes to;
    2. the partitions nobody holds are dealt, topic by topic, to the topic's least loaded
       subscribers (topics with the most partitions per subscriber first, then the fewest
       subscribers, then topic id);
    3. each topic with two or more subscribers is balanced by moving partitions from its most
       to its least loaded subscribers (a member's load counts every topic), the last
       partitions of the most loaded first, over all topics again until a pass moves nothing
       (at most 16 passes).

    Within each topic the subscribers end at most one partition apart whenever they all have
    the same subscription; with overlapping, different subscriptions Kafka only promises an
    almost balanced result, and so does this. Members are numbered in member id order (Kafka's
    tests sort them the same way; a broker takes its hash map's order)."""

    def __init__(self, members: list[MemberSpec], topics: Mapping[str, int]) -> None:
        self.members = members
        self.topics = topics
        #: topic id -> its subscribers, as member indices in ascending order.
        self.subscribers: dict[str, list[int]] = {}
        for index, member in enumerate(members):
            for topic_id in sorted(member.subscribed_topic_ids, key=uuid_order):
                _num_partitions(
                    topics,
                    topic_id,
                    f"Members are subscribed to topic {topic_id} which doesn't exist in the "
                    "topic metadata.",
                )
                self.subscribers.setdefault(topic_id, []).append(index)
        #: The number of partitions each member holds in the new assignment.
        self.sizes = [0] * len(members)
        #: topic id -> partition -> member index (-1: unassigned).
        self.owners = {t: [-1] * topics[t] for t in self.subscribers}
        self.target: list[dict[str, set[int]]] = [{} for _ in members]

    def build(self) -> dict[str, Assignment]:
        if not self.subscribers:
            return {}
        self._revoke()
        unassigned: dict[str, list[int]] = {}
        for topic_id, owners in self.owners.items():
            free = [p for p, owner in enumerate(owners) if owner == -1]
            if free:
                unassigned[topic_id] = free
        self._assign_remaining(unassigned)
        self._balance()
        return {
            member.member_id: {t: frozenset(p) for t, p in self.target[i].items() if p}
            for i, member in enumerate(self.members)
        }

    def _topic_order(self, topic_ids: Iterable[str]) -> list[str]:
        """Kafka's ``topicComparator``: partitions per subscriber descending (as a double),
        then subscriber count ascending, then topic id (``Uuid.compareTo``)."""

        def key(topic_id: str) -> tuple[float, int, tuple[int, int]]:
            subscribers = len(self.subscribers[topic_id])
            return (-(self.topics[topic_id] / subscribers), subscribers, uuid_order(topic_id))

        return sorted(topic_ids, key=key)

    def _revoke(self) -> None:
        """Kafka's ``maybeRevokePartitions``: drop the topics a member no longer subscribes to."""
        for index, member in enumerate(self.members):
            for topic_id in sorted(member.assignment, key=uuid_order):
                if topic_id not in member.subscribed_topic_ids:
                    continue
                partitions = _kept(member.assignment, topic_id, self.topics[topic_id])
                if not partitions:
                    continue
                self.target[index][topic_id] = set(partitions)
                self.sizes[index] += len(partitions)
                owners = self.owners[topic_id]
                for partition in partitions:
                    owners[partition] = index

    def _assign(self, topic_id: str, partition: int, index: int) -> None:
        """Kafka's ``assignPartition``: move a partition to a member."""
        owners = self.owners[topic_id]
        old = owners[partition]
        if old != -1:
            held = self.target[old][topic_id]
            held.discard(partition)
            if not held:
                del self.target[old][topic_id]
            self.sizes[old] -= 1
        self.target[index].setdefault(topic_id, set()).add(partition)
        owners[partition] = index
        self.sizes[index] += 1

    def _assign_remaining(self, unassigned: Mapping[str, list[int]]) -> None:
        """Kafka's ``assignRemainingPartitions``."""
        balancer = _Balancer(self.sizes)
        for topic_id in self._topic_order(unassigned):
            balancer.initialize(self.subscribers[topic_id])
            for partition in unassigned[topic_id]:
                self._assign(topic_id, partition, balancer.next_least_loaded())

    def _balance(self) -> None:
        """Kafka's ``balance`` and ``balanceTopics``."""
        topic_ids = [t for t, subscribers in self.subscribers.items() if len(subscribers) >= 2]
        if not topic_ids:
            return
        ordered = self._topic_order(topic_ids)
        last = -1
        balancer = _Balancer(self.sizes)
        for _ in range(MAX_ITERATION_COUNT):
            for index, topic_id in enumerate(ordered):
                if index == last:
                    # A whole pass since the last topic that moved: nothing more to do.
                    return
                moved = self._balance_topic(topic_id, balancer)
                if moved > 0 or last == -1:
                    last = index

    def _balance_topic(self, topic_id: str, balancer: _Balancer) -> int:
        """Kafka's ``balanceTopic``: the number of partitions it moved."""
        if balancer.initialize(self.subscribers[topic_id]) <= 1:
            return 0
        owners = self.owners[topic_id]
        # The topic's partitions grouped by owner, so each owner's are a range in the list.
        partitions = sorted(range(self.topics[topic_id]), key=lambda p: (owners[p], p))
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for position, partition in enumerate(partitions):
            start.setdefault(owners[partition], position)
            end[owners[partition]] = position + 1
        moved = 0
        while not balancer.is_balanced():
            most = balancer.next_most_loaded()
            while most != -1 and end.get(most, 0) - start.get(most, 0) <= 0:
                balancer.exclude_most_loaded()
                most = balancer.next_most_loaded()
            if most == -1:
                break  # no subscriber has a partition of this topic left to give
            end[most] -= 1
            partition = partitions[end[most]]
            least = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            self._assign(topic_id, partition, least)
            moved += 1
        return moved


class _Balancer:
    """Kafka's ``MemberAssignmentBalancer``: a topic's subscribers sorted by load (then index),
    with a least loaded range growing rightwards that takes partitions and a most loaded range
    growing leftwards that gives them up; balanced once the two ranges' loads differ by at most
    one. ``sizes`` is the builder's live array of member loads."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.members: list[int] = []
        self.least_end = 0
        self.least_count = -1
        self.next_least = 0
        self.most_start = 0
        self.most_end = 0
        self.most_count = 1
        self.next_most = -1

    def initialize(self, members: list[int]) -> int:
        """Start on a topic's subscribers; returns the spread between their loads."""
        if not members:
            raise ValueError("Cannot balance an empty subscriber list.")
        sizes = self.sizes
        self.members = sorted(members, key=lambda m: (sizes[m], m))
        n = len(self.members)
        self.least_end = 0
        self.least_count = sizes[self.members[0]] - 1
        self.next_least = 0
        self.most_start = n
        self.most_end = n
        self.most_count = sizes[self.members[-1]] + 1
        self.next_most = n - 1
        return sizes[self.members[-1]] - sizes[self.members[0]]

    def next_least_loaded(self) -> int:
        """The member to give the next partition to (it is counted as given)."""
        if self.next_least >= self.least_end:
            # Everyone in the range got one: raise its level and take in the members there.
            self.least_count += 1
            while (
                self.least_end < len(self.members)
                and self.sizes[self.members[self.least_end]] == self.least_count
            ):
                self.least_end += 1
            self.next_least = 0
        member = self.members[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        """The member to take the next partition from, or -1 when none is left."""
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                # Emptied by exclusions: restart from the load just left of the range.
                self.most_count = self.sizes[self.members[self.most_start - 1]]
            else:
                self.most_count -= 1
            while (
                self.most_start > 0
                and self.sizes[self.members[self.most_start - 1]] == self.most_count
            ):
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = self.members[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        """Drop the member ``next_most_loaded`` just gave from the most loaded range (it has
        nothing of the topic to give up)."""
        at = self.next_most + 1
        last = self.most_end - 1
        self.members[at], self.members[last] = self.members[last], self.members[at]
        self.most_end -= 1

    def is_balanced(self) -> bool:
        return self.most_count - self.least_count <= 1


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assign, "range": range_assign}
