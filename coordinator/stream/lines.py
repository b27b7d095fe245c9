"""Request files as the inbox's line rows, built column-wise with Arrow in the source's read.

The job's default splits files into lines in the JVM (:func:`coordinator.stream.job.file_lines`:
``split`` at ``"\\n"``, ``posexplode``, ``get_json_object`` for the group id, and in shard mode
Java's ``String.hashCode`` through ``reflect`` for the shard). With ``job.source.lines=python``
the inbox source's read (:meth:`coordinator.stream.source.InboxReader.read`) yields those rows
itself, built here: the same columns, ``(value, source_file, position, group_id, terminated,
valid_utf8)`` and, for a shard-keyed job, ``shard`` (:func:`coordinator.log.partitioning.
partition_for`, the engine's own function, once per distinct group id of a batch).

Everything but the group id of a line that is not in the clients' compact form is Arrow's C++
and numpy (one call per column for all the files of a read, no Python per line):

- split at ``"\\n"`` (``split_pattern``), the ``"\\r"`` before a line's ``"\\n"`` dropped (a last
  line keeps a final ``"\\r"``), lines of spaces only skipped (Spark's ``trim``: spaces only),
  ``terminated`` False only for a file's last line, as :func:`~coordinator.stream.job.
  file_lines`;
- ``valid_utf8``: a file that is not UTF-8 is decoded with U+FFFD in place of its undecodable
  bytes (Python's ``"replace"``), and its lines holding U+FFFD are flagged, as the JVM path
  flags them (Python may put a different number of U+FFFD than Java for one bad sequence);
- the group id: whole-array operations over the lines' bytes (numpy: where each line's first
  ``"group_id":"`` is, and the quotes, brackets and backslashes around it) read the value of a
  ``"group_id":"..."`` pair when the line starts with ``{``, no ``{`` or ``[`` comes before the
  pair (so the pair is the top-level object's), the pair follows ``{`` or ``,``, the value has
  no ``\\`` (no escape to decode) and ``"group_id"`` occurs once in the line (no duplicate key).
  In a line that is a JSON object, that is exactly the top-level ``group_id`` string, as
  ``get_json_object(value, '$.group_id')`` reads it. Any other line is parsed with ``json``
  (:func:`group_id_of`).

Where this can differ from ``get_json_object``, only for lines that are not a valid JSON object
or not a request (the operator refuses those with the same answer whichever group's step reads
them; a mismatch of a request's group id and its key is answered INVALID_REQUEST by the step,
never served to another group):

- a line with the fast form's prefix that is not a whole JSON object for Jackson (cut short
  after its group id, a trailing comma, ``NaN``, which Python's ``json`` and so the engine's
  parser accept) is keyed by that group id here, ``""`` by Spark (whose parser fails before
  the object's end; garbage after the object's end it ignores, as the fast form does);
- a line that only Jackson's lenient parsing reads (single quotes, ``{'group_id':'g'}``, and
  the like) and that is not in the fast form is keyed ``""`` here, by its id by Spark;
- a non-string group id: its compact JSON text (``json.dumps``: ``1e2`` is ``100.0``, as
  Spark writes it) where Jackson's text of an unusual value may differ.

(Compared on Spark 4.2: ``tests/test_stream_job.py``, the test of lines built in the source.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from coordinator.log.partitioning import partition_for

#: The columns of the line rows, as the source declares them (``shard`` only in shard mode).
LINE_COLUMNS = ("value", "source_file", "position", "group_id", "terminated", "valid_utf8")
LINE_SCHEMA = (
    "value string, source_file string, position int, group_id string, terminated boolean, "
    "valid_utf8 boolean"
)
SHARD_SCHEMA = LINE_SCHEMA + ", shard int"

#: The group id of a line in the clients' compact form (see the module's doc): the value of
#: the first ``"group_id":"``, when it is the line's only ``"group_id"``.
_KEY = '"group_id"'
_PAIR = '"group_id":"'
_OPEN, _OPEN_ARRAY, _COMMA, _QUOTE, _BACKSLASH = (ord(c) for c in '{[,"\\')

#: How many bytes of files one batch of rows holds at most (Arrow's string offsets are 32-bit).
CHUNK_BYTES = 256 << 20


def _first_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's first value for each key, as Spark's ``get_json_object`` reads a duplicate
    key (``json`` keeps the last)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        found.setdefault(key, value)
    return found


def group_id_of(value: str) -> str:
    """The group id key of one line, parsed: the top-level ``group_id`` of a JSON object (the
    first of duplicates; a string as it is; anything else as its compact JSON text), ``""``
    for no such field, a string with a lone surrogate escape (not Unicode: Spark's
    ``get_json_object`` gives null) or a line that is not a JSON object."""
    try:
        raw = json.loads(value, object_pairs_hook=_first_pairs)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(raw, dict):
        return ""
    group_id = raw.get("group_id")
    if group_id is None:
        return ""
    if not isinstance(group_id, str):
        group_id = json.dumps(group_id, separators=(",", ":"), ensure_ascii=False)
    try:
        group_id.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape: Spark's get_json_object gives null
        return ""
    return group_id


def _texts(contents: Sequence[bytes]) -> tuple[list[bytes], list[bool]]:
    """Each file's bytes as UTF-8 (undecodable bytes replaced by U+FFFD) and whether it was."""
    texts, valid = [], []
    for content in contents:
        if content.isascii():
            texts.append(content)
            valid.append(True)
            continue
        try:
            content.decode("utf-8")
        except UnicodeDecodeError:
            texts.append(content.decode("utf-8", "replace").encode("utf-8"))
            valid.append(False)
        else:
            texts.append(content)
            valid.append(True)
    return texts, valid


def _fast_group_ids(values: Any) -> tuple[Any, Any]:
    """The group ids of the lines in the compact form (see the module's doc) as a string array
    (``""`` for the others), and a numpy mask of those lines: whole-array operations over the
    lines' bytes, no Python per line."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset : values.offset + count + 1
    ].astype(np.int64)
    data_buffer = values.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0)
    starts, ends = offsets[:-1], offsets[1:]
    at = np.asarray(pc.find_substring(values, _PAIR).to_numpy(zero_copy_only=False), np.int64)
    once = np.asarray(pc.count_substring(values, _KEY).to_numpy(zero_copy_only=False)) == 1
    fast = (at > 0) & once
    fast &= data[np.where(fast, starts, 0)] == _OPEN
    pair = starts + np.where(fast, at, 1)
    before = data[pair - 1]
    fast &= (before == _OPEN) | (before == _COMMA)
    # No "{" or "[" between the line's first "{" and the pair: the pair is the top level's.
    brackets = np.flatnonzero((data == _OPEN) | (data == _OPEN_ARRAY))
    fast &= np.searchsorted(brackets, pair) == np.searchsorted(brackets, starts + 1)
    # The value: up to the next '"' in the line, with no "\\" (no escape) in it.
    begin = pair + len(_PAIR)
    quotes = np.flatnonzero(data == _QUOTE)
    found = np.searchsorted(quotes, np.where(fast, begin, 0))
    end = quotes[np.minimum(found, len(quotes) - 1)] if len(quotes) else np.zeros(count, np.int64)
    fast &= (found < len(quotes)) & (end < ends)
    backslashes = np.flatnonzero(data == _BACKSLASH)
    fast &= np.searchsorted(backslashes, begin) == np.searchsorted(backslashes, end)
    lengths = np.where(fast, end - begin, 0)
    out = np.zeros(count + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    gather = np.repeat(begin - out[:-1], lengths) + np.arange(out[-1], dtype=np.int64)
    ids = pa.Array.from_buffers(
        pa.string(),
        count,
        [None, pa.py_buffer(out.astype(np.int32)), pa.py_buffer(data[gather].tobytes())],
    )
    return ids, fast


def line_batch(
    labels: Sequence[str], contents: Sequence[bytes], shard_keys: Sequence[int] | None = None
) -> Any:
    """The line rows of whole files (``labels[i]`` names ``contents[i]``) as one Arrow record
    batch of :data:`LINE_COLUMNS` (and ``shard`` when ``shard_keys`` is given: the key of the
    line's offsets partition, of as many partitions as there are keys)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    texts, file_valid = _texts(contents)
    files = pa.array(texts, pa.binary()).view(pa.string())
    split = pc.split_pattern(files, "\n")
    flat = split.flatten()
    parents = np.asarray(pc.list_parent_indices(split), dtype=np.int64)
    offsets = np.asarray(split.offsets, dtype=np.int64)
    positions = np.arange(len(flat), dtype=np.int64) - offsets[parents]
    last = positions == (offsets[1:] - offsets[:-1])[parents] - 1
    crlf = pc.and_(pa.array(~last), pc.ends_with(flat, "\r"))
    values = pc.if_else(crlf, pc.utf8_slice_codeunits(flat, 0, -1), flat)
    keep = pc.not_equal(pc.utf8_trim(values, " "), "")
    kept = np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)
    values = values.filter(keep)
    parents, positions, last = parents[kept], positions[kept], last[kept]

    utf8 = np.asarray(file_valid, dtype=bool)[parents]
    if utf8.all():
        valid_utf8 = pa.array(utf8)
    else:
        valid_utf8 = pc.or_(pa.array(utf8), pc.invert(pc.match_substring(values, "\ufffd")))

    group_ids, fast = _fast_group_ids(values)
    missing = np.flatnonzero(~fast)
    if len(missing):
        ids = group_ids.to_pylist()
        for index in missing.tolist():
            ids[index] = group_id_of(values[index].as_py())
        group_ids = pa.array(ids, pa.string())

    columns = [
        values,
        pa.array(labels, pa.string()).take(pa.array(parents)),
        pa.array(positions.astype(np.int32)),
        group_ids,
        pa.array(~last),
        valid_utf8,
    ]
    names = list(LINE_COLUMNS)
    if shard_keys is not None:
        encoded = pc.dictionary_encode(group_ids)
        partitions = len(shard_keys)
        keys = [shard_keys[partition_for(g, partitions)] for g in encoded.dictionary.to_pylist()]
        columns.append(pa.array(keys, pa.int32()).take(encoded.indices))
        names.append("shard")
    return pa.RecordBatch.from_arrays(columns, names=names)


def line_batches(
    labels: Sequence[str], contents: Sequence[bytes], shard_keys: Sequence[int] | None = None
) -> Iterator[Any]:
    """:func:`line_batch` over runs of files of at most :data:`CHUNK_BYTES` (a larger file
    alone)."""
    start, size = 0, 0
    for index, content in enumerate(contents):
        if index > start and size + len(content) > CHUNK_BYTES:
            yield line_batch(labels[start:index], contents[start:index], shard_keys)
            start, size = index, 0
        size += len(content)
    if start < len(contents):
        yield line_batch(labels[start:], contents[start:], shard_keys)
