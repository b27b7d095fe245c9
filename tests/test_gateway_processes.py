"""``coordinator gateway --processes N``: nodes that each coordinate a slice of the offsets
partitions, FindCoordinator routing, NOT_COORDINATOR, and a node's death (kill -9) moving its
partitions to the others, which load them from the shared log, under real clients."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.bench.gateway import free_port
from coordinator.gateway import codec
from coordinator.gateway.cluster import initial_owners, reassign
from coordinator.log.partitioning import partition_for
from tests import client_scenarios as sc
from tests.gateway_support import REQUESTS, call, until

REPO = Path(__file__).resolve().parent.parent


def test_partitions_start_round_robin_and_a_dead_node_s_move_to_the_live_ones() -> None:
    owners = initial_owners(50, 3)
    assert [p for p, n in owners.items() if n == 1] == list(range(1, 50, 3))
    after = reassign(owners, [0, 2])
    moved = [p for p in owners if owners[p] == 1]
    assert all(after[p] == owners[p] for p in owners if owners[p] != 1)  # the others stay
    assert {after[p] for p in moved} == {0, 2}
    shares = [sum(1 for p in moved if after[p] == n) for n in (0, 2)]
    assert abs(shares[0] - shares[1]) <= 1
    assert set(reassign(after, [2]).values()) == {2}
    with pytest.raises(ValueError):
        reassign(owners, [])


class Cluster:
    def __init__(
        self,
        tmp: Path,
        processes: int,
        warehouse: Path | None,
        extra: list[str] | None = None,
        conf: Path | None = None,
        base: int | None = None,
    ) -> None:
        self.base = base or free_port(processes)
        self.log = tmp / "cluster.log"
        cmd = [sys.executable, "-m", "coordinator", "gateway", "--embedded"]
        cmd += ["--listen", f"127.0.0.1:{self.base}", "--gateway-conf", str(conf or os.devnull)]
        cmd += ["--processes", str(processes)]
        if conf is None:
            cmd += ["--topic", "t:6", "--topic", "other:2"]
        cmd += ["--set", "group.initial.rebalance.delay.ms=0"]
        if warehouse is not None:
            cmd += ["--log-warehouse", str(warehouse)]
        cmd += extra or []
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.processes = processes
        ready = until(lambda: self.text().count("coordinator gateway listening") == processes, 120)
        if not ready:  # (a node that could not listen, say): leave nothing running
            self.stop()
            raise AssertionError(self.text())

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def pids(self) -> list[int]:
        found = re.search(r"\(pids ([\d, ]+)\)", self.text())
        assert found is not None, self.text()
        return [int(p) for p in found.group(1).split(", ")]

    def port(self, node: int) -> int:
        return self.base + node

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def _group_on(node: int, nodes: int, prefix: str) -> str:
    return next(
        f"{prefix}-{i}" for i in range(1000) if partition_for(f"{prefix}-{i}", 50) % nodes == node
    )


@pytest.mark.slow
def test_find_coordinator_routes_each_group_to_its_partition_s_node(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, None)
    try:
        metadata = call(cluster.port(1), codec.METADATA, 4, REQUESTS[codec.METADATA])
        assert [(b["node_id"], b["port"]) for b in metadata["brokers"]] == [
            (0, cluster.port(0)),
            (1, cluster.port(1)),
        ]
        for node in (0, 1):
            group = _group_on(node, 2, "route")
            for asked in (0, 1):
                found = call(cluster.port(asked), codec.FIND_COORDINATOR, 1, {"key": group})
                assert (found["error_code"], found["node_id"]) == (0, node)
                assert found["port"] == cluster.port(node)
            # the other node is not the coordinator: NOT_COORDINATOR (16)
            join = dict(REQUESTS[codec.JOIN_GROUP], group_id=group)
            wrong = call(cluster.port(1 - node), codec.JOIN_GROUP, 5, join)
            assert wrong["error_code"] == 16
            right = call(cluster.port(node), codec.JOIN_GROUP, 5, join)
            assert right["error_code"] == 79  # MEMBER_ID_REQUIRED: served
    finally:
        assert cluster.stop() == 0


def _until_answered(call_: Any, seconds: float) -> Any:
    """``call_()``, retried while the client raises (its coordinator moving) for ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call_()
        except sc.MemberGone:
            raise  # no retry brings its client back
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _committed(port: int, group: str) -> dict[Any, Any]:
    """The group's committed offsets of topic t, read from the gateway on ``port``."""
    fetched = call(
        port,
        codec.OFFSET_FETCH,
        5,
        {"group_id": group, "topics": [{"name": "t", "partition_indexes": list(range(6))}]},
    )
    return {
        ("t", p["partition_index"]): p["committed_offset"]
        for p in fetched["topics"][0]["partitions"]
    }


def _coordinator_of(cluster: Cluster, group: str) -> int | None:
    try:
        found = call(cluster.port(0), codec.FIND_COORDINATOR, 1, {"key": group})
    except OSError:
        return None
    return int(found["node_id"]) if found["error_code"] == 0 else None


def _carry_on(
    cluster: Cluster, members: list[Any], expected: dict[Any, int], then: dict[Any, int]
) -> None:
    """The members cover the topic again (a rebalance may still be under way when they first
    do: read until one assignment answers for every partition), read ``expected`` back and
    commit ``then``. A failure says what the supervisor and the nodes logged meanwhile."""
    try:
        _carry_on_unlogged(members, expected, then)
    except (AssertionError, TimeoutError) as failed:
        raise AssertionError(
            f"{failed!r}; the cluster's log:\n{cluster.text()[-8000:]}\n"
            f"what the nodes answer now:\n{_probe(cluster, members[0].group)}\n"
            f"where the threads are:\n{_stacks()}"
        ) from failed


def _probe(cluster: Cluster, group: str) -> str:
    """Each node's FindCoordinator and OffsetFetch answers for ``group``, asked directly."""
    lines = []
    for node in range(cluster.processes):
        for name, api, version, body in (
            ("FindCoordinator", codec.FIND_COORDINATOR, 1, {"key": group}),
            ("OffsetFetch", codec.OFFSET_FETCH, 5, {"group_id": group, "topics": None}),
        ):
            try:
                lines.append(f"node {node} {name}: {call(cluster.port(node), api, version, body)}")
            except Exception as error:  # a dead node, a timeout: say so
                lines.append(f"node {node} {name}: {error!r}")
    return "\n".join(lines)


def _stacks() -> str:
    """Where each thread of this process is (the members', their clients' own)."""
    import threading
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    return "\n".join(
        f"{names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame)[-8:])
        for ident, frame in frames.items()
        if ident != threading.get_ident()
    )


def _carry_on_unlogged(members: list[Any], expected: dict[Any, int], then: dict[Any, int]) -> None:
    read: dict[Any, Any] = {}

    def covered() -> bool:
        read.clear()
        if not sc.disjoint_cover(list(members)):
            return False
        for m in members:
            read.update(_until_answered(lambda m=m: m.committed(m.assigned()), sc.SETTLE_S))
        return set(read) == set(expected)

    sc.wait_for(covered, sc.SETTLE_S, lambda: (sc.shares(members), read))
    assert read == expected, read
    for m in members:
        mine = {tp: then[tp] for tp in m.assigned()}
        _until_answered(lambda m=m, mine=mine: m.commit(mine), sc.SETTLE_S)


def _reread(warehouse: Path, group: str) -> dict[Any, Any]:
    """The group's commits as a single gateway on the same warehouse reads them back."""
    from tests.gateway_support import Running

    again = Running(warehouse=str(warehouse))
    try:
        return _committed(again.port, group)
    finally:
        again.stop()


@pytest.mark.slow
@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_a_killed_node_s_groups_carry_on_elsewhere_and_come_back_when_it_restarts(
    tmp_path: Path, client: str
) -> None:
    """kill -9 of a node: its groups move to the survivor (loaded from the log), the
    supervisor restarts the node, and the survivor hands its partitions back in a fenced
    handover; real clients carry on throughout with their commits intact."""
    cls = sc.CLIENTS[client]
    cluster = Cluster(tmp_path, 2, tmp_path / "wh")
    victim, survivor = 1, 0
    group = _group_on(victim, 2, client)
    everything = [("t", p) for p in range(sc.PARTITIONS)]
    members = [cls(cluster.port(survivor), group, f"{client}-{i}") for i in range(2)]
    before = {tp: 100 + tp[1] for tp in everything}
    during = {tp: 200 + tp[1] for tp in everything}
    after = {tp: 300 + tp[1] for tp in everything}
    try:
        sc.wait_for(
            lambda: sc.disjoint_cover(list(members)), sc.SETTLE_S, lambda: sc.shares(members)
        )
        for m in members:
            m.commit({tp: before[tp] for tp in m.assigned()})
        old_pid = cluster.pids()[victim]
        os.kill(old_pid, signal.SIGKILL)
        assert until(lambda: f"node {victim} exited" in cluster.text(), 60), cluster.text()
        _carry_on(cluster, members, before, during)
        # Restarted (with backoff), it takes its partitions back once the survivor let go.
        assert until(lambda: f"node {victim} restarting" in cluster.text(), 60), cluster.text()
        assert until(lambda: _coordinator_of(cluster, group) == victim, 120), cluster.text()
        assert until(lambda: "handover done" in cluster.text(), 120), cluster.text()
        _carry_on(cluster, members, during, after)
        assert _until_answered(lambda: _committed(cluster.port(victim), group), 60) == after
        metadata = call(cluster.port(survivor), codec.METADATA, 4, REQUESTS[codec.METADATA])
        assert [b["node_id"] for b in metadata["brokers"]] == [survivor, victim]
    finally:
        for m in members:
            m.close()
        cluster.stop()
    assert _reread(tmp_path / "wh", group) == after


@pytest.mark.slow
def test_a_hung_node_is_fenced_its_groups_move_and_it_writes_nothing_when_it_wakes(
    tmp_path: Path,
) -> None:
    """SIGSTOP on a node: its lease lapses, the supervisor fences it in the log and moves its
    partitions; clients carry on through the other node. A commit sent to the stopped node is
    never acknowledged nor written once it wakes (SIGCONT): it is fenced, exits, and its
    restart takes the partitions back."""
    from coordinator.stream.schema import Warehouse

    client = "confluent-kafka"
    cluster = Cluster(tmp_path, 2, tmp_path / "wh", ["--node-lease-timeout-ms", "3000"])
    victim, survivor = 1, 0
    group = _group_on(victim, 2, "hung")
    everything = [("t", p) for p in range(sc.PARTITIONS)]
    members = [sc.CLIENTS[client](cluster.port(survivor), group, f"hung-{i}") for i in range(2)]
    before = {tp: 100 + tp[1] for tp in everything}
    during = {tp: 200 + tp[1] for tp in everything}
    after = {tp: 300 + tp[1] for tp in everything}
    stale: list[Any] = []
    pid = cluster.pids()[victim]
    try:
        sc.wait_for(
            lambda: sc.disjoint_cover(list(members)), sc.SETTLE_S, lambda: sc.shares(members)
        )
        for m in members:
            m.commit({tp: before[tp] for tp in m.assigned()})
        os.kill(pid, signal.SIGSTOP)
        # A commit the hung node receives (the kernel queues it): answered later, if ever.
        import threading

        def commit_to_the_hung_node() -> None:
            try:
                stale.append(_commit(cluster.port(victim), group, 999_999))
            except Exception as error:  # closed or timed out: not acknowledged
                stale.append(error)

        sender = threading.Thread(target=commit_to_the_hung_node)
        sender.start()
        assert until(lambda: f"node {victim} fenced" in cluster.text(), 60), cluster.text()
        loads = f"node {survivor} loads offsets partitions"
        assert until(lambda: loads in cluster.text(), 60), cluster.text()
        os.kill(pid, signal.SIGCONT)  # within the supervisor's grace before SIGKILL
        sender.join(60)
        assert stale and stale[0] != 0, stale  # never acknowledged
        assert until(lambda: not _alive(pid), 60), cluster.text()
        _carry_on(cluster, members, before, during)
        assert until(lambda: f"node {victim} restarting" in cluster.text(), 60), cluster.text()
        assert until(lambda: "handover done" in cluster.text(), 120), cluster.text()
        _carry_on(cluster, members, during, after)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGCONT)
        for m in members:
            m.close()
        cluster.stop()
    from coordinator.stream.delta_read import read_table

    log_table = Warehouse.at(tmp_path / "wh").tables / "consumer_offsets"
    rows = read_table(log_table, columns=["group_id", "committed_offset"]).to_pylist()
    assert 999_999 not in [r["committed_offset"] for r in rows if r["group_id"] == group]
    assert _reread(tmp_path / "wh", group) == after


def _commit(port: int, group: str, offset: int) -> int:
    body = dict(REQUESTS[codec.OFFSET_COMMIT], group_id=group)
    body["topics"] = [
        {
            "name": "t",
            "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}
            ],
        }
    ]
    answer = call(port, codec.OFFSET_COMMIT, 5, body)
    return int(answer["topics"][0]["partitions"][0]["error_code"])


@pytest.mark.slow
def test_nodes_write_one_log_together_each_its_own_partitions(tmp_path: Path) -> None:
    import threading

    from coordinator.stream.rebuild import read_log
    from coordinator.stream.schema import Warehouse

    warehouse = tmp_path / "wh"
    cluster = Cluster(tmp_path, 2, warehouse)
    groups = {node: _group_on(node, 2, "together") for node in (0, 1)}
    errors: list[int] = []

    def commits(node: int) -> None:
        for offset in range(1, 31):
            code = _commit(cluster.port(node), groups[node], offset)
            if code:
                errors.append(code)

    try:
        threads = [threading.Thread(target=commits, args=(node,)) for node in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert errors == []
    finally:
        assert cluster.stop() == 0
    rows = read_log(Warehouse.at(warehouse).tables).to_pylist()
    for node, group in groups.items():
        partition = partition_for(group, 50)
        offsets = [r["offset"] for r in rows if r["offsets_partition"] == partition]
        assert offsets == list(range(30)), (node, offsets)  # each record once, in order


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_the_nodes_stop_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, None)
    pids = cluster.pids()
    try:
        cluster.proc.kill()
        cluster.proc.wait(30)
        assert until(lambda: not any(_alive(pid) for pid in pids), 60), cluster.text()
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_node_learns_its_part_from_the_environment_and_follows_its_supervisor() -> None:
    import asyncio
    import io
    import threading

    from coordinator.gateway.cluster import NODE_ENV, NodeRole

    role = NodeRole(1, {0: ("h", 9000), 1: ("h", 9001)}, initial_owners(50, 2), 4)
    os.environ[NODE_ENV] = role.to_env()
    try:
        assert NodeRole.from_env() == role
    finally:
        del os.environ[NODE_ENV]
    assert NodeRole.from_env() is None
    assert role.port == 9001 and role.owned == list(range(1, 50, 2))
    assert role.brokers() == [(0, "h", 9000), (1, "h", 9001)]

    assigned: list[dict[int, Any]] = []
    brokers: list[Any] = []
    gone = threading.Event()

    class Backend:
        async def assign(self, owners: dict[int, Any], hold: list[int]) -> list[int]:
            assigned.append(owners)
            return []

    loop = asyncio.new_event_loop()
    try:
        line = '{"owners": {"0": 1, "1": 1}}\n'
        role.follow(
            Backend(), loop, io.StringIO(line), on_gone=gone.set, set_brokers=brokers.append
        ).join(10)
        assert gone.is_set()
        loop.run_until_complete(asyncio.sleep(0.05))
    finally:
        loop.close()
    assert [{p: (n.node_id, n.port) for p, n in a.items()} for a in assigned] == [
        {0: (1, 9001), 1: (1, 9001)}
    ]
    assert brokers == [[(1, "h", 9001)]]  # node 0 owns nothing any more: not listed


def test_a_node_loads_the_partitions_it_gains_from_the_log_another_node_wrote(
    tmp_path: Path,
) -> None:
    """Two embedded back ends in this process write one warehouse under one claim, each its own
    partitions; one stops (its writer is gone) and the other, assigned its partitions, loads
    them from the log: the commits are there, and new ones follow them in the log."""
    import asyncio

    from coordinator.config import CoordinatorConfig
    from coordinator.engine import CoordinatorNode
    from coordinator.gateway.embedded import APP_ID, EmbeddedBackend
    from coordinator.stream.ownership import acquire
    from coordinator.stream.rebuild import read_log
    from coordinator.stream.schema import TABLES, Warehouse
    from coordinator.stream.sink import DeltaSink
    from tests.gateway_support import Running

    paths = Warehouse.at(tmp_path / "wh")
    owner = acquire(paths.root, "test", tables=[paths.table(n) for n in TABLES])
    paths.tables.mkdir(parents=True, exist_ok=True)
    DeltaSink(paths.tables, APP_ID, ownership=owner)
    owners = initial_owners(50, 2)
    nodes = {0: CoordinatorNode(0, "127.0.0.1", 1), 1: CoordinatorNode(1, "127.0.0.1", 2)}
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0)

    def node(i: int) -> Running:
        backend = EmbeddedBackend(
            config,
            paths.root,
            owned_partitions=[p for p, n in owners.items() if n == i],
            partition_owners={p: nodes[n] for p, n in owners.items()},
            app_id=f"node-{i}",
            owner_epoch=owner.epoch,
            write_summaries=False,
        )
        return Running(backend=backend, config=config)

    group = _group_on(1, 2, "gain")
    first, second = node(0), node(1)
    try:
        assert _commit(second.port, group, 5) == 0
        assert _commit(first.port, group, 6) == 16  # NOT_COORDINATOR
        found = call(first.port, codec.FIND_COORDINATOR, 1, {"key": group})
        assert found["node_id"] == 1
        second.stop()
        backend = first.gateway.backend
        everything = {p: nodes[0] for p in range(50)}
        asyncio.run_coroutine_threadsafe(backend.assign(everything), first.loop).result(60)
        fetched = call(
            first.port,
            codec.OFFSET_FETCH,
            5,
            {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}]},
        )
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 5
        assert _commit(first.port, group, 7) == 0
    finally:
        first.stop()
        owner.release()
    rows = read_log(paths.tables).to_pylist()
    partition = partition_for(group, 50)
    offsets = [r["offset"] for r in rows if r["offsets_partition"] == partition]
    assert offsets == [0, 1], offsets  # the second writer numbered after the first


def test_a_node_s_log_writes_are_refused_once_its_partitions_or_its_incarnation_moved(
    tmp_path: Path,
) -> None:
    """The fence under a node's writes: the supervisor's metadata commit naming other writers
    makes a node's commit read before it fail, and the node, reading again, refuses to write a
    partition it no longer owns (or anything, once its incarnation is not the log's); its
    other partitions' records still go through."""
    from deltalake import DeltaTable

    from coordinator.log.records import BLANK_RECORD
    from coordinator.stream.delta_read import read_table
    from coordinator.stream.ownership import (
        PartitionWriter,
        WriterFenced,
        acquire,
        set_properties,
        writers_properties,
    )
    from coordinator.stream.schema import CONSUMER_OFFSETS, TABLES, Warehouse
    from coordinator.stream.sink import DeltaSink

    paths = Warehouse.at(tmp_path / "wh")
    owner = acquire(paths.root, "test", tables=[paths.table(n) for n in TABLES], heartbeat=False)
    try:
        paths.tables.mkdir(parents=True, exist_ok=True)
        DeltaSink(paths.tables, "supervisor", ownership=owner)
        log_table = DeltaTable(str(paths.tables / CONSUMER_OFFSETS))
        set_properties(owner, log_table, writers_properties({0: 1, 1: 1, 2: 0}, {0: 0, 1: 0}))
        node = DeltaSink(paths.tables, "node-1", ownership=owner, writer=PartitionWriter(1, 0))

        def write(batch: int, partition: int) -> None:
            record = {
                **BLANK_RECORD,
                "record_type": "offset_commit",
                "group_id": "g",
                "offsets_partition": partition,
                "committed_offset": batch,
            }
            node.write_batch(
                batch,
                records=[record],
                responses=[],
                groups=[],
                rejected=[],
                list_groups=[],
                emitted_at_ms=0,
                written_at_ms=0,
            )

        write(0, 0)
        # partition 0 moves to node 0 behind the node's back (its snapshot is older)
        set_properties(owner, log_table, writers_properties({0: 0, 1: 1, 2: 0}, {0: 0, 1: 0}))
        with pytest.raises(WriterFenced, match=r"partitions \[0\]"):
            write(1, 0)
        with pytest.raises(WriterFenced, match=r"partitions \[2\]"):
            write(1, 2)
        write(1, 1)  # still its own
        set_properties(owner, log_table, writers_properties({0: 0, 1: 1, 2: 0}, {0: 0, 1: 1}))
        with pytest.raises(WriterFenced, match="incarnation"):
            write(2, 1)
    finally:
        owner.release()
    columns = ["offsets_partition", "committed_offset"]
    rows = read_table(paths.tables / CONSUMER_OFFSETS, columns=columns).to_pylist()
    assert sorted((r["offsets_partition"], r["committed_offset"]) for r in rows) == [(0, 0), (1, 1)]


@pytest.mark.slow
def test_scram_over_sasl_ssl_reaches_each_group_s_node(tmp_path: Path) -> None:
    """``--processes 2`` with ``listeners=SASL_SSL``: every node serves TLS and SCRAM (the
    credentials are the warehouse's, set with ``coordinator scram``); confluent-kafka
    consumers bootstrapped on node 0 find their group's coordinator on node 1 and commit."""
    from coordinator.cli import main as cli
    from tests.security_support import make_certificates

    certificates = make_certificates(tmp_path / "certificates")
    warehouse = tmp_path / "wh"
    credential = "SCRAM-SHA-512=[name=alice,password=alice-secret,iterations=4096]"
    assert cli(["scram", "--warehouse", str(warehouse), "--add-scram", credential]) == 0
    base = free_port(2)
    conf = tmp_path / "gateway.properties"
    conf.write_text(
        f"listeners=SASL_SSL://127.0.0.1:{base}\n"
        "sasl.enabled.mechanisms=SCRAM-SHA-512\n"
        f"ssl.keystore.location={certificates.path('server.pem')}\n"
        "topics=t:6\n"
    )
    cluster = Cluster(tmp_path, 2, warehouse, conf=conf, base=base)
    options = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
        "ssl.ca.location": certificates.ca,
    }
    group = _group_on(1, 2, "secured")
    cls = sc.CLIENTS["confluent-kafka"]
    members = [cls(cluster.port(0), group, f"secured-{i}", options=options) for i in range(2)]
    try:
        assert "SASL_SSL" in cluster.text()
        sc.wait_for(
            lambda: sc.disjoint_cover(list(members)) and all(m.partitions() for m in members),
            sc.SETTLE_S,
            lambda: (sc.shares(list(members)), [m.error for m in members]),
        )
        offsets = {("t", p): 40 + p for p in range(sc.PARTITIONS)}
        for m in members:
            mine = {tp: offsets[tp] for tp in m.assigned()}
            m.commit(mine)
            assert m.committed(mine) == mine
    finally:
        for m in members:
            m.close()
        assert cluster.stop() == 0
    assert _reread(warehouse, group) == offsets


@pytest.mark.slow
def test_the_operator_tools_show_every_node_s_groups_through_a_node_s_death(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """group_state and group_history of a cluster (written by the supervisor from the nodes'
    summaries): ``coordinator groups`` lists and describes the groups of both nodes, and a
    group that moved away from a killed node and back is never shown Dead."""
    import json

    from coordinator.admin.tables import WarehouseReader
    from coordinator.cli import main as cli

    warehouse = tmp_path / "wh"
    cluster = Cluster(tmp_path, 2, warehouse)
    groups = [_group_on(node, 2, "tools") for node in (0, 1)]
    cls = sc.CLIENTS["kafka-python"]
    members = [cls(cluster.port(0), g, f"{g}-member") for g in groups]
    offsets = {("t", p): 7 + p for p in range(sc.PARTITIONS)}

    def listed() -> dict[str, str]:
        assert cli(["groups", "--warehouse", str(warehouse), "--list", "--output", "json"]) == 0
        rows = json.loads(capsys.readouterr().out)["groups"]
        return {r["group_id"]: r["state"] for r in rows}

    def described() -> dict[str, int]:
        describe = ["--describe", "--all-groups", "--output", "json"]
        assert cli(["groups", "--warehouse", str(warehouse), *describe]) == 0
        return {
            g: sum(1 for r in rows if r.get("current_offset") is not None)
            for g, rows in _offsets_by_group(json.loads(capsys.readouterr().out)).items()
        }

    try:
        for m in members:
            sc.wait_for(lambda m=m: len(m.assigned()) == sc.PARTITIONS, sc.SETTLE_S, m.assigned)
            m.commit(offsets)
        wanted = dict.fromkeys(groups, "Stable")
        assert until(lambda: listed() == wanted, 60), listed()
        assert until(lambda: described() == dict.fromkeys(groups, sc.PARTITIONS), 60)
        reader = WarehouseReader(warehouse)
        assert [s["group_id"] for s in reader.group_states(reader.cut())] == sorted(groups)
        os.kill(cluster.pids()[1], signal.SIGKILL)
        assert until(lambda: "handover done" in cluster.text(), 120), cluster.text()
        seen: list[dict[str, str]] = []
        assert until(lambda: seen.append(listed()) or seen[-1] == wanted, 120), seen
        assert all(set(s) == set(groups) for s in seen), seen  # never Dead, never missing
    finally:
        for m in members:
            m.close()
        assert cluster.stop() == 0
    assert set(listed()) == set(groups)  # (Empty, or Stable until a session of a member
    # that could not send its LeaveGroup would have expired)
    reader = WarehouseReader(warehouse)
    history = reader.group_history(reader.cut()).to_pylist()
    assert {r["group_id"] for r in history} == set(groups)
    assert "Dead" not in {r["state"] for r in history}


def _offsets_by_group(out: Any) -> dict[str, list[dict[str, Any]]]:
    """``coordinator groups --describe --output json``: group -> its offsets rows."""
    return {g["group"]: g["offsets"] for g in out["groups"]}


class _FakeProcess:
    """A node process as the supervisor sees it: its standard input, and whether it runs."""

    def __init__(self) -> None:
        import io

        self.stdin = io.StringIO()
        self.returncode: int | None = None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, number: int) -> None:
        self.signals.append(number)

    def kill(self) -> None:
        self.signals.append(signal.SIGKILL)

    def told(self) -> list[dict[str, Any]]:
        import json

        return [json.loads(line) for line in self.stdin.getvalue().splitlines()]


def test_the_supervisor_moves_a_dead_node_s_partitions_and_hands_them_back_fenced() -> None:
    """The supervisor's decisions, without processes: a dead node's partitions go to the
    serving node; once restarted and serving, they come back only after the interim owner
    released them (held meanwhile); a lapsed lease fences; restarts back off, then stop."""
    from coordinator.gateway import cluster

    sup = cluster.Supervisor("127.0.0.1", 9000, 2, 6, ["gateway"])
    procs = {i: _FakeProcess() for i in (0, 1)}
    for i, node in sup.nodes.items():
        node.proc = procs[i]  # type: ignore[assignment]
        node.started_at = 0.0
        sup.on_report(i, 0, {"ready": True})
    assert sup.owners == {0: 0, 1: 1, 2: 0, 3: 1, 4: 0, 5: 1}

    procs[1].returncode = -9
    sup.tick()
    assert sup.owners == dict.fromkeys(range(6), 0)
    assert procs[0].told()[-1]["hold"] == []
    assert sup.nodes[1].incarnation == 1 and sup.nodes[1].restart_at is not None

    again = _FakeProcess()
    sup.nodes[1].proc = again  # type: ignore[assignment]  # (restarted)
    sup.on_report(1, 1, {"ready": True})
    told = procs[0].told()[-1]
    assert {int(p): n for p, n in told["owners"].items()} == {0: 0, 1: 1, 2: 0, 3: 1, 4: 0, 5: 1}
    assert told["hold"] == [1, 3, 5]  # node 1 holds them: node 0 still writes them
    assert sup.releasing == {1: 0, 3: 0, 5: 0}
    sup.on_report(1, 0, {"released": [1, 3, 5], "seq": told["seq"]})  # a stale incarnation
    assert sup.releasing
    sup.on_report(0, 0, {"released": [1, 3, 5], "seq": told["seq"]})
    assert sup.releasing == {} and again.told()[-1]["hold"] == []

    sup.nodes[0].last_heartbeat = -1e9  # its lease lapsed
    sup.tick()
    assert sup.nodes[0].fenced and signal.SIGTERM in procs[0].signals
    assert sup.owners == dict.fromkeys(range(6), 1)

    assert [cluster.restart_delay_s(k) for k in (1, 2, 3, 8, 9)] == [0.5, 1.0, 2.0, 30.0, 30.0]
    node = sup.nodes[0]
    node.restarts = cluster.MAX_RESTARTS
    procs[0].returncode = 1
    sup.tick()
    assert node.given_up and node.restart_at is None


def test_a_handover_whose_new_owner_dies_leaves_the_partitions_with_a_live_writer() -> None:
    """Node 1 dies while node 0 releases node 1's partitions to it: they go back to node 0,
    which loads them again (nothing held), and the writers never name a dead node."""
    from coordinator.gateway import cluster

    sup = cluster.Supervisor("127.0.0.1", 9000, 2, 4, ["gateway"])
    procs = {i: _FakeProcess() for i in (0, 1)}
    for i, node in sup.nodes.items():
        node.proc = procs[i]  # type: ignore[assignment]
    sup.on_report(0, 0, {"ready": True})
    procs[1].returncode = 1  # node 1 never served: its partitions go to node 0
    sup.tick()
    assert sup.owners == dict.fromkeys(range(4), 0)
    restarted = _FakeProcess()
    sup.nodes[1].proc = restarted  # type: ignore[assignment]
    sup.on_report(1, 1, {"ready": True})
    assert sup.releasing == {1: 0, 3: 0}
    restarted.returncode = -9
    sup.tick()
    assert sup.releasing == {} and sup.owners == dict.fromkeys(range(4), 0)
    assert procs[0].told()[-1]["hold"] == []
