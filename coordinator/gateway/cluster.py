"""``coordinator gateway --processes N``: N gateway processes, each the coordinator of a slice of
the ``__consumer_offsets`` partitions, as the brokers of a Kafka cluster are.

One Python process serves one core; Kafka spreads groups over brokers by their offsets
partition (``partitionFor(group)``) and so does this: node ``i`` listens on the ``--listen``
port + ``i`` and starts as the coordinator of its preferred partitions, ``p % N == i``. Every
node lists the nodes owning partitions in Metadata, and FindCoordinator sends each group to the
node owning its partition; a request that reaches another node is answered NOT_COORDINATOR by
the engine, which sends Kafka clients back to FindCoordinator.

**The supervisor** (the process the command starts, :class:`Supervisor`) runs no gateway; it is
the controller. It starts the N nodes (the same command line, each told its part through
``COORDINATOR_GATEWAY_NODE``), talks to each over two pipes (its standard input: the owners of
every partition, JSON lines; a report pipe back: heartbeats, ``ready``, partitions
``released``, group summaries), and keeps every partition owned by a serving node:

- *Leases.* A node heartbeats from its event loop every quarter of its lease; one whose lease
  lapses is fenced (below), sent SIGTERM, and SIGKILL after the shutdown timeout.
- *Restarts.* A node that exits is started again with a backoff (0.5 s doubling to 30 s), at
  most ``MAX_RESTARTS`` times in a row unless it served ``STABLE_AFTER_S`` in between.
- *Moves.* A dead or fenced node's partitions go to the serving nodes round robin; each loads
  the ones it gained from the log (Kafka's ``handleGroupImmigration``; LOAD_IN_PROGRESS
  meanwhile). A node serving again gets its preferred partitions back in a fenced handover:
  it is told to hold them (LOAD_IN_PROGRESS, nothing read), the interim owner unloads them,
  writes what it had emitted for them and reports them released; then the log names the node
  their writer, and it loads them.

**One writer per partition.** With ``--log-warehouse`` the supervisor claims the warehouse
(:mod:`coordinator.stream.ownership`: one owner per warehouse, its lease and epoch) and the
nodes write under that claim, each under an app id of its own. ``consumer_offsets`` names the
writer of every partition and the incarnation of every node (table properties set by the
supervisor with a metadata commit before anyone loads what it gained); each node's commit is
checked against them on the snapshot it commits on
(:class:`coordinator.stream.ownership.PartitionWriter`), and a commit read
before a change fails in delta-rs and is read again: a paused node, or an older incarnation,
writes nothing once its partitions moved. Without a warehouse the groups live in memory: a dead
node's groups are lost and their members rejoin elsewhere.

**Group tables.** The nodes send their groups' changed summaries (once the records behind them
are in the log) to the supervisor, the one writer of ``group_state``/``group_history``
(:class:`GroupTables`); it names the cluster's app ids on ``responses`` for the readers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from coordinator.engine import CoordinatorNode

log = logging.getLogger(__name__)

#: The environment variable that makes a ``coordinator gateway`` one node of a supervisor's.
NODE_ENV = "COORDINATOR_GATEWAY_NODE"
#: How often the supervisor looks at its nodes (exits, leases, restarts, handovers).
WATCH_INTERVAL_S = 0.05
#: Kafka's ``broker.session.timeout.ms``: a node not heartbeating for this long is fenced.
DEFAULT_NODE_LEASE_TIMEOUT_MS = 9_000
#: A node being started has this long (at least) to send its first heartbeat.
START_TIMEOUT_MS = 60_000
#: Restarts of a node that keeps dying: the first after this, each next one twice as late...
RESTART_BACKOFF_S = 0.5
#: ... up to this ...
RESTART_BACKOFF_MAX_S = 30.0
#: ... and at most this many in a row; a node that served this long starts the count again.
MAX_RESTARTS = 5
STABLE_AFTER_S = 60.0
#: The Delta application id of the supervisor's ``group_state``/``group_history`` writes.
GROUPS_APP_ID = "coordinator-gateway-groups"


def node_app_id(node_id: int) -> str:
    return f"coordinator-gateway-node-{node_id}"


def initial_owners(partitions: int, nodes: int) -> dict[int, int]:
    """Partition -> node: ``p % nodes`` (each partition's preferred node, as Kafka's preferred
    replica)."""
    return {p: p % nodes for p in range(partitions)}


def reassign(owners: dict[int, int], live: list[int]) -> dict[int, int]:
    """The owners once only ``live`` nodes are left: every partition of a dead node goes to a
    live one, round robin over the partitions moved; the others stay where they are."""
    if not live:
        raise ValueError("no live node to take the partitions")
    ordered = sorted(live)
    moved = [p for p in sorted(owners) if owners[p] not in ordered]
    out = dict(owners)
    for k, p in enumerate(moved):
        out[p] = ordered[k % len(ordered)]
    return out


def restart_delay_s(attempt: int) -> float:
    """The wait before restart ``attempt`` (1, 2, ...) of a node: doubling, capped."""
    return float(min(RESTART_BACKOFF_MAX_S, RESTART_BACKOFF_S * 2 ** (attempt - 1)))


@dataclass(frozen=True)
class NodeRole:
    """What a node of a supervisor's cluster is told at start."""

    node_id: int
    nodes: dict[int, tuple[str, int]]
    owners: dict[int, int]
    #: The supervisor's claim on the warehouse (None: no warehouse).
    owner_epoch: int | None
    #: This process's incarnation of the node (the log refuses an older one's writes).
    incarnation: int = 0
    #: The pipe to the supervisor (heartbeats, handovers, group summaries); None: none.
    report_fd: int | None = None
    lease_timeout_ms: int = DEFAULT_NODE_LEASE_TIMEOUT_MS

    @property
    def port(self) -> int:
        return self.nodes[self.node_id][1]

    @property
    def owned(self) -> list[int]:
        return sorted(p for p, n in self.owners.items() if n == self.node_id)

    def coordinator_nodes(self, owners: dict[int, int]) -> dict[int, CoordinatorNode]:
        return {p: self.node(n) for p, n in owners.items()}

    def node(self, node_id: int) -> CoordinatorNode:
        host, port = self.nodes[node_id]
        return CoordinatorNode(node_id, host, port)

    def brokers(self) -> list[tuple[int, str, int]]:
        return [(n, host, port) for n, (host, port) in sorted(self.nodes.items())]

    def to_env(self) -> str:
        return json.dumps(
            {
                "node_id": self.node_id,
                "nodes": {str(n): list(a) for n, a in self.nodes.items()},
                "owners": {str(p): n for p, n in self.owners.items()},
                "owner_epoch": self.owner_epoch,
                "incarnation": self.incarnation,
                "report_fd": self.report_fd,
                "lease_timeout_ms": self.lease_timeout_ms,
            }
        )

    @classmethod
    def from_env(cls) -> NodeRole | None:
        raw = os.environ.get(NODE_ENV)
        if not raw:
            return None
        data = json.loads(raw)
        return cls(
            int(data["node_id"]),
            {int(n): (str(a[0]), int(a[1])) for n, a in data["nodes"].items()},
            {int(p): int(n) for p, n in data["owners"].items()},
            data["owner_epoch"],
            int(data.get("incarnation", 0)),
            data.get("report_fd"),
            int(data.get("lease_timeout_ms", DEFAULT_NODE_LEASE_TIMEOUT_MS)),
        )

    def report(self, message: dict[str, Any]) -> None:
        """One JSON line to the supervisor (nothing without a pipe, or once it is gone)."""
        if self.report_fd is None:
            return
        data = (json.dumps(message) + "\n").encode()
        with contextlib.suppress(OSError):
            while data:
                data = data[os.write(self.report_fd, data) :]

    async def heartbeat(self) -> None:
        """Renew this node's lease with the supervisor, from the event loop (a loop that hangs
        stops renewing it), every quarter of the lease timeout, until cancelled."""
        import asyncio

        while True:
            self.report({"heartbeat": self.incarnation})
            await asyncio.sleep(self.lease_timeout_ms / 4000)

    def follow(
        self,
        backend: Any,
        loop: Any,
        stdin: IO[str] | None = None,
        on_gone: Callable[[], None] | None = None,
        set_brokers: Callable[[list[tuple[int, str, int]]], None] | None = None,
    ) -> threading.Thread:
        """Apply the supervisor's assignments (JSON lines on ``stdin``, standard input by
        default: ``owners``, and ``hold``, the partitions gained that their previous owner
        still writes) to ``backend`` (an :class:`EmbeddedBackend`) on ``loop``, one after the
        other, reporting the partitions each gave up once their records are written
        (``released``); give ``set_brokers`` the nodes owning partitions (Metadata lists only
        them, as Kafka drops a dead broker); when the supervisor is gone (end of input), call
        ``on_gone``: by default stop this process (SIGTERM)."""
        import asyncio

        running: set[Any] = set()  # the assignments' tasks, referenced until done
        order = asyncio.Lock()

        async def apply(nodes: dict[int, CoordinatorNode], hold: list[int], seq: int) -> None:
            async with order:
                released = await backend.assign(nodes, hold)
                self.report({"released": released or [], "seq": seq})

        def start(nodes: dict[int, CoordinatorNode], hold: list[int], seq: int) -> None:
            if set_brokers is not None:
                live = {n.node_id: n for n in nodes.values()}
                set_brokers([(i, live[i].host, live[i].port) for i in sorted(live)])
            task = loop.create_task(apply(nodes, hold, seq))
            running.add(task)
            task.add_done_callback(running.discard)

        source = stdin if stdin is not None else sys.stdin

        def read() -> None:
            for line in source:
                if not line.strip():
                    continue
                message = json.loads(line)
                owners = {int(p): int(n) for p, n in message["owners"].items()}
                hold = [int(p) for p in message.get("hold", [])]
                seq = int(message.get("seq", 0))
                loop.call_soon_threadsafe(start, self.coordinator_nodes(owners), hold, seq)
            log.info("node %d: the supervisor is gone; stopping", self.node_id)
            if on_gone is not None:
                on_gone()
            else:
                os.kill(os.getpid(), signal.SIGTERM)

        thread = threading.Thread(target=read, name="gateway-node-control", daemon=True)
        thread.start()
        return thread


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen expects HOST:PORT, got {listen!r}")
    return host, int(port)


@dataclass
class _Node:
    """The supervisor's view of one node."""

    node_id: int
    incarnation: int = 0
    proc: subprocess.Popen[str] | None = None
    started_at: float = 0.0
    last_heartbeat: float | None = None
    ready_at: float | None = None
    #: Its lease lapsed: fenced in the log, stopped (SIGTERM, SIGKILL at ``kill_at``).
    fenced: bool = False
    kill_at: float | None = None
    #: Restarts in a row (reset once it served ``STABLE_AFTER_S``) and when the next is due.
    restarts: int = 0
    restart_at: float | None = None
    given_up: bool = False

    @property
    def serving(self) -> bool:
        """Running, ready and not fenced: it may be given partitions."""
        return self.proc is not None and self.ready_at is not None and not self.fenced


class GroupTables:
    """The one writer of ``group_state`` and ``group_history`` for a gateway cluster: the nodes
    send the summaries of their groups' changes (once the records behind them are in the log)
    and this thread writes them, batched, as the single gateway does; one writer, so no two
    MERGEs of ``group_state`` ever conflict."""

    def __init__(self, tables: Path, ownership: Any) -> None:
        from coordinator.stream.sink import DeltaSink, Housekeeping

        # Retention rewrites consumer_offsets, whose partitions the nodes write: not from here.
        self.sink = DeltaSink(
            tables, GROUPS_APP_ID, Housekeeping(retention_every_batches=0), ownership=ownership
        )
        last = self.sink.last_batch()
        self.batch_id = 0 if last is None else last + 1
        self.pending: list[dict[str, Any]] = []
        self.written = 0
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="gateway-group-tables", daemon=True)
        self._thread.start()

    def add(self, summaries: list[dict[str, Any]]) -> None:
        with self._cond:
            self.pending.extend(summaries)
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(60)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self.pending and not self._stop:
                    self._cond.wait()
                if not self.pending and self._stop:
                    return
                # gather what comes together (as the gateway's writer does)
                self._cond.wait(0.05)
                batch, self.pending = self.pending, []
            latest: dict[str, dict[str, Any]] = {}
            for summary in batch:  # one row per group per write, the last one
                latest.pop(summary["group_id"], None)
                latest[summary["group_id"]] = summary
            try:
                now = int(time.time() * 1000)
                self.sink.write_batch(
                    self.batch_id,
                    records=[],
                    responses=[],
                    groups=list(latest.values()),
                    rejected=[],
                    list_groups=[],
                    emitted_at_ms=now,
                    written_at_ms=now,
                )
                self.batch_id += 1
                self.written += len(latest)
            except Exception:
                log.exception("writing %d group summaries failed; trying again", len(latest))
                with self._cond:
                    self.pending[:0] = list(latest.values())
                    if self._stop:
                        return
                    self._cond.wait(1.0)


class Supervisor:
    """Starts the nodes and keeps every offsets partition owned by a live one (module doc)."""

    def __init__(
        self,
        host: str,
        port: int,
        processes: int,
        partitions: int,
        argv: list[str],
        ownership: Any = None,
        tables: Path | None = None,
        node_lease_timeout_ms: int = DEFAULT_NODE_LEASE_TIMEOUT_MS,
        kill_after_s: float = 30.0,
    ) -> None:
        self.host, self.port = host, port
        self.addresses = {i: (host, port + i) for i in range(processes)}
        self.partitions = partitions
        self.argv = argv
        self.ownership = ownership
        self.tables = tables
        self.node_lease_timeout_ms = node_lease_timeout_ms
        self.kill_after_s = kill_after_s
        self.nodes = {i: _Node(i) for i in range(processes)}
        self.preferred = initial_owners(partitions, processes)
        #: What the nodes are told: partition -> owning node.
        self.owners = dict(self.preferred)
        #: Partitions handed back to their preferred node that their interim owner has not
        #: released yet (partition -> that owner): it is still the log's writer for them.
        self.releasing: dict[int, int] = {}
        self.releasing_since = 0.0
        self.seq = 0
        self.events: queue.Queue[tuple[int, int, dict[str, Any] | None]] = queue.Queue()
        self.groups: GroupTables | None = None
        #: The thread reading each node's reports (its current process's).
        self._readers: dict[int, threading.Thread] = {}
        self._committed: dict[str, str] | None = None

    # --- the log's writers ---

    def _commit_writers(self) -> None:
        """The log's partition writers and node incarnations, as they must be now (a
        metadata commit; before any node is told to load what it gained)."""
        if self.ownership is None or self.tables is None:
            return
        from deltalake import DeltaTable

        from coordinator.stream.ownership import set_properties, writers_properties
        from coordinator.stream.schema import CONSUMER_OFFSETS

        writers = {p: self.releasing.get(p, o) for p, o in self.owners.items()}
        incarnations = {i: n.incarnation for i, n in self.nodes.items()}
        properties = writers_properties(dict(writers), incarnations)
        if properties == self._committed:
            return
        set_properties(self.ownership, DeltaTable(str(self.tables / CONSUMER_OFFSETS)), properties)
        self._committed = properties
        log.info("the log's writers: %s", properties)

    def publish(self) -> None:
        """Commit the writers, then tell every running node the owners (and what it holds)."""
        self._commit_writers()
        self.seq += 1
        line = (
            json.dumps(
                {
                    "owners": {str(p): n for p, n in self.owners.items()},
                    "hold": sorted(self.releasing),
                    "seq": self.seq,
                }
            )
            + "\n"
        )
        for node in self.nodes.values():
            if node.proc is not None and not node.fenced:
                with contextlib.suppress(OSError, ValueError):
                    assert node.proc.stdin is not None
                    node.proc.stdin.write(line)
                    node.proc.stdin.flush()

    # --- the nodes ---

    def spawn(self, node: _Node) -> None:
        read_fd, write_fd = os.pipe()
        role = NodeRole(
            node.node_id,
            self.addresses,
            self.owners,
            None if self.ownership is None else self.ownership.epoch,
            node.incarnation,
            write_fd,
            self.node_lease_timeout_ms,
        )
        try:
            node.proc = subprocess.Popen(
                [sys.executable, "-m", "coordinator", *self.argv],
                env={**os.environ, NODE_ENV: role.to_env()},
                stdin=subprocess.PIPE,
                text=True,
                pass_fds=(write_fd,),
            )
        finally:
            os.close(write_fd)
        node.started_at = time.monotonic()
        node.last_heartbeat = node.ready_at = node.kill_at = node.restart_at = None
        node.fenced = False
        reader = threading.Thread(
            target=self._read_reports,
            args=(node.node_id, node.incarnation, read_fd),
            name=f"gateway-node-{node.node_id}-reports",
            daemon=True,
        )
        reader.start()
        self._readers[node.node_id] = reader

    def _read_reports(self, node_id: int, incarnation: int, fd: int) -> None:
        with os.fdopen(fd, "r", encoding="utf-8") as reports:
            for line in reports:
                with contextlib.suppress(ValueError):
                    self.events.put((node_id, incarnation, json.loads(line)))
        self.events.put((node_id, incarnation, None))

    def on_report(self, node_id: int, incarnation: int, message: dict[str, Any]) -> None:
        node = self.nodes[node_id]
        if incarnation != node.incarnation or node.fenced:
            return  # a fenced process's word counts for nothing
        now = time.monotonic()
        if "heartbeat" in message:
            node.last_heartbeat = now
        if message.get("ready") and node.ready_at is None:
            node.ready_at = now
            node.last_heartbeat = now
            log.info("node %d (incarnation %d) serves", node_id, incarnation)
            self.rebalance()
        if "released" in message:
            done = [int(p) for p in message["released"] if self.releasing.get(int(p)) == node_id]
            for p in done:
                del self.releasing[p]
            if done and not self.releasing:
                self.finish_handover()
        if "groups" in message and self.groups is not None:
            self.groups.add(message["groups"])

    def on_exit(self, node: _Node) -> None:
        assert node.proc is not None
        code = node.proc.returncode
        served = node.ready_at is not None and time.monotonic() - node.ready_at >= STABLE_AFTER_S
        node.proc = node.ready_at = node.last_heartbeat = None
        node.incarnation += 1  # whatever it was, that process writes no more
        log.warning("node %d exited with %s", node.node_id, code)
        print(
            f"coordinator gateway: node {node.node_id} exited ({code})", file=sys.stderr, flush=True
        )
        node.restarts = 0 if served else node.restarts
        if node.restarts >= MAX_RESTARTS:
            node.given_up = True
            log.error(
                "node %d: %d restarts in a row failed; not restarting it",
                node.node_id,
                MAX_RESTARTS,
            )
            print(f"coordinator gateway: node {node.node_id} given up", file=sys.stderr, flush=True)
        else:
            node.restarts += 1
            delay = restart_delay_s(node.restarts)
            node.restart_at = time.monotonic() + delay
            log.warning("node %d: restart %d in %.1f s", node.node_id, node.restarts, delay)
        self.rebalance()

    def fence(self, node: _Node, why: str) -> None:
        """The node's lease lapsed: fence it in the log (its incarnation is no longer the
        log's, its partitions have other writers), move its partitions, and stop it."""
        assert node.proc is not None
        node.fenced = True
        node.incarnation += 1
        node.kill_at = time.monotonic() + self.kill_after_s
        log.error("node %d fenced: %s", node.node_id, why)
        print(
            f"coordinator gateway: node {node.node_id} fenced ({why})", file=sys.stderr, flush=True
        )
        self.rebalance()  # commits the fence before anyone loads its partitions
        with contextlib.suppress(OSError):
            node.proc.send_signal(signal.SIGTERM)

    def rebalance(self) -> None:
        """Partitions of dead or fenced nodes go to serving ones; a serving node's preferred
        partitions come back to it in a fenced handover (one handover at a time)."""
        serving = [i for i, n in self.nodes.items() if n.serving]
        changed = False
        for p, holder in list(self.releasing.items()):
            if not self.nodes[holder].serving:  # died or fenced while releasing
                del self.releasing[p]
                changed = True
        gone = [i for i, n in self.nodes.items() if n.proc is None or n.fenced]
        orphans = [p for p, n in self.owners.items() if n in gone]
        if serving and orphans:
            self.owners = reassign(self.owners, serving)
            for p in [p for p, holder in self.releasing.items() if self.owners[p] == holder]:
                del self.releasing[p]  # back with its interim owner, which loads it again
            changed = True
        if serving and not self.releasing:
            back = {
                p: n
                for p, n in self.owners.items()
                if self.preferred[p] != n and self.nodes[self.preferred[p]].serving
            }
            if back:
                self.releasing = back
                self.releasing_since = time.monotonic()
                for p in back:
                    self.owners[p] = self.preferred[p]
                log.info("handing partitions %s back to their preferred nodes", sorted(back))
                changed = True
        if changed:
            self.publish()
        else:
            self._commit_writers()  # an incarnation may have changed

    def finish_handover(self) -> None:
        """Every interim owner released its partitions: the log names the new writers, and
        they load the partitions."""
        log.info("handover done")
        self.publish()
        self.rebalance()

    def tick(self) -> None:
        now = time.monotonic()
        for node in self.nodes.values():
            if node.proc is None:
                continue
            if node.proc.poll() is not None:
                self.on_exit(node)
                continue
            if node.fenced:
                if node.kill_at is not None and now >= node.kill_at:
                    log.error("node %d did not stop: SIGKILL", node.node_id)
                    node.proc.kill()
                    node.kill_at = None
                continue
            lease = self.node_lease_timeout_ms / 1000
            if node.last_heartbeat is None:
                deadline = node.started_at + max(lease, START_TIMEOUT_MS / 1000)
            else:
                deadline = node.last_heartbeat + lease
            if now >= deadline:
                self.fence(node, f"no heartbeat for {lease:g} s")
        if self.releasing and now - self.releasing_since > self.node_lease_timeout_ms / 1000:
            for holder in set(self.releasing.values()):
                if self.nodes[holder].serving:
                    self.fence(self.nodes[holder], "did not release its partitions")
        for node in self.nodes.values():
            if node.proc is None and node.restart_at is not None and now >= node.restart_at:
                log.warning("node %d: restarting (incarnation %d)", node.node_id, node.incarnation)
                print(
                    f"coordinator gateway: node {node.node_id} restarting",
                    file=sys.stderr,
                    flush=True,
                )
                self.spawn(node)

    def alive(self) -> bool:
        return any(n.proc is not None or (n.restart_at is not None) for n in self.nodes.values())

    def run(self, stopping: threading.Event) -> int:
        if self.ownership is not None and self.tables is not None:
            self._commit_writers()
            _name_app_ids(self.ownership, self.tables, len(self.nodes))
            self.groups = GroupTables(self.tables, self.ownership)
        for node in self.nodes.values():
            self.spawn(node)
        pids = ", ".join(str(n.proc.pid) for n in self.nodes.values() if n.proc is not None)
        last = self.port + len(self.nodes) - 1
        print(
            f"coordinator gateway: {len(self.nodes)} nodes on {self.host}:{self.port}-{last} "
            f"(pids {pids})",
            flush=True,
        )
        while not stopping.is_set():
            try:
                node_id, incarnation, message = self.events.get(timeout=WATCH_INTERVAL_S)
            except queue.Empty:
                pass
            else:
                if message is not None:
                    self.on_report(node_id, incarnation, message)
                continue_draining = True
                while continue_draining:
                    try:
                        node_id, incarnation, message = self.events.get_nowait()
                    except queue.Empty:
                        continue_draining = False
                    else:
                        if message is not None:
                            self.on_report(node_id, incarnation, message)
            self.tick()
            if not self.alive():
                return 1
        return 0

    def stop(self) -> int:
        status = 0
        running = [n.proc for n in self.nodes.values() if n.proc is not None]
        for proc in running:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode not in (0, -signal.SIGTERM):
                status = 1
        # What the nodes said while stopping (their groups' last summaries, written as they
        # flushed their log) still goes to the group tables.
        for reader in self._readers.values():
            reader.join(10)
        while True:
            try:
                node_id, incarnation, message = self.events.get_nowait()
            except queue.Empty:
                break
            if message and "groups" in message:
                self.on_report(node_id, incarnation, {"groups": message["groups"]})
        if self.groups is not None:
            self.groups.stop()
        return status


def _name_app_ids(ownership: Any, tables: Path, nodes: int) -> None:
    """Record on ``responses`` the application ids writing the warehouse (readers' "now"):
    this cluster's, the single gateway's and any named before (their rows stay in the log,
    numbered by their own batches), so that no writer's rows fall outside "now"."""
    from deltalake import DeltaTable

    from coordinator.gateway.embedded import APP_ID
    from coordinator.stream.ownership import set_properties
    from coordinator.stream.schema import RESPONSES, WRITER_APP_IDS_PROPERTY

    table = DeltaTable(str(tables / RESPONSES))
    named = table.metadata().configuration.get(WRITER_APP_IDS_PROPERTY, "")
    ids = [APP_ID, *(node_app_id(i) for i in range(nodes)), GROUPS_APP_ID]
    ids += [a for a in named.split(",") if a and a not in ids]
    if named != ",".join(ids):
        set_properties(ownership, table, {WRITER_APP_IDS_PROPERTY: ",".join(ids)})


def supervise(
    listen: str,
    processes: int,
    partitions: int,
    warehouse: str | None,
    lease_timeout_ms: int,
    argv: list[str],
    node_lease_timeout_ms: int = DEFAULT_NODE_LEASE_TIMEOUT_MS,
    kill_after_s: float = 30.0,
) -> int:
    """Start ``processes`` nodes running ``argv`` (a ``coordinator gateway`` command line) and
    keep their partitions owned until stopped (module doc). Returns the exit status."""
    host, port = parse_listen(listen)
    if port == 0:
        raise ValueError("--processes needs a fixed --listen port (node i listens on it + i)")
    if processes > partitions:
        raise ValueError(f"--processes {processes}: more nodes than the {partitions} partitions")
    if node_lease_timeout_ms < 1:
        raise ValueError("the node lease timeout must be at least 1 ms")
    ownership = None
    tables = None
    if warehouse is not None:
        from coordinator.stream.ownership import acquire
        from coordinator.stream.schema import TABLES, Warehouse

        paths = Warehouse.at(Path(warehouse))
        ownership = acquire(
            paths.root,
            "coordinator gateway --processes",
            lease_timeout_ms,
            tables=[paths.table(name) for name in TABLES],
        )
        # The tables are created here, once: nodes opening a new warehouse together would race.
        from coordinator.gateway.embedded import APP_ID
        from coordinator.stream.sink import DeltaSink

        paths.tables.mkdir(parents=True, exist_ok=True)
        DeltaSink(paths.tables, APP_ID, ownership=ownership)
        tables = paths.tables
    supervisor = Supervisor(
        host,
        port,
        processes,
        partitions,
        argv,
        ownership,
        tables,
        node_lease_timeout_ms,
        kill_after_s,
    )
    stopping = threading.Event()

    def stop(*_: Any) -> None:
        stopping.set()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    status = 1
    try:
        status = supervisor.run(stopping)
    finally:
        status = max(status, supervisor.stop())
        if ownership is not None:
            ownership.release()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status
