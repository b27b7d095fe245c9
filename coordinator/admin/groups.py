"""``kafka-consumer-groups.sh``'s work over our warehouse: what each action collects and sends.

Reading (``--list``, ``--describe``, ``history``) is done from the tables at a consistent cut
(:mod:`coordinator.admin.tables`), like Kafka's tool does through DescribeGroups, ListGroups
and OffsetFetch, but without a round trip through the job: answers come in about a second,
work while the job is down, and can be asked of the past (``--as-of``).

Changing (``--reset-offsets --execute``, ``--delete``, ``--delete-offsets``) is never done to
the tables: the tool sends the coordinator the requests Kafka's admin client sends
(OffsetCommit as a simple group with generation -1, DeleteGroups, OffsetDelete) through the
job's inbox and reports its answers, so the log stays the one source of truth and the
coordinator applies Kafka's rules (no reset or delete of a live group).

The rules the tool applies itself are the ones Kafka's tool applies before asking: offsets are
reset only when the group is Empty or does not exist (Dead), and new offsets are clamped to
the log's start and end when those are known.

This module collects and plans (plain data); :mod:`coordinator.cli.groups` prints.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.admin import history
from coordinator.admin.tables import Cut, WarehouseReader
from coordinator.admin.topic_offsets import LogOffsets, TopicOffsetsError
from coordinator.log.modern_records import TYPE_OF as CONSUMER_GROUP_RECORD_TYPES
from coordinator.log.modern_records import apply as apply_consumer_record
from coordinator.log.records import record_from_bytes
from coordinator.modern.model import ConsumerGroup

MISSING = "-"
#: ``ConsumerGroupState`` values a ``--state`` filter accepts (classic groups).
STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
#: What Kafka's ``listConsumerGroups`` keeps: consumer groups and groups with only offsets.
CONSUMER_PROTOCOL_TYPES = ("consumer", "", None)


class GroupsError(ValueError):
    """A request the tool refuses before asking the coordinator (Kafka prints usage)."""


def parse_states(text: str) -> set[str]:
    """Kafka's ``consumerGroupStatesFromString``: comma separated, case-insensitive."""
    by_lower = {s.lower(): s for s in STATES}
    states = set()
    for item in text.rstrip(",").split(","):  # Java's split drops trailing empty strings
        state = by_lower.get(item.strip().lower())
        if state is None:
            raise GroupsError(f"Invalid state list '{text}'. Valid states are: {', '.join(STATES)}")
        states.add(state)
    return states


TopicPartition = tuple[str, int]


def parse_topic_arg(arg: str) -> tuple[str, list[int] | None]:
    """``topic`` or ``topic:0,1,2`` (Kafka's ``parseTopicsWithPartitions``)."""
    if ":" not in arg:
        return arg, None
    parts = arg.split(":")
    if len(parts) != 2 or not parts[0]:
        raise GroupsError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    try:
        return parts[0], [int(p) for p in parts[1].split(",")]
    except ValueError:
        raise GroupsError(f"Invalid partition specified in topic arg '{arg}'") from None


_DURATION = re.compile(
    r"^(?P<sign>[-+]?)P(?:(?P<d>[-+]?\d+)D)?"
    r"(?P<t>T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?"
    r"(?:(?P<s>[-+]?\d+)(?:[.,](?P<f>\d{0,9}))?S)?)?$",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """Java's ``Duration.parse`` (``PnDTnHnMn.nS``), as ``--by-duration`` takes it."""
    match = _DURATION.match(text.strip())
    if (
        not match
        or len(match.group("t") or "") == 1  # a T with no time fields, as Java refuses
        or not any(match.group(k) for k in ("d", "h", "m", "s"))
    ):
        raise GroupsError(f"Text cannot be parsed to a Duration: '{text}' (e.g. PT15M, P1DT2H)")
    days, hours, minutes = (int(match.group(k) or 0) for k in ("d", "h", "m"))
    seconds = float(f"{match.group('s') or 0}.{match.group('f') or 0}")
    total = ((days * 24 + hours) * 60 + minutes) * 60_000 + round(seconds * 1000)
    return -total if match.group("sign") == "-" else total


# --- what describe collects ---------------------------------------------------------------------


@dataclass(slots=True)
class GroupView:
    """One group at the cut: its summary row, committed offsets and current assignment."""

    group_id: str
    state: str  # "Dead" when the group does not exist
    summary: dict[str, Any] | None
    offsets: dict[TopicPartition, dict[str, Any]] = field(default_factory=dict)
    #: member id -> assigned partitions; only for a Stable group whose assignment the log holds
    #: (Kafka's DescribeGroups gives assignments only in Stable).
    assignment: dict[str, list[TopicPartition]] = field(default_factory=dict)

    @property
    def members(self) -> list[dict[str, Any]]:
        return list((self.summary or {}).get("members") or [])


def _assignments(spans: list[dict[str, Any]], summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The newest GroupMetadata span's assignment, when it is the summary's generation."""
    if not spans or summary is None or summary.get("state") != "Stable":
        return {}
    span = spans[-1]
    if span["generation_id"] != summary.get("generation_id"):
        return {}
    return {
        m["member_id"]: [(tp["topic"], tp["partition"]) for tp in m["assigned_partitions"]]
        for m in span["members"]
    }


def collect(reader: WarehouseReader, cut: Cut, group_ids: Sequence[str]) -> dict[str, GroupView]:
    """Every asked group's view, from one read of the state and one of the log, reduced to
    what a load of it keeps (:meth:`WarehouseReader.latest_log`) before any Python row is made:
    memory follows the groups' keys, not the log's length."""
    wanted = list(dict.fromkeys(group_ids))
    summaries = {row["group_id"]: row for row in reader.group_states(cut, wanted)}
    log_rows = reader.latest_log(cut, wanted).to_pylist()
    offsets: dict[str, dict[TopicPartition, dict[str, Any]]] = {}
    for row in history.committed_offsets(log_rows):
        offsets.setdefault(row["group_id"], {})[(row["topic"], row["partition"])] = row
    spans: dict[str, list[dict[str, Any]]] = {}
    for span in history.generations(log_rows):
        spans.setdefault(span["group_id"], []).append(span)
    consumer_rows: dict[str, list[dict[str, Any]]] = {}
    for row in log_rows:
        if row["record_type"] in CONSUMER_GROUP_RECORD_TYPES:
            consumer_rows.setdefault(row["group_id"], []).append(row)
    views = {}
    for group_id in wanted:
        summary = summaries.get(group_id)
        if summary is not None and summary.get("group_type") == "consumer":
            assignment = _consumer_assignments(consumer_rows.get(group_id, []))
        else:
            assignment = _assignments(spans.get(group_id, []), summary)
        views[group_id] = GroupView(
            group_id,
            "Dead" if summary is None else summary["state"],
            summary,
            offsets.get(group_id, {}),
            assignment,
        )
    return views


def _consumer_assignments(rows: list[dict[str, Any]]) -> dict[str, list[TopicPartition]]:
    """A consumer group's (KIP-848) current assignment per member, from its records replayed
    (the last of each key, in log order), topic ids named by its subscription metadata.
    Kafka's ConsumerGroupDescribe gives it in every state, so it is shown in every state."""
    group: Any = None
    for row in rows:
        record = record_from_bytes(bytes(row["key"]), _bytes_or_none(row["value"]))
        if record is not None:
            group = apply_consumer_record(group, record)
    if not isinstance(group, ConsumerGroup):
        return {}
    names = {t.topic_id: t.name for t in group.subscription_metadata.values()}
    return {
        member_id: sorted(
            (names.get(topic_id, topic_id), p)
            for topic_id, partitions in member.assigned_partitions.items()
            for p in partitions
        )
        for member_id, member in group.members.items()
    }


def _bytes_or_none(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def list_groups(
    reader: WarehouseReader, cut: Cut, states: set[str] | None = None
) -> list[dict[str, Any]]:
    """Consumer groups (and groups with only offsets), optionally in some states."""
    return [
        {"group_id": row["group_id"], "state": row["state"], "protocol_type": row["protocol_type"]}
        for row in reader.group_states(cut)
        if row["protocol_type"] in CONSUMER_PROTOCOL_TYPES
        and (not states or row["state"] in states)
    ]


def offset_rows(view: GroupView, topic_offsets: LogOffsets | None) -> list[dict[str, Any]]:
    """Kafka's ``--describe --offsets`` rows: the members' partitions (members with the most
    partitions first, each member's by partition), then committed partitions nobody holds."""
    rows = []
    members = {m["member_id"]: m for m in view.members}
    owned = set()
    for member_id, partitions in sorted(view.assignment.items(), key=lambda kv: -len(kv[1])):
        member = members.get(member_id, {})
        for tp in sorted(partitions, key=lambda tp: tp[1]):
            owned.add(tp)
            rows.append(_offset_row(view, tp, topic_offsets, member_id, member))
    for tp in sorted(view.offsets):
        if tp not in owned:
            rows.append(_offset_row(view, tp, topic_offsets, None, {}))
    return rows


def _offset_row(
    view: GroupView,
    tp: TopicPartition,
    topic_offsets: LogOffsets | None,
    member_id: str | None,
    member: Mapping[str, Any],
) -> dict[str, Any]:
    committed = view.offsets.get(tp)
    offset = None if committed is None else committed["committed_offset"]
    end = topic_offsets.latest(tp) if topic_offsets is not None and tp in topic_offsets else None
    return {
        "group": view.group_id,
        "topic": tp[0],
        "partition": tp[1],
        "current_offset": offset,
        "log_end_offset": end,
        "lag": None if offset is None or offset == -1 or end is None else end - offset,
        "consumer_id": member_id,
        "host": member.get("client_host") if member_id else None,
        "client_id": member.get("client_id") if member_id else None,
    }


def member_rows(view: GroupView) -> list[dict[str, Any]]:
    """Kafka's ``--describe --members`` rows (assignment empty unless the group is Stable)."""
    return [
        {
            "group": view.group_id,
            "consumer_id": m["member_id"],
            "group_instance_id": m.get("group_instance_id"),
            "host": m.get("client_host"),
            "client_id": m.get("client_id"),
            "num_partitions": len(view.assignment.get(m["member_id"], [])),
            "assignment": sorted(view.assignment.get(m["member_id"], [])),
        }
        for m in view.members
    ]


def state_row(view: GroupView, coordinator: str) -> dict[str, Any]:
    """Kafka's ``--describe --state`` row. The assignment strategy is shown only when Stable,
    as Kafka's group summary leaves the protocol empty otherwise."""
    summary = view.summary or {}
    return {
        "group": view.group_id,
        "coordinator": coordinator,
        "assignment_strategy": summary.get("protocol_name") if view.state == "Stable" else "",
        "state": view.state,
        "num_members": len(view.members),
    }


# --- reset-offsets -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """One ``--reset-offsets`` scenario (exactly one of these is set) and its scope."""

    topics: tuple[str, ...] = ()
    all_topics: bool = False
    to_offset: int | None = None
    shift_by: int | None = None
    to_datetime_ms: int | None = None
    to_earliest: bool = False
    to_latest: bool = False
    to_current: bool = False
    from_file: dict[str, dict[TopicPartition, int]] | None = None

    def scenario(self) -> str:
        chosen = [
            name
            for name, on in (
                ("--to-offset", self.to_offset is not None),
                ("--shift-by", self.shift_by is not None),
                ("--to-datetime/--by-duration", self.to_datetime_ms is not None),
                ("--to-earliest", self.to_earliest),
                ("--to-latest", self.to_latest),
                ("--to-current", self.to_current),
                ("--from-file", self.from_file is not None),
            )
            if on
        ]
        if len(chosen) != 1:
            raise GroupsError(
                "Option '--reset-offsets' requires exactly one of the following scenarios: "
                "--to-offset, --shift-by, --to-datetime, --by-duration, --to-earliest, "
                "--to-latest, --to-current, --from-file"
                + (f" (given: {', '.join(chosen)})" if chosen else "")
            )
        return chosen[0]


@dataclass(slots=True)
class ResetPlan:
    group_id: str
    state: str
    offsets: dict[TopicPartition, int]
    warnings: list[str] = field(default_factory=list)
    #: Why the group was not planned (it is live), Kafka's message.
    refused: str | None = None


def parse_reset_file(text: str, single_group: str | None) -> dict[str, dict[TopicPartition, int]]:
    """Kafka's reset plan CSV: ``topic,partition,offset`` for one group, else
    ``group,topic,partition,offset``."""
    plan: dict[str, dict[TopicPartition, int]] = {}
    for number, fields in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not fields or not "".join(fields).strip():
            continue
        try:
            if len(fields) == 3 and single_group is not None:
                group, (topic, partition, offset) = single_group, fields
            elif len(fields) == 4:
                group, topic, partition, offset = fields
            else:
                raise ValueError(f"{len(fields)} fields")
            plan.setdefault(group, {})[(topic, int(partition))] = int(offset)
        except ValueError as problem:
            raise GroupsError(f"reset file line {number}: {problem}: {fields}") from None
    return plan


def export_csv(plans: Sequence[ResetPlan], single_group: bool) -> str:
    """Kafka's ``--export`` CSV (the format ``--from-file`` reads)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for plan in plans:
        for (topic, partition), offset in sorted(plan.offsets.items()):
            row = [topic, partition, offset]
            writer.writerow(row if single_group else [plan.group_id, *row])
    return out.getvalue()


def plan_reset(
    view: GroupView,
    spec: ResetSpec,
    topic_offsets: LogOffsets | None,
    base: GroupView | None = None,
) -> ResetPlan:
    """The new offsets for one group (Kafka's ``prepareOffsetsToReset``), or a refusal when
    the group is live. ``base`` is the view whose committed offsets ``--to-current`` and
    ``--shift-by`` start from (the group as of ``--as-of``; the view itself by default)."""
    scenario = spec.scenario()
    if view.state not in ("Empty", "Dead"):
        return ResetPlan(
            view.group_id,
            view.state,
            {},
            refused=(
                f"Assignments can only be reset if the group '{view.group_id}' is inactive, "
                f"but the current state is {view.state}."
            ),
        )
    base = base or view
    plan = ResetPlan(view.group_id, view.state, {})
    if scenario == "--from-file":
        assert spec.from_file is not None
        requested = spec.from_file.get(view.group_id)
        if requested is None:
            plan.warnings.append(f"No reset plan for group {view.group_id} found")
            return plan
        plan.offsets = _clamp(requested, topic_offsets, plan.warnings)
        return plan
    partitions = _scope(spec, base, topic_offsets)
    committed = {tp: row["committed_offset"] for tp, row in base.offsets.items()}

    def from_log(
        what: str, get: Callable[[LogOffsets, TopicPartition], int], among: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        if topic_offsets is None:
            raise GroupsError(
                f"{what} needs the topics' log offsets: give --upstream HOST:PORT (the cluster "
                "that holds them) or --topic-offsets FILE"
            )
        try:
            return {tp: get(topic_offsets, tp) for tp in among}
        except TopicOffsetsError as problem:
            raise GroupsError(str(problem)) from None

    if spec.to_offset is not None:
        requested = dict.fromkeys(partitions, spec.to_offset)
        plan.offsets = _clamp(requested, topic_offsets, plan.warnings)
    elif spec.shift_by is not None:
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            tp = missing[0]
            raise GroupsError(
                f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no current "
                "committed offset"
            )
        shifted = {tp: committed[tp] + spec.shift_by for tp in partitions}
        plan.offsets = _clamp(shifted, topic_offsets, plan.warnings)
    elif spec.to_datetime_ms is not None:
        moment = spec.to_datetime_ms
        plan.offsets = from_log(
            "--to-datetime/--by-duration",
            lambda source, tp: source.offset_for_time(tp, moment),
            partitions,
        )
    elif spec.to_earliest:
        plan.offsets = from_log("--to-earliest", _earliest, partitions)
    elif spec.to_latest:
        plan.offsets = from_log("--to-latest", _latest, partitions)
    else:  # --to-current: the committed offset, or the log end where there is none
        without = [tp for tp in partitions if tp not in committed]
        ends = (
            from_log("--to-current without a committed offset", _latest, without) if without else {}
        )
        plan.offsets = {tp: committed[tp] if tp in committed else ends[tp] for tp in partitions}
    return plan


def _earliest(source: LogOffsets, tp: TopicPartition) -> int:
    return source.earliest(tp)


def _latest(source: LogOffsets, tp: TopicPartition) -> int:
    return source.latest(tp)


def _scope(
    spec: ResetSpec, view: GroupView, topic_offsets: LogOffsets | None
) -> list[TopicPartition]:
    """The partitions to reset: ``--all-topics`` (every partition with a committed offset) or
    ``--topic`` (with its partitions, or all the topic's known partitions)."""
    if spec.all_topics:
        return sorted(view.offsets)
    if not spec.topics:
        raise GroupsError("One of the reset scopes should be defined: --all-topics, --topic.")
    chosen: list[TopicPartition] = []
    for arg in spec.topics:
        topic, partitions = parse_topic_arg(arg)
        if partitions is None:
            known = set(topic_offsets.partitions(topic)) if topic_offsets is not None else set()
            known |= {p for t, p in view.offsets if t == topic}
            if not known:
                where = (
                    f"to {topic_offsets.name}"
                    if topic_offsets is not None
                    else "(no --upstream or --topic-offsets given)"
                )
                raise GroupsError(
                    f"The partitions of topic '{topic}' are not known {where}: name them "
                    f"(--topic {topic}:0,1,...)"
                )
            partitions = sorted(known)
        chosen.extend((topic, p) for p in partitions)
    return list(dict.fromkeys(chosen))


def _clamp(
    requested: Mapping[TopicPartition, int],
    topic_offsets: LogOffsets | None,
    warnings: list[str],
) -> dict[TopicPartition, int]:
    """Kafka's ``checkOffsetsRange``, where the log's range is known."""
    out = {}
    for tp, offset in sorted(requested.items()):
        if topic_offsets is not None and tp in topic_offsets:
            end, start = topic_offsets.latest(tp), topic_offsets.earliest(tp)
            if offset > end:
                warnings.append(
                    f"New offset ({offset}) is higher than latest offset for topic partition "
                    f"{tp[0]}-{tp[1]}. Value will be set to {end}"
                )
                offset = end
            elif offset < start:
                warnings.append(
                    f"New offset ({offset}) is lower than earliest offset for topic partition "
                    f"{tp[0]}-{tp[1]}. Value will be set to {start}"
                )
                offset = start
        elif offset < 0:
            raise GroupsError(f"New offset ({offset}) for {tp[0]}-{tp[1]} is negative")
        out[tp] = offset
    return out


# --- the requests that change things -----------------------------------------------------------


def reset_request(plan: ResetPlan) -> dict[str, Any]:
    """Kafka's ``alterConsumerGroupOffsets``: OffsetCommit as a simple group (generation -1,
    no member), which the coordinator accepts only while the group has no members."""
    return {
        "api": "offset_commit",
        "group_id": plan.group_id,
        "member_id": "",
        "group_instance_id": None,
        "generation_id": -1,
        "retention_time_ms": -1,
        "offsets": [
            {"topic": t, "partition": p, "offset": o, "leader_epoch": -1, "metadata": ""}
            for (t, p), o in sorted(plan.offsets.items())
        ],
    }


def delete_offsets_request(group_id: str, partitions: Iterable[TopicPartition]) -> dict[str, Any]:
    return {
        "api": "offset_delete",
        "group_id": group_id,
        "partitions": [{"topic": t, "partition": p} for t, p in sorted(partitions)],
    }


def delete_offsets_scope(
    view: GroupView, topic_args: Sequence[str], topic_offsets: LogOffsets | None
) -> list[TopicPartition]:
    """``--delete-offsets --topic``: named partitions, or every known partition of a topic."""
    return _scope(ResetSpec(topics=tuple(topic_args)), view, topic_offsets)


# --- history ---------------------------------------------------------------------------------------


def group_history(reader: WarehouseReader, cut: Cut, group_id: str) -> dict[str, Any]:
    """Rebalances (from ``group_history``), generations, and commit activity (from the log)."""
    log_rows = reader.log(cut, [group_id]).to_pylist()
    return {
        "group": group_id,
        "rebalances": history.rebalances(reader.group_history(cut, [group_id]).to_pylist()),
        "generations": history.generations(log_rows),
        "partitions": history.partition_commits(log_rows),
        "commit_rate": history.commit_rate(log_rows, 60_000),
    }
