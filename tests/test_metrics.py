"""Readiness, /metrics, /livez and /readyz of the gateway (embedded back end), the job's
metrics without Spark, Kafka's group metrics, and the Grafana dashboard's queries.

The Spark job's metrics end to end are in tests/test_metrics_job.py (slow)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.gateway import codec
from coordinator.gateway.embedded import EmbeddedBackend
from coordinator.gateway.server import Gateway
from coordinator.gateway.server import run as serve
from coordinator.log.records import group_tombstone, offset_tombstone
from coordinator.metrics import MetricsServer, Readiness, new_registry, parse_address
from coordinator.metrics.gateway import GatewayExporter, first_error
from coordinator.metrics.groups import GroupMetrics, GroupView
from coordinator.metrics.job import JobMetrics
from coordinator.stream.client import Inbox
from coordinator.stream.schema import Warehouse
from coordinator.stream.source import SEQUENCED, sequenced_name
from tests.gateway_support import REQUESTS, TOPICS, call, until
from tests.metrics_support import Scrape, get, sample_names

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
LOAD_IN_PROGRESS = 14
REBALANCE_IN_PROGRESS = 27


class SlowLoading(EmbeddedBackend):
    """The embedded back end whose log load waits for ``gate``: a test hook standing in for a
    big warehouse (``_open_log`` runs on a worker thread, as the real load does)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.reading = threading.Event()

    def _open_log(self) -> list[dict[str, Any]]:
        self.reading.set()
        assert self.gate.wait(60), "the test never let the load finish"
        return super()._open_log()


class Serving:
    """A gateway run as ``coordinator gateway`` runs it (:func:`server.run`, with an
    ``on_ready`` callback), in a thread; unlike tests.gateway_support.Running, it returns while
    the back end may still be loading."""

    def __init__(self, backend: Any, exporter: GatewayExporter | None = None) -> None:
        self.exporter = exporter
        metrics = None if exporter is None else exporter.gateway
        self.gateway = Gateway(backend, TOPICS, "127.0.0.1", 0, metrics=metrics)
        self.announced = threading.Event()
        self.loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert until(lambda: self.gateway.port != 0, 30), "the gateway never listened"

    def _on_ready(self) -> None:
        if self.exporter is not None:
            self.exporter.readiness.set_ready()
        self.announced.set()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._task = self.loop.create_task(serve(self.gateway, on_ready=self._on_ready))
        with contextlib.suppress(asyncio.CancelledError):
            self.loop.run_until_complete(self._task)

    @property
    def port(self) -> int:
        return self.gateway.port

    def stop(self) -> None:
        if self._task is not None:
            self.loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(30)
        if self.exporter is not None:
            self.exporter.close()


def join_body(member_id: str = "", group: str = "g") -> dict[str, Any]:
    return dict(REQUESTS[codec.JOIN_GROUP], group_id=group, member_id=member_id)


def sync_body(member_id: str, generation: int, assignments: list[str]) -> dict[str, Any]:
    return {
        "group_id": "g",
        "generation_id": generation,
        "member_id": member_id,
        "assignments": [{"member_id": m, "assignment": m.encode()} for m in assignments],
    }


def heartbeat_body(member_id: str, generation: int) -> dict[str, Any]:
    return {"group_id": "g", "generation_id": generation, "member_id": member_id}


def describe(port: int, group: str = "g") -> dict[str, Any]:
    body = {"groups": [group], "include_authorized_operations": False}
    (answer,) = call(port, codec.DESCRIBE_GROUPS, 5, body)["groups"]
    return answer  # type: ignore[no-any-return]


def assert_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    problems = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not problems, [r.getMessage() for r in problems]


# --- readiness -------------------------------------------------------------------------------


def test_gateway_answers_load_in_progress_while_its_log_loads(tmp_path, caplog):
    """While the embedded back end loads its log, connections are served: ApiVersions,
    Metadata and FindCoordinator as usual, every group API COORDINATOR_LOAD_IN_PROGRESS (as
    Kafka answers while it loads __consumer_offsets); /readyz says 503 until the load is done
    and "listening" comes only then. No connection is closed, nothing is logged as an error."""
    caplog.set_level(logging.INFO)
    backend = SlowLoading(CoordinatorConfig(group_initial_rebalance_delay_ms=0), tmp_path / "gw")
    exporter = GatewayExporter("127.0.0.1:0", backend)
    serving = Serving(backend, exporter)
    try:
        assert backend.reading.wait(30)
        metrics_port = exporter.server.port
        assert get(metrics_port, "/livez")[0] == 200
        status, body = get(metrics_port, "/readyz")
        assert (status, "loading" in body) == (503, True)

        # Clients that connect early, all at once: each one is answered.
        with ThreadPoolExecutor(20) as pool:
            joins = list(
                pool.map(lambda _: call(serving.port, codec.JOIN_GROUP, 5, join_body()), range(20))
            )
        assert {j["error_code"] for j in joins} == {LOAD_IN_PROGRESS}
        assert (
            call(serving.port, codec.API_VERSIONS, 3, REQUESTS[codec.API_VERSIONS])["error_code"]
            == 0
        )
        metadata = call(serving.port, codec.METADATA, 12, REQUESTS[codec.METADATA])
        assert [t["error_code"] for t in metadata["topics"]] == [0]
        found = call(serving.port, codec.FIND_COORDINATOR, 3, REQUESTS[codec.FIND_COORDINATOR])
        assert (found["error_code"], found["port"]) == (0, serving.port)
        assert describe(serving.port)["error_code"] == LOAD_IN_PROGRESS
        assert call(serving.port, codec.LIST_GROUPS, 3, {})["error_code"] == LOAD_IN_PROGRESS
        commit = call(serving.port, codec.OFFSET_COMMIT, 7, REQUESTS[codec.OFFSET_COMMIT])
        assert commit["topics"][0]["partitions"][0]["error_code"] == LOAD_IN_PROGRESS
        assert not serving.announced.is_set()
        assert not serving.gateway.ready

        scrape = Scrape(metrics_port)
        assert (
            scrape.value(
                "coordinator_gateway_requests_total",
                api="JoinGroup",
                error="coordinator_load_in_progress",
            )
            == 20
        )
        assert scrape.value("coordinator_ready") == 0

        backend.gate.set()
        assert serving.announced.wait(30)
        assert get(metrics_port, "/readyz") == (200, "ready\n")
        joined = call(serving.port, codec.JOIN_GROUP, 3, join_body())
        assert (joined["error_code"], joined["generation_id"]) == (0, 1)
        assert Scrape(metrics_port).value("coordinator_ready") == 1
        assert serving.gateway.closed_for_bad_input == 0
    finally:
        backend.gate.set()
        serving.stop()
    assert_no_traceback(caplog)
    with pytest.raises(OSError):
        get(metrics_port, "/livez")  # closed with the gateway


def test_a_kafka_client_that_starts_early_retries_through_the_load_and_joins(tmp_path):
    """kafka-python, started while the log loads: its lookups are answered, its JoinGroups get
    COORDINATOR_LOAD_IN_PROGRESS and are retried (a retriable error), and once the load is
    done it joins and is assigned every partition."""
    from tests.client_scenarios import KafkaPythonMember

    backend = SlowLoading(CoordinatorConfig(group_initial_rebalance_delay_ms=0), tmp_path / "gw")
    exporter = GatewayExporter("127.0.0.1:0", backend)
    serving = Serving(backend, exporter)
    mport = exporter.server.port
    member = None
    try:
        member = KafkaPythonMember(serving.port, "early", "early-1")

        def refused_joins() -> float:
            return Scrape(mport).value(
                "coordinator_gateway_requests_total",
                api="JoinGroup",
                error="coordinator_load_in_progress",
            )

        assert until(lambda: refused_joins() >= 2, 60), "the client did not retry its join"
        assert member.assigned() == frozenset()
        backend.gate.set()
        assert until(lambda: member.partitions() == set(range(TOPICS["t"])), 60)
        assert member.error is None
    finally:
        backend.gate.set()
        if member is not None:
            member.close()
        serving.stop()


def test_gateway_is_unready_while_it_reloads_its_log_after_a_failed_write(tmp_path):
    """A failed log write makes the embedded engine reload its log (Kafka's unload and load):
    /readyz says 503 meanwhile, and the group metrics are what the log holds afterwards."""
    backend = SlowLoading(CoordinatorConfig(group_initial_rebalance_delay_ms=0), tmp_path / "gw")
    backend.gate.set()
    exporter = GatewayExporter("127.0.0.1:0", backend)
    serving = Serving(backend, exporter)
    try:
        assert serving.announced.wait(30)
        mport = exporter.server.port
        commit = call(serving.port, codec.OFFSET_COMMIT, 9, REQUESTS[codec.OFFSET_COMMIT])
        assert commit["topics"][0]["partitions"][0]["error_code"] == 0
        assert Scrape(mport).value("coordinator_offsets") == 1
        backend.gate.clear()
        backend.reading.clear()
        sink, real_write = backend._sink, backend._sink.write_batch

        def fails_once(*args: Any, **kwargs: Any) -> Any:
            sink.write_batch = real_write
            raise OSError("disk full")

        sink.write_batch = fails_once
        other = dict(REQUESTS[codec.OFFSET_COMMIT], group_id="other")
        refused = call(serving.port, codec.OFFSET_COMMIT, 9, other)
        assert refused["topics"][0]["partitions"][0]["error_code"] == 15  # NOT_AVAILABLE
        assert backend.reading.wait(30)
        status, body = get(mport, "/readyz")
        assert (status, body) == (503, "not ready: reloading the log after a failed write\n")
        assert Scrape(mport).value("coordinator_ready") == 0
        backend.gate.set()
        assert until(lambda: get(mport, "/readyz")[0] == 200, 30)
        scrape = Scrape(mport)
        assert scrape.value("coordinator_offsets") == 1  # the refused commit is not in the log
        assert scrape.value("coordinator_groups", state="Empty") == 1
        assert scrape.value("coordinator_ready") == 1
    finally:
        backend.gate.set()
        serving.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_gateway_command_says_listening_when_ready_and_serves_metrics(tmp_path):
    """``coordinator gateway --metrics``: the "listening" line once it serves, /readyz 200,
    and its metrics on /metrics."""
    port, metrics_port = free_port(), free_port()
    cmd = [
        sys.executable,
        "-m",
        "coordinator",
        "gateway",
        "--embedded",
        "--listen",
        f"127.0.0.1:{port}",
        "--metrics",
        f"127.0.0.1:{metrics_port}",
        "--log-warehouse",
        str(tmp_path / "gw"),
        "--topic",
        "t:3",
        "--gateway-conf",
        os.devnull,
        "--set",
        "group.initial.rebalance.delay.ms=0",
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(f"coordinator gateway listening on 127.0.0.1:{port}"), line
        assert get(metrics_port, "/readyz") == (200, "ready\n")
        joined = call(port, codec.JOIN_GROUP, 3, join_body())
        assert joined["error_code"] == 0, joined
        scrape = Scrape(metrics_port)
        assert scrape.value("coordinator_gateway_requests_total", api="JoinGroup", error="none")
        assert scrape.value("coordinator_groups", state="CompletingRebalance") == 1
        assert scrape.value("process_start_time_seconds") > 0
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "Traceback" not in err, err


# --- the gateway's metrics through a scenario ------------------------------------------------


@pytest.fixture
def metered():
    backend = EmbeddedBackend(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    exporter = GatewayExporter("127.0.0.1:0", backend)
    serving = Serving(backend, exporter)
    assert serving.announced.wait(30)
    yield serving, exporter.server.port
    serving.stop()


def test_gateway_metrics_follow_a_group_through_rebalances_commits_and_deletion(metered):
    serving, mport = metered
    port = serving.port

    # A alone: one rebalance, counted once however often the group is seen Stable after.
    a = call(port, codec.JOIN_GROUP, 3, join_body())
    member_a = a["member_id"]
    assert call(port, codec.SYNC_GROUP, 3, sync_body(member_a, 1, [member_a]))["error_code"] == 0
    for _ in range(3):
        assert call(port, codec.HEARTBEAT, 3, heartbeat_body(member_a, 1))["error_code"] == 0
    scrape = Scrape(mport)
    # the heartbeats the engine serves in place are counted as every other request
    assert scrape.value("coordinator_group_requests_total", api="heartbeat", error="NONE") == 3
    assert scrape.value("coordinator_gateway_requests_total", api="Heartbeat", error="none") == 3
    assert scrape.value("coordinator_rebalances_total") == 1
    assert scrape.value("coordinator_rebalance_duration_seconds_count") == 1
    assert scrape.value("coordinator_groups", state="Stable") == 1
    assert describe(port)["group_state"] == "Stable"

    # B joins: the group prepares a rebalance, which the gauge shows as DescribeGroups does.
    with ThreadPoolExecutor(2) as pool:
        b_join = pool.submit(call, port, codec.JOIN_GROUP, 3, join_body())
        assert until(lambda: describe(port)["group_state"] == "PreparingRebalance", 30)
        scrape = Scrape(mport)
        assert scrape.value("coordinator_groups", state="PreparingRebalance") == 1
        assert scrape.value("coordinator_groups", state="Stable") == 0
        beat = call(port, codec.HEARTBEAT, 3, heartbeat_body(member_a, 1))
        assert beat["error_code"] == REBALANCE_IN_PROGRESS
        a = call(port, codec.JOIN_GROUP, 3, join_body(member_a))
        b = b_join.result(30)
        assert (a["generation_id"], b["generation_id"]) == (2, 2)
        member_b = b["member_id"]
        assert describe(port)["group_state"] == "CompletingRebalance"
        assert Scrape(mport).value("coordinator_groups", state="CompletingRebalance") == 1
        b_sync = pool.submit(call, port, codec.SYNC_GROUP, 3, sync_body(member_b, 2, []))
        a_sync = call(port, codec.SYNC_GROUP, 3, sync_body(member_a, 2, [member_a, member_b]))
        assert (a_sync["error_code"], b_sync.result(30)["error_code"]) == (0, 0)
    assert describe(port)["group_state"] == "Stable"
    scrape = Scrape(mport)
    assert scrape.value("coordinator_rebalances_total") == 2
    assert scrape.value("coordinator_rebalance_duration_seconds_count") == 2
    assert scrape.value("coordinator_groups", state="Stable") == 1
    assert scrape.value("coordinator_joins_total") == 3
    assert scrape.value("coordinator_gateway_requests_total", api="JoinGroup", error="none") == 3
    assert (
        scrape.value(
            "coordinator_gateway_requests_total", api="Heartbeat", error="rebalance_in_progress"
        )
        == 1
    )
    assert scrape.value("coordinator_gateway_request_duration_seconds_count", api="JoinGroup") == 3

    # Commits, then both leave: Empty, and no rebalance completed.
    offsets = {
        "group_id": "g",
        "generation_id_or_member_epoch": 2,
        "member_id": member_a,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": p, "committed_offset": 10 + p, "committed_metadata": ""}
                    for p in (0, 1)
                ],
            }
        ],
    }
    committed = call(port, codec.OFFSET_COMMIT, 7, offsets)
    assert [p["error_code"] for p in committed["topics"][0]["partitions"]] == [0, 0]
    leave = {
        "group_id": "g",
        "members": [{"member_id": m, "group_instance_id": None} for m in (member_a, member_b)],
    }
    assert call(port, codec.LEAVE_GROUP, 3, leave)["error_code"] == 0
    assert describe(port)["group_state"] == "Empty"
    scrape = Scrape(mport)
    assert scrape.value("coordinator_offset_commits_total") == 2
    assert scrape.value("coordinator_offsets") == 2
    assert scrape.value("coordinator_groups", state="Empty") == 1
    assert scrape.value("coordinator_groups", state="Stable") == 0
    assert scrape.value("coordinator_rebalances_total") == 2

    # OffsetDelete, then DeleteGroups: deletions, not expirations; the group is gone.
    delete_one = {
        "group_id": "g",
        "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}],
    }
    assert call(port, codec.OFFSET_DELETE, 0, delete_one)["error_code"] == 0
    assert Scrape(mport).value("coordinator_offsets") == 1
    assert (
        call(port, codec.DELETE_GROUPS, 2, {"groups_names": ["g"]})["results"][0]["error_code"] == 0
    )
    scrape = Scrape(mport)
    assert scrape.value("coordinator_offset_deletions_total") == 2
    assert scrape.value("coordinator_offset_expirations_total") == 0
    assert scrape.value("coordinator_offsets") == 0
    assert scrape.sum("coordinator_groups") == 0
    assert describe(port)["group_state"] == "Dead"


def test_gateway_connection_gauge_follows_open_connections(metered):
    serving, mport = metered
    sockets = [socket.create_connection(("127.0.0.1", serving.port)) for _ in range(3)]
    try:
        assert until(lambda: Scrape(mport).value("coordinator_gateway_connections") == 3, 30)
        # A frame too short for a header: that connection (only) is closed for bad input.
        sockets[0].sendall(b"\x00\x00\x00\x02ab")
        assert until(
            lambda: Scrape(mport).value("coordinator_gateway_connections_refused_total") == 1, 30
        )
        assert until(lambda: Scrape(mport).value("coordinator_gateway_connections") == 2, 30)
    finally:
        for sock in sockets:
            sock.close()
    assert until(lambda: Scrape(mport).value("coordinator_gateway_connections") == 0, 30)
    assert Scrape(mport).value("coordinator_gateway_connections_accepted_total") == 3


# --- Kafka's group metrics, as pure bookkeeping ----------------------------------------------


def test_group_metrics_tell_expirations_from_deletions_and_count_a_rebalance_once():
    registry = new_registry()
    metrics = GroupMetrics(registry)
    metrics.reset([GroupView("loaded", "Stable", 4, 3, 0)])  # a load counts nothing
    stable = GroupView("g", "Stable", 1, 0, 2_500)
    metrics.observe([GroupView("g", "PreparingRebalance", 0, 0, 1_000)])
    metrics.observe([GroupView("g", "CompletingRebalance", 1, 0, 2_000)])
    metrics.observe([stable])
    metrics.observe([stable])  # seen again (another batch touched it): no second count
    metrics.observe([GroupView("loaded", "Stable", 5, 3, 9_000)])  # a rebalance not seen begin
    assert registry.get_sample_value("coordinator_rebalances_total") == 2
    assert registry.get_sample_value("coordinator_rebalance_duration_seconds_count") == 1
    assert registry.get_sample_value("coordinator_rebalance_duration_seconds_sum") == 1.5
    assert metrics.counts()["Stable"] == 2
    assert registry.get_sample_value("coordinator_offsets") == 3

    expiry = [offset_tombstone("loaded", "t", p, 10) for p in (0, 1)]
    metrics.observe([GroupView("loaded", "Stable", 5, 1, 9_000)], expiry, [])
    deleted = [offset_tombstone("gone", "t", 0, 10), group_tombstone("gone", 10)]
    answer = {"api": "delete_groups", "group_id": "gone", "error_code": 0, "error": None}
    metrics.observe([GroupView("gone", "Dead")], deleted, [answer])
    assert registry.get_sample_value("coordinator_offset_expirations_total") == 2
    assert registry.get_sample_value("coordinator_offset_deletions_total") == 1
    assert registry.get_sample_value("coordinator_offsets") == 1
    labels = {"api": "delete_groups", "error": "NONE"}
    assert registry.get_sample_value("coordinator_group_requests_total", labels) == 1


def test_first_error_finds_nested_error_codes():
    assert first_error({"error_code": 0, "groups": [{"error_code": 0}]}) == 0
    nested = {"topics": [{"partitions": [{"error_code": 0}, {"error_code": 25}]}]}
    assert first_error(nested) == 25


def test_metrics_server_serves_health_and_releases_its_port():
    registry = new_registry()
    readiness = Readiness(registry, "warming up")
    server = MetricsServer(registry, readiness, "127.0.0.1", 0).start()
    try:
        assert get(server.port, "/livez") == (200, "ok\n")
        assert get(server.port, "/readyz") == (503, "not ready: warming up\n")
        readiness.set_ready()
        assert get(server.port, "/readyz") == (200, "ready\n")
        assert get(server.port, "/nothing")[0] == 404
        assert "coordinator_ready 1.0" in get(server.port, "/metrics")[1]
    finally:
        server.close()
    server.close()  # twice is fine
    again = MetricsServer(registry, readiness, "127.0.0.1", server.port).start()
    again.close()
    assert parse_address(":9404") == ("0.0.0.0", 9404)
    with pytest.raises(ValueError):
        parse_address("9404")


# --- the job's metrics, fed as its sink and listener feed them -------------------------------


def progress(duration_ms: int, files: int, state_rows: int, lines: int = 3) -> Any:
    """A batch's progress as Spark reports it: the inbox source's offsets moved on by ``files``
    files, of ``lines`` rows (the source gives line rows)."""
    operator = SimpleNamespace(numRowsTotal=state_rows, memoryUsedBytes=4096)
    inbox = SimpleNamespace(
        startOffset='{"inbox_seq": 7, "inbox_files": 4}',
        endOffset=json.dumps({"inbox_seq": 7 + files, "inbox_files": 4 + files}),
        numInputRows=lines,
    )
    return SimpleNamespace(
        batchDuration=duration_ms, numInputRows=lines, stateOperators=[operator], sources=[inbox]
    )


def test_job_metrics_from_batches_latency_backlog_and_readiness(tmp_path):
    paths = Warehouse.at(tmp_path / "wh")
    paths.inbox.mkdir(parents=True)
    inbox = Inbox(paths.inbox)
    first = inbox.submit([{"api": "heartbeat", "request_id": "r1", "group_id": "g"}])
    second = inbox.submit([{"api": "heartbeat", "request_id": "r2", "group_id": "g"}])
    # The source has found the first file: sequenced, as coordinator.stream.source does.
    (paths.inbox / SEQUENCED).mkdir()
    first.rename(paths.inbox / SEQUENCED / sequenced_name(1, first.name))
    metrics = JobMetrics("127.0.0.1:0", paths)
    port = metrics.server.port
    try:
        assert get(port, "/readyz")[0] == 503
        assert Scrape(port).value("coordinator_job_inbox_files") == 2
        summary = {
            "group_id": "g",
            "state": "Stable",
            "generation_id": 1,
            "num_committed_offsets": 0,
            "state_timestamp_ms": 5,
        }
        response = {"api": "heartbeat", "request_id": "r1", "group_id": "g", "error_code": 0}
        metrics.batch_written(
            [], [response], [summary], [], [], {"responses": 12.0}, replayed=False
        )
        metrics.batch_completed(progress(700, 1, 1), batch_id=0, timers_fired=0)
        assert get(port, "/readyz") == (200, "ready\n")
        scrape = Scrape(port)
        assert scrape.value("coordinator_job_request_latency_seconds_count") == 1
        assert scrape.value("coordinator_job_inbox_files") == 1  # r2's file waits
        assert scrape.value("coordinator_job_batch_duration_seconds_sum") == 0.7
        assert scrape.value("coordinator_job_files_total") == 1  # one file of three lines
        assert scrape.value("coordinator_job_batch_requests_sum") == 1
        assert scrape.value("coordinator_job_state_rows") == 1
        assert scrape.value("coordinator_job_delta_write_seconds_count", table="responses") == 1
        assert scrape.value("coordinator_groups", state="Stable") == 1
        assert scrape.value("coordinator_job_restarts_total") == 0
        # The second file's only line refused (a rejected row names the sequenced file).
        sequenced = paths.inbox / SEQUENCED / sequenced_name(2, second.name)
        second.rename(sequenced)
        rejected = {"raw": "?", "source_file": sequenced.as_uri(), "reason": "unreadable"}
        metrics.batch_written([], [], [], [rejected], [], {}, replayed=False)
        assert Scrape(port).value("coordinator_job_inbox_files") == 0
        metrics.query_terminated("boom")
        assert get(port, "/readyz") == (503, "not ready: the query stopped: boom\n")
    finally:
        metrics.close()
    second = JobMetrics("127.0.0.1:0", paths)  # the warehouse remembers the first start
    try:
        assert Scrape(second.server.port).value("coordinator_job_restarts_total") == 1
    finally:
        second.close()


# --- the Grafana dashboard -------------------------------------------------------------------

#: PromQL's functions, aggregations and keywords: every other identifier in an expression
#: (outside label matchers, strings and grouping clauses) is a metric name.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "offset", "bool", "rate", "irate", "increase", "delta", "idelta",
    "deriv", "changes", "resets", "histogram_quantile", "label_replace", "label_join", "abs",
    "ceil", "floor", "round", "clamp_min", "clamp_max", "clamp", "time", "timestamp", "vector",
    "scalar", "sort", "sort_desc", "absent", "absent_over_time", "avg_over_time",
    "max_over_time", "min_over_time", "sum_over_time", "count_over_time", "last_over_time",
    "predict_linear", "sgn", "exp", "ln", "log2", "log10", "sqrt", "inf", "nan",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\$\w+|\$\{[^}]*\}", "", expr)  # Grafana variables
    expr = re.sub(r"(?<![\w.])\d+(\.\d+)?([eE][+-]?\d+)?", "", expr)  # numbers
    words = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr)
    return {w for w in words if w not in PROMQL_WORDS and not re.fullmatch(r"\d+[smhdwy]", w)}


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard.get("panels", []):
        found.append(panel)
        found.extend(panel.get("panels", []))  # collapsed rows
    return found


def exported_names(tmp_path: Path) -> set[str]:
    """Every sample name a live job and a live embedded gateway export."""
    job_metrics = JobMetrics("127.0.0.1:0", Warehouse.at(tmp_path / "wh"))
    exporter = GatewayExporter("127.0.0.1:0", EmbeddedBackend())
    try:
        names = sample_names(get(job_metrics.server.port, "/metrics")[1])
        names |= sample_names(get(exporter.server.port, "/metrics")[1])
    finally:
        job_metrics.close()
        exporter.close()
    return names


def test_dashboard_queries_name_only_exported_metrics(tmp_path):
    example = 'histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y"}[5m]))) / 1e9 + b'
    assert metric_names(example) == {"a_bucket", "b"}
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exported = exported_names(tmp_path)
    assert {"coordinator_rebalance_duration_seconds_bucket", "coordinator_joins_total"} <= exported
    queried: set[str] = set()
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            names = metric_names(target["expr"])
            assert names, f"panel {panel['title']!r}: no metric in {target['expr']!r}"
            unknown = names - exported
            assert not unknown, f"panel {panel['title']!r} queries {unknown}"
            queried |= names
    # Every family the coordinator exports has a panel (process_* and python_* aside).
    ours = {n for n in exported if n.startswith("coordinator_") and not n.endswith("_created")}
    families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in ours}
    shown = {re.sub(r"_(bucket|count|sum)$", "", n) for n in queried}
    assert families <= shown, f"no panel for {sorted(families - shown)}"
    assert len({p["id"] for p in panels(dashboard)}) == len(panels(dashboard))


def test_job_commands_take_metrics_from_the_command_line_or_the_conf(tmp_path):
    """``coordinator run`` and ``jobs/coordinator_job.py`` share ``--metrics``; ``job.metrics``
    in a conf file does the same (off by default)."""
    import argparse

    from coordinator.cli.run import add_job_options, settings_from

    parser = argparse.ArgumentParser()
    add_job_options(parser)
    args = parser.parse_args(["--warehouse", str(tmp_path), "--metrics", "127.0.0.1:9405"])
    assert settings_from(args).job.metrics == "127.0.0.1:9405"
    assert settings_from(parser.parse_args(["--warehouse", str(tmp_path)])).job.metrics == ""
    conf = tmp_path / "job.properties"
    conf.write_text("job.metrics=0.0.0.0:9406\n")
    args = parser.parse_args(["--warehouse", str(tmp_path), "--conf", str(conf)])
    assert settings_from(args).job.metrics == "0.0.0.0:9406"
    help_text = subprocess.run(
        [sys.executable, "jobs/coordinator_job.py", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--metrics HOST:PORT" in help_text
