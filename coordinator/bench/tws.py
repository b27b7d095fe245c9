"""Experimental: the operator as ``transformWithStateInPandas`` (Spark's state API v2).

Benchmark only (``coordinator bench stream --modes floor,tws``); the job itself always runs
``applyInPandasWithState`` (:mod:`coordinator.stream.job`), and nothing selects this module from
the job's settings. It exists to measure the alternative that ``spark-notes.md`` names with the
job's own step, not with a toy function.

What is the same as ``group`` mode: the key (one Spark key per group id), the input (the inbox
rows of :func:`coordinator.stream.job.inbox_stream`, and a rebuilt checkpoint's bootstrap
files), the per-group step (:func:`coordinator.stream.operator.run_group`, so the same ordering
by (file, line), the same keyed member ids, the same loads), the output rows and the sink.

What differs:

- **State**: one ``ValueState`` per group, ``(blob, deadline)``: the same snapshot blob, plus the
  group's next engine deadline (-1 for none), which is also the group's one registered timer.
- **Timers**: ``timeMode="ProcessingTime"``. After every step the old timer is deleted and the
  new deadline registered (at least one ms after the batch time: a timer at or before the batch
  time would fire in the same batch). ``handleExpiredTimer`` steps the group with no lines and
  ``timed_out`` (a TICK row), as a timed-out ``applyInPandasWithState`` call does. Spark calls
  it after the batch's input rows, so a group that had lines in the batch has already stepped
  past its deadline and re-armed its timer; a timer found not to be the stored deadline (or
  not yet due) is stale and ignored, so such a group is not stepped twice.
- **Timer precision**: an ``applyInPandasWithState`` timeout fires in the first batch whose
  timestamp is *after* the deadline, a processing-time timer in the first batch whose
  timestamp is *at or after* it. The engine fires what is due at ``now >= deadline`` either
  way, so the outcome can differ only for a batch landing on the deadline's very millisecond.
- **Needs** RocksDB (``job.state.store=rocksdb``; Spark refuses the HDFS store for this
  operator) and the ``protobuf`` package (PySpark's state API client speaks protobuf to the
  JVM; ``constraints.txt`` pins a 6.x runtime matching PySpark 4.2's generated code).

Exactly-once: the clock is ``TimerValues.getCurrentProcessingTimeInMs()``, the batch's
timestamp from the offsets log, the same value a re-run batch gets (as
``getCurrentProcessingTimeMs()`` is for ``applyInPandasWithState``); the state store reloads the
batch's version and expired timers are those of the store at the batch's timestamp, so a re-run
batch sees the same state, lines, timers and clock and emits the same rows, which the sink's
app transactions write once. What is *not* established: this variant has no crash/replay test
(the job's kill-9 and replay tests run ``applyInPandasWithState`` only), and a checkpoint made
with it is not readable by the job's operator (different state layout and timer store), nor
the other way round; there is no migration between the two other than a rebuild from the log.
Treat it as a benchmark prototype, not as an equivalent operator.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from coordinator.stream import operator
from coordinator.stream.operator import OperatorSettings
from coordinator.stream.settings import PROVIDER_CLASS, Settings, state_store_confs

#: The bench mode that runs this operator.
TWS = "tws"
#: A group's stored state: its snapshot blob and its next deadline (-1: none).
STATE_DDL = "blob binary, deadline long"
NO_DEADLINE = -1


class CoordinatorProcessor(StatefulProcessor):
    """The engine's per-group step as a ``StatefulProcessor`` keyed by group id."""

    def __init__(self, settings: OperatorSettings) -> None:
        self.settings = settings
        self.handle: Any = None
        self.state: Any = None

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.state = handle.getValueState("group", STATE_DDL)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        now = timerValues.getCurrentProcessingTimeInMs()
        blob, deadline = self._stored()
        outcome = operator.run_group(self.settings, key[0], blob, operator._lines(rows, False), now)
        return self._finish(outcome, blob is not None, deadline, now, None)

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[Any]:
        now = timerValues.getCurrentProcessingTimeInMs()
        expired = expiredTimerInfo.getExpiryTimeInMs()
        blob, deadline = self._stored()
        if blob is None or deadline != expired or deadline > now:
            return iter(())  # stale: the group stepped (and re-armed) earlier in this batch
        outcome = operator.run_group(self.settings, key[0], blob, (), now, timed_out=True)
        return self._finish(outcome, True, deadline, now, expired)

    def close(self) -> None:
        pass

    def _stored(self) -> tuple[bytes | None, int | None]:
        value = self.state.get()
        if value is None:
            return None, None
        blob, deadline = value[0], value[1]
        if blob is None:
            return None, None
        return bytes(blob), None if deadline is None or deadline < 0 else int(deadline)

    def _finish(
        self,
        outcome: operator.GroupOutcome,
        existed: bool,
        old_deadline: int | None,
        now: int,
        expired: int | None,
    ) -> Iterator[Any]:
        operator._report(outcome.internal_errors, outcome.warnings)
        new_deadline: int | None = None
        if outcome.blob is None:
            if existed:
                self.state.clear()
        else:
            if outcome.deadline_ms is not None:
                new_deadline = max(outcome.deadline_ms, now + 1)
            stored = NO_DEADLINE if new_deadline is None else new_deadline
            self.state.update((outcome.blob, stored))
        # Spark deletes the timer it fired itself, after handleExpiredTimer returns.
        if old_deadline is not None and old_deadline != new_deadline and old_deadline != expired:
            self.handle.deleteTimer(old_deadline)
        if new_deadline is not None and new_deadline != old_deadline:
            self.handle.registerTimer(new_deadline)
        if outcome.rows:
            return iter((operator.output_frame(outcome.rows),))
        return iter(())


def tws_stream(spark: Any, settings: Settings, opsettings: OperatorSettings) -> Any:
    """The job's stream with :class:`CoordinatorProcessor` in place of
    ``applyInPandasWithState`` (a :data:`coordinator.stream.job.StreamBuilder`). The session's
    state store must be RocksDB (``job.state.store=rocksdb``; ``job.start`` sets it)."""
    from coordinator.stream import job

    wanted = state_store_confs("rocksdb")[PROVIDER_CLASS]
    if settings.job.state_store != "rocksdb" or spark.conf.get(PROVIDER_CLASS) != wanted:
        raise ValueError("transformWithStateInPandas needs job.state.store=rocksdb")
    lines = job.inbox_stream(spark, settings)
    if opsettings.bootstrap_dir is not None:
        lines = lines.unionByName(job.bootstrap_stream(spark, settings, opsettings.bootstrap_dir))
    return lines.groupBy("group_id").transformWithStateInPandas(
        CoordinatorProcessor(opsettings),
        operator.OUTPUT_DDL,
        "Update",
        "ProcessingTime",
    )
