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
_ENCODER = json.JSONEncoder(default=_default, separators=(",", ":"), ensure_ascii=False)
_ENCODE = _ENCODER.encode
#: The C encoder ``_ENCODER.encode`` builds on every call (``JSONEncoder.iterencode``), built
#: once, with the same options, except that it keeps no markers of the containers it is in
#: (which ``encode`` starts afresh on every call): a container that holds itself is refused as
#: too deep (RecursionError) rather than as circular (ValueError). None where the C module is
#: missing.
_C_ENCODE: Any = (
    None
    if json.encoder.c_make_encoder is None  # type: ignore[attr-defined]
    else json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None,
        _default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        False,
        False,
        True,
    )
)


def dumps(value: Any) -> str:
    """One compact JSON line; bytes become base64 strings."""
    if _C_ENCODE is None:
        return _ENCODE(value)
    return "".join(_C_ENCODE(value, 0))


#: The keys every response starts with, in order (:func:`coordinator.requests.response`).
_COMMON_KEYS = ("api", "request_id", "group_id", "error_code", "error", "error_message")
_STR = json.encoder.encode_basestring  # what the encoders above write a string with


def dumps_response(answer: dict[str, Any]) -> str:
    """:func:`dumps` of a response; one of only the common fields (a heartbeat's answer, any
    error answer without fields of its own) whose values are strings, ints or None is written
    from a template instead (the same text)."""
    if len(answer) == 6 and tuple(answer) == _COMMON_KEYS:
        api, request_id, group_id, code, error, message = answer.values()
        if (
            type(api) is str
            and type(group_id) is str
            and type(code) is int
            and (error is None or type(error) is str)
            and (message is None or type(message) is str)
        ):
            if type(request_id) is str:
                request_id = _STR(request_id)
            elif type(request_id) is int:
                request_id = int.__repr__(request_id)
            else:
                return dumps(answer)
            return (
                f'{{"api":{_STR(api)},"request_id":{request_id},"group_id":{_STR(group_id)},'
                f'"error_code":{int.__repr__(code)},'
                f'"error":{"null" if error is None else _STR(error)},'
                f'"error_message":{"null" if message is None else _STR(message)}}}'
            )
    return dumps(answer)


#: The scanner ``json.loads`` reads with (its decoder's, so the same objects come back).
_SCAN_ONCE: Any = json._default_decoder.scan_once  # type: ignore[attr-defined]


def loads_object(line: str) -> Any:
    """``json.loads(line)``, same value and same exceptions, reading a line that is one JSON
    object with nothing around it without ``loads``'s Python layers."""
    if line.startswith("{"):
        try:
            value, end = _SCAN_ONCE(line, 0)
        except Exception:
            pass
        else:
            if end == len(line):
                return value
    return json.loads(line)


def loads(line: str) -> Any:
    return json.loads(line)
