"""Timers as data: what every group keeps, classic or consumer, so one mechanism serves both.

A group's timers are a dict of live timers by key plus a heap ordered by (deadline, seq); the
step fires them in that order (section 8.6). Nothing here decides what a timer does:
:mod:`coordinator.step` does.

The heap holds, for each live timer, one entry of its own (its *anchor*: the entry whose seq is
the timer's ``entry``) at or before the timer's (deadline, seq), and entries of timers since
cancelled or re-armed, which are stale and dropped when they come up. Re-arming a key at a later
deadline (a heartbeat, on every call) changes the timer in place and leaves its anchor where it
is, earlier than the timer now is: :meth:`TimerBook.next_timer` moves it to the timer's place
when it comes up. Re-arming earlier (or a key not armed) pushes a new anchor. So a heartbeat
costs no heap push, and the heap holds about one entry per timer, not one per heartbeat. The
live timers alone are the group's timer state: groups with the same timers are equal whatever
their heaps hold, and a snapshot writes the heap as the live timers' own entries.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Timer:
    deadline_ms: int
    seq: int
    kind: str
    #: kind-specific data: the member id (heartbeat), (delay, remaining) (initial join),
    #: the generation (sync), (member id, member epoch) (consumer rebalance timeout).
    payload: Any = None
    #: The seq of the timer's anchor in its group's heap (the module doc); -1 when made: the
    #: timer's own seq, its entry being exactly (deadline, seq).
    entry: int = field(default=-1, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.entry < 0:
            self.entry = self.seq


@dataclass(frozen=True, slots=True)
class Undelivered:
    """The member-facing timers a step armed, while its answers are not yet known to have been
    delivered (:func:`coordinator.step.step`'s ``answer_tag``).

    They count from ``answered_ms``, the step's clock, when its answers left; once the caller
    learns when they became readable (``delivered_ms``), they count from then instead
    (:func:`coordinator.step.deliver_answers`)."""

    #: The step's clock at its end: what its timers were counted from.
    answered_ms: int
    #: The timers armed by the step are those with a higher ``seq`` (timer sequence numbers
    #: only grow within a group).
    after_seq: int
    #: The caller's name for the step, to look its delivery up by (the Spark job: its batch's
    #: timestamp).
    tag: int


class TimerBook:
    """The timer methods a group class mixes in; it must hold ``timers`` and ``timer_heap``."""

    __slots__ = ()

    timers: dict[str, Timer]
    #: (deadline, seq, key): each live timer's anchor, and stale entries (the module doc).
    timer_heap: list[tuple[int, int, str]]

    def schedule(
        self, key: str, deadline_ms: int, seq: int, kind: str, payload: Any = None
    ) -> bool:
        """Arm (or re-arm: the key is replaced) a timer. True when that pushed a heap entry
        (the group's next timer may be earlier); False when it moved an armed timer later in
        place (its next timer is not earlier than it was)."""
        timer = self.timers.get(key)
        if timer is not None and deadline_ms >= timer.deadline_ms:
            timer.deadline_ms = deadline_ms
            timer.seq = seq
            timer.kind = kind
            timer.payload = payload
            return False
        self.timers[key] = Timer(deadline_ms, seq, kind, payload)
        heap = self.timer_heap
        heapq.heappush(heap, (deadline_ms, seq, key))
        # Re-arming earlier and cancelling leave stale heap entries behind; compact once they
        # outnumber the live timers so memory stays proportional to the group.
        if len(heap) > 64 and len(heap) > 4 * len(self.timers):
            self._rebuild_heap()
        return True

    def cancel(self, key: str) -> None:
        self.timers.pop(key, None)

    def next_timer(self) -> tuple[int, int, str] | None:
        """(deadline, seq, key) of the earliest live timer, dropping stale heap entries and
        moving anchors of timers that moved later to where they are now."""
        heap = self.timer_heap
        timers = self.timers
        while heap:
            _deadline, seq, key = heap[0]
            timer = timers.get(key)
            if timer is None or timer.entry != seq:
                heapq.heappop(heap)  # stale
            elif timer.seq == seq:
                return heap[0]
            else:  # re-armed later in place: its anchor goes where it is now
                heapq.heapreplace(heap, (timer.deadline_ms, timer.seq, key))
                timer.entry = timer.seq
        return None

    def live_timer_entries(self) -> list[tuple[int, int, str]]:
        """Each live timer's own (deadline, seq, key), in that order: a heap, and the timer
        state a snapshot writes, whatever stale or moved entries this group's heap holds."""
        return sorted([(t.deadline_ms, t.seq, k) for k, t in self.timers.items()])

    def _rebuild_heap(self) -> None:
        """The heap made of the live timers' own entries alone."""
        self.timer_heap[:] = self.live_timer_entries()
        for timer in self.timers.values():
            timer.entry = timer.seq

    def pop_timer(self, key: str) -> Timer:
        return self.timers.pop(key)

    def shift_timers(self, after_seq: int, shift_ms: int, exempt_kind: str) -> None:
        """Move every live timer armed after ``after_seq`` (all but those of ``exempt_kind``)
        ``shift_ms`` later, keeping their sequence numbers (so their order among themselves and
        their ties stay), and rebuild the heap from the live timers."""
        if shift_ms == 0:
            return
        for timer in self.timers.values():
            if timer.seq > after_seq and timer.kind != exempt_kind:
                timer.deadline_ms += shift_ms
        self._rebuild_heap()
