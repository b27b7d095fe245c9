"""Kafka 4.0's consumer-group records, byte for byte, and their replay (one path, live and load)."""

from __future__ import annotations

import pytest

from coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.log import codec
from coordinator.log import records as log
from coordinator.log.modern_codec import ConsumerGroupKey
from coordinator.log.modern_records import RecordBuilder
from coordinator.modern.model import ConsumerGroup, ConsumerGroupMember, MemberState
from coordinator.serde import DecodeError
from coordinator.topics import TopicMetadata, uuid_from_bytes, uuid_to_bytes
from tests.consumer_groups import FOO, GROUP, M1, M2, Context, owned

TOPIC_BYTES = bytes(range(1, 17))
TOPIC = uuid_from_bytes(TOPIC_BYTES)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def build() -> RecordBuilder:
    return RecordBuilder("foo", 1234, log.BLANK_RECORD)


def test_a_topic_id_is_kafkas_uuid_string() -> None:
    assert TOPIC == "AQIDBAUGBwgJCgsMDQ4PEA" and uuid_to_bytes(TOPIC) == TOPIC_BYTES
    for bad in ("", "AQIDBAUGBwgJCgsMDQ4PE", "AQIDBAUGBwgJCgsMDQ4PE!", "AQIDBAUGBwgJCgsMDQ4PEB"):
        with pytest.raises(ValueError):
            uuid_to_bytes(bad)


@pytest.mark.parametrize(
    ("record", "key", "value"),
    [
        (build().epoch(10), "0003 0003 666f6f", "0000 0000000a 00"),
        (build().epoch_tombstone(), "0003 0003 666f6f", None),
        (
            build().subscription_metadata({"foo": TopicMetadata(TOPIC, "foo", 6)}),
            "0004 0003 666f6f",
            "0000 02" + TOPIC_BYTES.hex() + "04 666f6f 00000006 01 00 00",
        ),
        (
            build().member_subscription(
                ConsumerGroupMember(
                    "m",
                    client_id="c",
                    client_host="h",
                    subscribed_topic_names=("foo",),
                    rebalance_timeout_ms=5000,
                    server_assignor="range",
                )
            ),
            "0005 0003 666f6f 0001 6d",
            "0000 00 00 0263 0268 02 04666f6f 00 00001388 0672616e6765 00",
        ),
        (
            build().target_assignment_epoch(7),
            "0006 0003 666f6f",
            "0000 00000007 00",
        ),
        (
            build().target_assignment("m", {TOPIC: frozenset({1, 0})}),
            "0007 0003 666f6f 0001 6d",
            "0000 02" + TOPIC_BYTES.hex() + "03 00000000 00000001 00 00",
        ),
        (
            build().current_assignment(
                ConsumerGroupMember(
                    "m",
                    member_epoch=5,
                    previous_member_epoch=4,
                    state=MemberState.UNREVOKED_PARTITIONS,
                    assigned_partitions={TOPIC: frozenset({2})},
                    partitions_pending_revocation={TOPIC: frozenset({3})},
                )
            ),
            "0008 0003 666f6f 0001 6d",
            "0000 00000005 00000004 01"
            + " 02"
            + TOPIC_BYTES.hex()
            + "02 00000002 00"
            + " 02"
            + TOPIC_BYTES.hex()
            + "02 00000003 00"
            + " 00",
        ),
        (
            build().regular_expression("f.*", ["foo"], 3),
            "0010 0003 666f6f 0003 662e2a",
            "0000 02 04666f6f 0000000000000003 00000000000004d2 00",
        ),
    ],
)
def test_each_record_type_is_kafkas_bytes(record: dict, key: str, value: str | None) -> None:
    assert record["key"] == h(key)
    assert record["value"] == (None if value is None else h(value))
    # ... and reads back to the same decoded fields.
    again = log.record_from_bytes(record["key"], record["value"])
    assert again is not None
    for name in set(record) - {"timestamp_ms"}:
        assert again[name] == record[name], name


def test_unknown_tagged_fields_are_skipped_and_trailing_bytes_ignored() -> None:
    # A tag this version does not know (1) is skipped.
    value = h("0000 00 00 0263 0268 02 04666f6f 00 00001388 00 01 01 02 abcd")
    fields = codec.decode_key(h("0005 0003 666f6f 0001 6d"))
    assert fields == ConsumerGroupKey(5, "foo", member_id="m")
    record = log.record_from_bytes(h("0005 0003 666f6f 0001 6d"), value)
    assert record is not None and record["subscribed_topic_names"] == ["foo"]
    with pytest.raises(DecodeError):
        log.record_from_bytes(h("0005 0003 666f6f 0001 6d"), h("0001 00"))


def test_a_group_comes_back_from_its_records_as_it_was() -> None:
    """testReplayConsumerGroup*: every record type, live and at load, gives one group."""
    ctx = Context()
    ctx.join(M1, instance_id="i1")
    ctx.join(M2, subscribed_topic_regex="f.*")
    ctx.heartbeat(M1, 1, topic_partitions=owned({FOO: [0, 1, 2, 3, 4, 5]}), instance_id="i1")
    ctx.assert_at_rest_equals_load()
    # Replaying Kafka's key and value bytes alone (what a Delta table or a real log holds).
    raw = [{"key": r["key"], "value": r["value"]} for r in ctx.log + ctx.records()]
    loaded = GroupCoordinator.from_records(raw, CoordinatorConfig(), ctx.now)
    group = loaded.group(GROUP)
    assert isinstance(group, ConsumerGroup)
    assert log.durable_view(group) == log.durable_view(ctx.group())


def test_a_deleted_group_leaves_nothing_behind_at_load() -> None:
    ctx = Context()
    ctx.join(M1, subscribed_topic_regex="f.*")
    ctx.heartbeat(M1, -1)
    assert ctx.send({"api": "delete_groups"})["error"] is None
    assert ctx.c.group_ids() == []
    assert ctx.reloaded().group_ids() == []


def test_member_tombstones_of_an_unknown_group_or_member_are_ignored() -> None:
    b = RecordBuilder(GROUP, 0, log.BLANK_RECORD)
    records = [
        b.current_assignment_tombstone("ghost"),
        b.member_subscription_tombstone("ghost"),
        b.epoch(3),
        b.member_subscription_tombstone("ghost"),
    ]
    loaded = GroupCoordinator.from_records(records, CoordinatorConfig(), 0)
    group = loaded.group(GROUP)
    assert isinstance(group, ConsumerGroup) and group.group_epoch == 3 and not group.members
