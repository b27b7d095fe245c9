"""The ``coordinator`` command: replay (contract, section 4), bench, and ``python -m``."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.cli import main
from coordinator.log import codec

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.jsonl"))


def replay(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict], str]:
    code = main(["replay", "--config", str(ROOT / "conf/coordinator.properties"), *args])
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    return code, lines, captured.out + captured.err


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_replays_and_answers_every_request(capsys, example: Path) -> None:
    code, responses, _ = replay(capsys, str(example))
    assert code == 0
    requests = [json.loads(line) for line in example.read_text().splitlines()]
    sent = {r["request_id"] for r in requests if "request_id" in r}
    assert sorted(r["request_id"] for r in responses) == sorted(sent)
    at = [r["at_ms"] for r in responses]
    assert at == sorted(at)
    assert all(r["error_code"] != -1 for r in responses)


def test_same_input_same_output(capsys) -> None:
    example = str(ROOT / "examples/member-crash.jsonl")
    first = replay(capsys, example)[1]
    assert replay(capsys, example)[1] == first


def test_three_members_form_a_group(capsys) -> None:
    _, responses, _ = replay(capsys, str(ROOT / "examples/three-members.jsonl"))
    joins = [r for r in responses if r["api"] == "join_group" and r["error"] is None]
    assert len(joins) == 3 and {r["generation_id"] for r in joins} == {1}
    assert sum(1 for r in joins if r["leader"] == r["member_id"]) == 1
    (describe,) = [r for r in responses if r["api"] == "describe_groups"]
    assert describe["group_state"] == "Stable" and len(describe["members"]) == 3


def test_the_crash_rebalances_to_two_members(capsys) -> None:
    _, responses, _ = replay(capsys, str(ROOT / "examples/member-crash.jsonl"))
    (describe,) = [r for r in responses if r["api"] == "describe_groups"]
    assert describe["group_state"] == "Stable" and len(describe["members"]) == 2
    fetched = [r for r in responses if r["api"] == "offset_fetch"][-1]
    assert [p["offset"] for p in fetched["partitions"]] == [120, 98, 77, 101, 64, 88]


def test_the_static_restart_does_not_rebalance(capsys) -> None:
    _, responses, _ = replay(capsys, str(ROOT / "examples/static-member-restart.jsonl"))
    assert {r["generation_id"] for r in responses if r["api"] == "join_group"} == {1}
    assert [r["error"] for r in responses if r["api"] == "heartbeat"][-3] == "FENCED_INSTANCE_ID"


def test_records_are_written_with_kafka_bytes(capsys, tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    code, _, _ = replay(capsys, "--records", str(out), str(ROOT / "examples/three-members.jsonl"))
    assert code == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    kinds = [r["record_type"] for r in records]
    assert kinds.count("offset_commit") == 6 and "group_metadata" in kinds
    assert [r["offset"] for r in records] == list(range(len(records)))  # one group: one partition
    commit = next(r for r in records if r["record_type"] == "offset_commit")
    value = codec.decode_offset_commit_value(base64.b64decode(commit["value"]))
    assert value.offset == commit["committed_offset"]


def test_a_bad_line_is_answered_and_reported(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"at_ms": 0, "api": "heartbeat", "request_id": 1}\nnot json\n{"at_ms": 5}\n')
    code, responses, text = replay(capsys, str(bad))
    assert code == 1
    assert [r["error"] for r in responses] == ["INVALID_GROUP_ID", "INVALID_REQUEST"]
    assert "bad.jsonl:2: not JSON" in text


def test_the_timeline_reads_like_a_story(capsys) -> None:
    code = main(
        [
            "replay",
            "--format",
            "timeline",
            "--config",
            str(ROOT / "conf/coordinator.properties"),
            str(ROOT / "examples/three-members.jsonl"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "consumer-1-…0001 joins generation 1 as leader (range, sees 3 members)" in out
    assert "-> orders-app: Stable, generation 1" in out


def test_python_dash_m_is_the_console_script() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "coordinator", "replay", "-"],
        input='{"at_ms": 1, "api": "list_groups", "request_id": 9}\n',
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["groups"] == [] and json.loads(line)["at_ms"] == 1


def test_bench_prints_its_figures(capsys) -> None:
    assert main(["bench", "engine", "--quick", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert set(figures) >= {
        "heartbeats_per_s",
        "joins_per_s",
        "rebalance_ms",
        "commits_per_s",
        "fetches_per_s",
        "load_records_per_s",
    }
    assert figures["heartbeats_per_s"] > 0 and set(figures["rebalance_ms"]) == {"10", "100"}
