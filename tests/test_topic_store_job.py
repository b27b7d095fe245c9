"""The Spark job's topics change while it runs: ``coordinator topics`` grows and deletes a topic
in the warehouse's topic store, and a consumer group's next heartbeat is assigned from it,
without a restart."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coordinator.cli import main
from coordinator.stream import topic_store
from coordinator.topics import topic_id_for
from tests.consumer_groups import M1, owned
from tests.stream_support import RunningCoordinator

T = topic_id_for("t")


@pytest.mark.slow
def test_a_topic_grown_and_deleted_while_the_job_runs_reaches_the_group(
    spark: Any, tmp_path: Any
) -> None:
    warehouse = tmp_path / "wh"
    c = RunningCoordinator(spark, warehouse, topics="t:2").start()
    store = warehouse / "topics"
    rids = iter(range(1_000_000))

    def beat(epoch: int, partitions: list[int]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "api": "consumer_group_heartbeat",
            "request_id": f"hb-{next(rids)}",
            "group_id": "g",
            "member_id": M1,
            "member_epoch": epoch,
        }
        if epoch == 0:
            request.update(rebalance_timeout_ms=30_000, subscribed_topic_names=["t"])
        request["topic_partitions"] = owned({T: partitions}) if partitions else []
        answer = c.request(request)
        assert answer["error"] is None, answer
        return answer

    try:
        seed = topic_store.read_version(store, 0)
        assert (seed["writer"], seed["setting"]) == (topic_store.JOB_SETTING, {"t": 2})
        joined = beat(0, [])
        assert joined["assignment"]["topic_partitions"] == owned({T: [0, 1]})
        epoch, mine = joined["member_epoch"], [0, 1]

        def assigned(want: list[int]) -> bool:
            """Heartbeat (with what the member owns) until the answer assigns ``want``."""
            nonlocal epoch, mine
            answer = beat(epoch, mine)
            epoch = answer["member_epoch"]
            if answer["assignment"] is not None:
                given = answer["assignment"]["topic_partitions"]
                mine = given[0]["partitions"] if given else []
            return mine == want

        assert main(["topics", "--warehouse", str(warehouse), "--set", "t:4"]) == 0
        c.wait_for(lambda: assigned([0, 1, 2, 3]), 120, "the grown topic's partitions")
        grown_epoch = epoch
        assert main(["topics", "--warehouse", str(warehouse), "--delete", "t"]) == 0
        # Revoked first (at the member's epoch), then the next epoch once it let them go.
        c.wait_for(
            lambda: assigned([]) and epoch > grown_epoch, 120, "the deleted topic's partitions"
        )
        assert grown_epoch > joined["member_epoch"]
        # Each batch's offset named the version it was assigned from, in order.
        offsets = warehouse / "checkpoints" / "coordinator" / "offsets"
        named = []
        for batch_id in sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit()):
            source = json.loads((offsets / str(batch_id)).read_text().splitlines()[2])
            named.append(source.get("topics_version"))
        assert named == sorted(named) and {0, 1, 2} <= set(named)
    finally:
        c.stop()


@pytest.mark.slow
def test_the_job_behind_an_upstream_gateway_assigns_the_upstreams_topic_ids(
    spark: Any, tmp_path: Any
) -> None:
    """Kafka wire -> the gateway in upstream mode with the Spark back end -> the job: the
    heartbeats are assigned the upstream's own topic id, and a partition count that grows
    upstream reaches the member, without a restart of either."""
    from coordinator.gateway import codec
    from coordinator.gateway.forwarding import JobBackend
    from coordinator.gateway.upstream import Upstream
    from tests.gateway_support import REQUESTS, Running, call
    from tests.test_gateway_upstream_topics import ORDERS_ID, TopicsBroker, assigned

    def heartbeat(port: int, member_id: str, epoch: int, owned: Any) -> Any:
        """A full ConsumerGroupHeartbeat, given a minute: a batch on a loaded box is slow."""
        body = {**REQUESTS[codec.CONSUMER_GROUP_HEARTBEAT], "group_id": "cg"}
        body.update(member_id=member_id, member_epoch=epoch, topic_partitions=owned)
        body["subscribed_topic_names"] = ["orders"]
        answer = call(port, codec.CONSUMER_GROUP_HEARTBEAT, 1, body, timeout_s=60)
        assert answer["error_code"] == 0, answer
        return answer

    warehouse = tmp_path / "wh"
    broker = TopicsBroker({"orders": (ORDERS_ID, 3)})
    job = RunningCoordinator(spark, warehouse).start()
    upstream = Upstream([("127.0.0.1", broker.port)], metadata_max_age_ms=200)
    gateway = Running(backend=JobBackend(warehouse), upstream=upstream)
    member = "MmbrMmbrMmbrMmbrMmbr01"
    try:
        first = heartbeat(gateway.port, member, 0, [])
        assert assigned(first) == {ORDERS_ID: [0, 1, 2]}
        broker.topics = {"orders": (ORDERS_ID, 5)}
        owned = [{"topic_id": ORDERS_ID, "partitions": [0, 1, 2]}]
        answers: list[Any] = []

        def grown() -> bool:
            # A full request (the subscription with it): every answer carries the assignment.
            answers.append(heartbeat(gateway.port, member, first["member_epoch"], owned))
            return assigned(answers[-1]) == {ORDERS_ID: [0, 1, 2, 3, 4]}

        job.wait_for(grown, 120, "the upstream's new partitions")
        assert answers[-1]["member_epoch"] > first["member_epoch"]
    finally:
        gateway.stop()
        job.stop()
        broker.stop()
