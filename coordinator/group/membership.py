"""Kafka's classic group membership protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups, DeleteGroups, and the timers that drive rebalances.

Each function mirrors the Kafka 4.x method of the same name in ``GroupMetadataManager``
(``classicGroupJoinToClassicGroup``, ``prepareRebalance``, ``completeClassicGroupJoin`` ...), so
a Kafka engineer can read them side by side. They work on one group through a
:class:`~coordinator.context.GroupContext` and know nothing of other groups, clocks or I/O.

Where the contract differs from Kafka on purpose (every request gets one answer), the code says
so at the spot.

Every rebalance has a reason, as in Kafka: :func:`prepare_rebalance` takes the text Kafka passes
to ``prepareRebalance`` (and logs as "Preparing to rebalance group ... (reason: ...)") and keeps
it on the group (``ClassicGroup.rebalance_reason``). The texts are Kafka 4.x's
(``GroupMetadataManager``), word for word, except LeaveGroup's (see :func:`leave_group`).
"""

from __future__ import annotations

from typing import Any

from coordinator.config import NEW_MEMBER_JOIN_TIMEOUT_MS
from coordinator.context import (
    JOIN_KEY,
    SYNC_KEY,
    GroupContext,
    heartbeat_key,
)
from coordinator.errors import Error
from coordinator.group.model import (
    EMPTY_ASSIGNMENT,
    HEARTBEAT,
    INITIAL_JOIN,
    JOIN,
    SYNC,
    ClassicGroup,
    Member,
    ParkedRequest,
)
from coordinator.group.states import GroupState, can_rebalance
from coordinator.log import records as log
from coordinator.requests import Request, failed_join_fields

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


# --- answers ----------------------------------------------------------------------------------


def client_reason(reason: str | None) -> str:
    """A JoinGroup's reason as Kafka quotes it (``JoinGroupRequest.joinReason``): "not provided"
    when the request carries none or an empty one."""
    return reason if reason else "not provided"


def leave_reason(reason: str | None) -> str:
    """A LeaveGroup member's reason as Kafka quotes it: "not provided" only for a null one."""
    return "not provided" if reason is None else reason


def _java(value: str | None) -> str:
    """A nullable string as Java's string concatenation spells it."""
    return "null" if value is None else value


def join_error(ctx: GroupContext, request_id: Any, error: Error, member_id: str) -> None:
    ctx.respond("join_group", request_id, error, **failed_join_fields(member_id))


def answer_join(
    ctx: GroupContext, group: ClassicGroup, member: Member, error: Error, **fields: Any
) -> bool:
    """Answer a member's parked JoinGroup(s), if any (Kafka's ``completeJoinFuture``).

    Kafka keeps one parked JoinGroup per member and never answers one that a newer request
    replaced; we answer each of them with the same result, oldest first (contract, section 1).
    """
    parked = group.take_awaiting_join(member)
    for request in parked:
        ctx.respond("join_group", request.request_id, error, **fields)
    return bool(parked)


def answer_sync(
    ctx: GroupContext,
    member: Member,
    error: Error,
    protocol_type: str | None,
    protocol_name: str | None,
    assignment: bytes,
) -> bool:
    """Answer a member's parked SyncGroup(s), if any (Kafka's ``completeSyncFuture``)."""
    parked = member.awaiting_sync
    if not parked:
        return False
    member.awaiting_sync = []
    for request in parked:
        ctx.respond(
            "sync_group",
            request.request_id,
            error,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignment=assignment,
        )
    return True


def joined_fields(
    group: ClassicGroup,
    member_id: str,
    members: list[dict[str, Any]],
    leader: str | None,
    skip_assignment: bool = False,
) -> dict[str, Any]:
    return {
        "generation_id": group.generation_id,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "leader": leader if leader is not None else "",
        "skip_assignment": skip_assignment,
        "member_id": member_id,
        "members": members,
    }


def drop_member(ctx: GroupContext, group: ClassicGroup, member_id: str) -> None:
    """Remove a member (or pending id) and cancel its heartbeat, answering what it left parked.

    Kafka answers a removed member's parked JoinGroup with UNKNOWN_MEMBER_ID and leaves a
    parked SyncGroup unanswered (the client times it out); we answer the SyncGroup with
    UNKNOWN_MEMBER_ID as well, so that every request gets exactly one response.
    """
    member = group.members.get(member_id)
    ctx.cancel(heartbeat_key(member_id))
    if member is not None:
        answer_join(ctx, group, member, Error.UNKNOWN_MEMBER_ID, **failed_join_fields(""))
        answer_sync(ctx, member, Error.UNKNOWN_MEMBER_ID, None, None, EMPTY_ASSIGNMENT)
    group.remove(member_id)


def reschedule_heartbeat(ctx: GroupContext, member: Member, timeout_ms: int | None = None) -> None:
    ctx.schedule(
        heartbeat_key(member.member_id),
        member.session_timeout_ms if timeout_ms is None else timeout_ms,
        HEARTBEAT,
        member.member_id,
    )


def validate_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> Error:
    """Kafka's ``validateMember`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit)."""
    if instance_id is not None:
        existing = group.static_members.get(instance_id)
        if existing is None:
            return Error.UNKNOWN_MEMBER_ID
        if existing != member_id:
            return Error.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return Error.UNKNOWN_MEMBER_ID
    return Error.NONE


# --- JoinGroup (6.2) --------------------------------------------------------------------------


def join_group(ctx: GroupContext, request: Request) -> None:
    body = request.body
    member_id: str = body["member_id"]
    group = ctx.classic
    is_new_group = group is None
    records_before = len(ctx.records)
    if group is None:
        if member_id != "":
            join_error(ctx, request.request_id, Error.UNKNOWN_MEMBER_ID, member_id)
            return
        group = ctx.create_group()

    if not accept_joining_member(ctx, group, member_id):
        drop_member(ctx, group, member_id)
        join_error(ctx, request.request_id, Error.GROUP_MAX_SIZE_REACHED, "")
    elif member_id == "":
        join_new_member(ctx, group, request)
    else:
        join_existing_member(ctx, group, request)

    if is_new_group and len(ctx.records) == records_before and ctx.group is group:
        # Kafka 4.x persists every group a JoinGroup creates, even when the join itself failed.
        ctx.append(log.empty_group_record(group, ctx.now_ms))


def accept_joining_member(ctx: GroupContext, group: ClassicGroup, member_id: str) -> bool:
    """``group.max.size`` (KIP-389): awaiting members count while rebalancing, all otherwise."""
    limit = ctx.config.group_max_size
    state = group.state
    if state is EMPTY or state is DEAD:
        return True
    member = group.members.get(member_id)
    if state is PREPARING:
        return (
            member is not None and bool(member.awaiting_join)
        ) or group.num_awaiting_join < limit
    return member is not None or len(group.members) < limit


def join_new_member(ctx: GroupContext, group: ClassicGroup, request: Request) -> None:
    body = request.body
    if group.state is DEAD:
        join_error(ctx, request.request_id, Error.COORDINATOR_NOT_AVAILABLE, "")
    elif not group.supports_protocols(body["protocol_type"], body["protocols"]):
        join_error(ctx, request.request_id, Error.INCONSISTENT_GROUP_PROTOCOL, "")
    else:
        instance_id = body["group_instance_id"]
        prefix = instance_id if instance_id is not None else body["client_id"]
        new_member_id = ctx.new_member_id(prefix, request.request_id)
        if instance_id is not None:
            existing = group.static_members.get(instance_id)
            if existing is not None:
                update_static_member_then_rebalance_or_complete_join(
                    ctx, group, request, existing, new_member_id
                )
            else:
                add_member_then_rebalance_or_complete_join(ctx, group, request, new_member_id)
        elif request.api_version >= 4:
            # KIP-394: hand out the id and wait for the member to come back with it.
            group.add_pending_member(new_member_id)
            ctx.schedule(
                heartbeat_key(new_member_id), body["session_timeout_ms"], HEARTBEAT, new_member_id
            )
            join_error(ctx, request.request_id, Error.MEMBER_ID_REQUIRED, new_member_id)
        else:
            add_member_then_rebalance_or_complete_join(ctx, group, request, new_member_id)


def join_existing_member(ctx: GroupContext, group: ClassicGroup, request: Request) -> None:
    body = request.body
    member_id: str = body["member_id"]
    if group.state is DEAD:
        join_error(ctx, request.request_id, Error.COORDINATOR_NOT_AVAILABLE, member_id)
        return
    if not group.supports_protocols(body["protocol_type"], body["protocols"]):
        join_error(ctx, request.request_id, Error.INCONSISTENT_GROUP_PROTOCOL, member_id)
        return
    if member_id in group.pending_members:
        if body["group_instance_id"] is not None:
            # Kafka throws IllegalStateException: a pending member is always dynamic.
            join_error(
                ctx,
                request.request_id,
                Error.INVALID_REQUEST,
                member_id,
            )
            return
        add_member_then_rebalance_or_complete_join(ctx, group, request, member_id)
        return
    error = validate_member(group, member_id, body["group_instance_id"])
    if error is not Error.NONE:
        join_error(ctx, request.request_id, error, member_id)
        return

    member = group.members[member_id]
    state = group.state
    because = client_reason(body["reason"])
    if state is PREPARING:
        update_member_then_rebalance_or_complete_join(
            ctx,
            group,
            member,
            request,
            f"Member {member_id} is joining group during {state.value}; client reason: {because}",
        )
    elif state is COMPLETING:
        if member.matches(body["protocols"]):
            members = group.current_member_list() if group.is_leader(member_id) else []
            ctx.respond(
                "join_group",
                request.request_id,
                **joined_fields(group, member_id, members, group.leader_id),
            )
        else:
            update_member_then_rebalance_or_complete_join(
                ctx,
                group,
                member,
                request,
                f"Updating metadata for member {member_id} during {state.value}; "
                f"client reason: {because}",
            )
    elif state is STABLE:
        if group.is_leader(member_id):
            # The leader's rejoin always rebalances: it may have seen new topic metadata.
            update_member_then_rebalance_or_complete_join(
                ctx,
                group,
                member,
                request,
                f"Leader {member_id} re-joining group during {state.value}; "
                f"client reason: {because}",
            )
        elif not member.matches(body["protocols"]):
            update_member_then_rebalance_or_complete_join(
                ctx,
                group,
                member,
                request,
                f"Updating metadata for member {member_id} during {state.value}; "
                f"client reason: {because}",
            )
        else:
            ctx.respond(
                "join_group",
                request.request_id,
                **joined_fields(group, member_id, [], group.leader_id),
            )
    else:
        join_error(ctx, request.request_id, Error.UNKNOWN_MEMBER_ID, member_id)


def update_member_then_rebalance_or_complete_join(
    ctx: GroupContext, group: ClassicGroup, member: Member, request: Request, reason: str
) -> None:
    body = request.body
    group.update_member(
        member,
        body["protocols"],
        body["rebalance_timeout_ms"],
        body["session_timeout_ms"],
        ParkedRequest(request.request_id, request.api_version),
    )
    maybe_prepare_rebalance_or_complete_join(ctx, group, reason)


def add_member_then_rebalance_or_complete_join(
    ctx: GroupContext, group: ClassicGroup, request: Request, member_id: str
) -> None:
    body = request.body
    member = Member(
        member_id=member_id,
        group_instance_id=body["group_instance_id"],
        client_id=body["client_id"],
        client_host=body["client_host"],
        rebalance_timeout_ms=body["rebalance_timeout_ms"],
        session_timeout_ms=body["session_timeout_ms"],
        protocol_type=body["protocol_type"],
        protocols=body["protocols"],
        is_new=True,
        awaiting_join=[ParkedRequest(request.request_id, request.api_version)],
    )
    if group.state is PREPARING and group.previous_state is EMPTY:
        group.new_member_added = True
    group.add(member)
    # A new member gets the fixed new-member join timeout, not its session timeout (8.2).
    reschedule_heartbeat(ctx, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
    maybe_prepare_rebalance_or_complete_join(
        ctx,
        group,
        f"Adding new member {member_id} with group instance id "
        f"{_java(body['group_instance_id'])}; client reason: {client_reason(body['reason'])}",
    )


def update_static_member_then_rebalance_or_complete_join(
    ctx: GroupContext, group: ClassicGroup, request: Request, old_member_id: str, new_member_id: str
) -> None:
    """A known static member rejoins with an empty member id (6.2.7)."""
    body = request.body
    instance_id = body["group_instance_id"]
    because = client_reason(body["reason"])
    current_leader = group.leader_id
    old, new = group.replace_static_member(instance_id, old_member_id, new_member_id)
    # The old id is fenced at once: whatever it has parked is answered FENCED_INSTANCE_ID.
    answer_join(
        ctx,
        group,
        old,
        Error.FENCED_INSTANCE_ID,
        **failed_join_fields(old_member_id),
    )
    answer_sync(ctx, old, Error.FENCED_INSTANCE_ID, None, None, EMPTY_ASSIGNMENT)
    ctx.cancel(heartbeat_key(old_member_id))
    reschedule_heartbeat(ctx, new)
    group.update_member(
        new,
        body["protocols"],
        body["rebalance_timeout_ms"],
        body["session_timeout_ms"],
        ParkedRequest(request.request_id, request.api_version),
    )

    if group.state is STABLE:
        if group.protocol_name == group.select_protocol():
            # Nothing changed for the group: persist the new member id, keep the assignment.
            assignment = {m.member_id: m.assignment for m in group.members.values()}
            ctx.append(log.group_metadata_record(group, assignment, ctx.now_ms))
            if request.api_version >= 9:
                is_leader = group.is_leader(new_member_id)
                members = group.current_member_list() if is_leader else []
                fields = joined_fields(group, new_member_id, members, group.leader_id, is_leader)
            else:
                # Older clients must not believe they lead: name the old leader id (KIP-345).
                fields = joined_fields(group, new_member_id, [], current_leader)
            answer_join(ctx, group, new, Error.NONE, **fields)
        else:
            maybe_prepare_rebalance_or_complete_join(
                ctx,
                group,
                f"Group's selectedProtocol will change because static member {new_member_id} "
                f"with instance id {instance_id} joined with change of protocol; "
                f"client reason: {because}",
            )
    elif group.state is COMPLETING:
        # The leader may already be assigning for the old id: start over.
        prepare_rebalance(
            ctx,
            group,
            f"Updating metadata for static member {new_member_id} with instance id "
            f"{instance_id}; client reason: {because}",
        )
    elif group.state is PREPARING:
        maybe_complete_join_phase(ctx, group)
    else:
        # Unreachable: an Empty or Dead group holds no static mapping (Kafka throws here too).
        raise RuntimeError(
            f"group {group.group_id} was not supposed to be in the state {group.state.value} "
            f"when the unknown static member {instance_id} rejoins"
        )


# --- rebalancing (7.1, 7.2, 8.3) --------------------------------------------------------------


def maybe_prepare_rebalance_or_complete_join(
    ctx: GroupContext, group: ClassicGroup, reason: str
) -> None:
    if can_rebalance(group.state):
        prepare_rebalance(ctx, group, reason)
    else:
        maybe_complete_join_phase(ctx, group)


def prepare_rebalance(ctx: GroupContext, group: ClassicGroup, reason: str) -> None:
    """Kafka's ``prepareRebalance(group, reason)``; the reason stays on the group until the next
    rebalance (it is not part of any log record)."""
    if group.state is COMPLETING:
        reset_and_propagate_assignment_with_error(ctx, group, Error.REBALANCE_IN_PROGRESS)
    remove_sync_expiration(ctx, group)
    is_initial_rebalance = group.state is EMPTY
    if is_initial_rebalance:
        # KIP-134: give the members of a new group time to arrive before the first generation.
        delay = ctx.config.group_initial_rebalance_delay_ms
        remaining = max(group.rebalance_timeout_ms() - delay, 0)
        ctx.schedule(JOIN_KEY, delay, INITIAL_JOIN, (delay, remaining))
    group.transition_to(PREPARING, ctx.now_ms)
    group.rebalance_reason = reason
    if not is_initial_rebalance:
        maybe_complete_join_else_schedule(ctx, group)


def maybe_complete_join_else_schedule(ctx: GroupContext, group: ClassicGroup) -> None:
    if group.has_all_members_joined():
        complete_join(ctx, group)
    else:
        ctx.schedule(JOIN_KEY, group.rebalance_timeout_ms(), JOIN)


def maybe_complete_join_phase(ctx: GroupContext, group: ClassicGroup) -> None:
    """Complete the join early once everyone rejoined, except during the initial delay."""
    if (
        group.state is PREPARING
        and group.previous_state is not EMPTY
        and group.has_all_members_joined()
    ):
        complete_join(ctx, group)


def try_complete_initial_rebalance_else_schedule(
    ctx: GroupContext, group: ClassicGroup, delay_ms: int, remaining_ms: int
) -> None:
    if group.new_member_added and remaining_ms != 0:
        group.new_member_added = False
        new_delay = min(ctx.config.group_initial_rebalance_delay_ms, remaining_ms)
        # Kafka subtracts the previous delay here, not the new one (8.3).
        new_remaining = max(remaining_ms - delay_ms, 0)
        ctx.schedule(JOIN_KEY, new_delay, INITIAL_JOIN, (new_delay, new_remaining))
    else:
        complete_join(ctx, group)


def complete_join(ctx: GroupContext, group: ClassicGroup) -> None:
    """Kafka's ``completeClassicGroupJoin``: the next generation begins."""
    ctx.cancel(JOIN_KEY)
    for member in [m for m in group.members.values() if not m.awaiting_join and not m.is_static]:
        drop_member(ctx, group, member.member_id)

    if group.state is DEAD:
        return
    if not group.maybe_elect_new_joined_leader() and group.members:
        # Only static members that did not rejoin are left: wait for them (or their sessions).
        ctx.schedule(JOIN_KEY, group.rebalance_timeout_ms(), JOIN)
        return

    group.init_next_generation(ctx.now_ms)
    if group.state is EMPTY:
        ctx.append(log.group_metadata_record(group, {}, ctx.now_ms))
        return

    leader_members = group.current_member_list()
    for member in group.members.values():
        members = leader_members if group.is_leader(member.member_id) else []
        answer_join(
            ctx,
            group,
            member,
            Error.NONE,
            **joined_fields(group, member.member_id, members, group.leader_id),
        )
        reschedule_heartbeat(ctx, member)
        member.is_new = False
        group.pending_sync_members[member.member_id] = None
    ctx.schedule(SYNC_KEY, group.rebalance_timeout_ms(), SYNC, group.generation_id)


def reset_and_propagate_assignment_with_error(
    ctx: GroupContext, group: ClassicGroup, error: Error
) -> None:
    for member in group.members.values():
        member.assignment = EMPTY_ASSIGNMENT
    propagate_assignment(ctx, group, error)


def propagate_assignment(ctx: GroupContext, group: ClassicGroup, error: Error) -> None:
    ok = error is Error.NONE
    protocol_type = group.protocol_type if ok else None
    protocol_name = group.protocol_name if ok else None
    for member in group.members.values():
        if answer_sync(ctx, member, error, protocol_type, protocol_name, member.assignment):
            reschedule_heartbeat(ctx, member)


def remove_sync_expiration(ctx: GroupContext, group: ClassicGroup) -> None:
    group.pending_sync_members.clear()
    ctx.cancel(SYNC_KEY)


# --- timers (8) -------------------------------------------------------------------------------


def expire_member_heartbeat(ctx: GroupContext, group: ClassicGroup, member_id: str) -> None:
    """A member's session (or a pending member's KIP-394 wait, or a new member's join) timed out."""
    if group.state is DEAD:
        return
    if member_id in group.pending_members:
        group.remove(member_id)
        if group.state is PREPARING and group.has_all_members_joined():
            complete_join(ctx, group)
        return
    member = group.members.get(member_id)
    if member is None or has_satisfied_heartbeat(member):
        return
    remove_member_and_update_group(
        ctx, group, member, f"removing member {member_id} on heartbeat expiration."
    )


def has_satisfied_heartbeat(member: Member) -> bool:
    """A parked JoinGroup or SyncGroup keeps a member alive, unless its first join is pending."""
    if member.is_new:
        return False
    return bool(member.awaiting_join or member.awaiting_sync)


def remove_member_and_update_group(
    ctx: GroupContext, group: ClassicGroup, member: Member, reason: str
) -> None:
    drop_member(ctx, group, member.member_id)
    if group.state is STABLE or group.state is COMPLETING:
        maybe_prepare_rebalance_or_complete_join(ctx, group, reason)
    elif group.state is PREPARING and group.has_all_members_joined():
        # Kafka 4.x completes here directly, even during the initial delay.
        complete_join(ctx, group)


def expire_pending_sync(ctx: GroupContext, group: ClassicGroup, generation_id: int) -> None:
    """Members that never sent SyncGroup after a join are removed (KAFKA-12890)."""
    if generation_id != group.generation_id:
        return
    if group.state is not COMPLETING and group.state is not STABLE:
        return
    if group.pending_sync_members:
        removed = list(group.pending_sync_members)
        for member_id in removed:
            drop_member(ctx, group, member_id)
        # Kafka prints the set with Java's Set.toString ("[a, b]", in hash order; ours: join order).
        prepare_rebalance(
            ctx, group, f"Removing [{', '.join(removed)}] on pending sync request expiration"
        )


# --- SyncGroup (6.3) --------------------------------------------------------------------------


def sync_group(ctx: GroupContext, request: Request) -> None:
    body = request.body
    group = ctx.classic
    member_id: str = body["member_id"]

    def fail(error: Error) -> None:
        ctx.respond(
            "sync_group",
            request.request_id,
            error,
            protocol_type=None,
            protocol_name=None,
            assignment=EMPTY_ASSIGNMENT,
        )

    if group is None or group.state is EMPTY:
        return fail(Error.UNKNOWN_MEMBER_ID)
    if group.state is DEAD:
        return fail(Error.COORDINATOR_NOT_AVAILABLE)
    error = validate_member(group, member_id, body["group_instance_id"])
    if error is not Error.NONE:
        return fail(error)
    if body["generation_id"] != group.generation_id:
        return fail(Error.ILLEGAL_GENERATION)
    if _protocol_inconsistent(body["protocol_type"], group.protocol_type) or _protocol_inconsistent(
        body["protocol_name"], group.protocol_name
    ):
        return fail(Error.INCONSISTENT_GROUP_PROTOCOL)

    if group.state is PREPARING:
        return fail(Error.REBALANCE_IN_PROGRESS)
    member = group.members[member_id]
    if group.state is COMPLETING:
        member.awaiting_sync.append(ParkedRequest(request.request_id, request.api_version))
        remove_pending_sync_member(ctx, group, member_id)
        if group.is_leader(member_id):
            assignment: dict[str, bytes] = {}
            for entry in body["assignments"]:
                assignment[entry["member_id"]] = entry["assignment"]  # duplicates: last wins
            for other_id in group.members:
                assignment.setdefault(other_id, EMPTY_ASSIGNMENT)
            ctx.append(log.group_metadata_record(group, assignment, ctx.now_ms))
            # The write is synchronous and succeeds: Kafka's append callback runs at once.
            for other in group.members.values():
                other.assignment = assignment.get(other.member_id, EMPTY_ASSIGNMENT)
            propagate_assignment(ctx, group, Error.NONE)
            group.transition_to(STABLE, ctx.now_ms)
        return None
    # Stable: the member's current assignment; a leader's assignments list is ignored.
    remove_pending_sync_member(ctx, group, member_id)
    ctx.respond(
        "sync_group",
        request.request_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        assignment=member.assignment,
    )
    return None


def _protocol_inconsistent(given: str | None, current: str | None) -> bool:
    return given is not None and current is not None and given != current


def remove_pending_sync_member(ctx: GroupContext, group: ClassicGroup, member_id: str) -> None:
    group.pending_sync_members.pop(member_id, None)
    if group.state in (COMPLETING, STABLE):
        if not group.pending_sync_members:
            ctx.cancel(SYNC_KEY)
    else:
        ctx.cancel(SYNC_KEY)


# --- Heartbeat (6.4) --------------------------------------------------------------------------


def heartbeat(ctx: GroupContext, request: Request) -> None:
    body = request.body
    error = heartbeat_member(
        ctx, body["member_id"], body["group_instance_id"], body["generation_id"]
    )
    ctx.respond("heartbeat", request.request_id, error)


def heartbeat_member(
    ctx: GroupContext, member_id: str, instance_id: str | None, generation_id: int
) -> Error:
    """A heartbeat's effect on the group (its member's session re-armed) and its answer."""
    group = ctx.classic
    if group is None:
        return Error.UNKNOWN_MEMBER_ID
    if group.state is DEAD:
        return Error.COORDINATOR_NOT_AVAILABLE
    error = validate_member(group, member_id, instance_id)
    if error is Error.NONE and generation_id != group.generation_id:
        error = Error.ILLEGAL_GENERATION
    if error is Error.NONE:
        if group.state is EMPTY:
            error = Error.UNKNOWN_MEMBER_ID
        else:
            reschedule_heartbeat(ctx, group.members[member_id])
            if group.state is PREPARING:
                error = Error.REBALANCE_IN_PROGRESS
    return error


# --- LeaveGroup (6.5) -------------------------------------------------------------------------


def leave_group(ctx: GroupContext, request: Request) -> None:
    """Kafka's LeaveGroup. The rebalance's reason is Kafka 3.x's, "Removing member M on
    LeaveGroup; client reason: R" (``GroupCoordinator.removeCurrentMemberFromGroup``), for the
    first member the request removes: 3.x rebalances on that member's removal, and the others
    then leave a group already rebalancing. Kafka 4.x says "explicit `LeaveGroup` request for
    (M1, M2) members." and drops the client's reason, which is the part worth keeping."""
    identities: list[dict[str, Any]] = request.body["members"]
    group = ctx.classic
    if group is None:
        results = [leave_result(m, Error.UNKNOWN_MEMBER_ID) for m in identities]
        return answer_leave(ctx, request, Error.NONE, results)
    if group.state is DEAD:
        return answer_leave(ctx, request, Error.COORDINATOR_NOT_AVAILABLE, [])

    results = []
    reason: str | None = None
    for identity in identities:
        member_id, instance_id = identity["member_id"], identity["group_instance_id"]
        if member_id == "":
            target = group.static_members.get(instance_id) if instance_id is not None else None
            error = Error.UNKNOWN_MEMBER_ID if target is None else Error.NONE
        elif member_id in group.pending_members:
            target, error = member_id, Error.NONE
        else:
            target = member_id
            error = validate_member(group, member_id, instance_id)
        if error is Error.NONE and target is not None:
            drop_member(ctx, group, target)
            if reason is None:
                reason = (
                    f"Removing member {target} on LeaveGroup; "
                    f"client reason: {leave_reason(identity['reason'])}"
                )
        results.append(leave_result(identity, error))

    if reason is not None:
        if group.state is STABLE or group.state is COMPLETING:
            maybe_prepare_rebalance_or_complete_join(ctx, group, reason)
        elif group.state is PREPARING:
            maybe_complete_join_phase(ctx, group)
    return answer_leave(ctx, request, Error.NONE, results)


def leave_result(identity: dict[str, Any], error: Error) -> dict[str, Any]:
    return {
        "member_id": identity["member_id"],
        "group_instance_id": identity["group_instance_id"],
        "error_code": int(error),
        "error": error.error_name,
    }


def answer_leave(
    ctx: GroupContext, request: Request, error: Error, results: list[dict[str, Any]]
) -> None:
    if request.api_version < 3 and error is Error.NONE and results:
        # v0-v2 carry one member; its error is the response's (LeaveGroupResponse).
        error = Error(results[0]["error_code"])
    ctx.respond("leave_group", request.request_id, error, members=results)


# --- DescribeGroups (6.10) --------------------------------------------------------------------


def describe_group(ctx: GroupContext, request: Request) -> None:
    group = ctx.classic
    if group is None or group.state is DEAD:
        ctx.respond(
            "describe_groups",
            request.request_id,
            group_state=DEAD.value,
            protocol_type="",
            protocol_data="",
            members=[],
        )
        return
    stable = group.state is STABLE
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": m.metadata(group.protocol_name) if stable else b"",
            "member_assignment": m.assignment,
        }
        for m in group.members.values()
    ]
    ctx.respond(
        "describe_groups",
        request.request_id,
        group_state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=(group.protocol_name or "") if stable else "",
        members=members,
    )


# --- DeleteGroups (6.12) ----------------------------------------------------------------------


def delete_group(ctx: GroupContext, request: Request) -> None:
    group = ctx.classic
    if group is None or group.state is DEAD:
        error = Error.GROUP_ID_NOT_FOUND
    elif group.state is not EMPTY:
        error = Error.NON_EMPTY_GROUP
    else:
        error = Error.NONE
        for topic, partition in sorted(group.offsets):
            ctx.append(log.offset_tombstone(group.group_id, topic, partition, ctx.now_ms))
        ctx.append(log.group_tombstone(group.group_id, ctx.now_ms))
    ctx.respond("delete_groups", request.request_id, error)


# --- partition unload (10.7) ------------------------------------------------------------------


def unload_group(ctx: GroupContext, group: ClassicGroup) -> None:
    """The coordinator gives the group's partition up: parked requests get NOT_COORDINATOR."""
    group.transition_to(DEAD, ctx.now_ms)
    for member in group.members.values():
        answer_join(
            ctx,
            group,
            member,
            Error.NOT_COORDINATOR,
            **failed_join_fields(member.member_id),
        )
        answer_sync(ctx, member, Error.NOT_COORDINATOR, None, None, EMPTY_ASSIGNMENT)
    ctx.group = None
