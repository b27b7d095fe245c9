"""``coordinator bench KIND``: the command line of the benchmarks in :mod:`coordinator.bench`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks that print figures")
    kinds = parser.add_subparsers(dest="bench", metavar="KIND", required=True)
    engine = kinds.add_parser("engine", help="heartbeats/s, joins/s, rebalance time, commits/s")
    engine.add_argument("--json", action="store_true", help="print one JSON object")
    engine.add_argument("--quick", action="store_true", help="smaller runs (for smoke tests)")
    engine.set_defaults(run=run_engine)
    assignors = kinds.add_parser("assignors", help="each assignor's time by members x partitions")
    assignors.add_argument("--json", action="store_true", help="print one JSON object")
    assignors.add_argument("--quick", action="store_true", help="the two smallest sizes only")
    assignors.set_defaults(run=run_assignors)
    security = kinds.add_parser(
        "security", help="an ACL decision over many ACLs, a SCRAM exchange's server side"
    )
    security.add_argument("--json", action="store_true", help="print one JSON object")
    security.set_defaults(run=run_security)
    group = kinds.add_parser("group", help="a simulated group stabilising through the engine")
    group.add_argument("--members", type=int, default=1000)
    group.add_argument("--assignor", default="cooperative-sticky")
    group.add_argument("--json", action="store_true", help="print one JSON object")
    group.set_defaults(run=run_group)
    protocols = kinds.add_parser(
        "protocols",
        help="time to a stable assignment, consumer protocol (KIP-848) against classic",
    )
    protocols.add_argument(
        "--members", type=int, nargs="+", default=[10, 100, 1000], help="group sizes"
    )
    protocols.add_argument("--classic-assignor", default="cooperative-sticky")
    protocols.add_argument("--json", action="store_true", help="print one JSON object")
    protocols.set_defaults(run=run_protocols)
    cluster = kinds.add_parser(
        "cluster",
        help="the job on a standalone cluster, job.sink.write=driver vs executors: capacity, "
        "latency, driver and executor CPU per request",
    )
    cluster.add_argument("--groups", type=int, default=20)
    cluster.add_argument("--members", type=int, default=5, help="members per group")
    cluster.add_argument(
        "--heartbeat-ms",
        type=int,
        default=0,
        help="each member's heartbeat interval; 0 (default) = as soon as the last one is "
        "answered (capacity)",
    )
    cluster.add_argument("--seconds", type=float, default=60.0, help="measured time")
    cluster.add_argument("--warmup", type=float, default=20.0, help="load before measuring")
    cluster.add_argument(
        "--writes", default="driver,executors", help="job.sink.write values, in run order"
    )
    cluster.add_argument("--workers", type=int, default=2)
    cluster.add_argument("--cores", type=int, default=1, help="cores per worker")
    cluster.add_argument("--shards", type=int, default=2, help="job.shards")
    cluster.add_argument(
        "--master", help="use this master instead of starting a cluster (e.g. local[2])"
    )
    cluster.add_argument("--warehouse", metavar="DIR", help="keep the run's files under DIR")
    cluster.add_argument("--json", action="store_true", help="print one JSON object")
    cluster.set_defaults(run=run_cluster)
    stream = kinds.add_parser(
        "stream",
        help="heartbeat round trips through the Spark job, against a floor pipeline",
    )
    stream.add_argument("--groups", type=int, help="groups (default 10; --quick 3)")
    stream.add_argument("--members", type=int, help="members per group (default 10; --quick 2)")
    stream.add_argument(
        "--heartbeat-ms",
        type=int,
        default=3000,
        help="each member's heartbeat interval; 0 = as soon as the last one is answered",
    )
    stream.add_argument("--seconds", type=float, help="measured time after the warm-up (60)")
    stream.add_argument(
        "--warmup", type=float, help="seconds of load before measuring (20; first mode 2x)"
    )
    stream.add_argument(
        "--modes",
        default="floor,group,shard",
        help="any of floor, floor-shard, stateless, group, shard, tws, batchtime (in run order;"
        " floor, floor-shard: the same source, keys and sink around a state function that "
        "answers NONE, keyed by group id or by shard; stateless: the source and sink with no "
        "state at all; tws: the experimental transformWithStateInPandas operator, on RocksDB; "
        "batchtime: shard with every request served at its batch's time, as before requests "
        "carried their arrival)",
    )
    stream.add_argument(
        "--trigger-interval", type=int, metavar="MS", help="job.trigger.interval.ms"
    )
    stream.add_argument("--shards", type=int, help="job.shards (Spark shuffle partitions)")
    stream.add_argument(
        "--state-store",
        choices=("hdfs", "rocksdb"),
        help="job.state.store for group and shard (default: the job's, hdfs; the floor always "
        "runs on hdfs)",
    )
    stream.add_argument(
        "--arrow-batch",
        type=int,
        metavar="ROWS",
        help="spark.sql.execution.arrow.maxRecordsPerBatch for the job modes (default: Spark's, "
        "10000; the floor always runs with the default)",
    )
    stream.add_argument("--probes", type=int, default=10, help="session-expiry probe groups")
    stream.add_argument(
        "--overload",
        type=float,
        metavar="CAPACITY",
        help="requests/s the job answers (e.g. as measured with --heartbeat-ms 0): offer twice "
        "that for --seconds, then half of it for --recover-seconds, and count false expiries "
        "(heartbeats sent on time answered UNKNOWN_MEMBER_ID)",
    )
    stream.add_argument(
        "--recover-seconds", type=float, help="with --overload: seconds at half capacity (60)"
    )
    stream.add_argument(
        "--capacity",
        metavar="RATE,RATE,...",
        help="measure each mode's capacity: offer these requests/s (ascending) in turn, "
        "--seconds each, members in turn, until the backlog grows; the capacity is the highest "
        "rate with a steady backlog and p99 <= 3 s (e.g. --modes stateless,floor-shard,shard "
        "--capacity 10000,20000,30000,40000,50000)",
    )
    stream.add_argument(
        "--warehouse", metavar="DIR", help="keep each mode's warehouse under DIR (default: temp)"
    )
    stream.add_argument("--json", action="store_true", help="print one JSON object")
    stream.add_argument("--quick", action="store_true", help="a tiny run (for smoke tests)")
    stream.set_defaults(run=run_stream)
    op = kinds.add_parser(
        "operator",
        help="where a request's CPU goes in the job's state function (no Spark; cProfile)",
    )
    op.add_argument("--groups", type=int, default=200, help="Stable groups in the shard (200)")
    op.add_argument("--members", type=int, default=10, help="members per group (10)")
    op.add_argument("--batches", type=int, default=20, help="batches of heartbeats (20)")
    op.add_argument("--lines-per-file", type=int, default=100, help="inbox lines per file (100)")
    op.add_argument(
        "--workers",
        type=int,
        default=1,
        help="Python workers the batches land on in turn, each keeping its own decoded groups "
        "(1; Spark's local[2] runs a shard's task on either of 2)",
    )
    op.add_argument("--json", action="store_true", help="print one JSON object")
    op.set_defaults(run=run_operator)
    sink = kinds.add_parser(
        "sink",
        help="the driver's work per row of a batch: the sink's way, a dict per row, and the "
        "Delta append alone (no Spark)",
    )
    sink.add_argument("--rows", type=int, default=50_000, help="rows in the batch (50,000)")
    sink.add_argument("--groups", type=int, default=1_000, help="groups (1,000)")
    sink.add_argument("--rounds", type=int, default=5, help="times each way runs (5)")
    sink.add_argument(
        "--kinds", default="answers,commits", help="answers, commits or both (answers,commits)"
    )
    sink.add_argument("--json", action="store_true", help="print one JSON object")
    sink.set_defaults(run=run_sink)
    workers = kinds.add_parser(
        "workers",
        help="one Python evaluation's cost to a Spark task, the JVM and its Python workers on "
        "TCP against a UNIX domain socket (spark.python.unix.domain.socket.enabled)",
    )
    workers.add_argument("--partitions", type=int, default=2, help="tasks per query (2)")
    workers.add_argument("--rows", type=int, default=100, help="rows per query (100)")
    workers.add_argument("--keys", type=int, default=50, help="keys of the grouped query (50)")
    workers.add_argument("--rounds", type=int, default=10, help="runs of each query (10)")
    workers.add_argument(
        "--sessions", type=int, default=2, help="SparkContexts per mode, alternating (2)"
    )
    workers.add_argument("--json", action="store_true", help="print one JSON object")
    workers.set_defaults(run=run_workers)
    backlog = kinds.add_parser(
        "backlog",
        help="CPU per answered request by process (JVM, Python workers, driver) over a fixed "
        "backlog of heartbeats, each mode's query in one Spark session (run it from the "
        "checkout measured: PySpark's workers import the working directory's code)",
    )
    backlog.add_argument(
        "--modes",
        default="floor-shard,shard",
        help="queries in run order, as bench stream's --modes; a mode may repeat "
        "(floor-shard,shard)",
    )
    backlog.add_argument("--files", type=int, default=20, help="inbox files a round (20)")
    backlog.add_argument("--per-file", type=int, default=1000, help="heartbeats a file (1000)")
    backlog.add_argument("--rounds", type=int, default=2, help="backlogs per query (2)")
    backlog.add_argument("--groups", type=int, default=500, help="groups (500)")
    backlog.add_argument("--members", type=int, default=10, help="members per group (10)")
    backlog.add_argument(
        "--files-per-trigger", type=int, default=10, help="job.max.files.per.trigger (10)"
    )
    backlog.add_argument("--shards", type=int, default=2, help="job.shards (2)")
    backlog.add_argument(
        "--source-lines",
        default="python",
        help="job.source.lines of each query in turn, e.g. jvm,python: query i takes the "
        "(i mod n)-th (python, the job's default)",
    )
    backlog.add_argument("--json", action="store_true", help="print one JSON object")
    backlog.set_defaults(run=run_backlog)
    soak = kinds.add_parser(
        "soak",
        help="a busy day compressed into an hour: the job (a subprocess, restarted and kill "
        "-9ed) under live members with crashes; memory, files on disk, batch time and latency "
        "every 5 minutes, and whether they stay flat (not part of CI)",
    )
    soak.add_argument("--minutes", type=float, help="how long (60; --quick 1)")
    soak.add_argument("--groups", type=int, help="groups (70)")
    soak.add_argument("--members", type=int, help="members per group (5)")
    soak.add_argument("--partitions", type=int, help="partitions per group (6)")
    soak.add_argument("--heartbeat-ms", type=int, help="heartbeat interval (1000)")
    soak.add_argument("--session-ms", type=int, help="session timeout (15000)")
    soak.add_argument("--commit-every", type=float, metavar="SECONDS", help="per member (1)")
    soak.add_argument(
        "--crash-every",
        type=float,
        metavar="SECONDS",
        help="one member dies (and is replaced) this often; 0 = never (20)",
    )
    soak.add_argument("--loops-per-s", type=float, help="load loops a second (60)")
    soak.add_argument(
        "--requests-per-file", type=int, help="at most this many requests in one inbox file (10)"
    )
    soak.add_argument(
        "--sample-every", type=float, metavar="SECONDS", help="one row each (300; --quick 10)"
    )
    soak.add_argument(
        "--peek-every",
        type=float,
        metavar="SECONDS",
        help="read sizes and memory this often between rows; rows keep the peak (30; 0: never)",
    )
    soak.add_argument(
        "--settle-minutes",
        type=float,
        help="judge the trend from this minute on: past warm-up and retention (15)",
    )
    soak.add_argument(
        "--restarts",
        metavar="SHARE:KIND,...",
        help="when to restart the job and how, e.g. 0.4:stop,0.7:kill (the default); none",
    )
    soak.add_argument("--trigger-interval", type=int, metavar="MS", help="job.trigger.interval.ms")
    soak.add_argument("--shards", type=int, help="job.shards (Spark shuffle partitions)")
    soak.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for the job (its --set), e.g. retention; repeatable",
    )
    soak.add_argument(
        "--no-gc", action="store_true", help="read the JVM heap without a full GC first"
    )
    soak.add_argument(
        "--trace-memory",
        action="store_true",
        help="tracemalloc in the job's driver: <warehouse>/memory-trace.jsonl",
    )
    soak.add_argument("--trace-every", type=float, metavar="SECONDS", help="(60)")
    soak.add_argument(
        "--warehouse", metavar="DIR", help="keep the warehouse under DIR (default: temp)"
    )
    soak.add_argument("--quick", action="store_true", help="a tiny run checking the machinery")
    soak.add_argument("--json", action="store_true", help="print one JSON object at the end")
    soak.set_defaults(run=run_soak)
    groups = kinds.add_parser(
        "groups", help="coordinator groups' answer times on a warehouse of many groups"
    )
    groups.add_argument("--groups", type=int, default=1000)
    groups.add_argument("--members", type=int, default=3, help="consumers per group (3)")
    groups.add_argument(
        "--minutes", type=float, default=3.0, help="simulated minutes of the job (3)"
    )
    groups.add_argument("--repeats", type=int, default=3, help="runs per command (best of)")
    groups.add_argument(
        "--warehouse", default="warehouse/bench-groups", metavar="DIR", help="built here"
    )
    groups.add_argument("--reuse", action="store_true", help="reuse a warehouse built before")
    groups.add_argument(
        "--log-records",
        type=int,
        metavar="N",
        help="grow the log to N records with synthetic commits (e.g. 10000000)",
    )
    groups.add_argument(
        "--memory",
        action="store_true",
        help="peak RSS of each reading command (a fresh process each) instead of times",
    )
    groups.add_argument(
        "--memory-limit-mb",
        type=int,
        default=8000,
        metavar="MB",
        help="with --memory: stop a command whose RSS passes this (8000; 0 = no limit)",
    )
    groups.add_argument(
        "--as-of",
        metavar="POINT",
        help="with --memory: also the --as-of readings at this point (default: the log's "
        "version before it was grown)",
    )
    groups.add_argument("--json", action="store_true", help="print one JSON object")
    groups.set_defaults(run=run_groups)
    gateway = kinds.add_parser(
        "gateway",
        help="our Kafka wire-protocol gateway against Tansu and noida-db: join time, rebalance "
        "time, heartbeats/s (needs the bench extra: pip install -e '.[bench]')",
    )
    gateway.add_argument("--sizes", default="10,100", help="consumers in the group (10,100)")
    gateway.add_argument(
        "--delays",
        default="0,150,3000,2500",
        help="our group.initial.rebalance.delay.ms, one run of ours each (0,150,3000,2500: none, "
        "noida's hold, Kafka's default, Tansu's hold)",
    )
    gateway.add_argument("--processes", type=int, default=1, help="our gateway's --processes (1)")
    gateway.add_argument("--peers", default="tansu,noida", help="any of tansu, noida ('' = none)")
    gateway.add_argument(
        "--figures", default="abc", help="a: join, b: rebalance after a leave, c: heartbeats/s"
    )
    gateway.add_argument(
        "--heartbeat-interval-ms", type=int, default=200, help="the consumers' (a, b) (200)"
    )
    gateway.add_argument("--leaves", type=int, default=3, help="(b) leaves measured (median; 3)")
    gateway.add_argument(
        "--heartbeat-seconds", type=float, default=10.0, help="(c) measured window (10)"
    )
    gateway.add_argument(
        "--generators", type=int, default=1, help="(c) load generator processes (1)"
    )
    gateway.add_argument("--json", action="store_true", help="print one JSON object")
    gateway.set_defaults(run=run_gateway)
    cpu = kinds.add_parser(
        "gateway-cpu",
        help="our gateway's server CPU per heartbeat, kio's codec against the fast path and the "
        "floor, "
        "asyncio against uvloop, in turns in one process (fair on a busy box)",
    )
    cpu.add_argument("--connections", type=int, default=10, help="members/connections (10)")
    cpu.add_argument("--seconds", type=float, default=5.0, help="window of each round (5)")
    cpu.add_argument("--rounds", type=int, default=3, help="rounds of each variant (3)")
    cpu.add_argument(
        "--codecs",
        default="kio,fast",
        help="any of kio, fast, floor (kio,fast); floor: a canned answer per heartbeat frame, "
        "the least any Python server on the loop pays",
    )
    cpu.add_argument(
        "--loops", default="asyncio,uvloop", help="any of asyncio, uvloop (asyncio,uvloop)"
    )
    cpu.add_argument("--json", action="store_true", help="print one JSON object")
    cpu.set_defaults(run=run_gateway_cpu)


def run_engine(args: argparse.Namespace) -> int:
    from coordinator.bench.engine import (
        commits_per_s,
        fetches_per_s,
        heartbeats_per_s,
        joins_per_s,
        load_records_per_s,
        rebalance_ms,
    )

    quick = args.quick
    figures: dict[str, Any] = {
        "heartbeats_per_s": round(heartbeats_per_s(20_000 if quick else 300_000)),
        "joins_per_s": round(joins_per_s(200 if quick else 5_000)),
        "rebalance_ms": {
            str(n): round(rebalance_ms(n), 2) for n in ((10, 100) if quick else (10, 100, 1000))
        },
        "commits_per_s": {
            "1_partition": round(commits_per_s(1, 2_000 if quick else 100_000)),
            "100_partitions": round(commits_per_s(100, 200 if quick else 5_000)),
        },
        "fetches_per_s": round(fetches_per_s(2_000 if quick else 100_000)),
        "load_records_per_s": round(load_records_per_s(20_000 if quick else 1_000_000)),
    }
    if args.json:
        print(json.dumps(figures))
        return 0
    out = sys.stdout
    out.write("engine benchmark (one core, through GroupCoordinator.handle)\n")
    out.write(f"  heartbeats/s            {figures['heartbeats_per_s']:>12,}\n")
    out.write(f"  joins/s                 {figures['joins_per_s']:>12,}\n")
    for size, ms in figures["rebalance_ms"].items():
        out.write(f"  rebalance, {size:>5} members {ms:>12,.2f} ms\n")
    for label, rate in figures["commits_per_s"].items():
        out.write(f"  commits/s ({label.replace('_', ' ')}) {rate:>9,}\n")
    out.write(f"  fetches/s (10 partitions) {figures['fetches_per_s']:>10,}\n")
    out.write(f"  load, records/s         {figures['load_records_per_s']:>12,}\n")
    return 0


def run_assignors(args: argparse.Namespace) -> int:
    from coordinator.bench.assignors import bench_assignors

    figures = bench_assignors(quick=args.quick)
    if args.json:
        print(json.dumps(figures))
        return 0
    print("assignors: milliseconds for one assign(), members x partitions (10 topics)")
    for name, timings in figures.items():
        for size, ms in timings.items():
            print(f"  {name:<20} {size:<24} {ms:>12,.1f} ms")
    return 0


def run_security(args: argparse.Namespace) -> int:
    from coordinator.bench.security import bench_security

    figures = bench_security()
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name}: {value:.2f}")
    return 0


def run_group(args: argparse.Namespace) -> int:
    from coordinator.bench.engine import stabilise_group

    figures = stabilise_group(args.members, args.assignor)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(
        f"{figures['members']} members ({args.assignor}) stable after {figures['simulated_ms']:,} "
        f"simulated ms (Kafka's 3 s initial delay included), {figures['wall_s']} s of wall time, "
        f"{figures['requests']:,} requests"
    )
    return 0


def run_protocols(args: argparse.Namespace) -> int:
    from coordinator.bench.protocols import compare

    figures = compare(tuple(args.members), args.classic_assignor)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(
        "time to a stable assignment, 10 topics x 100 partitions, all members starting at once "
        "(simulated ms; wall s to compute; requests)"
    )
    for size, both in figures.items():
        for protocol in ("consumer", "classic"):
            f = both[protocol]
            print(
                f"  {size:>5} members  {protocol:<8} {f['simulated_ms']:>9,} ms "
                f"{f['wall_s']:>9.3f} s {f['requests']:>10,} requests"
            )
    return 0


def run_stream(args: argparse.Namespace) -> int:
    from coordinator.bench.stream import StreamBenchOptions, format_report, stderr, stream_bench

    chosen = {
        "groups": args.groups,
        "members": args.members,
        "heartbeat_ms": args.heartbeat_ms,
        "seconds": args.seconds,
        "warmup_seconds": args.warmup,
        "modes": tuple(m.strip() for m in args.modes.split(",") if m.strip()),
        "trigger_interval_ms": args.trigger_interval,
        "shards": args.shards,
        "state_store": args.state_store,
        "arrow_batch": args.arrow_batch,
        "probes": args.probes,
        "warehouse": args.warehouse,
        "overload_capacity": args.overload,
        "recover_seconds": args.recover_seconds,
        "capacity_rates": tuple(float(r) for r in args.capacity.split(",") if r.strip())
        if args.capacity
        else None,
    }
    if args.quick:
        options = StreamBenchOptions.quick(**chosen)
    else:
        options = StreamBenchOptions(**{k: v for k, v in chosen.items() if v is not None})
    figures = stream_bench(options, say=stderr)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(format_report(figures))
    return 0


def run_backlog(args: argparse.Namespace) -> int:
    from coordinator.bench.backlog import BacklogBenchOptions, backlog_bench, format_report

    def stderr(message: str) -> None:
        print(f"bench backlog: {message}", file=sys.stderr, flush=True)

    options = BacklogBenchOptions(
        modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()),
        files=args.files,
        per_file=args.per_file,
        rounds=args.rounds,
        groups=args.groups,
        members=args.members,
        files_per_trigger=args.files_per_trigger,
        shards=args.shards,
        source_lines=tuple(v.strip() for v in args.source_lines.split(",") if v.strip()),
    )
    figures = backlog_bench(options, say=stderr)
    print(json.dumps(figures) if args.json else format_report(figures))
    return 0


def run_operator(args: argparse.Namespace) -> int:
    from coordinator.bench.operator import OperatorBenchOptions, format_report, operator_bench

    options = OperatorBenchOptions(
        args.groups, args.members, args.batches, args.lines_per_file, workers=args.workers
    )
    result = operator_bench(options)
    print(json.dumps(result) if args.json else format_report(result))
    return 0


def run_sink(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from coordinator.bench.sink import KINDS, SinkBenchOptions, format_report, sink_bench

    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        print(
            f"bench sink: --kinds takes {' and/or '.join(KINDS)}, not {args.kinds!r}",
            file=sys.stderr,
        )
        return 2
    result = sink_bench(SinkBenchOptions(args.rows, args.groups, args.rounds, kinds))
    print(json.dumps(asdict(result)) if args.json else format_report(result))
    return 0


def run_workers(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from coordinator.bench.workers import WorkersBenchOptions, format_report, workers_bench

    options = WorkersBenchOptions(args.partitions, args.rows, args.keys, args.rounds, args.sessions)
    result = workers_bench(options, progress=lambda message: print(message, file=sys.stderr))
    print(json.dumps(asdict(result)) if args.json else format_report(result))
    if not result.as_configured():
        print(
            "bench workers: the workers did not run as configured "
            f"({result.workers_on_uds}): the figures do not compare the two modes",
            file=sys.stderr,
        )
        return 1
    return 0


def run_cluster(args: argparse.Namespace) -> int:
    from coordinator.bench.cluster import ClusterBenchOptions, cluster_bench, format_cluster_report

    def stderr(message: str) -> None:
        print(f"bench cluster: {message}", file=sys.stderr, flush=True)

    options = ClusterBenchOptions(
        groups=args.groups,
        members=args.members,
        heartbeat_ms=args.heartbeat_ms,
        seconds=args.seconds,
        warmup_seconds=args.warmup,
        writes=tuple(w.strip() for w in args.writes.split(",") if w.strip()),
        workers=args.workers,
        cores=args.cores,
        shards=args.shards,
        master=args.master,
        warehouse=args.warehouse,
    )
    figures = cluster_bench(options, say=stderr)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(format_cluster_report(figures))
    return 0


def run_soak(args: argparse.Namespace) -> int:
    import signal

    from coordinator.bench import soak

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt  # a clean end (the job stopped) on SIGTERM too

    signal.signal(signal.SIGTERM, interrupt)

    chosen = {
        "minutes": args.minutes,
        "groups": args.groups,
        "members": args.members,
        "partitions": args.partitions,
        "heartbeat_ms": args.heartbeat_ms,
        "session_ms": args.session_ms,
        "commit_every_s": args.commit_every,
        "crash_every_s": args.crash_every,
        "loops_per_s": args.loops_per_s,
        "requests_per_file": args.requests_per_file,
        "sample_every_s": args.sample_every,
        "peek_every_s": args.peek_every,
        "settle_minutes": args.settle_minutes,
        "restarts": None if args.restarts is None else soak.parse_restarts(args.restarts),
        "trigger_interval_ms": args.trigger_interval,
        "shards": args.shards,
        "job_settings": tuple(args.set) or None,
        "warehouse": args.warehouse,
        "heap_after_gc": False if args.no_gc else None,
        "trace_memory": True if args.trace_memory else None,
        "trace_every_s": args.trace_every,
    }
    if args.quick:
        options = soak.SoakOptions.quick(**chosen)
    else:
        options = soak.with_changes(soak.SoakOptions(), **chosen)
    if args.json:
        print(json.dumps(soak.run_soak(options, say=soak.stderr)))
        return 0

    def print_row(sample: dict[str, Any]) -> None:
        print(soak.row(sample), flush=True)
        print(soak.table_row(sample), flush=True)

    print(soak.format_heading(dataclasses.asdict(options)), flush=True)
    result = soak.run_soak(options, say=soak.stderr, on_sample=print_row)
    print(soak.format_trend(result))
    if result["warehouse"]:
        print(f"warehouse kept at {result['warehouse']}")
    return 0


def run_groups(args: argparse.Namespace) -> int:
    from coordinator.bench import groups

    return groups.run(args)


def run_gateway_cpu(args: argparse.Namespace) -> int:
    from coordinator.bench import gateway_cpu

    return gateway_cpu.run(args)


def run_gateway(args: argparse.Namespace) -> int:
    from coordinator.bench import gateway

    return gateway.run(args)
