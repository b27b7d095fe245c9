"""Time to a stable assignment, consumer protocol (KIP-848) against the classic one, in one run
(``coordinator bench protocols``).

The same group (``members`` consumers of 10 topics of 100 partitions, all starting at once)
forms through the in-process engine on a simulated clock, twice:

- classic: :func:`coordinator.bench.engine.stabilise_group` (GroupMember clients, Kafka's 3 s
  initial rebalance delay, the client-side ``cooperative-sticky`` assignor by default);
- consumer: members as librdkafka's ``group.protocol=consumer`` behaves: join with epoch 0,
  heartbeat every ``group.consumer.heartbeat.interval.ms`` (5 s), and at once after taking in a
  new assignment (giving up revoked partitions immediately, as a consumer with nothing in
  flight does), reporting what they own.

Stable means every member holds its target assignment and the group says so (Stable for
consumer groups; Stable and every member STABLE with one generation for classic groups).
Figures: simulated milliseconds until then, wall seconds to compute it, requests sent.
"""

from __future__ import annotations

import heapq
import time
from typing import Any

from coordinator.config import CoordinatorConfig
from coordinator.engine import GroupCoordinator
from coordinator.ids import SequentialIds
from coordinator.modern.model import ConsumerGroup, ConsumerGroupState
from coordinator.topics import topic_id_for

TOPICS = {f"topic-{i}": 100 for i in range(10)}
#: A member that has just taken in an assignment acknowledges it this soon.
ACK_MS = 1


def stabilise_consumer_group(
    members: int, assignor: str = "uniform", limit_ms: int = 600_000
) -> dict[str, Any]:
    config = CoordinatorConfig()
    engine = GroupCoordinator(config, id_source=SequentialIds())
    engine.update_topics(
        [{"name": n, "topic_id": topic_id_for(n), "partitions": p} for n, p in TOPICS.items()],
        0,
    )
    interval = config.group_consumer_heartbeat_interval_ms
    ids = [f"member-{i:05d}".ljust(22, "x") for i in range(members)]
    epochs = dict.fromkeys(ids, 0)
    owned: dict[str, dict[str, list[int]]] = {m: {} for m in ids}
    due = [(0, i, m) for i, m in enumerate(ids)]  # (time, tie-break, member): the next heartbeat
    heapq.heapify(due)
    sent = 0
    seq = members
    start = time.perf_counter()
    now = 0
    while due:
        now, _, member_id = heapq.heappop(due)
        if now > limit_ms:
            raise RuntimeError(f"the group did not stabilise in {limit_ms} simulated ms")
        request: dict[str, Any] = {
            "api": "consumer_group_heartbeat",
            "request_id": sent,
            "group_id": "bench",
            "member_id": member_id,
            "member_epoch": epochs[member_id],
            "topic_partitions": [
                {"topic_id": t, "partitions": p} for t, p in owned[member_id].items()
            ],
        }
        if epochs[member_id] == 0:
            request.update(
                rebalance_timeout_ms=300_000,
                subscribed_topic_names=sorted(TOPICS),
                server_assignor=assignor,
                topic_partitions=[],
            )
        sent += 1
        answers = [
            a for a in engine.handle(request, now) if a["request_id"] == request["request_id"]
        ]
        (answer,) = answers
        if answer["error"] is not None:
            raise RuntimeError(f"heartbeat failed: {answer}")
        epochs[member_id] = answer["member_epoch"]
        next_ms = interval
        if answer["assignment"] is not None:
            new = {
                tp["topic_id"]: tp["partitions"] for tp in answer["assignment"]["topic_partitions"]
            }
            if new != owned[member_id]:
                owned[member_id] = new
                next_ms = ACK_MS
        seq += 1
        heapq.heappush(due, (now + next_ms, seq, member_id))
        if _stable(engine, owned):
            break
    return {
        "members": members,
        "simulated_ms": now,
        "wall_s": round(time.perf_counter() - start, 3),
        "requests": sent,
    }


def _stable(engine: GroupCoordinator, owned: dict[str, dict[str, list[int]]]) -> bool:
    group = engine.group("bench")
    if not isinstance(group, ConsumerGroup) or len(group.members) < len(owned):
        return False
    if group.state is not ConsumerGroupState.STABLE:
        return False
    return all(
        {t: sorted(p) for t, p in group.target_assignment.get(m, {}).items()} == owned[m]
        for m in owned
    )


def compare(sizes: tuple[int, ...], classic_assignor: str = "cooperative-sticky") -> dict[str, Any]:
    """Both protocols for each size, in one run."""
    from coordinator.bench.engine import stabilise_group

    figures: dict[str, Any] = {}
    for size in sizes:
        figures[str(size)] = {
            "consumer": stabilise_consumer_group(size),
            "classic": stabilise_group(size, classic_assignor),
        }
    return figures
