"""``coordinator groups --upstream``: LOG-END-OFFSET, LAG and the resets to the log's ends and
times asked of a real Kafka-protocol cluster (noida-db, from its PyPI wheel) with ListOffsets,
over the admin story's warehouse (``tests/admin_support.py``).

The cluster holds ``orders`` (the story's topic, 6 partitions) and not ``invoices``: partition
``p`` has ``80 + p`` messages, message ``i`` stamped ``T0 + i`` seconds (CreateTime), so the log
end is ``80 + p`` and the first offset at or after ``T0 + k`` seconds is ``k``. The story's
``orders-app`` committed 70 on every partition of ``orders``, ``old-app`` (Empty) 40 and
``billing`` (Empty) 10 on ``invoices`` 0 and 1."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.admin.tables import format_ms
from coordinator.admin.topic_offsets import TopicOffsetsError
from coordinator.admin.upstream_offsets import UpstreamOffsets, sample_times
from coordinator.cli import main
from tests.admin_support import Story, build_story
from tests.upstream_support import closed_port, noida_broker

pytestmark = pytest.mark.slow

TOPIC, PARTITIONS = "orders", 6
#: Ten minutes ago, on a whole second: the first message's timestamp.
T0 = (int(time.time()) - 600) * 1000


def messages(partition: int) -> int:
    return 80 + partition


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A noida-db broker holding ``orders`` as the module docstring says; its bootstrap."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    server = noida_broker()
    bootstrap = f"127.0.0.1:{server.port}"
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            future.result(60)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
        failures: list[Any] = []
        for partition in range(PARTITIONS):
            for i in range(messages(partition)):
                producer.produce(
                    TOPIC,
                    b"%d" % i,
                    partition=partition,
                    timestamp=T0 + i * 1000,
                    on_delivery=lambda error, _: error and failures.append(error),
                )
        assert producer.flush(60) == 0 and not failures, failures
        yield bootstrap
    finally:
        server.stop()


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Story:
    return build_story(tmp_path_factory.mktemp("admin-upstream") / "warehouse")


def groups(capsys: pytest.CaptureFixture[str], story: Story, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["groups", "--warehouse", str(story.warehouse), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines() if line.strip()]


def test_describe_shows_the_clusters_log_end_and_the_lag(
    capsys: pytest.CaptureFixture[str], story: Story, cluster: str
) -> None:
    code, out, _ = groups(
        capsys, story, "--describe", "--group", "orders-app", "--upstream", cluster
    )
    assert code == 0, out
    rows = table(out)
    assert rows[0][:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    figures = sorted((int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows[1:])
    assert figures == [(p, 70, messages(p), messages(p) - 70) for p in range(PARTITIONS)]


def test_describe_reads_the_upstream_from_the_gateway_properties(
    capsys: pytest.CaptureFixture[str], story: Story, cluster: str, tmp_path: Path
) -> None:
    properties = tmp_path / "gateway.properties"
    properties.write_text(f"# the gateway's\nupstream.bootstrap.servers={cluster}\n")
    code, out, _ = groups(
        capsys,
        story,
        "--describe",
        "--group",
        "orders-app",
        "--gateway-conf",
        str(properties),
        "--output",
        "json",
    )
    assert code == 0, out
    (described,) = json.loads(out)["groups"]
    assert sorted(
        (r["partition"], r["log_end_offset"], r["lag"]) for r in described["offsets"]
    ) == [(p, messages(p), messages(p) - 70) for p in range(PARTITIONS)]


def test_a_topic_the_cluster_lacks_shows_dashes_and_a_warning_when_described(
    capsys: pytest.CaptureFixture[str], story: Story, cluster: str
) -> None:
    code, out, err = groups(
        capsys, story, "--describe", "--group", "billing", "--upstream", cluster
    )
    assert code == 0, out
    assert [r[1:6] for r in table(out)[1:]] == [
        ["invoices", "0", "10", "-", "-"],
        ["invoices", "1", "10", "-", "-"],
    ]
    for partition in (0, 1):
        assert (
            f"Warn: the upstream cluster at {cluster} has no partition invoices-{partition}: "
            "its LOG-END-OFFSET and LAG are unknown"
        ) in err


def _planned(out: str) -> dict[int, int]:
    rows = table(out)
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    return {int(r[2]): int(r[3]) for r in rows[1:]}


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (["--to-latest"], {p: messages(p) for p in range(PARTITIONS)}),
        (["--to-earliest"], dict.fromkeys(range(PARTITIONS), 0)),
        # the first message at or after T0 + 5.5 s is message 6
        (["--to-datetime", format_ms(T0 + 5_500)], dict.fromkeys(range(PARTITIONS), 6)),
        # nothing that recent: the log end (Kafka's fallback)
        (["--to-datetime", format_ms(T0 + 3_600_000)], {p: messages(p) for p in range(PARTITIONS)}),
    ],
    ids=["latest", "earliest", "datetime", "datetime-after-the-last-message"],
)
def test_reset_plans_from_the_clusters_offsets(
    capsys: pytest.CaptureFixture[str],
    story: Story,
    cluster: str,
    scenario: list[str],
    expected: dict[int, int],
) -> None:
    code, out, _ = groups(
        capsys,
        story,
        "--reset-offsets",
        "--group",
        "old-app",
        "--topic",
        TOPIC,
        *scenario,
        "--dry-run",
        "--upstream",
        cluster,
    )
    assert code == 0, out
    assert _planned(out) == expected


def test_reset_to_an_offset_beyond_the_log_end_is_clamped_to_it(
    capsys: pytest.CaptureFixture[str], story: Story, cluster: str
) -> None:
    code, out, err = groups(
        capsys,
        story,
        "--reset-offsets",
        "--group",
        "old-app",
        "--topic",
        f"{TOPIC}:2",
        "--to-offset",
        "500",
        "--upstream",
        cluster,
    )
    assert code == 0, out
    assert _planned(out) == {2: messages(2)}
    assert (
        f"New offset (500) is higher than latest offset for topic partition {TOPIC}-2. "
        f"Value will be set to {messages(2)}"
    ) in err


def test_reset_of_a_topic_the_cluster_lacks_is_an_error(
    capsys: pytest.CaptureFixture[str], story: Story, cluster: str
) -> None:
    code, out, _ = groups(
        capsys,
        story,
        "--reset-offsets",
        "--group",
        "billing",
        "--all-topics",
        "--to-latest",
        "--upstream",
        cluster,
    )
    assert code == 1
    assert f"Error: topic 'invoices' does not exist in the upstream cluster at {cluster}" in out


def test_an_unreachable_upstream_is_an_error_naming_it(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    address = f"127.0.0.1:{closed_port()}"
    code, out, _ = groups(
        capsys, story, "--describe", "--group", "orders-app", "--upstream", address
    )
    assert code == 1
    assert f"Error: the upstream cluster at {address} cannot be reached ({address}: " in out
    assert "is it running, and is this its bootstrap address?" in out


def test_the_log_offsets_come_from_one_source(
    capsys: pytest.CaptureFixture[str], story: Story, tmp_path: Path
) -> None:
    code, out, _ = groups(
        capsys,
        story,
        "--describe",
        "--group",
        "orders-app",
        "--upstream",
        "127.0.0.1:9092",
        "--topic-offsets",
        str(story.topic_offsets),
    )
    assert code == 1 and "--topic-offsets and --upstream (or --gateway-conf) exclude" in out
    empty = tmp_path / "gateway.properties"
    empty.write_text("topics=a:1\n")
    code, out, _ = groups(
        capsys, story, "--describe", "--group", "orders-app", "--gateway-conf", str(empty)
    )
    assert code == 1 and f"{empty} has no upstream.bootstrap.servers" in out
    code, out, _ = groups(capsys, story, "--list", "--upstream", "no-port")
    assert code == 1 and "an upstream server is HOST:PORT, got 'no-port'" in out


def test_samples_are_the_log_end_at_each_time(cluster: str) -> None:
    """What the notebook's lag plot draws: the first offset at or after each time, the log end
    after the last message, the log start now."""
    with UpstreamOffsets.from_servers(cluster) as upstream:
        samples = upstream.samples([TOPIC, "invoices"], [T0 - 1, T0 + 2_500, T0 + 10**8])
        assert samples.partitions("invoices") == []
        for p in range(PARTITIONS):
            assert samples.offset_for_time((TOPIC, p), T0 - 1) == 0
            assert samples.offset_for_time((TOPIC, p), T0 + 2_500) == 3
            assert samples.latest((TOPIC, p)) == messages(p)
            assert samples.earliest((TOPIC, p)) == 0
        with pytest.raises(TopicOffsetsError, match=r"partition orders-6 does not exist"):
            upstream.latest((TOPIC, 6))


def test_sample_times_are_the_commits_and_an_even_grid_between() -> None:
    assert sample_times([]) == []
    assert sample_times([50, 10, 50], points=5) == [10, 20, 30, 40, 50]
    assert sample_times([0, 7, 100], points=3) == [0, 7, 50, 100]
    assert sample_times([5], points=3) == [5]
