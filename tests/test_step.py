"""The per-group step: (state, requests, now) -> (state, responses, records, next deadline)."""

from __future__ import annotations

import copy
from typing import Any

from coordinator import CoordinatorConfig, GroupCoordinator, SequentialIds, step
from tests.support import protocols

CONFIG = CoordinatorConfig(group_initial_rebalance_delay_ms=100, group_min_session_timeout_ms=10)


def join(rid: str, group: str, member: str = "", version: int = 9) -> dict[str, Any]:
    return {
        "api": "join_group",
        "request_id": rid,
        "group_id": group,
        "member_id": member,
        "client_id": "c",
        "session_timeout_ms": 1000,
        "rebalance_timeout_ms": 2000,
        "protocol_type": "consumer",
        "protocols": protocols([("range", b"")]),
        "api_version": version,
    }


def test_a_step_creates_the_group_and_says_when_it_needs_the_next_one() -> None:
    result = step(None, "g", [join("r1", "g", version=3)], 0, CONFIG, SequentialIds())
    assert result.responses == []  # parked for the initial rebalance delay
    assert result.group is not None and result.group.state.value == "PreparingRebalance"
    assert result.next_deadline_ms == 100
    assert [r["record_type"] for r in result.records] == ["group_metadata"]
    assert result.records[0]["offset"] is None  # numbered by whoever sees the partition

    later = step(result.group, "g", [], 100, CONFIG, SequentialIds())
    (answer,) = later.responses
    assert (answer["request_id"], answer["error"], answer["generation_id"]) == ("r1", None, 1)
    assert later.group is not None and later.group.state.value == "CompletingRebalance"


def test_a_step_is_deterministic() -> None:
    first = step(None, "g", [join("r1", "g"), join("r2", "g")], 5, CONFIG, SequentialIds())
    again = step(None, "g", [join("r1", "g"), join("r2", "g")], 5, CONFIG, SequentialIds())
    assert first.responses == again.responses and first.records == again.records
    state = first.group
    a = step(copy.deepcopy(state), "g", [], 10_000, CONFIG, SequentialIds())
    b = step(copy.deepcopy(state), "g", [], 10_000, CONFIG, SequentialIds())
    assert (a.responses, a.records, a.next_deadline_ms) == (
        b.responses,
        b.records,
        b.next_deadline_ms,
    )


def test_a_request_for_another_group_or_a_bad_one_is_refused() -> None:
    result = step(None, "g", [join("r1", "other"), {"api": "nope"}], 0, CONFIG, SequentialIds())
    assert [r["error"] for r in result.responses] == ["INVALID_REQUEST", "INVALID_REQUEST"]
    assert result.group is None and result.records == []


def test_steps_and_the_facade_agree() -> None:
    """The same timed requests, once through GroupCoordinator and once through per-group steps
    (as the Spark job runs them), give the same responses and records."""
    timeline: list[tuple[int, dict[str, Any]]] = []
    for group in ("g1", "g2"):
        timeline += [
            (0, join(f"{group}-a", group, version=3)),
            (20, join(f"{group}-b", group, version=3)),
        ]
    timeline += [(150, {"api": "describe_groups", "request_id": "d1", "group_id": "g1"})]
    timeline.sort(key=lambda item: item[0])

    facade = GroupCoordinator(CONFIG, id_source=SequentialIds())
    facade_out: list[dict[str, Any]] = []
    for now, request in timeline:
        facade_out += facade.handle(copy.deepcopy(request), now)
    facade_out += facade.advance(5_000)
    facade_records = facade.drain_records()

    states: dict[str, Any] = {}
    ids = SequentialIds()
    step_out: list[dict[str, Any]] = []
    step_records: list[dict[str, Any]] = []
    for now, request in timeline:
        for group in ("g1", "g2"):  # every group's timers run at each instant, as the facade's do
            batch = [copy.deepcopy(request)] if request["group_id"] == group else []
            result = step(states.get(group), group, batch, now, CONFIG, ids)
            states[group] = result.group
            step_out += result.responses
            step_records += result.records
    for group in ("g1", "g2"):
        result = step(states[group], group, [], 5_000, CONFIG, ids)
        step_out += result.responses
        step_records += result.records

    def by_request(out: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
        return {r["request_id"]: r for r in out}

    assert by_request(step_out) == by_request(facade_out)
    strip = lambda records: sorted(  # noqa: E731
        ({k: v for k, v in r.items() if k != "offset"} for r in records),
        key=lambda r: (r["group_id"], r["timestamp_ms"], repr(r["key"])),
    )
    assert strip(step_records) == strip(facade_records)
