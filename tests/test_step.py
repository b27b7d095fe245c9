"""The per-group step: (state, requests, now) -> (state, responses, records, next deadline)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds, step
from coordinator.group.snapshot import decode_group, encode_group
from coordinator.log import records as log
from tests.support import protocols

CONFIG = CoordinatorConfig(group_initial_rebalance_delay_ms=100, group_min_session_timeout_ms=10)


def join(rid: str, group: str, member: str = "", version: int = 9) -> dict[str, Any]:
    return {
        "api": "join_group",
        "request_id": rid,
        "group_id": group,
        "member_id": member,
        "client_id": "c",
        "session_timeout_ms": 1000,
        "rebalance_timeout_ms": 2000,
        "protocol_type": "consumer",
        "protocols": protocols([("range", b"")]),
        "api_version": version,
    }


def test_a_step_creates_the_group_and_says_when_it_needs_the_next_one() -> None:
    result = step(None, "g", [join("r1", "g", version=3)], 0, CONFIG, SequentialIds())
    assert result.responses == []  # parked for the initial rebalance delay
    assert result.group is not None and result.group.state.value == "PreparingRebalance"
    assert result.next_deadline_ms == 100
    assert [r["record_type"] for r in result.records] == ["group_metadata"]
    assert result.records[0]["offset"] is None  # numbered by whoever sees the partition

    later = step(result.group, "g", [], 100, CONFIG, SequentialIds())
    (answer,) = later.responses
    assert (answer["request_id"], answer["error"], answer["generation_id"]) == ("r1", None, 1)
    assert later.group is not None and later.group.state.value == "CompletingRebalance"


def test_a_step_is_deterministic() -> None:
    first = step(None, "g", [join("r1", "g"), join("r2", "g")], 5, CONFIG, SequentialIds())
    again = step(None, "g", [join("r1", "g"), join("r2", "g")], 5, CONFIG, SequentialIds())
    assert first.responses == again.responses and first.records == again.records
    state = first.group
    a = step(copy.deepcopy(state), "g", [], 10_000, CONFIG, SequentialIds())
    b = step(copy.deepcopy(state), "g", [], 10_000, CONFIG, SequentialIds())
    assert (a.responses, a.records, a.next_deadline_ms) == (
        b.responses,
        b.records,
        b.next_deadline_ms,
    )


def test_a_request_for_another_group_or_a_bad_one_is_refused() -> None:
    result = step(None, "g", [join("r1", "other"), {"api": "nope"}], 0, CONFIG, SequentialIds())
    assert [r["error"] for r in result.responses] == ["INVALID_REQUEST", "INVALID_REQUEST"]
    assert result.group is None and result.records == []


def test_steps_and_the_facade_agree() -> None:
    """The same timed requests, once through GroupCoordinator and once through per-group steps
    (as the Spark job runs them), give the same responses and records."""
    timeline: list[tuple[int, dict[str, Any]]] = []
    for group in ("g1", "g2"):
        timeline += [
            (0, join(f"{group}-a", group, version=3)),
            (20, join(f"{group}-b", group, version=3)),
        ]
    timeline += [(150, {"api": "describe_groups", "request_id": "d1", "group_id": "g1"})]
    timeline.sort(key=lambda item: item[0])

    facade = GroupCoordinator(CONFIG, id_source=SequentialIds())
    facade_out: list[dict[str, Any]] = []
    for now, request in timeline:
        facade_out += facade.handle(copy.deepcopy(request), now)
    facade_out += facade.advance(5_000)
    facade_records = facade.drain_records()

    states: dict[str, Any] = {}
    ids = SequentialIds()
    step_out: list[dict[str, Any]] = []
    step_records: list[dict[str, Any]] = []
    for now, request in timeline:
        for group in ("g1", "g2"):  # every group's timers run at each instant, as the facade's do
            batch = [copy.deepcopy(request)] if request["group_id"] == group else []
            result = step(states.get(group), group, batch, now, CONFIG, ids)
            states[group] = result.group
            step_out += result.responses
            step_records += result.records
    for group in ("g1", "g2"):
        result = step(states[group], group, [], 5_000, CONFIG, ids)
        step_out += result.responses
        step_records += result.records

    def by_request(out: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
        return {r["request_id"]: r for r in out}

    assert by_request(step_out) == by_request(facade_out)
    strip = lambda records: sorted(  # noqa: E731
        ({k: v for k, v in r.items() if k != "offset"} for r in records),
        key=lambda r: (r["group_id"], r["timestamp_ms"], repr(r["key"])),
    )
    assert strip(step_records) == strip(facade_records)


# --- requests served at their arrival times ------------------------------------------------------


def heartbeat(rid: str, member: str, generation: int, group: str = "g") -> dict[str, Any]:
    return {
        "api": "heartbeat",
        "request_id": rid,
        "group_id": group,
        "member_id": member,
        "group_instance_id": None,
        "generation_id": generation,
    }


def describe(rid: str, group: str = "g") -> dict[str, Any]:
    return {"api": "describe_groups", "request_id": rid, "group_id": group}


def stable_pair() -> tuple[Any, list[str], int, int]:
    """Two members (sessions of 1000 ms) joined and synced through steps: (group, member ids,
    generation, the time of the last step)."""
    ids = SequentialIds()
    first = step(None, "g", [join("j1", "g"), join("j2", "g")], 0, CONFIG, ids)
    members = [r["member_id"] for r in first.responses]  # JoinGroup v9: MEMBER_ID_REQUIRED
    rejoined = step(
        first.group, "g", [join(f"k{i}", "g", m) for i, m in enumerate(members)], 10, CONFIG, ids
    )
    # The initial rebalance delay (100 ms), extended once since a second member joined in it.
    joined = step(rejoined.group, "g", [], 110, CONFIG, ids)
    if not joined.responses:
        assert joined.next_deadline_ms is not None
        joined = step(joined.group, "g", [], joined.next_deadline_ms, CONFIG, ids)
    assert len(joined.responses) == 2, joined.responses
    generation = joined.responses[0]["generation_id"]
    leader = joined.responses[0]["leader"]
    assignments = [{"member_id": m, "assignment": m.encode()} for m in members]
    syncs = [
        {
            "api": "sync_group",
            "request_id": f"s{i}",
            "group_id": "g",
            "member_id": m,
            "group_instance_id": None,
            "generation_id": generation,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": assignments if m == leader else [],
        }
        for i, m in enumerate(members)
    ]
    assert joined.group is not None and joined.group.clock_ms is not None
    at = joined.group.clock_ms + 10
    synced = step(joined.group, "g", syncs, at, CONFIG, ids)
    assert [r["error"] for r in synced.responses] == [None, None]
    assert synced.group is not None and synced.group.state.value == "Stable"
    return synced.group, members, generation, at


def test_a_heartbeat_that_arrived_before_the_session_deadline_keeps_the_member() -> None:
    """The job lags: a heartbeat reaches the inbox before the member's session deadline but is
    read after it. Served at its arrival time, it keeps the member; served at the batch's time
    (no arrival), the member would have been expired first."""
    group, (a, b), generation, _ = stable_pair()
    sessions = {m: group.timers[f"heartbeat-{m}"].deadline_ms for m in (a, b)}
    first = min(sessions, key=lambda m: sessions[m])
    deadline = sessions[first]
    late = deadline + 900  # the batch that reads the heartbeats runs 0.9 s after the deadline
    beats = [heartbeat("h-a", a, generation), heartbeat("h-b", b, generation)]

    on_time = step(
        copy.deepcopy(group),
        "g",
        beats,
        late,
        CONFIG,
        SequentialIds(),
        [deadline - 5, deadline - 1],
    )
    assert [(r["request_id"], r["error"]) for r in on_time.responses] == [
        ("h-a", None),
        ("h-b", None),
    ]
    assert on_time.group is not None and on_time.group.state.value == "Stable"
    assert list(on_time.group.members) == [a, b]
    assert on_time.records == []  # no rebalance, nothing to log
    # Served at their arrival, answered at the batch's time: their sessions run from the
    # answer, when the members can act on it.
    assert on_time.next_deadline_ms == late + 1_000
    assert on_time.group.clock_ms == late

    read_late = step(copy.deepcopy(group), "g", beats, late, CONFIG, SequentialIds())
    assert {r["request_id"]: r["error"] for r in read_late.responses} == {
        "h-a": "UNKNOWN_MEMBER_ID",
        "h-b": "UNKNOWN_MEMBER_ID",
    }

    # A heartbeat that arrived after the deadline does not save its member.
    beat = heartbeat("h", first, generation)
    too_late = step(
        copy.deepcopy(group), "g", [beat], late, CONFIG, SequentialIds(), [deadline + 1]
    )
    assert too_late.responses[0]["error"] == "UNKNOWN_MEMBER_ID"


def test_timers_fire_between_requests_in_time_order() -> None:
    """A rejoin starts a rebalance whose join purgatory (rebalance timeout 2000 ms) expires
    between a heartbeat and a describe of the next batch: the follower, which never rejoined,
    is removed at the describe's time, before the describe is served."""
    group, (a, b), generation, at = stable_pair()
    rejoin_at = at + 10
    started = step(group, "g", [join("r", "g", a)], rejoin_at, CONFIG, SequentialIds())
    assert started.responses == []  # parked until b rejoins or the purgatory expires
    assert started.group is not None
    assert started.group.timers["join"].deadline_ms == rejoin_at + 2_000
    beat_at, describe_at, now = at + 20, at + 2_500, at + 3_000
    result = step(
        started.group,
        "g",
        [heartbeat("h-b", b, generation), describe("d")],
        now,
        CONFIG,
        SequentialIds(),
        [beat_at, describe_at],
    )
    answers = [(r["request_id"], r["error"]) for r in result.responses]
    # The heartbeat sees the rebalance; the join completes (with a alone) before the describe.
    assert answers == [("h-b", "REBALANCE_IN_PROGRESS"), ("r", None), ("d", None)]
    described = result.responses[2]
    assert described["group_state"] == "CompletingRebalance"
    assert [m["member_id"] for m in described["members"]] == [a]
    assert result.responses[1]["generation_id"] == generation + 1
    # The timer fired at the clock it was advanced to: the describe's arrival.
    assert result.group is not None
    assert result.group.current_state_timestamp_ms == describe_at
    # The timers armed by the completion run from when its answers leave: a's new session.
    assert result.next_deadline_ms == now + 1_000


def test_timers_armed_by_a_late_read_request_run_from_its_answer() -> None:
    """The job lags by more than a session: a new member's JoinGroup waited in the inbox 5 s
    (session 1 s). It is served at its arrival, but the member can only act on its answer,
    which leaves when the step runs: its session counts from then, so the member is not
    expired as soon as it is answered, and its rejoin with the id it was given succeeds."""
    arrived, now = 1_000, 6_000
    ids = SequentialIds()
    first = step(None, "g", [join("j", "g")], now, CONFIG, ids, [arrived])
    (answer,) = first.responses
    assert answer["error"] == "MEMBER_ID_REQUIRED"
    member = answer["member_id"]
    assert first.group is not None
    assert list(first.group.pending_members) == [member]
    assert first.next_deadline_ms == now + 1_000
    # Its rejoin, sent at once and read at once, finds the pending member.
    rejoined = step(first.group, "g", [join("k", "g", member)], now + 50, CONFIG, ids)
    assert rejoined.group is not None and member in rejoined.group.members
    # The record of the group's creation keeps the time the request was served at.
    assert rejoined.group.current_state_timestamp_ms == now + 50


def test_the_clock_never_goes_backwards() -> None:
    """A request that arrived before the group's last step (or a batch whose time is behind the
    group's clock) is served at the group's clock."""
    group, (a, _), generation, at = stable_pair()
    ahead = step(group, "g", [], at + 500, CONFIG, SequentialIds())
    assert ahead.group is not None and ahead.group.clock_ms == at + 500
    commit = {
        "api": "offset_commit",
        "request_id": "c",
        "group_id": "g",
        "member_id": a,
        "generation_id": generation,
        "offsets": [{"topic": "t", "partition": 0, "offset": 7, "metadata": ""}],
    }
    # Arrived at +100 but read after a step at +500; and this batch's time is behind (+400).
    behind = step(ahead.group, "g", [commit], at + 400, CONFIG, SequentialIds(), [at + 100])
    assert behind.responses[0]["error"] is None
    (record,) = behind.records
    assert record["commit_timestamp_ms"] == record["timestamp_ms"] == at + 500
    assert behind.group is not None and behind.group.clock_ms == at + 500


def test_requests_at_one_instant_are_served_together() -> None:
    """Without arrival times (or with equal ones) every request of a step is served at one
    instant, as one batch: a timer one of them arms with no delay fires after them all, at the
    end of the step. Two new members whose initial rebalance delay is 0 join one generation
    (the facade, called once per request, would complete a generation for the first alone)."""
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=10)
    for arrivals in (None, [5, 5]):
        joins = [join("a", "g", version=3), join("b", "g", version=3)]
        done = step(None, "g", joins, 5, config, SequentialIds(), arrivals)
        assert {r["request_id"]: r["generation_id"] for r in done.responses} == {"a": 1, "b": 1}
        assert done.group is not None and done.group.state.value == "CompletingRebalance"
    facade = GroupCoordinator(config, id_source=SequentialIds())
    served = [
        r
        for j in (join("a", "g", version=3), join("b", "g", version=3))
        for r in facade.handle(j, 5)
    ]
    assert [(r["request_id"], r["generation_id"]) for r in served] == [("a", 1)]


def test_arrival_times_must_match_the_requests() -> None:
    with pytest.raises(ValueError, match="2 arrival times for 1 requests"):
        step(None, "g", [join("a", "g")], 0, CONFIG, SequentialIds(), [0, 0])


def test_a_step_with_arrival_times_is_deterministic() -> None:
    group, (a, b), generation, at = stable_pair()
    requests = [heartbeat("h-a", a, generation), join("r", "g", b), describe("d")]
    arrivals = [at + 900, at + 1_500, at + 4_000]
    blob = encode_group(group)
    first = step(decode_group(blob), "g", requests, at + 5_000, CONFIG, SequentialIds(), arrivals)
    again = step(decode_group(blob), "g", requests, at + 5_000, CONFIG, SequentialIds(), arrivals)
    assert (first.responses, first.records, first.next_deadline_ms) == (
        again.responses,
        again.records,
        again.next_deadline_ms,
    )
    assert first.group is not None and again.group is not None
    assert encode_group(first.group) == encode_group(again.group)


# The facade serves each request at its own time (``handle(request, at, answered_ms=...)``): a
# run of per-group steps with arrival times must give exactly what the facade gives for the same
# timeline, told when each batch's answers leave, however the requests are cut into batches and
# however late each batch runs.

TIMELINE_CONFIG = CoordinatorConfig(
    group_initial_rebalance_delay_ms=50,
    group_min_session_timeout_ms=10,
    offsets_retention_check_interval_ms=5_000,
    offsets_retention_minutes=1,
)


def timeline_request(data: st.DataObject, rid: str, facade: GroupCoordinator) -> dict[str, Any]:
    group = facade.group("g")
    members = list(group.members) if group is not None else []
    generation = group.generation_id if group is not None else 0
    member = data.draw(st.sampled_from([*members * 3, "", "bogus"]))  # mostly a real member
    gen = data.draw(st.sampled_from([generation, generation, generation - 1]))
    kind = data.draw(
        st.sampled_from(
            ["join", "join", "heartbeat", "heartbeat", "sync", "leave", "commit", "describe"]
        )
    )
    if kind == "join":
        request = join(rid, "g", member, version=data.draw(st.sampled_from([3, 9])))
        request["session_timeout_ms"] = data.draw(st.sampled_from([100, 1_000, 3_000]))
        request["rebalance_timeout_ms"] = data.draw(st.sampled_from([60, 300]))
        return request
    if kind == "heartbeat":
        return heartbeat(rid, member, gen)
    if kind == "sync":
        if group is not None and group.leader_id is not None and data.draw(st.booleans()):
            member, gen = group.leader_id, generation
        return {
            "api": "sync_group",
            "request_id": rid,
            "group_id": "g",
            "member_id": member,
            "group_instance_id": None,
            "generation_id": gen,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": m, "assignment": m.encode()} for m in members],
        }
    if kind == "leave":
        return {
            "api": "leave_group",
            "request_id": rid,
            "group_id": "g",
            "member_id": member,
            "api_version": 2,
        }
    if kind == "commit":
        return {
            "api": "offset_commit",
            "request_id": rid,
            "group_id": "g",
            "member_id": member,
            "generation_id": gen,
            "offsets": [{"topic": "t", "partition": 0, "offset": len(rid), "metadata": ""}],
        }
    return describe(rid)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_steps_with_arrival_times_give_the_facades_run(data: st.DataObject) -> None:
    facade = GroupCoordinator(TIMELINE_CONFIG, id_source=SequentialIds())
    facade_out: list[dict[str, Any]] = []
    batches: list[tuple[list[dict[str, Any]], list[int], int]] = []
    arrival, now, rids = 0, 0, itertools.count()
    for _ in range(data.draw(st.integers(1, 8), label="batches")):
        # Increasing arrivals; the first may be from before the previous batch ran (it waited
        # for this one, which serves it at the group's clock). Requests at one instant are
        # served together by a step and one by one by the facade (see ``step``), so each
        # request has an instant of its own.
        gaps = data.draw(st.lists(st.integers(1, 400), max_size=6), label="gaps")
        arrival -= data.draw(st.integers(0, 300), label="waited") if gaps else 0
        planned = list(itertools.accumulate(gaps, initial=arrival))[1:]
        # A batch's time never goes back (Spark's batch timestamps, the inbox's horizons).
        lag = data.draw(st.integers(0, 2_500), label="lag")
        # (Room for the instants the requests below may be moved on by.)
        now = max(now, (planned[-1] if planned else arrival) + lag) + len(planned)
        requests: list[dict[str, Any]] = []
        arrivals: list[int] = []
        for index, at in enumerate(planned):
            if index > 0 or facade.group("g") is None:
                # After the first, each request at an instant of its own; and with no group,
                # no clock: the facade's one clock outlives its groups.
                at = max(at, facade.now_ms + (index > 0))
            # As handle would (draw the request from what the facade sees by then).
            facade_out += facade.advance(at, answered_ms=now)
            request = timeline_request(data, f"r{next(rids)}", facade)
            requests.append(request)
            arrivals.append(at)
            facade_out += facade.handle(copy.deepcopy(request), at, answered_ms=now)
            arrival = at
        facade_out += facade.advance(now)
        batches.append((requests, arrivals, now))

    group = None
    ids = SequentialIds()
    step_out: list[dict[str, Any]] = []
    step_records: list[dict[str, Any]] = []
    for requests, arrivals, now in batches:
        result = step(group, "g", copy.deepcopy(requests), now, TIMELINE_CONFIG, ids, arrivals)
        assert not result.internal_errors
        group = result.group
        step_out += result.responses
        step_records += result.records

    assert step_out == facade_out
    event(f"group {'gone' if group is None else group.state.value}")
    if any(r["error"] == "UNKNOWN_MEMBER_ID" and r["api"] == "heartbeat" for r in step_out):
        event("a heartbeat met an expired or unknown member")
    if any(r["api"] == "sync_group" and r["error"] is None for r in step_out):
        event("a sync succeeded")
    facade_records = facade.drain_records()
    unnumbered = lambda records: [  # noqa: E731
        {k: v for k, v in r.items() if k != "offset"} for r in records
    ]
    assert unnumbered(step_records) == unnumbered(facade_records)
    live = facade.group("g")
    assert log.durable_view(group) == log.durable_view(live)
    if group is not None and live is not None:
        assert group.state == live.state
        assert {k: t.deadline_ms for k, t in group.timers.items()} == {
            k: t.deadline_ms for k, t in live.timers.items()
        }
        # State changes only by replaying the records it produced: at rest, a load agrees.
        if group.state.value in ("Stable", "Empty") and step_records:
            loaded = log.replay(step_records, batches[-1][2]).get("g")
            assert log.durable_view(loaded) == log.durable_view(group)


def test_timers_a_step_arms_count_from_when_its_answers_were_delivered() -> None:
    """The caller's answers become readable only after the step (the Spark job: when the
    batch's writes commit, 800 ms after its clock). A session armed by a step with an answer
    tag counts from its clock for now (the earliest deadline, for the caller's wake-up); the
    next step, told when the answers were delivered, moves it to count from then: a member
    that heartbeats 1 s (its session) after it could read its answer is not expired."""
    group, (a, b), generation, at = stable_pair()
    other = group.timers[f"heartbeat-{b}"].deadline_ms
    sweep = group.timers["offset-expiry"].deadline_ms
    beat_at = at + 100
    beat = step(group, "g", [heartbeat("h", a, generation)], beat_at, CONFIG, SequentialIds(),
                answer_tag=7)  # fmt: skip
    assert beat.group is not None and beat.responses[0]["error"] is None
    assert beat.group.timers[f"heartbeat-{a}"].deadline_ms == beat_at + 1_000
    assert beat.group.undelivered is not None
    assert (beat.group.undelivered.answered_ms, beat.group.undelivered.tag) == (beat_at, 7)
    assert beat.next_deadline_ms == min(other, beat_at + 1_000)
    state = encode_group(beat.group)

    # Delivered 800 ms after the step's clock: a's session now ends at beat_at + 1_800; b's,
    # armed by an earlier step, and the offsets sweep stay where they were.
    moved = step(decode_group(state), "g", [], beat_at + 10, CONFIG, SequentialIds(),
                 delivered_ms=beat_at + 800)  # fmt: skip
    assert moved.group is not None and moved.group.undelivered is None
    assert moved.group.timers[f"heartbeat-{a}"].deadline_ms == beat_at + 1_800
    assert moved.group.timers[f"heartbeat-{b}"].deadline_ms == other
    assert moved.group.timers["offset-expiry"].deadline_ms == sweep
    assert moved.next_deadline_ms == other

    # Woken at the earliest deadline, a's session has not ended; it ends 800 ms later.
    wake = beat_at + 1_000
    kept = step(decode_group(state), "g", [heartbeat("hb", b, generation)], wake, CONFIG,
                SequentialIds(), [other - 1], delivered_ms=beat_at + 800)  # fmt: skip
    assert kept.group is not None and list(kept.group.members) == [a, b]
    assert kept.group.state.value == "Stable"
    expired = step(kept.group, "g", [], beat_at + 1_800, CONFIG, SequentialIds())
    assert expired.group is not None and a not in expired.group.members

    # Without a delivery time the session counts from the step's clock, as without a tag.
    undelivered = step(decode_group(state), "g", [heartbeat("hb", b, generation)], wake, CONFIG,
                       SequentialIds(), [other - 1])  # fmt: skip
    assert undelivered.group is not None and a not in undelivered.group.members
    assert undelivered.group.undelivered is None


def test_a_delivery_never_moves_a_timer_back_and_a_step_without_a_tag_records_nothing() -> None:
    group, (a, _), generation, at = stable_pair()
    plain = step(copy.deepcopy(group), "g", [heartbeat("h", a, generation)], at + 5, CONFIG,
                 SequentialIds())  # fmt: skip
    assert plain.group is not None and plain.group.undelivered is None
    tagged = step(group, "g", [heartbeat("h", a, generation)], at + 5, CONFIG, SequentialIds(),
                  answer_tag=1)  # fmt: skip
    assert tagged.group is not None and tagged.group.undelivered is not None
    early = step(tagged.group, "g", [], at + 6, CONFIG, SequentialIds(), delivered_ms=at)
    assert early.group is not None and early.group.undelivered is None
    assert early.group.timers[f"heartbeat-{a}"].deadline_ms == at + 5 + 1_000
    # A step that arms no member's timer leaves none undelivered.
    quiet = step(early.group, "g", [describe("d")], at + 7, CONFIG, SequentialIds(),
                 answer_tag=2)  # fmt: skip
    assert quiet.group is not None and quiet.group.undelivered is None


def test_timers_undelivered_under_the_same_tag_stay_undelivered() -> None:
    """Two steps of one group under one tag (the Spark job: a group loaded from the log, then
    its requests, in one batch): what the first armed waits for the same delivery as what the
    second arms, and both move by it."""
    group, (a, b), generation, at = stable_pair()
    first = step(group, "g", [heartbeat("h1", a, generation)], at + 5, CONFIG, SequentialIds(),
                 answer_tag=3)  # fmt: skip
    assert first.group is not None and first.group.undelivered is not None
    after_seq = first.group.undelivered.after_seq
    second = step(first.group, "g", [heartbeat("h2", b, generation)], at + 5, CONFIG,
                  SequentialIds(), answer_tag=3)  # fmt: skip
    assert second.group is not None and second.group.undelivered is not None
    assert second.group.undelivered.after_seq == after_seq
    delivered = step(second.group, "g", [], at + 6, CONFIG, SequentialIds(),
                     delivered_ms=at + 505)  # fmt: skip
    assert delivered.group is not None
    for member in (a, b):
        assert delivered.group.timers[f"heartbeat-{member}"].deadline_ms == at + 1_505
    assert delivered.next_deadline_ms == at + 1_505


def test_a_rebalance_armed_in_one_step_counts_from_its_delivery() -> None:
    """Not only sessions: the join purgatory a rejoin starts, and the sessions its completion
    arms, count from when their answers were delivered."""
    group, (a, _), _generation, at = stable_pair()
    rejoin_at = at + 10
    started = step(group, "g", [join("r", "g", a)], rejoin_at, CONFIG, SequentialIds(),
                   answer_tag=1)  # fmt: skip
    assert started.group is not None
    assert started.group.timers["join"].deadline_ms == rejoin_at + 2_000
    completed = step(started.group, "g", [], rejoin_at + 20, CONFIG, SequentialIds(),
                     delivered_ms=rejoin_at + 300, answer_tag=2)  # fmt: skip
    assert completed.responses == []  # the purgatory now ends 300 ms later
    assert completed.group is not None and completed.group.undelivered is None
    assert completed.group.timers["join"].deadline_ms == rejoin_at + 2_300
    # b never rejoins: its session (armed before) ends, a's join completes the rebalance.
    done = step(completed.group, "g", [], rejoin_at + 2_300, CONFIG, SequentialIds(),
                answer_tag=3)  # fmt: skip
    assert [r["request_id"] for r in done.responses] == ["r"]
    assert done.group is not None and done.group.undelivered is not None
    assert done.group.timers[f"heartbeat-{a}"].deadline_ms == rejoin_at + 2_300 + 1_000
