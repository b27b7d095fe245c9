"""Subscription regular expressions as Kafka 4 compiles and matches them.

Kafka's group coordinator compiles a member's ``SubscribedTopicRegex`` with RE2/J
(``com.google.re2j.Pattern.compile``, re2j 1.8) and answers INVALID_REGULAR_EXPRESSION, with
``SubscribedTopicRegex `<regex>` is not a valid regular expression: <description>.``, for one it
cannot compile; a topic is subscribed when ``pattern.matcher(topic).matches()``: the whole name
matches.

Here the pattern is compiled and matched by RE2 itself (Google's C++ library, the ``google-re2``
package), the engine RE2/J ports: the same syntax (no lookaround, no backreferences, no
possessive quantifiers, ``\\z`` but not ``\\Z``, repetition counts up to 1000), linear-time
matching. Where RE2/J 1.8 and the C++ library part ways this module takes RE2/J's side:

- ``\\C`` (any byte) is an invalid escape sequence;
- a group name must be ASCII letters, digits and ``_``, and may not repeat (``duplicate capture
  group name``); ``(?<=`` and ``(?<!`` (lookbehind) are therefore invalid named captures;
- the descriptions are RE2/J's (``missing closing )``, ``invalid or unsupported Perl syntax``,
  ``regexp/syntax: internal error`` for an unmatched ``)``, ...).

Left as the C++ library has it (documented in the README): a nested repetition whose counts
multiply past 1000 (``(a{100}){100}``) and a program past RE2's memory budget are rejected here
(``invalid repeat count``, ``expression too large``) though RE2/J compiles them; the Unicode
tables behind ``\\p{...}`` are the C++ library's; and when a pattern has several errors, the one
described is the C++ parser's first unless an RE2/J-only error comes before it.
"""

from __future__ import annotations

import functools

import re2  # type: ignore[import-untyped]

#: RE2/J's descriptions (``Parser``'s ``ERR_*``) of the C++ library's error codes.
_DESCRIPTIONS = {
    "missing )": "missing closing )",
    "unexpected )": "regexp/syntax: internal error",
    "missing ]": "missing closing ]",
    "trailing \\": "trailing backslash at end of expression",
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class": "invalid character class range",
    "invalid character class range": "invalid character class range",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "pattern too large - compile failed": "expression too large",
}


class InvalidRegex(ValueError):
    """A pattern RE2/J does not compile; ``description`` is its ``getDescription()``."""

    def __init__(self, regex: str, description: str) -> None:
        #: Kafka's INVALID_REGULAR_EXPRESSION message (``throwIfRegularExpressionIsInvalid``).
        self.message = (
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}."
        )
        super().__init__(self.message)
        self.regex = regex
        self.description = description


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # an invalid pattern is an answer, not a log line
    return options


_OPTIONS = _options()


def _library_error(regex: str) -> str | None:
    """The RE2/J description of the C++ library's error for ``regex``, or None."""
    try:
        re2.compile(regex, _OPTIONS)
    except UnicodeEncodeError:
        return "invalid UTF-8"
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        code = text.split(": ", 1)[0]
        return _DESCRIPTIONS.get(code, code)
    return None


def _valid_group_name(name: str) -> bool:
    """RE2/J's ``isValidCaptureName``: one or more ASCII letters, digits or ``_``."""
    return bool(name) and all(c == "_" or (c.isascii() and c.isalnum()) for c in name)


def _re2j_only_error(regex: str) -> tuple[int, str] | None:
    """The first error RE2/J 1.8 finds that the C++ library does not, with its position: a
    ``\\C`` outside a character class, or a named group RE2/J refuses. Walks the pattern as
    RE2/J's parser does for these: escapes, ``\\Q...\\E`` literals and character classes are
    skipped."""
    names: set[str] = set()
    i, n = 0, len(regex)
    while i < n:
        c = regex[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            escaped = regex[i + 1]
            if escaped == "Q":
                end = regex.find("\\E", i + 2)
                if end < 0:
                    return None
                i = end + 2
                continue
            if escaped == "C":
                return i, "invalid escape sequence"
            i += 2
            continue
        if c == "[":
            i = _class_end(regex, i)
            continue
        if regex.startswith("(?P<", i) or regex.startswith("(?<", i):
            begin = i + (4 if regex[i + 2] == "P" else 3)
            end = regex.find(">", begin)
            if end < 0 or not _valid_group_name(regex[begin:end]):
                return i, "invalid named capture"
            name = regex[begin:end]
            if name in names:
                return i, "duplicate capture group name"
            names.add(name)
            i = end + 1
            continue
        i += 1
    return None


def _class_end(regex: str, start: int) -> int:
    """The position after the character class opening at ``start`` (the end of the pattern
    when it is not closed: the library reports that)."""
    i, n = start + 1, len(regex)
    if i < n and regex[i] == "^":
        i += 1
    first = True  # a ']' first in the class is a literal
    while i < n:
        c = regex[i]
        if c == "]" and not first:
            return i + 1
        first = False
        if c == "\\":
            i += 2
        elif regex.startswith("[:", i) and regex.find(":]", i + 2) >= 0:
            i = regex.find(":]", i + 2) + 2
        else:
            i += 1
    return n


def validate(regex: str) -> None:
    """Raise :class:`InvalidRegex` for a pattern Kafka's RE2/J would not compile."""
    description = _description(regex)
    if description is not None:
        raise InvalidRegex(regex, description)


@functools.lru_cache(maxsize=1024)
def _description(regex: str) -> str | None:
    own = _re2j_only_error(regex)
    if own is None:
        return _library_error(regex)
    # The error RE2/J meets first: the library's, if the pattern up to ours already has one
    # (other than the groups the cut leaves open).
    position, description = own
    earlier = _library_error(regex[:position])
    if earlier is not None and earlier != "missing closing )":
        return earlier
    return description


@functools.lru_cache(maxsize=1024)
def _compiled(regex: str) -> re2._Regexp:
    validate(regex)
    return re2.compile(regex, _OPTIONS)


def matches(regex: str, topic: str) -> bool:
    """Kafka's ``Pattern.compile(regex).matcher(topic).matches()``: the whole name matches.
    Raises :class:`InvalidRegex` for an invalid pattern."""
    return _compiled(regex).fullmatch(topic) is not None


def matching(regex: str, topics: list[str]) -> tuple[str, ...]:
    """The topics (in the order given) whose whole name ``regex`` matches."""
    compiled = _compiled(regex)
    return tuple(name for name in topics if compiled.fullmatch(name) is not None)
