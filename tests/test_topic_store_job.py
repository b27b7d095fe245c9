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
