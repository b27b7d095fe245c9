"""``coordinator gateway --processes N``: N gateway processes, each the coordinator of a slice of
the ``__consumer_offsets`` partitions, as the brokers of a Kafka cluster are.

One Python process serves one core; Kafka spreads groups over brokers by their offsets
partition (``partitionFor(group)``) and so does this: node ``i`` listens on the ``--listen``
port + ``i`` and starts as the coordinator of the partitions ``p`` with ``p % N == i``. Every
node lists all N in Metadata, and FindCoordinator sends each group to the node owning its
partition; a request that reaches another node is answered NOT_COORDINATOR by the engine, which
sends Kafka clients back to FindCoordinator.

**The supervisor** (the process the command starts) runs no gateway: it starts the N nodes (the
same command line, each told its part through ``COORDINATOR_GATEWAY_NODE``), and is the
controller that moves partitions. When a node dies (a crash, ``kill -9``), its partitions go to
the live nodes, round robin; each live node is sent the new owner of every partition (a JSON
line on its standard input) and loads the partitions it gained from the log (Kafka's
``handleGroupImmigration``: ``begin_loading``, then ``load_partition`` from the log's records,
requests meanwhile answered COORDINATOR_LOAD_IN_PROGRESS). Until then clients of those groups
find the dead node's port closed, or are sent to it by FindCoordinator, and retry. A dead node is
not restarted; the supervisor stops (exit status 1) when none is left, and stops every node on
SIGTERM or SIGINT. A node whose supervisor is gone (its standard input closed) stops too.

**One writer per partition.** With ``--log-warehouse`` the supervisor claims the warehouse
(:mod:`coordinator.stream.ownership`: one owner per warehouse, its lease and epoch) and the nodes
write under that claim: each commits only the records of the partitions it owns, under an app
id of its own (``coordinator-gateway-node-<i>``), every commit fenced by the claim's epoch (a
newer owner of the warehouse stops them all). A partition changes writer only once its previous
writer is dead (the supervisor saw it exit), so two nodes never write one partition, and the new
writer numbers its records after the last one the old writer committed (it reopens the log
first). Without a warehouse the groups live in memory: a dead node's groups are lost and their
members rejoin elsewhere.

What is not kept with ``--processes``: ``group_state``/``group_history`` (the operator tools'
summaries) are not written (several writers' MERGEs of one table would conflict); the log is.
A node that hangs without dying keeps its partitions (no lease per node).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
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
#: How often the supervisor looks for dead nodes.
WATCH_INTERVAL_S = 0.05


def initial_owners(partitions: int, nodes: int) -> dict[int, int]:
    """Partition -> node: ``p % nodes``."""
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


@dataclass(frozen=True)
class NodeRole:
    """What a node of a supervisor's cluster is told at start."""

    node_id: int
    nodes: dict[int, tuple[str, int]]
    owners: dict[int, int]
    #: The supervisor's claim on the warehouse (None: no warehouse).
    owner_epoch: int | None

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
        )

    def follow(
        self,
        backend: Any,
        loop: Any,
        stdin: IO[str] | None = None,
        on_gone: Callable[[], None] | None = None,
        set_brokers: Callable[[list[tuple[int, str, int]]], None] | None = None,
    ) -> threading.Thread:
        """Apply the supervisor's assignments (JSON lines on ``stdin``, standard input by
        default) to ``backend`` (an :class:`EmbeddedBackend`) on ``loop``, and give
        ``set_brokers`` the nodes still alive (those owning partitions: Metadata lists only
        them, as Kafka drops a dead broker); when the supervisor is gone (end of input), call
        ``on_gone``: by default stop this process (SIGTERM)."""
        source = stdin if stdin is not None else sys.stdin
        running: set[Any] = set()  # the assignments' tasks, referenced until done

        def start(nodes: dict[int, CoordinatorNode]) -> None:
            if set_brokers is not None:
                live = {n.node_id: n for n in nodes.values()}
                set_brokers([(i, live[i].host, live[i].port) for i in sorted(live)])
            task = loop.create_task(backend.assign(nodes))
            running.add(task)
            task.add_done_callback(running.discard)

        def read() -> None:
            for line in source:
                if not line.strip():
                    continue
                owners = {int(p): int(n) for p, n in json.loads(line)["owners"].items()}
                loop.call_soon_threadsafe(start, self.coordinator_nodes(owners))
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


def supervise(
    listen: str,
    processes: int,
    partitions: int,
    warehouse: str | None,
    lease_timeout_ms: int,
    argv: list[str],
) -> int:
    """Start ``processes`` nodes running ``argv`` (a ``coordinator gateway`` command line) and
    keep their partitions owned until stopped (module doc). Returns the exit status."""
    host, port = parse_listen(listen)
    if port == 0:
        raise ValueError("--processes needs a fixed --listen port (node i listens on it + i)")
    if processes > partitions:
        raise ValueError(f"--processes {processes}: more nodes than the {partitions} partitions")
    ownership = None
    if warehouse is not None:
        from coordinator.stream.ownership import acquire
        from coordinator.stream.schema import TABLES, Warehouse

        paths = Warehouse.at(Path(warehouse))
        tables = [paths.table(name) for name in TABLES]
        ownership = acquire(
            paths.root, "coordinator gateway --processes", lease_timeout_ms, tables=tables
        )
        # The tables are created here, once: nodes opening a new warehouse together would race.
        from coordinator.gateway.embedded import APP_ID
        from coordinator.stream.sink import DeltaSink

        paths.tables.mkdir(parents=True, exist_ok=True)
        DeltaSink(paths.tables, APP_ID, ownership=ownership)
    nodes = {i: (host, port + i) for i in range(processes)}
    owners = initial_owners(partitions, processes)
    epoch = None if ownership is None else ownership.epoch
    children: dict[int, subprocess.Popen[str]] = {}
    stopping = threading.Event()

    def stop(*_: Any) -> None:
        stopping.set()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    status = 0
    try:
        for i in range(processes):
            role = NodeRole(i, nodes, owners, epoch)
            children[i] = subprocess.Popen(
                [sys.executable, "-m", "coordinator", *argv],
                env={**os.environ, NODE_ENV: role.to_env()},
                stdin=subprocess.PIPE,
                text=True,
            )
        print(
            f"coordinator gateway: {processes} nodes on {host}:{port}-{port + processes - 1} "
            f"(pids {', '.join(str(c.pid) for c in children.values())})",
            flush=True,
        )
        while not stopping.wait(WATCH_INTERVAL_S):
            dead = [i for i, c in children.items() if c.poll() is not None]
            if not dead:
                continue
            for i in dead:
                code = children.pop(i).returncode
                log.warning("node %d exited with %s; moving its partitions", i, code)
                print(f"coordinator gateway: node {i} exited ({code})", file=sys.stderr, flush=True)
            if not children:
                status = 1
                break
            owners = reassign(owners, list(children))
            line = json.dumps({"owners": {str(p): n for p, n in owners.items()}}) + "\n"
            for child in children.values():
                with contextlib.suppress(OSError):
                    assert child.stdin is not None
                    child.stdin.write(line)
                    child.stdin.flush()
    finally:
        for child in children.values():
            with contextlib.suppress(OSError):
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for child in children.values():
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.returncode not in (0, -signal.SIGTERM):
                status = 1
        if ownership is not None:
            ownership.release()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status
