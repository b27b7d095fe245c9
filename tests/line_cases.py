"""Request files and the lines a split at ``"\\r?\\n"`` makes of them: the cases that both ways
of splitting inbox files into lines (Spark's SQL, ``job.file_lines``, and the source's own,
``coordinator.stream.lines``) are held to."""

from __future__ import annotations

import random
import re

#: Where a file's text comes from: line ends, carriage returns, spaces, a request, a non-ASCII
#: character, blank lines.
PIECES = ["\n", "\r\n", "\r", "\r\r\n", " ", "  \r\n", "x", '{"group_id": "g"}', "é", "\n\n"]


def crlf_texts(seed: int = 5) -> list[str]:
    """Hand-picked file texts, then 300 random ones made of :data:`PIECES`."""
    rng = random.Random(seed)
    texts = ["", "\n", "\r", "\r\n", "a\r", "a\r\n", "a\n\r", "\r\r\n", "a\nb", "a\r\nb\r", "\t"]
    texts += ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))) for _ in range(300)]
    return texts


def file_uri(index: int) -> str:
    return f"file:/inbox/{index:04d}.jsonl"


def expected_lines(texts: list[str]) -> dict[tuple[str, int], tuple[str, bool]]:
    """(file, position) -> (line, terminated) of every line that is not spaces only, as a
    split at ``"\\r?\\n"`` makes them: only a file's last line is unterminated."""
    want = {}
    for i, text in enumerate(texts):
        parts = re.split("\r?\n", text)
        for position, value in enumerate(parts):
            if value.strip(" "):
                want[(file_uri(i), position)] = (value, position < len(parts) - 1)
    return want
