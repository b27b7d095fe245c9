"""The coordinator run as a service, with real processes: ``coordinator demo`` ends with exit
status 0 and a clean output; SIGTERM and SIGINT stop ``coordinator run``, the ``spark-submit``
job and ``coordinator gateway`` between batches (exit 0, no error, no stack trace), and after
a restart every request submitted around the stop is answered exactly once and every commit
is in the log exactly once."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator.stream.client import StreamClient
from coordinator.stream.delta_read import read_table
from coordinator.stream.schema import Warehouse

REPO = Path(__file__).resolve().parent.parent
#: What a clean run never prints.
UNCLEAN = ("Traceback", "terminate called", "ERROR", "Exception")
STARTUP_TIMEOUT_S = 300.0
#: The job's own bound on a stop (job.shutdown.timeout.ms, 30 s: past it, it exits 1, which
#: ``status == 0`` catches), plus the process's exit and the JVM's on a loaded box.
STOP_TIMEOUT_S = 90.0


def unclean(text: str) -> list[str]:
    return [line for line in text.splitlines() if any(word in line for word in UNCLEAN)]


def until(predicate: Callable[[], Any], seconds: float, poll_s: float = 0.2) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return False


def fresh_shell_env() -> dict[str, str]:
    """The environment of a shell where the virtualenv is not activated."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.pop("VIRTUAL_ENV", None)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p != venv_bin
    )
    return env


#: Runs a command with SIGINT and SIGQUIT at their defaults. A test run started in the
#: background by a non-interactive shell (``make test &`` in a script, a CI runner) inherits
#: them ignored, as POSIX has it, and so does every process it starts; a JVM leaves an
#: ignored SIGINT ignored (it refuses a handler for it), so spark-submit would never see the
#: SIGINT the test sends, as an operator's terminal never would. A shell cannot reset a signal
#: ignored on entry; Python can, and exec keeps the default.
DEFAULT_SIGNALS = (
    "import os, signal, sys; "
    "signal.signal(signal.SIGINT, signal.SIG_DFL); signal.signal(signal.SIGQUIT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


class Service:
    """A command in a session of its own (so that nothing of it outlives the test), its output
    in a file, its signals at their defaults (:data:`DEFAULT_SIGNALS`)."""

    def __init__(self, command: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-c", DEFAULT_SIGNALS, *command],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, seconds: float) -> None:
        assert until(lambda: needle in self.text() or self.process.poll() is not None, seconds)
        assert needle in self.text(), self.text()[-5000:]

    def signal(self, number: int) -> None:
        self.process.send_signal(number)

    def wait(self, seconds: float) -> int:
        try:
            return self.process.wait(seconds)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {seconds:g} s after the signal:\n{self.text()[-5000:]}")

    def kill(self) -> None:
        """Whatever is left of the session (the command, its JVM, Spark's Python workers)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(30)


# --- the demo ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_demo_runs_end_to_end_and_exits_cleanly(tmp_path: Path) -> None:
    warehouse = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "demo", "--warehouse", str(warehouse)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env=fresh_shell_env(),
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    assert "the group is Stable" in out and "the group rebalanced" in out, out[-5000:]
    assert unclean(out) == [], out[-5000:]
    # Spark's own lines went to the log directory, not the console.
    assert (warehouse / "logs" / "spark.log").is_file()
    assert (warehouse / "logs" / "coordinator.log").is_file()


# --- the job under signals --------------------------------------------------------------------


class Submitter(threading.Thread):
    """Offset commits into the inbox, a file every 100 ms, each commit with its own offset so
    that it can be found in the log."""

    def __init__(self, warehouse: Path) -> None:
        super().__init__(daemon=True, name="submitter")
        self.client = StreamClient(warehouse)
        self.stopping = threading.Event()
        self.sent: dict[str, tuple[str, int]] = {}  # request id -> (group, offset)
        self._next = 0

    def submit_some(self) -> None:
        requests = []
        for _ in range(3):
            self._next += 1
            group, offset = f"svc-{self._next % 3}", self._next
            request_id = f"commit-{offset}"
            self.sent[request_id] = (group, offset)
            requests.append(
                {
                    "api": "offset_commit",
                    "request_id": request_id,
                    "group_id": group,
                    "member_id": "",
                    "generation_id": -1,
                    "offsets": [{"topic": "t", "partition": 0, "offset": offset}],
                }
            )
        self.client.submit(requests)

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            self.submit_some()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def answered_ids(client: StreamClient) -> list[str]:
    path = client.warehouse.table("responses")
    if not (path / "_delta_log").is_dir():
        return []
    return [str(i) for i in read_table(path, columns=["request_id"]).column(0).to_pylist()]


def job_command(launcher: str, warehouse: Path, conf: Path) -> list[str]:
    options = ["--warehouse", str(warehouse), "--conf", str(conf), "--trigger-interval", "200"]
    if launcher == "spark-submit":
        return [str(REPO / "jobs" / "spark-submit"), "jobs/coordinator_job.py", *options]
    return [sys.executable, "-m", "coordinator", "run", *options]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("launcher", "first", "second"),
    [
        ("coordinator run", signal.SIGTERM, signal.SIGINT),
        ("spark-submit", signal.SIGTERM, signal.SIGINT),
    ],
    ids=["coordinator-run", "spark-submit"],
)
def test_a_signal_stops_the_job_between_batches_and_a_restart_answers_each_request_once(
    tmp_path: Path, launcher: str, first: int, second: int
) -> None:
    warehouse = tmp_path / "wh"
    conf = tmp_path / "test.properties"
    conf.write_text("group.initial.rebalance.delay.ms=0\n")
    Warehouse.at(warehouse).inbox.mkdir(parents=True)
    submitter = Submitter(warehouse)
    command = job_command(launcher, warehouse, conf)
    env = fresh_shell_env()
    runs: list[Service] = []
    try:
        # First run: requests stream in; the signal lands while they do.
        job = Service(command, tmp_path / "run-1.log", env)
        runs.append(job)
        job.wait_for("coordinator started on", STARTUP_TIMEOUT_S)
        submitter.start()
        assert until(lambda: len(answered_ids(submitter.client)) >= 30, STARTUP_TIMEOUT_S), (
            job.text()[-5000:]
        )
        job.signal(first)
        status = job.wait(STOP_TIMEOUT_S)
        submitter.stop()
        out = job.text()
        assert status == 0, out[-5000:]
        assert "stopping the coordinator between batches" in out, out[-5000:]
        assert unclean(out) == [], out[-5000:]
        submitter.submit_some()  # into the inbox of a stopped job

        # Second run: everything is answered, once; then the other signal.
        job = Service(command, tmp_path / "run-2.log", env)
        runs.append(job)
        job.wait_for("coordinator started on", STARTUP_TIMEOUT_S)
        assert until(
            lambda: set(submitter.sent) <= set(answered_ids(submitter.client)),
            STARTUP_TIMEOUT_S,
        ), sorted(set(submitter.sent) - set(answered_ids(submitter.client)))[:20]
        job.signal(second)
        status = job.wait(STOP_TIMEOUT_S)
        out = job.text()
        assert status == 0, out[-5000:]
        assert unclean(out) == [], out[-5000:]
    finally:
        submitter.stopping.set()
        for run in runs:
            run.kill()

    answers = Counter(answered_ids(submitter.client))
    assert {rid: n for rid, n in answers.items() if n != 1} == {}
    assert set(answers) == set(submitter.sent)
    log = read_table(Warehouse.at(warehouse).table("consumer_offsets")).to_pylist()
    commits = Counter(
        (r["group_id"], r["committed_offset"]) for r in log if r["record_type"] == "offset_commit"
    )
    assert {k: n for k, n in commits.items() if n != 1} == {}
    assert set(commits) == set(submitter.sent.values())
    # Spark's lines are in the log file, not on the console.
    assert (warehouse / "logs" / "spark.log").is_file()


# --- the gateway under signals ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_gateway_which_closes_connections_and_keeps_its_log(
    tmp_path: Path, number: int
) -> None:
    from coordinator.gateway import codec
    from tests.gateway_support import REQUESTS, call, read_frame

    warehouse = tmp_path / "gw"
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "coordinator",
        "gateway",
        "--listen",
        f"127.0.0.1:{port}",
        "--log-warehouse",
        str(warehouse),
        "--topic",
        "t:6",
        "--set",
        "group.initial.rebalance.delay.ms=0",
    ]
    commit = dict(REQUESTS[codec.OFFSET_COMMIT], group_id="gw-signals")
    fetch = dict(REQUESTS[codec.OFFSET_FETCH], group_id="gw-signals")
    fetch["groups"] = [dict(fetch["groups"][0], group_id="gw-signals")]
    gateway = Service(command, tmp_path / "gateway-1.log")
    try:
        gateway.wait_for("coordinator gateway listening on", 60)
        assert until(lambda: _answers(port), 60)
        answer = call(port, codec.OFFSET_COMMIT, 8, commit)
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0
        idle = socket.create_connection(("127.0.0.1", port), timeout=30)
        gateway.signal(number)
        assert gateway.wait(30) == 0, gateway.text()[-3000:]
        assert read_frame(idle) is None  # the open connection was closed
        idle.close()
        # What the stop printed (a client that came before the gateway was ready is not ours).
        out = gateway.text().partition("stopping the gateway")[2]
        assert unclean(out) == [], out
        assert "gateway stopped" in out, gateway.text()
    finally:
        gateway.kill()
    # The commit was in the log before it was acknowledged, and the restarted gateway has it.
    again = Service(command, tmp_path / "gateway-2.log")
    try:
        again.wait_for("coordinator gateway listening on", 60)
        assert until(lambda: _answers(port), 60)
        fetched = call(port, codec.OFFSET_FETCH, 8, fetch)
        assert fetched["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 5
        again.signal(signal.SIGTERM)
        assert again.wait(30) == 0, again.text()[-3000:]
    finally:
        again.kill()


def _answers(port: int) -> bool:
    from coordinator.gateway import codec
    from tests.gateway_support import REQUESTS, call

    try:
        call(port, codec.API_VERSIONS, 3, REQUESTS[codec.API_VERSIONS])
    except (OSError, AssertionError):  # not listening yet, or not ready: closed
        return False
    return True
