"""A readable timeline of responses, for people watching a group form and rebalance."""

from __future__ import annotations

import re
from typing import Any, TextIO

from coordinator.engine import GroupCoordinator
from coordinator.modern.model import ConsumerGroup

_MEMBER_ID = re.compile(
    r"^(.*)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{8}([0-9a-f]{4})$"
)


def short_member_id(member_id: str | None) -> str:
    """``consumer-1-<uuid ending 0003>`` -> ``consumer-1-…0003``: enough to tell members apart."""
    if not member_id:
        return "-"
    match = _MEMBER_ID.match(member_id)
    return f"{match.group(1)}-…{match.group(2)}" if match else member_id


class Timeline:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def heading(self, name: str) -> None:
        self.out.write(f"\n=== {name}\n")

    def response(self, at_ms: int, item: dict[str, Any]) -> None:
        api = item["api"]
        outcome = item["error"] or "ok"
        detail = self._detail(api, item)
        line = f"{at_ms:>9} ms  {item.get('group_id') or '':<10} {api:<15} {outcome:<24} {detail}"
        self.out.write(line.rstrip() + "\n")

    def _detail(self, api: str, item: dict[str, Any]) -> str:
        if api == "join_group":
            if item["error"] is None:
                role = "leader" if item["leader"] == item["member_id"] else "follower"
                members = f", sees {len(item['members'])} members" if item["members"] else ""
                skip = ", keeps its assignment" if item.get("skip_assignment") else ""
                return (
                    f"{short_member_id(item['member_id'])} joins generation {item['generation_id']} "
                    f"as {role} ({item['protocol_name']}{members}{skip})"
                )
            return f"member id {short_member_id(item['member_id'])}"
        if api == "sync_group" and item["error"] is None:
            return f"assignment {len(item['assignment'])} bytes"
        if api == "leave_group":
            return ", ".join(
                f"{short_member_id(m['member_id'])}: {m['error'] or 'ok'}" for m in item["members"]
            )
        if api == "describe_groups":
            members = ", ".join(short_member_id(m["member_id"]) for m in item["members"])
            return f"{item['group_state']} [{members}]"
        if api in ("offset_commit", "offset_fetch", "offset_delete"):
            parts = []
            for p in item["partitions"]:
                offset = f"@{p['offset']}" if "offset" in p else ""
                error = f" {p['error']}" if p["error"] else ""
                parts.append(f"{p['topic']}-{p['partition']}{offset}{error}")
            return " ".join(parts)
        if item.get("error_message"):
            return str(item["error_message"])
        return ""

    def summary(self, coordinator: GroupCoordinator) -> None:
        for group_id in coordinator.group_ids():
            group = coordinator.group(group_id)
            assert group is not None
            members = ", ".join(short_member_id(m) for m in group.members)
            if isinstance(group, ConsumerGroup):
                self.out.write(
                    f"  -> {group_id}: consumer group {group.state.value}, epoch "
                    f"{group.group_epoch}, assignment epoch {group.assignment_epoch}, members "
                    f"[{members}], {len(group.offsets)} committed offsets\n"
                )
                continue
            self.out.write(
                f"  -> {group_id}: {group.state.value}, generation {group.generation_id}, "
                f"leader {short_member_id(group.leader_id)}, members [{members}], "
                f"{len(group.offsets)} committed offsets\n"
            )
