"""The client's three timers (Kafka's ``Heartbeat``) and its exponential retry backoff.

- heartbeat timer: when the next Heartbeat is due (``heartbeat_interval_ms`` after the last one
  was sent, or the backoff after a failure);
- session timer: reset by every successful heartbeat; if it runs out the member assumes its
  *coordinator* is unreachable and rediscovers it (it does not leave the group by itself);
- poll timer: reset by every ``poll()``; if it runs out the application stopped polling for
  ``max_poll_interval_ms`` and the member leaves the group (13.2).

All times come from the caller: no clock is read here.
"""

from __future__ import annotations

import random


class ExponentialBackoff:
    """Kafka's ``ExponentialBackoff``: ``initial * 2**attempts``, capped, with +/- jitter."""

    def __init__(
        self,
        initial_ms: int,
        maximum_ms: int,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        self.initial_ms = initial_ms
        self.maximum_ms = max(maximum_ms, initial_ms)
        self.jitter = jitter
        self.rng = rng or random.Random(0)

    def backoff(self, attempts: int) -> int:
        if self.maximum_ms <= self.initial_ms:
            return self.initial_ms
        term = min(self.initial_ms * (2 ** min(attempts, 32)), self.maximum_ms)
        spread = self.rng.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else 1.0
        return int(term * spread)


class Heartbeat:
    def __init__(
        self,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_poll_interval_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        now_ms: int,
        rng: random.Random | None = None,
    ) -> None:
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms, rng=rng)
        self.attempts = 0
        self.in_flight = False
        self.heartbeat_deadline = now_ms + heartbeat_interval_ms
        self.session_deadline = now_ms + session_timeout_ms
        self.poll_deadline = now_ms + max_poll_interval_ms
        self.last_poll_ms = now_ms

    # -- events --------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> None:
        self.poll_deadline = now_ms + self.max_poll_interval_ms
        self.last_poll_ms = now_ms

    def sent_heartbeat(self, now_ms: int) -> None:
        self.in_flight = True
        self.heartbeat_deadline = now_ms + self.heartbeat_interval_ms

    def fail_heartbeat(self, now_ms: int) -> None:
        self.in_flight = False
        self.heartbeat_deadline = now_ms + self.backoff.backoff(self.attempts)
        self.attempts += 1

    def received_heartbeat(self, now_ms: int) -> None:
        self.in_flight = False
        self.attempts = 0
        self.session_deadline = now_ms + self.session_timeout_ms

    def reset_timeouts(self, now_ms: int) -> None:
        """Kafka's ``resetTimeouts``: when the heartbeat thread is (re)enabled."""
        self.session_deadline = now_ms + self.session_timeout_ms
        self.poll_deadline = now_ms + self.max_poll_interval_ms
        self.heartbeat_deadline = now_ms + self.heartbeat_interval_ms
        self.in_flight = False

    def reset_session(self, now_ms: int) -> None:
        self.session_deadline = now_ms + self.session_timeout_ms
        self.attempts = 0

    # -- questions -----------------------------------------------------------------------------

    def should_heartbeat(self, now_ms: int) -> bool:
        return not self.in_flight and now_ms >= self.heartbeat_deadline

    def session_expired(self, now_ms: int) -> bool:
        return now_ms >= self.session_deadline

    def poll_expired(self, now_ms: int) -> bool:
        return now_ms >= self.poll_deadline

    def time_to_next_heartbeat(self, now_ms: int) -> int:
        return max(0, self.heartbeat_deadline - now_ms)
