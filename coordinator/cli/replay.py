"""``coordinator replay``: run the engine over a file of timed requests (contract, section 4).

Input: JSON lines, each a request with an ``at_ms`` event time (non-decreasing); a line holding
only ``at_ms`` just advances the clock; a line with ``topics`` and no ``api`` is the whole
current topic list, ``[{name, topic_id, partitions}]``, that consumer groups are assigned from
(``GroupCoordinator.update_topics``). Output: each response as a JSON line with the ``at_ms``
at which it was emitted (``--format timeline`` prints the same for people). ``--records FILE``
also writes the log records. Member ids come from a deterministic source: same input, same
output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import IO, Any, TextIO

from coordinator.cli.settings import load_config
from coordinator.cli.timeline import Timeline
from coordinator.engine import GroupCoordinator
from coordinator.ids import SequentialIds
from coordinator.jsonio import dumps


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="run the engine over JSON-lines requests with event times",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", nargs="*", default=["-"], help="request files, or - for stdin")
    parser.add_argument("--records", metavar="FILE", help="also write the log records here")
    parser.add_argument("--format", choices=("json", "timeline"), default="json")
    parser.add_argument("--config", action="append", metavar="FILE", help="coordinator .properties")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a setting")
    parser.set_defaults(run=run)


def events(stream: TextIO, name: str) -> Iterator[tuple[int | None, Any, str | None]]:
    """(at_ms, request or None, problem) for each non-blank line."""
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            yield None, line.rstrip("\n"), f"{name}:{number}: not JSON ({exc.msg})"
            continue
        at = item.pop("at_ms", None) if isinstance(item, dict) else None
        if at is not None and (isinstance(at, bool) or not isinstance(at, int)):
            yield None, item, f"{name}:{number}: at_ms must be an integer"
            continue
        yield at, (item if item != {} else None), None


def replay(
    sources: list[tuple[str, TextIO]],
    coordinator: GroupCoordinator,
    emit: Any,
    records_out: IO[str] | None,
    warn: TextIO,
) -> int:
    """Feed every source, in order, through one coordinator; returns the number of problems."""
    now = 0
    problems = 0
    for name, stream in sources:
        for at, request, problem in events(stream, name):
            if at is not None:
                if at < now:
                    print(f"{name}: at_ms {at} is before {now}; read as {now}", file=warn)
                now = max(now, at)
            if problem is not None:
                problems += 1
                print(problem, file=warn)
                # The engine answers what it cannot parse, so a bad line still gets a response.
                request = request if isinstance(request, dict) else {"raw": request}
            if request is None:
                responses = coordinator.advance(now)
            elif "topics" in request and "api" not in request:
                try:
                    responses = coordinator.update_topics(request["topics"], now)
                except (TypeError, ValueError) as exc:
                    problems += 1
                    print(f"{name}: topics refused: {exc}", file=warn)
                    responses = coordinator.advance(now)
            else:
                responses = coordinator.handle(request, now)
            for item in responses:
                emit(now, item)
            if records_out is not None:
                for record in coordinator.drain_records():
                    records_out.write(dumps(record) + "\n")
    return problems


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set)
    records_out = open(args.records, "w", encoding="utf-8") if args.records else None  # noqa: SIM115
    timeline = Timeline(sys.stdout) if args.format == "timeline" else None

    def emit(at_ms: int, item: dict[str, Any]) -> None:
        if timeline is not None:
            timeline.response(at_ms, item)
        else:
            sys.stdout.write(dumps({"at_ms": at_ms, **item}) + "\n")

    problems = 0
    try:
        for path in args.files:
            # Each file is its own story, told by a fresh coordinator.
            coordinator = GroupCoordinator(config, id_source=SequentialIds())
            if timeline is not None:
                timeline.heading(path)
            with (
                contextlib.nullcontext(sys.stdin) if path == "-" else open(path, encoding="utf-8")
            ) as stream:
                problems += replay([(path, stream)], coordinator, emit, records_out, sys.stderr)
            if timeline is not None:
                timeline.summary(coordinator)
    finally:
        if records_out is not None:
            records_out.close()
    return 1 if problems else 0
