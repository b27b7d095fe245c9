"""The gateway's event loop: uvloop when it is installed (the ``fast`` extra), else asyncio's.

uvloop runs the same asyncio code on libuv; the gateway's per-request cost is mostly the event
loop's and the streams', so it pays (``coordinator bench gateway-cpu`` measures it). Nothing
else changes: the gateway uses only asyncio's public API.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: ``auto``: uvloop when installed, else asyncio's.
CHOICES = ("auto", "asyncio", "uvloop")


def uvloop_installed() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def loop_factory(name: str = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """A new event loop of the kind ``name`` (:data:`CHOICES`)."""
    if name == "auto":
        name = "uvloop" if uvloop_installed() else "asyncio"
    if name == "asyncio":
        return asyncio.new_event_loop
    if name == "uvloop":
        if not uvloop_installed():
            raise RuntimeError(
                "uvloop is not installed (pip install 'kafka-group-coordinator[fast]')"
            )
        import uvloop

        return uvloop.new_event_loop
    raise ValueError(f"event loop: one of {', '.join(CHOICES)}, got {name!r}")


def run(main: Coroutine[Any, Any, T], name: str = "auto") -> T:
    """``asyncio.run(main)`` on a loop of the kind ``name``."""
    with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
        return runner.run(main)


def freeze_startup_heap() -> None:
    """Move every object alive once the gateway serves (its modules, its codecs, the engine
    loaded from the log) into the garbage collector's permanent generation, after a full
    collection, so that no later collection scans them again.

    A full collection of a started gateway scans about 100,000 objects (more with the dev
    extra: phantom-types then registers hypothesis strategies) and took 45 ms, a pause every
    connection waits through; a hundred consumers joining at once made one. Frozen objects are
    still freed by reference counting; only a reference cycle among them that became garbage
    later would be kept, and what a gateway loads at its start stays for its life."""
    import gc

    from coordinator.gateway import fastpath

    fastpath.served()  # its codecs are generated on first use: make them now, with the rest
    gc.collect()
    gc.freeze()
