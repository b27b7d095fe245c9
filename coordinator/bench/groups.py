"""``coordinator bench groups``: how fast the operator tools answer on a big warehouse.

Builds (or reuses) a warehouse of N consumer groups written by the job's own operator and
sink (:class:`coordinator.stream.local.LocalJob`; live ``GroupMember``s on a simulated clock,
each group formed, committing every 5 s, one member per group leaving, so the tables have a
realistic shape: every change in ``group_history``, many small files, compacted on the job's
schedule), then times each ``coordinator groups`` command the way an operator runs it: a fresh
process from the shell (interpreter start and imports included), best of a few runs, and also
in-process (what the tool itself costs once Python is up).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: A day after the epoch's big round number: readable times in the built tables.
START_MS = 1_800_000_000_000
TOPIC = "events"
PARTITIONS = 6
MARKER = ".bench-groups"


def build_warehouse(root: Path, groups: int, members: int, minutes: float) -> dict[str, Any]:
    """N groups of ``members`` consumers of one topic, for ``minutes`` of simulated time at
    the job's pace (a micro-batch every 500 ms, so the tables get the job's number of commits
    and files, compacted on its schedule): they form, heartbeat, commit every 5 s, and half way
    one member per group leaves and the rest rebalance. Returns what was built."""
    from coordinator.client.member import MemberConfig
    from coordinator.client.simulation import Simulation
    from coordinator.stream.local import LocalJob, LocalNetwork
    from coordinator.stream.settings import load_settings

    if root.exists():
        if not (root / MARKER).exists():
            raise ValueError(f"{root} exists and was not made by this benchmark")
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / MARKER).touch()
    settings = load_settings([], {"group.initial.rebalance.delay.ms": "500"}, warehouse=str(root))
    job = LocalJob(settings)
    sim = Simulation(
        network=lambda clock: LocalNetwork(job, clock, 500), start_ms=START_MS, step_ms=100
    )
    config = MemberConfig(session_timeout_ms=30_000, heartbeat_interval_ms=3_000)
    started = time.perf_counter()
    consumers = [
        sim.add_member(
            f"group-{g:05d}",
            [TOPIC],
            metadata={TOPIC: PARTITIONS},
            config=config,
            client_id=f"consumer-{m}",
            poll_every_ms=1_000,
        )
        for g in range(groups)
        for m in range(members)
    ]

    def settled() -> bool:
        return all(
            m.state.value == "STABLE" and not m.rejoin_needed for m in consumers if not m.closed
        )

    if not sim.run(600_000, until=settled):
        raise RuntimeError("the groups did not form in 10 simulated minutes")
    rounds = max(2, int(minutes * 60 / 5))
    for round_ in range(rounds):
        for m in consumers:
            if not m.closed:
                m.commit(dict.fromkeys(m.assignment, (round_ + 1) * 100))
        if round_ == rounds // 2:
            for m in consumers[members - 1 :: members]:
                m.close()
        sim.run(5_000)
    return {
        "groups": groups,
        "members": members,
        "simulated_minutes": round((sim.clock.now_ms() - START_MS) / 60_000, 1),
        "batches": job.batch_id,
        "build_s": round(time.perf_counter() - started, 1),
        "files": sum(1 for f in root.rglob("*.parquet")),
        "size_mb": round(sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 1e6, 1),
    }


def commands(group: str) -> dict[str, list[str]]:
    return {
        "list": ["--list"],
        "list --state": ["--list", "--state"],
        "describe (offsets)": ["--describe", "--group", group],
        "describe --members --verbose": [
            "--describe",
            "--group",
            group,
            "--members",
            "--verbose",
        ],
        "describe --state": ["--describe", "--group", group, "--state"],
        "describe --all-groups": ["--describe", "--all-groups"],
        "history": ["history", "--group", group],
        "describe --as-of VERSION": ["--describe", "--group", group, "--as-of", "3"],
    }


def measure(root: Path, repeats: int, group: str) -> dict[str, dict[str, float]]:
    """Best-of-``repeats`` seconds per command: a fresh process, and in-process."""
    import contextlib
    import io

    from coordinator.cli import main

    figures: dict[str, dict[str, float]] = {}
    for name, args in commands(group).items():
        argv = ["groups", "--warehouse", str(root), *args]
        process, inside = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "coordinator", *argv], capture_output=True, text=True
            )
            process.append(time.perf_counter() - started)
            if done.returncode != 0:
                raise RuntimeError(f"{name}: {done.stdout}{done.stderr}")
            started = time.perf_counter()
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                main(argv)
            inside.append(time.perf_counter() - started)
        figures[name] = {"process_s": round(min(process), 3), "in_process_s": round(min(inside), 3)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import coordinator.cli"], check=True)
    figures["(python start, no work)"] = {
        "process_s": round(time.perf_counter() - started, 3),
        "in_process_s": 0.0,
    }
    return figures


def run(args: Any) -> int:
    root = Path(args.warehouse)
    built = None
    if not args.reuse or not (root / MARKER).exists():
        print(
            f"bench groups: building {args.groups} groups x {args.members} members "
            f"({args.minutes} simulated minutes) in {root}",
            file=sys.stderr,
        )
        built = build_warehouse(root, args.groups, args.members, args.minutes)
    figures = measure(root, args.repeats, f"group-{args.groups // 2:05d}")
    if args.json:
        print(json.dumps({"built": built, "commands": figures}))
        return 0
    if built:
        print(
            f"warehouse: {built['groups']} groups x {built['members']} members, "
            f"{built['simulated_minutes']} simulated minutes, {built['batches']} batches, "
            f"{built['files']} data files, {built['size_mb']} MB, built in {built['build_s']} s"
        )
    print(f"{'COMMAND':<32} {'PROCESS (s)':>12} {'IN-PROCESS (s)':>15}   (best of {args.repeats})")
    for name, f in figures.items():
        print(f"{name:<32} {f['process_s']:>12.3f} {f['in_process_s']:>15.3f}")
    return 0
