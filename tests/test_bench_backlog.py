"""``coordinator bench backlog``: CPU per answered request over a fixed backlog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.bench import backlog


def test_it_refuses_a_working_directory_whose_coordinator_the_workers_would_import(
    tmp_path: Path,
) -> None:
    (tmp_path / "coordinator").mkdir()
    (tmp_path / "coordinator" / "__init__.py").write_text("")
    with pytest.raises(RuntimeError, match="run from"):
        backlog.check_working_directory(tmp_path)
    backlog.check_working_directory(tmp_path / "coordinator")  # no package there: fine
    backlog.check_working_directory(Path(backlog.__file__).parents[2])  # this checkout


def test_it_refuses_unknown_modes_and_empty_sizes() -> None:
    with pytest.raises(ValueError, match="unknown modes"):
        backlog.BacklogBenchOptions(modes=("nope",))
    with pytest.raises(ValueError, match=">= 1"):
        backlog.BacklogBenchOptions(files=0)


@pytest.mark.slow
def test_a_tiny_backlog_is_answered_in_each_mode_and_its_cpu_counted(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(backlog.__file__).parents[2])
    options = backlog.BacklogBenchOptions(
        modes=("floor-shard", "shard"),
        files=2,
        per_file=10,
        rounds=1,
        groups=2,
        members=2,
        files_per_trigger=1,
    )
    result = backlog.backlog_bench(options, spark=spark)
    rows = result["rounds"]
    assert [(r["query"], r["mode"], r["round"]) for r in rows] == [
        (0, "floor-shard", 0),
        (1, "shard", 0),
    ]
    for row in rows:
        assert row["requests"] == 20
        assert row["answers"] == {"NONE": 20}  # the shard's groups formed: every beat served
        cpu = row["cpu_us_per_request"]
        assert set(cpu) == set(backlog.KINDS)
        assert cpu["jvm"] > 0 and cpu["python_workers"] > 0 and cpu["driver"] > 0
    report = backlog.format_report(result)
    assert "python_workers" in report and "1 shard" in report


def test_each_query_takes_the_source_lines_setting_in_turn() -> None:
    options = backlog.BacklogBenchOptions(
        modes=("stateless", "stateless", "shard"), source_lines=("jvm", "python")
    )
    assert [options.lines_of(i) for i in range(3)] == ["jvm", "python", "jvm"]
    with pytest.raises(ValueError, match="--source-lines"):
        backlog.BacklogBenchOptions(source_lines=("scala",))
    with pytest.raises(ValueError, match="--source-lines"):
        backlog.BacklogBenchOptions(source_lines=())
