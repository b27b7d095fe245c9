"""Client-side partition assignors of the consumer protocol (section 11.3).

The group leader decodes every member's :class:`~coordinator.consumer_protocol.Subscription`, runs
the assignor the coordinator selected and sends each member its partitions. These are the
behaviours of Kafka's ``RangeAssignor``, ``RoundRobinAssignor``, ``StickyAssignor`` and
``CooperativeStickyAssignor`` (clients, trunk), without rack-aware assignment (KIP-881): racks in
subscriptions are ignored.

Member order (``AbstractPartitionAssignor.MemberInfo``): static members first, by group instance
id, then dynamic members by member id. Topics are taken in sorted order, partitions ascending.
Topics missing from ``partitions_per_topic`` (or with no partitions) are skipped, as Kafka skips
topics without metadata, and topics nobody subscribes to are ignored.

User data on the wire (readable by a Java member):

* ``sticky``: ``StickyAssignorUserData`` v1 (``StickyAssignor.STICKY_ASSIGNOR_USER_DATA_V1``)::

      previous_assignment: [ {topic: string (int16 length), partitions: [int32]} ]  (int32 counts)
      generation: int32

  v0 is the same without ``generation``; a reader tries v1, then v0, and ignores data that is
  neither.
* ``cooperative-sticky``: ``generation: int32`` (``COOPERATIVE_STICKY_ASSIGNOR_USER_DATA_V0``).

Where previous ownership comes from (Kafka's ``memberData``): ``sticky`` reads its user data and
ignores ``owned_partitions`` when both are present, as Kafka's ``StickyAssignor`` does (its tests
``testMemberDataWithInconsistentData``/``testMemberDataWillHonorUserData``); only when a member
sends no sticky user data are ``owned_partitions``/``generation_id`` used (Kafka: nothing owned).
``cooperative-sticky`` reads ``owned_partitions``, and the generation from ``generation_id`` (v2+)
or else its user data.

Other differences from Kafka: when two members claim a partition, both generations are taken
from their member data (Kafka takes the second one's from ``Subscription.generationId`` even for
``sticky``); the highest generation is computed per ``assign()`` call (Kafka keeps a maximum in the
assignor instance across calls); where Kafka iterates a ``HashMap``, members are taken by member
id; see :mod:`coordinator.client.sticky` for the balancing loop.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from typing import ClassVar, NamedTuple, cast

from coordinator.client.sticky import DEFAULT_GENERATION, StickyMember, StickyResult, sticky_assign
from coordinator.consumer_protocol import Assignment, Subscription, TopicPartitions
from coordinator.serde import DecodeError, Writer

__all__ = [
    "ASSIGNORS",
    "COOPERATIVE",
    "DEFAULT_GENERATION",
    "EAGER",
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberData",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "TopicPartition",
    "assignor",
    "decode_sticky_user_data",
    "encode_sticky_user_data",
    "make_assignment",
    "partitions_of",
]

EAGER = "EAGER"
COOPERATIVE = "COOPERATIVE"


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    member_id: str
    group_instance_id: str | None
    subscription: Subscription


class MemberData(NamedTuple):
    """Kafka's ``AbstractStickyAssignor.MemberData``: claimed partitions and their generation."""

    partitions: list[TopicPartition]
    generation: int | None


# -- helpers -------------------------------------------------------------------------------------


# ``TopicPartition(t, p)`` runs a Python-level ``__new__``; this builds the same object faster.
_new_tp = cast(Callable[[tuple[str, int]], TopicPartition], partial(tuple.__new__, TopicPartition))


def partitions_of(items: Iterable[TopicPartitions]) -> list[TopicPartition]:
    """Flatten the protocol's per-topic groups into partitions, in order."""
    out: list[TopicPartition] = []
    for tp in items:
        out.extend(map(_new_tp, zip(repeat(tp.topic), tp.partitions)))
    return out


def make_assignment(
    partitions: Iterable[tuple[str, int]], user_data: bytes | None = None
) -> Assignment:
    """An :class:`Assignment` grouping ``partitions`` by topic (topics in first-seen order)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return Assignment(tuple(TopicPartitions(t, tuple(ps)) for t, ps in by_topic.items()), user_data)


def _topic_partitions(topic: str, count: int) -> list[TopicPartition]:
    return list(map(_new_tp, zip(repeat(topic), range(count))))


def _check_unique(members: Sequence[MemberSubscription]) -> None:
    if len({m.member_id for m in members}) != len(members):
        raise ValueError("member ids must be unique")


def _subscribed_counts(
    partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
) -> dict[str, int]:
    """Partition counts of the topics someone subscribes to and that exist, topics sorted."""
    topics: set[str] = set()
    for m in members:
        topics.update(m.subscription.topics)
    counts: dict[str, int] = {}
    for topic in sorted(topics):
        n = partitions_per_topic.get(topic)
        if n is not None and n > 0:
            counts[topic] = n
    return counts


def _member_order(m: MemberSubscription) -> tuple[int, str, str]:
    """``MemberInfo.compareTo``: static members by instance id first, then dynamic by member id."""
    if m.group_instance_id is not None:
        return 0, m.group_instance_id, m.member_id
    return 1, m.member_id, ""


# -- the interface -------------------------------------------------------------------------------


class Assignor(ABC):
    """Kafka's ``ConsumerPartitionAssignor`` as the leader and every member use it."""

    name: ClassVar[str]
    rebalance_protocols: ClassVar[tuple[str, ...]] = (EAGER,)
    """Supported rebalance protocols, preferred first."""

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        """User data for this member's next Subscription (none by default)."""
        return None

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """Called on every member with its new assignment (no-op by default)."""
        return None

    @abstractmethod
    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        """member_id -> assigned partitions (every member present, possibly with []) for the
        members' subscriptions; topics missing from partitions_per_topic are skipped, as Kafka does
        for unknown topics."""


class RangeAssignor(Assignor):
    """Per topic, contiguous ranges: ``P // N`` each, one more for the first ``P % N`` members."""

    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        _check_unique(members)
        counts = _subscribed_counts(partitions_per_topic, members)
        assignment: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        by_topic: dict[str, list[MemberSubscription]] = {}
        for m in members:
            for topic in set(m.subscription.topics):
                if topic in counts:
                    by_topic.setdefault(topic, []).append(m)
        for topic, count in counts.items():
            consumers = sorted(by_topic[topic], key=_member_order)
            per_member, extra = divmod(count, len(consumers))
            tps = _topic_partitions(topic, count)
            start = 0
            for i, m in enumerate(consumers):
                end = start + per_member + (1 if i < extra else 0)
                if end > start:
                    assignment[m.member_id].extend(tps[start:end])
                start = end
        return assignment


class RoundRobinAssignor(Assignor):
    """All partitions (topics sorted) dealt in turn to the members, skipping non-subscribers."""

    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        _check_unique(members)
        counts = _subscribed_counts(partitions_per_topic, members)
        assignment: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        ordered = sorted(members, key=_member_order)
        lists = [assignment[m.member_id] for m in ordered]
        n = len(ordered)
        subscribers: dict[str, list[int]] = {}
        for i, m in enumerate(ordered):
            for topic in set(m.subscription.topics):
                if topic in counts:
                    subscribers.setdefault(topic, []).append(i)
        pos = 0  # Kafka's CircularIterator over the sorted members
        for topic, count in counts.items():
            tps = _topic_partitions(topic, count)
            who = subscribers[topic]
            if len(who) == n:
                for tp in tps:
                    lists[pos].append(tp)
                    pos = pos + 1 if pos + 1 < n else 0
                continue
            for tp in tps:
                # the next subscriber at or after pos, wrapping around (who is sorted)
                k = bisect_left(who, pos)
                i = who[k] if k < len(who) else who[0]
                lists[i].append(tp)
                pos = i + 1 if i + 1 < n else 0
        return assignment


# -- sticky ------------------------------------------------------------------------------------


_Groups = Sequence[tuple[str, Sequence[int]]]


class _AbstractSticky(Assignor):
    """Kafka's ``AbstractStickyAssignor``: shared by ``sticky`` and ``cooperative-sticky``."""

    def __init__(self) -> None:
        self.partitions_transferring_ownership: dict[TopicPartition, str] | None = None
        """After :meth:`assign`: with equal subscriptions, the partitions that changed owner (new
        owner as value); ``None`` after the general algorithm (Kafka's field of that name)."""

    def member_data(self, subscription: Subscription) -> MemberData:
        """The partitions a member claims and the generation of the claim (Kafka's ``memberData``)."""
        groups, generation = self._claims(subscription)
        partitions: list[TopicPartition] = []
        for topic, ps in groups:
            partitions.extend(map(_new_tp, zip(repeat(topic), ps)))
        return MemberData(partitions, generation)

    @abstractmethod
    def _claims(self, subscription: Subscription) -> tuple[_Groups, int | None]:
        """``member_data`` as (topic, partitions) groups."""

    def _sticky(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> StickyResult[TopicPartition]:
        _check_unique(members)
        counts = _subscribed_counts(partitions_per_topic, members)
        universe = {t: _topic_partitions(t, n) for t, n in counts.items()}
        inputs: list[StickyMember[TopicPartition]] = []
        for m in members:
            groups, generation = self._claims(m.subscription)
            # Claims become the universe's own objects; claims of unknown partitions drop out.
            owned: list[TopicPartition] = []
            for topic, ps in groups:
                parts = universe.get(topic)
                if parts is not None:
                    n = len(parts)
                    owned.extend([parts[p] for p in ps if 0 <= p < n])
            inputs.append(
                StickyMember(
                    m.member_id,
                    frozenset(m.subscription.topics),
                    owned,
                    DEFAULT_GENERATION if generation is None else generation,
                )
            )
        result = sticky_assign(universe, inputs)
        self.partitions_transferring_ownership = result.transferring
        return result


def encode_sticky_user_data(
    partitions: Iterable[tuple[str, int]], generation: int | None = DEFAULT_GENERATION
) -> bytes:
    """``StickyAssignorUserData`` v1 (v0 when ``generation`` is None), topics in first-seen order."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    w = Writer()
    w.array_len(len(by_topic))
    for topic, ps in by_topic.items():
        w.string(topic)
        w.array_len(len(ps))
        for p in ps:
            w.int32(p)
    if generation is not None:
        w.int32(generation)
    return w.getvalue()


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _decode_previous_assignment(data: bytes) -> tuple[list[tuple[str, tuple[int, ...]]], int]:
    """The ``previous_assignment`` array and the offset after it (bounds-checked)."""
    end = len(data)
    if end < 4:
        raise DecodeError("previous_assignment: truncated array length")
    (topics,) = _I32.unpack_from(data, 0)
    if topics < 0:
        raise DecodeError("previous_assignment was serialized as null")
    pos = 4
    groups: list[tuple[str, tuple[int, ...]]] = []
    for _ in range(topics):
        if pos + 2 > end:
            raise DecodeError(f"previous_assignment: truncated topic at offset {pos}")
        (length,) = _I16.unpack_from(data, pos)
        pos += 2
        if length < 0 or pos + length + 4 > end:
            raise DecodeError(f"previous_assignment: bad topic length {length} at offset {pos}")
        try:
            topic = data[pos : pos + length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"invalid UTF-8 in topic: {exc}") from exc
        pos += length
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        if count < 0 or pos + 4 * count > end:
            raise DecodeError(f"previous_assignment: bad partition count {count} at offset {pos}")
        groups.append((topic, struct.unpack_from(f">{count}i", data, pos)))
        pos += 4 * count
    return groups, pos


def _decode_sticky_groups(data: bytes) -> tuple[list[tuple[str, tuple[int, ...]]], int | None]:
    """v1 (with generation), else v0; :class:`DecodeError` when neither parses."""
    groups, pos = _decode_previous_assignment(data)
    if pos + 4 <= len(data):
        return groups, _I32.unpack_from(data, pos)[0]
    return groups, None


def decode_sticky_user_data(data: bytes) -> MemberData:
    """Read ``StickyAssignorUserData`` as Kafka does: v1, else v0 (no generation).

    Raises :class:`DecodeError` when the bytes are neither (trailing bytes are ignored, as Kafka's
    ``Schema.read`` ignores them).
    """
    groups, generation = _decode_sticky_groups(data)
    partitions: list[TopicPartition] = []
    for topic, ps in groups:
        partitions.extend(map(_new_tp, zip(repeat(topic), ps)))
    return MemberData(partitions, generation)


class StickyAssignor(_AbstractSticky):
    """Balanced first, sticky second; eager (members revoke everything before joining).

    Previous ownership comes from the user data (previous assignment + generation), as Kafka's
    ``StickyAssignor.memberData`` always honours it. A member without sticky user data falls back
    on the Subscription's ``owned_partitions`` and ``generation_id`` (v1+/v2+); Kafka would treat it
    as owning nothing, and a Java member never sends owned partitions under the eager protocol.
    """

    name = "sticky"
    rebalance_protocols = (EAGER,)

    def __init__(self) -> None:
        super().__init__()
        self._member_assignment: list[TopicPartition] | None = None
        self._generation = DEFAULT_GENERATION

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._member_assignment = partitions_of(assignment.assigned_partitions)
        self._generation = generation_id

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        if self._member_assignment is None:
            return None
        return encode_sticky_user_data(self._member_assignment, self._generation)

    def _claims(self, subscription: Subscription) -> tuple[_Groups, int | None]:
        user_data = subscription.user_data
        if user_data:
            try:
                return _decode_sticky_groups(user_data)
            except DecodeError:
                return [], DEFAULT_GENERATION
        if subscription.owned_partitions:
            generation = subscription.generation_id if subscription.generation_id >= 0 else None
            return [(tp.topic, tp.partitions) for tp in subscription.owned_partitions], generation
        return [], None

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        return self._sticky(partitions_per_topic, members).assignment


class CooperativeStickyAssignor(_AbstractSticky):
    """The sticky target reached in two phases (KIP-429).

    A partition that must move from a member that still owns it is left out of the new owner's
    assignment; the old owner revokes it, rejoins, and the follow-up rebalance hands it over.
    """

    name = "cooperative-sticky"
    rebalance_protocols = (COOPERATIVE, EAGER)

    def __init__(self) -> None:
        super().__init__()
        self._generation = DEFAULT_GENERATION

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._generation = generation_id

    def subscription_user_data(self, topics: Collection[str]) -> bytes | None:
        return _I32.pack(self._generation)

    def _claims(self, subscription: Subscription) -> tuple[_Groups, int | None]:
        owned = [(tp.topic, tp.partitions) for tp in subscription.owned_partitions]
        if subscription.generation_id >= 0:  # Subscription v2+ carries the generation itself
            return owned, subscription.generation_id
        user_data = subscription.user_data
        if user_data is None:
            return owned, None
        if len(user_data) < _I32.size:
            return owned, DEFAULT_GENERATION
        generation: int = _I32.unpack_from(user_data)[0]
        return owned, generation

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        result = self._sticky(partitions_per_topic, members)
        assignment = result.assignment
        if result.transferring is not None:
            transferring = result.transferring
        else:
            transferring = _transferring_ownership(members, assignment)
        held_back: dict[str, set[TopicPartition]] = {}
        for tp, new_owner in transferring.items():
            held_back.setdefault(new_owner, set()).add(tp)
        for member_id, drop in held_back.items():
            assignment[member_id] = [tp for tp in assignment[member_id] if tp not in drop]
        return assignment


def _transferring_ownership(
    members: Sequence[MemberSubscription], assignment: Mapping[str, list[TopicPartition]]
) -> dict[TopicPartition, str]:
    """Partitions some member gains while another (in its owned_partitions) loses them."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for m in members:
        owned = partitions_of(m.subscription.owned_partitions)
        assigned = assignment[m.member_id]
        owned_set = set(owned)
        for tp in assigned:
            if tp not in owned_set:
                added[tp] = m.member_id
        assigned_set = set(assigned)
        revoked.update(tp for tp in owned if tp not in assigned_set)
    return {tp: member_id for tp, member_id in added.items() if tp in revoked}


ASSIGNORS: dict[str, type[Assignor]] = {
    cls.name: cls
    for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}


def assignor(name: str) -> Assignor:
    """A new assignor by its protocol name (``range``, ``roundrobin``, ``sticky``, ...)."""
    try:
        return ASSIGNORS[name]()
    except KeyError:
        raise ValueError(f"unknown assignor {name!r}; known: {sorted(ASSIGNORS)}") from None
