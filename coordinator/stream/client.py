"""The client side of the Spark job: requests into its inbox, responses out of its Delta table.

Three pieces, each usable alone:

- :class:`Inbox` drops one JSON-lines file of requests into the job's inbox, atomically (the
  job must never see half a file) and with names that sort in submission order.
- :class:`ResponseReader` follows the ``responses`` Delta table commit by commit, without Spark
  and without re-reading the table: it reads the new ``_delta_log/<version>.json`` files and only
  the parquet files their ``add`` actions name.
- :class:`StreamClient` puts the two together: submit, then wait for the responses by request id.

This module reads what the job writes; it never writes a Delta table (that is the job's sink).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator import jsonio
from coordinator.stream.delta_read import CHECKPOINT_FILE, COMMIT_FILE
from coordinator.stream.schema import RESPONSES, RESPONSES_SCHEMA, Warehouse, response_request_id

# --- the inbox --------------------------------------------------------------------------------


def prepare_requests(requests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``requests``, each with a ``request_id`` (a fresh uuid4 hex where it was missing
    or null), so that the caller can match responses before the file is even written."""
    prepared = []
    for request in requests:
        if not isinstance(request, Mapping):
            raise TypeError(f"a request is a dict, not {type(request).__name__}")
        copy = dict(request)
        if copy.get("request_id") is None:
            copy["request_id"] = uuid.uuid4().hex
        prepared.append(copy)
    return prepared


def wall_clock_ms() -> int:
    """Now, in epoch milliseconds."""
    return time.time_ns() // 1_000_000


class Inbox:
    """The job's inbox directory; :meth:`submit` adds one file of requests to it.

    A file becomes visible only complete: it is written under a hidden name (the job's inbox
    source skips names starting with ``.`` or ``_``), flushed and fsynced, then renamed, which is atomic
    within one directory. Visible names are ``<epoch_ms:013d>-<client>-<counter:06d>.jsonl``:
    ``client`` (host, pid and a random token) keeps two clients from ever choosing the same name,
    and the millisecond is never allowed to go backwards within one ``Inbox``, so one client's
    files sort in submission order even if the wall clock is stepped back. The job does not rely
    on that order (its source numbers files in the order it finds them, whatever their names);
    it is for people and tools.

    Thread safe: each call writes its own file.
    """

    def __init__(self, path: str | Path, *, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.path = Path(path)
        self._clock = clock
        host = re.sub(r"[^A-Za-z0-9]+", ".", socket.gethostname()).strip(".") or "host"
        self.client = f"{host}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._last_ms = 0

    def _next_name(self) -> str:
        with self._lock:
            self._last_ms = max(self._last_ms, self._clock())
            return f"{self._last_ms:013d}-{self.client}-{next(self._counter):06d}.jsonl"

    def submit(self, requests: Iterable[Mapping[str, Any]]) -> Path:
        """Write ``requests`` (one JSON object a line, bytes as base64) as ONE new inbox file and
        return its path. Requests without a ``request_id`` get one; to learn it, pass the
        requests through :func:`prepare_requests` first (ids already present are kept)."""
        return self.submit_lines([jsonio.dumps(r) for r in prepare_requests(requests)])

    def submit_lines(self, lines: Sequence[str]) -> Path:
        """Write ``lines`` as ONE new inbox file and return its path: each is one request
        already serialised, as :meth:`submit` writes it (one JSON object with its
        ``request_id``, bytes as base64), without its newline. For a caller that makes many
        requests of a few shapes and keeps their text (a load generator); the job answers a
        line that is not a request as it answers any bad line, with an error response."""
        if not lines:
            raise ValueError("no requests to submit")
        text = "\n".join(lines) + "\n"
        if text.count("\n") != len(lines):
            raise ValueError("a request's line holds a newline: it would be read as two")
        data = text.encode("utf-8")  # every line serialised before anything is written
        self.path.mkdir(parents=True, exist_ok=True)
        name = self._next_name()
        final = self.path / name
        temp = self.path / f".{name}.tmp"
        try:
            with open(temp, "xb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.rename(temp, final)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.path)
        return final


def _fsync_dir(path: Path) -> None:
    """Make the rename itself durable (a crash could otherwise forget a file already answered)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems that refuse to fsync a directory
        pass
    finally:
        os.close(fd)


# --- reading the responses table --------------------------------------------------------------


class _LogGap(Exception):
    """The commits to read are gone (log cleanup) or name files that are gone (vacuum)."""


class ResponseReader:
    """Follows the ``responses`` table: each :meth:`poll` returns the rows committed since the
    previous one, once each, in commit order.

    ``start_version`` is the first Delta version to read (0: the whole history). ``None`` means
    "from now": the version current at construction is taken then, not at the first poll, so a
    client that builds its reader and then submits cannot miss a response however fast it comes.

    How it reads: the commit ``_delta_log/<v>.json`` of each new version, its ``add`` actions with
    ``dataChange`` true, and those parquet files (with pyarrow). ``add`` actions with
    ``dataChange`` false come from compaction (``optimize.compact``) re-writing rows already
    delivered, and ``remove`` actions do not matter for an append-only table: both are skipped.
    A version is read completely or not at all; a poll that fails delivers nothing and the next
    one starts at the same version.

    When the commits to read are no longer there (``cleanup_metadata`` removed JSON commits older
    than a checkpoint, and the reader starts from, or fell behind to, such a version), or a file
    they add was vacuumed after compaction, the reader cannot tell which rows are new: it falls
    back to a full read of the table at the current version (through delta-rs) and carries on
    from there. That read may return rows delivered before: at-least-once, and only then
    (``fallbacks`` counts them). Rows are matched by request id downstream, so it does no harm.

    Cost: an idle poll is one ``stat`` and a read of ``_last_checkpoint`` (a listing of
    ``_delta_log`` only for a table without one); each new version costs one small JSON read and
    one parquet read, whatever the length of the log. Only local paths and ``file://`` URIs are
    supported. Not thread safe: one reader per thread.
    """

    def __init__(self, table_path: str | Path, start_version: int | None = None) -> None:
        self.table_path = Path(table_path)
        self.log_path = self.table_path / "_delta_log"
        if start_version is not None and start_version < 0:
            raise ValueError("start_version is a Delta version: 0 or more")
        self._next = self._latest_version() + 1 if start_version is None else start_version
        #: How many polls had to fall back to a full read of the table.
        self.fallbacks = 0

    @property
    def next_version(self) -> int:
        """The first version the next poll will read."""
        return self._next

    def poll(self) -> list[dict[str, Any]]:
        """The rows of every version committed since the last poll (``RESPONSES_SCHEMA``'s
        columns, as dicts); ``[]`` while the table does not exist."""
        rows: list[dict[str, Any]] = self.poll_table().to_pylist()
        return rows

    def poll_table(self, columns: Sequence[str] | None = None) -> pa.Table:
        """:meth:`poll`'s rows as one Arrow table, of ``columns`` only (``RESPONSES_SCHEMA``'s
        names; every column when None): for a reader of many rows a poll, which can then read
        a column at a time instead of a dict per row (a load generator reading its answers)."""
        fields = _fields(columns)
        version = self._next
        tables: list[pa.Table] = []
        try:
            while True:
                actions = self._commit(version)
                if actions is None:
                    break
                tables.extend(self._added_tables(actions, fields))
                version += 1
            if self._cleaned_up(version):
                raise _LogGap(version)
        except _LogGap:
            self.fallbacks += 1
            table, version = self._full_read(fields)
            tables = [table]
        self._next = version
        if not tables:
            return pa.schema(fields).empty_table()
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _commit(self, version: int) -> list[dict[str, Any]] | None:
        """The actions of one commit, or None when it is not (yet) there."""
        try:
            text = (self.log_path / f"{version:020d}.json").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            # delta-rs publishes a commit complete (write aside, then link), so a torn commit
            # is a foreign writer caught mid-write: read it at the next poll.
            return None

    def _added_tables(
        self, actions: list[dict[str, Any]], fields: list[pa.Field]
    ) -> list[pa.Table]:
        if any((a.get("commitInfo") or {}).get("operation") in _REWRITES for a in actions):
            return []  # retention's delete: the rows it copies over were delivered already
        tables = []
        names = [f.name for f in fields]
        for action in actions:
            add = action.get("add")
            if add is None or not add.get("dataChange", True):
                continue
            try:
                # ParquetFile.read: half the cost of read_table's dataset machinery per file.
                with pq.ParquetFile(self._data_file(add["path"])) as data:
                    present = [n for n in names if n in data.schema_arrow.names]
                    table = data.read(columns=present)
            except FileNotFoundError:
                raise _LogGap(add["path"]) from None
            tables.append(_conform(table, add.get("partitionValues") or {}, fields))
        return tables

    def _data_file(self, path: str) -> Path:
        parsed = urlparse(path)
        if parsed.scheme in ("", "file"):
            local = Path(unquote(parsed.path))
            return local if local.is_absolute() else self.table_path / local
        raise ValueError(f"{path!r}: only local Delta tables can be read")

    def _cleaned_up(self, version: int) -> bool:
        """Whether ``version`` is missing because the log was cleaned up (a checkpoint at or past
        it exists), rather than because nobody committed it yet."""
        checkpoint = self._last_checkpoint()
        if checkpoint is None or checkpoint < version:
            return False
        # Committed and checkpointed since we looked: not a gap, read it at the next poll.
        return not (self.log_path / f"{version:020d}.json").exists()

    def _last_checkpoint(self) -> int | None:
        try:
            return int(json.loads((self.log_path / "_last_checkpoint").read_text())["version"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError):
            pass  # being rewritten: list the log instead
        versions = [int(m[1]) for m in map(CHECKPOINT_FILE.match, self._log_names()) if m]
        return max(versions, default=None)

    def _latest_version(self) -> int:
        """The newest version in the log (-1 when there is no table yet)."""
        names = self._log_names()
        versions = [int(m[1]) for m in map(COMMIT_FILE.match, names) if m]
        versions += [int(m[1]) for m in map(CHECKPOINT_FILE.match, names) if m]
        return max(versions, default=-1)

    def _log_names(self) -> list[str]:
        try:
            return os.listdir(self.log_path)
        except FileNotFoundError:
            return []

    def _full_read(self, fields: list[pa.Field]) -> tuple[pa.Table, int]:
        from deltalake import DeltaTable

        from coordinator.stream.delta_read import read_table

        table = DeltaTable(str(self.table_path))
        data = read_table(table)
        return _conform(data, {}, fields), table.version() + 1


#: Commit operations whose added files hold rows already delivered (rewritten, not new).
_REWRITES = frozenset({"DELETE", "OPTIMIZE"})


def _fields(columns: Sequence[str] | None) -> list[pa.Field]:
    """``RESPONSES_SCHEMA``'s fields named by ``columns``, in that order (all when None)."""
    if columns is None:
        return list(RESPONSES_SCHEMA)
    unknown = [c for c in columns if c not in RESPONSES_SCHEMA.names]
    if unknown:
        raise ValueError(f"not columns of the responses table: {unknown}")
    return [RESPONSES_SCHEMA.field(c) for c in columns]


def _conform(
    table: pa.Table, partition_values: Mapping[str, str | None], fields: list[pa.Field]
) -> pa.Table:
    """The table with exactly ``fields`` as its columns: a column a file lacks (written before
    the schema grew, or a partition column, which Delta keeps out of the files) is filled from
    the partition values or with nulls."""
    columns = []
    for field in fields:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            value = partition_values.get(field.name)
            constant = pa.array([value] * table.num_rows, pa.string())
            columns.append(constant.cast(field.type))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


# --- responses as the engine gave them --------------------------------------------------------

#: Where the contract's responses (section 1) carry bytes: (list field or None, field).
_BINARY_FIELDS: dict[str, tuple[tuple[str | None, str], ...]] = {
    "join_group": (("members", "metadata"),),
    "sync_group": ((None, "assignment"),),
    "describe_groups": (("members", "member_metadata"), ("members", "member_assignment")),
}


def decode_response(row: Mapping[str, Any]) -> dict[str, Any]:
    """The response dict of one ``responses`` row, exactly as the engine returned it: ``body``
    parsed, and the base64 strings that JSON made of binary fields turned back into ``bytes``
    (join_group ``members[].metadata``, sync_group ``assignment``, describe_groups
    ``members[].member_metadata`` and ``member_assignment``)."""
    answer: dict[str, Any] = jsonio.loads(row["body"])
    for container, field in _BINARY_FIELDS.get(answer.get("api", ""), ()):
        items = [answer] if container is None else answer.get(container) or []
        for item in items:
            if isinstance(item, dict) and isinstance(item.get(field), str):
                item[field] = base64.b64decode(item[field], validate=True)
    return answer


# --- the client -------------------------------------------------------------------------------


class ResponseTimeoutError(TimeoutError):
    """Some responses did not come in time. ``missing`` holds their request ids, ``responses``
    those that did come (they also stay with the client for a later ``wait``)."""

    def __init__(
        self, missing: list[Any], responses: dict[Any, dict[str, Any]], timeout_s: float
    ) -> None:
        shown = ", ".join(repr(i) for i in missing[:20])
        more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
        super().__init__(
            f"no response within {timeout_s:g} s for {len(missing)} request(s): {shown}{more}"
        )
        self.missing = missing
        self.responses = responses


class StreamClient:
    """Requests in through the inbox, responses back from the ``responses`` table.

    The reader is pinned at construction (:class:`ResponseReader` "from now"), before anything
    is submitted, so no response to this client's requests can be missed. Responses are matched
    by ``response_request_id`` (the table's form of the id); request ids must be unique per
    client.

    What is kept between calls, and its bounds: responses to ids this client submitted (or is
    waiting for) stay until a ``wait``/``take`` returns them or ``forget`` drops them; at most
    ``max_pending`` such ids are tracked, the oldest forgotten first (a later wait for them times
    out). Responses to other ids (other clients share the table, or ids submitted elsewhere,
    e.g. ``coordinator submit --no-wait``) are kept in a buffer of ``max_unclaimed``, oldest
    dropped first. Not thread safe.
    """

    def __init__(
        self,
        warehouse: Warehouse | str | Path,
        *,
        poll_interval_s: float = 0.05,
        max_pending: int = 100_000,
        max_unclaimed: int = 1_000,
    ) -> None:
        self.warehouse = warehouse if isinstance(warehouse, Warehouse) else Warehouse.at(warehouse)
        self.reader = ResponseReader(self.warehouse.table(RESPONSES))
        self.inbox = Inbox(self.warehouse.inbox)
        self.poll_interval_s = poll_interval_s
        self.max_pending = max_pending
        self.max_unclaimed = max_unclaimed
        #: Ids whose responses this client keeps (submitted or waited for), oldest first.
        self._wanted: OrderedDict[str, None] = OrderedDict()
        #: Responses to wanted ids, and to the others, by key: (arrival number, response).
        self._arrived: dict[str, tuple[int, dict[str, Any]]] = {}
        self._unclaimed: OrderedDict[str, tuple[int, dict[str, Any]]] = OrderedDict()
        self._arrivals = itertools.count()

    # -- submitting ----------------------------------------------------------------------------

    def submit(self, requests: Iterable[Mapping[str, Any]]) -> list[Any]:
        """Submit ``requests`` as one inbox file; returns their request ids, in order."""
        prepared = prepare_requests(requests)
        ids = [r["request_id"] for r in prepared]
        keys = [_key(i) for i in ids]
        if len(set(keys)) != len(keys):
            raise ValueError("request ids must be unique within a submission")
        for key in keys:
            self._track(key)
        try:
            self.inbox.submit(prepared)
        except BaseException:
            self.forget(ids)
            raise
        return ids

    # -- collecting ----------------------------------------------------------------------------

    def poll(self) -> int:
        """Read what the table gained since the last poll; returns how many responses that was."""
        rows = self.reader.poll()
        for row in rows:
            key = row["request_id"]
            if key is None:
                continue
            if key in self._wanted:
                if key not in self._arrived:
                    self._arrived[key] = (next(self._arrivals), _decode_or_explain(row))
            elif key not in self._unclaimed:
                self._unclaimed[key] = (next(self._arrivals), _decode_or_explain(row))
                while len(self._unclaimed) > self.max_unclaimed:
                    self._unclaimed.popitem(last=False)
        return len(rows)

    def take(self, request_ids: Iterable[Any]) -> dict[Any, dict[str, Any]]:
        """The responses to ``request_ids`` that have arrived (in arrival order), handed over and
        forgotten; the others stay wanted. Does not poll."""
        wanted = {_key(i): i for i in request_ids}
        found: list[tuple[int, str, dict[str, Any]]] = []
        for key in wanted:
            arrival = self._arrived.pop(key, None) or self._unclaimed.pop(key, None)
            if arrival is not None:
                self._wanted.pop(key, None)
                found.append((arrival[0], key, arrival[1]))
        handed = {key for _, key, _ in found}
        for key in wanted:
            if key not in handed:
                self._track(key)  # after the hand-over, so that tracking evicts none of those
        return {wanted[key]: answer for _, key, answer in sorted(found)}

    def forget(self, request_ids: Iterable[Any]) -> None:
        """Stop keeping responses for ``request_ids`` (a late one is then treated as a stranger's)."""
        for request_id in request_ids:
            key = _key(request_id)
            self._wanted.pop(key, None)
            self._arrived.pop(key, None)

    def wait(
        self, request_ids: Iterable[Any], timeout_s: float = 30.0
    ) -> dict[Any, dict[str, Any]]:
        """Block until every id in ``request_ids`` has its response; returns them by id, in the
        order given. Raises :class:`ResponseTimeoutError` (a ``TimeoutError``) naming the
        missing ids after ``timeout_s``; the table is read at least once even at 0."""
        wanted = {_key(i): i for i in request_ids}
        for key in wanted:
            self._track(key)
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            missing = [key for key in wanted if key not in self._arrived]
            if not missing:
                answers = self.take(wanted.values())
                return {i: answers[i] for i in wanted.values()}
            left = deadline - time.monotonic()
            if left <= 0:
                arrived = {i: self._arrived[k][1] for k, i in wanted.items() if k in self._arrived}
                raise ResponseTimeoutError([wanted[k] for k in missing], arrived, timeout_s)
            time.sleep(min(self.poll_interval_s, left))

    def request(self, request: Mapping[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
        """Submit one request and wait for its response."""
        (request_id,) = self.submit([request])
        return self.wait([request_id], timeout_s)[request_id]

    def requests(
        self, requests: Iterable[Mapping[str, Any]], timeout_s: float = 30.0
    ) -> list[dict[str, Any]]:
        """Submit ``requests`` as one file and wait for all their responses, in request order."""
        ids = self.submit(requests)
        answers = self.wait(ids, timeout_s)
        return [answers[i] for i in ids]

    def _track(self, key: str) -> None:
        if key in self._wanted:
            return
        self._wanted[key] = None
        early = self._unclaimed.pop(key, None)
        if early is not None:
            self._arrived[key] = early
        while len(self._wanted) > self.max_pending:
            oldest, _ = self._wanted.popitem(last=False)
            self._arrived.pop(oldest, None)


def _decode_or_explain(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row that cannot be decoded still answers its request (from the table's own columns),
    rather than failing a poll whose rows the reader has already moved past."""
    try:
        return decode_response(row)
    except (TypeError, ValueError) as exc:  # JSONDecodeError and binascii.Error are ValueErrors
        return {
            "api": row.get("api"),
            "request_id": row.get("request_id"),
            "group_id": row.get("group_id"),
            "error_code": row.get("error_code"),
            "error": row.get("error"),
            "error_message": f"undecodable response body: {exc}",
        }


def _key(request_id: Any) -> str:
    key = response_request_id(request_id)
    if key is None:
        raise ValueError("a request id cannot be null")
    return key
