"""The Spark job's metrics, fed by its sink and its progress listener.

=================================================  ====================================================
``coordinator_job_batch_duration_seconds``         Spark's batch duration (``batchDuration``)
``coordinator_job_batch_requests``                 requests a micro-batch settled: its answers plus
                                                   its refused lines (a parked JoinGroup counts in
                                                   the batch that answers it)
``coordinator_job_files_total``                    inbox files read (the inbox source's offsets;
                                                   a bootstrap file source's rows)
``coordinator_job_responses_total``                responses written
``coordinator_job_rejected_total``                 lines refused to ``rejected_requests``
``coordinator_job_timers_fired_total``             keys stepped only because a timer fired
``coordinator_job_request_latency_seconds``        from a request file's arrival in the inbox (its
                                                   modification time) to its answer's commit to
                                                   ``responses``
``coordinator_job_inbox_files``                    the source's backlog: inbox files none of whose
                                                   requests has been answered yet
``coordinator_job_state_rows``                     Spark state rows (groups, or shards when keyed
                                                   by shard)
``coordinator_job_state_memory_bytes``             Spark state store memory
``coordinator_job_delta_write_seconds{table}``     each Delta commit of a batch, by table
``coordinator_job_batches_total``                  micro-batches completed (idle ones included)
``coordinator_job_last_batch_id``                  the warehouse's id of the last batch completed
``coordinator_job_batches_replayed_total``         batches re-run after a crash (a table already
                                                   held them)
``coordinator_job_restarts_total``                 earlier starts of a job on this warehouse
                                                   (counted by jobs run with metrics on)
=================================================  ====================================================

and Kafka's group-coordinator metrics (:mod:`coordinator.metrics.groups`) from the group
summaries each batch writes to ``group_state``, seeded from that table at start.

Readiness: ``/readyz`` answers 200 once the query runs and has completed its first micro-batch,
and 503 again once it stops.

The latency needs each answer's request file: a thread of the metrics lists the inbox every
``SCAN_INTERVAL_S`` and reads the files it has not seen for their request ids; a batch whose
answers name a request not seen yet lists the inbox once more before it is matched (the
batch's own files are still there: the file source archives a batch's files only after the
batch commits). That costs a second read of each request file on the driver, off the batch's
thread, only with metrics on.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from prometheus_client import Counter, Gauge, Histogram

from coordinator.metrics.groups import GroupMetrics, GroupView
from coordinator.metrics.server import (
    MetricsServer,
    Readiness,
    never_raises,
    new_registry,
    parse_address,
)
from coordinator.stream.delta_read import read_table
from coordinator.stream.schema import GROUP_STATE, Warehouse
from coordinator.stream.source import SEQUENCED, files_read, parse_sequenced, visible

log = logging.getLogger(__name__)

#: A micro-batch takes 0.3 s idle to tens of seconds (a rebuild's first batch).
BATCH_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60)
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 300)
REQUEST_BUCKETS = (0, 1, 10, 100, 1_000, 10_000, 100_000)
WRITE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
#: How often the inbox is listed for new request files.
SCAN_INTERVAL_S = 0.2
#: A request whose answer has not come this long after its file arrived is forgotten.
PENDING_HORIZON_S = 900.0
#: Starts of the job on this warehouse, for ``coordinator_job_restarts_total``.
STARTS_FILE = "metrics-starts.json"


def _file_name(source_file: str) -> str:
    """A request file's name as it was dropped, from a path or a ``file:`` URI as Spark reports
    it (a sequenced file, ``<seq>@<arrival>-<name>``, by its ``name``)."""
    path = unquote(urlparse(source_file).path) if "://" in source_file else source_file
    name = posixpath.basename(path)
    sequenced = parse_sequenced(name)
    return name if sequenced is None else sequenced[1]


class InboxArrivals:
    """When each request reached the inbox, by request id, and which files wait unanswered.

    A request file is known by the name it was dropped under, in the inbox and once the source
    has sequenced it (``_sequenced/<seq>@<arrival>-<name>``, :mod:`coordinator.stream.source`),
    which keeps its modification time: its arrival. :meth:`scan` reads the files not seen before
    (a thread of its own, or a batch missing a request); :meth:`backlog` is read by scrapes."""

    def __init__(self, inbox: Path, horizon_s: float = PENDING_HORIZON_S) -> None:
        self.inbox = inbox
        self.horizon_s = horizon_s
        self._lock = threading.Lock()
        #: One scan at a time (the scanning thread, or a batch missing a request).
        self._scanning = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: request id -> (arrival, file name)
        self._pending: dict[str, tuple[float, str]] = {}
        #: file name -> requests of it not answered yet
        self._open: dict[str, int] = {}
        #: files some answer (or a rejected line) has come from
        self._answered: set[str] = set()

    def _files(self) -> dict[str, Path]:
        """The request files waiting, by the name they were dropped under: ``_sequenced/``'s,
        then the inbox's (in that order, so that a file sequenced between the two listings is
        missed once rather than seen twice)."""
        found: dict[str, Path] = {}
        sequenced_dir = self.inbox / SEQUENCED
        for directory in (sequenced_dir, self.inbox):
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            for name in names:
                if directory == sequenced_dir:
                    parsed = parse_sequenced(name)
                    if parsed is not None:
                        found[parsed[1]] = directory / name
                elif visible(name):
                    found.setdefault(name, directory / name)
        return found

    def start(self, interval_s: float = SCAN_INTERVAL_S) -> None:
        """Scan every ``interval_s`` on a daemon thread until :meth:`close`."""

        def run() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.scan()
                except Exception:
                    log.exception("metrics: listing the inbox failed")

        self._thread = threading.Thread(target=run, name="metrics-inbox", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def scan(self) -> None:
        with self._scanning:
            self._scan()

    def _scan(self) -> None:
        files = self._files()
        listed = set(files)
        arrivals: list[tuple[str, float, list[str]]] = []
        for name, path in files.items():
            if name in self._open or name in self._answered:
                continue
            try:
                arrived = path.stat().st_mtime
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue  # sequenced or archived meanwhile: the next scan finds it
            arrivals.append((name, arrived, list(_request_ids(text))))
        horizon = time.time() - self.horizon_s
        with self._lock:
            for name, arrived, ids in arrivals:
                self._open[name] = len(ids)
                for request_id in ids:
                    self._pending[request_id] = (arrived, name)
            for gone in [n for n in self._open if n not in listed]:
                del self._open[gone]
            self._answered &= listed
            stale = [k for k, (arrived, _) in self._pending.items() if arrived < horizon]
            for key in stale:
                del self._pending[key]

    def answered(self, request_ids: Iterable[Any], at: float) -> tuple[list[float], list[Any]]:
        """The latencies (seconds) of the answers to ``request_ids`` written at ``at``, and the
        ids whose request was not seen (yet)."""
        latencies = []
        missing = []
        with self._lock:
            for request_id in request_ids:
                found = self._pending.pop(str(request_id), None)
                if found is None:
                    missing.append(request_id)
                    continue
                arrived, name = found
                latencies.append(max(0.0, at - arrived))
                self._answered.add(name)
                if name in self._open:
                    self._open[name] -= 1
        return latencies, missing

    def rejected(self, source_files: Iterable[str]) -> None:
        with self._lock:
            self._answered.update(_file_name(f) for f in source_files)

    def backlog(self) -> int:
        """Inbox files from which no answer has come yet."""
        names = self._files()
        with self._lock:
            return sum(1 for n in names if n not in self._answered)


def _request_ids(text: str) -> Iterable[str]:
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        if isinstance(fields, dict) and fields.get("request_id") is not None:
            yield str(fields["request_id"])


class JobMetrics:
    """The job's registry, metrics and HTTP server (see the module doc). The sink calls
    :meth:`batch_written` after each batch's tables are written; the progress listener calls
    :meth:`batch_completed` and :meth:`query_terminated`."""

    def __init__(self, address: str, paths: Warehouse) -> None:
        host, port = parse_address(address)
        self.paths = paths
        self.registry = registry = new_registry()
        self.readiness = Readiness(registry, "the query is starting")
        self.groups = GroupMetrics(registry)
        self.inbox = InboxArrivals(paths.inbox)
        self.batch_duration = Histogram(
            "coordinator_job_batch_duration_seconds",
            "Micro-batch duration (Spark's batchDuration)",
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.batch_requests = Histogram(
            "coordinator_job_batch_requests",
            "Requests a micro-batch settled (answers written plus lines refused)",
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        self.files = Counter("coordinator_job_files", "Inbox files read", registry=registry)
        self.responses = Counter(
            "coordinator_job_responses", "Responses written", registry=registry
        )
        self.rejected = Counter(
            "coordinator_job_rejected", "Inbox lines refused (rejected_requests)", registry=registry
        )
        self.timers_fired = Counter(
            "coordinator_job_timers_fired",
            "Keys stepped only because their timer fired",
            registry=registry,
        )
        self.latency = Histogram(
            "coordinator_job_request_latency_seconds",
            "From a request file's arrival in the inbox to its answer committed to responses",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        backlog = Gauge(
            "coordinator_job_inbox_files",
            "The source's backlog: inbox files none of whose requests has been answered yet",
            registry=registry,
        )
        backlog.set_function(self.inbox.backlog)
        self.state_rows = Gauge(
            "coordinator_job_state_rows",
            "Spark state rows (groups, or offsets partitions when keyed by shard)",
            registry=registry,
        )
        self.state_memory = Gauge(
            "coordinator_job_state_memory_bytes", "Spark state store memory", registry=registry
        )
        self.delta_write = Histogram(
            "coordinator_job_delta_write_seconds",
            "Delta commits of a micro-batch, by table",
            ["table"],
            buckets=WRITE_BUCKETS,
            registry=registry,
        )
        self.batches = Counter(
            "coordinator_job_batches", "Micro-batches completed", registry=registry
        )
        self.last_batch = Gauge(
            "coordinator_job_last_batch_id",
            "The warehouse batch id of the last micro-batch completed",
            registry=registry,
        )
        self.replayed = Counter(
            "coordinator_job_batches_replayed",
            "Micro-batches re-run after a crash (a table already held them)",
            registry=registry,
        )
        self.restarts = Counter(
            "coordinator_job_restarts",
            "Earlier starts of a job on this warehouse (counted by jobs run with metrics)",
            registry=registry,
        )
        self.restarts.inc(self._count_start())
        self.groups.reset(self._current_groups())
        self.server = MetricsServer(registry, self.readiness, host, port).start()
        self.inbox.start()

    # --- start ----------------------------------------------------------------------------------

    def _count_start(self) -> int:
        """Record this start in ``status/``; the number of earlier ones."""
        path = self.paths.status / STARTS_FILE
        try:
            earlier = int(json.loads(path.read_text(encoding="utf-8"))["starts"])
        except (OSError, ValueError, KeyError, TypeError):
            earlier = 0
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(json.dumps({"starts": earlier + 1}) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            log.warning("cannot record the job's start in %s", path)
        return earlier

    def _current_groups(self) -> list[GroupView]:
        from deltalake import DeltaTable

        table = self.paths.table(GROUP_STATE)
        if not DeltaTable.is_deltatable(str(table)):
            return []
        columns = [
            "group_id",
            "state",
            "generation_id",
            "num_committed_offsets",
            "state_timestamp_ms",
        ]
        rows = read_table(table, columns=columns).to_pylist()
        return [GroupView.from_summary(row) for row in rows]

    # --- hooks ----------------------------------------------------------------------------------

    @never_raises("batch figures")
    def batch_written(
        self,
        records: list[dict[str, Any]],
        responses: list[dict[str, Any]],
        groups: list[dict[str, Any]],
        rejected: list[dict[str, Any]],
        list_groups: list[Any],
        table_ms: Mapping[str, float],
        replayed: bool,
    ) -> None:
        """One batch's tables are written (the sink's thread, before Spark commits it)."""
        written_at = time.time()
        answered = [r.get("request_id") for r in responses]
        answered.extend(request.request_id for request in list_groups)
        latencies, missing = self.inbox.answered((i for i in answered if i is not None), written_at)
        if missing:  # files that came after the last scan: still in the inbox
            self.inbox.scan()
            latencies += self.inbox.answered(missing, written_at)[0]
        for latency in latencies:
            self.latency.observe(latency)
        self.inbox.rejected(str(r.get("source_file") or "") for r in rejected)
        self.responses.inc(len(answered))
        self.rejected.inc(len(rejected))
        self.batch_requests.observe(len(answered) + len(rejected))
        for table, ms in table_ms.items():
            self.delta_write.labels(table).observe(ms / 1000)
        if replayed:
            self.replayed.inc()
        self.groups.observe((GroupView.from_summary(g) for g in groups), records, responses)

    @never_raises("batch progress")
    def batch_completed(self, progress: Any, batch_id: int, timers_fired: int) -> None:
        """Spark's progress of one completed batch (the listener's thread)."""
        self.batches.inc()
        self.last_batch.set(batch_id)
        self.batch_duration.observe(progress.batchDuration / 1000)
        self.files.inc(files_read(progress))
        self.timers_fired.inc(timers_fired)
        operators = progress.stateOperators
        if operators:
            self.state_rows.set(sum(op.numRowsTotal for op in operators))
            self.state_memory.set(sum(op.memoryUsedBytes for op in operators))
        if not self.readiness.ready:
            self.readiness.set_ready()

    def query_terminated(self, error: str | None) -> None:
        self.readiness.set_not_ready(f"the query stopped: {error}" if error else "stopped")

    def close(self) -> None:
        """Stop serving (the port is released); safe to call twice."""
        if self.readiness.ready:
            self.readiness.set_not_ready("stopped")
        self.inbox.close()
        self.server.close()
