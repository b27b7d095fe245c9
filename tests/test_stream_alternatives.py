"""The operator's alternatives that ``coordinator bench stream`` measures: the state store
(``job.state.store``), Arrow batch sizes (a group's rows split over several pandas frames) and the
experimental ``transformWithStateInPandas`` operator (:mod:`coordinator.bench.tws`).

The fast tests drive the Spark functions with stand-ins for Spark's state handles; the slow ones
run the job on the shared SparkSession."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from coordinator import jsonio
from coordinator.bench import stream as bench
from coordinator.bench import tws
from coordinator.bench.stream_members import Member
from coordinator.config import CoordinatorConfig
from coordinator.errors import Error
from coordinator.group.snapshot import decode_group
from coordinator.requests import response
from coordinator.stream import job
from coordinator.stream import operator as op
from coordinator.stream.schema import Warehouse
from coordinator.stream.settings import (
    CHANGELOG_CHECKPOINTING,
    IDENTITY_FILE,
    PROVIDER_CLASS,
    checkpoint_identity,
    load_settings,
    read_identity,
    state_store_confs,
)
from tests.stream_support import RunningCoordinator

SETTINGS = op.OperatorSettings(CoordinatorConfig(group_initial_rebalance_delay_ms=0), b"s" * 32)
SESSION_MS = 6_000


def join(rid: str, member_id: str = "", group: str = "g", session_ms: int = SESSION_MS) -> str:
    return json.dumps(
        {
            "api": "join_group",
            "request_id": rid,
            "group_id": group,
            "member_id": member_id,
            "client_id": "c",
            "session_timeout_ms": session_ms,
            "rebalance_timeout_ms": SESSION_MS,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": ""}],
        }
    )


def sync(rid: str, member_id: str, generation: int, assign: list[str]) -> str:
    return json.dumps(
        {
            "api": "sync_group",
            "request_id": rid,
            "group_id": "g",
            "member_id": member_id,
            "generation_id": generation,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": m, "assignment": ""} for m in assign],
        }
    )


def heartbeat(rid: str, member_id: str, generation: int) -> str:
    return json.dumps(
        {
            "api": "heartbeat",
            "request_id": rid,
            "group_id": "g",
            "member_id": member_id,
            "generation_id": generation,
        }
    )


def commit(rid: str, offset: int, group: str = "g") -> dict[str, Any]:
    return {
        "api": "offset_commit",
        "request_id": rid,
        "group_id": group,
        "generation_id": -1,
        "member_id": "",
        "offsets": [{"topic": "t", "partition": 0, "offset": offset}],
    }


def frames(values: list[str], size: int, name: str = "file:/inbox/a.jsonl") -> list[pd.DataFrame]:
    """The inbox rows of ``values`` (one file) as pandas frames of at most ``size`` rows, as
    Spark hands a key's rows over with ``maxRecordsPerBatch = size``."""
    rows = pd.DataFrame(
        {
            "value": values,
            "source_file": [name] * len(values),
            "position": list(range(len(values))),
            "group_id": ["g"] * len(values),
            "terminated": [True] * len(values),
            "valid_utf8": [True] * len(values),
        }
    )
    return [rows.iloc[i : i + size].reset_index(drop=True) for i in range(0, len(rows), size)]


def records(output: Iterator[pd.DataFrame]) -> list[tuple[Any, ...]]:
    return [
        tuple(None if pd.isna(v) else v for v in row)
        for frame in output
        for row in frame.itertuples(index=False)
    ]


class GroupState:
    """``applyInPandasWithState``'s GroupState, as far as the operator uses it: a timeout set
    in a call lasts until the next call, as in Spark."""

    def __init__(self) -> None:
        self.value: tuple[Any, ...] | None = None
        self.timeout_at: int | None = None
        self.now = 0
        self.timed_out = False

    def getCurrentProcessingTimeMs(self) -> int:
        return self.now

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple[Any, ...] | None:
        return self.value

    @property
    def hasTimedOut(self) -> bool:
        return self.timed_out

    def update(self, value: tuple[Any, ...]) -> None:
        self.value = value

    def remove(self) -> None:
        self.value = None

    def setTimeoutDuration(self, ms: int) -> None:
        self.timeout_at = self.now + ms


class ValueState:
    def __init__(self) -> None:
        self.value: tuple[Any, ...] | None = None

    def get(self) -> tuple[Any, ...] | None:
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class Handle:
    """``StatefulProcessorHandle`` for one key: its value state and its timers."""

    def __init__(self) -> None:
        self.state = ValueState()
        self.timers: set[int] = set()

    def getValueState(self, name: str, schema: str) -> ValueState:
        assert (name, schema) == ("group", tws.STATE_DDL)
        return self.state

    def registerTimer(self, ms: int) -> None:
        self.timers.add(ms)

    def deleteTimer(self, ms: int) -> None:
        self.timers.discard(ms)


def run_apply(function: Any, state: GroupState, now: int, batch: list[pd.DataFrame]) -> list[Any]:
    """One batch of ``applyInPandasWithState`` for key "g", as Spark runs it: the function with
    the key's rows, or, with none, only when the timeout has passed (strictly)."""
    state.now = now
    due = state.timeout_at is not None and now > state.timeout_at
    if not batch and not due:
        return []
    state.timed_out = not batch
    state.timeout_at = None
    return records(function(("g",), iter(batch), state))


def run_tws(
    processor: tws.CoordinatorProcessor, handle: Handle, now: int, batch: list[pd.DataFrame]
) -> list[Any]:
    """One batch of ``transformWithStateInPandas`` for key "g": the rows first, then every
    timer due at ``now`` (Spark deletes a fired timer after the call)."""
    from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

    out = []
    if batch:
        out += records(processor.handleInputRows(("g",), iter(batch), TimerValues(now)))
    for timer in sorted(t for t in handle.timers if t <= now):
        out += records(
            processor.handleExpiredTimer(("g",), TimerValues(now), ExpiredTimerInfo(timer))
        )
        handle.timers.discard(timer)
    return out


# --- Arrow batches: a group's rows over several frames ----------------------------------------


@pytest.mark.parametrize("size", [1, 3, 4])
def test_a_group_split_over_several_frames_steps_as_from_one(size: int):
    values = [join(f"j{i}") for i in range(5)] + [json.dumps(commit(f"c{i}", i)) for i in range(5)]
    function = op.group_function(SETTINGS)
    whole = run_apply(function, one := GroupState(), 1_000, frames(values, 100))
    split = run_apply(function, other := GroupState(), 1_000, frames(values, size))
    assert len(frames(values, size)) > 1
    assert split == whole and len(whole) > 10
    assert other.value == one.value and other.timeout_at == one.timeout_at
    # The frames' order does not matter either: lines apply in (file, line) order.
    backwards = run_apply(function, GroupState(), 1_000, frames(values, size)[::-1])
    assert backwards == whole

    shard = op.shard_function(SETTINGS)
    assert run_apply(shard, GroupState(), 1_000, frames(values, size)) == run_apply(
        shard, GroupState(), 1_000, frames(values, 100)
    )


# --- transformWithStateInPandas: the same step, the same rows ---------------------------------


def test_the_tws_processor_emits_what_apply_in_pandas_with_state_does():
    """A group forms, one member keeps heartbeating and the other goes silent until its session
    expires: batch by batch, the two operators emit the same rows (batch times avoid a
    deadline's exact millisecond, where their timers differ by one batch)."""
    apply_state, handle = GroupState(), Handle()
    function = op.group_function(SETTINGS)
    processor = tws.CoordinatorProcessor(SETTINGS)
    processor.init(handle)

    def both(now: int, values: list[str]) -> list[Any]:
        batch = frames(values, 3, f"file:/inbox/{now:08d}.jsonl")
        a = run_apply(function, apply_state, now, batch)
        b = run_tws(processor, handle, now, batch)
        assert a == b, now
        return a

    def answers(rows: list[Any]) -> dict[str, dict[str, Any]]:
        return {
            body["request_id"]: body
            for body in (json.loads(r[7]) for r in rows if r[0] == op.RESPONSE)
        }

    first = answers(both(1_250, [join("a0"), join("b0")]))
    a, b = first["a0"]["member_id"], first["b0"]["member_id"]
    # The initial delay (0) runs out at the end of the step that rejoins them.
    joined = answers(both(2_250, [join("a1", a), join("b1", b)]))
    generation = joined["a1"]["generation_id"]
    leader = joined["a1"]["leader"]
    synced = answers(
        both(
            3_250,
            [
                sync("as", a, generation, [a, b] if leader == a else []),
                sync("bs", b, generation, [a, b] if leader == b else []),
            ],
        )
    )
    assert {s["error_code"] for s in synced.values()} == {0}
    assert handle.timers  # armed: the sessions' expiry
    # a heartbeats until 12 s (one heartbeat lands after b's deadline: data and a due timer in
    # one batch), then both are silent and every expiry fires in a batch without input. Batch k
    # is at 4 s + k s + (37 k mod 500) ms: no deadline (a step's time + 6 s) is a batch's time.
    kinds: list[str] = []
    # Until 34 s: the sweep of g's offsets partition (3 of 50) runs at 36 s, and deletes the
    # group, Empty by then and without offsets.
    for k in range(31):
        now = 4_000 + 1_000 * k + (37 * k) % 500
        values = [heartbeat(f"h{k}", a, generation)] if k % 2 == 0 and now <= 12_000 else []
        kinds += [r[0] for r in both(now, values)]
    assert kinds.count(op.TICK) >= 1
    assert apply_state.value is not None and handle.state.value is not None
    assert bytes(apply_state.value[0]) == bytes(handle.state.value[0])
    assert decode_group(bytes(handle.state.value[0])).members == {}


def test_a_stale_timer_is_ignored_and_a_gone_group_leaves_no_state():
    handle = Handle()
    processor = tws.CoordinatorProcessor(SETTINGS)
    processor.init(handle)
    run_tws(processor, handle, 1_000, frames([join("j")], 10))
    (deadline,) = handle.timers
    assert handle.state.value is not None and handle.state.value[1] == deadline
    from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

    stale = processor.handleExpiredTimer(
        ("g",), TimerValues(deadline + 5), ExpiredTimerInfo(deadline - 1)
    )
    assert records(stale) == []
    delete = json.dumps({"api": "delete_groups", "request_id": "d", "group_id": "g"})
    rows = run_tws(processor, handle, 2_000, frames([delete], 10))
    assert [json.loads(r[7])["state"] for r in rows if r[0] == op.GROUP] == ["Dead"]
    assert handle.state.value is None and handle.timers == set()


# --- settings and options ---------------------------------------------------------------------


def test_the_state_store_setting_maps_to_spark_and_is_pinned_by_the_checkpoint(tmp_path: Path):
    assert load_settings([]).job.state_store == "hdfs"
    rocks = state_store_confs("rocksdb")
    assert rocks[PROVIDER_CLASS].endswith("RocksDBStateStoreProvider")
    assert rocks[CHANGELOG_CHECKPOINTING] == "true"
    assert state_store_confs("hdfs")[PROVIDER_CLASS].endswith("HDFSBackedStateStoreProvider")
    with pytest.raises(ValueError, match=r"job\.state\.store"):
        load_settings([], {"job.state.store": "memory"})

    settings = load_settings([], {"job.state.store": "rocksdb"}, warehouse=str(tmp_path))
    identity = checkpoint_identity(settings)
    assert identity.state_store == "rocksdb"
    with pytest.raises(ValueError, match=r"state_store='rocksdb'.*fixed per checkpoint"):
        checkpoint_identity(load_settings([], warehouse=str(tmp_path)))
    # A coordinator.json written before the setting existed reads as hdfs.
    path = settings.job.paths.checkpoint / IDENTITY_FILE
    stored = json.loads(path.read_text())
    del stored["state_store"]
    path.write_text(json.dumps(stored))
    assert read_identity(path).state_store == "hdfs"
    assert checkpoint_identity(load_settings([], warehouse=str(tmp_path))).state_store == "hdfs"


def test_run_and_bench_take_the_new_options():
    from coordinator.cli import bench as bench_cli
    from coordinator.cli.run import add_job_options, settings_from

    parser = argparse.ArgumentParser()
    add_job_options(parser)
    assert settings_from(parser.parse_args(["--state-store", "rocksdb"])).job.state_store == (
        "rocksdb"
    )
    top = argparse.ArgumentParser()
    bench_cli.add_parser(top.add_subparsers())
    args = top.parse_args(
        ["bench", "stream", "--state-store", "rocksdb", "--arrow-batch", "1000", "--modes", "tws"]
    )
    assert (args.state_store, args.arrow_batch, args.modes) == ("rocksdb", 1000, "tws")

    options = bench.StreamBenchOptions(
        modes=("floor", "group", "tws"), state_store="rocksdb", arrow_batch=1000
    )
    assert [bench.mode_state_store(m, options) for m in options.modes] == [
        "hdfs",
        "rocksdb",
        "rocksdb",
    ]
    assert [bench.mode_arrow_batch(m, options) for m in options.modes] == [None, 1000, 1000]
    assert bench.mode_state_store("tws", bench.StreamBenchOptions()) == "rocksdb"
    assert bench.mode_state_store("group", bench.StreamBenchOptions()) is None
    with pytest.raises(ValueError, match="state-store"):
        bench.StreamBenchOptions(state_store="memory")
    with pytest.raises(ValueError, match="arrow-batch"):
        bench.StreamBenchOptions(arrow_batch=0)
    with pytest.raises(ValueError, match="modes"):
        bench.StreamBenchOptions(modes=("rocksdb",))


def test_the_overload_offers_twice_the_capacity_then_half_of_it():
    options = bench.StreamBenchOptions(
        groups=100, members=10, overload_capacity=2_000, seconds=60, recover_seconds=30
    )
    assert options.offered_at(None) == 1_000  # warming up
    assert options.offered_at(0) == options.offered_at(59.9) == 4_000
    assert options.offered_at(60) == options.offered_at(500) == 1_000
    assert options.offered_per_s == 4_000
    # At half the capacity each of 1,000 members heartbeats every second: well within 30 s.
    with pytest.raises(ValueError, match="a third of its"):
        bench.StreamBenchOptions(groups=1_000, members=10, overload_capacity=1_000)
    with pytest.raises(ValueError, match="overload"):
        bench.StreamBenchOptions(overload_capacity=0)
    top = argparse.ArgumentParser()
    from coordinator.cli import bench as bench_cli

    bench_cli.add_parser(top.add_subparsers())
    args = top.parse_args(
        ["bench", "stream", "--overload", "2000", "--recover-seconds", "30", "--modes", "batchtime"]
    )
    assert (args.overload, args.recover_seconds, args.modes) == (2000.0, 30.0, "batchtime")


def test_the_load_sends_members_in_turn_and_a_falsely_expired_member_rejoins(tmp_path: Path):
    members = [Member("g", f"m{i}", 1) for i in range(3)]
    options = bench.StreamBenchOptions(
        groups=1, members=3, overload_capacity=100, session_timeout_ms=30_000
    )
    paths = Warehouse.at(str(tmp_path))
    load = bench.Load(paths, members, options, None, None)  # joined: as the floors start
    load._started = start = time.time()
    load.window_start = start
    load._due(start)
    due = load._due(start + 0.1)  # 200/s (twice the capacity) for 0.1 s: members in turn
    assert 19 <= len(due) <= 20 and due == [i % 3 for i in range(len(due))]
    load._send([0, 1, 2])
    load._send([0, 1, 2])
    answers = {
        "h0.2": (Error.UNKNOWN_MEMBER_ID, "UNKNOWN_MEMBER_ID"),  # previous one on time: false
        "h1.2": (Error.NONE, None),
        "h2.1": (Error.UNKNOWN_MEMBER_ID, "UNKNOWN_MEMBER_ID"),  # the first, just after start
        "h0.1": (Error.UNKNOWN_MEMBER_ID, "UNKNOWN_MEMBER_ID"),  # sent before the rejoin: stale
    }
    rows = [
        {"request_id": rid, "error_code": int(code), "error": name}
        for rid, (code, name) in answers.items()
    ]
    load._answered(pa.Table.from_pylist(rows), time.time())
    assert sorted(index for _, index in load.m.false_expiries) == [0, 2]
    assert len(load.m.answered) == 4  # every answer is a round trip all the same
    # The two expired members join again as new members in the next file, and send no
    # heartbeat until their JoinGroup is answered.
    load._send([0, 1, 2])
    (newest,) = sorted(paths.inbox.glob("*.jsonl"))[-1:]
    sent = [json.loads(line) for line in newest.read_text().splitlines()]
    assert [(r["api"], r["member_id"]) for r in sent] == [
        ("heartbeat", "m1"),
        ("join_group", ""),
        ("join_group", ""),
    ]
    figures = bench._overload_figures(options, load.m, time.time() - 10, time.time() + 1)
    assert figures["false_expiries"] == 2 and figures["members_falsely_expired"] == 2
    assert figures["goal_no_false_expiry"] is False
    assert figures["rejoins"] == 2 and figures["rebalances"] == 0
    assert [p["phase"] for p in figures["phases"]] == ["2x", "0.5x"]
    assert [p["rejoins"] for p in figures["phases"]] == [2, 0]
    membership = bench._membership_figures(load.m.members, time.time() - 10, time.time() + 1)
    assert membership["rejoin_causes"] == {"heartbeat:UNKNOWN_MEMBER_ID": 2}


def test_capacity_steps_are_checked_and_the_capacity_is_the_last_sustained_rate():
    options = bench.StreamBenchOptions(groups=10, members=10, capacity_rates=(100, 200, 400))
    assert options.offered_per_s is None
    with pytest.raises(ValueError, match="ascending"):
        bench.StreamBenchOptions(capacity_rates=(200, 100))
    with pytest.raises(ValueError, match="separate runs"):
        bench.StreamBenchOptions(capacity_rates=(100,), overload_capacity=100)
    # 1,000 members in turn at 10/s: each would heartbeat every 100 s, beyond its session.
    with pytest.raises(ValueError, match="a third of its"):
        bench.StreamBenchOptions(groups=100, members=10, capacity_rates=(10, 20))

    m = bench._Measured()
    steps = []
    for i, (rate, latency_s, backlog_per_s) in enumerate(
        [(100, 0.5, 0), (200, 2.0, 1), (400, 9.0, 80), (800, 0.1, 0)]
    ):
        start = 100.0 * i
        steps.append((rate, start, start + 10, 0.25 * i))
        for k in range(rate * 10):
            sent = start + k / rate
            m.sent.append(sent)
            m.answered.append((sent, sent + latency_s))
        m.outstanding.extend((start + t, t * backlog_per_s) for t in range(10))
    # One request of the second step never answered: it is the slowest, not left out.
    m.sent.append(105.0)
    figures = bench._capacity_figures(m, steps)
    sustained = [(s["rate_per_s"], s["steady"], s["sustained"]) for s in figures["steps"]]
    assert sustained == [
        (100, True, True),
        (200, True, True),
        (400, False, False),  # the backlog grew, and p99 9 s
        (800, True, True),  # past a broken rate: not counted
    ]
    assert figures["steps"][1]["unanswered"] == 1
    assert [s["load_cpu_cores"] for s in figures["steps"]] == [0.0, 0.25, 0.5, 0.75]
    assert figures["capacity_per_s"] == 200
    modes = {
        "stateless": {"capacity": {"capacity_per_s": 400.0}},
        "floor-shard": {"capacity": {"capacity_per_s": 400.0}},
        "shard": {"capacity": {"capacity_per_s": 200.0}},
        "group": {"capacity": {"capacity_per_s": 300.0}},
    }
    ratios = bench.capacity_ratios(modes)
    assert ratios["shard"] == {"capacity_per_s": 200.0, "ratio": 0.5, "goal": 0.7, "met": False}
    assert ratios["group"]["met"] is True
    assert ratios["floor-shard"]["goal"] is None and "stateless" not in ratios


def test_the_floors_answer_every_line_none_in_the_jobs_output_schema():
    lines = pd.DataFrame(
        {
            "value": [json.dumps({"api": "heartbeat", "request_id": f"r{i}"}) for i in range(3)],
            "group_id": ["a", "b", "a"],
        }
    )
    (out,) = list(bench.stateless_function(iter([lines])))
    assert list(out.columns) == list(op.OUTPUT_COLUMNS)
    bodies = [json.loads(b) for b in out["body"]]
    assert [(b["request_id"], b["group_id"], b["error_code"]) for b in bodies] == [
        ("r0", "a", 0),
        ("r1", "b", 0),
        ("r2", "a", 0),
    ]
    assert set(out["kind"]) == {op.RESPONSE}
    # Written as the job writes a heartbeat's answer, so the sink reads them alike.
    assert list(out["body"]) == [
        jsonio.dumps_response(response("heartbeat", f"r{i}", g))
        for i, g in enumerate(["a", "b", "a"])
    ]


# --- on Spark ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_capacity_bench_steps_the_two_floors_through_the_job_sink(spark: Any, tmp_path: Path):
    options = bench.StreamBenchOptions.quick(
        modes=("stateless", "floor-shard"),
        capacity_rates=(20.0,),
        seconds=3.0,
        warmup_seconds=2.0,
        drain_seconds=30.0,
        probes=0,
        warehouse=str(tmp_path),
    )
    result = bench.stream_bench(options, spark=spark)
    for mode in ("stateless", "floor-shard"):
        # Spark's progress of every batch is kept beside the mode's warehouse.
        progress = Path(result["warehouse"]) / mode / bench.PROGRESS_FILE
        batches = [json.loads(line) for line in progress.read_text().splitlines()]
        assert batches and all("durationMs" in b for b in batches), mode
        figures = result["modes"][mode]
        assert figures["backlog"]["unanswered_after_drain"] == 0, mode
        assert figures["errors"] == {"NONE": figures["errors"]["NONE"]}, mode
        steps = figures["capacity"]["steps"]
        assert [s["rate_per_s"] for s in steps] == [20.0], mode
        assert steps[0]["offered_per_s"] > 0, mode
        assert 0 < steps[0]["load_cpu_cores"] < 2, mode  # the load's process, measured
    assert result["capacity"]["floor-shard"]["goal"] is None
    report = bench.format_report(result)
    assert "capacity over the stateless floor's" in report and "floor-shard" in report
    assert "cores: sustained" in report or "cores: NOT sustained" in report


@pytest.mark.slow
def test_the_overload_bench_forms_its_groups_through_the_job_and_reports_members(
    spark: Any, tmp_path: Path
):
    options = bench.StreamBenchOptions.quick(
        modes=("shard",),
        overload_capacity=20.0,
        seconds=3.0,
        recover_seconds=2.0,
        warmup_seconds=2.0,
        drain_seconds=30.0,
        probes=0,
        warehouse=str(tmp_path),
    )
    result = bench.stream_bench(options, spark=spark)
    figures = result["modes"]["shard"]
    assert figures["formed_s"] is not None  # every member joined and synced through the job
    assert figures["backlog"]["unanswered_after_drain"] == 0
    assert figures["overload"]["false_expiries"] == 0
    assert figures["membership"]["false_expiries"] == 0
    assert figures["membership"]["expiries_after_silence"] == 0
    assert figures["errors"] == {"NONE": figures["errors"]["NONE"]}
    report = bench.format_report(result)
    assert "rebalances in" in report and "rejoins by" in report


@pytest.fixture
def arrow_batch_of_3(spark: Any) -> Iterator[None]:
    spark.conf.set(bench.ARROW_BATCH, "3")
    yield
    spark.conf.unset(bench.ARROW_BATCH)


@pytest.mark.slow
def test_the_job_answers_a_group_whose_rows_span_several_arrow_batches(
    spark: Any, tmp_path: Path, arrow_batch_of_3: None
):
    c = RunningCoordinator(spark, tmp_path / "warehouse").start()
    try:
        fetch = {"api": "offset_fetch", "request_id": "f", "group_id": "solo", "partitions": None}
        # One file, one group, 12 lines: four Arrow batches of 3 rows for one key.
        answers = c.requests([commit(f"c{i}", 100 + i, group="solo") for i in range(11)] + [fetch])
        assert [a["request_id"] for a in answers] == [f"c{i}" for i in range(11)] + ["f"]
        assert all(p["error"] is None for a in answers[:-1] for p in a["partitions"])
        assert answers[-1]["partitions"][0]["offset"] == 110  # every line, in line order
        offsets = [r["committed_offset"] for r in c.rows("consumer_offsets")]
        assert sorted(offsets) == list(range(100, 111))
    finally:
        c.stop()


@pytest.mark.slow
def test_the_job_runs_on_rocksdb_and_its_checkpoint_keeps_it(spark: Any, tmp_path: Path):
    warehouse = tmp_path / "warehouse"
    c = RunningCoordinator(spark, warehouse, state_store="rocksdb").start()
    try:
        answers = c.requests([commit("c1", 5, group="ledger")])
        assert answers[0]["partitions"][0]["error"] is None
        c.restart()  # the state comes back from RocksDB
        fetch = {"api": "offset_fetch", "request_id": "f", "group_id": "ledger"}
        assert c.request(fetch)["partitions"][0]["offset"] == 5
    finally:
        c.stop()
    checkpoint = c.settings.job.paths.checkpoint
    offsets_log = (checkpoint / "offsets" / "0").read_text()
    assert "RocksDBStateStoreProvider" in offsets_log
    assert read_identity(checkpoint / IDENTITY_FILE).state_store == "rocksdb"
    with pytest.raises(ValueError, match="fixed per checkpoint"):
        RunningCoordinator(spark, warehouse).start()


class TwsCoordinator(RunningCoordinator):
    """The job with :func:`coordinator.bench.tws.tws_stream` as its operator."""

    def start(self) -> TwsCoordinator:
        assert self.running is None
        self.spark.conf.set("spark.sql.shuffle.partitions", str(self.settings.job.shards))
        self.running = job.start(self.spark, self.settings, self.after_write, stream=tws.tws_stream)
        return self


@pytest.mark.slow
def test_the_tws_operator_forms_a_group_and_expires_a_silent_member(spark: Any, tmp_path: Path):
    pytest.importorskip("google.protobuf")
    c = TwsCoordinator(spark, tmp_path / "warehouse", state_store="rocksdb").start()
    try:
        # Both outlast slow batches until the group is formed (this operator's first batch
        # takes 10 s or more, and on a box running ten times more work than it has cores a
        # pending member's 60 s ran out before its second join was served); then the second
        # member's session is 5 s (its second join sets it) and it never heartbeats.
        first = c.requests([json.loads(join(f"j{i}", session_ms=300_000)) for i in range(2)])
        ids = [a["member_id"] for a in first]
        sessions = [300_000, 5_000]
        joined = c.requests(
            [
                json.loads(join(f"k{i}", m, session_ms=s))
                for i, (m, s) in enumerate(zip(ids, sessions, strict=True))
            ]
        )
        assert [j["error"] for j in joined] == [None, None], joined
        generation, leader = joined[0]["generation_id"], joined[0]["leader"]
        c.requests(
            [
                json.loads(sync(f"s{i}", m, generation, ids if m == leader else []))
                for i, m in enumerate(ids)
            ]
        )
        alive, silent = ids
        deadline = time.monotonic() + 90
        answer: dict[str, Any] = {}
        beat = 0
        while time.monotonic() < deadline:
            beat += 1
            answer = c.request(json.loads(heartbeat(f"hb{beat}", alive, generation)))
            if answer["error"] == "REBALANCE_IN_PROGRESS":
                break
            assert answer["error"] is None
            time.sleep(0.5)
        assert answer["error"] == "REBALANCE_IN_PROGRESS", "the silent member never expired"
        # group_history, not group_state: the current row moves on to Empty once `alive`'s
        # rebalance timeout (6 s) passes without a rejoin, which a slow read can miss.
        state = c.wait_for(
            lambda: [s for s in c.rows("group_history") if s["state"] == "PreparingRebalance"],
            what="the rebalance in group_history",
        )
        assert state[0]["rebalance_reason"] == (
            f"removing member {silent} on heartbeat expiration."
        )
    finally:
        c.stop()


def test_the_operator_profile_runs_the_shard_function_over_stable_groups():
    from coordinator.bench import operator as operator_bench

    options = operator_bench.OperatorBenchOptions(groups=4, members=3, batches=2, sample_rounds=200)
    result = operator_bench.operator_bench(options)
    # Every member heartbeats within its session: one answer each, nothing else written.
    assert result["requests"] == result["output_rows"] == 4 * 3 * 2
    stages = result["stages_us_per_request"]
    assert set(stages) == set(operator_bench.STAGES)
    assert stages["engine step (requests -> answers, records)"] > 0
    assert stages["parse a line (JSON, checks)"] > 0
    assert stages["group snapshot encode"] > 0 and stages["answers to JSON"] > 0
    assert result["us_per_request_cpu"] > 0 and result["top_own_time"]
    # Sampled by CPU time too (every platform the suite runs on has setitimer).
    assert set(result["stages_us_per_request_sampled"]) == set(operator_bench.STAGES)
    assert result["cpu_samples"] > 0 and result["top_sampled_lines"]
    # PySpark's serializer, run over the function's output frames as the worker runs it.
    assert result["us_per_request_serializer"] > 0
    report = operator_bench.format_report(result)
    assert "us CPU per request" in report and "PySpark's serializer" in report
