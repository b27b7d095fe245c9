"""Request files as line rows built in the inbox source's read (``job.source.lines=python``)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from coordinator.log.partitioning import partition_for
from coordinator.stream import lines
from coordinator.stream.settings import JobSettings
from tests.line_cases import crlf_texts, expected_lines, file_uri


def rows(contents: list[bytes], shards: int | None = None) -> dict[tuple[str, int], Any]:
    labels = [file_uri(i) for i in range(len(contents))]
    batch = lines.line_batch(labels, contents, None if shards is None else range(shards))
    assert batch.schema.names == list(lines.LINE_COLUMNS) + (["shard"] if shards else [])
    return {(r["source_file"], r["position"]): r for r in batch.to_pylist()}


def test_files_split_into_the_lines_of_a_crlf_or_lf_split() -> None:
    """As the JVM path (tests/test_stream_job.py): a line's "\r" before its "\n" is dropped, a
    final "\r" is kept, lines of spaces only are skipped, only a last line is unterminated."""
    texts = crlf_texts()
    got = {k: (r["value"], r["terminated"]) for k, r in rows([t.encode() for t in texts]).items()}
    want = expected_lines(texts)
    assert got == want


def test_lines_of_a_file_that_is_not_utf8_are_flagged_where_they_hold_a_replacement() -> None:
    got = rows([b'{"group_id":"a\xff"}\n{"group_id":"b"}\n\xef\xbf\xbd\n', "\ufffd\n".encode()])
    assert [(r["value"], r["valid_utf8"]) for r in got.values()] == [
        ('{"group_id":"a\ufffd"}', False),
        ('{"group_id":"b"}', True),
        ("\ufffd", False),  # a real U+FFFD in a file that is not UTF-8: as the JVM flags it
        ("\ufffd", True),
    ]


def _random_object(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    keys = ["api", "request_id", "group_id", "member_id", "x", "protocols", "group_id"]
    alphabet = 'az09-_."\\/{}[],: é\U0001d11e\u2028'
    value: dict[str, Any] = {}
    for _ in range(rng.randint(0, 5)):
        key = rng.choice(keys)
        kind = rng.randrange(6)
        if kind == 0 and depth < 2:
            value[key] = _random_object(rng, depth + 1)
        elif kind == 1 and depth < 2:
            value[key] = [_random_object(rng, depth + 1)]
        elif kind == 2:
            value[key] = rng.randint(-5, 5)
        else:
            value[key] = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
    return value


def test_the_group_id_of_a_json_object_is_its_top_level_string() -> None:
    """The fast form and the parsed one give the same key: the top-level ``group_id`` string,
    none when absent or nested only, in compact and spaced JSON, with escapes."""
    rng = random.Random(7)
    objects = [_random_object(rng) for _ in range(2000)]
    texts = []
    for i, value in enumerate(objects):
        if i % 3 == 0:
            texts.append(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
        elif i % 3 == 1:
            texts.append(json.dumps(value))
        else:
            texts.append(json.dumps(value, separators=(",", ":")))
    got = rows([("\n".join(texts) + "\n").encode()])
    for (_, position), row in got.items():
        group_id = objects[position].get("group_id")
        want = group_id if isinstance(group_id, str) else ""
        if isinstance(group_id, int):
            want = str(group_id)
        elif isinstance(group_id, (dict, list)):
            want = json.dumps(group_id, separators=(",", ":"), ensure_ascii=False)
        assert row["group_id"] == want, row["value"]


@pytest.mark.parametrize(
    ("line", "group_id"),
    [
        ('{"group_id":"g"}', "g"),
        ('{"api":"heartbeat","group_id":"g","member_id":"m"}', "g"),
        ('{"x":{"group_id":"inner"}}', ""),
        ('{"x":{"group_id":"inner"},"group_id":"outer"}', "outer"),
        ('{"x\\"group_id":"not a key of its own"}', ""),
        ('{"group_id":"first","group_id":"second"}', "first"),  # as get_json_object reads it
        ('{"group_id":"a\\u00e9\\n"}', "a\u00e9\n"),
        ('{"group_id":"\\ud800"}', ""),  # a lone surrogate: get_json_object gives null
        ('{"group_id":"\\ud834\\udd1e"}', "\U0001d11e"),
        ('{"group_id":null}', ""),
        ('{"group_id":7}', "7"),
        ('["group_id","g"]', ""),
        ("not json", ""),
        ('{"group_id":"g"', "g"),  # cut short: the fast form reads it (Spark's parser would not)
    ],
)
def test_the_group_id_of_a_line(line: str, group_id: str) -> None:
    (row,) = rows([line.encode() + b"\n"]).values()
    assert row["group_id"] == group_id


def test_the_shard_is_the_group_ids_partition() -> None:
    names = ["", "a", "héllo", "𝄞x", "polygenelubricants", "GydZG_"]
    names += [f"group-{i}" for i in range(200)]
    text = "".join(json.dumps({"group_id": n}, ensure_ascii=False) + "\n" for n in names)
    for shards in (1, 7, 50):
        got = rows([text.encode()], shards)
        assert [r["shard"] for r in got.values()] == [partition_for(n, shards) for n in names]


def test_a_large_read_is_yielded_in_batches_of_whole_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lines, "CHUNK_BYTES", 60)
    contents = [b'{"group_id":"g"}\n' * n for n in (1, 2, 3, 1)]
    batches = list(lines.line_batches(["a", "b", "c", "d"], contents))
    assert [b.column("source_file").to_pylist() for b in batches] == [
        ["a", "b", "b"],
        ["c", "c", "c"],
        ["d"],
    ]


def test_the_setting_names_one_of_the_two_paths() -> None:
    assert JobSettings().source_lines == "python"
    JobSettings(source_lines="jvm")
    with pytest.raises(ValueError, match=r"job\.source\.lines must be one of jvm, python"):
        JobSettings(source_lines="scala")


def test_a_batch_s_files_are_counted_by_the_source_s_offsets_not_its_rows() -> None:
    """With line rows, Spark's numInputRows counts lines: the files a batch read come from the
    inbox source's offsets, a checkpoint's first batch from no start; any other source (a
    rebuilt checkpoint's bootstrap files, one row each) by its rows."""
    from types import SimpleNamespace

    from coordinator.stream.source import files_between, files_read

    start = '{"inbox_seq": 10, "inbox_files": 3, "inbox_horizon_ms": 5}'
    end = '{"inbox_seq": 14, "inbox_files": 7, "inbox_horizon_ms": 9}'
    assert files_between(start, end) == 4
    assert files_between("null", end) == files_between(None, end) == 7
    assert files_between(start, start) == 0
    assert files_between(None, '{"logOffset": 3}') is None  # Spark's file source
    assert files_between(None, "not json") is None
    inbox = SimpleNamespace(startOffset=start, endOffset=end, numInputRows=250)
    bootstrap = SimpleNamespace(startOffset=None, endOffset='{"logOffset": 0}', numInputRows=2)
    assert files_read(SimpleNamespace(sources=[inbox, bootstrap])) == 6


def test_progress_as_json_counts_the_same_files() -> None:
    """``progress.json`` (the bench's and the status file's form) holds the offsets decoded."""
    from coordinator.stream.source import files_read

    inbox = {
        "startOffset": {"inbox_seq": 1, "inbox_files": 1},
        "endOffset": {"inbox_seq": 3, "inbox_files": 3},
        "numInputRows": 40,
    }
    assert files_read({"sources": [inbox]}) == 2
    assert files_read({"sources": [{**inbox, "startOffset": None}]}) == 3
    assert files_read({}) == 0
