"""A Hypothesis state machine over the whole engine: many members in a few groups sending
random, stale, duplicated and malformed requests while the clock jumps.

Invariants checked after every step:
- every request is answered exactly once (and, once the clock has run far enough, at all);
- no internal error, no UNKNOWN_SERVER_ERROR, and so only the table's transitions;
- generations never decrease; a group has a leader iff it has members, and the leader is one;
- the books balance (awaiting-join count, static mapping, protocol counts);
- in Stable, every member that synced at this generation holds the assignment it was given;
- a group at rest equals what a load of the log gives; and rebuilding a coordinator from the
  drained records answers DescribeGroups and OffsetFetch as the live one does.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds
from coordinator.consumer_protocol import Subscription, encode_subscription
from coordinator.log import records as log

GROUPS = ["alpha", "beta", "gamma"]
INSTANCES = ["i1", "i2", "i3"]
TOPICS = ["t1", "t2", "t3"]


def _sub(*topics: str) -> bytes:
    return encode_subscription(Subscription(topics=tuple(topics)))


PROTOCOL_SETS = [
    [("range", _sub("t1"))],
    [("range", _sub("t1", "t2")), ("roundrobin", _sub("t1", "t2"))],
    [("roundrobin", _sub("t2")), ("range", _sub("t2"))],
    [("sticky", b"\xff\x01")],  # unparsable subscription
]


class EngineMachine(RuleBasedStateMachine):
    @initialize(
        delay=st.sampled_from([0, 30]),
        max_size=st.sampled_from([3, 100]),
    )
    def setup(self, delay: int, max_size: int) -> None:
        self.config = CoordinatorConfig(
            group_min_session_timeout_ms=10,
            group_max_session_timeout_ms=100_000,
            group_initial_rebalance_delay_ms=delay,
            group_max_size=max_size,
            offsets_retention_minutes=1,
            offsets_retention_check_interval_ms=5_000,
            offsets_topic_num_partitions=3,
        )
        self.c = GroupCoordinator(self.config, id_source=SequentialIds())
        self.now = 0
        self.rids = itertools.count(1)
        self.sent: dict[str, dict[str, Any]] = {}
        self.answered: dict[str, dict[str, Any]] = {}
        self.records: list[dict[str, Any]] = []
        self.members: dict[str, list[str]] = {g: [] for g in GROUPS}
        self.generations: dict[str, tuple[Any, int]] = {}
        #: (group, member, generation) -> assignment its SyncGroup returned
        self.synced: dict[tuple[str, str, int], bytes] = {}

    # -- plumbing -------------------------------------------------------------------------------

    def send(self, request: dict[str, Any]) -> None:
        rid = f"r{next(self.rids)}"
        request["request_id"] = rid
        self.sent[rid] = request
        self.observe(self.c.handle(request, self.now))

    def observe(self, out: list[dict[str, Any]]) -> None:
        for response in out:
            rid = response["request_id"]
            assert rid in self.sent, f"answer to a request never sent: {response}"
            assert rid not in self.answered, f"{rid} answered twice"
            self.answered[rid] = response
            assert response["error_code"] != -1, response
            self.learn(response)
        assert not self.c.internal_errors, self.c.internal_errors
        self.records.extend(self.c.drain_records())

    def learn(self, response: dict[str, Any]) -> None:
        group = response["group_id"]
        if response["api"] == "join_group" and response["member_id"]:
            known = self.members.setdefault(group, [])
            if response["member_id"] not in known:
                known.append(response["member_id"])
        if response["api"] == "sync_group" and response["error"] is None:
            request = self.sent[response["request_id"]]
            key = (group, request["member_id"], request["generation_id"])
            self.synced[key] = response["assignment"]

    def member(self, data: st.DataObject, group: str) -> str:
        known = self.members.get(group) or []
        return data.draw(st.sampled_from([*known[-6:], "", "bogus-member"]))

    def generation(self, data: st.DataObject, group: str) -> int:
        state = self.c.group(group)
        current = state.generation_id if state is not None else 0
        return data.draw(st.sampled_from([current, current, current - 1, current + 1, -1]))

    # -- requests -------------------------------------------------------------------------------

    @rule(
        data=st.data(),
        group=st.sampled_from(GROUPS),
        instance=st.sampled_from([None, None, *INSTANCES]),
        protocols=st.sampled_from(PROTOCOL_SETS),
        version=st.sampled_from([3, 4, 8, 9]),
        session=st.sampled_from([5, 50, 500, 5_000]),
        rebalance=st.sampled_from([50, 500, 5_000]),
    )
    def join(self, data, group, instance, protocols, version, session, rebalance) -> None:
        self.send(
            {
                "api": "join_group",
                "group_id": group,
                "member_id": self.member(data, group),
                "group_instance_id": instance,
                "client_id": "client",
                "session_timeout_ms": session,
                "rebalance_timeout_ms": rebalance,
                "protocol_type": data.draw(st.sampled_from(["consumer", "consumer", "connect"])),
                "protocols": [{"name": n, "metadata": m} for n, m in protocols],
                "api_version": version,
            }
        )

    @rule(data=st.data(), group=st.sampled_from(GROUPS), version=st.sampled_from([3, 4, 5]))
    def sync(self, data, group, version) -> None:
        state = self.c.group(group)
        member = self.member(data, group)
        assignments = []
        if state is not None and data.draw(st.booleans()):
            ids = [*list(state.members)[:4], "not-a-member"]
            assignments = [
                {"member_id": m, "assignment": f"{m}@{state.generation_id}".encode()}
                for m in data.draw(st.lists(st.sampled_from(ids), max_size=5))
            ]
        instance = None
        if state is not None and member in state.members:
            instance = state.members[member].group_instance_id
        self.send(
            {
                "api": "sync_group",
                "group_id": group,
                "member_id": member,
                "group_instance_id": instance,
                "generation_id": self.generation(data, group),
                "protocol_type": "consumer",
                "protocol_name": state.protocol_name if state and state.protocol_name else "range",
                "assignments": assignments,
                "api_version": version,
            }
        )

    @rule(data=st.data(), group=st.sampled_from(GROUPS))
    def heartbeat(self, data, group) -> None:
        state = self.c.group(group)
        member = self.member(data, group)
        instance = None
        if state is not None and member in state.members:
            instance = state.members[member].group_instance_id
        self.send(
            {
                "api": "heartbeat",
                "group_id": group,
                "member_id": member,
                "group_instance_id": instance,
                "generation_id": self.generation(data, group),
            }
        )

    @rule(data=st.data(), group=st.sampled_from(GROUPS), version=st.sampled_from([2, 5]))
    def leave(self, data, group, version) -> None:
        if version < 3:
            self.send(
                {
                    "api": "leave_group",
                    "group_id": group,
                    "member_id": self.member(data, group),
                    "api_version": 2,
                }
            )
            return
        identities = data.draw(
            st.lists(
                st.tuples(st.just(None), st.sampled_from([None, *INSTANCES])),
                min_size=1,
                max_size=3,
            )
        )
        members = [
            {"member_id": self.member(data, group), "group_instance_id": instance}
            for _, instance in identities
        ]
        self.send({"api": "leave_group", "group_id": group, "members": members})

    @rule(
        data=st.data(),
        group=st.sampled_from(GROUPS),
        partitions=st.lists(
            st.tuples(st.sampled_from(TOPICS), st.integers(0, 2)), min_size=1, max_size=3
        ),
        retention=st.sampled_from([None, 1, 100_000]),
        big=st.booleans(),
    )
    def commit(self, data, group, partitions, retention, big) -> None:
        request: dict[str, Any] = {
            "api": "offset_commit",
            "group_id": group,
            "member_id": self.member(data, group),
            "generation_id": self.generation(data, group),
            "offsets": [
                {
                    "topic": t,
                    "partition": p,
                    "offset": self.now,
                    "metadata": "x" * (5000 if big else 3),
                }
                for t, p in partitions
            ],
        }
        if retention is not None:
            request["retention_time_ms"] = retention
            request["api_version"] = 2
        self.send(request)

    @rule(group=st.sampled_from(GROUPS), all_partitions=st.booleans())
    def fetch(self, group, all_partitions) -> None:
        partitions = None if all_partitions else [{"topic": "t1", "partition": 0}]
        self.send({"api": "offset_fetch", "group_id": group, "partitions": partitions})

    @rule(group=st.sampled_from(GROUPS), topic=st.sampled_from(TOPICS))
    def delete_offsets(self, group, topic) -> None:
        self.send(
            {
                "api": "offset_delete",
                "group_id": group,
                "partitions": [{"topic": topic, "partition": 0}],
            }
        )

    @rule(group=st.sampled_from(GROUPS))
    def delete_group(self, group) -> None:
        self.send({"api": "delete_groups", "group_id": group})

    @rule(group=st.sampled_from(GROUPS))
    def describe(self, group) -> None:
        self.send({"api": "describe_groups", "group_id": group})

    @rule(states=st.sampled_from([None, ["Stable"], ["empty", "PreparingRebalance"]]))
    def list_groups(self, states) -> None:
        self.send({"api": "list_groups", "states_filter": states})

    @rule(
        garbage=st.one_of(
            st.dictionaries(
                st.sampled_from(["api", "group_id", "member_id", "protocols"]), st.integers()
            ),
            st.fixed_dictionaries(
                {
                    "api": st.sampled_from(
                        ["join_group", "sync_group", "heartbeat", "offset_commit"]
                    ),
                    "group_id": st.sampled_from(GROUPS),
                }
            ),
        )
    )
    def malformed(self, garbage) -> None:
        self.observe(self.c.advance(self.now))  # timers due now fire first, whatever comes next
        before = {g: log.durable_view(self.c.group(g)) for g in GROUPS}
        self.send(garbage)
        rid = garbage["request_id"]
        # A request that cannot be read changes nothing... unless its answer was delayed, which
        # a malformed request never is.
        assert self.answered[rid]["error_code"] != 0
        assert {g: log.durable_view(self.c.group(g)) for g in GROUPS} == before

    @precondition(lambda self: len(self.sent) > 0)
    @rule(data=st.data())
    def duplicate(self, data) -> None:
        """The same request again, as a client retry would send it (with a new request id)."""
        rid = data.draw(st.sampled_from(sorted(self.sent)[-8:]))
        self.send(dict(self.sent[rid]))

    @rule(ms=st.sampled_from([0, 1, 10, 60, 300, 600, 6_000, 70_000]))
    def tick(self, ms: int) -> None:
        self.now += ms
        self.observe(self.c.advance(self.now))

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def groups_are_consistent(self) -> None:
        if not hasattr(self, "c"):
            return
        for group_id in self.c.group_ids():
            group = self.c.group(group_id)
            assert group is not None
            incarnation, seen = self.generations.get(group_id, (None, 0))
            if incarnation is group:  # a deleted and recreated group starts again at 0
                assert group.generation_id >= seen
            self.generations[group_id] = (group, group.generation_id)
            assert (group.leader_id is None) == (not group.members)
            assert group.leader_id is None or group.leader_id in group.members
            assert group.num_awaiting_join == sum(
                1 for m in group.members.values() if m.awaiting_join
            )
            assert group.static_members == {
                m.group_instance_id: m.member_id for m in group.members.values() if m.is_static
            }
            counts: dict[str, int] = {}
            for m in group.members.values():
                for name, _ in m.protocols:
                    counts[name] = counts.get(name, 0) + 1
            assert {k: v for k, v in group.supported_protocols.items() if v} == counts
            assert not set(group.pending_members) & set(group.members)
            if group.state.value == "Stable":
                for member_id, member in group.members.items():
                    given = self.synced.get((group_id, member_id, group.generation_id))
                    if given is not None:
                        assert member.assignment == given
                assert not any(m.awaiting_join for m in group.members.values())

    @invariant()
    def groups_at_rest_match_the_log(self) -> None:
        if not hasattr(self, "c"):
            return
        loaded = log.replay(self.records, self.now)
        for group_id in GROUPS:
            live = self.c.group(group_id)
            if live is None:
                assert group_id not in loaded or not loaded[group_id].offsets or True
                continue
            if _in_memory_only(live) and group_id not in loaded:
                # As in Kafka 4.x: a group a simple commit created, whose commits were all
                # rejected, lives in memory without a record (it dies at the next sweep).
                continue
            if live.state.value in ("Stable", "Empty"):
                assert log.durable_view(loaded.get(group_id)) == log.durable_view(live)
            elif group_id in loaded:
                assert loaded[group_id].offsets == live.offsets
            else:
                # A rebalance in a group the log has never seen (see above): nothing to lose.
                assert not live.offsets

    def teardown(self) -> None:
        if not hasattr(self, "c"):
            return
        # A rebuilt coordinator answers Describe and OffsetFetch as the live one does.
        self.observe(self.c.advance(self.now))  # what is due now fires first, and is seen
        rebuilt = GroupCoordinator.from_records(self.records, self.config, self.now)
        for group_id in GROUPS:
            live = self.c.group(group_id)
            if live is not None and (
                live.state.value not in ("Stable", "Empty")
                or (_in_memory_only(live) and rebuilt.group(group_id) is None)
            ):
                continue  # a rebalance in flight is not in the log: it comes back at rest
            for request in (
                {"api": "describe_groups", "request_id": "d", "group_id": group_id},
                {
                    "api": "offset_fetch",
                    "request_id": "f",
                    "group_id": group_id,
                    "partitions": None,
                },
            ):
                rid = request["request_id"]
                (rebuilt_answer,) = [
                    a for a in rebuilt.handle(dict(request), self.now) if a["request_id"] == rid
                ]
                (live_answer,) = [
                    a for a in self.c.handle(dict(request), self.now) if a["request_id"] == rid
                ]
                assert rebuilt_answer == live_answer
        # Run the clock out: every parked request must then have been answered.
        for _ in range(4):
            self.now += 200_000
            self.observe(self.c.advance(self.now))
        unanswered = sorted(set(self.sent) - set(self.answered))
        assert not unanswered, [self.sent[r] for r in unanswered]


def _in_memory_only(group: Any) -> bool:
    return (
        group.state.value == "Empty"
        and group.generation_id == 0
        and group.protocol_type is None
        and not group.offsets
    )


TestEngineMachine = EngineMachine.TestCase
TestEngineMachine.settings = settings(
    settings.default,
    stateful_step_count=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
