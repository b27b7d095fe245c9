"""``GroupMember``: one consumer's side of Kafka's classic group protocol.

After Kafka's ``AbstractCoordinator``, ``ConsumerCoordinator`` and ``Heartbeat`` (section 13 of
kafka-group-protocol.md): find the coordinator, join (again with the id after
MEMBER_ID_REQUIRED), let the leader run the assignor, sync, heartbeat on Kafka's timers, commit
and fetch offsets, leave. Every error code gets the Java client's reaction.

The member is event driven and does no I/O of its own: requests go out through a
:class:`~coordinator.client.transport.Transport` and come back to callbacks; time comes from a
:class:`~coordinator.client.transport.Clock`. The application calls :meth:`GroupMember.poll`
(Kafka's ``poll``: it resets the poll timer and drives rebalances); :meth:`GroupMember.tick` is
the heartbeat thread's loop body, which a runner calls often.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from coordinator.client.assignors import (
    COOPERATIVE,
    EAGER,
    Assignor,
    MemberSubscription,
    TopicPartition,
    assignor,
)
from coordinator.client.heartbeat import Heartbeat
from coordinator.client.transport import Clock, Transport
from coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    TopicPartitions,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from coordinator.errors import Error
from coordinator.serde import DecodeError

NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""
#: Errors after which the coordinator is looked up again (``markCoordinatorUnknown``).
COORDINATOR_GONE = frozenset(
    {
        Error.COORDINATOR_NOT_AVAILABLE,
        Error.NOT_COORDINATOR,
        Error.NETWORK_EXCEPTION,
        Error.REQUEST_TIMED_OUT,
    }
)


class MemberState(StrEnum):
    """Kafka's client-side ``MemberState``."""

    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"


class GroupError(Exception):
    """A fatal group error, raised to the application as Kafka's client raises it."""

    def __init__(self, error: Error, message: str = "") -> None:
        super().__init__(f"{error.name}: {message}" if message else error.name)
        self.error = error


class CommitFailedError(Exception):
    """Kafka's ``CommitFailedException``: the member is no longer part of that generation."""


class RebalanceInProgressError(Exception):
    """Kafka's ``RebalanceInProgressException``: commit again after the rebalance."""


class RetriableCommitError(Exception):
    """A commit that may succeed if tried again (coordinator moved, loading, ...)."""

    def __init__(self, error: Error) -> None:
        super().__init__(error.name)
        self.error = error


class ConsumerRebalanceListener:
    """Kafka's ``ConsumerRebalanceListener``; override what you need."""

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        return None

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        return None

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None:
        # As in Kafka: losing partitions is revoking them without a chance to commit.
        self.on_partitions_revoked(partitions)


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    protocol_name: str | None = None


@dataclass(slots=True)
class MemberConfig:
    """The Java consumer's settings that govern group membership, with its defaults (13.1)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    #: JoinGroup's rebalance timeout; a consumer sends max.poll.interval.ms (None = that).
    rebalance_timeout_ms: int | None = None
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    #: The client gives up on a request after this long (JoinGroup: rebalance timeout + 5 s).
    request_timeout_ms: int = 30_000
    join_group_version: int = 9
    leave_group_on_close: bool = True


CommitCallback = Callable[[Mapping[TopicPartition, int] | None, Exception | None], None]
FetchCallback = Callable[[dict[TopicPartition, tuple[int, str]] | None, Exception | None], None]


class GroupMember:
    """A member of one consumer group (``group_id``), subscribed to ``topics``.

    ``topics=None`` makes a standalone consumer (manual assignment): it never joins and commits
    as a simple group (generation -1, no member id), as Kafka's ``assign()`` consumers do.
    ``metadata`` gives the partition count of each topic: the coordinator holds no topic data,
    so the leader learns it from here to run the assignor.
    """

    def __init__(
        self,
        group_id: str,
        topics: Collection[str] | None,
        transport: Transport,
        clock: Clock,
        *,
        metadata: Mapping[str, int] | Callable[[], Mapping[str, int]] | None = None,
        client_id: str = "consumer",
        group_instance_id: str | None = None,
        assignors: Sequence[Assignor | str] = ("range", "cooperative-sticky"),
        listener: ConsumerRebalanceListener | None = None,
        config: MemberConfig | None = None,
        client_host: str = "/127.0.0.1",
        rng: random.Random | None = None,
    ) -> None:
        self.group_id = group_id
        self.topics = None if topics is None else sorted(set(topics))
        self.transport = transport
        self.clock = clock
        self._metadata = metadata
        self.client_id = client_id
        self.client_host = client_host
        self.group_instance_id = group_instance_id
        self.assignors = [assignor(a) if isinstance(a, str) else a for a in assignors]
        if not self.assignors:
            raise ValueError("a member needs at least one assignor")
        self.rebalance_protocol = _rebalance_protocol(self.assignors)
        self.listener = listener or ConsumerRebalanceListener()
        self.config = config or MemberConfig()
        rebalance = self.config.rebalance_timeout_ms
        self.rebalance_timeout_ms = (
            self.config.max_poll_interval_ms if rebalance is None else rebalance
        )
        now = clock.now_ms()
        self.heartbeat = Heartbeat(
            self.config.session_timeout_ms,
            self.config.heartbeat_interval_ms,
            self.config.max_poll_interval_ms,
            self.config.retry_backoff_ms,
            self.config.retry_backoff_max_ms,
            now,
            rng,
        )
        self._rids = itertools.count(1)
        self._rid_prefix = f"{group_id}/{group_instance_id or client_id}/{id(self):x}"

        self.state = MemberState.UNJOINED
        self.generation = Generation()
        self.coordinator: int | None = None
        self.owned: list[TopicPartition] = []
        self.rejoin_needed = True
        self.failed: Exception | None = None
        self.closed = False
        #: What happened, for tests and operators: (now_ms, event, detail).
        self.events: list[tuple[int, str, Any]] = []
        self._finding = False
        self._joining = False
        self._syncing = False
        self._next_attempt_ms = 0
        self._join_attempts = 0
        self._heartbeat_enabled = False
        self._requests_in_flight = 0
        #: Kafka's ``needsJoinPrepare``: the listener runs once per rebalance, not per attempt.
        self._needs_join_prepare = True

    # -- the application's calls ----------------------------------------------------------------

    def poll(self) -> None:
        """Kafka's ``poll()`` for group coordination: reset the poll timer, then drive the group
        (rediscover the coordinator, rejoin when needed). Raises a fatal group error."""
        self._raise_if_failed()
        now = self.clock.now_ms()
        self.heartbeat.poll(now)
        if self.topics is None:
            self._ensure_coordinator(now)
            return
        self._ensure_active_group(now)

    def tick(self) -> None:
        """One pass of Kafka's heartbeat thread (13.3); call it often (every few ms)."""
        if self.closed or self.failed is not None:
            return
        now = self.clock.now_ms()
        if self.topics is None or not self._heartbeat_enabled:
            return
        if self.coordinator is None:
            self._ensure_coordinator(now)
        elif self.heartbeat.session_expired(now):
            self._event(now, "session-timeout", "coordinator assumed unreachable")
            self._coordinator_unknown(now)
        elif self.heartbeat.poll_expired(now):
            # The application stopped polling: leave so the group can move on (KIP-62).
            self._event(now, "poll-timeout", self.config.max_poll_interval_ms)
            self.maybe_leave_group("consumer poll timeout has expired.")
        elif self.heartbeat.should_heartbeat(now):
            self._send_heartbeat(now)

    def commit(
        self,
        offsets: Mapping[TopicPartition, int | tuple[int, str]],
        callback: CommitCallback | None = None,
    ) -> None:
        """Commit offsets (``commitAsync``): as a member of the current generation, or, for a
        standalone consumer, as a simple group. ``callback(offsets, error)`` reports the result."""
        self._raise_if_failed()
        if self.coordinator is None:
            error = RetriableCommitError(Error.COORDINATOR_NOT_AVAILABLE)
            self._ensure_coordinator(self.clock.now_ms())
            if callback is not None:
                callback(None, error)
            return
        generation = self._generation_for_commit()
        if generation is None:
            if callback is not None:
                callback(None, RebalanceInProgressError("the member is rejoining its group"))
            return
        entries = []
        for tp, value in offsets.items():
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            entries.append(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": offset,
                    "metadata": metadata,
                }
            )
        request = {
            "api": "offset_commit",
            "group_id": self.group_id,
            "member_id": generation.member_id,
            "group_instance_id": self.group_instance_id,
            "generation_id": generation.generation_id,
            "offsets": entries,
        }
        committed = {tp: (v[0] if isinstance(v, tuple) else v) for tp, v in offsets.items()}
        self._send(request, lambda answer: self._on_commit(answer, generation, committed, callback))

    def fetch_committed(
        self, partitions: Iterable[TopicPartition], callback: FetchCallback
    ) -> None:
        """OffsetFetch (``committed()``): -1 for a partition that has no committed offset."""
        self._raise_if_failed()
        if self.coordinator is None:
            self._ensure_coordinator(self.clock.now_ms())
            callback(None, RetriableCommitError(Error.COORDINATOR_NOT_AVAILABLE))
            return
        request = {
            "api": "offset_fetch",
            "group_id": self.group_id,
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions],
            "require_stable": True,
        }
        self._send(request, lambda answer: self._on_fetch(answer, callback))

    def close(self) -> None:
        """Leave the group (dynamic members) after revoking what the member owns."""
        if self.closed:
            return
        now = self.clock.now_ms()
        if self.topics is not None and self.failed is None:
            self._on_leave_prepare(now)
            self.maybe_leave_group("the consumer is being closed")
        self.closed = True

    @property
    def member_id(self) -> str:
        return self.generation.member_id

    @property
    def generation_id(self) -> int:
        return self.generation.generation_id

    @property
    def assignment(self) -> list[TopicPartition]:
        return list(self.owned)

    # -- coordinator discovery ----------------------------------------------------------------

    def _ensure_coordinator(self, now: int) -> None:
        if self.coordinator is not None or self._finding or now < self._next_attempt_ms:
            return
        self._finding = True
        self._send(
            {"api": "find_coordinator", "group_id": self.group_id, "key_type": 0},
            self._on_find_coordinator,
            any_node=True,
        )

    def _on_find_coordinator(self, answer: dict[str, Any]) -> None:
        self._finding = False
        now = self.clock.now_ms()
        if answer["error"] is None:
            self.coordinator = answer["node_id"]
            # Kafka's FindCoordinatorResponseHandler.onSuccess: heartbeat.resetSessionTimeout().
            # Without it a member whose session ran out while the coordinator was unreachable
            # would forget the coordinator again on its next tick, and look it up forever.
            self.heartbeat.reset_session(now)
            self._event(now, "coordinator", answer["node_id"])
        else:
            self._backoff(now)

    def _coordinator_unknown(self, now: int) -> None:
        if self.coordinator is not None:
            self._event(now, "coordinator-unknown", self.coordinator)
        self.coordinator = None

    # -- joining (13.4) -------------------------------------------------------------------------

    def _ensure_active_group(self, now: int) -> None:
        if self.closed:
            return
        self._ensure_coordinator(now)
        if self.coordinator is None or not self.rejoin_needed:
            return
        if self._joining or self._syncing or now < self._next_attempt_ms:
            return
        if self._needs_join_prepare:
            self._needs_join_prepare = False
            self._on_join_prepare(now)
        self._send_join(now)

    def _on_join_prepare(self, now: int) -> None:
        """Kafka's ``onJoinPrepare``: give partitions back before joining again."""
        if (
            self.generation.generation_id == NO_GENERATION
            or self.generation.member_id == UNKNOWN_MEMBER_ID
        ):
            self._lose_all(now)
        elif self.rebalance_protocol == EAGER:
            self._revoke(now, list(self.owned))
        else:
            # Cooperative: keep what is still subscribed; only give up the rest.
            topics = set(self.topics or ())
            self._revoke(now, [tp for tp in self.owned if tp.topic not in topics])

    def _send_join(self, now: int) -> None:
        self._joining = True
        self.rejoin_needed = False
        self.state = MemberState.PREPARING_REBALANCE
        self._heartbeat_enabled = False
        protocols = [
            {"name": a.name, "metadata": encode_subscription(self._subscription(a))}
            for a in self.assignors
        ]
        request = {
            "api": "join_group",
            "api_version": self.config.join_group_version,
            "group_id": self.group_id,
            "member_id": self.generation.member_id,
            "group_instance_id": self.group_instance_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "session_timeout_ms": self.config.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocol_type": PROTOCOL_TYPE,
            "protocols": protocols,
            "reason": "rebalance",
        }
        self._send(request, self._on_join)

    def _subscription(self, a: Assignor) -> Subscription:
        owned: dict[str, list[int]] = {}
        for tp in sorted(self.owned):
            owned.setdefault(tp.topic, []).append(tp.partition)
        return Subscription(
            topics=tuple(self.topics or ()),
            user_data=a.subscription_user_data(self.topics or ()),
            owned_partitions=tuple(TopicPartitions(t, tuple(ps)) for t, ps in owned.items()),
            generation_id=self.generation.generation_id,
        )

    def _on_join(self, answer: dict[str, Any]) -> None:
        self._joining = False
        now = self.clock.now_ms()
        error = Error(answer["error_code"])
        if self.closed:
            return
        if error is Error.NONE:
            self._join_attempts = 0
            self.generation = Generation(
                answer["generation_id"], answer["member_id"], answer["protocol_name"]
            )
            self.state = MemberState.COMPLETING_REBALANCE
            self._heartbeat_enabled = True
            self.heartbeat.reset_timeouts(now)
            self._event(
                now, "joined", (answer["generation_id"], answer["leader"] == answer["member_id"])
            )
            if answer["protocol_type"] not in (None, PROTOCOL_TYPE):
                return self._fail(
                    GroupError(Error.INCONSISTENT_GROUP_PROTOCOL, "unexpected protocol type")
                )
            if answer["leader"] == answer["member_id"] and not answer["skip_assignment"]:
                try:
                    assignments = self._lead(answer)
                except DecodeError as exc:
                    return self._fail(
                        GroupError(Error.INCONSISTENT_GROUP_PROTOCOL, f"bad subscription: {exc}")
                    )
            else:
                assignments = []
            return self._send_sync(now, assignments)
        if error is Error.MEMBER_ID_REQUIRED:
            self.generation = Generation(member_id=answer["member_id"])
            return self._rejoin(now, immediately=True)
        if error is Error.UNKNOWN_MEMBER_ID:
            self.generation = Generation()
            return self._rejoin(now, immediately=True)
        if error in (Error.ILLEGAL_GENERATION, Error.REBALANCE_IN_PROGRESS):
            return self._rejoin(now, immediately=True)
        if error is Error.COORDINATOR_LOAD_IN_PROGRESS:
            return self._rejoin(now)
        if error in COORDINATOR_GONE:
            self._coordinator_unknown(now)
            return self._rejoin(now)
        # FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT,
        # INVALID_GROUP_ID, GROUP_MAX_SIZE_REACHED, GROUP_AUTHORIZATION_FAILED, anything else.
        return self._fail(GroupError(error, answer.get("error_message") or "JoinGroup failed"))

    def _lead(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        """The leader runs the selected assignor over everyone's subscription (onLeaderElected)."""
        protocol = answer["protocol_name"]
        chosen = next((a for a in self.assignors if a.name == protocol), None)
        if chosen is None:
            raise DecodeError(
                f"the coordinator chose {protocol!r}, which this member does not offer"
            )
        members = [
            MemberSubscription(
                m["member_id"], m["group_instance_id"], decode_subscription(m["metadata"])
            )
            for m in answer["members"]
        ]
        partitions = self._partitions_per_topic({t for m in members for t in m.subscription.topics})
        assigned = chosen.assign(partitions, members)
        return [
            {"member_id": member_id, "assignment": encode_assignment(_assignment(tps))}
            for member_id, tps in assigned.items()
        ]

    def _partitions_per_topic(self, topics: set[str]) -> dict[str, int]:
        source = self._metadata() if callable(self._metadata) else (self._metadata or {})
        return {t: source[t] for t in topics if t in source}

    def _send_sync(self, now: int, assignments: list[dict[str, Any]]) -> None:
        self._syncing = True
        generation = self.generation
        request = {
            "api": "sync_group",
            "group_id": self.group_id,
            "member_id": generation.member_id,
            "group_instance_id": self.group_instance_id,
            "generation_id": generation.generation_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": generation.protocol_name,
            "assignments": assignments,
        }
        self._send(request, lambda answer: self._on_sync(answer, generation))

    def _on_sync(self, answer: dict[str, Any], sent_with: Generation) -> None:
        self._syncing = False
        now = self.clock.now_ms()
        if self.closed:
            return
        error = Error(answer["error_code"])
        if error is Error.NONE:
            if answer["protocol_name"] not in (None, sent_with.protocol_name):
                return self._fail(
                    GroupError(
                        Error.INCONSISTENT_GROUP_PROTOCOL, "SyncGroup named another protocol"
                    )
                )
            if len(answer["assignment"]) < 2:
                # ConsumerCoordinator.onJoinComplete: "the leader's assign function is buggy".
                return self._fail(
                    GroupError(
                        Error.INCONSISTENT_GROUP_PROTOCOL, "empty assignment from the leader"
                    )
                )
            try:
                assignment = decode_assignment(answer["assignment"])
            except DecodeError as exc:
                return self._fail(
                    GroupError(Error.INCONSISTENT_GROUP_PROTOCOL, f"bad assignment: {exc}")
                )
            self.state = MemberState.STABLE
            self.heartbeat.reset_session(now)
            self._needs_join_prepare = True
            return self._on_join_complete(now, assignment)
        self._event(now, "sync-failed", error.name)
        if error is Error.REBALANCE_IN_PROGRESS:
            return self._rejoin(now, immediately=True)
        if error in (Error.UNKNOWN_MEMBER_ID, Error.ILLEGAL_GENERATION):
            self._reset_generation(keep_member_id=error is Error.ILLEGAL_GENERATION)
            return self._rejoin(now, immediately=True)
        if error in COORDINATOR_GONE:
            self._coordinator_unknown(now)
            return self._rejoin(now)
        return self._fail(GroupError(error, answer.get("error_message") or "SyncGroup failed"))

    def _on_join_complete(self, now: int, assignment: Assignment) -> None:
        """Kafka's ``onJoinComplete``: take the new assignment, tell the listener."""
        new = [
            TopicPartition(tp.topic, p)
            for tp in assignment.assigned_partitions
            for p in tp.partitions
        ]
        chosen = next((a for a in self.assignors if a.name == self.generation.protocol_name), None)
        if chosen is not None:
            chosen.on_assignment(assignment, self.generation.generation_id)
        owned = set(self.owned)
        added = sorted(set(new) - owned)
        revoked = sorted(owned - set(new))
        self._event(now, "assigned", (self.generation.generation_id, sorted(new)))
        if self.rebalance_protocol == COOPERATIVE and revoked:
            # Two-phase: give these up now, then rejoin so their new owner can get them.
            self._revoke(now, revoked)
            self.rejoin_needed = True
        self.owned = sorted(new)
        self.listener.on_partitions_assigned(added)

    def _rejoin(self, now: int, immediately: bool = False) -> None:
        """A join round failed: try again, at once or after the backoff (Kafka's join loop)."""
        self.rejoin_needed = True
        self._heartbeat_enabled = False
        if not immediately:
            self._backoff(now)
        self._ensure_active_group(now)

    def _backoff(self, now: int) -> None:
        self._next_attempt_ms = now + self.heartbeat.backoff.backoff(self._join_attempts)
        self._join_attempts += 1

    # -- heartbeats (13.3) ----------------------------------------------------------------------

    def _send_heartbeat(self, now: int) -> None:
        generation = self.generation
        self.heartbeat.sent_heartbeat(now)
        request = {
            "api": "heartbeat",
            "group_id": self.group_id,
            "member_id": generation.member_id,
            "group_instance_id": self.group_instance_id,
            "generation_id": generation.generation_id,
        }
        self._send(request, lambda answer: self._on_heartbeat(answer, generation))

    def _on_heartbeat(self, answer: dict[str, Any], sent_with: Generation) -> None:
        now = self.clock.now_ms()
        error = Error(answer["error_code"])
        if self.closed:
            return
        if error is Error.NONE:
            self.heartbeat.received_heartbeat(now)
            return
        if error is Error.REBALANCE_IN_PROGRESS:
            self.heartbeat.received_heartbeat(now)  # still counts as a successful heartbeat
            if self.state is MemberState.STABLE and not self.rejoin_needed:
                self._event(now, "rebalance-requested", "heartbeat")
                self.rejoin_needed = True  # the next poll() rejoins, as Kafka's requestRejoin()
            return
        self.heartbeat.fail_heartbeat(now)
        if error in COORDINATOR_GONE:
            self._coordinator_unknown(now)
        elif error in (Error.ILLEGAL_GENERATION, Error.UNKNOWN_MEMBER_ID, Error.FENCED_INSTANCE_ID):
            if sent_with != self.generation:
                return  # the member moved on meanwhile: the answer is stale
            if error is Error.FENCED_INSTANCE_ID:
                return self._fail(
                    GroupError(error, "another member took over this group.instance.id")
                )
            self._event(now, "heartbeat-" + error.name, sent_with.generation_id)
            self._reset_generation(keep_member_id=error is Error.ILLEGAL_GENERATION)
            self.rejoin_needed = True
            self.state = MemberState.UNJOINED
            self._heartbeat_enabled = False
        elif error is not Error.COORDINATOR_LOAD_IN_PROGRESS:
            self._fail(GroupError(error, "unexpected heartbeat error"))

    # -- leaving --------------------------------------------------------------------------------

    def maybe_leave_group(self, reason: str) -> None:
        """Kafka's ``maybeLeaveGroup``: only dynamic members send LeaveGroup (KIP-345); then the
        member forgets its generation, and rejoins as a new member on a later poll."""
        now = self.clock.now_ms()
        if (
            self.group_instance_id is None
            and self.config.leave_group_on_close
            and self.generation.member_id != UNKNOWN_MEMBER_ID
            and self.coordinator is not None
        ):
            request = {
                "api": "leave_group",
                "group_id": self.group_id,
                "members": [
                    {
                        "member_id": self.generation.member_id,
                        "group_instance_id": None,
                        "reason": reason,
                    }
                ],
            }
            self._event(now, "leave", reason)
            self._send(request, lambda answer: None)
        self._reset_generation(keep_member_id=False)
        self.state = MemberState.UNJOINED
        self._heartbeat_enabled = False
        self.rejoin_needed = True

    def _on_leave_prepare(self, now: int) -> None:
        if self.generation.generation_id == NO_GENERATION:
            self._lose_all(now)
        else:
            self._revoke(now, list(self.owned))

    # -- offsets --------------------------------------------------------------------------------

    def _generation_for_commit(self) -> Generation | None:
        if self.topics is None:
            return Generation()  # a simple group: generation -1, no member id
        if self.state is MemberState.STABLE:
            return self.generation
        if self.state is MemberState.UNJOINED or self.generation.generation_id == NO_GENERATION:
            return None
        # Kafka commits with the current generation while rebalancing (the broker decides).
        return self.generation

    def _on_commit(
        self,
        answer: dict[str, Any],
        sent_with: Generation,
        offsets: Mapping[TopicPartition, int],
        callback: CommitCallback | None,
    ) -> None:
        now = self.clock.now_ms()
        errors = {Error(p["error_code"]) for p in answer.get("partitions", [])}
        errors.add(Error(answer["error_code"]))
        errors.discard(Error.NONE)
        outcome: Exception | None = None
        if errors:
            error = sorted(errors)[0]
            if error in (Error.OFFSET_METADATA_TOO_LARGE, Error.INVALID_COMMIT_OFFSET_SIZE):
                outcome = GroupError(error, "the commit was refused")
            elif error in (Error.COORDINATOR_LOAD_IN_PROGRESS, Error.UNKNOWN_TOPIC_OR_PARTITION):
                outcome = RetriableCommitError(error)
            elif error in COORDINATOR_GONE:
                self._coordinator_unknown(now)
                outcome = RetriableCommitError(error)
            elif error is Error.FENCED_INSTANCE_ID:
                outcome = GroupError(error, "another member took over this group.instance.id")
                if sent_with == self.generation:
                    self._fail(outcome)
            elif error is Error.REBALANCE_IN_PROGRESS:
                self.rejoin_needed = True
                outcome = RebalanceInProgressError(
                    "commit during a rebalance; commit again after it"
                )
            elif error in (Error.UNKNOWN_MEMBER_ID, Error.ILLEGAL_GENERATION):
                if sent_with == self.generation:
                    self._reset_generation(keep_member_id=error is Error.ILLEGAL_GENERATION)
                    self.rejoin_needed = True
                    self.state = MemberState.UNJOINED
                    self._heartbeat_enabled = False
                outcome = CommitFailedError(
                    "the commit cannot be completed: the group has rebalanced and assigned the "
                    f"partitions to another member ({error.name})"
                )
            else:
                outcome = GroupError(error, "unexpected commit error")
        self._event(
            now, "commit", (dict(offsets), None if outcome is None else type(outcome).__name__)
        )
        if callback is not None:
            callback(None if outcome else offsets, outcome)

    def _on_fetch(self, answer: dict[str, Any], callback: FetchCallback) -> None:
        now = self.clock.now_ms()
        error = Error(answer["error_code"])
        if error is Error.NONE:
            bad = [Error(p["error_code"]) for p in answer["partitions"] if p["error_code"]]
            if bad:
                error = bad[0]
        if error is Error.NONE:
            result = {
                TopicPartition(p["topic"], p["partition"]): (p["offset"], p["metadata"])
                for p in answer["partitions"]
            }
            callback(result, None)
            return
        if error in COORDINATOR_GONE:
            self._coordinator_unknown(now)
        if error.retriable:
            callback(None, RetriableCommitError(error))
        else:
            callback(None, GroupError(error, "OffsetFetch failed"))

    # -- plumbing -------------------------------------------------------------------------------

    def _send(
        self,
        request: dict[str, Any],
        handler: Callable[[dict[str, Any]], None],
        any_node: bool = False,
    ) -> None:
        request["request_id"] = f"{self._rid_prefix}/{next(self._rids)}"
        self._requests_in_flight += 1

        def on_response(answer: dict[str, Any]) -> None:
            self._requests_in_flight -= 1
            handler(answer)

        self.transport.send(request, on_response, None if any_node else self.coordinator)

    def _reset_generation(self, keep_member_id: bool) -> None:
        member_id = self.generation.member_id if keep_member_id else UNKNOWN_MEMBER_ID
        self.generation = Generation(member_id=member_id)

    def _revoke(self, now: int, partitions: list[TopicPartition]) -> None:
        if partitions:
            self._event(now, "revoked", sorted(partitions))
            self.owned = [tp for tp in self.owned if tp not in set(partitions)]
            self.listener.on_partitions_revoked(sorted(partitions))

    def _lose_all(self, now: int) -> None:
        if self.owned:
            lost, self.owned = sorted(self.owned), []
            self._event(now, "lost", lost)
            self.listener.on_partitions_lost(lost)

    def _fail(self, error: Exception) -> None:
        now = self.clock.now_ms()
        self._event(now, "fatal", str(error))
        self.failed = error
        self._heartbeat_enabled = False

    def _raise_if_failed(self) -> None:
        if self.failed is not None:
            raise self.failed
        if self.closed:
            raise RuntimeError("the member is closed")

    def _event(self, now: int, kind: str, detail: Any) -> None:
        self.events.append((now, kind, detail))


def _assignment(partitions: Iterable[TopicPartition]) -> Assignment:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return Assignment(tuple(TopicPartitions(t, tuple(ps)) for t, ps in by_topic.items()))


def _rebalance_protocol(assignors: Sequence[Assignor]) -> str:
    """Kafka's choice: COOPERATIVE only if every configured assignor supports it."""
    common = set(assignors[0].rebalance_protocols)
    for a in assignors[1:]:
        common &= set(a.rebalance_protocols)
    if not common:
        raise ValueError("the assignors have no rebalance protocol in common")
    return COOPERATIVE if COOPERATIVE in common else EAGER
