"""The server-side assignors: Kafka's RangeAssignorTest and UniformAssignor tests' cases, plus
properties every assignment must have (a disjoint cover of the subscribed partitions, balance,
stickiness, determinism)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.modern.assignors import MemberSpec, range_assign, uniform_assign
from coordinator.modern.model import Assignment, SubscriptionType

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


def test_uniform_keeps_what_each_member_has_up_to_its_quota() -> None:
    """UniformHomogeneousAssignmentBuilder: stickiness, then the rest dealt out."""
    before = {"A": {"t": frozenset({0, 1, 2})}, "B": {"t": frozenset({3, 4, 5})}}
    members = [spec("A", {"t"}, before["A"]), spec("B", {"t"}, before["B"]), spec("C", {"t"})]
    result = uniform_assign(members, HOMO, {"t": 6})
    assert sets(result["A"]) == {"t": [0, 1]}
    assert sets(result["B"]) == {"t": [3, 4]}
    assert sets(result["C"]) == {"t": [2, 5]}


def test_uniform_with_different_subscriptions_balances_over_subscribers() -> None:
    members = [spec("A", {"t1"}), spec("B", {"t1", "t2"}), spec("C", {"t2"})]
    result = uniform_assign(members, HETERO, {"t1": 4, "t2": 2})
    sizes = {m: sum(len(p) for p in a.values()) for m, a in result.items()}
    assert sizes == {"A": 2, "B": 2, "C": 2}
    assert "t2" not in result["A"] and "t1" not in result["C"]


# --- properties -----------------------------------------------------------------------------------

TOPICS = ["t1", "t2", "t3"]


@st.composite
def groups(draw: st.DrawFn) -> tuple[list[MemberSpec], dict[str, int], bool]:
    partitions = {t: draw(st.integers(0, 7)) for t in TOPICS}
    homogeneous = draw(st.booleans())
    common = frozenset(draw(st.sets(st.sampled_from(TOPICS), min_size=1)))
    ids = draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True))
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
    return members, partitions, homogeneous


@settings(max_examples=200, deadline=None)
@given(groups())
def test_every_assignment_is_a_disjoint_cover_of_the_subscribed_partitions(group) -> None:  # type: ignore[no-untyped-def]
    members, partitions, homogeneous = group
    subscription = HOMO if homogeneous else HETERO
    if not homogeneous and len({m.subscribed_topic_ids for m in members}) <= 1:
        subscription = HOMO
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
        assert assign(members, subscription, partitions) == result  # deterministic
        if assign is uniform_assign and subscription is HOMO:
            sizes = [sum(len(p) for p in result.get(m.member_id, {}).values()) for m in members]
            assert max(sizes) - min(sizes) <= 1  # balanced


def test_the_protocols_benchmark_runs_both_protocols() -> None:
    """``coordinator bench protocols`` at a small size (a smoke test, not a figure)."""
    from coordinator.bench.protocols import compare

    figures = compare((3,))
    consumer, classic = figures["3"]["consumer"], figures["3"]["classic"]
    assert consumer["members"] == classic["members"] == 3
    assert 0 < consumer["simulated_ms"] <= 10_000 and consumer["requests"] >= 3
    assert classic["simulated_ms"] >= 3_000  # Kafka's initial rebalance delay
