"""The job's settings: where it reads and writes, how it triggers, how it keys its state.

Three layers, later ones winning: the defaults in ``conf/`` (``coordinator.properties`` with
Kafka's names, ``job.properties``, ``spark-defaults.conf``), each ``--conf FILE``, then the
command line. In a ``--conf`` file, ``spark.*`` keys go to Spark, ``job.*`` keys to
:class:`JobSettings` and every other key is a coordinator setting under Kafka's name.

Some choices are fixed per checkpoint, as ``offsets.topic.num.partitions`` is fixed for a Kafka
cluster: the number of shards (Spark's shuffle partitions, which Spark itself pins in the
checkpoint), the state key, the state store provider (which Spark also pins) and the offsets
partition count. They are written to
``<checkpoint>/coordinator.json`` with the job's app id (the Delta writer's transaction id) and
its member-id seed on the first run, and checked on every later one. Changing them takes a new
checkpoint rebuilt from the log (``coordinator run --rebuild-from-log``,
:mod:`coordinator.stream.rebuild`), which also records there where its batch ids start.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.cli.settings import read_properties
from coordinator.config import CoordinatorConfig
from coordinator.stream import shard_keys
from coordinator.stream.datafiles import SINK_WRITES
from coordinator.stream.operator import KEY_MODES
from coordinator.stream.retention import Retention
from coordinator.stream.schema import Warehouse

#: ``job.source.lines``: where request files are split into line rows.
SOURCE_LINES = ("jvm", "python")

#: The repository's ``conf/`` directory (present in a checkout and beside ``jobs/``).
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

#: ``job.state.store``: Spark's state store provider for the operator's state.
HDFS_STORE = "hdfs"
ROCKSDB_STORE = "rocksdb"
STATE_STORES = (HDFS_STORE, ROCKSDB_STORE)
PROVIDER_CLASS = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG_CHECKPOINTING = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
_PROVIDERS = {
    HDFS_STORE: "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    ROCKSDB_STORE: "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


def state_store_confs(state_store: str) -> dict[str, str]:
    """The Spark settings ``job.state.store`` stands for. RocksDB gets changelog checkpointing:
    without it every batch uploads a full snapshot of the store (``spark-notes.md``)."""
    if state_store not in _PROVIDERS:
        raise ValueError(f"job.state.store must be one of {STATE_STORES}, got {state_store!r}")
    return {
        PROVIDER_CLASS: _PROVIDERS[state_store],
        CHANGELOG_CHECKPOINTING: "true" if state_store == ROCKSDB_STORE else "false",
    }


@dataclass(frozen=True)
class JobSettings:
    """``job.*`` settings; ``conf/job.properties`` lists the same defaults."""

    warehouse: str = "warehouse"
    inbox: str | None = None
    checkpoint: str | None = None
    #: Micro-batch trigger: the coordinator's tick (a session timeout fires within one).
    trigger_interval_ms: int = 200
    #: Spark shuffle partitions = coordinator shards; fixed per checkpoint.
    shards: int = 2
    #: ``shard`` (one Spark key per offsets partition, the default: it scales) or ``group``
    #: (one per group id); fixed per checkpoint.
    state_key: str = "shard"
    #: With ``state_key=shard``: the value of each offsets partition's Spark key, ``balanced``
    #: (dealt round-robin over the shards' tasks) or ``partition`` (the partition number, which
    #: Spark's hash deals unevenly: :mod:`coordinator.stream.shard_keys`); fixed per
    #: checkpoint. A checkpoint made before this setting keeps ``partition``.
    state_shard_layout: str = shard_keys.BALANCED_LAYOUT
    #: Spark's state store: ``hdfs`` (HDFSBackedStateStoreProvider, Spark's default) or
    #: ``rocksdb`` (RocksDBStateStoreProvider with changelog checkpointing); fixed per
    #: checkpoint (Spark pins the provider in it too).
    state_store: str = HDFS_STORE
    #: Where a batch's rows become Delta data files (:mod:`coordinator.stream.datafiles`):
    #: ``driver`` (collected on the driver, written there) or ``executors`` (each task writes
    #: its rows' files, the driver commits their add actions, one transaction per table).
    sink_write: str = "driver"
    #: Request files per micro-batch, at most (:mod:`coordinator.stream.source`).
    max_files_per_trigger: int = 1000
    #: Request bytes per micro-batch: no further file once a batch's files hold this many (a
    #: batch always takes its first file), so that a backlog is worked off in batches of a
    #: bounded size, as a Kafka consumer's fetch is bounded by ``fetch.max.bytes``.
    max_bytes_per_trigger: int = 64 * 1024 * 1024
    #: How many Spark tasks read one micro-batch's request files, each a run of consecutive
    #: files (0 = one per core of the cluster, Spark's default parallelism).
    source_read_tasks: int = 0
    #: Where request files become line rows: ``python`` (in the inbox source's read,
    #: column-wise with Arrow, :mod:`coordinator.stream.lines`) or ``jvm`` (split and keyed in
    #: Spark's SQL, :func:`coordinator.stream.job.file_lines`).
    source_lines: str = "python"
    #: The longest inbox line read as a request, in bytes (Kafka's ``max.request.size``
    #: default): a longer one is answered INVALID_REQUEST (or rejected) without being parsed.
    max_request_bytes: int = 1_048_576
    #: What happens to an inbox file once the batch that read it is committed (until then it
    #: waits in ``<inbox>/_sequenced/``): ``archive`` (to ``<warehouse>/archive``), ``delete``
    #: or ``off`` (left in ``_sequenced/``).
    clean_source: str = "archive"
    #: Stop after this many seconds with no request in and nothing out (0 = run until stopped).
    stop_when_idle_s: float = 0.0
    #: How long the warehouse stays owned by a job that stopped heartbeating before another
    #: may take it over (:mod:`coordinator.stream.ownership`); one that stopped cleanly, or
    #: died on this machine, is taken over at once.
    owner_lease_timeout_ms: int = 20_000
    #: How long a stop (SIGTERM, SIGINT, idle) may take: the batch in flight, the query and the
    #: Spark session; the job exits 1 when it overruns.
    shutdown_timeout_ms: int = 30_000
    #: FindCoordinator's answer: where members reach this coordinator (its gateway).
    node_id: int = 0
    node_host: str = "localhost"
    node_port: int = 9092
    #: Delta housekeeping, in micro-batches (0 disables).
    compact_every_batches: int = 100
    checkpoint_every_batches: int = 100
    vacuum_every_batches: int = 1000
    vacuum_retention_hours: int = 1
    #: Retention (:mod:`coordinator.stream.retention`), every N micro-batches (0 disables).
    retention_every_batches: int = 100
    #: The history window: no compaction of consumer_offsets, no trimming of group_history
    #: inside it (Kafka's ``min.compaction.lag.ms`` for the log).
    retention_history_ms: int = 7 * 86_400_000
    retention_responses_ms: int = 3_600_000
    retention_rejected_requests_ms: int = 7 * 86_400_000
    retention_archive_ms: int = 86_400_000
    #: Kafka's ``delete.retention.ms``, ``min.cleanable.dirty.ratio`` for consumer_offsets.
    offsets_delete_retention_ms: int = 86_400_000
    offsets_min_cleanable_dirty_ratio: float = 0.5
    offsets_cleaner_rows_per_run: int = 1_000_000
    #: ``delta.logRetentionDuration`` of every table: short, as each commit lists the log
    #: (``conf/job.properties``); ``--as-of`` a time reads the tables' rows, not the log.
    delta_log_retention_ms: int = 600_000
    #: ``HOST:PORT`` of the Prometheus ``/metrics``, ``/livez`` and ``/readyz`` server; empty:
    #: none (:mod:`coordinator.metrics.job`).
    metrics: str = ""
    #: The topics consumer groups (KIP-848) are assigned from, ``NAME:PARTITIONS,...`` (the
    #: gateway's ``--topic`` list, with the same topic ids): the seed of the warehouse's topic
    #: store (:mod:`coordinator.stream.topic_store`), written there at start when it changed.
    topics: str = ""

    def __post_init__(self) -> None:
        if self.state_key not in KEY_MODES:
            raise ValueError(f"job.state.key must be one of {KEY_MODES}, got {self.state_key!r}")
        state_store_confs(self.state_store)
        if self.state_shard_layout not in shard_keys.LAYOUTS:
            raise ValueError(
                f"job.state.shard.layout must be one of {', '.join(shard_keys.LAYOUTS)}, "
                f"got {self.state_shard_layout!r}"
            )
        if self.sink_write not in SINK_WRITES:
            raise ValueError(
                f"job.sink.write must be one of {', '.join(SINK_WRITES)}, got {self.sink_write!r}"
            )
        if self.source_lines not in SOURCE_LINES:
            raise ValueError(
                f"job.source.lines must be one of {', '.join(SOURCE_LINES)}, "
                f"got {self.source_lines!r}"
            )
        if self.clean_source not in ("archive", "delete", "off"):
            raise ValueError(
                f"job.clean.source must be archive, delete or off: {self.clean_source!r}"
            )
        for name in (
            "trigger_interval_ms",
            "shards",
            "max_files_per_trigger",
            "max_bytes_per_trigger",
            "max_request_bytes",
            "owner_lease_timeout_ms",
            "shutdown_timeout_ms",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"job.{name.replace('_', '.')} must be >= 1")
        for name in (
            "source_read_tasks",
            "compact_every_batches",
            "checkpoint_every_batches",
            "vacuum_every_batches",
            "vacuum_retention_hours",
            "retention_every_batches",
        ):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"{_key(name)} must be >= 0 (0 disables), got {getattr(self, name)}"
                )
        self.retention()
        self.topic_counts()

    def topic_counts(self) -> tuple[tuple[str, int], ...]:
        """``job.topics`` as (name, partition count) pairs; raises ValueError when malformed."""
        from coordinator.gateway.cli import parse_topics

        try:
            return tuple(parse_topics(self.topics.split(",")).items())
        except ValueError as exc:
            raise ValueError(f"job.topics: {exc}") from None

    def retention(self) -> Retention:
        """The retention these settings ask for (``job.retention.*``, ``job.offsets.*``)."""
        fields = {
            "history_ms": "retention_history_ms",
            "responses_ms": "retention_responses_ms",
            "rejected_requests_ms": "retention_rejected_requests_ms",
            "archive_ms": "retention_archive_ms",
            "offsets_delete_retention_ms": "offsets_delete_retention_ms",
            "offsets_min_cleanable_dirty_ratio": "offsets_min_cleanable_dirty_ratio",
            "offsets_cleaner_rows_per_run": "offsets_cleaner_rows_per_run",
            "delta_log_retention_ms": "delta_log_retention_ms",
        }
        for mine in fields.values():
            value = getattr(self, mine)
            if mine == "offsets_min_cleanable_dirty_ratio":
                if not 0 < value <= 1:
                    raise ValueError(f"{_key(mine)} must be in (0, 1], got {value!r}")
            elif value < 1:
                raise ValueError(f"{_key(mine)} must be at least 1, got {value!r}")
        return Retention(
            **{theirs: getattr(self, mine) for theirs, mine in fields.items()},
            archive_dir=str(self.paths.archive) if self.clean_source == "archive" else None,
        )

    @property
    def paths(self) -> Warehouse:
        return Warehouse.at(self.warehouse, self.inbox, self.checkpoint)

    def replace(self, **changes: Any) -> JobSettings:
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclass(frozen=True)
class Settings:
    job: JobSettings
    coordinator: CoordinatorConfig
    spark: dict[str, str]


def spark_shard_keys(settings: Settings) -> tuple[int, ...]:
    """The Spark key of each offsets partition (``job.state.key=shard``), under the settings'
    ``job.state.shard.layout`` (:func:`with_checkpoint_layout` sets the checkpoint's)."""
    return shard_keys.shard_keys(
        settings.job.state_shard_layout,
        settings.coordinator.offsets_topic_num_partitions,
        settings.job.shards,
    )


def with_checkpoint_layout(settings: Settings, identity: CheckpointIdentity) -> Settings:
    """The settings with the checkpoint's shard layout (``partition`` for a checkpoint made
    before the setting, whatever the settings say)."""
    if settings.job.state_shard_layout == identity.shard_layout:
        return settings
    job = dataclasses.replace(settings.job, state_shard_layout=identity.shard_layout)
    return dataclasses.replace(settings, job=job)


def _key(name: str) -> str:
    """A JobSettings field's key in ``job.properties``."""
    return "job." + name.replace("_", ".")


def _job_from(values: dict[str, str]) -> JobSettings:
    fields = {f.name: f for f in dataclasses.fields(JobSettings)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        name = key.removeprefix("job.").replace(".", "_")
        if name not in fields:
            raise ValueError(f"unknown job setting {key!r}")
        default = fields[name].default
        if isinstance(default, (int, float)):
            kind = type(default)
            try:
                kwargs[name] = kind(value)
            except ValueError:
                noun = "an integer" if kind is int else "a number"
                raise ValueError(f"{key}={value!r}: expected {noun}") from None
        else:
            kwargs[name] = value
    return JobSettings(**kwargs)


def read_spark_defaults(path: Path) -> dict[str, str]:
    """``spark-defaults.conf``: ``key value`` (or ``key=value``) lines, ``#`` comments."""
    values: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.replace("=", " ", 1).partition(" ")
        values[key.strip()] = value.strip()
    return values


def load_settings(
    conf_files: list[str] | None = None,
    values: dict[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """The defaults in ``conf/``, then each ``--conf`` file, then ``values`` (``--set`` pairs,
    routed like a file's keys), then the given job overrides."""
    coordinator: dict[str, str] = {}
    job: dict[str, str] = {}
    spark: dict[str, str] = {}
    if (CONF_DIR / "coordinator.properties").exists():
        coordinator.update(read_properties(CONF_DIR / "coordinator.properties"))
    if (CONF_DIR / "job.properties").exists():
        job.update(read_properties(CONF_DIR / "job.properties"))
    if (CONF_DIR / "spark-defaults.conf").exists():
        spark.update(read_spark_defaults(CONF_DIR / "spark-defaults.conf"))
    layers = [read_properties(path) for path in conf_files or []] + [values or {}]
    for layer in layers:
        for key, value in layer.items():
            if key.startswith("spark."):
                spark[key] = value
            elif key.startswith("job."):
                job[key] = value
            else:
                coordinator[key] = value
    settings = _job_from(job).replace(**overrides)
    return Settings(settings, CoordinatorConfig.from_mapping(coordinator), spark)


# --- what a checkpoint pins -------------------------------------------------------------------

PINNED = (
    "state_key",
    "shards",
    "offsets_topic_num_partitions",
    "state_store",
    "state_shard_layout",
)
IDENTITY_FILE = "coordinator.json"


@dataclass(frozen=True)
class CheckpointIdentity:
    """Written once per checkpoint: the Delta app id, the member-id seed and the pinned choices.

    A checkpoint rebuilt from the log (:mod:`coordinator.stream.rebuild`) also records where its
    batch ids start and the directory of its bootstrap files; a ``coordinator.json`` written
    before rebuilds existed has neither and reads as base 0, no bootstrap."""

    app_id: str
    seed: bytes
    state_key: str
    shards: int
    offsets_topic_num_partitions: int
    #: The warehouse batch id of Spark's batch 0: the sink writes Spark's batch ``n`` as
    #: ``batch_id_base + n`` (rows and app transaction), so batch ids stay monotonic across
    #: checkpoints and readers' ``batch_id <= last complete batch`` cuts keep working.
    batch_id_base: int = 0
    #: The directory of the bootstrap files (the state rebuilt from the log), read by the
    #: query as a second file source; lines from there, and only from there, are loads.
    bootstrap_dir: str | None = None
    #: ``job.state.store``; a ``coordinator.json`` written before it was a setting has none
    #: and reads as ``hdfs``, the only store the job used then.
    state_store: str = HDFS_STORE
    #: ``job.state.shard.layout``; None in a ``coordinator.json`` written before it was a
    #: setting, whose keys are the partition numbers (:attr:`shard_layout`).
    state_shard_layout: str | None = None

    @property
    def shard_layout(self) -> str:
        """The layout of this checkpoint's shard keys."""
        return self.state_shard_layout or shard_keys.PARTITION_LAYOUT


def identity_path(settings: Settings) -> Path:
    return settings.job.paths.checkpoint / IDENTITY_FILE


def _pinned(settings: Settings) -> dict[str, Any]:
    return {
        "state_key": settings.job.state_key,
        "shards": settings.job.shards,
        "offsets_topic_num_partitions": settings.coordinator.offsets_topic_num_partitions,
        "state_store": settings.job.state_store,
        "state_shard_layout": settings.job.state_shard_layout,
    }


def read_identity(path: Path) -> CheckpointIdentity:
    """A ``coordinator.json`` as it is (no check against settings)."""
    stored = json.loads(path.read_text(encoding="utf-8"))
    return CheckpointIdentity(
        stored["app_id"],
        bytes.fromhex(stored["seed"]),
        stored["state_key"],
        int(stored["shards"]),
        int(stored["offsets_topic_num_partitions"]),
        int(stored.get("batch_id_base", 0)),
        stored.get("bootstrap_dir"),
        stored.get("state_store", HDFS_STORE),
        stored.get("state_shard_layout"),
    )


def checkpoint_identity(settings: Settings) -> CheckpointIdentity:
    """Read ``<checkpoint>/coordinator.json``, or create it on a new checkpoint.

    Raises ``ValueError`` when the settings ask for a different pinned choice than the
    checkpoint holds (re-sharding is a rebuild from the log into a new checkpoint)."""
    path = identity_path(settings)
    wanted = _pinned(settings)
    if path.exists():
        identity = read_identity(path)
        for name in PINNED:
            stored = getattr(identity, name)
            if stored is None and name == "state_shard_layout":
                continue  # made before the setting: its keys stay the partitions (the job's)
            if stored != wanted[name]:
                hint = ""
                if name == "state_key":
                    # The default was "group" before it became "shard".
                    hint = f"; or keep this checkpoint as it is with job.state.key={stored}"
                raise ValueError(
                    f"the checkpoint {path.parent} was made with {name}={stored!r}, "
                    f"not {wanted[name]!r}; it is fixed per checkpoint (to change it, rebuild "
                    f"a new checkpoint from the log: coordinator run --rebuild-from-log{hint})"
                )
        return identity
    return new_checkpoint_identity(settings)


def new_checkpoint_identity(
    settings: Settings,
    *,
    batch_id_base: int = 0,
    bootstrap_dir: str | None = None,
    rebuilt_from: dict[str, Any] | None = None,
) -> CheckpointIdentity:
    """Write a new ``coordinator.json`` (a new app id and a new seed) into the checkpoint
    directory, which must not hold one. ``rebuilt_from`` is recorded beside it for people (the
    checkpoint it replaced, the log it was read from)."""
    path = identity_path(settings)
    if path.exists():
        raise ValueError(f"{path} exists: a checkpoint's identity is written once")
    identity = CheckpointIdentity(
        f"kafka-group-coordinator-{uuid.uuid4()}",
        secrets.token_bytes(32),
        **_pinned(settings),
        batch_id_base=batch_id_base,
        bootstrap_dir=bootstrap_dir,
    )
    stored: dict[str, Any] = {
        "app_id": identity.app_id,
        "seed": identity.seed.hex(),
        **_pinned(settings),
        "batch_id_base": batch_id_base,
        "bootstrap_dir": bootstrap_dir,
    }
    if rebuilt_from is not None:
        stored["rebuilt_from"] = rebuilt_from
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{IDENTITY_FILE}.tmp")
    tmp.write_text(json.dumps(stored, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return identity
