"""Timers as data: what every group keeps, classic or consumer, so one mechanism serves both.

A group's timers are a dict of live timers by key plus a heap ordered by (deadline, seq); the
step fires them in that order (section 8.6). Re-arming a key replaces it; stale heap entries are
dropped lazily. Nothing here decides what a timer does: :mod:`coordinator.step` does.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Timer:
    deadline_ms: int
    seq: int
    kind: str
    #: kind-specific data: the member id (heartbeat), (delay, remaining) (initial join),
    #: the generation (sync), (member id, member epoch) (consumer rebalance timeout).
    payload: Any = None


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
    #: (deadline, seq, key); entries whose seq no longer matches ``timers[key]`` are stale.
    timer_heap: list[tuple[int, int, str]]

    def schedule(
        self, key: str, deadline_ms: int, seq: int, kind: str, payload: Any = None
    ) -> None:
        """Arm (or re-arm: the key is replaced) a timer."""
        self.timers[key] = Timer(deadline_ms, seq, kind, payload)
        heap = self.timer_heap
        heapq.heappush(heap, (deadline_ms, seq, key))
        # Re-arming leaves stale heap entries behind (a heartbeat re-arms on every call); compact
        # once they outnumber the live timers so memory stays proportional to the group.
        if len(heap) > 64 and len(heap) > 4 * len(self.timers):
            heap[:] = [(t.deadline_ms, t.seq, k) for k, t in self.timers.items()]
            heapq.heapify(heap)

    def cancel(self, key: str) -> None:
        self.timers.pop(key, None)

    def next_timer(self) -> tuple[int, int, str] | None:
        """(deadline, seq, key) of the earliest live timer, dropping stale heap entries."""
        heap = self.timer_heap
        timers = self.timers
        while heap:
            _deadline, seq, key = heap[0]
            timer = timers.get(key)
            if timer is not None and timer.seq == seq:
                return heap[0]
            heapq.heappop(heap)
        return None

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
        heap = self.timer_heap
        heap[:] = [(t.deadline_ms, t.seq, k) for k, t in self.timers.items()]
        heapq.heapify(heap)
