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
