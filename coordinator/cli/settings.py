"""Reading coordinator settings from Kafka-style ``.properties`` files and ``--set`` options."""

from __future__ import annotations

from pathlib import Path

from coordinator.config import CoordinatorConfig


def read_properties(path: str | Path) -> dict[str, str]:
    """``key=value`` lines (``#`` and ``!`` comments, blank lines ignored), as Java reads them;
    a line ending in an odd number of backslashes continues on the next, whose leading
    whitespace is dropped (how Kafka's PEM and JAAS values span lines)."""
    values: dict[str, str] = {}
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    number = 0
    while number < len(lines):
        raw = lines[number]
        number += 1
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and number < len(lines):
            line = line[:-1] + lines[number].lstrip()
            number += 1
        for sep in ("=", ":"):
            if sep in line:
                key, value = line.split(sep, 1)
                values[key.strip()] = value.strip()
                break
        else:
            raise ValueError(f"{path}:{number}: expected key=value, got {raw!r}")
    return values


def parse_set(items: list[str] | None) -> dict[str, str]:
    """``--set key=value`` options as a mapping (later ones win)."""
    values: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        values[key.strip()] = value.strip()
    return values


def load_config(files: list[str] | None, overrides: list[str] | None) -> CoordinatorConfig:
    """Kafka's defaults, then each properties file in turn, then each ``key=value`` override."""
    values: dict[str, str] = {}
    for path in files or []:
        values.update(read_properties(path))
    values.update(parse_set(overrides))
    return CoordinatorConfig.from_mapping(values)
