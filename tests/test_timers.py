"""A group's timers (:mod:`coordinator.group.timers`): whatever sequence of arming, re-arming
(later in place, or earlier), cancelling, firing and shifting, the next timer is the earliest
live one by (deadline, seq), as a plain dict of the live timers says; the heap stays about one
entry per timer; and a heartbeat's re-arm (later) pushes nothing."""

from __future__ import annotations

import random

import pytest

from coordinator.group.model import ClassicGroup
from coordinator.group.snapshot import decode_group, encode_group

KEYS = [f"heartbeat-m{i}" for i in range(6)] + ["join", "sync", "offset-expiry"]


def _earliest(live: dict[str, tuple[int, int]]) -> tuple[int, int, str] | None:
    return min(((d, s, k) for k, (d, s) in live.items()), default=None)


@pytest.mark.parametrize("seed", range(40))
def test_the_next_timer_is_always_the_earliest_live_one(seed: int) -> None:
    rng = random.Random(seed)
    group = ClassicGroup("g", 0)
    live: dict[str, tuple[int, int]] = {}  # the reference: key -> (deadline, seq)
    seq = 0
    now = 0
    for _ in range(600):
        op = rng.random()
        key = rng.choice(KEYS)
        if op < 0.55:  # arm or re-arm: mostly later (heartbeats), sometimes earlier
            seq += 1
            base = live.get(key, (now, 0))[0]
            deadline = base + rng.randint(-50, 400) if rng.random() < 0.9 else now
            pushed = group.schedule(key, deadline, seq, "k", key)
            assert pushed == (key not in live or deadline < live[key][0])
            live[key] = (deadline, seq)
        elif op < 0.65:
            group.cancel(key)
            live.pop(key, None)
        elif op < 0.85:  # fire the next one, as a step does
            head = group.next_timer()
            assert head == _earliest(live)
            if head is not None:
                now = max(now, head[0])
                timer = group.pop_timer(head[2])
                assert (timer.deadline_ms, timer.seq) == head[:2]
                del live[head[2]]
        elif op < 0.9:  # answers delivered later: the timers armed since a seq move later
            after, shift = rng.randint(0, seq), rng.randint(0, 100)
            group.shift_timers(after, shift, "none")
            live = {k: (d + shift if s > after else d, s) for k, (d, s) in live.items()}
        else:  # a snapshot round trip: the same timers, the same next one
            decoded = decode_group(encode_group(group))
            assert decoded == group
            assert decoded.next_timer() == _earliest(live)
        assert group.next_timer() == _earliest(live)
        assert {k: (t.deadline_ms, t.seq) for k, t in group.timers.items()} == live
        assert len(group.timer_heap) <= max(64, 4 * len(group.timers)) + 1


def test_a_heartbeat_re_arm_pushes_nothing_and_the_heap_moves_its_anchor_when_due() -> None:
    group = ClassicGroup("g", 0)
    assert group.schedule("heartbeat-a", 100, 1, "heartbeat", "a")
    assert group.schedule("heartbeat-b", 150, 2, "heartbeat", "b")
    for seq, deadline in enumerate(range(200, 2_000, 100), start=3):
        assert not group.schedule("heartbeat-a", deadline, seq, "heartbeat", "a")
    assert len(group.timer_heap) == 2  # no entry per heartbeat
    assert group.next_timer() == (150, 2, "heartbeat-b")
    group.pop_timer("heartbeat-b")
    assert group.next_timer() == (1_900, 20, "heartbeat-a")
    # re-armed earlier (a shorter session after a rejoin): a new anchor, the old one stale
    assert group.schedule("heartbeat-a", 500, 21, "heartbeat", "a")
    assert group.next_timer() == (500, 21, "heartbeat-a")
