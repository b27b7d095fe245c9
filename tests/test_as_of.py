"""``--as-of``: the past answered from the tables' rows, whatever the Delta log still holds.

A time names the last batch whose clock (Spark's batch timestamp, which every append-only
table stores: ``schema.BATCH_CLOCK``) was at or before it, read from the rows the history
window keeps; a log version still reads the Delta log. These tests write warehouses with the
job's own operator and sink (``LocalJob``, ``DeltaSink``; no Spark), clean their Delta logs as
``cleanup_metadata`` does once commits are older than ``job.delta.log.retention.ms``, and check
that the answers inside the window do not change, that what the warehouse no longer keeps is
refused plainly, and that a cut is always a whole batch. The readers that follow the tables
while the log is cleaned (the clients' response reader, the gateway's log topic) are checked
here too.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from coordinator.admin.tables import AsOf, AsOfError, WarehouseReader, format_ms
from coordinator.cli import main
from coordinator.stream import retention
from coordinator.stream.client import ResponseTimeoutError, StreamClient
from coordinator.stream.local import LocalJob
from coordinator.stream.retention import Retention
from coordinator.stream.schema import (
    CONSUMER_OFFSETS,
    GROUP_HISTORY,
    GROUP_STATE,
    RESPONSES,
    TABLES,
    Warehouse,
)
from coordinator.stream.settings import load_settings
from coordinator.stream.sink import DeltaSink, Housekeeping
from tests.admin_support import Story, build_story

#: Delta tables written and read (about 13 s on a quiet box): with the slow tests, as the
#: retention tests, so that make test-fast stays the engine in seconds.
pytestmark = pytest.mark.slow

START_MS = 1_700_000_000_000
STEP_MS = 1_000


def log_files(table: Path) -> list[str]:
    return sorted(p.name for p in (table / "_delta_log").iterdir())


def after_the_newest_log_file(tables: Path) -> None:
    """Wait until the wall clock is past every Delta log file's time (a 1 ms log retention
    then expires them all)."""
    newest = max(p.stat().st_mtime for p in tables.glob("*/_delta_log/*"))
    while time.time() < newest + 0.005:
        time.sleep(0.001)


def clean_delta_logs(tables: Path) -> None:
    """What the sink's housekeeping does once every commit is older than the log retention:
    a checkpoint, then ``cleanup_metadata``; every earlier version is gone afterwards."""
    names = [name for name in TABLES if (tables / name).is_dir()]
    for name in names:
        retention.configure(DeltaTable(str(tables / name)), Retention(delta_log_retention_ms=1), 1)
    after_the_newest_log_file(tables)
    for name in names:
        table = DeltaTable(str(tables / name))
        table.create_checkpoint()
        table.cleanup_metadata()
        assert f"{0:020d}.json" not in log_files(tables / name), name


def groups_json(warehouse: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    code = main(["groups", "--warehouse", str(warehouse), *args, "--output", "json"])
    out = capsys.readouterr().out
    document = json.loads(out) if out.strip().startswith("{") else {"text": out}
    document["exit"] = code
    return document


def groups_text(warehouse: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["groups", "--warehouse", str(warehouse), *args])
    return code, capsys.readouterr().out


# --- a story, before and after its Delta logs are cleaned ---------------------------------------


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Story:
    return build_story(tmp_path_factory.mktemp("as-of") / "warehouse")


def test_as_of_a_time_answers_the_same_after_the_old_delta_versions_are_gone(
    capsys: pytest.CaptureFixture[str], story: Story, tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    shutil.copytree(story.warehouse, warehouse)
    questions = [
        ("--describe", "--all-groups", "--members", "--verbose"),
        ("--describe", "--all-groups", "--offsets"),
        ("--describe", "--all-groups", "--state"),
        ("--list", "--state"),
        ("history", "--group", "orders-app"),
    ]
    moments = sorted(story.moments.items(), key=lambda m: m[1]["ms"])
    before = {
        (name, question): groups_json(
            warehouse, capsys, *question, "--as-of", format_ms(moment["ms"])
        )
        for name, moment in moments
        for question in questions
    }
    for (name, question), document in before.items():
        assert document["exit"] == 0, (name, question, document)
        if question[0] != "history":
            assert document["as_of"]["batch_id"] == story.moments[name]["batch"], name

    clean_delta_logs(Warehouse.at(warehouse).tables)
    for (name, question), document in before.items():
        moment = story.moments[name]
        after = groups_json(warehouse, capsys, *question, "--as-of", format_ms(moment["ms"]))
        assert after == document, (name, question)

    # What the story says about those moments: three members and three rounds of commits
    # before the crash, two members and seven rounds at the end.
    early = before[("three_members", questions[0])]["groups"]
    orders = next(g for g in early if g["group"] == "orders-app")
    assert len(orders["members"]) == 3
    offsets = before[("crash", questions[1])]["groups"]
    orders = next(g for g in offsets if g["group"] == "orders-app")
    assert {r["current_offset"] for r in orders["offsets"]} == {30}
    offsets = before[("end", questions[1])]["groups"]
    orders = next(g for g in offsets if g["group"] == "orders-app")
    assert {r["current_offset"] for r in orders["offsets"]} == {70}


def test_a_log_version_whose_commit_is_gone_is_refused_plainly(
    capsys: pytest.CaptureFixture[str], story: Story, tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    shutil.copytree(story.warehouse, warehouse)
    old = story.moments["three_members"]["log_version"]
    answered = groups_json(warehouse, capsys, "--describe", "--all-groups", "--as-of", str(old))
    assert answered["exit"] == 0
    tables = Warehouse.at(warehouse).tables
    clean_delta_logs(tables)
    code, out = groups_text(warehouse, capsys, "--describe", "--all-groups", "--as-of", str(old))
    assert code == 1
    assert f"log version {old} is no longer kept" in out
    assert "job.delta.log.retention.ms" in out and "Traceback" not in out
    with pytest.raises(AsOfError, match="no longer kept"):
        WarehouseReader(warehouse).cut(AsOf(log_version=old))
    # The version the log starts at (the checkpoint) is still answered.
    log = DeltaTable(str(tables / CONSUMER_OFFSETS))
    reader = WarehouseReader(warehouse)
    assert reader.cut(AsOf(log_version=log.version())).batch_id == log.transaction_version(
        str(reader.app_id)
    )


def test_a_time_before_the_first_batch_has_no_groups(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    first = min(m["ms"] for m in story.moments.values())
    reader = WarehouseReader(story.warehouse)
    assert reader.cut(AsOf(timestamp_ms=first - 3_600_000)).batch_id is None
    code, out = groups_text(
        story.warehouse,
        capsys,
        "--list",
        "--as-of",
        format_ms(first - 3_600_000),
    )
    assert code == 0 and out.strip() == ""


# --- a history window, and batches cut in the middle ----------------------------------------------


def windowed_job(warehouse: Path, **extra: str) -> LocalJob:
    settings = load_settings(
        [],
        {
            "job.retention.every.batches": "5",
            "job.retention.history.ms": str(20 * STEP_MS),
            "job.offsets.delete.retention.ms": str(10 * STEP_MS),
            "job.retention.responses.ms": str(10 * STEP_MS),
            "job.compact.every.batches": "10",
            "job.checkpoint.every.batches": "10",
            "job.delta.log.retention.ms": "1",
            **extra,
        },
        warehouse=str(warehouse),
    )
    return LocalJob(settings)


def commits(n: int) -> list[dict[str, Any]]:
    """Batch ``n``: alpha commits offset ``n``; beta commits every third batch."""
    return [
        {
            "api": "offset_commit",
            "request_id": f"c{n}-{g}",
            "group_id": g,
            "member_id": "",
            "generation_id": -1,
            "offsets": [{"topic": "orders", "partition": 0, "offset": n}],
        }
        for g in ("alpha", "beta")
        if g == "alpha" or n % 3 == 0
    ]


def clock(n: int) -> int:
    return START_MS + n * STEP_MS


def committed(warehouse: Path, capsys: pytest.CaptureFixture[str], at_ms: int) -> dict[str, int]:
    document = groups_json(
        warehouse, capsys, "--describe", "--all-groups", "--as-of", format_ms(at_ms)
    )
    assert document["exit"] == 0, document
    return {g["group"]: g["offsets"][0]["current_offset"] for g in document["groups"]}


def test_inside_the_window_a_time_names_the_last_batch_at_or_before_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = windowed_job(tmp_path)
    batches = 60
    for n in range(batches):
        job.run_batch(commits(n), clock(n))
        if n % 10 == 9:  # the log cleanup of the batch's housekeeping: let its commits expire
            after_the_newest_log_file(Warehouse.at(tmp_path).tables)
    tables = Warehouse.at(tmp_path).tables
    assert f"{1:020d}.json" not in log_files(tables / RESPONSES), "old Delta versions are gone"

    reader = WarehouseReader(tmp_path)
    kept = reader.history_start()
    assert kept is not None and kept.setting == "job.retention.history.ms=20000"
    first = next(n for n in range(batches) if clock(n) >= kept.timestamp_ms)
    assert batches - first >= 15
    for n in range(first, batches):
        assert reader.cut(AsOf(timestamp_ms=clock(n))).batch_id == n
        assert reader.cut(AsOf(timestamp_ms=clock(n) + STEP_MS - 1)).batch_id == n
    assert reader.cut(AsOf(timestamp_ms=clock(batches) + 3_600_000)).batch_id == batches - 1
    # The answers: alpha's offset is the batch's, beta's the last multiple of three.
    for n in (first, first + 4, batches - 1):
        assert committed(tmp_path, capsys, clock(n) + 1) == {"alpha": n, "beta": n - n % 3}

    # Before the window: refused, saying where history starts and the setting.
    with pytest.raises(AsOfError, match="no longer kept: history starts at"):
        reader.cut(AsOf(timestamp_ms=kept.timestamp_ms - 1))
    code, out = groups_text(
        tmp_path, capsys, "--describe", "--group", "alpha", "--as-of", format_ms(clock(2))
    )
    assert code == 1
    assert f"offsets as of {format_ms(clock(2))} are no longer kept: history starts at" in out
    assert "(job.retention.history.ms=20000)" in out
    from coordinator.queries import Queries

    with pytest.raises(AsOfError, match="no longer kept"):
        Queries(None, tmp_path, as_of=format_ms(clock(2)))
    assert Queries(None, tmp_path, as_of=format_ms(clock(first))).cut.batch_id == first


def test_a_batch_still_being_written_is_left_out_of_every_cut(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = windowed_job(tmp_path)
    for n in range(12):
        job.run_batch(commits(n), clock(n))

    class Crash(Exception):
        pass

    def crash_after_the_log(table: str, batch_id: int) -> None:
        if table == CONSUMER_OFFSETS:
            raise Crash(batch_id)

    job.sink.sink.after_commit = crash_after_the_log
    with pytest.raises(Crash):
        job.run_batch(commits(12), clock(12))
    log = DeltaTable(str(Warehouse.at(tmp_path).table(CONSUMER_OFFSETS)))
    assert log.transaction_version(WarehouseReader(tmp_path).app_id) == 12  # in the log ...
    reader = WarehouseReader(tmp_path)
    for at in (clock(12), clock(12) + 1, clock(100)):
        assert reader.cut(AsOf(timestamp_ms=at)).batch_id == 11  # ... but not whole
        assert committed(tmp_path, capsys, at) == {"alpha": 11, "beta": 9}
    assert reader.cut(AsOf(timestamp_ms=clock(11))).batch_id == 11


# --- a warehouse written before group_history existed ---------------------------------------------


def test_time_travel_for_a_warehouse_without_group_history_refuses_past_its_log(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Its past group states come from Delta time travel on group_state, which needs the Delta
    log: on the wall clock, as the job's batches are."""
    job = windowed_job(tmp_path, **{"job.retention.every.batches": "0"})
    moments, versions = [], []
    for n in range(6):
        now = int(time.time() * 1000)
        grows = [
            {**c, "offsets": [{"topic": "orders", "partition": n, "offset": n}]} for c in commits(n)
        ]
        job.run_batch(grows, now)  # each batch changes the groups' summaries (offsets held)
        moments.append(now)
        versions.append(DeltaTable(str(Warehouse.at(tmp_path).table(CONSUMER_OFFSETS))).version())
        while int(time.time() * 1000) <= now + 1:  # the next batch on a later clock
            time.sleep(0.001)
    shutil.rmtree(Warehouse.at(tmp_path).table(GROUP_HISTORY))
    reader = WarehouseReader(tmp_path)
    cut = reader.cut(AsOf(timestamp_ms=moments[2]))
    assert cut.batch_id == 2
    states = reader.group_states(cut)
    assert [(g["group_id"], g["num_committed_offsets"]) for g in states] == [
        ("alpha", 3),
        ("beta", 1),
    ]
    by_version = reader.cut(AsOf(log_version=versions[2]))
    assert by_version.batch_id == 2 and reader.group_states(by_version) == states

    clean_delta_logs(Warehouse.at(tmp_path).tables)
    reader = WarehouseReader(tmp_path)
    cut = reader.cut(AsOf(timestamp_ms=moments[2]))
    with pytest.raises(AsOfError, match="no longer kept") as refused:
        reader.group_states(cut)
    assert "job.delta.log.retention.ms" in str(refused.value)
    assert "time travel on group_state" in str(refused.value)
    code, out = groups_text(tmp_path, capsys, "--list", "--state", "--as-of", format_ms(moments[2]))
    assert code == 1 and "no longer kept" in out and "Traceback" not in out
    from coordinator.queries import Queries

    with pytest.raises(AsOfError, match=r"job\.delta\.log\.retention\.ms"):
        Queries(None, tmp_path, as_of=AsOf(timestamp_ms=moments[2])).group_state()
    # Now is still answered (the current group_state, no time travel).
    assert [g["group_id"] for g in WarehouseReader(tmp_path).group_states(reader.cut())] == [
        "alpha",
        "beta",
    ]


# --- readers that follow the tables while their logs are cleaned ----------------------------------


def test_a_client_behind_the_log_retention_still_gets_its_answer_or_a_clear_timeout(
    tmp_path: Path,
) -> None:
    job = windowed_job(
        tmp_path,
        **{"job.retention.responses.ms": str(30 * STEP_MS), "job.retention.every.batches": "10"},
    )
    paths = Warehouse.at(tmp_path)
    job.run_batch(commits(0), clock(0))
    lagging, late = StreamClient(paths), StreamClient(paths)
    (asked,) = lagging.submit(commits(1)[:1])
    (too_late,) = late.submit([{**commits(1)[0], "request_id": "too-late", "group_id": "gamma"}])
    job.poll_inbox(clock(1))
    for n in range(2, 25):
        job.run_batch(commits(n), clock(n))
        if n % 10 == 9:
            after_the_newest_log_file(paths.tables)
    assert f"{2:020d}.json" not in log_files(paths.table(RESPONSES)), "its commit is gone"
    answer = lagging.wait([asked], timeout_s=10)[asked]
    assert answer["error_code"] == 0 and lagging.reader.fallbacks == 1

    # Later still, past the responses' own retention: the answer is gone, the wait says so.
    for n in range(25, 60):
        job.run_batch(commits(n), clock(n))
    with pytest.raises(ResponseTimeoutError, match="no response within") as waited:
        late.wait([too_late], timeout_s=0)
    assert waited.value.missing == [too_late]


def test_the_log_topic_follows_a_table_whose_old_commits_are_gone(tmp_path: Path) -> None:
    from coordinator.gateway.log_topic import LogTopic
    from coordinator.stream.rebuild import read_log

    job = windowed_job(tmp_path, **{"job.retention.every.batches": "0"})
    paths = Warehouse.at(tmp_path)
    job.run_batch(commits(0), clock(0))
    following = LogTopic(paths.table(CONSUMER_OFFSETS), 50)
    following.refresh_now()
    for n in range(1, 35):
        job.run_batch(commits(n), clock(n))
        if n % 10 == 9:
            after_the_newest_log_file(paths.tables)
    assert f"{1:020d}.json" not in log_files(paths.table(CONSUMER_OFFSETS))
    following.refresh_now()
    rows = read_log(paths.tables).to_pylist()
    for partition in {r["offsets_partition"] for r in rows}:
        assert [r.offset for r in following.records(partition)] == [
            r["offset"] for r in rows if r["offsets_partition"] == partition
        ]


# --- the sink keeps the log short ------------------------------------------------------------------


def test_the_log_cleanup_applies_the_log_retention_even_with_retention_off(tmp_path: Path) -> None:
    """A table configured by an older run (a week) gets the job's log retention at the first
    cleanup, and its log stays short while batches keep coming."""
    tables = tmp_path / "tables"
    week = Retention(delta_log_retention_ms=7 * 86_400_000)
    sink = DeltaSink(tables, "app", Housekeeping(0, 0, 0, retention_every_batches=0))
    write_batch(sink, 0)
    for name in TABLES:
        retention.configure(DeltaTable(str(tables / name)), week, 1)
    short = Retention(delta_log_retention_ms=1)
    sink = DeltaSink(
        tables,
        "app",
        Housekeeping(
            0,
            checkpoint_every_batches=10,
            vacuum_every_batches=0,
            retention_every_batches=0,
            retention=short,
        ),
    )
    lengths = []
    for n in range(1, 61):
        write_batch(sink, n)
        if n % 10 == 9:
            after_the_newest_log_file(tables)
        if n % 10 == 0:
            lengths.append(len(log_files(tables / RESPONSES)))
    configuration = DeltaTable(str(tables / RESPONSES)).metadata().configuration
    assert configuration[retention.LOG_RETENTION] == "interval 1 milliseconds"
    assert max(lengths) <= 8, lengths  # a checkpoint, its commit and what came after
    assert DeltaTable(str(tables / GROUP_STATE)).transaction_version("app") == 60


def write_batch(sink: DeltaSink, n: int) -> None:
    sink.write_batch(
        n,
        records=[],
        responses=[
            {
                "api": "heartbeat",
                "request_id": f"h{n}",
                "group_id": "g",
                "error_code": 0,
                "error": None,
            }
        ],
        groups=[{"group_id": "g", "offsets_partition": 0, "state": "Empty"}],
        rejected=[],
        list_groups=[],
        emitted_at_ms=clock(n),
        written_at_ms=clock(n),
    )
