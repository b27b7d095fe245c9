"""The security APIs the gateway answers itself, as Kafka's ``AclApis`` and ``KafkaApis`` do:
SaslHandshake and SaslAuthenticate once authenticated (ILLEGAL_SASL_STATE), CreateAcls,
DescribeAcls, DeleteAcls (ALTER, DESCRIBE, ALTER on the cluster; SECURITY_DISABLED without an
authorizer), DescribeUserScramCredentials and AlterUserScramCredentials (DESCRIBE and ALTER on
the cluster; the credentials are salted and hashed by the client, KIP-554, and kept as
StoredKey and ServerKey)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from coordinator.gateway.codec import (
    ALTER_USER_SCRAM_CREDENTIALS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from coordinator.gateway.security.session import Session
from coordinator.security import errors
from coordinator.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate,
)
from coordinator.security.scram import BY_TYPE, ScramCredential, upsertion_error

NO_AUTHORIZER = "No Authorizer is configured on the broker"
CLUSTER_DENIED = errors.MESSAGES[errors.CLUSTER_AUTHORIZATION_FAILED]


def _cluster(session: Session, operation: Operation) -> bool:
    return session.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)


async def sasl_handshake(session: Session, v: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"error_code": errors.ILLEGAL_SASL_STATE, "mechanisms": []}


async def sasl_authenticate(session: Session, v: int, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "error_code": errors.ILLEGAL_SASL_STATE,
        "error_message": "SaslAuthenticate request received after successful authentication",
        "auth_bytes": b"",
        "session_lifetime": 0,
    }


def _filter(data: dict[str, Any]) -> AclFilter:
    try:
        return AclFilter(
            ResourceType(data["resource_type_filter"]),
            data.get("resource_name_filter"),
            PatternType(data.get("pattern_type_filter", PatternType.LITERAL)),
            data.get("principal_filter"),
            data.get("host_filter"),
            Operation(data["operation"]),
            Permission(data["permission_type"]),
        )
    except ValueError as exc:
        raise InvalidAcl(str(exc)) from exc


def _acl_entry(acl: AclBinding) -> dict[str, Any]:
    return {
        "principal": acl.principal,
        "host": acl.host,
        "operation": int(acl.operation),
        "permission_type": int(acl.permission),
    }


async def describe_acls(session: Session, v: int, body: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None}
    if not _cluster(session, Operation.DESCRIBE):
        return {
            **answer,
            "error_code": errors.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": CLUSTER_DENIED,
            "resources": [],
        }
    if not session.security.enforcing:
        return {
            **answer,
            "error_code": errors.SECURITY_DISABLED,
            "error_message": NO_AUTHORIZER,
            "resources": [],
        }
    try:
        acl_filter = _filter(body)
        acl_filter.validate()
    except InvalidAcl as exc:
        return {
            **answer,
            "error_code": errors.INVALID_REQUEST,
            "error_message": str(exc),
            "resources": [],
        }
    resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for acl in sorted(session.security.store.acls()):
        if acl_filter.matches(acl):
            key = (int(acl.resource_type), acl.resource_name, int(acl.pattern_type))
            resources.setdefault(key, []).append(_acl_entry(acl))
    answer["resources"] = [
        {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
        for (t, n, p), acls in resources.items()
    ]
    return answer


async def create_acls(session: Session, v: int, body: dict[str, Any]) -> dict[str, Any]:
    creations = body["creations"]
    refusal: tuple[int, str] | None = None
    if not _cluster(session, Operation.ALTER):
        refusal = (errors.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    elif not session.security.enforcing:
        refusal = (errors.SECURITY_DISABLED, "No Authorizer is configured.")
    if refusal is not None:
        results = [{"error_code": refusal[0], "error_message": refusal[1]} for _ in creations]
        return {"throttle_time": 0, "results": results}
    results = []
    valid = []
    for c in creations:
        try:
            binding = AclBinding(
                ResourceType(c["resource_type"]),
                c["resource_name"],
                PatternType(c.get("resource_pattern_type", PatternType.LITERAL)),
                c["principal"],
                c["host"],
                Operation(c["operation"]),
                Permission(c["permission_type"]),
            )
            validate(binding)
        except (InvalidAcl, ValueError) as exc:
            results.append({"error_code": errors.INVALID_REQUEST, "error_message": str(exc)})
            continue
        valid.append(binding)
        results.append({"error_code": 0, "error_message": None})
    if valid:
        session.security.store.add_acls(valid)
    return {"throttle_time": 0, "results": results}


async def delete_acls(session: Session, v: int, body: dict[str, Any]) -> dict[str, Any]:
    filters = body["filters"]
    refusal: tuple[int, str] | None = None
    if not _cluster(session, Operation.ALTER):
        refusal = (errors.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    elif not session.security.enforcing:
        refusal = (errors.SECURITY_DISABLED, "No Authorizer is configured.")
    if refusal is not None:
        results = [
            {"error_code": refusal[0], "error_message": refusal[1], "matching_acls": []}
            for _ in filters
        ]
        return {"throttle_time": 0, "filter_results": results}
    parsed: list[AclFilter | InvalidAcl] = []
    for data in filters:
        try:
            acl_filter = _filter(data)
            acl_filter.validate()
            parsed.append(acl_filter)
        except InvalidAcl as exc:
            parsed.append(exc)
    good = [f for f in parsed if isinstance(f, AclFilter)]
    deleted = iter(session.security.store.delete_acls(good) if good else [])
    results = []
    for item in parsed:
        if isinstance(item, InvalidAcl):
            results.append(
                {
                    "error_code": errors.INVALID_REQUEST,
                    "error_message": str(item),
                    "matching_acls": [],
                }
            )
            continue
        matching = [
            {
                "error_code": 0,
                "error_message": None,
                "resource_type": int(acl.resource_type),
                "resource_name": acl.resource_name,
                "pattern_type": int(acl.pattern_type),
                **_acl_entry(acl),
            }
            for acl in next(deleted)
        ]
        results.append({"error_code": 0, "error_message": None, "matching_acls": matching})
    return {"throttle_time": 0, "filter_results": results}


async def describe_user_scram_credentials(
    session: Session, v: int, body: dict[str, Any]
) -> dict[str, Any]:
    answer: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None}
    if not _cluster(session, Operation.DESCRIBE):
        return {
            **answer,
            "error_code": errors.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": CLUSTER_DENIED,
            "results": [],
        }
    stored = session.security.store.credentials()
    users = body.get("users")
    asked: dict[str, bool] = {}  # user -> asked twice
    if not users:
        asked = dict.fromkeys(stored, False)
    else:
        for user in users:
            asked[user["name"]] = user["name"] in asked
    results = []
    for user, twice in asked.items():
        result: dict[str, Any] = {
            "user": user,
            "error_code": 0,
            "error_message": None,
            "credential_infos": [],
        }
        if twice:
            result.update(
                error_code=errors.DUPLICATE_RESOURCE,
                error_message="Cannot describe SCRAM credentials for the same user twice in a "
                f"single request: {user}",
            )
        elif not stored.get(user):
            result.update(
                error_code=errors.RESOURCE_NOT_FOUND,
                error_message=f"Attempt to describe a user credential that does not exist: {user}",
            )
        else:
            by_name = {m.name: m for m in BY_TYPE.values()}
            result["credential_infos"] = [
                {"mechanism": by_name[name].type, "iterations": c.iterations}
                for name, c in sorted(stored[user].items())
            ]
        results.append(result)
    answer["results"] = results
    return answer


async def alter_user_scram_credentials(
    session: Session, v: int, body: dict[str, Any]
) -> dict[str, Any]:
    deletions, upsertions = body.get("deletions") or [], body.get("upsertions") or []
    if not _cluster(session, Operation.ALTER):
        names = dict.fromkeys([d["name"] for d in deletions] + [u["name"] for u in upsertions])
        return {
            "throttle_time": 0,
            "results": [
                {
                    "user": n,
                    "error_code": errors.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": CLUSTER_DENIED,
                }
                for n in names
            ],
        }
    stored = session.security.store.credentials()
    failed: dict[str, tuple[int, str]] = {}
    to_delete: dict[str, tuple[str, str]] = {}
    to_upsert: dict[str, tuple[str, ScramCredential]] = {}
    twice = (
        errors.DUPLICATE_RESOURCE,
        "A user credential cannot be altered twice in the same request",
    )
    for d in deletions:
        name = d["name"]
        if name in failed:
            continue
        if to_delete.pop(name, None) is not None:
            failed[name] = twice
            continue
        mechanism = BY_TYPE.get(d["mechanism"])
        if not name:
            failed[name] = (errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            failed[name] = (errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif mechanism.name not in stored.get(name, {}):
            failed[name] = (
                errors.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            to_delete[name] = (name, mechanism.name)
    for u in upsertions:
        name = u["name"]
        if name in failed:
            continue
        if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
            failed[name] = twice
            continue
        error = upsertion_error(name, u["mechanism"], u["iterations"])
        if error is not None:
            failed[name] = error
            continue
        mechanism = BY_TYPE[u["mechanism"]]
        credential = ScramCredential.from_salted_password(
            mechanism, u["salt"], u["salted_password"], u["iterations"]
        )
        to_upsert[name] = (name, credential)
    if to_delete or to_upsert:
        session.security.store.alter_scram(to_upsert.values(), to_delete.values())
    results = [{"user": n, "error_code": 0, "error_message": None} for n in to_delete]
    results += [{"user": n, "error_code": 0, "error_message": None} for n in to_upsert]
    results += [{"user": n, "error_code": c, "error_message": m} for n, (c, m) in failed.items()]
    return {"throttle_time": 0, "results": results}


AdminHandler = Callable[[Session, int, dict[str, Any]], Awaitable[dict[str, Any]]]

HANDLERS: dict[int, AdminHandler] = {
    SASL_HANDSHAKE: sasl_handshake,
    SASL_AUTHENTICATE: sasl_authenticate,
    DESCRIBE_ACLS: describe_acls,
    CREATE_ACLS: create_acls,
    DELETE_ACLS: delete_acls,
    DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
    ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
}
