"""``coordinator bench gateway-cpu``: what one gateway heartbeat costs the server, in CPU.

A loaded or small box makes wall rates (heartbeats/s) say more about the other processes than
about the gateway; CPU time spent per request does not. This runs our gateway in this very
process (the embedded engine, no warehouse) once per variant, forks the raw-protocol generator
of ``coordinator bench gateway`` (a group of N members over N connections, then closed-loop
Heartbeat v4 on each), and reports the server's CPU (user + system, ``getrusage`` of this
process; the generator is another process) per answered heartbeat, and its inverse, heartbeats
per server CPU-second.

Variants: the codec (``kio``: kio reads and writes every message; ``fast``: the hot APIs'
straight-line codec, :mod:`coordinator.gateway.fastpath`; ``floor``: no gateway code at all once
the group is formed, see below) and the event loop (``asyncio``, or ``uvloop`` when installed).

The ``floor`` is the least any Python server on the same event loop pays per heartbeat: once the
generator has formed its group (through the gateway, as the other variants), each connection
only cuts the frames out of what it reads and answers every Heartbeat frame with a canned
response of its version, the correlation id patched in, in one ``transport.write`` per read: no
codec, no session, no dispatch, no engine. What ours costs above it is the gateway's own code.

The variants run in turns, ``--rounds`` times each, in one process, so that their ratios hold
on a busy box; the figure of each is its best round (the least disturbed).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import resource
import struct
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
from coordinator.gateway.connection import Connection
from coordinator.gateway.embedded import EmbeddedBackend
from coordinator.gateway.loops import loop_factory
from coordinator.gateway.server import Gateway
from coordinator.security.settings import Listener

CODECS = ("kio", "fast", "floor")

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")


def _canned_heartbeats() -> dict[int, bytes]:
    """Heartbeat version -> its framed response with error 0, correlation id 0 (bytes 4-8)."""
    low, high = codec.SUPPORTED[codec.HEARTBEAT]
    return {
        v: codec.encode_response(codec.HEARTBEAT, v, 0, {"throttle_time": 0, "error_code": 0})
        for v in range(low, high + 1)
    }


class _FloorConnection(Connection):
    """The floor (module doc): once ``canned`` is set, a read holding only whole Heartbeat
    frames, with nothing buffered or in flight, is answered with canned responses; anything
    else (the group's forming) is the gateway's connection."""

    canned = False
    responses = _canned_heartbeats()

    def data_received(self, data: bytes) -> None:
        if not _FloorConnection.canned or self._buf or self._in_flight:
            super().data_received(data)
            return
        out = []
        pos, end = 0, len(data)
        responses = self.responses
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if pos + 4 + size > end:
                break
            api_key, version, correlation_id = _HEADER.unpack_from(data, pos + 4)
            if api_key != codec.HEARTBEAT:
                break
            response = bytearray(responses[version])
            _SIZE.pack_into(response, 4, correlation_id)
            out.append(response)
            pos += 4 + size
        if out:
            self.transport.write(b"".join(out))  # type: ignore[union-attr]
        if pos < end:
            super().data_received(data[pos:])


class _FloorGateway(Gateway):
    def _protocol(self, node_id: int | None, listener: Listener | None) -> Connection:
        return _FloorConnection(self, node_id, listener)


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


async def _round(size: int, seconds: float, floor: bool = False) -> dict[str, Any]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    kind = _FloorGateway if floor else Gateway
    gateway = kind(EmbeddedBackend(config), {"t": 2 * size}, "127.0.0.1", 0)
    await gateway.start()
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    process = ctx.Process(target=_generator, args=(gateway.port, size, seconds, theirs))
    process.start()
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, ours.recv)
        _FloorConnection.canned = floor
        cpu0, wall0 = _cpu(), time.perf_counter()
        ours.send("go")
        counted, errors, elapsed, generator_cpu, _ = await loop.run_in_executor(None, ours.recv)
        cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    finally:
        _FloorConnection.canned = False
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
                    figures = runner.run(_round(size, seconds, variant.codec == "floor"))
            finally:
                fastpath.enabled = True
            results[variant.label].append(figures)
            say(f"round {r + 1} {variant.label}: {figures}")
    best = {
        label: min(rows, key=lambda row: row["us_per_heartbeat"]) for label, rows in results.items()
    }
    return {"connections": size, "seconds": seconds, "rounds": rounds, "best": best}


def format_report(figures: dict[str, Any]) -> str:
    """One line per variant: its CPU per heartbeat, its ratio to the first variant's, and,
    with a floor on the same loop measured, what it costs above that floor and how many times
    the floor it costs."""
    lines = [
        f"server CPU per heartbeat, {figures['connections']} connections, best of "
        f"{figures['rounds']} rounds of {figures['seconds']:g} s (in-process gateway)",
        f"  {'variant':<16}{'us/heartbeat':>14}{'hb/CPU-s':>12}{'hb/s (wall)':>13}"
        f"{'vs first':>10}{'above floor':>13}{'x floor':>9}",
    ]
    best = figures["best"]
    base = None
    for label, row in best.items():
        us = row["us_per_heartbeat"]
        base = base or us
        floor = best.get("floor+" + label.split("+", 1)[1])
        above = "" if floor is None else f"{us - floor['us_per_heartbeat']:.1f}"
        times = "" if floor is None else f"x{us / floor['us_per_heartbeat']:.2f}"
        lines.append(
            f"  {label:<16}{us:>14.1f}{row['heartbeats_per_cpu_s']:>12,}"
            f"{row['heartbeats_per_s']:>13,}{'x' + format(base / us, '.2f'):>10}"
            f"{above:>13}{times:>9}"
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
