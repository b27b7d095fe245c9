"""coordinator.queries: Spark DataFrames and SQL views over a warehouse that live members wrote.

The warehouse is built once (``LocalJob`` + ``Simulation`` + ``LocalNetwork``: the job's
micro-batch without Spark, the same tables): three members of ``orders-app`` join and commit,
a simple group ``audit`` commits and deletes one offset (a tombstone), a simple group
``old-app`` commits and is deleted (tombstones), one member of ``orders-app`` crashes, its
session expires and the group rebalances to the two survivors, who commit again. Every
DataFrame is compared with chispa against the pyarrow reader and the pure functions of
:mod:`coordinator.admin.history`, and against hand-written rows for the key facts.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from coordinator.admin import history
from coordinator.admin.tables import AsOf, WarehouseReader, format_ms
from coordinator.client.simulation import Simulation
from coordinator.log.partitioning import partition_for
from coordinator.queries import (
    COMMITTED_OFFSETS_SCHEMA,
    MEMBERS_HISTORY_SCHEMA,
    OFFSETS_HISTORY_SCHEMA,
    REBALANCES_SCHEMA,
    VIEWS,
    Queries,
    _has_delta_reader,
    spark_schema,
)
from coordinator.stream.local import LocalJob, LocalNetwork
from coordinator.stream.schema import (
    CONSUMER_OFFSETS,
    GROUP_HISTORY,
    GROUP_STATE,
    GROUP_STATE_SCHEMA,
    REJECTED_REQUESTS,
    RESPONSES,
    TABLE_SCHEMAS,
)
from coordinator.stream.settings import load_settings

pytestmark = pytest.mark.slow

START_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z
APP, AUDIT, OLD = "orders-app", "audit", "old-app"
APPEND_ONLY = (CONSUMER_OFFSETS, RESPONSES, GROUP_HISTORY, REJECTED_REQUESTS)


@dataclass(frozen=True)
class Built:
    root: Path
    members: list[str]  # c0, c1, c2 (member ids sort by client id)
    crashed: str
    early_log_version: int  # consumer_offsets' version before old-app was deleted
    early_batch: int  # the last batch before then
    early_ms: int  # a time between that batch's clock and the next one's (the simulated clock)
    gen1_ms: int  # a simulated time in generation 1, and one in generation 2
    gen2_ms: int


def build(root: Path) -> Built:
    settings = load_settings([], {"group.initial.rebalance.delay.ms": "3000"}, warehouse=str(root))
    job = LocalJob(settings)
    sim = Simulation(network=lambda clock: LocalNetwork(job, clock, 200), start_ms=START_MS)
    topics = {"orders": 6}
    members = [
        sim.add_member(APP, ["orders"], metadata=topics, client_id=f"c{i}") for i in range(3)
    ]

    def stable(group: list[Any], partitions_each: int) -> bool:
        # sim.stable asks the in-process engine, which a LocalNetwork does not use
        return len({m.generation_id for m in group}) == 1 and all(
            m.state.value == "STABLE" and len(m.assignment) == partitions_each for m in group
        )

    assert sim.run(60_000, until=lambda: stable(members, 2))
    for m in members:
        m.commit({tp: 10 for tp in m.assignment})
    sim.run(1_000)

    ids = iter(range(1_000))

    def admin(*requests: Any) -> list[dict[str, Any]]:
        lines = [
            r if isinstance(r, str) else {**r, "request_id": f"a{next(ids)}"} for r in requests
        ]
        return job.run_batch(lines, sim.clock.now_ms())

    simple = {"member_id": "", "group_instance_id": None, "generation_id": -1}

    def offsets(partitions: range, offset: int, metadata: str) -> list[dict[str, Any]]:
        return [
            {"topic": "orders", "partition": p, "offset": offset, "metadata": metadata}
            for p in partitions
        ]

    answers = admin(
        {"api": "offset_commit", "group_id": AUDIT, **simple, "offsets": offsets(range(3), 5, "a")},
        {"api": "offset_commit", "group_id": OLD, **simple, "offsets": offsets(range(1), 7, "")},
        "not a request at all",  # -> rejected_requests
    )
    assert [a["error_code"] for a in answers] == [0, 0]
    sim.run(500)
    (deleted,) = admin(
        {
            "api": "offset_delete",
            "group_id": AUDIT,
            "partitions": [{"topic": "orders", "partition": 1}],
        }
    )
    assert deleted["partitions"][0]["error_code"] == 0
    sim.run(500)
    gen1_ms = sim.clock.now_ms()
    early_log_version = DeltaTable(str(root / "tables" / CONSUMER_OFFSETS)).version()
    early_batch = job.batch_id - 1
    sim.run(100)  # the next batch runs on a later clock

    (gone,) = admin({"api": "delete_groups", "group_id": OLD})
    assert gone["error_code"] == 0
    for m in members:
        m.commit({tp: 20 for tp in m.assignment})
    sim.run(1_000)
    crashed = members[2].member_id
    sim.crash(members[2])
    assert sim.run(120_000, until=lambda: stable(members[:2], 3))
    for m in members[:2]:
        m.commit({tp: 30 for tp in m.assignment})
    sim.run(1_000)
    assert job.internal_errors == []
    return Built(
        root,
        [m.member_id for m in members],
        crashed,
        early_log_version,
        early_batch,
        gen1_ms,
        gen1_ms,
        sim.clock.now_ms(),
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("queries") / "warehouse")


@pytest.fixture(scope="module")
def q(spark: Any, built: Built) -> Queries:
    return Queries(spark, built.root)


@pytest.fixture(scope="module")
def early(spark: Any, built: Built) -> Queries:
    return Queries(spark, built.root, as_of=str(built.early_log_version))


def frame(spark: Any, rows: list[dict[str, Any]] | pa.Table, schema: pa.Schema) -> Any:
    """The expected DataFrame: rows (or an Arrow table) with an Arrow schema."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
    if table.num_rows == 0:
        return spark.createDataFrame([], spark_schema(schema))
    return spark.createDataFrame(table.select(schema.names).cast(schema))


# --- reading the tables -------------------------------------------------------------------------


def test_tables_have_the_arrow_schemas_and_no_delta_reader_here(spark, q, built):
    assert q.delta_reader is False
    assert _has_delta_reader(spark, built.root) is False
    assert q.cut.batch_id is not None and q.cut.now
    for name, schema in TABLE_SCHEMAS.items():
        assert q.table(name).schema == spark_schema(schema), name
    assert q.table(CONSUMER_OFFSETS).columns == TABLE_SCHEMAS[CONSUMER_OFFSETS].names
    with pytest.raises(ValueError, match="no table"):
        q.table("nope")


@pytest.mark.parametrize("name", APPEND_ONLY)
def test_raw_tables_equal_the_pyarrow_reader(spark, q, built, name):
    """Parquet over the Delta log's files = delta-rs' own dataset, up to the cut: the
    partition column comes from the directory names with the schema's type."""
    reader = WarehouseReader(built.root)
    expected = frame(spark, reader.read(name, q.cut), TABLE_SCHEMAS[name])
    assert expected.count() > 0, name
    assert_df_equality(q.table(name), expected, ignore_row_order=True)


def test_offsets_partition_comes_from_the_directories(q):
    rows = q.table(CONSUMER_OFFSETS).select("group_id", "offsets_partition").distinct().collect()
    assert {(r.group_id, r.offsets_partition) for r in rows} == {
        (g, partition_for(g, 50)) for g in (APP, AUDIT, OLD)
    }


# --- offsets ------------------------------------------------------------------------------------


def test_committed_offsets_equal_the_pure_function(spark, q, built):
    log = WarehouseReader(built.root).log(q.cut).to_pylist()
    expected = frame(spark, history.committed_offsets(log), COMMITTED_OFFSETS_SCHEMA)
    assert_df_equality(q.committed_offsets(), expected)  # in (group, topic, partition) order


def test_committed_offsets_respect_tombstones(spark, q):
    """audit's partition 1 was deleted (OffsetDelete), old-app was deleted (DeleteGroups):
    their last records are tombstones, so they have no committed offset."""
    expected = spark.createDataFrame(
        [(AUDIT, "orders", 0, 5, "a"), (AUDIT, "orders", 2, 5, "a")]
        + [(APP, "orders", p, 30, "") for p in range(6)],
        "group_id string, topic string, partition int, committed_offset long, metadata string",
    )
    actual = q.committed_offsets().select(*expected.columns)
    assert_df_equality(actual, expected)


def test_offsets_history_in_log_order_with_tombstones(spark, q, built):
    log = WarehouseReader(built.root).log(q.cut).to_pylist()
    rows = [
        {**r, "log_offset": r["offset"], "tombstone": r["value"] is None}
        for r in log
        if r["record_type"] == "offset_commit"
    ]
    assert_df_equality(q.offsets_history(), frame(spark, rows, OFFSETS_HISTORY_SCHEMA))
    tombstones = spark.createDataFrame(
        [(AUDIT, "orders", 1, None), (OLD, "orders", 0, None)],
        "group_id string, topic string, partition int, committed_offset long",
    )
    assert_df_equality(
        q.offsets_history().where("tombstone").select(*tombstones.columns),
        tombstones,
        ignore_row_order=True,
    )
    commits = q.offsets_history().where(f"group_id = '{APP}' AND NOT tombstone")
    assert sorted(r.committed_offset for r in commits.collect()) == [10] * 6 + [20] * 6 + [30] * 6


# --- groups -------------------------------------------------------------------------------------


def test_group_state_now_equals_the_reader(spark, q, built):
    reader = WarehouseReader(built.root)
    expected = frame(spark, reader.group_states(q.cut), GROUP_STATE_SCHEMA)
    assert_df_equality(q.group_state(), expected)
    facts = spark.createDataFrame(
        [(AUDIT, "Empty", 0, 0), (APP, "Stable", 2, 2)],
        "group_id string, state string, generation_id int, num_members int",
    )
    assert_df_equality(q.group_state().select(*facts.columns), facts)
    members = q.group_state().where(f"group_id = '{APP}'").select("members.member_id").first()[0]
    assert sorted(members) == built.members[:2]


def test_group_history_equals_the_reader(spark, q, built):
    expected = frame(
        spark, WarehouseReader(built.root).group_history(q.cut), TABLE_SCHEMAS[GROUP_HISTORY]
    )
    assert_df_equality(q.group_history(), expected)  # by group, then batch
    states = [r.state for r in q.group_history().where(f"group_id = '{OLD}'").collect()]
    assert states == ["Empty", "Dead"]


# --- history, by the pure functions inside Spark ----------------------------------------------------


def test_rebalances_equal_the_pure_function(spark, q, built):
    rows = WarehouseReader(built.root).group_history(q.cut).to_pylist()
    expected = frame(spark, history.rebalances(rows), REBALANCES_SCHEMA)
    assert_df_equality(q.rebalances(), expected, ignore_row_order=True)


def test_rebalances_show_the_crash(spark, q, built):
    c0, c1, c2 = built.members
    expected = spark.createDataFrame(
        [
            (APP, 1, "Stable", 0, 3, [c0, c1, c2], []),
            (APP, 2, "Stable", 3, 2, [], [c2]),
        ],
        "group_id string, generation_id int, outcome string, members_before int, "
        "members_after int, joined array<string>, left array<string>",
    )
    actual = q.rebalances()
    assert_df_equality(actual.select(*expected.columns), expected)  # by group, then start
    reasons = [r.reason for r in actual.collect()]
    assert reasons[0].startswith("Adding new member")
    assert "heartbeat expiration" in reasons[1] and built.crashed in reasons[1]


def test_members_history_equals_the_pure_function(spark, q, built):
    log = WarehouseReader(built.root).log(q.cut).to_pylist()
    expected = frame(spark, history.members_history(log), MEMBERS_HISTORY_SCHEMA)
    assert_df_equality(q.members_history(), expected, ignore_row_order=True)


def test_members_history_shows_who_held_what(spark, q, built):
    c0, c1, c2 = built.members
    held = q.members_history().selectExpr(
        "generation_id",
        "member_id",
        "is_leader",
        "valid_to_ms IS NULL AS current",
        "transform(assigned_partitions, tp -> tp.partition) AS partitions",
    )
    expected = spark.createDataFrame(
        [
            (1, c0, True, False, [0, 1]),
            (1, c1, False, False, [2, 3]),
            (1, c2, False, False, [4, 5]),
            (2, c0, True, True, [0, 1, 2]),
            (2, c1, False, True, [3, 4, 5]),
        ],
        "generation_id int, member_id string, is_leader boolean, current boolean, "
        "partitions array<int>",
    )
    assert_df_equality(held, expected, ignore_nullable=True)


# --- time travel ----------------------------------------------------------------------------------


def test_time_travel_by_log_version(spark, early, built):
    """Before old-app was deleted and the member crashed: generation 1 with three members,
    offsets at 10, old-app still there with its offset."""
    assert early.cut.batch_id is not None and early.cut.batch_id <= built.early_batch
    assert early.cut.as_of == AsOf(log_version=built.early_log_version)
    groups = spark.createDataFrame(
        [(AUDIT, "Empty", 0, 0, 2), (OLD, "Empty", 0, 0, 1), (APP, "Stable", 1, 3, 6)],
        "group_id string, state string, generation_id int, num_members int, "
        "num_committed_offsets int",
    )
    assert_df_equality(early.group_state().select(*groups.columns), groups)
    offsets = spark.createDataFrame(
        [(AUDIT, 0, 5), (AUDIT, 2, 5), (OLD, 0, 7)] + [(APP, p, 10) for p in range(6)],
        "group_id string, partition int, committed_offset long",
    )
    assert_df_equality(early.committed_offsets().select(*offsets.columns), offsets)
    assert [r.generation_id for r in early.rebalances().collect()] == [1]
    spans = early.members_history().select("generation_id", "valid_to_ms").distinct().collect()
    assert [tuple(r) for r in spans] == [(1, None)]  # generation 1 is still the newest


def test_time_travel_agrees_with_the_reader(spark, early, built):
    reader = WarehouseReader(built.root)
    cut = early.cut
    assert_df_equality(
        early.group_state(), frame(spark, reader.group_states(cut), GROUP_STATE_SCHEMA)
    )
    log = reader.log(cut).to_pylist()
    assert_df_equality(
        early.committed_offsets(),
        frame(spark, history.committed_offsets(log), COMMITTED_OFFSETS_SCHEMA),
    )
    assert_df_equality(
        early.members_history(),
        frame(spark, history.members_history(log), MEMBERS_HISTORY_SCHEMA),
        ignore_row_order=True,
    )
    assert (
        early.table(RESPONSES).where(f"batch_id > {cut.batch_id}").count() == 0
        and early.table(RESPONSES).count() > 0
    )


def test_time_travel_by_timestamp(spark, q, early, built):
    """A date-time names the last batch run at or before it (the batches' clock)."""
    then = q.at(format_ms(built.early_ms))
    assert then.cut.batch_id is not None and early.cut.batch_id is not None
    assert early.cut.batch_id <= then.cut.batch_id <= built.early_batch
    assert then.cut.as_of == AsOf(timestamp_ms=built.early_ms)
    assert_df_equality(then.group_state(), early.group_state())
    assert_df_equality(then.committed_offsets(), early.committed_offsets())
    before = q.at(AsOf(timestamp_ms=built.early_ms - 3_600_000))  # before the first batch
    assert before.cut.batch_id is None
    assert before.group_state().count() == 0 and before.rebalances().count() == 0


def test_time_travel_without_group_history(spark, built, tmp_path):
    """A warehouse written before group_history existed: group_state by Delta time travel."""
    old = tmp_path / "old-warehouse"
    shutil.copytree(built.root, old)
    shutil.rmtree(old / "tables" / GROUP_HISTORY)
    then = Queries(spark, old, as_of=AsOf(timestamp_ms=built.early_ms))
    expected = WarehouseReader(old).group_states(then.cut)
    assert [g["group_id"] for g in expected] == [AUDIT, OLD, APP]
    assert_df_equality(then.group_state(), frame(spark, expected, GROUP_STATE_SCHEMA))
    assert then.group_history().count() == 0 and then.rebalances().count() == 0


# --- SQL ------------------------------------------------------------------------------------------


def test_views_and_the_sql_example(spark, q, built):
    names = q.register_views("q_")
    assert names == [f"q_{v}" for v in VIEWS]
    assert_df_equality(spark.table("q_committed_offsets"), q.committed_offsets())
    assert spark.table("q_consumer_offsets").count() == q.table(CONSUMER_OFFSETS).count()

    def held(partition: int, at_ms: int) -> list[str]:
        moment = datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        sql = f"""
            SELECT group_id, generation_id, member_id, client_id, client_host
            FROM q_members_history LATERAL VIEW explode(assigned_partitions) AS tp
            WHERE tp.topic = 'orders' AND tp.partition = {partition}
              AND valid_from_ms <= unix_millis(TIMESTAMP '{moment}')
              AND (valid_to_ms IS NULL OR valid_to_ms > unix_millis(TIMESTAMP '{moment}'))
        """
        return [r.member_id for r in spark.sql(sql).collect()]

    _, c1, c2 = built.members
    assert held(5, built.gen1_ms) == [c2]
    assert held(5, built.gen2_ms) == [c1]
    assert held(5, START_MS) == []  # before the first generation


def test_sql_over_views_at_a_past_cut(spark, early):
    early.register_views("q_early_")
    rows = spark.sql(
        "SELECT group_id, sum(committed_offset) AS total FROM q_early_committed_offsets "
        "GROUP BY group_id ORDER BY group_id"
    ).collect()
    assert [tuple(r) for r in rows] == [(AUDIT, 10), (OLD, 7), (APP, 60)]


# --- edges ----------------------------------------------------------------------------------------


def test_an_empty_warehouse_gives_empty_dataframes_with_their_schemas(spark, tmp_path):
    q = Queries(spark, tmp_path / "nothing")
    assert q.cut.batch_id is None
    expected = {
        GROUP_STATE: GROUP_STATE_SCHEMA,
        GROUP_HISTORY: TABLE_SCHEMAS[GROUP_HISTORY],
        "committed_offsets": COMMITTED_OFFSETS_SCHEMA,
        "offsets_history": OFFSETS_HISTORY_SCHEMA,
        "rebalances": REBALANCES_SCHEMA,
        "members_history": MEMBERS_HISTORY_SCHEMA,
        **{name: TABLE_SCHEMAS[name] for name in (CONSUMER_OFFSETS, RESPONSES, REJECTED_REQUESTS)},
    }
    frames = q.dataframes()
    assert list(frames) == list(VIEWS)
    for name, df in frames.items():
        assert df.schema == spark_schema(expected[name]), name
        assert df.count() == 0, name


def test_output_schemas_name_the_functions_keys(q, built):
    """The Arrow schemas here and the dicts of coordinator.admin.history cannot drift apart."""
    reader = WarehouseReader(built.root)
    log = reader.log(q.cut).to_pylist()
    outputs = [
        (COMMITTED_OFFSETS_SCHEMA, history.committed_offsets(log)),
        (MEMBERS_HISTORY_SCHEMA, history.members_history(log)),
        (REBALANCES_SCHEMA, history.rebalances(reader.group_history(q.cut).to_pylist())),
    ]
    for schema, rows in outputs:
        assert rows and all(list(row) == schema.names for row in rows)
