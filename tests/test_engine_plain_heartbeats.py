"""The engine's facade serves a plain heartbeat (the commonest request, as the gateway hands it
on) without building its Request, by the step's own plain-heartbeat server; every other request
goes the general way. Over random sequences of heartbeats (valid, stale generation, unknown
member, another group's member, a rebalancing group, static members with and without their
instance id, every version and odd ones, empty, unknown, unowned and loading groups, a consumer
group) mixed with joins, syncs, leaves, commits and the clock jumping, two engines, one with the
plain path and one reading every request through the general field readers and checks, give
exactly the same answers, records, touched groups, timers and group state. The gateway's way
(``GroupCoordinator.heartbeat``: a heartbeat as read off the wire, served in place or declined)
is held to the same, and so is its ``renewal``, kept and used for the same heartbeat again."""

from __future__ import annotations

import heapq
import importlib
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds, requests
from coordinator.context import heartbeat_key
from coordinator.errors import Error
from coordinator.group.snapshot import encode_group
from coordinator.group.timers import Timer, TimerBook
from coordinator.log.partitioning import partition_for
from tests.support import GROUP_ID, SESSION, STANDARD, Ctx

engine_module = importlib.import_module("coordinator.engine")

PARTITIONS = 5
CONFIG = CoordinatorConfig(
    group_min_session_timeout_ms=10,
    group_initial_rebalance_delay_ms=50,
    offsets_topic_num_partitions=PARTITIONS,
)
#: Two classic groups formed first, a consumer group, and ids no group has.
CLASSIC = ("g", "h")
CONSUMER = "cg"


def _group_on_another_partition(taken: set[int]) -> str:
    for n in itertools.count():
        group_id = f"x{n}"
        if partition_for(group_id, PARTITIONS) not in taken:
            return group_id
    raise AssertionError("unreachable")


_TAKEN = {partition_for(g, PARTITIONS) for g in (*CLASSIC, CONSUMER)}
#: A group of a partition this coordinator does not own, and one of a partition loading.
UNOWNED = _group_on_another_partition(_TAKEN)
LOADING = _group_on_another_partition(_TAKEN | {partition_for(UNOWNED, PARTITIONS)})
GROUP_IDS = (*CLASSIC, *CLASSIC, *CLASSIC, CONSUMER, "nobody")
INSTANCES = ("i1", "i2")


def _eager_schedule(
    self: TimerBook, key: str, deadline_ms: int, seq: int, kind: str, payload: Any = None
) -> bool:
    """How timers were armed before they were re-armed in place: every (re-)arm a new timer
    and a heap push, the replaced one's entry left stale."""
    self.timers[key] = Timer(deadline_ms, seq, kind, payload)
    heapq.heappush(self.timer_heap, (deadline_ms, seq, key))
    if len(self.timer_heap) > 64 and len(self.timer_heap) > 4 * len(self.timers):
        self._rebuild_heap()
    return True


class Pair:
    """The same calls on two engines: ``fast`` as shipped, ``general`` with every request read
    by :func:`coordinator.requests.parse_in_full` and served by the general checks; with
    ``eager_timers``, ``general``'s timers are also armed as they were before a re-arm at a
    later deadline changed the timer in place (:func:`_eager_schedule`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, eager_timers: bool = False) -> None:
        self.eager_timers = eager_timers
        owned = set(range(PARTITIONS)) - {partition_for(UNOWNED, PARTITIONS)}
        self.fast = GroupCoordinator(CONFIG, id_source=SequentialIds(), owned_partitions=owned)
        self.general = GroupCoordinator(CONFIG, id_source=SequentialIds(), owned_partitions=owned)
        for engine in (self.fast, self.general):
            engine.begin_loading(partition_for(LOADING, PARTITIONS))
        self.monkeypatch = monkeypatch
        self.now = 0
        self.rids = itertools.count(1)
        self.members: dict[str, list[str]] = {g: [] for g in (*GROUP_IDS, *CLASSIC)}
        self.served_plain = 0
        self.served_in_place = 0
        #: The renewals the heartbeats served in place gave, by what they were read from.
        self.renewals: dict[tuple[Any, ...], Any] = {}
        self.renewed = 0

    def handle(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        if requests.plain_heartbeat_fields(request) is not None:
            self.served_plain += 1
        in_place = self.in_place(request)
        with self.monkeypatch.context() as patch:
            patch.setattr(engine_module, "plain_heartbeat_fields", lambda raw: None)
            patch.setattr(requests, "_plain_heartbeat", lambda raw: None)
            if self.eager_timers:
                patch.setattr(TimerBook, "schedule", _eager_schedule)
            expected = self.general.handle(dict(request), self.now)
        if in_place is None:
            got = self.fast.handle(dict(request), self.now)
            assert got == expected
        else:  # the heartbeat alone, answered with the general way's error
            self.served_in_place += 1
            assert [(a["api"], a["request_id"], a["error_code"]) for a in expected] == [
                ("heartbeat", request["request_id"], int(in_place))
            ]
            got = expected
        self.compare()
        self.learn(got)
        return got

    def in_place(self, request: dict[str, Any]) -> Any:
        """The gateway's way for a heartbeat as read off the wire
        (:meth:`GroupCoordinator.heartbeat`): its answer, or None where it declines (the
        request then goes to :meth:`GroupCoordinator.handle`, as the gateway's does)."""
        version, request_id = request.get("api_version"), request.get("request_id")
        if not (
            request.get("api") == "heartbeat"
            and type(version) is int
            and 0 <= version <= 4
            and type(request_id) is str
            and request_id.startswith("gw-")  # as the gateway numbers them
        ):
            return None
        group_id, member_id = request.get("group_id"), request.get("member_id")
        generation, instance = request.get("generation_id"), request.get("group_instance_id")
        if not (
            type(group_id) is str
            and type(member_id) is str
            and type(generation) is int
            and -(2**31) <= generation < 2**31
            and (instance is None or type(instance) is str)
        ):
            return None
        key = (group_id, member_id, generation, instance)
        renew = self.renewals.get(key)
        if renew is not None:  # the gateway's way for the same heartbeat again
            answer = renew(self.now)
            if answer is not None:
                self.renewed += 1
                return answer
        answer = self.fast.heartbeat(group_id, member_id, generation, self.now, instance)
        if answer is not None:
            self.renewals[key] = self.fast.renewal(group_id, member_id, generation, instance)
            assert self.renewals[key] is not None
        return answer

    def advance(self, ms: int) -> None:
        self.now += ms
        got = self.fast.advance(self.now)
        with self.monkeypatch.context() as patch:
            if self.eager_timers:
                patch.setattr(TimerBook, "schedule", _eager_schedule)
            assert got == self.general.advance(self.now)
        self.compare()
        self.learn(got)

    def learn(self, answers: list[dict[str, Any]]) -> None:
        """The member ids joins give (to heartbeat with)."""
        for answer in answers:
            member_id = answer.get("member_id")
            if answer["api"] in ("join_group", "consumer_group_heartbeat") and member_id:
                known = self.members[answer["group_id"]]
                if member_id not in known:
                    known.append(member_id)

    def compare(self) -> None:
        fast, general = self.fast, self.general
        assert fast.drain_records() == general.drain_records()
        assert fast.drain_touched() == general.drain_touched()
        assert fast.internal_errors == general.internal_errors == []
        assert fast.group_ids() == general.group_ids()
        for group_id in fast.group_ids():
            fast_group, general_group = fast.group(group_id), general.group(group_id)
            assert fast_group is not None and general_group is not None
            assert encode_group(fast_group) == encode_group(general_group)
        assert fast.next_deadline() == general.next_deadline()
        assert fast._registered == general._registered  # the timers the engine will fire
        assert sorted(fast._timer_heap) == sorted(general._timer_heap)

    def rid(self) -> str:
        return f"r{next(self.rids)}"

    def generation(self, group_id: str) -> int:
        group = self.fast.group(group_id)
        return getattr(group, "generation_id", 0) if group is not None else 0


def _join(
    pair: Pair, group_id: str, member_id: str, instance: str | None, session_ms: int = 1_000
) -> None:
    pair.handle(
        {
            "api": "join_group",
            "request_id": pair.rid(),
            "group_id": group_id,
            "api_version": 5,  # a member id at once, and static members
            "member_id": member_id,
            "group_instance_id": instance,
            "session_timeout_ms": session_ms,
            "rebalance_timeout_ms": 300,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        }
    )


def _sync(pair: Pair, group_id: str, member_id: str, instance: str | None) -> None:
    group = pair.fast.group(group_id)
    leader = getattr(group, "leader_id", None)
    pair.handle(
        {
            "api": "sync_group",
            "request_id": pair.rid(),
            "group_id": group_id,
            "member_id": member_id,
            "group_instance_id": instance,
            "generation_id": pair.generation(group_id),
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": m, "assignment": b"a"} for m in pair.members[group_id]]
            if member_id == leader
            else [],
        }
    )


def _form(pair: Pair) -> None:
    """Both classic groups Stable, each with a dynamic and a static member; the consumer group
    with one member."""
    for group_id in CLASSIC:
        _join(pair, group_id, "", None)
        _join(pair, group_id, "", "i1")
    pair.advance(100)  # the initial delay: both joins complete
    for group_id in CLASSIC:
        members = pair.members[group_id]
        _sync(pair, group_id, members[0], None)
        _sync(pair, group_id, members[1], "i1")
    pair.handle(
        {
            "api": "consumer_group_heartbeat",
            "request_id": pair.rid(),
            "group_id": CONSUMER,
            "member_id": "",
            "member_epoch": 0,
            "rebalance_timeout_ms": 5_000,
            "subscribed_topic_names": ["t"],
            "topic_partitions": [],
        }
    )


ODD = object()  # a field left out
#: Each field's usual values (a plain heartbeat), and the odd ones one field may take instead.
ODD_VALUES: dict[str, list[Any]] = {
    "request_id": [7, -3, "\u00e9", "", True, None, 1.5, ODD],
    "group_id": ["", "nobody", UNOWNED, LOADING, CONSUMER, "h\u00e9", 5, None, ODD],
    "member_id": ["", "unknown", "\u00e9", 7, None, ODD],
    "generation_id": [-1, 2**31, True, 1.0, "1", None, ODD],
    "group_instance_id": [*INSTANCES, "", 3, ODD],
    "api_version": [-1, 5, True, 4.0, "4", 2**31, ODD],
}


def _heartbeat(pair: Pair, data: st.DataObject) -> None:
    group_id = data.draw(st.sampled_from(GROUP_IDS), label="group")
    own = pair.members[group_id] or ["m"]
    others = [m for g in CLASSIC for m in pair.members[g]]
    current = pair.generation(group_id)
    request: dict[str, Any] = {
        "api": "heartbeat",
        "request_id": f"gw-{next(pair.rids)}",
        "group_id": group_id,
        "member_id": data.draw(st.sampled_from(own * 3 + others), label="member"),
        # stale, ahead and the current generation
        "generation_id": data.draw(
            st.sampled_from([current] * 4 + [current - 1, current + 1]), label="generation"
        ),
        "group_instance_id": None,
        "api_version": data.draw(st.sampled_from([None, 4, 4, 3, 2, 1, 0]), label="version"),
    }
    if data.draw(st.integers(0, 2), label="odd") == 0:
        field = data.draw(st.sampled_from(sorted(ODD_VALUES)), label="odd field")
        request[field] = data.draw(st.sampled_from(ODD_VALUES[field]), label="odd value")
    request = {k: v for k, v in request.items() if v is not ODD}
    for answer in pair.handle(request):
        if answer["api"] == "heartbeat" and answer["request_id"] == request.get("request_id"):
            event(f"heartbeat answered {answer['error']}")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_plain_heartbeats_are_served_as_the_general_path_serves_them(
    data: st.DataObject,
) -> None:
    _run(Pair(pytest.MonkeyPatch()), data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_timers_re_armed_in_place_fire_as_timers_armed_anew_each_time(
    data: st.DataObject,
) -> None:
    """The same runs against an engine whose timers are armed as before they were re-armed in
    place (a new timer and a heap push on every re-arm): the same answers, records, touched
    groups, registrations and snapshots."""
    _run(Pair(pytest.MonkeyPatch(), eager_timers=True), data)


#: The fields of a heartbeat a renewal is kept by (:meth:`Pair.in_place`).
RENEWED = ("group_id", "member_id", "generation_id", "group_instance_id")


def _run(pair: Pair, data: st.DataObject) -> None:
    _form(pair)
    assert [str(pair.fast.group(g).state.value) for g in CLASSIC] == ["Stable", "Stable"]
    for _ in range(data.draw(st.integers(1, 40), label="steps")):
        action = data.draw(
            st.sampled_from(
                ["heartbeat"] * 8 + ["again"] * 6 + ["advance", "join", "sync", "leave", "commit"]
            ),
            label="action",
        )
        group_id = data.draw(st.sampled_from(CLASSIC), label="of group")
        members = pair.members[group_id]
        if action == "heartbeat":
            _heartbeat(pair, data)
        elif action == "again" and pair.renewals:  # a member's next heartbeat, as it sends it
            renewed = data.draw(st.sampled_from(sorted(pair.renewals, key=repr)), label="again")
            pair.now += data.draw(st.sampled_from([0, 1, 150]), label="after")
            pair.handle(
                {
                    "api": "heartbeat",
                    "request_id": f"gw-{next(pair.rids)}",
                    **dict(zip(RENEWED, renewed, strict=True)),
                    "api_version": data.draw(st.sampled_from([4, 0]), label="again version"),
                }
            )
        elif action == "advance":
            pair.advance(data.draw(st.sampled_from([0, 1, 200, 600, 1_100]), label="ms"))
        elif action == "join":  # a rebalance (a member rejoins), or a new member
            member = data.draw(st.sampled_from([*members, ""]), label="joiner")
            instance = data.draw(st.sampled_from([None, *INSTANCES]), label="joiner instance")
            # a shorter session than before re-arms the member's timer earlier
            session_ms = data.draw(st.sampled_from([1_000, 200, 3_000]), label="session")
            _join(pair, group_id, member, instance, session_ms)
        elif action == "sync" and members:
            member = data.draw(st.sampled_from(members), label="syncer")
            _sync(pair, group_id, member, None)
        elif action == "leave" and members:
            member = data.draw(st.sampled_from(members), label="leaver")
            pair.handle(
                {
                    "api": "leave_group",
                    "request_id": pair.rid(),
                    "group_id": group_id,
                    "members": [{"member_id": member}],
                }
            )
        elif action == "commit":
            pair.handle(
                {
                    "api": "offset_commit",
                    "request_id": pair.rid(),
                    "group_id": group_id,
                    "offsets": [{"topic": "t", "partition": 0, "offset": pair.now}],
                }
            )
        state = pair.fast.group(group_id)
        if state is not None:
            event(f"a heartbeat's group went through {state.state.value}")
    event("some heartbeats took the plain path" if pair.served_plain else "none was plain")
    event("some were served in place" if pair.served_in_place else "none was served in place")
    event("some were renewed" if pair.renewed else "none was renewed")


def test_an_engine_bug_in_a_plain_heartbeat_is_answered_and_kept_as_the_general_path_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A heartbeat whose serving raises: the same UNKNOWN_SERVER_ERROR answer, the same internal
    error noted, and nothing of the failed request kept (no group touched) on both paths."""
    from coordinator.group import membership

    pair = Pair(monkeypatch)
    _form(pair)
    member = pair.members["g"][0]

    def broken(*args: Any) -> Any:
        raise RuntimeError("boom")

    request = {
        "api": "heartbeat",
        "request_id": "gw-1",
        "group_id": "g",
        "api_version": 4,
        "member_id": member,
        "generation_id": pair.generation("g"),
        "group_instance_id": None,
    }
    monkeypatch.setattr(membership, "heartbeat_member", broken)
    got = pair.fast.handle(dict(request), pair.now)
    with monkeypatch.context() as patch:
        patch.setattr(engine_module, "plain_heartbeat_fields", lambda raw: None)
        patch.setattr(requests, "_plain_heartbeat", lambda raw: None)
        expected = pair.general.handle(dict(request), pair.now)
    assert got == expected
    assert got[-1]["error"] == "UNKNOWN_SERVER_ERROR"
    assert got[-1]["error_message"] == "internal error: boom"
    assert pair.fast.internal_errors == pair.general.internal_errors
    assert pair.fast.internal_errors == ["heartbeat 'gw-1': RuntimeError('boom')"]
    assert pair.fast.drain_touched() == pair.general.drain_touched() == set()


def test_a_renewal_serves_the_same_heartbeat_until_anything_else_happens() -> None:
    """``GroupCoordinator.renewal``: the member's session re-armed in place and the answer, at
    each renewal, while nothing but heartbeats served in place happen to its group; nothing
    (None, and nothing done) once a request of the group was handled, a timer of it fired or
    any is due, or the partition began to load: :meth:`heartbeat` then decides afresh."""
    ctx, member, generation = stable()
    engine = ctx.c
    assert engine.renewal(GROUP_ID, member, generation + 1) is None  # not served in place
    assert engine.renewal(GROUP_ID, "nobody", generation) is None
    assert engine.renewal(GROUP_ID, member, generation, "an-instance") is None
    renew = fresh(ctx, member, generation)
    timer = ctx.group().timers[heartbeat_key(member)]

    def renews_at(now: int) -> Any:
        ctx.now = now
        engine.drain_touched()
        seq, deadline = timer.seq, timer.deadline_ms
        answer = renew(now)
        if answer is None:  # nothing done
            assert (timer.seq, timer.deadline_ms) == (seq, deadline)
            assert not engine.drain_touched()
        else:
            assert (timer.deadline_ms, engine.now_ms) == (now + SESSION, now)
            assert timer.seq > seq and engine.drain_touched() == {GROUP_ID}
        return answer

    start = ctx.now
    assert renews_at(start + 100) is Error.NONE
    # The engine's wake-up for the group is still at an earlier deadline: renewals wait for it
    # as heartbeat does, and an advance that fires nothing leaves them serving.
    assert renews_at(start + 550) is None
    assert engine.heartbeat(GROUP_ID, member, generation, start + 550) is None
    assert engine.advance(start + 550) == []
    assert renews_at(start + 560) is Error.NONE
    assert renews_at(start + 560 + SESSION) is None  # its session is due: handle fires it

    ctx, member, generation = stable()
    renew = fresh(ctx, member, generation)
    ctx.commit({("t", 0): 5}, group_id="second")  # another group's step: it serves on
    assert ctx.c.group("second") is not None  # offsets partition 0, as GROUP_ID
    assert renew(ctx.now + 1) is Error.NONE
    ctx.commit({("t", 0): 5}, member_id=member, generation=generation)  # a request handled
    assert renew(ctx.now + 1) is None
    assert ctx.c.heartbeat(GROUP_ID, member, generation, ctx.now + 1) is Error.NONE

    ctx, member, generation = stable()
    renew = fresh(ctx, member, generation)
    ctx.sleep(SESSION)  # a timer fired: the member's session, and it left the group
    assert ctx.group().members == {}
    assert renew(ctx.now + 1) is None
    assert ctx.c.heartbeat(GROUP_ID, member, generation, ctx.now + 1) is None

    ctx, member, generation = stable()
    ctx.dynamic_join()  # another member joins: the group prepares a rebalance
    renew = fresh(ctx, member, generation)
    assert renew(ctx.now + 1) is Error.REBALANCE_IN_PROGRESS
    assert ctx.c.begin_loading(0)  # the partition loads anew (Kafka's reload)
    assert renew(ctx.now + 2) is None


def stable() -> tuple[Ctx, str, int]:
    """A group of one member, Stable: (context, member id, generation)."""
    ctx = Ctx(STANDARD)
    member, generation = ctx.join_and_sync_single()
    return ctx, member, generation


def fresh(ctx: Ctx, member: str, generation: int) -> Any:
    """The renewal of ``member``'s heartbeat now (which must be served in place)."""
    renew = ctx.c.renewal(GROUP_ID, member, generation)
    assert renew is not None
    return renew
