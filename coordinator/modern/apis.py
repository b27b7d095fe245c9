"""Where a classic group and a consumer group meet: the classic APIs on a consumer group's id.

Kafka 4.0 answers them as follows, and so does this coordinator:

- DescribeGroups: a consumer group is not a classic group; v0-v5 answer it as an unknown
  group, ``Dead`` with no error (``describeGroups`` catches ``GroupIdNotFoundException``);
- DeleteGroups: only an Empty consumer group goes (NON_EMPTY_GROUP otherwise), with its offsets
  and every record of the group tombstoned (``createGroupTombstoneRecords``);
- JoinGroup: to an Empty consumer group, the group is deleted (its records tombstoned, its
  offsets kept) and the join goes to a classic group as if there had been none
  (``maybeDeleteEmptyConsumerGroup``); to one with members, Kafka lets a classic consumer join
  it (online migration and mixed groups), this coordinator does not: it answers
  INCONSISTENT_GROUP_PROTOCOL, Kafka's answer to a member whose protocols the group cannot take;
- SyncGroup, Heartbeat, LeaveGroup: no member of the group uses the classic protocol, so
  UNKNOWN_MEMBER_ID (Kafka's answer to an unknown classic member of a consumer group).

OffsetCommit, OffsetFetch and OffsetDelete serve both kinds (:mod:`coordinator.offsets.manager`).
"""

from __future__ import annotations

from typing import Any

from coordinator.context import GroupContext
from coordinator.errors import Error
from coordinator.group import membership
from coordinator.log import records as log
from coordinator.modern.heartbeat import record_builder, remove_member_records
from coordinator.modern.model import ConsumerGroup
from coordinator.requests import Request, error_response, failed_join_fields


def describe_group(ctx: GroupContext, request: Request) -> None:
    ctx.respond(
        "describe_groups",
        request.request_id,
        group_state="Dead",
        protocol_type="",
        protocol_data="",
        members=[],
    )


def delete_group(ctx: GroupContext, request: Request) -> None:
    group = ctx.consumer
    assert group is not None
    if not group.is_empty():
        ctx.respond("delete_groups", request.request_id, Error.NON_EMPTY_GROUP)
        return
    for topic, partition in sorted(group.offsets):
        ctx.append(log.offset_tombstone(group.group_id, topic, partition, ctx.now_ms))
    for record in group_tombstones(ctx, group):
        ctx.append(record)
    ctx.respond("delete_groups", request.request_id)


def group_tombstones(ctx: GroupContext, group: ConsumerGroup) -> list[dict[str, Any]]:
    """Kafka's ``ConsumerGroup.createGroupTombstoneRecords`` (the regular expressions too)."""
    build = record_builder(ctx)
    records: list[dict[str, Any]] = []
    for member_id in group.members:
        records.extend(remove_member_records(build, member_id))
    for regex in sorted(group.resolved_regexes):
        records.append(build.regular_expression_tombstone(regex))
    records.append(build.target_assignment_epoch_tombstone())
    records.append(build.subscription_metadata_tombstone())
    records.append(build.epoch_tombstone())
    return records


def join_group(ctx: GroupContext, request: Request) -> None:
    group = ctx.consumer
    assert group is not None
    if group.is_empty():
        for record in group_tombstones(ctx, group):
            ctx.append(record)
        membership.join_group(ctx, request)  # on the offsets' simple group, or on nothing
        return
    member_id = request.body["member_id"]
    ctx.responses.append(
        error_response(
            request,
            Error.INCONSISTENT_GROUP_PROTOCOL,
            f"Group {ctx.group_id} is a consumer group; this coordinator does not let "
            "classic-protocol members join it",
        )
        | failed_join_fields(member_id)
    )


def unknown_classic_member(ctx: GroupContext, request: Request) -> None:
    """SyncGroup, Heartbeat and LeaveGroup from a classic member a consumer group lacks."""
    message = f"no member of consumer group {ctx.group_id} uses the classic protocol"
    if request.api == "leave_group":
        members = [
            {
                "member_id": m["member_id"],
                "group_instance_id": m["group_instance_id"],
                "error_code": int(Error.UNKNOWN_MEMBER_ID),
                "error": Error.UNKNOWN_MEMBER_ID.name,
            }
            for m in request.body["members"]
        ]
        error = Error.UNKNOWN_MEMBER_ID if request.api_version < 3 else Error.NONE
        ctx.respond("leave_group", request.request_id, error, message, members=members)
        return
    ctx.responses.append(error_response(request, Error.UNKNOWN_MEMBER_ID, message))
