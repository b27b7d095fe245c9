"""Interoperability scenarios run with real Kafka clients against the gateway.

Each client (kafka-python, aiokafka, confluent-kafka) is driven through its own API only: a
:class:`Member` owns one consumer in its own thread (as an application runs it) and records
what the client observes: the partitions its rebalance listener was given, how often it was
called, and the generation where the client exposes it. The scenarios (group forming,
rebalancing on join, leave and a killed member, commits across a gateway restart, a static
member's restart) are written once against that interface; each client's test module
(tests/test_gateway_<client>.py) runs them and its own admin API.

A member that must die without a LeaveGroup runs in a subprocess
(``python -m tests.client_scenarios CLIENT PORT GROUP NAME SESSION_MS``), which prints one JSON
line per assignment its listener receives, and is SIGKILLed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.gateway_support import Running, until

TP = tuple[str, int]
PARTITIONS = 6  # of topic "t" (tests.gateway_support.TOPICS)
HEARTBEAT_MS = 300
#: Session timeout of the in-process members: long enough for a loaded box (and the Spark
#: job's micro-batches), and the time a static member has to restart without a rebalance.
SESSION_MS = 30_000
#: How long a group may take to settle (form, or rebalance) on a loaded 2-core box.
SETTLE_S = 90
#: Session timeout of the member that is killed (Kafka's group.min.session.timeout.ms).
KILLED_SESSION_MS = 6_000
REPO = Path(__file__).resolve().parent.parent


class Member:
    """One consumer of a group, polled in its own thread; other threads read what its rebalance
    listener observed and run calls on the consumer through :meth:`call`."""

    client = ""
    #: Whether :meth:`position` reports the fetch position before a record is consumed.
    position_before_records = True

    def __init__(
        self,
        port: int,
        group: str,
        name: str,
        *,
        session_ms: int = SESSION_MS,
        instance_id: str | None = None,
        topics: tuple[str, ...] = ("t",),
        on_assigned: Callable[[Member], None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.port, self.group, self.name = port, group, name
        #: client settings added to the consumer's (security, in the client's own names)
        self.options = dict(options or {})
        self.session_ms, self.instance_id, self.topics = session_ms, instance_id, topics
        self._on_assigned_hook = on_assigned
        self._lock = threading.Lock()
        self._assigned: frozenset[TP] = frozenset()
        self.assigned_calls = 0
        self.revoked_calls = 0
        self.events: list[tuple[str, frozenset[TP]]] = []
        self.error: BaseException | None = None
        self._commands: queue.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]]
        self._commands = queue.Queue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    # --- what the listener observed ------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def assigned(self) -> frozenset[TP]:
        with self._lock:
            return self._assigned

    def partitions(self, topic: str = "t") -> set[int]:
        return {p for t, p in self.assigned() if t == topic}

    def _listener_assigned(self, tps: Iterable[TP]) -> None:
        with self._lock:
            self._assigned = frozenset(tps)
            self.assigned_calls += 1
            self.events.append(("assigned", self._assigned))
        if self._on_assigned_hook is not None:
            self._on_assigned_hook(self)

    def _listener_revoked(self, tps: Iterable[TP]) -> None:
        revoked = frozenset(tps)
        with self._lock:
            self._assigned = self._assigned - revoked
            self.revoked_calls += 1
            self.events.append(("revoked", revoked))

    def generation(self) -> int | None:
        """The generation the client holds, where its API exposes it (None otherwise)."""
        return None

    # --- calls run on the consumer's own thread ------------------------------------------------

    def call(self, fn: Callable[[], Any], timeout: float = 30) -> Any:
        """Run ``fn`` (a function of no arguments; it may return an awaitable, for aiokafka)
        on the member's thread between polls; its result, or its exception raised here."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._commands.put((fn, future))
        deadline = time.monotonic() + timeout
        while True:
            try:
                return future.result(max(0.0, min(0.2, deadline - time.monotonic())))
            except concurrent.futures.TimeoutError:
                if not self._thread.is_alive() and not future.done():
                    # Nothing will run it: say why instead of waiting out the timeout.
                    raise MemberGone(f"{self.name}'s client thread ended: {self.error!r}") from (
                        self.error
                    )
                if time.monotonic() >= deadline:
                    raise

    def commit(self, offsets: dict[TP, int]) -> None:
        raise NotImplementedError

    def committed(self, tps: Iterable[TP]) -> dict[TP, int | None]:
        raise NotImplementedError

    def position(self, tps: Iterable[TP]) -> dict[TP, int]:
        raise NotImplementedError

    def close(self, timeout: float = 30) -> None:
        self._stopping.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} did not close"

    # --- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        raise NotImplementedError

    def _commands_due(self) -> list[tuple[Callable[[], Any], concurrent.futures.Future[Any]]]:
        due = []
        while True:
            try:
                due.append(self._commands.get_nowait())
            except queue.Empty:
                return due


class MemberGone(AssertionError):
    """A call to a member whose client thread has ended (its error is the cause)."""


class SyncMember(Member):
    """A client with a blocking poll (kafka-python, confluent-kafka)."""

    def _open(self) -> None:
        raise NotImplementedError

    def _poll(self) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            self._open()
            while not self._stopping.is_set():
                self._poll()
                for fn, future in self._commands_due():
                    try:
                        future.set_result(fn())
                    except BaseException as exc:
                        future.set_exception(exc)
        except BaseException as exc:
            self.error = exc
        finally:
            self._close()


# --- kafka-python 3 ------------------------------------------------------------------------------


class KafkaPythonMember(SyncMember):
    client = "kafka-python"
    consumer: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        #: retriable errors poll() raised and the member polled on after (see ``_poll``)
        self.poll_errors: list[BaseException] = []
        super().__init__(*args, **kwargs)

    def _open(self) -> None:
        from kafka import KafkaConsumer
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                member._listener_revoked((tp.topic, tp.partition) for tp in revoked)

            def on_partitions_assigned(self, assigned: Any) -> None:
                member._listener_assigned((tp.topic, tp.partition) for tp in assigned)

        self.consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id=self.name,
            group_instance_id=self.instance_id,
            enable_auto_commit=False,
            session_timeout_ms=self.session_ms,
            heartbeat_interval_ms=HEARTBEAT_MS,
            fetch_max_wait_ms=100,
            **self.options,
        )
        self.consumer.subscribe(list(self.topics), listener=Listener())
        # Metadata of the subscription before the first join. Otherwise a leader assigns with
        # an empty metadata snapshot and rejoins when the metadata arrives (assignment snapshot
        # != metadata snapshot), and kafka-python 3.0.12 can lose that join: if a poll times
        # out while it is in flight, need_rejoin() is False on the next poll (rejoin_needed was
        # never set; coordinator/base.py:480, consumer.py:605-620), the join's outcome is never
        # applied and the member stops heartbeating until its session expires. A client bug,
        # whatever the broker; topics() fetches the metadata (and so the snapshot) first.
        assert set(self.topics) <= self.consumer.topics()

    def _poll(self) -> None:
        from kafka.errors import KafkaError

        try:
            self.consumer.poll(timeout_ms=100)
        except KafkaError as error:
            # kafka-python 3.0.12 lets a retriable error out of poll() when a broker dies
            # during its coordinator lookup: FindCoordinator fails with KafkaConnectionError
            # (an InvalidMetadataError), and the metadata refresh its handler then awaits,
            # sent to the same dead node, raises again outside any handler
            # (coordinator/base.py, ensure_coordinator_ready_async). The Java client retries
            # there; an application on kafka-python must catch it around poll() and poll
            # again, against Kafka's brokers as against ours, and so does this member.
            if not error.retriable:
                raise
            self.poll_errors.append(error)

    def _close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()

    def generation(self) -> int | None:
        if self.consumer is None:
            return None
        generation: int = self.consumer.group_metadata().generation_id
        return generation

    def commit(self, offsets: dict[TP, int]) -> None:
        from kafka.structs import OffsetAndMetadata, TopicPartition

        self.call(
            lambda: self.consumer.commit(
                {
                    TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                    for (t, p), o in offsets.items()
                }
            )
        )

    def committed(self, tps: Iterable[TP]) -> dict[TP, int | None]:
        from kafka.structs import TopicPartition

        wanted = list(tps)
        return dict(  # type: ignore[no-any-return]
            self.call(lambda: {tp: self.consumer.committed(TopicPartition(*tp)) for tp in wanted})
        )

    def position(self, tps: Iterable[TP]) -> dict[TP, int]:
        from kafka.structs import TopicPartition

        wanted = list(tps)
        return dict(  # type: ignore[no-any-return]
            self.call(lambda: {tp: self.consumer.position(TopicPartition(*tp)) for tp in wanted})
        )


# --- confluent-kafka (librdkafka) ----------------------------------------------------------------


class ConfluentMember(SyncMember):
    client = "confluent-kafka"
    consumer: Any = None
    # librdkafka's position() is the application's position: OFFSET_INVALID until a record is
    # consumed, and the gateway stores no records.
    position_before_records = False

    def _open(self) -> None:
        from confluent_kafka import Consumer

        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": self.name,
            "enable.auto.commit": False,
            "session.timeout.ms": self.session_ms,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "fetch.wait.max.ms": 100,
            "log_level": 0,
            **self.options,
        }
        if self.instance_id is not None:
            conf["group.instance.id"] = self.instance_id
        self.consumer = Consumer(conf)

        def on_assign(consumer: Any, partitions: Any) -> None:
            self._listener_assigned((tp.topic, tp.partition) for tp in partitions)

        def on_revoke(consumer: Any, partitions: Any) -> None:
            self._listener_revoked((tp.topic, tp.partition) for tp in partitions)

        self.consumer.subscribe(list(self.topics), on_assign=on_assign, on_revoke=on_revoke)

    def _poll(self) -> None:
        self.consumer.poll(0.1)

    def _close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()

    def member_id(self) -> str:
        return str(self.call(lambda: self.consumer.memberid()))

    def commit(self, offsets: dict[TP, int]) -> None:
        from confluent_kafka import TopicPartition

        self.call(
            lambda: self.consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                asynchronous=False,
            )
        )

    def committed(self, tps: Iterable[TP]) -> dict[TP, int | None]:
        from confluent_kafka import OFFSET_INVALID, TopicPartition

        wanted = [TopicPartition(t, p) for t, p in tps]
        answer = self.call(lambda: self.consumer.committed(wanted, timeout=20))
        return {
            (tp.topic, tp.partition): None if tp.offset == OFFSET_INVALID else tp.offset
            for tp in answer
        }

    def position(self, tps: Iterable[TP]) -> dict[TP, int]:
        from confluent_kafka import TopicPartition

        wanted = [TopicPartition(t, p) for t, p in tps]
        answer = self.call(lambda: self.consumer.position(wanted))
        return {(tp.topic, tp.partition): tp.offset for tp in answer}


# --- aiokafka ------------------------------------------------------------------------------------


class AiokafkaMember(Member):
    """An AIOKafkaConsumer on its own event loop in the member's thread."""

    client = "aiokafka"
    consumer: Any = None

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self.error = exc

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                member._listener_revoked((tp.topic, tp.partition) for tp in revoked)

            def on_partitions_assigned(self, assigned: Any) -> None:
                member._listener_assigned((tp.topic, tp.partition) for tp in assigned)

        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id=self.name,
            group_instance_id=self.instance_id,
            enable_auto_commit=False,
            session_timeout_ms=self.session_ms,
            heartbeat_interval_ms=HEARTBEAT_MS,
            fetch_max_wait_ms=100,
            **self.options,
        )
        self.consumer.subscribe(list(self.topics), listener=Listener())
        await self.consumer.start()
        try:
            while not self._stopping.is_set():
                await self.consumer.getmany(timeout_ms=100)
                for fn, future in self._commands_due():
                    try:
                        result = fn()
                        if inspect.isawaitable(result):
                            result = await result
                        future.set_result(result)
                    except BaseException as exc:
                        future.set_exception(exc)
        finally:
            await self.consumer.stop()

    def generation(self) -> int | None:
        # aiokafka has no public accessor: its coordinator's attribute (aiokafka 0.14.0).
        coordinator = getattr(self.consumer, "_coordinator", None)
        return None if coordinator is None else int(coordinator.generation)

    def commit(self, offsets: dict[TP, int]) -> None:
        from aiokafka.structs import TopicPartition

        self.call(
            lambda: self.consumer.commit(
                {TopicPartition(t, p): (o, "") for (t, p), o in offsets.items()}
            )
        )

    def committed(self, tps: Iterable[TP]) -> dict[TP, int | None]:
        from aiokafka.structs import TopicPartition

        wanted = list(tps)

        async def read() -> dict[TP, int | None]:
            return {tp: await self.consumer.committed(TopicPartition(*tp)) for tp in wanted}

        return dict(self.call(read))

    def position(self, tps: Iterable[TP]) -> dict[TP, int]:
        from aiokafka.structs import TopicPartition

        wanted = list(tps)

        async def read() -> dict[TP, int]:
            return {tp: await self.consumer.position(TopicPartition(*tp)) for tp in wanted}

        return dict(self.call(read))


class ConfluentConsumerProtocolMember(ConfluentMember):
    """confluent-kafka with ``group.protocol=consumer`` (KIP-848): the coordinator assigns, and
    the listener is told what is added and what is revoked (incremental), never the whole set.
    Session and heartbeat timing are the coordinator's (the client may not set them)."""

    client = "confluent-kafka-consumer"

    def _open(self) -> None:
        from confluent_kafka import Consumer

        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "group.protocol": "consumer",
            "client.id": self.name,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "log_level": 0,
        }
        if self.instance_id is not None:
            conf["group.instance.id"] = self.instance_id
        self.consumer = Consumer(conf)

        def on_assign(consumer: Any, partitions: Any) -> None:
            added = {(tp.topic, tp.partition) for tp in partitions}
            with self._lock:
                self._assigned = self._assigned | added
                self.assigned_calls += 1
                self.events.append(("assigned", frozenset(added)))
            if self._on_assigned_hook is not None:
                self._on_assigned_hook(self)

        def on_revoke(consumer: Any, partitions: Any) -> None:
            self._listener_revoked((tp.topic, tp.partition) for tp in partitions)

        self.consumer.subscribe(list(self.topics), on_assign=on_assign, on_revoke=on_revoke)


CLIENTS: dict[str, type[Member]] = {
    "kafka-python": KafkaPythonMember,
    "aiokafka": AiokafkaMember,
    "confluent-kafka": ConfluentMember,
    "confluent-kafka-consumer": ConfluentConsumerProtocolMember,
}


# --- a member in a subprocess, to be killed -----------------------------------------------------


class ProcessMember:
    """A member in a subprocess (the same :class:`Member` class), which reports each assignment
    its listener receives as a JSON line; :meth:`kill` SIGKILLs it (no LeaveGroup is sent)."""

    def __init__(self, client: str, port: int, group: str, name: str, session_ms: int) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._assigned: frozenset[TP] = frozenset()
        self.assigned_calls = 0
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.client_scenarios",
                client,
                str(port),
                group,
                name,
                str(session_ms),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            event = json.loads(line)
            with self._lock:
                self._assigned = frozenset((t, p) for t, p in event["assigned"])
                self.assigned_calls += 1

    def assigned(self) -> frozenset[TP]:
        with self._lock:
            return self._assigned

    def partitions(self, topic: str = "t") -> set[int]:
        return {p for t, p in self.assigned() if t == topic}

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def cleanup(self) -> None:
        if self.process.poll() is None:
            self.kill()


def _subprocess_main(argv: list[str]) -> None:
    client, port, group, name, session_ms = argv
    done = threading.Event()

    def report(member: Member) -> None:
        print(json.dumps({"assigned": sorted(member.assigned())}), flush=True)

    member = CLIENTS[client](int(port), group, name, session_ms=int(session_ms), on_assigned=report)
    done.wait()  # until SIGKILLed
    member.close()


# --- the scenarios -------------------------------------------------------------------------------

AnyMember = Member | ProcessMember


def disjoint_cover(members: list[AnyMember], partitions: int = PARTITIONS) -> bool:
    """Every member holds some of topic t's partitions, no two hold the same, all are held."""
    shares = [m.partitions() for m in members]
    return (
        all(shares)
        and sum(map(len, shares)) == partitions
        and set().union(*shares) == set(range(partitions))
    )


def wait_for(predicate: Callable[[], bool], seconds: float, what: Callable[[], Any]) -> None:
    assert until(predicate, seconds), what()


def shares(members: list[AnyMember]) -> dict[str, list[int]]:
    return {m.name: sorted(m.partitions()) for m in members}


def rebalanced(members: list[AnyMember], before: dict[str, int]) -> Callable[[], bool]:
    """Each member's listener was called since ``before`` and the shares are a disjoint cover."""
    return lambda: (
        all(m.assigned_calls > before.get(m.name, 0) for m in members) and disjoint_cover(members)
    )


def calls(members: list[AnyMember]) -> dict[str, int]:
    return {m.name: m.assigned_calls for m in members}


def no_errors(members: list[Member]) -> None:
    assert all(m.error is None for m in members), {m.name: repr(m.error) for m in members}


def scenario_membership(client: str, port: int) -> dict[str, Any]:
    """Three members form a group; a fourth joins; one leaves (close); one is killed. After each
    step every member's listener reports a new assignment and the shares are a disjoint cover of
    the partitions; the generation (where exposed) rises at each rebalance and is shared.
    Returns what was observed (timings) for the caller's own assertions."""
    cls = CLIENTS[client]
    group = f"{client}-membership"
    members: list[Member] = [cls(port, group, f"{client}-{i}") for i in range(3)]
    killed: ProcessMember | None = None
    observed: dict[str, Any] = {}
    try:
        wait_for(lambda: disjoint_cover(members), SETTLE_S, lambda: shares(members))
        first = _common_generation(members)

        # A fourth member joins (in a subprocess, so that it can be killed below).
        before = calls(members)
        killed = ProcessMember(client, port, group, f"{client}-killed", KILLED_SESSION_MS)
        four: list[AnyMember] = [*members, killed]
        wait_for(rebalanced(four, before), SETTLE_S, lambda: (shares(four), calls(four)))
        second = _common_generation(members)
        assert first is None or second is None or second > first, (first, second)
        assert all(len(m.partitions()) in (1, 2) for m in four), shares(four)

        # One leaves (close: a LeaveGroup), the other three rebalance at once.
        leaving = members.pop()
        before = calls([*members, killed])
        left_at = time.monotonic()
        leaving.close()
        three: list[AnyMember] = [*members, killed]
        wait_for(rebalanced(three, before), SETTLE_S, lambda: (shares(three), calls(three)))
        observed["leave_rebalance_s"] = time.monotonic() - left_at
        third = _common_generation(members)
        assert second is None or third is None or third > second, (second, third)

        # One is killed (no LeaveGroup): the others rebalance once its session has expired.
        before = calls(members)
        killed.kill()
        killed_at = time.monotonic()
        wait_for(
            rebalanced(members, before),
            KILLED_SESSION_MS / 1000 + SETTLE_S,
            lambda: (shares(members), calls(members)),
        )
        observed["kill_rebalance_s"] = elapsed = time.monotonic() - killed_at
        # Not before the killed member's session timeout (less one heartbeat interval and slack).
        assert elapsed >= KILLED_SESSION_MS / 1000 - 1.5, elapsed
        fourth = _common_generation(members)
        assert third is None or fourth is None or fourth > third, (third, fourth)
        assert all(len(m.partitions()) == 3 for m in members), shares(members)
        no_errors(members)
        observed["generations"] = [first, second, third, fourth]
        return observed
    finally:
        if killed is not None:
            killed.cleanup()
        for m in members:
            m.close()


def _common_generation(members: list[Member]) -> int | None:
    """The generation all members hold (None if the client does not expose it)."""
    generations = {m.generation() for m in members}
    if generations == {None}:
        return None
    wait_for(
        lambda: len({m.generation() for m in members}) == 1,
        SETTLE_S,
        lambda: {m.name: m.generation() for m in members},
    )
    generation = members[0].generation()
    assert generation is not None and generation >= 1, generation
    return generation


def scenario_commits_survive_restart(client: str, warehouse: str) -> None:
    """Two members commit through the client, read their commits back; the gateway is stopped
    and a new one started on the same Delta log; a new member of the group reads the same
    offsets back through the client (committed) and resumes from them (position)."""
    cls = CLIENTS[client]
    group = f"{client}-restart"
    everything = [("t", p) for p in range(PARTITIONS)]
    expected = {tp: 100 + tp[1] for tp in everything}
    first = Running(warehouse=warehouse)
    try:
        members = [cls(first.port, group, f"{client}-{i}") for i in range(2)]
        try:
            wait_for(lambda: disjoint_cover(list(members)), SETTLE_S, lambda: shares(list(members)))
            for m in members:
                mine = {tp: expected[tp] for tp in m.assigned()}
                m.commit(mine)
                committed = m.committed(mine)
                assert committed == mine, committed
            no_errors(members)
        finally:
            for m in members:
                m.close()
    finally:
        first.stop()
    second = Running(warehouse=warehouse)
    try:
        member = cls(second.port, group, f"{client}-after")
        try:
            wait_for(lambda: disjoint_cover([member]), SETTLE_S, lambda: shares([member]))
            committed = member.committed(everything)
            assert committed == expected, committed
            # It resumes from the committed offsets (where the client reports a position
            # before any record is consumed).
            if cls.position_before_records:
                wait_for(
                    lambda: member.position(everything) == expected,
                    15,
                    lambda: member.position(everything),
                )
            no_errors([member])
        finally:
            member.close()
    finally:
        second.stop()


def scenario_static_restart(client: str, port: int) -> None:
    """Three static members (group.instance.id); one is closed (no LeaveGroup for a static
    member) and restarted with the same instance id within its session timeout: it gets its
    partitions back without a rebalance (the others' listeners are not called, their
    assignments and generation are unchanged)."""
    cls = CLIENTS[client]
    group = f"{client}-static"

    def start(i: int) -> Member:
        return cls(port, group, f"{client}-s{i}", instance_id=f"{client}-instance-{i}")

    # The first member is started alone, so that it is the leader (the restarted one is not).
    members = [start(0)]
    try:
        wait_for(lambda: disjoint_cover(members), SETTLE_S, lambda: shares(members))
        members += [start(1), start(2)]
        wait_for(lambda: disjoint_cover(members), SETTLE_S, lambda: shares(members))
        generation = _common_generation(members)
        stay = members[:2]
        before_calls = calls(stay)
        before_shares = shares(members)

        restarting = members.pop()
        restarting.close()
        restarted = start(2)
        members.append(restarted)
        wait_for(
            lambda: restarted.partitions() == set(before_shares[restarting.name]),
            SESSION_MS / 1000 - 2,
            lambda: shares(members),
        )
        # Long enough for the others to see a rebalance (several heartbeat intervals).
        time.sleep(2.0)
        assert calls(stay) == before_calls, (calls(stay), before_calls)
        assert {m.name: sorted(m.partitions()) for m in stay} == {
            m.name: before_shares[m.name] for m in stay
        }
        assert restarted.assigned_calls == 1, restarted.events
        assert sorted(restarted.partitions()) == before_shares[restarting.name]
        if generation is not None:
            assert [m.generation() for m in members] == [generation] * 3
        no_errors(members)
    finally:
        for m in members:
            m.close()


def kafka_python_admin_scenario(port: int, group: str) -> None:
    """kafka-python's KafkaAdminClient on a live group of two (list, describe, offsets, and
    Kafka's refusals: alter, delete the group, delete offsets of a subscribed topic), then on the
    group once empty (alter, delete offsets, delete it, gone)."""
    import kafka.errors as Errors
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata, TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", client_id="admin")
    members = [KafkaPythonMember(port, group, f"admin-m{i}") for i in range(2)]
    try:
        wait_for(lambda: disjoint_cover(list(members)), SETTLE_S, lambda: shares(list(members)))
        for m in members:
            m.commit({tp: 7 for tp in m.assigned()})
        t = [TopicPartition("t", p) for p in range(PARTITIONS)]

        listed = admin.list_groups()
        mine = [g for g in listed if g["group_id"] == group]
        assert len(mine) == 1 and mine[0]["protocol_type"] == "consumer", listed

        described = admin.describe_groups([group])[group]
        assert described["error"] is None and described["group_state"] == "Stable", described
        assert described["protocol_type"] == "consumer", described
        assert described["protocol_data"] in ("range", "roundrobin"), described
        by_client = {m["client_id"]: m for m in described["members"]}
        assert sorted(by_client) == ["admin-m0", "admin-m1"], described
        for m in members:
            entry = by_client[m.name]
            assert entry["client_host"] == "/127.0.0.1"
            assignment = entry["member_assignment"]
            got = {
                (a["topic"], p) for a in assignment["assigned_partitions"] for p in a["partitions"]
            }
            assert got == set(m.assigned()), (got, m.assigned())
            assert entry["member_metadata"]["topics"] == ["t"]

        offsets = admin.list_group_offsets(group)[group]
        assert {tp: o.offset for tp, o in offsets.items()} == {tp: 7 for tp in t}

        # Kafka refuses an admin commit (generation -1, no member) into a live group ...
        refused = admin.alter_group_offsets(group, {t[0]: OffsetAndMetadata(1, "", -1)})
        assert refused == {t[0]: Errors.UnknownMemberIdError}
        # ... deleting a live group ...
        assert admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
        # ... and deleting the offsets of a topic the group is subscribed to.
        assert admin.delete_group_offsets(group, [t[0]]) == {
            t[0]: Errors.GroupSubscribedToTopicError
        }
        assert admin.list_group_offsets(group)[group][t[0]].offset == 7
    finally:
        for m in members:
            m.close()

    # Empty now (both members left): it is altered, its offsets deleted, then it is deleted.
    described = admin.describe_groups([group])[group]
    assert described["group_state"] == "Empty" and described["members"] == [], described
    other = [TopicPartition("other", p) for p in range(2)]
    altered = admin.alter_group_offsets(
        group, {tp: OffsetAndMetadata(40 + tp.partition, "m", -1) for tp in [*t, *other]}
    )
    assert set(altered.values()) == {Errors.NoError}, altered
    offsets = admin.list_group_offsets(group)[group]
    assert {tp: (o.offset, o.metadata) for tp, o in offsets.items()} == {
        tp: (40 + tp.partition, "m") for tp in [*t, *other]
    }
    assert admin.delete_group_offsets(group, other) == dict.fromkeys(other, Errors.NoError)
    assert set(admin.list_group_offsets(group)[group]) == set(t)
    assert admin.delete_groups([group]) == {group: "OK"}
    assert [g for g in admin.list_groups() if g["group_id"] == group] == []
    assert admin.describe_groups([group])[group]["group_state"] == "Dead"
    assert admin.delete_groups([group]) == {group: "GroupIdNotFoundError"}
    admin.close()


if __name__ == "__main__":
    _subprocess_main(sys.argv[1:])
