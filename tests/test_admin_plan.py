"""coordinator.admin.groups, its pure parts: argument parsing, describe rows, reset plans and the
requests they send (Kafka's ``ConsumerGroupCommand``)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.admin import groups
from coordinator.admin.groups import GroupsError, GroupView, ResetPlan, ResetSpec
from coordinator.admin.topic_offsets import TopicOffsets

# --- parse_states ---------------------------------------------------------------------------------

VALID = "Valid states are: PreparingRebalance, CompletingRebalance, Stable, Dead, Empty"


def test_parse_states_case_insensitive_and_trimmed():
    assert groups.parse_states("stable") == {"Stable"}
    assert groups.parse_states("EMPTY, preparingrebalance ,CompletingRebalance,dead") == {
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Dead",
    }
    assert groups.parse_states("Stable,stable") == {"Stable"}


@pytest.mark.parametrize("text", ["Stabel", "stable,bogus", "", "Unknown", "Stable;Empty"])
def test_parse_states_error_is_kafkas(text):
    with pytest.raises(GroupsError) as raised:
        groups.parse_states(text)
    assert str(raised.value) == f"Invalid state list '{text}'. {VALID}"


# --- parse_topic_arg ------------------------------------------------------------------------------


def test_parse_topic_arg():
    assert groups.parse_topic_arg("orders") == ("orders", None)
    assert groups.parse_topic_arg("orders:0") == ("orders", [0])
    assert groups.parse_topic_arg("orders:2,0,11") == ("orders", [2, 0, 11])


@pytest.mark.parametrize("arg", ["orders:0:1", ":0", "a:b:c"])
def test_parse_topic_arg_shape_errors(arg):
    with pytest.raises(GroupsError) as raised:
        groups.parse_topic_arg(arg)
    assert str(raised.value) == f"Invalid topic arg '{arg}', expected topic name and partitions"


@pytest.mark.parametrize("arg", ["orders:x", "orders:0,,1", "orders:", "orders:1.5"])
def test_parse_topic_arg_partition_errors(arg):
    with pytest.raises(GroupsError) as raised:
        groups.parse_topic_arg(arg)
    assert str(raised.value) == f"Invalid partition specified in topic arg '{arg}'"


# --- parse_duration_ms (Java's Duration.parse, checked against Java 17) -----------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT15M", 900_000),
        ("P1DT2H", 93_600_000),
        ("PT0.5S", 500),
        ("-PT1M", -60_000),
        ("-PT-1M", 60_000),
        ("pt15m", 900_000),
        ("PT-0.5S", -500),
        ("P-1DT1H", -82_800_000),
        ("P0D", 0),
        ("+PT1S", 1_000),
        ("PT+1M", 60_000),
        ("P2D", 172_800_000),
        ("PT1H30M", 5_400_000),
        ("PT36H", 129_600_000),
        ("P1DT1H1M1.25S", 90_061_250),
        ("PT0.001S", 1),
    ],
)
def test_parse_duration_ms(text, ms):
    assert groups.parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    "text", ["", "P", "PT", "15M", "PT15", "1 hour", "PT1.5M", "P1W", "P1Y", "PTS"]
)
def test_parse_duration_ms_errors(text):
    with pytest.raises(GroupsError) as raised:
        groups.parse_duration_ms(text)
    assert str(raised.value) == (
        f"Text cannot be parsed to a Duration: '{text}' (e.g. PT15M, P1DT2H)"
    )


@pytest.mark.parametrize("text", ["P1DT", "pt", "PT0.1234567891S"])
def test_parse_duration_ms_rejects_what_java_rejects(text):
    # BUG: Java's Duration.parse("P1DT") throws ("check for letter T but no time sections"),
    # as it does for more than 9 fraction digits; parse_duration_ms reads "P1DT" as one day
    # and "PT0.1234567891S" as 123 ms.
    with pytest.raises(GroupsError) as raised:
        groups.parse_duration_ms(text)
    assert str(raised.value) == (
        f"Text cannot be parsed to a Duration: '{text}' (e.g. PT15M, P1DT2H)"
    )


@pytest.mark.parametrize(("text", "ms"), [("PT0,5S", 500), ("PT1.S", 1_000)])
def test_parse_duration_ms_fraction_forms_java_accepts(text, ms):
    # BUG: Java's Duration.parse takes ',' as the decimal separator and 0-9 fraction digits
    # ("PT0,5S" = 500 ms, "PT1.S" = 1 s); parse_duration_ms rejects both.
    assert groups.parse_duration_ms(text) == ms


# --- reset files ----------------------------------------------------------------------------------


def test_parse_reset_file_single_group_format():
    text = "orders,0,10\norders,1,20\n\npay,0,5\n"
    assert groups.parse_reset_file(text, "g") == {
        "g": {("orders", 0): 10, ("orders", 1): 20, ("pay", 0): 5}
    }


def test_parse_reset_file_multi_group_format():
    text = "g1,orders,0,10\ng2,orders,0,7\ng1,orders,1,11\n"
    assert groups.parse_reset_file(text, None) == {
        "g1": {("orders", 0): 10, ("orders", 1): 11},
        "g2": {("orders", 0): 7},
    }
    # A 4-column file names its groups even when one group is asked for.
    assert groups.parse_reset_file(text, "g1") == groups.parse_reset_file(text, None)


def test_parse_reset_file_last_line_for_a_partition_wins():
    assert groups.parse_reset_file("t,0,1\nt,0,2\n", "g") == {"g": {("t", 0): 2}}


def test_parse_reset_file_empty():
    assert groups.parse_reset_file("", "g") == {}
    assert groups.parse_reset_file("\n,,\n", None) == {}


@pytest.mark.parametrize(
    ("text", "single", "message"),
    [
        ("t,0,1\n", None, "reset file line 1: 3 fields: ['t', '0', '1']"),
        ("t,0\n", "g", "reset file line 1: 2 fields: ['t', '0']"),
        ("t,0,1\nt,0,1,2,3\n", "g", "reset file line 2: 5 fields: ['t', '0', '1', '2', '3']"),
        (
            "t,x,1\n",
            "g",
            "reset file line 1: invalid literal for int() with base 10: 'x': ['t', 'x', '1']",
        ),
        (
            "g,t,0,ten\n",
            None,
            "reset file line 1: invalid literal for int() with base 10: 'ten': "
            "['g', 't', '0', 'ten']",
        ),
    ],
)
def test_parse_reset_file_errors(text, single, message):
    with pytest.raises(GroupsError) as raised:
        groups.parse_reset_file(text, single)
    assert str(raised.value) == message


def test_export_csv_single_group_round_trip():
    plan = ResetPlan("g", "Empty", {("orders", 1): 20, ("orders", 0): 10, ("a,b", 2): 3})
    text = groups.export_csv([plan], single_group=True)
    assert text == '"a,b",2,3\norders,0,10\norders,1,20\n'
    assert groups.parse_reset_file(text, "g") == {"g": plan.offsets}


def test_export_csv_multi_group_round_trip():
    plans = [
        ResetPlan("g2", "Empty", {("t", 0): 5}),
        ResetPlan("g1", "Dead", {("t", 1): 7, ("t", 0): 6}),
        ResetPlan("g3", "Stable", {}, refused="live"),
    ]
    text = groups.export_csv(plans, single_group=False)
    assert text == "g2,t,0,5\ng1,t,0,6\ng1,t,1,7\n"
    assert groups.parse_reset_file(text, None) == {
        "g2": {("t", 0): 5},
        "g1": {("t", 0): 6, ("t", 1): 7},
    }


# --- views ------------------------------------------------------------------------------------------


def _member(member_id: str, client: str, host: str, instance: str | None = None) -> dict[str, Any]:
    return {
        "member_id": member_id,
        "group_instance_id": instance,
        "client_id": client,
        "client_host": host,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 60_000,
    }


def _committed(offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], dict[str, Any]]:
    return {
        tp: {"group_id": "g", "topic": tp[0], "partition": tp[1], "committed_offset": o}
        for tp, o in offsets.items()
    }


def view(
    state: str = "Empty",
    offsets: dict[tuple[str, int], int] | None = None,
    *,
    group_id: str = "g",
    members: list[dict[str, Any]] | None = None,
    assignment: dict[str, list[tuple[str, int]]] | None = None,
    protocol: str | None = "range",
) -> GroupView:
    summary = (
        None
        if state == "Dead"
        else {
            "group_id": group_id,
            "state": state,
            "protocol_type": "consumer",
            "protocol_name": protocol,
            "generation_id": 3,
            "members": members or [],
        }
    )
    return GroupView(group_id, state, summary, _committed(offsets or {}), assignment or {})


# orders-0..2: log start 10, 0, 5 and end 100, 50, 60 now; orders-0 also sampled at 1000 and 2000.
TOPIC_OFFSETS = TopicOffsets(
    [
        {
            "topic": "orders",
            "partition": 0,
            "timestamp_ms": 1_000,
            "log_start_offset": 0,
            "log_end_offset": 40,
        },
        {
            "topic": "orders",
            "partition": 0,
            "timestamp_ms": 2_000,
            "log_start_offset": 5,
            "log_end_offset": 70,
        },
        {"topic": "orders", "partition": 0, "log_start_offset": 10, "log_end_offset": 100},
        {"topic": "orders", "partition": 1, "log_start_offset": 0, "log_end_offset": 50},
        {"topic": "orders", "partition": 2, "log_start_offset": 5, "log_end_offset": 60},
    ]
)


def test_group_view_members():
    assert view("Dead").members == []
    assert view("Empty").members == []
    m = _member("m1", "c1", "/h1")
    assert view("Stable", members=[m]).members == [m]


# --- offset_rows ------------------------------------------------------------------------------------


def _stable_view() -> GroupView:
    return view(
        "Stable",
        {("orders", 0): 90, ("orders", 2): -1, ("pay", 0): 4, ("old", 1): 3, ("old", 0): 8},
        members=[_member("small", "c-small", "/h1"), _member("big", "c-big", "/h2", "i2")],
        assignment={
            "small": [("orders", 1)],
            "big": [("pay", 0), ("orders", 2), ("orders", 0)],
            "idle": [],
        },
    )


def test_offset_rows_members_with_most_partitions_first_then_unassigned():
    rows = groups.offset_rows(_stable_view(), TOPIC_OFFSETS)
    assert rows == [
        {
            "group": "g",
            "topic": "pay",
            "partition": 0,
            "current_offset": 4,
            "log_end_offset": None,
            "lag": None,
            "consumer_id": "big",
            "host": "/h2",
            "client_id": "c-big",
        },
        {
            "group": "g",
            "topic": "orders",
            "partition": 0,
            "current_offset": 90,
            "log_end_offset": 100,
            "lag": 10,
            "consumer_id": "big",
            "host": "/h2",
            "client_id": "c-big",
        },
        {
            "group": "g",
            "topic": "orders",
            "partition": 2,
            "current_offset": -1,
            "log_end_offset": 60,
            "lag": None,
            "consumer_id": "big",
            "host": "/h2",
            "client_id": "c-big",
        },
        {
            "group": "g",
            "topic": "orders",
            "partition": 1,
            "current_offset": None,
            "log_end_offset": 50,
            "lag": None,
            "consumer_id": "small",
            "host": "/h1",
            "client_id": "c-small",
        },
        {
            "group": "g",
            "topic": "old",
            "partition": 0,
            "current_offset": 8,
            "log_end_offset": None,
            "lag": None,
            "consumer_id": None,
            "host": None,
            "client_id": None,
        },
        {
            "group": "g",
            "topic": "old",
            "partition": 1,
            "current_offset": 3,
            "log_end_offset": None,
            "lag": None,
            "consumer_id": None,
            "host": None,
            "client_id": None,
        },
    ]


def test_offset_rows_without_topic_offsets_have_no_lag():
    rows = groups.offset_rows(_stable_view(), None)
    assert [(r["topic"], r["partition"], r["log_end_offset"], r["lag"]) for r in rows] == [
        ("pay", 0, None, None),
        ("orders", 0, None, None),
        ("orders", 2, None, None),
        ("orders", 1, None, None),
        ("old", 0, None, None),
        ("old", 1, None, None),
    ]


def test_offset_rows_of_a_group_without_assignment_are_all_unassigned():
    v = view("Empty", {("orders", 1): 45, ("orders", 0): 100})
    rows = groups.offset_rows(v, TOPIC_OFFSETS)
    assert [(r["partition"], r["current_offset"], r["lag"], r["consumer_id"]) for r in rows] == [
        (0, 100, 0, None),
        (1, 45, 5, None),
    ]


def test_offset_rows_member_missing_from_the_summary():
    v = view("Stable", {}, members=[], assignment={"ghost": [("orders", 1)]})
    (row,) = groups.offset_rows(v, TOPIC_OFFSETS)
    assert (row["consumer_id"], row["host"], row["client_id"], row["lag"]) == (
        "ghost",
        None,
        None,
        None,
    )


def test_offset_rows_of_nothing():
    assert groups.offset_rows(view("Dead"), TOPIC_OFFSETS) == []


# --- member_rows and state_row ----------------------------------------------------------------------


def test_member_rows():
    rows = groups.member_rows(_stable_view())
    assert rows == [
        {
            "group": "g",
            "consumer_id": "small",
            "group_instance_id": None,
            "host": "/h1",
            "client_id": "c-small",
            "num_partitions": 1,
            "assignment": [("orders", 1)],
        },
        {
            "group": "g",
            "consumer_id": "big",
            "group_instance_id": "i2",
            "host": "/h2",
            "client_id": "c-big",
            "num_partitions": 3,
            "assignment": [("orders", 0), ("orders", 2), ("pay", 0)],
        },
    ]


def test_member_rows_without_assignment():
    v = view("PreparingRebalance", members=[_member("m", "c", "/h")])
    assert groups.member_rows(v) == [
        {
            "group": "g",
            "consumer_id": "m",
            "group_instance_id": None,
            "host": "/h",
            "client_id": "c",
            "num_partitions": 0,
            "assignment": [],
        }
    ]
    assert groups.member_rows(view("Dead")) == []


def test_state_row():
    assert groups.state_row(_stable_view(), "localhost:9092 (0)") == {
        "group": "g",
        "coordinator": "localhost:9092 (0)",
        "assignment_strategy": "range",
        "state": "Stable",
        "num_members": 2,
    }
    rebalancing = view("CompletingRebalance", members=[_member("m", "c", "/h")])
    assert groups.state_row(rebalancing, "c0") == {
        "group": "g",
        "coordinator": "c0",
        "assignment_strategy": "",
        "state": "CompletingRebalance",
        "num_members": 1,
    }
    assert groups.state_row(view("Dead"), "c0") == {
        "group": "g",
        "coordinator": "c0",
        "assignment_strategy": "",
        "state": "Dead",
        "num_members": 0,
    }


# --- ResetSpec ----------------------------------------------------------------------------------------

SCENARIOS = (
    "Option '--reset-offsets' requires exactly one of the following scenarios: --to-offset, "
    "--shift-by, --to-datetime, --by-duration, --to-earliest, --to-latest, --to-current, "
    "--from-file"
)


@pytest.mark.parametrize(
    ("spec", "scenario"),
    [
        (ResetSpec(to_offset=0), "--to-offset"),
        (ResetSpec(shift_by=0), "--shift-by"),
        (ResetSpec(to_datetime_ms=0), "--to-datetime/--by-duration"),
        (ResetSpec(to_earliest=True), "--to-earliest"),
        (ResetSpec(to_latest=True), "--to-latest"),
        (ResetSpec(to_current=True), "--to-current"),
        (ResetSpec(from_file={}), "--from-file"),
    ],
)
def test_reset_spec_scenario(spec, scenario):
    assert spec.scenario() == scenario


def test_reset_spec_needs_exactly_one_scenario():
    with pytest.raises(GroupsError) as raised:
        ResetSpec(all_topics=True).scenario()
    assert str(raised.value) == SCENARIOS
    with pytest.raises(GroupsError) as raised:
        ResetSpec(all_topics=True, to_offset=1, shift_by=-1, to_latest=True).scenario()
    assert str(raised.value) == SCENARIOS + " (given: --to-offset, --shift-by, --to-latest)"


# --- plan_reset ---------------------------------------------------------------------------------------


def _plan(
    v: GroupView,
    spec: ResetSpec,
    topic_offsets: TopicOffsets | None = TOPIC_OFFSETS,
    base: GroupView | None = None,
) -> tuple[dict[tuple[str, int], int], list[str]]:
    plan = groups.plan_reset(v, spec, topic_offsets, base)
    assert plan.refused is None
    assert (plan.group_id, plan.state) == (v.group_id, v.state)
    return plan.offsets, plan.warnings


@pytest.mark.parametrize("state", ["Stable", "PreparingRebalance", "CompletingRebalance"])
def test_plan_reset_refuses_a_live_group(state):
    v = view(state, {("orders", 0): 5})
    plan = groups.plan_reset(v, ResetSpec(all_topics=True, to_offset=0), TOPIC_OFFSETS)
    assert plan == ResetPlan(
        "g",
        state,
        {},
        [],
        refused=(
            "Assignments can only be reset if the group 'g' is inactive, but the current state "
            f"is {state}."
        ),
    )


def test_plan_reset_refusal_comes_before_scope_checks_but_after_the_scenario_check():
    live = view("Stable")
    plan = groups.plan_reset(live, ResetSpec(to_latest=True), None)  # no scope, no offsets
    assert plan.refused is not None
    assert plan.offsets == {}
    with pytest.raises(GroupsError, match=r"^Option '--reset-offsets' requires exactly one"):
        groups.plan_reset(live, ResetSpec(all_topics=True), None)


def test_plan_reset_needs_a_scope():
    with pytest.raises(GroupsError) as raised:
        groups.plan_reset(view("Empty"), ResetSpec(to_offset=1), TOPIC_OFFSETS)
    assert str(raised.value) == "One of the reset scopes should be defined: --all-topics, --topic."


def test_plan_reset_topic_with_unknown_partitions():
    with pytest.raises(GroupsError) as raised:
        groups.plan_reset(view("Empty"), ResetSpec(topics=("pay",), to_offset=1), TOPIC_OFFSETS)
    assert str(raised.value) == (
        "The partitions of topic 'pay' are not known to the topic offsets given: name them "
        "(--topic pay:0,1,...)"
    )


def test_plan_reset_bad_topic_arg():
    with pytest.raises(GroupsError, match=r"^Invalid partition specified in topic arg 'pay:x'$"):
        groups.plan_reset(view("Empty"), ResetSpec(topics=("pay:x",), to_offset=1), None)


def test_scope_all_topics_is_every_committed_partition():
    v = view("Empty", {("pay", 1): 3, ("orders", 2): 7})
    offsets, warnings = _plan(v, ResetSpec(all_topics=True, to_offset=6), None)
    assert offsets == {("orders", 2): 6, ("pay", 1): 6}
    assert list(offsets) == [("orders", 2), ("pay", 1)]
    assert warnings == []


def test_scope_topic_partitions_from_topic_offsets_and_commits_deduplicated():
    v = view("Dead", {("orders", 7): 1, ("pay", 0): 1})
    spec = ResetSpec(topics=("orders", "orders:1", "pay:3", "pay:3"), to_offset=5)
    offsets, _ = _plan(v, spec, TOPIC_OFFSETS)
    assert sorted(offsets) == [
        ("orders", 0),
        ("orders", 1),
        ("orders", 2),
        ("orders", 7),
        ("pay", 3),
    ]
    # Without topic offsets, a bare topic is its committed partitions.
    offsets, _ = _plan(v, ResetSpec(topics=("orders",), to_offset=5), None)
    assert offsets == {("orders", 7): 5}


def test_plan_to_offset_clamps_to_the_log():
    v = view("Empty", {("orders", 0): 50})
    spec = ResetSpec(topics=("orders", "pay:0"), to_offset=7)
    offsets, warnings = _plan(v, spec)
    # orders-0 starts at 10 (raised), orders-1 is in range, orders-2 starts at 5 (in range),
    # pay-0 is unknown to the topic offsets (kept).
    assert offsets == {("orders", 0): 10, ("orders", 1): 7, ("orders", 2): 7, ("pay", 0): 7}
    assert warnings == [
        "New offset (7) is lower than earliest offset for topic partition orders-0. "
        "Value will be set to 10"
    ]


def test_plan_to_offset_above_the_log_end():
    offsets, warnings = _plan(view("Empty"), ResetSpec(topics=("orders:1,2",), to_offset=55))
    assert offsets == {("orders", 1): 50, ("orders", 2): 55}
    assert warnings == [
        "New offset (55) is higher than latest offset for topic partition orders-1. "
        "Value will be set to 50"
    ]


def test_plan_to_offset_without_topic_offsets():
    offsets, warnings = _plan(view("Empty"), ResetSpec(topics=("x:0,1",), to_offset=123), None)
    assert (offsets, warnings) == ({("x", 0): 123, ("x", 1): 123}, [])
    with pytest.raises(GroupsError) as raised:
        _plan(view("Empty"), ResetSpec(topics=("x:0",), to_offset=-2), None)
    assert str(raised.value) == "New offset (-2) for x-0 is negative"


def test_plan_shift_by_clamps_both_ways():
    v = view("Empty", {("orders", 0): 95, ("orders", 1): 3, ("orders", 2): 30})
    offsets, warnings = _plan(v, ResetSpec(all_topics=True, shift_by=10))
    assert offsets == {("orders", 0): 100, ("orders", 1): 13, ("orders", 2): 40}
    assert warnings == [
        "New offset (105) is higher than latest offset for topic partition orders-0. "
        "Value will be set to 100"
    ]
    offsets, warnings = _plan(v, ResetSpec(all_topics=True, shift_by=-20))
    assert offsets == {("orders", 0): 75, ("orders", 1): 0, ("orders", 2): 10}
    assert warnings == [
        "New offset (-17) is lower than earliest offset for topic partition orders-1. "
        "Value will be set to 0"
    ]


def test_plan_shift_by_without_topic_offsets():
    v = view("Empty", {("t", 0): 5})
    assert _plan(v, ResetSpec(all_topics=True, shift_by=-5), None) == ({("t", 0): 0}, [])
    with pytest.raises(GroupsError, match=r"^New offset \(-1\) for t-0 is negative$"):
        _plan(v, ResetSpec(all_topics=True, shift_by=-6), None)


def test_plan_shift_by_needs_a_committed_offset():
    v = view("Empty", {("orders", 0): 50})
    with pytest.raises(GroupsError) as raised:
        _plan(v, ResetSpec(topics=("orders",), shift_by=1))
    assert str(raised.value) == (
        "Cannot shift offset for partition orders-1 since there is no current committed offset"
    )


def test_plan_shift_by_and_to_current_start_from_the_base():
    now = view("Empty", {("orders", 0): 90, ("orders", 1): 40})
    before = view("Empty", {("orders", 0): 20})
    offsets, _ = _plan(now, ResetSpec(all_topics=True, shift_by=5), base=before)
    assert offsets == {("orders", 0): 25}
    offsets, _ = _plan(now, ResetSpec(topics=("orders:0,1",), to_current=True), base=before)
    assert offsets == {("orders", 0): 20, ("orders", 1): 50}


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (999, {("orders", 0): 0, ("orders", 1): 0, ("orders", 2): 5}),
        (1_000, {("orders", 0): 40, ("orders", 1): 0, ("orders", 2): 5}),
        (1_500, {("orders", 0): 40, ("orders", 1): 0, ("orders", 2): 5}),
        (2_000, {("orders", 0): 70, ("orders", 1): 0, ("orders", 2): 5}),
    ],
)
def test_plan_to_datetime(moment, expected):
    v = view("Empty", {("orders", 0): 1})
    offsets, warnings = _plan(v, ResetSpec(topics=("orders",), to_datetime_ms=moment))
    assert (offsets, warnings) == (expected, [])


def test_plan_to_datetime_needs_topic_offsets_with_the_partition():
    v = view("Empty", {("orders", 0): 1})
    with pytest.raises(GroupsError) as raised:
        _plan(v, ResetSpec(all_topics=True, to_datetime_ms=5), None)
    assert str(raised.value) == (
        "--to-datetime/--by-duration needs the topics' log offsets: give --upstream HOST:PORT "
        "(the cluster that holds them) or --topic-offsets FILE"
    )
    with pytest.raises(GroupsError) as raised:
        _plan(v, ResetSpec(topics=("pay:0",), to_datetime_ms=5))
    assert str(raised.value) == "no log offsets for pay-0 in the topic offsets given"


def test_plan_to_earliest_and_latest():
    v = view("Dead")
    assert _plan(v, ResetSpec(topics=("orders",), to_earliest=True)) == (
        {("orders", 0): 10, ("orders", 1): 0, ("orders", 2): 5},
        [],
    )
    assert _plan(v, ResetSpec(topics=("orders:2,0",), to_latest=True)) == (
        {("orders", 2): 60, ("orders", 0): 100},
        [],
    )


@pytest.mark.parametrize(
    ("spec", "what"),
    [
        (ResetSpec(all_topics=True, to_earliest=True), "--to-earliest"),
        (ResetSpec(all_topics=True, to_latest=True), "--to-latest"),
    ],
)
def test_plan_to_earliest_and_latest_need_topic_offsets(spec, what):
    with pytest.raises(GroupsError) as raised:
        _plan(view("Empty", {("orders", 0): 1}), spec, None)
    assert str(raised.value) == (
        f"{what} needs the topics' log offsets: give --upstream HOST:PORT (the cluster that "
        "holds them) or --topic-offsets FILE"
    )


def test_plan_to_latest_of_an_unknown_partition():
    with pytest.raises(GroupsError) as raised:
        _plan(view("Empty"), ResetSpec(topics=("orders:3",), to_latest=True))
    assert str(raised.value) == "no log offsets for orders-3 in the topic offsets given"


def test_plan_to_current():
    v = view("Empty", {("orders", 0): 3, ("orders", 2): 200})  # not clamped: it is current
    assert _plan(v, ResetSpec(topics=("orders",), to_current=True)) == (
        {("orders", 0): 3, ("orders", 1): 50, ("orders", 2): 200},
        [],
    )


def test_plan_to_current_without_topic_offsets():
    v = view("Empty", {("orders", 0): 3})
    assert _plan(v, ResetSpec(all_topics=True, to_current=True), None) == ({("orders", 0): 3}, [])
    with pytest.raises(GroupsError) as raised:
        _plan(v, ResetSpec(topics=("orders:0,1",), to_current=True), None)
    assert str(raised.value) == (
        "--to-current without a committed offset needs the topics' log offsets: give "
        "--upstream HOST:PORT (the cluster that holds them) or --topic-offsets FILE"
    )


def test_plan_from_file_clamps_and_ignores_the_scope():
    plan_file = {
        "g": {("orders", 1): 70, ("orders", 0): 12, ("pay", 0): 4},
        "other": {("orders", 0): 1},
    }
    v = view("Empty", {("orders", 0): 50})
    offsets, warnings = _plan(v, ResetSpec(from_file=plan_file))
    assert offsets == {("orders", 0): 12, ("orders", 1): 50, ("pay", 0): 4}
    assert warnings == [
        "New offset (70) is higher than latest offset for topic partition orders-1. "
        "Value will be set to 50"
    ]
    offsets, warnings = _plan(v, ResetSpec(from_file=plan_file), None)
    assert offsets == plan_file["g"]
    assert warnings == []


def test_plan_from_file_without_the_group():
    offsets, warnings = _plan(view("Empty"), ResetSpec(from_file={"other": {("t", 0): 1}}))
    assert offsets == {}
    assert warnings == ["No reset plan for group g found"]


def test_plan_from_file_with_a_negative_offset_and_no_log_range():
    with pytest.raises(GroupsError, match=r"^New offset \(-1\) for t-0 is negative$"):
        _plan(view("Empty"), ResetSpec(from_file={"g": {("t", 0): -1}}))


def test_plan_from_an_exported_file_round_trips():
    v = view("Empty", {("orders", 0): 50, ("orders", 1): 20})
    plan = groups.plan_reset(v, ResetSpec(all_topics=True, shift_by=-5), TOPIC_OFFSETS)
    text = groups.export_csv([plan], single_group=True)
    again = groups.plan_reset(
        v, ResetSpec(from_file=groups.parse_reset_file(text, "g")), TOPIC_OFFSETS
    )
    assert again.offsets == plan.offsets == {("orders", 0): 45, ("orders", 1): 15}


# --- the requests ------------------------------------------------------------------------------------


def test_reset_request_is_a_simple_group_commit():
    plan = ResetPlan("g", "Empty", {("t", 1): 7, ("a", 0): 3})
    assert groups.reset_request(plan) == {
        "api": "offset_commit",
        "group_id": "g",
        "member_id": "",
        "group_instance_id": None,
        "generation_id": -1,
        "retention_time_ms": -1,
        "offsets": [
            {"topic": "a", "partition": 0, "offset": 3, "leader_epoch": -1, "metadata": ""},
            {"topic": "t", "partition": 1, "offset": 7, "leader_epoch": -1, "metadata": ""},
        ],
    }


def test_delete_offsets_request_and_scope():
    v = view("Empty", {("orders", 5): 1})
    scope = groups.delete_offsets_scope(v, ["orders", "pay:1,0"], TOPIC_OFFSETS)
    assert scope == [
        ("orders", 0),
        ("orders", 1),
        ("orders", 2),
        ("orders", 5),
        ("pay", 1),
        ("pay", 0),
    ]
    assert groups.delete_offsets_request("g", scope) == {
        "api": "offset_delete",
        "group_id": "g",
        "partitions": [
            {"topic": "orders", "partition": 0},
            {"topic": "orders", "partition": 1},
            {"topic": "orders", "partition": 2},
            {"topic": "orders", "partition": 5},
            {"topic": "pay", "partition": 0},
            {"topic": "pay", "partition": 1},
        ],
    }
    with pytest.raises(GroupsError, match=r"^The partitions of topic 'pay' are not known"):
        groups.delete_offsets_scope(v, ["pay"], None)


# --- the assignment describe shows (the newest GroupMetadata span of a Stable group) ----------------


def _span(generation: int, members: dict[str, list[tuple[str, int]]]) -> dict[str, Any]:
    return {
        "generation_id": generation,
        "members": [
            {
                "member_id": m,
                "assigned_partitions": [{"topic": t, "partition": p} for t, p in tps],
            }
            for m, tps in members.items()
        ],
    }


def test_assignments_only_for_a_stable_group_of_the_same_generation():
    spans = [_span(2, {"old": [("t", 0)]}), _span(3, {"a": [("t", 0), ("t", 1)], "b": []})]
    stable = {"state": "Stable", "generation_id": 3}
    assert groups._assignments(spans, stable) == {"a": [("t", 0), ("t", 1)], "b": []}
    assert groups._assignments(spans, {"state": "Stable", "generation_id": 4}) == {}
    assert groups._assignments(spans, {"state": "CompletingRebalance", "generation_id": 3}) == {}
    assert groups._assignments(spans, None) == {}
    assert groups._assignments([], stable) == {}
