"""Invariants of consumer groups under any sequence of joins, heartbeats, slow revocations,
leaves, crashes, topic changes and time (a Hypothesis state machine).

The clients behave as Kafka's consumer does: it takes the partitions an answer adds at once,
stops consuming the ones it loses only when it gets round to it (a rule of its own), and reports
what it still consumes in each heartbeat. A client the coordinator has fenced (its session or
rebalance timeout ran out) has given its partitions up by then, as the real client's own timers
make it do. Invariants checked after every step:

- no partition is consumed by two clients at once (revocation before reassignment);
- no partition is owned twice in the coordinator's books (assigned or pending revocation);
- a member's epoch never goes down while it stays in the group, nor does the group epoch;
- the group equals a load of its log, at every step (it changes only by records);
- every request gets exactly one answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from coordinator.log.records import durable_view
from coordinator.modern.model import ConsumerGroup
from tests.consumer_groups import GROUP, Context, assigned

CLIENTS = [f"client{i}" + "x" * 15 for i in range(5)]
TOPIC_SETS = [["foo"], ["bar"], ["foo", "bar"]]


@dataclass
class Client:
    member_id: str
    topics: list[str]
    instance_id: str | None
    epoch: int = 0
    joined: bool = False
    #: What it consumes now, and what the coordinator last told it to have.
    consuming: set[tuple[str, int]] = field(default_factory=set)
    target: set[tuple[str, int]] = field(default_factory=set)

    def owned(self) -> list[dict[str, Any]]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.consuming):
            by_topic.setdefault(topic, []).append(partition)
        return [{"topic_id": t, "partitions": p} for t, p in by_topic.items()]

    def drop(self) -> None:
        self.joined = False
        self.epoch = 0
        self.consuming.clear()
        self.target.clear()


class ConsumerGroupMachine(RuleBasedStateMachine):
    @initialize(assignor=st.sampled_from(["uniform", "range"]))
    def setup(self, assignor: str) -> None:
        self.ctx = Context(topics={"foo": 3, "bar": 2})
        self.assignor = assignor
        self.clients: dict[str, Client] = {}
        self.group_epoch = 0

    # -- the clients ----------------------------------------------------------------------------

    def answer(self, client: Client, response: dict[str, Any]) -> None:
        if response["error"] is not None:
            assert response["error"] in (
                "FENCED_MEMBER_EPOCH",
                "UNKNOWN_MEMBER_ID",
                "UNRELEASED_INSTANCE_ID",
                "GROUP_ID_NOT_FOUND",
            ), response
            client.drop()
            return
        if response["member_epoch"] < 0:
            client.drop()
            return
        if client.joined:
            assert response["member_epoch"] >= client.epoch, "a member's epoch went down"
        client.joined = True
        client.epoch = response["member_epoch"]
        new = assigned(response)
        if new is not None:
            client.target = {(t, p) for t, parts in new.items() for p in parts}
            client.consuming |= client.target  # takes new partitions at once

    @rule(
        index=st.integers(0, len(CLIENTS) - 1),
        topics=st.sampled_from(TOPIC_SETS),
        static=st.booleans(),
    )
    def join(self, index: int, topics: list[str], static: bool) -> None:
        member_id = CLIENTS[index]
        client = self.clients.get(member_id)
        if client is not None and client.joined:
            return
        instance_id = f"instance{index}" if static else None
        if client is None or client.instance_id != instance_id or client.topics != topics:
            client = Client(member_id, topics, instance_id)
            self.clients[member_id] = client
        response = self.ctx.join(
            member_id,
            topics,
            instance_id=instance_id,
            server_assignor=self.assignor,
            rebalance_timeout_ms=20_000,
        )
        self.answer(client, response)

    @rule(index=st.integers(0, len(CLIENTS) - 1), full=st.booleans())
    def heartbeat(self, index: int, full: bool) -> None:
        client = self.clients.get(CLIENTS[index])
        if client is None or not client.joined:
            return
        fields: dict[str, Any] = {"topic_partitions": self.owned_ids(client)}
        if client.instance_id is not None:
            fields["instance_id"] = client.instance_id
        if full:
            fields.update(rebalance_timeout_ms=20_000, subscribed_topic_names=client.topics)
        self.answer(client, self.ctx.heartbeat(client.member_id, client.epoch, **fields))

    @rule(index=st.integers(0, len(CLIENTS) - 1))
    def revoke(self, index: int) -> None:
        """The client stops consuming what it was asked to give up."""
        client = self.clients.get(CLIENTS[index])
        if client is not None:
            client.consuming &= client.target

    @rule(index=st.integers(0, len(CLIENTS) - 1), static_leave=st.booleans())
    def leave(self, index: int, static_leave: bool) -> None:
        client = self.clients.get(CLIENTS[index])
        if client is None or not client.joined:
            return
        fields: dict[str, Any] = {}
        epoch = -1
        if client.instance_id is not None:
            fields["instance_id"] = client.instance_id
            epoch = -2 if static_leave else -1
        client.consuming.clear()
        response = self.ctx.heartbeat(client.member_id, epoch, **fields)
        assert response["error"] is None, response
        client.drop()

    @rule(index=st.integers(0, len(CLIENTS) - 1))
    def crash(self, index: int) -> None:
        """The process dies: it consumes nothing more and says nothing."""
        client = self.clients.pop(CLIENTS[index], None)
        if client is not None:
            client.drop()

    @rule(ms=st.sampled_from([1_000, 10_000, 21_000, 46_000]))
    def sleep(self, ms: int) -> None:
        self.ctx.sleep(ms)
        group = self.ctx.c.group(GROUP)
        members = group.members if isinstance(group, ConsumerGroup) else {}
        for client in self.clients.values():
            if client.joined and client.member_id not in members:
                client.drop()  # fenced: its own timers have stopped it too

    @rule(extra=st.integers(1, 3))
    def grow_foo(self, extra: int) -> None:
        foo = self.ctx.c.topics.by_name("foo")
        assert foo is not None
        self.ctx.set_topics({"foo": foo.partitions + extra, "bar": 2})

    def owned_ids(self, client: Client) -> list[dict[str, Any]]:
        return client.owned()

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def nobody_consumes_a_partition_another_one_consumes(self) -> None:
        seen: dict[tuple[str, int], str] = {}
        for client in self.clients.values():
            for tp in client.consuming:
                assert tp not in seen, f"{tp} consumed by {seen[tp]} and {client.member_id}"
                seen[tp] = client.member_id

    @invariant()
    def the_books_own_each_partition_once(self) -> None:
        group = self.ctx.c.group(GROUP)
        if not isinstance(group, ConsumerGroup):
            return
        owners: dict[tuple[str, int], str] = {}
        for member in group.members.values():
            for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                for topic, parts in assignment.items():
                    for p in parts:
                        assert (topic, p) not in owners
                        owners[(topic, p)] = member.member_id
        assert set(owners) == set(group.partition_epochs)

    @invariant()
    def the_group_epoch_never_goes_down(self) -> None:
        group = self.ctx.c.group(GROUP)
        if isinstance(group, ConsumerGroup):
            assert group.group_epoch >= self.group_epoch
            assert group.assignment_epoch <= group.group_epoch
            self.group_epoch = group.group_epoch

    @invariant()
    def the_group_equals_a_load_of_its_log(self) -> None:
        loaded = self.ctx.reloaded()
        assert durable_view(loaded.group(GROUP)) == durable_view(self.ctx.c.group(GROUP))


# 150 examples find a coordinator that stops waiting for revocations (tried by hand).
ConsumerGroupMachine.TestCase.settings = settings(
    settings.default,
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestConsumerGroupMachine = ConsumerGroupMachine.TestCase


# --- any field of any value: one clear answer, nothing broken ----------------------------------

HEARTBEAT_FIELDS = [
    "member_id",
    "member_epoch",
    "instance_id",
    "rack_id",
    "rebalance_timeout_ms",
    "subscribed_topic_names",
    "subscribed_topic_regex",
    "server_assignor",
    "topic_partitions",
    "api_version",
    "group_id",
]
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.text(max_size=30),
    st.lists(st.one_of(st.text(max_size=5), st.integers(-3, 3), st.none()), max_size=3),
    st.lists(
        st.fixed_dictionaries(
            {
                "topic_id": st.one_of(st.text(max_size=24), st.none()),
                "partitions": st.lists(st.integers(-2, 9), max_size=3),
            }
        ),
        max_size=2,
    ),
    st.sampled_from(["[", "f.*", "", "   ", "uniform", "range", "AAAAAAAAAAAAAAAAAAAAAA"]),
)


@settings(max_examples=300, deadline=None)
@given(
    changes=st.lists(st.tuples(st.sampled_from(HEARTBEAT_FIELDS), ODD_VALUES), max_size=4),
    api=st.sampled_from(["consumer_group_heartbeat", "consumer_group_describe"]),
)
def test_any_heartbeat_or_describe_gets_one_answer_and_breaks_nothing(
    changes: list[tuple[str, Any]], api: str
) -> None:
    ctx = Context(topics={"foo": 3})
    ctx.join(CLIENTS[0], ["foo"])
    before = durable_view(ctx.c.group(GROUP))
    request: dict[str, Any] = {
        "api": api,
        "request_id": "odd",
        "group_id": GROUP,
        "member_id": CLIENTS[0],
        "member_epoch": 1,
    }
    for name, value in changes:
        request[name] = value
    out = ctx.c.handle(request, 1)
    assert not ctx.c.internal_errors, ctx.c.internal_errors
    assert [r["request_id"] for r in out] == ["odd"]
    answer = out[0]
    assert answer["error_code"] != -1, answer  # never an unknown server error
    if answer["error"] is not None and api == "consumer_group_heartbeat":
        assert answer["error_message"], answer
        assert durable_view(ctx.c.group(GROUP)) == before
    ctx.assert_at_rest_equals_load()


# --- the Spark job's way: one step per batch, the state a blob in between ---------------------


@settings(max_examples=60, deadline=None)
@given(
    script=st.lists(
        st.tuples(
            st.integers(0, 2),  # which member
            st.sampled_from(["join", "heartbeat", "leave", "revoke"]),
            st.sampled_from([0, 1, 1_000, 20_000, 50_000]),  # time until the next request
        ),
        min_size=1,
        max_size=25,
    )
)
def test_steps_over_blobs_give_what_the_facade_gives(script: list[tuple[int, str, int]]) -> None:
    """The same requests through the facade and through ``step`` with the group encoded and
    decoded between steps (the job's state store): the same answers, the same records."""
    from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds, step
    from coordinator.group.snapshot import decode_group, encode_group
    from coordinator.topics import TopicImage, TopicMetadata, topic_id_for

    config = CoordinatorConfig()
    topic = topic_id_for("foo")
    image = TopicImage([TopicMetadata(topic, "foo", 4)])
    facade = GroupCoordinator(config, id_source=SequentialIds())
    facade.update_topics(image.as_list(), 0)
    blob: bytes | None = None
    owned: dict[int, list[int]] = {}
    epochs: dict[int, int] = {}
    now = 0
    for n, (who, action, gap) in enumerate(script):
        member_id = CLIENTS[who]
        if action == "revoke":
            owned[who] = owned.get(who, [])[: len(owned.get(who, [])) // 2]
            continue
        request: dict[str, Any] = {
            "api": "consumer_group_heartbeat",
            "request_id": n,
            "group_id": GROUP,
            "member_id": member_id,
            "member_epoch": epochs.get(who, 0),
            "topic_partitions": [{"topic_id": topic, "partitions": owned.get(who, [])}],
        }
        if action == "join":
            request.update(
                member_epoch=0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=["foo"],
                topic_partitions=[],
            )
        elif action == "leave":
            request["member_epoch"] = -1
        expected = facade.handle(dict(request), now)
        facade_records = facade.drain_records()
        group = None if blob is None else decode_group(blob)
        result = step(group, GROUP, [dict(request)], now, config, SequentialIds(), topics=image)
        blob = None if result.group is None else encode_group(result.group)
        strip = lambda records: [(r["key"], r["value"]) for r in records]  # noqa: E731
        assert result.responses == expected
        assert strip(result.records) == strip(facade_records)
        answer = expected[-1]
        if answer["error"] is None and answer["member_epoch"] >= 0:
            epochs[who] = answer["member_epoch"]
            if answer["assignment"] is not None:
                parts = answer["assignment"]["topic_partitions"]
                owned[who] = parts[0]["partitions"] if parts else []
        else:
            epochs.pop(who, None)
            owned.pop(who, None)
        now += gap
