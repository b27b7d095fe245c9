"""The server-side assignors: Kafka's RangeAssignorTest and UniformAssignor tests' cases, plus
properties every assignment must have (a disjoint cover of the subscribed partitions, balance,
stickiness, determinism)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.modern.assignors import (
    MemberSpec,
    PartitionAssignorError,
    java_hash_set_order,
    range_assign,
    subscription_type,
    uniform_assign,
)
from coordinator.modern.model import Assignment, SubscriptionType, assignment_size
from coordinator.topics import uuid_from_bytes
from tests.consumer_groups import BAR, FOO, M1, M2, M3, Context

HOMO, HETERO = SubscriptionType.HOMOGENEOUS, SubscriptionType.HETEROGENEOUS


def spec(
    member_id: str,
    topics: set[str],
    assignment: Assignment | None = None,
    instance_id: str | None = None,
) -> MemberSpec:
    return MemberSpec(member_id, instance_id, frozenset(topics), assignment or {})


def sets(assignment: Assignment) -> dict[str, list[int]]:
    return {t: sorted(p) for t, p in sorted(assignment.items())}


def test_range_gives_consecutive_ranges_and_lines_up_co_partitioned_topics() -> None:
    """testFirstAssignmentThreeMembersTwoTopicsSameSubscriptions."""
    members = [spec("A", {"t1", "t3"}), spec("B", {"t1", "t3"}), spec("C", {"t1", "t3"})]
    result = range_assign(members, HOMO, {"t1": 3, "t3": 2})
    assert sets(result["A"]) == {"t1": [0], "t3": [0]}
    assert sets(result["B"]) == {"t1": [1], "t3": [1]}
    assert sets(result["C"]) == {"t1": [2]}


def test_range_orders_static_members_first_by_instance_id() -> None:
    members = [
        spec("a", {"t"}),
        spec("b", {"t"}, instance_id="z"),
        spec("c", {"t"}, instance_id="y"),
    ]
    result = range_assign(members, HOMO, {"t": 3})
    assert [sets(result[m]) for m in ("c", "b", "a")] == [{"t": [0]}, {"t": [1]}, {"t": [2]}]


def test_range_with_different_subscriptions_counts_subscribers_per_topic() -> None:
    """testFirstAssignmentThreeMembersThreeTopicsDifferentSubscriptions."""
    members = [spec("A", {"t1", "t2"}), spec("B", {"t3"}), spec("C", {"t2", "t3"})]
    result = range_assign(members, HETERO, {"t1": 3, "t2": 3, "t3": 2})
    assert sets(result["A"]) == {"t1": [0, 1, 2], "t2": [0, 1]}
    assert sets(result["B"]) == {"t3": [0]}
    assert sets(result["C"]) == {"t2": [2], "t3": [1]}


# --- uniform: Kafka's OptimizedUniformAssignmentBuilderTest (homogeneous), case by case ------------

#: The topic ids of Kafka's assignor tests.
T1, T2, T3, T4 = (
    "T1-A4s3VTwiI5CTbEp6POw",
    "T2-B4s3VTwiI5YHbPp6YUe",
    "T3-CU8fVTLCz5YMkLoDQsa",
    "T4-Tw9fVTLCz5HbPp6YQsa",
)


def check_valid_and_balanced(members: list[MemberSpec], result: dict[str, Assignment]) -> None:
    """Kafka's ``checkValidityAndBalance``: each member gets only topics it subscribes to, no
    partition twice, and no two members more than one partition apart."""
    by_id = {m.member_id: m for m in members}
    seen: set[tuple[str, int]] = set()
    for member_id, assignment in result.items():
        for topic, parts in assignment.items():
            assert topic in by_id[member_id].subscribed_topic_ids
            for p in parts:
                assert (topic, p) not in seen
                seen.add((topic, p))
    sizes = [assignment_size(a) for a in result.values()]
    assert max(sizes) - min(sizes) <= 1


def test_uniform_one_member_with_no_subscription_gets_nothing() -> None:
    """testOneMemberNoTopicSubscription."""
    assert uniform_assign([spec("A", set())], HOMO, {T1: 3}) == {}


def test_uniform_one_member_subscribed_to_a_missing_topic_fails() -> None:
    """testOneMemberSubscribedToNonexistentTopic."""
    with pytest.raises(PartitionAssignorError, match="doesn't exist in the topic metadata"):
        uniform_assign([spec("A", {T2})], HOMO, {T1: 3})


def test_uniform_first_assignment_two_members_two_topics() -> None:
    """testFirstAssignmentTwoMembersTwoTopicsNoMemberRacks: the unassigned partitions are
    dealt in the order of Kafka's HashSet of topic ids (T3 before T1)."""
    members = [spec("A", {T1, T3}), spec("B", {T1, T3})]
    result = uniform_assign(members, HOMO, {T1: 3, T3: 2})
    assert sets(result["A"]) == {T1: [0], T3: [0, 1]}
    assert sets(result["B"]) == {T1: [1, 2]}
    check_valid_and_balanced(members, result)


def test_uniform_more_members_than_partitions_leaves_one_empty() -> None:
    """testFirstAssignmentNumMembersGreaterThanTotalNumPartitions (homogeneous)."""
    members = [spec("A", {T3}), spec("B", {T3}), spec("C", {T3})]
    result = uniform_assign(members, HOMO, {T3: 2})
    assert {m: sets(a) for m, a in result.items()} == {"A": {T3: [0]}, "B": {T3: [1]}, "C": {}}
    check_valid_and_balanced(members, result)


def test_uniform_large_homogeneous_group_is_valid_and_balanced() -> None:
    """testValidityAndBalanceForLargeSampleSet: 99 topics of 3 partitions, 49 members."""
    topics = {uuid_from_bytes(bytes([i]) * 16): 3 for i in range(1, 100)}
    members = [spec(f"member{i}", set(topics)) for i in range(1, 50)]
    result = uniform_assign(members, HOMO, topics)
    check_valid_and_balanced(members, result)
    assert sum(assignment_size(a) for a in result.values()) == 99 * 3


def test_uniform_rebalances_an_unbalanced_previous_assignment() -> None:
    """testReassignmentForTwoMembersTwoTopicsGivenUnbalancedPrevAssignment."""
    members = [
        spec("A", {T1, T2}, {T1: frozenset({0, 1}), T2: frozenset({0, 1})}),
        spec("B", {T1, T2}, {T1: frozenset({2}), T2: frozenset({2})}),
    ]
    result = uniform_assign(members, HOMO, {T1: 3, T2: 3})
    assert sets(result["A"]) == {T1: [0, 1], T2: [0]}
    assert sets(result["B"]) == {T1: [2], T2: [1, 2]}
    check_valid_and_balanced(members, result)


def test_uniform_deals_added_partitions() -> None:
    """testReassignmentWhenPartitionsAreAddedForTwoMembersTwoTopics."""
    members = [
        spec("A", {T1, T2}, {T1: frozenset({0, 2}), T2: frozenset({0})}),
        spec("B", {T1, T2}, {T1: frozenset({1}), T2: frozenset({1, 2})}),
    ]
    result = uniform_assign(members, HOMO, {T1: 6, T2: 5})
    assert sets(result["A"]) == {T1: [0, 2, 3], T2: [0, 3, 4]}
    assert sets(result["B"]) == {T1: [1, 4, 5], T2: [1, 2]}
    check_valid_and_balanced(members, result)


def test_uniform_gives_a_new_member_what_the_others_have_over_quota() -> None:
    """testReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics."""
    members = [
        spec("A", {T1, T2}, {T1: frozenset({0, 2}), T2: frozenset({0})}),
        spec("B", {T1, T2}, {T1: frozenset({1}), T2: frozenset({1, 2})}),
        spec("C", {T1, T2}),
    ]
    result = uniform_assign(members, HOMO, {T1: 3, T2: 3})
    assert sets(result["A"]) == {T1: [0, 2]}
    assert sets(result["B"]) == {T1: [1], T2: [1]}
    assert sets(result["C"]) == {T2: [0, 2]}
    check_valid_and_balanced(members, result)


def test_uniform_deals_a_removed_members_partitions() -> None:
    """testReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithThreeMembersTwoTopics."""
    members = [
        spec("A", {T1, T2}, {T1: frozenset({0}), T2: frozenset({0})}),
        spec("B", {T1, T2}, {T1: frozenset({1}), T2: frozenset({1})}),
    ]
    result = uniform_assign(members, HOMO, {T1: 3, T2: 3})
    assert sets(result["A"]) == {T1: [0], T2: [0, 2]}
    assert sets(result["B"]) == {T1: [1, 2], T2: [1]}
    check_valid_and_balanced(members, result)


def test_uniform_drops_a_topic_no_longer_subscribed() -> None:
    """testReassignmentWhenOneSubscriptionRemovedAfterInitialAssignmentWithTwoMembersTwoTopics."""
    members = [
        spec("A", {T2}, {T1: frozenset({0}), T2: frozenset({0})}),
        spec("B", {T2}, {T1: frozenset({1}), T2: frozenset({1})}),
    ]
    result = uniform_assign(members, HOMO, {T1: 2, T2: 2})
    assert {m: sets(a) for m, a in result.items()} == {"A": {T2: [0]}, "B": {T2: [1]}}
    check_valid_and_balanced(members, result)


def test_uniform_keeps_what_each_member_has_up_to_its_quota() -> None:
    """UniformHomogeneousAssignmentBuilder: stickiness, then the rest dealt out."""
    before = {"A": {"t": frozenset({0, 1, 2})}, "B": {"t": frozenset({3, 4, 5})}}
    members = [spec("A", {"t"}, before["A"]), spec("B", {"t"}, before["B"]), spec("C", {"t"})]
    result = uniform_assign(members, HOMO, {"t": 6})
    assert sets(result["A"]) == {"t": [0, 1]}
    assert sets(result["B"]) == {"t": [3, 4]}
    assert sets(result["C"]) == {"t": [2, 5]}


def test_java_hash_set_order_is_the_bucket_order_of_kafkas_hash_set() -> None:
    """Java's HashSet<Uuid> of Kafka's test topic ids iterates T2, T4, T3, T1 (buckets 1, 5,
    9, 10 of 16); 13 ids take a table of 32 buckets."""
    assert java_hash_set_order([T1, T2, T3, T4]) == [T2, T4, T3, T1]
    assert java_hash_set_order([T1, T3]) == [T3, T1]
    many = [uuid_from_bytes(bytes([i]) * 16) for i in range(13)]
    assert sorted(java_hash_set_order(many)) == sorted(many)


# --- uniform: Kafka's UniformHeterogeneousAssignmentBuilderTest, case by case ---------------------


def test_uniform_heterogeneous_members_with_no_subscription_get_nothing() -> None:
    """testTwoMembersNoTopicSubscription."""
    assert uniform_assign([spec("A", set()), spec("B", set())], HETERO, {T1: 3}) == {}


def test_uniform_heterogeneous_members_subscribed_to_missing_topics_fail() -> None:
    """testTwoMembersSubscribedToNonexistentTopics."""
    with pytest.raises(PartitionAssignorError, match="doesn't exist in the topic metadata"):
        uniform_assign([spec("A", {T3}), spec("B", {T2})], HETERO, {T1: 3})


def test_uniform_heterogeneous_first_assignment_two_members_two_topics() -> None:
    """testFirstAssignmentTwoMembersTwoTopics."""
    members = [spec("A", {T1, T3}), spec("B", {T3})]
    result = uniform_assign(members, HETERO, {T1: 3, T3: 6})
    assert sets(result["A"]) == {T1: [0, 1, 2], T3: [4]}
    assert sets(result["B"]) == {T3: [0, 1, 2, 3, 5]}


def test_uniform_heterogeneous_more_members_than_partitions() -> None:
    """testFirstAssignmentNumMembersGreaterThanTotalNumPartitions."""
    members = [spec("A", {T3}), spec("B", {T3}), spec("C", {T1})]
    result = uniform_assign(members, HETERO, {T3: 1, T1: 2})
    assert {m: sets(a) for m, a in result.items()} == {
        "A": {T3: [0]},
        "B": {},
        "C": {T1: [0, 1]},
    }


def test_uniform_heterogeneous_rebalances_an_unbalanced_previous_assignment() -> None:
    """testReassignmentForTwoMembersThreeTopicsGivenUnbalancedPrevAssignment."""
    members = [
        spec("A", {T1}, {T1: frozenset({0, 1, 2})}),
        spec("B", {T1, T2}, {T1: frozenset({3}), T2: frozenset({0})}),
        spec(
            "C",
            {T1, T2, T3},
            {T1: frozenset({4, 5}), T2: frozenset({1, 2, 3}), T3: frozenset({0, 1, 2, 3})},
        ),
    ]
    result = uniform_assign(members, HETERO, {T1: 6, T2: 4, T3: 4})
    assert sets(result["A"]) == {T1: [0, 1, 2, 5]}
    assert sets(result["B"]) == {T1: [3], T2: [0, 1, 2, 3]}
    assert sets(result["C"]) == {T1: [4], T3: [0, 1, 2, 3]}


def test_uniform_heterogeneous_deals_added_partitions() -> None:
    """testReassignmentWhenPartitionsAreAddedForTwoMembers."""
    members = [
        spec("A", {T1, T3}, {T1: frozenset({0, 1, 2, 3}), T3: frozenset({0, 1})}),
        spec("B", {T1, T2, T3, T4}, {T2: frozenset({0, 1, 2}), T4: frozenset({0, 1, 2})}),
    ]
    result = uniform_assign(members, HETERO, {T1: 6, T2: 5, T3: 3, T4: 3})
    assert sets(result["A"]) == {T1: [0, 1, 2, 3, 4, 5], T3: [0, 1, 2]}
    assert sets(result["B"]) == {T2: [0, 1, 2, 3, 4], T4: [0, 1, 2]}


def test_uniform_heterogeneous_member_added_and_partitions_added() -> None:
    """testReassignmentWhenOneMemberAddedAndPartitionsAddedTwoMembersTwoTopics."""
    members = [
        spec("A", {T1}, {T1: frozenset({0, 2}), T2: frozenset({0})}),
        spec("B", {T1, T2}, {T1: frozenset({1}), T2: frozenset({1, 2})}),
        spec("C", {T1, T2}),
    ]
    result = uniform_assign(members, HETERO, {T1: 6, T2: 7})
    assert sets(result["A"]) == {T1: [0, 2, 3, 4, 5]}
    assert sets(result["B"]) == {T1: [1], T2: [1, 2, 6]}
    assert sets(result["C"]) == {T2: [0, 3, 4, 5]}


def test_uniform_heterogeneous_member_removed() -> None:
    """testReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithThreeMembersThreeTopics."""
    members = [
        spec("A", {T1, T3}, {T1: frozenset({0, 1, 2}), T3: frozenset({0, 1})}),
        spec("B", {T2}, {T2: frozenset({3, 4, 5, 6})}),
    ]
    result = uniform_assign(members, HETERO, {T1: 3, T2: 8, T3: 3})
    assert sets(result["A"]) == {T1: [0, 1, 2], T3: [0, 1, 2]}
    assert sets(result["B"]) == {T2: list(range(8))}


def test_uniform_heterogeneous_subscription_removed() -> None:
    """testReassignmentWhenOneSubscriptionRemovedAfterInitialAssignmentWithTwoMembersTwoTopics."""
    members = [
        spec("A", {T1}, {T1: frozenset({0, 2}), T2: frozenset({1, 3})}),
        spec("B", {T1, T2}, {T1: frozenset({1}), T2: frozenset({0, 2, 4})}),
    ]
    result = uniform_assign(members, HETERO, {T1: 3, T2: 5})
    assert sets(result["A"]) == {T1: [0, 1, 2]}
    assert sets(result["B"]) == {T2: [0, 1, 2, 3, 4]}


def test_uniform_heterogeneous_balancing_stops_when_a_topic_runs_out() -> None:
    """testReassignmentWhenTopicPartitionsRunOutAndMembersHaveNoPartitions."""
    everything = {T1: frozenset({0, 1}), T2: frozenset({0, 1}), T3: frozenset({0, 1})}
    members = [spec("A", {T1, T2, T3}, everything), spec("B", {T1, T2, T3})]
    result = uniform_assign(members, HETERO, {T1: 2, T2: 2, T3: 2})
    assert sets(result["A"]) == {T2: [0], T3: [0, 1]}
    assert sets(result["B"]) == {T1: [0, 1], T2: [1]}


def test_uniform_heterogeneous_member_without_subscription_gets_nothing() -> None:
    """testFirstAssignmentWithTwoMembersIncludingOneWithoutSubscriptions."""
    result = uniform_assign([spec("A", {T1}), spec("B", set())], HETERO, {T1: 3})
    assert {m: sets(a) for m, a in result.items()} == {"A": {T1: [0, 1, 2]}, "B": {}}


def test_uniform_heterogeneous_is_almost_balanced_with_overlapping_subscriptions() -> None:
    """Kafka's ``balanceTopics`` comment: members 1 and 2 on the first topic, 2 and 3 on the
    second; each topic's subscribers end within one partition of each other."""
    members = [spec("A", {T1}), spec("B", {T1, T2}), spec("C", {T2})]
    result = uniform_assign(members, HETERO, {T1: 14, T2: 16})
    sizes = {m: assignment_size(a) for m, a in result.items()}
    assert abs(sizes["A"] - sizes["B"]) <= 1 and abs(sizes["B"] - sizes["C"]) <= 1
    assert T2 not in result["A"] and T1 not in result["C"]


def test_uniform_drops_partitions_past_a_shrunk_topic() -> None:
    """Kafka never shrinks a topic; here the caller may, and a partition past the end is
    dropped from its owner rather than assigned."""
    for subscription in (HOMO, HETERO):
        members = [
            spec("A", {T1}, {T1: frozenset({0, 1, 4, 5})}),
            spec("B", {T1} if subscription is HOMO else {T1, T2}, {T1: frozenset({2, 3})}),
        ]
        result = uniform_assign(members, subscription, {T1: 4, T2: 0})
        owned = sorted(p for a in result.values() for p in a.get(T1, ()))
        assert owned == [0, 1, 2, 3]


def test_subscription_type_follows_kafkas_counts() -> None:
    """ConsumerGroup.subscriptionType: names subscribed by every member (existing or not) are
    homogeneous; one regex for all, and no names, is homogeneous; any other mix is not."""
    assert subscription_type([["a", "b"], ["b", "a"]], [None, None]) is HOMO
    assert subscription_type([["a", "x"], ["a"]], [None, None]) is HETERO
    assert subscription_type([[], []], [None, ""]) is HOMO
    assert subscription_type([[], []], ["t.*", "t.*"]) is HOMO
    assert subscription_type([[], []], ["t.*", "u.*"]) is HETERO
    assert subscription_type([["a"], ["a"]], ["t.*", "t.*"]) is HETERO
    assert subscription_type([[], ["a"]], ["t.*", None]) is HETERO


# --- in the engine ---------------------------------------------------------------------------------


def test_the_engine_assigns_different_subscriptions_with_the_heterogeneous_builder() -> None:
    """Members on different topics: each topic balanced over its own subscribers."""
    ctx = Context({"foo": 6, "bar": 3})
    ctx.join(M1, ["foo", "bar"])
    ctx.join(M2, ["foo"])
    ctx.join(M3, ["foo"])
    target = ctx.group().target_assignment
    sizes = {m: assignment_size(a) for m, a in target.items()}
    assert sizes == {M1: 3, M2: 3, M3: 3}
    assert set(target[M1]) == {BAR}  # bar's only subscriber takes it, foo goes to the others
    members = [
        MemberSpec(M1, None, frozenset({FOO, BAR}), {}),
        MemberSpec(M2, None, frozenset({FOO}), {}),
        MemberSpec(M3, None, frozenset({FOO}), {}),
    ]
    settled_again = uniform_assign(
        [
            MemberSpec(m.member_id, None, m.subscribed_topic_ids, target[m.member_id])
            for m in members
        ],
        HETERO,
        {FOO: 6, BAR: 3},
    )
    assert settled_again == {m: dict(a) for m, a in target.items()}


def test_member_racks_do_not_change_the_assignment() -> None:
    """Kafka 4's server-side assignors are not rack-aware: the same group with and without rack
    ids gets the same target assignment, with either assignor; the racks are only described."""
    for assignor in ("uniform", "range"):
        targets = []
        for racks in ((None, None, None), ("rack-a", "rack-b", "rack-a")):
            ctx = Context({"foo": 7, "bar": 5})
            for member_id, rack in zip((M1, M2, M3), racks, strict=True):
                ctx.join(member_id, rack_id=rack, server_assignor=assignor)
            targets.append(ctx.group().target_assignment)
            described = ctx.send({"api": "consumer_group_describe"})
            assert sorted(m["rack_id"] or "" for m in described["members"]) == sorted(
                r or "" for r in racks
            )
        assert targets[0] == targets[1]


# --- properties -----------------------------------------------------------------------------------

TOPICS = [T1, T2, T3, T4]
Group = tuple[list[MemberSpec], dict[str, int], SubscriptionType]


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool | None = None) -> Group:
    """Members (with Kafka's subscription type for their subscriptions) holding a disjoint
    current assignment, some of it of topics they no longer subscribe to."""
    partitions = {t: draw(st.integers(0, 8)) for t in TOPICS}
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    common = frozenset(draw(st.sets(st.sampled_from(TOPICS), min_size=1)))
    ids = draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=7, unique=True))
    taken: set[tuple[str, int]] = set()
    members = []
    for member_id in ids:
        topics = common if homogeneous else frozenset(draw(st.sets(st.sampled_from(TOPICS))))
        owned: dict[str, set[int]] = {}
        for t in TOPICS:
            for p in range(partitions[t]):
                if (t, p) not in taken and draw(st.booleans()):
                    taken.add((t, p))
                    owned.setdefault(t, set()).add(p)
        members.append(
            MemberSpec(member_id, None, topics, {t: frozenset(p) for t, p in owned.items()})
        )
    subscription = subscription_type(
        [sorted(m.subscribed_topic_ids) for m in members], [None] * len(members)
    )
    return members, partitions, subscription


def owners(result: dict[str, Assignment]) -> dict[tuple[str, int], str]:
    return {(t, p): m for m, a in result.items() for t, parts in a.items() for p in parts}


def settled(members: list[MemberSpec], result: dict[str, Assignment]) -> list[MemberSpec]:
    """The members holding ``result`` as their current assignment."""
    return [
        MemberSpec(m.member_id, m.instance_id, m.subscribed_topic_ids, result.get(m.member_id, {}))
        for m in members
    ]


@settings(max_examples=300, deadline=None)
@given(groups(), st.randoms(use_true_random=False))
def test_every_assignment_is_a_deterministic_disjoint_cover(group: Group, rnd: Any) -> None:
    """Both assignors: each subscribed partition is assigned exactly once, to a subscriber;
    the same group (members and topics in any order) gives the same assignment."""
    members, partitions, subscription = group
    for assign in (uniform_assign, range_assign):
        result = assign(members, subscription, partitions)
        seen: set[tuple[str, int]] = set()
        for member in members:
            for topic, parts in result.get(member.member_id, {}).items():
                assert topic in member.subscribed_topic_ids  # only what it subscribes to
                for p in parts:
                    assert (topic, p) not in seen  # nobody twice
                    seen.add((topic, p))
        subscribed = {t for m in members for t in m.subscribed_topic_ids}
        assert seen == {(t, p) for t in subscribed for p in range(partitions[t])}  # everything
        shuffled = [
            MemberSpec(
                m.member_id,
                m.instance_id,
                m.subscribed_topic_ids,
                dict(rnd.sample(list(m.assignment.items()), len(m.assignment))),
            )
            for m in rnd.sample(members, len(members))
        ]
        assert assign(shuffled, subscription, dict(reversed(partitions.items()))) == result


@settings(max_examples=300, deadline=None)
@given(groups())
def test_uniform_is_balanced_as_kafka_promises(group: Group) -> None:
    """Homogeneous: no two members more than one partition apart. Heterogeneous, as Kafka's
    ``balanceTopics`` leaves it: within each topic, a subscriber holding one of its partitions
    is at most one partition above the topic's least loaded subscriber; and members whose
    subscriptions overlap no other subscription are within one partition of each other."""
    members, partitions, subscription = group
    result = uniform_assign(members, subscription, partitions)
    size = {m.member_id: assignment_size(result.get(m.member_id, {})) for m in members}
    if subscription is HOMO:
        assert max(size.values()) - min(size.values()) <= 1
        return
    for topic in TOPICS:
        subscribers = [m.member_id for m in members if topic in m.subscribed_topic_ids]
        if not subscribers:
            continue
        least = min(size[m] for m in subscribers)
        for m in subscribers:
            if result.get(m, {}).get(topic):
                assert size[m] - least <= 1, (topic, m, size)
    classes: dict[frozenset[str], list[str]] = {}
    for m in members:
        classes.setdefault(m.subscribed_topic_ids, []).append(m.member_id)
    for topics, ids in classes.items():
        if all(not (topics & other) for other in classes if other != topics):
            assert max(size[m] for m in ids) - min(size[m] for m in ids) <= 1


@settings(max_examples=300, deadline=None)
@given(groups())
def test_uniform_leaves_a_settled_group_as_it_is(group: Group) -> None:
    """A group already holding its assignment gets the same assignment again: no churn."""
    members, partitions, subscription = group
    result = uniform_assign(members, subscription, partitions)
    again = uniform_assign(settled(members, result), subscription, partitions)
    assert {m: sets(a) for m, a in again.items()} == {m: sets(a) for m, a in result.items()}


def _cannot_cascade(members: list[MemberSpec]) -> bool:
    """Homogeneous, or every subscription one topic that no other subscription has: Kafka's
    heterogeneous balancing goes topic by topic, and where a member's subscription spans
    several topics shared with others, a partition taken from one member for the newcomer can
    make another topic move between the members already there (Kafka's own promise is balance
    first, then stickiness)."""
    classes = {m.subscribed_topic_ids for m in members}
    if len(classes) == 1:
        return True
    return all(len(c) <= 1 for c in classes) and not any(
        a & b for a in classes for b in classes if a != b
    )


@settings(max_examples=300, deadline=None)
@given(groups(), st.sampled_from("ABCDEFGHZ"), st.booleans())
def test_uniform_gives_a_joining_member_only_what_balance_needs(
    group: Group, newcomer: str, same: bool
) -> None:
    """Stickiness: a member joining a settled group takes partitions only from the others
    (none moves between the members already there), and only its share."""
    members, partitions, subscription = group
    before = uniform_assign(members, subscription, partitions)
    topics = members[0].subscribed_topic_ids if same else frozenset(TOPICS)
    joined = [*settled(members, before), MemberSpec(newcomer, None, topics, {})]
    if not _cannot_cascade(joined):
        return
    kind = subscription_type([sorted(m.subscribed_topic_ids) for m in joined], [None] * len(joined))
    after = uniform_assign(joined, kind, partitions)
    old, new = owners(before), owners(after)
    moved = {tp for tp, owner in old.items() if new.get(tp) != owner}
    assert all(new[tp] == newcomer for tp in moved)  # nothing moves between the others
    peers = [m.member_id for m in joined if m.subscribed_topic_ids == topics]
    sizes = sorted(assignment_size(after.get(m, {})) for m in peers)
    assert sizes[-1] - sizes[0] <= 1  # and it took no more, and no less, than its share


def test_a_joining_member_may_move_partitions_between_the_others_as_in_kafka() -> None:
    """Kafka's heterogeneous balancing goes topic by topic: with members on several topics,
    a newcomer taking T3 partitions from one member can leave that member to take a T4
    partition from another (found by the property above before it was narrowed)."""
    all_topics = {T1, T2, T3, T4}
    members = [
        spec("a", all_topics, {T3: frozenset({5, 6, 7}), T4: frozenset(range(8))}),
        spec("b", set(), {T2: frozenset({0}), T3: frozenset({2, 3, 4})}),
        spec("c", set(), {T2: frozenset({1}), T3: frozenset({1})}),
        spec("d", all_topics, {T2: frozenset({2}), T3: frozenset({0})}),
        spec("e", all_topics),
    ]
    partitions = {T1: 0, T2: 3, T3: 8, T4: 8}
    before = uniform_assign(members, HETERO, partitions)
    joined = [*settled(members, before), spec("A", all_topics)]
    after = uniform_assign(joined, HETERO, partitions)
    old, new = owners(before), owners(after)
    moved = {tp: (old[tp], new[tp]) for tp in old if new.get(tp) != old[tp]}
    assert any(to != "A" for _, to in moved.values())
    sizes = sorted(assignment_size(after[m]) for m in ("a", "d", "e", "A"))
    assert sizes[-1] - sizes[0] <= 1


def test_the_protocols_benchmark_runs_both_protocols() -> None:
    """``coordinator bench protocols`` at a small size (a smoke test, not a figure)."""
    from coordinator.bench.protocols import compare

    figures = compare((3,))
    consumer, classic = figures["3"]["consumer"], figures["3"]["classic"]
    assert consumer["members"] == classic["members"] == 3
    assert 0 < consumer["simulated_ms"] <= 10_000 and consumer["requests"] >= 3
    assert classic["simulated_ms"] >= 3_000  # Kafka's initial rebalance delay
