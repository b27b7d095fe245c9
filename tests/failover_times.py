"""Failover timings of ``coordinator gateway --processes 2 --log-warehouse`` (not a test):
``kill -9`` or SIGSTOP of node 1 (node lease 3 s), then the time until a committed offset of a
group of node 1 is read back from node 0, and until it is read back from node 1 again once the
supervisor restarted it and the fenced handover is done.

    PYTHONPATH=$PWD nice -n 19 python -m tests.failover_times [ROUNDS]
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coordinator.bench.gateway import free_port
from coordinator.gateway import codec
from tests.gateway_support import call, until
from tests.test_gateway_processes import _commit, _group_on

LIMIT_S = 120


def fetch(port: int, group: str) -> int | None:
    """The group's committed offset of t-0 at ``port`` (None: not served there now)."""
    body = {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}]}
    try:
        answer = call(port, codec.OFFSET_FETCH, 5, body)
    except (OSError, AssertionError):
        return None
    if answer["error_code"]:
        return None
    return int(answer["topics"][0]["partitions"][0]["committed_offset"])


def one_round(kind: str) -> tuple[float, float]:
    tmp = Path(tempfile.mkdtemp())
    base = free_port(2)
    log = tmp / "cluster.log"
    cmd = [sys.executable, "-m", "coordinator", "gateway", "--listen", f"127.0.0.1:{base}"]
    cmd += ["--gateway-conf", os.devnull, "--processes", "2", "--topic", "t:6"]
    cmd += ["--log-warehouse", str(tmp / "wh"), "--node-lease-timeout-ms", "3000"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:

        def text() -> str:
            return log.read_text(errors="replace")

        assert until(lambda: text().count("listening") == 2, LIMIT_S), text()
        found = re.search(r"\(pids ([\d, ]+)\)", text())
        assert found is not None
        victim = int(found.group(1).split(", ")[1])
        group = _group_on(1, 2, "failover")
        assert _commit(base + 1, group, 42) == 0
        started = time.monotonic()
        os.kill(victim, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        assert until(lambda: fetch(base, group) == 42, LIMIT_S), text()
        moved = time.monotonic() - started
        if kind == "stop":
            os.kill(victim, signal.SIGCONT)
        assert until(lambda: "handover done" in text(), LIMIT_S), text()
        assert until(lambda: fetch(base + 1, group) == 42, LIMIT_S), text()
        return moved, time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for kind in ("kill", "stop"):
        for _ in range(rounds):
            moved, back = one_round(kind)
            print(f"{kind}: at node 0 after {moved:.2f} s, back at node 1 after {back:.2f} s")


if __name__ == "__main__":
    main()
