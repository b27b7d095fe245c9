"""Running the Spark job in tests: one shared SparkSession, one query per test at a time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from coordinator.stream import job
from coordinator.stream.client import StreamClient
from coordinator.stream.settings import Settings, load_settings

#: The offsets-expiry sweep's period in the tests' jobs: its next run is centuries away.
#: The sweep runs every ``offsets.retention.check.interval.ms`` on the wall clock, at a phase
#: per offsets partition (:meth:`coordinator.context.GroupContext.ensure_expiry_timer`;
#: Kafka's 10 minutes by default) and deletes every Empty group without offsets, as Kafka's
#: does. A group whose only members are pending (KIP-394's first join, which ``form_group``
#: and its like send) is Empty: a test whose two join steps straddled its sweep had both second
#: joins answered UNKNOWN_MEMBER_ID (a client joins again; the tests' requests do not). No test
#: of a job waits for a sweep.
NO_SWEEP_MS = 10**13

#: Fast coordinator timers for tests: no initial rebalance delay, short sessions allowed, no
#: offsets-expiry sweep while a test runs.
TEST_COORDINATOR_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.retention.check.interval.ms": str(NO_SWEEP_MS),
}


def simple_commit(rid: str, group: str, offset: int) -> dict[str, Any]:
    """A simple group's commit (generation -1, no member) of partition 0 of topic ``t``: the
    last one applied wins."""
    return {
        "api": "offset_commit",
        "request_id": rid,
        "group_id": group,
        "member_id": "",
        "generation_id": -1,
        "offsets": [{"topic": "t", "partition": 0, "offset": offset, "metadata": ""}],
    }


def job_settings(warehouse: Path, **overrides: Any) -> Settings:
    coordinator = dict(TEST_COORDINATOR_SETTINGS)
    coordinator.update(overrides.pop("coordinator", {}))
    conf = warehouse.parent / f"{warehouse.name}-test.properties"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("".join(f"{k}={v}\n" for k, v in coordinator.items()))
    overrides.setdefault("trigger_interval_ms", 100)
    return load_settings([str(conf)], warehouse=str(warehouse), **overrides)


class RunningCoordinator:
    """The job on the shared session, a client on its warehouse, and table readers."""

    def __init__(self, spark: Any, warehouse: Path, **overrides: Any) -> None:
        self.spark = spark
        self.warehouse = warehouse
        self.settings = job_settings(warehouse, **overrides)
        self.running: job.RunningJob | None = None
        self.client = StreamClient(warehouse)
        #: Passed to the sink (see ``job.BatchSink.after_write``).
        self.after_write: Any = None

    def start(self) -> RunningCoordinator:
        assert self.running is None
        self.spark.conf.set("spark.sql.shuffle.partitions", str(self.settings.job.shards))
        self.running = job.start(self.spark, self.settings, self.after_write)
        return self

    def stop(self) -> None:
        if self.running is not None:
            self.running.stop()
            self.running = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def request(self, request: dict[str, Any], timeout_s: float = 60) -> dict[str, Any]:
        return self.client.request(request, timeout_s=timeout_s)

    def requests(
        self, requests: list[dict[str, Any]], timeout_s: float = 60
    ) -> list[dict[str, Any]]:
        return self.client.requests(requests, timeout_s=timeout_s)

    def table(self, name: str) -> pa.Table:
        return pa.table(DeltaTable(str(self.settings.job.paths.table(name))).to_pyarrow_table())

    def rows(self, name: str) -> list[dict[str, Any]]:
        return self.table(name).to_pylist()

    def responses(self) -> list[dict[str, Any]]:
        return [json.loads(row["body"]) for row in self.rows("responses")]

    def wait_for(self, predicate: Any, timeout_s: float = 60, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
