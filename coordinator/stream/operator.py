"""The stateful operator: the engine's per-group step as ``applyInPandasWithState``'s function.

Spark hands the function one key's new inbox lines and its stored state; the function runs
:func:`coordinator.step.step` and returns the step's responses, log records and group summary as
rows of one output schema (``kind`` tells them apart; the sink splits them on the driver).

Two ways to key the operator, fixed per checkpoint:

- ``group`` (the default, the product's design): one Spark key per group id, the state one
  versioned snapshot blob (:mod:`coordinator.group.snapshot`).
- ``shard``: one Spark key per ``__consumer_offsets`` partition (Kafka's own unit of coordinator
  sharding), its state the blobs of all that partition's groups. The very same per-group step
  runs for each group; only PySpark's per-key overhead (about 2 ms per key per batch) is shared.

Determinism, which exactly-once rests on: the output is a function of the stored state and the
batch's input only. The clock is the batch's timestamp (``getCurrentProcessingTimeMs()``, which
Spark keeps in its offsets log and restores when it re-runs a batch), member ids come from
:class:`coordinator.ids.KeyedIds` (a keyed hash of the seed, the group id and the request id),
and a key's lines are applied in (file name, position in file) order, never in the order Spark
hands rows over.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from coordinator import jsonio
from coordinator.config import CoordinatorConfig
from coordinator.engine import CoordinatorNode, find_coordinator_response
from coordinator.group.model import ClassicGroup
from coordinator.group.snapshot import decode_group, encode_group
from coordinator.ids import KeyedIds
from coordinator.log.partitioning import partition_for
from coordinator.requests import BadRequest, bad_request_response, parse
from coordinator.step import step

# --- output rows ------------------------------------------------------------------------------

#: What an output row is: a response, a log record (Kafka's key and value bytes), a group's new
#: summary, a line that could not be read as a request, a ListGroups request (answered by the
#: sink from ``group_state``), or a tick (a key stepped only because its timer fired).
RESPONSE = "response"
RECORD = "record"
GROUP = "group"
REJECTED = "rejected"
LIST_GROUPS = "list_groups"
TICK = "tick"

OUTPUT_COLUMNS = (
    "kind",
    "group_id",
    "seq",
    "offsets_partition",
    "key",
    "value",
    "timestamp_ms",
    "body",
)
OUTPUT_DDL = (
    "kind string, group_id string, seq int, offsets_partition int, key binary, value binary, "
    "timestamp_ms long, body string"
)
STATE_DDL = "blob binary"

#: Key modes (``job.state.key``).
GROUP_KEY = "group"
SHARD_KEY = "shard"
KEY_MODES = (GROUP_KEY, SHARD_KEY)


@dataclass(frozen=True, slots=True)
class InboxLine:
    """One line of a request file, where it came from (the order key) and its group id key."""

    value: str
    source_file: str
    position: int
    group_id: str = ""

    @property
    def order(self) -> tuple[str, int]:
        return (self.source_file, self.position)


@dataclass(frozen=True)
class OperatorSettings:
    """What the function closes over; pickled to the executors with it."""

    config: CoordinatorConfig
    seed: bytes
    node: CoordinatorNode = field(default_factory=CoordinatorNode)

    def ids(self) -> KeyedIds:
        return KeyedIds(self.seed)


@dataclass(slots=True)
class GroupOutcome:
    blob: bytes | None
    deadline_ms: int | None
    rows: list[tuple[Any, ...]]
    internal_errors: list[str]


# --- one group --------------------------------------------------------------------------------


def group_summary(group_id: str, group: ClassicGroup | None, partition: int) -> dict[str, Any]:
    """The group's row in ``group_state`` and ``group_history`` (without the batch columns);
    Dead (with only the group id and its partition) when it is gone."""
    if group is None:
        return {"group_id": group_id, "offsets_partition": partition, "state": "Dead"}
    return {
        "group_id": group_id,
        "offsets_partition": partition,
        "state": group.state.value,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "generation_id": group.generation_id,
        "leader": group.leader_id,
        "num_members": len(group.members),
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
            }
            for m in group.members.values()
        ],
        "num_committed_offsets": len(group.offsets),
        "state_timestamp_ms": group.current_state_timestamp_ms,
        # Why the latest rebalance began (Kafka's prepareRebalance reason); kept once Stable.
        "rebalance_reason": group.rebalance_reason,
    }


def run_group(
    settings: OperatorSettings,
    group_id: str,
    blob: bytes | None,
    lines: Iterable[InboxLine],
    now_ms: int,
    *,
    timed_out: bool = False,
) -> GroupOutcome:
    """Step one group id over its lines (in their order key's order) at ``now_ms``."""
    partition = partition_for(group_id, settings.config.offsets_topic_num_partitions)
    group = None if blob is None else decode_group(blob)
    before = group_summary(group_id, group, partition) if group is not None else None
    rows: list[tuple[Any, ...]] = []

    def emit(
        kind: str, body: str | None = None, key: bytes | None = None, value: Any = None
    ) -> None:
        rows.append((kind, group_id, len(rows), partition, key, value, now_ms, body))

    if timed_out:
        emit(TICK)
    requests: list[dict[str, Any]] = []
    for line in sorted(lines, key=lambda line: line.order):
        raw = _read_line(line, emit)
        if raw is None:
            continue
        api = raw.get("api")
        if api == "list_groups" or api == "find_coordinator":
            try:
                request = parse(raw)
            except BadRequest as problem:
                emit(RESPONSE, jsonio.dumps(bad_request_response(raw, problem)))
                continue
            if api == "list_groups":
                emit(LIST_GROUPS, line.value)
            else:
                answer = find_coordinator_response(request, partition, settings.node)
                emit(RESPONSE, jsonio.dumps(answer))
            continue
        requests.append(raw)

    result = step(group, group_id, requests, now_ms, settings.config, settings.ids())
    for answer in result.responses:
        emit(RESPONSE, jsonio.dumps(answer))
    for record in result.records:
        emit(RECORD, key=record["key"], value=record["value"])
    after = group_summary(group_id, result.group, partition)
    if after != before and not (before is None and result.group is None):
        emit(GROUP, jsonio.dumps(after))
    new_blob = None if result.group is None else encode_group(result.group)
    return GroupOutcome(new_blob, result.next_deadline_ms, rows, result.internal_errors)


def _read_line(line: InboxLine, emit: Any) -> dict[str, Any] | None:
    """The line as a request dict, or None after answering or rejecting it.

    A line is answered (INVALID_REQUEST, by the engine's parser) when its request id can be
    read; a line with no readable request id cannot be answered and goes to
    ``rejected_requests`` with the reason."""
    try:
        raw = json.loads(line.value)
    except ValueError as exc:
        emit(REJECTED, _rejection(line, f"not a JSON object: {exc}"))
        return None
    if not isinstance(raw, dict):
        emit(REJECTED, _rejection(line, f"not a JSON object but {type(raw).__name__}"))
        return None
    request_id = raw.get("request_id")
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        emit(REJECTED, _rejection(line, "no request_id (a string or an integer) to answer to"))
        return None
    return raw


def _rejection(line: InboxLine, reason: str) -> str:
    return jsonio.dumps({"raw": line.value, "source_file": line.source_file, "reason": reason})


# --- shard state: the blobs of one offsets partition's groups ----------------------------------

SHARD_FORMAT = 1
_HEADER = struct.Struct(">BI")
_ENTRY = struct.Struct(">HqI")


def encode_shard(groups: dict[str, tuple[int | None, bytes]]) -> bytes:
    """``{group id: (next deadline or None, snapshot blob)}`` as one blob (sorted, versioned)."""
    parts = [_HEADER.pack(SHARD_FORMAT, len(groups))]
    for group_id in sorted(groups):
        deadline, blob = groups[group_id]
        name = group_id.encode("utf-8")
        parts.append(_ENTRY.pack(len(name), -1 if deadline is None else deadline, len(blob)))
        parts.append(name)
        parts.append(blob)
    return b"".join(parts)


def decode_shard(data: bytes) -> dict[str, tuple[int | None, bytes]]:
    version, count = _HEADER.unpack_from(data, 0)
    if version != SHARD_FORMAT:
        raise ValueError(f"shard state format {version} is not readable by this release")
    offset = _HEADER.size
    groups: dict[str, tuple[int | None, bytes]] = {}
    for _ in range(count):
        name_len, deadline, blob_len = _ENTRY.unpack_from(data, offset)
        offset += _ENTRY.size
        group_id = data[offset : offset + name_len].decode("utf-8")
        offset += name_len
        groups[group_id] = (None if deadline < 0 else deadline, data[offset : offset + blob_len])
        offset += blob_len
    return groups


@dataclass(slots=True)
class ShardOutcome:
    state: dict[str, tuple[int | None, bytes]]
    deadline_ms: int | None
    rows: list[tuple[Any, ...]]
    internal_errors: list[str]


def run_shard(
    settings: OperatorSettings,
    state: dict[str, tuple[int | None, bytes]],
    lines: Iterable[InboxLine],
    now_ms: int,
) -> ShardOutcome:
    """Step every group of one shard that has lines or a due timer, in group id order."""
    by_group: dict[str, list[InboxLine]] = {}
    for line in lines:
        by_group.setdefault(line.group_id, []).append(line)
    due = {g for g, (deadline, _) in state.items() if deadline is not None and deadline <= now_ms}
    rows: list[tuple[Any, ...]] = []
    errors: list[str] = []
    for group_id in sorted(due | by_group.keys()):
        stored = state.get(group_id)
        outcome = run_group(
            settings,
            group_id,
            None if stored is None else stored[1],
            by_group.get(group_id, ()),
            now_ms,
            timed_out=group_id in due,
        )
        rows.extend(outcome.rows)
        errors.extend(outcome.internal_errors)
        if outcome.blob is None:
            state.pop(group_id, None)
        else:
            state[group_id] = (outcome.deadline_ms, outcome.blob)
    deadlines = [d for d, _ in state.values() if d is not None]
    return ShardOutcome(state, min(deadlines) if deadlines else None, rows, errors)


# --- the functions Spark calls ----------------------------------------------------------------


def _lines(frames: Iterator[Any], with_group: bool) -> list[InboxLine]:
    lines: list[InboxLine] = []
    for frame in frames:
        columns = [frame["value"].tolist(), frame["source_file"].tolist(), frame["position"]]
        groups = frame["group_id"].tolist() if with_group else None
        for i, (value, source, position) in enumerate(zip(*columns, strict=True)):
            group_id = groups[i] if groups is not None else ""
            lines.append(InboxLine(value, source, int(position), group_id))
    return lines


def _frame(rows: list[tuple[Any, ...]]) -> Any:
    import pandas as pd

    return pd.DataFrame.from_records(rows, columns=OUTPUT_COLUMNS)


def _report(errors: list[str]) -> None:
    if errors:
        import logging

        logging.getLogger("coordinator.operator").error("engine internal errors: %s", errors)


def _set_deadline(state: Any, deadline_ms: int | None, now_ms: int) -> None:
    if deadline_ms is not None:
        # Spark fires the timeout in the first batch whose timestamp is after now + duration.
        state.setTimeoutDuration(max(1, deadline_ms - now_ms))


def warm_up(frame: Any) -> Any:
    """Run once per Python worker before the query starts (see ``job.warm_up``)."""
    return frame


def group_function(settings: OperatorSettings) -> Any:
    """The ``applyInPandasWithState`` function keyed by group id."""

    def apply(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        group_id = key[0]
        now = state.getCurrentProcessingTimeMs()
        blob = bytes(state.get[0]) if state.exists else None
        outcome = run_group(
            settings, group_id, blob, _lines(frames, False), now, timed_out=state.hasTimedOut
        )
        _report(outcome.internal_errors)
        if outcome.blob is None:
            if state.exists:
                state.remove()
        else:
            state.update((outcome.blob,))
            _set_deadline(state, outcome.deadline_ms, now)
        if outcome.rows:
            yield _frame(outcome.rows)

    return apply


def shard_function(settings: OperatorSettings) -> Any:
    """The ``applyInPandasWithState`` function keyed by offsets partition."""

    def apply(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        now = state.getCurrentProcessingTimeMs()
        stored = decode_shard(bytes(state.get[0])) if state.exists else {}
        outcome = run_shard(settings, stored, _lines(frames, True), now)
        _report(outcome.internal_errors)
        if not outcome.state:
            if state.exists:
                state.remove()
        else:
            state.update((encode_shard(outcome.state),))
            _set_deadline(state, outcome.deadline_ms, now)
        if outcome.rows:
            yield _frame(outcome.rows)

    return apply
