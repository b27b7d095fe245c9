"""PySpark's Python daemon (``spark.python.daemon.module``), silent when the JVM has already
closed a worker's connection.

Spark starts one daemon per executor (``python -m <module>``), and the daemon forks the Python
workers that run the job's tasks. This module is :mod:`pyspark.daemon` with one change: a worker
whose last write fails because the JVM closed the connection (``BrokenPipeError``,
``ConnectionResetError``) exits without a traceback.

Why: with ``spark.python.daemon.killWorkerOnFlushFailure`` (Spark 4.1 on, the default), a
failed flush is raised out of the worker, and the daemon prints its traceback on stderr. That
can happen at any stop of a SparkContext whose workers are on a UNIX socket
(``spark.python.unix.domain.socket.enabled``, which ``conf/spark-defaults.conf`` sets): the
JVM closes the idle workers' sockets, and a worker woken by the end of its input writes an
error report and flushes it, unless the daemon's hang-up signal ends it first. On a UNIX
socket that flush fails at once; TCP accepts the first write after the peer's close, so the
failure stays unseen there. So a clean stop of the job sometimes printed a traceback, and the
job's clean-stop test caught one in CI.

The worker still ends just as it did: the daemon's loop sees a failure code, waits for the
connection to close, and the worker exits instead of being reused. Only the traceback goes,
and only for a connection the JVM closed, which nothing is left to report to. Any other
exception propagates as before.

What it does not cover: Spark starts the Python data source's own workers (the inbox source's
``create_data_source``, ``lookup_data_sources`` and ``plan_data_source_read``) with
``python -m pyspark.daemon`` whatever ``spark.python.daemon.module`` says (seen with ``ps``
during a run, Spark 4.2: the planners' runners ask for PySpark's default daemon); only
``pyspark.worker``, the tasks' workers, runs under this module. One of those printed the same
traceback at a stop (at the end of a ``coordinator bench stream`` phase, and once in the
job's clean-stop test in CI). So :func:`end_pyspark_daemons` ends those daemons and their idle
workers just before the session stops (the job's :func:`coordinator.stream.job.stop_session`),
when no query is left to need them: killed, a worker writes nothing, and the JVM then finds
its daemon gone, which its stop takes in its stride.

The module imports :mod:`coordinator` only through its package (the engine: no pandas, pyarrow
or threads, which the daemon must not start before it forks), and PySpark's daemon only when it
runs as one (:func:`main`): the benches import it to tell the workers' processes apart.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

#: This module's name, as ``spark.python.daemon.module`` names it.
MODULE = "coordinator.stream.spark_daemon"
#: PySpark's own daemon: a session's that names none, and the data source's planners' always.
PYSPARK_DAEMON = "pyspark.daemon"
#: The modules a Spark Python daemon runs as: this one, or PySpark's own. The workers it forks
#: keep its command line (``python -m <module> pyspark.worker``).
DAEMON_MODULES = (MODULE, PYSPARK_DAEMON)

#: The failures that mean the JVM has closed the worker's connection.
CLOSED_BY_THE_JVM = (BrokenPipeError, ConnectionResetError)

#: PySpark's own worker loop, which :func:`worker` wraps (set by :func:`main`).
_spark_worker: Callable[[socket.socket, bool], Any] | None = None


def is_daemon_process(
    cmdline: str, worker_module: str | None = None, modules: tuple[str, ...] = DAEMON_MODULES
) -> bool:
    """Whether a process's command line (its arguments joined by spaces) is a Spark Python
    daemon's or a worker's it forked (a daemon of one of ``modules``); with ``worker_module``,
    only of that module's daemon (``pyspark.worker``: the tasks' workers)."""
    tail = "" if worker_module is None else f" {worker_module}"
    return any(f"-m {module}{tail} " in f"{cmdline} " for module in modules)


def end_pyspark_daemons(spark: Any) -> list[int]:
    """End the JVM's Python daemons that run PySpark's own module (the data source's planners:
    see the module docstring), each with the workers it forked, and return their pids. For
    just before ``spark.stop()``, once every query has stopped: while one is still active it
    ends none. Best effort: an error, or a JVM already gone, ends nothing. Through the JVM's
    ``ProcessHandle``, so it finds the driver's daemons however the driver was started
    (``spark-submit`` or a Python process)."""
    ended: list[int] = []
    try:
        if spark.streams.active:
            return ended  # a query still plans its batches with them (a stop that timed out)
        handles = spark.sparkContext._jvm.java.lang.ProcessHandle.current().children().toArray()
        for handle in handles:
            command = handle.info().commandLine()
            if not command.isPresent() or not is_daemon_process(
                str(command.get()), modules=(PYSPARK_DAEMON,)
            ):
                continue
            for forked in handle.descendants().toArray():
                forked.destroyForcibly()
            handle.destroyForcibly()
            ended.append(int(handle.pid()))
    except Exception:  # the JVM or the session is already going: Spark's stop does the rest
        pass
    return ended


def worker(sock: socket.socket, authenticated: bool) -> Any:
    """:func:`pyspark.daemon.worker`, returning a failure code (the worker then exits) instead
    of raising when the JVM has closed the connection."""
    assert _spark_worker is not None, "run as the daemon (main), which sets PySpark's loop"
    try:
        return _spark_worker(sock, authenticated)
    except CLOSED_BY_THE_JVM:
        return 1


def main() -> None:
    """PySpark's daemon with :func:`worker` in place of its own worker loop."""
    global _spark_worker
    import pyspark.daemon as daemon

    _spark_worker = daemon.worker
    daemon.worker = worker
    daemon.manager()


if __name__ == "__main__":
    main()
