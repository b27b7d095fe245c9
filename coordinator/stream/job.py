"""The coordinator as a Spark Structured Streaming query.

    inbox (JSON lines files)  ->  the inbox source (coordinator.stream.source), one row per line
        -> groupBy(group id | offsets partition).applyInPandasWithState(step, ProcessingTimeTimeout)
        -> foreachBatch: consumer_offsets, rejected_requests, group_history, group_state,
                         then responses (Delta)

The inbox is read as text, not with Spark's JSON reader: Spark would turn a mistyped field into a
silent null, while the engine's own parser answers it with Kafka's error and a message. Spark
extracts only the key (``group_id``) and the order key (file, position).

``coordinator run`` and ``spark-submit jobs/coordinator_job.py`` both come here. A checkpoint
rebuilt from the log (:mod:`coordinator.stream.rebuild`: ``--rebuild-from-log``, a lost
checkpoint, re-sharding) adds its bootstrap directory as a second source (Spark's text file
source, split into lines the same way); the operator loads its lines as groups' state before
the first batch's requests.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from coordinator.engine import CoordinatorNode
from coordinator.requests import parse
from coordinator.stream import (
    datafiles,
    operator,
    ownership,
    rebuild,
    source,
    spark_daemon,
    topic_store,
)
from coordinator.stream.schema import (
    CONSUMER_OFFSETS,
    REJECTED_REQUESTS,
    RESPONSES,
    TABLES,
    Warehouse,
)
from coordinator.stream.settings import (
    CONF_DIR,
    CheckpointIdentity,
    Settings,
    spark_shard_keys,
    state_store_confs,
    with_checkpoint_layout,
)
from coordinator.stream.sink import BatchReport, DeltaSink, Housekeeping

if TYPE_CHECKING:
    import pyarrow as pa

    from coordinator.metrics.job import JobMetrics

log = logging.getLogger("coordinator.job")

QUERY_NAME = "kafka-group-coordinator"


def prepare_environment() -> None:
    """What Spark's Python workers and the driver need before the JVM starts."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # pyspark 4.2 with pandas 2.3 warns once per batch.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")


#: The JVM's log lines (Spark, Hadoop) go to ``<warehouse>/logs/spark.log``
#: (``conf/log4j2.properties`` reads these two system properties).
LOG_DIR_PROPERTY = "coordinator.log.dir"
CONSOLE_LEVEL_PROPERTY = "coordinator.console.level"
LOG4J_CONF = CONF_DIR / "log4j2.properties"


def log_dir(settings: Settings) -> Path:
    """Where the job's logs go: ``<warehouse>/logs``."""
    return settings.job.paths.root / "logs"


def jvm_log_options(settings: Settings, verbose: bool = False) -> dict[str, str]:
    """The JVM system properties of the job's logging: Spark's lines to the log file, and to
    the console too only when ``verbose``."""
    return {
        "log4j.configurationFile": f"file:{LOG4J_CONF}",
        LOG_DIR_PROPERTY: str(log_dir(settings)),
        CONSOLE_LEVEL_PROPERTY: "all" if verbose else "off",
    }


def spark_session(
    settings: Settings,
    master: str | None = None,
    app_name: str = QUERY_NAME,
    *,
    verbose: bool = False,
) -> Any:
    """A SparkSession configured for the job (or the running one, reconfigured where allowed).

    The JVM logs to ``<warehouse>/logs/spark.log`` (and to the console only when ``verbose``):
    a JVM started here gets the options on its command line; one that was already running
    (``spark-submit``, a test's session) is reconfigured to them."""
    prepare_environment()
    from pyspark.sql import SparkSession

    log_dir(settings).mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not os.environ.get("SPARK_MASTER") and "spark.master" not in settings.spark:
        builder = builder.master(f"local[{settings.job.shards}]")
    for key, value in settings.spark.items():
        builder = builder.config(key, value)
    logging_options = jvm_log_options(settings, verbose)
    if LOG4J_CONF.exists() and "spark.driver.extraJavaOptions" not in settings.spark:
        builder = builder.config(
            "spark.driver.extraJavaOptions",
            " ".join(f"-D{key}={value}" for key, value in logging_options.items()),
        )
    builder = builder.config("spark.sql.shuffle.partitions", str(settings.job.shards))
    for key, value in state_store_confs(settings.job.state_store).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if LOG4J_CONF.exists():
        _reconfigure_jvm_logging(spark, logging_options)
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _reconfigure_jvm_logging(spark: Any, options: dict[str, str]) -> None:
    """Point a running JVM's log4j at the job's configuration and log directory, unless it was
    started with them."""
    system = spark.sparkContext._jvm.java.lang.System
    if all(system.getProperty(key) == value for key, value in options.items()):
        return
    try:
        for key, value in options.items():
            system.setProperty(key, value)
        jvm = spark.sparkContext._jvm
        uri = jvm.java.net.URI(options["log4j.configurationFile"])
        jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(uri)
    except Exception as error:  # an older log4j: Spark's own configuration stays
        log.debug("could not reconfigure the JVM's logging: %s", error)


# --- the query --------------------------------------------------------------------------------


def kafka_partition_expr(column: str, num_partitions: int) -> str:
    """Kafka's ``partitionFor`` in Spark SQL: ``Utils.abs(String.hashCode) % n``.

    Java's own ``String.hashCode``, called once per row through ``reflect`` on the static
    ``java.util.Objects.hashCode(Object)``: Spark hands it the row's string as a
    ``java.lang.String`` (UTF-16 code units, as Kafka's group id), and returns the int as text.
    Then ``Utils.abs`` of it (Integer.MIN_VALUE maps to 0, as in Kafka), bound once by a
    one-element ``transform``. (Spark marks ``reflect`` non-deterministic, as it cannot know the
    method; this one is a pure function of the string.)

    The formula it replaced computed the hash in SQL (the string's UTF-16 hex, then a fold
    over its code units) and was about half of the JVM's CPU in a shard-keyed batch of
    heartbeats (``README.md``, "Capacity")."""
    hashed = f"cast(reflect('java.util.Objects', 'hashCode', {column}) as int)"
    return f"transform(array({hashed}), h -> if(h = -2147483648, 0, abs(h)) % {num_partitions})[0]"


def inbox_stream(spark: Any, settings: Settings) -> Any:
    """The inbox as rows: (value, source_file, position, group_id, terminated, valid_utf8).

    Read by the job's own source (:mod:`coordinator.stream.source`: every file gets a sequence
    number when it is found, the offset is that number, so the checkpoint does not grow with
    the files read), one row per file, split into lines by :func:`file_lines`."""
    from pyspark.sql import functions as F

    job = settings.job
    paths = job.paths
    paths.inbox.mkdir(parents=True, exist_ok=True)
    register_inbox_source(spark)
    reader = (
        spark.readStream.format(source.SOURCE_NAME)
        .option("maxFilesPerTrigger", job.max_files_per_trigger)
        .option("maxBytesPerTrigger", job.max_bytes_per_trigger)
        .option("readTasks", job.source_read_tasks or spark.sparkContext.defaultParallelism)
        .option("clean", job.clean_source)
        .option("initialOffsetFile", str(paths.checkpoint / source.INITIAL_FILE))
        .option("topicsDir", str(paths.topics))
    )
    if job.clean_source == "archive":
        paths.archive.mkdir(parents=True, exist_ok=True)
        reader = reader.option("archive", str(paths.archive))
    if job.source_lines == "python":
        # The source splits and keys the lines itself (coordinator.stream.lines).
        reader = reader.option("lines", "true")
        if job.state_key == operator.SHARD_KEY:
            keys = spark_shard_keys(settings)
            reader = reader.option("shardKeys", ",".join(map(str, keys)))
        return reader.load(str(paths.inbox))
    files = reader.load(str(paths.inbox)).select(
        # The bytes as they are: a cast to string checks nothing, file_lines does.
        "source_file",
        F.col("content").cast("string").alias("text"),
    )
    return file_lines(files)


def register_inbox_source(spark: Any) -> None:
    """Register the inbox source with the session, once (registering again logs a warning)."""
    with contextlib.suppress(Exception):  # a session without the JVM's lookup: register anyway
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        if manager.dataSourceExists(source.SOURCE_NAME):
            return
    spark.dataSource.register(source.InboxDataSource)


def file_lines(files: Any) -> Any:
    """Whole files (``source_file``, ``text``) as the inbox's rows, one per non-blank line.

    ``terminated`` is False for a file's last line when the file does not end with a newline
    (a file caught half-written: the operator refuses that line). ``valid_utf8`` is False for a
    line of a file that is not UTF-8 when the line holds U+FFFD, which Spark's split put in
    place of the undecodable bytes (neither source checks the bytes)."""
    from pyspark.sql import functions as F

    # One row per file, split into lines here: Spark has no line number for a text row in a
    # stream (monotonically_increasing_id is refused), and (file, line) is the order key.
    # Split at "\n", one character, which Java splits without a regular expression ("\r?\n"
    # ran one per file, about a quarter of the JVM's CPU in a batch of heartbeats), then drop
    # the "\r" before a line's "\n": the same lines as "\r?\n" gives, as the last one keeps a
    # final "\r" that no "\n" follows.
    split = files.select(
        "source_file",
        F.is_valid_utf8("text").alias("file_utf8"),
        F.split("text", "\n").alias("lines"),
    ).select(
        "source_file",
        "file_utf8",
        F.size("lines").alias("count"),
        F.posexplode("lines").alias("position", "line"),
    )
    crlf = (F.col("position") < F.col("count") - 1) & F.col("line").endswith("\r")
    split = split.withColumn(
        "value", F.when(crlf, F.expr("substr(line, 1, length(line) - 1)")).otherwise(F.col("line"))
    )
    lines = split.where(F.trim("value") != "")
    return lines.select(
        "value",
        "source_file",
        "position",
        F.coalesce(F.get_json_object("value", "$.group_id"), F.lit("")).alias("group_id"),
        # Splitting "a\nb\n" gives ["a", "b", ""]: a line is terminated unless it is the last.
        (F.col("position") < F.col("count") - 1).alias("terminated"),
        (F.col("file_utf8") | ~F.col("value").contains("\ufffd")).alias("valid_utf8"),
    )


def coordinator_stream(
    spark: Any, settings: Settings, opsettings: operator.OperatorSettings
) -> Any:
    """The stateful operator over the inbox (and, on a checkpoint rebuilt from the log, its
    bootstrap files): one DataFrame of output rows per batch."""
    lines = inbox_stream(spark, settings)
    if opsettings.bootstrap_dir is not None:
        bootstrap = bootstrap_stream(spark, settings, opsettings.bootstrap_dir)
        if "shard" in lines.columns:
            bootstrap = with_shard(bootstrap, settings)
        lines = lines.unionByName(bootstrap)
    return keyed_operator(lines, settings, opsettings)


def with_shard(lines: Any, settings: Settings) -> Any:
    """Inbox rows with their ``shard`` column (the Spark key of the group id's offsets
    partition, :mod:`coordinator.stream.shard_keys`), unless the source gave it
    (``job.source.lines=python``)."""
    from pyspark.sql import functions as F

    if "shard" in lines.columns:
        return lines
    keys = spark_shard_keys(settings)
    partition = kafka_partition_expr("group_id", len(keys))
    listed = ", ".join(map(str, keys))
    return lines.withColumn("shard", F.expr(f"element_at(array({listed}), {partition} + 1)"))


def keyed_operator(lines: Any, settings: Settings, opsettings: operator.OperatorSettings) -> Any:
    """The stateful operator over inbox rows (:func:`inbox_stream`'s shape), keyed by
    ``job.state.key``."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    if settings.job.state_key == operator.SHARD_KEY:
        grouped = with_shard(lines, settings).groupBy("shard")
        function = operator.shard_function(opsettings)
    else:
        grouped = lines.groupBy("group_id")
        function = operator.group_function(opsettings)
    return grouped.applyInPandasWithState(
        function,
        operator.OUTPUT_DDL,
        operator.STATE_DDL,
        "Update",
        GroupStateTimeout.ProcessingTimeTimeout,
    )


def bootstrap_stream(spark: Any, settings: Settings, directory: str) -> Any:
    """A rebuilt checkpoint's bootstrap files as rows of the inbox's shape, every file in the
    first batch, nothing archived. Read once, so Spark's text file source serves (its
    checkpoint log lists only these few files). The operator tells them from requests by their
    ``source_file``."""
    from pyspark.sql import functions as F

    files = (
        spark.readStream.format("text")
        .option("wholetext", True)
        .option("maxFilesPerTrigger", rebuild.BOOTSTRAP_MAX_FILES)
        .load(directory)
        .select(F.col("_metadata.file_path").alias("source_file"), F.col("value").alias("text"))
    )
    return file_lines(files)


def warm_up(spark: Any, shards: int) -> None:
    """Start the Python workers (and import pandas, pyarrow and the engine in them) before the
    query's first batch: a cold first batch takes 5-8 s, and since the batch time is the
    engine's clock, members that joined in it would find their sessions nearly spent."""
    frame = spark.range(shards * 2).repartition(shards)
    frame.groupBy("id").applyInPandas(operator.warm_up, "id long").collect()


# --- the sink ---------------------------------------------------------------------------------


@dataclass
class BatchFigures:
    """One micro-batch as the sink saw it (merged into the listener's log line)."""

    batch_id: int
    responses: int = 0
    records: int = 0
    groups: int = 0
    timers_fired: int = 0
    rejected: int = 0
    skipped_tables: list[str] = field(default_factory=list)
    #: The one Spark action that evaluates the batch (with executor writes, the tasks write
    #: their files in it too), then the driver's Delta commits.
    evaluate_ms: float = 0.0
    #: With executor writes: the longest time a task spent writing its files (within
    #: ``evaluate_ms``).
    task_write_ms: float = 0.0
    write_ms: float = 0.0


class BatchAbandoned(RuntimeError):
    """A batch the stopping query did not finish: not committed, re-run on the next start with
    the same input (Spark's write-ahead ``offsets/N``), so nothing is lost or doubled.

    Its message names the interruption the way Spark recognises an interrupted Python
    ``foreachBatch`` (``StreamExecution.PROXY_ERROR``: a py4j error text that mentions
    ``java.lang.InterruptedException``), so the query ends as stopped, not failed. It is kept
    short on purpose: Spark matches that pattern with a backtracking regex, and a whole Java
    stack trace in the text overflows the stream thread's stack."""

    def __init__(self, batch_id: int, call: str) -> None:
        super().__init__(
            f"py4j.protocol.Py4JJavaError: An error occurred while calling {call}: "
            f"java.lang.InterruptedException (batch {batch_id} abandoned by stop(); it is "
            "re-run on the next start)"
        )


class _QuietAbandonedBatches(logging.Filter):
    """py4j logs every exception a Python callback raises, with its traceback, at ERROR: not
    the batch a stop abandoned on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, BatchAbandoned)


logging.getLogger("py4j.clientserver").addFilter(_QuietAbandonedBatches())
logging.getLogger("py4j.java_gateway").addFilter(_QuietAbandonedBatches())

#: While a stop is under way, the batch Spark starts next waits in a Java sleep of this many
#: milliseconds (repeated) until stop() interrupts it.
PARK_SLEEP_MS = 1000


#: Test-only fault injection (tests/test_kill_recovery.py), off unless this variable is set:
#: ``COORDINATOR_FAULT=after:consumer_offsets:0.3,after:write:0.3`` makes the driver SIGKILL
#: itself, with that probability per batch, right after its commit to the named table, or
#: (``write``) once a batch's tables are all written, before Spark commits the batch.
FAULT_ENV = "COORDINATOR_FAULT"


def fault_injection(spec: str | None) -> Callable[[str, int], None] | None:
    """The crash hook ``spec`` describes (see :data:`FAULT_ENV`); None when it is empty."""
    if not spec:
        return None
    odds: dict[str, float] = {}
    for item in spec.split(","):
        when, point, chance = item.strip().split(":")
        if when != "after":
            raise ValueError(f"{FAULT_ENV}: {item!r} is not after:<table|write>:<probability>")
        odds[point] = float(chance)

    def maybe_crash(point: str, batch_id: int) -> None:
        if random.random() < odds.get(point, 0.0):
            log.warning("fault injection: SIGKILL after %s of batch %d", point, batch_id)
            os.kill(os.getpid(), signal.SIGKILL)

    return maybe_crash


class BatchSink:
    """``foreachBatch``: evaluate the operator exactly once, split its rows, write the tables.

    ``write_mode`` (``job.sink.write``): ``driver`` collects the batch once with ``toArrow()``
    and writes every table from the driver; ``executors`` has each task write its rows' data
    files and collects only their add actions (:meth:`write_on_executors`). Either way the
    DataFrame is evaluated by exactly one action: a second one would run the stateful operator
    again, and not evaluating it at all fails the query (Spark 4 checks that every state
    partition committed). ``regroup``: the number of partitions to bring each offsets
    partition's rows together in before executors write (needed when the operator is keyed by
    group id; None when it is keyed by offsets partition)."""

    def __init__(
        self,
        sink: DeltaSink,
        after_write: Callable[[BatchFigures], None] | None = None,
        batch_id_base: int = 0,
        write_mode: str = datafiles.DRIVER,
        regroup: int | None = None,
    ) -> None:
        if write_mode not in datafiles.SINK_WRITES:
            raise ValueError(f"write_mode must be one of {datafiles.SINK_WRITES}: {write_mode!r}")
        self.sink = sink
        self.write_mode = write_mode
        self.regroup = regroup
        #: Spark's batch ``n`` is the warehouse's batch ``batch_id_base + n`` (the checkpoint's
        #: ``CheckpointIdentity.batch_id_base``): rows and app transactions carry that id, so a
        #: re-run batch maps to the same one and ids keep growing across rebuilt checkpoints.
        self.batch_id_base = batch_id_base
        #: Called after a batch's tables are written, before Spark commits the batch: a hook
        #: for benchmarks (and for tests, which raise from it to crash between the two).
        self.after_write = after_write
        #: Test-only crash points (:data:`FAULT_ENV`); None unless the variable is set.
        self.fault = fault_injection(os.environ.get(FAULT_ENV))
        if self.fault is not None:
            sink.after_commit = self.fault
        self.figures: dict[int, BatchFigures] = {}
        #: Prometheus metrics (``job.metrics``), fed after each batch's write; None when off.
        self.metrics: JobMetrics | None = None
        self.last_activity = time.monotonic()
        #: Set by :meth:`request_stop`: the next batch parks instead of running.
        self.stopping = threading.Event()
        #: Set once a batch is parked: Spark's stream thread waits inside this sink, between
        #: batches as far as the tables and the state store are concerned.
        self.parked = threading.Event()
        #: Whether a batch is being evaluated or written right now.
        self.in_batch = False
        self._lock = threading.Lock()

    def request_stop(self) -> None:
        """From now on, a batch Spark starts is parked before it touches any state (see
        :meth:`_park`); the batch in flight, if any, is finished and committed as usual."""
        self.stopping.set()

    def __call__(self, df: Any, batch_id: int) -> None:
        warehouse_batch = self.batch_id_base + batch_id
        if self.stopping.is_set():
            self._park(df, warehouse_batch)
        self.in_batch = True
        try:
            if self.write_mode == datafiles.EXECUTORS:
                try:
                    self.write_on_executors(df, warehouse_batch)
                except Exception:
                    if self.stopping.is_set():
                        # stop() could not wait for a gap and interrupted the batch mid-way.
                        raise BatchAbandoned(warehouse_batch, "mapInArrow") from None
                    raise
                return
            try:
                started = time.perf_counter()
                table = df.toArrow()
            except Exception:
                if self.stopping.is_set():
                    # stop() could not wait for a gap and interrupted the batch mid-way.
                    raise BatchAbandoned(warehouse_batch, "toArrow") from None
                raise
            evaluated = (time.perf_counter() - started) * 1000
            figures = self.write(table, warehouse_batch)
            figures.evaluate_ms = evaluated
        finally:
            self.in_batch = False

    def _park(self, df: Any, batch_id: int) -> None:
        """Wait, on Spark's own stream thread, until stop() interrupts it, then abandon the
        batch. py4j runs this callback's calls into the JVM on the thread that called it (its
        pinned-thread mode), so the sleep below is the stream thread's: ``query.stop()``
        interrupts it there, as it would between triggers, and nothing has been evaluated or
        written for the batch (the DataFrame was never collected)."""
        from py4j.protocol import Py4JJavaError

        jvm = df.sparkSession.sparkContext._jvm
        self.parked.set()
        try:
            while True:
                jvm.java.lang.Thread.sleep(PARK_SLEEP_MS)
        except Py4JJavaError as error:
            name = error.java_exception.getClass().getName()
            if name != "java.lang.InterruptedException":
                raise
        raise BatchAbandoned(batch_id, "java.lang.Thread.sleep")

    def write(self, table: pa.Table, batch_id: int) -> BatchFigures:
        """Write one batch's operator rows (:data:`datafiles.OPERATOR_SCHEMA`, as ``toArrow()``
        gives them) as warehouse batch ``batch_id`` (base included)."""
        batch = datafiles.BatchRows.split(table)
        list_groups = [parse(json.loads(line)) for line in batch.list_groups]
        report = self.sink.write_batch(
            batch_id,
            records=batch.records,
            responses=batch.responses,
            groups=batch.groups,
            rejected=batch.rejected,
            list_groups=list_groups,
            emitted_at_ms=batch.emitted_at_ms,
            written_at_ms=int(time.time() * 1000),
        )
        figures = BatchFigures(
            batch_id,
            responses=batch.responses.num_rows + len(list_groups),
            records=batch.records.num_rows,
            groups=len(batch.groups),
            timers_fired=batch.timers_fired,
            rejected=len(batch.rejected),
        )
        if self.metrics is not None:
            self.metrics.batch_written(
                datafiles.record_digests(batch.records),
                datafiles.answer_digests(batch.responses),
                batch.groups,
                batch.rejected,
                list_groups,
                report.table_ms,
                replayed=bool(report.tables_skipped),
            )
        return self._written(figures, report, batch.rows)

    def write_on_executors(self, df: Any, batch_id: int) -> BatchFigures:
        """``job.sink.write=executors``: every task writes its rows' data files
        (:func:`datafiles.write_partition`), the driver gathers their add actions and commits
        each table once (:meth:`commit_files`). The DataFrame is still evaluated once: the
        files' metadata is the one action's result."""
        plan = self.plan_files(batch_id)
        frame = df
        if self.regroup is not None:
            # Keyed by group id, one offsets partition's records are spread over the tasks:
            # bring each partition's rows together so that one task numbers its offsets.
            frame = df.repartition(self.regroup, "offsets_partition")
        started = time.perf_counter()
        meta = frame.mapInArrow(
            functools.partial(datafiles.write_partition, plan=plan), datafiles.META_DDL
        ).toArrow()
        evaluated = (time.perf_counter() - started) * 1000
        figures = self.commit_files(meta, plan)
        figures.evaluate_ms = evaluated
        return figures

    def plan_files(self, batch_id: int) -> datafiles.FilePlan:
        """What the tasks of warehouse batch ``batch_id`` write under (see :meth:`DeltaSink.file_plan`)."""
        return self.sink.file_plan(batch_id, digests=self.metrics is not None)

    def commit_files(self, meta: Any, plan: datafiles.FilePlan) -> BatchFigures:
        """Commit the data files a batch's tasks wrote under ``plan`` (``meta``: their
        :data:`datafiles.META_SCHEMA` rows, all tasks together), one transaction per table."""
        batch_id, written_at = plan.batch_id, int(time.time() * 1000)
        files = datafiles.BatchFiles.gather(meta)
        list_groups = [parse(json.loads(line)) for line in files.list_groups]
        report = self.sink.write_batch(
            batch_id,
            records=[],
            responses=[],
            groups=files.groups,
            rejected=[],
            list_groups=list_groups,
            emitted_at_ms=files.emitted_at_ms,
            written_at_ms=written_at,
            files=files,
        )
        figures = BatchFigures(
            batch_id,
            responses=files.responses + len(list_groups),
            records=files.records,
            groups=len(files.groups),
            timers_fired=files.timers_fired,
            rejected=files.rejected,
            task_write_ms=files.task_write_ms,
        )
        if self.metrics is not None:
            self.metrics.batch_written(
                files.digests.get(CONSUMER_OFFSETS, []),
                files.digests.get(RESPONSES, []),
                files.groups,
                files.digests.get(REJECTED_REQUESTS, []),
                list_groups,
                report.table_ms,
                replayed=bool(report.tables_skipped),
            )
        return self._written(figures, report, files.rows)

    def _written(self, figures: BatchFigures, report: BatchReport, rows: int) -> BatchFigures:
        """After a batch's tables are written, either way: figures, hooks, test faults."""
        figures.skipped_tables = list(report.tables_skipped)
        figures.write_ms = report.write_ms
        with self._lock:
            self.figures[figures.batch_id] = figures
            if rows > figures.timers_fired:
                self.last_activity = time.monotonic()
        if self.after_write is not None:
            self.after_write(figures)
        if self.fault is not None and rows > figures.timers_fired:
            self.fault("write", figures.batch_id)
        return figures

    def pop_figures(self, batch_id: int) -> BatchFigures | None:
        """The figures of warehouse batch ``batch_id`` (base included), once."""
        with self._lock:
            return self.figures.pop(batch_id, None)


# --- observability ----------------------------------------------------------------------------


def progress_listener(sink: BatchSink, warehouse: Warehouse) -> Any:
    """A StreamingQueryListener: one log line per micro-batch, and the last progress on disk
    (``<warehouse>/status/progress.json``) for ``coordinator status``.

    Its progress events come over as their JSON (:class:`JsonProgressEvents`): PySpark's own
    callback converts each event field by field, a py4j call per field, each resolved by
    reflection, which profiled at 20-54 % of the driver JVM's CPU samples in a loaded
    shard-keyed run (``README.md``, "Capacity")."""
    from pyspark import SparkContext
    from pyspark.sql.streaming.listener import (
        JStreamingQueryListener,
        QueryProgressEvent,
        StreamingQueryListener,
    )

    class JsonProgressEvents(JStreamingQueryListener):
        """py4j's side of the listener: a progress event is read as its JSON, one call to the
        JVM, and parsed here (``QueryProgressEvent.fromJson``, the form Spark Connect uses);
        the other events, one or two a run, as PySpark reads them."""

        def onQueryProgress(self, jevent: Any) -> None:
            progress = json.loads(jevent.progress().json())
            self.pylistener.onQueryProgress(QueryProgressEvent.fromJson({"progress": progress}))

    class Listener(StreamingQueryListener):
        @property
        def _jlistener(self) -> Any:
            """The JVM's wrapper of this listener, calling :class:`JsonProgressEvents`
            (PySpark's ``StreamingQueryListener._jlistener``, with that callback)."""
            if not hasattr(self, "_jlistenerobj"):
                jvm = SparkContext._jvm
                assert jvm is not None
                self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(
                    JsonProgressEvents(self)
                )
            return self._jlistenerobj

        #: The run reported on, set once the query has started: a session that ran queries
        #: before may still hold their listeners, whose sinks number batches differently.
        run_id: str | None = None
        #: "coordinator ready: ..." once the run completed its first batch (None before).
        ready_line: str | None = None
        _on_ready: Callable[[str], None] | None = None
        _ready_lock = threading.Lock()

        def when_ready(self, callback: Callable[[str], None]) -> None:
            """Call ``callback`` with the ready line once the first batch is done (now, if it
            is already)."""
            with self._ready_lock:
                line, self._on_ready = self.ready_line, callback
            if line is not None:
                callback(line)

        def _another_run(self, run_id: Any) -> bool:
            return self.run_id is not None and str(run_id) != self.run_id

        def onQueryStarted(self, event: Any) -> None:
            log.info("query %s started (run %s)", event.id, event.runId)

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            if self._another_run(progress.runId):
                return
            batch_id = sink.batch_id_base + progress.batchId
            figures = sink.pop_figures(batch_id) or BatchFigures(batch_id)
            line = (
                f"batch {batch_id}: {source.files_read(progress)} files in, "
                f"{figures.responses} responses out, {figures.records} records, "
                f"{figures.groups} groups changed, {figures.timers_fired} timers fired, "
                f"{figures.rejected} rejected, {progress.batchDuration} ms"
                f" (evaluated {figures.evaluate_ms:.0f} ms, written {figures.write_ms:.0f} ms)"
            )
            if figures.task_write_ms:
                line = line[:-1] + f", tasks' files {figures.task_write_ms:.0f} ms)"
            if figures.skipped_tables:
                line += f" (replayed batch: skipped {', '.join(figures.skipped_tables)})"
            if progress.numInputRows or figures.responses or figures.records:
                log.info(line)
            else:
                log.debug(line)
            status = json.loads(progress.json)
            status["coordinator"] = {
                # The warehouse's batch id (Spark's batchId plus the checkpoint's base).
                "batch_id": batch_id,
                "responses": figures.responses,
                "records": figures.records,
                "groups_changed": figures.groups,
                "timers_fired": figures.timers_fired,
                "rejected": figures.rejected,
                "evaluate_ms": figures.evaluate_ms,
                "task_write_ms": figures.task_write_ms,
                "write_ms": figures.write_ms,
            }
            _write_json(warehouse.status / "progress.json", status)
            if sink.metrics is not None:
                sink.metrics.batch_completed(progress, batch_id, figures.timers_fired)
            if self.ready_line is None:
                line = (
                    f"coordinator ready: query {progress.name} running, batch {batch_id} "
                    f"answered in {progress.batchDuration} ms"
                )
                log.info(line)
                with self._ready_lock:
                    self.ready_line, callback = line, self._on_ready
                if callback is not None:
                    callback(line)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            if self._another_run(event.runId):
                return
            if event.exception:
                log.error("query terminated: %s", event.exception)
            else:
                log.info("query stopped")
            if sink.metrics is not None:
                sink.metrics.query_terminated(event.exception)

    return Listener()


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# --- running it -------------------------------------------------------------------------------

#: ``job.shutdown.timeout.ms``'s default: how long a stop may take, query and session.
DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0


class _JvmSignalHandler:
    """A ``sun.misc.SignalHandler`` implemented in Python (a py4j callback)."""

    def __init__(self, on_signal: Callable[[str], None]) -> None:
        self.on_signal = on_signal

    def handle(self, sig: Any) -> None:
        self.on_signal(f"SIG{sig.getName()}")

    class Java:
        implements: ClassVar[list[str]] = ["sun.misc.SignalHandler"]


class StopSignals:
    """SIGTERM and SIGINT ask the job to stop (:attr:`requested`); the main thread then stops
    it between batches. A second signal while stopping is only logged: the stop is bounded by
    ``job.shutdown.timeout.ms`` anyway.

    The handlers are installed in this process and in the driver's JVM. Under
    ``spark-submit`` the JVM is the parent an operator signals (this process is its child),
    and under ``coordinator run`` a signal to the process group reaches the JVM too; left to
    itself the JVM would run its shutdown hooks, which stop the SparkContext under a running
    batch ("SparkEnv not active", a query terminated with an error)."""

    NAMES = ("TERM", "INT")

    def __init__(self) -> None:
        self.requested = threading.Event()
        #: The signal that asked first (``SIGTERM``, ``SIGINT``), or None.
        self.received: str | None = None
        self._python: dict[int, Any] = {}
        self._jvm: Any = None
        self._jvm_previous: dict[str, Any] = {}
        self._jvm_handler: _JvmSignalHandler | None = None

    def request(self, name: str) -> None:
        if self.requested.is_set():
            log.info("%s: already stopping", name)
            return
        self.received = name
        log.info("%s: stopping the coordinator between batches", name)
        self.requested.set()

    def install(self) -> StopSignals:
        """This process's handlers (only the main thread may install them). Again once the
        SparkContext exists: pyspark installs its own SIGINT handler then (it cancels the
        jobs and raises KeyboardInterrupt wherever the main thread is)."""
        if threading.current_thread() is threading.main_thread():
            for name in self.NAMES:
                number = getattr(signal, f"SIG{name}")
                previous = signal.signal(number, self._on_python_signal)
                self._python.setdefault(number, previous)
        return self

    def _on_python_signal(self, number: int, frame: Any) -> None:
        self.request(signal.Signals(number).name)

    def install_jvm(self, spark: Any) -> None:
        """The driver JVM's handlers, calling back into :meth:`request`."""
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        self._jvm_handler = _JvmSignalHandler(self.request)
        for name in self.NAMES:
            try:
                previous = jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), self._jvm_handler)
            except Exception as error:  # a JVM without sun.misc, or a signal it keeps
                # Mostly SIGINT ignored since the start (a job started in the background by a
                # script inherits it ignored, and the JVM keeps it so): say what stops it then.
                log.info(
                    "SIG%s will not stop this job (the JVM keeps its own disposition: %s)",
                    name,
                    str(error).splitlines()[0][:200],
                )
                continue
            self._jvm_previous[name] = previous

    def uninstall_jvm(self) -> None:
        """The JVM's own handlers back, before the session (and the callback server) goes."""
        jvm, self._jvm = self._jvm, None
        if jvm is None:
            return
        for name, previous in self._jvm_previous.items():
            with contextlib.suppress(Exception):
                jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), previous)
        self._jvm_previous = {}

    def uninstall(self) -> None:
        for number, previous in self._python.items():
            signal.signal(number, previous)
        self._python = {}


def stop_session(spark: Any, timeout_s: float) -> bool:
    """``spark.stop()``, waited for at most ``timeout_s`` (at least 1 s); whether it returned.
    The JVM of ``coordinator run`` goes when this process exits (it reads its stdin to EOF).
    The data source's Python daemons are ended first, so that none of their idle workers
    prints a traceback as the stop closes it (:func:`spark_daemon.end_pyspark_daemons`)."""
    ended = spark_daemon.end_pyspark_daemons(spark)
    if ended:
        log.debug("ended PySpark's Python daemons %s before the session's stop", ended)
    stopper = threading.Thread(target=spark.stop, name="spark-stop", daemon=True)
    stopper.start()
    stopper.join(max(1.0, timeout_s))
    return not stopper.is_alive()


@dataclass
class RunningJob:
    query: Any
    sink: BatchSink
    settings: Settings
    listener: Any
    #: What the rebuild from the log did when this start made one (None: the checkpoint was
    #: used as it was).
    rebuilt: rebuild.RebuildReport | None = None
    #: This job's claim on the warehouse, released by :meth:`stop`.
    owner: ownership.Ownership | None = None

    def idle_for(self) -> float:
        """Seconds since a request came in or anything went out."""
        return time.monotonic() - self.sink.last_activity

    def stop(self, timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> bool:
        """Stop the query between batches: the batch in flight is finished (written and
        committed), the next one is parked in the sink before it touches any state, and the
        query is stopped while its thread waits there (or idles between triggers), so the stop
        interrupts no Spark work and leaves no error. A batch that outlasts most of
        ``timeout_s`` is interrupted instead (abandoned: re-run on the next start). Returns
        whether the query stopped within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        self.sink.request_stop()
        # Keep a quarter of the time (at least 1 s) for the stop itself.
        gap_deadline = deadline - max(1.0, timeout_s / 4)
        idle = 0
        while self.query.isActive and not self.sink.parked.wait(0.05):
            # Between triggers (seen twice in a row: batches that run back to back pass through
            # that state for an instant), the stream thread waits for its clock: nothing to
            # interrupt. That is the case when no group has a timer, so no batch comes.
            if not self.sink.in_batch and not self.query.status.get("isTriggerActive"):
                idle += 1
                if idle == 2:
                    break
            else:
                idle = 0
            if time.monotonic() > gap_deadline:
                log.warning("batch still running after %.0f s: interrupting it", timeout_s * 0.75)
                break
        stopper = threading.Thread(target=self._stop_query, name="query-stop", daemon=True)
        stopper.start()
        stopper.join(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(Exception):  # best effort: the session may be gone
            self.query.sparkSession.streams.removeListener(self.listener)
        return not stopper.is_alive()

    def _stop_query(self) -> None:
        try:
            self.query.stop()
        except Exception as error:  # the session went away under it: nothing left to stop
            log.debug("query.stop(): %s", error)
        finally:
            if self.sink.metrics is not None:
                self.sink.metrics.close()
            if self.owner is not None:
                self.owner.release()


#: Builds the streaming DataFrame of operator output rows (``coordinator_stream`` or a stand-in,
#: such as the benchmark's floor pipeline).
StreamBuilder = Callable[[Any, Settings, operator.OperatorSettings], Any]


def operator_settings(
    settings: Settings, identity: CheckpointIdentity
) -> operator.OperatorSettings:
    """What the stateful operator's function closes over: Kafka's settings, the checkpoint's
    member-id seed and bootstrap directory, and the node that answers FindCoordinator."""
    job = settings.job
    return operator.OperatorSettings(
        settings.coordinator,
        identity.seed,
        CoordinatorNode(job.node_id, job.node_host, job.node_port),
        max_request_bytes=job.max_request_bytes,
        bootstrap_dir=identity.bootstrap_dir,
        offsets_dir=str(job.paths.checkpoint / "offsets"),
        topics=job.topic_counts(),
        topics_dir=str(job.paths.topics),
        delivery_window_ms=delivery_window_ms(settings),
    )


def delivery_window_ms(settings: Settings) -> int:
    """Half the time the checkpoint's offset log spans at least: it keeps
    ``spark.sql.streaming.minBatchesToRetain`` batches (Spark's default 100), which start at
    least ``job.trigger.interval.ms`` apart (:attr:`operator.OperatorSettings.
    delivery_window_ms`)."""
    retained = int(settings.spark.get("spark.sql.streaming.minBatchesToRetain", "100"))
    return max(1, retained * max(1, settings.job.trigger_interval_ms) // 2)


def seed_topics(settings: Settings) -> None:
    """``job.topics`` into the warehouse's topic store when it changed since the job last wrote
    it (:func:`coordinator.stream.topic_store.seed_from_setting`)."""
    store = settings.job.paths.topics
    version = topic_store.seed_from_setting(store, settings.job.topic_counts())
    if version is not None:
        log.info("job.topics written to the topic store %s as version %d", store, version)


def take_ownership(settings: Settings, kind: str = "coordinator run") -> ownership.Ownership:
    """Claim the job's warehouse (:mod:`coordinator.stream.ownership`): fence its tables and
    heartbeat; ``WarehouseOwned`` while another live process owns it."""
    paths = settings.job.paths
    return ownership.acquire(
        paths.root,
        kind,
        settings.job.owner_lease_timeout_ms,
        tables=[paths.table(name) for name in TABLES],
    )


def batch_sink(
    settings: Settings,
    identity: CheckpointIdentity,
    after_write: Callable[[BatchFigures], None] | None = None,
    owner: ownership.Ownership | None = None,
) -> BatchSink:
    """The Delta sink of the job's tables, with the job's housekeeping schedule, fenced with
    ``owner``'s epoch (None: unfenced, e.g. :class:`coordinator.stream.local.LocalJob`)."""
    job = settings.job
    housekeeping = Housekeeping(
        compact_every_batches=job.compact_every_batches,
        checkpoint_every_batches=job.checkpoint_every_batches,
        vacuum_every_batches=job.vacuum_every_batches,
        vacuum_retention_hours=job.vacuum_retention_hours,
        retention_every_batches=job.retention_every_batches,
        retention=job.retention(),
    )
    return BatchSink(
        DeltaSink(job.paths.tables, identity.app_id, housekeeping, owner),
        after_write,
        identity.batch_id_base,
        job.sink_write,
        job.shards if job.state_key == operator.GROUP_KEY else None,
    )


def start(
    spark: Any,
    settings: Settings,
    after_write: Callable[[BatchFigures], None] | None = None,
    *,
    stream: StreamBuilder = coordinator_stream,
    query_name: str = QUERY_NAME,
    rebuild_from_log: bool = False,
    owner: ownership.Ownership | None = None,
) -> RunningJob:
    """Start the coordinator query on ``spark`` with ``settings``: ``stream``'s rows into the
    Delta sink, with the job's trigger, checkpoint, warm-up and progress listener.

    With ``rebuild_from_log``, or when the checkpoint has no Spark state while the log has
    records, the checkpoint is first rebuilt from the log (:mod:`coordinator.stream.rebuild`;
    the old one is moved aside, never deleted).

    The warehouse is claimed first (``owner``, or :func:`take_ownership` here); the query
    stops when a newer owner takes it over, and its writes are fenced meanwhile."""
    owner = owner or take_ownership(settings)
    try:
        identity, rebuilt = rebuild.prepare_checkpoint(settings, rebuild_from_log, owner)
        settings = with_checkpoint_layout(settings, identity)
        if identity.state_shard_layout is None and settings.job.state_key == operator.SHARD_KEY:
            log.info(
                "this checkpoint was made before job.state.shard.layout: its shard keys stay "
                "the partition numbers, which Spark deals unevenly over the shards; "
                "coordinator run --rebuild-from-log makes one with balanced keys"
            )
        owner.check()
        sink = batch_sink(settings, identity, after_write, owner)
        seed_topics(settings)
    except BaseException:
        owner.release()
        raise
    job = settings.job
    paths = job.paths
    opsettings = operator_settings(settings, identity)
    if job.metrics:
        from coordinator.metrics.job import JobMetrics

        sink.metrics = JobMetrics(job.metrics, paths)
    warm_up(spark, job.shards)
    # The session's state store is the query's (Spark copies the session's settings when the
    # query starts, then keeps the checkpoint's): set it from job.state.store every time, so a
    # session that ran a query with another store (tests, benchmarks) starts this one right.
    for key, value in state_store_confs(job.state_store).items():
        spark.conf.set(key, value)
    listener = progress_listener(sink, paths)
    spark.streams.addListener(listener)

    def start_query() -> Any:
        return (
            stream(spark, settings, opsettings)
            .writeStream.queryName(query_name)
            .outputMode("update")
            .foreachBatch(sink)
            .option("checkpointLocation", str(paths.checkpoint))
            .trigger(processingTime=f"{job.trigger_interval_ms} milliseconds")
            .start()
        )

    query = start_query()
    for attempt in range(2, SOURCE_START_ATTEMPTS + 1):
        if not source_start_timed_out(query):
            break
        log.warning(
            "the inbox source's Python process did not connect back within Spark's 10 s (a "
            "loaded machine?): starting the query again (attempt %d of %d)",
            attempt,
            SOURCE_START_ATTEMPTS,
        )
        query = start_query()
    listener.run_id = str(query.runId)
    # Idle time (job.stop.when.idle.s) counts from here: a slow start is not idleness.
    sink.last_activity = time.monotonic()
    owner.on_lost = lambda lost: _stop_query(query)
    if owner.lost is not None:
        _stop_query(query)
    context = spark.sparkContext
    executors = context._jsc.sc().getExecutorMemoryStatus().size() - (
        0 if context.master.startswith("local[") else 1
    )
    log.info(
        "coordinator started on %s (%d executors): inbox %s, tables %s, checkpoint %s "
        "(%s-keyed, %d shards, %s state store)",
        context.master,
        executors,
        paths.inbox,
        paths.tables,
        paths.checkpoint,
        job.state_key,
        job.shards,
        job.state_store,
    )
    return RunningJob(query, sink, settings, listener, rebuilt, owner)


def _stop_query(query: Any) -> None:
    """Stop a query whose warehouse was taken over (its writes are fenced anyway)."""
    with contextlib.suppress(Exception):
        query.stop()


#: How many times :func:`start` starts the query when the inbox source's Python process was
#: too slow to connect back to Spark (a fixed 10 s in Spark: a start-up on a loaded machine).
SOURCE_START_ATTEMPTS = 3


def source_start_timed_out(query: Any, timeout_s: float = 300.0) -> bool:
    """Wait for the query to be past starting its sources; True when it failed there because
    a Python source process did not connect back in time (nothing was read or written)."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and time.monotonic() < deadline:
        # "Initializing StreamExecution", then "Initializing sources" (the Python source's
        # process is started there), then the first trigger.
        if not str(query.status.get("message", "")).startswith("Initializing"):
            return False
        time.sleep(0.05)
    if query.isActive:
        return False
    exception = query.exception()
    return exception is not None and "Python worker failed to connect back" in str(exception)


def run(
    settings: Settings,
    master: str | None = None,
    on_start: Callable[[RunningJob], None] | None = None,
    rebuild_from_log: bool = False,
    verbose: bool = False,
) -> int:
    """Run the job until SIGTERM or SIGINT (or until idle for ``job.stop_when_idle_s``), then
    stop it within ``job.shutdown.timeout.ms`` (:meth:`RunningJob.stop`, then the session).
    Returns the exit code: 0 after a clean stop, 1 when the warehouse is owned by another job,
    was taken over, the query failed or the stop overran.
    ``rebuild_from_log``: rebuild the checkpoint from the log first (see :func:`start`);
    ``verbose``: Spark's log lines on the console too (:func:`spark_session`)."""
    try:
        owner = take_ownership(settings)
    except ownership.WarehouseOwned as refused:
        log.error("refusing to start: %s", refused)
        return 1
    timeout_s = settings.job.shutdown_timeout_ms / 1000
    signals = StopSignals().install()  # a signal during start-up stops the job once started
    try:
        spark = spark_session(settings, master, verbose=verbose)
    except BaseException:
        owner.release()
        signals.uninstall()
        raise
    signals.install()
    signals.install_jvm(spark)
    running: RunningJob | None = None
    stopped, exception = False, None
    try:
        running = start(spark, settings, rebuild_from_log=rebuild_from_log, owner=owner)
        # stdout, as the gateway's "listening" line: what a supervisor may wait for.
        running.listener.when_ready(lambda line: print(line, flush=True))
        if on_start is not None:
            on_start(running)
        idle_s = settings.job.stop_when_idle_s
        while running.query.isActive and not signals.requested.wait(0.2):
            if idle_s > 0 and running.idle_for() >= idle_s:
                log.info("nothing in or out for %g s: stopping", idle_s)
                break
    except Exception:
        if owner.superseded() is None:  # a failure of its own, not a takeover
            raise
    finally:
        # Also on the way out of an exception: never stop the session under a running batch.
        stopping_since = time.monotonic()
        if running is not None:
            stopped = running.stop(timeout_s)
            if stopped:
                exception = running.query.exception()
        signals.uninstall_jvm()
        left_s = timeout_s - (time.monotonic() - stopping_since)
        session_stopped = stop_session(spark, left_s)
        signals.uninstall()
        lost = owner.superseded()
        owner.release()
    if lost is not None:
        log.error("%s; stopped", lost)
        return 1
    if not stopped or not session_stopped:
        log.error("the coordinator did not stop within %g s (job.shutdown.timeout.ms)", timeout_s)
        return 1
    if exception is not None:
        log.error("the coordinator query failed: %s", exception)
        return 1
    log.info("coordinator stopped")
    return 0
