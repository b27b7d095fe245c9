"""The gateway's own metrics: connections, requests by API and error, request latency.

==================================================  ===================================================
``coordinator_gateway_connections``                 open client connections
``coordinator_gateway_connections_accepted_total``  connections accepted
``coordinator_gateway_connections_refused_total``   connections closed for bad input (an unknown API key,
                                                    a version out of range, a bad frame)
``coordinator_gateway_requests_total``              requests answered, by Kafka API name and error (the
                                                    first non-zero error code anywhere in the answer,
                                                    ``none`` when there is none)
``coordinator_gateway_request_duration_seconds``    from a request's frame read to its answer encoded
                                                    (counted before it is sent), by API (a parked
                                                    JoinGroup waits here)
``coordinator_gateway_authentications_total``       SASL exchanges completed, by mechanism and result
                                                    (``success``, ``failure``), as Kafka's
                                                    successful- and failed-authentication-total
==================================================  ===================================================

Requests refused by the ACLs are counted in ``coordinator_gateway_requests_total`` under their
error (``group_authorization_failed``, ``topic_authorization_failed``...).

Error names are Kafka's (``coordinator_load_in_progress``, ``rebalance_in_progress``...), as
kio's ``ErrorCode`` spells them.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from coordinator.gateway import codec

#: Kafka's names of the APIs the gateway serves (ApiKeys.java).
API_NAMES: dict[int, str] = {
    codec.PRODUCE: "Produce",
    codec.FETCH: "Fetch",
    codec.LIST_OFFSETS: "ListOffsets",
    codec.METADATA: "Metadata",
    codec.OFFSET_COMMIT: "OffsetCommit",
    codec.OFFSET_FETCH: "OffsetFetch",
    codec.FIND_COORDINATOR: "FindCoordinator",
    codec.JOIN_GROUP: "JoinGroup",
    codec.HEARTBEAT: "Heartbeat",
    codec.LEAVE_GROUP: "LeaveGroup",
    codec.SYNC_GROUP: "SyncGroup",
    codec.DESCRIBE_GROUPS: "DescribeGroups",
    codec.LIST_GROUPS: "ListGroups",
    codec.API_VERSIONS: "ApiVersions",
    codec.DELETE_GROUPS: "DeleteGroups",
    codec.OFFSET_DELETE: "OffsetDelete",
    codec.SASL_HANDSHAKE: "SaslHandshake",
    codec.SASL_AUTHENTICATE: "SaslAuthenticate",
    codec.DESCRIBE_ACLS: "DescribeAcls",
    codec.CREATE_ACLS: "CreateAcls",
    codec.DELETE_ACLS: "DeleteAcls",
    codec.DESCRIBE_USER_SCRAM_CREDENTIALS: "DescribeUserScramCredentials",
    codec.ALTER_USER_SCRAM_CREDENTIALS: "AlterUserScramCredentials",
}
#: A request answered in under a millisecond (embedded) up to a JoinGroup parked for a
#: rebalance timeout (minutes).
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
)  # fmt: skip


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def first_error(answer: Any) -> int:
    """The first non-zero ``error_code`` in an answer (plain data: top level, then groups,
    topics, partitions, in order), 0 when every one is 0."""
    if isinstance(answer, dict):
        code = answer.get("error_code")
        if isinstance(code, int) and code != 0:
            return code
        for value in answer.values():
            if isinstance(value, (dict, list)) and (found := first_error(value)):
                return found
    elif isinstance(answer, list):
        for item in answer:
            if isinstance(item, (dict, list)) and (found := first_error(item)):
                return found
    return 0


class GatewayMetrics:
    """The gateway's connection and request accounting (see the module doc)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.connections = Gauge(
            "coordinator_gateway_connections", "Open client connections", registry=registry
        )
        self.accepted = Counter(
            "coordinator_gateway_connections_accepted",
            "Client connections accepted",
            registry=registry,
        )
        self.refused = Counter(
            "coordinator_gateway_connections_refused",
            "Connections closed for bad input (unknown API, version out of range, bad frame)",
            registry=registry,
        )
        self.requests = Counter(
            "coordinator_gateway_requests",
            "Requests answered, by Kafka API and the answer's first error",
            ["api", "error"],
            registry=registry,
        )
        self.latency = Histogram(
            "coordinator_gateway_request_duration_seconds",
            "From a request read to its answer ready to send, by Kafka API",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.authentications = Counter(
            "coordinator_gateway_authentications",
            "SASL exchanges completed, by mechanism and result (success, failure)",
            ["mechanism", "result"],
            registry=registry,
        )
        #: Labelled children by (API key, error code) and API key: a lookup per request.
        self._requests: dict[tuple[int, int], Any] = {}
        self._latency: dict[int, Any] = {}

    def opened(self) -> None:
        self.accepted.inc()
        self.connections.inc()

    def closed(self, bad_input: bool) -> None:
        self.connections.dec()
        if bad_input:
            self.refused.inc()

    def authenticated(self, mechanism: str, result: str) -> None:
        self.authentications.labels(mechanism, result).inc()

    def answered(self, api_key: int, answer: Any, seconds: float) -> None:
        """One request answered (``answer`` is the plain response; None when Kafka sends
        none, as for Produce with acks=0)."""
        code = 0 if answer is None else first_error(answer)
        counter = self._requests.get((api_key, code))
        if counter is None:
            api = API_NAMES.get(api_key, str(api_key))
            counter = self._requests[api_key, code] = self.requests.labels(api, error_name(code))
        counter.inc()
        latency = self._latency.get(api_key)
        if latency is None:
            api = API_NAMES.get(api_key, str(api_key))
            latency = self._latency[api_key] = self.latency.labels(api)
        latency.observe(seconds)


class GatewayExporter:
    """A gateway's registry, metrics and HTTP server (``coordinator gateway --metrics``):
    the gateway's own accounting, Kafka's group metrics when the engine is embedded (with the
    job behind the gateway, the job exports those), and readiness."""

    def __init__(self, address: str, backend: Any) -> None:
        from coordinator.gateway.embedded import EmbeddedBackend
        from coordinator.metrics.groups import GroupMetrics
        from coordinator.metrics.server import MetricsServer, Readiness, new_registry, parse_address

        host, port = parse_address(address)
        self.registry = new_registry()
        check = None
        self.groups: GroupMetrics | None = None
        if isinstance(backend, EmbeddedBackend):
            self.groups = backend.metrics = GroupMetrics(self.registry)
            embedded = backend

            def check() -> str | None:
                if embedded.lost is not None:
                    return f"{embedded.lost}"
                return "reloading the log after a failed write" if embedded.loading else None

        self.readiness = Readiness(
            self.registry, "the back end is starting (loading the log)", check
        )
        self.gateway = GatewayMetrics(self.registry)
        self.server = MetricsServer(self.registry, self.readiness, host, port).start()

    def close(self) -> None:
        self.readiness.set_not_ready("stopped")
        self.server.close()
