"""``coordinator.admin.upstream_offsets`` against a stub broker: what is asked (Metadata that
creates no topic, ListOffsets at the highest version both serve), a leader that moves asked
again after a Metadata refresh, and the errors an operator reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.admin.topic_offsets import TopicOffsetsError
from coordinator.admin.upstream_offsets import UpstreamOffsets
from coordinator.gateway import codec
from tests.upstream_support import (
    STUB_LOG_END,
    STUB_LOG_START,
    STUB_PARTITIONS,
    STUB_TIME_OFFSET,
    STUB_TOPIC,
    STUB_VERSIONS,
    StubBroker,
)

NOT_LEADER_OR_FOLLOWER, TOPIC_AUTHORIZATION_FAILED = 6, 29


class MovingLeader(StubBroker):
    """Answers ListOffsets with ``errors`` (one per request, for every partition) first."""

    def __init__(self, errors: list[int], versions: dict[int, tuple[int, int]] | None = None):
        self.errors = list(errors)
        self.table = versions
        super().__init__()

    def _answer(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        answer = super()._answer(api_key, body)
        if api_key == codec.API_VERSIONS and self.table is not None:
            answer["api_keys"] = [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(self.table.items())
            ]
        if api_key == codec.LIST_OFFSETS and self.errors:
            error = self.errors.pop(0)
            for t in answer["topics"]:
                for p in t["partitions"]:
                    p["error_code"], p["offset"] = error, -1
        return answer


@pytest.fixture
def stub() -> Iterator[StubBroker]:
    broker = StubBroker()
    yield broker
    broker.stop()


def test_offsets_are_asked_of_the_leader_once_per_topic_and_timestamp(stub: StubBroker) -> None:
    with UpstreamOffsets([("127.0.0.1", stub.port)]) as upstream:
        assert upstream.partitions(STUB_TOPIC) == list(range(STUB_PARTITIONS))
        assert (STUB_TOPIC, 1) in upstream and (STUB_TOPIC, STUB_PARTITIONS) not in upstream
        for p in range(STUB_PARTITIONS):
            assert upstream.latest((STUB_TOPIC, p)) == STUB_LOG_END
            assert upstream.earliest((STUB_TOPIC, p)) == STUB_LOG_START
            assert upstream.offset_for_time((STUB_TOPIC, p), 1_000) == STUB_TIME_OFFSET
        with pytest.raises(TopicOffsetsError, match="before 1970"):
            upstream.offset_for_time((STUB_TOPIC, 0), -5)
    versions = [(k, v) for k, v in stub.versions if k != codec.API_VERSIONS]
    # Metadata at the stub's highest (v9 of 1-9), ListOffsets at its highest (v5 of 1-5), one
    # ListOffsets per timestamp for all the topic's partitions
    assert versions == [(codec.METADATA, 9)] + [(codec.LIST_OFFSETS, 5)] * 3


def test_a_leader_that_moves_is_asked_again_after_a_metadata_refresh() -> None:
    stub = MovingLeader([NOT_LEADER_OR_FOLLOWER])
    try:
        with UpstreamOffsets([("127.0.0.1", stub.port)]) as upstream:
            assert upstream.latest((STUB_TOPIC, 0)) == STUB_LOG_END
        asked = [k for k, _ in stub.versions if k != codec.API_VERSIONS]
        assert asked == [codec.METADATA, codec.LIST_OFFSETS, codec.METADATA, codec.LIST_OFFSETS]
    finally:
        stub.stop()


def test_errors_name_the_cluster_and_what_it_answered() -> None:
    refused = MovingLeader([TOPIC_AUTHORIZATION_FAILED])
    old = MovingLeader([], versions={**STUB_VERSIONS, codec.LIST_OFFSETS: (0, 0)})
    try:
        with (
            UpstreamOffsets([("127.0.0.1", refused.port)]) as upstream,
            pytest.raises(TopicOffsetsError) as raised,
        ):
            upstream.latest((STUB_TOPIC, 0))
        assert str(raised.value) == (
            f"ListOffsets of {STUB_TOPIC}-0 from the upstream cluster at "
            f"127.0.0.1:{refused.port}: TOPIC_AUTHORIZATION_FAILED"
        )
        with (
            UpstreamOffsets([("127.0.0.1", old.port)]) as upstream,
            pytest.raises(TopicOffsetsError) as raised,
        ):
            upstream.latest((STUB_TOPIC, 0))
        assert str(raised.value) == (
            f"the upstream cluster at 127.0.0.1:{old.port} serves ListOffsets v0-0; asking it "
            "needs v1-7 (Kafka 1.0 or newer)"
        )
    finally:
        refused.stop()
        old.stop()
    with pytest.raises(TopicOffsetsError, match="an upstream server is HOST:PORT"):
        UpstreamOffsets.from_servers("kafka-1")
