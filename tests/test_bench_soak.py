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


def test_a_sawtooth_is_judged_by_its_peaks():
    """Compaction makes a sawtooth of the sizes: readings every 5 minutes land at a different
    phase each time, and their slope says "growing" where the peaks are flat. The verdict
    judges the interval's peak; a sawtooth whose peaks climb is still flagged."""
    phases = [0.1, 0.3, 0.5, 0.7, 0.9, 1.0, 0.95, 0.9, 0.95, 1.0]  # late in the cycle, later on
    flat = [
        sample(15 + 5 * i, live_files=500 + 2_500 * phase, peaks={"live_files": 3_000})
        for i, phase in enumerate(phases)
    ]
    assert soak._slope([(s["minute"], s["live_files"]) for s in flat]) > 30  # what fooled it
    result = trend(flat, settle_minutes=15)
    assert result["figures"]["live_files"]["slope_per_min"] == 0
    assert result["verdict"] == "steady"
    climbing = [
        sample(15 + 5 * i, live_files=500, peaks={"live_files": 3_000 + 100 * i}) for i in range(10)
    ]
    result = trend(climbing, settle_minutes=15)
    assert result["flagged"] == ["live_files"]
    assert result["figures"]["live_files"]["slope_per_min"] == pytest.approx(20.0)


def test_memory_is_judged_from_the_warm_up_of_each_run():
    """Each start of the job warms up again (about 13 minutes for the driver): a run's samples
    are judged from ``settle_minutes`` after it began, by slope where a run has three such
    samples, and by the highest each run reached, which must not climb from run to run."""

    def level(minute: float, start: float, growth: float) -> float:
        warm = min(minute - start, 13.0)
        return 300 + 15 * warm + growth * max(minute - start - 13.0, 0.0)

    def runs(growth: float, starts: tuple[float, ...], step: float = 0.0) -> list[dict[str, Any]]:
        rows = []
        for m in range(5, 65, 5):
            run = sum(1 for start in starts if start <= m)
            start = starts[run - 1]
            rows.append(
                sample(
                    m,
                    run,
                    start > 0 and m - start < 5,
                    driver_rss_mb=level(m, start, growth) + step * (run - 1),
                    run_started_minute=start,
                )
            )
        return rows

    # Restarts at 24 and 42 minutes: each run warms up and holds.
    short = (0.0, 24.0, 42.0)
    result = trend(runs(0.0, short), settle_minutes=15)
    assert result["verdict"] == "steady"
    assert result["figures"]["driver_rss_mb"]["run_highs"] == [495.0, 495.0, 495.0]
    # Too short after their warm-ups for a slope; a level that climbs run after run is flagged.
    assert result["figures"]["driver_rss_mb"]["slope_per_min"] is None
    assert trend(runs(0.0, short, step=60.0), settle_minutes=15)["flagged"] == ["driver_rss_mb"]
    # A first run long enough after its warm-up: growth within it is flagged by slope.
    long = (0.0, 40.0)
    assert trend(runs(0.0, long), settle_minutes=15)["verdict"] == "steady"
    growing = trend(runs(5.0, long), settle_minutes=15)
    assert growing["flagged"] == ["driver_rss_mb"]
    assert growing["figures"]["driver_rss_mb"]["slope_per_min"] == pytest.approx(5.0)


def test_the_checkpoint_is_judged_within_each_run():
    """A restart leaves a transient in the checkpoint (the state store's maintenance starts
    over): high after each restart and back down within the run is steady; growth within the
    runs is flagged."""
    transient = [
        sample(m, run, restart, checkpoint_mb=value)
        for m, run, restart, value in [
            (15, 1, False, 6.0),
            (20, 1, False, 5.8),
            (25, 2, True, 8.2),
            (30, 2, False, 8.0),
            (35, 2, False, 5.4),
            (40, 2, False, 5.7),
            (45, 3, True, 9.4),
            (50, 3, False, 9.7),
            (55, 3, False, 7.9),
            (60, 3, False, 7.4),
        ]
    ]
    assert soak._slope([(s["minute"], s["checkpoint_mb"]) for s in transient]) > 0.04
    assert trend(transient, settle_minutes=15)["verdict"] == "steady"
    growing = [
        sample(m, 1 + (m >= 25) + (m >= 45), m in (25, 45), checkpoint_mb=5 + 0.2 * m)
        for m in range(15, 65, 5)
    ]
    assert trend(growing, settle_minutes=15)["flagged"] == ["checkpoint_mb"]


def test_peaks_keep_each_figures_highest_reading_until_taken():
    peaks = soak.Peaks(job=None, every_s=0)  # type: ignore[arg-type]
    peaks.offer({"live_files": 10, "log_mb": 2.0, "batches": 99})
    peaks.offer({"live_files": 30, "log_mb": 1.0, "driver_rss_mb": None})
    assert peaks.take() == {"live_files": 30, "log_mb": 2.0}
    assert peaks.take() == {}


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
        # The peaks read between the rows (every 2 s here) are never below the row's reading.
        for name in SIZES:
            if row[name] is not None:
                assert row["peaks"][name] >= row[name], name
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
