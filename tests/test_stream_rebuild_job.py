"""The Spark job rebuilt from its log, with live members: a lost checkpoint (rebuilt by the job
by itself), then a re-shard (``--rebuild-from-log`` with other shards and state key). Members
that keep heartbeating keep their place, offsets and answers are as before, batch ids go on."""

from __future__ import annotations

import contextlib
import io
import json
import queue
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli import main
from coordinator.client.member import GroupMember, MemberConfig
from coordinator.client.transport import SystemClock
from coordinator.stream import job
from coordinator.stream.client import StreamClient
from coordinator.stream.settings import read_identity
from coordinator.stream.transport import StreamTransport
from tests.stream_support import RunningCoordinator, job_settings
from tests.test_stream_job import commit, fetch

pytestmark = pytest.mark.slow

GROUP = "orders-app"
TOPIC = "orders"
PARTITIONS = 6
#: Long enough to outlast a restart of the job on a loaded box (a batch can take seconds).
SESSION_MS = 45_000


class LiveMembers(threading.Thread):
    """``GroupMember``s over ``StreamTransport`` on the wall clock, driven by this thread as a
    consumer's heartbeat thread and poll loop would be, whatever the test's thread is doing
    (stopping and starting the job)."""

    def __init__(self, warehouse: Path, count: int) -> None:
        super().__init__(daemon=True)
        clock = SystemClock()
        self.transport = StreamTransport(StreamClient(warehouse), clock)
        config = MemberConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1_000)
        self.members = [
            GroupMember(
                GROUP,
                [TOPIC],
                self.transport,
                clock,
                metadata={TOPIC: PARTITIONS},
                client_id=f"consumer-{i}",
                assignors=["range"],
                config=config,
            )
            for i in range(count)
        ]
        self._calls: queue.Queue[tuple[Callable[[], Any], queue.Queue[Any]]] = queue.Queue()
        self._stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            next_poll = 0.0
            while not self._stopping.is_set():
                self.transport.deliver()
                now = time.monotonic()
                for member in self.members:
                    member.tick()
                    if now >= next_poll:
                        member.poll()
                if now >= next_poll:
                    next_poll = now + 0.2
                while not self._calls.empty():
                    call, answer = self._calls.get()
                    answer.put(call())
                self.transport.flush()
                time.sleep(0.05)
        except BaseException as error:  # reported by the test
            self.error = error

    def call(self, function: Callable[[], Any]) -> Any:
        """Run ``function`` in the members' thread (they are not thread safe)."""
        answer: queue.Queue[Any] = queue.Queue()
        self._calls.put((function, answer))
        return answer.get(timeout=30)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=10)

    def view(self) -> list[tuple[str, int, str, bool, list[int]]]:
        return self.call(
            lambda: [
                (
                    m.member_id,
                    m.generation_id,
                    m.state.value,
                    m.rejoin_needed,
                    sorted(tp.partition for tp in m.assignment),
                )
                for m in self.members
            ]
        )

    def stable(self) -> bool:
        view = self.view()
        return (
            all(state == "STABLE" and not rejoin for _, _, state, rejoin, _ in view)
            and len({generation for _, generation, *_ in view}) == 1
            and sorted(p for *_, parts in view for p in parts) == list(range(PARTITIONS))
        )

    def commit_all(self) -> dict[int, int]:
        """Every member commits 100 + partition for its partitions; waits for the answers."""
        done: list[Any] = []

        def send() -> dict[int, int]:
            committed = {}
            for member in self.members:
                offsets = {tp: 100 + tp.partition for tp in member.assignment}
                committed.update({tp.partition: o for tp, o in offsets.items()})
                member.commit(offsets, lambda _, error: done.append(error))
            return committed

        committed: dict[int, int] = self.call(send)
        deadline = time.monotonic() + 60
        while len(done) < len(self.members) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert done == [None] * len(self.members), done
        return committed

    def events_since(self, since_ms: int) -> list[tuple[int, str, Any]]:
        return self.call(lambda: [e for m in self.members for e in m.events if e[0] >= since_ms])


def describe(c: RunningCoordinator, rid: str, group: str) -> dict[str, Any]:
    answer = c.request({"api": "describe_groups", "request_id": rid, "group_id": group})
    return {k: v for k, v in answer.items() if k != "request_id"}


def offsets_of(c: RunningCoordinator, rid: str, group: str) -> dict[int, int]:
    answer = c.request(fetch(rid, group))
    assert answer["error"] is None
    return {p["partition"]: p["offset"] for p in answer["partitions"]}


def groups_cli(warehouse: Path) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            [
                "groups",
                "--describe",
                "--all-groups",
                "--warehouse",
                str(warehouse),
                "--output",
                "json",
            ]
        )
    assert code == 0
    described = json.loads(out.getvalue())
    return {
        g["group"]: (g["state"], {o["partition"]: o["current_offset"] for o in g["offsets"]})
        for g in described["groups"]
    }


def highest_batch(c: RunningCoordinator) -> int:
    return max(r["batch_id"] for r in c.rows("responses"))


def heartbeats_after(c: RunningCoordinator, batch_id: int) -> list[dict[str, Any]]:
    return [
        r
        for r in c.rows("responses")
        if r["api"] == "heartbeat" and r["group_id"] == GROUP and r["batch_id"] >= batch_id
    ]


def check_carried_on(
    c: RunningCoordinator,
    members: LiveMembers,
    before: dict[str, Any],
    restarted_ms: int,
    tag: str,
) -> float:
    """After a rebuild: batch ids above the old ones, the members heartbeating in the same
    generation with no rebalance, offsets, DescribeGroups and ``coordinator groups`` as before.
    Returns the members' gap between heartbeat answers across the rebuild, in seconds."""
    rebuilt = c.running.rebuilt
    assert rebuilt is not None
    base = rebuilt.identity.batch_id_base
    assert base > before["highest_batch"]
    # Heartbeats answered by the rebuilt job, and none of them asked for a rebalance.
    wanted = 3 * len(members.members)
    c.wait_for(
        lambda: len(heartbeats_after(c, base)) >= wanted,
        timeout_s=90,
        what=f"{wanted} heartbeats answered after the {tag}",
    )
    assert {b["error"] for b in heartbeats_after(c, base)} == {None}
    assert members.view() == before["view"]  # same ids, generation, partitions; all STABLE
    # Nothing a rebalance would cause (a request that timed out while the job was down may
    # have sent a member to find its coordinator again, which changes nothing).
    events = {event for _, event, _ in members.events_since(restarted_ms)}
    assert events <= {"coordinator", "coordinator-unknown"}, events
    history = [r for r in c.rows("group_history") if r["batch_id"] >= base]
    assert {(r["group_id"], r["state"], r["generation_id"]) for r in history} <= {
        (GROUP, "Stable", before["generation"]),
        ("ledger", "Empty", 0),
    }
    assert offsets_of(c, f"f-{tag}", GROUP) == before["offsets"]
    assert offsets_of(c, f"fl-{tag}", "ledger") == before["ledger"]
    assert describe(c, f"d-{tag}", GROUP) == before["describe"]
    assert groups_cli(c.warehouse) == before["cli"]
    # The loads are the new checkpoint's first batch: warehouse batch `base`, above every batch
    # of the old checkpoint (whose rows are all below it).
    loads = [r for r in c.rows("group_history") if r["batch_id"] == base]
    assert {r["group_id"] for r in loads} == {GROUP, "ledger"}
    assert all(r["batch_id"] < base for r in before["rows"])
    return max_gap_s(c, before["highest_batch"], base)


def max_gap_s(c: RunningCoordinator, old_last: int, base: int) -> float:
    """Seconds between the last heartbeat answered by the old checkpoint and the first one
    answered by the new (the members' view of the restart and rebuild)."""
    beats = [r for r in c.rows("responses") if r["api"] == "heartbeat"]
    last_old = max(r["emitted_at_ms"] for r in beats if r["batch_id"] <= old_last)
    first_new = min(r["emitted_at_ms"] for r in beats if r["batch_id"] >= base)
    return (first_new - last_old) / 1000


def test_members_carry_on_through_a_lost_checkpoint_and_a_re_shard(spark, tmp_path):
    c = RunningCoordinator(spark, tmp_path / "warehouse")  # shard-keyed (the default), 2 shards
    c.start()
    members = LiveMembers(c.warehouse, 2)
    members.start()
    try:
        c.wait_for(members.stable, timeout_s=120, what="the group to form")
        committed = members.commit_all()
        assert c.request(commit("l1", "ledger", "", -1, {0: 7, 1: 8}))["error"] is None
        before = {
            "view": members.view(),
            "offsets": offsets_of(c, "f0", GROUP),
            "ledger": offsets_of(c, "fl0", "ledger"),
            "describe": describe(c, "d0", GROUP),
            "cli": groups_cli(c.warehouse),
        }
        assert before["offsets"] == committed
        assert before["ledger"] == {0: 7, 1: 8}
        assert before["describe"]["group_state"] == "Stable"
        before["generation"] = before["view"][0][1]
        assert set(before["cli"]) == {GROUP, "ledger"}

        # The checkpoint is lost: the job rebuilds it from the log by itself.
        c.stop()
        before["highest_batch"] = highest_batch(c)
        before["rows"] = c.rows("responses")
        checkpoint = c.settings.job.paths.checkpoint
        shutil.rmtree(checkpoint)
        restarted_ms = int(time.time() * 1000)
        started = time.monotonic()
        c.start()
        first_started = time.monotonic() - started
        assert c.running.rebuilt is not None and c.running.rebuilt.replaced is None
        lost_gap = check_carried_on(c, members, before, restarted_ms, "lost")

        # Re-shard: 3 shards keyed by group id, by a rebuild from the log.
        c.stop()
        before["highest_batch"] = highest_batch(c)
        before["rows"] = c.rows("responses")
        old_identity = read_identity(checkpoint / "coordinator.json")
        c.settings = job_settings(c.warehouse, shards=3, state_key="group")
        spark.conf.set("spark.sql.shuffle.partitions", "3")
        restarted_ms = int(time.time() * 1000)
        started = time.monotonic()
        c.running = job.start(spark, c.settings, rebuild_from_log=True)
        second_started = time.monotonic() - started
        rebuilt = c.running.rebuilt
        assert rebuilt is not None and rebuilt.replaced is not None
        assert read_identity(rebuilt.replaced / "coordinator.json") == old_identity
        assert (rebuilt.identity.shards, rebuilt.identity.state_key) == (3, "group")
        reshard_gap = check_carried_on(c, members, before, restarted_ms, "re-shard")
        # Spark pinned the new number of shards in the new checkpoint.
        offsets_log = (checkpoint / "offsets" / "0").read_text()
        assert '"spark.sql.shuffle.partitions":"3"' in offsets_log
        print(
            f"rebuild + start: lost checkpoint {first_started:.1f} s, re-shard "
            f"{second_started:.1f} s; members' longest wait for a heartbeat answer: "
            f"{lost_gap:.1f} s, {reshard_gap:.1f} s"
        )
        assert members.error is None
    finally:
        members.stop()
        c.stop()
        spark.conf.set("spark.sql.shuffle.partitions", "2")
