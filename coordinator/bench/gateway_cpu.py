"""``coordinator bench gateway-cpu``: what one gateway heartbeat costs the server, in CPU.

A loaded or small box makes wall rates (heartbeats/s) say more about the other processes than
about the gateway; CPU time spent per request does not. This runs our gateway in this very
process (the embedded engine, no warehouse) once per variant, forks the raw-protocol generator
of ``coordinator bench gateway`` (a group of N members over N connections, then closed-loop
Heartbeat v4 on each), and reports the server's CPU (user + system, ``getrusage`` of this
process; the generator is another process) per answered heartbeat, and its inverse, heartbeats
per server CPU-second.

Variants: the codec (``kio``: kio reads and writes every message; ``fast``: the hot APIs'
straight-line codec, :mod:`coordinator.gateway.fastpath`) and the event loop (``asyncio``, or
``uvloop`` when installed). They run in turns, ``--rounds`` times each, in one process, so that
their ratios hold on a busy box; the figure of each is its best round (the least disturbed).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.bench.gateway import (
    HEARTBEAT_VERSION,
    GatewayBenchOptions,
    _heartbeat_worker,
    form_raw_group,
)
from coordinator.config import CoordinatorConfig
from coordinator.gateway import codec, fastpath
from coordinator.gateway.embedded import EmbeddedBackend
from coordinator.gateway.loops import loop_factory
from coordinator.gateway.server import Gateway

CODECS = ("kio", "fast")


@dataclass(frozen=True)
class Variant:
    codec: str
    loop: str

    @property
    def label(self) -> str:
        return f"{self.codec}+{self.loop}"


def _generator(port: int, size: int, seconds: float, pipe: Any) -> None:
    """The forked client: form the group, wait for the go, heartbeat, report."""
    options = GatewayBenchOptions(sizes=(size,), heartbeat_seconds=seconds)
    members, _ = form_raw_group(port, "g", "t", 2 * size, size, options)
    requests = [
        codec.encode_request(
            codec.HEARTBEAT,
            HEARTBEAT_VERSION,
            i,
            {
                "group_id": "g",
                "generation_id": m.generation,
                "member_id": m.member_id,
                "group_instance_id": None,
            },
            client_id="bench",
        )
        for i, m in enumerate(members)
    ]
    pipe.send("formed")
    pipe.recv()
    receive, send = multiprocessing.Pipe(duplex=False)
    _heartbeat_worker([m.sock for m in members], requests, seconds, send)
    pipe.send(receive.recv())


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _round(size: int, seconds: float) -> dict[str, Any]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    gateway = Gateway(EmbeddedBackend(config), {"t": 2 * size}, "127.0.0.1", 0)
    await gateway.start()
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    process = ctx.Process(target=_generator, args=(gateway.port, size, seconds, theirs))
    process.start()
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, ours.recv)
        cpu0, wall0 = _cpu(), time.perf_counter()
        ours.send("go")
        counted, errors, elapsed, generator_cpu, _ = await loop.run_in_executor(None, ours.recv)
        cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    finally:
        await loop.run_in_executor(None, process.join, 30)
        await gateway.stop()
    answered = counted + size  # the window's, and the last one in flight on each connection
    return {
        "heartbeats": counted,
        "errors": errors,
        "heartbeats_per_s": round(counted / elapsed),
        "server_cpu_s": round(cpu, 3),
        "server_cpu_share": round(cpu / wall, 2),
        "generator_cpu_share": round(generator_cpu / elapsed, 2),
        "us_per_heartbeat": round(cpu / answered * 1e6, 1),
        "heartbeats_per_cpu_s": round(answered / cpu) if cpu else None,
    }


def measure(
    variants: list[Variant], size: int, seconds: float, rounds: int, say: Callable[[str], None]
) -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {v.label: [] for v in variants}
    for r in range(rounds):
        for variant in variants:
            fastpath.enabled = variant.codec == "fast"
            try:
                with asyncio.Runner(loop_factory=loop_factory(variant.loop)) as runner:
                    figures = runner.run(_round(size, seconds))
            finally:
                fastpath.enabled = True
            results[variant.label].append(figures)
            say(f"round {r + 1} {variant.label}: {figures}")
    best = {
        label: min(rows, key=lambda row: row["us_per_heartbeat"]) for label, rows in results.items()
    }
    return {"connections": size, "seconds": seconds, "rounds": rounds, "best": best}


def format_report(figures: dict[str, Any]) -> str:
    lines = [
        f"server CPU per heartbeat, {figures['connections']} connections, best of "
        f"{figures['rounds']} rounds of {figures['seconds']:g} s (in-process gateway)",
        f"  {'variant':<16}{'us/heartbeat':>14}{'hb/CPU-s':>12}{'hb/s (wall)':>13}",
    ]
    base = None
    for label, row in figures["best"].items():
        base = base or row["us_per_heartbeat"]
        lines.append(
            f"  {label:<16}{row['us_per_heartbeat']:>14.1f}{row['heartbeats_per_cpu_s']:>12,}"
            f"{row['heartbeats_per_s']:>13,}   x{base / row['us_per_heartbeat']:.2f}"
        )
    return "\n".join(lines)


def run(args: Any) -> int:
    loops = [name for name in args.loops.split(",") if name]
    codecs = [name for name in args.codecs.split(",") if name]
    unknown = [c for c in codecs if c not in CODECS]
    if unknown:
        raise SystemExit(f"--codecs: any of {', '.join(CODECS)}; got {', '.join(unknown)}")
    for name in loops:
        loop_factory(name)  # refuses an unknown or missing loop before anything runs
    variants = [Variant(c, loop) for loop in loops for c in codecs]
    figures = measure(
        variants,
        args.connections,
        args.seconds,
        args.rounds,
        lambda message: print(message, file=sys.stderr, flush=True),
    )
    print(json.dumps(figures) if args.json else format_report(figures))
    return 0
