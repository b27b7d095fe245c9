"""Apache Kafka's classic consumer-group coordinator as a pure, deterministic engine.

The public surface (contract, section 2)::

    from coordinator import GroupCoordinator, CoordinatorConfig

    c = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    responses = c.handle(request, now_ms)
    responses = c.advance(now_ms)
    records = c.drain_records()
    c2 = GroupCoordinator.from_records(records, config, now_ms)
"""

from coordinator.config import CoordinatorConfig
from coordinator.engine import CoordinatorNode, GroupCoordinator
from coordinator.errors import Error
from coordinator.group.states import GroupState
from coordinator.ids import KeyedIds, SequentialIds, random_ids
from coordinator.step import StepResult, step

__all__ = [
    "CoordinatorConfig",
    "CoordinatorNode",
    "Error",
    "GroupCoordinator",
    "GroupState",
    "KeyedIds",
    "SequentialIds",
    "StepResult",
    "random_ids",
    "step",
]
__version__ = "0.1.0"
