"""A checkpoint rebuilt from the log, without Spark: compaction of ``consumer_offsets`` into
bootstrap lines, the operator's loads (both state keys), the checkpoint identity's batch id
base, the sink's mapping of Spark's batch ids, and a rebuilt checkpoint carrying on.

The warehouse is written by :class:`coordinator.stream.local.LocalJob` (the job's operator and
sink), so its tables are the Spark job's."""

from __future__ import annotations

import argparse
import base64
import copy as copy_module
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from coordinator.admin.tables import AsOf, WarehouseReader
from coordinator.cli.run import add_job_options
from coordinator.config import CoordinatorConfig
from coordinator.context import heartbeat_key
from coordinator.engine import GroupCoordinator
from coordinator.group.snapshot import decode_group
from coordinator.log.records import durable_view
from coordinator.stream import datafiles, rebuild
from coordinator.stream import operator as op
from coordinator.stream.job import BatchSink, batch_sink, operator_settings
from coordinator.stream.local import LocalJob
from coordinator.stream.schema import CONSUMER_OFFSETS, GROUP_STATE, RESPONSES
from coordinator.stream.settings import (
    Settings,
    checkpoint_identity,
    identity_path,
    load_settings,
    new_checkpoint_identity,
    read_identity,
)
from coordinator.stream.sink import DeltaSink, last_complete_batch, log_end_offsets

T0 = 1_700_000_000_000
SESSION_MS = 30_000
TOPIC = "orders"


def settings_for(warehouse: Path, **overrides: Any) -> Settings:
    coordinator = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
    coordinator.update(overrides.pop("coordinator", {}))
    return load_settings([], coordinator, warehouse=str(warehouse), **overrides)


def join(rid: str, group: str, member_id: str = "") -> dict[str, Any]:
    return {
        "api": "join_group",
        "request_id": rid,
        "group_id": group,
        "member_id": member_id,
        "client_id": "c",
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": 10_000,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": base64.b64encode(b"sub").decode()}],
    }


def sync(rid: str, group: str, member_id: str, generation: int, assignments: Any = None):
    return {
        "api": "sync_group",
        "request_id": rid,
        "group_id": group,
        "member_id": member_id,
        "generation_id": generation,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": assignments or [],
    }


def commit(rid: str, group: str, offsets: dict[int, int], member_id: str = "", generation=-1):
    return {
        "api": "offset_commit",
        "request_id": rid,
        "group_id": group,
        "member_id": member_id,
        "generation_id": generation,
        "offsets": [{"topic": TOPIC, "partition": p, "offset": o} for p, o in offsets.items()],
    }


def by_id(answers: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {a["request_id"]: a for a in answers}


class Story:
    """``stable``: two members, generation 1, offsets 0 -> 12 (committed twice) and 1 -> 11.
    ``left``: one member joined, committed and left: Empty at generation 2 with offset 0 -> 7.
    ``simple``: a simple group's offsets 0 -> 5, 1 -> 6, then 1 deleted: Empty, 0 -> 5.
    ``gone``: a simple group's commit, then DeleteGroups: tombstones only."""

    def __init__(self, warehouse: Path) -> None:
        self.settings = settings_for(warehouse)
        self.job = LocalJob(self.settings)
        job, now = self, T0
        first = by_id(job.run_batch([join("s-j0", "stable"), join("s-j1", "stable")], now))
        self.stable_ids = [first["s-j0"]["member_id"], first["s-j1"]["member_id"]]
        joins = [join(f"s-k{i}", "stable", m) for i, m in enumerate(self.stable_ids)]
        joined = by_id(job.run_batch(joins, now + 100))
        self.generation = joined["s-k0"]["generation_id"]
        leader = joined["s-k0"]["leader"]
        assignments = [
            {"member_id": m, "assignment": base64.b64encode(m.encode()).decode()}
            for m in self.stable_ids
        ]
        syncs = [
            sync(f"s-s{i}", "stable", m, self.generation, assignments if m == leader else None)
            for i, m in enumerate(self.stable_ids)
        ]
        synced = by_id(job.run_batch(syncs, now + 200))
        assert all(a["error"] is None for a in synced.values()), synced
        member, gen = self.stable_ids[0], self.generation
        job.run_batch([commit("s-c1", "stable", {0: 10, 1: 11}, member, gen)], now + 300)
        job.run_batch([commit("s-c2", "stable", {0: 12}, member, gen)], now + 400)

        (left,) = by_id(job.run_batch([join("l-j0", "left")], now + 500)).values()
        joined = by_id(job.run_batch([join("l-k0", "left", left["member_id"])], now + 600))
        gen = joined["l-k0"]["generation_id"]
        job.run_batch([sync("l-s0", "left", left["member_id"], gen)], now + 700)
        job.run_batch([commit("l-c", "left", {0: 7}, left["member_id"], gen)], now + 800)
        leave = {"api": "leave_group", "request_id": "l-l", "group_id": "left"}
        leave["members"] = [{"member_id": left["member_id"]}]
        assert by_id(job.run_batch([leave], now + 900))["l-l"]["error"] is None

        job.run_batch([commit("p-c", "simple", {0: 5, 1: 6})], now + 1_000)
        delete = {"api": "offset_delete", "request_id": "p-d", "group_id": "simple"}
        delete["partitions"] = [{"topic": TOPIC, "partition": 1}]
        job.run_batch([delete], now + 1_100)

        job.run_batch([commit("g-c", "gone", {0: 1})], now + 1_200)
        gone = {"api": "delete_groups", "request_id": "g-d", "group_id": "gone"}
        assert by_id(job.run_batch([gone], now + 1_300))["g-d"]["error"] is None
        self.last_batch = self.job.batch_id - 1
        self.now = self.clock

    def run_batch(self, requests: list[dict[str, Any]], now: int) -> list[dict[str, Any]]:
        """A batch at ``now``, then the batches that fire the timers it armed (a completed
        join answers in the batch after the one that armed its zero delay)."""
        answers = self.job.run_batch(requests, now)
        self.clock = now
        while True:
            self.clock += 10
            fired = self.job.advance(self.clock)
            if fired is None:
                return answers
            answers += fired

    def log_rows(self) -> list[dict[str, Any]]:
        return rebuild.read_log(self.settings.job.paths.tables).to_pylist()

    def copy_to(self, warehouse: Path) -> Story:
        """The same story in another warehouse (a copy of the tables and the checkpoint)."""
        shutil.copytree(self.settings.job.paths.root, warehouse)
        copy = copy_module.copy(self)
        copy.settings = settings_for(warehouse)
        copy.job = None
        return copy


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Story:
    return Story(tmp_path_factory.mktemp("story") / "warehouse")


@pytest.fixture
def story(written: Story, tmp_path: Path) -> Story:
    return written.copy_to(tmp_path / "warehouse")


def load_lines(story: Story, bootstrap: Path, absent: list[str] = ()) -> list[op.InboxLine]:
    groups = rebuild.compact(rebuild.read_log(story.settings.job.paths.tables))
    source = f"file:{bootstrap}/part-00000.jsonl"
    return [
        op.InboxLine(line, source, i, json.loads(line)["group_id"])
        for i, line in enumerate(rebuild.bootstrap_lines(groups, absent))
    ]


def opsettings(story: Story, bootstrap: Path | None) -> op.OperatorSettings:
    return op.OperatorSettings(
        story.settings.coordinator,
        b"k" * 32,
        bootstrap_dir=None if bootstrap is None else str(bootstrap),
    )


# --- compaction --------------------------------------------------------------------------------


def test_compaction_keeps_what_kafkas_log_cleaner_keeps(story: Story):
    rows = story.log_rows()
    assert [(r["offsets_partition"], r["offset"]) for r in rows] == sorted(
        (r["offsets_partition"], r["offset"]) for r in rows
    )
    groups = rebuild.compact(rebuild.read_log(story.settings.job.paths.tables))
    assert sorted(groups) == ["left", "simple", "stable"]  # "gone": tombstones only
    for group_id, records in groups.items():
        keys = [key for key, _ in records]
        assert len(keys) == len(set(keys)), group_id  # the last record per key only
        assert all(value is not None for _, value in records)  # tombstones drop their key
        # What is kept stays in log order.
        where = {bytes(r["key"]): i for i, r in enumerate(rows) if r["group_id"] == group_id}
        assert [where[key] for key in keys] == sorted(where[key] for key in keys)
    # The stable group's offset 0 was committed twice: only the second survives.
    stable = [r for r in rows if r["group_id"] == "stable" and r["value"] is not None]
    assert len(stable) > len(groups["stable"])
    # A load of the compacted log is a load of the whole log.
    config = story.settings.coordinator
    whole = GroupCoordinator.from_records(rows, config, now_ms=story.now)
    compacted = GroupCoordinator.from_records(
        [{"key": k, "value": v} for records in groups.values() for k, v in records],
        config,
        now_ms=story.now,
    )
    assert whole.group_ids() == compacted.group_ids() == ["left", "simple", "stable"]
    for group_id in whole.group_ids():
        assert durable_view(whole.group(group_id)) == durable_view(compacted.group(group_id))


def test_bootstrap_files_hold_one_line_per_group(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(rebuild, "GROUPS_PER_FILE", 2)
    lines = [op.load_line(f"g{i}", [(b"k", b"v")]) for i in range(5)]
    files = rebuild.write_bootstrap(tmp_path / "boot", lines)
    assert [f.name for f in files] == ["part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]
    read = [line for f in files for line in f.read_text().splitlines()]
    assert read == lines
    assert json.loads(read[0]) == {
        "group_id": "g0",
        "records": [[base64.b64encode(b"k").decode(), base64.b64encode(b"v").decode()]],
    }
    assert not [p for p in (tmp_path / "boot").iterdir() if p.name.startswith(".")]


def test_a_log_of_another_partition_count_is_refused(story: Story):
    rows = rebuild.read_log(story.settings.job.paths.tables)
    rebuild.check_partitions(rows, 50)
    with pytest.raises(rebuild.RebuildError, match=r"offsets\.topic\.num\.partitions=10"):
        rebuild.check_partitions(rows, 10)


# --- the operator's loads ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["group", "shard"])
def test_groups_load_as_the_log_left_them_with_fresh_sessions(story: Story, tmp_path, mode):
    bootstrap = tmp_path / "warehouse" / "bootstrap" / "run-1"
    settings = opsettings(story, bootstrap)
    lines = load_lines(story, bootstrap, absent=["ghost"])
    now = story.now + 3_600_000  # an hour later: every old deadline has long passed
    if mode == "group":
        outcomes = {
            line.group_id: op.run_group(settings, line.group_id, None, [line], now)
            for line in lines
        }
        blobs = {g: o.blob for g, o in outcomes.items() if o.blob is not None}
        deadlines = {g: o.deadline_ms for g, o in outcomes.items()}
        rows = [row for o in outcomes.values() for row in o.rows]
        assert not any(o.internal_errors or o.warnings for o in outcomes.values())
    else:
        shard = op.run_shard(settings, {}, lines, now)
        assert not shard.internal_errors and not shard.warnings
        blobs = {g: blob for g, (_, blob) in shard.state.items()}
        deadlines = {g: d for g, (d, _) in shard.state.items()}
        rows = shard.rows
    groups = {g: decode_group(blob) for g, blob in blobs.items()}
    assert sorted(groups) == ["left", "simple", "stable"]  # deleted groups stay absent

    # As Kafka's load gives them (the engine's from_records at the same time).
    expected = GroupCoordinator.from_records(story.log_rows(), story.settings.coordinator, now)
    for group_id, group in groups.items():
        assert durable_view(group) == durable_view(expected.group(group_id))
    stable = groups["stable"]
    assert stable.state.value == "Stable"
    assert list(stable.members) == story.stable_ids
    assert stable.generation_id == story.generation
    assert {k: v.committed_offset for k, v in stable.offsets.items()} == {
        (TOPIC, 0): 12,
        (TOPIC, 1): 11,
    }
    assert groups["left"].state.value == "Empty" and groups["left"].generation_id == 2
    assert {k: v.committed_offset for k, v in groups["left"].offsets.items()} == {(TOPIC, 0): 7}
    assert groups["simple"].state.value == "Empty"
    assert {k: v.committed_offset for k, v in groups["simple"].offsets.items()} == {(TOPIC, 0): 5}
    # Fresh sessions from the batch's time, and the earliest of them is the next deadline.
    for member_id in story.stable_ids:
        assert stable.timers[heartbeat_key(member_id)].deadline_ms == now + SESSION_MS
    assert deadlines["stable"] == now + SESSION_MS
    # Every loaded group's summary is written (group_state may be behind the log), and a
    # group that group_state lists but the log does not is written Dead.
    summaries = {json.loads(r[7])["group_id"]: json.loads(r[7]) for r in rows if r[0] == op.GROUP}
    assert {g: s["state"] for g, s in summaries.items()} == {
        "ghost": "Dead",
        "left": "Empty",
        "simple": "Empty",
        "stable": "Stable",
    }
    assert [r for r in rows if r[0] in (op.RECORD, op.RESPONSE, op.REJECTED)] == []

    # The members carry on: a heartbeat at their generation is answered NONE.
    beat = {
        "api": "heartbeat",
        "request_id": "hb",
        "group_id": "stable",
        "member_id": story.stable_ids[1],
        "generation_id": story.generation,
    }
    line = op.InboxLine(json.dumps(beat), "file:/wh/inbox/b.jsonl", 0, "stable")
    after = op.run_group(settings, "stable", blobs["stable"], [line], now + 1_000)
    (answer,) = [json.loads(r[7]) for r in after.rows if r[0] == op.RESPONSE]
    assert answer["error"] is None


def test_loads_apply_before_the_batchs_requests(story: Story, tmp_path):
    bootstrap = tmp_path / "boot"
    settings = opsettings(story, bootstrap)
    (load,) = [line for line in load_lines(story, bootstrap) if line.group_id == "simple"]
    fetch = {"api": "offset_fetch", "request_id": "f", "group_id": "simple", "partitions": None}
    # The request's file sorts before the bootstrap file: the load still comes first.
    request = op.InboxLine(json.dumps(fetch), "file:/a/inbox/0.jsonl", 0, "simple")
    outcome = op.run_group(settings, "simple", None, [request, load], story.now)
    (answer,) = [json.loads(r[7]) for r in outcome.rows if r[0] == op.RESPONSE]
    assert [(p["partition"], p["offset"]) for p in answer["partitions"]] == [(0, 5)]


def test_a_load_for_a_group_that_has_state_is_ignored(story: Story, tmp_path):
    bootstrap = tmp_path / "boot"
    settings = opsettings(story, bootstrap)
    (load,) = [line for line in load_lines(story, bootstrap) if line.group_id == "simple"]
    fresh = op.run_group(
        settings,
        "simple",
        None,
        [
            op.InboxLine(
                json.dumps(commit("x", "simple", {3: 33})), "file:/a/inbox/0.jsonl", 0, "simple"
            )
        ],
        story.now,
    )
    outcome = op.run_group(settings, "simple", fresh.blob, [load], story.now + 10)
    assert unclocked(outcome.blob) == unclocked(fresh.blob)  # only its clock moved on
    assert outcome.warnings and "already has state" in outcome.warnings[0]
    assert [r for r in outcome.rows if r[0] != op.TICK] == []
    shard = op.run_shard(settings, {"simple": (None, fresh.blob)}, [load], story.now + 10)
    assert unclocked(shard.state["simple"][1]) == unclocked(fresh.blob) and shard.warnings


def unclocked(blob: bytes | None) -> Any:
    """A stored group without its clock (which every step moves to the step's time)."""
    assert blob is not None
    return dataclasses.replace(decode_group(blob), clock_ms=None)


def test_a_load_line_in_the_inbox_is_a_request_and_is_refused(story: Story, tmp_path):
    bootstrap = tmp_path / "warehouse" / "bootstrap" / "run-1"
    settings = opsettings(story, bootstrap)
    (load,) = [line for line in load_lines(story, bootstrap) if line.group_id == "stable"]
    for source in (
        "file:/elsewhere/inbox/evil.jsonl",
        f"file:{bootstrap}0/evil.jsonl",  # a sibling whose name only starts the same
        f"{tmp_path}/warehouse/inbox/evil.jsonl",
    ):
        line = op.InboxLine(load.value, source, 0, "stable")
        assert not settings.is_load(line)
        outcome = op.run_group(settings, "stable", None, [line], story.now)
        assert outcome.blob is None
        assert [r[0] for r in outcome.rows] == [op.REJECTED]  # no request id to answer
    with_id = json.loads(load.value) | {"request_id": "r1"}
    line = op.InboxLine(json.dumps(with_id), "file:/elsewhere/inbox/evil.jsonl", 0, "stable")
    outcome = op.run_group(settings, "stable", None, [line], story.now)
    assert outcome.blob is None
    (answer,) = [json.loads(r[7]) for r in outcome.rows if r[0] == op.RESPONSE]
    assert answer["error"] == "INVALID_REQUEST"
    # Without a bootstrap directory nothing is a load, even a line from a bootstrap file.
    assert not opsettings(story, None).is_load(load)
    assert settings.is_load(load)
    assert settings.is_load(op.InboxLine("", f"file://{bootstrap}/p%20q.jsonl", 0))
    # Paths compare as Spark gives them: normalised, so ".." neither hides nor fakes a file.
    dotted = op.OperatorSettings(CoordinatorConfig(), b"k" * 32, bootstrap_dir="/wh/x/../boot")
    assert dotted.is_load(op.InboxLine("", "file:/wh/boot/part-00000.jsonl", 0))
    assert not dotted.is_load(op.InboxLine("", "file:///wh/boot/../inbox/evil.jsonl", 0))


def test_a_damaged_load_is_reported_not_raised(tmp_path):
    settings = op.OperatorSettings(CoordinatorConfig(), b"k" * 32, bootstrap_dir=str(tmp_path))
    bad = op.InboxLine('{"group_id": "g", "records": [["!!", null]]}', f"{tmp_path}/p", 0, "g")
    outcome = op.run_group(settings, "g", None, [bad], T0)
    assert outcome.internal_errors and outcome.blob is None


# --- identity, sink, rebuild ---------------------------------------------------------------------


def test_identity_records_the_batch_id_base_and_old_identities_still_load(tmp_path: Path):
    settings = settings_for(tmp_path / "wh")
    made = new_checkpoint_identity(settings, batch_id_base=42, bootstrap_dir="/wh/bootstrap/r")
    assert checkpoint_identity(settings) == made
    assert (made.batch_id_base, made.bootstrap_dir) == (42, "/wh/bootstrap/r")
    with pytest.raises(ValueError, match="written once"):
        new_checkpoint_identity(settings)
    # A coordinator.json from before rebuilds: base 0, no bootstrap.
    path = identity_path(settings)
    stored = json.loads(path.read_text())
    for key in ("batch_id_base", "bootstrap_dir"):
        del stored[key]
    path.write_text(json.dumps(stored))
    old = checkpoint_identity(settings)
    assert (old.app_id, old.seed) == (made.app_id, made.seed)
    assert (old.batch_id_base, old.bootstrap_dir) == (0, None)
    with pytest.raises(ValueError, match="--rebuild-from-log"):
        checkpoint_identity(settings_for(tmp_path / "wh", shards=5))


class Frame:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def toArrow(self) -> pa.Table:
        columns = {name: [r[name] for r in self.rows] for name in op.OUTPUT_COLUMNS}
        return pa.table(columns)


def test_the_sink_writes_spark_batch_n_as_base_plus_n(tmp_path: Path):
    sink = BatchSink(DeltaSink(tmp_path / "tables", "app"), batch_id_base=100)
    response = {"api": "heartbeat", "request_id": "r", "group_id": "g", "error_code": 0}
    response["error"] = None
    row = dict.fromkeys(op.OUTPUT_COLUMNS)
    row.update(kind=op.RESPONSE, group_id="g", seq=0, timestamp_ms=5, body=json.dumps(response))
    sink(Frame([row]), 3)
    assert sink.pop_figures(103) is not None
    assert last_complete_batch(tmp_path / "tables", "app") == 103
    sink(Frame([row]), 3)  # Spark re-runs batch 3: the same warehouse batch, written once
    assert sink.pop_figures(103).skipped_tables == [RESPONSES]
    table = DeltaTable(str(tmp_path / "tables" / RESPONSES)).to_pyarrow_table()
    assert table.column("batch_id").to_pylist() == [103]


def test_a_lost_checkpoint_is_rebuilt_and_the_job_carries_on(story: Story):
    settings = story.settings
    paths = settings.job.paths
    old = read_identity(identity_path(settings))
    before = WarehouseReader(paths.root)
    states_before = before.group_states(before.cut())
    log_end = log_end_offsets(paths.tables)

    # A LocalJob's checkpoint has no Spark state: the job rebuilds by itself.
    assert not rebuild.has_spark_state(paths.checkpoint)
    identity, report = rebuild.prepare_checkpoint(settings)
    assert report is not None and report.identity == identity
    assert report.replaced is not None and report.replaced.name.startswith("coordinator.replaced-")
    assert read_identity(report.replaced / "coordinator.json") == old  # moved, not deleted
    assert identity.app_id != old.app_id and identity.seed != old.seed
    assert identity.batch_id_base == story.last_batch + 1
    assert (report.groups, report.absent_groups) == (3, 0)
    stored = json.loads(identity_path(settings).read_text())
    assert stored["rebuilt_from"]["replaced_app_id"] == old.app_id
    assert stored["rebuilt_from"]["previous_app_ids"] == [old.app_id]
    # Readers see everything written before at once (a marker at base - 1 for the new app).
    assert last_complete_batch(paths.tables, identity.app_id) == story.last_batch
    after = WarehouseReader(paths.root)
    assert after.cut().batch_id == story.last_batch
    assert after.group_states(after.cut()) == states_before
    assert after.log(after.cut()).num_rows == len(story.log_rows())

    # Started again before Spark's first batch: the rebuild is used as it is.
    assert rebuild.prepare_checkpoint(settings) == (identity, None)

    # The first batch (what the Spark job's batch 0 does): loads, then a member's heartbeat.
    opset = operator_settings(settings, identity)
    lines = [
        op.InboxLine(text, f"file:{path}", i, json.loads(text)["group_id"])
        for path in report.bootstrap_files
        for i, text in enumerate(path.read_text().splitlines())
    ]
    beat = {
        "api": "heartbeat",
        "request_id": "after",
        "group_id": "stable",
        "member_id": story.stable_ids[0],
        "generation_id": story.generation,
    }
    lines.append(op.InboxLine(json.dumps(beat), f"file:{paths.inbox}/x.jsonl", 0, "stable"))
    first = op.run_shard(opset, {}, lines, story.now + 60_000)
    committed = commit("again", "simple", {2: 2})
    then = op.run_shard(
        opset,
        first.state,
        [op.InboxLine(json.dumps(committed), f"file:{paths.inbox}/y.jsonl", 0, "simple")],
        story.now + 61_000,
    )
    sink = batch_sink(settings, identity)
    for spark_batch, outcome in enumerate((first, then)):
        rows = [dict(zip(op.OUTPUT_COLUMNS, row, strict=True)) for row in outcome.rows]
        table = pa.Table.from_pylist(rows, schema=datafiles.OPERATOR_SCHEMA)
        sink.write(table, identity.batch_id_base + spark_batch)
    responses = DeltaTable(str(paths.table(RESPONSES))).to_pyarrow_table().to_pylist()
    answered = {r["request_id"]: r for r in responses}
    assert answered["after"]["error"] is None
    assert answered["after"]["batch_id"] == story.last_batch + 1
    assert answered["again"]["batch_id"] == story.last_batch + 2
    # Offsets continue in the log after the old end.
    log = DeltaTable(str(paths.table(CONSUMER_OFFSETS))).to_pyarrow_table().to_pylist()
    new_rows = [r for r in log if r["batch_id"] > story.last_batch]
    partition = new_rows[0]["offsets_partition"]
    assert [r["offset"] for r in new_rows] == [log_end[partition]]
    state = {
        r["group_id"]: r
        for r in DeltaTable(str(paths.table(GROUP_STATE))).to_pyarrow_table().to_pylist()
    }
    assert sorted(state) == ["left", "simple", "stable"]
    assert state["stable"]["state"] == "Stable"
    assert state["simple"]["num_committed_offsets"] == 2
    reader = WarehouseReader(paths.root)
    assert reader.cut().batch_id == story.last_batch + 2
    # The past from before the rebuild is still there to ask (--as-of a log version): the
    # old app id's batches, found through the lineage in coordinator.json.
    assert reader.app_ids == [identity.app_id, old.app_id]
    old_version = DeltaTable(str(paths.table(CONSUMER_OFFSETS))).version() - 1
    past = reader.cut(AsOf(log_version=old_version))
    assert past.batch_id == story.last_batch
    assert reader.group_states(past) == states_before
    # Written to since (a LocalJob has no Spark state either): a new rebuild, above it all.
    _, again = rebuild.prepare_checkpoint(settings)
    assert again is not None and again.identity.batch_id_base == story.last_batch + 3


def test_re_sharding_is_a_rebuild_and_the_partition_count_cannot_change(story: Story):
    settings = story.settings
    paths = settings.job.paths
    with pytest.raises(rebuild.RebuildError, match=r"offsets\.topic\.num\.partitions"):
        rebuild.rebuild_checkpoint(
            settings_for(paths.root, coordinator={"offsets.topic.num.partitions": "10"})
        )
    assert identity_path(settings).exists()  # refused before anything moved
    assert not list(paths.root.glob("checkpoints/*.replaced-*"))
    resharded = settings_for(paths.root, shards=3, state_key="group")
    with pytest.raises(ValueError, match="fixed per checkpoint"):
        checkpoint_identity(resharded)
    identity, report = rebuild.prepare_checkpoint(resharded, rebuild_from_log=True)
    assert report is not None
    assert (identity.shards, identity.state_key) == (3, "group")
    assert checkpoint_identity(resharded) == identity
    # A second rebuild continues above the first one's base, and keeps the lineage.
    again = rebuild.rebuild_checkpoint(resharded)
    assert again.identity.batch_id_base == identity.batch_id_base
    lineage = json.loads(identity_path(settings).read_text())["rebuilt_from"]["previous_app_ids"]
    assert lineage[1:] == [identity.app_id] and len(lineage) == 2
    # A lost checkpoint: the newest app id in responses is the one replaced.
    shutil.rmtree(paths.checkpoint)
    lost = rebuild.rebuild_checkpoint(resharded)
    stored = json.loads(identity_path(settings).read_text())["rebuilt_from"]
    assert stored["previous_app_ids"] == [again.identity.app_id] and lost.replaced is None
    assert len(list(paths.root.glob("checkpoints/*.replaced-*"))) == 2


def test_nothing_to_rebuild_on_a_fresh_warehouse(tmp_path: Path):
    settings = settings_for(tmp_path / "wh")
    identity, report = rebuild.prepare_checkpoint(settings)
    assert report is None and identity.batch_id_base == 0 and identity.bootstrap_dir is None


def test_inbox_files_the_old_checkpoint_answered_are_archived(tmp_path: Path):
    settings = settings_for(tmp_path / "wh")
    paths = settings.job.paths
    paths.inbox.mkdir(parents=True)
    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        (paths.inbox / name).write_text("{}\n")
    old = tmp_path / "old"
    (old / "sources" / "0").mkdir(parents=True)
    (old / "commits").mkdir()
    (old / "commits" / "0").write_text("v1\n{}\n")

    def entry(name: str, batch: int) -> str:
        return json.dumps(
            {"path": f"file://{paths.inbox}/{name}", "timestamp": 1, "batchId": batch}
        )

    (old / "sources" / "0" / "0").write_text("v1\n" + entry("a.jsonl", 0) + "\n")
    (old / "sources" / "0" / "1").write_text("v1\n" + entry("b.jsonl", 1) + "\n")
    assert rebuild.clean_answered_inbox_files(old, settings) == 1
    assert sorted(p.name for p in paths.inbox.iterdir()) == ["b.jsonl", "c.jsonl"]
    assert [p.name for p in paths.archive.iterdir()] == ["a.jsonl"]


def test_run_and_the_spark_submit_job_take_rebuild_from_log():
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    assert parser.parse_args(["--rebuild-from-log"]).rebuild_from_log
    assert not parser.parse_args([]).rebuild_from_log


def test_consumer_offsets_is_read_whole(story: Story):
    table = DeltaTable(str(story.settings.job.paths.table(CONSUMER_OFFSETS)))
    assert (
        rebuild.read_log(story.settings.job.paths.tables).num_rows
        == table.to_pyarrow_table().num_rows
    )


def test_the_sessions_a_load_gives_count_from_the_loading_batchs_delivery(story: Story, tmp_path):
    """The batch that loads every group from the log can be long: the fresh sessions it gives
    count, like the timers its requests arm, from the next batch's timestamp."""
    bootstrap = tmp_path / "boot"
    offsets = tmp_path / "offsets"
    settings = dataclasses.replace(
        opsettings(story, bootstrap), offsets_dir=str(offsets), delivery_window_ms=120_000
    )
    (load,) = [line for line in load_lines(story, bootstrap) if line.group_id == "stable"]
    now = story.now + 3_600_000
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": now, "conf": {}}
    offsets.mkdir()
    (offsets / "0").write_text(f"v1\n{json.dumps(meta)}\n")
    loaded = op.run_group(settings, "stable", None, [load], now)
    group = decode_group(loaded.blob)
    assert group.undelivered is not None and group.undelivered.tag == now
    assert loaded.deadline_ms == now + SESSION_MS  # the earliest the sessions can end
    delivered = now + SESSION_MS - 1  # the loading batch ran almost a session long
    meta["batchTimestampMs"] = delivered
    (offsets / "1").write_text(f"v1\n{json.dumps(meta)}\n")
    meta["batchTimestampMs"] = now + SESSION_MS + 1
    (offsets / "2").write_text(f"v1\n{json.dumps(meta)}\n")
    woken = op.run_group(settings, "stable", loaded.blob, [], now + SESSION_MS + 1, timed_out=True)
    group = decode_group(woken.blob)
    assert list(group.members) == story.stable_ids  # not expired
    for member_id in story.stable_ids:
        assert group.timers[heartbeat_key(member_id)].deadline_ms == delivered + SESSION_MS
    assert woken.rows == []
