"""The Kafka wire-protocol gateway: kio codec round trips, bad frames, and real
kafka-python consumers forming a group through the embedded gateway."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest

from coordinator.gateway import codec
from tests.gateway_support import REQUESTS, Running, call, closed, read_frame

# --- the codec, through kio, at the lowest and highest version of each API -----------------------

CASES = [
    (key, version)
    for key, (low, high) in sorted(codec.SUPPORTED.items())
    for version in {low, high}
]


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_codec_round_trip_each_api_lowest_and_highest(gateway: Running, api_key: int, version: int):
    """A request encoded by kio at the version is decoded, served and answered at that version
    (the answer decodes with kio, with nothing left over)."""
    response = call(gateway.port, api_key, version, REQUESTS[api_key])
    assert isinstance(response, dict)
    if api_key == codec.API_VERSIONS:
        assert response["error_code"] == 0
        ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in response["api_keys"]}
        assert ranges == codec.SUPPORTED
    if api_key == codec.FETCH:
        assert response["responses"][0]["partitions"][0]["records"] == b""
        assert response["responses"][0]["partitions"][0]["high_watermark"] == 3
    if api_key == codec.PRODUCE:
        assert response["responses"][0]["partition_responses"][0]["error_code"] == 44
    if api_key == codec.CONSUMER_GROUP_HEARTBEAT:
        assert response["error_code"] == 0 and response["member_epoch"] >= 1, response
        [assigned] = response["assignment"]["topic_partitions"]
        assert assigned["partitions"] == [0, 1, 2, 3, 4, 5] or response["member_epoch"] > 1
    if api_key == codec.CONSUMER_GROUP_DESCRIBE:
        [described] = response["groups"]
        assert described["error_code"] in (0, 69), described
    if api_key == codec.FIND_COORDINATOR:
        if version >= 4:
            assert [c["key"] for c in response["coordinators"]] == ["g", "h"]
            assert all(c["port"] == gateway.port for c in response["coordinators"])
        else:
            assert (response["node_id"], response["port"]) == (0, gateway.port)
    if api_key == codec.METADATA:
        assert len(response["topics"][0]["partitions"]) == 6


def test_api_versions_above_range_gets_unsupported_version_in_v0(gateway: Running):
    frame = bytearray(codec.encode_request(codec.API_VERSIONS, 4, 9, REQUESTS[codec.API_VERSIONS]))
    struct.pack_into(">h", frame, 6, 99)  # the header's api version
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(bytes(frame))
        answer = read_frame(sock)
    assert answer is not None
    correlation_id, response = codec.decode_response(codec.API_VERSIONS, 0, answer)
    assert correlation_id == 9
    assert int(response.error_code) == 35
    assert len(response.api_keys) == len(codec.SUPPORTED)


def test_batched_requests_split_and_merge(gateway: Running):
    for group in ("a", "b"):
        commit = dict(REQUESTS[codec.OFFSET_COMMIT], group_id=group)
        response = call(gateway.port, codec.OFFSET_COMMIT, 9, commit)
        assert response["topics"][0]["partitions"][0]["error_code"] == 0
    fetched = call(
        gateway.port,
        codec.OFFSET_FETCH,
        9,
        {"groups": [{"group_id": "a", "topics": None}, {"group_id": "b", "topics": None}]},
    )
    assert [g["group_id"] for g in fetched["groups"]] == ["a", "b"]
    assert all(g["topics"][0]["partitions"][0]["committed_offset"] == 5 for g in fetched["groups"])
    described = call(
        gateway.port,
        codec.DESCRIBE_GROUPS,
        5,
        {"groups": ["a", "b", "zz"], "include_authorized_operations": False},
    )
    assert [g["group_state"] for g in described["groups"]] == ["Empty", "Empty", "Dead"]
    deleted = call(gateway.port, codec.DELETE_GROUPS, 2, {"groups_names": ["a", "b"]})
    assert [r["error_code"] for r in deleted["results"]] == [0, 0]
    listed = call(gateway.port, codec.LIST_GROUPS, 5, {})
    assert listed["groups"] == []


# --- bad input on the wire ---------------------------------------------------------------------


def _still_serving(port: int) -> None:
    response = call(port, codec.API_VERSIONS, 3, REQUESTS[codec.API_VERSIONS])
    assert response["error_code"] == 0


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\x00\x00\x00\x10" + b"\xff" * 16, id="garbage"),
        pytest.param(struct.pack(">i", 10_000_000), id="oversized-size-prefix"),
        pytest.param(struct.pack(">i", -5), id="negative-size"),
        pytest.param(struct.pack(">ihhi", 8, 9999, 0, 1), id="unknown-api-key"),
        pytest.param(struct.pack(">ihhi", 8, codec.JOIN_GROUP, 42, 1), id="version-out-of-range"),
        pytest.param(
            codec.encode_request(codec.HEARTBEAT, 4, 1, REQUESTS[codec.HEARTBEAT])[:-3],
            id="truncated-body",
        ),
    ],
)
def test_bad_frames_close_only_that_connection(gateway: Running, payload: bytes):
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as bad:
        bystander = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
        bad.sendall(payload)
        if len(payload) > 8 and struct.unpack(">i", payload[:4])[0] > len(payload) - 4:
            bad.shutdown(socket.SHUT_WR)  # the client vanishes mid-request
        assert closed(bad)
        bystander.sendall(
            codec.encode_request(codec.API_VERSIONS, 3, 1, REQUESTS[codec.API_VERSIONS])
        )
        assert read_frame(bystander) is not None
        bystander.close()
    _still_serving(gateway.port)
    assert gateway.gateway.backend.engine.group_ids() == []


def test_silent_client_is_closed_after_idle_timeout(gateway: Running):
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as silent:
        _still_serving(gateway.port)
        started = time.monotonic()
        assert closed(silent)
        assert time.monotonic() - started < 5
    _still_serving(gateway.port)


def test_parked_join_does_not_block_other_connections(gateway: Running):
    join = dict(REQUESTS[codec.JOIN_GROUP], member_id="", group_id="parked")
    first = call(gateway.port, codec.JOIN_GROUP, 9, join)
    assert first["error_code"] == 79  # MEMBER_ID_REQUIRED
    member = first["member_id"]
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as a:
        # A second member joins: its join is parked until the first rejoins (rebalance).
        a.sendall(codec.encode_request(codec.JOIN_GROUP, 5, 1, dict(join, member_id="")))
        time.sleep(0.2)
        _still_serving(gateway.port)
        rejoined = call(gateway.port, codec.JOIN_GROUP, 9, dict(join, member_id=member))
        assert rejoined["error_code"] == 0
        assert rejoined["generation_id"] == 1
        frame = read_frame(a)
        assert frame is not None


# --- real clients ------------------------------------------------------------------------------


@pytest.mark.slow
def test_commits_survive_a_restart_from_the_delta_log(tmp_path: Any):
    warehouse = str(tmp_path / "wh")
    first = Running(warehouse)
    try:
        response = call(first.port, codec.OFFSET_COMMIT, 9, REQUESTS[codec.OFFSET_COMMIT])
        assert response["topics"][0]["partitions"][0]["error_code"] == 0
        assert first.gateway.backend.records_written == 1
    finally:
        first.stop()
    second = Running(warehouse)
    try:
        fetched = call(second.port, codec.OFFSET_FETCH, 7, REQUESTS[codec.OFFSET_FETCH])
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 5
    finally:
        second.stop()


def test_cli_topics_from_options_and_properties(tmp_path: Any):
    from coordinator.cli import build_parser
    from coordinator.gateway.cli import parse_topics

    assert parse_topics(["a:3", " b.c-d:1 ", ""]) == {"a": 3, "b.c-d": 1}
    for bad in ("a", "a:0", ":3", "a:x"):
        with pytest.raises(ValueError):
            parse_topics([bad])
    args = build_parser().parse_args(
        ["gateway", "--listen", "127.0.0.1:0", "--embedded", "--topic", "t:4", "--topic", "u:1"]
    )
    assert (args.command, args.listen, args.topic) == ("gateway", "127.0.0.1:0", ["t:4", "u:1"])
