"""What the coordinator holds for one group id: membership, committed offsets and timers.

This is Kafka's ``ClassicGroup``/``ClassicGroupMember`` bookkeeping (4.x), plus the group's
offsets (4.x keeps them in ``OffsetMetadataManager``; here they live beside the group because
one group id is one unit of state in every adapter) and its timers as data. Methods here only
keep the books consistent (counts, static mapping, leader); the protocol's decisions live in
:mod:`coordinator.group.membership` and :mod:`coordinator.offsets`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.consumer_protocol import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from coordinator.consumer_protocol import decode_subscription_topics
from coordinator.group.states import (
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalStateTransition,
)
from coordinator.group.timers import Timer, TimerBook, Undelivered
from coordinator.serde import DecodeError

EMPTY_ASSIGNMENT = b""


@dataclass(slots=True)
class ParkedRequest:
    """A JoinGroup or SyncGroup that Kafka parks until the join or sync completes."""

    request_id: Any
    api_version: int


@dataclass(slots=True)
class Member:
    """Kafka's ``ClassicGroupMember``."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    #: (name, metadata) in the member's preference order.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = EMPTY_ASSIGNMENT
    is_new: bool = False
    #: Parked JoinGroups, oldest first. Kafka keeps one and silently drops a superseded one;
    #: we keep every one so each gets the answer (contract, section 1).
    awaiting_join: list[ParkedRequest] = field(default_factory=list)
    awaiting_sync: list[ParkedRequest] = field(default_factory=list)

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, byte-identical metadata (``ClassicGroupMember.matches``)."""
        return self.protocols == protocols

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        # Unreachable unless the engine is wrong (Kafka throws IllegalArgumentException).
        raise RuntimeError(f"member {self.member_id} does not support protocol {protocol_name}")

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise RuntimeError(f"member {self.member_id} does not support any of {sorted(candidates)}")


@dataclass(slots=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's ``OffsetAndMetadata``)."""

    committed_offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None


# Timer kinds. Keys follow Kafka's (heartbeat-<member>, join, sync) within one group.
HEARTBEAT = "heartbeat"
JOIN = "join"
INITIAL_JOIN = "initial-join"
SYNC = "sync"
OFFSET_EXPIRY = "offset-expiry"


@dataclass(slots=True)
class ClassicGroup(TimerBook):
    """One group id's state: Kafka's ``ClassicGroup`` plus its offsets and its timers."""

    group_id: str
    current_state_timestamp_ms: int | None
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.DEAD
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    #: KIP-394 member ids handed out with MEMBER_ID_REQUIRED (a dict, for a stable order).
    pending_members: dict[str, None] = field(default_factory=dict)
    pending_sync_members: dict[str, None] = field(default_factory=dict)
    num_awaiting_join: int = 0
    supported_protocols: dict[str, int] = field(default_factory=dict)
    #: None = unknown (non-consumer group, or subscriptions that do not parse).
    subscribed_topics: frozenset[str] | None = None
    new_member_added: bool = False
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    timers: dict[str, Timer] = field(default_factory=dict)
    #: (deadline, seq, key): the live timers' anchors and stale entries
    #: (:mod:`coordinator.group.timers`); not the group's state, so not compared.
    timer_heap: list[tuple[int, int, str]] = field(default_factory=list, compare=False)
    #: The last timer sequence number handed out, for callers that number timers per group.
    timer_seq: int = 0
    #: Why the latest rebalance began: the reason Kafka passes to ``prepareRebalance`` (and
    #: logs). Kept once the rebalance completes, so a Stable group still says why its generation
    #: started. Transient, like PreparingRebalance itself: no log record carries it, so a group
    #: loaded from the log has None (the snapshot blob keeps it).
    rebalance_reason: str | None = None
    #: The group's clock at the end of its last :func:`coordinator.step.step`: a later step
    #: never runs the group at an earlier time (a request that arrived earlier is served at this
    #: time). None until a step has run (a group loaded from the log; the facade's groups, which
    #: share the facade's one clock). Transient: no log record carries it.
    clock_ms: int | None = None
    #: The member-facing timers the last step armed, while its answers' delivery is not yet
    #: known (:class:`coordinator.group.timers.Undelivered`); None when there are none, and
    #: always None where the caller delivers answers at once (the facade). Transient.
    undelivered: Undelivered | None = None

    # -- states -------------------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(self.group_id, self.state, target)
        self.previous_state = self.state
        self.state = target
        self.current_state_timestamp_ms = now_ms

    def is_in(self, state: GroupState) -> bool:
        return self.state is state

    # -- members ------------------------------------------------------------------------------

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member) -> None:
        """Kafka's ``ClassicGroup.add``: register, count protocols, elect a first leader."""
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(
                    f"static member {member.group_instance_id} is already in group {self.group_id}"
                )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        if member.awaiting_join:
            self.num_awaiting_join += 1
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        """Kafka's ``ClassicGroup.remove`` (pending and pending-sync ids included)."""
        removed = self.members.pop(member_id, None)
        if removed is not None:
            self._count_protocols(removed, -1)
            if removed.awaiting_join:
                self.num_awaiting_join -= 1
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.pop(member_id, None)
        return removed

    def update_member(
        self,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        parked: ParkedRequest | None,
    ) -> None:
        """Kafka's ``updateMember``: new protocols and timeouts, and park (or unpark) a join."""
        self._count_protocols(member, -1)
        member.protocols = protocols
        self._count_protocols(member, 1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if parked is not None:
            if not member.awaiting_join:
                self.num_awaiting_join += 1
            member.awaiting_join.append(parked)
        elif member.awaiting_join:
            self.num_awaiting_join -= 1
            member.awaiting_join = []

    def take_awaiting_join(self, member: Member) -> list[ParkedRequest]:
        """Unpark a member's JoinGroups (to be answered by the caller)."""
        parked = member.awaiting_join
        if parked:
            member.awaiting_join = []
            self.num_awaiting_join -= 1
        return parked

    def replace_static_member(
        self, instance_id: str, old_id: str, new_id: str
    ) -> tuple[Member, Member]:
        """Kafka's ``replaceStaticMember``: the new id takes over the old member's place.

        Returns (old, new). The old member's parked requests stay on ``old`` for the caller to
        fence with :meth:`take_awaiting_join`, which also uncounts them.
        """
        old = self.members.pop(old_id, None)
        if old is None:
            raise RuntimeError(f"cannot replace non-existing member id {old_id}")
        new = Member(
            member_id=new_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_id] = new
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        return old, new

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise RuntimeError(f"member {member_id} is already in group {self.group_id}")
        self.pending_members[member_id] = None

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the current members (0 with none)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Kafka's ``maybeElectNewJoinedLeader``: the leader must be a member that rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- protocols ----------------------------------------------------------------------------

    def _count_protocols(self, member: Member, delta: int) -> None:
        counts = self.supported_protocols
        for name, _ in member.protocols:
            counts[name] = counts.get(name, 0) + delta

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's ``supportsProtocols``: the group could accept a member with these protocols."""
        if self.state is GroupState.EMPTY:
            return protocol_type != "" and len(protocols) > 0
        if self.protocol_type != protocol_type:
            return False
        size = len(self.members)
        return any(self.supported_protocols.get(name, 0) == size for name, _ in protocols)

    def candidate_protocols(self) -> set[str]:
        size = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == size}

    def select_protocol(self) -> str:
        """The protocol vote (7.6). Ties, which Kafka leaves to hash order, go to the earliest in
        the leader's preference list, then to the smallest name."""
        if not self.members:
            raise RuntimeError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        tied = {name for name, count in votes.items() if count == best}
        if len(tied) == 1:
            return next(iter(tied))
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None:
            for name, _ in leader.protocols:
                if name in tied:
                    return name
        return min(tied)

    def current_member_list(self) -> list[dict[str, Any]]:
        """The leader's member list in a JoinGroup response."""
        protocol = self.protocol_name
        return [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata(protocol),
            }
            for m in self.members.values()
        ]

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Kafka's ``computeSubscribedTopics``: only the v0 prefix of each subscription is read."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics.update(decode_subscription_topics(member.metadata(self.protocol_name)))
        except DecodeError:
            return None
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed_topics

    def init_next_generation(self, now_ms: int) -> None:
        """Kafka's ``initNextGeneration``."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()
