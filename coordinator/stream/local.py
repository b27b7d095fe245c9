"""The job's micro-batch without Spark: for tests, benchmarks and building warehouses quickly.

:class:`LocalJob` does per batch what the Spark job does, with the same pieces: the operator's
per-group step (:func:`coordinator.stream.operator.run_shard`, every group in one shard), the
same ``foreachBatch`` writer (:class:`coordinator.stream.job.BatchSink`) and so the same Delta
tables, app transactions and checkpoint identity. With ``job.sink.write=executors`` it writes as
the job's tasks do: the batch's rows are cut into ``job.shards`` parts by offsets partition (as
Spark's shuffle cuts them), each part goes through the task function
(:func:`coordinator.stream.datafiles.write_partition`), and the sink commits the files they
wrote. What it leaves out is what Spark adds: the
inbox source (it reads the inbox directly), the state store (state lives in memory, so a ``LocalJob`` does not survive its
process) and the trigger (the caller says when a batch runs, and at what time). Without the
source's offsets, consumer groups are assigned from the topic store's version 0 (else
``job.topics``), never a newer version.

Tables written by a ``LocalJob`` are indistinguishable from the job's, which is what the
operator tools, the Spark queries and their benchmarks need. A Spark job started later on the
same warehouse finds a checkpoint with no Spark state and rebuilds from the log
(:mod:`coordinator.stream.rebuild`), as after a lost checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from coordinator import jsonio
from coordinator.client.transport import AnswerQueue, Callback, Clock
from coordinator.stream import datafiles, operator
from coordinator.stream.client import decode_response
from coordinator.stream.job import BatchSink, batch_sink, operator_settings
from coordinator.stream.operator import OUTPUT_COLUMNS, InboxLine
from coordinator.stream.settings import Settings, checkpoint_identity


class LocalJob:
    """Batches of requests in, the job's tables out, at the times the caller gives."""

    def __init__(self, settings: Settings) -> None:
        identity = checkpoint_identity(settings)
        self.settings = settings
        self.opsettings = operator_settings(settings, identity)
        self.sink: BatchSink = batch_sink(settings, identity)
        self.state: dict[str, tuple[int | None, bytes]] = {}
        last = self.sink.sink.last_batch()
        self.batch_id = 0 if last is None else last + 1
        self.internal_errors: list[str] = []

    @property
    def next_deadline_ms(self) -> int | None:
        """The earliest timer of any group (None: no timer armed)."""
        deadlines = [d for d, _ in self.state.values() if d is not None]
        return min(deadlines) if deadlines else None

    def run_batch(
        self,
        requests: Iterable[Mapping[str, Any] | str],
        now_ms: int,
        arrival_ms: Sequence[int | None] | None = None,
    ) -> list[dict[str, Any]]:
        """One micro-batch at ``now_ms``: the requests (dicts, or raw inbox lines) in their
        order, each served at its arrival (``arrival_ms``, as the job's inbox source stamps
        them; none: at ``now_ms``), and every timer due by then. The answers land in
        ``responses`` as in the job, and are returned (all but ListGroups', which the sink
        answers from ``group_state``)."""
        name = f"local-batch-{self.batch_id:08d}.jsonl"
        lines = [
            _line(request if isinstance(request, str) else jsonio.dumps(dict(request)), name, i)
            for i, request in enumerate(requests)
        ]
        if arrival_ms is not None:
            arrivals = zip(lines, arrival_ms, strict=True)
            lines = [line._replace(arrival_ms=at) for line, at in arrivals]
        return self._run(lines, now_ms)

    def _run(self, lines: list[InboxLine], now_ms: int) -> list[dict[str, Any]]:
        outcome = operator.run_shard(self.opsettings, self.state, lines, now_ms)
        self.state = outcome.state
        self.internal_errors.extend(outcome.internal_errors)
        rows = [dict(zip(OUTPUT_COLUMNS, row, strict=True)) for row in outcome.rows]
        if self.settings.job.sink_write == datafiles.EXECUTORS:
            self._write_as_tasks(rows)
        else:
            self.sink.write(
                pa.Table.from_pylist(rows, schema=datafiles.OPERATOR_SCHEMA), self.batch_id
            )
        self.batch_id += 1
        return [decode_response(r) for r in rows if r["kind"] == operator.RESPONSE]

    def _write_as_tasks(self, rows: list[dict[str, Any]]) -> None:
        plan = self.sink.plan_files(self.batch_id)
        tasks = self.settings.job.shards
        parts: list[list[dict[str, Any]]] = [[] for _ in range(tasks)]
        for row in rows:
            parts[row["offsets_partition"] % tasks].append(row)
        output = datafiles.OPERATOR_SCHEMA
        meta = [
            batch
            for part in parts
            for batch in datafiles.write_partition(
                iter([pa.RecordBatch.from_pylist(part, schema=output)]), plan
            )
        ]
        self.sink.commit_files(pa.Table.from_batches(meta, schema=datafiles.META_SCHEMA), plan)

    def poll_inbox(self, now_ms: int) -> int:
        """One micro-batch of every file in the inbox (hidden names skipped, as Spark's file
        source does), in name order, each file's lines in order; the files then go to
        ``archive/``. Returns how many files; with none, timers are still fired.

        A file is read as it is at that moment and split as the job splits it (:func:`lines_of`:
        lines end at LF or CRLF, blank ones skipped, the last one marked when the file does not
        end with a newline, undecodable UTF-8 replaced by U+FFFD and marked)."""
        paths = self.settings.job.paths
        files = (
            sorted(p for p in paths.inbox.iterdir() if not p.name.startswith((".", "_")))
            if paths.inbox.is_dir()
            else []
        )
        if not files:
            self.advance(now_ms)
            return 0
        lines = [line for path in files for line in lines_of(path.read_bytes(), str(path))]
        self._run(lines, now_ms)
        paths.archive.mkdir(parents=True, exist_ok=True)
        for path in files:
            path.rename(paths.archive / path.name)
        return len(files)

    def advance(self, now_ms: int) -> list[dict[str, Any]] | None:
        """A batch with no requests at ``now_ms`` when a timer is due by then (as Spark runs
        one for processing-time timeouts); None when nothing was due."""
        deadline = self.next_deadline_ms
        if deadline is None or deadline > now_ms:
            return None
        return self.run_batch((), now_ms)


def lines_of(data: bytes, source: str) -> list[InboxLine]:
    """A request file's lines as the job's inbox source gives them (``job.inbox_stream``)."""
    try:
        text = data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        valid = False
    parts = _NEWLINE.split(text)
    return [
        _line(
            part,
            source,
            i,
            terminated=i < len(parts) - 1,
            valid_utf8=valid or "\ufffd" not in part,
        )
        for i, part in enumerate(parts)
        if part.strip(" ")  # Spark's trim: spaces only
    ]


_NEWLINE = re.compile(r"\r?\n")


def _line(
    value: str, source: str, position: int, *, terminated: bool = True, valid_utf8: bool = True
) -> InboxLine:
    try:
        group_id = jsonio.loads(value).get("group_id") or ""
    except Exception:  # a bad line is the operator's to answer or reject
        group_id = ""
    # As Spark's get_json_object gives the key: UTF-8, a lone surrogate (an escape) as "?".
    group_id = group_id.encode("utf-8", "replace").decode() if isinstance(group_id, str) else ""
    return InboxLine(value, source, position, group_id, terminated, valid_utf8)


class LocalNetwork(AnswerQueue):
    """A :class:`LocalJob` as the members' network (the interface of
    :class:`coordinator.client.transport.InProcessCluster`): requests wait for the next
    micro-batch, every ``trigger_ms`` of the clock, and their answers come out of it, as they
    do from the Spark job. With :class:`coordinator.client.simulation.Simulation` on a
    simulated clock, live members write a real warehouse in seconds."""

    def __init__(self, job: LocalJob, clock: Clock, trigger_ms: int = 200) -> None:
        super().__init__()
        self.job = job
        self.clock = clock
        self.trigger_ms = trigger_ms
        self.next_batch_ms = clock.now_ms()
        self.sent = 0
        self._pending: list[tuple[dict[str, Any], Callback]] = []

    def send(self, request: dict[str, Any], callback: Callback, node_id: int | None = None) -> None:
        self.sent += 1
        if request.get("api") == "list_groups":
            raise ValueError("LocalNetwork does not carry list_groups (the sink answers it)")
        self._pending.append((request, callback))

    def advance(self) -> None:
        """Run a micro-batch when one is due: the requests sent since the last one, or, with
        none, only when a timer is due (Spark's idle batches)."""
        now = self.clock.now_ms()
        if now < self.next_batch_ms:
            return
        self.next_batch_ms = now + self.trigger_ms
        pending, self._pending = self._pending, []
        for request, callback in pending:
            self._owe(request, callback)
        answers = (
            self.job.run_batch([r for r, _ in pending], now)
            if pending
            else self.job.advance(now) or []
        )
        self._route(answers)
