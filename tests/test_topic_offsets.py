"""coordinator.admin.topic_offsets: the topics' log offsets over time, as the operator gives them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from coordinator.admin.topic_offsets import NOW, SCHEMA, TopicOffsets, TopicOffsetsError

# t-0 sampled at 1000, 2000 and 3000 (given out of order); t-1 once; u-0 only "now".
ROWS = [
    {
        "topic": "t",
        "partition": 0,
        "timestamp_ms": 2_000,
        "log_start_offset": 5,
        "log_end_offset": 50,
    },
    {
        "topic": "t",
        "partition": 0,
        "timestamp_ms": 1_000,
        "log_start_offset": 0,
        "log_end_offset": 20,
    },
    {
        "topic": "t",
        "partition": 0,
        "timestamp_ms": 3_000,
        "log_start_offset": 8,
        "log_end_offset": 90,
    },
    {
        "topic": "t",
        "partition": 1,
        "timestamp_ms": 1_500,
        "log_start_offset": 3,
        "log_end_offset": 7,
    },
    {
        "topic": "u",
        "partition": 0,
        "timestamp_ms": None,
        "log_start_offset": 2,
        "log_end_offset": 11,
    },
]

CSV = """topic,partition,timestamp_ms,log_start_offset,log_end_offset
t,0,2000,5,50
t,0,1000,0,20
t,0,3000,8,90
t,1,1500,3,7
u,0,,2,11
"""


def _expect_rows_answers(offsets: TopicOffsets) -> None:
    assert offsets.topics() == ["t", "u"]
    assert offsets.partitions("t") == [0, 1]
    assert offsets.partitions("u") == [0]
    assert offsets.latest(("t", 0)) == 90
    assert offsets.earliest(("t", 0)) == 8
    assert offsets.offset_for_time(("t", 0), 2_500) == 50
    assert offsets.latest(("u", 0)) == 11
    assert offsets.earliest(("u", 0)) == 2


@pytest.fixture
def offsets() -> TopicOffsets:
    return TopicOffsets(ROWS)


# --- latest, earliest, offset_for_time ------------------------------------------------------------


def test_latest_and_earliest_are_the_newest_samples(offsets):
    assert offsets.latest(("t", 0)) == 90
    assert offsets.earliest(("t", 0)) == 8
    assert offsets.latest(("t", 1)) == 7
    assert offsets.earliest(("t", 1)) == 3


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (0, 0),  # before the first sample: the first sample's log start
        (999, 0),
        (1_000, 20),  # at a sample: its log end
        (1_001, 20),  # between two samples: the older one's log end (round down)
        (1_999, 20),
        (2_000, 50),
        (2_999, 50),
        (3_000, 90),  # at the last sample
        (10_000_000, 90),  # after the last: latest
    ],
)
def test_offset_for_time(offsets, at, expected):
    assert offsets.offset_for_time(("t", 0), at) == expected


def test_offset_for_time_before_the_first_sample_uses_the_first_samples_start():
    offsets = TopicOffsets(
        [
            {
                "topic": "t",
                "partition": 0,
                "timestamp_ms": 100,
                "log_start_offset": 4,
                "log_end_offset": 9,
            },
            {
                "topic": "t",
                "partition": 0,
                "timestamp_ms": 200,
                "log_start_offset": 6,
                "log_end_offset": 12,
            },
        ]
    )
    assert offsets.offset_for_time(("t", 0), 99) == 4
    assert offsets.earliest(("t", 0)) == 6


def test_a_single_sample(offsets):
    assert offsets.offset_for_time(("t", 1), 1_499) == 3
    assert offsets.offset_for_time(("t", 1), 1_500) == 7
    assert offsets.offset_for_time(("t", 1), 1_501) == 7


def test_rows_without_a_time_are_now(offsets):
    # Only a "now" sample: every past time is before it, so the log start (re-read, never skip).
    assert offsets.offset_for_time(("u", 0), 0) == 2
    assert offsets.offset_for_time(("u", 0), 1_700_000_000_000) == 2
    assert offsets.offset_for_time(("u", 0), NOW) == 11


def test_a_now_row_comes_after_every_timed_sample():
    offsets = TopicOffsets(
        [
            {"topic": "t", "partition": 0, "log_end_offset": 100},  # now, given first
            {
                "topic": "t",
                "partition": 0,
                "timestamp_ms": 1_000,
                "log_start_offset": 1,
                "log_end_offset": 40,
            },
        ]
    )
    assert offsets.latest(("t", 0)) == 100
    assert offsets.earliest(("t", 0)) == 0  # the now row has no log start: 0
    assert offsets.offset_for_time(("t", 0), 500) == 1
    assert offsets.offset_for_time(("t", 0), 1_000) == 40
    assert offsets.offset_for_time(("t", 0), 5_000) == 40  # newest sample at or before


def test_string_values_as_csv_gives_them():
    offsets = TopicOffsets(
        [
            {
                "topic": "t",
                "partition": "3",
                "timestamp_ms": "10",
                "log_start_offset": "",
                "log_end_offset": "8",
            },
            {
                "topic": "t",
                "partition": "3",
                "timestamp_ms": "",
                "log_start_offset": "4",
                "log_end_offset": "9",
            },
        ]
    )
    assert ("t", 3) in offsets
    assert ("t", "3") not in offsets
    assert offsets.offset_for_time(("t", 3), 5) == 0
    assert offsets.offset_for_time(("t", 3), 10) == 8
    assert (offsets.earliest(("t", 3)), offsets.latest(("t", 3))) == (4, 9)


def test_contains_topics_and_partitions(offsets):
    assert ("t", 0) in offsets
    assert ("t", 2) not in offsets
    assert ("v", 0) not in offsets
    assert offsets.topics() == ["t", "u"]
    assert offsets.partitions("t") == [0, 1]
    assert offsets.partitions("v") == []


def test_partitions_sort_numerically():
    offsets = TopicOffsets(
        [{"topic": "t", "partition": p, "log_end_offset": 1} for p in (10, 2, 0)]
    )
    assert offsets.partitions("t") == [0, 2, 10]


def test_no_rows():
    offsets = TopicOffsets([])
    assert offsets.topics() == []
    assert offsets.to_table().num_rows == 0


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["latest", "earliest"])
def test_unknown_partition(offsets, method):
    with pytest.raises(
        TopicOffsetsError, match=r"^no log offsets for t-9 in the topic offsets given$"
    ):
        getattr(offsets, method)(("t", 9))


def test_unknown_partition_for_a_time(offsets):
    with pytest.raises(TopicOffsetsError, match=r"^no log offsets for v-0 in the topic offsets"):
        offsets.offset_for_time(("v", 0), 1_000)


@pytest.mark.parametrize(
    "row",
    [
        {"partition": 0, "log_end_offset": 1},
        {"topic": "t", "log_end_offset": 1},
        {"topic": "t", "partition": 0},
        {"topic": "t", "partition": "x", "log_end_offset": 1},
        {"topic": "t", "partition": 0, "log_end_offset": None},
        {"topic": "t", "partition": 0, "log_end_offset": ""},
    ],
)
def test_rows_need_topic_partition_and_log_end(row):
    with pytest.raises(TopicOffsetsError) as raised:
        TopicOffsets([row])
    assert str(raised.value) == f"a row needs topic, partition and log_end_offset: {row}"


@pytest.mark.parametrize(
    "row",
    [
        {"topic": "t", "partition": 0, "log_end_offset": 1, "timestamp_ms": "yesterday"},
        {"topic": "t", "partition": 0, "log_end_offset": 1, "log_start_offset": "x"},
    ],
)
def test_unreadable_optional_columns_are_topic_offsets_errors(row):
    # BUG: the optional columns are converted outside the try: a bad value escapes as a bare
    # ValueError ("invalid literal for int()"), which `coordinator groups` does not catch.
    with pytest.raises(TopicOffsetsError):
        TopicOffsets([row])


def test_csv_with_a_bad_timestamp_is_a_topic_offsets_error(tmp_path):
    path = tmp_path / "offsets.csv"
    path.write_text("topic,partition,timestamp_ms,log_end_offset\nt,0,2024-01-01,5\n")
    with pytest.raises(TopicOffsetsError):
        TopicOffsets.read(path)


# --- reading files and tables ---------------------------------------------------------------------


def test_read_csv(tmp_path):
    path = tmp_path / "offsets.csv"
    path.write_text(CSV)
    offsets = TopicOffsets.read(path)
    _expect_rows_answers(offsets)
    assert offsets.to_table().equals(TopicOffsets(ROWS).to_table())


def test_read_csv_with_only_the_required_columns(tmp_path):
    path = tmp_path / "offsets.csv"
    path.write_text("topic,partition,log_end_offset\nt,0,12\nt,1,13\n")
    offsets = TopicOffsets.read(str(path))
    assert [(offsets.earliest(("t", p)), offsets.latest(("t", p))) for p in (0, 1)] == [
        (0, 12),
        (0, 13),
    ]


def test_read_csv_without_log_end_column(tmp_path):
    path = tmp_path / "offsets.csv"
    path.write_text("topic,partition,log_start_offset\nt,0,12\n")
    with pytest.raises(
        TopicOffsetsError, match=r"^a row needs topic, partition and log_end_offset"
    ):
        TopicOffsets.read(path)


def test_read_csv_with_only_a_header(tmp_path):
    path = tmp_path / "offsets.csv"
    path.write_text("topic,partition,log_end_offset\n")
    assert TopicOffsets.read(path).topics() == []


@pytest.mark.parametrize("name", ["offsets.jsonl", "offsets.json"])
def test_read_json_lines(tmp_path, name):
    path = tmp_path / name
    path.write_text(
        "\n".join(json.dumps(row) for row in ROWS[:3])
        + "\n\n   \n"
        + json.dumps(ROWS[3])
        + "\n"
        + json.dumps(ROWS[4])
    )
    offsets = TopicOffsets.read(path)
    _expect_rows_answers(offsets)
    assert offsets.to_table().equals(TopicOffsets(ROWS).to_table())


def test_read_json_lines_with_missing_optional_fields(tmp_path):
    path = tmp_path / "offsets.jsonl"
    path.write_text('{"topic": "t", "partition": 0, "log_end_offset": 3}\n')
    offsets = TopicOffsets.read(path)
    assert offsets.to_table().to_pylist() == [
        {
            "topic": "t",
            "partition": 0,
            "timestamp_ms": None,
            "log_start_offset": 0,
            "log_end_offset": 3,
        }
    ]


def test_read_bad_json_lines(tmp_path):
    path = tmp_path / "offsets.jsonl"
    path.write_text('{"topic": "t", "partition": 0, "log_end_offset": 3}\n{"topic": \n')
    with pytest.raises(TopicOffsetsError) as raised:
        TopicOffsets.read(path)
    assert str(raised.value).startswith(f"{path}: Expecting value: line 1")
    assert raised.value.__cause__ is None


def test_read_json_lines_missing_a_column(tmp_path):
    path = tmp_path / "offsets.jsonl"
    path.write_text('{"topic": "t", "log_end_offset": 3}\n')
    with pytest.raises(
        TopicOffsetsError, match=r"^a row needs topic, partition and log_end_offset"
    ):
        TopicOffsets.read(path)


def test_read_delta_table(tmp_path):
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "offsets"), pa.Table.from_pylist(ROWS, schema=SCHEMA))
    offsets = TopicOffsets.read(tmp_path / "offsets")
    _expect_rows_answers(offsets)
    assert offsets.to_table().equals(TopicOffsets(ROWS).to_table())


def test_read_nothing_there(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(TopicOffsetsError, match=r"^no topic-offsets file or Delta table at "):
        TopicOffsets.read(missing)
    with pytest.raises(TopicOffsetsError) as raised:
        TopicOffsets.read(tmp_path)  # a directory that is not a Delta table
    assert str(raised.value) == f"no topic-offsets file or Delta table at {tmp_path}"


# --- to_table -------------------------------------------------------------------------------------


def test_to_table_sorted_with_now_as_null(offsets):
    table = offsets.to_table()
    assert table.schema == SCHEMA
    assert table.to_pylist() == [
        {
            "topic": "t",
            "partition": 0,
            "timestamp_ms": 1_000,
            "log_start_offset": 0,
            "log_end_offset": 20,
        },
        {
            "topic": "t",
            "partition": 0,
            "timestamp_ms": 2_000,
            "log_start_offset": 5,
            "log_end_offset": 50,
        },
        {
            "topic": "t",
            "partition": 0,
            "timestamp_ms": 3_000,
            "log_start_offset": 8,
            "log_end_offset": 90,
        },
        {
            "topic": "t",
            "partition": 1,
            "timestamp_ms": 1_500,
            "log_start_offset": 3,
            "log_end_offset": 7,
        },
        {
            "topic": "u",
            "partition": 0,
            "timestamp_ms": None,
            "log_start_offset": 2,
            "log_end_offset": 11,
        },
    ]


def test_to_table_round_trips(offsets):
    again = TopicOffsets(offsets.to_table().to_pylist())
    assert again.to_table().equals(offsets.to_table())
    assert again.offset_for_time(("t", 0), 2_500) == 50


def test_read_accepts_str_and_path(tmp_path):
    path = tmp_path / "o.csv"
    path.write_text(CSV)
    assert TopicOffsets.read(str(path)).to_table().equals(TopicOffsets.read(Path(path)).to_table())
