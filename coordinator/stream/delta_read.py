"""Reading a whole Delta table (one version of it) into a pyarrow Table, through Arrow's own
local filesystem.

Every reader of the job's tables outside Spark comes here instead of delta-rs's
``DeltaTable.to_pyarrow_table()``. That one scans through a Python filesystem
(``pyarrow.fs.PyFileSystem`` over delta-rs's ``DeltaStorageHandler``): the scanner's read-ahead
keeps Python file objects alive on Arrow's I/O threads after ``to_table`` has returned, and
when the last one is released there while the interpreter is finalizing, the thread cannot
take the GIL, is made to exit by CPython, and the unwinding ends in ``std::terminate``
("terminate called without an active exception", exit status 134) after a command has done all
its work (a core dump of ``coordinator demo`` shows ``PyReadableFile::~PyReadableFile`` ->
``PyGILState_Ensure`` -> ``pthread_exit`` on an Arrow thread). Read with Arrow's native local
filesystem, no Python object is ever owned by an Arrow thread.

Local tables (paths or ``file://`` URIs) are read this way; a table on another store (a
cluster's object store or HDFS) falls back to delta-rs's own reader, whose exit hazard a
long-running process does not meet. Tables with deletion vectors or column mapping are not
read (the job writes neither).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as ds
from pyarrow import fs

#: The names of a Delta log's commits and checkpoints (the version is the first group).
COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")


def local_path(uri: str) -> str:
    """The local path of a data file ``uri`` (a path or a ``file://`` URI)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    raise ValueError(f"{uri!r}: only local Delta tables are read")


def data_file(table_uri: str, path: str) -> str:
    """The local path of a data file that a table's add action names (relative to the table,
    or absolute)."""
    return str(Path(local_path(table_uri)) / local_path(path))


def read_table(table: Any, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of ``table`` (a ``deltalake.DeltaTable``, at whatever version it was loaded, or
    a table path) with the table's schema, partition columns included; only ``columns`` when
    given. What ``DeltaTable.to_pyarrow_table(columns=...)`` returns, minus its exit hazard."""
    from deltalake import DeltaTable

    delta = table if isinstance(table, DeltaTable) else DeltaTable(str(table))
    if urlparse(delta.table_uri).scheme not in ("", "file"):
        return delta.to_pyarrow_table(columns=list(columns) if columns is not None else None)
    schema = pa.schema(delta.schema().to_arrow())
    partition_columns = list(delta.metadata().partition_columns)
    partitioning = None
    if partition_columns:
        fields = pa.schema([schema.field(name) for name in partition_columns])
        partitioning = ds.partitioning(fields, flavor="hive")
    root = local_path(delta.table_uri)
    dataset = ds.dataset(
        [local_path(uri) for uri in delta.file_uris()],
        schema=schema,
        format="parquet",
        filesystem=fs.LocalFileSystem(),
        partitioning=partitioning,
        partition_base_dir=str(Path(root)),
    )
    return dataset.to_table(columns=list(columns) if columns is not None else None)
