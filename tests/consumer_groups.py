"""Helpers for consumer-group (KIP-848) tests: an engine with topics, and terse heartbeats.

Like Kafka's ``GroupMetadataManagerTestContext``: a coordinator with a mock clock (the caller's
``now``), a metadata image (``update_topics``), requests built from Kafka's field names, and the
records of each call kept for assertions.
"""

from __future__ import annotations

from typing import Any

from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds
from coordinator.log.records import durable_view
from coordinator.modern.model import ConsumerGroup
from coordinator.topics import topic_id_for

GROUP = "fooup"
FOO = topic_id_for("foo")
BAR = topic_id_for("bar")
ZAR = topic_id_for("zar")
#: Members with Kafka-like (22-character) ids that sort in name order.
M1, M2, M3 = ("member1" + "x" * 15, "member2" + "x" * 15, "member3" + "x" * 15)


class Context:
    """One coordinator, its topics, its clock, and everything it wrote."""

    def __init__(self, topics: dict[str, int] | None = None, **config: Any) -> None:
        self.config = CoordinatorConfig(**config)
        self.c = GroupCoordinator(self.config, id_source=SequentialIds())
        self.now = 0
        self.rid = 0
        self.log: list[dict[str, Any]] = []
        self.set_topics({"foo": 6, "bar": 3} if topics is None else topics)

    def set_topics(self, topics: dict[str, int]) -> list[dict[str, Any]]:
        out = self.c.update_topics(
            [{"name": n, "topic_id": topic_id_for(n), "partitions": p} for n, p in topics.items()],
            self.now,
        )
        self.records()
        return out

    def send(self, request: dict[str, Any]) -> dict[str, Any]:
        self.rid += 1
        request = {"request_id": self.rid, "group_id": GROUP, **request}
        out = self.c.handle(request, self.now)
        assert not self.c.internal_errors, self.c.internal_errors
        mine = [r for r in out if r["request_id"] == self.rid]
        assert len(mine) == 1, out
        return mine[0]

    def heartbeat(self, member_id: str, epoch: int, **fields: Any) -> dict[str, Any]:
        return self.send(
            {
                "api": "consumer_group_heartbeat",
                "member_id": member_id,
                "member_epoch": epoch,
                **fields,
            }
        )

    def join(
        self, member_id: str, topics: list[str] | None = None, **fields: Any
    ) -> dict[str, Any]:
        fields.setdefault("rebalance_timeout_ms", 5000)
        fields.setdefault("topic_partitions", [])
        if "subscribed_topic_regex" not in fields:
            fields.setdefault("subscribed_topic_names", topics or ["foo", "bar"])
        return self.heartbeat(member_id, 0, **fields)

    def sleep(self, ms: int) -> list[dict[str, Any]]:
        self.now += ms
        return self.c.advance(self.now)

    def records(self) -> list[dict[str, Any]]:
        """The records written since the last call (and keep them in ``log``)."""
        records = self.c.drain_records()
        self.log.extend(records)
        return records

    def group(self, group_id: str = GROUP) -> ConsumerGroup:
        group = self.c.group(group_id)
        assert isinstance(group, ConsumerGroup), group
        return group

    def reloaded(self) -> GroupCoordinator:
        """A coordinator loaded from everything written so far (Kafka's load on failover)."""
        self.records()
        loaded = GroupCoordinator.from_records(self.log, self.config, self.now)
        loaded.update_topics([t for t in self.c.topics.as_list()], self.now)
        return loaded

    def assert_at_rest_equals_load(self) -> None:
        # At rest: the timers due by now have fired (a load fires them at once, e.g. a
        # rebalance timeout of 0).
        self.c.advance(max(self.now, self.c.now_ms))
        loaded = self.reloaded()
        for group_id in self.c.group_ids():
            assert durable_view(loaded.group(group_id)) == durable_view(self.c.group(group_id))
        assert loaded.group_ids() == self.c.group_ids()


def owned(assignment: dict[str, list[int]]) -> list[dict[str, Any]]:
    """The heartbeat's ``topic_partitions`` of what a member owns."""
    return [{"topic_id": t, "partitions": p} for t, p in assignment.items()]


def assigned(response: dict[str, Any]) -> dict[str, list[int]] | None:
    """A heartbeat response's assignment as {topic id: partitions} (None: unchanged)."""
    if response["assignment"] is None:
        return None
    return {tp["topic_id"]: tp["partitions"] for tp in response["assignment"]["topic_partitions"]}


def kinds(records: list[dict[str, Any]]) -> list[tuple[str, str | None, bool]]:
    """(record type without its prefix, member id or regex, tombstone?) of each record."""
    return [
        (
            r["record_type"].removeprefix("consumer_group_"),
            r.get("member_id") or r.get("regular_expression"),
            r["value"] is None,
        )
        for r in records
    ]
