"""A test context in the style of Kafka's ``GroupCoordinatorTest``: the standard fixture of
section 14 of kafka-group-protocol.md, a mock clock, and one helper per API.

Every helper sends exactly one request through ``GroupCoordinator.handle`` and returns the
responses that call emitted; ``answer(rid)`` finds a (possibly parked, answered later) response
by request id. Invariants are checked after every call: every request answered at most once,
and no internal error.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds
from coordinator.group.model import ClassicGroup
from coordinator.log import records as log

# GroupCoordinatorTest.setUp
STANDARD = CoordinatorConfig(
    group_min_session_timeout_ms=10,
    group_max_session_timeout_ms=600_000,
    group_max_size=4,
    group_initial_rebalance_delay_ms=50,
    offsets_topic_num_partitions=2,
)
GROUP_ID = "groupId"  # offsets partition 0: owned
OTHER_GROUP_ID = "otherGroup"  # offsets partition 1: not owned
SESSION = 500
REBALANCE = 500
P = [("range", b"")]
P_PLUS = [("range", b""), ("roundrobin", b"")]


def protocols(pairs: Iterable[tuple[str, bytes]]) -> list[dict[str, Any]]:
    return [{"name": name, "metadata": metadata} for name, metadata in pairs]


class Ctx:
    """One coordinator, one clock, and every response seen so far."""

    def __init__(
        self,
        config: CoordinatorConfig = STANDARD,
        *,
        owned_partitions: Iterable[int] | None = (0,),
        now_ms: int = 0,
    ) -> None:
        self.config = config
        self.c = GroupCoordinator(
            config, id_source=SequentialIds(), owned_partitions=owned_partitions
        )
        self.now = now_ms
        self._rids = itertools.count(1)
        self.answers: dict[Any, dict[str, Any]] = {}
        self.records: list[dict[str, Any]] = []

    # -- plumbing -----------------------------------------------------------------------------

    def rid(self) -> str:
        return f"r{next(self._rids)}"

    def send(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        request.setdefault("request_id", self.rid())
        out = self.c.handle(request, self.now)
        self._seen(out)
        return out

    def sleep(self, ms: int) -> list[dict[str, Any]]:
        """Advance the mock clock (Kafka's ``timer.advanceClock`` / ``context.sleep``)."""
        self.now += ms
        out = self.c.advance(self.now)
        self._seen(out)
        return out

    def _seen(self, out: list[dict[str, Any]]) -> None:
        for response in out:
            rid = response["request_id"]
            assert rid not in self.answers, f"request {rid!r} answered twice"
            self.answers[rid] = response
        assert not self.c.internal_errors, self.c.internal_errors
        self.records.extend(self.c.drain_records())

    def answer(self, rid: str) -> dict[str, Any] | None:
        return self.answers.get(rid)

    def group(self, group_id: str = GROUP_ID) -> ClassicGroup:
        group = self.c.group(group_id)
        assert group is not None, f"no group {group_id!r}"
        return group

    def rebuilt(self) -> GroupCoordinator:
        """A second coordinator loaded from every record written so far."""
        return GroupCoordinator.from_records(
            self.records, self.config, self.now, owned_partitions=self.c.owned_partitions
        )

    # -- one helper per API (Kafka's field names; returns the rid) -----------------------------

    def join(
        self,
        member_id: str = "",
        *,
        group_id: str = GROUP_ID,
        instance_id: str | None = None,
        protocol_type: str = "consumer",
        protos: list[tuple[str, bytes]] | None = None,
        session: int = SESSION,
        rebalance: int = REBALANCE,
        version: int | None = None,
        client_id: str = "consumer",
    ) -> str:
        rid = self.rid()
        request: dict[str, Any] = {
            "api": "join_group",
            "request_id": rid,
            "group_id": group_id,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "client_id": client_id,
            "client_host": "/127.0.0.1",
            "session_timeout_ms": session,
            "rebalance_timeout_ms": rebalance,
            "protocol_type": protocol_type,
            "protocols": protocols(P if protos is None else protos),
        }
        if version is not None:
            request["api_version"] = version
        self.send(request)
        return rid

    def dynamic_join(self, **kwargs: Any) -> tuple[str, str]:
        """JoinGroup v4+ with member id "" (MEMBER_ID_REQUIRED), then again with the id.
        Returns (member id, rid of the parked second join)."""
        first = self.join("", **kwargs)
        answer = self.answer(first)
        assert answer is not None and answer["error"] == "MEMBER_ID_REQUIRED", answer
        return answer["member_id"], self.join(answer["member_id"], **kwargs)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group_id: str = GROUP_ID,
        instance_id: str | None = None,
        protocol_type: str | None = "consumer",
        protocol_name: str | None = "range",
        version: int | None = None,
    ) -> str:
        rid = self.rid()
        request: dict[str, Any] = {
            "api": "sync_group",
            "request_id": rid,
            "group_id": group_id,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "generation_id": generation,
            "protocol_type": protocol_type,
            "protocol_name": protocol_name,
            "assignments": [
                {"member_id": m, "assignment": a} for m, a in (assignments or {}).items()
            ],
        }
        if version is not None:
            request["api_version"] = version
        self.send(request)
        return rid

    def heartbeat(
        self,
        member_id: str,
        generation: int,
        *,
        group_id: str = GROUP_ID,
        instance_id: str | None = None,
    ) -> str:
        rid = self.rid()
        self.send(
            {
                "api": "heartbeat",
                "request_id": rid,
                "group_id": group_id,
                "member_id": member_id,
                "group_instance_id": instance_id,
                "generation_id": generation,
            }
        )
        return rid

    def leave(
        self,
        members: list[tuple[str, str | None]],
        *,
        group_id: str = GROUP_ID,
        version: int | None = None,
    ) -> str:
        """LeaveGroup v3+ with (member_id, group_instance_id) identities, or v0-v2 with one."""
        rid = self.rid()
        request: dict[str, Any] = {"api": "leave_group", "request_id": rid, "group_id": group_id}
        if version is not None and version < 3:
            request["member_id"] = members[0][0]
        else:
            request["members"] = [{"member_id": m, "group_instance_id": i} for m, i in members]
        if version is not None:
            request["api_version"] = version
        self.send(request)
        return rid

    def commit(
        self,
        offsets: dict[tuple[str, int], int | tuple[int, str | None] | tuple[int, str | None, int]],
        *,
        group_id: str = GROUP_ID,
        member_id: str = "",
        generation: int = -1,
        instance_id: str | None = None,
        retention_ms: int | None = None,
        version: int | None = None,
    ) -> str:
        """offsets: (topic, partition) -> offset | (offset, metadata) | (offset, metadata, epoch)."""
        rid = self.rid()
        entries = []
        for (topic, partition), value in offsets.items():
            entry: dict[str, Any] = {"topic": topic, "partition": partition}
            if isinstance(value, tuple):
                entry["offset"] = value[0]
                entry["metadata"] = value[1]
                if len(value) > 2:
                    entry["leader_epoch"] = value[2]
            else:
                entry["offset"] = value
            entries.append(entry)
        request: dict[str, Any] = {
            "api": "offset_commit",
            "request_id": rid,
            "group_id": group_id,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "generation_id": generation,
            "offsets": entries,
        }
        if retention_ms is not None:
            request["retention_time_ms"] = retention_ms
        if version is not None:
            request["api_version"] = version
        self.send(request)
        return rid

    def fetch(
        self,
        partitions: list[tuple[str, int]] | None = None,
        *,
        group_id: str = GROUP_ID,
        require_stable: bool = False,
    ) -> dict[str, Any]:
        rid = self.rid()
        self.send(
            {
                "api": "offset_fetch",
                "request_id": rid,
                "group_id": group_id,
                "partitions": None
                if partitions is None
                else [{"topic": t, "partition": p} for t, p in partitions],
                "require_stable": require_stable,
            }
        )
        answer = self.answer(rid)
        assert answer is not None
        return answer

    def fetched(
        self, partitions: list[tuple[str, int]] | None = None, **kw: Any
    ) -> dict[tuple[str, int], int]:
        """OffsetFetch as {(topic, partition): offset}."""
        answer = self.fetch(partitions, **kw)
        return {(p["topic"], p["partition"]): p["offset"] for p in answer["partitions"]}

    def delete_offsets(
        self, partitions: list[tuple[str, int]], *, group_id: str = GROUP_ID
    ) -> dict[str, Any]:
        rid = self.rid()
        self.send(
            {
                "api": "offset_delete",
                "request_id": rid,
                "group_id": group_id,
                "partitions": [{"topic": t, "partition": p} for t, p in partitions],
            }
        )
        answer = self.answer(rid)
        assert answer is not None
        return answer

    def describe(self, group_id: str = GROUP_ID) -> dict[str, Any]:
        rid = self.rid()
        self.send({"api": "describe_groups", "request_id": rid, "group_id": group_id})
        answer = self.answer(rid)
        assert answer is not None
        return answer

    def delete_group(self, group_id: str = GROUP_ID) -> dict[str, Any]:
        rid = self.rid()
        self.send({"api": "delete_groups", "request_id": rid, "group_id": group_id})
        answer = self.answer(rid)
        assert answer is not None
        return answer

    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> dict[str, Any]:
        rid = self.rid()
        self.send(
            {
                "api": "list_groups",
                "request_id": rid,
                "states_filter": states,
                "types_filter": types,
            }
        )
        answer = self.answer(rid)
        assert answer is not None
        return answer

    # -- composite steps from section 14 -------------------------------------------------------

    def join_and_sync_single(self, **kwargs: Any) -> tuple[str, int]:
        """A dynamic member alone in a new group, joined (51 ms) and synced: (member, gen)."""
        member, rid = self.dynamic_join(**kwargs)
        self.sleep(self.config.group_initial_rebalance_delay_ms + 1)
        joined = self.answer(rid)
        assert joined is not None and joined["error"] is None, joined
        gen = joined["generation_id"]
        synced = self.answer(
            self.sync(
                member, gen, {member: b"assignment"}, group_id=kwargs.get("group_id", GROUP_ID)
            )
        )
        assert synced is not None and synced["error"] is None, synced
        return member, gen

    def static_pair(
        self, protos: list[tuple[str, bytes]] | None = None, **kwargs: Any
    ) -> tuple[str, str]:
        """*pair*: static leader L ("leader") and follower F ("follower") joined with P+ and
        synced: generation 1, Stable. Returns (L's member id, F's member id)."""
        protos = P_PLUS if protos is None else protos
        lead = self.join(instance_id="leader", protos=protos, **kwargs)
        follow = self.join(instance_id="follower", protos=protos, **kwargs)
        self.sleep(self.config.group_initial_rebalance_delay_ms + 1)
        self.sleep(REBALANCE + 1)
        leader_answer, follower_answer = self.answer(lead), self.answer(follow)
        assert leader_answer is not None and follower_answer is not None
        assert leader_answer["error"] is None and follower_answer["error"] is None
        leader, follower = leader_answer["member_id"], follower_answer["member_id"]
        assert leader_answer["leader"] == leader and leader_answer["generation_id"] == 1
        self.sync(
            leader,
            1,
            {leader: b"leader-assignment", follower: b"follower-assignment"},
            instance_id="leader",
        )
        self.sync(follower, 1, instance_id="follower")
        assert self.group().state.value == "Stable"
        return leader, follower


def error(response: dict[str, Any] | None) -> str | None:
    assert response is not None, "no response (yet)"
    return response["error"]


def at_rest_matches_log(ctx: Ctx, group_id: str = GROUP_ID) -> None:
    """A group at rest (Stable or Empty) equals what a load of the log gives."""
    live = ctx.c.group(group_id)
    if live is None or live.state.value not in ("Stable", "Empty"):
        return
    loaded = log.replay(ctx.records, ctx.now).get(group_id)
    assert log.durable_view(loaded) == log.durable_view(live)
