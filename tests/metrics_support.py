"""Scraping a process's metrics server in tests: values by name and labels, and health codes."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def get(port: int, path: str) -> tuple[int, str]:
    """(HTTP status, body) of a GET on the metrics server."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class Scrape:
    """One scrape of ``/metrics``: sample values by sample name and labels."""

    def __init__(self, port: int) -> None:
        status, text = get(port, "/metrics")
        assert status == 200, text
        self.text = text
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, name: str, **labels: Any) -> float:
        """A sample's value (0 when the sample is not exported yet, as for an unused label)."""
        key = (name, frozenset((k, str(v)) for k, v in labels.items()))
        return self.samples.get(key, 0.0)

    def sum(self, name: str, **labels: Any) -> float:
        """The sum over every sample of ``name`` whose labels include ``labels``."""
        wanted = {(k, str(v)) for k, v in labels.items()}
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= ls)


def sample_names(text: str) -> set[str]:
    """Every sample name an exposition can hold: the samples present, and for each ``# TYPE``
    the names its type exports (``_total`` and ``_created`` for a counter; ``_bucket``,
    ``_count``, ``_sum`` for a histogram), so that a labelled metric with no sample yet
    still counts."""
    names: set[str] = set()
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("_count", "_sum", "_created", ""),
        "gauge": ("",),
        "untyped": ("",),
        "info": ("_info",),
    }
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            base = name.removesuffix("_total") if kind == "counter" else name
            names.update(base + suffix for suffix in suffixes.get(kind, ("",)))
        elif line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names
