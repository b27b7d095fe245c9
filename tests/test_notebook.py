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
