"""The metrics and health HTTP server, one per process, on a thread of its own.

``/metrics`` renders the process's registry; ``/livez`` answers 200 while the process runs;
``/readyz`` answers 200 only while :class:`Readiness` says the process serves, 503 (with the
reason as the body) otherwise. Anything else is 404. The server never touches what it reports
on: collectors read values the process's own threads set.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import choose_encoder
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

log = logging.getLogger(__name__)


def never_raises(what: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A recording hook that logs its failure ("metrics: ``what`` not recorded") instead of
    raising it: metrics must never fail the batch or the request they describe."""

    def decorate(hook: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(hook)
        def guarded(*args: Any, **kwargs: Any) -> None:
            try:
                hook(*args, **kwargs)
            except Exception:
                log.exception("metrics: %s not recorded", what)

        return guarded

    return decorate


def new_registry() -> CollectorRegistry:
    """A registry of this process's own (never prometheus_client's global one), with the
    standard process metrics (``process_start_time_seconds``, CPU, memory, open files) and the
    Python platform's, as every Prometheus client exports them."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def parse_address(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` binds every interface; port 0 picks a free one)."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--metrics expects HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


class Readiness:
    """Whether the process serves requests, and why not; exported as ``coordinator_ready``.

    ``check``, when given, is asked on every probe once the process is ready: a reason it
    returns makes the process unready for that moment (the embedded gateway reloading its log
    after a failed write)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        why_not: str = "starting",
        check: Callable[[], str | None] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._ready = False
        self._why_not = why_not
        self._check = check
        self._gauge = Gauge(
            "coordinator_ready",
            "1 while the process serves requests (what /readyz answers 200 to), else 0",
            registry=registry,
        )
        self._gauge.set_function(lambda: 1.0 if self.ready else 0.0)

    @property
    def ready(self) -> bool:
        return self._ready and (self._check is None or self._check() is None)

    @property
    def why_not(self) -> str:
        with self._lock:
            if not self._ready:
                return self._why_not
        return (self._check() if self._check is not None else None) or ""

    def set_ready(self) -> None:
        with self._lock:
            self._ready = True

    def set_not_ready(self, why: str) -> None:
        with self._lock:
            self._ready = False
            self._why_not = why


class MetricsServer:
    """``/metrics``, ``/livez`` and ``/readyz`` on ``host:port`` (see the module doc).

    :meth:`start` binds (raising if the address is taken) and serves from a daemon thread;
    :meth:`close` stops serving and releases the port. ``port`` is the bound one (useful with
    port 0)."""

    def __init__(
        self, registry: CollectorRegistry, readiness: Readiness, host: str, port: int
    ) -> None:
        self.registry = registry
        self.readiness = readiness
        self.host = host
        self.port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                    self._answer(200, encoder(server.registry), content_type)
                elif path == "/livez":
                    self._answer(200, b"ok\n")
                elif path == "/readyz":
                    why_not = server.readiness.why_not
                    if not why_not:
                        self._answer(200, b"ready\n")
                    else:
                        self._answer(503, f"not ready: {why_not}\n".encode())
                else:
                    self._answer(404, b"not found: try /metrics, /livez or /readyz\n")

            def _answer(
                self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8"
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a scrape every few seconds is not worth a log line

        httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self.port = int(httpd.server_address[1])
        self._thread = threading.Thread(
            target=httpd.serve_forever, name="metrics-http", kwargs={"poll_interval": 0.2}
        )
        self._thread.daemon = True
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics (/livez, /readyz)", self.host, self.port)
        return self

    def close(self) -> None:
        """Stop serving and release the port; safe to call twice."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)
