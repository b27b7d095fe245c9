"""Kafka's broker settings that govern the classic group coordinator.

Field names are the snake_case of Kafka's own settings (``group.min.session.timeout.ms`` becomes
``group_min_session_timeout_ms``) and the defaults are Kafka's (4.x ``GroupCoordinatorConfig``).
Nothing here reads files or the environment: adapters build a config and hand it to the engine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# Not configurable in Kafka either (4.x CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS).
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """The classic coordinator's broker configuration, with Kafka's defaults."""

    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2_147_483_647
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4_096
    offsets_topic_num_partitions: int = 50

    def __post_init__(self) -> None:
        # Kafka's validators (ConfigDef.Range.atLeast(1)) for the settings that have one.
        for name in (
            "group_max_size",
            "offsets_retention_minutes",
            "offsets_retention_check_interval_ms",
            "offsets_topic_num_partitions",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in (
            "group_min_session_timeout_ms",
            "group_max_session_timeout_ms",
            "group_initial_rebalance_delay_ms",
            "offset_metadata_max_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")

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
            kwargs[name] = int(value)
        return cls(**kwargs)
