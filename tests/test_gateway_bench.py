"""`coordinator bench gateway`: its machinery at a tiny size against our gateway only,
a missing peer reported and skipped, the report's ratios and goal, and the watchdog over the
consumers' process: a run never hangs."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading

import pytest

from coordinator.bench import gateway as bench
from coordinator.bench.gateway import GatewayBenchOptions, compare, format_report, gateway_bench


@pytest.mark.slow
def test_bench_measures_every_figure_against_our_gateway():
    """3 consumers, one leave, 2 s of heartbeats: every figure present and sane."""
    pytest.importorskip("confluent_kafka")
    options = GatewayBenchOptions(
        sizes=(3,), delays=(0,), peers=(), leaves=1, heartbeat_seconds=2.0
    )
    figures = gateway_bench(options, say=lambda _: None)
    ours = figures["servers"]["ours (delay 0)"]
    assert ours["status"] == "ok"
    three = ours["3"]
    assert "error" not in three, three
    # every consumer found and connected to its coordinator before t0
    assert 0 < three["bootstrap_s"] < 10
    assert 0 < three["join_s"] < 10  # no initial delay: a few round trips
    assert 0 < three["rebalance_s"] < 10
    assert len(three["rebalance_samples_s"]) == 1
    assert three["heartbeats_per_s"] > 100
    assert three["errors"] == 0
    assert three["connections"] == 3
    assert 0 <= three["hold_s"] < 1
    report = format_report(figures)
    assert "(c) heartbeats answered per second" in report
    assert "ours (delay 0)" in report


def test_a_missing_peer_is_reported_and_skipped(monkeypatch):
    monkeypatch.setattr(bench, "_binary", lambda *_: None)
    options = GatewayBenchOptions(sizes=(3,), delays=(), peers=("tansu", "noida"))
    said: list[str] = []
    figures = gateway_bench(options, say=said.append)
    for peer in ("tansu", "noida"):
        assert figures["servers"][peer]["status"].startswith("did not start")
        assert "3" not in figures["servers"][peer]
    assert any("tansu: did not start" in line for line in said)
    format_report(figures)  # nothing to compare, and no error


def _figures(ours: dict, tansu: dict, noida: dict) -> dict:
    return {
        "options": {
            "sizes": [10],
            "heartbeat_interval_ms": 200,
            "session_timeout_ms": 10_000,
            "partitions_per_member": 2,
            "generators": 1,
            "heartbeat_seconds": 10.0,
        },
        "load_before": "-",
        "load_after": "-",
        "servers": {
            label: {"status": "ok", "initial_delay": "-", "10": values}
            for label, values in (("ours (delay 0)", ours), ("tansu", tansu), ("noida", noida))
        },
    }


def test_ratios_and_the_goal_lower_times_and_higher_rates_win():
    peer_a = {"join_s": 5.0, "rebalance_s": 1.0, "heartbeats_per_s": 10_000}
    peer_b = {"join_s": 0.4, "rebalance_s": 0.5, "heartbeats_per_s": 20_000}
    winning = _figures(
        {"join_s": 0.2, "rebalance_s": 0.5, "heartbeats_per_s": 20_000}, peer_a, peer_b
    )
    result = compare(winning)["ours (delay 0)"]
    assert result["goal_met"]
    assert result["rows"]["join_s/10"]["ratios"] == {"tansu": 0.04, "noida": 0.5}
    assert result["rows"]["heartbeats_per_s/10"]["ratios"] == {"tansu": 2.0, "noida": 1.0}
    losing = _figures(
        {"join_s": 0.2, "rebalance_s": 0.5, "heartbeats_per_s": 15_000}, peer_a, peer_b
    )
    losing["comparison"] = compare(losing)
    result = losing["comparison"]["ours (delay 0)"]
    assert not result["goal_met"]
    assert not result["rows"]["heartbeats_per_s/10"]["goal_met"]
    assert result["rows"]["join_s/10"]["goal_met"]
    assert "does NOT hold" in format_report(losing)


def test_join_time_is_also_compared_with_our_delay_matched_to_each_peer_s_hold():
    figures = _figures(
        {"join_s": 0.2, "heartbeats_per_cpu_s": 30_000},
        {"join_s": 5.5, "heartbeats_per_cpu_s": 20_000},
        {"join_s": 0.35, "heartbeats_per_cpu_s": 60_000},
    )
    servers = figures["servers"]
    servers["ours (delay 150)"] = dict(servers["ours (delay 0)"], **{"10": {"join_s": 0.4}})
    servers["ours (delay 2500)"] = dict(servers["ours (delay 0)"], **{"10": {"join_s": 5.2}})
    figures["comparison"] = compare(figures)
    matched = figures["comparison"]["like for like"]
    assert matched["rows"]["join_s/10 vs noida"]["ours"] == "ours (delay 150)"
    assert not matched["rows"]["join_s/10 vs noida"]["goal_met"]  # 0.4 s against 0.35 s
    assert matched["rows"]["join_s/10 vs tansu"]["goal_met"]  # 5.2 s against 5.5 s
    assert not matched["goal_met"]
    # heartbeats per server CPU-second: a rate, higher wins
    row = figures["comparison"]["ours (delay 0)"]["rows"]["heartbeats_per_cpu_s/10"]
    assert row["ratios"] == {"tansu": 1.5, "noida": 0.5} and not row["goal_met"]
    report = format_report(figures)
    assert "heartbeats per server CPU-second" in report
    assert "join time with our delay matched to the peer's hold: does NOT hold" in report


# --- the consumers' process and its watchdog ------------------------------------------------------


def _frozen_after_a_step(conn) -> None:
    """A consumers' process that reports a figure, starts a step and never answers again (as
    one frozen in librdkafka holding the GIL)."""
    conn.send(("figure", "join_s", 0.4))
    conn.send(("step", "closing the consumers", 0.2))
    threading.Event().wait()


def _exits_mid_step(conn) -> None:
    conn.send(("step", "waiting for the join (a)", 60.0))
    os._exit(3)


def _reports_an_error(conn) -> None:
    conn.send(("figure", "join_s", 0.4))
    conn.send(("error", "TimeoutError: the group did not settle in 60 s: never assigned: 7"))
    conn.send(("step", "closing the consumers", 30.0))
    conn.send(("done",))


def _watch(target) -> tuple[dict, BaseException | None, multiprocessing.process.BaseProcess]:
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=target, args=(send,), daemon=True)
    process.start()
    send.close()
    out: dict = {}
    try:
        bench.supervise(
            process,
            receive,
            lambda _: None,
            out,
            lambda: "the server describes g as Stable",
            first_step=("starting", 30.0),
            margin_s=0.2,
        )
    except Exception as exc:
        return out, exc, process
    return out, None, process


def test_a_consumers_process_that_stops_answering_fails_its_step_and_is_killed():
    out, error, process = _watch(_frozen_after_a_step)
    assert isinstance(error, TimeoutError)
    assert "still closing the consumers" in str(error)
    assert "the server describes g as Stable" in str(error)
    assert not process.is_alive()
    assert out == {"join_s": 0.4}  # what was measured before stays


def test_a_consumers_process_that_exits_mid_step_fails_with_its_exit_code():
    _, error, process = _watch(_exits_mid_step)
    assert isinstance(error, RuntimeError)
    assert "exited (3) while waiting for the join (a)" in str(error)
    assert not process.is_alive()


def test_an_error_the_consumers_report_fails_the_figure_once_they_are_done():
    out, error, _ = _watch(_reports_an_error)
    assert isinstance(error, RuntimeError)
    assert "never assigned: 7" in str(error)
    assert out == {"join_s": 0.4}


@pytest.mark.slow
def test_a_hundred_consumers_close_after_the_join_against_noida_without_hanging():
    """Against noida, the bench's 100 consumers used to be closed after their polls had
    stopped, while the group rebalanced under them (the first ones leaving); librdkafka then
    froze the whole process, holding the GIL, in about two runs of three. Two runs, as the
    bench is run, bounded from outside so that the old way fails here instead of hanging (the
    bound is generous: the bench's own watchdog now fails a stuck step long before it, and a
    busy box must not fail this)."""
    pytest.importorskip("confluent_kafka")
    if bench._binary("noida_db", "noida-db") is None:
        pytest.skip("noida-db is not installed (the bench extra)")
    cmd = [sys.executable, "-m", "coordinator", "bench", "gateway", "--sizes", "100"]
    cmd += ["--figures", "a", "--delays", "", "--peers", "noida", "--json"]
    for run in range(2):
        process = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
        )
        try:
            stdout, _ = process.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            pytest.fail(f"run {run + 1}: the bench did not finish in 300 s")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the bench's server and consumers too
            process.wait()
        figures = json.loads(stdout)["servers"]["noida"]["100"]
        assert "error" not in figures, figures
        assert 0 < figures["join_s"] < 10


def test_the_cpu_benchs_floor_answers_heartbeats_as_the_gateway_frames_them():
    """`bench gateway-cpu`'s floor: once canned, a read of whole Heartbeat frames is answered
    with each version's framed response (error 0) and the request's correlation id, in one
    write; the report gives each variant's cost above the floor on its loop."""
    import asyncio

    from coordinator.bench import gateway_cpu
    from coordinator.config import CoordinatorConfig
    from coordinator.gateway import codec
    from coordinator.gateway.embedded import EmbeddedBackend

    written: list[bytes] = []

    class Transport:
        def write(self, data: bytes) -> None:
            written.append(bytes(data))

        def get_extra_info(self, name: str, default: object = None) -> object:
            return ("127.0.0.1", 1) if name == "peername" else default

    async def main() -> None:
        backend = EmbeddedBackend(CoordinatorConfig())
        gateway = gateway_cpu._FloorGateway(backend, {}, "127.0.0.1", 0)
        connection = gateway._protocol(None, None)
        connection.connection_made(Transport())  # type: ignore[arg-type]
        body = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
        frames = [codec.encode_request(codec.HEARTBEAT, v, 10 + v, body) for v in range(5)]
        gateway_cpu._FloorConnection.canned = True
        try:
            connection.data_received(b"".join(frames))
        finally:
            gateway_cpu._FloorConnection.canned = False
        ok = {"throttle_time": 0, "error_code": 0}
        expected = [codec.encode_response(codec.HEARTBEAT, v, 10 + v, ok) for v in range(5)]
        assert written == [b"".join(expected)]

    asyncio.run(main())
    row = {"us_per_heartbeat": 12.0, "heartbeats_per_cpu_s": 83_333, "heartbeats_per_s": 1}
    floor = {"us_per_heartbeat": 6.0, "heartbeats_per_cpu_s": 166_667, "heartbeats_per_s": 1}
    figures = {"connections": 10, "rounds": 1, "seconds": 1.0}
    report = gateway_cpu.format_report(
        {**figures, "best": {"fast+uvloop": row, "floor+uvloop": floor}}
    )
    assert "6.0" in report.splitlines()[2] and "x2.00" in report.splitlines()[2]
