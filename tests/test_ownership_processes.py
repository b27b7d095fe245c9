"""One writer per warehouse, with real processes: embedded gateways (``coordinator gateway
--log-warehouse``) and Spark jobs (``coordinator run``) on one warehouse. A second one is refused
while the first lives; a dead one is taken over; a paused one (SIGSTOP) is taken over once its
lease expired and, resumed (SIGCONT), writes nothing more and stops with "lost ownership".

Every wait is on a condition (a port answering, a process exiting, a lease expiring)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from coordinator.gateway import codec
from coordinator.stream import ownership, schema
from coordinator.stream.ownership import EPOCH_PROPERTY
from tests.gateway_support import REQUESTS, call, read_frame, until
from tests.stream_support import simple_commit
from tests.test_gateway_backends import commit

REPO = Path(__file__).resolve().parents[1]
NOT_COORDINATOR = 16


class Process:
    """A ``coordinator`` command in its own process group, its output kept in files."""

    def __init__(self, tmp: Path, name: str, *args: str) -> None:
        self.name = name
        self.stdout = tmp / f"{name}.out"
        self.stderr = tmp / f"{name}.err"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.stdout, "wb") as out, open(self.stderr, "wb") as err:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "coordinator", *args],
                cwd=REPO,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        return self.stdout.read_text() + self.stderr.read_text()

    def wait(self, timeout_s: float = 120) -> int:
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running:\n{self.output()}") from None

    def signal(self, sig: int) -> None:
        os.killpg(self.pid, sig)

    def kill(self) -> None:
        if self.popen.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(self.pid, sig)
                except ProcessLookupError:
                    break
            self.popen.wait(30)


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gateway(tmp: Path, name: str, warehouse: Path, port: int, lease_ms: int = 20_000) -> Process:
    return Process(
        tmp,
        name,
        "gateway",
        "--listen",
        f"127.0.0.1:{port}",
        "--embedded",
        "--log-warehouse",
        str(warehouse),
        "--topic",
        "t:6",
        "--owner-lease-timeout-ms",
        str(lease_ms),
        "--set",
        "group.initial.rebalance.delay.ms=0",
    )


def serving(process: Process, warehouse: Path, port: int, timeout_s: float = 60) -> None:
    def answers() -> bool:
        assert process.popen.poll() is None, process.output()
        claim = ownership.newest_claim(ownership.owner_dir(warehouse))
        if claim is None or claim.pid != process.pid:
            return False  # not loaded yet (its port opens first)
        try:  # the port opens before the log is loaded: wait for an answer
            body = dict(REQUESTS[codec.OFFSET_FETCH], group_id="probe")
            return call(port, codec.OFFSET_FETCH, 7, body)["error_code"] == 0
        except (OSError, AssertionError):
            return False

    assert until(answers, timeout_s), process.output()


def committed_groups(warehouse: Path) -> set[str]:
    table = DeltaTable(str(warehouse / "tables" / schema.CONSUMER_OFFSETS)).to_pyarrow_table()
    return set(table.column("group_id").to_pylist())


def assert_only_the_new_epoch_wrote_after_its_fence(warehouse: Path, epoch: int) -> None:
    """In every table, from the new owner's fence on, no commit carries an older epoch (every
    commit of a batch's rows carries its writer's; housekeeping commits carry none)."""
    for name in schema.TABLES:
        table = DeltaTable(str(warehouse / "tables" / name))
        assert ownership.table_epoch(table) == epoch, name
        epochs = [h.get(EPOCH_PROPERTY) for h in reversed(table.history())]
        assert str(epoch) in epochs, (name, epochs)
        fence = epochs.index(str(epoch))
        assert set(epochs[fence:]) <= {str(epoch), None}, (name, epochs)


def lease_expired(warehouse: Path) -> bool:
    return ownership.current_verdict(warehouse).free


def offset_commit_frame(group: str, offset: int) -> bytes:
    body = dict(REQUESTS[codec.OFFSET_COMMIT], group_id=group)
    body["topics"] = [
        {
            "name": "t",
            "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}
            ],
        }
    ]
    return codec.encode_request(codec.OFFSET_COMMIT, 9, 7, body)


def test_a_second_gateway_on_an_owned_log_warehouse_is_refused(tmp_path: Path, processes: Any):
    warehouse = tmp_path / "wh"
    first_port = free_port()
    first = gateway(tmp_path, "first", warehouse, first_port)
    processes.append(first)
    serving(first, warehouse, first_port)
    assert commit(first_port, "g", 5) == 0

    second = gateway(tmp_path, "second", warehouse, free_port())
    processes.append(second)
    assert second.wait() == 1
    refusal = second.output()
    for part in (
        f"is owned by coordinator gateway (pid {first.pid} on {socket.gethostname()}, epoch 1",
        f"kill {first.pid}",
        "lease expires at",
    ):
        assert part in refusal, refusal
    assert commit(first_port, "g", 6) == 0  # the owner is untouched
    status = subprocess.run(
        [sys.executable, "-m", "coordinator", "status", "--warehouse", str(warehouse)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"owner: coordinator gateway (pid {first.pid} on" in status.stdout, status
    assert "lease runs" in status.stdout, status

    # Stopped cleanly, it releases the warehouse: the next gateway starts at once.
    first.signal(signal.SIGINT)
    first.wait()
    third_port = free_port()
    third = gateway(tmp_path, "third", warehouse, third_port)
    processes.append(third)
    serving(third, warehouse, third_port)
    assert commit(third_port, "g", 7) == 0


def test_a_gateway_killed_on_this_machine_is_taken_over_at_once(tmp_path: Path, processes: Any):
    warehouse = tmp_path / "wh"
    port = free_port()
    first = gateway(tmp_path, "first", warehouse, port, lease_ms=600_000)
    processes.append(first)
    serving(first, warehouse, port)
    assert commit(port, "g", 5) == 0
    first.signal(signal.SIGKILL)
    first.wait()
    port = free_port()
    second = gateway(tmp_path, "second", warehouse, port)  # no 10-minute wait: its pid is gone
    processes.append(second)
    serving(second, warehouse, port)
    answer = call(port, codec.OFFSET_FETCH, 7, dict(REQUESTS[codec.OFFSET_FETCH], group_id="g"))
    assert answer["topics"][0]["partitions"][0]["committed_offset"] == 5


@pytest.mark.slow  # waits out a 30 s lease
def test_a_paused_gateway_taken_over_writes_nothing_more_and_stops(tmp_path: Path, processes: Any):
    """SIGSTOP the owner; a new gateway is refused while the paused one's lease runs, takes
    over once it expired, and commits. A commit sent to the paused one is handled when it
    resumes (SIGCONT), but its write is fenced: it answers NOT_COORDINATOR (or its connection
    closes as it stops), exits 1 with "lost ownership ... to <the new owner>", and its commit
    is nowhere in the log."""
    warehouse = tmp_path / "wh"
    old_port = free_port()
    old = gateway(tmp_path, "old", warehouse, old_port, lease_ms=30_000)
    processes.append(old)
    serving(old, warehouse, old_port)
    assert commit(old_port, "before", 1) == 0

    old.signal(signal.SIGSTOP)
    early = gateway(tmp_path, "early", warehouse, free_port())
    processes.append(early)
    assert early.wait() == 1 and f"kill {old.pid}" in early.output()

    # A client of the paused owner: the kernel accepts and buffers; it is served on SIGCONT.
    stale_client = socket.create_connection(("127.0.0.1", old_port), timeout=60)
    stale_client.sendall(offset_commit_frame("stale", 2))
    assert until(lambda: lease_expired(warehouse), 60)
    new_port = free_port()
    new = gateway(tmp_path, "new", warehouse, new_port)
    processes.append(new)
    serving(new, warehouse, new_port)
    assert commit(new_port, "new-owner", 3) == 0

    old.signal(signal.SIGCONT)
    try:
        frame = read_frame(stale_client)
    except OSError:
        frame = None
    finally:
        stale_client.close()
    if frame is not None:
        _, answer = codec.decode_response(codec.OFFSET_COMMIT, 9, frame)
        error = codec.plain(answer)["topics"][0]["partitions"][0]["error_code"]
        assert error == NOT_COORDINATOR
    assert old.wait() == 1
    message = old.output()
    assert "lost ownership of the warehouse" in message, message
    assert f"to coordinator gateway (pid {new.pid}" in message, message

    assert commit(new_port, "new-owner-again", 4) == 0
    assert committed_groups(warehouse) == {"before", "new-owner", "new-owner-again"}
    assert_only_the_new_epoch_wrote_after_its_fence(warehouse, 2)


def test_a_job_and_a_gateway_do_not_share_a_warehouse(tmp_path: Path, processes: Any):
    """The embedded gateway's claim is the job's too: ``coordinator run`` is refused on its log
    warehouse before it even starts Spark."""
    warehouse = tmp_path / "wh"
    port = free_port()
    owner = gateway(tmp_path, "gateway", warehouse, port)
    processes.append(owner)
    serving(owner, warehouse, port)
    job = Process(tmp_path, "job", "run", "--warehouse", str(warehouse))
    processes.append(job)
    started = time.monotonic()
    assert job.wait() == 1
    output = job.output()
    assert f"is owned by coordinator gateway (pid {owner.pid}" in output, output
    assert "SparkContext" not in output and time.monotonic() - started < 120


# --- the Spark job ------------------------------------------------------------------------------


def job(tmp: Path, name: str, warehouse: Path, lease_ms: int = 20_000) -> Process:
    return Process(
        tmp,
        name,
        "run",
        "--warehouse",
        str(warehouse),
        "--trigger-interval",
        "200",
        "--set",
        f"job.owner.lease.timeout.ms={lease_ms}",
        "--set",
        "group.initial.rebalance.delay.ms=0",
    )


def answered(process: Process, warehouse: Path, request: dict[str, Any]) -> dict[str, Any]:
    """Submit ``request`` to the job on ``warehouse`` once its tables exist; its answer."""
    from coordinator.stream.client import StreamClient

    responses = warehouse / "tables" / schema.RESPONSES

    def ready() -> bool:
        assert process.popen.poll() is None, process.output()
        return DeltaTable.is_deltatable(str(responses))

    assert until(ready, 300), process.output()
    try:
        return StreamClient(warehouse).request(request, timeout_s=300)
    except TimeoutError:
        raise AssertionError(process.output()) from None


@pytest.mark.slow
def test_a_second_job_is_refused_and_a_killed_one_is_taken_over_at_once(
    tmp_path: Path, processes: Any
):
    warehouse = tmp_path / "wh"
    first = job(tmp_path, "first", warehouse, lease_ms=600_000)
    processes.append(first)
    assert answered(first, warehouse, simple_commit("c1", "g", 5))["error_code"] == 0

    second = job(tmp_path, "second", warehouse)
    processes.append(second)
    assert second.wait() == 1
    output = second.output()
    assert f"refusing to start: the warehouse {warehouse} is owned by coordinator run " in output
    assert f"(pid {first.pid} on {socket.gethostname()}, epoch 1" in output, output

    first.signal(signal.SIGKILL)  # the driver and its JVM: no release, no 10-minute wait
    first.wait()
    third = job(tmp_path, "third", warehouse)
    processes.append(third)
    assert answered(third, warehouse, simple_commit("c2", "g", 6))["error_code"] == 0
    assert "is gone (no such process)" in third.output()
    third.signal(signal.SIGINT)
    third.wait()


@pytest.mark.slow
def test_a_paused_job_taken_over_writes_nothing_more_and_stops(tmp_path: Path, processes: Any):
    """SIGSTOP the job (driver and JVM); once its lease expired a new job takes over, fences
    every table and answers; on SIGCONT the old one writes nothing (every commit since the
    fence is the new epoch's) and exits 1 with "lost ownership ... to <the new job>"."""
    warehouse = tmp_path / "wh"
    old = job(tmp_path, "old", warehouse, lease_ms=5_000)
    processes.append(old)
    assert answered(old, warehouse, simple_commit("c1", "before", 1))["error_code"] == 0

    old.signal(signal.SIGSTOP)
    assert until(lambda: lease_expired(warehouse), 60)
    new = job(tmp_path, "new", warehouse)
    processes.append(new)
    assert answered(new, warehouse, simple_commit("c2", "new-owner", 2))["error_code"] == 0

    old.signal(signal.SIGCONT)
    assert old.wait(180) == 1
    message = old.output()
    assert "lost ownership of the warehouse" in message, message
    assert f"to coordinator run (pid {new.pid}" in message, message

    assert answered(new, warehouse, simple_commit("c3", "new-owner", 3))["error_code"] == 0
    assert committed_groups(warehouse) == {"before", "new-owner"}
    assert_only_the_new_epoch_wrote_after_its_fence(warehouse, 2)
    new.signal(signal.SIGINT)
    new.wait()
