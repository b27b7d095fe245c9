"""``python -m coordinator.bench.metrics``: what ``--metrics`` costs the gateway, and what early
clients get while it loads a big log. Figures, not tests.

(a) **overhead**: heartbeats per gateway CPU-second through the embedded gateway, with and
    without ``--metrics``, alternating runs (``coordinator.bench.gateway``'s raw members and
    heartbeat generator: one group, N connections).
(b) **early clients**: ``coordinator gateway --embedded --log-warehouse W --metrics`` on a
    warehouse of G groups (``coordinator.bench.groups``' builder, reused when present), with 20
    clients sending a JoinGroup every 25 ms from the process's start until they join: seconds
    until the "listening" line, the answers by error code, failed connections, what ``/readyz``
    said, and whether the gateway's stderr holds a traceback.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordinator.bench import gateway as bg
from coordinator.gateway import codec


class _Metered(bg.Server):
    """Our gateway, with ``--metrics`` on a free port when ``metrics_port`` is set."""

    metrics_port: int = 0

    def command(self, topics: dict[str, int]) -> list[str]:
        cmd = super().command(topics)
        if self.metrics_port:
            cmd += ["--metrics", f"{bg.LOCAL}:{self.metrics_port}"]
        return cmd


def overhead(connections: int, seconds: float, runs: int) -> list[dict[str, Any]]:
    options = bg.GatewayBenchOptions(heartbeat_seconds=seconds, generators=1)
    figures = []
    for _ in range(runs):
        for metered in (False, True):
            server = _Metered(bg.OURS, "ours", delay_ms=0)
            server.metrics_port = bg.free_port() if metered else 0
            server.start({"t": 2 * connections}, options.start_timeout_s)
            try:
                members, _ = bg.form_raw_group(
                    server.port, "g", "t", 2 * connections, connections, options
                )
                rate = bg.heartbeat_rate(members, "g", options, server)
                for member in members:
                    member.sock.close()
            finally:
                server.stop()
            per_cpu = rate["heartbeats_per_s"] / max(rate["server_cpu"], 1e-9)
            figures.append(
                {"metrics": metered, **rate, "heartbeats_per_cpu_second": round(per_cpu)}
            )
            bg.stderr(json.dumps(figures[-1]))
    return figures


def early_clients(warehouse: Path, groups: int, clients: int = 20) -> dict[str, Any]:
    from coordinator.bench.groups import MARKER, build_warehouse

    if not (warehouse / MARKER).exists():
        bg.stderr(f"building a warehouse of {groups} groups in {warehouse}")
        build_warehouse(warehouse, groups, 3, 3.0)
    work = Path(tempfile.mkdtemp(prefix="bench-metrics-"))
    copy = work / "warehouse"
    shutil.copytree(warehouse, copy)  # the gateway claims and writes its log warehouse
    port, metrics_port = bg.free_port(), bg.free_port()
    started = time.monotonic()
    command = [sys.executable, "-m", "coordinator", "gateway", "--embedded", "--topic", "t:6"]
    command += ["--listen", f"{bg.LOCAL}:{port}", "--metrics", f"{bg.LOCAL}:{metrics_port}"]
    command += ["--log-warehouse", str(copy)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    listening: dict[str, float] = {}
    answers: collections.Counter[int] = collections.Counter()
    failures: collections.Counter[str] = collections.Counter()
    probes: collections.Counter[str] = collections.Counter()
    stop = threading.Event()

    def read_banner() -> None:
        assert process.stdout is not None
        if process.stdout.readline().startswith("coordinator gateway listening"):
            listening["s"] = time.monotonic() - started

    def client(n: int) -> None:
        join = {
            "group_id": f"early-{n}",
            "session_timeout": 10_000,
            "rebalance_timeout": 10_000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": bg.subscription("t")}],
        }
        while not stop.is_set() and time.monotonic() - started < 600:
            try:
                with socket.create_connection((bg.LOCAL, port), 10) as sock:
                    sock.settimeout(30)
                    code = int(bg.raw_call(sock, codec.JOIN_GROUP, 3, join)["error_code"])
                answers[code] += 1
                if code == 0:
                    return
            except ConnectionRefusedError:
                failures["refused: not listening yet"] += 1
            except (OSError, ValueError) as error:
                failures[type(error).__name__] += 1
            time.sleep(0.025)

    def probe() -> None:
        while not stop.is_set():
            url = f"http://{bg.LOCAL}:{metrics_port}/readyz"
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    probes[str(answer.status)] += 1
            except urllib.error.HTTPError as error:
                probes[str(error.code)] += 1
            except OSError:
                probes["no server yet"] += 1
            time.sleep(0.1)

    threads = [threading.Thread(target=read_banner, daemon=True)]
    threads += [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    threads.append(threading.Thread(target=probe))
    for thread in threads:
        thread.start()
    for thread in threads[1 : clients + 1]:
        thread.join()
    stop.set()
    threads[-1].join()
    process.terminate()
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    shutil.rmtree(work, ignore_errors=True)
    return {
        "groups": groups,
        "listening_after_s": round(listening.get("s", -1.0), 1),
        "join_answers_by_error_code": dict(answers),
        "client_failures": dict(failures),
        "readyz": dict(probes),
        "traceback_in_stderr": "Traceback" in err,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m coordinator.bench.metrics", description=__doc__
    )
    parser.add_argument("--connections", type=int, default=100, help="(a) connections (100)")
    parser.add_argument("--seconds", type=float, default=10.0, help="(a) window per run (10)")
    parser.add_argument("--runs", type=int, default=3, help="(a) runs each way (3)")
    parser.add_argument("--groups", type=int, default=1000, help="(b) groups in the log (1000)")
    parser.add_argument(
        "--warehouse", default="warehouse/bench-metrics", help="(b) built here, or reused"
    )
    parser.add_argument("--only", choices=("overhead", "early"), help="run one part")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {}
    if args.only in (None, "overhead"):
        runs = overhead(args.connections, args.seconds, args.runs)
        result["overhead"] = {
            "runs": runs,
            "heartbeats_per_cpu_second": {
                label: [r["heartbeats_per_cpu_second"] for r in runs if r["metrics"] is flag]
                for label, flag in (("without", False), ("with", True))
            },
        }
    if args.only in (None, "early"):
        with contextlib.suppress(KeyboardInterrupt):
            result["early_clients"] = early_clients(Path(args.warehouse), args.groups)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
