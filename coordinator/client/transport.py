"""How a member reaches its coordinator, and whose clock it reads.

A :class:`Transport` carries request dicts (contract, section 1) to a coordinator node and
brings each response back to the callback given with its request. Rules every transport keeps,
so that :class:`~coordinator.client.member.GroupMember` never changes for a new one:

- ``send`` never calls the callback itself: responses are delivered later, from the transport's
  own delivery (``deliver()`` in process, a reader thread or task elsewhere);
- every request gets its callback called exactly once, with the response, or with a transport
  error response (``NETWORK_EXCEPTION``, or ``REQUEST_TIMED_OUT`` after ``request_timeout_ms``);
- ``node_id=None`` means "any node" (FindCoordinator goes to the least loaded broker).

This module holds the interface and the in-process transports; the Spark job's transport lives
with that adapter (:mod:`coordinator.stream.transport`), the Kafka wire protocol's in
:mod:`coordinator.client.wire`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from coordinator.engine import GroupCoordinator
from coordinator.errors import Error
from coordinator.requests import failed_response

Callback = Callable[[dict[str, Any]], None]


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    """Milliseconds from a monotonic clock."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class SimClock:
    """A clock that moves only when told to: hundreds of members, faster than real time."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        self._now += ms
        return self._now

    def set(self, now_ms: int) -> None:
        if now_ms < self._now:
            raise ValueError("a clock does not go backwards")
        self._now = now_ms


class Transport(Protocol):
    def send(self, request: dict[str, Any], callback: Callback, node_id: int | None = None) -> None:
        """Carry ``request`` to ``node_id`` (any node if None); its response goes to ``callback``."""
        ...


#: Kafka's ``JOIN_GROUP_TIMEOUT_LAPSE``: a JoinGroup may be parked for the whole rebalance
#: timeout, so the client waits that long plus this before giving up on it.
JOIN_GROUP_TIMEOUT_LAPSE_MS = 5_000


def answer_timeout_ms(request: dict[str, Any], request_timeout_ms: int) -> int:
    """How long to wait for the answer to ``request``: ``request_timeout_ms``, but a JoinGroup
    at least its rebalance timeout (its session timeout when it carries none, as JoinGroup v0
    does, which is then how long the coordinator parks it) plus the lapse, as Kafka's client
    waits."""
    if request.get("api") != "join_group":
        return request_timeout_ms
    rebalance = request.get("rebalance_timeout_ms")
    if rebalance is None:
        rebalance = request.get("session_timeout_ms")
    if not isinstance(rebalance, int):
        return request_timeout_ms
    return max(request_timeout_ms, rebalance + JOIN_GROUP_TIMEOUT_LAPSE_MS)


def transport_error(request: dict[str, Any], error: Error, message: str) -> dict[str, Any]:
    """The response a transport makes up when the request or its answer was lost."""
    return failed_response(request, error, message)


class AnswerQueue:
    """What an in-process network owes its callers: a callback per request in flight, and the
    answers that came for them, handed over by :meth:`deliver` (never from ``send``)."""

    def __init__(self) -> None:
        self._callbacks: dict[Any, Callback] = {}
        self._queue: deque[tuple[Callback, dict[str, Any]]] = deque()

    def _owe(self, request: dict[str, Any], callback: Callback) -> None:
        rid = request["request_id"]
        if rid in self._callbacks:
            raise ValueError(f"request id {rid!r} is already in flight")
        self._callbacks[rid] = callback

    def _route(self, responses: list[dict[str, Any]]) -> None:
        """Queue each response for the callback of its request (answers to nobody's dropped)."""
        for answer in responses:
            owed = self._callbacks.pop(answer["request_id"], None)
            if owed is not None:
                self._queue.append((owed, answer))

    def deliver(self) -> int:
        """Hand every queued response to its callback (in arrival order); returns how many."""
        delivered = 0
        while self._queue:
            callback, answer = self._queue.popleft()
            callback(answer)
            delivered += 1
        return delivered


class InProcessCluster(AnswerQueue):
    """Coordinators in this process, by node id, on one clock: the test and simulation network.

    Requests reach ``coordinator.handle`` at once; responses (including the ones a later call or
    ``advance`` emits for parked requests) are queued and handed to their callbacks by
    :meth:`deliver`. A node in ``down`` is unreachable: requests to it fail with NETWORK_EXCEPTION.
    """

    def __init__(self, nodes: Mapping[int, GroupCoordinator], clock: Clock) -> None:
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        super().__init__()
        self.nodes = dict(nodes)
        self.clock = clock
        self.down: set[int] = set()
        self.sent = 0

    def send(self, request: dict[str, Any], callback: Callback, node_id: int | None = None) -> None:
        self.sent += 1
        if node_id is None:
            node_id = (
                min(n for n in self.nodes if n not in self.down)
                if len(self.down) < len(self.nodes)
                else -1
            )
        coordinator = self.nodes.get(node_id)
        if coordinator is None or node_id in self.down:
            self._queue.append(
                (
                    callback,
                    transport_error(
                        request, Error.NETWORK_EXCEPTION, f"node {node_id} is unreachable"
                    ),
                )
            )
            return
        self._owe(request, callback)
        self._route(coordinator.handle(request, self.clock.now_ms()))

    def advance(self) -> None:
        """Fire every node's due timers at the clock's time."""
        now = self.clock.now_ms()
        for node_id, coordinator in self.nodes.items():
            if node_id not in self.down:
                self._route(coordinator.advance(now))


class InProcessTransport(InProcessCluster):
    """One coordinator in this process (its node id)."""

    def __init__(self, coordinator: GroupCoordinator, clock: Clock) -> None:
        super().__init__({coordinator.node.node_id: coordinator}, clock)
