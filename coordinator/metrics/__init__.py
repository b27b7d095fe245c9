"""Prometheus metrics and health endpoints for the coordinator's processes.

Each process that serves (``coordinator run`` / the spark-submit job, ``coordinator gateway``)
may be given ``--metrics HOST:PORT``: :class:`MetricsServer` then serves, from a thread of its
own,

- ``/metrics``: the process's :class:`prometheus_client.CollectorRegistry` in Prometheus' text
  format (OpenMetrics when the scraper asks for it);
- ``/livez``: 200 while the process runs;
- ``/readyz``: 200 once the process serves requests (the gateway's back end has loaded, the
  job's query has answered its first batch), 503 with the reason before and after.

Every process owns one registry (never prometheus_client's global one), so several can live in
one interpreter (the tests run a gateway and a job side by side). What each adapter counts is in
:mod:`coordinator.metrics.groups` (Kafka's group-coordinator metrics, shared by the job and the
embedded gateway), :mod:`coordinator.metrics.gateway` and :mod:`coordinator.metrics.job`. The
engine is never asked to do I/O: the adapters derive the figures from what it already hands
them (group state, log records, responses).
"""

from coordinator.metrics.server import MetricsServer, Readiness, new_registry, parse_address

__all__ = ["MetricsServer", "Readiness", "new_registry", "parse_address"]
