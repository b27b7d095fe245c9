"""Group snapshots: ``decode_group(encode_group(g)) == g``, byte-identical re-encoding, a step
continues from a decoded copy exactly as from the original, and bad bytes raise SnapshotError."""

from __future__ import annotations

import copy
import dataclasses
import heapq
import zlib
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from coordinator import CoordinatorConfig, SequentialIds, StepResult, step
from coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitions,
    encode_assignment,
    encode_subscription,
)
from coordinator.group.model import (
    HEARTBEAT,
    INITIAL_JOIN,
    JOIN,
    OFFSET_EXPIRY,
    SYNC,
    ClassicGroup,
    Member,
    OffsetAndMetadata,
    ParkedRequest,
    Timer,
)
from coordinator.group.snapshot import (
    SNAPSHOT_VERSION,
    SnapshotError,
    decode_group,
    decode_timed,
    encode_classic_group,
    encode_group,
)
from coordinator.group.states import GroupState
from coordinator.group.timers import Undelivered
from tests.support import REBALANCE, Ctx, protocols
from tests.test_stream_consumer_groups import heartbeat_request

# -- helpers --------------------------------------------------------------------------------------


def round_trip(group: ClassicGroup) -> ClassicGroup:
    """Encode, decode, check equality and byte-identical re-encoding; return the decoded copy."""
    blob = encode_group(group)
    assert blob[0] == SNAPSHOT_VERSION
    decoded = decode_group(blob)
    assert decoded == group
    assert encode_group(decoded) == blob
    # Order is part of the state: every dict and list comes back in the same order.
    for name in (
        "members",
        "static_members",
        "pending_members",
        "pending_sync_members",
        "supported_protocols",
        "offsets",
        "timers",
    ):
        assert list(getattr(decoded, name)) == list(getattr(group, name)), name
    # The heap comes back as the live timers' own entries, whatever stale or moved ones the
    # group's heap holds; each timer's anchor is its own entry.
    assert decoded.timer_heap == group.live_timer_entries()
    assert all(t.entry == t.seq for t in decoded.timers.values())
    assert_same_types(decoded, group)
    # next_timer() drops stale heap entries: ask copies.
    assert copy.deepcopy(decoded).next_timer() == copy.deepcopy(group).next_timer()
    return decoded


def assert_same_types(a: Any, b: Any, path: str = "group") -> None:
    """Equality plus identical types all the way down (1 == True and [1] != (1,) matter)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            if f.compare:  # not compared: not state (the timer heap's layout)
                assert_same_types(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True):
            assert_same_types(ka, kb, f"{path} key")
            assert_same_types(va, vb, f"{path}[{ka!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_types(x, y, f"{path}[{i}]")
    elif isinstance(a, frozenset):
        assert a == b, path
    else:
        assert a == b, path


def consumer_member(
    member_id: str,
    *,
    instance: str | None = None,
    topics: tuple[str, ...] = ("orders",),
    assignment: bytes = b"",
    **kw: Any,
) -> Member:
    sub = encode_subscription(Subscription(topics=topics))
    fields: dict[str, Any] = {
        "member_id": member_id,
        "group_instance_id": instance,
        "client_id": "client",
        "client_host": "/10.0.0.1",
        "rebalance_timeout_ms": 300_000,
        "session_timeout_ms": 45_000,
        "protocol_type": "consumer",
        "protocols": [("range", sub), ("cooperative-sticky", sub)],
        "assignment": assignment,
    }
    fields.update(kw)
    return Member(**fields)


def hand_built() -> ClassicGroup:
    """Every field kind, none at its default."""
    static = consumer_member(
        "static-1",
        instance="instance-a",
        assignment=b"\x00\x01assigned",
        awaiting_sync=[ParkedRequest("sync-r1", 5), ParkedRequest(41, 3)],
    )
    joining = consumer_member(
        "dyn-2",
        client_id="cl\u00e9-\U0001f600",
        is_new=True,
        awaiting_join=[ParkedRequest(7, 4), ParkedRequest("join-r2", 9), ParkedRequest(None, 0)],
    )
    plain = consumer_member("dyn-3", protocols=[("range", b"")], rebalance_timeout_ms=2**31 - 1)
    timers = {
        "heartbeat-static-1": Timer(1_700_000_045_000, 11, HEARTBEAT, "static-1"),
        "heartbeat-dyn-2": Timer(1_700_000_046_000, 14, HEARTBEAT, "dyn-2"),
        "join": Timer(1_700_000_003_000, 12, INITIAL_JOIN, (3_000, 297_000)),
        "sync": Timer(1_700_000_300_000, 13, SYNC, 6),
        "offset-expiry": Timer(1_700_000_600_000, 2, OFFSET_EXPIRY),
    }
    heap = [(t.deadline_ms, t.seq, k) for k, t in timers.items()]
    heap += [(1_700_000_040_000, 9, "heartbeat-static-1"), (1_699_999_999_000, 5, "join")]  # stale
    heapq.heapify(heap)
    return ClassicGroup(
        group_id="orders-app",
        current_state_timestamp_ms=1_700_000_000_000,
        state=GroupState.PREPARING_REBALANCE,
        previous_state=GroupState.STABLE,
        generation_id=6,
        protocol_type="consumer",
        protocol_name="range",
        leader_id="static-1",
        members={"static-1": static, "dyn-2": joining, "dyn-3": plain},
        static_members={"instance-a": "static-1"},
        pending_members={"pending-z": None, "pending-a": None},
        pending_sync_members={"dyn-3": None, "static-1": None},
        num_awaiting_join=1,
        supported_protocols={"range": 3, "cooperative-sticky": 2},
        subscribed_topics=frozenset({"orders", "payments", "z\u00fcrich"}),
        new_member_added=True,
        offsets={
            ("orders", 3): OffsetAndMetadata(1234, 7, "meta", 1_700_000_000_100, None),
            ("orders", 0): OffsetAndMetadata(0, None, "", 1_700_000_000_200, 1_700_086_400_200),
            ("payments", 11): OffsetAndMetadata(-1, -1, "x" * 5000, 0, 0),
        },
        timers=timers,
        timer_heap=heap,
        timer_seq=14,
        rebalance_reason="Removing member gone-9 on LeaveGroup; client reason: \u00e9t\u00e9",
        clock_ms=1_700_000_000_300,
    )


# -- hand-built groups ----------------------------------------------------------------------------


def test_the_model_has_exactly_the_fields_the_snapshot_knows() -> None:
    """A new field in the model needs a new snapshot version: this test says when."""
    names = {cls.__name__: [f.name for f in dataclasses.fields(cls)] for cls in (
        ClassicGroup, Member, OffsetAndMetadata, ParkedRequest, Timer
    )}  # fmt: skip
    assert names == {
        "ClassicGroup": [
            "group_id", "current_state_timestamp_ms", "state", "previous_state", "generation_id",
            "protocol_type", "protocol_name", "leader_id", "members", "static_members",
            "pending_members", "pending_sync_members", "num_awaiting_join",
            "supported_protocols", "subscribed_topics", "new_member_added", "offsets", "timers",
            "timer_heap", "timer_seq", "rebalance_reason", "clock_ms", "undelivered",
        ],
        "Member": [
            "member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
            "session_timeout_ms", "protocol_type", "protocols", "assignment", "is_new",
            "awaiting_join", "awaiting_sync",
        ],
        "OffsetAndMetadata": [
            "committed_offset", "leader_epoch", "metadata", "commit_timestamp_ms",
            "expire_timestamp_ms",
        ],
        "ParkedRequest": ["request_id", "api_version"],
        # entry: where the timer's heap entry is, not state (coordinator.group.timers)
        "Timer": ["deadline_ms", "seq", "kind", "payload", "entry"],
    }  # fmt: skip


def test_a_hand_built_group_with_every_field_kind_round_trips() -> None:
    group = hand_built()
    decoded = round_trip(group)
    assert decoded.timers["join"].payload == (3_000, 297_000)
    assert type(decoded.timers["join"].payload) is tuple
    assert decoded.timers["sync"].payload == 6
    assert decoded.timers["heartbeat-dyn-2"].payload == "dyn-2"
    assert decoded.timers["offset-expiry"].payload is None
    parked = decoded.members["dyn-2"].awaiting_join
    assert [type(p.request_id) for p in parked] == [int, str, type(None)]
    assert decoded.members["dyn-2"].client_id == "cl\u00e9-\U0001f600"
    assert decoded.subscribed_topics == frozenset({"orders", "payments", "z\u00fcrich"})


def test_a_join_timer_in_place_of_the_initial_join_one() -> None:
    group = hand_built()
    group.schedule("join", 1_700_000_300_000, 15, JOIN)
    group.timer_seq = 15
    assert round_trip(group).timers["join"] == Timer(1_700_000_300_000, 15, JOIN, None)


@pytest.mark.parametrize("topics", [None, frozenset(), frozenset({"a"}), frozenset({"b", "a"})])
def test_subscribed_topics_none_empty_and_sets(topics: frozenset[str] | None) -> None:
    group = dataclasses.replace(hand_built(), subscribed_topics=topics)
    assert round_trip(group).subscribed_topics == topics


def test_a_non_consumer_group_round_trips() -> None:
    member = consumer_member(
        "worker-1", protocol_type="connect", protocols=[("default", b"\x00\xff" * 40)]
    )
    group = ClassicGroup(
        group_id="connect-cluster",
        current_state_timestamp_ms=None,
        state=GroupState.STABLE,
        previous_state=GroupState.COMPLETING_REBALANCE,
        generation_id=3,
        protocol_type="connect",
        protocol_name="default",
        leader_id="worker-1",
        members={"worker-1": member},
        supported_protocols={"default": 1},
    )
    round_trip(group)


@pytest.mark.parametrize("state", list(GroupState))
def test_every_state_and_a_fresh_empty_group(state: GroupState) -> None:
    round_trip(ClassicGroup(group_id="g", current_state_timestamp_ms=None, state=state))
    round_trip(ClassicGroup(group_id="", current_state_timestamp_ms=0, previous_state=state))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        1,
        -1,
        2**63,
        -(2**200),
        1.5,
        -0.0,
        "",
        "r1",
        "\ud800 lone surrogate",
        b"\x00raw",
        [1, "two", None],
        (1, (2, 3)),
        {"a": [1, {"b": (True, None)}], 5: "int key"},
    ],
)
def test_any_value_as_a_request_id_or_a_timer_payload(value: Any) -> None:
    group = hand_built()
    group.members["dyn-2"].awaiting_join[0].request_id = value
    group.timers["sync"].payload = value
    decoded = round_trip(group)
    assert_same_types(decoded.members["dyn-2"].awaiting_join[0].request_id, value)
    assert_same_types(decoded.timers["sync"].payload, value)


def test_a_value_of_another_type_cannot_be_encoded() -> None:
    group = hand_built()
    group.timers["sync"].payload = {1, 2}
    with pytest.raises(TypeError, match="set"):
        encode_group(group)


def test_strings_and_bytes_beyond_kafka_limits_and_huge_numbers() -> None:
    group = hand_built()
    group.group_id = "g" * 70_000
    group.members["dyn-3"].assignment = bytes(range(256)) * 1000
    group.generation_id = -(2**70)
    group.timer_seq = 2**64
    round_trip(group)


def test_integers_of_up_to_14335_bits_and_a_sign() -> None:
    group = hand_built()
    group.timers["sync"].payload = (2**14335 - 1, -(2**14335))
    assert round_trip(group).timers["sync"].payload == (2**14335 - 1, -(2**14335))
    group.timers["sync"].payload = 2**14335
    with pytest.raises(ValueError, match="range"):
        encode_group(group)


@pytest.mark.parametrize(
    "ids", [["-", "a-", "-a", "a-b", "b"], ["x-y-z", "y-z", "z", "heartbeat-"]], ids=str
)
def test_member_ids_with_dashes_and_composed_keys(ids: list[str]) -> None:
    """Texts may be written as "<prefix>-" + an earlier text: odd dashes change nothing."""
    group = hand_built()
    for member_id in ids:
        group.members[member_id] = consumer_member(member_id)
        group.schedule("heartbeat-" + member_id, 5, group.timer_seq + 1, HEARTBEAT, member_id)
        group.timer_seq += 1
    group.static_members = {f"{i}-{i}": i for i in ids}
    round_trip(group)


def v7_parts(blob: bytes) -> tuple[int, bytes, bytes]:
    """(codec, untimed part as written, timed part) of a version-7 blob."""
    assert blob[0] == 7
    codec, length, start, shift = blob[1], 0, 2, 0
    while True:  # the stored untimed part's length, a varint
        length |= (blob[start] & 0x7F) << shift
        start += 1
        if blob[start - 1] < 0x80:
            break
        shift += 7
    stored, timed = blob[start : start + length], blob[start + length : -4]
    return codec, zlib.decompress(stored) if codec == 1 else stored, timed


def test_a_heartbeat_key_is_not_spelt_out_again() -> None:
    group = hand_built()
    codec, untimed, timed = v7_parts(encode_group(group))
    assert codec == 1  # compressed
    body = untimed + timed
    assert body.count(b"static-1") == 1 and b"heartbeat-static-1" not in body


def test_a_member_stored_under_another_key_keeps_its_key() -> None:
    group = hand_built()
    group.members = {"other-key": group.members["dyn-3"], **group.members}
    decoded = round_trip(group)
    assert list(decoded.members) == ["other-key", "static-1", "dyn-2", "dyn-3"]


def test_identical_groups_encode_identically_and_the_version_comes_first() -> None:
    assert encode_group(hand_built()) == encode_group(hand_built())
    assert encode_group(hand_built())[0] == SNAPSHOT_VERSION == 7


#: A version-1 blob as this release wrote it: later releases must still read it.
GOLDEN_V1 = bytes.fromhex(
    "01"  # version 1
    "00"  # codec: raw body
    "0667"  # group_id: a new string of 1 byte (1 << 2 | 2), "g"
    "81a0abfef962"  # current_state_timestamp_ms: zigzag + 1 of its difference from 0
    "0302"  # state Stable (3), previous state CompletingRebalance (2)
    "02"  # generation_id 1 (zigzag)
    "22636f6e73756d6572"  # protocol_type "consumer"
    "1672616e6765"  # protocol_name "range"
    "00"  # leader_id None
    "00000000"  # no members, static members, pending members, pending-sync members
    "00"  # num_awaiting_join 0
    "00"  # no supported protocols
    "00"  # subscribed_topics None
    "00"  # new_member_added False
    "000000"  # no offsets, timers, heap entries
    "00"  # timer_seq 0
    "95a82fcb"  # CRC-32
)


def golden_group() -> ClassicGroup:
    return ClassicGroup(
        group_id="g",
        current_state_timestamp_ms=1_700_000_000_000,
        state=GroupState.STABLE,
        previous_state=GroupState.COMPLETING_REBALANCE,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
    )


def test_a_version_1_blob_still_decodes() -> None:
    blob = encode_group(golden_group())
    assert decode_group(blob) == golden_group()
    # GOLDEN_V1 is frozen: version 1 is no longer written, only read.
    assert decode_group(GOLDEN_V1) == golden_group()


#: Version 2 appends the rebalance reason to version 1's body.
GOLDEN_V2 = bytes.fromhex(
    "02"  # version 2
    "00"  # codec: raw body
    "0667"
    "81a0abfef962"
    "0302"
    "02"
    "22636f6e73756d6572"
    "1672616e6765"
    "00"
    "00000000"
    "00"
    "00"
    "00"
    "00"
    "000000"
    "00"  # version 1's body, as in GOLDEN_V1
    "0e776879"  # rebalance_reason: a new string of 3 bytes (3 << 2 | 2), "why"
    "5ff5b9a8"  # CRC-32
)


def test_a_version_2_blob_holds_the_rebalance_reason() -> None:
    group = golden_group()
    group.rebalance_reason = "why"
    # GOLDEN_V2 is frozen: version 2 is no longer written, only read (without a clock).
    assert decode_group(GOLDEN_V2) == group
    assert decode_group(GOLDEN_V2).clock_ms is None


#: Version 3 appends the group's clock to version 2's body.
GOLDEN_V3 = bytes.fromhex(
    "03"  # version 3
    "00"  # codec: raw body
    "0667"
    "81a0abfef962"
    "0302"
    "02"
    "22636f6e73756d6572"
    "1672616e6765"
    "00"
    "00000000"
    "00"
    "00"
    "00"
    "00"
    "000000"
    "00"  # version 1's body, as in GOLDEN_V1
    "0e776879"  # rebalance_reason "why", as in GOLDEN_V2
    "e907"  # clock_ms: zigzag + 1 of its difference from the last time written (+500 ms)
    "ed1ba6a0"  # CRC-32
)


def test_a_version_3_blob_holds_the_clock() -> None:
    group = golden_group()
    group.rebalance_reason = "why"
    group.clock_ms = 1_700_000_000_500
    # GOLDEN_V3 is frozen: version 3 is no longer written, only read (nothing undelivered).
    assert decode_group(GOLDEN_V3) == group
    assert decode_group(GOLDEN_V3).undelivered is None


#: Version 5 appends the timers waiting for their answers' delivery to version 3's body.
GOLDEN_V5 = bytes.fromhex(
    "05"  # version 5
    "00"  # codec: raw body
    "0667"
    "81a0abfef962"
    "0302"
    "02"
    "22636f6e73756d6572"
    "1672616e6765"
    "00"
    "00000000"
    "00"
    "00"
    "00"
    "00"
    "000000"
    "00"  # version 1's body, as in GOLDEN_V1
    "0e776879"  # rebalance_reason "why", as in GOLDEN_V2
    "e907"  # clock_ms, as in GOLDEN_V3
    "01"  # undelivered: answered_ms, zigzag + 1 of its difference from the last time (0)
    "06"  # after_seq 3: zigzag of its difference from the last seq (0)
    "c801"  # tag: zigzag of its difference from the last time (+100)
    "df57e73a"  # CRC-32
)


def test_a_version_5_blob_holds_the_undelivered_timers() -> None:
    group = golden_group()
    group.rebalance_reason = "why"
    group.clock_ms = 1_700_000_000_500
    group.undelivered = Undelivered(1_700_000_000_500, 3, 1_700_000_000_600)
    assert decode_group(GOLDEN_V5) == group
    # Version 7 holds the same body, its untimed part (here raw) apart from its timed part.
    assert GOLDEN_V5[0] == 5 and GOLDEN_V5[1] == 0
    body = GOLDEN_V5[2:-4]
    # Up to the timers: version 1's body without its timer and heap counts and timer sequence.
    untimed = GOLDEN_V1[2:-4][:-3]
    assert body.startswith(untimed)
    head = bytes((7, 0, len(untimed))) + untimed
    golden_v7 = head + body[len(untimed) :]
    golden_v7 += zlib.crc32(golden_v7).to_bytes(4, "big")
    assert v7_parts(golden_v7) == (0, untimed, body[len(untimed) :])
    assert encode_group(group) == golden_v7, encode_group(group).hex()
    group.undelivered = None
    assert decode_group(encode_group(group)) == group


def test_a_consumer_groups_undelivered_timers_round_trip() -> None:
    """A consumer group's blob (version 6) keeps its undelivered timers; a version-4 blob (the
    same body without them) still decodes, with none."""
    join = heartbeat_request("j", "m-1", 0)
    result = step(None, "g", [join], 1_000, CoordinatorConfig(), SequentialIds(),
                  answer_tag=1_100)  # fmt: skip
    group = result.group
    assert group is not None and group.undelivered is not None
    blob = encode_group(group)
    assert blob[0] == 6
    decoded = decode_group(blob)
    assert decoded.undelivered == group.undelivered
    assert encode_group(decoded) == blob
    group.undelivered = None
    body = encode_group(group)
    old = zlib.decompress(body[2:-4]) if body[1] == 1 else body[2:-4]
    v4 = frame_v1(0, old[:-1], version=4)  # version 6's body without its last field (None)
    assert decode_group(v4) == group


#: Real version-1 blobs, written by the release before version 2 (``encode_group`` of
#: ``hand_built()`` without its rebalance reason, and of ``v1_engine_group()``'s group): both
#: zlib-compressed. They must decode as long as a checkpoint may hold them.
HAND_BUILT_V1 = bytes.fromhex(
    "0101789cedd8bf6a1b311c0770fd39dda56d928333313483438df1e0a2a417432174edd20e1df206f25971d4"
    "daba43ba965ca6e60962c8d2a19050b284d2123a171ac892cd7e82f411ea351decea1cf01b74fb7d349c74fa"
    "e9fbbb5bd54a4d571acb45961d9d7d9dde75305dae27a9b6ef07d2548dd03d59b7b9c855c2631ab494760b9d"
    "482ed693be923a6f6ec5cf36cb115f8d1ac35f8c126610450861e4df47cf1cb746b3b9d7499a66d2b8c00f92"
    "5b17fbaec02d8485b5aaa7651721c26ab6d00937f143baeba36ab7d07c1b3593fef5059f9c7efab8b2e88343"
    "4c30a5ab4bacf636559a9beda8ec333fd1468f56a6ae5d589662c658b9831f04a49949dd55bac70f1733411e"
    "0784303ff4bcf5fb4fae67a218b89fb3b5c3eb9f4625fb986ef8e795301ac85cdc60b4e1c2c80d3e9afcd87d"
    "52c5e4cb677c000000000000000000000000f8ef8e4f6ec77f3b9879ad7d294cde9122e7c1f0f7e5f4ae536d"
    "2e5eb1c07b5a1987fe16ab44e5d5e19f5346bdbad22a57a2cfdb4b844e36e9f8ac11953791ee4976e8f2f374"
    "6fcfca9ccb834c99e26ad4587b8182d1f7577efbf296457119d19e97ceb766df5eaef2e11b8ffbff007fc7c1"
    "f929defe41"
)
ENGINE_V1 = bytes.fromhex(
    "0101789c634bdfba70f5bf9f49cc4c4c4ac9f979c5a5b9a94562458979e9a9f318330d750da000ccd0350111"
    "16302e141832b173651a4a25e764a6e69568e91b1a99eb1900a1e10bf617eccc4cac490ccc0c0c0c8c0c4c25"
    "86ff8100c866f80f065a45f9a5792945f94999794c44db05d2be8e116217311a8c18b879c10e616465244d1f"
    "c8d19cec40928995859f8989abc490815198818b812d978181d92c3f2dad38b54437b5a220b3a8f28e0f9338"
    "038b56466a625149526a62892efb671721353897959d45529081499655909581519a8149fe8b8bb0f8864615"
    "26691136791e0001655cee5e0aaa55"
)


def v1_engine_group() -> ClassicGroup:
    """A static leader and a dynamic follower joined, synced and committed through ``step``: the
    group ENGINE_V1 was encoded from (before groups had a rebalance reason)."""
    d = Driver()
    d.step(
        [d.join("s1", instance="i1", protos=[("range", sub("t1")), ("roundrobin", b"")])],
        1_700_000_000_000,
    )
    leader = d.members[0]
    d.step([d.join(2, "")], now=1_700_000_000_005)
    follower = d.members[1]
    d.step([d.join(3, follower)], now=1_700_000_000_010)
    d.tick(40)
    d.tick(40)
    gen = d.generation()
    d.step([d.sync("s4", leader, gen, {m: m.encode() for m in d.members}, instance="i1")])
    d.step([d.sync(5, follower, gen)])
    d.step([d.commit(6, {("t1", 0): 5}, member_id=follower, generation=gen)])
    assert d.group is not None and d.state() is GroupState.STABLE
    return d.group


def test_real_version_1_blobs_still_decode_without_a_reason() -> None:
    assert HAND_BUILT_V1[0] == ENGINE_V1[0] == 1
    old = dataclasses.replace(hand_built(), rebalance_reason=None, clock_ms=None)
    assert decode_group(HAND_BUILT_V1) == old
    live = v1_engine_group()
    assert live.rebalance_reason is not None  # today's engine records why it rebalanced
    decoded = decode_group(ENGINE_V1)
    assert decoded.rebalance_reason is None
    assert decoded.clock_ms is None
    # ENGINE_V1 was encoded when every group's expiry sweep fell at a whole multiple of the
    # interval; today's engine arms it at the phase of the group's offsets partition.
    old_sweep = 1_700_000_005_000
    assert decoded.timers["offset-expiry"].deadline_ms == old_sweep
    assert live.timers["offset-expiry"].deadline_ms != old_sweep
    live.timers["offset-expiry"].deadline_ms = old_sweep
    assert decoded == dataclasses.replace(live, rebalance_reason=None, clock_ms=None)
    # A decoded version-1 group is written back in the newest version.
    assert decode_group(encode_group(decoded)) == decoded
    assert encode_group(decoded)[0] == SNAPSHOT_VERSION


# -- corrupt input --------------------------------------------------------------------------------


def test_empty_bytes() -> None:
    with pytest.raises(SnapshotError, match="empty"):
        decode_group(b"")


@pytest.mark.parametrize("version", [0, 8, 127, 300])
def test_unknown_versions(version: int) -> None:
    blob = bytearray(encode_group(hand_built()))
    varint = bytearray()
    n = version
    while n > 0x7F:
        varint.append((n & 0x7F) | 0x80)
        n >>= 7
    varint.append(n)
    with pytest.raises(SnapshotError, match=f"unknown snapshot version {version}"):
        decode_group(bytes(varint + blob[1:]))


@pytest.mark.parametrize("group", [hand_built(), golden_group()], ids=["compressed", "raw"])
def test_every_truncation_and_every_flipped_byte(group: ClassicGroup) -> None:
    blob = encode_group(group)
    for n in range(len(blob)):
        with pytest.raises(SnapshotError):
            decode_group(blob[:n])
    for i in range(len(blob)):
        damaged = bytearray(blob)
        damaged[i] ^= 0x5A
        with pytest.raises(SnapshotError):
            decode_group(bytes(damaged))
    with pytest.raises(SnapshotError):
        decode_group(blob + b"\x00")


def test_a_timed_part_read_alone_refuses_every_damage() -> None:
    """:func:`decode_timed` checks the CRC and the timed part as :func:`decode_group` does, and
    refuses a blob whose untimed part is not the one given, even by one byte."""
    group = hand_built()
    blob, untimed = encode_classic_group(group)
    later = copy.deepcopy(group)
    later.timer_seq += 1
    later.schedule("heartbeat-static-1", 99, later.timer_seq, "heartbeat", "static-1")
    new, same = encode_classic_group(later, untimed)
    assert same is untimed and new == encode_group(later)
    assert decode_timed(new, decode_group(blob), untimed) == later
    for n in range(len(untimed.head), len(new)):
        with pytest.raises(SnapshotError):
            decode_timed(new[:n], decode_group(blob), untimed)
    for i in range(len(new)):
        damaged = bytearray(new)
        damaged[i] ^= 0x5A
        with pytest.raises(SnapshotError):
            decode_timed(bytes(damaged), decode_group(blob), untimed)
    with pytest.raises(SnapshotError):
        decode_timed(new + b"\x00", decode_group(blob), untimed)


def test_a_version_7_untimed_part_must_end_where_its_length_says() -> None:
    codec, untimed, timed = v7_parts(encode_group(golden_group()))
    assert codec == 0
    for cut in (len(untimed) - 1, len(untimed) + 1):
        head = bytes((7, 0, cut)) + (untimed + timed)[:cut]
        blob = head + (untimed + timed)[cut:]
        blob += zlib.crc32(blob).to_bytes(4, "big")
        with pytest.raises(SnapshotError):
            decode_group(blob)


def test_an_endless_varint_is_refused_quickly() -> None:
    with pytest.raises(SnapshotError, match="too long"):
        decode_group(b"\xff" * 10_000_000)


def test_not_bytes_at_all() -> None:
    with pytest.raises(SnapshotError):
        decode_group("a string")  # type: ignore[arg-type]


@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    with pytest.raises(SnapshotError):
        decode_group(data)


def frame_v1(codec: int, body: bytes, version: int = 1) -> bytes:
    head = bytes((version, codec))
    return head + body + zlib.crc32(head + body).to_bytes(4, "big")


@given(
    body=st.binary(max_size=200)
    | st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x7F, 0x80, 0xFF])).map(bytes),
    codec=st.sampled_from([0, 1, 2]),
)
def test_random_bodies_in_a_valid_frame(body: bytes, codec: int) -> None:
    """Past the CRC, the body decoder itself never raises anything but SnapshotError."""
    if codec == 1:
        body = zlib.compress(body)
    try:
        group = decode_group(frame_v1(codec, body))
    except SnapshotError:
        return
    assert isinstance(group, ClassicGroup)  # zeros can spell a valid minimal group


def test_a_body_with_bytes_left_over() -> None:
    blob = encode_group(golden_group())
    with pytest.raises(SnapshotError, match="left over"):
        decode_group(frame_v1(0, blob[2:-4] + b"\x00", version=SNAPSHOT_VERSION))


# -- real engine states ---------------------------------------------------------------------------

STEP_CONFIG = CoordinatorConfig(
    group_min_session_timeout_ms=10,
    group_max_session_timeout_ms=100_000,
    group_initial_rebalance_delay_ms=30,
    group_max_size=4,
    offsets_retention_minutes=1,
    offsets_retention_check_interval_ms=5_000,
    offsets_topic_num_partitions=3,
)


def sub(*topics: str) -> bytes:
    return encode_subscription(Subscription(topics=topics))


class Driver:
    """One group driven through :func:`step`, as the Spark job drives it, checking before every
    step that continuing from a decoded snapshot gives what continuing from the live state gives,
    and after every step that the new state round-trips."""

    def __init__(self, config: CoordinatorConfig = STEP_CONFIG, group_id: str = "g") -> None:
        self.config = config
        self.group_id = group_id
        self.group: ClassicGroup | None = None
        self.ids = SequentialIds()
        self.now = 0
        self.members: list[str] = []
        self.answers: dict[Any, dict[str, Any]] = {}
        self.steps = 0
        #: Steps after which the new blob's group was read from its timed part alone.
        self.timed_reads = 0

    def step(self, requests: list[dict[str, Any]], now: int | None = None) -> None:
        if now is not None:
            self.now = now
        twin = None
        before = None
        if isinstance(self.group, ClassicGroup):
            blob, untimed = encode_classic_group(self.group)
            before = (decode_group(blob), untimed)
        if self.group is not None:
            decoded = round_trip(self.group)
            twin = step(
                decoded,
                self.group_id,
                copy.deepcopy(requests),
                self.now,
                self.config,
                copy.deepcopy(self.ids),
            )
        result = step(
            self.group, self.group_id, copy.deepcopy(requests), self.now, self.config, self.ids
        )
        if twin is not None:
            assert twin.responses == result.responses
            assert twin.records == result.records
            assert twin.next_deadline_ms == result.next_deadline_ms
            assert twin.group == result.group
        self.group = result.group
        if self.group is not None:
            round_trip(self.group)
        if before is not None and isinstance(self.group, ClassicGroup):
            # The group before the step, decoded, with the timed part of the group's new blob
            # read onto it, is the new blob's group when the untimed parts are the same bytes.
            earlier, untimed = before
            blob = encode_group(self.group)
            if blob.startswith(untimed.head):
                assert decode_timed(blob, earlier, untimed) == self.group
                self.timed_reads += 1
            else:
                with pytest.raises(SnapshotError, match="does not start with"):
                    decode_timed(blob, earlier, untimed)
        self.steps += 1
        seen = [r["member_id"] for r in result.responses if r["api"] == "join_group"]
        if self.group is not None:
            seen += [*self.group.pending_members, *self.group.members]
        for member_id in seen:
            if member_id and member_id not in self.members:
                self.members.append(member_id)
        for response in result.responses:
            self.answers[response["request_id"]] = response

    def tick(self, ms: int) -> None:
        self.step([], self.now + ms)

    def generation(self) -> int:
        return 0 if self.group is None else self.group.generation_id

    def state(self) -> GroupState | None:
        return None if self.group is None else self.group.state

    # requests (Kafka's field names) ------------------------------------------------------------

    def join(
        self,
        rid: Any,
        member_id: str = "",
        *,
        instance: str | None = None,
        protos: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        version: int = 9,
        session: int = 500,
        rebalance: int = 500,
    ) -> dict[str, Any]:
        return {
            "api": "join_group",
            "request_id": rid,
            "group_id": self.group_id,
            "member_id": member_id,
            "group_instance_id": instance,
            "client_id": "client",
            "client_host": "/127.0.0.1",
            "session_timeout_ms": session,
            "rebalance_timeout_ms": rebalance,
            "protocol_type": protocol_type,
            "protocols": protocols(protos or [("range", sub("t1"))]),
            "api_version": version,
        }

    def sync(
        self,
        rid: Any,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance: str | None = None,
    ) -> dict[str, Any]:
        return {
            "api": "sync_group",
            "request_id": rid,
            "group_id": self.group_id,
            "member_id": member_id,
            "group_instance_id": instance,
            "generation_id": generation,
            # What the group chose (the member learnt it from its JoinGroup response).
            "protocol_type": (self.group and self.group.protocol_type) or "consumer",
            "protocol_name": (self.group and self.group.protocol_name) or "range",
            "assignments": [
                {"member_id": m, "assignment": a} for m, a in (assignments or {}).items()
            ],
        }

    def heartbeat(
        self, rid: Any, member_id: str, generation: int, instance: str | None = None
    ) -> dict[str, Any]:
        return {
            "api": "heartbeat",
            "request_id": rid,
            "group_id": self.group_id,
            "member_id": member_id,
            "group_instance_id": instance,
            "generation_id": generation,
        }

    def leave(self, rid: Any, *identities: tuple[str, str | None]) -> dict[str, Any]:
        return {
            "api": "leave_group",
            "request_id": rid,
            "group_id": self.group_id,
            "members": [{"member_id": m, "group_instance_id": i} for m, i in identities],
        }

    def commit(
        self,
        rid: Any,
        offsets: dict[tuple[str, int], int],
        *,
        member_id: str = "",
        generation: int = -1,
        retention: int | None = None,
        epoch: int | None = None,
        metadata: str | None = "m",
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "api": "offset_commit",
            "request_id": rid,
            "group_id": self.group_id,
            "member_id": member_id,
            "generation_id": generation,
            "offsets": [
                {
                    "topic": t,
                    "partition": p,
                    "offset": o,
                    "metadata": metadata,
                    **({} if epoch is None else {"leader_epoch": epoch}),
                }
                for (t, p), o in offsets.items()
            ],
        }
        if retention is not None:
            request["retention_time_ms"] = retention
            request["api_version"] = 2
        return request

    def fetch(self, rid: Any) -> dict[str, Any]:
        return {
            "api": "offset_fetch",
            "request_id": rid,
            "group_id": self.group_id,
            "partitions": None,
        }


def test_a_scripted_life_through_step_round_trips_and_continues_identically() -> None:
    d = Driver()
    # A static member and two dynamic ones join; the dynamic ones first get MEMBER_ID_REQUIRED.
    d.step([d.join("s1", instance="i1", protos=[("range", sub("t1")), ("roundrobin", b"")])])
    leader = d.members[0]
    d.step([d.join(2, ""), d.join(3, "", protocol_type="consumer")], now=5)
    dyn_a, dyn_b = d.members[1:3]
    assert d.group is not None and list(d.group.pending_members) == [dyn_a, dyn_b]
    d.step([d.join(4, dyn_a), d.join("5", dyn_b, version=4)], now=10)
    assert d.group.timers["join"].payload == (30, 470)
    d.tick(25)
    d.tick(40)  # the initial rebalance completes
    assert d.state() is GroupState.COMPLETING_REBALANCE
    gen = d.generation()
    d.step([d.sync(7, dyn_a, gen)], now=76)  # a follower syncs first: parked
    assert d.group is not None and d.group.members[dyn_a].awaiting_sync
    d.step([d.sync("s6", leader, gen, {m: m.encode() for m in d.members}, instance="i1")])
    d.step([d.heartbeat(8, dyn_b, gen)], now=80)
    d.step([d.sync(9, dyn_b, gen)], now=85)
    assert d.state() is GroupState.STABLE
    d.step([d.commit(10, {("t1", 0): 5, ("t1", 1): 7}, member_id=dyn_a, generation=gen, epoch=3)])
    d.step([d.commit("11", {("t2", 0): 9}, retention=1, metadata=None)], now=90)
    for t in range(100, 400, 60):  # heartbeats re-arm timers: stale heap entries pile up
        d.step([d.heartbeat(f"hb{t}-{m}", m, gen) for m in d.members], now=t)
    d.step([d.fetch("f1"), d.leave(12, (dyn_b, None))], now=410)  # a rebalance starts
    d.step([d.join(13, dyn_a), d.join("14", leader, instance="i1")], now=420)
    d.step([d.sync(15, dyn_a, d.generation())], now=430)  # the leader never syncs
    d.tick(1_500)  # the sync times out: back to PreparingRebalance, then the sessions expire
    d.tick(10_000)  # offset sweeps run
    d.step([d.join("s16", instance="i1")], now=d.now + 1)  # the static member comes back
    d.tick(200_000)
    d.step([d.leave(17, ("", "i1"))], now=d.now + 1)
    assert d.state() is GroupState.EMPTY and d.group is not None and d.group.offsets
    d.step([{"api": "delete_groups", "request_id": 18, "group_id": "g"}])
    assert d.state() is None and d.answers[18]["error"] is None
    assert d.steps == 25


def test_every_group_of_the_facade_round_trips_after_every_call() -> None:
    """The standard fixture (tests.support.Ctx) through GroupCoordinator: every group, after
    every request and clock move, round-trips."""

    class SnapshotCtx(Ctx):
        checks = 0

        def _seen(self, out: list[dict[str, Any]]) -> None:
            super()._seen(out)
            for group_id in self.c.group_ids():
                group = self.c.group(group_id)
                assert group is not None
                round_trip(group)
                SnapshotCtx.checks += 1

    ctx = SnapshotCtx()
    leader, follower = ctx.static_pair()
    ctx.commit({("foo", 0): (5, "meta", 2), ("foo", 1): 6}, member_id=leader, generation=1)
    ctx.heartbeat(follower, 1, instance_id="follower")
    newcomer, _rid = ctx.dynamic_join()  # a rebalance: the static pair must rejoin
    ctx.join(leader, instance_id="leader", protos=[("range", b""), ("roundrobin", b"")])
    ctx.sleep(REBALANCE + 1)  # the follower is dropped by the rebalance timeout
    ctx.leave([(newcomer, None)])
    ctx.sleep(1_000)
    ctx.fetch()
    ctx.commit({("bar", 0): 1}, group_id="simple", retention_ms=10)  # a group of offsets only
    ctx.sleep(700_000)
    ctx.delete_group("simple")
    assert SnapshotCtx.checks > 10


GROUP_SIZE = 4
INSTANCES = [None, None, "i1", "i2"]
PROTOCOL_SETS = [
    [("range", sub("t1"))],
    [("range", sub("t1", "t2")), ("roundrobin", sub("t1", "t2"))],
    [("roundrobin", sub("t2")), ("range", sub("t2"))],
    [("range", b"\xff\x01")],  # a subscription that does not parse
    [("sticky", b"")],  # incompatible with the others
]


request_params = st.fixed_dictionaries(
    {
        "api": st.sampled_from(
            ["join"] * 3 + ["sync"] * 3 + ["heartbeat", "leave", "commit", "fetch", "delete"]
        ),
        # Who sends it: a member, a pending member, a former member, "" or a bogus id.
        "member": st.integers(0, 11),
        "instance": st.sampled_from(INSTANCES),
        "protocols": st.sampled_from(PROTOCOL_SETS),
        "protocol_type": st.sampled_from(["consumer"] * 5 + ["connect"]),
        "version": st.sampled_from([3, 4, 9]),
        "session": st.sampled_from([50, 500, 500, 5_000]),
        "generation": st.sampled_from([0, 0, 0, 0, -1, 1]),  # added to the current generation
        "int_rid": st.booleans(),
        "assign": st.booleans(),
        "partitions": st.lists(st.integers(0, 2), min_size=1, max_size=3),
        "retention": st.sampled_from([None, 1, 100_000]),
    }
)
#: (clock advance, requests): a step with no request is a clock jump that fires timers.
busy_step = st.tuples(
    st.sampled_from([0, 0, 1, 5, 20]), st.lists(request_params, min_size=1, max_size=3)
)
idle_step: st.SearchStrategy[tuple[int, list[dict[str, Any]]]] = st.tuples(
    st.sampled_from([10, 60, 600, 6_000, 70_000]), st.just([])
)
steps = st.lists(st.one_of(busy_step, busy_step, busy_step, idle_step), min_size=8, max_size=50)


def random_request(d: Driver, p: dict[str, Any], request_id: Any) -> dict[str, Any]:
    group = d.group
    members = list(group.members) if group is not None else []
    pending = list(group.pending_members) if group is not None else []
    pick = p["member"]
    if p["api"] == "sync" and p["assign"] and group is not None and group.leader_id:
        member = group.leader_id  # the leader sends the assignments
    elif 5 <= pick <= 8 and pending:
        member = pending[pick % len(pending)]
    elif pick <= 8 and members:
        member = members[pick % len(members)]
    elif pick == 9 and d.members:
        member = d.members[len(d.members) // 2]  # perhaps long gone
    elif pick == 11:
        member = "bogus-member"
    else:
        member = ""
    current = group.members.get(member) if group is not None else None
    instance = current.group_instance_id if current is not None else p["instance"]
    gen = d.generation() + p["generation"]
    api = p["api"]
    if api == "join":
        return d.join(
            request_id,
            member,
            instance=instance,
            protos=p["protocols"],
            protocol_type=p["protocol_type"],
            version=p["version"],
            session=p["session"],
            rebalance=p["session"],
        )
    if api == "sync":
        assignments = {m: f"{m}@{gen}".encode() for m in members} if p["assign"] else {}
        return d.sync(request_id, member, gen, assignments, instance=instance)
    if api == "heartbeat":
        return d.heartbeat(request_id, member, gen, instance)
    if api == "leave":
        return d.leave(request_id, (member, p["instance"]))
    if api == "commit":
        offsets = {("t1", partition): d.now for partition in p["partitions"]}
        return d.commit(
            request_id, offsets, member_id=member, generation=gen, retention=p["retention"]
        )
    if api == "fetch":
        return d.fetch(request_id)
    return {"api": "delete_groups", "request_id": request_id, "group_id": d.group_id}


@given(lives=steps, start=st.sampled_from([0, 1_700_000_000_000]))
def test_random_lives_through_step_round_trip_after_every_step(
    lives: list[tuple[int, list[dict[str, Any]]]], start: int
) -> None:
    """Random requests, stale and bogus member ids and generations, and clock jumps through
    ``step``: every state round-trips and continues identically from its decoded copy."""
    d = Driver()
    d.now = start
    rids = iter(range(1, 1_000))
    for advance, params in lives:
        d.now += advance
        batch = []
        for p in params:  # each request sees the state the previous step left
            rid = next(rids)
            batch.append(random_request(d, p, rid if p["int_rid"] else f"r{rid}"))
        d.step(batch)
    if d.timed_reads:
        event("a step kept the untimed part: its timed part was read alone")


# -- a consumer group at scale (also the subject of the size and speed figures) ---------------------


def consumer_group(n_members: int, n_offsets: int, now: int = 1_700_000_000_000) -> ClassicGroup:
    """A Stable consumer group of ``n_members`` dynamic members built through ``step``: joined,
    synced with real assignments of ``n_offsets`` partitions, heartbeating, and committed."""
    config = CoordinatorConfig(offsets_topic_num_partitions=50)
    ids = SequentialIds()
    topics = ("orders", "payments")
    metadata = sub(*topics)
    protos = protocols([("range", metadata), ("cooperative-sticky", metadata)])

    def join(i: int, member_id: str) -> dict[str, Any]:
        return {
            "api": "join_group",
            "request_id": f"join-{i}-{member_id[:4]}",
            "group_id": "orders-app",
            "member_id": member_id,
            "client_id": f"consumer-orders-app-{i}",
            "client_host": f"/10.1.{i // 256}.{i % 256}",
            "session_timeout_ms": 45_000,
            "rebalance_timeout_ms": 300_000,
            "protocol_type": "consumer",
            "protocols": protos,
        }

    def run(group: ClassicGroup | None, requests: list[dict[str, Any]]) -> StepResult:
        return step(group, "orders-app", requests, now, config, ids)

    first = run(None, [join(i, "") for i in range(n_members)])
    member_ids = [r["member_id"] for r in first.responses]
    now += 100
    joined = run(first.group, [join(i, m) for i, m in enumerate(member_ids)])
    group = joined.group
    while group is not None and group.state is GroupState.PREPARING_REBALANCE:
        now += config.group_initial_rebalance_delay_ms  # the initial delay runs out
        group = run(group, []).group
    assert group is not None and group.state is GroupState.COMPLETING_REBALANCE
    partitions = [(topics[p % 2], p // 2) for p in range(n_offsets)]
    assignments = []
    for i, member_id in enumerate(member_ids):
        mine = [tp for j, tp in enumerate(partitions) if j % n_members == i]
        owned = tuple(TopicPartitions(t, tuple(p for tt, p in mine if tt == t)) for t in topics)
        assignments.append(
            {"member_id": member_id, "assignment": encode_assignment(Assignment(owned))}
        )
    gen = group.generation_id
    syncs = [
        {
            "api": "sync_group",
            "request_id": f"sync-{i}",
            "group_id": "orders-app",
            "member_id": m,
            "generation_id": gen,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": assignments if i == 0 else [],
        }
        for i, m in enumerate(member_ids)
    ]
    now += 50
    group = run(group, syncs).group
    assert group is not None and group.state is GroupState.STABLE
    for _ in range(2):  # heartbeats re-arm every session timer: stale heap entries
        now += 3_000
        beats = [
            {
                "api": "heartbeat",
                "request_id": f"hb-{i}",
                "group_id": "orders-app",
                "member_id": m,
                "generation_id": gen,
            }
            for i, m in enumerate(member_ids)
        ]
        group = run(group, beats).group
    now += 10
    commit = {
        "api": "offset_commit",
        "request_id": "commit",
        "group_id": "orders-app",
        "member_id": member_ids[0],
        "generation_id": gen,
        "offsets": [
            {"topic": t, "partition": p, "offset": 1_000_000 + 17 * p, "leader_epoch": 12}
            for t, p in partitions
        ],
    }
    group = run(group, [commit]).group
    assert group is not None and len(group.offsets) == n_offsets
    return group


@pytest.mark.parametrize("n_members", [10, 1000])
def test_a_large_consumer_group_round_trips(n_members: int) -> None:
    group = consumer_group(n_members, 50)
    assert len(group.members) == n_members
    decoded = round_trip(group)
    assert len(encode_group(decoded)) < 200 * n_members + 2_000
