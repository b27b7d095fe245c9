"""The server-side assignors of consumer groups: ``uniform`` and ``range`` (Kafka 4.0).

Each takes the group spec (every member's subscribed topic ids, instance id and current target
assignment, and whether all members subscribe to the same topics) and the partition count of
each subscribed topic, and returns the new target assignment of every member. Pure functions
with a deterministic result: where Kafka iterates a hash map, members are taken in id order and
topics in topic id order, so a Kafka engineer will find the same algorithm, and this
coordinator always gives the same answer to the same group.

- ``range`` (Kafka's ``RangeAssignor``): per topic, members sorted (static members by instance
  id first, then member ids) take consecutive ranges; the first ``partitions % members`` get one
  more. Co-partitioned topics line up. Not sticky, as in Kafka.
- ``uniform`` (Kafka's ``UniformAssignor``): balanced and sticky. With one subscription for all
  (homogeneous) it is Kafka's ``UniformHomogeneousAssignmentBuilder``: every member keeps what
  it has up to its quota, and the rest is dealt out in order. With different subscriptions
  (heterogeneous) it keeps every partition with a member still subscribed to it, deals the
  unassigned ones to the least loaded subscriber, then moves partitions from the most to the
  least loaded subscriber while that narrows the spread: the same goals as Kafka's
  ``UniformHeterogeneousAssignmentBuilder`` (balance first, then stickiness), by a simpler path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    if not members:
        return {}
    ordered = sorted(members, key=lambda m: m.member_id)
    if subscription is SubscriptionType.HOMOGENEOUS:
        return _uniform_homogeneous(ordered, topics)
    return _uniform_heterogeneous(ordered, topics)


def _uniform_homogeneous(
    members: list[MemberSpec], topics: Mapping[str, int]
) -> dict[str, Assignment]:
    subscribed = members[0].subscribed_topic_ids
    if not subscribed:
        return {}
    assigned = {
        (topic_id, p) for m in members for topic_id, parts in m.assignment.items() for p in parts
    }
    unassigned: list[tuple[str, int]] = []
    total = 0
    for topic_id in sorted(subscribed):
        count = _num_partitions(
            topics,
            topic_id,
            f"Members are subscribed to topic {topic_id} which doesn't exist in the topic metadata.",
        )
        unassigned.extend((topic_id, p) for p in range(count) if (topic_id, p) not in assigned)
        total += count
    minimum, extra = divmod(total, len(members))
    result: dict[str, Assignment] = {}
    unfilled: list[tuple[str, int]] = []
    for member in members:
        quota = minimum
        if extra > 0:
            quota += 1
            extra -= 1
        kept: dict[str, frozenset[int]] = {}
        changed = False
        for topic_id in sorted(member.assignment):
            partitions = member.assignment[topic_id]
            if topic_id not in subscribed:
                changed = True
                continue
            if len(partitions) <= quota:
                quota -= len(partitions)
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


def _uniform_heterogeneous(
    members: list[MemberSpec], topics: Mapping[str, int]
) -> dict[str, Assignment]:
    by_id = {m.member_id: m for m in members}
    owner: dict[tuple[str, int], str] = {}
    load = dict.fromkeys(by_id, 0)
    subscribers: dict[str, list[str]] = {}
    for member in members:
        for topic_id in sorted(member.subscribed_topic_ids):
            _num_partitions(
                topics,
                topic_id,
                f"Member {member.member_id} subscribes to topic {topic_id} which doesn't exist "
                "in the topic metadata.",
            )
            subscribers.setdefault(topic_id, []).append(member.member_id)
    # Stickiness: a partition stays with a member still subscribed to its topic.
    for member in members:
        for topic_id in sorted(member.assignment):
            if topic_id not in member.subscribed_topic_ids:
                continue
            for partition in sorted(member.assignment[topic_id]):
                key = (topic_id, partition)
                if partition < topics[topic_id] and key not in owner:
                    owner[key] = member.member_id
                    load[member.member_id] += 1
    # Deal the rest, topics with the fewest subscribers first, to the least loaded subscriber.
    for topic_id in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        candidates = subscribers[topic_id]
        for partition in range(topics[topic_id]):
            if (topic_id, partition) in owner:
                continue
            chosen = min(candidates, key=lambda m: (load[m], m))
            owner[(topic_id, partition)] = chosen
            load[chosen] += 1
    # Balance: move a partition from the most to the least loaded subscriber while it helps.
    moved = True
    while moved:
        moved = False
        for key in sorted(owner):
            current = owner[key]
            candidates = subscribers[key[0]]
            chosen = min(candidates, key=lambda m: (load[m], m))
            if load[current] - load[chosen] > 1:
                owner[key] = chosen
                load[current] -= 1
                load[chosen] += 1
                moved = True
    result: dict[str, dict[str, set[int]]] = {m: {} for m in by_id}
    for (topic_id, partition), member_id in owner.items():
        result[member_id].setdefault(topic_id, set()).add(partition)
    return {m: {t: frozenset(p) for t, p in a.items()} for m, a in result.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assign, "range": range_assign}
