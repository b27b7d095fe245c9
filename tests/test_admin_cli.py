"""``coordinator groups`` end to end: Kafka's layout and rules over a warehouse with a story.

The warehouse is written by the job's own operator and sink (``tests/admin_support.py``); the
changes go through the inbox to that same job, answering from a thread (``InboxPump``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from coordinator.admin.tables import format_ms
from coordinator.cli import main
from coordinator.cli.timeline import short_member_id
from coordinator.stream.schema import CONSUMER_OFFSETS, Warehouse
from tests.admin_support import InboxPump, Story, build_story


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Story:
    return build_story(tmp_path_factory.mktemp("admin") / "warehouse")


@pytest.fixture
def live_story(tmp_path: Path) -> Story:
    """A story of the test's own: the changing tests change it."""
    return build_story(tmp_path / "warehouse")


def groups(capsys: pytest.CaptureFixture[str], story: Story, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["groups", "--warehouse", str(story.warehouse), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table(out: str) -> list[list[str]]:
    """The rows of a printed table (header included), split on runs of spaces."""
    return [line.split() for line in out.strip().splitlines() if line.strip()]


def as_json(capsys: pytest.CaptureFixture[str], story: Story, *args: str) -> Any:
    code, out, _ = groups(capsys, story, *args, "--output", "json")
    document = json.loads(out)
    document["exit"] = code
    return document


def log_version(story: Story) -> int:
    return DeltaTable(str(Warehouse.at(story.warehouse).table(CONSUMER_OFFSETS))).version()


# --- list -------------------------------------------------------------------------------------


def test_list_prints_one_group_id_a_line(capsys: pytest.CaptureFixture[str], story: Story) -> None:
    code, out, _ = groups(capsys, story, "--list")
    assert code == 0
    assert out.splitlines() == ["billing", "old-app", "orders-app"]


def test_list_with_state_shows_and_filters_states(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, out, _ = groups(capsys, story, "--list", "--state")
    assert code == 0
    assert table(out) == [
        ["GROUP", "STATE"],
        ["billing", "Empty"],
        ["old-app", "Empty"],
        ["orders-app", "Stable"],
    ]
    assert out.splitlines()[0] == f"{'GROUP':<25} {'STATE':<20}".rstrip()
    _, out, _ = groups(capsys, story, "--list", "--state", "stable")
    assert table(out) == [["GROUP", "STATE"], ["orders-app", "Stable"]]


def test_an_unknown_state_is_refused_with_kafkas_message(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, out, _ = groups(capsys, story, "--list", "--state", "Stable,Sleepy")
    assert code == 1
    assert "Error: Invalid state list 'Stable,Sleepy'. Valid states are:" in out


# --- describe -----------------------------------------------------------------------------------


def test_describe_offsets_shows_kafkas_columns_with_lag_from_the_topic_offsets(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, out, err = groups(
        capsys,
        story,
        "--describe",
        "--group",
        "orders-app",
        "--topic-offsets",
        str(story.topic_offsets),
    )
    assert code == 0 and err == ""
    rows = table(out)
    assert rows[0] == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    by_partition = {int(r[2]): r for r in rows[1:]}
    assert sorted(by_partition) == list(range(6))
    survivors = {story.members["orders-1"], story.members["orders-2"]}
    for partition, row in by_partition.items():
        committed = story.committed[("orders-app", "orders", partition)]
        assert row[3] == str(committed)
        end = int(row[4])
        assert row[5] == str(end - committed) and end >= committed
        assert row[6] in survivors
        assert row[8] in ("orders-1", "orders-2")
    assert story.members["orders-3"] not in out


def test_describe_without_topic_offsets_shows_dashes_for_log_end_and_lag(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    _, out, _ = groups(capsys, story, "--describe", "--group", "orders-app")
    assert {tuple(r[4:6]) for r in table(out)[1:]} == {("-", "-")}


def test_describe_an_empty_group_says_it_has_no_active_members(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, out, err = groups(capsys, story, "--describe", "--group", "billing")
    assert code == 0
    assert "Consumer group 'billing' has no active members." in err
    assert [r[:4] for r in table(out)[1:]] == [
        ["billing", "invoices", "0", "10"],
        ["billing", "invoices", "1", "10"],
    ]
    assert {tuple(r[6:]) for r in table(out)[1:]} == {("-", "-", "-")}


def test_describe_members_verbose_shows_each_assignment(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, out, _ = groups(
        capsys, story, "--describe", "--group", "orders-app", "--members", "--verbose"
    )
    assert code == 0
    rows = table(out)
    assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assignments = {r[1]: (r[4], r[5]) for r in rows[1:]}
    assert assignments == {
        story.members["orders-1"]: ("3", "orders(0,1,2)"),
        story.members["orders-2"]: ("3", "orders(3,4,5)"),
    }


def test_describe_state_shows_coordinator_strategy_state_and_members(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    _, out, _ = groups(capsys, story, "--describe", "--group", "orders-app", "--state")
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[0].split("  ")[0] == "GROUP"
    assert "COORDINATOR (ID)" in lines[0] and "ASSIGNMENT-STRATEGY" in lines[0]
    assert lines[1].split() == ["orders-app", "localhost:9092", "(0)", "range", "Stable", "2"]


def test_describe_a_group_that_does_not_exist_is_an_error(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, out, _ = groups(capsys, story, "--describe", "--group", "nobody")
    assert code == 1
    assert "Error: Consumer group 'nobody' does not exist." in out


def test_describe_all_groups_as_json(capsys: pytest.CaptureFixture[str], story: Story) -> None:
    document = as_json(capsys, story, "--describe", "--all-groups")
    assert document["exit"] == 0
    assert [g["group"] for g in document["groups"]] == ["billing", "old-app", "orders-app"]
    orders = document["groups"][2]["offsets"]
    assert {r["partition"]: r["current_offset"] for r in orders} == {
        p: story.committed[("orders-app", "orders", p)] for p in range(6)
    }


# --- the past -----------------------------------------------------------------------------------


def test_as_of_a_log_version_describes_the_group_before_the_crash(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    version = story.moments["three_members"]["log_version"]
    document = as_json(
        capsys, story, "--describe", "--group", "orders-app", "--members", "--as-of", str(version)
    )
    (group,) = document["groups"]
    assert sorted(m["consumer_id"] for m in group["members"]) == sorted(story.members.values())
    assert {m["num_partitions"] for m in group["members"]} == {2}
    assert document["as_of"]["point"] == f"log version {version}"


def test_as_of_a_time_sees_the_offsets_committed_by_then(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    # The batches' clock: the story's simulated one, not the time the tables were written.
    at = format_ms(story.moments["crash"]["ms"])
    document = as_json(capsys, story, "--describe", "--group", "orders-app", "--as-of", at)
    assert document["as_of"]["batch_id"] == story.moments["crash"]["batch"]
    offsets = {r["partition"]: r["current_offset"] for r in document["groups"][0]["offsets"]}
    assert offsets == dict.fromkeys(range(6), 30)  # three rounds of ten before the crash
    now = as_json(capsys, story, "--describe", "--group", "orders-app")
    assert {r["current_offset"] for r in now["groups"][0]["offsets"]} == {70}


def test_as_of_a_version_the_log_does_not_have_is_an_error(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, out, _ = groups(capsys, story, "--describe", "--all-groups", "--as-of", "99999")
    assert code == 1 and "the log has no version 99999" in out


# --- history -------------------------------------------------------------------------------------


def test_history_lists_the_rebalances_with_who_left_and_why(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    document = as_json(capsys, story, "history", "--group", "orders-app")
    first, second = document["rebalances"]
    assert (first["generation_id"], first["members_before"], first["members_after"]) == (1, 0, 3)
    assert sorted(first["joined"]) == sorted(story.members.values())
    assert first["reason"].startswith("Adding new member")
    assert (second["generation_id"], second["outcome"]) == (2, "Stable")
    assert second["left"] == [story.members["orders-3"]] and second["joined"] == []
    assert "heartbeat expiration" in second["reason"]
    assert second["start_ms"] <= second["end_ms"]
    assert second["start_ms"] >= story.moments["crash"]["ms"]
    assert {p["commits"] for p in document["partitions"]} == {6}

    code, out, _ = groups(capsys, story, "history", "--group", "orders-app")
    assert code == 0
    assert short_member_id(story.members["orders-3"]) in out
    assert "on heartbeat expiration" in out


# --- reset-offsets -------------------------------------------------------------------------------


def test_reset_is_a_dry_run_by_default_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    before = log_version(story)
    code, out, _ = groups(
        capsys, story, "--reset-offsets", "--group", "old-app", "--all-topics", "--to-offset", "5"
    )
    assert code == 0
    rows = table(out)
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert rows[1:] == [["old-app", "orders", str(p), "5"] for p in range(6)]
    assert log_version(story) == before


def test_reset_of_a_live_group_is_refused(capsys: pytest.CaptureFixture[str], story: Story) -> None:
    code, out, _ = groups(
        capsys, story, "--reset-offsets", "--group", "orders-app", "--all-topics", "--to-earliest"
    )
    assert code == 1
    assert (
        "Error: Assignments can only be reset if the group 'orders-app' is inactive, but the "
        "current state is Stable." in out
    )


def test_reset_to_datetime_uses_the_sampled_log_ends_and_exports_csv(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    at = format_ms(story.moments["three_members"]["ms"])
    code, out, _ = groups(
        capsys,
        story,
        "--reset-offsets",
        "--group",
        "billing",
        "--topic",
        "invoices",
        "--to-datetime",
        at,
        "--topic-offsets",
        str(story.topic_offsets),
        "--export",
    )
    assert code == 0
    # Before the billing consumer read anything, the sampled log end of invoices was 10.
    assert out.strip().splitlines() == ["invoices,0,10", "invoices,1,10"]


def test_to_latest_without_topic_offsets_says_what_is_missing(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, out, _ = groups(
        capsys, story, "--reset-offsets", "--group", "billing", "--all-topics", "--to-latest"
    )
    assert code == 1 and "--to-latest needs the topics' log offsets" in out


def test_reset_execute_commits_through_the_job_and_as_of_undoes_it(
    capsys: pytest.CaptureFixture[str], live_story: Story
) -> None:
    story = live_story
    before = log_version(story)
    with InboxPump(story):
        code, out, _ = groups(
            capsys,
            story,
            "--reset-offsets",
            "--group",
            "old-app",
            "--topic",
            "orders:0,1",
            "--shift-by",
            "-15",
            "--execute",
        )
        assert code == 0, out
        assert table(out)[1:] == [
            ["old-app", "orders", "0", "25"],
            ["old-app", "orders", "1", "25"],
        ]
        offsets = as_json(capsys, story, "--describe", "--group", "old-app")["groups"][0]
        assert {r["partition"]: r["current_offset"] for r in offsets["offsets"]} == {
            0: 25,
            1: 25,
            2: 40,
            3: 40,
            4: 40,
            5: 40,
        }
        # Back to what was committed before the reset: --to-current as of that log version.
        code, out, _ = groups(
            capsys,
            story,
            "--reset-offsets",
            "--group",
            "old-app",
            "--all-topics",
            "--to-current",
            "--as-of",
            str(before),
            "--execute",
        )
        assert code == 0, out
        offsets = as_json(capsys, story, "--describe", "--group", "old-app")["groups"][0]
        assert {r["current_offset"] for r in offsets["offsets"]} == {40}
    assert log_version(story) > before


def test_delete_refuses_a_live_group_and_deletes_an_empty_one(
    capsys: pytest.CaptureFixture[str], live_story: Story
) -> None:
    story = live_story
    with InboxPump(story):
        code, out, _ = groups(capsys, story, "--delete", "--group", "orders-app")
        assert code == 1
        assert "Error: Deletion of some consumer groups failed:" in out
        assert "* Group 'orders-app' could not be deleted due to: NON_EMPTY_GROUP" in out
        code, out, _ = groups(capsys, story, "--delete", "--group", "old-app")
        assert code == 0
        assert out.strip() == "Deletion of requested consumer groups ('old-app') was successful."
        _, out, _ = groups(capsys, story, "--list")
        assert out.splitlines() == ["billing", "orders-app"]
        code, out, _ = groups(capsys, story, "--describe", "--group", "old-app")
        assert code == 1 and "does not exist" in out


def test_delete_offsets_deletes_an_empty_groups_partition_and_not_a_subscribed_topic(
    capsys: pytest.CaptureFixture[str], live_story: Story
) -> None:
    story = live_story
    with InboxPump(story):
        code, out, _ = groups(
            capsys, story, "--delete-offsets", "--group", "billing", "--topic", "invoices:0"
        )
        assert code == 0, out
        assert "Request succeed for deleting offsets with topic invoices:0 group billing" in out
        assert table(out)[-1] == ["invoices", "0", "Successful"]
        document = as_json(capsys, story, "--describe", "--group", "billing")
        assert [r["partition"] for r in document["groups"][0]["offsets"]] == [1]

        code, out, _ = groups(
            capsys, story, "--delete-offsets", "--group", "orders-app", "--topic", "orders:0"
        )
        assert code == 1
        assert "Encounter some partition level error" in out
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in out


def test_a_change_with_no_job_running_times_out_with_advice(
    capsys: pytest.CaptureFixture[str], story: Story, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(story.warehouse, copy)
    code = main(
        ["groups", "--warehouse", str(copy), "--delete", "--group", "old-app", "--timeout", "0.3"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "no answer from the coordinator within 0.3 s: is the job running" in out
    assert len(list((copy / "inbox").iterdir())) == 1  # left for the job to apply


# --- against the Spark job itself ------------------------------------------------------------------


@pytest.mark.slow
def test_the_cli_inspects_resets_and_deletes_on_the_running_spark_job(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.stream_support import RunningCoordinator
    from tests.test_stream_job import commit, form_group

    running = RunningCoordinator(spark, tmp_path / "warehouse").start()
    story = Story(running.warehouse, tmp_path / "none.csv")
    try:
        generation, ids = form_group(running, "live", 2)
        running.request(commit("c1", "live", ids[0], generation, {0: 5}))
        running.request(commit("c2", "idle", "", -1, {0: 7, 1: 8}))
        _, out, _ = groups(capsys, story, "--list", "--state")
        assert table(out)[1:] == [["idle", "Empty"], ["live", "Stable"]]
        document = as_json(capsys, story, "--describe", "--group", "live", "--members")
        assert sorted(m["consumer_id"] for m in document["groups"][0]["members"]) == sorted(ids)

        code, out, _ = groups(
            capsys,
            story,
            "--reset-offsets",
            "--group",
            "live",
            "--all-topics",
            "--to-offset",
            "0",
            "--execute",
        )
        assert code == 1 and "is inactive, but the current state is Stable" in out
        code, out, _ = groups(
            capsys,
            story,
            "--reset-offsets",
            "--group",
            "idle",
            "--all-topics",
            "--shift-by",
            "-2",
            "--execute",
            "--timeout",
            "120",
        )
        assert code == 0, out
        document = as_json(capsys, story, "--describe", "--group", "idle")
        assert [r["current_offset"] for r in document["groups"][0]["offsets"]] == [5, 6]

        code, out, _ = groups(capsys, story, "--delete", "--group", "live", "--timeout", "120")
        assert code == 1 and "NON_EMPTY_GROUP" in out
        code, out, _ = groups(capsys, story, "--delete", "--group", "idle", "--timeout", "120")
        assert code == 0, out
        _, out, _ = groups(capsys, story, "--list")
        assert out.splitlines() == ["live"]
    finally:
        running.stop()


def test_status_reads_the_checkpoint_identity_and_every_table(story: Story) -> None:
    from coordinator.admin.tables import WarehouseReader
    from coordinator.cli.status import collect
    from coordinator.stream.schema import TABLES

    status = collect(story.warehouse)
    assert list(status["tables"]) == list(TABLES)
    assert status["checkpoint"]["offsets_topic_num_partitions"] == 50
    assert status["last_complete_batch"] == WarehouseReader(story.warehouse).cut().batch_id


def test_status_counts_the_last_batch_s_files_by_the_inbox_offsets(tmp_path: Any) -> None:
    """The last batch's progress says how many rows it read (lines, when the source gives line
    rows) and, from the inbox source's offsets, how many files."""
    from coordinator.cli.status import collect
    from coordinator.stream.schema import Warehouse

    paths = Warehouse.at(tmp_path / "wh")
    paths.status.mkdir(parents=True)
    inbox = {
        "startOffset": {"inbox_seq": 4, "inbox_files": 4},
        "endOffset": {"inbox_seq": 6, "inbox_files": 6},
        "numInputRows": 30,
    }
    progress = {"batchId": 3, "numInputRows": 30, "batchDuration": 12, "sources": [inbox]}
    (paths.status / "progress.json").write_text(json.dumps(progress))
    status = collect(paths.root)
    assert status["progress"]["input_rows"] == 30
    assert status["progress"]["input_files"] == 2
