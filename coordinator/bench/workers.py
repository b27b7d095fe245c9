"""What one Python evaluation costs a Spark task, with Spark's JVM and its Python workers talking
over TCP and over a UNIX domain socket (``coordinator bench workers``).

Every micro-batch of the job runs Python in each task more than once: the inbox source's read,
then the state operator's new data, then its timeout pass (``applyInPandasWithState`` runs the
function once over the keys with input and once more over the keys whose timeout passed, a
second evaluation even when none did). On TCP, Spark's default, each evaluation of a few rows
also waited about 40 ms, Linux's delayed-acknowledgement timer; on a UNIX socket
(``spark.python.unix.domain.socket.enabled``, Spark 4.1 on, which ``conf/spark-defaults.conf``
sets) it does not. The likely mechanism (inferred, not traced): the JVM writes a task's command
and data in several small writes, Nagle's algorithm holds each until the one before it is
acknowledged, and the worker, having nothing to send back yet, delays that acknowledgement.

This times, in one process, three queries over ``--partitions`` tasks of a few rows each:

- ``map``: ``mapInPandas`` (one evaluation per task);
- ``grouped``: ``groupBy(...).applyInPandas`` over ``--keys`` keys (a shuffle, then one
  evaluation per task);
- ``floor``: the same rows collected with no Python at all.

Each worker mode gets a SparkContext of its own (the setting is read when one starts), the
modes alternating ``--sessions`` times. Every query runs ``--rounds`` times in turns after one
warm-up; the report gives the median wall time of each, and the workers' own word for the mode
they ran in, so a setting that did not take effect cannot pass for one that did.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

#: The worker modes, by the value of ``spark.python.unix.domain.socket.enabled``.
MODES = {"tcp": "false", "uds": "true"}
QUERIES = ("map", "grouped", "floor")


@dataclass(frozen=True)
class WorkersBenchOptions:
    #: Tasks per query (and ``local[N]`` cores).
    partitions: int = 2
    #: Rows per query, spread over the tasks.
    rows: int = 100
    #: Keys of the ``grouped`` query.
    keys: int = 50
    #: Times each query runs per session, in turns.
    rounds: int = 10
    #: Sessions per worker mode, the modes alternating.
    sessions: int = 2


@dataclass
class WorkersBenchResult:
    options: dict[str, Any]
    #: mode -> query -> every round's wall time, ms, over all its sessions.
    ms: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    #: mode -> whether its workers said they ran on a UNIX socket (in every session).
    workers_on_uds: dict[str, bool] = field(default_factory=dict)

    def median(self, mode: str, query: str) -> float:
        return statistics.median(self.ms[mode][query])

    def as_configured(self) -> bool:
        """Whether every mode's workers ran as its setting says."""
        return self.workers_on_uds == {mode: value == "true" for mode, value in MODES.items()}


def _identity(frames: Iterator[Any]) -> Iterator[Any]:
    yield from frames


def _group(frame: Any) -> Any:
    return frame


def _mode_of_worker(frames: Iterator[Any]) -> Iterator[Any]:
    """One row per task: whether its worker was started on a UNIX socket (Spark's daemon
    reads ``PYTHON_UNIX_DOMAIN_ENABLED``, which the JVM sets from the setting)."""
    import pandas as pd

    for _ in frames:
        pass
    uds = os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "false").lower() == "true"
    yield pd.DataFrame({"uds": [uds]})


def workers_bench(
    options: WorkersBenchOptions, progress: Callable[[str], None] | None = None
) -> WorkersBenchResult:
    result = WorkersBenchResult(asdict(options))
    for mode in MODES:
        result.ms[mode] = {query: [] for query in QUERIES}
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as warehouse:
        for session in range(options.sessions):
            for mode, enabled in MODES.items():
                if progress is not None:
                    progress(f"bench workers: session {session + 1} of {options.sessions}, {mode}")
                spark = _session(options, enabled, warehouse)
                try:
                    queries = _queries(spark, options)
                    uds = {row.uds for row in queries["mode"]().collect()}
                    said = result.workers_on_uds.get(mode, True)
                    result.workers_on_uds[mode] = said and uds == {True}
                    _time_queries(queries, options.rounds, result.ms[mode])
                finally:
                    spark.stop()
    return result


def _session(options: WorkersBenchOptions, enabled: str, warehouse: str) -> Any:
    """A SparkSession with the job's settings and the workers' mode (its JVM log in
    ``warehouse``)."""
    from coordinator.stream import job
    from coordinator.stream.settings import load_settings

    settings = load_settings(
        [],
        values={"spark.python.unix.domain.socket.enabled": enabled},
        shards=options.partitions,
        warehouse=warehouse,
    )
    return job.spark_session(settings, app_name="bench-workers")


def _queries(spark: Any, options: WorkersBenchOptions) -> dict[str, Callable[[], Any]]:
    from pyspark.sql import functions as F

    rows = spark.range(0, options.rows, 1, options.partitions)
    keyed = rows.withColumn("key", F.col("id") % options.keys)
    return {
        "map": lambda: rows.mapInPandas(_identity, "id long"),
        "grouped": lambda: keyed.groupBy("key").applyInPandas(_group, "id long, key long"),
        "floor": lambda: rows,
        "mode": lambda: rows.mapInPandas(_mode_of_worker, "uds boolean"),
    }


def _time_queries(
    queries: dict[str, Callable[[], Any]], rounds: int, into: dict[str, list[float]]
) -> None:
    for query in QUERIES:
        queries[query]().collect()  # warm-up: the plan, the workers' imports
    for _ in range(rounds):
        for query in QUERIES:
            started = time.perf_counter()
            queries[query]().collect()
            into[query].append((time.perf_counter() - started) * 1000)


def format_report(result: WorkersBenchResult) -> str:
    options = result.options
    lines = [
        f"workers benchmark: {options['rows']} rows over {options['partitions']} tasks, each "
        f"query {options['rounds']} times in turns per session, {options['sessions']} "
        "session(s) per mode, alternating; median wall ms per query",
        "",
        f"{'query':10s} {'tcp':>8s} {'uds':>8s} {'tcp/uds':>8s} "
        f"{'tcp-floor':>10s} {'uds-floor':>10s}",
    ]
    tcp_floor, uds_floor = result.median("tcp", "floor"), result.median("uds", "floor")
    for query in QUERIES:
        tcp, uds = result.median("tcp", query), result.median("uds", query)
        line = f"{query:10s} {tcp:8.1f} {uds:8.1f} {tcp / uds:8.2f}"
        if query != "floor":
            line += f" {tcp - tcp_floor:10.1f} {uds - uds_floor:10.1f}"
        lines.append(line)
    said = ", ".join(
        f"{mode}: {'a UNIX socket' if on else 'TCP'}" for mode, on in result.workers_on_uds.items()
    )
    lines += ["", f"the workers ran on ({said})"]
    return "\n".join(lines)
