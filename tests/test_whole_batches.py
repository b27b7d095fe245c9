"""Readers never see half a micro-batch.

The sink commits the tables one after another (``consumer_offsets``, ``rejected_requests``,
``group_history``, ``group_state``, then ``responses``), so a reader that simply takes each
table's newest version can catch a batch in the middle. Readers cut at the last batch every
table holds (:class:`coordinator.admin.tables.WarehouseReader`, :mod:`coordinator.queries`).
These tests read in a loop while the job writes and check every cut they saw against the
tables once the writing is over: each batch at or below a cut was already whole, and every
acknowledged commit was already in the log.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from coordinator.admin.tables import WarehouseReader
from coordinator.stream.local import LocalJob
from coordinator.stream.schema import CONSUMER_OFFSETS, GROUP_HISTORY, RESPONSES
from coordinator.stream.settings import load_settings
from coordinator.stream.sink import DeltaSink

APPEND_ONLY = (CONSUMER_OFFSETS, GROUP_HISTORY, RESPONSES)
GROUPS = 12
PARTITIONS = 3


def commits(batch: int) -> list[dict[str, Any]]:
    """A simple-group commit per group (offset unique per batch), and a describe."""
    requests: list[dict[str, Any]] = []
    for g in range(GROUPS):
        group = f"g{g:02d}"
        requests.append(
            {
                "api": "offset_commit",
                "request_id": f"{group}/{batch}",
                "group_id": group,
                "member_id": "",
                "generation_id": -1,
                "offsets": [
                    {"topic": "t", "partition": p, "offset": batch * 10 + p, "metadata": ""}
                    for p in range(PARTITIONS)
                ],
            }
        )
        if batch % 5 == 0:  # every few batches, a group is deleted: tombstones and Dead rows
            requests.append(
                {"api": "delete_groups", "request_id": f"{group}/{batch}/del", "group_id": group}
            )
    return requests


class Observer:
    """Reads cuts in a loop; keeps, per cut, what each table held for each batch up to it."""

    def __init__(self, warehouse: Path) -> None:
        self.warehouse = warehouse
        self.seen: list[tuple[int, dict[str, Counter[int]], list[dict[str, Any]], set[Any]]] = []
        self.stop = threading.Event()
        self.errors: list[BaseException] = []

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.observe()
        except BaseException as problem:  # reported by the test
            self.errors.append(problem)

    def observe(self) -> None:
        reader = WarehouseReader(self.warehouse)
        cut = reader.cut()
        if cut.batch_id is None:
            return
        counts = {
            name: Counter(reader.read(name, cut, columns=["batch_id"]).column(0).to_pylist())
            for name in APPEND_ONLY
        }
        acknowledged = [
            row
            for row in reader.read(
                RESPONSES, cut, columns=["api", "request_id", "error_code"]
            ).to_pylist()
            if row["api"] == "offset_commit" and row["error_code"] == 0
        ]
        logged = {
            (r["group_id"], r["partition"], r["committed_offset"])
            for r in reader.read(
                CONSUMER_OFFSETS, cut, columns=["group_id", "partition", "committed_offset"]
            ).to_pylist()
        }
        self.seen.append((cut.batch_id, counts, acknowledged, logged))


def check(observer: Observer, warehouse: Path) -> int:
    """Every cut seen against the finished tables; returns how many cuts were checked."""
    assert not observer.errors, observer.errors
    final_reader = WarehouseReader(warehouse)
    final_cut = final_reader.cut()
    final = {
        name: Counter(
            final_reader.read(name, final_cut, columns=["batch_id"]).column(0).to_pylist()
        )
        for name in APPEND_ONLY
    }
    for cut, counts, acknowledged, logged in observer.seen:
        for name in APPEND_ONLY:
            whole = {b: n for b, n in final[name].items() if b <= cut}
            assert dict(counts[name]) == whole, f"{name} at cut {cut}: a batch seen in part"
        for row in acknowledged:
            group, batch = row["request_id"].split("/")[:2]
            for p in range(PARTITIONS):
                assert (group, p, int(batch) * 10 + p) in logged, (cut, row)
    return len(observer.seen)


def slow_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each table's commit takes a while, as on object storage: a reader that took each
    table's newest version would catch batches in the middle (this is what makes the check
    able to fail; a cut at the log's own newest batch, for one, fails it)."""
    for name in ("_write_log", "_write_group_history", "_write_group_state"):
        original = getattr(DeltaSink, name)

        def slowed(self: DeltaSink, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            result = _original(self, *args, **kwargs)
            time.sleep(0.1)
            return result

        monkeypatch.setattr(DeltaSink, name, slowed)


@pytest.mark.slow
@pytest.mark.parametrize("sink_write", ["driver", "executors"])
def test_readers_see_only_whole_batches_while_the_job_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sink_write: str
) -> None:
    slow_storage(monkeypatch)
    warehouse = tmp_path / "warehouse"
    job = LocalJob(load_settings([], warehouse=str(warehouse), sink_write=sink_write))
    job.run_batch(commits(0), 1_000)  # the tables exist before the reader starts
    observer = Observer(warehouse)
    reader = threading.Thread(target=observer.run)
    reader.start()
    try:
        for batch in range(1, 25):
            job.run_batch(commits(batch), 1_000 + batch * 100)
            time.sleep(0.005)
    finally:
        observer.stop.set()
        reader.join(timeout=60)
    checked = check(observer, warehouse)
    # The check must have had something to check: cuts taken while batches were being written.
    assert checked >= 5, checked
    assert len({cut for cut, *_ in observer.seen}) >= 3


@pytest.mark.slow
def test_readers_see_only_whole_batches_of_the_spark_job(spark: Any, tmp_path: Path) -> None:
    from tests.stream_support import RunningCoordinator

    coordinator = RunningCoordinator(spark, tmp_path / "warehouse").start()
    observer = Observer(coordinator.warehouse)
    reader = threading.Thread(target=observer.run)
    try:
        coordinator.requests(commits(0), timeout_s=120)
        reader.start()
        for batch in range(1, 12):
            coordinator.client.submit(commits(batch))
            time.sleep(0.3)
        coordinator.requests(commits(12), timeout_s=120)
    finally:
        observer.stop.set()
        if reader.is_alive():
            reader.join(timeout=60)
        coordinator.stop()
    assert check(observer, coordinator.warehouse) >= 3
