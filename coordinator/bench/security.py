"""What security costs (figures, not tests): an authorization decision over many ACLs, first
and remembered, and the server's side of a SCRAM-SHA-512 exchange (the client's PBKDF2 is the
client's cost). Each figure is the best of a few timed loops, as ``timeit`` reports."""

from __future__ import annotations

import time
from collections.abc import Callable

from coordinator.security.acl import (
    AclBinding,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from coordinator.security.scram import SCRAM_SHA_512, ScramClient, ScramCredential, ScramServer

__all__ = ["bench_security"]


def _best_us(fn: Callable[[], object], loops: int, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - started) / loops)
    return best * 1e6


def bench_security(literal: int = 1_000, prefixed: int = 100) -> dict[str, float]:
    """Microseconds per operation, by name."""
    acls = [
        AclBinding(
            ResourceType.GROUP,
            f"g{i}",
            PatternType.LITERAL,
            f"User:u{i}",
            "*",
            Operation.READ,
            Permission.ALLOW,
        )
        for i in range(literal)
    ] + [
        AclBinding(
            ResourceType.GROUP,
            f"team{i}-",
            PatternType.PREFIXED,
            f"User:u{i}",
            "*",
            Operation.READ,
            Permission.ALLOW,
        )
        for i in range(prefixed)
    ]
    authorizer = Authorizer(acls)
    query = ("User:u5", "127.0.0.1", Operation.READ, ResourceType.GROUP, "team5-x")
    credential = ScramCredential.from_password(SCRAM_SHA_512, "pw", b"s" * 16, 4096)
    client = ScramClient(SCRAM_SHA_512, "alice", "pw", "clientnonce")
    first = client.first()
    final = client.final(
        ScramServer(SCRAM_SHA_512, {"alice": credential}.get, "srv").evaluate(first)
    )

    def exchange() -> None:
        server = ScramServer(SCRAM_SHA_512, {"alice": credential}.get, "srv")
        server.evaluate(first)
        server.evaluate(final)

    name = f"{literal + prefixed} group ACLs"
    return {
        f"first decision, {name} (us)": _best_us(lambda: authorizer._decide(*query), 2_000),
        f"remembered decision, {name} (us)": _best_us(lambda: authorizer.authorize(*query), 20_000),
        "SCRAM-SHA-512 exchange, server side (us)": _best_us(exchange, 500),
    }
