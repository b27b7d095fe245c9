"""What the gateway needs of a back end, and the answer a back end gives when it cannot serve.

Two back ends keep this interface: :class:`coordinator.gateway.embedded.EmbeddedBackend` (the
engine in this process) and :class:`coordinator.gateway.forwarding.JobBackend` (a running Spark
job, through its inbox and ``responses`` table). The gateway turns Kafka requests into the
contract's request dicts (one group each) and awaits :meth:`Backend.submit` for the answer.
"""

from __future__ import annotations

from typing import Any, Protocol

from coordinator.engine import CoordinatorNode
from coordinator.errors import Error
from coordinator.requests import failed_response


class Backend(Protocol):
    #: True when the back end applies the requests it is handed in the order :meth:`submit`
    #: was called, whatever waits: a connection may then hand it the requests read behind one
    #: whose answer waits (:mod:`coordinator.gateway.connection`, "Pipelined dispatch").
    pipelines_requests: bool

    async def start(self, node: CoordinatorNode) -> None:
        """Get ready to serve as ``node`` (the gateway's own host and port)."""
        ...

    async def stop(self) -> None:
        """Answer or fail what is pending, and release what was acquired."""
        ...

    async def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        """The answer to one request dict (contract, section 1); may wait (a parked join).

        A back end may also offer ``answer_now(request)``, the same answer without a coroutine
        when it is ready at once (else a coroutine for it): ``submit`` must then be exactly
        ``answer_now`` awaited, as the gateway calls either (the embedded engine's,
        :meth:`coordinator.gateway.embedded.EmbeddedBackend.answer_now`)."""
        ...


def cannot_serve(
    request: dict[str, Any], message: str, error: Error = Error.COORDINATOR_NOT_AVAILABLE
) -> dict[str, Any]:
    """The whole-request failure of ``request`` with ``error``: COORDINATOR_NOT_AVAILABLE by
    default, which is what Kafka answers when its coordinator cannot append to or read
    ``__consumer_offsets``, and what sends a client to find the coordinator again and retry."""
    return failed_response(request, error, message)
