"""``coordinator submit``: send requests to the running Spark job and print its answers.

Input: JSON lines, one request each (contract, section 1; bytes as base64); blank lines are
skipped. Request ids are strings or integers, unique; a request without one gets one. All of
them go into the job's inbox as ONE file, then the command waits for every response in the
``responses`` table and prints them as JSON lines, in request order. Nothing is submitted if
any line is not a JSON object.

Exit status: 0 when every request was answered (whatever its error code), 1 on timeout (the
responses that came are printed, the missing ids named on stderr), 2 for unusable input.
``--no-wait`` prints each request's id (as ``{"request_id": ...}``) instead of waiting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any, TextIO

from coordinator.jsonio import dumps


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "submit",
        help="send JSON-lines requests to the Spark job and print its responses",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", help="a file of requests, or - for stdin")
    parser.add_argument(
        "--warehouse", default="warehouse", metavar="DIR", help="the job's warehouse (./warehouse)"
    )
    parser.add_argument("--inbox", metavar="DIR", help="the job's inbox (default: WAREHOUSE/inbox)")
    parser.add_argument(
        "--no-wait", action="store_true", help="submit and print the request ids; do not wait"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for all the responses (default 30)",
    )
    parser.set_defaults(run=run)


def read_requests(stream: TextIO, name: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The requests of ``stream`` and one message per line that is not a JSON object."""
    requests: list[dict[str, Any]] = []
    problems: list[str] = []
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{name}:{number}: not JSON ({exc.msg})")
            continue
        if not isinstance(item, dict):
            problems.append(f"{name}:{number}: not a JSON object")
            continue
        request_id = item.get("request_id")
        if request_id is not None and (
            isinstance(request_id, bool) or not isinstance(request_id, (str, int))
        ):
            # Ids key the answers: 1, 1.0 and true would be one key, a list none at all.
            problems.append(f"{name}:{number}: request_id must be a string or an integer")
            continue
        requests.append(item)
    return requests, problems


def run(args: argparse.Namespace) -> int:
    # Imported here: pyarrow is an optional dependency, and the other commands do without it.
    from coordinator.stream.client import ResponseTimeoutError, StreamClient
    from coordinator.stream.schema import Warehouse

    if args.timeout < 0:
        raise ValueError("--timeout cannot be negative")
    with (
        contextlib.nullcontext(sys.stdin) if args.file == "-" else open(args.file, encoding="utf-8")
    ) as stream:
        requests, problems = read_requests(stream, args.file)
    for problem in problems:
        print(f"coordinator submit: {problem}", file=sys.stderr)
    if problems:
        return 2
    if not requests:
        print("coordinator submit: no requests; nothing submitted", file=sys.stderr)
        return 0
    # The client pins the responses table's version now, before the file can be answered.
    client = StreamClient(Warehouse.at(args.warehouse, args.inbox))
    ids = client.submit(requests)
    if args.no_wait:
        for request_id in ids:
            sys.stdout.write(dumps({"request_id": request_id}) + "\n")
        return 0
    try:
        answers = client.wait(ids, args.timeout)
    except ResponseTimeoutError as exc:
        for request_id in ids:
            if request_id in exc.responses:
                sys.stdout.write(dumps(exc.responses[request_id]) + "\n")
        sys.stdout.flush()
        missing = ", ".join(dumps(i) for i in exc.missing)
        print(
            f"coordinator submit: timed out after {args.timeout:g} s; "
            f"{len(exc.missing)} of {len(ids)} request(s) unanswered: {missing}",
            file=sys.stderr,
        )
        return 1
    for request_id in ids:
        sys.stdout.write(dumps(answers[request_id]) + "\n")
    return 0
