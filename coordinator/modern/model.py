"""What the coordinator holds for one consumer group (KIP-848), and the books it keeps.

Kafka 4.0's ``ConsumerGroup`` / ``ModernGroup`` / ``ConsumerGroupMember``: the group epoch, the
target assignment and its epoch, each member's epochs, state and current assignment, the
subscription metadata, the epoch at which each partition is owned, plus the group's committed
offsets and timers (as :class:`coordinator.group.model.ClassicGroup` keeps them). Methods here
keep the derived books consistent (topic counts, static members, inverted target assignment,
partition epochs); the state changes only by replaying records
(:mod:`coordinator.modern.replay`), and the protocol's decisions live in
:mod:`coordinator.modern.heartbeat`.

An assignment is a mapping of topic id to a frozenset of partitions, never mutated in place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum, StrEnum

from coordinator.group.model import OffsetAndMetadata
from coordinator.group.timers import Timer, TimerBook, Undelivered
from coordinator.topics import TopicMetadata

Assignment = Mapping[str, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = {}

#: Kafka's ``ConsumerGroupHeartbeatRequest`` member epochs with a meaning of their own.
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

#: The protocol type a consumer group lists (Kafka's ``ConsumerProtocol.PROTOCOL_TYPE``).
PROTOCOL_TYPE = "consumer"


class MemberState(IntEnum):
    """Kafka's ``MemberState``: the byte the CurrentMemberAssignment record stores."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConsumerGroupState(StrEnum):
    """Kafka's ``ConsumerGroup.ConsumerGroupState`` (its names, as DescribeGroups prints them)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class SubscriptionType(Enum):
    HOMOGENEOUS = "homogeneous"
    HETEROGENEOUS = "heterogeneous"


def assignment_of(pairs: Mapping[str, Iterable[int]]) -> Assignment:
    """A canonical assignment: no empty topics, frozensets of partitions."""
    return {topic: frozenset(parts) for topic, parts in pairs.items() if parts}


def assignment_size(assignment: Assignment) -> int:
    return sum(len(parts) for parts in assignment.values())


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """Kafka's ``ConsumerGroupMemberMetadataValue.ClassicMemberMetadata``: what a member of a
    consumer group that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat) joined
    with."""

    session_timeout_ms: int
    #: (protocol name, its Subscription bytes), in the order the member listed them.
    supported_protocols: tuple[tuple[str, bytes], ...]

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """Kafka's ``ConsumerGroupMember``: a consumer-protocol member, or a classic-protocol one
    (``classic`` set) of a consumer group."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    #: Sorted (Kafka keeps a set; the record lists it).
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        """Kafka's ``useClassicProtocol``."""
        return self.classic is not None

    def replace(self, **changes: object) -> ConsumerGroupMember:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_epoch(self, epoch: int) -> ConsumerGroupMember:
        """Kafka's ``updateMemberEpoch``: the current epoch becomes the previous one."""
        return self.replace(member_epoch=epoch, previous_member_epoch=self.member_epoch)

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch

    @property
    def regex(self) -> str | None:
        """The member's regular expression, if it subscribes by one ("" is none)."""
        return self.subscribed_topic_regex or None


@dataclass(slots=True)
class ConsumerGroup(TimerBook):
    """One consumer group id's state: Kafka's ``ConsumerGroup`` plus its offsets and timers."""

    group_id: str
    group_epoch: int = 0
    #: The target assignment's epoch (-1 once its record is tombstoned).
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    #: instance id -> member id.
    static_members: dict[str, str] = field(default_factory=dict)
    #: topic name -> metadata of the subscribed topics that exist (the PartitionMetadata record).
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    #: topic id -> partition -> member id, of the target assignment.
    inverted_target: dict[str, dict[int, str]] = field(default_factory=dict)
    #: (topic id, partition) -> the epoch of the member that owns it (or is revoking it).
    partition_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Subscribed topic name -> number of members subscribing to it by name.
    subscribed_topic_counts: dict[str, int] = field(default_factory=dict)
    #: Regular expression -> number of members subscribing with it.
    regex_counts: dict[str, int] = field(default_factory=dict)
    #: Regular expression -> the topics it resolved to (the RegularExpression records).
    resolved_regexes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Server assignor name -> number of members asking for it.
    assignor_counts: dict[str, int] = field(default_factory=dict)
    #: Members that speak the classic protocol, and how many of them support each protocol
    #: name (Kafka's ``numClassicProtocolMembers``, ``classicProtocolMembersSupportedProtocols``).
    classic_member_count: int = 0
    classic_protocol_counts: dict[str, int] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    timers: dict[str, Timer] = field(default_factory=dict)
    #: As ``ClassicGroup.timer_heap``: not compared.
    timer_heap: list[tuple[int, int, str]] = field(default_factory=list, compare=False)
    timer_seq: int = 0
    #: As ``ClassicGroup.clock_ms``: where the group's last step left its clock (transient).
    clock_ms: int | None = None
    #: As ``ClassicGroup.undelivered`` (transient).
    undelivered: Undelivered | None = None

    # -- what Kafka derives ---------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        """Kafka's ``maybeUpdateGroupState``, computed when asked."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if not member.is_reconciled_to(self.assignment_epoch):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def protocol_type(self) -> str:
        return PROTOCOL_TYPE

    def is_empty(self) -> bool:
        return not self.members

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def target_for(self, member_id: str, instance_id: str | None) -> Assignment:
        """Kafka's ``targetAssignment(memberId, instanceId)``: a static member's replacement
        inherits the target of the member it replaces."""
        if instance_id is None:
            return self.target_assignment.get(member_id, EMPTY_ASSIGNMENT)
        previous = self.static_members.get(instance_id)
        if previous is not None:
            return self.target_assignment.get(previous, EMPTY_ASSIGNMENT)
        return EMPTY_ASSIGNMENT

    def current_partition_epoch(self, topic_id: str, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if topic in self.subscribed_topic_counts:
            return True
        return any(topic in topics for topics in self.resolved_regexes.values())

    def subscribed_topic_names(self) -> set[str]:
        """Every topic a member subscribes to, by name or through a resolved regex."""
        names = set(self.subscribed_topic_counts)
        for regex in self.regex_counts:
            names.update(self.resolved_regexes.get(regex, ()))
        return names

    def supports_classic_protocols(self, protocol_type: str | None, names: set[str]) -> bool:
        """Kafka's ``supportsClassicProtocols``: a ``consumer`` member with a protocol every
        classic member supports (any protocol, in a group without members)."""
        if protocol_type != PROTOCOL_TYPE:
            return False
        if self.is_empty():
            return bool(names)
        return any(
            self.classic_protocol_counts.get(name, 0) == self.classic_member_count for name in names
        )

    def all_members_use_classic_protocol_except(self, member_id: str) -> bool:
        """Kafka's ``allMembersUseClassicProtocolExcept``."""
        member = self.members.get(member_id)
        return (
            member is not None
            and not member.uses_classic_protocol
            and self.classic_member_count == len(self.members) - 1
        )

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Kafka's ``waitingOnUnreleasedPartition``: a partition of the member's target that it
        lacks is still owned by another member."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, partitions in self.target_assignment.get(member.member_id, {}).items():
            have = member.assigned_partitions.get(topic_id, frozenset())
            for partition in partitions - have:
                if self.current_partition_epoch(topic_id, partition) != -1:
                    return True
        return False

    def preferred_assignor(self, default: str, order: tuple[str, ...]) -> str:
        """Kafka's ``preferredServerAssignor``: the one most members ask for. Ties (which
        Kafka leaves to hash order) go to the earliest in ``group.consumer.assignors``."""
        if not self.assignor_counts:
            return default
        best = max(self.assignor_counts.values())
        tied = [name for name, count in self.assignor_counts.items() if count == best]
        return min(
            tied, key=lambda name: (order.index(name) if name in order else len(order), name)
        )

    # -- keeping the books (called by the replay only) ------------------------------------------

    def update_member(self, new: ConsumerGroupMember) -> None:
        old = self.members.get(new.member_id)
        self.members[new.member_id] = new
        self._count(old, -1)
        self._count(new, 1)
        if old is not None:
            self._remove_partition_epochs(old)
        self._add_partition_epochs(new)
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._count(old, -1)
        self._remove_partition_epochs(old)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]

    def _count(self, member: ConsumerGroupMember | None, delta: int) -> None:
        if member is None:
            return
        for name in member.subscribed_topic_names:
            _bump(self.subscribed_topic_counts, name, delta)
        if member.regex is not None:
            _bump(self.regex_counts, member.regex, delta)
        if member.server_assignor is not None:
            _bump(self.assignor_counts, member.server_assignor, delta)
        if member.classic is not None:
            self.classic_member_count += delta
            for name in set(member.classic.protocol_names()):
                _bump(self.classic_protocol_counts, name, delta)

    def _add_partition_epochs(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    key = (topic_id, partition)
                    if key in self.partition_epochs:
                        raise RuntimeError(
                            f"Cannot set the epoch of {topic_id}-{partition} to "
                            f"{member.member_epoch} because the partition is still owned at "
                            f"epoch {self.partition_epochs[key]}"
                        )
                    self.partition_epochs[key] = member.member_epoch

    def _remove_partition_epochs(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    self.partition_epochs.pop((topic_id, partition), None)

    def set_target(self, member_id: str, assignment: Assignment) -> None:
        old = self.target_assignment.get(member_id, EMPTY_ASSIGNMENT)
        self._invert(member_id, old, assignment)
        self.target_assignment[member_id] = assignment

    def remove_target(self, member_id: str) -> None:
        old = self.target_assignment.pop(member_id, EMPTY_ASSIGNMENT)
        self._invert(member_id, old, EMPTY_ASSIGNMENT)

    def _invert(self, member_id: str, old: Assignment, new: Assignment) -> None:
        """Kafka's ``updateInvertedTargetAssignment``: a partition moved from A to B and
        updated for B first stays B's when A's update comes."""
        for topic_id in set(old) | set(new):
            before = old.get(topic_id, frozenset())
            after = new.get(topic_id, frozenset())
            owners = self.inverted_target.setdefault(topic_id, {})
            for partition in before - after:
                if owners.get(partition) == member_id:
                    del owners[partition]
            for partition in after - before:
                owners[partition] = member_id
            if not owners:
                del self.inverted_target[topic_id]


def _bump(counts: dict[str, int], key: str, delta: int) -> None:
    value = counts.get(key, 0) + delta
    if value > 0:
        counts[key] = value
    else:
        counts.pop(key, None)
