"""Members of a consumer group that speak the classic protocol (KIP-848's mixed groups).

Kafka 4.0 lets a consumer that only knows JoinGroup, SyncGroup and Heartbeat (protocol type
``consumer``) join a consumer group: the coordinator assigns it like any member, and the classic
requests carry that out (``GroupMetadataManager.classicGroupJoinToConsumerGroup``,
``classicGroupSyncToConsumerGroup``, ``classicGroupHeartbeatToConsumerGroup``,
``classicGroupLeaveToConsumerGroup``):

- JoinGroup updates the member from its subscription (the first protocol's metadata) and its
  owned partitions, exactly as a ConsumerGroupHeartbeat would (the same steps,
  :func:`coordinator.modern.heartbeat.update_member`), and answers at once with the member epoch
  as the generation, no leader and no member list; the member's ClassicMemberMetadata (session
  timeout, protocols) is kept in its ConsumerGroupMemberMetadata record;
- SyncGroup answers the member's current assignment as a consumer-protocol Assignment, or
  REBALANCE_IN_PROGRESS when the group epoch moved on;
- Heartbeat keeps the session and answers REBALANCE_IN_PROGRESS when the member should rejoin to
  move towards its target (a newer group epoch, partitions to revoke, or released partitions to
  take);
- LeaveGroup removes classic members (a consumer-protocol member is UNKNOWN_MEMBER_ID there).

A classic member that does not rejoin within its rebalance timeout after being asked to
(``join-timeout``), or does not sync within it after joining (``sync-timeout``), is fenced, as is
one whose classic session runs out. Everything else (the group epoch, the target assignment,
revocation before reassignment, the records) is the consumer group's.
"""

from __future__ import annotations

from typing import Any

from coordinator.consumer_protocol import (
    HIGHEST_VERSION,
    PROTOCOL_TYPE,
    TopicPartitions,
    decode_subscription,
    encode_assignment,
)
from coordinator.consumer_protocol import Assignment as ProtocolAssignment
from coordinator.context import GroupContext
from coordinator.errors import Error
from coordinator.group.membership import answer_leave, leave_result
from coordinator.modern import heartbeat as hb
from coordinator.modern.heartbeat import CONSUMER_JOIN, CONSUMER_SYNC, join_key, sync_key
from coordinator.modern.model import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from coordinator.requests import Request, failed_join_fields
from coordinator.serde import DecodeError

# --- checks shared by SyncGroup, Heartbeat and LeaveGroup ---------------------------------------


def _member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
    """Kafka's ``validateConsumerGroupMember``."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise hb.ConsumerGroupError(
                Error.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        return member
    member = group.static_member(instance_id)
    if member is None:
        raise hb.ConsumerGroupError(
            Error.UNKNOWN_MEMBER_ID,
            f"Member with instance id {instance_id} is not a member of group {group.group_id}.",
        )
    _check_not_fenced(member, member_id, instance_id)
    return member


def _check_not_fenced(member: ConsumerGroupMember, member_id: str, instance_id: str) -> None:
    """Kafka's ``throwIfInstanceIdIsFenced``."""
    if member.member_id != member_id:
        raise hb.ConsumerGroupError(
            Error.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{member.member_id}.",
        )


def _check_classic(member: ConsumerGroupMember) -> ClassicMemberMetadata:
    """Kafka's ``throwIfMemberDoesNotUseClassicProtocol``."""
    if member.classic is None:
        raise hb.ConsumerGroupError(
            Error.UNKNOWN_MEMBER_ID,
            f"Member {member.member_id} does not use the classic protocol.",
        )
    return member.classic


def _check_generation(member: ConsumerGroupMember, generation_id: int) -> None:
    """Kafka's ``throwIfGenerationIdUnmatched``."""
    if member.member_epoch != generation_id:
        raise hb.ConsumerGroupError(
            Error.ILLEGAL_GENERATION,
            f"The request generation id {generation_id} is not equal to the member epoch "
            f"{member.member_epoch} of member {member.member_id}.",
        )


def _schedule_join_timeout(ctx: GroupContext, member: ConsumerGroupMember) -> None:
    """Kafka's ``scheduleConsumerGroupJoinTimeoutIfAbsent``."""
    group = ctx.group
    assert group is not None
    if join_key(member.member_id) not in group.timers:
        ctx.schedule(
            join_key(member.member_id), member.rebalance_timeout_ms, CONSUMER_JOIN, member.member_id
        )


def _schedule_session(ctx: GroupContext, member_id: str, classic: ClassicMemberMetadata) -> None:
    ctx.schedule(
        hb.session_key(member_id), classic.session_timeout_ms, hb.CONSUMER_SESSION, member_id
    )


# --- JoinGroup ------------------------------------------------------------------------------------


def join_group(ctx: GroupContext, request: Request) -> None:
    """Kafka's ``classicGroupJoinToConsumerGroup`` (a group with members; an empty consumer
    group is replaced by a classic one before this, as Kafka does)."""
    group = ctx.consumer
    assert group is not None
    records: list[dict[str, Any]] = []
    try:
        answer, after = _join(ctx, group, request, records)
    except hb.ConsumerGroupError as problem:
        fields = failed_join_fields(request.body["member_id"])
        ctx.respond("join_group", request.request_id, problem.error, problem.message, **fields)
        return
    for record in records:
        ctx.append(record)
    for action in after:
        action()
    error = answer.pop("error", Error.NONE)
    ctx.respond("join_group", request.request_id, error, **answer)


def _join(
    ctx: GroupContext, group: ConsumerGroup, request: Request, records: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[Any]]:
    body = request.body
    instance_id: str | None = body["group_instance_id"]
    protocols: list[tuple[str, bytes]] = list(body["protocols"])
    member_id: str = body["member_id"]
    unknown = member_id == ""
    if unknown:
        member_id = hb.new_member_id(ctx, group, request)
    hb.check_group_size(ctx, group, member_id)
    if not group.supports_classic_protocols(body["protocol_type"], {n for n, _ in protocols}):
        raise hb.ConsumerGroupError(
            Error.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported."
        )
    if unknown and instance_id is None and request.api_version >= 4:
        # KIP-394: the member comes back with the id it is given.
        return {"error": Error.MEMBER_ID_REQUIRED, **failed_join_fields(member_id)}, []

    if instance_id is None:
        member = group.members.get(member_id) or ConsumerGroupMember(member_id)
    else:
        existing = group.static_member(instance_id)
        if unknown:
            if existing is None:
                member = group.members.get(member_id) or ConsumerGroupMember(member_id)
            else:
                member = hb.replace_static_member(ctx, group, existing, member_id, records)
        else:
            if existing is None:
                raise hb.ConsumerGroupError(
                    Error.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown."
                )
            _check_not_fenced(existing, member_id, instance_id)
            member = existing

    try:
        subscription = decode_subscription(protocols[0][1])
    except DecodeError:
        raise hb.ConsumerGroupError(
            Error.UNKNOWN_SERVER_ERROR,
            "Malformed embedded consumer protocol in subscription deserialization.",
        ) from None
    rebalance_timeout_ms = body["rebalance_timeout_ms"]
    if rebalance_timeout_ms is None:  # JoinGroup v0: the session timeout serves
        rebalance_timeout_ms = body["session_timeout_ms"]
    classic = ClassicMemberMetadata(body["session_timeout_ms"], tuple(protocols))
    updated = member.replace(
        instance_id=instance_id if instance_id is not None else member.instance_id,
        rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=rebalance_timeout_ms
        if rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        subscribed_topic_names=tuple(sorted(set(subscription.topics))),
        client_id=body["client_id"],
        client_host=body["client_host"],
        classic=classic,
    )
    owned: dict[str, frozenset[int]] = {}
    for tp in subscription.owned_partitions:  # Kafka's toTopicPartitions: known topics only
        topic = ctx.topics.by_name(tp.topic)
        if topic is not None:
            owned[topic.topic_id] = owned.get(topic.topic_id, frozenset()) | set(tp.partitions)
    updated, after = hb.update_member(ctx, group, member, updated, owned, records)

    new_id = updated.member_id
    after.append(lambda: ctx.cancel(join_key(new_id)))
    # The last consumer-protocol static member replaced by this classic one: a classic group.
    from coordinator.modern import migration

    replaced = group.static_members.get(instance_id) if instance_id is not None else None
    if replaced is not None and migration.can_downgrade_replacing(ctx, group, replaced):
        after += migration.convert_to_classic_group(ctx, group, replaced, records, updated)
    else:
        after += [
            lambda: _schedule_session(ctx, new_id, classic),
            lambda: ctx.schedule(sync_key(new_id), rebalance_timeout_ms, CONSUMER_SYNC, new_id),
        ]
    answer = {
        "generation_id": updated.member_epoch,
        "protocol_type": PROTOCOL_TYPE,
        "protocol_name": protocols[0][0],
        "leader": "",
        "skip_assignment": False,
        "member_id": new_id,
        "members": [],
    }
    return answer, after


# --- SyncGroup ----------------------------------------------------------------------------------


def sync_group(ctx: GroupContext, request: Request) -> None:
    """Kafka's ``classicGroupSyncToConsumerGroup``: the member's current assignment."""
    group = ctx.consumer
    assert group is not None
    body = request.body
    try:
        member = _member(group, body["member_id"], body["group_instance_id"])
        classic = _check_classic(member)
        _check_generation(member, body["generation_id"])
        _check_protocol(member, classic, body["protocol_type"], body["protocol_name"])
        if group.group_epoch > member.member_epoch and (
            member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            _schedule_join_timeout(ctx, member)
            raise hb.ConsumerGroupError(
                Error.REBALANCE_IN_PROGRESS,
                f"A new rebalance is triggered in group {group.group_id} and member "
                f"{member.member_id} should rejoin to catch up.",
            )
    except hb.ConsumerGroupError as problem:
        ctx.respond(
            "sync_group",
            request.request_id,
            problem.error,
            problem.message,
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )
        return
    ctx.cancel(sync_key(member.member_id))
    _schedule_session(ctx, member.member_id, classic)
    ctx.respond(
        "sync_group",
        request.request_id,
        protocol_type=body["protocol_type"],
        protocol_name=body["protocol_name"],
        assignment=assignment_bytes(ctx, member.assigned_partitions, classic.supported_protocols),
    )


def _check_protocol(
    member: ConsumerGroupMember,
    classic: ClassicMemberMetadata,
    protocol_type: str | None,
    protocol_name: str | None,
) -> None:
    """Kafka's ``throwIfClassicProtocolUnmatched``."""
    name = classic.supported_protocols[0][0]
    if protocol_type is not None and protocol_type != PROTOCOL_TYPE:
        raise hb.ConsumerGroupError(
            Error.INCONSISTENT_GROUP_PROTOCOL,
            f"The protocol type {protocol_type} from member {member.member_id} request is not "
            f"equal to the group protocol type {PROTOCOL_TYPE}.",
        )
    if protocol_name is not None and protocol_name != name:
        raise hb.ConsumerGroupError(
            Error.INCONSISTENT_GROUP_PROTOCOL,
            f"The protocol name {protocol_name} from member {member.member_id} request is not "
            f"equal to the protocol name {name} returned in the join response.",
        )


def assignment_bytes(
    ctx: GroupContext,
    assignment: Any,
    protocols: tuple[tuple[str, bytes], ...],
    protocol_name: str | None = None,
) -> bytes:
    """Kafka's ``prepareAssignment``: the partitions (of topics the metadata still knows) as a
    consumer-protocol Assignment, at the version of the member's subscription for
    ``protocol_name`` (its first protocol by default)."""
    metadata = next(
        (m for n, m in protocols if protocol_name is None or n == protocol_name), protocols[0][1]
    )
    version = int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
    if version < 0:
        raise ValueError("Malformed embedded consumer protocol in version deserialization.")
    topics = []
    for topic_id in sorted(assignment):
        topic = ctx.topics.by_id(topic_id)
        if topic is not None:
            topics.append(TopicPartitions(topic.name, tuple(sorted(assignment[topic_id]))))
    return encode_assignment(ProtocolAssignment(tuple(topics)), min(version, HIGHEST_VERSION))


# --- Heartbeat ----------------------------------------------------------------------------------


def heartbeat(ctx: GroupContext, request: Request) -> None:
    """Kafka's ``classicGroupHeartbeatToConsumerGroup``."""
    group = ctx.consumer
    assert group is not None
    body = request.body
    try:
        member = _member(group, body["member_id"], body["group_instance_id"])
        classic = _check_classic(member)
        _check_generation(member, body["generation_id"])
    except hb.ConsumerGroupError as problem:
        ctx.respond("heartbeat", request.request_id, problem.error, problem.message)
        return
    _schedule_session(ctx, member.member_id, classic)
    error = Error.NONE
    if (
        member.member_epoch < group.group_epoch
        or member.state is MemberState.UNREVOKED_PARTITIONS
        or (
            member.state is MemberState.UNRELEASED_PARTITIONS
            and not group.waiting_on_unreleased_partition(member)
        )
    ):
        error = Error.REBALANCE_IN_PROGRESS
        _schedule_join_timeout(ctx, member)
    ctx.respond("heartbeat", request.request_id, error)


# --- LeaveGroup ---------------------------------------------------------------------------------


def leave_group(ctx: GroupContext, request: Request) -> None:
    """Kafka's ``classicGroupLeaveToConsumerGroup``: each classic member named leaves; then the
    subscription metadata without them and one new group epoch."""
    group = ctx.consumer
    assert group is not None
    build = hb.record_builder(ctx)
    records: list[dict[str, Any]] = []
    results = []
    leaving: list[ConsumerGroupMember] = []
    for identity in request.body["members"]:
        member_id, instance_id = identity["member_id"], identity["group_instance_id"]
        try:
            if instance_id is None:
                member = _member(group, member_id, None)
                _check_classic(member)
            else:
                found = group.static_member(instance_id)
                if found is None:
                    raise hb.ConsumerGroupError(
                        Error.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown."
                    )
                if member_id != "":  # an admin removes a static member by instance id alone
                    _check_not_fenced(found, member_id, instance_id)
                _check_classic(found)
                member = found
        except hb.ConsumerGroupError as problem:
            results.append(leave_result(identity, problem.error))
            continue
        if member not in leaving:
            records.extend(hb.remove_member_records(build, member.member_id))
            leaving.append(member)
        results.append(leave_result({**identity, "member_id": member.member_id}, Error.NONE))
    if leaving:
        counts = dict(group.subscribed_topic_counts)
        for member in leaving:
            for name in member.subscribed_topic_names:
                counts[name] -= 1
        names = {name for name, count in counts.items() if count > 0}
        for topics in group.resolved_regexes.values():
            names.update(topics)
        metadata = hb.subscription_metadata(ctx, names)
        if metadata != group.subscription_metadata:
            records.append(build.subscription_metadata(metadata))
        records.append(build.epoch(group.group_epoch + 1))
    for record in records:
        ctx.append(record)
    for member in leaving:
        hb.cancel_timers(ctx, member.member_id)
    answer_leave(ctx, request, Error.NONE, results)
