"""The Spark job end to end: requests into the inbox, Kafka's answers out of the Delta tables.

One shared SparkSession; each test runs its own query on its own warehouse.
"""

from __future__ import annotations

import base64
import json
import os
import random
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from chispa import assert_df_equality

from coordinator.consumer_protocol import Subscription, encode_subscription
from coordinator.log.partitioning import partition_for
from coordinator.stream import job
from coordinator.stream.source import arrival_of, parse_sequenced
from tests.line_cases import crlf_texts, expected_lines, file_uri
from tests.stream_support import RunningCoordinator

pytestmark = pytest.mark.slow

TOPIC = "orders"
#: Members here only heartbeat when a test says so, and a step costs a micro-batch (several
#: seconds on a loaded 2-core box): sessions must outlast a whole test unless it wants them to end.
SESSION_MS = 60_000
#: The session of the member that falls silent: short enough to expire soon, long enough for a
#: member heartbeating through a slow micro-batch (several seconds on a loaded 2-core box).
SILENT_SESSION_MS = 12_000


def subscription() -> str:
    return base64.b64encode(encode_subscription(Subscription((TOPIC,)))).decode()


def join(rid: str, group: str, member_id: str = "", session_ms: int = SESSION_MS, **extra: Any):
    return {
        "api": "join_group",
        "request_id": rid,
        "group_id": group,
        "member_id": member_id,
        "client_id": "test",
        "session_timeout_ms": session_ms,
        "rebalance_timeout_ms": 10_000,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription()}],
        **extra,
    }


def sync(rid: str, group: str, member_id: str, generation: int, assignments=None):
    request = {
        "api": "sync_group",
        "request_id": rid,
        "group_id": group,
        "member_id": member_id,
        "generation_id": generation,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": assignments or [],
    }
    return request


def heartbeat(rid: str, group: str, member_id: str, generation: int):
    return {
        "api": "heartbeat",
        "request_id": rid,
        "group_id": group,
        "member_id": member_id,
        "generation_id": generation,
    }


def commit(rid: str, group: str, member_id: str, generation: int, offsets: dict[int, int]):
    return {
        "api": "offset_commit",
        "request_id": rid,
        "group_id": group,
        "member_id": member_id,
        "generation_id": generation,
        "offsets": [
            {"topic": TOPIC, "partition": p, "offset": o, "metadata": ""}
            for p, o in offsets.items()
        ],
    }


def fetch(rid: str, group: str):
    return {"api": "offset_fetch", "request_id": rid, "group_id": group, "partitions": None}


def form_group(c: RunningCoordinator, group: str, n: int, session_ms: int = SESSION_MS):
    """Join ``n`` members (KIP-394's two-step join) and sync; returns (generation, member ids)."""
    first = c.requests([join(f"{group}-j{i}", group, session_ms=session_ms) for i in range(n)])
    assert {r["error"] for r in first} == {"MEMBER_ID_REQUIRED"}
    ids = [r["member_id"] for r in first]
    joined = c.requests(
        [join(f"{group}-k{i}", group, ids[i], session_ms=session_ms) for i in range(n)]
    )
    assert all(r["error"] is None for r in joined), joined
    generation = joined[0]["generation_id"]
    leader = joined[0]["leader"]
    assignments = [
        {"member_id": m, "assignment": base64.b64encode(f"{m}".encode()).decode()} for m in ids
    ]
    syncs = [
        sync(f"{group}-s{i}", group, m, generation, assignments if m == leader else None)
        for i, m in enumerate(ids)
    ]
    synced = c.requests(syncs)
    # The client gives binary fields back as bytes (base64 in the table's JSON body).
    assert [r["assignment"] for r in synced] == [m.encode() for m in ids]
    return generation, ids


def wait_until_ready(job_process: Any, log: Path, timeout_s: float = 240) -> None:
    """Wait for a job started as a process to say it answered its first batch (members meet the
    job then: a cold start's first batch on a loaded cluster can outlast a session)."""
    deadline = time.monotonic() + timeout_s
    while "coordinator ready" not in log.read_text(errors="replace"):
        assert job_process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"the job did not start in {timeout_s:g} s"
        time.sleep(0.2)


def one_member_commits_and_reads_back(client: Any, group: str) -> None:
    """Through a running job's client: one member joins ``group`` (KIP-394's two steps),
    syncs, heartbeats, commits offset 7 of partition 0 and fetches it back. The time to sync
    after the join is answered is bounded by the rebalance timeout, counted from the batch's
    clock: a batch on a loaded cluster can outlast this module's 10 s, so the joins give a
    minute."""
    slow = {"session_ms": 60_000, "rebalance_timeout_ms": 60_000}
    first = client.request(join("j1", group, **slow), timeout_s=180)
    assert first["error"] == "MEMBER_ID_REQUIRED"
    member = first["member_id"]
    joined = client.request(join("j2", group, member, **slow), timeout_s=60)
    assert joined["error"] is None and joined["leader"] == member
    generation = joined["generation_id"]
    assignments = [{"member_id": member, "assignment": ""}]
    synced = client.request(sync("s1", group, member, generation, assignments), timeout_s=60)
    assert synced["error"] is None
    assert client.request(heartbeat("h1", group, member, generation))["error"] is None
    answer = client.request(commit("c1", group, member, generation, {0: 7}))
    assert answer["partitions"][0]["error"] is None
    assert client.request(fetch("f1", group))["partitions"][0]["offset"] == 7


@pytest.fixture
def coordinator(spark, tmp_path, request):
    mode = getattr(request, "param", "group")
    running = RunningCoordinator(spark, tmp_path / "warehouse", state_key=mode)
    running.start()
    yield running
    running.stop()


@pytest.mark.parametrize("coordinator", ["group", "shard"], indirect=True)
def test_a_group_forms_heartbeats_commits_and_fetches(coordinator: RunningCoordinator, spark):
    c = coordinator
    generation, ids = form_group(c, "payments", 2)
    assert generation == 1

    beats = c.requests([heartbeat(f"h{i}", "payments", m, generation) for i, m in enumerate(ids)])
    assert [b["error"] for b in beats] == [None, None]
    committed = c.request(commit("c1", "payments", ids[0], generation, {0: 10, 1: 11}))
    assert [p["error"] for p in committed["partitions"]] == [None, None]
    c.request(commit("c2", "payments", ids[1], generation, {3: 30}))
    fetched = c.request(fetch("f1", "payments"))
    assert {(p["partition"], p["offset"]) for p in fetched["partitions"]} == {
        (0, 10),
        (1, 11),
        (3, 30),
    }
    described = c.request({"api": "describe_groups", "request_id": "d1", "group_id": "payments"})
    assert described["group_state"] == "Stable"
    assert sorted(m["member_id"] for m in described["members"]) == sorted(ids)
    listed = c.request({"api": "list_groups", "request_id": "l1", "group_id": ""})
    assert listed["groups"] == [
        {
            "group_id": "payments",
            "protocol_type": "consumer",
            "group_state": "Stable",
            "group_type": "classic",
        }
    ]
    found = c.request({"api": "find_coordinator", "request_id": "fc", "group_id": "payments"})
    assert found["offsets_partition"] == partition_for("payments", 50)

    # Every request answered exactly once.
    ids_seen = [r["request_id"] for r in c.rows("responses")]
    assert len(ids_seen) == len(set(ids_seen))

    # The log: Kafka's records, contiguous offsets in the group's partition.
    partition = partition_for("payments", 50)
    log = spark.createDataFrame(c.table("consumer_offsets")).where("record_type = 'offset_commit'")
    expected = spark.createDataFrame(
        [("payments", TOPIC, p, o, partition) for p, o in [(0, 10), (1, 11), (3, 30)]],
        "group_id string, topic string, partition int, committed_offset long, "
        "offsets_partition int",
    )
    assert_df_equality(
        log.select(*expected.columns),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
    )
    offsets = sorted(r["offset"] for r in c.rows("consumer_offsets"))
    assert offsets == list(range(len(offsets)))

    state = c.rows("group_state")
    assert [(s["group_id"], s["state"], s["generation_id"], s["num_members"]) for s in state] == [
        ("payments", "Stable", 1, 2)
    ]
    assert state[0]["num_committed_offsets"] == 3
    formed = f"Adding new member {ids[0]} with group instance id null; client reason: not provided"
    assert state[0]["rebalance_reason"] == formed

    # group_history: every change of the summary, batch by batch; the rebalance reads as
    # PreparingRebalance -> CompletingRebalance -> Stable, each row with the reason. With no
    # initial rebalance delay the join completes in the batch that brought the joins (served
    # at their arrival, the batch's clock is later), so PreparingRebalance is seldom seen.
    history = sorted(c.rows("group_history"), key=lambda r: r["batch_id"])
    assert {r["group_id"] for r in history} == {"payments"}
    states = [r["state"] for r in history]
    transitions = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
    assert [s for s in transitions if s != "PreparingRebalance"] == [
        "Empty",
        "CompletingRebalance",
        "Stable",
    ]
    assert [r["rebalance_reason"] for r in history] == [
        None if r["state"] == "Empty" else formed for r in history
    ]
    assert history[-1]["num_committed_offsets"] == 3
    assert history[-1]["batch_id"] == state[0]["batch_id"]


def test_a_silent_member_times_out_and_the_group_rebalances(coordinator: RunningCoordinator):
    c = coordinator
    # A session long enough that `alive`'s heartbeats, each a round trip through a micro-batch,
    # keep it on a loaded box; `silent` sends nothing, so its session runs out in the job.
    generation, (alive, silent) = form_group(c, "billing", 2, session_ms=SILENT_SESSION_MS)
    deadline = time.monotonic() + 120
    rebalancing = None
    beat = 0
    while time.monotonic() < deadline:
        beat += 1
        answer = c.request(heartbeat(f"hb{beat}", "billing", alive, generation))
        if answer["error"] == "REBALANCE_IN_PROGRESS":
            rebalancing = answer
            break
        assert answer["error"] is None
        time.sleep(0.5)
    assert rebalancing is not None, "the silent member's session never expired"
    rejoined = c.request(join("rejoin", "billing", alive, session_ms=SILENT_SESSION_MS))
    assert rejoined["error"] is None
    assert rejoined["generation_id"] == generation + 1
    assert [m["member_id"] for m in rejoined["members"]] == [alive]  # `silent` is gone
    state = c.wait_for(
        lambda: [s for s in c.rows("group_state") if s["generation_id"] == generation + 1],
        what="group_state at the new generation",
    )
    assert [m["member_id"] for m in state[0]["members"]] == [alive]
    assert silent != alive
    assert state[0]["rebalance_reason"] == f"removing member {silent} on heartbeat expiration."


def test_a_restart_from_the_checkpoint_carries_on(coordinator: RunningCoordinator):
    c = coordinator
    generation, ids = form_group(c, "ledger", 1, session_ms=30_000)
    c.request(commit("c1", "ledger", ids[0], generation, {0: 5}))
    c.restart()
    # The member, its generation and its offsets come back from Spark's state store.
    assert c.request(heartbeat("after", "ledger", ids[0], generation))["error"] is None
    assert c.request(fetch("f", "ledger"))["partitions"][0]["offset"] == 5
    c.request(commit("c2", "ledger", ids[0], generation, {0: 6}))
    offsets = sorted(r["offset"] for r in c.rows("consumer_offsets"))
    assert offsets == list(range(len(offsets)))
    ids_seen = [r["request_id"] for r in c.rows("responses")]
    assert len(ids_seen) == len(set(ids_seen))


def test_a_batch_replayed_after_a_crash_is_written_once(spark, tmp_path):
    c = RunningCoordinator(spark, tmp_path / "warehouse")
    crashed: list[int] = []
    armed: list[int] = []

    def crash_after_the_commit_is_written(figures: job.BatchFigures) -> None:
        # The tables hold the batch, Spark has not committed it: a driver crash right here.
        if armed and figures.batch_id > armed[0] and figures.records and not crashed:
            crashed.append(figures.batch_id)
            raise RuntimeError("simulated crash between the Delta writes and the checkpoint")

    c.after_write = crash_after_the_commit_is_written
    c.start()
    try:
        generation, ids = form_group(c, "audit", 1, session_ms=30_000)
        # Armed past every batch already answered: the batch that answered the sync may still
        # be between its writes and this hook when its answer is read.
        armed.append(max(r["batch_id"] for r in c.rows("responses")))
        c.client.submit([commit("c1", "audit", ids[0], generation, {0: 42})])
        c.wait_for(lambda: not c.running.query.isActive, what="the query to fail")
        assert crashed
        # What the crashed batch wrote is already visible: the commit and its response.
        before = c.rows("responses")
        assert any(r["request_id"] == "c1" for r in before)
        c.stop()
        c.after_write = None
        c.start()
        # Spark re-runs the batch (same id, same input, same clock); the sink skips every table.
        c.wait_for(
            lambda: (
                c.running.query.lastProgress
                and c.running.query.lastProgress["batchId"] > crashed[0]
            ),
            what="the replayed batch",
        )
        assert c.request(fetch("f", "audit"))["partitions"][0]["offset"] == 42
        responses = c.rows("responses")
        assert sorted(r["request_id"] for r in responses if r["request_id"] == "c1") == ["c1"]
        commits = [r for r in c.rows("consumer_offsets") if r["record_type"] == "offset_commit"]
        assert [(r["committed_offset"], r["batch_id"]) for r in commits] == [(42, crashed[0])]
    finally:
        c.stop()


def test_requests_apply_in_file_and_line_order_whatever_spark_hands_over(spark, tmp_path):
    c = RunningCoordinator(spark, tmp_path / "warehouse")
    # Simple-group commits (generation -1): the last one written wins. Two files land in the
    # same batch: the earlier one is larger, and Spark's partitions may hand the larger first.
    early = [commit(f"e{i}", "simple", "", -1, {0: i}) for i in range(50)]
    late = [commit("l0", "simple", "", -1, {0: 1000}), commit("l1", "simple", "", -1, {0: 1001})]
    inbox = c.settings.job.paths.inbox
    inbox.mkdir(parents=True)
    for name, requests in [("0001-early.jsonl", early), ("0002-late.jsonl", late)]:
        (inbox / name).write_text("".join(json.dumps(r) + "\n" for r in requests))
    c.start()
    try:
        answers = c.client.wait([r["request_id"] for r in early + late], timeout_s=60)
        assert all(a["partitions"][0]["error"] is None for a in answers.values())
        assert c.request(fetch("f", "simple"))["partitions"][0]["offset"] == 1001
        log = [r for r in c.rows("consumer_offsets") if r["record_type"] == "offset_commit"]
        assert [r["committed_offset"] for r in sorted(log, key=lambda r: r["offset"])] == [
            *range(50),
            1000,
            1001,
        ]
    finally:
        c.stop()


def test_bad_lines_get_answers_or_land_in_rejected_requests(coordinator: RunningCoordinator):
    c = coordinator
    inbox = c.settings.job.paths.inbox
    lines = [
        "{not json",
        json.dumps(["a", "list"]),
        json.dumps({"api": "heartbeat", "group_id": "g"}),  # no request id: unanswerable
        json.dumps({"api": "no_such_api", "request_id": "bad1", "group_id": "g"}),
        json.dumps({"api": "heartbeat", "request_id": "bad2", "group_id": "g", "member_id": 5}),
        json.dumps({"api": "heartbeat", "request_id": "bad3"}),
    ]
    tmp = inbox / ".bad.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.rename(tmp, inbox / "bad.jsonl")
    answers = c.client.wait(["bad1", "bad2", "bad3"], timeout_s=60)
    assert answers["bad1"]["error"] == "INVALID_REQUEST"
    assert answers["bad2"]["error"] == "INVALID_REQUEST"
    assert answers["bad3"]["error"] == "INVALID_GROUP_ID"
    rejected = c.wait_for(lambda: c.rows("rejected_requests"), what="rejected rows")
    assert sorted(r["raw"] for r in rejected) == sorted(lines[:3])
    # The file as the inbox source sequenced it: <sequence number>@<arrival>-bad.jsonl (a file:
    # URI, its "@" escaped).
    names = {Path(unquote(urlparse(r["source_file"]).path)).name for r in rejected}
    assert [parse_sequenced(name)[1] for name in names] == ["bad.jsonl"]  # type: ignore[index]
    # No group was created by any of it, and the stream is still serving.
    assert c.rows("group_state") == []
    assert c.request(fetch("after", "g"))["error"] is None


def test_kafka_partition_expression_matches_partition_for(spark):
    names = ["", "a", "group-1", "héllo", "𝄞x", "x" * 300, "polygenelubricants", "GydZG_"]
    names += [f"group-{i}" for i in range(200)]
    rng = random.Random(11)
    alphabet = "az-_.09" + "éß中文" + "\U0001d11e\U0001f600"
    names += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    frame = spark.createDataFrame([(n,) for n in names], "g string")
    for partitions in (1, 50, 7):
        rows = frame.selectExpr("g", f"{job.kafka_partition_expr('g', partitions)} AS p").collect()
        assert {r.g: r.p for r in rows} == {n: partition_for(n, partitions) for n in names}


def test_balanced_shard_keys_reach_the_tasks_spark_deals_them_to(spark):
    """Both ways of keying a line (the JVM's with_shard and the source's lines) give its
    partition's key, and Spark's own shuffle sends each partition to task p mod shards."""
    from coordinator.stream import lines
    from coordinator.stream.settings import load_settings, spark_shard_keys

    names = [f"group-{i}" for i in range(400)]
    for shards in (2, 3):
        settings = load_settings([], shards=shards)
        keys = spark_shard_keys(settings)
        frame = spark.createDataFrame([(n,) for n in names], "group_id string")
        keyed = job.with_shard(frame, settings)
        placed = keyed.repartition(shards, "shard").selectExpr(
            "group_id", "shard", "spark_partition_id() AS task"
        )
        rows = placed.collect()
        assert {r.group_id: r.shard for r in rows} == {n: keys[partition_for(n, 50)] for n in names}
        assert {r.group_id: r.task for r in rows} == {
            n: partition_for(n, 50) % shards for n in names
        }
        text = "".join(json.dumps({"group_id": n}) + "\n" for n in names).encode()
        batch = lines.line_batch(["f"], [text], keys)
        assert batch.column("shard").to_pylist() == [keys[partition_for(n, 50)] for n in names]
    # The hash that picks the keys is Spark's own.
    from coordinator.stream.shard_keys import spark_hash_int

    ints = [*range(-5, 60), 2**31 - 1, -(2**31)]
    got = spark.createDataFrame([(i,) for i in ints], "k int").selectExpr("k", "hash(k) AS h")
    assert {r.k: r.h for r in got.collect()} == {i: spark_hash_int(i) for i in ints}


def test_inbox_files_split_into_the_lines_of_a_crlf_or_lf_split(spark):
    """A file's lines are those of a split at "\r?\n": each line's "\r" before its "\n" is not
    part of it, a final "\r" that no "\n" follows is, blank lines (spaces only) are skipped,
    and only a file's last line can be unterminated."""
    texts = crlf_texts()
    files = spark.createDataFrame(
        [(file_uri(i), text) for i, text in enumerate(texts)], "source_file string, text string"
    )
    got = {
        (r.source_file, r.position): (r.value, r.terminated)
        for r in job.file_lines(files).collect()
    }
    want = expected_lines(texts)
    assert got == want


#: The lagging job's member: its session; when its heartbeat is sent after its sync; and the
#: backlog in front of it: files dropped just before it, read a few per batch.
LAG_SESSION_MS = 30_000
LAG_HEARTBEAT_AFTER_S = 10.0
LAG_BACKLOG_FILES = 8
LAG_FILES_PER_TRIGGER = 2


def member_carries_on(c: Any, group: str, member: str, generation: int) -> None:
    """The member's next heartbeat is answered without error, and the group is Stable with it
    alone."""
    (again,) = c.requests([heartbeat("h2", group, member, generation)])
    assert again["error"] is None, again
    (described,) = c.requests([{"api": "describe_groups", "request_id": "d", "group_id": group}])
    assert described["group_state"] == "Stable"
    assert [m["member_id"] for m in described["members"]] == [member]


def test_a_member_that_heartbeated_on_time_is_not_expired_by_a_job_that_lags(spark, tmp_path):
    """The job stalls (a batch held in its sink) past a member's session deadline; the member's
    heartbeat reached the inbox before the deadline, behind a backlog of other files that takes
    several batches to read. Every batch runs after the deadline, yet the member is not
    expired: the batches before the heartbeat's hold input only up to the first file still
    waiting (their clock), and the heartbeat is served at its arrival. It is answered without
    error, the member stays, the group stays Stable. (Served at the batches' time, the member
    would have been expired by the first batch after the stall.)"""
    import threading

    holding, held, release = threading.Event(), threading.Event(), threading.Event()

    def lag(figures: job.BatchFigures) -> None:
        if holding.is_set() and not release.is_set():
            held.set()
            release.wait(timeout=120)

    c = RunningCoordinator(
        spark, tmp_path / "warehouse", max_files_per_trigger=LAG_FILES_PER_TRIGGER
    )  # shard-keyed, the default
    c.after_write = lag
    c.start()
    try:
        group = "laggy"
        (first,) = c.requests([join("j0", group, session_ms=LAG_SESSION_MS)])
        member = first["member_id"]
        (joined,) = c.requests([join("j1", group, member, session_ms=LAG_SESSION_MS)])
        generation = joined["generation_id"]
        assignment = [{"member_id": member, "assignment": base64.b64encode(b"a").decode()}]
        sync_sent = time.time()
        (synced,) = c.requests([sync("s", group, member, generation, assignment)])
        synced_at = time.time()
        assert synced["error"] is None
        # The sync arrived after sync_sent and was served at its arrival: the session's
        # deadline lies in [sync_sent, synced_at] + the session timeout.
        deadline_s = synced_at + LAG_SESSION_MS / 1000  # at the latest
        holding.set()
        c.wait_for(held.is_set, what="a batch held in the sink")
        c.wait_for(lambda: time.time() >= synced_at + LAG_HEARTBEAT_AFTER_S, what="a while")
        backlog = [f"b{i}" for i in range(LAG_BACKLOG_FILES)]
        for rid in backlog:
            c.client.submit([fetch(rid, "bystander")])
        c.client.submit([heartbeat("h", group, member, generation)])
        beat_landed = time.time()
        assert beat_landed < sync_sent + LAG_SESSION_MS / 1000, "the box is too slow for this test"
        # Hold the job until the deadline has certainly passed, then let it go on.
        c.wait_for(
            lambda: time.time() > deadline_s + 0.5,
            timeout_s=LAG_SESSION_MS / 1000 + 30,
            what="the session deadline to pass",
        )
        release.set()
        answer = c.client.wait(["h"], timeout_s=120)["h"]
        assert answer["error"] is None, answer
        emitted = {r["request_id"]: r["emitted_at_ms"] for r in c.rows("responses")}
        # Every batch after the stall ran after the deadline: the backlog took several.
        assert min(emitted[rid] for rid in backlog) > deadline_s * 1000
        assert len({emitted[rid] for rid in backlog}) > 1
        assert emitted["h"] > max(emitted[rid] for rid in backlog)
        # The heartbeat's file was stamped with its arrival, before the deadline.
        (stamp,) = c.wait_for(lambda: heartbeat_stamps(c.warehouse), what="the file archived")
        assert stamp is not None and stamp < sync_sent * 1000 + LAG_SESSION_MS
        # The member is still in its generation, and the group Stable.
        member_carries_on(c, group, member, generation)
    finally:
        release.set()
        c.stop()


#: The session of the member whose answer comes from a batch that runs longer than it.
LONG_BATCH_SESSION_MS = 4_000


@pytest.mark.parametrize("mode", ["shard", "group"])
def test_a_member_is_not_expired_by_the_run_time_of_the_batch_that_answered_it(
    spark, tmp_path, monkeypatch, mode
):
    """A batch answers a member's heartbeat, then runs longer than the member's session (held
    before its tables are written, as a slow batch on a loaded box would be): the member can
    read its answer only once the batch is written. Its session counts from then (the next
    batch's timestamp, in the offset log), as Kafka's counts from the response it sends: the
    heartbeat it sends on reading the answer keeps it, and the group stays Stable. (Counted
    from the batch's clock, when it was planned, the session would have ended before the
    answer could be read, and that heartbeat would be answered UNKNOWN_MEMBER_ID.)"""
    import threading

    holding, held, release = threading.Event(), threading.Event(), threading.Event()
    write = job.BatchSink.write

    def slow_write(sink: job.BatchSink, table: Any, batch_id: int) -> Any:
        answers_h1 = any(
            r["kind"] == "response" and json.loads(r["body"]).get("request_id") == "h1"
            for r in table.to_pylist()
        )
        if holding.is_set() and answers_h1 and not held.is_set():
            held.set()
            release.wait(timeout=120)
        return write(sink, table, batch_id)

    monkeypatch.setattr(job.BatchSink, "write", slow_write)
    c = RunningCoordinator(spark, tmp_path / "warehouse", state_key=mode)
    c.start()
    try:
        group = "slow-batch"
        generation, (member,) = form_group(c, group, 1, session_ms=LONG_BATCH_SESSION_MS)
        holding.set()
        c.client.submit([heartbeat("h1", group, member, generation)])
        c.wait_for(held.is_set, what="the batch that answers h1 held before its writes")
        held_at = time.time()  # the batch was planned (its clock) before this
        c.wait_for(
            lambda: time.time() > held_at + LONG_BATCH_SESSION_MS / 1000 + 1,
            timeout_s=LONG_BATCH_SESSION_MS / 1000 + 30,
            what="the batch to run a session and a second longer",
        )
        release.set()
        answer = c.client.wait(["h1"], timeout_s=120)["h1"]
        assert answer["error"] is None, answer
        member_carries_on(c, group, member, generation)
        # The batch really answered h1 a session before h2 was served.
        emitted = {r["request_id"]: r["emitted_at_ms"] for r in c.rows("responses")}
        assert emitted["h2"] - emitted["h1"] > LONG_BATCH_SESSION_MS
    finally:
        release.set()
        c.stop()


def heartbeat_stamps(warehouse: Path) -> list[int | None]:
    """The arrival stamps of the archived files that hold the request "h"."""
    archive = warehouse / "archive"
    found = []
    for path in archive.iterdir() if archive.is_dir() else []:
        lines = path.read_text().splitlines()
        if any(json.loads(line).get("request_id") == "h" for line in lines if line.strip()):
            found.append(arrival_of(path.name))
    return found


def test_lines_built_in_the_source_are_the_rows_spark_splits_them_into(spark):
    """``job.source.lines=python`` (:mod:`coordinator.stream.lines`) gives the rows
    :func:`job.file_lines` gives, group ids included, for JSON objects in any layout; they may
    differ only in the group id of a line that is not a JSON object."""
    from coordinator.stream import lines

    rng = random.Random(9)
    pieces = ["\n", "\r\n", "\r", " ", "x", "é", '{"group_id": "g"}', '{"api":"a","group_id":"h"}']
    pieces += ['{"x":{"group_id":"n"},"group_id":"t"}', '{"group_id":"a\\u00e9"}', '{"group_id":7}']
    pieces += ['{"group_id":"d1","group_id":"d2"}', '{"group_id":null}', '{"group_id":"\\ud800"}']
    pieces += ['{"x\\"group_id":"k"}', '{"group_id":{"a":[1,2]}}', '["group_id","g"]']
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 10))) for _ in range(200)]
    contents = [t.encode() for t in texts] + [b'{"group_id":"x\xff"}\n{"group_id":"ok"}\n\xff']
    labels = [f"file:/inbox/{i:04d}.jsonl" for i in range(len(contents))]
    files = spark.createDataFrame(
        list(zip(labels, contents, strict=True)), "source_file string, content binary"
    ).selectExpr("source_file", "cast(content as string) as text")
    spark_rows = {(r.source_file, r.position): r.asDict() for r in job.file_lines(files).collect()}
    batch = lines.line_batch(labels, contents).to_pylist()
    source_rows = {(r["source_file"], r["position"]): r for r in batch}
    assert spark_rows.keys() == source_rows.keys()
    differ = []
    for key, want in spark_rows.items():
        got = source_rows[key]
        assert {k: got[k] for k in want if k != "group_id"} == {
            k: v for k, v in want.items() if k != "group_id"
        }
        if got["group_id"] != want["group_id"]:
            differ.append((got["value"], got["group_id"], want["group_id"]))
    # Only lines that are not JSON (pieces run together: Spark reads the first object of
    # "{...}{...}", the source's fast form a group id cut short) differ here.
    assert differ, "the pieces make some lines that are not JSON objects"
    for value, _, _ in differ:
        with pytest.raises(ValueError):
            json.loads(value)
