"""The Spark-job back end: requests forwarded to a running job, answers read from its tables.

``coordinator gateway --warehouse DIR`` puts Kafka's wire protocol in front of the job that owns
``DIR`` (``coordinator run --warehouse DIR`` or ``spark-submit jobs/coordinator_job.py``). The
job is the coordinator: its micro-batches run every group's state machine and fire its timers;
this back end only carries requests and answers, through the job's own client
(:class:`coordinator.stream.client.StreamClient`):

- requests that arrive within ``flush_interval_ms`` of each other go into ONE inbox file (every
  file costs the job a listing and a read);
- the ``responses`` table is followed incrementally every ``poll_interval_ms`` while anything
  waits, and each answer resolves the connection that asked. The job writes ``consumer_offsets``
  before ``responses``, so a commit is acknowledged only once the log holds it;
- an answer that does not come within ``request_timeout_ms`` (a JoinGroup: its rebalance
  timeout plus 5 s, as the job may park it that long) is COORDINATOR_NOT_AVAILABLE, which sends
  a Kafka client to rediscover the coordinator and retry, as when a broker loses its
  coordinator role. The request stays in the inbox and may still be applied later: like a
  Kafka request whose response was lost, it is at least once, and every group API is safe to
  retry (a stale generation or member id is refused);
- the topics consumer groups are assigned from (the gateway's ``--topic`` list, or its
  upstream's topics with their ids, whenever a refresh changes them) are written to the job's
  topic store (:mod:`coordinator.stream.topic_store`), which the job reads at every batch;
- FindCoordinator is answered here, by the same engine code with no group state: it reads no
  group, and the gateway is the only node a client may talk to.

Every answer takes at least one micro-batch, so Kafka clients need session timeouts of a few
batch periods (README, "Kafka clients through the gateway").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from coordinator.client.transport import answer_timeout_ms
from coordinator.config import CoordinatorConfig
from coordinator.engine import CoordinatorNode, GroupCoordinator
from coordinator.gateway.backend import cannot_serve

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Below the clients' own request timeouts (30 s in kafka-python, 40 s in aiokafka, 60 s in
#: librdkafka), so that a client hears COORDINATOR_NOT_AVAILABLE and looks the coordinator up
#: again rather than timing out and closing its connection.
DEFAULT_REQUEST_TIMEOUT_MS = 25_000


@dataclass(slots=True)
class _Waiting:
    request: dict[str, Any]
    future: asyncio.Future[dict[str, Any]]
    deadline: float  # time.monotonic()


class JobBackend:
    """Forwards group requests to the Spark job owning ``warehouse`` (see the module doc)."""

    def __init__(
        self,
        warehouse: str | Path,
        config: CoordinatorConfig | None = None,
        *,
        flush_interval_ms: float = 10.0,
        poll_interval_ms: float = 50.0,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
    ) -> None:
        self.warehouse = Path(warehouse)
        self.config = config or CoordinatorConfig()
        self.flush_interval_ms = flush_interval_ms
        self.poll_interval_ms = poll_interval_ms
        self.request_timeout_ms = request_timeout_ms
        self.client: Any = None
        self._local = GroupCoordinator(self.config)
        #: StreamClient is not thread safe: every call to it runs on this one thread.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="gateway-job-client")
        self._waiting: dict[str, _Waiting] = {}
        self._queued: list[dict[str, Any]] = []
        self._flush = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.files_written = 0
        self.timed_out = 0

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args))

    #: ``submit`` appends to the next inbox file before it awaits, and the job applies a
    #: group's requests in (file, line) order: a connection's requests reach the job in the
    #: order sent even while earlier ones wait for their batch (connection module doc).
    pipelines_requests = True

    #: The job's topic store outlives this gateway: a gateway with no topics of its own (no
    #: ``--topic``, no upstream) leaves it as others wrote it.
    keeps_topics = True

    def update_topics(self, topics: list[dict[str, Any]]) -> None:
        """The gateway's topics (its ``--topic`` list, or its upstream's with their ids) into
        the job's topic store (:mod:`coordinator.stream.topic_store`) when they differ from its
        newest version: the job assigns consumer groups from them from its next batch on."""
        from coordinator.stream import topic_store
        from coordinator.stream.schema import Warehouse

        store = Warehouse.at(self.warehouse).topics
        version = topic_store.append_if_changed(store, topics, topic_store.GATEWAY)
        if version is not None:
            log.info("topics version %d written to %s: %d topics", version, store, len(topics))

    async def start(self, node: CoordinatorNode) -> None:
        from coordinator.stream.client import StreamClient
        from coordinator.stream.schema import Warehouse

        self._local = GroupCoordinator(self.config, node=node)
        warehouse = Warehouse.at(self.warehouse)
        warehouse.inbox.mkdir(parents=True, exist_ok=True)
        # Pinned now ("from the current version on"): no answer to our requests can be missed.
        self.client = await self._call(StreamClient, warehouse)
        self._tasks = [
            asyncio.create_task(self._flusher(), name="gateway-inbox-writer"),
            asyncio.create_task(self._poller(), name="gateway-response-reader"),
        ]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for waiting in list(self._waiting.values()):
            self._answer(waiting, cannot_serve(waiting.request, "the gateway is stopping"))
        self._executor.shutdown(wait=True)

    async def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("api") == "find_coordinator":
            (answer,) = self._local.handle(request, 0)
            return answer
        key = str(request["request_id"])
        timeout_ms = answer_timeout_ms(request, self.request_timeout_ms)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[key] = _Waiting(request, future, time.monotonic() + timeout_ms / 1000)
        self._queued.append(request)
        self._flush.set()
        try:
            return await future
        finally:
            self._waiting.pop(key, None)

    def _answer(self, waiting: _Waiting, answer: dict[str, Any]) -> None:
        if not waiting.future.done():
            waiting.future.set_result(answer)

    async def _flusher(self) -> None:
        while True:
            await self._flush.wait()
            await asyncio.sleep(self.flush_interval_ms / 1000)  # gather what comes together
            self._flush.clear()
            batch, self._queued = self._queued, []
            if not batch:
                continue
            try:
                await self._call(self.client.submit, batch)
                self.files_written += 1
            except Exception as exc:  # the inbox is unwritable: nothing reached the job
                log.exception("writing %d requests to the inbox failed", len(batch))
                for request in batch:
                    waiting = self._waiting.get(str(request["request_id"]))
                    if waiting is not None:
                        self._answer(waiting, cannot_serve(request, f"inbox: {exc}"))

    async def _poller(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_ms / 1000)
            if not self._waiting:
                continue
            try:
                await self._call(self.client.poll)
                answers = await self._call(self.client.take, list(self._waiting))
            except Exception:  # a table being compacted, say: the next poll tries again
                log.exception("reading the responses table failed")
                answers = {}
            for key, answer in answers.items():
                waiting = self._waiting.get(str(key))
                if waiting is not None:
                    self._answer(waiting, answer)
            now = time.monotonic()
            expired = [w for w in self._waiting.values() if w.deadline <= now]
            for waiting in expired:
                self.timed_out += 1
                message = "no answer from the coordinator job in time"
                self._answer(waiting, cannot_serve(waiting.request, message))
            if expired:
                with contextlib.suppress(Exception):
                    await self._call(self.client.forget, [w.request["request_id"] for w in expired])
