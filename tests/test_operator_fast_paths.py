"""The state function's fast paths change nothing: a Python worker that steps the group object
it encoded last batch (and writes again only the end of its snapshot when only its timers
changed), and the plain-heartbeat reader and server, give exactly the outputs (responses,
records, summaries, rejections), state blobs and deadlines of decoding every blob, encoding it
whole and reading and serving every request through the general field readers and checks,
over random request sequences."""

from __future__ import annotations

import base64
import dataclasses
import importlib
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator import jsonio, requests
from coordinator.config import CoordinatorConfig
from coordinator.errors import Error
from coordinator.group.model import ClassicGroup
from coordinator.group.snapshot import UntimedPart, decode_group, encode_classic_group
from coordinator.group.states import GroupState
from coordinator.modern.model import ConsumerGroup
from coordinator.requests import BadRequest, parse, parse_in_full
from coordinator.step import StepResult, step
from coordinator.stream import operator as op

#: The step module itself (the package's attribute ``coordinator.step`` is the function).
step_module = importlib.import_module("coordinator.step")

SETTINGS = op.OperatorSettings(
    CoordinatorConfig(
        group_initial_rebalance_delay_ms=50,
        group_min_session_timeout_ms=10,
        offsets_retention_check_interval_ms=5_000,
        offsets_retention_minutes=1,
    ),
    b"s" * 32,
)
GROUPS = ("g", "h\u00e9")

# -- the plain-heartbeat reader ------------------------------------------------------------------

ids = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["m-1", "", "\ud800", "\u00e9"]),
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
)
numbers = st.one_of(
    st.integers(-(2**31) - 1, 2**31),
    st.sampled_from([-(2**31), 2**31 - 1, 2**31, -(2**31) - 1, 2**63]),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.text(max_size=2),
)


@settings(max_examples=300)
@given(
    fields=st.fixed_dictionaries(
        {},
        optional={
            "request_id": ids,
            "group_id": ids,
            "member_id": ids,
            "generation_id": numbers,
            "group_instance_id": ids,
            "api_version": st.one_of(numbers, st.integers(-1, 5)),
            "extra": ids,
        },
    )
)
def test_a_heartbeat_reads_as_the_general_readers_read_it(fields: dict[str, Any]) -> None:
    raw = {"api": "heartbeat", **fields}
    try:
        expected: Request | BadRequest = parse_in_full(dict(raw))
    except BadRequest as problem:
        expected = problem
    try:
        got: Request | BadRequest = parse(dict(raw))
    except BadRequest as problem:
        got = problem
    if isinstance(expected, BadRequest):
        assert isinstance(got, BadRequest)
        assert (got.error, got.message) == (expected.error, expected.message)
    else:
        assert got == expected
        assert list(got.body) == list(expected.body)  # the same field order too


Request = requests.Request


# -- JSON lines ----------------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(),
        st.binary(max_size=8),
        st.frozensets(st.integers(), max_size=3),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@given(value=json_values)
def test_one_encoder_writes_what_json_dumps_wrote(value: Any) -> None:
    expected = json.dumps(value, default=jsonio._default, separators=(",", ":"), ensure_ascii=False)
    assert jsonio.dumps(value) == expected


responses = st.fixed_dictionaries(
    {
        "api": st.one_of(st.sampled_from(["heartbeat", "leave_group"]), st.text(max_size=3)),
        "request_id": st.one_of(st.text(max_size=4), st.integers(), st.none(), st.booleans()),
        "group_id": st.one_of(st.text(max_size=4), st.none(), st.sampled_from(["\ud800", "\x00"])),
        "error_code": st.one_of(st.integers(-1, 200), st.just(Error.NONE), st.floats()),
        "error": st.one_of(st.none(), st.sampled_from([e.error_name for e in Error])),
        "error_message": st.one_of(st.none(), st.text(max_size=6), st.binary(max_size=3)),
    },
    optional={"members": st.lists(st.text(max_size=2), max_size=2)},
)


@given(answer=responses)
def test_a_response_line_is_what_the_encoder_writes(answer: dict[str, Any]) -> None:
    assert jsonio.dumps_response(answer) == jsonio.dumps(answer)
    assert jsonio.dumps_response(dict(reversed(answer.items()))) == jsonio.dumps(
        dict(reversed(answer.items()))
    )


json_texts = st.one_of(
    st.builds(lambda v: json.dumps(v, default=jsonio._default), json_values),
    st.builds(
        lambda d, pad: pad + json.dumps(d, default=jsonio._default) + pad,
        st.dictionaries(st.text(max_size=3), json_values),
        st.sampled_from(["", " ", "\n"]),
    ),
    st.text(max_size=12),
    st.sampled_from(
        ['{"a":1} ', '{"a":1}x', "{", '{"a":1}{}', "\ufeff{}", " {}", "{}", '{"a":[' * 3000]
    ),
)


@given(line=json_texts)
def test_an_object_line_reads_as_json_loads_reads_it(line: str) -> None:
    try:
        expected: Any = ("value", json.loads(line))
    except ValueError as exc:
        expected = ("error", type(exc), str(exc))
    except RecursionError:  # its message names the container it was in: depth-dependent
        expected = ("too deep",)
    try:
        got: Any = ("value", jsonio.loads_object(line))
    except ValueError as exc:
        got = ("error", type(exc), str(exc))
    except RecursionError:
        got = ("too deep",)
    assert got == expected


# -- the state function over random request sequences --------------------------------------------


GAPS = [0, 1, 60, 400, 1_200, 4_000, 12_000]
KINDS = ["join", "heartbeat", "heartbeat", "heartbeat", "odd heartbeat", "odd heartbeat"]
KINDS += ["sync", "leave", "commit", "describe"]


def _members(state: dict[str, tuple[int | None, bytes]], group_id: str) -> list[str]:
    stored = state.get(group_id)
    return [] if stored is None else sorted(decode_group(stored[1]).members)


def _sync(rid: str, group_id: str, blob: bytes | None, index: int) -> dict[str, Any]:
    assert blob is not None
    group = decode_group(blob)
    members = sorted(group.members)
    return {
        "api": "sync_group",
        "request_id": rid,
        "group_id": group_id,
        "member_id": members[index],
        "generation_id": group.generation_id,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [
            {"member_id": m, "assignment": base64.b64encode(m.encode()).decode()} for m in members
        ]
        if members[index] == group.leader_id
        else [],
    }


def _request(
    data: st.DataObject, rid: str, group_id: str, blob: bytes | None, kind: str | None
) -> dict[str, Any]:
    group = None if blob is None else decode_group(blob)
    members = list(group.members) if group is not None else []
    generation = group.generation_id if group is not None else 0
    member = "" if kind == "join" else data.draw(st.sampled_from([*members * 3, "", "bogus"]))
    gen = data.draw(st.sampled_from([generation, generation, generation - 1]))
    session = 10_000 if kind == "join" else data.draw(st.sampled_from([100, 3_000, 10_000]))
    if kind is None:
        kind = data.draw(st.sampled_from(KINDS))
    common = {"request_id": rid, "group_id": group_id, "member_id": member}
    if kind == "join":
        return {
            "api": "join_group",
            **common,
            "client_id": "c",
            "session_timeout_ms": session,
            "rebalance_timeout_ms": 300
            if kind == "join"
            else data.draw(st.sampled_from([60, 300])),
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": ""}],
            "api_version": 3,  # a member id at once (v4+ asks for a rejoin)
        }
    if kind == "heartbeat":
        return {"api": "heartbeat", **common, "generation_id": gen}
    if kind == "odd heartbeat":  # what the plain reader leaves to the general one
        request = {"api": "heartbeat", **common, "generation_id": gen}
        change = data.draw(
            st.sampled_from(["version", "instance", "bool", "float", "unicode", "int id", "none"])
        )
        if change == "version":
            request["api_version"] = data.draw(st.integers(-1, 5))
        elif change == "instance":
            request["group_instance_id"] = data.draw(st.sampled_from([None, "i", "\u00e9"]))
        elif change == "bool":
            request["generation_id"] = True
        elif change == "float":
            request["generation_id"] = float(gen)
        elif change == "unicode":
            request["member_id"] = member + "\u00e9"
        elif change == "int id":
            request["request_id"] = len(rid)
        else:
            del request["member_id"]
        return request
    if kind == "sync":
        if group is not None and group.leader_id is not None and data.draw(st.booleans()):
            member, gen = group.leader_id, generation
        return {
            "api": "sync_group",
            **common,
            "member_id": member,
            "generation_id": gen,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [
                {"member_id": m, "assignment": base64.b64encode(m.encode()).decode()}
                for m in members
            ],
        }
    if kind == "leave":
        return {"api": "leave_group", **common, "api_version": 2}
    if kind == "commit":
        return {
            "api": "offset_commit",
            **common,
            "generation_id": gen,
            "offsets": [{"topic": "t", "partition": 0, "offset": len(rid), "metadata": ""}],
        }
    return {"api": "describe_groups", "request_id": rid, "group_id": group_id}


def _checked_step(*args: Any, **kwargs: Any) -> StepResult:
    """The engine's step, checking what it says of itself: when it reports that it changed only
    the group's timers, the group's summary and the start of its snapshot are as they were."""
    group = args[0]
    before = None
    if isinstance(group, ClassicGroup):
        before = (op.group_summary(group.group_id, group, 0), encode_classic_group(group)[1])
    result = step(*args, **kwargs)
    if result.timers_only:
        assert before is not None and result.group is group
        summary, untimed = before
        assert op.group_summary(group.group_id, group, 0) == summary
        assert encode_classic_group(group)[1] == untimed
        event("a step changed only timers")
    return result


def _run(
    state: dict[str, tuple[int | None, bytes]],
    lines: list[op.InboxLine],
    now_ms: int,
    decoded: op.DecodedGroups,
    plain_heartbeats: bool,
    monkeypatch: pytest.MonkeyPatch,
    operator_settings: op.OperatorSettings = SETTINGS,
) -> op.ShardOutcome:
    with monkeypatch.context() as patch:
        patch.setattr(op, "DECODED", decoded)
        if not plain_heartbeats:
            patch.setattr(requests, "_plain_heartbeat", lambda raw: None)
            patch.setattr(step_module, "plain_heartbeat_fields", lambda raw: None)
            patch.setattr(op, "step", _checked_step)
        return op.run_shard(operator_settings, dict(state), lines, now_ms, now_ms)


@pytest.mark.parametrize("offset_log", [False, True], ids=["no offset log", "offset log"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_fast_paths_give_exactly_the_general_paths_outputs(
    offset_log: bool, data: st.DataObject
) -> None:
    """With an offset log, the batches' timers wait for the next batch's timestamp (their
    answers' delivery), which each group's next step looks up there."""
    with tempfile.TemporaryDirectory() as directory:
        offsets = Path(directory) / "offsets" if offset_log else None
        _fast_and_general_paths(data, offsets)


def _fast_and_general_paths(data: st.DataObject, offsets: Path | None) -> None:
    operator_settings = SETTINGS
    if offsets is not None:
        offsets.mkdir()
        operator_settings = dataclasses.replace(SETTINGS, offsets_dir=str(offsets))
    monkeypatch = pytest.MonkeyPatch()
    # Kept across batches, as reused Python workers keep them; each batch runs on either.
    workers = (op.DecodedGroups(), op.DecodedGroups())
    warm_state: dict[str, tuple[int | None, bytes]] = {}
    cold_state: dict[str, tuple[int | None, bytes]] = {}
    now, rid = 0, 0
    # Mostly from Stable groups (two members joined, then synced), the busy case.
    formed = data.draw(st.booleans(), label="groups formed first")
    for batch in range(data.draw(st.integers(1, 8), label="batches") + (4 if formed else 0)):
        forming = formed and batch < 4
        now += (
            (0, 1_000, 1_000, 10)[batch]
            if forming
            else data.draw(st.sampled_from(GAPS), label="gap")
        )
        if offsets is not None:  # a batch's timestamp is its own
            now += 1
            meta = {"batchWatermarkMs": 0, "batchTimestampMs": now, "conf": {}}
            source = {"inbox_seq": batch, "inbox_files": batch}
            text = "\n".join(["v1", json.dumps(meta), json.dumps(source)]) + "\n"
            (offsets / str(batch)).write_text(text)
        kinds = [("join", g) for g in GROUPS for _ in range(2)] if forming and batch == 0 else []
        if forming and batch in (1, 2):  # requests step the groups: their joins complete
            kinds = [("describe", g) for g in GROUPS]
        if forming and batch == 3:
            kinds = [("sync", g) for g in GROUPS for _ in _members(cold_state, g)]
        if not forming:
            count = data.draw(st.integers(0, 6), label="requests")
            kinds = [(None, data.draw(st.sampled_from(GROUPS))) for _ in range(count)]
        lines: list[op.InboxLine] = []
        synced: dict[str, int] = {}
        for position, (kind, group_id) in enumerate(kinds):
            stored = cold_state.get(group_id)
            blob = None if stored is None else stored[1]
            if kind == "sync":  # each member once, by its id's order
                synced[group_id] = synced.get(group_id, -1) + 1
                request = _sync(f"r{rid}", group_id, blob, synced[group_id])
            else:
                request = _request(data, f"r{rid}", group_id, blob, kind)
            rid += 1
            arrival = now - data.draw(st.integers(0, 50))
            source = f"file:/inbox/{batch:016d}@{arrival}-t.jsonl"
            lines.append(
                op.InboxLine(json.dumps(request), source, position, group_id, True, True, arrival)
            )
        warm = workers[data.draw(st.integers(0, 1), label="the Python worker")]
        if data.draw(st.booleans(), label="a task retry"):
            # The same batch again from the stored state (a failed task's output discarded):
            # the warm worker has already stepped its cached objects once.
            _run(warm_state, lines, now, warm, True, monkeypatch, operator_settings)
        got = _run(warm_state, lines, now, warm, True, monkeypatch, operator_settings)
        cold = op.DecodedGroups(limit_bytes=0)
        expected = _run(cold_state, lines, now, cold, False, monkeypatch, operator_settings)
        assert got.rows == expected.rows
        assert got.state == expected.state
        assert got.deadline_ms == expected.deadline_ms
        assert got.internal_errors == expected.internal_errors == []
        warm_state, cold_state = got.state, expected.state
        answers = [json.loads(row[7]) for row in got.rows if row[0] == op.RESPONSE]
        if any(a["api"] == "heartbeat" and a["error"] is None for a in answers):
            event("a heartbeat was served")
        if offsets is not None and any(
            decode_group(blob).undelivered is not None for _, blob in got.state.values()
        ):
            event("a group's timers wait for their delivery")
    hits = sum(w.hits for w in workers)
    event(f"{hits} cached groups stepped" if hits else "no cached group stepped")
    if any(w.timed_hits for w in workers):
        event("a cached group was stepped with the timed part of another worker's blob")
    if any(w.untimed_reused for w in workers):
        event("a snapshot's untimed part was reused")


def test_a_blob_that_is_not_the_cached_encoding_is_decoded() -> None:
    """Only the exact bytes, or a blob with the same untimed part, find the cached object, and
    only under its own group id."""
    first = op.run_group(SETTINGS, "g", None, [_join_line("j1")], 1_000)
    assert first.blob is not None
    decoded = op.DecodedGroups(limit_bytes=2 * len(first.blob))
    group, summary, untimed = decoded.take(first.blob, "g", 0, SETTINGS.config)
    assert untimed is None  # decoded: no untimed part
    decoded.keep(first.blob, group, summary, _untimed(group))
    assert (
        decoded.take(first.blob, "g", 0, SETTINGS.config)[0] is group
    )  # taken out: stepped once only
    assert decoded.take(first.blob, "g", 0, SETTINGS.config)[0] is not group
    decoded.keep(first.blob, group, summary, _untimed(group))
    assert decoded.take(first.blob, "other", 0, SETTINGS.config)[0] is not group
    assert decoded.take(first.blob, "g", 0, SETTINGS.config)[0] is group
    assert decoded.hits == 2
    # A blob of the group with another untimed part: decoded, and the kept object dropped.
    decoded.keep(first.blob, group, summary, _untimed(group))
    other = op.run_group(SETTINGS, "g", first.blob, [_join_line("j2")], 1_001)
    assert other.blob is not None and not other.blob.startswith(_untimed(group).head)
    assert decoded.take(other.blob, "g", 0, SETTINGS.config)[0] is not group
    assert decoded._groups == {}


def test_another_workers_blob_with_the_same_untimed_part_is_read_from_its_timed_part() -> None:
    """The group's later steps ran on another Python worker and served heartbeats only: the
    object kept here is stepped on, with the timers of the blob handed over."""
    formed = _formed_group(SETTINGS)
    here, there = op.DecodedGroups(), op.DecodedGroups()
    group, summary, _ = here.take(formed, "g", 0, SETTINGS.config)
    blob, untimed = encode_classic_group(group)
    here.keep(blob, group, summary, untimed)
    # The other worker decodes the same blob and serves two heartbeats, in two batches.
    later = blob
    for now in (2_000, 3_000):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(op, "DECODED", there)
            outcome = op.run_group(SETTINGS, "g", later, [_heartbeat_line(later, now)], now)
        assert outcome.blob is not None and outcome.blob != later
        later = outcome.blob
    assert later.startswith(untimed.head)
    taken, taken_summary, taken_untimed = here.take(later, "g", 0, SETTINGS.config)
    assert (here.hits, here.timed_hits) == (0, 1)
    assert taken is group and taken_untimed is untimed
    assert taken == decode_group(later)
    assert taken_summary == op.group_summary("g", taken, 0, SETTINGS.config)


def test_the_oldest_groups_go_first_past_the_byte_limit() -> None:
    decoded = op.DecodedGroups(limit_bytes=10)
    groups = []
    for n in range(4):
        outcome = op.run_group(SETTINGS, f"g{n}", None, [_join_line(f"j{n}", f"g{n}")], 1_000)
        assert outcome.blob is not None
        groups.append(decoded.take(outcome.blob, f"g{n}", 0, SETTINGS.config)[:2])
    for n, (group, summary) in enumerate(groups):
        decoded.keep(bytes([n]) * 4, group, summary, _untimed(group))
    assert {g: entry[0] for g, entry in decoded._groups.items()} == {
        "g2": bytes([2]) * 4,
        "g3": bytes([3]) * 4,
    }
    assert list(decoded._groups) == ["g2", "g3"]
    group, summary = groups[3]
    decoded.keep(b"x" * 11, group, summary, _untimed(group))  # over the limit alone: not kept
    assert len(decoded._groups) == 2 and decoded._bytes == 8
    decoded.keep(b"y" * 4, group, summary, _untimed(group))  # one entry per group id
    assert {g: entry[0] for g, entry in decoded._groups.items()} == {
        "g2": bytes([2]) * 4,
        "g3": b"y" * 4,
    }
    assert len(decoded._groups) == 2 and decoded._bytes == 8


def test_a_consumer_group_is_always_decoded() -> None:
    """A consumer group's blob is the records that rebuild it: its object is never kept."""
    decoded = op.DecodedGroups()
    decoded.keep(b"blob", ConsumerGroup("c"), {"group_id": "c"}, _untimed(None))
    assert decoded._groups == {}


def _untimed(group: Any) -> UntimedPart:
    if group is None:
        return UntimedPart(b"", 0, {}, {}, 0, 0)
    return encode_classic_group(group)[1]


def _join_line(rid: str, group_id: str = "g", version: int | None = None) -> op.InboxLine:
    request = {
        "api": "join_group",
        "request_id": rid,
        "group_id": group_id,
        "member_id": "",
        "client_id": "c",
        "session_timeout_ms": 10_000,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": ""}],
    }
    if version is not None:
        request["api_version"] = version
    return _line(request)


def _line(request: dict[str, Any]) -> op.InboxLine:
    return op.InboxLine(json.dumps(request), "file:/inbox/a.jsonl", 0, request["group_id"])


def _formed_group(operator_settings: op.OperatorSettings) -> bytes:
    """The blob of group "g", Stable with one member: joined (a member id at once), the
    initial delay run out, synced."""
    outcome = op.run_group(operator_settings, "g", None, [_join_line("j", version=3)], 1_000)
    for now in (2_000, 3_000):  # the initial rebalance delay runs out: the join completes
        assert outcome.blob is not None
        describe = {"api": "describe_groups", "request_id": f"d{now}", "group_id": "g"}
        outcome = op.run_group(operator_settings, "g", outcome.blob, [_line(describe)], now)
    sync = _line(_sync("s", "g", outcome.blob, 0))
    outcome = op.run_group(operator_settings, "g", outcome.blob, [sync], 3_500)
    assert outcome.blob is not None
    assert decode_group(outcome.blob).state is GroupState.STABLE
    return outcome.blob


def _heartbeat_line(blob: bytes, now: int) -> op.InboxLine:
    group = decode_group(blob)
    (member,) = group.members
    request = {
        "api": "heartbeat",
        "request_id": f"h{now}",
        "group_id": group.group_id,
        "member_id": member,
        "generation_id": group.generation_id,
    }
    return _line(request)
