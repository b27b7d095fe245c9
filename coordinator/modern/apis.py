"""Where a classic group and a consumer group meet: the classic APIs on a consumer group's id.

Kafka 4.0 answers them as follows, and so does this coordinator:

- DescribeGroups: a consumer group is not a classic group; v0-v5 answer it as an unknown
  group, ``Dead`` with no error (``describeGroups`` catches ``GroupIdNotFoundException``);
- DeleteGroups: only an Empty consumer group goes (NON_EMPTY_GROUP otherwise), with its offsets
  and every record of the group tombstoned (``createGroupTombstoneRecords``);
- JoinGroup: to an Empty consumer group, the group is deleted (its records tombstoned, its
  offsets kept) and the join goes to a classic group as if there had been none
  (``maybeDeleteEmptyConsumerGroup``); to one with members, the classic consumer joins it as a
  member of the consumer group (:mod:`coordinator.modern.classic`), as do its SyncGroup,
  Heartbeat and LeaveGroup.

OffsetCommit, OffsetFetch and OffsetDelete serve both kinds (:mod:`coordinator.offsets.manager`).
"""

from __future__ import annotations

from typing import Any

from coordinator.context import GroupContext
from coordinator.errors import Error
from coordinator.group import membership
from coordinator.log import records as log
from coordinator.modern import classic
from coordinator.modern.heartbeat import record_builder
from coordinator.modern.model import ConsumerGroup
from coordinator.requests import Request


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


def group_tombstones(
    ctx: GroupContext, group: ConsumerGroup, replaced: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    """Kafka's ``ConsumerGroup.createGroupTombstoneRecords``, in its order (every current
    assignment, every target, the target epoch, every subscription, then the group's own
    records; the regular expressions before those); with ``replaced`` (leaving id, joining
    id), ``createGroupTombstoneRecordsWithReplacedMember``: the records before these already
    put the joining member in the leaving one's place."""
    build = record_builder(ctx)
    ids = [
        replaced[1] if replaced is not None and member_id == replaced[0] else member_id
        for member_id in group.members
    ]
    records = [build.current_assignment_tombstone(m) for m in ids]
    records += [build.target_assignment_tombstone(m) for m in ids]
    records.append(build.target_assignment_epoch_tombstone())
    records += [build.member_subscription_tombstone(m) for m in ids]
    records += [build.regular_expression_tombstone(r) for r in sorted(group.resolved_regexes)]
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
    classic.join_group(ctx, request)
