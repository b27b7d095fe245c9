"""The working set of one step on one group: clock, config, id source, and what it emits.

A :class:`GroupContext` is built for each step (one request, or one timer) on one group id. It
carries the group (``None`` when the id has no group), collects the responses and the log records
the step produces, and applies each record through :func:`coordinator.log.records.apply_record`,
the same function that loads a partition on failover: offsets and group deletion change only by
replaying records, live and at load alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.config import CoordinatorConfig
from coordinator.errors import Error
from coordinator.group.model import OFFSET_EXPIRY, ClassicGroup
from coordinator.ids import IdSource
from coordinator.log import records as log
from coordinator.log.records import Group
from coordinator.modern.model import ConsumerGroup
from coordinator.requests import response
from coordinator.topics import EMPTY_IMAGE, TopicImage

#: Timer keys within a group (Kafka: heartbeat-<group>-<member>, join-<group>, sync-<group>).
JOIN_KEY = "join"
SYNC_KEY = "sync"
EXPIRY_KEY = "offset-expiry"


def heartbeat_key(member_id: str) -> str:
    return "heartbeat-" + member_id


class GroupContext:
    __slots__ = (
        "answer_ms",
        "config",
        "group",
        "group_id",
        "ids",
        "next_seq",
        "now_ms",
        "offsets_partition",
        "records",
        "responses",
        "topics",
    )

    def __init__(
        self,
        config: CoordinatorConfig,
        now_ms: int,
        ids: IdSource,
        next_seq: Callable[[], int],
        group_id: str,
        group: Group | None,
        offsets_partition: int,
        responses: list[dict[str, Any]],
        records: list[dict[str, Any]],
        answer_ms: int | None = None,
        topics: TopicImage = EMPTY_IMAGE,
    ) -> None:
        self.config = config
        self.now_ms = now_ms
        #: When this step's responses leave (None: at once, at ``now_ms``). A request served at
        #: its arrival is still answered only when the step runs; see :meth:`schedule`.
        self.answer_ms = answer_ms
        self.ids = ids
        self.next_seq = next_seq
        self.group_id = group_id
        self.group = group
        #: The topics as the caller last described them (consumer groups assign from them).
        self.topics = topics
        self.offsets_partition = offsets_partition
        self.responses = responses
        self.records = records

    # -- output -------------------------------------------------------------------------------

    def respond(
        self,
        api: str,
        request_id: Any,
        error: Error = Error.NONE,
        message: str | None = None,
        **fields: Any,
    ) -> None:
        self.responses.append(response(api, request_id, self.group_id, error, message, **fields))

    def append(self, record: dict[str, Any]) -> None:
        """Write one log record and apply it, exactly as a load would."""
        record["offsets_partition"] = self.offsets_partition
        self.records.append(record)
        self.group = log.apply_record(self.group, record, self.now_ms, live=True)
        if self.group is not None:
            self.ensure_expiry_timer(self.group)

    # -- groups and timers --------------------------------------------------------------------

    @property
    def classic(self) -> ClassicGroup | None:
        """The group, for the classic protocol's code, which runs only on classic groups."""
        group = self.group
        assert not isinstance(group, ConsumerGroup), "a classic path reached a consumer group"
        return group

    @property
    def consumer(self) -> ConsumerGroup | None:
        group = self.group
        assert not isinstance(group, ClassicGroup), "a consumer path reached a classic group"
        return group

    def create_group(self) -> ClassicGroup:
        group = ClassicGroup(group_id=self.group_id, current_state_timestamp_ms=self.now_ms)
        self.group = group
        self.ensure_expiry_timer(group)
        return group

    def schedule(self, key: str, delay_ms: int, kind: str, payload: Any = None) -> None:
        """Arm a member-facing timer (session, join, sync, initial delay) ``delay_ms`` from the
        time this step's responses leave.

        A request read late is served at its arrival, but its member learns the outcome only
        when the response leaves: a session, or the time to rejoin or sync, counts from then,
        as it does in Kafka, where the response leaves at once. So a join that waited in the
        inbox longer than its session is not expired as soon as it is answered."""
        assert self.group is not None
        base = self.now_ms if self.answer_ms is None else max(self.now_ms, self.answer_ms)
        self.group.schedule(key, base + delay_ms, self.next_seq(), kind, payload)

    def cancel(self, key: str) -> None:
        if self.group is not None:
            self.group.cancel(key)

    def ensure_expiry_timer(self, group: Group) -> None:
        """Every group is swept for expired offsets (8.7).

        Kafka sweeps each ``__consumer_offsets`` partition every
        ``offsets_retention_check_interval_ms``, first one interval after the partition was
        loaded, so the partitions' sweeps fall at different times. Here each partition's sweeps
        run at a phase of its own on the engine's clock: partition ``p`` of ``n`` at
        ``k * interval + p * interval // n``. The schedule then does not depend on which process
        or Spark task holds the group, nor on when it was last restarted, and a job holding
        every partition sweeps a ``n``-th of its groups at a time, not all of them at once.
        """
        if EXPIRY_KEY not in group.timers:
            interval = self.config.offsets_retention_check_interval_ms
            partitions = self.config.offsets_topic_num_partitions
            phase = self.offsets_partition * interval // partitions
            deadline = self.now_ms - (self.now_ms - phase) % interval + interval
            group.schedule(EXPIRY_KEY, deadline, self.next_seq(), OFFSET_EXPIRY)

    def new_member_id(self, prefix: str, request_id: Any) -> str:
        """``<client id or instance id>-<uuid>`` (Kafka's ``generateMemberId``).

        Kafka's UUIDs are random; a deterministic id source (the job's keyed hash of the request
        id) gives the same id again when a request id is reused, so an id the group already
        holds is minted again from (request id, attempt) until it is new."""
        member_id = f"{prefix}-{self.ids(self.group_id, request_id)}"
        group, attempt = self.classic, 0
        while group is not None and (
            member_id in group.members or member_id in group.pending_members
        ):
            attempt += 1
            member_id = f"{prefix}-{self.ids(self.group_id, (request_id, attempt))}"
        return member_id
