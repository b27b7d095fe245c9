"""The embedded back end: the engine in this process, on the wall clock.

Every request is handled by the engine as it arrives (the engine is synchronous and fast); its
answer, and any answer to an earlier parked JoinGroup/SyncGroup that the call emitted, resolves
the future its connection awaits. A scheduler task calls ``advance`` at the engine's next
wake-up (no later than its next deadline: sessions, joins, syncs, the initial rebalance delay),
woken early only by a request that armed a sooner timer.

With a warehouse, the log records an engine call produced are written to the job's
``consumer_offsets`` Delta table (:class:`coordinator.stream.sink.DeltaSink`, the job's own
writer, under its own application id) before the answers of that call are released, so a commit
is acknowledged only once the log holds it, as Kafka does. Calls arriving while a write is under
way are batched into the next write. On start the engine is rebuilt from that table
(``GroupCoordinator.from_records``, Kafka's load on failover).

The groups' summaries go to ``group_state`` and ``group_history`` as the job writes them (one
row per group whose state changed, :func:`coordinator.stream.operator.group_summary`), so the
operator tools (``coordinator groups``, the notebook) read a gateway's warehouse as they read the
job's. They ride along with the next log write, or, when no record is due, go in a write of
their own at most once per ``summary_interval_ms``: ``group_state`` trails the engine by at most
that much, and a heartbeat costs no write. A node of a gateway cluster
(:mod:`coordinator.gateway.cluster`) summarises only its own partitions' groups and hands the
summaries to its supervisor (``publish_summaries``), the one writer of those tables, once the
records behind them are in the log.

A write that fails leaves the engine ahead of its log. The log is the truth, so the engine is
rebuilt from it, as a Kafka coordinator that loses its ``__consumer_offsets`` partition unloads
its groups and the next one loads them: every request waiting (the failed write's, the ones
queued behind it, parked joins and syncs) is answered COORDINATOR_NOT_AVAILABLE, which sends
Kafka clients to find the coordinator again and retry; requests arriving during the reload get
COORDINATOR_LOAD_IN_PROGRESS. Nothing unwritten is ever acknowledged, and nothing acknowledged is
lost: what the engine holds afterwards is exactly what the log holds.

One writer per warehouse. On start the back end claims the warehouse
(:mod:`coordinator.stream.ownership`; ``WarehouseOwned`` while another live job or gateway owns
it) and its sink writes fenced by the owner epoch. When a newer owner takes over (this process
was paused, its lease expired), the next write fails or the heartbeat notices first: the back
end then answers every request NOT_COORDINATOR (clients look for the coordinator again), writes
nothing more and calls ``on_lost`` (the gateway command stops, exit status 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.config import CoordinatorConfig
from coordinator.engine import CoordinatorNode, GroupCoordinator
from coordinator.errors import Error
from coordinator.gateway.backend import cannot_serve
from coordinator.log.partitioning import partition_for
from coordinator.requests import response
from coordinator.stream.client import wall_clock_ms
from coordinator.stream.ownership import (
    DEFAULT_LEASE_TIMEOUT_MS,
    Ownership,
    OwnershipLost,
    PartitionWriter,
)

if TYPE_CHECKING:
    from coordinator.metrics.groups import GroupMetrics

log = logging.getLogger(__name__)

#: The application id of the gateway's commits to the Delta tables.
APP_ID = "coordinator-gateway"
#: How long to wait before reading the log again when a reload failed.
RELOAD_RETRY_S = 1.0
#: Changed group summaries with no log record to ride along: one write at most this often.
SUMMARY_INTERVAL_MS = 1000.0
#: A group_state row written by an earlier run, not yet compared with the engine's group.
_UNKNOWN: dict[str, Any] = {}


class EmbeddedBackend:
    #: Most requests are answered at once, within the read; the few that wait (a parked join,
    #: a commit waiting for its log write) keep a Kafka broker's one request at a time on
    #: their connection (connection module doc).
    pipelines_requests = False

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        warehouse: str | Path | None = None,
        flush_interval_ms: float = 2.0,
        summary_interval_ms: float = SUMMARY_INTERVAL_MS,
        lease_timeout_ms: int = DEFAULT_LEASE_TIMEOUT_MS,
        *,
        owned_partitions: Iterable[int] | None = None,
        partition_owners: dict[int, CoordinatorNode] | None = None,
        app_id: str = APP_ID,
        owner_epoch: int | None = None,
        write_summaries: bool = True,
        writer: PartitionWriter | None = None,
        publish_summaries: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        """``owned_partitions`` (default all), ``partition_owners``, ``app_id``,
        ``owner_epoch``, ``write_summaries``, ``writer`` and ``publish_summaries`` are for one
        node of several (:mod:`coordinator.gateway.cluster`): the offsets partitions it starts
        owning, the nodes owning the others (for FindCoordinator), its own Delta app id, the
        epoch of the supervisor's claim on the warehouse it writes under (instead of claiming
        the warehouse itself), whether it writes ``group_state``/``group_history`` itself, the
        fence of its log writes (the log must name it each partition's writer), and where the
        summaries of its groups go instead (called once their records are in the log)."""
        self.config = config or CoordinatorConfig()
        self.warehouse = None if warehouse is None else Path(warehouse)
        self.flush_interval_ms = flush_interval_ms
        self.summary_interval_ms = summary_interval_ms
        self.engine = GroupCoordinator(self.config)
        num = self.config.offsets_topic_num_partitions
        self._owned = set(range(num) if owned_partitions is None else owned_partitions)
        #: Who owns the other partitions (for FindCoordinator), as last assigned.
        self._owners = {p: n for p, n in (partition_owners or {}).items() if p not in self._owned}
        self.app_id = app_id
        self.owner_epoch = owner_epoch
        self.write_summaries = write_summaries
        self.writer = writer
        self.publish_summaries = publish_summaries
        #: A write under way (a partition given up waits for it: see ``assign``).
        self._writing = False
        self._written = asyncio.Event()
        #: Partitions assigned here whose previous owner may still be writing them.
        self._held: set[int] = set()
        #: The log gained partitions another writer wrote: the sink rereads its end offsets.
        self._reopen_sink = False
        self._waiting: dict[str, tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = {}
        self._node: CoordinatorNode | None = None
        self._loading = False
        self._wake = asyncio.Event()
        #: What the scheduler sleeps until (the engine's next wake-up when it went to sleep).
        self._sleep_until: int | None = None
        self._pending_records: list[dict[str, Any]] = []
        self._pending_answers: list[dict[str, Any]] = []
        #: Groups stepped since their summary was last compared, and the summaries written.
        self._dirty: set[str] = set()
        self._summaries: dict[str, dict[str, Any]] = {}
        self._last_write = 0.0  # time.monotonic()
        self._flush = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._sink: Any = None
        self._batch_id = 0
        self.records_written = 0
        self.batches_written = 0
        self.reloads = 0
        self.lease_timeout_ms = lease_timeout_ms
        #: The claim on the warehouse (with one); ``lost`` once a newer owner took over.
        self.owner: Ownership | None = None
        self.lost: OwnershipLost | None = None
        #: Called (on the event loop) when the warehouse was taken over by a newer owner.
        self.on_lost: Callable[[OwnershipLost], None] | None = None
        #: Kafka's group-coordinator metrics, fed after every engine call (None: not kept).
        self.metrics: GroupMetrics | None = None
        #: The topics consumer groups are assigned from (contract, section 6), given again to
        #: every engine this back end builds (at start and after a reload).
        self.topics: list[dict[str, Any]] = []

    @property
    def loading(self) -> bool:
        """Reloading the log after a failed write (requests get LOAD_IN_PROGRESS meanwhile)."""
        return self._loading

    async def start(self, node: CoordinatorNode) -> None:
        self._node = node
        if self.warehouse is not None:
            self.owner = await asyncio.to_thread(self._own)
            loop = asyncio.get_running_loop()

            def lost_elsewhere(lost: OwnershipLost) -> None:  # the heartbeat thread found out
                loop.call_soon_threadsafe(self._lose, lost)

            self.owner.on_lost = lost_elsewhere
            await self._load(await asyncio.to_thread(self._open_log))
        else:
            self.engine = GroupCoordinator(self.config, node=node, owned_partitions=self._owned)
            for partition, owner in self._owners.items():
                self.engine.set_partition_owner(partition, owner)
            self.engine.update_topics(self.topics, wall_clock_ms())
        self._tasks = [
            asyncio.create_task(self._scheduler(), name="gateway-scheduler"),
            asyncio.create_task(self._writer(), name="gateway-log-writer"),
        ]

    async def _load(self, records: list[dict[str, Any]]) -> None:
        """The engine becomes what the log holds (Kafka's load on failover); every group, and
        every group_state row of an earlier run, gets its summary compared again. The replay
        runs on a worker thread (seconds for a big log), so that the gateway keeps answering
        meanwhile (LOAD_IN_PROGRESS); nothing else touches the new engine until it is set."""
        engine = await asyncio.to_thread(
            GroupCoordinator.from_records,
            records,
            self.config,
            wall_clock_ms(),
            node=self._node,
            owned_partitions=self._owned,
        )
        for partition, owner in self._owners.items():
            engine.set_partition_owner(partition, owner)
        # Before anything else (contract). A fresh engine knew no topics, so none is "deleted"
        # here: offsets are deleted only when a topic leaves a list the engine already had.
        engine.update_topics(self.topics, wall_clock_ms())
        self.engine = engine
        self._dirty = set(self._summaries) | set(self.engine.group_ids())
        if self.metrics is not None:
            self.metrics.reset_from_engine(self.engine)

    def _own(self) -> Ownership:
        from coordinator.stream.ownership import acquire, owner_dir, read_claim
        from coordinator.stream.schema import TABLES, Warehouse

        assert self.warehouse is not None
        paths = Warehouse.at(self.warehouse)
        if self.owner_epoch is not None:  # the supervisor's claim (it renews the lease)
            claim = read_claim(owner_dir(paths.root), self.owner_epoch)
            if claim is None:
                raise OwnershipLost(f"no claim of epoch {self.owner_epoch} on {paths.root}")
            owner = Ownership(paths.root, claim)
            owner.check()
            return owner
        tables = [paths.table(name) for name in TABLES]
        return acquire(paths.root, "coordinator gateway", self.lease_timeout_ms, tables=tables)

    def _lose(self, lost: OwnershipLost) -> None:
        """A newer owner took the warehouse: answer everything NOT_COORDINATOR from now on."""
        if self.lost is not None:
            return
        self.lost = lost
        self._pending_records, self._pending_answers = [], []
        for request, future in list(self._waiting.values()):
            if not future.done():
                future.set_result(cannot_serve(request, str(lost), Error.NOT_COORDINATOR))
        if self.on_lost is not None:
            self.on_lost(lost)

    def _open_log(self) -> list[dict[str, Any]]:
        from deltalake import DeltaTable

        from coordinator.stream.delta_read import read_table
        from coordinator.stream.rebuild import read_log
        from coordinator.stream.schema import GROUP_STATE, Warehouse
        from coordinator.stream.sink import DeltaSink

        assert self.warehouse is not None
        tables = Warehouse.at(self.warehouse).tables
        tables.mkdir(parents=True, exist_ok=True)
        rows: list[dict[str, Any]] = read_log(tables).to_pylist()
        self._sink = DeltaSink(tables, self.app_id, ownership=self.owner, writer=self.writer)
        state = tables / GROUP_STATE
        if DeltaTable.is_deltatable(str(state)):
            ids = read_table(state, columns=["group_id"]).column(0)
            self._summaries = dict.fromkeys(self._mine(ids.to_pylist()), _UNKNOWN)
        last = self._sink.last_batch()
        self._batch_id = 0 if last is None else last + 1
        return rows

    def _mine(self, group_ids: Iterable[str]) -> list[str]:
        """The groups of the offsets partitions this back end owns."""
        num = self.config.offsets_topic_num_partitions
        if len(self._owned) == num:
            return list(group_ids)
        return [g for g in group_ids if partition_for(g, num) in self._owned]

    async def stop(self) -> None:
        """Stop the timers, then let the writer finish (a write in flight is never cancelled:
        its thread would go on writing), flushing what is pending."""
        scheduler, writer = self._tasks or (None, None)
        self._tasks = []
        if scheduler is not None:
            scheduler.cancel()
            await asyncio.gather(scheduler, return_exceptions=True)
        self._closing = True
        self._flush.set()
        if writer is not None:
            await asyncio.gather(writer, return_exceptions=True)
        if self.owner is not None and self.owner_epoch is None:  # not the supervisor's claim
            await asyncio.to_thread(self.owner.release)

    async def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        made = self.answer_now(request)
        return made if isinstance(made, dict) else await made

    def answer_now(
        self, request: dict[str, Any]
    ) -> dict[str, Any] | Coroutine[Any, Any, dict[str, Any]]:
        """The answer to ``request`` when it is ready at once (the engine answers most requests
        synchronously: a heartbeat, an offset fetch, a commit without a log), else a coroutine
        that waits for it (a parked join, an answer held until its records are in the log).
        :meth:`submit` is this, awaited; the gateway calls it without a coroutine of its own
        for a heartbeat (:meth:`coordinator.gateway.server.Gateway.heartbeat_now`)."""
        if self.lost is not None:
            return cannot_serve(request, str(self.lost), Error.NOT_COORDINATOR)
        if self._loading:
            message = "the coordinator is reloading its log"
            return cannot_serve(request, message, Error.COORDINATOR_LOAD_IN_PROGRESS)
        key = str(request["request_id"])
        own = self._emit(self.engine.handle(request, wall_clock_ms()), key)
        self._wake_if_sooner()
        if own is not None:
            return own
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[key] = (request, future)
        return self._awaited(key, future)

    def heartbeat_in_place(
        self, group_id: str, member_id: str, generation_id: int, instance_id: str | None = None
    ) -> Error | None:
        """The answer to a heartbeat when the engine serves it in place
        (:meth:`coordinator.engine.GroupCoordinator.heartbeat`: a member of a classic group in
        its generation) and nothing is held for the log (an answer goes out only after those
        held before it); None, having done nothing, for anything else, which
        :meth:`answer_now` then serves. What :meth:`answer_now` does with it, without the
        request and response dicts: the group is marked for its summary and counted in the
        metrics as any engine call's."""
        if self.lost is not None or self._loading or self._pending_records:
            return None
        error = self.engine.heartbeat(
            group_id, member_id, generation_id, wall_clock_ms(), instance_id
        )
        if error is None:
            return None
        self._served_in_place(group_id, error)
        self._wake_if_sooner()
        return error

    def renewal(
        self, group_id: str, member_id: str, generation_id: int, instance_id: str | None = None
    ) -> Callable[[], Error | None] | None:
        """:meth:`heartbeat_in_place` for the same heartbeat again and again, without its
        lookups (the engine's :meth:`~coordinator.engine.GroupCoordinator.renewal`):
        ``renew()`` serves it as :meth:`heartbeat_in_place` would and gives its answer, or
        None, having done nothing, when that must decide afresh (the group changed, a timer is
        due, this engine was replaced by a reload, the log is behind or lost). None when the
        heartbeat is not served in place now. A renewal never arms an earlier timer, so the
        scheduler need not be woken."""
        if self.lost is not None or self._loading or self._pending_records:
            return None
        engine = self.engine
        renew_in_engine = engine.renewal(group_id, member_id, generation_id, instance_id)
        if renew_in_engine is None:
            return None

        def renew() -> Error | None:
            if self.engine is not engine or self.lost is not None or self._loading:
                return None
            if self._pending_records:
                return None
            error = renew_in_engine(wall_clock_ms())
            if error is not None and (self.metrics is not None or self._sink is not None):
                self._served_in_place(group_id, error)
            return error

        return renew

    def _served_in_place(self, group_id: str, error: Error) -> None:
        """What :meth:`answer_now` does with a heartbeat's answer, without its dicts: the
        group counted in the metrics, and marked for its summary."""
        if self.metrics is not None or (self._sink is not None and group_id not in self._dirty):
            self._emit([response("heartbeat", None, group_id, error)])

    async def _awaited(self, key: str, future: asyncio.Future[dict[str, Any]]) -> dict[str, Any]:
        try:
            return await future
        finally:
            self._waiting.pop(key, None)

    def update_topics(self, topics: list[dict[str, Any]]) -> None:
        """The whole current topic list (``[{name, topic_id, partitions}]``); what the change
        causes (offsets of deleted topics tombstoned) is written like any engine call's."""
        self.topics = list(topics)
        if self._node is None or self._loading or self.lost is not None:
            return  # the engine to come is given them when it is built
        self._emit(self.engine.update_topics(self.topics, wall_clock_ms()))
        self._wake.set()

    async def assign(
        self, owners: dict[int, CoordinatorNode], hold: Iterable[int] = ()
    ) -> list[int]:
        """Partition -> owning node, for every partition: give up the partitions now owned
        elsewhere (their groups unload, parked requests get NOT_COORDINATOR, and the records
        already emitted for them are written before this returns) and load the ones gained
        from the log (Kafka's handleGroupImmigration; LOAD_IN_PROGRESS meanwhile). A gained
        partition in ``hold`` is only marked loading: its previous owner may still be writing
        it, and a later call without it in ``hold`` loads it. Returns the partitions given up."""
        assert self._node is not None
        me = self._node.node_id
        held = set(hold)
        mine = {p for p, n in owners.items() if n.node_id == me}
        gained = sorted(p for p in mine if p not in self._owned or p in self._held)
        lost = sorted(p for p, n in owners.items() if n.node_id != me and p in self._owned)
        self._owners = {p: n for p, n in owners.items() if n.node_id != me}
        self._owned = (self._owned - set(lost)) | set(gained)
        for partition, owner in owners.items():
            self.engine.set_partition_owner(partition, None if owner.node_id == me else owner)
        for partition in lost:
            self._emit(self.engine.unload_partition(partition, wall_clock_ms()))
        self._held = {p for p in gained if p in held}
        lost_set = set(lost)
        num = self.config.offsets_topic_num_partitions
        for group_id in [g for g in self._summaries if partition_for(g, num) in lost_set]:
            del self._summaries[group_id]  # the new owner summarises them now
        for partition in gained:
            self.engine.begin_loading(partition)
        if lost:
            await self._drain()
        to_load = [p for p in gained if p not in held]
        if not to_load:
            return lost
        log.info("node %d loads offsets partitions %s", me, to_load)
        engine = self.engine
        records, stored = await asyncio.to_thread(self._read_partitions, set(to_load))
        if engine is not self.engine:  # reloaded meanwhile, with the new partitions in it
            return lost
        for partition in to_load:
            self.engine.load_partition(partition, records, wall_clock_ms())
        loaded = set(to_load)
        for group_id in stored:
            if partition_for(group_id, num) in loaded:
                self._summaries.setdefault(group_id, _UNKNOWN)
        self._dirty |= set(self.engine.group_ids()) | set(self._summaries)
        self._emit([])
        self._wake.set()
        return lost

    async def _drain(self) -> None:
        """Until every record emitted so far is written (or could not be)."""
        while self._pending_records or self._writing:
            self._written.clear()
            self._flush.set()
            await self._written.wait()

    def _read_partitions(self, partitions: set[int]) -> tuple[list[dict[str, Any]], list[str]]:
        """The log's records of ``partitions``, read afresh (their previous writer is gone),
        and the sink told to reread the log's end before its next write; and the group ids
        ``group_state`` holds (those of the partitions are summarised again)."""
        if self.warehouse is None:
            return [], []
        from deltalake import DeltaTable

        from coordinator.stream.delta_read import read_table
        from coordinator.stream.rebuild import read_log
        from coordinator.stream.schema import GROUP_STATE, Warehouse

        tables = Warehouse.at(self.warehouse).tables
        rows = read_log(tables)
        self._reopen_sink = True
        stored: list[str] = []
        if DeltaTable.is_deltatable(str(tables / GROUP_STATE)):
            stored = read_table(tables / GROUP_STATE, columns=["group_id"]).column(0).to_pylist()
        return [r for r in rows.to_pylist() if r["offsets_partition"] in partitions], stored

    def _emit(self, answers: list[dict[str, Any]], own: str | None = None) -> dict[str, Any] | None:
        """Pass on what an engine call gave: its records to the log, and its answers to the
        requests waiting for them, held until those records are written. ``own``: the request
        id of the call's own request, not waiting yet; its answer is returned instead when it
        goes out at once (None: not among them, or held)."""
        records = self.engine.drain_records()
        touched = self.engine.drain_touched()
        if self._loading or self.lost is not None:
            return None  # the engine is being replaced; every waiting request has been answered
        if self.metrics is not None:
            self.metrics.observe_engine(self.engine, touched, records, answers)
        if self._sink is not None and touched - self._dirty:
            self._dirty |= touched
            self._flush.set()  # a summary to compare, at the writer's leisure
        if self._sink is not None and (records or self._pending_records):
            # Held until the records are in the log (and after any earlier held answers).
            self._pending_records.extend(records)
            self._pending_answers.extend(answers)
            self._flush.set()
            return None
        return self._resolve(answers, own)

    def _resolve(
        self, answers: list[dict[str, Any]], own: str | None = None
    ) -> dict[str, Any] | None:
        mine = None
        for answer in answers:
            key = str(answer["request_id"])
            if key == own:
                mine = answer
                continue
            waiting = self._waiting.get(key)
            if waiting is not None and not waiting[1].done():
                waiting[1].set_result(answer)
        return mine

    def _wake_if_sooner(self) -> None:
        """Wake the scheduler when the engine may now have a timer due before it would wake
        (a request armed one), not after every request: most (a heartbeat) only move a timer
        later, and a wake-up per request cost a heartbeat ~10 % of its CPU."""
        wakeup = self.engine.next_wakeup()
        if wakeup is not None and (self._sleep_until is None or wakeup < self._sleep_until):
            self._wake.set()

    async def _scheduler(self) -> None:
        while True:
            # The engine's next wake-up, not its next deadline: as soon or sooner (a timer that
            # moved later is then found not due), in constant time, not a look at every group.
            deadline = self._sleep_until = self.engine.next_wakeup()
            timeout = None if deadline is None else max(0.0, (deadline - wall_clock_ms()) / 1000)
            # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancel that lands
            # as the wait ends (a request woke it just before stop), and stop waited forever
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._wake.clear()
            self._emit(self.engine.advance(wall_clock_ms()))

    async def _writer(self) -> None:
        while not self._closing:
            await self._flush.wait()
            self._flush.clear()
            if not self._pending_records and not self._closing:
                # Summaries only: wait out the interval, unless records come meanwhile.
                pause = self.summary_interval_ms / 1000 - (time.monotonic() - self._last_write)
                if pause > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._flush.wait(), pause)
            if self._pending_records and not self._closing:
                await asyncio.sleep(self.flush_interval_ms / 1000)  # gather what comes together
            self._flush.clear()
            await self._write_pending()

    def _changed_summaries(self) -> list[dict[str, Any]]:
        """The summaries of the dirty groups that differ from what was written (a group gone
        since: Dead, which deletes its row); the dirty set is emptied."""
        from coordinator.stream.operator import group_summary

        dirty, self._dirty = self._dirty, set()
        if not self.write_summaries and self.publish_summaries is None:
            return []
        changed = []
        for group_id in self._mine(sorted(dirty)):
            group = self.engine.group(group_id)
            if group is None and group_id not in self._summaries:
                continue
            summary = group_summary(
                group_id, group, self.engine.partition_for(group_id), self.config
            )
            if summary != self._summaries.get(group_id):
                changed.append(summary)
        return changed

    async def _write_pending(self) -> None:
        try:
            await self._write_pending_records()
        finally:
            self._written.set()  # whoever drains looks again

    async def _write_pending_records(self) -> None:
        records, self._pending_records = self._pending_records, []
        answers, self._pending_answers = self._pending_answers, []
        groups = self._changed_summaries() if self._sink is not None else []
        if self.lost is not None:
            return
        published = groups if self.publish_summaries is not None else []
        written = [] if published else groups
        if records or written:
            self._writing = True
            try:
                await asyncio.to_thread(self._write, records, written)
            except OwnershipLost as lost:  # fenced: nothing was written
                self._lose(lost)
                return
            except Exception as exc:  # not acknowledged: the client retries
                log.exception("writing %d log records failed; reloading from the log", len(records))
                await self._reload(f"the log write failed: {exc}")
                return
            finally:
                self._writing = False
            self._last_write = time.monotonic()
        if published and self.publish_summaries is not None:
            self.publish_summaries(published)
        for summary in groups:
            if summary["state"] == "Dead":
                self._summaries.pop(summary["group_id"], None)
            else:
                self._summaries[summary["group_id"]] = summary
        self._resolve(answers)

    async def _reload(self, why: str) -> None:
        """Rebuild the engine from the log after a failed write (see the module doc)."""
        self._loading = True
        self.reloads += 1
        self._pending_records, self._pending_answers = [], []
        for request, future in list(self._waiting.values()):
            if not future.done():
                future.set_result(cannot_serve(request, why))
        while True:
            try:
                records = await asyncio.to_thread(self._open_log)
                break
            except OwnershipLost as lost:
                self._lose(lost)
                return
            except Exception:
                if self._closing:
                    return
                log.exception("reading the log failed; trying again in %.1f s", RELOAD_RETRY_S)
                await asyncio.sleep(RELOAD_RETRY_S)
        await self._load(records)
        self._loading = False
        self._wake.set()

    def _write(self, records: list[dict[str, Any]], groups: list[dict[str, Any]]) -> None:
        if self._reopen_sink:
            self._reopen_sink = False
            self._sink.reopen()
        now = wall_clock_ms()
        self._sink.write_batch(
            self._batch_id,
            records=records,
            responses=[],
            groups=groups,
            rejected=[],
            list_groups=[],
            emitted_at_ms=now,
            written_at_ms=now,
        )
        self._batch_id += 1
        self.records_written += len(records)
        self.batches_written += 1
