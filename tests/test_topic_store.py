"""The job's live topics: the warehouse's versioned topic store, its writers (``job.topics`` at
start, ``coordinator topics``, the gateway with the Spark back end), the inbox source that puts
the newest version into each batch's offset, and the operator that assigns a batch from the
version its offset names, the same on a re-run (no Spark here)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli import main
from coordinator.config import CoordinatorConfig
from coordinator.engine import GroupCoordinator
from coordinator.gateway.forwarding import JobBackend
from coordinator.ids import KeyedIds
from coordinator.stream import operator as op
from coordinator.stream import topic_store as store
from coordinator.stream.source import InboxReader, Offset, SequencedInbox
from coordinator.topics import TopicImage, topic_id_for, uuid_from_bytes
from tests.consumer_groups import M1, owned
from tests.test_stream_consumer_groups import heartbeat_request as heartbeat

T = topic_id_for("t")
CONFIG = CoordinatorConfig(group_initial_rebalance_delay_ms=0)


def topics(**counts: int) -> list[dict[str, Any]]:
    return [{"name": n, "topic_id": topic_id_for(n), "partitions": c} for n, c in counts.items()]


# --- the store ---------------------------------------------------------------------------------


def test_each_write_is_the_next_version_a_whole_image_never_changed(tmp_path: Path) -> None:
    d = tmp_path / "topics"
    assert store.versions(d) == [] and store.newest_image(d) is None
    assert store.append(d, topics(t=2), "test")[0] == 0
    version, image = store.append(d, topics(t=4, u=1), "test")
    assert version == 1 and image.version == 1 and image.by_name("t").partitions == 4  # type: ignore[union-attr]
    assert store.read_image(d, 0) == TopicImage.parse(topics(t=2))
    assert store.read_image(d, 0).version == 0
    assert store.append_if_changed(d, topics(u=1, t=4), "test") is None  # same image
    assert store.append_if_changed(d, topics(t=4), "test") == 2
    assert sorted(p.name for p in d.iterdir()) == [f"{v:016d}.json" for v in (0, 1, 2)]
    with pytest.raises(ValueError):
        store.append(d, [{"name": "x", "topic_id": "bad", "partitions": 1}], "test")
    assert store.versions(d) == [0, 1, 2]  # a refused list writes nothing


def test_two_writers_never_publish_one_version_twice(tmp_path: Path) -> None:
    d = tmp_path / "topics"
    written: list[int] = []
    lock = threading.Lock()

    def writer(index: int) -> None:
        for round_ in range(5):
            version, _ = store.append(d, topics(**{f"w{index}": round_ + 1}), f"w{index}")
            with lock:
                written.append(version)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(written) == list(range(30)) == store.versions(d)
    assert not [p for p in d.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_edits_are_kafka_topics_changes(tmp_path: Path) -> None:
    image = TopicImage.parse(topics(t=2, u=3))
    assert store.edit(image, {"t": 6, "v": 1}, ["u"]) == topics(t=6, v=1)
    with pytest.raises(ValueError, match="only grow"):
        store.edit(image, {"t": 1}, [])
    with pytest.raises(ValueError, match="does not exist"):
        store.edit(image, {}, ["nope"])
    with pytest.raises(ValueError, match="both"):
        store.edit(image, {"t": 3}, ["t"])
    # A topic's id stays when it grows (an upstream's real id included).
    real = [{"name": "t", "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": 2}]
    assert store.edit(TopicImage.parse(real), {"t": 5}, [])[0]["topic_id"] == real[0]["topic_id"]


def test_job_topics_seeds_the_store_and_a_change_of_it_applies_on_top(tmp_path: Path) -> None:
    d = tmp_path / "topics"
    assert store.seed_from_setting(d, [("t", 2)]) == 0
    assert store.seed_from_setting(d, [("t", 2)]) is None  # unchanged: nothing written
    store.append(d, store.edit(store.newest_image(d), {"u": 3}, []), store.CLI)  # version 1
    assert store.seed_from_setting(d, [("t", 2)]) is None  # others' changes stay
    # The setting changed: t grows, v is new; u, which the setting never had, stays.
    assert store.seed_from_setting(d, [("t", 4), ("v", 1)]) == 2
    assert store.read_image(d, 2) == TopicImage.parse(topics(t=4, u=3, v=1))
    # v taken out of the setting is deleted; a count below the store's is kept.
    store.append(d, store.edit(store.newest_image(d), {"t": 8}, []), store.CLI)  # version 3
    assert store.seed_from_setting(d, [("t", 5)]) == 4
    assert store.read_image(d, 4) == TopicImage.parse(topics(t=8, u=3))


def test_the_cli_lists_sets_and_deletes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = str(tmp_path)
    assert main(["topics", "--warehouse", w, "--set", "t:2", "--set", "u:1"]) == 0
    assert main(["topics", "--warehouse", w, "--set", "t:6", "--delete", "u"]) == 0
    assert main(["topics", "--warehouse", w, "--set", "t:6"]) == 0  # unchanged: no version
    assert main(["topics", "--warehouse", w, "--set", "t:3"]) == 2  # shrinks: refused
    assert main(["topics", "--warehouse", w, "--delete", "u"]) == 2  # gone already
    capsys.readouterr()
    assert main(["topics", "--warehouse", w, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"version": 1, "topics": topics(t=6)}
    assert main(["topics", "--warehouse", w]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "version 1",
        f"Topic: t\tTopicId: {T}\tPartitionCount: 6",
    ]


def test_the_gateway_with_the_spark_back_end_writes_its_topics_when_they_change(
    tmp_path: Path,
) -> None:
    backend = JobBackend(tmp_path)
    upstream = [{"name": "t", "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": 3}]
    backend.update_topics(upstream)
    backend.update_topics(upstream)  # a refresh that changed nothing
    backend.update_topics([{**upstream[0], "partitions": 5}])
    d = tmp_path / "topics"
    assert store.versions(d) == [0, 1]
    assert store.read_version(d, 1)["writer"] == store.GATEWAY
    assert store.read_image(d, 1).by_id("AAAAAAAAAAAAAAAAAAAAAQ").partitions == 5  # type: ignore[union-attr]


# --- the source: the version goes into the batch's offset --------------------------------------


def test_a_batch_offset_carries_the_newest_topics_version_when_it_was_planned(
    tmp_path: Path,
) -> None:
    d = tmp_path / "topics"
    inbox = SequencedInbox(tmp_path / "inbox", None, "off", topics_dir=d)
    reader = InboxReader(inbox, 10)
    start = reader.initialOffset()
    limit = reader.getDefaultReadLimit()
    assert "topics_version" not in reader.latestOffset(
        start, limit
    )  # no store yet: as an older release
    store.append(d, topics(t=2), "test")
    store.append(d, topics(t=3), "test")
    end = reader.latestOffset(start, limit)
    assert end["topics_version"] == 1
    assert Offset.of(end).topics_version == 1 and Offset.of(end) == Offset.of(start)
    # Never back, even if the store were taken back (a restored warehouse).
    (d / f"{1:016d}.json").unlink()
    assert reader.latestOffset(end, limit)["topics_version"] == 1
    # An offset of an older checkpoint has none: the seed.
    assert Offset.of({"inbox_seq": 5, "inbox_files": 5}).topics_version is None


# --- the operator: a batch is assigned from its offset's version -------------------------------


def offset_log(directory: Path, batch_id: int, batch_ms: int, version: int | None) -> None:
    """One file of Spark's offset log (version line, batch metadata, the inbox source's
    offset), written before the batch runs."""
    directory.mkdir(parents=True, exist_ok=True)
    inbox: dict[str, int] = {"inbox_seq": batch_id, "inbox_files": batch_id}
    if version is not None:
        inbox["topics_version"] = version
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": batch_ms, "conf": {}}
    text = "\n".join(["v1", json.dumps(meta), json.dumps(inbox)]) + "\n"
    (directory / str(batch_id)).write_text(text)


def batch(
    settings: op.OperatorSettings, blob: bytes | None, requests: list[dict[str, Any]], at: int
) -> op.GroupOutcome:
    """One Spark batch at ``at`` for group "g" (its clock and topics read from the offset log)."""
    values = [op.InboxLine(json.dumps(r), "file:/inbox/a", i, "g") for i, r in enumerate(requests)]
    return op.run_group(settings, "g", blob, values, settings.clock(at), emitted_ms=at)


def answers(outcome: op.GroupOutcome) -> list[dict[str, Any]]:
    return [json.loads(r[7]) for r in outcome.rows if r[0] == op.RESPONSE]


def job_settings(tmp_path: Path) -> op.OperatorSettings:
    return op.OperatorSettings(
        CONFIG,
        b"s" * 32,
        offsets_dir=str(tmp_path / "offsets"),
        topics=(("t", 2),),
        topics_dir=str(tmp_path / "topics"),
    )


def test_a_batch_is_assigned_from_its_offsets_version_and_a_re_run_sees_the_same(
    tmp_path: Path,
) -> None:
    settings = job_settings(tmp_path)
    offsets, d = tmp_path / "offsets", tmp_path / "topics"
    store.seed_from_setting(d, settings.topics)  # version 0: t with 2 partitions
    offset_log(offsets, 0, 1_000, None)  # an older checkpoint's offset: the seed
    first = batch(settings, None, [heartbeat("a", M1, 0)], 1_000)
    assert answers(first)[0]["assignment"]["topic_partitions"] == owned({T: [0, 1]})
    # The topic grows to 4 while batch 1 is planned with version 1 ...
    store.append(d, topics(t=4), store.CLI)
    offset_log(offsets, 1, 2_000, 1)
    beat = heartbeat("b", M1, 1, topic_partitions=owned({T: [0, 1]}))
    grown = batch(settings, first.blob, [beat], 2_000)
    [b] = answers(grown)
    assert b["member_epoch"] == 2 and b["assignment"]["topic_partitions"] == owned(
        {T: [0, 1, 2, 3]}
    )
    # ... and a newer version (6 partitions) is written before Spark runs batch 1 again after a
    # crash: the re-run reads the version its offset names, in a fresh worker or this one.
    store.append(d, topics(t=6), store.CLI)
    again = batch(settings, first.blob, [beat], 2_000)
    op._IMAGES.clear()
    op._HORIZONS.clear()
    fresh = batch(settings, first.blob, [beat], 2_000)
    assert again.rows == grown.rows == fresh.rows and again.blob == grown.blob == fresh.blob


def test_a_group_without_a_request_when_its_topic_grew_is_reassigned_at_its_next_heartbeat(
    tmp_path: Path,
) -> None:
    """The job against the engine fed the same topics with ``update_topics``: the same answers.
    Neither recomputes a group without a heartbeat (Kafka neither: the next heartbeat sees the
    new metadata); a group that sat out the batch where the topic grew is reassigned at its next
    heartbeat in any later batch."""
    settings = job_settings(tmp_path)
    offsets, d = tmp_path / "offsets", tmp_path / "topics"
    store.seed_from_setting(d, settings.topics)
    engine = GroupCoordinator(CONFIG, id_source=KeyedIds(b"s" * 32))
    engine.update_topics(topics(t=2), 0)

    def both(batch_id: int, at: int, version: int, requests: list[dict[str, Any]]) -> Any:
        nonlocal blob
        offset_log(offsets, batch_id, at, version)
        job = batch(settings, blob, requests, at)
        blob = job.blob
        theirs = [a for r in requests for a in engine.handle(r, at)]
        assert answers(job) == theirs
        return answers(job)

    blob: bytes | None = None
    both(0, 1_000, 0, [heartbeat("a", M1, 0)])
    [b] = both(1, 2_000, 0, [heartbeat("b", M1, 1, topic_partitions=owned({T: [0, 1]}))])
    assert b["member_epoch"] == 1
    # The topic grows; the group has no request in the batch planned with the new version.
    store.append(d, topics(t=4), store.CLI)
    engine.update_topics(topics(t=4), 5_000)
    offset_log(offsets, 2, 5_000, 1)
    assert batch(settings, blob, [], 5_000).rows == []  # not stepped: nothing due
    [c] = both(3, 6_000, 1, [heartbeat("c", M1, 1, topic_partitions=owned({T: [0, 1]}))])
    assert c["member_epoch"] == 2
    assert c["assignment"]["topic_partitions"] == owned({T: [0, 1, 2, 3]})


def test_without_a_store_the_setting_serves_as_before() -> None:
    settings = op.OperatorSettings(CONFIG, b"s" * 32, topics=(("t", 2),))
    assert settings.topic_image(123) == TopicImage.parse(topics(t=2))
    missing = dataclasses.replace(settings, topics_dir="/nonexistent/topics")
    assert missing.topic_image(123) == TopicImage.parse(topics(t=2))  # no version 0 written


# --- the gateway with the Spark back end, end to end (no job: the store is what it writes) -----


@pytest.mark.parametrize("with_ids", [True, False], ids=["upstream ids", "no ids"])
def test_the_gateway_in_front_of_an_upstream_feeds_the_jobs_store(
    tmp_path: Path, with_ids: bool
) -> None:
    """In upstream mode with the Spark back end, the upstream's topics reach the job's store
    with the ids clients' Metadata gives (the upstream's own, or the gateway's for a broker
    without ids), and a partition count that grows upstream is a new version."""
    from coordinator.gateway.upstream import Upstream
    from tests.gateway_support import Running, until
    from tests.test_gateway_upstream_topics import ORDERS_ID, TopicsBroker

    broker = TopicsBroker({"orders": (ORDERS_ID if with_ids else None, 3)})
    upstream = Upstream([("127.0.0.1", broker.port)], metadata_max_age_ms=100)
    running = Running(backend=JobBackend(tmp_path), upstream=upstream)
    d = tmp_path / "topics"
    orders = uuid_from_bytes(ORDERS_ID.bytes) if with_ids else topic_id_for("orders")
    try:
        assert until(lambda: store.newest_version(d) is not None, 10)
        image = store.newest_image(d)
        assert image is not None and image.as_list() == [
            {"name": "orders", "topic_id": orders, "partitions": 3}
        ]
        broker.topics = {"orders": (broker.topics["orders"][0], 5)}

        def grown() -> bool:
            newest = store.newest_image(d)
            return newest is not None and newest.as_list()[0]["partitions"] == 5

        assert until(grown, 10)
        assert store.read_version(d, store.newest_version(d) or 0)["writer"] == store.GATEWAY
        assert store.newest_image(d).by_name("orders").topic_id == orders  # type: ignore[union-attr]
    finally:
        running.stop()
        broker.stop()


def test_the_gateway_with_topics_of_its_own_writes_them_and_one_without_writes_nothing(
    tmp_path: Path,
) -> None:
    from coordinator.gateway.server import Gateway
    from tests.gateway_support import Running

    running = Running(backend=JobBackend(tmp_path), topics={"orders": 6})
    running.stop()
    assert store.newest_image(tmp_path / "topics") == TopicImage.parse(topics(orders=6))
    bare = Gateway(JobBackend(tmp_path / "other"), {}, "127.0.0.1", 0)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(bare.start())
        loop.run_until_complete(bare.stop())
    finally:
        loop.close()
    assert store.versions(tmp_path / "other" / "topics") == []
