"""The members of ``coordinator bench stream`` (:mod:`coordinator.bench.stream_members`) against
the real engine: they form their groups heartbeating from their join, rejoin when told to, and
the report counts a false expiry only for a member that did everything right.

The engine stands in for the job: a file's requests are served at one time, as the job serves a
file at its arrival; a lagging job is a file served later than it landed."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from coordinator import jsonio
from coordinator.bench.stream_members import (
    STABLE,
    SYNCING,
    Member,
    Members,
    heartbeat_line,
    heartbeat_request,
)
from coordinator.config import CoordinatorConfig
from coordinator.engine import GroupCoordinator

SESSION_MS = 30_000
REBALANCE_MS = 60_000


class Harness:
    """Members, and the engine serving their files. Times are seconds."""

    def __init__(self, groups: Sequence[str], per_group: int) -> None:
        self.engine = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
        self.members = Members(
            [Member(g) for g in groups for _ in range(per_group)], SESSION_MS, REBALANCE_MS
        )
        #: The request ids of each file sent: heartbeats, then JoinGroup and SyncGroup.
        self.files: list[tuple[list[str], list[dict[str, Any]]]] = []

    def send(self, t: float, due: Iterable[int] | None = None) -> list[dict[str, Any]]:
        """The file the bench writes at ``t``: the heartbeats of ``due`` (every member unless
        told) and the JoinGroup and SyncGroup requests due; it lands at ``t``."""
        beats = self.members.heartbeats(range(len(self.members)) if due is None else due)
        self.members.landed([rid for rid, _ in beats], t)
        membership = self.members.membership(t)
        self.files.append(([rid for rid, _ in beats], membership))
        return [json.loads(line) for _, line in beats] + membership

    def serve(self, requests: list[dict[str, Any]], at: float) -> list[dict[str, Any]]:
        """The job serves ``requests`` at ``at``, then fires the timers due (the job fires them
        every batch); the members read the answers at ``at``."""
        now_ms = round(at * 1000)
        answers = [a for request in requests for a in self.engine.handle(request, now_ms)]
        rows = []
        for answer in answers + self.engine.advance(now_ms):
            row = {
                "request_id": answer["request_id"],
                "error_code": answer["error_code"],
                "error": answer["error"],
                "body": json.dumps(answer, default=str),
            }
            rows.append(row)
            if row["request_id"].startswith("h"):
                self.members.on_heartbeat(row["request_id"], row["error_code"], at)
            else:
                self.members.on_membership(row, at)
        return rows

    def run_until_formed(
        self, t: float, limit: int = 20, due: Iterable[int] | None = None
    ) -> float:
        """One file a second, served at once, until every member is stable; the time then."""
        for _ in range(limit):
            if self.members.formed():
                return t
            t += 1.0
            self.serve(self.send(t, due), t)
        raise AssertionError(f"not formed after {limit} files: {self.members.phases()}")


def test_members_form_their_groups_heartbeating_from_their_join():
    h = Harness(["a", "b"], 3)
    t = 0.0
    # Every member joins without an id first; no heartbeat before a JoinGroup is answered.
    first = h.send(t)
    assert [r["api"] for r in first] == ["join_group"] * 6
    assert all(r["member_id"] == "" for r in first)
    h.serve(first, t)
    t = h.run_until_formed(t)
    # A member heartbeats in the file that carries its SyncGroup (its join was answered), as
    # Java's heartbeat thread starts at the JoinGroup's answer.
    syncing = [
        (beats, membership)
        for beats, membership in h.files
        if any(r["api"] == "sync_group" for r in membership)
    ]
    both = [
        {int(r["request_id"][1:].split(".")[0]) for r in membership if r["api"] == "sync_group"}
        & {int(rid[1:].split(".")[0]) for rid in beats}
        for beats, membership in syncing
    ]
    assert any(both)
    assert h.members.phases() == {"joining": 0, "syncing": 0, STABLE: 6}
    events = h.members.events
    assert events.false_expiries == [] and events.expiries == []
    assert {g for _, g, _ in events.generations} == {"a", "b"}
    # Stable: every heartbeat answered NONE, and nothing more to send but heartbeats.
    for _ in range(5):
        t += 1.0
        requests = h.send(t)
        assert {r["api"] for r in requests} == {"heartbeat"}
        assert all(row["error"] is None for row in h.serve(requests, t))
    # Joins served one after another at one time complete a generation with the first member
    # alone (no initial delay), and the others' joins rebalance it: its leader, told
    # REBALANCE_IN_PROGRESS by its SyncGroup, rejoined. Nothing else made a member rejoin.
    assert {c for _, _, c in events.rejoins} <= {"sync:REBALANCE_IN_PROGRESS"}


def test_group_mates_of_a_silent_member_rejoin_and_its_return_is_no_false_expiry():
    h = Harness(["g"], 3)
    t = h.run_until_formed(0.0)
    before = len(h.members.events.rejoins)
    generations = len(h.members.events.generations)
    # Member 0 goes silent past its session; its group-mates heartbeat every second.
    silent_until = t + SESSION_MS / 1000 + 5
    while t < silent_until:
        t += 1.0
        h.serve(h.send(t, due=[1, 2]), t)
    events = h.members.events
    causes = [(i, c) for _, i, c in events.rejoins[before:]]
    # Told REBALANCE_IN_PROGRESS, each group-mate rejoined (JoinGroup, then SyncGroup).
    assert sorted(causes) == [
        (1, "heartbeat:REBALANCE_IN_PROGRESS"),
        (2, "heartbeat:REBALANCE_IN_PROGRESS"),
    ]
    assert len(events.generations) == generations + 1  # one rebalance, both in it
    assert events.false_expiries == []
    # Member 0 speaks again: UNKNOWN_MEMBER_ID after a silence longer than its session is an
    # expiry it earned, not a false one; it joins again as a new member.
    t += 1.0
    h.serve(h.send(t), t)
    assert h.members.phases()[STABLE] == 2
    t = h.run_until_formed(t)
    assert events.false_expiries == []
    assert [i for _, i in events.expiries] == [0]
    assert (0, "heartbeat:UNKNOWN_MEMBER_ID") in [(i, c) for _, i, c in events.rejoins]
    assert h.members.phases()[STABLE] == 3
    assert len(events.generations) == generations + 2  # its return rebalanced the group again


def test_a_member_expired_by_a_lagging_job_is_one_false_expiry_and_rejoins():
    h = Harness(["g"], 2)
    t = h.run_until_formed(0.0)
    for _ in range(3):  # heartbeats on time, answered at once
        t += 1.0
        h.serve(h.send(t), t)
    # The job falls behind: three more files of heartbeats land a second apart, and it serves
    # them 40 s later at its own clock (as a job serving requests at its batch's time does),
    # past every member's session, so each heartbeat is answered UNKNOWN_MEMBER_ID.
    held = []
    for _ in range(3):
        t += 1.0
        held += h.send(t)
    assert {r["api"] for r in held} == {"heartbeat"} and len(held) == 6
    t += 40.0
    answers = h.serve(held, t)
    assert {a["error"] for a in answers} == {"UNKNOWN_MEMBER_ID"}
    events = h.members.events
    # One false expiry per member, not one per heartbeat: the later ones were sent before the
    # member rejoined, and are stale.
    assert sorted(i for _, i in events.false_expiries) == [0, 1]
    assert events.expiries == []
    assert sorted(c for _, _, c in events.rejoins[-2:]) == ["heartbeat:UNKNOWN_MEMBER_ID"] * 2
    # Both join again as new members (no heartbeat until their JoinGroup is answered) and the
    # group forms again; nothing more is counted.
    t = h.run_until_formed(t)
    assert len(events.false_expiries) == 2
    assert h.members.phases()[STABLE] == 2


def test_answers_that_do_not_belong_to_the_member_now_change_nothing():
    h = Harness(["g"], 1)
    t = h.run_until_formed(0.0)
    t += 1.0
    (beat,) = h.send(t)
    # A repeat of an answer, or one to a request the member never sent, is ignored.
    h.members.on_heartbeat("h0.999", 25, t)
    h.members.on_membership({"request_id": "m0.999", "error_code": 25, "body": "{}"}, t)
    h.serve([beat], t)
    h.members.on_heartbeat(beat["request_id"], 25, t)
    assert h.members.events.false_expiries == [] and h.members.events.rejoins == []
    assert h.members.phases() == {"joining": 0, SYNCING: 0, STABLE: 1}


def test_a_heartbeat_line_is_the_encoded_request_for_any_ids():
    odd = ["g", "request-id", 'quo"te', "back\\slash", "nl\n", "caf\u00e9", "\u2603", ""]
    for group_id in odd:
        for member_id in odd:
            for generation in (-1, 0, 7, 2**31 - 1):
                before, after = heartbeat_line(group_id, member_id, generation)
                for rid in ("h0.1", "h12345.67890"):
                    line = before + rid + after
                    assert line == jsonio.dumps(
                        heartbeat_request(rid, group_id, member_id, generation)
                    )
                    assert "\n" not in line


def test_a_members_heartbeat_follows_its_generation_and_id():
    """Each heartbeat's line is the request of the member's id and generation at that moment,
    through a rebalance (new generation) and an expiry (new id)."""
    h = Harness(["g"], 2)
    t = h.run_until_formed(0.0)
    seen: set[tuple[str, int]] = set()

    def check(due: Iterable[int]) -> None:
        for rid, line in h.members.heartbeats(due):
            member = h.members._members[int(rid[1:].split(".")[0])]
            assert json.loads(line) == heartbeat_request(
                rid, "g", member.member_id, member.generation
            )
            seen.add((member.member_id, member.generation))

    check([0, 1])
    t += SESSION_MS / 1000 + 5  # member 1 silent past its session: member 0 rejoins
    h.serve(h.send(t, due=[0]), t)
    t = h.run_until_formed(t, due=[0])
    check([0])
    t += 1.0
    h.serve(h.send(t), t)  # member 1 told UNKNOWN_MEMBER_ID: joins again with a new id
    t = h.run_until_formed(t)
    check([0, 1])
    # The lines followed new ids and new generations both.
    assert len({m for m, _ in seen}) > 2 and len({g for _, g in seen}) > 1
