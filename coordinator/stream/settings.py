"""The job's settings: where it reads and writes, how it triggers, how it keys its state.

Three layers, later ones winning: the defaults in ``conf/`` (``coordinator.properties`` with
Kafka's names, ``job.properties``, ``spark-defaults.conf``), each ``--conf FILE``, then the
command line. In a ``--conf`` file, ``spark.*`` keys go to Spark, ``job.*`` keys to
:class:`JobSettings` and every other key is a coordinator setting under Kafka's name.

Some choices are fixed per checkpoint, as ``offsets.topic.num.partitions`` is fixed for a Kafka
cluster: the number of shards (Spark's shuffle partitions, which Spark itself pins in the
checkpoint), the state key and the offsets partition count. They are written to
``<checkpoint>/coordinator.json`` with the job's app id (the Delta writer's transaction id) and
its member-id seed on the first run, and checked on every later one.
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
from coordinator.stream.operator import KEY_MODES
from coordinator.stream.schema import Warehouse

#: The repository's ``conf/`` directory (present in a checkout and beside ``jobs/``).
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


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
    #: ``group`` (one Spark key per group id) or ``shard`` (one per offsets partition).
    state_key: str = "group"
    max_files_per_trigger: int = 1000
    #: What happens to processed inbox files: ``archive`` (to ``<warehouse>/archive``),
    #: ``delete`` or ``off``.
    clean_source: str = "archive"
    #: Stop after this many seconds with no request in and nothing out (0 = run until killed).
    stop_when_idle_s: float = 0.0
    #: FindCoordinator's answer: where members reach this coordinator (its gateway).
    node_id: int = 0
    node_host: str = "localhost"
    node_port: int = 9092
    #: Delta housekeeping, in micro-batches (0 disables).
    compact_every_batches: int = 100
    checkpoint_every_batches: int = 100
    vacuum_every_batches: int = 1000
    vacuum_retention_hours: int = 168

    def __post_init__(self) -> None:
        if self.state_key not in KEY_MODES:
            raise ValueError(f"job.state.key must be one of {KEY_MODES}, got {self.state_key!r}")
        if self.clean_source not in ("archive", "delete", "off"):
            raise ValueError(
                f"job.clean.source must be archive, delete or off: {self.clean_source!r}"
            )
        for name in ("trigger_interval_ms", "shards", "max_files_per_trigger"):
            if getattr(self, name) < 1:
                raise ValueError(f"job.{name.replace('_', '.')} must be >= 1")

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


def _job_from(values: dict[str, str]) -> JobSettings:
    fields = {f.name: f for f in dataclasses.fields(JobSettings)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        name = key.removeprefix("job.").replace(".", "_")
        if name not in fields:
            raise ValueError(f"unknown job setting {key!r}")
        default = fields[name].default
        kwargs[name] = type(default)(value) if isinstance(default, (int, float)) else value
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

PINNED = ("state_key", "shards", "offsets_topic_num_partitions")


@dataclass(frozen=True)
class CheckpointIdentity:
    """Written once per checkpoint: the Delta app id, the member-id seed and the pinned choices."""

    app_id: str
    seed: bytes
    state_key: str
    shards: int
    offsets_topic_num_partitions: int


def checkpoint_identity(settings: Settings) -> CheckpointIdentity:
    """Read ``<checkpoint>/coordinator.json``, or create it on a new checkpoint.

    Raises ``ValueError`` when the settings ask for a different pinned choice than the
    checkpoint holds (re-sharding is a rebuild from the log into a new checkpoint)."""
    path = settings.job.paths.checkpoint / "coordinator.json"
    wanted: dict[str, Any] = {
        "state_key": settings.job.state_key,
        "shards": settings.job.shards,
        "offsets_topic_num_partitions": settings.coordinator.offsets_topic_num_partitions,
    }
    if path.exists():
        stored = json.loads(path.read_text(encoding="utf-8"))
        for name in PINNED:
            if stored[name] != wanted[name]:
                raise ValueError(
                    f"the checkpoint {path.parent} was made with {name}={stored[name]!r}, "
                    f"not {wanted[name]!r}; it is fixed per checkpoint (to change it, start "
                    f"a new checkpoint rebuilt from the log)"
                )
        return CheckpointIdentity(stored["app_id"], bytes.fromhex(stored["seed"]), **wanted)
    identity = CheckpointIdentity(
        f"kafka-group-coordinator-{uuid.uuid4()}", secrets.token_bytes(32), **wanted
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".coordinator.json.tmp")
    tmp.write_text(
        json.dumps({"app_id": identity.app_id, "seed": identity.seed.hex(), **wanted}, indent=2)
        + "\n",
        encoding="utf-8",
    )
    os.replace(tmp, path)
    return identity
