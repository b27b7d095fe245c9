"""Shared test settings: Hypothesis profiles (``HYPOTHESIS_PROFILE=ci`` in CI) and the one
SparkSession of the run."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests import spark_cds

#: The JVMs of the test run (the shared session, and every job a test starts as a subprocess,
#: which inherits the environment) compile with C1 only: a test's JVM lives seconds to minutes,
#: and C2's compilations cost more CPU than they return. Measured on this 2-core box
#: (``spark.range`` sums and ``applyInPandas`` 15 times): 23.4 -> 14.4 CPU seconds, 29 -> 18 s
#: wall. The product's own JVMs (``coordinator run``, ``spark-submit``) keep C2. A value set
#: by the caller is kept. C1 alone sizes the code cache at 48 MB, which the shared session of a
#: worker filled after some 370 s of Spark tests (the JVM then stopped compiling and died on
#: "Out of space in CodeCache for method handle intrinsic"): it gets the tiered default, 240 MB.
#: They also map Spark's classes from a class-data-sharing archive made once per virtualenv
#: (tests/spark_cds.py: about half the CPU of a JVM's start), which the first run makes beside
#: its first tests (:func:`pytest_configure`).
_OWN_JAVA_OPTIONS = "SPARK_SUBMIT_OPTS" not in os.environ
os.environ.setdefault("SPARK_SUBMIT_OPTS", spark_cds.java_options())
_ARCHIVE_MAKER: threading.Thread | None = None


def pytest_configure(config: pytest.Config) -> None:
    """In the controller, when the run includes the Spark tests and the JVM options are the
    suite's own: the class archive, made in the background unless it exists."""
    global _ARCHIVE_MAKER
    if hasattr(config, "workerinput") or not _OWN_JAVA_OPTIONS:
        return
    if "not slow" in (config.getoption("markexpr", "") or ""):
        return
    _ARCHIVE_MAKER = spark_cds.make_in_background()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _ARCHIVE_MAKER is not None:
        _ARCHIVE_MAKER.join()


settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile(
    "ci",
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("long", max_examples=5_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


#: The test files that take longest (each a minute or more of Spark jobs and subprocesses on this
#: 2-core box), longest first. ``make test`` runs the suite on two workers, a file at a time each
#: (``-n 2 --dist loadfile --no-loadscope-reorder``), in collection order: these go first, so that
#: the run does not end on one worker with a long file while the other idles.
LONGEST_FIRST = (
    "test_kill_recovery.py",
    "test_stream_standalone.py",
    "test_service.py",
    "test_ownership_processes.py",
    "test_gateway_backends.py",
    "test_gateway_consumer_protocol.py",
    "test_bench_soak.py",
    "test_metrics_job.py",
    "test_stream_job.py",
    "test_inbox_source_job.py",
    "test_notebook.py",
    "test_stream_cluster.py",
    "test_stream_rebuild_job.py",
    "test_stream_retention.py",
    "test_gateway_burrow.py",
    "test_gateway_go_clients.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (:data:`LONGEST_FIRST`); the rest keep their order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one SparkSession of the test run (local[2], the job's settings from conf/)."""
    from coordinator.stream import job
    from coordinator.stream.settings import load_settings

    session = job.spark_session(load_settings([], shards=2))
    yield session
    stop_spark_session(session)


def stop_spark_session(session: Any, timeout_s: float = 60.0) -> None:
    """End the run's session quickly: a query a test left running is stopped first (otherwise
    ``spark.stop()`` shuts the SparkContext down under its running batch, whose job then waits
    on tasks that will never report), the listeners the tests added are dropped (the listener
    bus would deliver its whole backlog to each, a py4j call per event, before stopping), and
    ``spark.stop()`` is waited for at most ``timeout_s``: the JVM exits with pytest anyway (it
    reads pytest's pipe to EOF)."""
    import contextlib

    from coordinator.stream import job

    for query in session.streams.active:
        with contextlib.suppress(Exception):
            query.stop()
    with contextlib.suppress(Exception):
        manager = session.streams._jsqm
        for listener in manager.listListeners():
            manager.removeListener(listener)
    job.stop_session(session, timeout_s)


@pytest.fixture(scope="module")
def noida() -> Iterator[Any]:
    """noida-db (a Kafka-compatible broker from PyPI) as an upstream cluster, one per module."""
    from tests.upstream_support import noida_broker

    server = noida_broker()
    yield server
    server.stop()


@pytest.fixture
def gateway() -> Iterator[Any]:
    """An embedded gateway on an ephemeral port, in its own thread (tests/gateway_support.py)."""
    from tests.gateway_support import Running

    running = Running(idle_timeout_s=1.0, max_request_bytes=65536)
    yield running
    running.stop()


@pytest.fixture
def running() -> Iterator[Any]:
    """An embedded gateway with the server's defaults (idle connections kept 10 minutes) and
    no initial rebalance delay: what the real-client suites talk to."""
    from tests.gateway_support import Running

    gateway = Running()
    yield gateway
    gateway.stop()
