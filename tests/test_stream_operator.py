"""The stateful operator's pure half and the job's settings, without Spark."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.group.snapshot import decode_group
from coordinator.log.partitioning import partition_for
from coordinator.stream import operator as op
from coordinator.stream.settings import (
    CONF_DIR,
    JobSettings,
    checkpoint_identity,
    identity_path,
    load_settings,
    spark_shard_keys,
    with_checkpoint_layout,
)
from coordinator.stream.source import batch_horizon, sequenced_name
from tests.stream_support import job_settings

SETTINGS = op.OperatorSettings(CoordinatorConfig(group_initial_rebalance_delay_ms=0), b"s" * 32)


def join(rid: str, member_id: str = "") -> str:
    return json.dumps(
        {
            "api": "join_group",
            "request_id": rid,
            "group_id": "g",
            "member_id": member_id,
            "client_id": "c",
            "session_timeout_ms": 10_000,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": ""}],
        }
    )


def commit(rid: str, offset: int) -> str:
    return json.dumps(
        {
            "api": "offset_commit",
            "request_id": rid,
            "group_id": "g",
            "generation_id": -1,
            "member_id": "",
            "offsets": [{"topic": "t", "partition": 0, "offset": offset}],
        }
    )


def lines(values: list[str], source: str = "file:/inbox/a.jsonl") -> list[op.InboxLine]:
    return [op.InboxLine(v, source, i, "g") for i, v in enumerate(values)]


def responses(outcome: op.GroupOutcome) -> list[dict]:
    return [json.loads(r[7]) for r in outcome.rows if r[0] == op.RESPONSE]


def test_lines_apply_in_file_and_line_order_whatever_order_they_arrive_in():
    ordered = lines([commit(f"c{i}", i) for i in range(5)], "file:/inbox/1.jsonl")
    ordered += lines([commit("late", 99)], "file:/inbox/2.jsonl")
    shuffled = list(ordered)
    random.Random(7).shuffle(shuffled)
    a = op.run_group(SETTINGS, "g", None, ordered, 1_000)
    b = op.run_group(SETTINGS, "g", None, shuffled, 1_000)
    assert a.rows == b.rows and a.blob == b.blob
    assert [r["request_id"] for r in responses(a)] == ["c0", "c1", "c2", "c3", "c4", "late"]
    assert decode_group(a.blob).offsets[("t", 0)].committed_offset == 99


def test_a_step_is_a_function_of_the_state_and_the_input():
    first = op.run_group(SETTINGS, "g", None, lines([join("j1")]), 1_000)
    member_id = responses(first)[0]["member_id"]
    again = op.run_group(SETTINGS, "g", None, lines([join("j1")]), 1_000)
    assert again.rows == first.rows  # same seed, group and request id: the same member id
    other_seed = dataclasses.replace(SETTINGS, seed=b"t" * 32)
    assert (
        responses(op.run_group(other_seed, "g", None, lines([join("j1")]), 1_000))[0]["member_id"]
        != member_id
    )
    second = op.run_group(SETTINGS, "g", first.blob, lines([join("j2", member_id)]), 2_000)
    replayed = op.run_group(SETTINGS, "g", first.blob, lines([join("j2", member_id)]), 2_000)
    assert second.rows == replayed.rows and second.blob == replayed.blob
    assert second.deadline_ms == replayed.deadline_ms is not None


def test_unreadable_lines_are_rejected_and_change_nothing():
    bad = ["{oops", "[1, 2]", json.dumps({"api": "heartbeat", "group_id": "g"})]
    outcome = op.run_group(SETTINGS, "g", None, lines(bad), 1_000)
    kinds = [r[0] for r in outcome.rows]
    assert kinds == [op.REJECTED] * 3
    assert outcome.blob is None
    reasons = [json.loads(r[7])["reason"] for r in outcome.rows]
    assert "not a JSON object" in reasons[0] and "no request_id" in reasons[2]


def test_list_groups_goes_to_the_sink_and_find_coordinator_is_answered_here():
    outcome = op.run_group(
        SETTINGS,
        "",
        None,
        lines(
            [
                json.dumps({"api": "list_groups", "request_id": "l"}),
                json.dumps({"api": "find_coordinator", "request_id": "f", "group_id": ""}),
            ]
        ),
        1_000,
    )
    assert [r[0] for r in outcome.rows] == [op.LIST_GROUPS, op.RESPONSE]
    assert json.loads(outcome.rows[1][7])["node_id"] == 0


def test_the_summary_row_appears_when_the_group_changes_and_says_dead_when_it_goes():
    created = op.run_group(SETTINGS, "g", None, lines([commit("c", 1)]), 1_000)
    summaries = [json.loads(r[7]) for r in created.rows if r[0] == op.GROUP]
    assert summaries[0]["state"] == "Empty" and summaries[0]["num_committed_offsets"] == 1
    fetch = json.dumps({"api": "offset_fetch", "request_id": "f", "group_id": "g"})
    unchanged = op.run_group(SETTINGS, "g", created.blob, lines([fetch]), 2_000)
    assert [r[0] for r in unchanged.rows] == [op.RESPONSE]
    delete = json.dumps({"api": "delete_groups", "request_id": "d", "group_id": "g"})
    deleted = op.run_group(SETTINGS, "g", created.blob, lines([delete]), 3_000)
    assert deleted.blob is None
    assert [json.loads(r[7])["state"] for r in deleted.rows if r[0] == op.GROUP] == ["Dead"]


def test_the_summary_says_why_the_group_rebalanced_and_keeps_saying_it():
    first = op.run_group(SETTINGS, "g", None, lines([join("j1")]), 1_000)
    member_id = responses(first)[0]["member_id"]  # MEMBER_ID_REQUIRED: no rebalance yet
    (created,) = [json.loads(r[7]) for r in first.rows if r[0] == op.GROUP]
    assert created["state"] == "Empty" and created["rebalance_reason"] is None
    joined = op.run_group(SETTINGS, "g", first.blob, lines([join("j2", member_id)]), 2_000)
    # The initial delay (0 here) runs out at the end of the same step: the group went through
    # PreparingRebalance to the new generation, which keeps the reason.
    (completing,) = [json.loads(r[7]) for r in joined.rows if r[0] == op.GROUP]
    reason = (
        f"Adding new member {member_id} with group instance id null; client reason: not provided"
    )
    assert (completing["state"], completing["generation_id"]) == ("CompletingRebalance", 1)
    assert completing["rebalance_reason"] == reason
    assert list(completing)[-3:] == ["state_timestamp_ms", "rebalance_reason", "group_type"]
    assert decode_group(joined.blob).rebalance_reason == reason
    # It keeps saying it once the group is Stable, until the next rebalance.
    sync = {
        "api": "sync_group",
        "request_id": "s",
        "group_id": "g",
        "member_id": member_id,
        "generation_id": 1,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": member_id, "assignment": ""}],
    }
    synced = op.run_group(SETTINGS, "g", joined.blob, lines([json.dumps(sync)]), 2_001)
    (stable,) = [json.loads(r[7]) for r in synced.rows if r[0] == op.GROUP]
    assert (stable["state"], stable["rebalance_reason"]) == ("Stable", reason)


#: A wall-clock instant when the expiry sweep of group ``g``'s offsets partition runs: a whole
#: multiple of Kafka's ``offsets.retention.check.interval.ms`` (10 minutes) plus the
#: partition's phase (:meth:`coordinator.context.GroupContext.ensure_expiry_timer`).
_INTERVAL = CoordinatorConfig().offsets_retention_check_interval_ms
SWEEP_MARK = 1_795_000_200_000 + partition_for("g", 50) * _INTERVAL // 50
assert SWEEP_MARK % _INTERVAL == partition_for("g", 50) * 12_000 != 0


def two_step_join(
    settings: op.OperatorSettings, mode: str, first_ms: int, second_ms: int
) -> list[dict]:
    """KIP-394's join of two members as the Spark tests' ``form_group`` sends it: the joins
    without a member id in a batch at ``first_ms``, those with the ids they were given in the
    next at ``second_ms``; the second step's answers."""
    state: dict[str, tuple[int | None, bytes]] = {}

    def batch(values: list[str], now_ms: int) -> list[dict]:
        if mode == op.SHARD_KEY:
            rows = op.run_shard(settings, state, lines(values), now_ms).rows
        else:
            stored = state.pop("g", None)
            blob = None if stored is None else stored[1]
            outcome = op.run_group(settings, "g", blob, lines(values), now_ms)
            rows = outcome.rows
            if outcome.blob is not None:
                state["g"] = (outcome.deadline_ms, outcome.blob)
        return [json.loads(r[7]) for r in rows if r[0] == op.RESPONSE]

    ids = [a["member_id"] for a in batch([join("j0"), join("j1")], first_ms)]
    assert len(ids) == 2
    return batch([join("k0", ids[0]), join("k1", ids[1])], second_ms)


@pytest.mark.parametrize("mode", op.KEY_MODES)
def test_the_sweep_deletes_a_group_of_pending_members_only_as_kafkas_does(mode: str):
    """A group whose only members are pending (KIP-394's first step) is Empty, and the expiry
    sweep deletes an Empty group without offsets (Kafka 4.x ``ClassicGroup.isEmpty`` is the
    Empty state): a join's second step after a sweep finds no group and is answered
    UNKNOWN_MEMBER_ID (a client then joins again). Between two sweeps it joins."""
    settings = SETTINGS
    before = two_step_join(settings, mode, SWEEP_MARK - 1_700, SWEEP_MARK - 700)
    assert [a["error_code"] for a in before] == [0, 0]
    across = two_step_join(settings, mode, SWEEP_MARK - 700, SWEEP_MARK + 300)
    assert [a["error_code"] for a in across] == [25, 25]  # UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("mode", op.KEY_MODES)
def test_the_spark_tests_settings_run_no_sweep_under_a_join(mode: str, tmp_path: Path):
    """The job the Spark tests run (``tests/stream_support.py``) sweeps no group while a test
    runs: a ``form_group`` whose two steps straddled its group's sweep (every 10 minutes of the
    wall clock) otherwise had both second joins answered UNKNOWN_MEMBER_ID (a CI flake)."""
    config = job_settings(tmp_path / "warehouse").coordinator
    settings = dataclasses.replace(SETTINGS, config=config)
    across = two_step_join(settings, mode, SWEEP_MARK - 700, SWEEP_MARK + 300)
    assert [a["error_code"] for a in across] == [0, 0]


def test_shard_state_round_trips_and_steps_only_due_or_addressed_groups():
    state = {"a": (5_000, b"blob-a"), "b": (None, b"blob-b"), "\u00e9": (1, b"")}
    assert op.decode_shard(op.encode_shard(state)) == state
    with pytest.raises(ValueError, match="format"):
        op.decode_shard(b"\x09" + op.encode_shard(state)[1:])

    joined = op.run_shard(SETTINGS, {}, lines([join("j1")]), 1_000)
    assert set(joined.state) == {"g"}
    deadline = joined.deadline_ms
    assert deadline is not None
    quiet = op.run_shard(SETTINGS, dict(joined.state), [], deadline - 1)
    assert quiet.rows == [] and quiet.state == joined.state
    fired = op.run_shard(SETTINGS, dict(joined.state), [], deadline)
    assert fired.rows[0][0] == op.TICK


def test_conf_job_properties_lists_the_defaults():
    assert load_settings([]).job == JobSettings()
    assert (CONF_DIR / "job.properties").exists()


def test_the_checkpoint_pins_shards_state_key_and_partitions(tmp_path):
    settings = load_settings([], warehouse=str(tmp_path))
    first = checkpoint_identity(settings)
    assert checkpoint_identity(settings) == first
    assert first.state_key == "shard"  # the default
    for change in ({"shards": 4}, {"state_key": "group"}):
        with pytest.raises(ValueError, match="fixed per checkpoint"):
            checkpoint_identity(load_settings([], warehouse=str(tmp_path), **change))
    # A checkpoint of a release whose default was group-keyed says how to keep it.
    grouped = load_settings([], warehouse=str(tmp_path / "grouped"), state_key="group")
    checkpoint_identity(grouped)
    with pytest.raises(ValueError, match=r"job\.state\.key=group"):
        checkpoint_identity(load_settings([], warehouse=str(tmp_path / "grouped")))
    other = load_settings([], warehouse=str(tmp_path / "other"))
    assert checkpoint_identity(other).app_id != first.app_id


def test_the_checkpoint_pins_its_shard_layout_and_an_older_one_keeps_the_partitions(tmp_path):
    settings = load_settings([], warehouse=str(tmp_path))
    made = checkpoint_identity(settings)
    assert made.shard_layout == "balanced"  # the default
    partitioned = load_settings([], warehouse=str(tmp_path), state_shard_layout="partition")
    with pytest.raises(ValueError, match="state_shard_layout"):
        checkpoint_identity(partitioned)
    # A coordinator.json written before the setting: its keys stay the partition numbers.
    old = load_settings([], warehouse=str(tmp_path / "old"))
    path = identity_path(old)
    checkpoint_identity(old)
    stored = json.loads(path.read_text())
    del stored["state_shard_layout"]
    path.write_text(json.dumps(stored))
    identity = checkpoint_identity(old)  # no error: the default does not fight the checkpoint
    assert identity.shard_layout == "partition"
    adopted = with_checkpoint_layout(old, identity)
    assert adopted.job.state_shard_layout == "partition"
    assert spark_shard_keys(adopted) == tuple(range(50))
    with pytest.raises(ValueError, match=r"job\.state\.shard\.layout"):
        load_settings([], state_shard_layout="spread")


def test_balanced_shard_keys_deal_the_partitions_round_robin():
    from coordinator.stream.shard_keys import balanced_keys, shard_keys, spark_task

    # Spark's tasks for the keys 0..9 on 2 tasks, and the deal of 50 partitions by number.
    assert [spark_task(k, 2) for k in range(10)] == [1, 1, 0, 1, 0, 0, 1, 1, 1, 1]
    assert sum(spark_task(p, 2) == 0 for p in range(50)) == 19
    for partitions, shards in ((50, 2), (50, 3), (7, 4), (1, 1), (100, 8)):
        keys = balanced_keys(partitions, shards)
        assert len(set(keys)) == partitions and min(keys) >= 0
        assert [spark_task(k, shards) for k in keys] == [p % shards for p in range(partitions)]
    assert shard_keys("partition", 5, 2) == (0, 1, 2, 3, 4)


def test_set_pairs_are_routed_like_a_settings_file():
    import argparse

    from coordinator.cli.run import add_job_options, settings_from

    parser = argparse.ArgumentParser()
    add_job_options(parser)
    pairs = ["group.initial.rebalance.delay.ms=0", "job.shards=3", "spark.driver.memory=1g"]
    args = parser.parse_args(
        [arg for pair in pairs for arg in ("--set", pair)] + ["--trigger-interval", "50"]
    )
    settings = settings_from(args)
    assert settings.coordinator.group_initial_rebalance_delay_ms == 0
    assert (settings.job.shards, settings.job.trigger_interval_ms) == (3, 50)
    assert settings.spark["spark.driver.memory"] == "1g"
    with pytest.raises(ValueError, match="key=value"):
        settings_from(parser.parse_args(["--set", "nonsense"]))


def stamped(seq: int, arrival_ms: int, name: str = "r.jsonl") -> str:
    """A sequenced file's URI as the inbox source's rows give it (its "@" escaped)."""
    return Path(f"/w/inbox/_sequenced/{sequenced_name(seq, name, arrival_ms)}").as_uri()


def stable_member() -> tuple[bytes, str, int]:
    """A group of one member (session 10 s) joined and synced: (blob, member id, generation)."""
    first = op.run_group(SETTINGS, "g", None, lines([join("j1")]), 1_000)
    member = responses(first)[0]["member_id"]
    # The initial delay (0) runs out at the end of the step that rejoins.
    joined = op.run_group(SETTINGS, "g", first.blob, lines([join("j2", member)]), 1_000)
    generation = responses(joined)[0]["generation_id"]
    sync = {
        "api": "sync_group",
        "request_id": "s",
        "group_id": "g",
        "member_id": member,
        "generation_id": generation,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": ""}],
    }
    synced = op.run_group(SETTINGS, "g", joined.blob, lines([json.dumps(sync)]), 1_002)
    assert responses(synced)[0]["error"] is None and synced.blob is not None
    assert decode_group(synced.blob).state.value == "Stable"
    return synced.blob, member, generation


@pytest.mark.parametrize("mode", [op.GROUP_KEY, op.SHARD_KEY])
def test_a_heartbeat_is_served_at_its_files_arrival_not_at_the_batchs_time(mode: str):
    blob, member, generation = stable_member()
    deadline = decode_group(blob).timers[f"heartbeat-{member}"].deadline_ms
    beat = json.dumps(
        {
            "api": "heartbeat",
            "request_id": "h",
            "group_id": "g",
            "member_id": member,
            "generation_id": generation,
        }
    )
    late = deadline + 3_000  # the batch that reads it runs 3 s after the session's deadline

    def run(source: str) -> tuple[list[dict], bytes | None]:
        line = [op.InboxLine(beat, source, 0, "g", arrival_ms=op_arrival(source))]
        if mode == op.GROUP_KEY:
            outcome = op.run_group(SETTINGS, "g", blob, line, late)
            return responses(outcome), outcome.blob
        shard = op.run_shard(SETTINGS, {"g": (deadline, blob)}, line, late)
        rows = [json.loads(r[7]) for r in shard.rows if r[0] == op.RESPONSE]
        return rows, shard.state["g"][1] if "g" in shard.state else None

    answers, kept = run(stamped(7, deadline - 100))
    assert [a["error"] for a in answers] == [None]
    assert kept is not None and decode_group(kept).state.value == "Stable"
    assert list(decode_group(kept).members) == [member]
    # A file sequenced by an older release has no stamp: served at the batch's time, too late.
    answers, _ = run(Path(f"/w/inbox/_sequenced/{sequenced_name(7, 'r.jsonl')}").as_uri())
    assert [a["error"] for a in answers] == ["UNKNOWN_MEMBER_ID"]


def op_arrival(source: str) -> int | None:
    """What the operator reads from a row's source file (``operator._lines``)."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"value": ["{}"], "source_file": [source], "position": [0]})
    (line,) = op._lines(iter([frame]), False)
    return line.arrival_ms


def test_the_rows_carry_each_files_arrival_to_its_lines():
    assert op_arrival(stamped(3, 1_800_000_000_123, "a b@c.jsonl")) == 1_800_000_000_123
    assert op_arrival("file:///w/bootstrap/run-1/part-00000.jsonl") is None


def offset_log(directory: Path, batch_id: int, batch_ms: int, horizon_ms: int | None) -> None:
    """One file of Spark's offset log: a version line, the batch's metadata, a line per source
    (the inbox source's, then a bootstrap file source's)."""
    directory.mkdir(parents=True, exist_ok=True)
    inbox = {"inbox_seq": batch_id, "inbox_files": batch_id}
    if horizon_ms is not None:
        inbox["inbox_horizon_ms"] = horizon_ms
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": batch_ms, "conf": {}}
    lines = ["v1", json.dumps(meta), json.dumps(inbox), json.dumps({"logOffset": 0})]
    (directory / str(batch_id)).write_text("\n".join(lines) + "\n")


def test_the_batch_clock_is_its_input_horizon_when_that_is_earlier(tmp_path):
    offsets = tmp_path / "offsets"
    offset_log(offsets, 4, 10_000, 9_500)
    offset_log(offsets, 5, 11_000, None)  # a batch of an older release: no horizon
    offset_log(offsets, 6, 12_000, 12_500)  # a listing after the batch's timestamp
    settings = dataclasses.replace(SETTINGS, offsets_dir=str(offsets))
    assert [settings.clock(t) for t in (10_000, 11_000, 12_000)] == [9_500, 11_000, 12_000]
    assert settings.clock(99_000) == 99_000  # no such batch among the latest
    assert SETTINGS.clock(10_000) == 10_000  # no offset log
    assert batch_horizon(tmp_path / "missing", 10_000) is None


@pytest.mark.parametrize("mode", [op.GROUP_KEY, op.SHARD_KEY])
def test_no_timer_fires_past_the_input_the_batch_holds(tmp_path, mode: str):
    """A backlog: a member's heartbeat arrived before its deadline, but waits behind
    job.max.files.per.trigger files. The batches that run meanwhile, after the deadline, hold
    input only up to their horizon: the member is not expired; its heartbeat, read later, keeps
    it; once no input is left behind a deadline, the member is expired."""
    from tests.test_stream_alternatives import GroupState, frames, run_apply

    blob, member, generation = stable_member()
    deadline = decode_group(blob).timers[f"heartbeat-{member}"].deadline_ms
    offsets = tmp_path / "offsets"
    settings = dataclasses.replace(SETTINGS, offsets_dir=str(offsets))
    if mode == op.GROUP_KEY:
        function, state = op.group_function(settings), GroupState()
        state.value = (blob,)

        def group() -> Any:
            assert state.value is not None
            return decode_group(state.value[0])
    else:
        function, state = op.shard_function(settings), GroupState()
        state.value = (op.encode_shard({"g": (deadline, blob)}),)

        def group() -> Any:
            assert state.value is not None
            return decode_group(op.decode_shard(state.value[0])["g"][1])

    state.timeout_at = deadline - 1
    # 1. Batches after the deadline whose input ends before it (the heartbeat waits unread).
    offset_log(offsets, 1, deadline + 2_000, deadline - 50)
    ticks = run_apply(function, state, deadline + 2_000, [])
    assert ticks == [] and member in group().members  # not even a tick: nothing was due
    assert state.timeout_at is not None and state.timeout_at <= deadline + 2_001  # still due
    # 2. The heartbeat's file (stamped before the deadline) is read; its horizon is later.
    beat = json.dumps(
        {"api": "heartbeat", "request_id": "h", "group_id": "g", "member_id": member,
         "generation_id": generation}
    )  # fmt: skip
    offset_log(offsets, 2, deadline + 4_000, deadline + 4_000)
    rows = run_apply(
        function, state, deadline + 4_000, frames([beat], 10, stamped(9, deadline - 30))
    )
    answers = [json.loads(r[7]) for r in rows if r[0] == op.RESPONSE]
    assert [a["error"] for a in answers] == [None]
    assert member in group().members and group().state.value == "Stable"
    # 3. Silent since: expired once a batch holds all input up to its new deadline, which
    # counts from the batch after the one that answered the heartbeat (planned once that one
    # had committed: the member could read its answer only then).
    delivered = deadline + 4_000 + 3_000
    offset_log(offsets, 3, delivered, delivered)
    run_apply(function, state, delivered, [])
    silent_until = delivered + 10_000
    offset_log(offsets, 4, silent_until - 1, silent_until - 1)
    run_apply(function, state, silent_until - 1, [])
    assert member in group().members
    offset_log(offsets, 5, silent_until + 1, silent_until + 1)
    run_apply(function, state, silent_until + 1, [])
    assert state.value is None or member not in group().members


def test_the_offset_log_says_when_a_batchs_answers_were_delivered(tmp_path):
    """The batch after a batch was planned once that batch had committed: its timestamp is when
    the batch's answers were readable. Found only when both are in the log as the asking batch
    sees it."""
    from coordinator.stream.source import OffsetLogView

    offsets = tmp_path / "offsets"
    for batch_id, batch_ms in [(3, 1_000), (4, 1_900), (5, 9_000), (6, 9_400), (7, 12_000)]:
        offset_log(offsets, batch_id, batch_ms, batch_ms)
    view = OffsetLogView(offsets, 12_000)
    assert view.batch_id == 7 and view.offset is not None and view.offset.horizon_ms == 12_000
    assert view.delivered_ms(9_400) == 12_000  # the batch before this one
    assert view.delivered_ms(1_900) == 9_000  # a batch that ran 7 s
    assert view.delivered_ms(1_000) == 1_900
    assert view.delivered_ms(12_000) is None  # this batch: not delivered yet
    assert view.delivered_ms(5_000) is None  # no batch had that timestamp
    assert view.delivered_ms(500) is None  # before the log (deleted by Spark's retention)
    # A batch as it saw the log when it ran (a re-run sees the same): nothing after it.
    assert OffsetLogView(offsets, 9_000).delivered_ms(1_900) == 9_000
    assert OffsetLogView(offsets, 9_000).delivered_ms(9_000) is None
    (offsets / "5").unlink()  # a gap: the batch after 1_900 is unknown
    assert OffsetLogView(offsets, 12_000).delivered_ms(1_900) is None
    assert OffsetLogView(offsets, 12_000).delivered_ms(9_400) == 12_000
    assert OffsetLogView(tmp_path / "missing", 1).delivered_ms(0) is None


@pytest.mark.parametrize("mode", [op.GROUP_KEY, op.SHARD_KEY])
@pytest.mark.parametrize("with_log", [True, False], ids=["offset log", "no offset log"])
def test_a_member_is_not_expired_by_the_run_time_of_the_batch_that_answered_it(
    tmp_path, mode: str, with_log: bool
):
    """A batch answers a member's heartbeat at its clock T, then runs 9 s (session 10 s): its
    answer is readable only when the next batch is planned, at T + 9 s. The session counts from
    then: woken at T + 10 s (the earliest the session could end), the group finds the
    deadline moved to T + 19 s, emits nothing and sleeps until then. Without an offset log to
    find the delivery in, the session counts from T, as before."""
    from tests.test_stream_alternatives import GroupState, frames, run_apply

    offsets = tmp_path / "offsets"
    settings = dataclasses.replace(
        SETTINGS, offsets_dir=str(offsets) if with_log else None, delivery_window_ms=60_000
    )
    blob, member, generation = stable_member()
    deadline = decode_group(blob).timers[f"heartbeat-{member}"].deadline_ms
    state = GroupState()
    if mode == op.GROUP_KEY:
        function = op.group_function(settings)
        state.value = (blob,)
    else:
        function = op.shard_function(settings)
        state.value = (op.encode_shard({"g": (deadline, blob)}),)

    def group() -> Any:
        assert state.value is not None
        if mode == op.GROUP_KEY:
            return decode_group(state.value[0])
        return decode_group(op.decode_shard(state.value[0])["g"][1])

    beat = json.dumps(
        {"api": "heartbeat", "request_id": "h", "group_id": "g", "member_id": member,
         "generation_id": generation}
    )  # fmt: skip
    answered = deadline - 5_000
    offset_log(offsets, 1, answered, answered)
    rows = run_apply(function, state, answered, frames([beat], 10, stamped(1, answered - 10)))
    assert [json.loads(r[7])["error"] for r in rows if r[0] == op.RESPONSE] == [None]
    assert state.timeout_at == answered + 10_000  # the earliest the session can end
    delivered = answered + 9_000  # the batch ran 9 s: the next one was planned then
    offset_log(offsets, 2, delivered, delivered)
    assert run_apply(function, state, delivered, []) == []  # nothing due: not even called
    woken = answered + 10_001
    offset_log(offsets, 3, woken, woken)
    rows = run_apply(function, state, woken, [])
    if not with_log:
        assert member not in group().members  # expired 1 s after it could read its answer
        return
    assert rows == [] and member in group().members and group().undelivered is None
    assert group().timers[f"heartbeat-{member}"].deadline_ms == delivered + 10_000
    assert state.timeout_at == delivered + 10_000
    offset_log(offsets, 4, delivered + 10_001, delivered + 10_001)
    rows = run_apply(function, state, delivered + 10_001, [])
    assert state.value is None or member not in group().members
    assert [r[0] for r in rows if r[0] == op.GROUP]  # the summary of the group without it


def test_a_group_whose_delivery_is_unknown_wakes_while_the_log_still_has_it(tmp_path):
    """A step armed a 5-minute join purgatory and nothing else: the group is woken within the
    delivery window (while the offset log still holds the next batch), once, to look the
    delivery up; then it sleeps until the moved deadline."""
    offsets = tmp_path / "offsets"
    settings = dataclasses.replace(SETTINGS, offsets_dir=str(offsets), delivery_window_ms=4_000)
    offset_log(offsets, 1, 1_000, 1_000)
    first = op.run_group(settings, "g", None, lines([join("j1")]), 1_000)
    group = decode_group(first.blob)
    assert group.undelivered is not None and group.undelivered.tag == 1_000
    assert first.deadline_ms == 1_000 + 4_000  # the window, sooner than the 10 s session
    offset_log(offsets, 2, 1_700, 1_700)
    offset_log(offsets, 3, 5_001, 5_001)
    woken = op.run_group(settings, "g", first.blob, [], 5_001, timed_out=True)
    assert woken.rows == []
    group = decode_group(woken.blob)
    assert group.undelivered is None
    session = next(t for k, t in group.timers.items() if k.startswith("heartbeat-"))
    assert session.deadline_ms == 1_700 + 10_000
    assert woken.deadline_ms == 1_700 + 10_000


def test_a_batch_missing_from_the_offset_log_arms_timers_from_its_clock(tmp_path):
    """No later batch could find this one's delivery (no offset log, as in ``LocalJob``, or a
    batch not in it): its timers count from its clock and nothing waits for a delivery."""
    offsets = tmp_path / "offsets"
    settings = dataclasses.replace(SETTINGS, offsets_dir=str(offsets))
    for operator_settings in (settings, SETTINGS):
        outcome = op.run_group(operator_settings, "g", None, lines([join("j1")]), 1_000)
        assert decode_group(outcome.blob).undelivered is None
        assert outcome.deadline_ms == 1_000 + 10_000


def test_the_output_frame_holds_the_rows_and_gives_only_records_a_key_and_value():
    import pyarrow as pa

    from coordinator.stream.datafiles import OPERATOR_SCHEMA

    first = op.run_group(SETTINGS, "g", None, lines([commit("c1", 5)]), 1_000)
    # Deleting the group writes a tombstone: a record whose value is None.
    delete = json.dumps({"api": "delete_groups", "request_id": "d", "group_id": "g"})
    second = op.run_group(SETTINGS, "g", first.blob, lines([delete]), 2_000)
    rows = first.rows + second.rows
    kinds = {row[0] for row in rows}
    assert {op.RESPONSE, op.RECORD, op.GROUP} <= kinds, kinds
    assert any(row[0] == op.RECORD and row[5] is None for row in rows), "no tombstone"
    frame = op.output_frame(rows)
    assert list(frame.columns) == list(op.OUTPUT_COLUMNS)
    table = pa.Table.from_pandas(frame, schema=OPERATOR_SCHEMA, preserve_index=False)
    for row, got in zip(rows, table.to_pylist(), strict=True):
        want = dict(zip(op.OUTPUT_COLUMNS, row, strict=True))
        if row[0] != op.RECORD:  # the sink reads the key and value of records only
            assert (got["key"], got["value"]) == (b"", b"")
            want["key"] = want["value"] = b""
        assert got == want
    empty = op.output_frame([])
    assert list(empty.columns) == list(op.OUTPUT_COLUMNS) and len(empty) == 0
