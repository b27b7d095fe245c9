"""``coordinator run``: the coordinator as a Spark Structured Streaming job, started locally.

The same job as ``spark-submit jobs/coordinator_job.py``: requests dropped as JSON-lines files
into ``<warehouse>/inbox`` are answered into the Delta table ``<warehouse>/tables/responses``;
``consumer_offsets`` is the log (Kafka's ``__consumer_offsets``) and ``group_state`` the current
state of every group. Embedded default: ``local[<shards>]``, delta-rs, ``./warehouse``.

Settings: ``conf/`` (Kafka's names in coordinator.properties, job.properties,
spark-defaults.conf), then each ``--conf FILE`` (``spark.*`` keys go to Spark, ``job.*`` to the
job, the rest are coordinator settings), then ``--set`` and the options below.

``--rebuild-from-log`` replaces the checkpoint by one rebuilt from ``consumer_offsets`` (the old
one is moved to ``<checkpoint>.replaced-<UTC time>``, never deleted): after a lost or unusable
checkpoint, or to change ``--shards``, ``--state-key`` or ``--state-store``, which are fixed per
checkpoint. Groups come back Stable or Empty with fresh sessions and their committed offsets, as
when Kafka moves a coordinator. The job does it by itself when the checkpoint has no Spark state
but the log has records. Stop the job before rebuilding; ``offsets.topic.num.partitions`` cannot
change.

One writer per warehouse: the job claims the warehouse before it starts Spark, and is refused
(exit 1, with the owner's pid, host and lease) while another live job or embedded gateway owns
it; see :mod:`coordinator.stream.ownership` and ``job.owner.lease.timeout.ms``.

SIGTERM or SIGINT stops it between batches (the batch in flight committed, the next one
abandoned before it touches anything and re-run on the next start) within
``--shutdown-timeout`` (``job.shutdown.timeout.ms``, 30 s): exit status 0, or 1 when it overran.
Spark's log lines go to ``<warehouse>/logs/spark.log``, py4j's and pyspark's to
``<warehouse>/logs/coordinator.log``; ``--verbose`` shows them on the console too.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """The options ``coordinator run`` and ``jobs/coordinator_job.py`` share."""
    parser.add_argument(
        "--warehouse", metavar="DIR", help="tables, inbox and checkpoint beneath it"
    )
    parser.add_argument("--inbox", metavar="DIR", help="request files (default <warehouse>/inbox)")
    parser.add_argument("--checkpoint", metavar="DIR", help="Spark checkpoint directory")
    parser.add_argument(
        "--trigger-interval", type=int, metavar="MS", help="micro-batch trigger, milliseconds"
    )
    parser.add_argument(
        "--shards", type=int, metavar="N", help="shuffle partitions (fixed per checkpoint)"
    )
    parser.add_argument(
        "--state-key",
        choices=("shard", "group"),
        help="key the state by offsets partition (shard, the default: it scales) or by group "
        "id (group: one state row per group, for a few hundred active groups at most); fixed "
        "per checkpoint",
    )
    parser.add_argument(
        "--state-store",
        choices=("hdfs", "rocksdb"),
        help="Spark's state store provider, job.state.store (fixed per checkpoint)",
    )
    parser.add_argument("--master", help="Spark master (default local[<shards>])")
    parser.add_argument(
        "--conf", action="append", metavar="FILE", help="settings file (.properties); repeatable"
    )
    parser.add_argument(
        "--set", action="append", metavar="KEY=VALUE", default=[], help="override one setting"
    )
    parser.add_argument(
        "--stop-when-idle",
        type=float,
        metavar="SECONDS",
        help="stop after this long with no request in and nothing out",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        metavar="SECONDS",
        help="how long a stop (SIGTERM, SIGINT) may take; job.shutdown.timeout.ms, default 30",
    )
    parser.add_argument(
        "--rebuild-from-log",
        action="store_true",
        help="rebuild the checkpoint from consumer_offsets (old one moved aside); also the "
        "way to change --shards, --state-key or --state-store",
    )
    parser.add_argument("--quiet", action="store_true", help="no per-batch log lines")
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus), /livez and /readyz there (job.metrics)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="Spark's and py4j's log lines on the console too (they always go to "
        "<warehouse>/logs/spark.log and coordinator.log)",
    )


def settings_from(args: argparse.Namespace) -> Any:
    """Settings from ``conf/``, the ``--conf`` files, ``--set`` and the options."""
    from coordinator.cli.settings import parse_set
    from coordinator.stream.settings import load_settings

    return load_settings(
        args.conf,
        parse_set(args.set),
        warehouse=args.warehouse,
        inbox=args.inbox,
        checkpoint=args.checkpoint,
        trigger_interval_ms=args.trigger_interval,
        shards=args.shards,
        state_key=args.state_key,
        state_store=args.state_store,
        stop_when_idle_s=args.stop_when_idle,
        metrics=args.metrics,
        shutdown_timeout_ms=None
        if args.shutdown_timeout is None
        else max(1, round(args.shutdown_timeout * 1000)),
    )


#: This package's loggers: the only ones on the console unless --verbose.
OWN_LOGGERS = "coordinator"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _OwnLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == OWN_LOGGERS or record.name.startswith(OWN_LOGGERS + ".")


def configure_logging(quiet: bool, log_dir: Path | None = None, *, verbose: bool = False) -> None:
    """The console (stderr) gets this package's lines (INFO, or WARNING when ``quiet``), and
    with ``verbose`` every library's (py4j, pyspark) at INFO and ours at DEBUG.
    ``<log_dir>/coordinator.log`` gets every Python logger's lines at INFO (Spark's JVM writes
    ``spark.log`` beside it: ``conf/log4j2.properties``)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter(LOG_FORMAT))
    if verbose:
        console.setLevel(logging.DEBUG)
    else:
        console.setLevel(logging.WARNING if quiet else logging.INFO)
        console.addFilter(_OwnLines())
    root.addHandler(console)
    # py4j's INFO is a line per callback, its DEBUG every command sent to the JVM.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        file = logging.FileHandler(log_dir / "coordinator.log", encoding="utf-8")
        file.setFormatter(logging.Formatter(LOG_FORMAT))
        file.setLevel(logging.INFO)
        root.addHandler(file)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the coordinator as a Spark Structured Streaming job",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_job_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from coordinator.stream import job

    settings = settings_from(args)
    configure_logging(args.quiet, job.log_dir(settings), verbose=args.verbose)
    return job.run(
        settings, args.master, rebuild_from_log=args.rebuild_from_log, verbose=args.verbose
    )


def add_demo_parser(subparsers: Any) -> None:
    # The description is not demo.__doc__: importing the demo (Spark, pandas) would slow every
    # command's start by a third of a second.
    parser = subparsers.add_parser(
        "demo",
        help="the Spark job with live members: a group forms, one crashes, it rebalances",
        description=(
            "Starts the Spark job on the embedded default (local[2], delta-rs, "
            "./warehouse/demo) with three live members over the job's own transport: they "
            "form a group and commit, one process dies, its session expires inside the job, "
            "the two survivors rebalance and commit again. Then the group's timeline as the "
            "responses table recorded it, and the tables. See coordinator/stream/demo.py."
        ),
    )
    parser.add_argument("--warehouse", default="warehouse/demo", metavar="DIR")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="the job's per-batch log lines, and Spark's and py4j's (always in <warehouse>/logs/)",
    )
    parser.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from coordinator.stream import demo

    warehouse = Path(args.warehouse)
    demo.prepare_warehouse(warehouse)
    configure_logging(not args.verbose, warehouse / "logs", verbose=args.verbose)
    return demo.run_demo(warehouse, sys.stdout, verbose=args.verbose, prepared=True)
