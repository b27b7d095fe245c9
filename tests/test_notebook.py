"""``notebooks/offsets_history.ipynb`` on a warehouse the real Spark job writes in the demo's
scenario (three members commit, one crashes, its session expires, the group rebalances, the
survivors commit): every cell runs (a failing cell fails the test), the plots are drawn, and
the rebalance table names the crashed member among those who left.

The job runs on the session's one SparkSession; the notebook's kernel is a process of its own
with its own Spark (``coordinator.notebook``, as ``make notebook`` runs it)."""

from __future__ import annotations

import io
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

#: The cells (by tag) that draw a picture.
PLOTS = ("committed-offsets", "rebalance-timeline", "rebalance-durations", "commit-rate", "lag")


@pytest.fixture(scope="module")
def demo_warehouse(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coordinator.stream import demo

    warehouse = tmp_path_factory.mktemp("notebook") / "demo"
    demo.prepare_warehouse(warehouse)
    out = io.StringIO()
    assert demo.play(spark, demo.demo_settings(warehouse), out) == 0, out.getvalue()
    assert (warehouse / demo.TOPIC_OFFSETS).is_file()
    return warehouse


class _Tables(HTMLParser):
    """The rows of the HTML tables in a text (pandas' ``to_html``), as lists of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def displayed_table(cell: Any) -> list[dict[str, str]]:
    """The DataFrame a cell displayed, as dicts by column name (the index column dropped)."""
    html = next(o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {}))
    parser = _Tables()
    parser.feed(html)
    header, *rows = parser.rows
    return [dict(zip(header[1:], row[1:], strict=True)) for row in rows]


def test_demo_producer_samples_log_ends(tmp_path: Path) -> None:
    from coordinator.admin.topic_offsets import TopicOffsets
    from coordinator.stream import demo

    producer = demo.Producer(tmp_path / demo.TOPIC_OFFSETS)
    first = producer.sample()
    producer.started -= 2  # two seconds of producing later
    second = producer.sample()
    offsets = TopicOffsets.read(tmp_path / demo.TOPIC_OFFSETS)
    assert offsets.partitions(demo.TOPIC) == list(range(demo.PARTITIONS))
    for p in range(demo.PARTITIONS):
        assert second[p] >= first[p] + 2 * (5 + 3 * p) - 1
        assert offsets.latest((demo.TOPIC, p)) == second[p]


@pytest.mark.slow
def test_offsets_history_notebook(demo_warehouse: Path, tmp_path: Path) -> None:
    from coordinator import notebook

    executed = notebook.execute(
        demo_warehouse,
        topic_offsets=demo_warehouse / "topic_offsets.csv",
        output=tmp_path / "offsets_history.ipynb",
    )
    cells = {tag: cell for cell in executed.cells for tag in cell.metadata.get("tags", [])}
    errors = [
        o for cell in executed.cells for o in cell.get("outputs", []) if o.output_type == "error"
    ]
    assert not errors
    for tag in PLOTS:
        images = [o for o in cells[tag].outputs if "image/png" in o.get("data", {})]
        assert images, f"the {tag} cell drew no picture"

    rebalances = displayed_table(cells["rebalances"])
    crash = [r for r in rebalances if "consumer-3-" in r["left"]]
    assert crash, rebalances
    assert "heartbeat expiration" in crash[0]["reason"]
    assert crash[0]["members"].startswith("3 → ")
    assert any(r["generation"] == "1" and "consumer-3-" in r["joined"] for r in rebalances)

    # The lag table: every partition of the topic, none behind by less than nothing.
    lag = displayed_table(cells["lag"])
    assert sorted(int(r["partition"]) for r in lag) == list(range(6))
    assert all(int(r["lag"]) >= 0 for r in lag)
    assert (tmp_path / "offsets_history.ipynb").stat().st_size < 1_000_000


@pytest.mark.slow
def test_offsets_history_notebook_asks_the_upstream_for_the_log_ends(
    demo_warehouse: Path, tmp_path: Path
) -> None:
    """With ``--upstream`` the lag plot's log ends come from a real cluster (noida-db) by
    ListOffsets by time: the demo's topic is produced there as the demo's samples say (the
    messages up to each sample's log end stamped just before it), so the cluster's log end at
    a time is the file's."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from coordinator import notebook
    from coordinator.admin.topic_offsets import TopicOffsets
    from coordinator.stream import demo
    from tests.upstream_support import noida_broker

    samples = TopicOffsets.read(demo_warehouse / demo.TOPIC_OFFSETS).to_table().to_pylist()
    server = noida_broker()
    try:
        bootstrap = f"127.0.0.1:{server.port}"
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        [created] = admin.create_topics([NewTopic(demo.TOPIC, demo.PARTITIONS, 1)]).values()
        created.result(60)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
        ends = dict.fromkeys(range(demo.PARTITIONS), 0)
        for sample in sorted(samples, key=lambda s: (s["timestamp_ms"], s["partition"])):
            p = sample["partition"]
            for _ in range(ends[p], sample["log_end_offset"]):
                producer.produce(
                    demo.TOPIC, b"m", partition=p, timestamp=sample["timestamp_ms"] - 1
                )
            ends[p] = max(ends[p], sample["log_end_offset"])
        assert producer.flush(60) == 0

        executed = notebook.execute(demo_warehouse, upstream=bootstrap)
    finally:
        server.stop()
    cells = {tag: cell for cell in executed.cells for tag in cell.metadata.get("tags", [])}
    printed = "".join(o.get("text", "") for o in cells["parameters"].outputs)
    assert f"log offsets:   the upstream cluster at {bootstrap} (ListOffsets)" in printed
    assert [o for o in cells["lag"].outputs if "image/png" in o.get("data", {})]
    lag = displayed_table(cells["lag"])
    assert sorted(int(r["partition"]) for r in lag) == list(range(demo.PARTITIONS))
    for row in lag:
        end = int(row["log_end_offset"])
        assert 0 <= end <= ends[int(row["partition"])]
        assert int(row["lag"]) == end - int(row["committed_offset"]) >= 0
