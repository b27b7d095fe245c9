"""Consumer groups (KIP-848) in the Spark job's operator, without Spark: the topics come from
``job.topics``, a group's state crosses micro-batches as its blob (the records that rebuild it,
and its timers), its records and summary rows come out as the job writes them."""

from __future__ import annotations

import json
from typing import Any

from coordinator.config import CoordinatorConfig
from coordinator.group.snapshot import decode_group, encode_group
from coordinator.log.records import durable_view
from coordinator.modern.model import ConsumerGroup, ConsumerGroupState
from coordinator.stream import operator as op
from coordinator.stream.settings import load_settings
from coordinator.topics import topic_id_for
from tests.consumer_groups import M1, M2, Context, owned

SETTINGS = op.OperatorSettings(
    CoordinatorConfig(group_initial_rebalance_delay_ms=0), b"s" * 32, topics=(("t", 4),)
)
T = topic_id_for("t")


def heartbeat_request(rid: str, member_id: str, epoch: int, **fields: Any) -> dict[str, Any]:
    """A ConsumerGroupHeartbeat of group g (epoch 0: a join subscribed to topic t)."""
    request = {
        "api": "consumer_group_heartbeat",
        "request_id": rid,
        "group_id": "g",
        "member_id": member_id,
        "member_epoch": epoch,
        **fields,
    }
    if epoch == 0:
        request.update(
            rebalance_timeout_ms=30_000, subscribed_topic_names=["t"], topic_partitions=[]
        )
    return request


def heartbeat(rid: str, member_id: str, epoch: int, **fields: Any) -> str:
    return json.dumps(heartbeat_request(rid, member_id, epoch, **fields))


def lines(values: list[str]) -> list[op.InboxLine]:
    return [op.InboxLine(v, "file:/inbox/a.jsonl", i, "g") for i, v in enumerate(values)]


def answers(outcome: op.GroupOutcome) -> list[dict[str, Any]]:
    return [json.loads(r[7]) for r in outcome.rows if r[0] == op.RESPONSE]


def test_job_topics_is_a_setting_with_the_gateways_topic_ids() -> None:
    settings = load_settings([], {"job.topics": "t:4,u:2"})
    assert settings.job.topic_counts() == (("t", 4), ("u", 2))
    image = SETTINGS.topic_image()
    assert image.by_name("t") is not None and image.by_name("t").topic_id == T  # type: ignore[union-attr]


def test_a_consumer_group_forms_and_reconciles_across_micro_batches() -> None:
    first = op.run_group(SETTINGS, "g", None, lines([heartbeat("a", M1, 0)]), 1_000)
    [a] = answers(first)
    assert a["member_epoch"] == 1 and a["assignment"]["topic_partitions"] == [
        {"topic_id": T, "partitions": [0, 1, 2, 3]}
    ]
    records = [r for r in first.rows if r[0] == op.RECORD]
    assert len(records) == 6  # member, partition metadata, epoch, target, target epoch, current
    [summary] = [json.loads(r[7]) for r in first.rows if r[0] == op.GROUP]
    assert (summary["group_type"], summary["state"], summary["protocol_type"]) == (
        "consumer",
        "Stable",
        "consumer",
    )
    second = op.run_group(SETTINGS, "g", first.blob, lines([heartbeat("b", M2, 0)]), 2_000)
    third = op.run_group(
        SETTINGS,
        "g",
        second.blob,
        lines([heartbeat("c", M1, 1, topic_partitions=owned({T: [0, 1, 2, 3]}))]),
        3_000,
    )
    [c] = answers(third)
    assert c["assignment"]["topic_partitions"] == [{"topic_id": T, "partitions": [0, 1]}]
    fourth = op.run_group(
        SETTINGS,
        "g",
        third.blob,
        lines(
            [
                heartbeat("d", M1, 1, topic_partitions=owned({T: [0, 1]})),
                heartbeat("e", M2, 2),
            ]
        ),
        4_000,
    )
    d, e = answers(fourth)
    assert d["member_epoch"] == 2 and e["assignment"]["topic_partitions"] == [
        {"topic_id": T, "partitions": [2, 3]}
    ]
    group = decode_group(fourth.blob)  # type: ignore[arg-type]
    assert isinstance(group, ConsumerGroup) and group.state is ConsumerGroupState.STABLE
    # A session runs out in a batch with no request (Spark's timeout call).
    late = op.run_group(SETTINGS, "g", fourth.blob, [], 4_000 + 45_000, timed_out=True)
    gone = decode_group(late.blob)  # type: ignore[arg-type]
    assert isinstance(gone, ConsumerGroup) and gone.members == {}


def test_a_consumer_groups_blob_round_trips_exactly() -> None:
    ctx = Context()
    ctx.join(M1, instance_id="i1")
    ctx.join(M2, subscribed_topic_regex="f.*")
    ctx.heartbeat(M1, 1, instance_id="i1")  # M1 now revoking, with a rebalance timer
    ctx.send(
        {
            "api": "offset_commit",
            "member_id": M1,
            "generation_id": 1,
            "offsets": [{"topic": "foo", "partition": 0, "offset": 3}],
        }
    )
    group = ctx.group()
    again = decode_group(encode_group(group))
    assert again == group
    assert durable_view(again) == durable_view(group)
    assert encode_group(again) == encode_group(group)


def test_conf_coordinator_properties_lists_kafkas_defaults_consumer_groups_included() -> None:
    from coordinator.stream.settings import CONF_DIR

    settings = load_settings([])
    assert settings.coordinator == CoordinatorConfig()
    text = (CONF_DIR / "coordinator.properties").read_text()
    assert "group.consumer.session.timeout.ms=45000" in text
    assert "group.consumer.assignors=uniform,range" in text
