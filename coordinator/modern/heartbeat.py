"""Consumer groups (KIP-848): ConsumerGroupHeartbeat, ConsumerGroupDescribe, and their timers.

Kafka 4.0's ``GroupMetadataManager`` consumer-group paths. A heartbeat is computed from the
group as it stands (as Kafka computes it from its current, not yet replayed, state), then its
records are written and applied one by one through :meth:`GroupContext.append`, the replay a
load also runs: the group changes only by records. A request that fails writes nothing.

The order of a heartbeat (``consumerGroupHeartbeat``):

1. validate the request (``throwIfConsumerGroupHeartbeatRequestIsInvalid``): INVALID_REQUEST with
   Kafka's messages, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION;
2. find or create the group (an Empty classic group is deleted and replaced; one with members
   is upgraded where the migration policy allows, see :mod:`coordinator.modern.migration`,
   and is GROUP_ID_NOT_FOUND otherwise), refuse a new member of a full group
   (GROUP_MAX_SIZE_REACHED);
3. find or create the member (dynamic or static), checking its epoch (FENCED_MEMBER_EPOCH,
   UNKNOWN_MEMBER_ID, UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID);
4. update the member; a new subscription, or subscribed topics whose metadata changed, bump the
   group epoch;
5. a group epoch above the target assignment epoch computes a new target assignment;
6. reconcile the member towards its target (:mod:`coordinator.modern.reconcile`), arming or
   cancelling its rebalance timeout (steps 4-6 are :func:`update_member`, which a classic
   member's JoinGroup runs too, :mod:`coordinator.modern.classic`);
7. arm the session timeout and answer, with the assignment when the request was a full one or
   the member's partitions changed.

Topic metadata: Kafka refreshes a group's subscription metadata when its metadata image
changes; here each heartbeat compares the metadata of the subscribed topics with the caller's
latest topic list (``GroupContext.topics``), which has the same effect with no refresh deadline.
Regular expressions are compiled as Kafka's RE2/J compiles them (:mod:`coordinator.modern.regex`),
resolved (full match, as RE2/J's ``matches``) when first seen and again whenever the topics
change, and kept in RegularExpression records.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from coordinator.context import GroupContext
from coordinator.errors import Error
from coordinator.group.states import GroupState
from coordinator.log import records as log
from coordinator.log.modern_records import RecordBuilder
from coordinator.modern import regex as regexes
from coordinator.modern.assignors import (
    ASSIGNORS,
    MemberSpec,
    PartitionAssignorError,
    subscription_type,
)
from coordinator.modern.model import (
    EMPTY_ASSIGNMENT,
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from coordinator.modern.reconcile import FencedMemberEpoch, Owned, reconcile
from coordinator.requests import Request, error_fields
from coordinator.topics import TopicMetadata, uuid_from_bytes

HEARTBEAT_API = "consumer_group_heartbeat"
DESCRIBE_API = "consumer_group_describe"

#: Timer kinds (Kafka's ``session-timeout-<group>-<member>`` and ``rebalance-timeout-...``).
CONSUMER_SESSION = "consumer-session"
CONSUMER_REBALANCE = "consumer-rebalance"

#: Member type in ConsumerGroupDescribe v1 (Kafka 4.0): 1 = consumer protocol, 0 = classic.
CONSUMER_MEMBER_TYPE = 1
CLASSIC_MEMBER_TYPE = 0


#: A classic member's time to rejoin when asked, and to sync after joining
#: (:mod:`coordinator.modern.classic`); both fence it.
CONSUMER_JOIN = "consumer-join"
CONSUMER_SYNC = "consumer-sync"


def session_key(member_id: str) -> str:
    return "session-timeout-" + member_id


def rebalance_key(member_id: str) -> str:
    return "rebalance-timeout-" + member_id


def join_key(member_id: str) -> str:
    return "join-timeout-" + member_id


def sync_key(member_id: str) -> str:
    return "sync-timeout-" + member_id


def cancel_timers(ctx: GroupContext, member_id: str) -> None:
    """Kafka's ``cancelTimers``: every timer of the member."""
    for key in (session_key, rebalance_key, join_key, sync_key):
        ctx.cancel(key(member_id))


class ConsumerGroupError(Exception):
    """A heartbeat that fails as a whole, with Kafka's error and message."""

    def __init__(self, error: Error, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _blank(value: str | None) -> bool:
    """Kafka's ``throwIfEmptyString``: set, and nothing left after Java's ``String.trim``."""
    return value is not None and value.strip("".join(chr(c) for c in range(33))) == ""


def validate_heartbeat(request: Request, assignors: tuple[str, ...]) -> None:
    """Kafka 4.0's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``."""
    body = request.body
    epoch = body["member_epoch"]

    def invalid(message: str) -> ConsumerGroupError:
        return ConsumerGroupError(Error.INVALID_REQUEST, message)

    if _blank(request.group_id) or request.group_id == "":
        raise invalid("GroupId can't be empty.")
    # v1 (KIP-1082): the client makes its member id, so it is never empty.
    if (request.api_version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) and (
        body["member_id"] == "" or _blank(body["member_id"])
    ):
        raise invalid("MemberId can't be empty.")
    if _blank(body["instance_id"]):
        raise invalid("InstanceId can't be empty.")
    if _blank(body["rack_id"]):
        raise invalid("RackId can't be empty.")
    if epoch == JOIN_GROUP_MEMBER_EPOCH:
        if body["rebalance_timeout_ms"] == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if body["topic_partitions"] is None or body["topic_partitions"]:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if not body["subscribed_topic_names"] and not body["subscribed_topic_regex"]:
            raise invalid(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if body["instance_id"] is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    assignor = body["server_assignor"]
    if assignor is not None and assignor not in assignors:
        raise ConsumerGroupError(
            Error.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {assignor} is not supported. Supported assignors: "
            f"{', '.join(assignors)}.",
        )
    regex = body["subscribed_topic_regex"]
    if regex:
        try:
            regexes.validate(regex)
        except regexes.InvalidRegex as exc:
            raise ConsumerGroupError(Error.INVALID_REGULAR_EXPRESSION, exc.message) from None


# --- ConsumerGroupHeartbeat --------------------------------------------------------------------


def heartbeat(ctx: GroupContext, request: Request) -> None:
    """Serve one ConsumerGroupHeartbeat: join, heartbeat, leave or static leave."""
    body = request.body
    records: list[dict[str, Any]] = []
    try:
        validate_heartbeat(request, ctx.config.group_consumer_assignors)
        if body["member_epoch"] in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            answer, after = _leave(ctx, request, records)
        else:
            answer, after = _heartbeat(ctx, request, records)
    except ConsumerGroupError as problem:
        fields = error_fields(HEARTBEAT_API, None, problem.error)
        ctx.respond(HEARTBEAT_API, request.request_id, problem.error, problem.message, **fields)
        return
    except FencedMemberEpoch as problem:
        fields = error_fields(HEARTBEAT_API, None, problem.error)
        ctx.respond(HEARTBEAT_API, request.request_id, problem.error, str(problem), **fields)
        return
    for record in records:
        ctx.append(record)
    for action in after:
        action()
    ctx.respond(HEARTBEAT_API, request.request_id, **answer)


def record_builder(ctx: GroupContext) -> RecordBuilder:
    return RecordBuilder(ctx.group_id, ctx.now_ms, log.BLANK_RECORD)


def _existing_group(ctx: GroupContext) -> ConsumerGroup:
    """Kafka's ``consumerGroup(groupId)``: GROUP_ID_NOT_FOUND unless it is a consumer group."""
    group = ctx.group
    if group is None:
        raise ConsumerGroupError(
            Error.GROUP_ID_NOT_FOUND, f"Consumer group {ctx.group_id} not found."
        )
    if not isinstance(group, ConsumerGroup):
        raise ConsumerGroupError(
            Error.GROUP_ID_NOT_FOUND, f"Group {ctx.group_id} is not a consumer group."
        )
    return group


def _group_for_join(
    ctx: GroupContext, create: bool, records: list[dict[str, Any]], after: list[Any]
) -> ConsumerGroup:
    """Kafka's ``getOrMaybeCreateConsumerGroup``: a new group is built here and exists once its
    records are applied; an Empty classic group (no members) is deleted and replaced, its
    offsets kept; one with members is upgraded when the migration policy allows
    (:mod:`coordinator.modern.migration`)."""
    from coordinator.modern import migration

    group = ctx.group
    if group is None:
        if not create:
            raise ConsumerGroupError(
                Error.GROUP_ID_NOT_FOUND, f"Consumer group {ctx.group_id} not found."
            )
        return ConsumerGroup(group_id=ctx.group_id)
    if isinstance(group, ConsumerGroup):
        return group
    if create and group.state is GroupState.EMPTY:
        records.append(log.group_tombstone(ctx.group_id, ctx.now_ms))
        return ConsumerGroup(group_id=ctx.group_id)
    if create and migration.can_upgrade(ctx, group):
        return migration.convert_to_consumer_group(ctx, group, records, after)
    raise ConsumerGroupError(
        Error.GROUP_ID_NOT_FOUND, f"Group {ctx.group_id} is not a consumer group."
    )


def _owned(body: Mapping[str, Any]) -> Owned | None:
    raw = body["topic_partitions"]
    if raw is None:
        return None
    owned: dict[str, frozenset[int]] = {}
    for entry in raw:
        owned[entry["topic_id"]] = owned.get(entry["topic_id"], frozenset()) | frozenset(
            entry["partitions"]
        )
    return owned


def _is_subset(owned: Owned | None, assigned: Assignment) -> bool:
    """Kafka's ``isSubset``: an unknown ownership (null) is not a subset."""
    if owned is None:
        return False
    for topic_id, partitions in owned.items():
        have = assigned.get(topic_id)
        if have is None:
            if partitions:
                return False
            continue
        if not partitions <= have:
            return False
    return True


def _check_epoch(member: ConsumerGroupMember, received: int, owned: Owned | None) -> None:
    """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``."""
    if received > member.member_epoch:
        raise FencedMemberEpoch(
            f"The consumer group member has a greater member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin."
        )
    if received < member.member_epoch and (
        received != member.previous_member_epoch
        or not _is_subset(owned, member.assigned_partitions)
    ):
        raise FencedMemberEpoch(
            f"The consumer group member has a smaller member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin."
        )


def new_member_id(ctx: GroupContext, group: ConsumerGroup, request: Request) -> str:
    """Kafka's ``Uuid.randomUuid().toString()`` for a v0 member that joins without an id."""
    attempt: Any = request.request_id
    for n in range(1, 1000):
        member_id = uuid_from_bytes(uuid.UUID(ctx.ids(ctx.group_id, attempt)).bytes)
        if not member_id.startswith("-") and member_id not in group.members:
            return member_id
        attempt = (request.request_id, n)
    raise RuntimeError("the id source keeps minting ids the group holds")


def _member(
    ctx: GroupContext,
    group: ConsumerGroup,
    member_id: str,
    request: Request,
    owned: Owned | None,
    records: list[dict[str, Any]],
) -> ConsumerGroupMember:
    """Kafka's ``getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember``."""
    body = request.body
    epoch = body["member_epoch"]
    create = epoch == JOIN_GROUP_MEMBER_EPOCH
    instance_id: str | None = body["instance_id"]
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            if not create:
                raise ConsumerGroupError(
                    Error.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {ctx.group_id}.",
                )
            member = ConsumerGroupMember(member_id)
        _check_epoch(member, epoch, owned)
        return member
    existing = group.static_member(instance_id)
    if create:
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id)
        # A classic member's instance is taken over as it is (it has no static leave).
        if not existing.uses_classic_protocol and (
            existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
        ):
            raise ConsumerGroupError(
                Error.UNRELEASED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} cannot join the "
                f"group because the instance id is owned by {existing.member_id} member.",
            )
        return replace_static_member(ctx, group, existing, member_id, records)
    if existing is None:
        raise ConsumerGroupError(Error.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise ConsumerGroupError(
            Error.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{existing.member_id}.",
        )
    _check_epoch(existing, epoch, owned)
    return existing


def replace_static_member(
    ctx: GroupContext,
    group: ConsumerGroup,
    existing: ConsumerGroupMember,
    member_id: str,
    records: list[dict[str, Any]],
) -> ConsumerGroupMember:
    """Kafka's ``replaceMember``: a static member rejoining under a new member id takes over
    the old one's subscription, target and current assignment, at epoch 0."""
    replacement = existing.replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
    build = record_builder(ctx)
    records.extend(remove_member_records(build, existing.member_id))
    records.append(build.member_subscription(replacement))
    records.append(
        build.target_assignment(
            member_id, group.target_assignment.get(existing.member_id, EMPTY_ASSIGNMENT)
        )
    )
    records.append(build.current_assignment(replacement))
    return replacement


def check_group_size(ctx: GroupContext, group: ConsumerGroup, member_id: str) -> None:
    """Kafka's ``throwIfConsumerGroupIsFull``."""
    limit = ctx.config.group_consumer_max_size
    if len(group.members) >= limit and (member_id == "" or member_id not in group.members):
        raise ConsumerGroupError(
            Error.GROUP_MAX_SIZE_REACHED,
            f"The consumer group has reached its maximum capacity of {limit} members.",
        )


def _heartbeat(
    ctx: GroupContext, request: Request, records: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[Any]]:
    body = request.body
    config = ctx.config
    epoch = body["member_epoch"]
    create = epoch == JOIN_GROUP_MEMBER_EPOCH
    converted: list[Any] = []  # the timers of members an upgrade brings in
    group = _group_for_join(ctx, create, records, converted)
    member_id = body["member_id"]
    check_group_size(ctx, group, member_id)
    if member_id == "":
        member_id = new_member_id(ctx, group, request)
    owned = _owned(body)
    member = _member(ctx, group, member_id, request, owned, records)

    # 1. The member, with what the request changes.
    names = body["subscribed_topic_names"]
    regex = body["subscribed_topic_regex"]
    updated = member.replace(
        instance_id=body["instance_id"] if body["instance_id"] is not None else member.instance_id,
        rack_id=body["rack_id"] if body["rack_id"] is not None else member.rack_id,
        rebalance_timeout_ms=body["rebalance_timeout_ms"]
        if body["rebalance_timeout_ms"] != -1
        else member.rebalance_timeout_ms,
        server_assignor=body["server_assignor"]
        if body["server_assignor"] is not None
        else member.server_assignor,
        subscribed_topic_names=tuple(sorted(set(names)))
        if names is not None
        else member.subscribed_topic_names,
        subscribed_topic_regex=regex if regex is not None else member.subscribed_topic_regex,
        client_id=body["client_id"],
        client_host=body["client_host"],
        classic=None,  # it speaks the consumer protocol now
    )
    updated, after = update_member(ctx, group, member, updated, owned, records)
    after = converted + after

    after.append(
        lambda: ctx.schedule(
            session_key(updated.member_id),
            config.group_consumer_session_timeout_ms,
            CONSUMER_SESSION,
            updated.member_id,
        )
    )
    full = epoch == JOIN_GROUP_MEMBER_EPOCH or (
        body["rebalance_timeout_ms"] != -1
        and (names is not None or regex is not None)
        and body["topic_partitions"] is not None
    )
    answer: dict[str, Any] = {
        "member_id": updated.member_id,
        "member_epoch": updated.member_epoch,
        "heartbeat_interval_ms": config.group_consumer_heartbeat_interval_ms,
        "assignment": None,
    }
    if full or updated.assigned_partitions != member.assigned_partitions:
        answer["assignment"] = {"topic_partitions": topic_partitions(updated.assigned_partitions)}
    return answer, after


def update_member(
    ctx: GroupContext,
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    updated: ConsumerGroupMember,
    owned: Owned | None,
    records: list[dict[str, Any]],
) -> tuple[ConsumerGroupMember, list[Any]]:
    """Steps 1-4 of a heartbeat or of a classic member's JoinGroup (Kafka's
    ``hasMemberSubscriptionChanged``, the subscription metadata and group epoch,
    ``updateTargetAssignment`` and ``maybeReconcile``): ``member`` as the group holds it (or
    new), ``updated`` with what the request changes. Returns the reconciled member and the
    actions (timers) to run once the records are applied."""
    build = record_builder(ctx)
    bump = False
    if updated != member:
        records.append(build.member_subscription(updated))
        bump = (
            updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.regex != member.regex
        )

    # 2. Regular expressions and the subscription metadata: what the group subscribes to now
    # (Kafka's ``computeSubscribedTopicNames(member, updatedMember)``: ``member`` is counted in
    # the group, or is the copy of the static member it replaces, which is).
    resolved, changed_regexes = _resolve_regexes(ctx, group, member, updated, records)
    bump = bump or changed_regexes
    counts = dict(group.subscribed_topic_counts)
    for name in member.subscribed_topic_names:
        counts[name] = counts.get(name, 0) - 1
    for name in updated.subscribed_topic_names:
        counts[name] = counts.get(name, 0) + 1
    names_now = {name for name, count in counts.items() if count > 0}
    for topics in resolved.values():
        names_now.update(topics)
    metadata = subscription_metadata(ctx, names_now)
    if metadata != group.subscription_metadata:
        records.append(build.subscription_metadata(metadata))
        bump = True
    group_epoch = group.group_epoch
    if bump:
        group_epoch += 1
        records.append(build.epoch(group_epoch))

    # 3. The target assignment.
    if group_epoch > group.assignment_epoch:
        target = _update_target_assignment(
            ctx, group, group_epoch, member, updated, metadata, resolved, records
        )
        target_epoch = group_epoch
    else:
        target_epoch = group.assignment_epoch
        target = group.target_for(updated.member_id, updated.instance_id)

    # 4. Reconcile.
    after: list[Any] = []
    if not updated.is_reconciled_to(target_epoch):
        reconciled = reconcile(updated, target_epoch, target, group.current_partition_epoch, owned)
        if reconciled != updated:
            records.append(build.current_assignment(reconciled))
            if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                after.append(
                    lambda m=reconciled: ctx.schedule(
                        rebalance_key(m.member_id),
                        m.rebalance_timeout_ms,
                        CONSUMER_REBALANCE,
                        (m.member_id, m.member_epoch),
                    )
                )
            else:
                after.append(lambda m=reconciled: ctx.cancel(rebalance_key(m.member_id)))
        updated = reconciled
    return updated, after


def topic_partitions(assignment: Assignment) -> list[dict[str, Any]]:
    return [
        {"topic_id": topic_id, "partitions": sorted(assignment[topic_id])}
        for topic_id in sorted(assignment)
    ]


def subscription_metadata(ctx: GroupContext, names: set[str]) -> dict[str, TopicMetadata]:
    """Kafka's ``computeSubscriptionMetadata``: the subscribed topics that exist."""
    metadata = {}
    for name in names:
        topic = ctx.topics.by_name(name)
        if topic is not None:
            metadata[name] = topic
    return metadata


def _matches(ctx: GroupContext, regex: str) -> tuple[str, ...]:
    """Kafka's ``refreshRegularExpressions`` for one regex: every topic whose whole name it
    matches, as RE2/J's ``matcher(topic).matches()``."""
    return regexes.matching(regex, ctx.topics.names())


def _resolve_regexes(
    ctx: GroupContext,
    group: ConsumerGroup,
    leaving: ConsumerGroupMember,
    joining: ConsumerGroupMember | None,
    records: list[dict[str, Any]],
) -> tuple[dict[str, tuple[str, ...]], bool]:
    """The regexes the group uses once ``leaving`` is gone and ``joining`` is in, each with the
    topics it matches now: a new regex, or one whose topics changed, gets a RegularExpression
    record; one no member uses any more gets a tombstone. Returns (resolved, changed)."""
    counts = dict(group.regex_counts)
    if leaving.regex is not None:
        counts[leaving.regex] = counts.get(leaving.regex, 0) - 1
    if joining is not None and joining.regex is not None:
        counts[joining.regex] = counts.get(joining.regex, 0) + 1
    build = record_builder(ctx)
    resolved: dict[str, tuple[str, ...]] = {}
    changed = False
    for regex in sorted(set(counts) | set(group.resolved_regexes)):
        if counts.get(regex, 0) <= 0:
            if regex in group.resolved_regexes:
                records.append(build.regular_expression_tombstone(regex))
            continue
        topics = _matches(ctx, regex)
        if group.resolved_regexes.get(regex) != topics:
            records.append(build.regular_expression(regex, list(topics), ctx.topics.version))
            changed = True
        resolved[regex] = topics
    return resolved, changed


def _subscription(
    member: ConsumerGroupMember, resolved: Mapping[str, tuple[str, ...]]
) -> frozenset[str]:
    names = set(member.subscribed_topic_names)
    if member.regex is not None:
        names.update(resolved.get(member.regex, ()))
    return frozenset(names)


def _update_target_assignment(
    ctx: GroupContext,
    group: ConsumerGroup,
    group_epoch: int,
    member: ConsumerGroupMember,
    updated: ConsumerGroupMember,
    metadata: Mapping[str, TopicMetadata],
    resolved: Mapping[str, tuple[str, ...]],
    records: list[dict[str, Any]],
) -> Assignment:
    """Kafka's ``updateTargetAssignment`` and ``TargetAssignmentBuilder.build``."""
    config = ctx.config
    counts = dict(group.assignor_counts)
    if member.server_assignor is not None:
        counts[member.server_assignor] = counts.get(member.server_assignor, 0) - 1
    if updated.server_assignor is not None:
        counts[updated.server_assignor] = counts.get(updated.server_assignor, 0) + 1
    preferred = ConsumerGroup(
        group.group_id, assignor_counts={k: v for k, v in counts.items() if v > 0}
    )
    default = config.group_consumer_assignors[0]
    assignor_name = preferred.preferred_assignor(default, config.group_consumer_assignors)

    members: dict[str, ConsumerGroupMember] = dict(group.members)
    targets: dict[str, Assignment] = {
        m: group.target_assignment.get(m, EMPTY_ASSIGNMENT) for m in members
    }
    members[updated.member_id] = updated
    previous_id = group.static_members.get(updated.instance_id or "")
    targets[updated.member_id] = group.target_assignment.get(
        previous_id if previous_id is not None else updated.member_id,
        targets.get(updated.member_id, EMPTY_ASSIGNMENT),
    )
    if previous_id is not None and previous_id != updated.member_id:
        members.pop(previous_id, None)
        targets.pop(previous_id, None)
    result = compute_assignment(
        ctx, group, group_epoch, assignor_name, members, targets, metadata, resolved, records
    )
    return result.get(updated.member_id, EMPTY_ASSIGNMENT)


def compute_assignment(
    ctx: GroupContext,
    group: ConsumerGroup,
    group_epoch: int,
    assignor_name: str,
    members: Mapping[str, ConsumerGroupMember],
    targets: Mapping[str, Assignment],
    metadata: Mapping[str, TopicMetadata],
    resolved: Mapping[str, tuple[str, ...]],
    records: list[dict[str, Any]],
) -> dict[str, Assignment]:
    """Run the assignor over ``members`` and write the target assignment's delta and epoch."""
    ids = {name: topic.topic_id for name, topic in metadata.items()}
    # Members mostly share a subscription: each distinct one is resolved once.
    topic_ids: dict[tuple[tuple[str, ...], str | None], frozenset[str]] = {}
    specs = []
    for m, member in members.items():
        key = (member.subscribed_topic_names, member.regex)
        subscribed = topic_ids.get(key)
        if subscribed is None:
            names = _subscription(member, resolved)
            subscribed = topic_ids[key] = frozenset(ids[n] for n in names if n in ids)
        specs.append(
            MemberSpec(m, member.instance_id, subscribed, targets.get(m, EMPTY_ASSIGNMENT))
        )
    subscription = subscription_type(
        (m.subscribed_topic_names for m in members.values()),
        (m.regex for m in members.values()),
    )
    partitions = {topic.topic_id: topic.partitions for topic in metadata.values()}
    try:
        result = ASSIGNORS[assignor_name](specs, subscription, partitions)
    except PartitionAssignorError as exc:
        raise ConsumerGroupError(
            Error.UNKNOWN_SERVER_ERROR,
            f"Failed to compute a new target assignment for epoch {group_epoch}: {exc}",
        ) from None
    build = record_builder(ctx)
    for spec in specs:
        new = result.get(spec.member_id, EMPTY_ASSIGNMENT)
        if group.target_assignment.get(spec.member_id) != new:
            records.append(build.target_assignment(spec.member_id, new))
    records.append(build.target_assignment_epoch(group_epoch))
    return result


# --- leaving and fencing ----------------------------------------------------------------------


def remove_member_records(build: RecordBuilder, member_id: str) -> list[dict[str, Any]]:
    """Kafka's ``removeMember``: the tombstones of a member, in the order the replay needs."""
    return [
        build.current_assignment_tombstone(member_id),
        build.target_assignment_tombstone(member_id),
        build.member_subscription_tombstone(member_id),
    ]


def _leave(
    ctx: GroupContext, request: Request, records: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[Any]]:
    """Kafka's ``consumerGroupLeave`` (epoch -1) and static leave (epoch -2)."""
    body = request.body
    group = _existing_group(ctx)
    member_id, epoch = body["member_id"], body["member_epoch"]
    instance_id: str | None = body["instance_id"]
    answer = {
        "member_id": member_id,
        "member_epoch": epoch,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise ConsumerGroupError(
                Error.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {ctx.group_id}.",
            )
        return answer, fence_records(ctx, group, member, records)
    member = group.static_member(instance_id)
    if member is None:
        raise ConsumerGroupError(Error.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if member.member_id != member_id:
        raise ConsumerGroupError(
            Error.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{member.member_id}.",
        )
    if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        # The member stays, at epoch -2, until it rejoins or its session expires.
        leaving = member.replace(
            member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, partitions_pending_revocation={}
        )
        records.append(record_builder(ctx).current_assignment(leaving))
        answer["member_id"] = member.member_id
        answer["member_epoch"] = LEAVE_GROUP_STATIC_MEMBER_EPOCH
        return answer, [lambda: ctx.cancel(rebalance_key(member.member_id))]
    return answer, fence_records(ctx, group, member, records)


def fence_records(
    ctx: GroupContext,
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    records: list[dict[str, Any]],
) -> list[Any]:
    """Kafka's ``consumerGroupFenceMember``: the member's tombstones, the subscription metadata
    without it, a new group epoch; returns the actions that cancel its timers. When the member
    is the last one using the consumer protocol, the group may become a classic group instead
    (:mod:`coordinator.modern.migration`)."""
    from coordinator.modern import migration

    if migration.can_downgrade(ctx, group, member.member_id):
        return migration.convert_to_classic_group(ctx, group, member.member_id, records)
    build = record_builder(ctx)
    records.extend(remove_member_records(build, member.member_id))
    resolved, _ = _resolve_regexes(ctx, group, member, None, records)
    counts = dict(group.subscribed_topic_counts)
    for name in member.subscribed_topic_names:
        counts[name] -= 1
    names = {name for name, count in counts.items() if count > 0}
    for topics in resolved.values():
        names.update(topics)
    metadata = subscription_metadata(ctx, names)
    if metadata != group.subscription_metadata:
        records.append(build.subscription_metadata(metadata))
    records.append(build.epoch(group.group_epoch + 1))
    member_id = member.member_id
    return [lambda: cancel_timers(ctx, member_id)]


def expire_session(ctx: GroupContext, member_id: str) -> None:
    """The session timer: the member is fenced (``consumerGroupFenceMemberOperation``)."""
    _fence_by_timer(ctx, member_id, None)


def expire_rebalance(ctx: GroupContext, payload: tuple[str, int]) -> None:
    """The rebalance timer: fenced if still at the epoch it failed to move on from."""
    member_id, epoch = payload
    _fence_by_timer(ctx, member_id, epoch)


def _fence_by_timer(ctx: GroupContext, member_id: str, epoch: int | None) -> None:
    group = ctx.group
    if not isinstance(group, ConsumerGroup):
        return
    member = group.members.get(member_id)
    if member is None or (epoch is not None and member.member_epoch != epoch):
        return
    records: list[dict[str, Any]] = []
    after = fence_records(ctx, group, member, records)
    for record in records:
        ctx.append(record)
    for action in after:
        action()


# --- ConsumerGroupDescribe ----------------------------------------------------------------------


def describe(ctx: GroupContext, request: Request) -> None:
    """Kafka's ``consumerGroupDescribe`` for one group."""
    group = ctx.group
    if request.group_id == "":
        ctx.respond(
            DESCRIBE_API,
            request.request_id,
            Error.INVALID_GROUP_ID,
            "the group id must not be empty",
            **error_fields(DESCRIBE_API, None, Error.INVALID_GROUP_ID),
        )
        return
    if not isinstance(group, ConsumerGroup):
        message = (
            f"Group {ctx.group_id} not found."
            if group is None
            else f"Group {ctx.group_id} is not a consumer group."
        )
        ctx.respond(
            DESCRIBE_API,
            request.request_id,
            Error.GROUP_ID_NOT_FOUND,
            message,
            **error_fields(DESCRIBE_API, None, Error.GROUP_ID_NOT_FOUND),
        )
        return
    ctx.respond(DESCRIBE_API, request.request_id, **describe_fields(ctx, group))


def describe_fields(ctx: GroupContext, group: ConsumerGroup) -> dict[str, Any]:
    config = ctx.config
    return {
        "group_state": group.state.value,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": group.preferred_assignor(
            config.group_consumer_assignors[0], config.group_consumer_assignors
        ),
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": {"topic_partitions": _described(ctx, m.assigned_partitions)},
                "target_assignment": {
                    "topic_partitions": _described(
                        ctx, group.target_assignment.get(m.member_id, EMPTY_ASSIGNMENT)
                    )
                },
                "member_type": CLASSIC_MEMBER_TYPE
                if m.uses_classic_protocol
                else CONSUMER_MEMBER_TYPE,
            }
            for m in group.members.values()
        ],
    }


def _described(ctx: GroupContext, assignment: Assignment) -> list[dict[str, Any]]:
    """Kafka's ``topicPartitionsFromMap``: topics the metadata no longer knows are left out."""
    out = []
    for topic_id in sorted(assignment):
        topic = ctx.topics.by_id(topic_id)
        if topic is None:
            continue
        out.append(
            {
                "topic_id": topic_id,
                "topic_name": topic.name,
                "partitions": sorted(assignment[topic_id]),
            }
        )
    return out
