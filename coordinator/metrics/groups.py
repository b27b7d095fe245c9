"""Kafka's group-coordinator metrics, derived from what the engine hands its adapters.

Kafka's broker exports ``NumGroups{Stable,Empty,PreparingRebalance,CompletingRebalance,Dead}``,
``NumOffsets`` and the rates of offset commits, expirations and deletions and of completed
rebalances (``GroupCoordinatorMetrics``). Here, by meaning:

==========================================  =========================================================
``coordinator_groups{state}``               groups per state (Kafka's NumGroups<State>)
``coordinator_offsets``                     committed offsets held (NumOffsets)
``coordinator_offset_commits_total``        offsets committed: OffsetCommit records written
``coordinator_offset_expirations_total``    offsets removed by retention (tombstones of a timer)
``coordinator_offset_deletions_total``      offsets removed by OffsetDelete / DeleteGroups
``coordinator_rebalances_total``            rebalances completed (a group reaching Stable in a
                                            new generation)
``coordinator_rebalance_duration_seconds``  from the rebalance's start (PreparingRebalance) to
                                            Stable, on the engine's clock
``coordinator_joins_total``                 JoinGroups answered without error
``coordinator_group_requests_total``        group requests answered, by API and error
==========================================  =========================================================

Two adapters feed one :class:`GroupMetrics`: the embedded gateway after every engine call
(:meth:`GroupMetrics.observe` with the groups the call stepped, ``drain_touched``), and the Spark
job after every micro-batch (the group summaries it writes to ``group_state``). Both hand over
:class:`GroupView` s, the log records written and the responses; nothing here reads a file or a
clock, and the engine is only read.

What one observation cannot see: a Spark micro-batch may carry a group through
PreparingRebalance into CompletingRebalance (every member rejoined within one batch); the
rebalance then counts from CompletingRebalance's timestamp, so its duration is short by at most
that batch. The gateway sees every engine call, and the engine stamps both states of one call
with one time, so its durations are exact. A rebalance that ends in Empty (every member left) is
not completed, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from coordinator.engine import GroupCoordinator
from coordinator.group.states import GroupState
from coordinator.log.records import OFFSET_COMMIT, Group
from coordinator.metrics.server import never_raises
from coordinator.modern.model import ConsumerGroup

STATES = tuple(state.value for state in GroupState)
STABLE = GroupState.STABLE.value
DEAD = GroupState.DEAD.value
REBALANCING = (GroupState.PREPARING_REBALANCE.value, GroupState.COMPLETING_REBALANCE.value)
#: Requests whose successful answer means the tombstones beside it are deletions, not expiry.
DELETING_APIS = ("offset_delete", "delete_groups")
#: Rebalances last from a few milliseconds (one member, embedded) to minutes (a slow member
#: within its rebalance timeout).
REBALANCE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@dataclass(frozen=True, slots=True)
class GroupView:
    """What the metrics need of one group: Dead when it is gone."""

    group_id: str
    state: str
    generation_id: int = 0
    num_offsets: int = 0
    state_timestamp_ms: int | None = None

    @classmethod
    def of(cls, group_id: str, group: Group | None) -> GroupView:
        """The view of an engine group (None: the group is gone); a consumer group's generation
        is its group epoch."""
        if group is None:
            return cls(group_id, DEAD)
        if isinstance(group, ConsumerGroup):
            return cls(group_id, group.state.value, group.group_epoch, len(group.offsets), None)
        return cls(
            group_id,
            group.state.value,
            group.generation_id,
            len(group.offsets),
            group.current_state_timestamp_ms,
        )

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> GroupView:
        """The view of a ``group_state`` row or a summary the job's operator emitted."""
        return cls(
            str(summary["group_id"]),
            str(summary["state"]),
            int(summary.get("generation_id") or 0),
            int(summary.get("num_committed_offsets") or 0),
            summary.get("state_timestamp_ms"),
        )


@dataclass(slots=True)
class _Seen:
    state: str
    generation_id: int
    num_offsets: int
    #: When the rebalance in flight began (engine ms), None when none is.
    rebalance_started_ms: int | None


class GroupMetrics:
    """Kafka's group-coordinator metrics in ``registry`` (see the module doc).

    Not thread safe: one adapter thread calls :meth:`reset` and :meth:`observe`; scrapes read the
    prometheus_client values, which are."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.groups = Gauge(
            "coordinator_groups",
            "Groups by state (Kafka's NumGroups<State>)",
            ["state"],
            registry=registry,
        )
        self.offsets = Gauge(
            "coordinator_offsets", "Committed offsets held (Kafka's NumOffsets)", registry=registry
        )
        self.offset_commits = Counter(
            "coordinator_offset_commits",
            "Offsets committed (OffsetCommit records written to the log)",
            registry=registry,
        )
        self.offset_expirations = Counter(
            "coordinator_offset_expirations",
            "Offsets removed by retention (offsets.retention.minutes)",
            registry=registry,
        )
        self.offset_deletions = Counter(
            "coordinator_offset_deletions",
            "Offsets removed by OffsetDelete or DeleteGroups",
            registry=registry,
        )
        self.rebalances = Counter(
            "coordinator_rebalances",
            "Rebalances completed (a group reached Stable in a new generation)",
            registry=registry,
        )
        self.rebalance_duration = Histogram(
            "coordinator_rebalance_duration_seconds",
            "From a rebalance's start (PreparingRebalance) to Stable, on the coordinator's clock",
            buckets=REBALANCE_BUCKETS,
            registry=registry,
        )
        self.joins = Counter(
            "coordinator_joins", "JoinGroup requests answered without error", registry=registry
        )
        self.requests = Counter(
            "coordinator_group_requests",
            "Group requests answered by the coordinator, by API and Kafka error",
            ["api", "error"],
            registry=registry,
        )
        self._seen: dict[str, _Seen] = {}
        self._counts = dict.fromkeys(STATES, 0)
        self._offsets = 0
        #: What the gauges show, so that an unchanged value is not set again (hot path).
        self._published: dict[str, int] = {}
        self._published_offsets = -1
        self._request_children: dict[tuple[str, str], Any] = {}
        self._publish()

    # --- feeding ------------------------------------------------------------------------------

    def reset(self, views: Iterable[GroupView]) -> None:
        """The groups as they are now (a load from the log, a job's start): no events counted."""
        self._seen = {}
        self._counts = dict.fromkeys(STATES, 0)
        self._offsets = 0
        for view in views:
            if view.state != DEAD:
                self._track(view, None)
        self._publish()

    def observe(
        self,
        views: Iterable[GroupView],
        records: Iterable[Mapping[str, Any]] = (),
        responses: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """One engine call or micro-batch: the groups it stepped as they are now, the log
        records it wrote and the responses it gave."""
        deleting: set[str] = set()
        for response in responses:
            api = str(response.get("api"))
            key = (api, response.get("error") or "NONE")
            child = self._request_children.get(key)
            if child is None:
                child = self._request_children[key] = self.requests.labels(*key)
            child.inc()
            if response.get("error_code") == 0:
                if api == "join_group":
                    self.joins.inc()
                elif api in DELETING_APIS:
                    deleting.add(str(response.get("group_id")))
        for record in records:
            if record.get("record_type") != OFFSET_COMMIT:
                continue
            if record.get("value") is not None:
                self.offset_commits.inc()
            elif record.get("group_id") in deleting:
                self.offset_deletions.inc()
            else:
                self.offset_expirations.inc()
        for view in views:
            self._update(view)
        self._publish()

    def reset_from_engine(self, engine: GroupCoordinator) -> None:
        """:meth:`reset` to every group ``engine`` holds (after a load from the log)."""
        self.reset(GroupView.of(g, engine.group(g)) for g in engine.group_ids())

    @never_raises("an engine call")
    def observe_engine(
        self,
        engine: GroupCoordinator,
        touched: Iterable[str],
        records: Iterable[Mapping[str, Any]],
        responses: Iterable[Mapping[str, Any]],
    ) -> None:
        """:meth:`observe` one engine call: ``touched`` is what ``drain_touched`` gave."""
        views = [GroupView.of(g, engine.group(g)) for g in sorted(touched)]
        self.observe(views, records, responses)

    # --- bookkeeping --------------------------------------------------------------------------

    def _update(self, view: GroupView) -> None:
        previous = self._seen.get(view.group_id)
        if (
            previous is not None
            and previous.state == view.state
            and previous.generation_id == view.generation_id
            and previous.num_offsets == view.num_offsets
        ):
            return  # a heartbeat, say: nothing to count
        self._seen.pop(view.group_id, None)
        if previous is not None:
            self._counts[previous.state] -= 1
            self._offsets -= previous.num_offsets
        if view.state == DEAD:
            return
        started = None if previous is None else previous.rebalance_started_ms
        if view.state in REBALANCING:
            if started is None:
                started = view.state_timestamp_ms
        elif view.state == STABLE and previous is not None:
            if previous.state != STABLE or previous.generation_id != view.generation_id:
                self.rebalances.inc()
                if started is not None and view.state_timestamp_ms is not None:
                    self.rebalance_duration.observe(
                        max(0, view.state_timestamp_ms - started) / 1000
                    )
            started = None
        else:
            started = None
        self._track(view, started)

    def _track(self, view: GroupView, started: int | None) -> None:
        self._seen[view.group_id] = _Seen(view.state, view.generation_id, view.num_offsets, started)
        self._counts[view.state] = self._counts.get(view.state, 0) + 1
        self._offsets += view.num_offsets

    def _publish(self) -> None:
        for state, count in self._counts.items():
            if self._published.get(state) != count:
                self.groups.labels(state).set(count)
                self._published[state] = count
        if self._published_offsets != self._offsets:
            self.offsets.set(self._offsets)
            self._published_offsets = self._offsets

    def counts(self) -> dict[str, int]:
        """Groups per state, as last observed (Dead is always 0: a gone group is dropped)."""
        return dict(self._counts)
