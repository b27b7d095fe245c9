"""``coordinator acls`` (shaped like Kafka's ``kafka-acls.sh``) and ``coordinator scram``
(like ``kafka-storage.sh format --add-scram``).

``coordinator acls`` works either on a warehouse's security store directly (``--warehouse``: the
way to set up the first rights before any client connects; a running gateway sees the change
within half a second) or, as ``kafka-acls.sh`` does, through a gateway's admin APIs
(``--bootstrap-server``, with ``--command-config`` holding a Kafka client's security settings:
``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.location``,
``ssl.keystore.location``...). ``coordinator scram`` works on the store."""

from __future__ import annotations

import argparse
import re
import secrets
import sys
from typing import Any

from coordinator.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate,
)
from coordinator.security.scram import MECHANISMS, ScramCredential, upsertion_error
from coordinator.security.store import SecurityStore

#: kafka-acls.sh's operation names (``--operation Read``), case-insensitive.
OPERATIONS = {
    re.sub(r"_", "", op.name).lower(): op
    for op in Operation
    if op not in (Operation.UNKNOWN, Operation.ANY)
}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "acls",
        help="add, remove or list Kafka ACLs in a warehouse (as kafka-acls.sh)",
        description="Kafka's ACLs, kept in WAREHOUSE/security/security.json, enforced by "
        "gateways with authorizer.class.name set.",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--warehouse", metavar="DIR", help="change the warehouse's store")
    where.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="through a gateway's CreateAcls, DescribeAcls and DeleteAcls (as kafka-acls.sh)",
    )
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="--bootstrap-server: a Kafka client's properties (security.protocol, sasl.*, ssl.*)",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    action.add_argument("--list", action="store_true")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument(
        "--principal",
        action="append",
        default=[],
        metavar="TYPE:NAME",
        help="--list: only the ACLs of this principal",
    )
    p.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help=f"one of {', '.join(sorted(OPERATIONS))} (default All)",
    )
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--cluster", action="store_true")
    p.add_argument(
        "--resource-pattern-type",
        default="literal",
        choices=["literal", "prefixed", "any", "match"],
    )
    p.add_argument("--force", action="store_true", help="accepted: --remove never prompts")
    p.set_defaults(run=run_acls)

    s = subparsers.add_parser(
        "scram",
        help="add, delete or list SCRAM credentials in a warehouse",
        description="SCRAM credentials (salted and hashed, never the password) in "
        "WAREHOUSE/security/security.json, as kafka-storage.sh --add-scram writes them.",
    )
    s.add_argument("--warehouse", required=True, metavar="DIR")
    s.add_argument(
        "--add-scram",
        action="append",
        default=[],
        metavar="SPEC",
        help="'SCRAM-SHA-512=[name=alice,password=alice-secret(,iterations=8192)]'",
    )
    s.add_argument(
        "--delete-scram",
        action="append",
        default=[],
        metavar="SPEC",
        help="'SCRAM-SHA-512=[name=alice]'",
    )
    s.add_argument("--list", action="store_true")
    s.set_defaults(run=run_scram)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.GROUP, g) for g in args.group]
    resources += [(ResourceType.TOPIC, t) for t in args.topic]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def _operations(args: argparse.Namespace, default: Operation) -> list[Operation]:
    if not args.operation:
        return [default]
    out: list[Operation] = []
    for name in args.operation:
        op = OPERATIONS.get(name.replace("_", "").replace("-", "").lower())
        if op is None:
            raise ValueError(f"--operation {name}: one of {', '.join(sorted(OPERATIONS))}")
        out.append(op)
    return out


def _entries(args: argparse.Namespace) -> list[tuple[str, str, Permission]]:
    entries = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host or ["*"], Permission.ALLOW),
        (args.deny_principal, args.deny_host or ["*"], Permission.DENY),
    ):
        entries += [(who, host, permission) for who in principals for host in hosts]
    return entries


def _show(acls: list[AclBinding]) -> str:
    lines = []
    by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for acl in sorted(acls):
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        by_resource.setdefault(key, []).append(acl)
    for (rt, name, pt), group in by_resource.items():
        lines.append(
            f"Current ACLs for resource `ResourcePattern(resourceType={rt.name}, name={name}, "
            f"patternType={pt.name})`: "
        )
        lines += [
            f" \t(principal={a.principal}, host={a.host}, operation={a.operation.name}, "
            f"permissionType={a.permission.name})"
            for a in group
        ]
        lines.append("")
    return "\n".join(lines)


class _Store:
    """ACLs in a warehouse's security store."""

    def __init__(self, warehouse: str) -> None:
        self.store = SecurityStore(warehouse)

    def add(self, bindings: list[AclBinding]) -> None:
        for binding in bindings:
            validate(binding)
        self.store.add_acls(bindings)

    def remove(self, filters: list[AclFilter]) -> list[AclBinding]:
        return [a for matched in self.store.delete_acls(filters) for a in matched]

    def list(self, filters: list[AclFilter]) -> list[AclBinding]:
        return [a for a in self.store.acls() if any(f.matches(a) for f in filters)]

    def close(self) -> None:
        pass


class _Wire:
    """ACLs through a gateway's (or a Kafka broker's) admin APIs, v1 (pattern types)."""

    VERSION = 1

    def __init__(self, bootstrap: str, command_config: str | None) -> None:
        from coordinator.admin.upstream_offsets import BlockingConnection
        from coordinator.cli.settings import read_properties
        from coordinator.gateway.security.client import UpstreamCredentials
        from coordinator.gateway.upstream import parse_bootstrap
        from coordinator.security.settings import SECURITY_SETTINGS, parse

        properties = read_properties(command_config) if command_config else {}
        unknown = sorted(k for k in properties if f"upstream.{k}" not in SECURITY_SETTINGS)
        if unknown:
            raise ValueError(f"{command_config}: not a setting read here: {', '.join(unknown)}")
        # a Kafka client's security settings are the gateway's upstream.* ones without the prefix
        settings = parse({f"upstream.{k}": v for k, v in properties.items()}).upstream
        credentials = (
            None
            if settings.protocol == "PLAINTEXT"
            else UpstreamCredentials.from_settings(settings)
        )
        [address, *_] = parse_bootstrap(bootstrap)
        try:
            self.connection = BlockingConnection(address, 10.0, 30.0, credentials)
        except ConnectionError as exc:
            raise ValueError(f"cannot reach {bootstrap}: {exc}") from exc

    def _call(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.connection.call(api_key, self.VERSION, body)
        except ConnectionError as exc:
            raise ValueError(str(exc)) from exc

    @staticmethod
    def _check(code: int, message: str | None) -> None:
        if code:
            from coordinator.metrics.gateway import error_name

            raise ValueError(f"{error_name(code)}: {message or ''}".rstrip(": "))

    def add(self, bindings: list[AclBinding]) -> None:
        answer = self._call(
            30,
            {
                "creations": [
                    {
                        "resource_type": int(b.resource_type),
                        "resource_name": b.resource_name,
                        "resource_pattern_type": int(b.pattern_type),
                        "principal": b.principal,
                        "host": b.host,
                        "operation": int(b.operation),
                        "permission_type": int(b.permission),
                    }
                    for b in bindings
                ]
            },
        )
        for result in answer["results"]:
            self._check(result["error_code"], result["error_message"])

    @staticmethod
    def _filter(f: AclFilter) -> dict[str, Any]:
        return {
            "resource_type_filter": int(f.resource_type),
            "resource_name_filter": f.resource_name,
            "pattern_type_filter": int(f.pattern_type),
            "principal_filter": f.principal,
            "host_filter": f.host,
            "operation": int(f.operation),
            "permission_type": int(f.permission),
        }

    @staticmethod
    def _binding(data: dict[str, Any], acl: dict[str, Any]) -> AclBinding:
        return AclBinding(
            ResourceType(data["resource_type"]),
            data["resource_name"],
            PatternType(data["pattern_type"]),
            acl["principal"],
            acl["host"],
            Operation(acl["operation"]),
            Permission(acl["permission_type"]),
        )

    def remove(self, filters: list[AclFilter]) -> list[AclBinding]:
        answer = self._call(31, {"filters": [self._filter(f) for f in filters]})
        removed = []
        for result in answer["filter_results"]:
            self._check(result["error_code"], result["error_message"])
            removed += [self._binding(m, m) for m in result["matching_acls"]]
        return removed

    def list(self, filters: list[AclFilter]) -> list[AclBinding]:
        found: list[AclBinding] = []
        for f in filters:
            answer = self._call(29, self._filter(f))
            self._check(answer["error_code"], answer["error_message"])
            found += [self._binding(r, a) for r in answer["resources"] for a in r["acls"]]
        return sorted(set(found))

    def close(self) -> None:
        self.connection.close()


def run_acls(args: argparse.Namespace) -> int:
    if args.command_config and not args.bootstrap_server:
        raise ValueError("--command-config goes with --bootstrap-server")
    where: _Store | _Wire = (
        _Store(args.warehouse)
        if args.warehouse
        else _Wire(args.bootstrap_server, args.command_config)
    )
    try:
        return _run_acls(args, where)
    finally:
        where.close()


def _run_acls(args: argparse.Namespace, where: _Store | _Wire) -> int:
    pattern = PatternType[args.resource_pattern_type.upper()]
    resources = _resources(args)
    if args.add:
        if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError("--add takes --resource-pattern-type literal or prefixed")
        entries = _entries(args)
        if not resources or not entries:
            raise ValueError(
                "--add needs a resource (--group, --topic, --cluster) and "
                "--allow-principal or --deny-principal"
            )
        bindings = [
            AclBinding(rt, name, pattern, who, host, op, permission)
            for rt, name in resources
            for who, host, permission in entries
            for op in _operations(args, Operation.ALL)
        ]
        for binding in bindings:
            validate(binding)
        where.add(bindings)
        print(f"Adding ACLs:\n{_show(bindings)}")
        return 0
    if args.remove:
        if not resources:
            raise ValueError("--remove needs a resource (--group, --topic, --cluster)")
        entries = _entries(args) or [(None, None, Permission.ANY)]  # type: ignore[list-item]
        ops = _operations(args, Operation.ANY)
        filters = [
            AclFilter(rt, name, pattern, who, host, op, permission)
            for rt, name in resources
            for who, host, permission in entries
            for op in ops
        ]
        print(f"Removed ACLs:\n{_show(where.remove(filters))}")
        return 0
    list_filters = [
        AclFilter(rt, name, pattern if resources else PatternType.ANY)
        for rt, name in (resources or [(ResourceType.ANY, None)])  # type: ignore[list-item]
    ]
    acls = [
        a for a in where.list(list_filters) if not args.principal or a.principal in args.principal
    ]
    sys.stdout.write(_show(acls))
    return 0


_SPEC = re.compile(r"\s*([A-Z0-9-]+)\s*=\s*\[(.*)\]\s*\Z")


def _spec(text: str) -> tuple[str, dict[str, str]]:
    match = _SPEC.match(text)
    if match is None or match[1] not in MECHANISMS:
        raise ValueError(f"expected 'SCRAM-SHA-256=[name=...,password=...]', got {text!r}")
    fields = dict(item.split("=", 1) for item in match[2].split(",") if "=" in item)
    if not fields.get("name"):
        raise ValueError(f"{text!r}: no name=")
    return match[1], fields


def run_scram(args: argparse.Namespace) -> int:
    store = SecurityStore(args.warehouse)
    upsertions = []
    for text in args.add_scram:
        name, fields = _spec(text)
        mechanism = MECHANISMS[name]
        if "password" not in fields:
            raise ValueError(f"{text!r}: no password=")
        iterations = int(fields.get("iterations", 8192))
        error = upsertion_error(fields["name"], mechanism.type, iterations)
        if error is not None:
            raise ValueError(f"{text!r}: {error[1]}")
        credential = ScramCredential.from_password(
            mechanism, fields["password"], secrets.token_bytes(32), iterations
        )
        upsertions.append((fields["name"], credential))
    deletions = [(fields["name"], name) for name, fields in map(_spec, args.delete_scram)]
    if upsertions or deletions:
        store.alter_scram(upsertions, deletions)
    if args.list or not (upsertions or deletions):
        for user, by in sorted(store.credentials().items()):
            shown = ", ".join(f"{m}(iterations={c.iterations})" for m, c in sorted(by.items()))
            print(f"{user}: {shown}")
    return 0
