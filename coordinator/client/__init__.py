"""The member side of Kafka's classic group protocol: ``GroupMember``, the assignors, the
transports, and a simulation harness (deterministic, faster than real time)."""

from coordinator.client.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    EAGER,
    Assignor,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    TopicPartition,
    assignor,
)
from coordinator.client.member import (
    CommitFailedError,
    ConsumerRebalanceListener,
    GroupError,
    GroupMember,
    MemberConfig,
    MemberState,
    RebalanceInProgressError,
    RetriableCommitError,
)
from coordinator.client.transport import (
    Clock,
    InProcessCluster,
    InProcessTransport,
    SimClock,
    SystemClock,
    Transport,
)

__all__ = [
    "ASSIGNORS",
    "COOPERATIVE",
    "EAGER",
    "Assignor",
    "Clock",
    "CommitFailedError",
    "ConsumerRebalanceListener",
    "CooperativeStickyAssignor",
    "GroupError",
    "GroupMember",
    "InProcessCluster",
    "InProcessTransport",
    "MemberConfig",
    "MemberState",
    "MemberSubscription",
    "RangeAssignor",
    "RebalanceInProgressError",
    "RetriableCommitError",
    "RoundRobinAssignor",
    "SimClock",
    "StickyAssignor",
    "SystemClock",
    "TopicPartition",
    "Transport",
    "assignor",
]
