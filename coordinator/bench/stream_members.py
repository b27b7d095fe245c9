"""The members of ``coordinator bench stream``: each one behaves as a Kafka consumer does.

A member joins (JoinGroup without an id, MEMBER_ID_REQUIRED, JoinGroup with it), syncs (the
leader with an empty assignment for every member its JoinGroup answer lists) and heartbeats from
the moment its JoinGroup is answered, through the SyncGroup and on, as the Java client's
heartbeat thread does. It reacts to answers as the Java client does (``AbstractCoordinator``;
:mod:`coordinator.client.member` is our full client):

- a heartbeat answered REBALANCE_IN_PROGRESS while the member is stable: it rejoins (JoinGroup
  with its id, then SyncGroup); a SyncGroup answered so: the same. That is a rebalance;
- ILLEGAL_GENERATION: it rejoins with its id; UNKNOWN_MEMBER_ID: it forgets its id and joins
  again as a new member;
- an answer to a request sent before the member's latest (re)join is stale and changes nothing.

A member sends no heartbeat while its JoinGroup is in flight (as Java's heartbeat thread is
disabled then); when its heartbeats are due is the caller's business (the bench's open-loop
schedules: members in turn at an offered rate, each at a fixed interval, or closed loop).

**False expiry**: a heartbeat answered UNKNOWN_MEMBER_ID, sent since the member's latest join,
that landed in the inbox within one session of the member's previous heartbeat (or, for the
first after a join, of when that join's answer became readable): the member did everything
right and was expired anyway. One per expiry, not per heartbeat: the member then rejoins, and
heartbeats it had in flight are stale. A heartbeat answered UNKNOWN_MEMBER_ID after a longer
silence is an expiry the member earned (counted apart).

Pure: no I/O, no clock (times are the caller's, in seconds), no threads (the caller locks).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from coordinator import jsonio
from coordinator.errors import Error

#: Member phases: JoinGroup in flight (or due), SyncGroup in flight, stable.
JOINING = "joining"
SYNCING = "syncing"
STABLE = "stable"
#: Heartbeats go out in these phases (from the JoinGroup's answer on).
HEARTBEATING = (SYNCING, STABLE)
#: Before a member retries a JoinGroup or SyncGroup that failed with an error no client
#: rejoins on at once (s): Kafka's ``retry.backoff.ms`` is 100 ms, growing to 1 s.
RETRY_BACKOFF_S = 1.0
#: Errors after which a member rejoins with its id (``requestRejoin``) or as a new member.
_REJOIN_WITH_ID = (Error.REBALANCE_IN_PROGRESS, Error.ILLEGAL_GENERATION)
_REJOIN_AS_NEW = (Error.UNKNOWN_MEMBER_ID,)


def join_request(
    request_id: str, group_id: str, member_id: str, session_ms: int, rebalance_ms: int
) -> dict[str, Any]:
    return {
        "api": "join_group",
        "request_id": request_id,
        "group_id": group_id,
        "member_id": member_id,
        "client_id": "bench",
        "session_timeout_ms": session_ms,
        "rebalance_timeout_ms": rebalance_ms,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }


def sync_request(
    request_id: str, group_id: str, member_id: str, generation: int, assign_to: Sequence[str]
) -> dict[str, Any]:
    return {
        "api": "sync_group",
        "request_id": request_id,
        "group_id": group_id,
        "member_id": member_id,
        "generation_id": generation,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": m, "assignment": b""} for m in assign_to],
    }


def heartbeat_request(
    request_id: str, group_id: str, member_id: str, generation: int
) -> dict[str, Any]:
    return {
        "api": "heartbeat",
        "request_id": request_id,
        "group_id": group_id,
        "member_id": member_id,
        "generation_id": generation,
    }


#: Stands for the request id in :func:`heartbeat_line` (any text that needs no escaping).
_MARK = "request-id"


def heartbeat_line(group_id: str, member_id: str, generation: int) -> tuple[str, str]:
    """A member's heartbeat as an inbox line (:func:`coordinator.jsonio.dumps` of
    :func:`heartbeat_request`), cut where its request id goes: the text before the id and the
    text after it. Only the id changes from one heartbeat of a generation to the next, so the
    load writes each from these two instead of encoding a request every time. The id must need
    no escaping in JSON (the bench's ``h<index>.<n>``)."""
    text = jsonio.dumps(heartbeat_request(_MARK, group_id, member_id, generation))
    before, mark, after = text.partition(json.dumps(_MARK))
    assert mark, text  # the id is the second key, after "api": its mark comes first
    return before + '"', '"' + after


@dataclass(frozen=True, slots=True)
class Member:
    """A member as the bench starts it: its group, and (already joined: the floors, which form
    no group) its id and generation."""

    group_id: str
    member_id: str = ""
    generation: int = -1


@dataclass
class MemberEvents:
    """What the members did, for the report (times in s, the caller's clock)."""

    #: Rejoins: (when the answer that caused it was read, member index, "api:ERROR").
    rejoins: list[tuple[float, int, str]] = field(default_factory=list)
    #: Each (group, generation) the first time a JoinGroup answer gave it: (read at, group, gen).
    generations: list[tuple[float, str, int]] = field(default_factory=list)
    #: False expiries (see the module docstring): (heartbeat landed, member index).
    false_expiries: list[tuple[float, int]] = field(default_factory=list)
    #: Heartbeats answered UNKNOWN_MEMBER_ID after a silence longer than the session.
    expiries: list[tuple[float, int]] = field(default_factory=list)
    #: JoinGroup and SyncGroup answers with an error: (read at, "api:ERROR").
    membership_errors: list[tuple[float, str]] = field(default_factory=list)


@dataclass(slots=True)
class _State:
    group_id: str
    member_id: str
    generation: int
    phase: str
    #: Bumped at every (re)join: heartbeats sent before it are stale.
    incarnation: int = 0
    #: The request id of the JoinGroup or SyncGroup awaited (only its answer counts).
    awaiting: str | None = None
    #: The leader's SyncGroup assigns to these (its JoinGroup answer's members).
    assign_to: list[str] = field(default_factory=list)
    #: When the member last renewed its session as far as it knows: its last heartbeat's
    #: landing, or when its JoinGroup answer was read.
    renewed_at: float = 0.0
    heartbeats: int = 0
    requests: int = 0
    in_flight: int = 0
    #: (generation, member id, text before the request id, text after it) of its heartbeats.
    line: tuple[int, str, str, str] | None = None


class _Beat(NamedTuple):
    """A heartbeat in flight. A tuple of numbers, which the garbage collector stops tracking,
    so that the many in flight at a high rate are not scanned again and again (in a load
    process that also keeps every round trip, that scanning grew to a third of its CPU)."""

    #: The member's index.
    member: int
    incarnation: int
    #: Landing of the member's previous heartbeat (or its join's answer), and of this one.
    previous: float = 0.0
    landed: float = 0.0


class Members:
    """The bench's members (see the module docstring). ``joined``: they start stable with the
    ids given (the floors); else each starts by joining its group."""

    def __init__(
        self,
        members: Sequence[Member],
        session_ms: int,
        rebalance_ms: int,
        *,
        joined: bool = False,
        now: float = 0.0,
    ) -> None:
        self.session_s = session_ms / 1000.0
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.events = MemberEvents()
        self._members = [
            _State(
                m.group_id,
                m.member_id if joined else "",
                m.generation if joined else -1,
                STABLE if joined else JOINING,
                renewed_at=now,
            )
            for m in members
        ]
        self._beats: dict[str, _Beat] = {}
        self._seen: set[tuple[str, int]] = set()
        #: JoinGroup and SyncGroup requests to send: (not before, sequence, index, incarnation).
        self._queue: list[tuple[float, int, int, int]] = []
        self._sequence = 0
        if not joined:
            for index in range(len(self._members)):
                self._enqueue(index, now)

    def __len__(self) -> int:
        return len(self._members)

    # -- what to send --------------------------------------------------------------------------

    def heartbeats(self, due: Iterable[int]) -> list[tuple[str, str]]:
        """(request id, heartbeat as its inbox line: :func:`heartbeat_line`) for each member of
        ``due`` (repeats allowed) whose heartbeats are on: from its JoinGroup's answer until
        its next rejoin."""
        out = []
        for index in due:
            member = self._members[index]
            if member.phase not in HEARTBEATING:
                continue
            member.heartbeats += 1
            member.in_flight += 1
            rid = f"h{index}.{member.heartbeats}"
            self._beats[rid] = _Beat(index, member.incarnation)
            line = member.line
            if line is None or line[0] != member.generation or line[1] != member.member_id:
                line = member.line = (
                    member.generation,
                    member.member_id,
                    *heartbeat_line(member.group_id, member.member_id, member.generation),
                )
            out.append((rid, line[2] + rid + line[3]))
        return out

    def idle(self) -> list[int]:
        """Members heartbeating with none in flight (the closed loop's due members)."""
        return [
            i for i, m in enumerate(self._members) if m.phase in HEARTBEATING and not m.in_flight
        ]

    def membership(self, now: float) -> list[dict[str, Any]]:
        """The JoinGroup and SyncGroup requests due by ``now``."""
        out = []
        while self._queue and self._queue[0][0] <= now:
            _, _, index, incarnation = heapq.heappop(self._queue)
            member = self._members[index]
            if member.incarnation != incarnation or member.awaiting is not None:
                continue
            member.requests += 1
            rid = f"m{index}.{member.requests}"
            member.awaiting = rid
            if member.phase == JOINING:
                out.append(
                    join_request(
                        rid, member.group_id, member.member_id, self.session_ms, self.rebalance_ms
                    )
                )
            else:
                out.append(
                    sync_request(
                        rid, member.group_id, member.member_id, member.generation, member.assign_to
                    )
                )
        return out

    def landed(self, request_ids: Iterable[str], at: float) -> None:
        """The heartbeats ``request_ids`` (in the order they were sent) landed at ``at``."""
        for rid in request_ids:
            beat = self._beats.get(rid)
            if beat is None:
                continue
            member = self._members[beat.member]
            self._beats[rid] = _Beat(beat.member, beat.incarnation, member.renewed_at, at)
            if beat.incarnation == member.incarnation:
                member.renewed_at = at

    # -- answers -------------------------------------------------------------------------------

    def on_heartbeat(self, request_id: str, error_code: int, now: float) -> None:
        """A heartbeat's answer, read at ``now`` (a repeat is ignored)."""
        beat = self._beats.pop(request_id, None)
        if beat is None:
            return
        member = self._members[beat.member]
        member.in_flight -= 1
        if beat.incarnation != member.incarnation:
            return  # sent before the member's latest (re)join: stale
        if error_code == 0:
            return  # the usual answer: nothing to do
        error = Error(error_code)
        if error is Error.UNKNOWN_MEMBER_ID:
            if beat.landed - beat.previous <= self.session_s:
                self.events.false_expiries.append((beat.landed, beat.member))
            else:
                self.events.expiries.append((beat.landed, beat.member))
        if error is Error.REBALANCE_IN_PROGRESS and member.phase != STABLE:
            return  # as Java: a member still syncing hears of it from its SyncGroup
        if error in _REJOIN_WITH_ID or error in _REJOIN_AS_NEW:
            self._rejoin(beat.member, f"heartbeat:{error.name}", now, error)

    def on_membership(self, row: dict[str, Any], now: float) -> None:
        """A JoinGroup's or SyncGroup's answer (a responses row: ``request_id``, ``error_code``,
        ``body``), read at ``now``."""
        rid = str(row["request_id"])
        index = int(rid[1:].split(".")[0])
        member = self._members[index]
        if member.awaiting != rid:
            return
        member.awaiting = None
        error = Error(row["error_code"])
        api = "join" if member.phase == JOINING else "sync"
        if api == "join" and error is Error.MEMBER_ID_REQUIRED:
            member.member_id = json.loads(row["body"])["member_id"]
            self._enqueue(index, now)
        elif api == "join" and error is Error.NONE:
            body = json.loads(row["body"])
            member.member_id = body["member_id"]
            member.generation = body["generation_id"]
            member.phase = SYNCING
            member.renewed_at = now
            leader = body["leader"] == body["member_id"]
            member.assign_to = [m["member_id"] for m in body["members"]] if leader else []
            if (member.group_id, member.generation) not in self._seen:
                self._seen.add((member.group_id, member.generation))
                self.events.generations.append((now, member.group_id, member.generation))
            self._enqueue(index, now)
        elif api == "sync" and error is Error.NONE:
            member.phase = STABLE
        else:
            self.events.membership_errors.append((now, f"{api}:{error.name}"))
            if error in _REJOIN_WITH_ID or error in _REJOIN_AS_NEW:
                self._rejoin(index, f"{api}:{error.name}", now, error)
            else:
                # Not an answer a client rejoins on at once: the same request again, later.
                self._enqueue(index, now + RETRY_BACKOFF_S)

    # -- state ---------------------------------------------------------------------------------

    def _rejoin(self, index: int, cause: str, now: float, error: Error) -> None:
        member = self._members[index]
        self.events.rejoins.append((now, index, cause))
        member.incarnation += 1
        member.phase = JOINING
        member.awaiting = None
        member.generation = -1
        if error in _REJOIN_AS_NEW:
            member.member_id = ""
        self._enqueue(index, now)

    def _enqueue(self, index: int, not_before: float) -> None:
        self._sequence += 1
        member = self._members[index]
        heapq.heappush(self._queue, (not_before, self._sequence, index, member.incarnation))

    def phases(self) -> dict[str, int]:
        """How many members are in each phase."""
        counts = {JOINING: 0, SYNCING: 0, STABLE: 0}
        for member in self._members:
            counts[member.phase] += 1
        return counts

    def formed(self) -> bool:
        """Every member stable (each group formed)."""
        return all(m.phase == STABLE for m in self._members)
