"""The five classic group states and the only transitions Kafka allows, as one table.

Source: 3.x ``GroupMetadata.validPreviousStates`` and 4.x ``ClassicGroupState`` (identical). An
illegal transition is a programming error in the engine, as it is in Kafka
(``IllegalStateException``): it raises :class:`IllegalStateTransition`, never reaches a client.
"""

from __future__ import annotations

from enum import StrEnum


class GroupState(StrEnum):
    """Kafka's current state names (``CompletingRebalance`` was ``AwaitingSync`` before 1.1)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


E, PR, CR, ST, D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

#: target state -> the states it may be entered from.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    E: frozenset({PR}),
    PR: frozenset({ST, CR, E}),
    CR: frozenset({PR}),
    ST: frozenset({CR}),
    D: frozenset({ST, PR, CR, E, D}),
}

#: every legal (from, to) pair, for diagrams and for invariant checks in tests.
TRANSITIONS: frozenset[tuple[GroupState, GroupState]] = frozenset(
    (source, target) for target, sources in VALID_PREVIOUS_STATES.items() for source in sources
)


class IllegalStateTransition(RuntimeError):
    """The engine tried a transition Kafka forbids: a bug, carrying the states involved."""

    def __init__(self, group_id: str, source: GroupState, target: GroupState) -> None:
        super().__init__(
            f"group {group_id!r} should be in one of {sorted(s.value for s in VALID_PREVIOUS_STATES[target])} "
            f"before moving to {target.value}, but is in {source.value}"
        )
        self.group_id = group_id
        self.source = source
        self.target = target


def can_rebalance(state: GroupState) -> bool:
    """Kafka's ``canRebalance``: the state may move to PreparingRebalance."""
    return state in VALID_PREVIOUS_STATES[PR]


def parse_state_filter(name: str) -> GroupState | None:
    """A ListGroups ``states_filter`` entry: case-insensitive and trimmed (4.x); None if unknown."""
    wanted = name.strip().lower()
    for state in GroupState:
        if state.value.lower() == wanted:
            return state
    return None
