"""Kafka's ACLs: resource patterns, operations and their implications, ALLOW and DENY, and the
decision Kafka's ``StandardAuthorizer`` makes (``StandardAuthorizerData.findAclRule``).

The rules, as Kafka has them:

- super users (``super.users``) may do anything;
- an ACL applies to an action when its resource pattern matches the resource (LITERAL: the
  same name, or the name ``*``; PREFIXED: a prefix of the name), its principal is the
  principal's or ``User:*``, its host is the client's address or ``*``, and its operation is the
  action's or ALL. An ALLOW ACL of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and one of
  ALTER_CONFIGS allows DESCRIBE_CONFIGS (a DENY implies nothing);
- a DENY that applies wins; else an ALLOW that applies allows; else, when no ACL at all
  matches the resource (whatever its principal or operation), ``allow.everyone.if.no.acl.found``
  decides; else denied.

Pure: data in, decisions out. Storing ACLs is :mod:`coordinator.security.store`'s business.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: ALLOW ACLs of these operations allow DESCRIBE, and of these DESCRIBE_CONFIGS.
IMPLIES_DESCRIBE = frozenset(
    {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
)
IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})

#: The operations Kafka reports as ``authorized_operations`` per resource type.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
}


class InvalidAcl(ValueError):
    """An ACL or filter Kafka refuses (INVALID_REQUEST), with Kafka's message."""


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry, as Kafka's ``AclBinding``."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        return self.pattern_type == PatternType.PREFIXED and name.startswith(self.resource_name)

    def result(self, principals: frozenset[str], host: str, operation: Operation) -> bool | None:
        """ALLOWED (True), DENIED (False), or None when this ACL does not apply (Kafka's
        ``findResult``; the resource is assumed to match)."""
        if self.principal not in principals:
            return None
        if self.host != WILDCARD and self.host != host:
            return None
        if self.operation != Operation.ALL:
            if self.permission == Permission.ALLOW:
                if operation == Operation.DESCRIBE:
                    if self.operation not in IMPLIES_DESCRIBE:
                        return None
                elif operation == Operation.DESCRIBE_CONFIGS:
                    if self.operation not in IMPLIES_DESCRIBE_CONFIGS:
                        return None
                elif operation != self.operation:
                    return None
            elif operation != self.operation:
                return None
        return self.permission == Permission.ALLOW


def validate(binding: AclBinding) -> None:
    """Raise :class:`InvalidAcl` for an ACL Kafka would not create (``validateNewAcl`` and
    ``AclApis.handleCreateAcls``'s checks)."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAcl(f"Invalid resourceType {binding.resource_type.name}")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"Invalid patternType {binding.pattern_type.name}")
    if binding.operation in (Operation.UNKNOWN, Operation.ANY):
        raise InvalidAcl(f"Invalid operation {binding.operation.name}")
    if binding.permission not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAcl(f"Invalid permissionType {binding.permission.name}")
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not binding.resource_name:
        raise InvalidAcl("Invalid empty resource name")
    parse_principal(binding.principal)


def parse_principal(text: str) -> tuple[str, str]:
    """``Type:name`` (Kafka's ``SecurityUtils.parseKafkaPrincipal``) as (type, name)."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise InvalidAcl(
            f"Could not parse principal from `{text}` (no colon is present "
            "separating the principal type from the principal name)"
        )
    return kind, name


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's ``AclBindingFilter`` (DescribeAcls, DeleteAcls): None matches any name,
    principal or host; ANY any type, operation or permission; pattern type MATCH every pattern
    that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> None:
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            raise InvalidAcl("Unknown patternFilter.")
        if self.operation == Operation.UNKNOWN or self.permission == Permission.UNKNOWN:
            raise InvalidAcl("Unknown entryFilter.")

    def matches(self, acl: AclBinding) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:
            return acl.resource_name in (self.resource_name, WILDCARD)
        return self.resource_name.startswith(acl.resource_name)

    def _matches_entry(self, acl: AclBinding) -> bool:
        return (
            (self.principal is None or self.principal == acl.principal)
            and (self.host is None or self.host == acl.host)
            and self.operation in (Operation.ANY, acl.operation)
            and self.permission in (Permission.ANY, acl.permission)
        )


class Authorizer:
    """Kafka's authorization decision over a set of ACLs (see the module doc).

    The ACLs are indexed as Kafka's authorizer keeps them sorted: LITERAL ones by resource
    name (the wildcard ``*`` apart), PREFIXED ones by prefix, so that a decision looks up the
    resource's name and each of its prefixes rather than scanning every ACL; decisions are
    remembered (an authorizer is a snapshot: a change of ACLs builds a new one)."""

    #: decisions remembered, at most (then forgotten all at once)
    CACHE_SIZE = 100_000

    def __init__(
        self,
        acls: Iterable[AclBinding] = (),
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        #: (type, name) -> LITERAL ACLs of that name; (type, prefix) -> PREFIXED ACLs
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefix_lengths: dict[ResourceType, list[int]] = {}
        for acl in acls:
            self._by_type.setdefault(acl.resource_type, []).append(acl)
            key = (acl.resource_type, acl.resource_name)
            if acl.pattern_type == PatternType.LITERAL:
                self._literal.setdefault(key, []).append(acl)
            elif acl.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(key, []).append(acl)
        lengths: dict[ResourceType, set[int]] = {}
        for rt, prefix in self._prefixed:
            lengths.setdefault(rt, set()).add(len(prefix))
        self._prefix_lengths = {rt: sorted(ls) for rt, ls in lengths.items()}
        self._decisions: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}

    def _matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every ACL whose pattern matches the resource."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            found += self._prefixed.get((resource_type, name[:length]), ())
        return found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= self.CACHE_SIZE:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def _decide(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        acls = self._matching(resource_type, name)
        principals = frozenset((principal, WILDCARD_PRINCIPAL))
        allowed = False
        for acl in acls:
            result = acl.result(principals, host, operation)
            if result is False:
                return False  # a DENY wins
            allowed = allowed or result is True
        return allowed or (not acls and self.allow_if_no_acl)

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """Kafka's ``authorized_operations`` bit field: bit n set when operation n is
        allowed, over the operations of ``resource_type``."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << operation
        return bits

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on some resource of ``resource_type``
        (Kafka's ``authorizeByResourceType``): a super user, or an ALLOW that applies and is
        not cancelled by a DENY on every such resource (a LITERAL ``*`` DENY), or no ACL of
        the type at all with ``allow.everyone.if.no.acl.found``."""
        if principal in self.super_users:
            return True
        principals = frozenset((principal, WILDCARD_PRINCIPAL))
        acls = self._by_type.get(resource_type, ())
        for acl in acls:
            if (
                acl.permission == Permission.DENY
                and acl.pattern_type == PatternType.LITERAL
                and acl.resource_name == WILDCARD
                and acl.result(principals, host, operation) is False
            ):
                return False
        if any(acl.result(principals, host, operation) is True for acl in acls):
            return True
        return not acls and self.allow_if_no_acl
