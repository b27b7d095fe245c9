"""``coordinator bench sink``: its ways write the same rows, and it reports every figure."""

from __future__ import annotations

import pytest

from coordinator.bench import sink as bench
from coordinator.cli import main
from coordinator.stream import datafiles


@pytest.mark.parametrize("kind", bench.KINDS)
def test_the_per_row_way_builds_the_tables_the_sink_builds(kind: str) -> None:
    rows = bench.operator_rows(kind, 120, 7)
    batch = datafiles.BatchRows.split(rows)
    if kind == "answers":
        assert batch.responses.num_rows == 120 and batch.records.num_rows == 0
        ours = datafiles.responses_table(batch.responses, 3, bench.BATCH_MS, bench.BATCH_MS)
    else:
        assert batch.records.num_rows == 120 and batch.responses.num_rows == 0
        ours, _ = datafiles.log_table(batch.records, {}, 3, bench.BATCH_MS)
    theirs = bench._per_row_tables(kind, rows, 3)
    # The sink sorts a batch by (offsets partition,) group and emission; the per-row way keeps
    # the rows' order, and numbers the offsets in it: the same rows either way.
    if kind == "answers":
        order = [("body", "ascending")]
    else:
        order = [("key", "ascending"), ("committed_offset", "ascending")]
        ours, theirs = ours.drop_columns(["offset"]), theirs.drop_columns(["offset"])
    assert ours.sort_by(order).to_pylist() == theirs.sort_by(order).to_pylist()


def test_the_report_has_every_way_of_every_kind() -> None:
    result = bench.sink_bench(bench.SinkBenchOptions(rows=60, groups=5, rounds=1))
    assert set(result.us_per_row) == set(bench.KINDS)
    for kind in bench.KINDS:
        assert set(result.us_per_row[kind]) == set(bench.WAYS)
        assert all(figure > 0 for figure in result.us_per_row[kind].values())
        assert set(result.sink_parts[kind]) == {"split", "write"}
    report = bench.format_report(result)
    assert "per row/sink" in report and "commits" in report


def test_an_unknown_kind_is_refused_with_what_is_known(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "sink", "--kinds", "answer"]) == 2
    assert "answers and/or commits" in capsys.readouterr().err
