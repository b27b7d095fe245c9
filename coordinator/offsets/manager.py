"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and the retention sweep (KIP-211).

Mirrors Kafka 4.x ``OffsetMetadataManager`` and ``ClassicGroup.validateOffsetCommit`` /
``offsetExpirationCondition``. Offsets change only through log records (commits and tombstones)
applied by :meth:`GroupContext.append`, as in Kafka. Transactional offsets (TxnOffsetCommit) are
outside the contract, so nothing here is ever pending: ``require_stable`` never finds an
unstable offset.
"""

from __future__ import annotations

from typing import Any

from coordinator.context import GroupContext
from coordinator.errors import Error
from coordinator.group.membership import reschedule_heartbeat, validate_member
from coordinator.group.model import ClassicGroup, OffsetAndMetadata
from coordinator.group.states import GroupState
from coordinator.log import records as log
from coordinator.log.records import Group
from coordinator.modern.apis import group_tombstones
from coordinator.modern.model import ConsumerGroup
from coordinator.requests import Request, partition_results

EMPTY = GroupState.EMPTY
DEAD = GroupState.DEAD


def utf16_length(text: str) -> int:
    """Java's ``String.length()``: UTF-16 code units (what ``offset.metadata.max.bytes`` counts)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


# --- OffsetCommit (6.6) -----------------------------------------------------------------------


#: Kafka 3.9 kept OffsetCommit v0 and OffsetFetch v0 offsets in ZooKeeper, apart from the
#: coordinator's; with a Raft-based metadata quorum (no ZooKeeper) it answers them
#: ``UNSUPPORTED_VERSION`` for every partition (``KafkaApis.commitOffsetsToZookeeper``,
#: ``handleOffsetFetchRequestFromZookeeper``), and 4.0 removed the versions (KIP-896).
ZOOKEEPER_VERSION = 0
ZOOKEEPER_MESSAGE = "version 0 offsets lived in ZooKeeper; with no ZooKeeper they are unsupported"


def offset_commit(ctx: GroupContext, request: Request) -> None:
    body = request.body
    offsets: list[dict[str, Any]] = body["offsets"]
    if request.api_version == ZOOKEEPER_VERSION:
        error = Error.UNSUPPORTED_VERSION
        ctx.respond(
            "offset_commit",
            request.request_id,
            error,
            ZOOKEEPER_MESSAGE,
            partitions=partition_results(offsets, error),
        )
        return
    error = validate_offset_commit(ctx, request)
    if error is not Error.NONE:
        ctx.respond(
            "offset_commit", request.request_id, partitions=partition_results(offsets, error)
        )
        return
    group = ctx.group
    assert group is not None
    if isinstance(group, ClassicGroup) and (
        group.state is GroupState.STABLE or group.state is GroupState.PREPARING_REBALANCE
    ):
        # A commit keeps a classic member's session alive.
        reschedule_heartbeat(ctx, group.members[body["member_id"]])

    now = ctx.now_ms
    retention = body["retention_time_ms"]
    # Java's long arithmetic, as Kafka computes it: a retention near Long.MAX_VALUE wraps to a
    # negative expiry (the offset goes at the next sweep) instead of overflowing the record.
    expire = None if retention == -1 else _java_long(now + retention)
    limit = ctx.config.offset_metadata_max_bytes
    results = []
    for partition in offsets:
        if utf16_length(partition["metadata"]) > limit:
            error = Error.OFFSET_METADATA_TOO_LARGE
        else:
            error = Error.NONE
            leader_epoch = partition["leader_epoch"]
            value = OffsetAndMetadata(
                committed_offset=partition["offset"],
                leader_epoch=None if leader_epoch == -1 else leader_epoch,
                metadata=partition["metadata"],
                # OffsetCommit v1's own timestamp, when it sends one (OffsetAndMetadata.fromRequest)
                commit_timestamp_ms=now
                if partition["commit_timestamp_ms"] == -1
                else partition["commit_timestamp_ms"],
                expire_timestamp_ms=expire,
            )
            ctx.append(
                log.offset_commit_record(
                    ctx.group_id, partition["topic"], partition["partition"], value, now
                )
            )
        results.append(
            {
                "topic": partition["topic"],
                "partition": partition["partition"],
                "error_code": int(error),
                "error": error.error_name,
            }
        )
    ctx.respond("offset_commit", request.request_id, partitions=results)


def validate_offset_commit(ctx: GroupContext, request: Request) -> Error:
    """Kafka 4.x ``validateOffsetCommit`` and ``ClassicGroup.validateOffsetCommit``."""
    body = request.body
    generation: int = body["generation_id"]
    member_id: str = body["member_id"]
    instance_id: str | None = body["group_instance_id"]
    group = ctx.group
    if group is None:
        if generation < 0:
            # A simple (manually assigned) consumer: the group exists from its first commit,
            # with no GroupMetadata record (its offsets recreate it at load).
            ctx.create_group()
            return Error.NONE
        return Error.GROUP_ID_NOT_FOUND if request.api_version >= 9 else Error.ILLEGAL_GENERATION
    if isinstance(group, ConsumerGroup):
        return validate_consumer_group_commit(group, request)
    if group.state is DEAD:
        return Error.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and group.state is EMPTY:
        return Error.NONE  # admin tools and standalone consumers: no member checks
    if generation >= 0 or member_id != "" or instance_id is not None:
        error = validate_member(group, member_id, instance_id)
        if error is not Error.NONE:
            return error
        if generation != group.generation_id:
            return Error.ILLEGAL_GENERATION
    elif group.state is not EMPTY:
        return Error.UNKNOWN_MEMBER_ID
    if group.state is GroupState.COMPLETING_REBALANCE:
        return Error.REBALANCE_IN_PROGRESS
    return Error.NONE


def validate_consumer_group_commit(group: ConsumerGroup, request: Request) -> Error:
    """Kafka 4.0's ``ConsumerGroup.validateOffsetCommit``: ``generation_id`` is the member
    epoch; -1 from an admin or a standalone consumer commits only to a group with no member."""
    body = request.body
    epoch: int = body["generation_id"]
    if epoch < 0 and not group.members:
        return Error.NONE
    member = group.members.get(body["member_id"])
    if member is None:
        return Error.UNKNOWN_MEMBER_ID
    if request.api_version < 9 and not member.uses_classic_protocol:
        # "OffsetCommit version 9 or above must be used by members using the modern group
        # protocol"
        return Error.UNSUPPORTED_VERSION
    if epoch != member.member_epoch:
        # a classic member's generation is its member epoch
        return (
            Error.ILLEGAL_GENERATION if member.uses_classic_protocol else Error.STALE_MEMBER_EPOCH
        )
    return Error.NONE


def validate_consumer_group_fetch(group: ConsumerGroup, request: Request) -> tuple[Error, str]:
    """Kafka 4.0's ``ConsumerGroup.validateOffsetFetch`` (OffsetFetch v9+)."""
    member_id: str | None = request.body["member_id"]
    epoch: int = request.body["member_epoch"]
    if member_id is None and epoch < 0:
        return Error.NONE, ""  # the admin client, or a client that does not say
    member = group.members.get(member_id or "")
    if member is None:
        return (
            Error.UNKNOWN_MEMBER_ID,
            f"Member {member_id} is not a member of group {group.group_id}.",
        )
    if epoch != member.member_epoch:
        return (
            Error.STALE_MEMBER_EPOCH,
            f"The received member epoch {epoch} does not match the expected member epoch "
            f"{member.member_epoch}.",
        )
    return Error.NONE, ""


# --- OffsetFetch (6.8) ------------------------------------------------------------------------


def offset_fetch(ctx: GroupContext, request: Request) -> None:
    wanted: list[dict[str, Any]] | None = request.body["partitions"]
    if request.api_version == ZOOKEEPER_VERSION:
        assert wanted is not None  # v0-v1 must list partitions (parse)
        error = Error.UNSUPPORTED_VERSION
        results = [
            {
                "topic": p["topic"],
                "partition": p["partition"],
                "offset": -1,
                "leader_epoch": -1,
                "metadata": "",
                "error_code": int(error),
                "error": error.error_name,
            }
            for p in wanted
        ]
        ctx.respond(
            "offset_fetch", request.request_id, error, ZOOKEEPER_MESSAGE, partitions=results
        )
        return
    group = ctx.group
    if isinstance(group, ConsumerGroup):
        error, message = validate_consumer_group_fetch(group, request)
        if error is not Error.NONE:
            ctx.respond("offset_fetch", request.request_id, error, message, partitions=[])
            return
    offsets = {} if group is None or group.state is DEAD else group.offsets
    keys = sorted(offsets) if wanted is None else [(p["topic"], p["partition"]) for p in wanted]
    results = []
    for topic, partition in keys:
        offset = offsets.get((topic, partition))
        results.append(
            {
                "topic": topic,
                "partition": partition,
                "offset": -1 if offset is None else offset.committed_offset,
                "leader_epoch": -1
                if offset is None or offset.leader_epoch is None
                else offset.leader_epoch,
                "metadata": "" if offset is None else offset.metadata,
                "error_code": 0,
                "error": None,
            }
        )
    ctx.respond("offset_fetch", request.request_id, partitions=results)


# --- OffsetDelete (6.9) -----------------------------------------------------------------------


def offset_delete(ctx: GroupContext, request: Request) -> None:
    wanted: list[dict[str, Any]] = request.body["partitions"]
    group = ctx.group
    if group is None or group.state is DEAD:
        ctx.respond("offset_delete", request.request_id, Error.GROUP_ID_NOT_FOUND, partitions=[])
        return
    if (
        isinstance(group, ClassicGroup)
        and group.state is not EMPTY
        and not group.uses_consumer_protocol()
    ):
        ctx.respond("offset_delete", request.request_id, Error.NON_EMPTY_GROUP, partitions=[])
        return
    results = []
    for partition in wanted:
        topic, index = partition["topic"], partition["partition"]
        if group.is_subscribed_to_topic(topic):
            error = Error.GROUP_SUBSCRIBED_TO_TOPIC
        else:
            error = Error.NONE
            if (topic, index) in group.offsets:
                ctx.append(log.offset_tombstone(ctx.group_id, topic, index, ctx.now_ms))
        results.append(
            {
                "topic": topic,
                "partition": index,
                "error_code": int(error),
                "error": error.error_name,
            }
        )
    ctx.respond("offset_delete", request.request_id, partitions=results)


def _java_long(value: int) -> int:
    """``value`` as Java's 64-bit two's-complement arithmetic leaves it."""
    return (value + 2**63) % 2**64 - 2**63


# --- retention (12.4) -------------------------------------------------------------------------


def expire_offsets(ctx: GroupContext, group: Group) -> None:
    """The periodic sweep: tombstone expired offsets; delete an Empty group left with none.

    Kafka 4.x ``cleanupExpiredOffsets`` then ``maybeDeleteGroup``.
    """
    deletable = _expire_group_offsets(ctx, group)
    after = ctx.group
    if not deletable or after is None:
        return
    if isinstance(after, ConsumerGroup):
        if after.is_empty():
            for record in group_tombstones(ctx, after):
                ctx.append(record)
    elif after.state is EMPTY:
        ctx.append(log.group_tombstone(ctx.group_id, ctx.now_ms))


def _expire_group_offsets(ctx: GroupContext, group: Group) -> bool:
    """Returns whether every offset of the group is gone (so an Empty group may be deleted)."""
    if not group.offsets:
        return True
    base = _expiration_base(group)
    if base is None:
        return False
    now = ctx.now_ms
    retention = ctx.config.offsets_retention_ms
    all_expired = True
    for (topic, partition), offset in sorted(group.offsets.items()):
        if group.is_subscribed_to_topic(topic):
            all_expired = False
            continue
        if offset.expire_timestamp_ms is not None:
            expired = now >= offset.expire_timestamp_ms
        else:
            expired = now - base(offset) >= retention
        if expired:
            ctx.append(log.offset_tombstone(ctx.group_id, topic, partition, now))
        else:
            all_expired = False
    return all_expired


def _expiration_base(group: Group) -> Any:
    """Kafka's ``offsetExpirationCondition``: from when an offset's retention is counted, or None
    while the group's offsets must not expire at all."""
    if isinstance(group, ConsumerGroup):
        return lambda offset: offset.commit_timestamp_ms
    if group.protocol_type is not None:
        if group.state is EMPTY:
            since_empty = group.current_state_timestamp_ms
            if since_empty is not None:
                return lambda offset: since_empty
            return lambda offset: offset.commit_timestamp_ms
        if (
            group.uses_consumer_protocol()
            and group.subscribed_topics is not None
            and group.state is GroupState.STABLE
        ):
            return lambda offset: offset.commit_timestamp_ms
        return None
    return lambda offset: offset.commit_timestamp_ms
