"""The garbage collector of the Python worker processes Spark runs the job's functions in.

PySpark reuses its Python workers between tasks (``spark.python.worker.reuse``, the default),
and after every task a reused worker runs a full collection, ``gc.collect()``
(``pyspark/daemon.py``), over every object the process holds. By the time the job's functions
run, a worker holds pandas, pyarrow, PySpark and the engine (about 86,000 objects), and in
``shard`` and ``group`` mode the groups it decoded (``operator.DECODED``, up to some hundred
thousand more); a micro-batch runs several Python tasks (the source's reads, each state task's
keys, then its timeout pass), each followed by such a collection. They were 55-62 % of the
workers' CPU in ``floor-shard`` and 66-78 % in ``shard`` (``py-spy``), and grew with what the
worker held, so from one query to the next in a session (README, "Where a Python worker's CPU
goes").

:func:`tune_gc`, called at the start of every call of a function the job hands Spark, moves
every object then alive into the collector's permanent generation (``gc.freeze()``, which no
collection looks at): what the worker holds between calls (its modules, its decoded groups)
is then never scanned again by PySpark's collections, which only see what the current task
made since. A frozen object is still freed by reference counting as usual; only a reference
cycle that was alive when frozen and became garbage afterwards is not found by those
collections. So that none accumulates, every :data:`FULL_COLLECTION_CALLS` calls the process
unfreezes everything and runs one full collection before freezing again, as often as PySpark's
own collections would find it within that many tasks or fewer.
"""

from __future__ import annotations

import gc

#: The cyclic garbage collector's first threshold in a Python worker that runs the job's
#: functions (CPython's default is 700). A batch holds a few container objects per request at
#: once (its lines, requests, answers and rows), all freed by reference counting, while the
#: worker keeps its decoded groups (``operator.DECODED``): at 700,
#: ``coordinator bench operator``'s 120,000 requests ran the collector about 200 times, twice
#: over every object the worker holds, about 1.3 us of CPU per request; at 10,000, 3 times. A
#: higher threshold only delays the freeing of reference cycles, which the state function does
#: not make.
GC_THRESHOLD = 10_000

#: Calls of :func:`tune_gc` between two full collections of everything the process holds (the
#: first call makes one too). A call is one key's call of the state function (``shard``: up to
#: ``offsets.topic.num.partitions`` a batch across the tasks; ``group``: one per active group)
#: or one read task of the source.
FULL_COLLECTION_CALLS = 1_000

#: Calls since this process's last full collection (None: none yet).
_calls: int | None = None


def tune_gc() -> None:
    """Raise this process's first collector threshold to :data:`GC_THRESHOLD` (never lower),
    then freeze every object alive (see the module docstring): after one full collection on
    the first call and every :data:`FULL_COLLECTION_CALLS` calls."""
    global _calls
    first, second, third = gc.get_threshold()
    if first < GC_THRESHOLD:
        gc.set_threshold(GC_THRESHOLD, second, third)
    if _calls is None or _calls >= FULL_COLLECTION_CALLS:
        _calls = 0
        gc.unfreeze()
        gc.collect()
    _calls += 1
    gc.freeze()
