"""JSON lines for requests, responses and records: bytes travel as base64 strings.

Shared by every adapter that speaks JSON (the replay tool, the Spark job's inbox, the CLI). The
engine itself accepts base64 strings for binary request fields, so decoding is only needed for
output.
"""

from __future__ import annotations

import base64
import json
from typing import Any


def _default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


#: One encoder for every call: ``json.dumps`` with options builds a new encoder each time,
#: which costs more than encoding a small response.
_ENCODE = json.JSONEncoder(default=_default, separators=(",", ":"), ensure_ascii=False).encode


def dumps(value: Any) -> str:
    """One compact JSON line; bytes become base64 strings."""
    return _ENCODE(value)


def loads(line: str) -> Any:
    return json.loads(line)
