"""``coordinator bench soak``: the verdict's arithmetic, and (slow) a quick run that checks the
machinery: the job as a subprocess restarted cleanly and by ``kill -9``, rows with every
figure, requests answered after the restarts. The full hour is run by hand
(docs/reliability.md)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from coordinator.bench import soak
from coordinator.bench.soak import KILL, STOP, SoakOptions, parse_restarts, trend
from coordinator.stream.schema import TABLES


def sample(minute: float, run: int = 1, restart: bool = False, **figures: float) -> dict[str, Any]:
    return {"minute": minute, "run": run, "restart_in_interval": restart, **figures}


def test_memory_reset_by_restarts_is_judged_within_each_run():
    """A sawtooth (flat within each run, lower after each restart) is steady; growth within
    the runs is flagged even though the restarts pull the overall line down."""
    flat = [
        sample(m, run, restart, driver_rss_mb=level)
        for m, run, restart, level in [
            (5, 1, False, 300),
            (10, 1, False, 301),
            (15, 1, False, 300),
            (20, 2, True, 250),
            (25, 2, False, 300),
            (30, 2, False, 300),
            (35, 3, True, 240),
            (40, 3, False, 301),
            (45, 3, False, 300),
        ]
    ]
    assert trend(flat, settle_minutes=5)["verdict"] == "steady"
    growing = [
        sample(m, 1 + int(m // 20), m in (20, 40), driver_rss_mb=300 + 10 * (m % 20))
        for m in range(5, 60, 5)
    ]
    result = trend(growing, settle_minutes=5)
    assert result["flagged"] == ["driver_rss_mb"]
    assert result["figures"]["driver_rss_mb"]["slope_per_min"] == pytest.approx(10.0)


def test_sizes_must_be_flat_after_settling_and_outages_do_not_count_for_latency():
    rows = [
        sample(
            m,
            restart=m == 30,
            archive_mb=10 + m,  # grows all along: flagged
            checkpoint_mb=20 + (m if m < 15 else 15),  # grows until retention, then flat
            latency_p99_ms=30_000 if m == 30 else 1_500,  # one outage
        )
        for m in range(5, 65, 5)
    ]
    result = trend(rows, settle_minutes=15)
    assert result["samples_judged"] == 10
    assert result["flagged"] == ["archive_mb"]
    assert result["figures"]["checkpoint_mb"]["slope_per_min"] == 0
    assert result["figures"]["latency_p99_ms"]["slope_per_min"] == 0
    assert trend(rows[:3], settle_minutes=0)["verdict"] == "inconclusive"


def test_restart_points():
    assert parse_restarts("0.4:stop,0.7:kill") == ((0.4, STOP), (0.7, KILL))
    assert parse_restarts("none") == ()
    with pytest.raises(ValueError):
        SoakOptions(restarts=((1.2, STOP),))
    with pytest.raises(ValueError):
        SoakOptions(restarts=((0.5, "reboot"),))
    default = SoakOptions()
    assert default.offered_per_s * 60 * default.minutes >= soak.BUSY_DAY[0]
    files_per_s = default.offered_per_s / default.requests_per_file
    assert files_per_s * 60 * default.minutes >= soak.BUSY_DAY[1]


MEMORY = ("driver_rss_mb", "jvm_rss_mb", "jvm_heap_mb", "workers_rss_mb")
SIZES = ("checkpoint_mb", "live_files", "log_files", "log_mb", "delta_mb", "archive_mb")
SPEED = ("batch_p50_ms", "batch_p99_ms", "latency_p50_ms", "latency_p99_ms")


@pytest.mark.slow
def test_a_quick_soak_restarts_the_job_and_reports_every_figure(tmp_path: Path):
    rows: list[dict[str, Any]] = []
    result = soak.run_soak(
        SoakOptions.quick(warehouse=str(tmp_path)), say=print, on_sample=rows.append
    )
    samples = result["samples"]
    assert rows == samples and len(samples) >= 4
    for row in samples:
        for name in ("minute", "run", "requests", "files", *MEMORY, *SIZES, *SPEED):
            assert name in row, name
        assert set(row["tables"]) == set(TABLES)
        for table in row["tables"].values():
            assert {"live_files", "data_files", "data_mb", "log_files", "log_mb"} <= set(table)
    # The machinery measured something: the job's processes, its files, its batches.
    assert any(all(row[n] is not None for n in MEMORY if n != "jvm_heap_mb") for row in samples)
    if shutil.which("jcmd"):
        assert any(row["jvm_heap_mb"] for row in samples)
    assert max(row["checkpoint_mb"] for row in samples) > 0
    assert max(row["log_files"] for row in samples) > 0
    assert any(row["batch_p50_ms"] is not None for row in samples)
    assert any(row["latency_p50_ms"] is not None for row in samples)
    # Both restarts happened, and the job came back and answered after each.
    assert [r["kind"] for r in result["restarts"]] == [STOP, KILL]
    assert all(r["ready_s"] is not None for r in result["restarts"])
    assert result["restarts"][-1]["answered_after"] > 0
    assert result["runs"] == 3 and samples[-1]["run"] == 3
    assert result["requests"] > 0 and result["request_files"] > 0 and result["batches"] > 0
    assert set(result["trend"]["figures"]) == set(soak.LIMITS)
    report = soak.format_report(result)
    assert "restarts: stop at minute" in report and "kill at minute" in report
    assert (Path(result["warehouse"]) / "soak.json").exists()
