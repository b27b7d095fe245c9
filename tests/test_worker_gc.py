"""The Python workers' collector settings (:mod:`coordinator.stream.worker_gc`).

Each check runs in a fresh interpreter: freezing is per process, and the test process's own
objects must not be frozen."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(script: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_it_raises_the_first_threshold_and_never_lowers_it() -> None:
    _run(
        """
        import gc
        from coordinator.stream import operator, worker_gc

        assert gc.get_freeze_count() == 0
        operator.warm_up(None)  # a worker's first call: what it holds is frozen
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        second, third = gc.get_threshold()[1:]
        gc.set_threshold(700, second, third)
        worker_gc.tune_gc()
        assert gc.get_threshold() == (worker_gc.GC_THRESHOLD, second, third)
        gc.set_threshold(worker_gc.GC_THRESHOLD * 2, second, third)
        worker_gc.tune_gc()
        assert gc.get_threshold()[0] == worker_gc.GC_THRESHOLD * 2
        """
    )


def test_what_the_process_holds_between_calls_is_left_out_of_collections() -> None:
    # PySpark's daemon runs gc.collect() after every task: it must not scan what the worker
    # keeps from one call to the next.
    _run(
        """
        import gc
        from coordinator.stream import worker_gc

        kept = [[i] for i in range(10_000)]
        worker_gc.tune_gc()
        assert gc.get_freeze_count() >= len(kept)
        tracked = {id(o) for o in gc.get_objects()}
        assert id(kept) not in tracked and id(kept[0]) not in tracked
        made_later = [[i] for i in range(10)]
        assert id(made_later[0]) in {id(o) for o in gc.get_objects()}
        worker_gc.tune_gc()
        assert id(made_later[0]) not in {id(o) for o in gc.get_objects()}
        # Freed by reference counting as usual.
        frozen = gc.get_freeze_count()
        del kept
        assert gc.get_freeze_count() <= frozen - 10_000
        """
    )


def test_a_cycle_frozen_while_alive_is_collected_at_the_next_full_collection() -> None:
    _run(
        """
        import gc
        import weakref
        from coordinator.stream import worker_gc

        class Node:
            pass

        worker_gc.tune_gc()
        node = Node()
        node.self = node
        gone = weakref.ref(node)
        worker_gc.tune_gc()  # frozen while alive
        del node
        gc.collect()  # PySpark's collection after a task does not see it
        assert gone() is not None
        for _ in range(worker_gc.FULL_COLLECTION_CALLS - 2):
            worker_gc.tune_gc()
            gc.collect()
        assert gone() is not None
        worker_gc.tune_gc()  # the FULL_COLLECTION_CALLS-th call since the last full one
        assert gone() is None
        """
    )
