"""Reconciling one member towards its target assignment: Kafka 4.0's ``CurrentAssignmentBuilder``.

The member moves through its states (Kafka's ``MemberState``):

- ``STABLE`` at an older epoch: compute the next assignment;
- ``UNREVOKED_PARTITIONS``: wait until the member no longer reports any partition pending
  revocation, then move to the next epoch;
- ``UNRELEASED_PARTITIONS``: hand over the partitions their previous owners have released since;
- ``UNKNOWN`` (a state byte this version does not know): fenced unless it owns nothing.

Revocation comes before reassignment: a partition still owned (or being revoked) by another
member at some epoch is not given until it is released, and a member keeps no partition it was
asked to give up while it still reports owning it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from coordinator.errors import Error
from coordinator.modern.model import Assignment, ConsumerGroupMember, MemberState

#: topic id -> partitions the member says it owns (the heartbeat's ``topic_partitions``).
Owned = Mapping[str, frozenset[int]]


class FencedMemberEpoch(Exception):
    """Kafka's ``FencedMemberEpochException``."""

    error = Error.FENCED_MEMBER_EPOCH


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[str, int], int],
    owned: Owned | None,
) -> ConsumerGroupMember:
    """Kafka's ``CurrentAssignmentBuilder.build``."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.partitions_pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or owned:
        raise FencedMemberEpoch(
            "The consumer group member is in a unknown state. The member must abandon all its "
            "partitions and rejoin."
        )
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _owns_any(owned: Owned | None, revoking: Assignment) -> bool:
    """Kafka's ``ownsRevokedPartitions``: an unknown ownership (no list sent) counts as owning."""
    if owned is None:
        return True
    return any(owned[topic] & parts for topic, parts in revoking.items() if topic in owned)


def _next(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[str, int], int],
    owned: Owned | None,
) -> ConsumerGroupMember:
    """Kafka's ``computeNextAssignment``."""
    unreleased = False
    assigned: dict[str, frozenset[int]] = {}
    revoking: dict[str, frozenset[int]] = {}
    pending: dict[str, frozenset[int]] = {}
    current = member.assigned_partitions
    for topic_id in sorted(set(target) | set(current)):
        wanted = target.get(topic_id, frozenset())
        have = current.get(topic_id, frozenset())
        keep = have & wanted
        give_up = have - keep
        to_get = wanted - keep
        free = frozenset(p for p in to_get if partition_epoch(topic_id, p) == -1)
        if free != to_get:
            unreleased = True
        if keep:
            assigned[topic_id] = keep
        if give_up:
            revoking[topic_id] = give_up
        if free:
            pending[topic_id] = free
    if revoking and _owns_any(owned, revoking):
        return member.with_epoch(member_epoch).replace(
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned_partitions=assigned,
            partitions_pending_revocation=revoking,
        )
    for topic_id, partitions in pending.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch).replace(
        state=state, assigned_partitions=assigned, partitions_pending_revocation={}
    )
