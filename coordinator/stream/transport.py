"""``StreamTransport``: :class:`~coordinator.client.member.GroupMember` talking to the Spark job.

It keeps every rule of :mod:`coordinator.client.transport`, so a member cannot tell it from the
in-process transport: ``send`` only queues; :meth:`StreamTransport.deliver` (called by the
member's runner, as ``InProcessCluster.deliver`` is) writes the queued requests, reads new
responses and calls the callbacks, each exactly once, with the response or with
``REQUEST_TIMED_OUT``. Responses reach callbacks decoded (bytes restored), as the engine made
them.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from coordinator.client.transport import (
    Callback,
    Clock,
    SystemClock,
    answer_timeout_ms,
    transport_error,
)
from coordinator.errors import Error
from coordinator.stream.client import StreamClient


@dataclass(slots=True)
class _InFlight:
    request: dict[str, Any]
    callback: Callback
    timeout_ms: int
    deadline_ms: int


class StreamTransport:
    """The :class:`~coordinator.client.transport.Transport` of members whose coordinator is the
    Spark job, through ``client`` (its inbox and its ``responses`` table).

    - Requests sent between two :meth:`flush` calls go into ONE inbox file: one file per runner
      loop, not per request, since every file costs the job a listing and a read.
    - ``node_id`` is ignored: the job is one coordinator node that owns every group (its
      FindCoordinator answers name that node), so there is nowhere else to send to.
    - A request unanswered ``request_timeout_ms`` after ``send`` (by ``clock``) is answered with
      ``REQUEST_TIMED_OUT``; a JoinGroup waits at least its rebalance timeout plus 5 s, as
      Kafka's client does, because the coordinator parks it that long. A real response arriving
      later is dropped: the callback has had its answer.
    - If a callback raises, the exception propagates out of :meth:`deliver`; the callbacks not
      yet called are called by the next ``deliver``.

    Not thread safe: members, their runner and ``deliver`` share one thread.
    """

    def __init__(
        self,
        client: StreamClient,
        clock: Clock | None = None,
        request_timeout_ms: int = 30_000,
    ) -> None:
        self.client = client
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.request_timeout_ms = request_timeout_ms
        self._queued: list[dict[str, Any]] = []
        self._in_flight: dict[Any, _InFlight] = {}
        self._ready: deque[tuple[Callback, dict[str, Any]]] = deque()
        self.sent = 0

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._in_flight)

    def send(self, request: dict[str, Any], callback: Callback, node_id: int | None = None) -> None:
        """Queue ``request`` for the next :meth:`flush`; never calls ``callback`` itself."""
        if request.get("request_id") is None:
            request = {**request, "request_id": uuid.uuid4().hex}
        request_id = request["request_id"]
        if request_id in self._in_flight:
            raise ValueError(f"request id {request_id!r} is already in flight")
        timeout = answer_timeout_ms(request, self.request_timeout_ms)
        self._in_flight[request_id] = _InFlight(
            request, callback, timeout, self.clock.now_ms() + timeout
        )
        self._queued.append(request)
        self.sent += 1

    def flush(self) -> None:
        """Write the requests queued since the last flush as one inbox file (none: no file)."""
        if self._queued:
            self.client.submit(self._queued)
            self._queued = []

    def deliver(self) -> int:
        """Flush, read the new responses, time out what waited too long, and call the callbacks
        (responses in the order they were committed, then timeouts); returns how many."""
        self.flush()
        self.client.poll()
        for request_id, answer in self.client.take(list(self._in_flight)).items():
            owed = self._in_flight.pop(request_id)
            self._ready.append((owed.callback, answer))
        now = self.clock.now_ms()
        expired = [rid for rid, owed in self._in_flight.items() if owed.deadline_ms <= now]
        for request_id in expired:
            owed = self._in_flight.pop(request_id)
            message = f"no response from the coordinator job within {owed.timeout_ms} ms"
            self._ready.append(
                (owed.callback, transport_error(owed.request, Error.REQUEST_TIMED_OUT, message))
            )
        if expired:
            self.client.forget(expired)
        delivered = 0
        while self._ready:
            callback, answer = self._ready.popleft()
            callback(answer)
            delivered += 1
        return delivered
