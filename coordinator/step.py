"""The per-group step: (state, requests, now) -> (state, responses, records, next deadline).

This is the engine's core as every adapter sees it. :func:`step` runs one group id's due timers
and then its requests, and returns everything they produced; the facade
(:class:`coordinator.engine.GroupCoordinator`) and the Spark job both call the functions here.
The step takes ownership of the state it is given (it is updated in place and returned).

Time within a step: each request may carry the time it arrived (the Spark job's inbox stamps
every request file when it finds it). The step moves the group's clock through those times in
request order, firing the timers due by each time before serving the request, then to
``now_ms`` for the timers due by then: a request is served at the time it arrived, even when the
step runs later, so a member whose heartbeat arrived before its session deadline is not expired
because the heartbeat was read late. The clock never goes backwards (``ClassicGroup.clock_ms``
keeps it between steps): a request's time is ``max(clock, min(arrival, now_ms))``.

The responses all leave at ``now_ms``, so the timers a step arms for its members (sessions, the
time to rejoin or to sync) count from ``now_ms``, not from the arrival that armed them: a member
can act on an answer only once it has it (:meth:`GroupContext.schedule`). Time a request spent
waiting to be read therefore delays the detection of a dead member and never expires a live
one. A caller whose answers are readable only later (the Spark job: ``now_ms`` is when it
planned the batch, and the answers are readable once the batch is written) tags the step
(``answer_tag``) and tells the group's next step when they were delivered (``delivered_ms``):
the timers then count from the delivery (:func:`deliver_answers`).

What is decided here and not per API: the checks Kafka makes before a group is touched (group id,
session-timeout bounds) and which function serves which API or timer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.config import CoordinatorConfig
from coordinator.context import GroupContext
from coordinator.errors import Error
from coordinator.group import membership
from coordinator.group.model import (
    HEARTBEAT,
    INITIAL_JOIN,
    JOIN,
    OFFSET_EXPIRY,
    SYNC,
    ClassicGroup,
)
from coordinator.group.timers import Undelivered
from coordinator.ids import IdSource
from coordinator.log.partitioning import partition_for
from coordinator.log.records import Group
from coordinator.modern import apis as modern_apis
from coordinator.modern import classic as classic_members
from coordinator.modern import heartbeat as modern
from coordinator.modern.model import ConsumerGroup
from coordinator.offsets import manager as offsets
from coordinator.requests import (
    BadRequest,
    Request,
    bad_request_response,
    error_response,
    parse,
    plain_heartbeat_fields,
    response,
)
from coordinator.topics import EMPTY_IMAGE, TopicImage

#: APIs served per group (ListGroups and FindCoordinator are answered above the groups).
GROUP_APIS: dict[str, Callable[[GroupContext, Request], None]] = {
    "join_group": membership.join_group,
    "sync_group": membership.sync_group,
    "heartbeat": membership.heartbeat,
    "leave_group": membership.leave_group,
    "describe_groups": membership.describe_group,
    "delete_groups": membership.delete_group,
    "offset_commit": offsets.offset_commit,
    "offset_fetch": offsets.offset_fetch,
    "offset_delete": offsets.offset_delete,
    "consumer_group_heartbeat": modern.heartbeat,
    "consumer_group_describe": modern.describe,
}

#: How a consumer group's id answers the classic APIs (:mod:`coordinator.modern.apis`).
ON_CONSUMER_GROUP: dict[str, Callable[[GroupContext, Request], None]] = {
    **GROUP_APIS,
    "join_group": modern_apis.join_group,
    "sync_group": classic_members.sync_group,
    "heartbeat": classic_members.heartbeat,
    "leave_group": classic_members.leave_group,
    "describe_groups": modern_apis.describe_group,
    "delete_groups": modern_apis.delete_group,
}

#: APIs whose group id must be non-empty (the others accept "" "for backwards compatibility").
NON_EMPTY_GROUP_ID = frozenset(
    {"join_group", "sync_group", "heartbeat", "leave_group", "offset_delete"}
)


def precheck(request: Request, config: CoordinatorConfig) -> Error | None:
    """Kafka's checks before the group is looked up (section 5, 4.x order)."""
    if request.group_id == "" and request.api in NON_EMPTY_GROUP_ID:
        return Error.INVALID_GROUP_ID
    if request.api == "join_group":
        timeout = request.body["session_timeout_ms"]
        if not (
            config.group_min_session_timeout_ms <= timeout <= config.group_max_session_timeout_ms
        ):
            return Error.INVALID_SESSION_TIMEOUT
    return None


def precheck_message(error: Error, request: Request, config: CoordinatorConfig) -> str:
    if error is Error.INVALID_GROUP_ID:
        return f"{request.api} needs a non-empty group_id"
    return (
        f"session_timeout_ms {request.body['session_timeout_ms']} is outside "
        f"[{config.group_min_session_timeout_ms}, {config.group_max_session_timeout_ms}]"
    )


def serve(ctx: GroupContext, request: Request) -> None:
    """Serve one parsed, prechecked request on the context's group, as its type answers it."""
    apis = ON_CONSUMER_GROUP if isinstance(ctx.group, ConsumerGroup) else GROUP_APIS
    apis[request.api](ctx, request)


def fire_timer(ctx: GroupContext, key: str) -> None:
    """Run the group's timer ``key`` (it must be due) at the context's clock."""
    group = ctx.group
    assert group is not None
    timer = group.pop_timer(key)
    kind = timer.kind
    if kind == OFFSET_EXPIRY:
        offsets.expire_offsets(ctx, group)
        if ctx.group is not None:
            ctx.ensure_expiry_timer(ctx.group)
    elif kind == modern.CONSUMER_SESSION:
        modern.expire_session(ctx, timer.payload)
    elif kind == modern.CONSUMER_REBALANCE:
        modern.expire_rebalance(ctx, timer.payload)
    elif kind in (modern.CONSUMER_JOIN, modern.CONSUMER_SYNC):
        modern.expire_session(ctx, timer.payload)  # a classic member late to rejoin or sync
    elif isinstance(group, ConsumerGroup):
        return  # a classic timer left over from the classic group this one replaced
    elif kind == HEARTBEAT:
        membership.expire_member_heartbeat(ctx, group, timer.payload)
    elif kind == JOIN:
        membership.complete_join(ctx, group)
    elif kind == INITIAL_JOIN:
        delay, remaining = timer.payload
        membership.try_complete_initial_rebalance_else_schedule(ctx, group, delay, remaining)
    elif kind == SYNC:
        membership.expire_pending_sync(ctx, group, timer.payload)
    else:  # pragma: no cover - the kinds above are all there are
        raise RuntimeError(f"unknown timer kind {kind!r}")


def fire_due_timers(ctx: GroupContext) -> int:
    """Fire every timer due at the context's clock, earliest first (8.6); how many fired."""
    fired = 0
    while ctx.group is not None:
        head = ctx.group.next_timer()
        if head is None or head[0] > ctx.now_ms:
            break
        fire_timer(ctx, head[2])
        fired += 1
    return fired


@dataclass(slots=True)
class StepResult:
    group: Group | None
    responses: list[dict[str, Any]]
    records: list[dict[str, Any]]
    #: When the group next needs a step with no request (its earliest timer), or None.
    next_deadline_ms: int | None
    #: Engine bugs caught so that one request cannot stop a stream (must stay empty).
    internal_errors: list[str]
    #: The step changed nothing of the classic group it was given but its timers, timer heap,
    #: timer sequence and clock (``group`` is that very object): it fired no timer and every
    #: request was a heartbeat, which whatever its answer at most re-arms its member's session.
    #: So what a caller derived from the rest of the group (its summary, the start of its
    #: snapshot) still holds.
    timers_only: bool = False


def step(
    group: Group | None,
    group_id: str,
    requests: Iterable[Any],
    now_ms: int,
    config: CoordinatorConfig,
    ids: IdSource,
    arrival_ms: Sequence[int | None] | None = None,
    topics: TopicImage = EMPTY_IMAGE,
    *,
    delivered_ms: int | None = None,
    answer_tag: int | None = None,
) -> StepResult:
    """Run one group id up to ``now_ms``: its due timers and each request in order.

    Requests are raw dicts; the ones that do not parse, or name another group id, are answered
    with an error and change nothing. Records come back without their log ``offset`` (the
    caller, who sees every group of an offsets partition, numbers them).

    ``arrival_ms``, when given, holds each request's arrival time (None: it arrived at
    ``now_ms``). The step starts at the first request's time and fires the timers due by then;
    each later request that moves the clock on fires the timers due by its time first; after
    the last request the clock moves to ``now_ms`` and fires every timer due by then. A time is
    clamped to ``[clock, now_ms]``, where the clock is where the group's previous step left it
    (``clock_ms``), so time never goes backwards for a group. Timers the step arms count from
    ``now_ms``, when its responses leave.

    Delivery (``answer_tag`` and ``delivered_ms``): a caller whose responses become readable
    only some time after ``now_ms`` (the Spark job: when the batch's writes commit) passes an
    ``answer_tag`` naming the step (its batch's timestamp). The member-facing timers the step
    arms (sessions, rebalance, join and sync, the initial delay) are then recorded as
    undelivered (``group.undelivered``): they count from ``now_ms`` for now, the earliest their
    answers could have been read, and the next step, given ``delivered_ms`` (when the previous
    step's answers became readable; the caller looks it up by the tag), first moves them on by
    ``delivered_ms - now_ms`` of that step, so that they count from the delivery, as Kafka's
    count from the response it sends (:func:`deliver_answers`). Timers already undelivered
    under the same tag (a load earlier in the same batch) stay so; with no ``delivered_ms``
    they stay counted from when their answers left. Without a tag (the facade) nothing is
    recorded and the step behaves as before.

    Requests at one instant are served together, as one batch: a timer that one of them arms
    with no delay fires after them all (at the end of the step, or when the clock next moves),
    as a timer's expiry is queued behind the requests already waiting in Kafka 4.x's
    coordinator runtime. The facade, called once per request, fires it before the next
    request instead; at distinct instants the two agree exactly.
    """
    requests = list(requests)
    if arrival_ms is not None and len(arrival_ms) != len(requests):
        raise ValueError(f"{len(arrival_ms)} arrival times for {len(requests)} requests")
    armed_after = 0 if group is None else group.timer_seq
    if group is not None and group.undelivered is not None:
        if answer_tag is not None and group.undelivered.tag == answer_tag:
            armed_after = group.undelivered.after_seq  # still undelivered, with this step's
        else:
            deliver_answers(group, delivered_ms)
    counter = [0 if group is None else group.timer_seq]

    def next_seq() -> int:
        counter[0] += 1
        return counter[0]

    def arrived(index: int) -> int:
        arrival = None if arrival_ms is None else arrival_ms[index]
        return now_ms if arrival is None else min(arrival, now_ms)

    responses: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    internal_errors: list[str] = []
    partition = partition_for(group_id, config.offsets_topic_num_partitions)
    start = arrived(0) if requests else now_ms
    if group is not None and group.clock_ms is not None:
        start = max(group.clock_ms, start)
    ctx = GroupContext(
        config, start, ids, next_seq, group_id, group, partition, responses, records, now_ms, topics
    )

    fired = 0

    def fire() -> None:
        nonlocal fired
        try:
            fired += fire_due_timers(ctx)
        except Exception as exc:  # an engine bug must not take the stream down with it
            fired += 1  # maybe part of one: whatever it did stands
            internal_errors.append(f"timers of {group_id!r}: {exc!r}")

    fire()
    for index, raw in enumerate(requests):
        at = arrived(index)
        if at > ctx.now_ms:
            ctx.now_ms = at
            fire()
        fields = plain_heartbeat_fields(raw)
        if (
            fields is not None
            and fields[1] == group_id != ""
            and not isinstance(ctx.group, ConsumerGroup)
        ):
            serve_plain_heartbeat(ctx, raw, fields, responses, internal_errors)
        else:
            _serve_raw(ctx, raw, config, responses, internal_errors)
    ctx.now_ms = max(ctx.now_ms, now_ms)
    fire()  # also what the requests armed to fire at once (a delay of 0)
    if ctx.group is not None:
        ctx.group.timer_seq = counter[0]
        ctx.group.clock_ms = ctx.now_ms
        ctx.group.undelivered = (
            None
            if answer_tag is None or counter[0] == armed_after
            else _undelivered(ctx.group, ctx.now_ms, armed_after, answer_tag)
        )
        head = ctx.group.next_timer()
        next_deadline = None if head is None else head[0]
    else:
        next_deadline = None
    timers_only = (
        isinstance(group, ClassicGroup)
        and ctx.group is group
        and not fired
        and not internal_errors
        and not records
        and all(type(raw) is dict and raw.get("api") == "heartbeat" for raw in requests)
    )
    return StepResult(ctx.group, responses, records, next_deadline, internal_errors, timers_only)


def deliver_answers(group: Group, delivered_ms: int | None) -> None:
    """Count the member-facing timers the group's last step armed (``group.undelivered``) from
    ``delivered_ms``, when that step's answers became readable, instead of from when they left
    (its clock): each moves on by the difference (never back). With ``delivered_ms`` None (not
    known) they stay as they are. Either way the group has no undelivered timers afterwards.
    The offsets-retention sweep is not a member's timer and never moves."""
    pending = group.undelivered
    if pending is None:
        return
    group.undelivered = None
    if delivered_ms is not None and delivered_ms > pending.answered_ms:
        group.shift_timers(pending.after_seq, delivered_ms - pending.answered_ms, OFFSET_EXPIRY)


def _undelivered(group: Group, answered_ms: int, after_seq: int, tag: int) -> Undelivered | None:
    """What of the group's timers a step that answered at ``answered_ms`` armed (those after
    ``after_seq``, but the offsets sweep), None when it armed none that are still live."""
    for timer in group.timers.values():
        if timer.seq > after_seq and timer.kind != OFFSET_EXPIRY:
            return Undelivered(answered_ms, after_seq, tag)
    return None


def serve_plain_heartbeat(
    ctx: GroupContext,
    raw: dict[str, Any],
    fields: tuple[str | int, str, str, int],
    responses: list[dict[str, Any]],
    internal_errors: list[str],
) -> None:
    """Serve a plain heartbeat (:func:`coordinator.requests.plain_heartbeat_fields`) for the
    context's own group, classic or none: what :func:`_serve_raw` does with it (it passes every
    check there and :func:`coordinator.group.membership.heartbeat` serves it), without building
    its Request. The facade serves its plain heartbeats here too
    (:meth:`coordinator.engine.GroupCoordinator.handle`)."""
    request_id, group_id, member_id, generation = fields
    try:
        error = membership.heartbeat_member(ctx, member_id, None, generation)
    except Exception as exc:  # as in _serve_raw
        internal_errors.append(f"heartbeat {request_id!r}: {exc!r}")
        request = parse(raw)
        responses.append(
            error_response(request, Error.UNKNOWN_SERVER_ERROR, f"internal error: {exc}")
        )
        return
    responses.append(response("heartbeat", request_id, group_id, error))


def _serve_raw(
    ctx: GroupContext,
    raw: Any,
    config: CoordinatorConfig,
    responses: list[dict[str, Any]],
    internal_errors: list[str],
) -> None:
    """Parse, check and serve one raw request on the context's group at its clock."""
    group_id = ctx.group_id
    try:
        request = parse(raw)
    except BadRequest as problem:
        responses.append(bad_request_response(raw, problem))
        return
    # The commonest request, a heartbeat for this group: it passes every check below.
    if not (request.api == "heartbeat" and request.group_id == group_id != ""):
        if request.group_id != group_id:
            responses.append(
                error_response(
                    request,
                    Error.INVALID_REQUEST,
                    f"request for group {request.group_id!r} reached group {group_id!r}",
                )
            )
            return
        if request.api not in GROUP_APIS:
            responses.append(
                error_response(
                    request,
                    Error.INVALID_REQUEST,
                    f"{request.api} is answered above the groups, not by a group's step",
                )
            )
            return
        error = precheck(request, config)
        if error is not None:
            responses.append(
                error_response(request, error, precheck_message(error, request, config))
            )
            return
    try:
        serve(ctx, request)
    except Exception as exc:  # as in GroupCoordinator.handle
        internal_errors.append(f"{request.api} {request.request_id!r}: {exc!r}")
        responses.append(
            error_response(request, Error.UNKNOWN_SERVER_ERROR, f"internal error: {exc}")
        )
