"""Fuzzing the engine: random and malformed requests, duplicated and reordered requests, and
clock jumps, through ``GroupCoordinator.handle``/``advance`` and through the job's operator.

:class:`FuzzMachine` extends the engine's state machine (``tests/test_engine_machine.py``,
whose rules, invariants and teardown all still run) with:

- well-formed requests of every API with implausible values (negative and huge timeouts and
  generations, unknown member ids, empty and unicode strings, unicode group ids, every version);
- malformed requests: a well-formed one with a field dropped, retyped, added or its api renamed,
  binary fields as random base64, non-base64 text or raw values, and arbitrary JSON values;
- the same request again with the same request id (and the engine's keyed ids, as in the job);
- batches of requests in a random order, requests with a stale clock, and clock jumps of every
  size (zero to decades).

After every step: nothing escaped ``handle``/``advance`` and no internal error was caught; each
request got exactly one response (as many as it was sent); every error code, top-level or per
partition or member, is one of Kafka's, under its name; a request that does not parse changed no
group and wrote no record; the engine's invariants (the base machine's) hold for every group id,
not only the base machine's three; and ``GroupCoordinator.from_records`` (all records so far,
now) agrees with the live engine on every group at rest (``durable_view``) and on every
committed offset of every group.

Then the job's own reading of lines (``operator.run_shard`` and the Delta sink, through
``LocalJob``) is fed arbitrary text and bytes: it never raises, and every line that is not a
request in flight is answered or rejected exactly once.

Regression tests for the engine bugs the fuzzing found come last.
"""

from __future__ import annotations

import base64
import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds
from coordinator.errors import Error
from coordinator.ids import KeyedIds
from coordinator.log import records as log
from coordinator.requests import MAX_API_VERSION, BadRequest, parse
from coordinator.stream import operator as op
from coordinator.stream.local import LocalJob, lines_of
from coordinator.stream.settings import load_settings
from tests.test_engine_machine import GROUPS, INSTANCES, TOPICS, EngineMachine, _in_memory_only

#: The classic APIs (consumer groups have their own machine, tests/test_consumer_group_machine.py).
APIS = sorted(api for api in MAX_API_VERSION if not api.startswith("consumer_group_"))
KNOWN_CODES = {int(e): e.error_name for e in Error}
#: Group ids beyond the base machine's: unicode, astral, long, and "" (accepted by some APIs).
ODD_GROUPS = ["grüße-組", "\U0001f600", "x" * 300, ""]

# --- value strategies ---------------------------------------------------------------------------

#: Text with everything JSON can carry: control characters, astral characters, and lone
#: surrogates (which a JSON escape can make, and which no UTF-8 table could hold).
odd_text = st.lists(
    st.one_of(st.characters(), st.characters(categories=["Cs"]), st.sampled_from('\x00\n"\\')),
    max_size=12,
).map("".join)  # (st.text would drop the surrogates)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    odd_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3),
    max_leaves=8,
)
implausible_ints = st.one_of(
    st.sampled_from([-1, 0, -(2**31), 2**31 - 1, 2**31, 2**63 - 1, -(2**63), 2**63]),
    st.integers(-(2**64), 2**64),
)
base64_ish = st.one_of(
    st.binary(max_size=20).map(lambda b: base64.b64encode(b).decode()),  # valid
    st.binary(max_size=20),  # raw bytes (what Python callers pass)
    st.sampled_from(["%%%", "abc", "YQ", "YQ==\n", "Y Q==", "====", "é"]),  # not base64
    json_values,
)


class FuzzMachine(EngineMachine):
    @initialize(
        delay=st.sampled_from([0, 30]),
        max_size=st.sampled_from([3, 100]),
        keyed=st.booleans(),
        start=st.sampled_from([0, 1_700_000_000_000]),
    )
    def setup(self, delay: int, max_size: int, keyed: bool = False, start: int = 0) -> None:
        super().setup(delay, max_size)
        self.now = start  # 0, or a wall clock (where time arithmetic can overflow)
        if keyed:  # the job's ids: a keyed hash of the request id, the same for a repeated id
            self.c = GroupCoordinator(self.config, id_source=KeyedIds(b"fuzz" * 8))
        else:
            self.c = GroupCoordinator(self.config, id_source=SequentialIds())
        self.times_sent: Counter[Any] = Counter()
        self.times_answered: Counter[Any] = Counter()
        assert self.c.advance(self.now) == []  # the engine's clock starts where ours does

    # -- plumbing: count answers, so that a request id sent twice is answered twice ----------------

    def send(self, request: Any, now: int | None = None, rid: Any = None) -> list[dict[str, Any]]:
        if rid is None:
            rid = f"r{next(self.rids)}"
        if isinstance(request, dict):
            request["request_id"] = rid
        self.sent[rid] = request
        self.times_sent[rid] += 1
        out = self.c.handle(request, self.now if now is None else now)
        self.observe(out)
        return out

    def observe(self, out: list[dict[str, Any]]) -> None:
        for response in out:
            rid = response["request_id"]
            assert rid in self.sent, f"answer to a request never sent: {response}"
            self.times_answered[rid] += 1
            assert self.times_answered[rid] <= self.times_sent[rid], f"{rid!r} answered twice"
            self.answered[rid] = response
            assert response["error_code"] != -1, response
            check_codes(response)
            if isinstance(self.sent[rid], dict):
                self.learn(response)
        assert not self.c.internal_errors, self.c.internal_errors
        self.records.extend(self.c.drain_records())

    def learn(self, response: dict[str, Any]) -> None:
        if response["api"] == "sync_group" and response["error"] is None:
            request = self.sent[response["request_id"]]
            if not isinstance(request.get("generation_id"), int):
                return
        super().learn(response)

    # -- well-formed requests with implausible values --------------------------------------------

    @rule(data=st.data(), api=st.sampled_from(APIS))
    def implausible(self, data: st.DataObject, api: str) -> None:
        request = self.template(data, api)
        field = data.draw(st.sampled_from([*sorted(request), "group_id"]))
        if field not in ("api", "request_id"):
            request[field] = data.draw(self.implausible_value(field))
        self.send(request)

    def template(self, data: st.DataObject, api: str) -> dict[str, Any]:
        """A well-formed request of ``api`` with plausible values drawn from the groups' state."""
        group = data.draw(st.sampled_from([*GROUPS, *ODD_GROUPS]))
        state = self.c.group(group)
        member = data.draw(
            st.sampled_from([*(list(state.members)[:3] if state else []), "", "no-such-member"])
        )
        generation = state.generation_id if state else data.draw(st.sampled_from([-1, 0, 1]))
        instance = data.draw(st.sampled_from([None, *INSTANCES]))
        partitions = [{"topic": data.draw(st.sampled_from(TOPICS)), "partition": 0}]
        version = data.draw(st.integers(0, MAX_API_VERSION[api]))
        base: dict[str, Any] = {"api": api, "group_id": group, "api_version": version}
        body: dict[str, Any] = {
            "join_group": {
                "member_id": member,
                "group_instance_id": instance,
                "client_id": "fuzz",
                "client_host": "/10.0.0.1",
                "session_timeout_ms": 500,
                "rebalance_timeout_ms": 500,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"m"}],
                "reason": "fuzz",
            },
            "sync_group": {
                "member_id": member,
                "group_instance_id": instance,
                "generation_id": generation,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [{"member_id": member, "assignment": b"a"}],
            },
            "heartbeat": {
                "member_id": member,
                "group_instance_id": instance,
                "generation_id": generation,
            },
            "leave_group": {
                "member_id": member,
                "members": [{"member_id": member, "group_instance_id": instance, "reason": "r"}],
            },
            "offset_commit": {
                "member_id": member,
                "group_instance_id": instance,
                "generation_id": generation,
                "retention_time_ms": data.draw(st.sampled_from([-1, 1, 100_000, 2**63 - 1])),
                "offsets": [
                    {**p, "offset": self.now, "leader_epoch": 1, "metadata": "m"}
                    for p in partitions
                ],
            },
            "offset_fetch": {"partitions": partitions, "require_stable": True},
            "offset_delete": {"partitions": partitions},
            "describe_groups": {},
            "delete_groups": {},
            "list_groups": {"states_filter": ["Stable"], "types_filter": ["classic"]},
            "find_coordinator": {"key_type": 0},
        }[api]
        return {**base, **body}

    @rule(data=st.data(), api=st.sampled_from(APIS), text=odd_text)
    def odd_string(self, data: st.DataObject, api: str, text: str) -> None:
        """One string of a well-formed request (top-level or nested) made odd: empty, unicode,
        control characters, lone surrogates."""
        request = self.template(data, api)
        places: list[tuple[dict[str, Any], str]] = []
        for key, value in request.items():
            if isinstance(value, str) and key != "api":
                places.append((request, key))
            elif isinstance(value, list):
                places += [(v, k) for v in value if isinstance(v, dict) for k in sorted(v)]
        if places:
            container, key = data.draw(st.sampled_from(places))
            container[key] = text
        self.send(request)

    def implausible_value(self, field: str) -> Any:
        if field.endswith(("_ms", "_id")) and field not in ("member_id", "group_instance_id"):
            if field in ("group_id", "client_id"):
                return st.one_of(st.sampled_from(["", " ", "\t"]), odd_text)
            return implausible_ints
        if field in (
            "member_id",
            "group_instance_id",
            "client_id",
            "client_host",
            "reason",
            "protocol_type",
            "protocol_name",
        ):
            return st.one_of(st.sampled_from(["", "no-such-member", "組"]), odd_text, st.none())
        if field == "api_version":
            return st.one_of(st.integers(-3, 12), st.sampled_from([2**31, -(2**31)]))
        if field in ("protocols", "assignments", "members", "offsets", "partitions"):
            return st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.sampled_from(["range", "", "組"]),
                        "member_id": st.sampled_from(["", "no-such-member"]),
                        "metadata": base64_ish,
                        "assignment": base64_ish,
                        "topic": st.sampled_from(["", *TOPICS, "組"]),
                        "partition": implausible_ints,
                        "offset": implausible_ints,
                        "leader_epoch": st.one_of(st.none(), implausible_ints),
                    }
                ),
                max_size=3,
            )
        return json_values

    # -- malformed requests -------------------------------------------------------------------------

    @rule(data=st.data(), api=st.sampled_from(APIS))
    def mutated(self, data: st.DataObject, api: str) -> None:
        """A well-formed request with one thing wrong: a field dropped, retyped or added, or
        the api renamed."""
        request = self.template(data, api)
        how = data.draw(st.sampled_from(["drop", "retype", "extra", "rename", "nest"]))
        field = data.draw(st.sampled_from(sorted(request)))
        if how == "drop":
            del request[field]
        elif how == "retype":
            request[field] = data.draw(json_values)
        elif how == "extra":
            request[data.draw(odd_text)] = data.draw(json_values)
        elif how == "rename":
            request["api"] = data.draw(
                st.sampled_from(["JoinGroup", "join-group", "produce", "", "list_groups "])
                | json_values
            )
        else:
            for value in request.values():
                if isinstance(value, list) and value and isinstance(value[0], dict):
                    key = data.draw(st.sampled_from(sorted(value[0])))
                    value[0][key] = data.draw(json_values | base64_ish)
        self.send_maybe_bad(request)

    @rule(value=json_values)
    def arbitrary(self, value: Any) -> None:
        """Anything JSON can be (and a few things it cannot) as a request."""
        self.send_maybe_bad(value)

    @rule(raw=st.sampled_from([b"{}", bytearray(b"x"), (1, 2), {1, 2}, object()]))
    def not_json(self, raw: Any) -> None:
        self.send_maybe_bad(raw)

    def send_maybe_bad(self, request: Any) -> None:
        """Send a request that may not parse; if it does not, it must change nothing."""
        self.observe(self.c.advance(self.now))  # what is due now fires first
        try:
            parse(copy.deepcopy(request))
            parsed = True
        except BadRequest:
            parsed = False
        before, records = self.views(), len(self.records)
        if isinstance(request, dict) and _answerable(request.get("request_id")):
            out = self.send(request)  # under a fresh request id
        else:
            # No request id to answer to: answered once, with request_id None.
            assert not parsed
            out = self.c.handle(request, self.now)
            assert not self.c.internal_errors, self.c.internal_errors
            assert out[0]["request_id"] is None
            check_codes(out[0])
        if not parsed:
            (answer,) = out
            assert answer["error_code"] != 0, answer
            assert answer["error_message"]
            assert self.views() == before
            assert len(self.records) == records and not self.c.drain_records()

    def views(self) -> dict[str, Any]:
        return {g: log.durable_view(self.c.group(g)) for g in self.c.group_ids()}

    # -- the same request twice, reordered batches, stale clocks, clock jumps --------------------

    @precondition(lambda self: len(self.sent) > 0)
    @rule(data=st.data())
    def same_request_again(self, data: st.DataObject) -> None:
        """A request sent again as it was, request id included (a client retrying a file)."""
        rid = data.draw(st.sampled_from(sorted(r for r in self.sent if isinstance(r, str))[-8:]))
        request = self.sent[rid]
        if isinstance(request, dict):
            self.send(copy.deepcopy(request), rid=rid)

    @rule(data=st.data(), apis=st.lists(st.sampled_from(APIS), min_size=2, max_size=5))
    def reordered_batch(self, data: st.DataObject, apis: list[str]) -> None:
        """Several requests at one instant, in a random order (as a batch may bring them)."""
        batch = [self.template(data, api) for api in apis]
        for request in data.draw(st.permutations(batch)):
            self.send(request)

    @rule(data=st.data(), back=st.sampled_from([1, 1_000, 10**9]), api=st.sampled_from(APIS))
    def stale_clock(self, data: st.DataObject, back: int, api: str) -> None:
        """A request stamped earlier than the engine's clock: read as no time passed."""
        self.send(self.template(data, api), now=self.now - back)
        assert self.c.now_ms == self.now

    @rule(
        ms=st.one_of(
            st.sampled_from([0, 1, 499, 500, 501, 5_000, 60_001, 10**9, 10**12]),
            st.integers(0, 10**7),
        )
    )
    def jump(self, ms: int) -> None:
        self.now += ms
        self.observe(self.c.advance(self.now))

    # -- invariants --------------------------------------------------------------------------------

    @invariant()
    def every_group_is_consistent(self) -> None:
        """The base machine's books, for every group id (the odd ones too)."""
        if not hasattr(self, "c"):
            return
        for group_id in self.c.group_ids():
            group = self.c.group(group_id)
            assert group is not None
            assert (group.leader_id is None) == (not group.members)
            assert group.leader_id is None or group.leader_id in group.members
            assert group.num_awaiting_join == sum(
                1 for m in group.members.values() if m.awaiting_join
            )
            assert group.static_members == {
                m.group_instance_id: m.member_id for m in group.members.values() if m.is_static
            }
            counts: Counter[str] = Counter()
            for m in group.members.values():
                counts.update(name for name, _ in m.protocols)
            assert {k: v for k, v in group.supported_protocols.items() if v} == dict(counts)
            assert not set(group.pending_members) & set(group.members)
            assert len(group.members) <= self.config.group_max_size or group.state.value in (
                "PreparingRebalance",
                "CompletingRebalance",
            )

    @invariant()
    def rebuilding_from_the_records_matches_the_live_engine(self) -> None:
        if not hasattr(self, "c"):
            return
        rebuilt = GroupCoordinator.from_records(self.records, self.config, self.now)
        for group_id in sorted(set(self.c.group_ids()) | set(rebuilt.group_ids())):
            live, loaded = self.c.group(group_id), rebuilt.group(group_id)
            # Every committed offset of every group, in any state.
            assert (live.offsets if live else {}) == (loaded.offsets if loaded else {}), group_id
            if live is None or live.state.value not in ("Stable", "Empty"):
                continue
            if loaded is None and _in_memory_only(live):
                continue  # a group no record describes (see the base machine)
            assert log.durable_view(loaded) == log.durable_view(live), group_id

    def teardown(self) -> None:
        super().teardown()
        if hasattr(self, "c"):
            unanswered = {r: n for r, n in self.times_sent.items() if self.times_answered[r] < n}
            assert not unanswered, unanswered


def _answerable(request_id: Any) -> bool:
    return isinstance(request_id, (str, int)) and not isinstance(request_id, bool)


def check_codes(response: dict[str, Any]) -> None:
    """Every error code in a response is one of Kafka's, under its Kafka name."""
    assert KNOWN_CODES.get(response["error_code"], "?") == response["error"], response
    for key in ("partitions", "members"):
        for item in response.get(key) or []:
            if "error_code" in item:
                assert KNOWN_CODES.get(item["error_code"], "?") == item["error"], response


TestFuzzMachine = FuzzMachine.TestCase
TestFuzzMachine.settings = settings(
    settings.default,
    stateful_step_count=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# --- the job's reading of lines -----------------------------------------------------------------

REQUEST_LINES = [
    json.dumps(r)
    for r in (
        {
            "api": "offset_commit",
            "request_id": "c",
            "group_id": "g",
            "generation_id": -1,
            "offsets": [{"topic": "t", "partition": 0, "offset": 1}],
        },
        {"api": "offset_fetch", "request_id": "f", "group_id": "g"},
        {"api": "describe_groups", "request_id": 7, "group_id": "g"},
        {"api": "list_groups", "request_id": "l"},
        {"api": "find_coordinator", "request_id": "fc", "group_id": "g"},
        {
            "api": "join_group",
            "request_id": "j",
            "group_id": "g",
            "session_timeout_ms": 10_000,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": ""}],
        },
    )
]


def _garble(line: str, cut: int, insert: str) -> str:
    cut %= len(line) + 1
    return line[:cut] + insert + line[cut:]


#: Lines: random text, JSON values, and request lines cut, spliced or escaped oddly.
inbox_lines = st.one_of(
    odd_text.filter(lambda t: "\n" not in t and "\r" not in t),
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False)),
    json_values.map(json.dumps),
    st.sampled_from(REQUEST_LINES),
    st.builds(
        _garble,
        st.sampled_from(REQUEST_LINES),
        st.integers(0, 400),
        st.sampled_from(["", '"', "}", "\\ud800", "\\", "\x00", "\ufffd", "]"]),
    ),
    st.builds(
        lambda line, cut: line[: cut % (len(line) + 1)],
        st.sampled_from(REQUEST_LINES),
        st.integers(0, 400),
    ),
)


@pytest.fixture(scope="module")
def local_job(tmp_path_factory: pytest.TempPathFactory) -> LocalJob:
    warehouse = tmp_path_factory.mktemp("fuzz") / "warehouse"
    return LocalJob(
        load_settings(
            [],
            {"group.initial.rebalance.delay.ms": "0"},
            warehouse=str(warehouse),
            max_request_bytes=2048,
        )
    )


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(inbox_lines, min_size=1, max_size=6), surrogates=st.booleans())
def test_the_job_reads_any_lines_without_stopping(
    local_job: LocalJob, lines: list[str], surrogates: bool
) -> None:
    """Any lines through the job's operator and its Delta sink: nothing raises, and every line
    is answered or rejected once, except requests that wait for a later batch (a join)."""
    if not surrogates:
        lines = [x.encode("utf-8", "replace").decode() for x in lines]
    # ``lines_of`` splits like the job: keep each drawn line one line of the file.
    data = "".join(x + "\n" for x in lines).encode("utf-8", "surrogatepass")
    inbox_lines_ = lines_of(data, "file:/inbox/fuzz.jsonl")
    now = 1_000_000 + local_job.batch_id * 1_000
    outcome_rows = []
    for row in _run(local_job, inbox_lines_, now):
        outcome_rows.append(row)
    kinds = Counter(row["kind"] for row in outcome_rows)
    waiting = sum(1 for line in inbox_lines_ if _is_join_or_sync(line.value))
    out = kinds[op.RESPONSE] + kinds[op.REJECTED] + kinds[op.LIST_GROUPS]
    assert len(inbox_lines_) - waiting <= out
    for row in outcome_rows:
        if row["body"] is not None:
            row["body"].encode("utf-8")  # storable


def _run(job: LocalJob, lines: list[op.InboxLine], now: int) -> list[dict[str, Any]]:
    """``LocalJob._run``, keeping the operator's rows (the job's batch, Delta write included)."""
    outcome = op.run_shard(job.opsettings, dict(job.state), lines, now)
    assert not outcome.internal_errors, outcome.internal_errors
    rows = [dict(zip(op.OUTPUT_COLUMNS, row, strict=True)) for row in outcome.rows]
    job._run(lines, now)  # the same batch through the job: its sink must take it
    assert not job.internal_errors, job.internal_errors
    return rows


def _is_join_or_sync(value: str) -> bool:
    try:
        raw = json.loads(value)
    except (ValueError, RecursionError):
        return False
    return isinstance(raw, dict) and raw.get("api") in ("join_group", "sync_group")


@given(data=st.binary(max_size=300), cut=st.integers(0, 300))
def test_any_bytes_split_into_lines_as_the_job_splits_them(data: bytes, cut: int) -> None:
    """A file of any bytes becomes lines without an exception; only the last can be
    unterminated, and only lines holding U+FFFD are marked not UTF-8."""
    lines = lines_of(data[:cut], "f")
    assert all(line.terminated for line in lines[:-1])
    for line in lines:
        assert line.valid_utf8 or "\ufffd" in line.value
        assert "\n" not in line.value
        line.value.encode("utf-8")


# --- regressions: engine bugs the fuzzing found ---------------------------------------------------


def test_an_api_that_is_a_list_or_an_object_is_answered():
    """``parse`` looked an unhashable api up in a frozenset: TypeError escaped ``handle`` (and
    stopped the Spark job, whose operator has no guard around the parser)."""
    c = GroupCoordinator(CoordinatorConfig())
    for api in (["join_group"], {"api": 1}):
        (answer,) = c.handle({"api": api, "request_id": 1, "group_id": "g"}, 0)
        assert answer["error"] == "INVALID_REQUEST" and "unknown api" in answer["error_message"]


def test_a_request_id_reused_by_new_members_gives_distinct_member_ids():
    """With the job's keyed ids (a hash of the request id), two JoinGroup v3 of new members
    with one request id got one member id: the second join overwrote the first member and
    counted its protocols twice, then failed with an internal error."""
    c = GroupCoordinator(
        CoordinatorConfig(group_initial_rebalance_delay_ms=0), id_source=KeyedIds(b"k" * 32)
    )
    join = {
        "api": "join_group",
        "request_id": "same",
        "group_id": "g",
        "member_id": "",
        "api_version": 3,
        "session_timeout_ms": 10_000,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    out = c.handle(dict(join), 0) + c.handle(dict(join), 0) + c.advance(10)
    assert not c.internal_errors
    group = c.group("g")
    assert group is not None and len(group.members) == 2
    assert group.supported_protocols["range"] == 2
    assert out[0]["member_id"] in group.members  # the first member kept its id
    # KIP-394's pending members too: the same request id again hands out a new id.
    pending = {**join, "api_version": 9, "request_id": "p"}
    first, second = c.handle(dict(pending), 20), c.handle(dict(pending), 20)
    assert first[0]["member_id"] != second[0]["member_id"]


def test_a_retention_near_long_max_wraps_as_in_java():
    """OffsetCommit v2-v4 with retention_time_ms near Long.MAX_VALUE: now + retention
    overflowed the record's int64 expiry (an internal error). Kafka adds in Java longs, which
    wrap: the expiry is negative and the offset goes at the next sweep."""
    c = GroupCoordinator(CoordinatorConfig())
    now = 1_700_000_000_000
    commit = {
        "api": "offset_commit",
        "request_id": "c",
        "group_id": "g",
        "api_version": 2,
        "generation_id": -1,
        "retention_time_ms": 2**63 - 1,
        "offsets": [{"topic": "t", "partition": 0, "offset": 5}],
    }
    (answer,) = c.handle(commit, now)
    assert answer["partitions"][0]["error"] is None and not c.internal_errors
    (record,) = c.drain_records()
    assert record["expire_timestamp_ms"] == now + 2**63 - 1 - 2**64
    c.advance(now + CoordinatorConfig().offsets_retention_check_interval_ms)
    assert [r["value"] for r in c.drain_records()] == [None, None]  # expired, group deleted


@pytest.mark.parametrize(
    "bad",
    [
        {
            "api": "offset_commit",
            "request_id": "s",
            "group_id": "g",
            "generation_id": -1,
            "offsets": [{"topic": "t", "partition": 0, "offset": 1, "metadata": "\ud800"}],
        },
        {
            "api": "offset_commit",
            "request_id": "s",
            "group_id": "g\udfff",
            "generation_id": -1,
            "offsets": [{"topic": "t", "partition": 0, "offset": 1}],
        },
        {
            "api": "join_group",
            "request_id": "s",
            "group_id": "g",
            "client_id": "\ud83d",
            "session_timeout_ms": 10_000,
            "protocol_type": "consumer",
            "protocols": [],
        },
    ],
)
def test_a_lone_surrogate_is_refused_by_the_parser(bad: dict[str, Any]):
    """A string with half a UTF-16 pair (a JSON "\\ud800" escape) reached the engine: commit
    metadata raised in ``utf16_length`` and a group id or member id could not be encoded into
    a log record, each an internal error. Kafka's strings are UTF-8: the parser refuses them."""
    c = GroupCoordinator(CoordinatorConfig())
    (answer,) = c.handle(bad, 0)
    assert answer["error"] == "INVALID_REQUEST" and "not valid Unicode" in answer["error_message"]
    assert not c.internal_errors and not c.drain_records() and c.group_ids() == []


def test_rejected_lines_are_bounded_and_never_unwritable(tmp_path: Path):
    """What the operator hands the sink is always UTF-8, whatever the line held."""
    rows: list[tuple[Any, ...]] = []
    line = op.InboxLine("\ud800" + "x" * 70_000, "f", 0)

    def emit(kind: str, body: str | None = None, *_: Any) -> None:
        rows.append((kind, body))

    assert op._read_line(line, emit, 1 << 20) is None
    ((kind, body),) = rows
    assert kind == op.REJECTED
    rejected = json.loads(body)
    assert len(rejected["raw"].encode()) <= op.REJECTED_RAW_BYTES
    assert "its first 65536 bytes" in rejected["reason"]
