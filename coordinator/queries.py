"""Spark DataFrames and SQL views over the job's Delta tables, at one consistent cut.

```python
from coordinator.queries import Queries

q = Queries(spark, "./warehouse")                    # now
q.committed_offsets().show()
q.rebalances().where("group_id = 'orders-app'").show()
old = q.at("2027-01-15T12:00:00")                    # or Queries(spark, wh, as_of="42"): log version 42
old.group_state().show()
q.register_views()                                   # group_state, committed_offsets, ... as SQL
```

Who held ``orders-3`` at noon (``members_history`` is one row per member per generation, its
``assigned_partitions`` an array of {topic, partition}; times are epoch milliseconds)::

    SELECT group_id, generation_id, member_id, client_id, client_host
    FROM members_history LATERAL VIEW explode(assigned_partitions) AS tp
    WHERE tp.topic = 'orders' AND tp.partition = 3
      AND valid_from_ms <= unix_millis(TIMESTAMP '2027-01-15 12:00:00')
      AND (valid_to_ms IS NULL OR valid_to_ms > unix_millis(TIMESTAMP '2027-01-15 12:00:00'))

**Retention.** A time or log version older than the warehouse keeps (``job.retention.*``,
:mod:`coordinator.stream.retention`) is refused when the Queries is made
(:class:`~coordinator.admin.tables.AsOfError`: where history starts and the setting), and a raw
table read at a cut it no longer holds whole is refused too; :meth:`Queries.history_start` says
where the history of "now" starts.

**One cut.** A :class:`Queries` resolves one :class:`~coordinator.admin.tables.Cut` when it is
made (:meth:`WarehouseReader.cut <coordinator.admin.tables.WarehouseReader.cut>`: the last batch
every table holds now, at a time, or at a version of the ``consumer_offsets`` log) and every
DataFrame it returns holds the rows of the batches up to that one (``batch_id <= cut``), so
they agree with one another and with the operator CLI at the same ``--as-of``. With no
complete batch yet every DataFrame is empty, with its schema. A Queries lists each table's
files once, when a DataFrame first needs them, and keeps answering for its cut while the job
writes on; make a new one (or :meth:`Queries.at`) to move on, and do not keep one across
the job's compaction and ``VACUUM``, which remove the files it listed.

**Reading a table.** Without the Delta Spark connector (its jars come from Maven; this machine
has none) a table is read with Spark's Parquet reader from the files the Delta log lists at
its newest version (``deltalake.DeltaTable(path).file_uris()``), with the table's schema from
:mod:`coordinator.stream.schema` converted to Spark's (:func:`spark_schema`), and
``basePath`` so that ``consumer_offsets``' partition column ``offsets_partition`` comes from
the directory names, as delta-rs leaves it out of the files. When ``format("delta")`` loads
(detected once per Queries, by the missing-data-source error), the Delta reader is used
instead. That branch is **untested here**: there are no Delta jars on this machine.

**The history DataFrames** (:meth:`Queries.rebalances`, :meth:`Queries.members_history`) run
the pure functions of :mod:`coordinator.admin.history` per group inside Spark
(``groupBy("group_id").applyInArrow``), the very functions the CLI runs over pyarrow rows, so
the two cannot disagree. :meth:`Queries.committed_offsets` is Spark SQL (a window over the log),
and is tested against :func:`coordinator.admin.history.committed_offsets`.

The output schemas of the derived DataFrames are the Arrow schemas below (converted with
:func:`spark_schema`); the raw tables' are :data:`coordinator.stream.schema.TABLE_SCHEMAS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from coordinator.admin import history
from coordinator.admin.tables import AsOf, AsOfError, Cut, WarehouseReader, format_ms
from coordinator.log.records import GROUP_METADATA, OFFSET_COMMIT
from coordinator.stream.schema import (
    CONSUMER_OFFSETS,
    GROUP_HISTORY,
    GROUP_STATE,
    PARTITION_BY,
    REJECTED_REQUESTS,
    RESPONSES,
    TABLE_SCHEMAS,
)

# --- output schemas of the derived DataFrames ---------------------------------------------------

#: :meth:`Queries.committed_offsets`: the columns of :func:`history.committed_offsets`.
COMMITTED_OFFSETS_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("committed_offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("commit_timestamp_ms", pa.int64()),
        ("expire_timestamp_ms", pa.int64()),
        ("offsets_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("batch_id", pa.int64()),
    ]
)

#: :meth:`Queries.offsets_history`: every OffsetCommit record; ``tombstone`` when its value is
#: null (an OffsetDelete, a DeleteGroups or an expiry), the commit's columns then null.
OFFSETS_HISTORY_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offsets_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("timestamp_ms", pa.int64()),
        pa.field("tombstone", pa.bool_(), nullable=False),
        ("committed_offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("commit_timestamp_ms", pa.int64()),
        ("expire_timestamp_ms", pa.int64()),
        ("batch_id", pa.int64()),
        ("written_at_ms", pa.int64()),
    ]
)

#: :meth:`Queries.rebalances`: the dicts of :func:`history.rebalances`.
REBALANCES_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("generation_id", pa.int32()),
        ("previous_generation_id", pa.int32()),
        ("start_ms", pa.int64()),
        ("end_ms", pa.int64()),
        ("duration_ms", pa.int64()),
        ("outcome", pa.string()),
        ("leader", pa.string()),
        ("protocol_name", pa.string()),
        ("members_before", pa.int32()),
        ("members_after", pa.int32()),
        ("joined", pa.list_(pa.string())),
        ("left", pa.list_(pa.string())),
        ("reason", pa.string()),
        ("start_batch", pa.int64()),
        ("end_batch", pa.int64()),
    ]
)

TOPIC_PARTITION = pa.struct([("topic", pa.string()), ("partition", pa.int32())])

#: :meth:`Queries.members_history`: the dicts of :func:`history.members_history`.
MEMBERS_HISTORY_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("generation_id", pa.int32()),
        ("protocol_name", pa.string()),
        ("is_leader", pa.bool_()),
        ("valid_from_ms", pa.int64()),
        ("valid_to_ms", pa.int64()),
        ("member_id", pa.string()),
        ("group_instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("session_timeout_ms", pa.int32()),
        ("rebalance_timeout_ms", pa.int32()),
        ("topics", pa.list_(pa.string())),
        ("assigned_partitions", pa.list_(TOPIC_PARTITION)),
    ]
)

#: The log columns :func:`history.generations` reads (GroupMetadata records only).
_GENERATION_COLUMNS = (
    "record_type",
    "group_id",
    "offsets_partition",
    "offset",
    "timestamp_ms",
    "value",
    "generation_id",
    "protocol_type",
    "protocol_name",
    "leader",
    "members",
)

#: The views :meth:`Queries.register_views` registers (before the prefix).
VIEWS = (
    GROUP_STATE,
    GROUP_HISTORY,
    "committed_offsets",
    "offsets_history",
    "rebalances",
    "members_history",
    CONSUMER_OFFSETS,
    RESPONSES,
    REJECTED_REQUESTS,
)


def spark_schema(schema: pa.Schema) -> Any:
    """A Spark ``StructType`` for an Arrow schema (the one conversion every DataFrame here
    uses, and the one ``spark.createDataFrame(arrow_table)`` applies)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


# --- the per-group functions Spark runs (module level: the workers import them) ------------------


def _rebalances_of_group(table: pa.Table) -> pa.Table:
    """One group's ``group_history`` rows -> :func:`history.rebalances`, in batch order."""
    rows = table.sort_by([("batch_id", "ascending")]).to_pylist()
    return pa.Table.from_pylist(history.rebalances(rows), schema=REBALANCES_SCHEMA)


def _members_history_of_group(table: pa.Table) -> pa.Table:
    """One group's GroupMetadata records -> :func:`history.members_history`, in log order."""
    ordered = table.sort_by([("offsets_partition", "ascending"), ("offset", "ascending")])
    rows = history.members_history(ordered.to_pylist())
    return pa.Table.from_pylist(rows, schema=MEMBERS_HISTORY_SCHEMA)


# --- the queries ------------------------------------------------------------------------------


class Queries:
    """DataFrames over one warehouse's tables, all at one cut (see the module docstring).

    ``as_of``: None for now; an :class:`AsOf`; or text as the CLI's ``--as-of`` takes it
    (digits: a version of ``consumer_offsets``; else an ISO-8601 date-time, UTC unless a zone
    is given). ``delta``: None to detect the Delta Spark reader, or True/False to force it.
    """

    def __init__(
        self,
        spark: Any,
        warehouse: str | Path,
        *,
        as_of: AsOf | str | None = None,
        checkpoint: str | Path | None = None,
        delta: bool | None = None,
    ) -> None:
        self.spark = spark
        self.warehouse = warehouse
        self.checkpoint = checkpoint
        self.reader = WarehouseReader(warehouse, checkpoint)
        self.as_of = AsOf.parse(as_of) if isinstance(as_of, str) else as_of
        self.cut: Cut = self.reader.cut(self.as_of)
        self._delta = delta
        self._read: dict[tuple[str, int | None], Any] = {}

    def at(self, as_of: AsOf | str | None) -> Queries:
        """The same warehouse at another cut (None: now, as it is at this call)."""
        return Queries(
            self.spark,
            self.warehouse,
            as_of=as_of,
            checkpoint=self.checkpoint,
            delta=self._delta,
        )

    # --- reading tables -------------------------------------------------------------------------

    @property
    def delta_reader(self) -> bool:
        """Whether ``format("delta")`` works in this session (tried once, on first use)."""
        if self._delta is None:
            self._delta = _has_delta_reader(self.spark, self.reader.paths.tables)
        return self._delta

    def _empty(self, schema: pa.Schema) -> Any:
        return self.spark.createDataFrame([], spark_schema(schema))

    def _files(self, name: str, cut: Cut | None = None) -> Any:
        """Every row of table ``name`` (its newest version, or by Delta time travel its newest
        version holding no batch after ``cut``), with exactly the columns and types of its
        Arrow schema. Listed once per Queries: all its DataFrames read the same files of a
        table."""
        key = (name, None if cut is None else cut.batch_id)
        if key not in self._read:
            self._read[key] = self._load(name, cut)
        return self._read[key]

    def _load(self, name: str, cut: Cut | None) -> Any:
        """Time travel (``cut``) is only for ``group_state`` in a warehouse without
        ``group_history``, and is refused (:class:`AsOfError`) when the table's Delta log no
        longer reaches back to the cut (:meth:`WarehouseReader.table_at_cut`)."""
        schema = TABLE_SCHEMAS[name]
        path = self.reader.paths.table(name)
        if not DeltaTable.is_deltatable(str(path)):
            return self._empty(schema)
        table = DeltaTable(str(path)) if cut is None else self.reader.table_at_cut(name, cut)
        if table is None:
            return self._empty(schema)
        if self.delta_reader:  # untested here: no Delta jars on this machine
            reader = self.spark.read.format("delta")
            if cut is not None:
                reader = reader.option("versionAsOf", table.version())
            return reader.load(str(path)).select(*schema.names)
        uris = table.file_uris()
        if not uris:
            return self._empty(schema)
        reader = self.spark.read.schema(spark_schema(schema))
        if PARTITION_BY.get(name):
            reader = reader.option("basePath", str(path))
        # Spark puts partition columns last; the select restores the table's order.
        return reader.parquet(*uris).select(*schema.names)

    def table(self, name: str) -> Any:
        """Table ``name`` as written, rows of the batches up to the cut. For ``group_state``
        (one current row per group, rewritten in place) that is the current rows last changed
        at or before the cut: use :meth:`group_state` for the groups as of the cut."""
        if name not in TABLE_SCHEMAS:
            raise ValueError(f"no table {name!r} (tables: {', '.join(sorted(TABLE_SCHEMAS))})")
        if self.cut.batch_id is None:
            return self._empty(TABLE_SCHEMAS[name])
        self.reader.check_kept(self.cut, (name,))
        from pyspark.sql import functions as F

        return self._files(name).where(F.col("batch_id") <= F.lit(self.cut.batch_id))

    def history_start(self) -> str | None:
        """Where the groups' history starts when retention has dropped older rows ("history
        starts at <time> (<setting>)"), None when the warehouse still holds all of it. A cut
        before it is refused (:class:`~coordinator.admin.tables.AsOfError`) when made."""
        kept = self.reader.history_start()
        if kept is None:
            return None
        return f"history starts at {format_ms(kept.timestamp_ms)} ({kept.setting})"

    # --- groups ---------------------------------------------------------------------------------

    def group_history(self) -> Any:
        """Every change of a group's summary up to the cut (``group_state``'s columns), by
        group and batch."""
        return self.table(GROUP_HISTORY).orderBy("group_id", "batch_id")

    def group_state(self) -> Any:
        """One summary per live group, by group id, as :meth:`WarehouseReader.group_states`
        gives them: now, the ``group_state`` table as it is (like the CLI's fast path; while
        the job writes a batch it can be that one batch ahead of the other DataFrames, whose
        cut ``responses`` marks); as of a past cut, each group's last
        ``group_history`` row at or before it, Dead groups left out (a warehouse written
        before ``group_history`` existed: ``group_state`` by Delta time travel to its newest
        version holding no batch after the cut, refused with :class:`AsOfError` once the
        Delta log no longer reaches back that far)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        schema = TABLE_SCHEMAS[GROUP_STATE]
        if self.cut.batch_id is None:
            return self._empty(schema)
        if self.cut.now:
            rows = self._files(GROUP_STATE)
        elif DeltaTable.is_deltatable(str(self.reader.paths.table(GROUP_HISTORY))):
            latest = Window.partitionBy("group_id").orderBy(F.col("batch_id").desc())
            rows = (
                self.table(GROUP_HISTORY)
                .withColumn("_n", F.row_number().over(latest))
                .where(F.col("_n") == 1)
                .drop("_n")
            )
        else:
            rows = self._files(GROUP_STATE, self.cut).where(
                F.col("batch_id") <= F.lit(self.cut.batch_id)
            )
        alive = F.col("state").isNull() | (F.col("state") != F.lit(history.DEAD))
        return rows.where(alive).select(*schema.names).orderBy("group_id")

    # --- offsets --------------------------------------------------------------------------------

    def _commits(self) -> Any:
        from pyspark.sql import functions as F

        return self.table(CONSUMER_OFFSETS).where(F.col("record_type") == F.lit(OFFSET_COMMIT))

    def offsets_history(self) -> Any:
        """Every OffsetCommit record up to the cut, in log order (``offsets_partition``,
        ``log_offset``), tombstones included (``tombstone`` true)."""
        from pyspark.sql import functions as F

        return (
            self._commits()
            .withColumn("tombstone", F.col("value").isNull())
            .withColumnRenamed("offset", "log_offset")
            .select(*OFFSETS_HISTORY_SCHEMA.names)
            .orderBy("offsets_partition", "log_offset")
        )

    def committed_offsets(self) -> Any:
        """The committed offset of every (group, topic, partition) at the cut, by those:
        the last OffsetCommit record of the key in its ``__consumer_offsets`` partition wins,
        and none when that record is a tombstone. Kafka's load of the log, as
        :func:`history.committed_offsets` does it over pyarrow rows."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        # Log order is (offsets_partition, offset): a group's records are all in the one
        # partition its id hashes to, so this is "by offset within its partition".
        last = Window.partitionBy("group_id", "topic", "partition").orderBy(
            F.col("offsets_partition").desc(), F.col("offset").desc()
        )
        return (
            self._commits()
            .withColumn("_n", F.row_number().over(last))
            .where((F.col("_n") == 1) & F.col("value").isNotNull())
            .withColumnRenamed("offset", "log_offset")
            .select(*COMMITTED_OFFSETS_SCHEMA.names)
            .orderBy("group_id", "topic", "partition")
        )

    # --- history, by the pure functions -----------------------------------------------------------

    def rebalances(self) -> Any:
        """Every rebalance up to the cut (:func:`history.rebalances` per group, over its
        ``group_history`` rows), by group and starting batch."""
        return (
            self.table(GROUP_HISTORY)
            .groupBy("group_id")
            .applyInArrow(_rebalances_of_group, spark_schema(REBALANCES_SCHEMA))
            .orderBy("group_id", "start_batch")
        )

    def members_history(self) -> Any:
        """One row per member per generation span up to the cut
        (:func:`history.members_history` per group, over its GroupMetadata records), by
        group, span start, generation and member id."""
        from pyspark.sql import functions as F

        metadata = (
            self.table(CONSUMER_OFFSETS)
            .where(F.col("record_type") == F.lit(GROUP_METADATA))
            .select(*_GENERATION_COLUMNS)
        )
        return (
            metadata.groupBy("group_id")
            .applyInArrow(_members_history_of_group, spark_schema(MEMBERS_HISTORY_SCHEMA))
            .orderBy("group_id", "valid_from_ms", "generation_id", "member_id")
        )

    # --- SQL ------------------------------------------------------------------------------------

    def dataframes(self) -> dict[str, Any]:
        """Every view's DataFrame by view name (:data:`VIEWS`). At a past cut that
        ``responses`` or ``rejected_requests`` no longer hold whole (their retention is shorter
        than the history window), those two are left out rather than shown in part."""
        frames = {
            GROUP_STATE: self.group_state(),
            GROUP_HISTORY: self.group_history(),
            "committed_offsets": self.committed_offsets(),
            "offsets_history": self.offsets_history(),
            "rebalances": self.rebalances(),
            "members_history": self.members_history(),
            CONSUMER_OFFSETS: self.table(CONSUMER_OFFSETS),
        }
        for name in (RESPONSES, REJECTED_REQUESTS):
            try:
                frames[name] = self.table(name)
            except AsOfError:
                continue
        return frames

    def register_views(self, prefix: str = "") -> list[str]:
        """Register every DataFrame as a temporary view named ``prefix + name`` (replacing
        one of that name) and return the names, in :data:`VIEWS` order."""
        names = []
        for name, frame in self.dataframes().items():
            frame.createOrReplaceTempView(prefix + name)
            names.append(prefix + name)
        return names


def _has_delta_reader(spark: Any, probe: Path) -> bool:
    """Whether ``spark.read.format("delta")`` resolves: loading any path fails with
    ``DATA_SOURCE_NOT_FOUND`` when the connector is absent, with another error (no Delta
    table there) or not at all when it is present."""
    try:
        spark.read.format("delta").load(str(probe))
    except Exception as problem:
        condition = getattr(problem, "getCondition", lambda: None)()
        return not (condition == "DATA_SOURCE_NOT_FOUND" or "DATA_SOURCE_NOT_FOUND" in str(problem))
    return True


__all__: Sequence[str] = (
    "COMMITTED_OFFSETS_SCHEMA",
    "MEMBERS_HISTORY_SCHEMA",
    "OFFSETS_HISTORY_SCHEMA",
    "REBALANCES_SCHEMA",
    "VIEWS",
    "Queries",
    "spark_schema",
)
