"""The ``coordinator`` command: one entry point, one subcommand per tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from coordinator import __version__


def build_parser() -> argparse.ArgumentParser:
    from coordinator.cli import acls, bench, groups, replay, run, status, submit, topics
    from coordinator.gateway import cli as gateway_cli

    parser = argparse.ArgumentParser(
        prog="coordinator",
        description="Apache Kafka's consumer-group coordinator, as an engine and its tools.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    replay.add_parser(subparsers)
    bench.add_parser(subparsers)
    run.add_parser(subparsers)
    run.add_demo_parser(subparsers)
    submit.add_parser(subparsers)
    status.add_parser(subparsers)
    groups.add_parser(subparsers)
    topics.add_parser(subparsers)
    gateway_cli.add_parser(subparsers)
    acls.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.run(args))
    except (OSError, ValueError) as exc:
        print(f"coordinator {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
