"""``coordinator topics``: the topics the Spark job assigns consumer groups from, changed live.

    coordinator topics --warehouse W --list
    coordinator topics --warehouse W --set orders:6 --set payments:3
    coordinator topics --warehouse W --delete orders

``--set NAME:PARTITIONS`` creates a topic or grows it (a partition count never shrinks, as
Kafka's ``kafka-topics.sh --alter`` refuses it); ``--delete NAME`` deletes it. One call writes
one new version of the warehouse's topic store (``<warehouse>/topics/``,
:mod:`coordinator.stream.topic_store`), the whole image; the running job assigns the next batch
it plans from it, without a restart: a consumer group subscribed to a grown or deleted topic
gets a new target assignment at its members' next heartbeat, as with Kafka. A new topic's id is
the one the gateway gives a ``--topic`` of that name. ``--list`` (the default) prints the
newest version's topics, as ``kafka-topics.sh --describe`` names them.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "topics",
        help="list or change the topics the Spark job assigns consumer groups from",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--warehouse", default="warehouse", metavar="DIR")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS",
        help="create a topic, or grow its partition count (repeatable)",
    )
    parser.add_argument(
        "--delete", action="append", default=[], metavar="NAME", help="delete a topic (repeatable)"
    )
    parser.add_argument("--list", action="store_true", help="print the topics (the default)")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from coordinator.gateway.cli import parse_topics
    from coordinator.stream import topic_store
    from coordinator.stream.schema import Warehouse

    store = Warehouse.at(args.warehouse).topics
    if args.set or args.delete:
        if args.list:
            raise ValueError("--list cannot be used with --set or --delete")
        counts = parse_topics(args.set)
        image = topic_store.newest_image(store)
        changed = topic_store.edit(image, counts, args.delete)
        if image is not None and changed == image.as_list():
            print(f"topics unchanged (version {image.version})")
            return 0
        written, _ = topic_store.append(store, changed, topic_store.CLI)
        print(f"topics version {written} written to {store}")
        return 0
    version = topic_store.newest_version(store)
    topics = [] if version is None else topic_store.read_image(store, version).as_list()
    if args.output == "json":
        print(json.dumps({"version": version, "topics": topics}))
        return 0
    if version is None:
        print(f"no topics: {store} holds no version (the job writes job.topics there at start)")
        return 0
    print(f"version {version}")
    for topic in topics:
        print(
            f"Topic: {topic['name']}\tTopicId: {topic['topic_id']}\t"
            f"PartitionCount: {topic['partitions']}"
        )
    return 0
