"""``coordinator bench groups``: how fast the operator tools answer on a big warehouse.

Builds (or reuses) a warehouse of N consumer groups written by the job's own operator and
sink (:class:`coordinator.stream.local.LocalJob`; live ``GroupMember``s on a simulated clock,
each group formed, committing every 5 s, one member per group leaving, so the tables have a
realistic shape: every change in ``group_history``, many small files, compacted on the job's
schedule), then times each ``coordinator groups`` command the way an operator runs it: a fresh
process from the shell (interpreter start and imports included), best of a few runs, and also
in-process (what the tool itself costs once Python is up).

``--log-records N`` then grows the log to N records (10,000,000 for the memory figures): the
built warehouse's last commit of every (group, topic, partition) key is repeated, round after
round, with rising committed offsets and times, as synthetic OffsetCommit records appended to
``consumer_offsets`` (byte-exact Kafka keys and values, contiguous log offsets per offsets
partition, the last complete batch's id, a few hundred thousand rows per Delta commit), so the
newest offsets outnumber the rest of the log a thousandfold, as in a coordinator that ran for a
day. ``--memory`` measures each command's peak RSS (``ru_maxrss`` of the process running it)
instead of its time.
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


def grow_log(root: Path, records: int, chunk_rows: int = 500_000) -> dict[str, Any]:
    """Append synthetic commits to ``consumer_offsets`` until it holds ``records`` rows (see
    the module's doc). Returns what was added."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable, write_deltalake

    from coordinator.admin.tables import WarehouseReader
    from coordinator.log.records import OFFSET_COMMIT
    from coordinator.stream.delta_read import read_table
    from coordinator.stream.schema import CONSUMER_OFFSETS, CONSUMER_OFFSETS_SCHEMA

    started = time.perf_counter()
    reader = WarehouseReader(root)
    cut = reader.cut()
    log = reader.latest_log(cut)
    path = str(reader.paths.table(CONSUMER_OFFSETS))
    table = DeltaTable(path)
    version = table.version()
    existing = read_table(table, columns=["offsets_partition", "offset"])
    ends = existing.group_by("offsets_partition").aggregate([("offset", "max")]).to_pylist()
    log_end = {e["offsets_partition"]: e["offset_max"] + 1 for e in ends}
    have = existing.num_rows
    templates = log.filter(
        pc.and_(pc.equal(log["record_type"], OFFSET_COMMIT), pc.is_valid(log["value"]))
    ).to_pylist()
    if not templates or records <= have:
        return {"records_added": 0, "log_records": have, "version_before": version}
    keys = len(templates)
    head, middle, tail = [], [], []
    for t in templates:  # a value is: version, offset, ..., commit time, [expire time (v1)]
        value = t["value"]
        at = len(value) - (16 if value[1] == 1 else 8)
        head.append(value[:2])
        middle.append(value[10:at])
        tail.append(value[at + 8 :])
    columns = {name: [t[name] for t in templates] for name in CONSUMER_OFFSETS_SCHEMA.names}
    template = pa.table(columns, schema=CONSUMER_OFFSETS_SCHEMA)
    parts = pa.table({"head": head, "middle": middle, "tail": tail})
    base_offset = np.array([t["committed_offset"] for t in templates], dtype=np.int64)
    base_time = max(t["commit_timestamp_ms"] for t in templates)
    partitions = np.array([t["offsets_partition"] for t in templates], dtype=np.int64)
    to_add = records - have
    done = 0
    commits = 0
    while done < to_add:
        rows = min(chunk_rows - chunk_rows % keys or keys, to_add - done)
        rounds = np.arange(done, done + rows, dtype=np.int64) // keys + 1
        which = np.arange(done, done + rows, dtype=np.int64) % keys
        chunk = template.take(pa.array(which))
        committed = base_offset[which] + rounds
        times = base_time + 5_000 * rounds
        offsets = np.empty(rows, dtype=np.int64)
        for partition in np.unique(partitions[which]):
            mask = partitions[which] == partition
            count = int(mask.sum())
            first = log_end.get(int(partition), 0)
            offsets[mask] = np.arange(first, first + count, dtype=np.int64)
            log_end[int(partition)] = first + count
        value = pc.binary_join_element_wise(
            pc.take(parts["head"], pa.array(which)),
            _be_bytes(committed),
            pc.take(parts["middle"], pa.array(which)),
            _be_bytes(times),
            pc.take(parts["tail"], pa.array(which)),
            b"",
        )
        for name, data in (
            ("offset", pa.array(offsets)),
            ("committed_offset", pa.array(committed)),
            ("commit_timestamp_ms", pa.array(times)),
            ("timestamp_ms", pa.array(times)),
            ("written_at_ms", pa.array(times)),
            ("value", value),
        ):
            at = chunk.schema.get_field_index(name)
            chunk = chunk.set_column(at, CONSUMER_OFFSETS_SCHEMA.field(name), data)
        write_deltalake(path, chunk, mode="append")
        done += rows
        commits += 1
    return {
        "records_added": to_add,
        "log_records": have + to_add,
        "commit_keys": keys,
        "delta_commits": commits,
        "grow_s": round(time.perf_counter() - started, 1),
        "version_before": version,
    }


def _be_bytes(values: Any) -> Any:
    """int64 values as 8-byte big-endian binary (Kafka's int64 on the wire)."""
    import pyarrow as pa

    data = values.astype(">i8").tobytes()
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(8), len(values), [None, pa.py_buffer(data)]
    )
    return fixed.cast(pa.binary())


#: Runs the command and prints its exit code, ``ru_maxrss`` (KiB) and whether it was stopped
#: at the RSS limit (argv[1], MiB; 0: none). A launcher of its own, because a child forked from a
#: big process starts with that process's high-water mark, which ``exec`` keeps in
#: ``ru_maxrss``; this small one's is below any command's.
_LAUNCHER = """
import os, signal, subprocess, sys, time
limit = int(sys.argv[1]) * 1024
pid = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL).pid
stopped = 0
while True:
    done, status, usage = os.wait4(pid, os.WNOHANG)
    if done:
        break
    try:
        with open(f"/proc/{pid}/status") as lines:
            rss = next(int(l.split()[1]) for l in lines if l.startswith("VmRSS:"))
    except (OSError, StopIteration):
        rss = 0
    if limit and rss > limit and not stopped:
        os.kill(pid, signal.SIGKILL)
        stopped = 1
    time.sleep(0.05)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss, stopped)
"""


def peak_rss_mb(argv: list[str], limit_mb: int = 0) -> tuple[float, float, bool]:
    """(peak RSS in MB, seconds, stopped at ``limit_mb``) of ``python -m coordinator ARGV`` in
    a fresh process: its own ``ru_maxrss``, read with ``wait4`` by a small launcher, which
    kills it once its RSS passes ``limit_mb`` (0: no limit), to spare a shared machine."""
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _LAUNCHER,
            str(limit_mb),
            sys.executable,
            "-m",
            "coordinator",
            *argv,
        ],
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    code, maxrss, stopped = (int(x) for x in done.stdout.split())
    if code != 0 and not stopped:
        raise RuntimeError(f"{argv}: exit {code}: {done.stderr[-2000:]}")
    return maxrss / 1024.0, seconds, bool(stopped)


def measure_memory(
    root: Path, group: str, as_of: str | None, limit_mb: int = 0
) -> dict[str, dict[str, Any]]:
    """Peak RSS (MB) and seconds of each reading command, once each, in a fresh process (one
    past ``limit_mb`` is stopped there and marked so)."""
    chosen = {
        "list": ["--list"],
        "describe (offsets)": ["--describe", "--group", group],
        "describe --all-groups": ["--describe", "--all-groups"],
        "describe --all-groups --members": ["--describe", "--all-groups", "--members"],
        "history": ["history", "--group", group],
    }
    if as_of is not None:
        chosen["describe --all-groups --as-of"] = ["--describe", "--all-groups", "--as-of", as_of]
        chosen["list --as-of"] = ["--list", "--state", "--as-of", as_of]
    figures: dict[str, dict[str, Any]] = {}
    for name, args in chosen.items():
        rss, seconds, stopped = peak_rss_mb(["groups", "--warehouse", str(root), *args], limit_mb)
        figures[name] = {
            "peak_rss_mb": round(rss, 1),
            "seconds": round(seconds, 2),
            "stopped_at_limit": stopped,
        }
    rss, seconds, _ = peak_rss_mb(["--version"])
    figures["(python start, no work)"] = {
        "peak_rss_mb": round(rss, 1),
        "seconds": round(seconds, 2),
        "stopped_at_limit": False,
    }
    return figures


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
    grown = None
    if args.log_records:
        print(f"bench groups: growing the log to {args.log_records:,} records", file=sys.stderr)
        grown = grow_log(root, args.log_records)
    group = f"group-{args.groups // 2:05d}"
    if args.memory:
        as_of = args.as_of or (str(grown["version_before"]) if grown else None)
        figures = measure_memory(root, group, as_of, args.memory_limit_mb)
        if args.json:
            print(json.dumps({"built": built, "grown": grown, "memory": figures}))
            return 0
        if grown:
            print(f"log: {grown}")
        print(f"{'COMMAND':<36} {'PEAK RSS (MB)':>14} {'SECONDS':>8}")
        for name, f in figures.items():
            over = (
                f"  (stopped at the {args.memory_limit_mb} MB limit)"
                if f["stopped_at_limit"]
                else ""
            )
            print(f"{name:<36} {f['peak_rss_mb']:>14.1f} {f['seconds']:>8.2f}{over}")
        return 0
    timed = measure(root, args.repeats, group)
    if args.json:
        print(json.dumps({"built": built, "grown": grown, "commands": timed}))
        return 0
    if built:
        print(
            f"warehouse: {built['groups']} groups x {built['members']} members, "
            f"{built['simulated_minutes']} simulated minutes, {built['batches']} batches, "
            f"{built['files']} data files, {built['size_mb']} MB, built in {built['build_s']} s"
        )
    print(f"{'COMMAND':<32} {'PROCESS (s)':>12} {'IN-PROCESS (s)':>15}   (best of {args.repeats})")
    for name, f in timed.items():
        print(f"{name:<32} {f['process_s']:>12.3f} {f['in_process_s']:>15.3f}")
    return 0
