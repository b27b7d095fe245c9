"""The topics' log offsets, as the operator supplies them: the coordinator holds no topic data.

``kafka-consumer-groups.sh`` asks the brokers for a partition's log start and end offsets
(``--to-earliest``, ``--to-latest``, the LOG-END-OFFSET and LAG columns) and for the offset of
a time (``--to-datetime``: ``ListOffsets`` by timestamp). Our coordinator serves groups for
data that may live anywhere, so the operator gives these figures as a file (or a Delta table)
of samples, one row per partition per sample time:

=====================  ===============================================================
``topic``              the topic
``partition``          the partition
``log_end_offset``     the offset the next message will get (Kafka's LOG-END-OFFSET)
``log_start_offset``   the first offset still held (optional; 0 when absent)
``timestamp_ms``       when the sample was taken (optional: a row without it is "now")
=====================  ===============================================================

Formats: CSV with a header row, JSON lines (``.jsonl``/``.json``), or a Delta table directory.

How the samples answer Kafka's questions:

- latest / earliest: the newest sample's ``log_end_offset`` / ``log_start_offset``;
- the offset of a time T (``--to-datetime``, ``--by-duration``): ``log_end_offset`` of the
  newest sample taken at or before T, which is the first offset of a message produced after
  that sample. Kafka answers the first offset whose timestamp is at or after T; between two
  samples we cannot know better, so we round down: a reset re-reads, never skips, the
  messages of that interval. Before the first sample: the earliest offset of the first; after
  the last: latest (Kafka's fallback when no message is that recent);
- lag over time: ``log_end_offset`` at a time minus the offset committed then.

:class:`LogOffsets` is what the commands ask of any source: this file's samples, or the
cluster itself (:class:`coordinator.admin.upstream_offsets.UpstreamOffsets`, ``--upstream``).
"""

from __future__ import annotations

import bisect
import csv
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("timestamp_ms", pa.int64()),
        ("log_start_offset", pa.int64()),
        ("log_end_offset", pa.int64()),
    ]
)


#: The sort key of a row without a time: after every timed sample ("now").
NOW = 2**62


class TopicOffsetsError(ValueError):
    """A topic-offsets source that cannot be read, or lacks a partition that is asked for."""


TopicPartitionKey = tuple[str, int]


class LogOffsets(Protocol):
    """The questions ``kafka-consumer-groups.sh`` asks the brokers, as the commands ask them of
    a source of log offsets. Each raises :class:`TopicOffsetsError` for what it cannot answer."""

    #: How messages name the source ("--topic-offsets FILE", "the upstream cluster at ...").
    name: str

    def partitions(self, topic: str) -> list[int]: ...

    def __contains__(self, key: object) -> bool: ...

    def latest(self, key: TopicPartitionKey) -> int: ...

    def earliest(self, key: TopicPartitionKey) -> int: ...

    def offset_for_time(self, key: TopicPartitionKey, timestamp_ms: int) -> int: ...


@dataclass(slots=True)
class _Series:
    times: list[int] = field(default_factory=list)  # sorted; NOW for rows without a time
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)


class TopicOffsets:
    """Log start and end offsets per partition, over time."""

    def __init__(
        self, rows: Iterable[Mapping[str, Any]], name: str = "the topic offsets given"
    ) -> None:
        self.name = name
        series: dict[TopicPartitionKey, list[tuple[int, int, int]]] = {}
        for row in rows:
            try:
                key = (str(row["topic"]), int(row["partition"]))
                end = int(row["log_end_offset"])
            except (KeyError, TypeError, ValueError) as problem:
                raise TopicOffsetsError(
                    f"a row needs topic, partition and log_end_offset: {row}"
                ) from problem
            start = row.get("log_start_offset")
            at = row.get("timestamp_ms")
            try:
                sample = (
                    int(at) if at not in (None, "") else NOW,
                    int(start) if start not in (None, "") else 0,
                    end,
                )
            except (TypeError, ValueError) as problem:
                raise TopicOffsetsError(
                    f"timestamp_ms and log_start_offset must be integers when given: {row}"
                ) from problem
            series.setdefault(key, []).append(sample)
        self._series: dict[TopicPartitionKey, _Series] = {}
        for key, samples in series.items():
            samples.sort()
            s = _Series()
            for at, start, end in samples:
                s.times.append(at)
                s.starts.append(start)
                s.ends.append(end)
            self._series[key] = s

    @classmethod
    def read(cls, source: str | Path) -> TopicOffsets:
        """From a CSV file, a JSON-lines file or a Delta table directory."""
        path = Path(source)
        if (path / "_delta_log").is_dir():
            from coordinator.stream.delta_read import read_table

            return cls(read_table(path).to_pylist())
        if not path.is_file():
            raise TopicOffsetsError(f"no topic-offsets file or Delta table at {path}")
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark
        if path.suffix.lower() in (".jsonl", ".json"):
            try:
                return cls(json.loads(line) for line in text.splitlines() if line.strip())
            except json.JSONDecodeError as problem:
                raise TopicOffsetsError(f"{path}: {problem}") from None
        return cls(csv.DictReader(text.splitlines()))

    def partitions(self, topic: str) -> list[int]:
        """The partitions of a topic known here (Kafka's ``describeTopics``)."""
        return sorted(p for t, p in self._series if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self._series})

    def __contains__(self, key: object) -> bool:
        return key in self._series

    def _get(self, key: TopicPartitionKey) -> _Series:
        try:
            return self._series[key]
        except KeyError:
            raise TopicOffsetsError(
                f"no log offsets for {key[0]}-{key[1]} in {self.name}"
            ) from None

    def latest(self, key: TopicPartitionKey) -> int:
        return self._get(key).ends[-1]

    def earliest(self, key: TopicPartitionKey) -> int:
        return self._get(key).starts[-1]

    def offset_for_time(self, key: TopicPartitionKey, timestamp_ms: int) -> int:
        """The log end at the newest sample taken at or before the time (module docstring)."""
        s = self._get(key)
        i = bisect.bisect_right(s.times, timestamp_ms)
        if i == 0:
            return s.starts[0]
        if i == len(s.times):
            return s.ends[-1]
        return s.ends[i - 1]

    def to_table(self) -> pa.Table:
        rows = [
            {
                "topic": topic,
                "partition": partition,
                "timestamp_ms": None if at == NOW else at,
                "log_start_offset": start,
                "log_end_offset": end,
            }
            for (topic, partition), s in sorted(self._series.items())
            for at, start, end in zip(s.times, s.starts, s.ends, strict=True)
        ]
        return pa.Table.from_pylist(rows, schema=SCHEMA)
