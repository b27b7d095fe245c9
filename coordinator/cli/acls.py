"""``coordinator acls`` (shaped like Kafka's ``kafka-acls.sh``) and ``coordinator scram``
(like ``kafka-storage.sh format --add-scram`` / ``kafka-configs.sh --entity-type users``):
ACLs and SCRAM credentials in a warehouse's security store, changed directly (the way to set up
the first super user's rights before any client connects). A running gateway sees a change
within half a second; the admin APIs (CreateAcls, AlterUserScramCredentials) change the same
store over the wire."""

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
    p.add_argument("--warehouse", required=True, metavar="DIR")
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


def run_acls(args: argparse.Namespace) -> int:
    store = SecurityStore(args.warehouse)
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
        store.add_acls(bindings)
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
        removed = [a for matched in store.delete_acls(filters) for a in matched]
        print(f"Removed ACLs:\n{_show(removed)}")
        return 0
    list_filters = [
        AclFilter(rt, name, pattern if resources else PatternType.ANY)
        for rt, name in (resources or [(ResourceType.ANY, None)])  # type: ignore[list-item]
    ]
    acls = [
        a
        for a in store.acls()
        if any(f.matches(a) for f in list_filters)
        and (not args.principal or a.principal in args.principal)
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
