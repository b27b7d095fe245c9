"""One writer per warehouse, in one process: the lease rules on a fake clock, the claim race,
and the fence in delta-rs commits (a stale owner's append fails once a new owner fenced).

"Other processes" are played by claims with another host or pid; no thread heartbeats (the
tests call ``heartbeat()``), so every step happens when the test says."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Field, write_deltalake
from deltalake.exceptions import CommitFailedError

from coordinator.stream import ownership, schema
from coordinator.stream.ownership import (
    EPOCH_PROPERTY,
    Claim,
    Lease,
    OwnershipLost,
    WarehouseOwned,
    acquire,
    assess,
)
from coordinator.stream.sink import DeltaSink
from tests.test_stream_sink import Feed

LEASE_MS = 10_000
APP_ID = "app"


class FakeClock:
    def __init__(self, now_ms: int = 1_800_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def tables(root: Path) -> list[Path]:
    return [root / "tables" / name for name in schema.TABLES]


def take(root: Path, clock: FakeClock, host: str, pid: int = 4242, **kw: Any) -> Any:
    """Acquire as "another process" (its own host and pid), no heartbeat thread."""
    return acquire(
        root,
        f"test {host}",
        LEASE_MS,
        tables=tables(root),
        clock=clock,
        heartbeat=False,
        host=host,
        pid=pid,
        process_alive=kw.pop("process_alive", lambda pid: True),
        **kw,
    )


# --- the rules, pure ----------------------------------------------------------------------------


def claim(**changes: Any) -> Claim:
    fields: dict[str, Any] = {
        "epoch": 3,
        "owner_id": "a",
        "kind": "coordinator run",
        "pid": 100,
        "host": "h1",
        "machine": "boot/pid:[1]",
        "started_at_ms": 1_000,
        "lease_timeout_ms": LEASE_MS,
    }
    fields.update(changes)
    return Claim(**fields)


def judge(owner: Claim | None, lease: Lease | None, now_ms: int, **kw: Any) -> ownership.Verdict:
    options: dict[str, Any] = {
        "host": "h2",
        "machine": "boot/pid:[1]",
        "pid": 200,
        "process_alive": lambda pid: True,
        "held_here": lambda owner_id: False,
    }
    options.update(kw)
    return assess(owner, lease, now_ms, **options)


def test_a_warehouse_never_owned_is_free():
    assert judge(None, None, 0).free


def test_a_live_lease_holds_until_last_heartbeat_plus_the_owners_timeout():
    owner = claim()
    lease = Lease(3, "a", heartbeat_at_ms=50_000)
    held = judge(owner, lease, 50_000 + LEASE_MS - 1)
    assert not held.free and held.expires_at_ms == 50_000 + LEASE_MS
    assert judge(owner, lease, 50_000 + LEASE_MS).free
    # No heartbeat yet: the claim's start counts as one.
    assert not judge(owner, None, 1_000 + LEASE_MS - 1).free
    assert judge(owner, None, 1_000 + LEASE_MS).free


def test_a_released_lease_is_free_at_once():
    verdict = judge(claim(), Lease(3, "a", 50_000, released=True), 50_001)
    assert verdict.free and "released" in verdict.reason


def test_a_heartbeat_of_another_owner_id_does_not_renew_the_claim():
    stale = Lease(3, "someone-else", heartbeat_at_ms=99_000)
    assert judge(claim(), stale, 1_000 + LEASE_MS).free


def test_a_dead_pid_frees_the_warehouse_only_on_the_same_machine():
    owner = claim(host="h2")
    dead = {"process_alive": lambda pid: False}
    assert judge(owner, None, 2_000, **dead).free
    # Another host, or another pid namespace or boot: a pid means nothing there.
    assert not judge(claim(host="h1"), None, 2_000, **dead).free
    assert not judge(owner, None, 2_000, machine="boot/pid:[2]", **dead).free
    assert not judge(owner, None, 2_000, process_alive=lambda pid: True).free


def test_this_very_process_is_free_only_when_it_no_longer_holds_the_claim():
    owner = claim(host="h2", pid=200)
    assert judge(owner, None, 2_000).free
    assert not judge(owner, None, 2_000, held_here=lambda owner_id: owner_id == "a").free


# --- claiming, refusing, taking over ------------------------------------------------------------


def test_a_second_owner_is_refused_with_who_owns_it_and_what_to_do(tmp_path: Path):
    clock = FakeClock()
    first = take(tmp_path, clock, "host-a", pid=1111)
    assert first.epoch == 1
    with pytest.raises(WarehouseOwned) as refused:
        take(tmp_path, clock, "host-b")
    message = str(refused.value)
    for part in ("pid 1111 on host-a", "epoch 1", "since", "kill 1111", "expires at", "10000 ms"):
        assert part in message, message


def test_a_silent_owner_is_taken_over_after_its_lease_and_learns_it_lost(tmp_path: Path):
    clock = FakeClock()
    first = take(tmp_path, clock, "host-a", pid=1111)
    told: list[OwnershipLost] = []
    first.on_lost = told.append
    clock.advance(LEASE_MS - 1)
    assert first.heartbeat()  # renewed: a whole lease again from here
    clock.advance(LEASE_MS - 1)
    with pytest.raises(WarehouseOwned):
        take(tmp_path, clock, "host-b")
    clock.advance(1)  # the old owner missed its heartbeats: expired
    second = take(tmp_path, clock, "host-b", pid=2222)
    assert second.epoch == 2
    assert not first.heartbeat()
    assert first.lost is not None and told == [first.lost]
    assert "to test host-b (pid 2222 on host-b, epoch 2" in str(first.lost)
    with pytest.raises(OwnershipLost):
        first.check()
    first.release()  # a lost owner's release leaves the new owner's lease alone
    with pytest.raises(WarehouseOwned):
        take(tmp_path, clock, "host-c")


def test_a_clean_release_lets_the_next_owner_in_at_once(tmp_path: Path):
    clock = FakeClock()
    take(tmp_path, clock, "host-a").release()
    assert take(tmp_path, clock, "host-b").epoch == 2


def test_a_dead_process_on_this_machine_is_taken_over_at_once(tmp_path: Path):
    clock = FakeClock()
    take(tmp_path, clock, "here", pid=1111)
    gone = take(tmp_path, clock, "here", pid=2222, process_alive=lambda pid: pid != 1111)
    assert gone.epoch == 2


def test_of_processes_claiming_together_exactly_one_wins(tmp_path: Path):
    clock = FakeClock()
    barrier = threading.Barrier(8)
    outcomes: list[Any] = []

    def contender(i: int) -> None:
        barrier.wait()
        try:
            outcomes.append(take(tmp_path, clock, f"host-{i}", pid=1000 + i))
        except WarehouseOwned as refused:
            outcomes.append(refused)

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winners = [o for o in outcomes if not isinstance(o, WarehouseOwned)]
    assert len(outcomes) == 8 and len(winners) == 1 and winners[0].epoch == 1
    assert ownership.newest_claim(ownership.owner_dir(tmp_path)).epoch == 1


def test_a_new_epoch_goes_above_the_tables_even_if_the_owner_records_were_lost(tmp_path: Path):
    clock = FakeClock()
    for host in ("a", "b", "c"):
        DeltaSink(tmp_path / "tables", APP_ID, ownership=take(tmp_path, clock, host))
        clock.advance(LEASE_MS)
    for path in ownership.owner_dir(tmp_path).iterdir():
        path.unlink()
    assert take(tmp_path, clock, "d").epoch == 4
    assert {ownership.table_epoch(DeltaTable(str(p))) for p in tables(tmp_path)} == {4}


# --- the fence in Delta commits ----------------------------------------------------------------


def write(sink: DeltaSink, batch_id: int, group: str, offset: int) -> Any:
    """One batch of the engine's own output: a group joined, an offset committed (records,
    responses, a summary), and a rejected line: a commit to every table."""
    feed = Feed()
    feed.join_and_commit(group, offset)
    data = feed.batch(rejected=[{"raw": "x", "source_file": "f", "reason": "r"}])
    return sink.write_batch(batch_id, **data)


def committed_groups(root: Path) -> list[str]:
    log = DeltaTable(str(root / "tables" / schema.CONSUMER_OFFSETS)).to_pyarrow_table()
    return sorted(set(log.column("group_id").to_pylist()))


def test_a_stale_owner_cannot_commit_once_the_new_owner_fenced_and_wrote(tmp_path: Path):
    """The paused leader: its sink read its snapshots (epoch 1) before the takeover, its own
    check still passes in memory, yet its commits fail (Delta's conflict with the fence), it
    raises OwnershipLost naming the new owner, and none of its rows is visible."""
    clock = FakeClock()
    old = take(tmp_path, clock, "host-a", pid=1111)
    stale = DeltaSink(tmp_path / "tables", APP_ID, ownership=old)
    write(stale, 0, "before", 1)
    clock.advance(LEASE_MS)  # paused past its lease
    new = take(tmp_path, clock, "host-b", pid=2222)
    fresh = DeltaSink(tmp_path / "tables", APP_ID, ownership=new)
    write(fresh, 1, "new-owner", 2)
    assert old.lost is None  # it has not looked: only the commit can stop it
    with pytest.raises(OwnershipLost, match=r"lost ownership of the warehouse .*pid 2222") as lost:
        write(stale, 2, "stale", 3)
    assert isinstance(lost.value.__cause__, CommitFailedError)  # Delta refused the commit
    assert committed_groups(tmp_path) == ["before", "new-owner"]
    for name in schema.TABLES:
        table = DeltaTable(str(tmp_path / "tables" / name))
        assert ownership.table_epoch(table) == 2
        epochs = [h.get(EPOCH_PROPERTY) for h in reversed(table.history())]
        fence = epochs.index("2")  # the new owner's fence commit, then only its commits
        assert set(epochs[fence:]) == {"2"}, (name, epochs)
    # And it stays out: a reload (as after any failure) finds the newer epoch.
    with pytest.raises(OwnershipLost):
        write(stale, 2, "stale", 3)
    with pytest.raises(OwnershipLost):
        DeltaSink(tmp_path / "tables", APP_ID, ownership=old)
    assert committed_groups(tmp_path) == ["before", "new-owner"]
    write(fresh, 2, "new-owner-again", 4)
    assert committed_groups(tmp_path) == ["before", "new-owner", "new-owner-again"]


def test_a_new_owner_fences_every_table_at_once_and_creates_missing_ones_fenced(tmp_path: Path):
    clock = FakeClock()
    DeltaSink(tmp_path / "tables", APP_ID, ownership=take(tmp_path, clock, "a"))
    (tmp_path / "tables" / schema.GROUP_HISTORY).rename(tmp_path / "gone")
    clock.advance(LEASE_MS)
    new = take(tmp_path, clock, "b")
    existing = [p for p in tables(tmp_path) if DeltaTable.is_deltatable(str(p))]
    assert {ownership.table_epoch(DeltaTable(str(p))) for p in existing} == {2}
    DeltaSink(tmp_path / "tables", APP_ID, ownership=new)
    created = DeltaTable(str(tmp_path / "tables" / schema.GROUP_HISTORY))
    assert ownership.table_epoch(created) == 2


EVEN = pa.schema([("k", pa.string()), ("v", pa.int64())])


def _append(t: DeltaTable) -> None:
    write_deltalake(t, pa.table({"k": ["x"], "v": [1]}, schema=EVEN), mode="append")


def _empty_marker(t: DeltaTable) -> None:
    from deltalake import CommitProperties, Transaction

    props = CommitProperties(app_transactions=[Transaction(APP_ID, 9)])
    write_deltalake(t, EVEN.empty_table(), mode="append", commit_properties=props)


def _merge(t: DeltaTable) -> None:
    source = pa.table({"k": ["x"], "v": [5]}, schema=EVEN)
    (
        t.merge(source, "t.k = s.k", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


@pytest.mark.parametrize(
    "commit",
    [
        _append,
        _empty_marker,
        _merge,
        lambda t: t.optimize.compact(),
        lambda t: t.alter.add_columns([Field("z", "string")]),
        lambda t: t.alter.set_table_properties({EPOCH_PROPERTY: "1"}, raise_if_not_exists=False),
    ],
    ids=["append", "empty-marker", "merge", "compact", "add-columns", "fence"],
)
def test_delta_refuses_every_commit_read_before_a_fence(tmp_path: Path, commit: Any):
    """What the fence relies on in deltalake 1.6: a commit whose snapshot predates another
    writer's metadata change fails, whatever the operation (no silent retry on top)."""
    path = str(tmp_path / "t")
    DeltaTable.create(path, EVEN)
    for i in range(3):
        write_deltalake(path, pa.table({"k": [str(i)], "v": [i]}, schema=EVEN), mode="append")
    stale = DeltaTable(path)
    DeltaTable(path).alter.set_table_properties({EPOCH_PROPERTY: "2"}, raise_if_not_exists=False)
    version = DeltaTable(path).version()
    with pytest.raises(CommitFailedError, match="Metadata changed"):
        commit(stale)
    assert DeltaTable(path).version() == version


def test_a_rebuild_from_the_log_commits_under_its_owners_epoch(tmp_path: Path):
    from coordinator.stream import rebuild
    from coordinator.stream.settings import load_settings

    clock = FakeClock()
    settings = load_settings(values={"offsets.topic.num.partitions": "3"}, warehouse=str(tmp_path))
    first = take(tmp_path, clock, "a")
    write(DeltaSink(tmp_path / "tables", APP_ID, ownership=first), 0, "g", 1)
    first.release()
    new = take(tmp_path, clock, "b")
    identity, report = rebuild.prepare_checkpoint(settings, True, new)
    assert report is not None and identity.batch_id_base == 1
    responses = DeltaTable(str(tmp_path / "tables" / schema.RESPONSES))
    assert responses.transaction_version(identity.app_id) == 0  # the completion marker
    assert responses.history(1)[0].get(EPOCH_PROPERTY) == "2"
    with pytest.raises(OwnershipLost):
        rebuild.mark_complete(tmp_path / "tables", "stale", 5, first)
    assert DeltaTable(str(responses.table_uri)).transaction_version("stale") is None
