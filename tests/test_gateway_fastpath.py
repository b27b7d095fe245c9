"""The hot APIs' straight-line codec equals kio's: the same data from every request kio reads,
the same bytes for every response kio writes, and kio's answer to anything else."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import io
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from coordinator.gateway import apis, codec, fastpath
from coordinator.gateway.log_topic import LogTopic

SERVED = fastpath.served()
#: As many examples as the Hypothesis profile says (tests/conftest.py: 60 here, 400 in CI).
CASES = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

_INTS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}


def _primitive(kafka_type: str) -> st.SearchStrategy[Any]:
    if kafka_type in _INTS:
        bits = _INTS[kafka_type]
        return st.integers(-(2**bits), 2**bits - 1)
    if kafka_type == "string":
        return st.text(max_size=12)
    if kafka_type == "bytes":
        return st.binary(max_size=12)
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type == "timedelta_i32":
        return st.integers(-(2**31), 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "timedelta_i64":  # what a timedelta holds
        return st.integers(-(2**46), 2**46).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "error_code":
        return st.sampled_from(list(ErrorCode))
    if kafka_type == "uuid":
        return st.uuids()
    raise AssertionError(kafka_type)


def entities(cls: type) -> st.SearchStrategy[Any]:
    """Random kio entities of ``cls``: every field, nulls where the schema allows them."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            value: st.SearchStrategy[Any] = st.lists(entities(kind.type_), max_size=3).map(tuple)
        elif isinstance(kind, PrimitiveTupleField):
            inner = _primitive(str(field.metadata["kafka_type"]))
            value = st.lists(inner, max_size=4).map(tuple)
        else:
            value = _primitive(str(field.metadata["kafka_type"]))
        fields[field.name] = st.none() | value if is_optional(field) else value
    return st.fixed_dictionaries(fields).map(lambda kwargs: cls(**kwargs))


@st.composite
def requests(draw: st.DrawFn, served: list[tuple[int, int]] = SERVED) -> tuple[int, int, bytes]:
    """(api key, version, a request frame without its size prefix) kio wrote, of one of
    ``served``."""
    api_key, version = draw(st.sampled_from(served))
    schema = codec.load_request_schema(api_key, version)
    header_schema = schema.__header_schema__
    header = codec.build(
        header_schema,
        {
            "request_api_key": api_key,
            "request_api_version": version,
            "correlation_id": draw(st.integers(-(2**31), 2**31 - 1)),
            "client_id": draw(st.none() | st.text(max_size=8)),
        },
    )
    buffer = io.BytesIO()
    entity_writer(header_schema)(buffer, header)
    entity_writer(schema)(buffer, draw(entities(schema)))
    return api_key, version, buffer.getvalue()


def kio_decoded(api_key: int, version: int, frame: bytes) -> codec.DecodedRequest:
    header, body, end = codec._read_message(api_key, version, "Request", frame)
    assert end == len(frame)
    return codec.DecodedRequest(
        api_key, version, header.correlation_id, header.client_id, codec.plain(body)
    )


def kio_encoded(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    fastpath.enabled = False
    try:
        return codec.encode_response(api_key, version, correlation_id, body)
    finally:
        fastpath.enabled = True


def test_every_version_of_the_hot_apis_that_kio_serves_is_served() -> None:
    expected = {
        (key, v)
        for key in fastpath.HOT_APIS
        for v in range(codec.SUPPORTED[key][0], codec.SUPPORTED[key][1] + 1)
        if not codec.legacy.serves(key, v)
    }
    assert set(SERVED) == expected
    # the versions real clients send (kafka-clients-notes, section 2)
    assert {(12, 4), (12, 3), (8, 9), (8, 8), (8, 2), (9, 9), (9, 8), (9, 1)} <= expected
    assert {(11, 9), (11, 7), (11, 5), (14, 5), (14, 3), (3, 12), (3, 9), (3, 1)} <= expected


@CASES
@given(requests())
def test_a_request_reads_to_what_kio_reads(case: tuple[int, int, bytes]) -> None:
    api_key, version, frame = case
    fast = fastpath.decode_request(frame)
    assert fast is not None
    assert fast == kio_decoded(api_key, version, frame)
    assert codec.decode_request(frame) == fast


@CASES
@given(st.data())
def test_a_response_is_written_byte_for_byte_as_kio_writes_it(data: st.DataObject) -> None:
    api_key, version = data.draw(st.sampled_from(SERVED))
    schema = codec.load_response_schema(api_key, version)
    body = codec.plain(data.draw(entities(schema)))
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    fast = fastpath.encode_response(api_key, version, correlation_id, body)
    assert fast is not None
    assert fast == kio_encoded(api_key, version, correlation_id, body)
    assert codec.encode_response(api_key, version, correlation_id, body) == fast


@CASES
@given(st.data())
def test_a_response_of_another_version_s_fields_is_written_as_kio_writes_it(
    data: st.DataObject,
) -> None:
    """The handlers answer with one dict for every version: fields a version lacks are
    dropped, fields it has but the dict lacks take the schema default, as codec.build does;
    what kio refuses (a required field missing) the fast path declines."""
    api_key = data.draw(st.sampled_from(fastpath.HOT_APIS))
    versions = [v for key, v in SERVED if key == api_key]
    source = codec.load_response_schema(api_key, data.draw(st.sampled_from(versions)))
    body = codec.plain(data.draw(entities(source)))
    for version in versions:
        fast = fastpath.encode_response(api_key, version, 1, body)
        try:
            expected = kio_encoded(api_key, version, 1, body)
        except Exception:
            assert fast is None
        else:
            assert fast == expected


def _mutations(frame: bytes) -> st.SearchStrategy[bytes]:
    position = st.integers(0, max(0, len(frame) - 1))
    return st.one_of(
        st.tuples(position, st.integers(0, 255)).map(
            lambda pv: frame[: pv[0]] + bytes([pv[1]]) + frame[pv[0] + 1 :]
        ),
        position.map(lambda n: frame[:n]),
        st.binary(min_size=1, max_size=6).map(lambda extra: frame + extra),
        st.tuples(position, st.binary(min_size=1, max_size=4)).map(
            lambda pb: frame[: pb[0]] + pb[1] + frame[pb[0] :]
        ),
    )


@CASES
@given(st.data())
def test_a_corrupt_request_is_read_as_kio_reads_it_or_left_to_kio(data: st.DataObject) -> None:
    _, _, frame = data.draw(requests())
    corrupt = data.draw(_mutations(frame))
    fast = fastpath.decode_request(corrupt)
    if fast is None:
        return  # kio reads it (or refuses it) as it always did
    expected = kio_decoded(fast.api_key, fast.api_version, corrupt)
    assert fast == expected


HEARTBEATS = [(k, v) for k, v in SERVED if k == codec.HEARTBEAT]


def _heartbeat_fields(frame: bytes) -> tuple[Any, ...] | None:
    """What :func:`fastpath.read_heartbeat` must give for ``frame``: its fields as
    :func:`fastpath.read_request` reads them (None: not a Heartbeat it reads)."""
    read = fastpath.read_request(frame)
    if read is None or read[0] != codec.HEARTBEAT:
        return None
    _, version, correlation_id, _, body = read
    return (
        version,
        correlation_id,
        body["group_id"],
        body["generation_id"],
        body["member_id"],
        body.get("group_instance_id"),
    )


def _short(text: str | None) -> bool:
    return text is None or len(text.encode()) < 0x7F


@CASES
@given(st.one_of(requests(), requests(HEARTBEATS)))
def test_a_heartbeat_is_read_the_short_way_as_read_request_reads_it(
    case: tuple[int, int, bytes],
) -> None:
    """Every Heartbeat frame (of v4: with ids shorter than 127 bytes) is read the short way, to
    what :func:`fastpath.read_request` (and so kio) reads; any other frame is left to it."""
    api_key, _, frame = case
    short = fastpath.read_heartbeat(frame)
    expected = _heartbeat_fields(frame)
    if api_key != codec.HEARTBEAT:
        assert short is None and expected is None
        return
    assert expected is not None
    if expected[0] < 4 or all(_short(text) for text in (expected[2], expected[4], expected[5])):
        assert short == expected
    else:  # v4 with an id of 127 bytes or more: a varint length, read the long way
        assert short is None


@CASES
@given(st.data())
def test_a_corrupt_heartbeat_is_read_the_short_way_only_as_read_request_reads_it(
    data: st.DataObject,
) -> None:
    _, _, frame = data.draw(requests(HEARTBEATS))
    corrupt = data.draw(_mutations(frame))
    short = fastpath.read_heartbeat(corrupt)
    if short is not None:
        assert short == _heartbeat_fields(corrupt)


@pytest.mark.parametrize("version", [v for _, v in HEARTBEATS])
def test_a_flexible_heartbeat_with_long_ids_is_left_to_read_request(version: int) -> None:
    for size in (126, 127, 300):
        body = {
            "group_id": "g" * size,
            "generation_id": 3,
            "member_id": "m",
            "group_instance_id": "i" if version >= 3 else None,
        }
        frame = codec.encode_request(codec.HEARTBEAT, version, 9, body, client_id="c")[4:]
        expected = _heartbeat_fields(frame)
        assert expected == (version, 9, "g" * size, 3, "m", body["group_instance_id"])
        # v4's compact strings: a varint length from 127 on, read the long way
        long_way = version >= 4 and size >= 127
        assert fastpath.read_heartbeat(frame) == (None if long_way else expected)


def _with_tagged_field(frame: bytes, tag: int) -> bytes:
    """``frame`` (a flexible request whose body ends with an empty tag buffer) with one
    tagged field of two bytes appended to the top-level tag buffer."""
    assert frame[-1] == 0
    return frame[:-1] + bytes([1, tag, 2, 0xAB, 0xCD])


FLEXIBLE = [(k, v) for k, v in SERVED if codec.load_request_schema(k, v).__flexible__]


@CASES
@given(requests(FLEXIBLE), st.integers(0, 100))
def test_an_unknown_tagged_field_is_refused_as_kio_refuses_it(
    case: tuple[int, int, bytes], tag: int
) -> None:
    _, _, frame = case
    assert fastpath.decode_request(frame) is not None
    tagged = _with_tagged_field(frame, tag)
    assert fastpath.decode_request(tagged) is None
    with pytest.raises(codec.FrameError, match="tagged field"):
        codec.decode_request(tagged)
    # a tagged field in the request header v2 likewise
    client_end = 10 + struct.unpack_from(">h", frame, 8)[0]
    in_header = frame[:client_end] + bytes([1, 0, 1, 0xFF]) + frame[client_end + 1 :]
    assert fastpath.decode_request(in_header) is None
    with pytest.raises(codec.FrameError):
        codec.decode_request(in_header)


def test_a_response_kio_refuses_is_left_to_kio() -> None:
    body = {"throttle_time": 0, "error_code": 12345}  # not an error code Kafka knows
    assert fastpath.encode_response(codec.HEARTBEAT, 4, 1, body) is None
    with pytest.raises(ValueError):
        codec.encode_response(codec.HEARTBEAT, 4, 1, body)
    # a required field missing
    assert fastpath.encode_response(codec.HEARTBEAT, 4, 1, {"throttle_time": 0}) is None
    with pytest.raises(ValueError, match="required"):
        codec.encode_response(codec.HEARTBEAT, 4, 1, {"throttle_time": 0})


def test_other_apis_and_versions_are_left_to_kio() -> None:
    frame = codec.encode_request(
        codec.API_VERSIONS, 3, 1, {"client_software_name": "t", "client_software_version": "1"}
    )
    assert fastpath.decode_request(frame[4:]) is None
    commit_v1 = codec.encode_request(
        codec.OFFSET_COMMIT,
        1,
        1,
        {"group_id": "g", "generation_id": -1, "member_id": "", "topics": []},
    )
    assert fastpath.decode_request(commit_v1[4:]) is None
    assert codec.decode_request(commit_v1[4:]).api_version == 1
    assert fastpath.encode_response(codec.FIND_COORDINATOR, 4, 1, {}) is None


async def _no_back_end(request: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError("Metadata does not reach the back end")


def test_the_gateway_s_metadata_answer_is_written_as_kio_writes_it_at_every_version() -> None:
    """Every consumer asks for Metadata before it joins: the answer the gateway makes (topic
    ids, the internal log topic, hundreds of partitions) is written here, as kio writes it."""
    ctx = apis.GatewayContext(
        _no_back_end, {"orders": 200, "audit": 3}, "127.0.0.1", 9092, log_topic=LogTopic(None, 50)
    )
    for version in range(codec.SUPPORTED[codec.METADATA][1] + 1):
        for wanted in (None, [{"name": "orders", "topic_id": None}, {"name": "nope"}]):
            body = asyncio.run(apis.metadata(ctx, version, {"topics": wanted}))
            fast = fastpath.encode_response(codec.METADATA, version, 7, body)
            assert fast is not None, version
            assert fast == kio_encoded(codec.METADATA, version, 7, body)


def test_a_topic_id_kio_would_parse_is_left_to_kio() -> None:
    body = {
        "throttle_time": 0,
        "brokers": [],
        "cluster_id": None,
        "controller_id": 0,
        "topics": [
            {
                "error_code": 0,
                "name": "t",
                "topic_id": "2c1a38fa-70ae-4696-9bda-6568275dd2e3",  # a str: codec.build parses it
                "is_internal": False,
                "partitions": [],
                "topic_authorized_operations": 0,
            }
        ],
    }
    assert fastpath.encode_response(codec.METADATA, 12, 1, body) is None
    assert codec.encode_response(codec.METADATA, 12, 1, body) == kio_encoded(
        codec.METADATA, 12, 1, body
    )


def test_the_zero_topic_id_reads_as_kio_reads_it() -> None:
    """kio reads the all-zero uuid (a Metadata request naming topics by name) as None."""
    for version in (10, 12):
        topics = [{"name": "t", "topic_id": None}, {"name": None, "topic_id": uuid.uuid4()}]
        body = {
            "topics": topics,
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        frame = codec.encode_request(codec.METADATA, version, 3, body, client_id="c")[4:]
        fast = fastpath.decode_request(frame)
        assert fast is not None
        assert fast == kio_decoded(codec.METADATA, version, frame)
        assert fast.body["topics"][0]["topic_id"] is None


def test_generated_code_is_readable() -> None:
    text = fastpath.source(codec.HEARTBEAT, 4, "Request")
    assert "group_instance_id" in text and "tagged fields" in text


def test_the_same_metadata_again_is_the_same_answer_encoded_once_per_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Metadata asked again for the same topics (every consumer of a group, at its join) gets
    the same shared answer, encoded once per version and kept: each request its own correlation
    id around the bytes kio writes. A change of what the answer is made of (the nodes of a
    gateway of several processes) makes a new one; an answer filtered by the ACLs is a copy,
    written afresh."""
    from coordinator.gateway.server import Gateway
    from tests.connection_support import connect, run

    encoded: list[int] = []
    encode = codec.encode_response

    def counted(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
        encoded.append(api_key)
        return encode(api_key, version, correlation_id, body)

    monkeypatch.setattr(codec, "encode_response", counted)

    async def test(gateway: Gateway) -> None:
        gateway._ctx.topics["orders"] = 200
        connection, _ = connect(gateway)

        async def metadata(version: int, correlation_id: int, client: str) -> bytes:
            body = {
                "topics": [{"name": "orders", "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            }
            frame = codec.encode_request(
                codec.METADATA, version, correlation_id, body, client_id=client
            )
            answer = await gateway.answer(frame[4:], connection)
            assert answer is not None
            return answer

        for version in (1, 9, 12):
            encoded.clear()
            answers = [await metadata(version, c, f"client-{c}") for c in (5, -7, 2**31 - 1)]
            assert encoded == [codec.METADATA]  # once per version
            shared = await apis.metadata(gateway._ctx, version, {"topics": [{"name": "orders"}]})
            assert isinstance(shared, apis.SharedAnswer)
            for c, answer in zip((5, -7, 2**31 - 1), answers, strict=True):
                assert answer == kio_encoded(codec.METADATA, version, c, dict(shared))
        gateway.set_brokers([(0, "127.0.0.1", gateway.port), (1, "127.0.0.1", 1)])
        encoded.clear()
        moved = await metadata(12, 8, "client")
        assert encoded == [codec.METADATA]
        assert codec.decode_response(codec.METADATA, 12, moved[4:])[1].brokers[1].node_id == 1

    run(test)
