"""The job's Python workers talk to Spark's JVM over a UNIX domain socket
(``spark.python.unix.domain.socket.enabled`` in ``conf/spark-defaults.conf``), and ``coordinator
bench workers`` compares that with TCP (``coordinator/bench/workers.py`` says why)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.bench.workers import MODES, QUERIES
from coordinator.stream.settings import load_settings

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _worker_mode(frames: Iterator[Any]) -> Iterator[Any]:
    import pandas as pd

    for _ in frames:
        pass
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
        daemon = cmdline.read().replace(b"\0", b" ").decode()
    uds = os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "").lower()
    yield pd.DataFrame({"uds": [uds], "daemon": [daemon]})


def test_the_jobs_settings_put_the_python_workers_on_a_unix_socket(spark: Any) -> None:
    """And the workers are forked by the job's daemon, which ends a worker whose socket the JVM
    closed without a traceback (``tests/test_spark_daemon.py``)."""
    settings = load_settings([]).spark
    assert settings["spark.python.unix.domain.socket.enabled"] == "true"
    assert settings["spark.python.daemon.module"] == "coordinator.stream.spark_daemon"
    frame = spark.range(0, 4, 1, 2).mapInPandas(_worker_mode, "uds string, daemon string")
    rows = frame.collect()
    assert {row.uds for row in rows} == {"true"}
    assert all("-m coordinator.stream.spark_daemon" in row.daemon for row in rows), rows


def test_the_workers_bench_times_both_modes_and_checks_each_took_effect() -> None:
    command = [sys.executable, "-m", "coordinator", "bench", "workers", "--rounds", "2"]
    done = subprocess.run(
        [*command, "--sessions", "1", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["workers_on_uds"] == {"tcp": False, "uds": True}
    assert set(result["ms"]) == set(MODES)
    for mode in MODES:
        assert set(result["ms"][mode]) == set(QUERIES)
        assert all(len(times) == 2 and min(times) > 0 for times in result["ms"][mode].values())
