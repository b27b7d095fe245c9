"""The job's topic metadata: a versioned, append-only store in the warehouse.

Consumer groups are assigned from the topics the coordinator knows (name, topic id, partition
count: Kafka's metadata image). The embedded engine is told them by its caller
(``GroupCoordinator.update_topics``); the Spark job reads them from here, so that they can
change while it runs:

    <warehouse>/topics/<version:016d>.json   {"version": V, "writer": "...", "topics": [...]}

Each file is a whole image (``[{name, topic_id, partitions}]``, the contract's section 6 list),
never changed once written: written under a hidden name, then linked to its version's name,
which fails when the name exists, so two writers never publish one version twice (the loser
reads the new newest and tries the next number) and a reader never sees half a file.

Writers: the job itself at start (``job.topics``, when it changed since the job last wrote it),
``coordinator topics`` and the gateway with the Spark back end (its ``--topic`` list, or its
upstream's topics with their real ids). Reader: the job, which puts the newest version into
each batch's offset when it plans the batch (:mod:`coordinator.stream.source`) and steps the
batch's groups with that version's image (:class:`coordinator.stream.operator.OperatorSettings`),
so that a batch Spark runs again sees the same image even when newer versions were written
since.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from coordinator.topics import TopicImage, topic_id_for

log = logging.getLogger("coordinator.topics")

#: The store's directory under the warehouse.
TOPICS_DIR = "topics"
#: Who wrote a version (the ``writer`` field). The job's versions also hold the ``setting``
#: they were written from (name -> partition count), which the job's next start compares with.
JOB_SETTING = "job.topics"
CLI = "coordinator topics"
GATEWAY = "gateway"

_VERSION_NAME = re.compile(r"^(\d{16})\.json$")


def store_dir(warehouse_root: str | Path) -> Path:
    return Path(warehouse_root) / TOPICS_DIR


def version_path(directory: str | Path, version: int) -> Path:
    return Path(directory) / f"{version:016d}.json"


def versions(directory: str | Path) -> list[int]:
    """Every version written, in order (empty: none yet)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _VERSION_NAME.match(n)))


def newest_version(directory: str | Path) -> int | None:
    found = versions(directory)
    return found[-1] if found else None


def read_version(directory: str | Path, version: int) -> dict[str, Any]:
    """The file of ``version`` as written (``version``, ``writer``, ``topics``); raises
    FileNotFoundError when there is none, ValueError when it is not a store file."""
    path = version_path(directory, version)
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, dict) or value.get("version") != version:
        raise ValueError(f"{path} is not version {version} of a topic store")
    return value


def read_image(directory: str | Path, version: int) -> TopicImage:
    """The image of ``version``, whose :attr:`TopicImage.version` is ``version`` (Kafka's
    metadata offset in RegularExpression records)."""
    return TopicImage.parse(read_version(directory, version)["topics"], version)


def newest_image(directory: str | Path) -> TopicImage | None:
    version = newest_version(directory)
    return None if version is None else read_image(directory, version)


def append(
    directory: str | Path,
    topics: Iterable[Mapping[str, Any]],
    writer: str,
    extra: Mapping[str, Any] | None = None,
) -> tuple[int, TopicImage]:
    """Write ``topics`` (validated as ``update_topics`` validates them) as the next version
    (with the writer's ``extra`` fields); returns it and its image. Raises ValueError on a
    malformed list (nothing written)."""
    listed = [dict(t) for t in topics]
    TopicImage.parse(listed)  # validate before anything is written
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{os.getpid()}-{id(listed)}.tmp"
    while True:
        newest = newest_version(directory)
        version = 0 if newest is None else newest + 1
        ordered = _sorted(listed)
        body = {**(extra or {}), "version": version, "writer": writer, "topics": ordered}
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(json.dumps(body, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, version_path(directory, version))  # fails when the version exists
        except FileExistsError:
            continue  # another writer took this number: the next one
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _fsync_dir(directory)
        return version, TopicImage.parse(ordered, version)


def append_if_changed(
    directory: str | Path, topics: Iterable[Mapping[str, Any]], writer: str
) -> int | None:
    """Append ``topics`` unless they are the newest version's already; the version written, or
    None when nothing changed."""
    listed = [dict(t) for t in topics]
    newest = newest_image(directory)
    if newest is not None and newest == TopicImage.parse(listed):
        return None
    return append(directory, listed, writer)[0]


def seed_from_setting(directory: str | Path, counts: Iterable[tuple[str, int]]) -> int | None:
    """``job.topics`` into the store, at the job's start, when the setting changed since the job
    last wrote it (always, on an empty store: version 0, the seed). What changed in the setting
    is applied to the newest version, so topics others wrote stay: a topic added to the setting
    is created, one whose count changed is set to it (a count below the store's is kept, with
    a warning: partitions never shrink), one taken out of the setting is deleted. Returns the
    version written, or None."""
    setting = dict(counts)
    previous: dict[str, int] | None = None
    for version in reversed(versions(directory)):
        stored = read_version(directory, version)
        if stored.get("writer") == JOB_SETTING:
            previous = dict(stored.get("setting") or {})
            break
    if previous == setting:
        return None
    newest = newest_image(directory)
    known = {t.name: t.partitions for t in (newest or ())}
    before = previous or {}
    changed = {}
    for name, count in setting.items():
        if before.get(name) == count:
            continue
        if count < known.get(name, 0):
            log.warning(
                "job.topics: topic %r has %d partitions in the topic store: kept (asked %d; "
                "partitions never shrink)",
                name,
                known[name],
                count,
            )
            continue
        changed[name] = count
    gone = [name for name in before if name not in setting and name in known]
    # Written even when the image stays the same: the setting, as the job last wrote it, is
    # what the next start compares with.
    return append(directory, edit(newest, changed, gone), JOB_SETTING, {"setting": setting})[0]


def edit(
    image: TopicImage | None, set_counts: Mapping[str, int], delete: Iterable[str]
) -> list[dict[str, Any]]:
    """``image`` with topics created or grown (``set_counts``: name -> partition count) and
    deleted, as ``kafka-topics.sh --create/--alter/--delete`` would leave the cluster. A new
    topic gets the id the gateway gives a ``--topic`` (:func:`coordinator.topics.topic_id_for`).
    Raises ValueError for a partition count that shrinks (Kafka refuses it), a topic both set
    and deleted, or one deleted that does not exist."""
    current = {t.name: t for t in (image or ())}
    doomed = set(delete)
    both = doomed & set(set_counts)
    if both:
        raise ValueError(f"topic {sorted(both)[0]!r} is both set and deleted")
    missing = sorted(doomed - set(current))
    if missing:
        raise ValueError(f"topic {missing[0]!r} does not exist")
    out = {
        name: {"name": name, "topic_id": t.topic_id, "partitions": t.partitions}
        for name, t in current.items()
        if name not in doomed
    }
    for name, count in set_counts.items():
        known = current.get(name)
        if known is not None and count < known.partitions:
            raise ValueError(
                f"topic {name!r} has {known.partitions} partitions: the count can only grow, "
                f"as Kafka's (to {count} asked)"
            )
        topic_id = known.topic_id if known is not None else topic_id_for(name)
        out[name] = {"name": name, "topic_id": topic_id, "partitions": count}
    return _sorted(out.values())


def _sorted(topics: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        (
            {"name": t["name"], "topic_id": t["topic_id"], "partitions": t["partitions"]}
            for t in topics
        ),
        key=lambda t: str(t["name"]),
    )


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
