"""The gateway's back ends: the embedded engine when its log write fails, and the
Spark-job back end (requests into the job's inbox, answers from its ``responses`` table), first
with the job's micro-batch run without Spark (:class:`LocalJob`), then through the real job."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.gateway import codec
from coordinator.gateway.forwarding import JobBackend
from tests.gateway_support import REQUESTS, Running, call, read_frame, until

COORDINATOR_NOT_AVAILABLE = 15
COORDINATOR_LOAD_IN_PROGRESS = 14


def commit(port: int, group: str, offset: int, **fields: Any) -> int:
    body = dict(REQUESTS[codec.OFFSET_COMMIT], group_id=group, **fields)
    body["topics"] = [
        {
            "name": "t",
            "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}
            ],
        }
    ]
    answer = call(port, codec.OFFSET_COMMIT, 9, body)
    return int(answer["topics"][0]["partitions"][0]["error_code"])


def committed(port: int, group: str) -> int:
    body = dict(REQUESTS[codec.OFFSET_FETCH], group_id=group)
    answer = call(port, codec.OFFSET_FETCH, 7, body)
    return int(answer["topics"][0]["partitions"][0]["committed_offset"])


def form_one_member_group(port: int, group: str) -> tuple[str, int]:
    """JoinGroup (MEMBER_ID_REQUIRED, then again with the id) and the leader's SyncGroup: a
    Stable group of one, whose GroupMetadata record is in the log. Returns (member, generation)."""
    join = dict(REQUESTS[codec.JOIN_GROUP], group_id=group)
    first = call(port, codec.JOIN_GROUP, 9, join)
    assert first["error_code"] == 79  # MEMBER_ID_REQUIRED
    joined = call(port, codec.JOIN_GROUP, 9, dict(join, member_id=first["member_id"]))
    assert joined["error_code"] == 0, joined
    member, generation = joined["member_id"], joined["generation_id"]
    sync = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": b"\x00\x01"}],
    }
    synced = call(port, codec.SYNC_GROUP, 5, sync)
    assert synced["error_code"] == 0, synced
    return member, generation


def heartbeat(port: int, group: str, member: str, generation: int) -> int:
    body = {"group_id": group, "generation_id": generation, "member_id": member}
    return int(call(port, codec.HEARTBEAT, 4, body)["error_code"])


# --- the embedded engine when the log cannot be written ----------------------------------------


def test_failed_log_write_is_not_acknowledged_and_the_engine_reloads_the_log(tmp_path: Path):
    """Kafka acknowledges nothing it could not append, and loses nothing it acknowledged: the
    commit whose write failed is refused (COORDINATOR_NOT_AVAILABLE) and is not served by a
    later OffsetFetch; what the log holds (an earlier commit, a Stable group and its member)
    carries on after the engine is rebuilt from it."""
    running = Running(str(tmp_path / "wh"))
    try:
        port, backend = running.port, running.gateway.backend
        assert commit(port, "g", 5) == 0
        member, generation = form_one_member_group(port, "live")
        sink = backend._sink
        real_write = sink.write_batch
        calls = {"n": 0}

        def fails_once(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 1:
                raise OSError("disk full")
            return real_write(*args, **kwargs)

        sink.write_batch = fails_once
        assert commit(port, "g", 6) == COORDINATOR_NOT_AVAILABLE
        assert until(lambda: not backend._loading, 30)
        assert backend.reloads == 1
        assert committed(port, "g") == 5  # the refused commit was never applied
        assert heartbeat(port, "live", member, generation) == 0  # the group came back from the log
        assert commit(port, "g", 7) == 0
        assert committed(port, "g") == 7
    finally:
        running.stop()
    again = Running(str(tmp_path / "wh"))  # and the log agrees
    try:
        assert committed(again.port, "g") == 7
    finally:
        again.stop()


def test_parked_join_is_answered_when_the_log_write_fails(tmp_path: Path):
    """A join parked in the engine when the engine is replaced is not left hanging: it gets
    COORDINATOR_NOT_AVAILABLE and the client looks for the coordinator again."""
    running = Running(str(tmp_path / "wh"))
    try:
        port, backend = running.port, running.gateway.backend
        member, _ = form_one_member_group(port, "live")
        answers: list[dict[str, Any]] = []
        join = dict(REQUESTS[codec.JOIN_GROUP], group_id="live", member_id=member)
        parked = threading.Thread(
            target=lambda: answers.append(call(port, codec.JOIN_GROUP, 9, join)), daemon=True
        )
        # The member rejoins (a rebalance), then a second one asks in: the first join is parked
        # until the second member's join arrives or the rebalance times out.
        second = dict(REQUESTS[codec.JOIN_GROUP], group_id="live")
        other = call(port, codec.JOIN_GROUP, 9, second)
        assert other["error_code"] == 79
        parked.start()
        # Parked: the backend holds the join, unanswered.
        assert until(
            lambda: any(r["api"] == "join_group" for r, _ in list(backend._waiting.values())), 30
        )
        assert not answers
        backend._sink.write_batch = _raise
        assert commit(port, "g", 1) == COORDINATOR_NOT_AVAILABLE
        parked.join(30)
        assert answers and answers[0]["error_code"] == COORDINATOR_NOT_AVAILABLE
    finally:
        running.stop()


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise OSError("disk full")


# --- the Spark-job back end, with the job's batch run without Spark ------------------------------


class LocalJobLoop:
    """The job's micro-batch (:class:`LocalJob`) on a warehouse, every ``trigger_ms`` of the wall
    clock, in a thread: the inbox in, the tables out, timers fired, as the Spark job does."""

    def __init__(self, warehouse: Path, trigger_ms: int = 50, **overrides: Any) -> None:
        from coordinator.stream.local import LocalJob
        from tests.stream_support import job_settings

        self.job = LocalJob(job_settings(warehouse, **overrides))
        self.trigger_ms = trigger_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.job.poll_inbox(time.time_ns() // 1_000_000)
            self._stop.wait(self.trigger_ms / 1000)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def test_job_backend_forwards_group_apis_to_the_job(tmp_path: Path):
    warehouse = tmp_path / "wh"
    loop = LocalJobLoop(warehouse)
    running = Running(backend=JobBackend(warehouse, poll_interval_ms=20))
    try:
        port = running.port
        found = call(port, codec.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert (found["error_code"], found["port"]) == (0, port)  # the gateway, not the job
        member, generation = form_one_member_group(port, "g")
        assert heartbeat(port, "g", member, generation) == 0
        assert heartbeat(port, "g", member, generation + 1) == 22  # ILLEGAL_GENERATION
        assert (
            commit(port, "g", 42, generation_id_or_member_epoch=generation, member_id=member) == 0
        )
        assert committed(port, "g") == 42
        described = call(port, codec.DESCRIBE_GROUPS, 5, REQUESTS[codec.DESCRIBE_GROUPS])["groups"][
            0
        ]
        assert (described["group_state"], len(described["members"])) == ("Stable", 1)
        from deltalake import DeltaTable

        log = DeltaTable(str(warehouse / "tables" / "consumer_offsets")).to_pyarrow_table()
        assert 42 in log.column("committed_offset").to_pylist()  # the job wrote it
        assert running.gateway.backend.files_written >= 1
    finally:
        running.stop()
        loop.stop()


def test_job_backend_answers_coordinator_not_available_when_the_job_is_silent(tmp_path: Path):
    """No job runs on the warehouse: the request waits in the inbox, and the client is told
    COORDINATOR_NOT_AVAILABLE after ``request_timeout_ms`` rather than left waiting."""
    warehouse = tmp_path / "wh"
    running = Running(backend=JobBackend(warehouse, request_timeout_ms=300))
    try:
        started = time.monotonic()
        assert commit(running.port, "g", 1) == COORDINATOR_NOT_AVAILABLE
        assert time.monotonic() - started >= 0.25  # it waited for request_timeout_ms
        assert running.gateway.backend.timed_out == 1
        assert list((warehouse / "inbox").iterdir())  # the request is in the job's inbox
    finally:
        running.stop()


def _back_to_back(port: int, group: str) -> list[Any]:
    """A commit, an offset fetch and a heartbeat sent back to back on one connection (as
    librdkafka sends on its coordinator connection), then their three answers."""
    sent = [
        (codec.OFFSET_COMMIT, 8, dict(REQUESTS[codec.OFFSET_COMMIT], group_id=group)),
        (codec.OFFSET_FETCH, 7, dict(REQUESTS[codec.OFFSET_FETCH], group_id=group)),
        (codec.HEARTBEAT, 4, dict(REQUESTS[codec.HEARTBEAT], group_id=group)),
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(
            b"".join(codec.encode_request(k, v, i, body) for i, (k, v, body) in enumerate(sent))
        )
        answers = []
        for i, (api_key, version, _) in enumerate(sent):
            frame = read_frame(sock)
            assert frame is not None, "connection closed"
            correlation_id, answer = codec.decode_response(api_key, version, frame)
            assert correlation_id == i
            answers.append(codec.plain(answer))
    return answers


def _answered_by_one_batch(warehouse: Path, port: int, group: str) -> None:
    """The three back-to-back requests reach the job in one inbox file, in the order sent (the
    fetch reads the commit before it), and one micro-batch answers them all."""
    from coordinator.stream.delta_read import read_table
    from coordinator.stream.schema import RESPONSES, Warehouse

    committed, fetched, heartbeat = _back_to_back(port, group)
    assert committed["topics"][0]["partitions"][0]["error_code"] == 0
    assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 5
    assert heartbeat["error_code"] == 25  # UNKNOWN_MEMBER_ID: the group has no members
    rows = read_table(Warehouse.at(warehouse).tables / RESPONSES).to_pylist()
    batches = {(r["api"], r["batch_id"]) for r in rows if r["group_id"] == group}
    assert len(batches) == 3 and len({batch for _, batch in batches}) == 1, batches


def test_back_to_back_requests_on_one_connection_are_answered_by_one_batch(tmp_path: Path):
    warehouse = tmp_path / "wh"
    loop = LocalJobLoop(warehouse)
    running = Running(backend=JobBackend(warehouse, poll_interval_ms=20))
    try:
        _answered_by_one_batch(warehouse, running.port, "back-to-back")
        assert running.gateway.backend.files_written == 1
    finally:
        running.stop()
        loop.stop()


@pytest.mark.slow
def test_back_to_back_requests_on_one_connection_are_answered_by_one_spark_batch(
    spark: Any, tmp_path: Path
):
    """With the Spark job: a client's three requests queued on one connection are answered in
    one micro-batch, not one batch each (pipelined dispatch, gateway connection module)."""
    from tests.stream_support import RunningCoordinator

    warehouse = tmp_path / "wh"
    job = RunningCoordinator(spark, warehouse).start()
    running = Running(backend=JobBackend(warehouse))
    try:
        _answered_by_one_batch(warehouse, running.port, "back-to-back-spark")
    finally:
        running.stop()
        job.stop()


def _consumers_form_rebalance_and_commit(port: int, group: str, wait_s: float) -> None:
    """Three kafka-python consumers form a group (a disjoint cover of topic t), commit 100 on
    their partitions and read it back, then one leaves and the other two cover t again."""
    from tests import client_scenarios as sc

    members = [sc.KafkaPythonMember(port, group, f"{group}-{i}") for i in range(3)]
    try:
        sc.wait_for(lambda: sc.disjoint_cover(list(members)), wait_s, lambda: sc.shares(members))
        for m in members:
            mine = m.assigned()
            m.commit(dict.fromkeys(mine, 100))
            assert m.committed(mine) == dict.fromkeys(mine, 100)
        leaving = members.pop()
        leaving.close()
        sc.wait_for(lambda: sc.disjoint_cover(list(members)), wait_s, lambda: sc.shares(members))
        sc.no_errors(members)
    finally:
        for m in members:
            m.close()


@pytest.mark.slow
def test_kafka_python_consumers_through_the_job_backend(tmp_path: Path):
    """Real consumers form, rebalance and commit through the gateway with the job's batch (no
    Spark) behind it: every answer takes a micro-batch."""
    warehouse = tmp_path / "wh"
    loop = LocalJobLoop(warehouse, trigger_ms=100)
    running = Running(backend=JobBackend(warehouse))
    try:
        _consumers_form_rebalance_and_commit(running.port, "kp-job", 60)
    finally:
        running.stop()
        loop.stop()


@pytest.mark.slow
def test_kafka_python_consumers_through_the_spark_job(spark: Any, tmp_path: Path):
    """End to end: kafka-python consumers -> the gateway -> the Spark job's inbox ->
    applyInPandasWithState -> Delta -> the gateway -> the consumers, with the client suites'
    10 s sessions (about ten micro-batches here)."""
    from tests.stream_support import RunningCoordinator

    warehouse = tmp_path / "wh"
    job = RunningCoordinator(spark, warehouse).start()
    running = Running(backend=JobBackend(warehouse))
    try:
        _consumers_form_rebalance_and_commit(running.port, "kp-spark", 120)
        from deltalake import DeltaTable

        log = DeltaTable(str(warehouse / "tables" / "consumer_offsets")).to_pyarrow_table()
        commits = [
            (r["group_id"], r["partition"], r["committed_offset"])
            for r in log.to_pylist()
            if r["record_type"] == "offset_commit"
        ]
        assert sorted(commits) == [("kp-spark", p, 100) for p in range(6)]
    finally:
        running.stop()
        job.stop()


def test_operator_tools_read_the_embedded_gateways_warehouse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """The gateway writes group summaries as the job does: ``coordinator groups`` describes a
    group formed through it, its offsets, and its end once the gateway deletes it."""
    from coordinator.cli import main
    from coordinator.config import CoordinatorConfig
    from coordinator.gateway.embedded import EmbeddedBackend

    warehouse = tmp_path / "wh"
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    running = Running(backend=EmbeddedBackend(config, warehouse, summary_interval_ms=50))
    try:
        member, generation = form_one_member_group(running.port, "live")
        assert (
            commit(
                running.port, "live", 9, generation_id_or_member_epoch=generation, member_id=member
            )
            == 0
        )
        assert commit(running.port, "gone", 3) == 0
        deleted = call(running.port, codec.DELETE_GROUPS, 2, {"groups_names": ["gone"]})
        assert deleted["results"][0]["error_code"] == 0
    finally:
        running.stop()  # flushes what is pending

    def groups(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["groups", "--warehouse", str(warehouse), *args])
        return code, capsys.readouterr().out

    code, out = groups("--list")
    assert (code, out.split()) == (0, ["live"])
    code, out = groups("--describe", "--group", "live", "--state")
    assert code == 0 and "Stable" in out and "range" in out, out
    code, out = groups("--describe", "--group", "live", "--members")
    assert code == 0 and member in out, out
    code, out = groups("--describe", "--group", "live", "--offsets")
    rows = [line.split() for line in out.strip().splitlines()]
    assert rows[1][:4] == ["live", "t", "0", "9"], out


@pytest.mark.slow
def test_client_membership_scenario_through_the_spark_job(spark: Any, tmp_path: Path):
    """The real-client scenario of the embedded suites, unchanged, through the Spark job:
    three kafka-python consumers form a group, a fourth joins, one leaves, one is killed and
    its 6 s session expires in the job; a rebalance each time, a disjoint cover after each. Then
    a static member restarts within its session and takes its partitions back, no rebalance;
    and kafka-python's admin client lists, describes, alters and deletes, refused where Kafka
    refuses (ListGroups answered from the job's ``group_state`` table)."""
    from tests import client_scenarios as sc
    from tests.stream_support import RunningCoordinator

    warehouse = tmp_path / "wh"
    job = RunningCoordinator(spark, warehouse).start()
    running = Running(backend=JobBackend(warehouse))
    try:
        observed = sc.scenario_membership("kafka-python", running.port)
        assert None not in observed["generations"], observed
        sc.scenario_static_restart("kafka-python", running.port)
        sc.kafka_python_admin_scenario(running.port, "kafka-python-admin")
    finally:
        running.stop()
        job.stop()


def test_the_embedded_scheduler_wakes_for_a_sooner_timer_only_and_still_expires_a_silent_member():
    """A request that arms a timer sooner than the scheduler would wake (the join's delay of 0,
    with no timer before) wakes it; a heartbeat, which only moves its member's session later,
    does not; and the member is expired once its session passes without one."""
    import asyncio

    from coordinator.config import CoordinatorConfig
    from coordinator.engine import CoordinatorNode
    from coordinator.gateway.embedded import EmbeddedBackend
    from coordinator.stream.client import wall_clock_ms

    session_ms = 400

    async def scenario() -> tuple[int, int]:
        config = CoordinatorConfig(
            group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=10
        )
        backend = EmbeddedBackend(config)
        await backend.start(CoordinatorNode())
        try:
            join = {
                "api": "join_group",
                "group_id": "g",
                "api_version": 4,
                "session_timeout_ms": session_ms,
                "rebalance_timeout_ms": session_ms,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            }
            first = await backend.submit({**join, "request_id": "j1", "member_id": ""})
            member = first["member_id"]
            # parked until the initial delay's timer (0 ms) fires: the scheduler must wake
            joined = await asyncio.wait_for(
                backend.submit({**join, "request_id": "j2", "member_id": member}), 5
            )
            assert joined["error"] is None, joined
            synced = await backend.submit(
                {
                    "api": "sync_group",
                    "request_id": "s",
                    "group_id": "g",
                    "member_id": member,
                    "generation_id": joined["generation_id"],
                    "protocol_type": "consumer",
                    "protocol_name": "range",
                    "assignments": [{"member_id": member, "assignment": b"a"}],
                }
            )
            assert synced["error"] is None, synced
            for n in range(5):
                await asyncio.sleep(session_ms / 4000)
                answer = await backend.submit(
                    {
                        "api": "heartbeat",
                        "request_id": f"h{n}",
                        "group_id": "g",
                        "api_version": 4,
                        "member_id": member,
                        "group_instance_id": None,
                        "generation_id": joined["generation_id"],
                    }
                )
                assert answer["error"] is None, answer
                assert not backend._wake.is_set()  # a later session: the scheduler sleeps on
            last = wall_clock_ms()
            while backend.engine.group("g").state.value != "Empty":  # type: ignore[union-attr]
                assert wall_clock_ms() - last < session_ms + 5_000, "never expired"
                await asyncio.sleep(0.01)
            return last, wall_clock_ms()
        finally:
            await backend.stop()

    last, expired = asyncio.run(scenario())
    assert expired - last >= session_ms - 5  # not before its session passed (ms clock)
