"""Kafka's broker settings that govern the group coordinator (classic and consumer groups).

Field names are the snake_case of Kafka's own settings (``group.min.session.timeout.ms`` becomes
``group_min_session_timeout_ms``) and the defaults are Kafka's (4.x ``GroupCoordinatorConfig``).
Nothing here reads files or the environment: adapters build a config and hand it to the engine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

#: The server-side assignors of consumer groups (Kafka's ``group.consumer.assignors``).
CONSUMER_GROUP_ASSIGNORS = ("uniform", "range")
#: Kafka's ``group.consumer.migration.policy`` values (``ConsumerGroupMigrationPolicy``).
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")

# Not configurable in Kafka either (4.x CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS).
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """The coordinator's broker configuration, with Kafka's defaults (4.0)."""

    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2_147_483_647
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4_096
    offsets_topic_num_partitions: int = 50
    # Consumer groups (KIP-848): Kafka 4.0's GroupCoordinatorConfig.
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_min_heartbeat_interval_ms: int = 5_000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_max_size: int = 2_147_483_647
    #: The first is the default when no member names one (``group.consumer.assignors``).
    group_consumer_assignors: tuple[str, ...] = CONSUMER_GROUP_ASSIGNORS
    #: Online conversion between classic and consumer groups with members: ``upgrade`` (a
    #: ConsumerGroupHeartbeat to a classic group), ``downgrade`` (the last consumer-protocol
    #: member leaving a group of classic members), both, or neither.
    group_consumer_migration_policy: str = "bidirectional"

    def __post_init__(self) -> None:
        # Kafka's validators (ConfigDef.Range.atLeast(1)) for the settings that have one.
        for name in (
            "group_max_size",
            "offsets_retention_minutes",
            "offsets_retention_check_interval_ms",
            "offsets_topic_num_partitions",
            "group_consumer_session_timeout_ms",
            "group_consumer_min_session_timeout_ms",
            "group_consumer_max_session_timeout_ms",
            "group_consumer_heartbeat_interval_ms",
            "group_consumer_min_heartbeat_interval_ms",
            "group_consumer_max_heartbeat_interval_ms",
            "group_consumer_max_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self._check_consumer_group_bounds()
        for name in (
            "group_min_session_timeout_ms",
            "group_max_session_timeout_ms",
            "group_initial_rebalance_delay_ms",
            "offset_metadata_max_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")

    def _check_consumer_group_bounds(self) -> None:
        """The requirements Kafka's ``GroupCoordinatorConfig`` puts on the consumer-group
        settings (its ``Utils.require`` messages)."""
        rules = (
            (
                self.group_consumer_max_session_timeout_ms
                >= self.group_consumer_min_session_timeout_ms,
                "group.consumer.max.session.timeout.ms must be greater than or equal to "
                "group.consumer.min.session.timeout.ms",
            ),
            (
                self.group_consumer_min_session_timeout_ms
                <= self.group_consumer_session_timeout_ms
                <= self.group_consumer_max_session_timeout_ms,
                "group.consumer.session.timeout.ms must be between "
                "group.consumer.min.session.timeout.ms and group.consumer.max.session.timeout.ms",
            ),
            (
                self.group_consumer_max_heartbeat_interval_ms
                >= self.group_consumer_min_heartbeat_interval_ms,
                "group.consumer.max.heartbeat.interval.ms must be greater than or equal to "
                "group.consumer.min.heartbeat.interval.ms",
            ),
            (
                self.group_consumer_min_heartbeat_interval_ms
                <= self.group_consumer_heartbeat_interval_ms
                <= self.group_consumer_max_heartbeat_interval_ms,
                "group.consumer.heartbeat.interval.ms must be between "
                "group.consumer.min.heartbeat.interval.ms and "
                "group.consumer.max.heartbeat.interval.ms",
            ),
            (
                self.group_consumer_heartbeat_interval_ms < self.group_consumer_session_timeout_ms,
                "group.consumer.heartbeat.interval.ms must be less than "
                "group.consumer.session.timeout.ms",
            ),
        )
        for ok, message in rules:
            if not ok:
                raise ValueError(message)
        assignors: Any = self.group_consumer_assignors
        if isinstance(assignors, str):
            assignors = tuple(a.strip() for a in assignors.split(",") if a.strip())
            object.__setattr__(self, "group_consumer_assignors", assignors)
        if not assignors or any(a not in CONSUMER_GROUP_ASSIGNORS for a in assignors):
            raise ValueError(
                f"group.consumer.assignors must name some of {', '.join(CONSUMER_GROUP_ASSIGNORS)}, "
                f"got {assignors!r}"
            )
        policy: Any = self.group_consumer_migration_policy
        if isinstance(policy, str):  # Kafka's parser: case-insensitive, trimmed
            policy = policy.strip().lower()
            object.__setattr__(self, "group_consumer_migration_policy", policy)
        if policy not in MIGRATION_POLICIES:
            raise ValueError(
                f"group.consumer.migration.policy must be one of {', '.join(MIGRATION_POLICIES)}, "
                f"got {self.group_consumer_migration_policy!r}"
            )

    @property
    def upgrade_enabled(self) -> bool:
        """Kafka's ``ConsumerGroupMigrationPolicy.isUpgradeEnabled``."""
        return self.group_consumer_migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        """Kafka's ``ConsumerGroupMigrationPolicy.isDowngradeEnabled``."""
        return self.group_consumer_migration_policy in ("downgrade", "bidirectional")

    @property
    def offsets_retention_ms(self) -> int:
        """``offsets.retention.minutes`` in milliseconds (64-bit in Kafka: no overflow)."""
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> CoordinatorConfig:
        """Build from Kafka-style (``group.max.size``) or snake_case keys; unknown keys raise."""
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            name = key.replace(".", "_").replace("-", "_")
            if name not in known:
                raise ValueError(f"unknown coordinator setting {key!r}")
            textual = name in ("group_consumer_assignors", "group_consumer_migration_policy")
            kwargs[name] = value if textual else int(value)
        return cls(**kwargs)
