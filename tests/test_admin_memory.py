"""The readers' bounded-memory paths give what reading the whole log gives: ``latest_log`` (the
log reduced to the last record per commit key and the last live GroupMetadata per group) feeds
``collect`` the same offsets and assignments as every row of the log, and the as-of states kept
one row per group while the scan streams are each group's last ``group_history`` row — on a
warehouse with deleted offsets and a deleted group (tombstones), now and at earlier cuts. Also:
the benchmark's synthetic log records are byte-exact Kafka records."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest

from coordinator.admin import groups, history
from coordinator.admin.tables import AsOf, WarehouseReader
from coordinator.cli import main
from tests.admin_support import InboxPump, Story, build_story


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Story:
    """The admin story, then offsets of one group and a whole group deleted: tombstones."""
    story = build_story(tmp_path_factory.mktemp("memory") / "warehouse")
    with InboxPump(story), contextlib.redirect_stdout(io.StringIO()):
        base = ["groups", "--warehouse", str(story.warehouse)]
        assert main([*base, "--delete-offsets", "--group", "billing", "--topic", "invoices:0"]) == 0
        assert main([*base, "--delete", "--group", "old-app"]) == 0
    return story


def whole_log_views(reader: WarehouseReader, cut: Any, ids: list[str]) -> dict[str, Any]:
    """What ``collect`` computed from every row of the log (the previous way)."""
    rows = reader.log(cut, ids).to_pylist()
    offsets: dict[str, Any] = {}
    for row in history.committed_offsets(rows):
        offsets.setdefault(row["group_id"], {})[(row["topic"], row["partition"])] = row
    spans: dict[str, list[Any]] = {}
    for span in history.generations(rows):
        spans.setdefault(span["group_id"], []).append(span)
    return {"offsets": offsets, "spans": spans}


def cuts(reader: WarehouseReader, story: Story) -> list[Any]:
    return [reader.cut()] + [
        reader.cut(AsOf(log_version=m["log_version"])) for m in story.moments.values()
    ]


def test_describe_from_the_reduced_log_equals_describe_from_the_whole_log(story: Story):
    reader = WarehouseReader(story.warehouse)
    ids = ["orders-app", "billing", "old-app", "no-such-group"]
    for cut in cuts(reader, story):
        views = groups.collect(reader, cut, ids)
        whole = whole_log_views(reader, cut, ids)
        for group_id in ids:
            view = views[group_id]
            assert view.offsets == whole["offsets"].get(group_id, {}), (cut, group_id)
            summary = reader.group_states(cut, [group_id])
            expected = groups._assignments(
                whole["spans"].get(group_id, []), summary[0] if summary else None
            )
            assert view.assignment == expected, (cut, group_id)
    now = groups.collect(reader, reader.cut(), ids)
    assert (now["billing"].offsets.keys()) == {("invoices", 1)}  # invoices:0 deleted
    assert now["old-app"].state == "Dead" and not now["old-app"].offsets


def test_the_reduced_log_holds_one_record_per_key(story: Story):
    reader = WarehouseReader(story.warehouse)
    cut = reader.cut()
    reduced = reader.latest_log(cut).to_pylist()
    whole = reader.log(cut).to_pylist()
    assert len(reduced) < len(whole)
    keys = [(r["record_type"], r["group_id"], r["topic"], r["partition"]) for r in reduced]
    assert len(keys) == len(set(keys))
    tombstones = [r for r in reduced if r["value"] is None]
    assert tombstones and all(r["record_type"] == "offset_commit" for r in tombstones)
    assert [(r["offsets_partition"], r["offset"]) for r in reduced] == sorted(
        (r["offsets_partition"], r["offset"]) for r in reduced
    )


def test_states_as_of_are_each_groups_last_history_row(story: Story):
    reader = WarehouseReader(story.warehouse)
    for cut in cuts(reader, story)[1:]:
        latest: dict[str, Any] = {}
        for row in reader.group_history(cut).to_pylist():
            latest[row["group_id"]] = row
        expected = sorted(
            (r for r in latest.values() if r["state"] != "Dead"), key=lambda r: r["group_id"]
        )
        assert reader.group_states(cut) == expected


@pytest.mark.slow
def test_the_benchmark_grows_the_log_with_byte_exact_commits(tmp_path: Path):
    from coordinator.bench.groups import build_warehouse, grow_log
    from coordinator.log.records import record_from_bytes

    root = tmp_path / "bench"
    build_warehouse(root, groups=3, members=2, minutes=0.5)
    reader = WarehouseReader(root)
    before = groups.collect(reader, reader.cut(), ["group-00001"])["group-00001"]
    grown = grow_log(root, 5_000, chunk_rows=1_000)
    assert grown["log_records"] == 5_000 and grown["delta_commits"] >= 4
    reader = WarehouseReader(root)
    rows = reader.log(reader.cut()).to_pylist()
    assert len(rows) == 5_000
    for partition in {r["offsets_partition"] for r in rows}:  # contiguous offsets
        offsets = [r["offset"] for r in rows if r["offsets_partition"] == partition]
        assert offsets == list(range(len(offsets)))
    for row in rows[-200:]:
        decoded = record_from_bytes(row["key"], row["value"])
        assert decoded is not None
        for name in ("group_id", "topic", "partition", "committed_offset", "commit_timestamp_ms"):
            assert decoded[name] == row[name], name
    after = groups.collect(reader, reader.cut(), ["group-00001"])["group-00001"]
    assert after.offsets.keys() == before.offsets.keys()
    assert all(
        after.offsets[tp]["committed_offset"] > before.offsets[tp]["committed_offset"]
        for tp in before.offsets
    )
