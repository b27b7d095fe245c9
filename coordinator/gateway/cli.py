"""``coordinator gateway``: the Kafka wire-protocol gateway, with the engine embedded in this
process (``--embedded``, the default) or in front of a running Spark job (``--warehouse``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from coordinator.gateway import cluster, loops
from coordinator.stream.ownership import DEFAULT_LEASE_TIMEOUT_MS, OwnershipError

DEFAULT_PROPERTIES = Path("conf/gateway.properties")
#: The settings a gateway properties file may hold; any other is refused by name at start.
GATEWAY_SETTINGS = frozenset(
    {
        "topics",
        "owner.lease.timeout.ms",
        "node.lease.timeout.ms",
        "metrics",
        "upstream.bootstrap.servers",
        "upstream.request.timeout.ms",
        "upstream.metadata.max.age.ms",
    }
)
#: Kafka's socket.request.max.bytes: with an upstream, Produce carries records (a client's
#: max.request.size is 1 MiB of records plus the request around them).
UPSTREAM_MAX_REQUEST_BYTES = 104_857_600

log = logging.getLogger("coordinator.gateway")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "gateway",
        help="serve Kafka's wire protocol (group APIs) in front of the coordinator",
        description="A Kafka wire-protocol gateway: Kafka clients form groups and commit "
        "offsets through the coordinator engine.",
    )
    p.add_argument("--listen", default="127.0.0.1:9092", metavar="HOST:PORT")
    backend = p.add_mutually_exclusive_group()
    backend.add_argument(
        "--embedded",
        action="store_true",
        help="run the engine in this process, on the wall clock (the default)",
    )
    backend.add_argument(
        "--warehouse",
        metavar="DIR",
        help="forward to the Spark job running on DIR (coordinator run --warehouse DIR): requests "
        "into its inbox, answers from its responses table",
    )
    p.add_argument(
        "--log-warehouse",
        metavar="DIR",
        help="embedded: write the log to DIR's consumer_offsets Delta table and rebuild from it "
        "on start (without it, groups live in memory only); refused while another live job or "
        "gateway owns DIR",
    )
    p.add_argument(
        "--owner-lease-timeout-ms",
        type=int,
        default=None,
        metavar="MS",
        help="--log-warehouse: how long DIR stays owned by this gateway if it stops "
        "heartbeating (owner.lease.timeout.ms in the gateway properties; default 20000)",
    )
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS",
        help="without --upstream: a topic Metadata advertises (repeatable)",
    )
    p.add_argument(
        "--upstream",
        metavar="HOST:PORT[,...]",
        help="in front of a Kafka-protocol cluster: data and topic APIs to its brokers (one "
        "gateway listener per broker), group APIs to the coordinator "
        "(upstream.bootstrap.servers in the gateway properties)",
    )
    p.add_argument(
        "--upstream-request-timeout-ms",
        type=int,
        default=None,
        metavar="MS",
        help="--upstream: how long a broker may take to answer before clients get a retriable "
        "error (upstream.request.timeout.ms; default 30000)",
    )
    p.add_argument(
        "--gateway-conf",
        default=None,
        metavar="FILE",
        help=f"gateway properties (default {DEFAULT_PROPERTIES} if present)",
    )
    p.add_argument("--conf", action="append", metavar="FILE", help="coordinator properties")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a coordinator setting")
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=None,
        help="the largest request frame (default 1048576; with --upstream 104857600, Kafka's "
        "socket.request.max.bytes)",
    )
    p.add_argument(
        "--request-timeout-ms",
        type=int,
        default=25_000,
        help="--warehouse: answer COORDINATOR_NOT_AVAILABLE when the job has not answered in "
        "this time (a JoinGroup: its rebalance timeout + 5 s)",
    )
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus), /livez and /readyz there (gateway.properties: metrics)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM or SIGINT: how long closing the connections and flushing the log may "
        "take (exit status 1 beyond it)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="embedded: N gateway processes (one core each), node i on the --listen port + i, "
        "each the coordinator of a slice of the offsets partitions; a dead or hung one's "
        "partitions move to the others, which load them from --log-warehouse, and come back "
        "once it is restarted (default 1)",
    )
    p.add_argument(
        "--node-lease-timeout-ms",
        type=int,
        default=None,
        metavar="MS",
        help="--processes: a node that has not heartbeated to the supervisor for this long is "
        "fenced (its log writes refused), stopped and restarted, its partitions moved "
        f"(node.lease.timeout.ms; default {cluster.DEFAULT_NODE_LEASE_TIMEOUT_MS})",
    )
    p.add_argument(
        "--event-loop",
        choices=loops.CHOICES,
        default="auto",
        help="auto (default): uvloop when installed (the fast extra), else asyncio's",
    )
    p.set_defaults(run=run)


def parse_topics(items: list[str]) -> dict[str, int]:
    topics: dict[str, int] = {}
    for item in items:
        item = item.strip()
        if not item:
            continue
        name, sep, count = item.rpartition(":")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise ValueError(f"a topic is NAME:PARTITIONS, got {item!r}")
        topics[name] = int(count)
    return topics


def run(args: argparse.Namespace) -> int:
    from coordinator.cli.settings import load_config, read_properties
    from coordinator.gateway.backend import Backend
    from coordinator.gateway.embedded import EmbeddedBackend
    from coordinator.gateway.forwarding import JobBackend
    from coordinator.gateway.server import Gateway
    from coordinator.gateway.server import run as serve
    from coordinator.security.settings import is_security_setting
    from coordinator.security.settings import parse as parse_security

    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen expects HOST:PORT, got {args.listen!r}")
    topics: dict[str, int] = {}
    conf = Path(args.gateway_conf) if args.gateway_conf else DEFAULT_PROPERTIES
    properties = read_properties(conf) if args.gateway_conf or conf.exists() else {}
    unknown = sorted(
        k for k in properties if k not in GATEWAY_SETTINGS and not is_security_setting(k)
    )
    if unknown:
        raise ValueError(
            f"{conf}: not a gateway setting: {', '.join(unknown)} "
            f"(the gateway reads {', '.join(sorted(GATEWAY_SETTINGS))} and the security "
            "settings listed in the README)"
        )
    security_settings = parse_security(properties)
    if security_settings.listener is not None:  # Kafka's listeners replaces --listen
        host, port = security_settings.listener.host, str(security_settings.listener.port)
    topics.update(parse_topics(properties.get("topics", "").split(",")))
    topics.update(parse_topics(args.topic))
    upstream = _upstream(args, properties, security_settings)
    if upstream is not None and len(security_settings.listeners) > 1:
        raise ValueError(
            "listeners: upstream mode serves one listener (and one per upstream broker)"
        )
    if upstream is not None and topics:
        raise ValueError(
            "--topic and topics are for the gateway without an upstream: with --upstream the "
            "topics are the upstream's"
        )
    config = load_config(args.conf, args.set)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    role = cluster.NodeRole.from_env()
    if args.processes > 1 and role is None:
        if args.warehouse or upstream is not None:
            raise ValueError("--processes is for the embedded engine without --upstream")
        if len(security_settings.listeners) > 1:
            raise ValueError("listeners: with --processes each node serves one listener")
        return cluster.supervise(
            f"{host}:{port}",
            args.processes,
            config.offsets_topic_num_partitions,
            args.log_warehouse,
            args.owner_lease_timeout_ms
            or int(properties.get("owner.lease.timeout.ms", DEFAULT_LEASE_TIMEOUT_MS)),
            sys.argv[1:],
            args.node_lease_timeout_ms
            or int(properties.get("node.lease.timeout.ms", cluster.DEFAULT_NODE_LEASE_TIMEOUT_MS)),
            args.shutdown_timeout,
        )
    backend: Backend
    if args.warehouse:
        if args.log_warehouse:
            raise ValueError("--log-warehouse is for --embedded: the job writes its own log")
        backend = JobBackend(args.warehouse, config, request_timeout_ms=args.request_timeout_ms)
    else:
        lease_ms = args.owner_lease_timeout_ms or int(
            properties.get("owner.lease.timeout.ms", DEFAULT_LEASE_TIMEOUT_MS)
        )
        backend = EmbeddedBackend(
            config,
            args.log_warehouse,
            lease_timeout_ms=lease_ms,
            **({} if role is None else _node_options(role)),
        )
    exporter = None
    if args.metrics or properties.get("metrics"):
        from coordinator.metrics.gateway import GatewayExporter

        exporter = GatewayExporter(args.metrics or properties["metrics"], backend)
    max_request_bytes = args.max_request_bytes or (
        UPSTREAM_MAX_REQUEST_BYTES if upstream is not None else 1_048_576
    )
    from coordinator.gateway.security.session import GatewaySecurity
    from coordinator.security.store import SecurityStore

    warehouse = args.warehouse or args.log_warehouse
    if warehouse is None and security_settings.authorizer:
        log.warning(
            "ACLs and SCRAM credentials are kept in memory only: give the gateway a warehouse "
            "(--log-warehouse or --warehouse) to keep them"
        )
    if warehouse is not None and security_settings.authorizer:
        _warn_if_others_may_write(Path(warehouse))
    security = GatewaySecurity(security_settings, SecurityStore(warehouse))
    gateway = Gateway(
        backend,
        topics,
        host,
        int(port) if role is None else role.port,
        max_request_bytes=max_request_bytes,
        metrics=None if exporter is None else exporter.gateway,
        upstream=upstream,
        security=security,
        node_id=0 if role is None else role.node_id,
        brokers=None if role is None else role.brokers(),
    )
    where = f"the job on {args.warehouse}" if args.warehouse else "the embedded engine"
    if role is not None:
        where += f", node {role.node_id} of {len(role.nodes)}, partitions {role.owned}"
    if upstream is not None:
        servers = ",".join(f"{h}:{p}" for h, p in upstream.bootstrap)
        where += f", data to the upstream {servers}"

    node_tasks: list[asyncio.Task[None]] = []  # referenced while the gateway runs

    def announce() -> None:
        loops.freeze_startup_heap()
        # Only once the back end serves: before that, group APIs get LOAD_IN_PROGRESS.
        if exporter is not None:
            exporter.readiness.set_ready()
        if role is not None:
            loop = asyncio.get_running_loop()
            role.follow(backend, loop, set_brokers=gateway.set_brokers)
            node_tasks.append(loop.create_task(role.heartbeat(), name="gateway-node-lease"))
            role.report({"ready": True})
        shown = "the upstream's" if upstream is not None else topics
        print(
            f"coordinator gateway listening on {host}:{gateway.port} ({where}), topics {shown}, "
            f"{security.protocol}"
            + "".join(
                f", {listener.name} on {listener.host}:{gateway.listener_ports[listener.name]}"
                for listener in security.other_listeners
            ),
            flush=True,
        )

    try:
        return loops.run(
            serve_until_signalled(
                _serve_while_owner(gateway, serve, announce), args.shutdown_timeout
            ),
            args.event_loop,
        )
    except OwnershipError as error:  # refused at start, or taken over while serving
        print(f"coordinator gateway: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        if exporter is not None:
            exporter.close()


def _node_options(role: cluster.NodeRole) -> dict[str, Any]:
    from coordinator.stream.ownership import PartitionWriter

    return {
        "owned_partitions": role.owned,
        "partition_owners": role.coordinator_nodes(role.owners),
        "app_id": cluster.node_app_id(role.node_id),
        "owner_epoch": role.owner_epoch,
        "write_summaries": False,
        "writer": PartitionWriter(role.node_id, role.incarnation),
        "publish_summaries": lambda groups: role.report({"groups": groups}),
    }


def _upstream(args: argparse.Namespace, properties: dict[str, str], security: Any) -> Any:
    """The upstream cluster of ``--upstream`` (or ``upstream.bootstrap.servers``), or None;
    reached with the gateway's own ``upstream.security.protocol``, ``upstream.sasl.*`` and
    ``upstream.ssl.*``."""
    from coordinator.gateway.security.client import UpstreamCredentials
    from coordinator.gateway.upstream import (
        DEFAULT_METADATA_MAX_AGE_MS,
        DEFAULT_REQUEST_TIMEOUT_MS,
        Upstream,
        parse_bootstrap,
    )

    servers = args.upstream or properties.get("upstream.bootstrap.servers", "")
    timeout_ms = args.upstream_request_timeout_ms or int(
        properties.get("upstream.request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS)
    )
    if not servers.strip():
        if args.upstream_request_timeout_ms is not None:
            raise ValueError("--upstream-request-timeout-ms needs --upstream")
        if security.upstream.protocol != "PLAINTEXT":
            raise ValueError("upstream.security.protocol needs an upstream (--upstream)")
        return None
    max_age = properties.get("upstream.metadata.max.age.ms", str(DEFAULT_METADATA_MAX_AGE_MS))
    if not max_age.strip().isdigit():
        raise ValueError(f"upstream.metadata.max.age.ms must be a number of ms, got {max_age!r}")
    return Upstream(
        parse_bootstrap(servers),
        request_timeout_ms=timeout_ms,
        credentials=UpstreamCredentials.from_settings(security.upstream),
        metadata_max_age_ms=int(max_age),
    )


def _warn_if_others_may_write(warehouse: Path) -> None:
    """The warehouse (its inbox above all: the job serves what it finds there unchecked, and
    its security store) must be writable by its owner only when ACLs are enforced."""
    import stat

    for path in (warehouse, warehouse / "inbox", warehouse / "security"):
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            continue
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            log.warning(
                "%s is writable by group or others (mode %o): whoever can write it bypasses the "
                "gateway's ACLs; make it writable by the gateway's and job's user only",
                path,
                stat.S_IMODE(mode),
            )


async def _serve_while_owner(gateway: Any, serve: Any, on_ready: Any) -> None:
    """Serve until stopped, or until a newer owner takes the log warehouse over (then raise
    its ``OwnershipLost`` once the gateway has stopped)."""
    from coordinator.gateway.embedded import EmbeddedBackend

    lost: list[BaseException] = []
    task = asyncio.current_task()
    if isinstance(gateway.backend, EmbeddedBackend) and task is not None:

        def on_lost(error: BaseException) -> None:
            lost.append(error)
            task.cancel()

        gateway.backend.on_lost = on_lost
    try:
        await serve(gateway, on_ready=on_ready)
    except asyncio.CancelledError:
        if lost:
            raise lost[0] from None
        raise


async def serve_until_signalled(serving: Coroutine[Any, Any, None], timeout_s: float) -> int:
    """Run ``serving`` until it ends or SIGTERM/SIGINT arrives; then cancel it, which stops the
    gateway (``server.run``'s ``finally``: the listener and every connection closed, the back
    end stopped, the log writes in flight and pending flushed), for at most ``timeout_s``.
    The exit status: 0, or 1 when the stop overran."""
    loop = asyncio.get_running_loop()
    signalled: asyncio.Future[str] = loop.create_future()

    def on_signal(number: int) -> None:
        name = signal.Signals(number).name
        if signalled.done():
            log.info("%s: already stopping", name)
        else:
            signalled.set_result(name)

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, on_signal, number)
    task = asyncio.ensure_future(serving)
    try:
        either: set[asyncio.Future[Any]] = {task, signalled}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # the server failed: its exception
            return 0
        log.info("%s: stopping the gateway", signalled.result())
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            log.error("the gateway did not stop within %g s", timeout_s)
            return 1
        with contextlib.suppress(asyncio.CancelledError):
            task.result()
        log.info("gateway stopped")
        return 0
    finally:
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(number)
