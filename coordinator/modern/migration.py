"""Online migration between classic and consumer groups (``group.consumer.migration.policy``).

Kafka 4.0's ``GroupMetadataManager.validateOnlineUpgrade`` / ``convertToConsumerGroup`` and
``validateOnlineDowngradeWithFencedMember`` / ``convertToClassicGroup``:

- **upgrade**: a ConsumerGroupHeartbeat joining a classic group with members (protocol type
  ``consumer``, at most ``group.consumer.max.size`` members, policy ``upgrade`` or
  ``bidirectional``) turns it into a consumer group: the classic group is tombstoned and each of
  its members becomes a classic-protocol member of the consumer group at the group's generation,
  owning its last assignment, which is also its target (records: each member's
  ConsumerGroupMemberMetadata with its ClassicMemberMetadata, the group epoch, the target
  assignment and its epoch, each current assignment). The heartbeat then goes on against that
  group (its new member bumps the epoch, so the classic members are asked to rejoin). Parked
  JoinGroups and SyncGroups of the classic group are answered REBALANCE_IN_PROGRESS. Nothing of
  it is written when the heartbeat fails;
- **downgrade**: when the last consumer-protocol member of a group whose other members all use
  the classic protocol leaves or is fenced (policy ``downgrade`` or ``bidirectional``, at most
  ``group.max.size`` members left), the consumer group is tombstoned and a classic group at the
  group epoch takes its place (a GroupMetadata record with each member's target assignment, in
  the consumer protocol at its subscription's version), then rebalances.

A classic group built by a downgrade is set in place directly (as Kafka does: the rebalance it
starts needs the group object), and equals what its GroupMetadata record loads, but for the
rebalance under way, which no record carries.
"""

from __future__ import annotations

from typing import Any

from coordinator.consumer_protocol import decode_assignment, decode_subscription
from coordinator.context import GroupContext
from coordinator.errors import Error
from coordinator.group import membership
from coordinator.group.model import ClassicGroup, Member
from coordinator.group.states import GroupState
from coordinator.log import modern_records
from coordinator.log import records as log
from coordinator.modern import classic as classic_members
from coordinator.modern.apis import group_tombstones
from coordinator.modern.heartbeat import (
    CONSUMER_SESSION,
    ConsumerGroupError,
    record_builder,
    session_key,
)
from coordinator.modern.model import (
    EMPTY_ASSIGNMENT,
    PROTOCOL_TYPE,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from coordinator.requests import failed_join_fields
from coordinator.serde import DecodeError


def can_upgrade(ctx: GroupContext, group: ClassicGroup) -> bool:
    """Kafka's ``validateOnlineUpgrade``."""
    return (
        ctx.config.upgrade_enabled
        and group.uses_consumer_protocol()
        and len(group.members) <= ctx.config.group_consumer_max_size
    )


def convert_to_consumer_group(
    ctx: GroupContext,
    group: ClassicGroup,
    records: list[dict[str, Any]],
    after: list[Any],
) -> ConsumerGroup:
    """Kafka's ``convertToConsumerGroup``: the records that replace ``group`` by a consumer
    group go into ``records``, the members' session timers into ``after``; returns that
    consumer group, as replaying the records builds it."""
    malformed = ConsumerGroupError(
        Error.GROUP_ID_NOT_FOUND,
        f"Cannot upgrade the classic group {group.group_id} to consumer group because the "
        "embedded consumer protocol is malformed.",
    )
    members = []
    try:
        for classic in sorted(group.members.values(), key=lambda m: m.member_id):
            subscription = decode_subscription(classic.metadata(group.protocol_name))
            assigned: dict[str, frozenset[int]] = {}
            for tp in decode_assignment(classic.assignment).assigned_partitions:
                topic = ctx.topics.by_name(tp.topic)
                if topic is not None:
                    assigned[topic.topic_id] = frozenset(tp.partitions)
            members.append(
                ConsumerGroupMember(
                    classic.member_id,
                    member_epoch=group.generation_id,
                    previous_member_epoch=group.generation_id,
                    state=MemberState.STABLE,
                    instance_id=classic.group_instance_id,
                    rack_id=subscription.rack_id,
                    rebalance_timeout_ms=classic.rebalance_timeout_ms,
                    client_id=classic.client_id,
                    client_host=classic.client_host,
                    subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                    assigned_partitions={t: p for t, p in assigned.items() if p},
                    classic=ClassicMemberMetadata(
                        classic.session_timeout_ms, tuple(classic.protocols)
                    ),
                )
            )
    except (DecodeError, RuntimeError):  # RuntimeError: no such protocol in the member
        raise malformed from None

    # The classic group's rebalance is over: its parked requests are told another began.
    for classic in group.members.values():
        membership.answer_join(
            ctx,
            group,
            classic,
            Error.REBALANCE_IN_PROGRESS,
            **failed_join_fields(classic.member_id),
        )
        membership.answer_sync(ctx, classic, Error.REBALANCE_IN_PROGRESS, None, None, b"")

    build = record_builder(ctx)
    created = [build.member_subscription(m) for m in members]
    created.append(build.epoch(group.generation_id))
    created += [build.target_assignment(m.member_id, m.assigned_partitions) for m in members]
    created.append(build.target_assignment_epoch(group.generation_id))
    created += [build.current_assignment(m) for m in members]
    records.append(log.group_tombstone(group.group_id, ctx.now_ms))
    records.extend(created)

    consumer: Any = None
    for record in created:
        consumer = modern_records.apply(consumer, record)
    assert isinstance(consumer, ConsumerGroup)
    consumer.offsets = dict(group.offsets)
    for member in members:
        assert member.classic is not None
        after.append(
            lambda m=member.member_id, ms=member.classic.session_timeout_ms: ctx.schedule(
                session_key(m), ms, CONSUMER_SESSION, m
            )
        )
    return consumer


def can_downgrade(ctx: GroupContext, group: ConsumerGroup, leaving_member_id: str) -> bool:
    """Kafka's ``validateOnlineDowngradeWithFencedMember``."""
    return (
        group.all_members_use_classic_protocol_except(leaving_member_id)
        and len(group.members) > 1
        and ctx.config.downgrade_enabled
        and len(group.members) - 1 <= ctx.config.group_max_size
    )


def can_downgrade_replacing(ctx: GroupContext, group: ConsumerGroup, replaced_id: str) -> bool:
    """Kafka's ``validateOnlineDowngradeWithReplacedMemberId``: a classic static member takes
    the place of the last consumer-protocol one."""
    return (
        group.all_members_use_classic_protocol_except(replaced_id)
        and ctx.config.downgrade_enabled
        and len(group.members) <= ctx.config.group_max_size
    )


def convert_to_classic_group(
    ctx: GroupContext,
    group: ConsumerGroup,
    leaving_member_id: str,
    records: list[dict[str, Any]],
    joining: ConsumerGroupMember | None = None,
) -> list[Any]:
    """Kafka's ``convertToClassicGroup``: the consumer group's tombstones and the classic
    group's GroupMetadata record go into ``records``; returns the actions that, once they are
    applied, put the classic group in place and, for a member that leaves (no ``joining``
    static member in its place, which takes its assignment), start its rebalance."""
    classic = ClassicGroup(
        group_id=group.group_id,
        current_state_timestamp_ms=ctx.now_ms,
        state=GroupState.STABLE,
        generation_id=group.group_epoch,
        protocol_type=PROTOCOL_TYPE,
    )
    staying = [m for m in group.members.values() if m.member_id != leaving_member_id]
    for member in staying + ([joining] if joining is not None else []):
        assert member.classic is not None
        classic.add(
            Member(
                member.member_id,
                member.instance_id,
                member.client_id,
                member.client_host,
                member.rebalance_timeout_ms,
                member.classic.session_timeout_ms,
                PROTOCOL_TYPE,
                list(member.classic.supported_protocols),
            )
        )
    classic.protocol_name = classic.select_protocol()
    classic.subscribed_topics = classic.compute_subscribed_topics()
    assignments: dict[str, bytes] = {}
    for member_id, joined in classic.members.items():
        if joining is not None and member_id == joining.member_id:
            member_id = leaving_member_id  # the joining member takes the leaving one's target
        try:
            joined.assignment = classic_members.assignment_bytes(
                ctx,
                group.target_assignment.get(member_id, EMPTY_ASSIGNMENT),
                tuple(joined.protocols),
                classic.protocol_name,
            )
        except ValueError as exc:
            raise ConsumerGroupError(
                Error.GROUP_ID_NOT_FOUND,
                f"Cannot downgrade the classic group {group.group_id}: {exc}.",
            ) from None
        assignments[joined.member_id] = joined.assignment
    replaced = None if joining is None else (leaving_member_id, joining.member_id)
    records.extend(group_tombstones(ctx, group, replaced))
    records.append(log.group_metadata_record(classic, assignments, ctx.now_ms))

    def put_in_place() -> None:
        # The tombstones left the consumer group's offsets (if any) in a simple group.
        survivor = ctx.group
        if survivor is not None:
            classic.offsets = survivor.offsets
        ctx.group = classic
        ctx.ensure_expiry_timer(classic)
        for joined in classic.members.values():
            membership.reschedule_heartbeat(ctx, joined)
        if joining is None:
            membership.prepare_rebalance(
                ctx, classic, f"Downgrade group {classic.group_id} from consumer to classic."
            )

    return [put_in_place]
