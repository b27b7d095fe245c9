"""``GroupCoordinator``: the engine's public facade, one coordinator as a Kafka broker runs it.

It routes requests to their group's step (:mod:`coordinator.step`), answers the APIs that are not
about one group (ListGroups, FindCoordinator), fires every group's timers in one global order,
numbers log records per ``__consumer_offsets`` partition, and owns, loads and unloads offsets
partitions as a broker does on LeaderAndIsr (``handleGroupImmigration``/``Emigration``).

Pure and deterministic: the caller's clock, the caller's id source, no threads, no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from coordinator.config import CoordinatorConfig
from coordinator.context import GroupContext, heartbeat_key
from coordinator.errors import Error
from coordinator.group import membership
from coordinator.group.model import HEARTBEAT, ClassicGroup, Member
from coordinator.group.states import GroupState
from coordinator.ids import IdSource, random_ids
from coordinator.log import records as log
from coordinator.log.partitioning import partition_for
from coordinator.log.records import Group
from coordinator.modern import heartbeat as modern
from coordinator.modern.model import ConsumerGroup, MemberState
from coordinator.requests import (
    BadRequest,
    Request,
    bad_request_response,
    error_response,
    parse,
    plain_heartbeat_fields,
    response,
)
from coordinator.serde import DecodeError
from coordinator.step import (
    fire_timer,
    precheck,
    precheck_message,
    serve,
    serve_plain_heartbeat,
)
from coordinator.topics import EMPTY_IMAGE, TopicImage


@dataclass(frozen=True, slots=True)
class CoordinatorNode:
    """Where a coordinator can be reached (FindCoordinator's answer)."""

    node_id: int = 0
    host: str = "localhost"
    port: int = 9092


#: What each API answers while its group's partition is loading (section 5): Kafka answers
#: Heartbeat blindly and turns SyncGroup into a rejoin; every other API says "loading".
_WHILE_LOADING = {"heartbeat": Error.NONE, "sync_group": Error.REBALANCE_IN_PROGRESS}


#: What a heartbeat of a member in its generation answers in each state that
#: :meth:`GroupCoordinator.heartbeat` serves (``membership.heartbeat_member``).
_HEARTBEAT_IN_PLACE = {
    GroupState.STABLE: Error.NONE,
    GroupState.COMPLETING_REBALANCE: Error.NONE,
    GroupState.PREPARING_REBALANCE: Error.REBALANCE_IN_PROGRESS,
}


class GroupCoordinator:
    """Kafka's classic group coordinator as a deterministic state machine.

    ``handle(request, now_ms)`` and ``advance(now_ms)`` return the responses they emit;
    ``drain_records()`` returns the ``__consumer_offsets`` records written since the last drain.
    """

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        id_source: IdSource = random_ids,
        node: CoordinatorNode | None = None,
        owned_partitions: Iterable[int] | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.node = node or CoordinatorNode()
        self._ids = id_source
        num = self.config.offsets_topic_num_partitions
        self._owned: set[int] = set(range(num) if owned_partitions is None else owned_partitions)
        self._loading: set[int] = set()
        self._epochs: dict[int, int] = {}
        self._owners: dict[int, CoordinatorNode] = {}
        self._groups: dict[str, Group] = {}
        self._topics: TopicImage = EMPTY_IMAGE
        self._now = 0
        self._next_seq = itertools.count(1).__next__
        #: (deadline, seq, group id): the earliest timer of each group, registered lazily.
        self._timer_heap: list[tuple[int, int, str]] = []
        self._registered: dict[str, tuple[int, int]] = {}
        self._records: list[dict[str, Any]] = []
        #: Groups stepped (by a request or a timer) since the last ``drain_touched``.
        self._touched: set[str] = set()
        self._next_offset: dict[int, int] = {}
        #: What a :meth:`renewal` checks has not changed since it was made: each group's
        #: last step (a request or timer of that group, or its load or unload: the group may
        #: have changed), numbered, and how many times a partition began to load, loaded or
        #: unloaded, or the topics changed.
        self._steps: dict[str, int] = {}
        self._next_step = itertools.count(1).__next__
        self._partition_changes = 0
        #: Internal errors caught so that no request can crash the engine (must stay empty).
        self.internal_errors: list[str] = []

    # --- the contract's API --------------------------------------------------------------------

    def handle(
        self, request: Any, now_ms: int, *, answered_ms: int | None = None
    ) -> list[dict[str, Any]]:
        """Fire due timers, then serve one request. Never raises on a request.

        ``answered_ms``: when the response will leave, if later than ``now_ms`` (a request
        read late and served at its arrival, as the Spark job's step does): the timers the
        request, or a timer fired before it, arms for its members count from then
        (:meth:`GroupContext.schedule`)."""
        out: list[dict[str, Any]] = []
        self._advance(now_ms, out, answered_ms)
        fields = plain_heartbeat_fields(request)
        if fields is not None and self._plain_heartbeat(request, fields, out, answered_ms):
            return out
        try:
            parsed = parse(request)
        except BadRequest as problem:
            out.append(bad_request_response(request, problem))
            return out
        try:
            self._handle(parsed, out, answered_ms)
        except Exception as exc:  # an engine bug must not take the stream down with it
            self.internal_errors.append(f"{parsed.api} {parsed.request_id!r}: {exc!r}")
            out.append(error_response(parsed, Error.UNKNOWN_SERVER_ERROR, f"internal error: {exc}"))
        return out

    def advance(self, now_ms: int, *, answered_ms: int | None = None) -> list[dict[str, Any]]:
        """Move the clock to ``now_ms`` and fire every timer due by then (``answered_ms``: as
        for :meth:`handle`)."""
        out: list[dict[str, Any]] = []
        self._advance(now_ms, out, answered_ms)
        return out

    def drain_records(self) -> list[dict[str, Any]]:
        records, self._records = self._records, []
        return records

    def drain_touched(self) -> set[str]:
        """The ids of the groups a request or a timer stepped since the last drain: the groups
        whose state may have changed, which an adapter summarises again (as the Spark job
        writes one summary per group stepped in a batch). At most one entry per group."""
        touched, self._touched = self._touched, set()
        return touched

    def update_topics(self, topics: Iterable[dict[str, Any]], now_ms: int) -> list[dict[str, Any]]:
        """The whole current list of topics, ``[{name, topic_id, partitions}]`` (contract,
        section 6). Raises ValueError on a malformed list (and changes nothing).

        As Kafka's metadata image does, a change reaches each consumer group subscribed to the
        topic at its members' next heartbeat, which recomputes the subscription metadata and,
        when it differs, bumps the group epoch and computes a new target assignment. A deleted
        topic's committed offsets are deleted at once, in every group
        (``onPartitionsDeleted``). Returns the responses of the timers due by ``now_ms``."""
        image = TopicImage.parse(topics, version=self._topics.version + 1)
        self._partition_changes += 1
        out: list[dict[str, Any]] = []
        self._advance(now_ms, out)
        old = self._topics
        self._topics = image
        gone = {
            t.name
            for t in old
            if (now := image.by_name(t.name)) is None or now.topic_id != t.topic_id
        }
        if gone:
            for group_id in sorted(self._groups):
                group = self._groups[group_id]
                doomed = sorted(key for key in group.offsets if key[0] in gone)
                if not doomed or self.partition_for(group_id) in self._loading:
                    continue
                ctx = self._context(group_id, group, out)
                for topic, partition in doomed:
                    ctx.append(log.offset_tombstone(group_id, topic, partition, self._now))
                self._commit(ctx)
        return out

    @property
    def topics(self) -> TopicImage:
        return self._topics

    @classmethod
    def from_records(
        cls,
        records: Iterable[dict[str, Any]],
        config: CoordinatorConfig | None = None,
        now_ms: int = 0,
        **kwargs: Any,
    ) -> GroupCoordinator:
        """Kafka's load on failover: rebuild every group and offset from the log."""
        coordinator = cls(config, **kwargs)
        coordinator._now = now_ms
        coordinator._load(coordinator._owned, records)
        return coordinator

    # --- introspection -------------------------------------------------------------------------

    @property
    def now_ms(self) -> int:
        return self._now

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def next_deadline(self) -> int | None:
        """The earliest timer of any group (when ``advance`` next has work), or None."""
        deadlines = [d for g in self._groups.values() if (d := _head(g)) is not None]
        return min(deadlines) if deadlines else None

    def next_wakeup(self) -> int | None:
        """When :meth:`advance` may next have a timer to fire, in constant time (None: no timer
        at all): never later than :meth:`next_deadline`. A group's timer that has moved later
        (a heartbeat re-arms its member's session) stays registered at its earlier time until
        ``advance`` reaches it, finds nothing due and registers the group's next, so this can be
        earlier. A caller sleeping until it misses no timer, and need be woken early only when
        it becomes earlier still (a request armed an earlier timer)."""
        heap = self._timer_heap
        return heap[0][0] if heap else None

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    @property
    def owned_partitions(self) -> frozenset[int]:
        return frozenset(self._owned)

    # --- partition ownership (10.6, 10.7) ------------------------------------------------------

    def set_partition_owner(self, partition: int, node: CoordinatorNode | None) -> None:
        """What this coordinator knows of another partition's owner (for FindCoordinator)."""
        if node is None:
            self._owners.pop(partition, None)
        else:
            self._owners[partition] = node

    def begin_loading(self, partition: int, epoch: int | None = None) -> bool:
        """Become the partition's leader; requests get COORDINATOR_LOAD_IN_PROGRESS until
        :meth:`load_partition`. Returns False (and does nothing) for a stale epoch."""
        if not self._newer_epoch(partition, epoch):
            return False
        self._partition_changes += 1
        self._owned.add(partition)
        self._loading.add(partition)
        return True

    def load_partition(
        self,
        partition: int,
        records: Iterable[dict[str, Any]],
        now_ms: int,
        epoch: int | None = None,
    ) -> bool:
        """Load a partition from its log records (Kafka's ``onElection`` then load)."""
        if not self._newer_epoch(partition, epoch):
            return False
        if partition in self._owned and partition not in self._loading:
            return False  # already loaded: Kafka ignores the election ("already active")
        self._partition_changes += 1
        self._now = max(self._now, now_ms)
        self._owned.add(partition)
        self._loading.discard(partition)
        self._load({partition}, records)
        return True

    def unload_partition(
        self, partition: int, now_ms: int, epoch: int | None = None
    ) -> list[dict[str, Any]]:
        """Give the partition up: its groups die and their parked requests get NOT_COORDINATOR.

        An unload with an epoch older than the current one is ignored; one without an epoch
        (a stopped replica) always unloads."""
        out: list[dict[str, Any]] = []
        if epoch is not None and epoch < self._epochs.get(partition, -1):
            return out
        if epoch is not None:
            self._epochs[partition] = epoch
        self._partition_changes += 1
        self._advance(now_ms, out)
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            group = self._groups[group_id]
            if isinstance(group, ClassicGroup):
                membership.unload_group(self._context(group_id, group, out), group)
            del self._groups[group_id]
            self._registered.pop(group_id, None)
            self._steps.pop(group_id, None)
        self._owned.discard(partition)
        self._loading.discard(partition)
        self._next_offset.pop(partition, None)
        return out

    def _newer_epoch(self, partition: int, epoch: int | None) -> bool:
        if epoch is None:
            return True
        if epoch < self._epochs.get(partition, -1):
            return False
        self._epochs[partition] = epoch
        return True

    def _load(self, partitions: set[int], records: Iterable[dict[str, Any]]) -> None:
        now = self._now
        loaded: dict[str, Group] = {}
        num = self.config.offsets_topic_num_partitions
        for position, raw in enumerate(records):
            record = _readable(raw, position)
            if record is None:
                continue  # a record type this log does not use: skipped, as Kafka does
            group_id = record["group_id"]
            partition = partition_for(group_id, num)
            if partition not in partitions:
                continue
            offset = raw.get("offset")
            if isinstance(offset, int) and offset >= self._next_offset.get(partition, 0):
                self._next_offset[partition] = offset + 1
            state = log.apply_record(loaded.get(group_id), record, now, live=False)
            if state is None:
                loaded.pop(group_id, None)
            else:
                loaded[group_id] = state
        for group_id, group in loaded.items():
            self._groups[group_id] = group
            out: list[dict[str, Any]] = []
            ctx = self._context(group_id, group, out)
            on_loaded(ctx, group)
            self._commit(ctx)

    # --- serving -------------------------------------------------------------------------------

    def _handle(
        self, request: Request, out: list[dict[str, Any]], answered_ms: int | None = None
    ) -> None:
        api = request.api
        if api == "list_groups":
            out.append(self._list_groups(request))
            return
        if api == "find_coordinator":
            out.append(self._find_coordinator(request))
            return
        error = precheck(request, self.config)
        if error is not None:
            out.append(
                error_response(request, error, precheck_message(error, request, self.config))
            )
            return
        partition = self.partition_for(request.group_id)
        if partition not in self._owned:
            out.append(
                error_response(
                    request,
                    Error.NOT_COORDINATOR,
                    f"offsets partition {partition} is not owned by node {self.node.node_id}",
                )
            )
            return
        if partition in self._loading:
            answer = _WHILE_LOADING.get(api, Error.COORDINATOR_LOAD_IN_PROGRESS)
            out.append(error_response(request, answer, f"offsets partition {partition} is loading"))
            return
        group_id = request.group_id
        ctx = self._context(group_id, self._groups.get(group_id), out, answered_ms)
        serve(ctx, request)
        self._commit(ctx)

    def _plain_heartbeat(
        self,
        raw: dict[str, Any],
        fields: tuple[str | int, str, str, int],
        out: list[dict[str, Any]],
        answered_ms: int | None,
    ) -> bool:
        """Serve a plain heartbeat (:func:`plain_heartbeat_fields`) for a classic group, or
        none, of a partition loaded here as the step serves it
        (:func:`coordinator.step.serve_plain_heartbeat`), without building its Request: what
        :meth:`_handle` does with it, whose checks it passes. False, having done nothing, for
        any other (an empty group id, a partition not served, a consumer group), which goes
        the general way so that every error stays the same."""
        group_id = fields[1]
        if group_id == "":
            return False
        partition = self.partition_for(group_id)
        if partition not in self._owned or partition in self._loading:
            return False
        group = self._groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return False
        ctx = self._context(group_id, group, out, answered_ms)
        errors = len(self.internal_errors)
        serve_plain_heartbeat(ctx, raw, fields, out, self.internal_errors)
        if len(self.internal_errors) == errors:  # as handle keeps nothing of a failed request
            self._commit(ctx)
        return True

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        now_ms: int,
        instance_id: str | None = None,
    ) -> Error | None:
        """The answer to a heartbeat from a member of a classic group in its generation (with
        an instance id: the static member holding it), served in place: the member's session
        re-armed exactly as :meth:`handle` re-arms it (the same timer, sequence number and
        registration; the group counted as touched), with no request or response dict. None,
        having done nothing, for every other heartbeat (an unknown member or group, another
        generation, a fenced instance id, a consumer group, a partition not served or loading)
        and whenever a timer is due by ``now_ms``: :meth:`handle` serves those, so every error
        and every timer stays the same.

        For the gateway's commonest request
        (:meth:`coordinator.gateway.embedded.EmbeddedBackend.heartbeat_in_place`): the general
        way (request dict, step context, response dict) costs two to three times as much."""
        now = now_ms if now_ms > self._now else self._now
        heap = self._timer_heap
        if heap and heap[0][0] <= now:
            return None  # handle fires them first (one armed at this very time included)
        served = self._served_in_place(group_id, member_id, generation_id, instance_id)
        if served is None:
            return None
        group, member, error = served
        # membership.reschedule_heartbeat at this clock, as GroupContext.schedule arms it
        self._now = now
        deadline = now + member.session_timeout_ms
        key = heartbeat_key(member_id)
        if group.schedule(key, deadline, self._next_seq(), HEARTBEAT, member_id):
            self._register(group_id, group)
        # else moved later in place: the group's next timer is no earlier, and its registration
        # (at or before it) stands, as _register would leave it
        self._touched.add(group_id)
        return error

    def renewal(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        instance_id: str | None = None,
    ) -> Callable[[int], Error | None] | None:
        """The heartbeat :meth:`heartbeat` serves in place now, to serve again and again:
        ``renew(now_ms)`` does exactly what ``heartbeat(group_id, member_id, generation_id,
        now_ms, instance_id)`` would (the member's session re-armed later in place, the same
        sequence number, the group touched) and gives its answer. It gives None, having done
        nothing, when a timer is due, and once the group may have changed since the renewal
        was made (a step of the group: a request of it handled, a timer of it fired; a
        partition began to load, loaded or unloaded; the topics changed): :meth:`heartbeat`
        then decides afresh. None when this heartbeat is not served in place now.

        What :meth:`heartbeat` checks (the group, its generation and state, the member and its
        instance id, the partition) changes only by those, so while none happened its answer
        stands and only the clock moves. For a member's every heartbeat of its generation, the
        gateway's commonest read (:meth:`coordinator.gateway.embedded.EmbeddedBackend.renewal`):
        a third of :meth:`heartbeat`'s cost."""
        served = self._served_in_place(group_id, member_id, generation_id, instance_id)
        if served is None:
            return None
        group, member, error = served
        timer = group.timers.get(heartbeat_key(member_id))
        if timer is None or timer.kind != HEARTBEAT or timer.payload != member_id:
            return None  # heartbeat arms it anew
        step = self._steps.get(group_id)
        if step is None:  # every group is made or loaded by a step: never so
            return None
        partition_changes = self._partition_changes
        steps = self._steps
        session_ms = member.session_timeout_ms
        heap = self._timer_heap
        next_seq = self._next_seq

        def renew(now_ms: int) -> Error | None:
            if self._partition_changes != partition_changes or steps.get(group_id) != step:
                return None
            now = self._now
            if now_ms > now:
                now = now_ms
            if heap and heap[0][0] <= now:
                return None
            deadline = now + session_ms
            if deadline < timer.deadline_ms:  # earlier: a push, which heartbeat does
                return None
            # group.schedule's move in place (the same timer, kind and payload)
            self._now = now
            timer.deadline_ms = deadline
            timer.seq = next_seq()
            self._touched.add(group_id)
            return error

        return renew

    def _served_in_place(
        self, group_id: str, member_id: str, generation_id: int, instance_id: str | None
    ) -> tuple[ClassicGroup, Member, Error] | None:
        """(group, member, answer) of a heartbeat :meth:`heartbeat` serves in place, by
        everything but the clock; None for the others."""
        group = self._groups.get(group_id)
        if type(group) is not ClassicGroup or group.generation_id != generation_id:
            return None
        member = group.members.get(member_id)
        if member is None:
            return None
        if instance_id is not None and group.static_members.get(instance_id) != member_id:
            return None  # FENCED_INSTANCE_ID or UNKNOWN_MEMBER_ID
        error = _HEARTBEAT_IN_PLACE.get(group.state)
        if error is None:
            return None
        partition = self.partition_for(group_id)
        if partition not in self._owned or partition in self._loading:
            return None
        return group, member, error

    def _list_groups(self, request: Request) -> dict[str, Any]:
        listed = [
            (
                group_id,
                group.protocol_type,
                group.state.value,
                "consumer" if isinstance(group, ConsumerGroup) else "classic",
            )
            for group_id, group in sorted(self._groups.items())
        ]
        return list_groups_response(request, listed, sorted(self._loading))

    def _find_coordinator(self, request: Request) -> dict[str, Any]:
        partition = self.partition_for(request.group_id)
        node = self.node if partition in self._owned else self._owners.get(partition)
        return find_coordinator_response(request, partition, node)

    # --- groups, timers, records ---------------------------------------------------------------

    def _context(
        self,
        group_id: str,
        group: Group | None,
        out: list[dict[str, Any]],
        answered_ms: int | None = None,
    ) -> GroupContext:
        self._steps[group_id] = self._next_step()  # the group may change: renewals end
        return GroupContext(
            self.config,
            self._now,
            self._ids,
            self._next_seq,
            group_id,
            group,
            self.partition_for(group_id),
            out,
            [],
            answered_ms,
            self._topics,
        )

    def _commit(self, ctx: GroupContext) -> None:
        """Keep what a step did: the group's new state, its next timer, its numbered records."""
        group_id = ctx.group_id
        self._touched.add(group_id)
        if ctx.group is None:
            self._groups.pop(group_id, None)
            self._registered.pop(group_id, None)
            self._steps.pop(group_id, None)
        else:
            self._groups[group_id] = ctx.group
            self._register(group_id, ctx.group)
        if ctx.records:
            partition = ctx.offsets_partition
            offset = self._next_offset.get(partition, 0)
            for record in ctx.records:
                record["offset"] = offset
                offset += 1
            self._next_offset[partition] = offset
            self._records.extend(ctx.records)

    def _register(self, group_id: str, group: Group) -> None:
        """Register the group's earliest timer in the engine's heap when it is earlier than the
        one registered (a later one is found when the registered time comes)."""
        head = group.next_timer()
        if head is not None:
            registered = self._registered.get(group_id)
            if registered is None or head[:2] < registered:
                self._registered[group_id] = head[:2]
                heapq.heappush(self._timer_heap, (head[0], head[1], group_id))

    def _advance(
        self, now_ms: int, out: list[dict[str, Any]], answered_ms: int | None = None
    ) -> None:
        # The clock never goes backwards; an earlier now_ms is read as "no time passed".
        if now_ms > self._now:
            self._now = now_ms
        now = self._now
        heap = self._timer_heap
        while heap and heap[0][0] <= now:
            deadline, seq, group_id = heapq.heappop(heap)
            if self._registered.get(group_id) != (deadline, seq):
                continue  # superseded by an earlier registration of the same group
            del self._registered[group_id]
            group = self._groups.get(group_id)
            if group is None:
                continue
            head = group.next_timer()
            if head is None:
                continue
            if head[:2] != (deadline, seq):  # nothing due: the group's next timer registered
                self._touched.add(group_id)
                self._register(group_id, group)
                continue
            ctx = self._context(group_id, group, out, answered_ms)
            try:
                fire_timer(ctx, head[2])
            except Exception as exc:
                self.internal_errors.append(f"timer {head[2]} of {group_id!r}: {exc!r}")
            self._commit(ctx)


def find_coordinator_response(
    request: Request, partition: int, node: CoordinatorNode | None
) -> dict[str, Any]:
    """FindCoordinator's answer: the node that owns the group's offsets partition, if known."""
    if node is None:
        return response(
            "find_coordinator",
            request.request_id,
            request.group_id,
            Error.COORDINATOR_NOT_AVAILABLE,
            f"no live coordinator is known for offsets partition {partition}",
            offsets_partition=partition,
            node_id=-1,
            host="",
            port=-1,
        )
    return response(
        "find_coordinator",
        request.request_id,
        request.group_id,
        offsets_partition=partition,
        node_id=node.node_id,
        host=node.host,
        port=node.port,
    )


def list_groups_response(
    request: Request,
    groups: Iterable[tuple[Any, ...]],
    loading_partitions: Iterable[int] = (),
) -> dict[str, Any]:
    """ListGroups' answer over (group id, protocol type, state name[, group type]) rows, filters
    applied; a row without a type is a classic group's.

    Kafka 4.0's ``listGroups``: states are matched case-insensitively and trimmed, types by
    ``GroupType.parse`` (an unknown type matches no group). Shared by the engine and by the
    Spark job, which answers from its ``group_state`` table."""
    states_filter = request.body["states_filter"]
    types_filter = request.body["types_filter"]
    wanted_states = {s.strip().lower() for s in states_filter} if states_filter else None
    wanted_types = {t.strip().lower() for t in types_filter} if types_filter else None
    listed = []
    for row in groups:
        group_id, protocol_type, state = row[0], row[1], row[2]
        group_type = row[3] if len(row) > 3 else "classic"
        if wanted_states is not None and state.lower() not in wanted_states:
            continue
        if wanted_types is not None and group_type not in wanted_types:
            continue
        listed.append(
            {
                "group_id": group_id,
                "protocol_type": protocol_type or "",
                "group_state": state,
                "group_type": group_type,
            }
        )
    # Kafka 3.x: while a partition loads, say so, but list the groups that are loaded.
    loading = sorted(loading_partitions)
    error = Error.COORDINATOR_LOAD_IN_PROGRESS if loading else Error.NONE
    message = f"offsets partitions {loading} are loading" if loading else None
    return response("list_groups", request.request_id, "", error, message, groups=listed)


def on_loaded(ctx: GroupContext, group: Group) -> None:
    """After a load: fresh sessions for every member, the sweep armed, and a group over
    ``group.max.size`` sent to rebalance (Kafka's ``onLoaded``); a consumer group's members
    revoking partitions get their rebalance timeouts again."""
    if isinstance(group, ConsumerGroup):
        for member in group.members.values():
            ctx.schedule(
                modern.session_key(member.member_id),
                ctx.config.group_consumer_session_timeout_ms,
                modern.CONSUMER_SESSION,
                member.member_id,
            )
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                ctx.schedule(
                    modern.rebalance_key(member.member_id),
                    member.rebalance_timeout_ms,
                    modern.CONSUMER_REBALANCE,
                    (member.member_id, member.member_epoch),
                )
        ctx.ensure_expiry_timer(group)
        return
    for classic in group.members.values():
        ctx.schedule(
            heartbeat_key(classic.member_id),
            classic.session_timeout_ms,
            HEARTBEAT,
            classic.member_id,
        )
    ctx.ensure_expiry_timer(group)
    limit = ctx.config.group_max_size
    if len(group.members) > limit:
        # In case the max size config has changed (Kafka 4.x's words, GroupMetadataManager).
        membership.prepare_rebalance(
            ctx,
            group,
            f"Freshly-loaded group {group.group_id} (size {len(group.members)}) is over "
            f"capacity {limit}. Rebalancing in order to give a chance for consumers to commit "
            "offsets",
        )


def _head(group: Group) -> int | None:
    head = group.next_timer()
    return None if head is None else head[0]


def _readable(raw: dict[str, Any], position: int) -> dict[str, Any] | None:
    """A log record in the replay's form: Kafka's key and value bytes win when present."""
    key = raw.get("key")
    if key is None:
        if raw.get("record_type") not in log.RECORD_TYPES:
            raise ValueError(f"log record {position} has neither key bytes nor a record_type")
        return raw
    try:
        return log.record_from_bytes(
            bytes(key), None if raw.get("value") is None else bytes(raw["value"])
        )
    except DecodeError as exc:
        raise ValueError(f"log record {position} does not decode: {exc}") from exc
