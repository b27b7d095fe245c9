"""``coordinator groups``: ``kafka-consumer-groups.sh`` for the Spark job's warehouse.

The options are Kafka's, with Kafka's column layout (``--output json`` for scripts):

  coordinator groups --list [--state [STATES]]
  coordinator groups --describe (--group G ... | --all-groups) [--offsets | --members [--verbose] | --state]
  coordinator groups --reset-offsets --group G (--topic T[:P,...] ... | --all-topics | --from-file F)
        (--to-offset N | --shift-by N | --to-datetime DT | --by-duration PnDTnHnMnS |
         --to-earliest | --to-latest | --to-current | --from-file F) [--dry-run | --execute] [--export]
  coordinator groups --delete (--group G ... | --all-groups)
  coordinator groups --delete-offsets --group G --topic T[:P,...] ...

Reading is done from the tables (no job needed, about a second); changes are sent to the
running job as requests and wait for its answers (``--timeout``). Offsets are reset only for a
group that is Empty or does not exist; a live group is neither reset nor deleted. Reset is a
dry run unless ``--execute`` is given.

The coordinator holds no topic data: log start and end offsets (LOG-END-OFFSET, LAG,
``--to-earliest``/``--to-latest``/``--to-datetime``) come from the cluster that holds the
topics, asked with ListOffsets as Kafka's tool asks its brokers:
  --upstream HOST:PORT[,...]   its bootstrap servers (Kafka's --bootstrap-server), the cluster
                               ``coordinator gateway --upstream`` fronts
  --gateway-conf FILE          or its upstream.bootstrap.servers (the gateway's properties)
or from ``--topic-offsets FILE`` (CSV or JSON lines of topic, partition, log_end_offset[,
log_start_offset, timestamp_ms], or a Delta table); see ``coordinator.admin.topic_offsets``.

Beyond Kafka:
  --as-of TIME|VERSION    describe or list as it was: an ISO date-time (UTC unless a zone is
                          given: every batch the coordinator ran at or before it, inside the
                          history window), or a version of the consumer_offsets log (Delta
                          time travel, inside job.delta.log.retention.ms); with
                          --reset-offsets --to-current/--shift-by, start from the offsets
                          committed then
  coordinator groups history --group G
                          the group's rebalances (generation, start, end, duration, leader,
                          members joined and left, the coordinator's reason) and its commits
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from coordinator.jsonio import dumps


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "groups",
        help="list, describe, reset and delete consumer groups (kafka-consumer-groups.sh)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", nargs="?", choices=("history",), help="history of a group")
    actions = parser.add_argument_group("actions (exactly one)")
    for flag, text in (
        ("--list", "list all consumer groups"),
        ("--describe", "describe consumer groups and their offsets"),
        ("--delete", "delete groups (only when they have no members)"),
        ("--reset-offsets", "reset a group's offsets (Empty groups only; dry run by default)"),
        ("--delete-offsets", "delete a group's offsets for topics or partitions"),
    ):
        actions.add_argument(flag, action="store_true", help=text)
    parser.add_argument("--warehouse", default="warehouse", metavar="DIR")
    parser.add_argument("--checkpoint", metavar="DIR", help="default <warehouse>/checkpoints/...")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP")
    parser.add_argument("--all-groups", action="store_true")
    parser.add_argument("--offsets", action="store_true", help="describe: offsets (default)")
    parser.add_argument("--members", action="store_true", help="describe: members")
    parser.add_argument("--verbose", action="store_true", help="describe --members: assignment")
    parser.add_argument(
        "--state",
        nargs="?",
        const="",
        default=None,
        metavar="STATES",
        help="describe: the group's state; list: show states, or only these (comma separated)",
    )
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,...]")
    parser.add_argument("--all-topics", action="store_true")
    parser.add_argument("--to-offset", type=int, metavar="OFFSET")
    parser.add_argument("--shift-by", type=int, metavar="N")
    parser.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    parser.add_argument("--by-duration", metavar="PnDTnHnMnS")
    parser.add_argument("--to-earliest", action="store_true")
    parser.add_argument("--to-latest", action="store_true")
    parser.add_argument("--to-current", action="store_true")
    parser.add_argument("--from-file", metavar="CSV")
    parser.add_argument("--export", action="store_true", help="print the reset plan as CSV")
    parser.add_argument("--dry-run", action="store_true", help="show the plan only (default)")
    parser.add_argument("--execute", action="store_true", help="apply the reset")
    parser.add_argument("--topic-offsets", metavar="FILE|TABLE", help="the topics' log offsets")
    parser.add_argument(
        "--upstream",
        metavar="HOST:PORT[,...]",
        help="the cluster holding the topics: log offsets asked with ListOffsets",
    )
    parser.add_argument(
        "--gateway-conf",
        metavar="FILE",
        help="gateway properties: its upstream.bootstrap.servers as --upstream",
    )
    parser.add_argument("--as-of", metavar="TIME|VERSION", help="as it was then (see above)")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.add_argument(
        "--timeout", type=float, default=30.0, metavar="SECONDS", help="wait for the job (30)"
    )
    parser.add_argument(
        "--conf", action="append", metavar="FILE", help="job settings (the coordinator's address)"
    )
    parser.set_defaults(run=run)


class Output:
    """Kafka's text layout on ``out`` (errors as ``\\nError: ...``), or one JSON document."""

    def __init__(self, out: TextIO, err: TextIO, as_json: bool) -> None:
        self.out, self.err, self.as_json = out, err, as_json
        self.failed = False
        self.document: dict[str, Any] = {}

    def line(self, text: str = "") -> None:
        if not self.as_json:
            print(text.rstrip(), file=self.out)

    def note(self, text: str) -> None:
        """Kafka prints these on stderr (no active members, rebalancing)."""
        if not self.as_json:
            print(f"\n{text}", file=self.err)

    def error(self, text: str) -> None:
        self.failed = True
        if self.as_json:
            self.document.setdefault("errors", []).append(text)
        else:
            print(f"\nError: {text}", file=self.out)

    def table(
        self, widths: Sequence[int | None], header: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Rows padded like Java's ``%-Ns`` (None: the last, unpadded column)."""

        def fmt(cells: Sequence[Any]) -> str:
            parts = []
            for width, cell in zip(widths, cells, strict=True):
                text = "-" if cell is None else str(cell)
                parts.append(text if width is None else f"{text:<{width}}")
            return " ".join(parts)

        self.line()
        self.line(fmt(header))
        for row in rows:
            self.line(fmt(row))

    def finish(self) -> int:
        if self.as_json:
            print(dumps(self.document), file=self.out)
        return 1 if self.failed else 0


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from coordinator.admin import groups
    from coordinator.admin.tables import AsOf, AsOfError, WarehouseReader, parse_datetime
    from coordinator.admin.topic_offsets import TopicOffsetsError

    output = Output(out or sys.stdout, err or sys.stderr, args.output == "json")
    chosen = [
        name
        for name in ("list", "describe", "delete", "reset_offsets", "delete_offsets")
        if getattr(args, name)
    ] + (["history"] if args.action == "history" else [])
    if len(chosen) != 1:
        raise ValueError(
            "Command must include exactly one action: --list, --describe, --delete, "
            "--reset-offsets, --delete-offsets, or history"
        )
    action = chosen[0]
    if not Path(args.warehouse).is_dir():
        raise ValueError(f"no warehouse at {args.warehouse}")
    reader = WarehouseReader(args.warehouse, args.checkpoint)
    topic_offsets = None
    try:
        as_of = AsOf.parse(args.as_of) if args.as_of else None
        topic_offsets = _log_offsets(args)
        cut = reader.cut(as_of)
        context = Context(args, output, reader, cut, topic_offsets)
        if action == "list":
            context.run_list()
        elif action == "describe":
            context.run_describe()
        elif action == "history":
            context.run_history()
        elif action == "reset_offsets":
            to_datetime = parse_datetime(args.to_datetime) if args.to_datetime else None
            if args.by_duration:
                if to_datetime is not None:
                    raise groups.GroupsError("--to-datetime and --by-duration exclude each other")
                to_datetime = int(time.time() * 1000) - groups.parse_duration_ms(args.by_duration)
            context.run_reset(to_datetime)
        elif action == "delete":
            context.run_delete()
        else:
            context.run_delete_offsets()
    except (groups.GroupsError, AsOfError, TopicOffsetsError) as problem:
        output.error(str(problem))
    finally:
        if topic_offsets is not None and hasattr(topic_offsets, "close"):
            topic_offsets.close()
    return output.finish()


def _log_offsets(args: argparse.Namespace) -> Any:
    """The source of the topics' log offsets: the upstream cluster (``--upstream``, or the
    gateway properties' ``upstream.bootstrap.servers``), a ``--topic-offsets`` file, or None."""
    from coordinator.admin.topic_offsets import TopicOffsets, TopicOffsetsError

    servers = args.upstream
    credentials = None
    if args.gateway_conf:
        from coordinator.cli.settings import read_properties

        if not Path(args.gateway_conf).is_file():
            raise TopicOffsetsError(f"no gateway properties at {args.gateway_conf}")
        properties = read_properties(Path(args.gateway_conf))
        # the gateway's own TLS and SASL towards its upstream (upstream.security.protocol, ...)
        credentials = _upstream_credentials(properties)
        if servers is None:
            servers = properties.get("upstream.bootstrap.servers")
            if not servers:
                raise TopicOffsetsError(f"{args.gateway_conf} has no upstream.bootstrap.servers")
    if servers is not None and args.topic_offsets:
        raise TopicOffsetsError(
            "--topic-offsets and --upstream (or --gateway-conf) exclude each other: the log "
            "offsets come from one of them"
        )
    if servers is not None:
        from coordinator.admin.upstream_offsets import UpstreamOffsets

        return UpstreamOffsets.from_servers(servers, credentials=credentials)
    return TopicOffsets.read(args.topic_offsets) if args.topic_offsets else None


def _upstream_credentials(properties: dict[str, str]) -> Any:
    """The gateway properties' ``upstream.security.protocol``, ``upstream.sasl.*`` and
    ``upstream.ssl.*`` as the connection settings (None: plaintext)."""
    from coordinator.admin.topic_offsets import TopicOffsetsError
    from coordinator.gateway.security.client import UpstreamCredentials
    from coordinator.security.settings import SecuritySettingError, parse

    try:
        settings = parse(properties).upstream
    except SecuritySettingError as problem:
        raise TopicOffsetsError(str(problem)) from None
    if settings.protocol == "PLAINTEXT":
        return None
    return UpstreamCredentials.from_settings(settings)


class Context:
    """One invocation: the parsed options, the reader at its cut, and the output."""

    def __init__(
        self,
        args: argparse.Namespace,
        output: Output,
        reader: Any,
        cut: Any,
        topic_offsets: Any,
    ) -> None:
        self.args, self.output, self.reader, self.cut = args, output, reader, cut
        self.topic_offsets = topic_offsets
        if cut.as_of is not None:
            output.document["as_of"] = {"point": cut.as_of.describe(), "batch_id": cut.batch_id}
            if not output.as_json:
                print(f"(as of {cut.as_of.describe()}: batch {cut.batch_id})", file=output.err)

    def group_ids(self) -> list[str]:
        from coordinator.admin import groups

        if self.args.all_groups:
            if self.args.group:
                raise groups.GroupsError("Option --all-groups cannot be used with --group")
            return [g["group_id"] for g in groups.list_groups(self.reader, self.cut)]
        if not self.args.group:
            raise groups.GroupsError("One of the group options is required: --group, --all-groups")
        return list(self.args.group)

    # --- reading ----------------------------------------------------------------------------

    def run_list(self) -> None:
        from coordinator.admin import groups

        with_state = self.args.state is not None
        states = groups.parse_states(self.args.state) if self.args.state else None
        listed = groups.list_groups(self.reader, self.cut, states)
        self.output.document["groups"] = listed
        if not with_state:
            for g in listed:
                self.output.line(g["group_id"])
            return
        width = max([15, *(len(g["group_id"]) for g in listed)]) + 10
        self.output.line(f"{'GROUP':<{width}} {'STATE':<20}")
        for g in listed:
            self.output.line(f"{g['group_id']:<{width}} {g['state']:<20}")

    def run_describe(self) -> None:
        from coordinator.admin import groups

        args = self.args
        if sum((args.offsets, args.members, args.state is not None)) > 1:
            raise groups.GroupsError(
                "Option --describe takes only one of --offsets, --members, --state"
            )
        if args.verbose and not args.members:
            raise groups.GroupsError("Option --verbose is only valid with --describe --members")
        views = groups.collect(self.reader, self.cut, self.group_ids())
        described = self.output.document.setdefault("groups", [])
        for group_id in sorted(views):
            view = views[group_id]
            if not self._printable(view):
                described.append({"group": group_id, "state": view.state})
                continue
            if args.members:
                rows = groups.member_rows(view)
                described.append({"group": group_id, "state": view.state, "members": rows})
                self._print_members(rows, args.verbose)
            elif args.state is not None:
                row = groups.state_row(view, self.coordinator())
                described.append(row)
                width = max(25, len(row["coordinator"]))
                self.output.table(
                    (width, 25, 20, 15, None),
                    ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                    [
                        (
                            row["group"],
                            row["coordinator"],
                            row["assignment_strategy"],
                            row["state"],
                            row["num_members"],
                        )
                    ],
                )
            else:
                rows = groups.offset_rows(view, self.topic_offsets)
                described.append({"group": group_id, "state": view.state, "offsets": rows})
                self._warn_unknown_partitions(rows)
                self._print_offsets(rows)

    def _warn_unknown_partitions(self, rows: list[dict[str, Any]]) -> None:
        """A partition the log offsets' source does not have (a deleted topic, a file without
        it) shows ``-``, and says why, as Kafka warns on stderr."""
        if self.topic_offsets is None:
            return
        unknown = sorted(
            {(r["topic"], r["partition"]) for r in rows if r["log_end_offset"] is None}
        )
        for topic, partition in unknown:
            text = (
                f"{self.topic_offsets.name} has no partition {topic}-{partition}: its "
                "LOG-END-OFFSET and LAG are unknown"
            )
            self.output.document.setdefault("warnings", []).append(text)
            if not self.output.as_json:
                print(f"\nWarn: {text}", file=self.output.err)

    def _printable(self, view: Any) -> bool:
        """Kafka's ``shouldPrintMemberState``."""
        if view.state == "Dead":
            self.output.error(f"Consumer group '{view.group_id}' does not exist.")
            return False
        if view.state == "Empty":
            self.output.note(f"Consumer group '{view.group_id}' has no active members.")
        elif view.state in ("PreparingRebalance", "CompletingRebalance"):
            self.output.note(f"Warning: Consumer group '{view.group_id}' is rebalancing.")
        return True

    def _print_offsets(self, rows: list[dict[str, Any]]) -> None:
        def width(key: str) -> int:
            return max([15, *(len(str(r[key] or "-")) for r in rows)])

        self.output.table(
            (
                width("group"),
                width("topic"),
                10,
                15,
                15,
                15,
                width("consumer_id"),
                width("host"),
                None,
            ),
            (
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            ),
            [
                (
                    r["group"],
                    r["topic"],
                    r["partition"],
                    r["current_offset"],
                    r["log_end_offset"],
                    r["lag"],
                    r["consumer_id"],
                    r["host"],
                    r["client_id"],
                )
                for r in rows
            ],
        )

    def _print_members(self, rows: list[dict[str, Any]], verbose: bool) -> None:
        def width(key: str, least: int = 15) -> int:
            return max([least, *(len(str(r[key] or "")) for r in rows)])

        with_instance = any(r["group_instance_id"] for r in rows)
        columns = [
            "group",
            "consumer_id",
            *(["group_instance_id"] if with_instance else []),
            "host",
            "client_id",
        ]
        widths: list[int | None] = [
            width(c, 17 if c == "group_instance_id" else 15) for c in columns
        ]
        header = [
            "GROUP",
            "CONSUMER-ID",
            *(["GROUP-INSTANCE-ID"] if with_instance else []),
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
        ]
        widths.append(15)
        if verbose:
            header.append("ASSIGNMENT")
            widths.append(None)
        table = []
        for r in rows:
            cells = [r[c] or "" for c in columns] + [r["num_partitions"]]
            if verbose:
                cells.append(_assignment_text(r["assignment"]))
            table.append(cells)
        self.output.table(widths, header, table)

    def coordinator(self) -> str:
        from coordinator.stream.settings import load_settings

        job = load_settings(self.args.conf).job
        return f"{job.node_host}:{job.node_port}  ({job.node_id})"

    def run_history(self) -> None:
        from coordinator.admin import groups
        from coordinator.admin.tables import format_ms
        from coordinator.cli.timeline import short_member_id

        if len(self.args.group) != 1:
            raise groups.GroupsError("history takes exactly one --group")
        (group_id,) = self.args.group
        found = groups.group_history(self.reader, self.cut, group_id)
        self.output.document.update(found)
        if not found["rebalances"] and not found["generations"] and not found["partitions"]:
            self.output.error(f"Consumer group '{group_id}' has no history in this warehouse.")
            return

        def ids(members: list[str]) -> str:
            return ",".join(short_member_id(m) for m in members) or "-"

        rebalances = found["rebalances"]
        kept = self.reader.history_start()
        if kept is not None:
            self.output.document["history_starts_at"] = format_ms(kept.timestamp_ms)
            self.output.line(
                f"(history starts at {format_ms(kept.timestamp_ms)}: older rebalances and "
                f"commits are no longer kept, {kept.setting})"
            )
        self.output.line(f"Rebalances of group '{group_id}' ({len(rebalances)}):")
        self.output.table(
            (10, 24, 24, 10, 10, 24, 8, 24, 24, None),
            (
                "GENERATION",
                "START",
                "END",
                "DURATION",
                "OUTCOME",
                "LEADER",
                "MEMBERS",
                "JOINED",
                "LEFT",
                "REASON",
            ),
            [
                (
                    r["generation_id"],
                    format_ms(r["start_ms"]),
                    format_ms(r["end_ms"]) if r["end_ms"] is not None else "(in progress)",
                    "-" if r["duration_ms"] is None else f"{r['duration_ms'] / 1000:.1f}s",
                    r["outcome"] or "-",
                    short_member_id(r["leader"]),
                    f"{r['members_before']}->{'-' if r['members_after'] is None else r['members_after']}",
                    ids(r["joined"]),
                    ids(r["left"]),
                    r["reason"] or "-",
                )
                for r in rebalances
            ],
        )
        self.output.line()
        self.output.line(f"Commits of group '{group_id}' (from the log):")
        self.output.table(
            (20, 10, 8, 10, 24, 24, 12, None),
            (
                "TOPIC",
                "PARTITION",
                "COMMITS",
                "DELETED",
                "FIRST-COMMIT",
                "LAST-COMMIT",
                "FIRST-OFFSET",
                "LAST-OFFSET",
            ),
            [
                (
                    p["topic"],
                    p["partition"],
                    p["commits"],
                    p["tombstones"],
                    format_ms(p["first_commit_ms"]),
                    format_ms(p["last_commit_ms"]),
                    p["first_offset"],
                    p["last_offset"],
                )
                for p in found["partitions"]
            ],
        )
        rate = found["commit_rate"][-10:]
        if rate:
            self.output.line()
            self.output.line("Commit rate (last 10 minutes with commits):")
            self.output.table(
                (24, 8, None),
                ("MINUTE", "COMMITS", "PARTITIONS"),
                [(format_ms(b["bucket_start_ms"]), b["commits"], b["partitions"]) for b in rate],
            )

    # --- changing -----------------------------------------------------------------------------

    def _now_views(self, group_ids: list[str]) -> dict[str, Any]:
        """Live state for the rules (a reset or a delete is judged on the group as it is now)."""
        from coordinator.admin import groups

        now = self.cut if self.cut.now else self.reader.cut()
        return groups.collect(self.reader, now, group_ids)

    def run_reset(self, to_datetime_ms: int | None) -> None:
        from coordinator.admin import groups

        args = self.args
        if args.dry_run and args.execute:
            raise groups.GroupsError("Option --dry-run and --execute exclude each other")
        if args.all_topics and args.topic:
            raise groups.GroupsError("Option --all-topics cannot be used with --topic")
        group_ids = self.group_ids()
        from_file = None
        if args.from_file:
            single = group_ids[0] if len(group_ids) == 1 else None
            from_file = groups.parse_reset_file(Path(args.from_file).read_text(), single)
        spec = groups.ResetSpec(
            topics=tuple(args.topic),
            all_topics=args.all_topics,
            to_offset=args.to_offset,
            shift_by=args.shift_by,
            to_datetime_ms=to_datetime_ms,
            to_earliest=args.to_earliest,
            to_latest=args.to_latest,
            to_current=args.to_current,
            from_file=from_file,
        )
        scenario = spec.scenario()
        if not self.cut.now and scenario not in ("--to-current", "--shift-by"):
            raise groups.GroupsError("--as-of goes with --to-current or --shift-by only")
        views = self._now_views(group_ids)
        bases = groups.collect(self.reader, self.cut, group_ids) if not self.cut.now else views
        plans = []
        for group_id in group_ids:
            plan = groups.plan_reset(views[group_id], spec, self.topic_offsets, bases[group_id])
            for warning in plan.warnings:
                print(f"\nWarn: {warning}", file=self.output.err)
            if plan.refused:
                self.output.error(plan.refused)
            plans.append(plan)
        planned = [p for p in plans if not p.refused]
        executed = args.execute
        if executed and planned:
            answers = self._send([groups.reset_request(p) for p in planned if p.offsets])
            for answer in answers:
                self._report_partition_errors(answer, "Failed to reset offsets of group")
        self.output.document["reset"] = [
            {
                "group": p.group_id,
                "state": p.state,
                "executed": executed and not p.refused,
                "refused": p.refused,
                "offsets": [
                    {"topic": t, "partition": q, "offset": o}
                    for (t, q), o in sorted(p.offsets.items())
                ],
            }
            for p in plans
        ]
        if args.export:
            if not self.output.as_json:
                print(groups.export_csv(planned, len(group_ids) == 1), file=self.output.out)
            return
        rows = [(p.group_id, t, q, o) for p in planned for (t, q), o in sorted(p.offsets.items())]
        if rows:
            self.output.table(
                (30, 30, 10, None), ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows
            )

    def run_delete(self) -> None:
        group_ids = self.group_ids()
        answers = self._send([{"api": "delete_groups", "group_id": g} for g in group_ids])
        failed = {a["group_id"]: a for a in answers if a["error_code"] != 0}
        deleted = [a["group_id"] for a in answers if a["error_code"] == 0]
        self.output.document["deleted"] = deleted
        self.output.document["failed"] = {g: _error_text(a) for g, a in failed.items()}
        if not failed:
            self.output.line(
                f"Deletion of requested consumer groups ('{', '.join(deleted)}') was successful."
            )
            return
        self.output.error("Deletion of some consumer groups failed:")
        for group_id, answer in failed.items():
            self.output.line(
                f"* Group '{group_id}' could not be deleted due to: {_error_text(answer)}"
            )
        if deleted:
            self.output.line(
                f"\nThese consumer groups were deleted successfully: '{', '.join(deleted)}'"
            )

    def run_delete_offsets(self) -> None:
        from coordinator.admin import groups

        if len(self.args.group) != 1 or self.args.all_groups:
            raise groups.GroupsError("--delete-offsets takes exactly one --group")
        if not self.args.topic:
            raise groups.GroupsError("--delete-offsets needs --topic")
        (group_id,) = self.args.group
        view = self._now_views([group_id])[group_id]
        partitions = groups.delete_offsets_scope(view, self.args.topic, self.topic_offsets)
        (answer,) = self._send([groups.delete_offsets_request(group_id, partitions)])
        error = answer.get("error")
        topics = ", ".join(self.args.topic)
        self.output.document["delete_offsets"] = answer
        if answer["error_code"] == 0:
            partition_errors = [p for p in answer.get("partitions") or [] if p["error_code"]]
            if partition_errors:
                self.output.error(
                    "Encounter some partition level error, see the follow-up details:"
                )
            else:
                self.output.line(
                    f"Request succeed for deleting offsets with topic {topics} group {group_id}"
                )
        elif error == "GROUP_ID_NOT_FOUND":
            self.output.error(f"'{group_id}' does not exist.")
        elif error == "INVALID_GROUP_ID":
            self.output.error(f"'{group_id}' is not valid.")
        elif error == "NON_EMPTY_GROUP":
            self.output.error(
                f"Deleting offsets of a consumer group '{group_id}' is forbidden if the group "
                "is not empty."
            )
        else:
            self.output.error(f"Encounter some unknown error: {error}")
        self.output.table(
            (30, 15, None),
            ("TOPIC", "PARTITION", "STATUS"),
            [
                (
                    p["topic"],
                    p["partition"],
                    "Successful" if not p["error_code"] else f"Error: {_error_text(p)}",
                )
                for p in sorted(
                    answer.get("partitions") or [], key=lambda p: (p["topic"], p["partition"])
                )
            ],
        )

    def _send(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Through the job's inbox, waiting for every answer."""
        from coordinator.admin.groups import GroupsError
        from coordinator.stream.client import ResponseTimeoutError, StreamClient

        if not requests:
            return []
        client = StreamClient(self.reader.paths)
        stamp = time.time_ns()
        for i, request in enumerate(requests):
            request.setdefault("request_id", f"coordinator-groups/{stamp}/{i}")
        try:
            return client.requests(requests, timeout_s=self.args.timeout)
        except ResponseTimeoutError:
            raise GroupsError(
                f"no answer from the coordinator within {self.args.timeout:g} s: is the job "
                f"running on {self.reader.paths.root}? (coordinator status --warehouse ...) "
                "The requests stay in its inbox and will be applied when it runs."
            ) from None

    def _report_partition_errors(self, answer: dict[str, Any], what: str) -> None:
        if answer["error_code"]:
            self.output.error(f"{what} '{answer['group_id']}': {_error_text(answer)}")
            return
        for p in answer.get("partitions") or []:
            if p["error_code"]:
                self.output.error(
                    f"{what} '{answer['group_id']}' for {p['topic']}-{p['partition']}: "
                    f"{_error_text(p)}"
                )


def _error_text(answer: dict[str, Any]) -> str:
    message = answer.get("error_message")
    return f"{answer.get('error')}" + (f": {message}" if message else "")


def _assignment_text(assignment: list[tuple[str, int]]) -> str:
    """Kafka 3.x's ``topic(0,1), other(2)``, or ``-``."""
    if not assignment:
        return "-"
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    return ", ".join(
        sorted(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in by_topic.items())
    )
