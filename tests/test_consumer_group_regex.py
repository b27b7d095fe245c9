"""Subscription regexes compiled and matched as Kafka's RE2/J does: what it accepts, what it
refuses (with Kafka's INVALID_REGULAR_EXPRESSION message and RE2/J's description), and
whole-name matching."""

from __future__ import annotations

import pytest

from coordinator.modern import regex


@pytest.mark.parametrize(
    "pattern",
    [
        "orders-.*",
        "a|b",
        "(?i)ORDERS",
        "(?s).",
        "(?U)a*",
        "(?m)^a$",
        "(?i:x)y",
        "(?P<name>x)",
        "(?<name>x)",  # RE2/J 1.8 takes the .NET form too
        "(?P<n1>a)(?P<n2>b)",
        "[[:alpha:]]+",
        "[[:^digit:]]",
        "\\pL+",
        "\\p{Greek}",
        "\\PN",
        "\\d+\\w*\\s?\\D\\W\\S",
        "\\bword\\B",
        "\\Atopic\\z",
        "\\Q.*\\E",
        "a\\Q",  # \Q without \E: the rest is literal
        "x{2,5}",
        "x{1000}",
        "x{,3}",  # not a repetition: literal braces
        "[]a]",
        "[^]a]",
        "[\\d-z]",
        "\\x{41}\\x41\\0\\07",
        "a*?b+?c??",
    ],
)
def test_re2j_accepts(pattern: str) -> None:
    regex.validate(pattern)


@pytest.mark.parametrize(
    ("pattern", "description"),
    [
        # Kafka's testConsumerHeartbeatRegexValidation
        ("[", "missing closing ]"),
        ("(", "missing closing )"),
        ("(?:a", "missing closing )"),
        ("a)", "regexp/syntax: internal error"),
        ("(a))", "regexp/syntax: internal error"),
        ("\\", "trailing backslash at end of expression"),
        # what Python's re (PCRE-like) accepts and RE2 does not
        ("(?=x)y", "invalid or unsupported Perl syntax"),
        ("(?!x)y", "invalid or unsupported Perl syntax"),
        ("(?<=x)y", "invalid named capture"),
        ("(?<!x)y", "invalid named capture"),
        ("(a)\\1", "invalid escape sequence"),
        ("(?P=n)", "invalid or unsupported Perl syntax"),
        ("a++", "invalid nested repetition operator"),
        ("a**", "invalid nested repetition operator"),
        ("x{2}{3}", "invalid nested repetition operator"),
        ("\\Z", "invalid escape sequence"),
        ("(?x)a b", "invalid or unsupported Perl syntax"),
        ("(?'n'x)", "invalid or unsupported Perl syntax"),
        # RE2/J, not the C++ library
        ("\\C", "invalid escape sequence"),
        ("a\\Cb", "invalid escape sequence"),
        ("(?P<n>a)(?P<n>b)", "duplicate capture group name"),
        ("(?<n>a)(?P<n>b)", "duplicate capture group name"),
        ("(?P<é>a)", "invalid named capture"),
        ("(?P<>a)", "invalid named capture"),
        ("(?P<n", "invalid named capture"),
        # both
        ("*", "missing argument to repetition operator"),
        ("a|*", "missing argument to repetition operator"),
        ("x{1001}", "invalid repeat count"),
        ("x{2,1}", "invalid repeat count"),
        ("[z-a]", "invalid character class range"),
        ("[[:foo:]]", "invalid character class range"),
        ("\\p{Foo}", "invalid character class range"),
        ("\\8", "invalid escape sequence"),
        ("[\\Q]", "invalid escape sequence"),
        ("\\E", "invalid escape sequence"),
        ("(?z)", "invalid or unsupported Perl syntax"),
        ("(?i-)a", "invalid or unsupported Perl syntax"),
    ],
)
def test_re2j_refuses_with_its_description(pattern: str, description: str) -> None:
    with pytest.raises(regex.InvalidRegex) as refused:
        regex.validate(pattern)
    assert refused.value.description == description
    assert refused.value.message == (
        f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {description}."
    )


def test_the_first_error_is_described_as_re2j_meets_it() -> None:
    """An RE2/J-only error after a common one: the common one comes first."""
    with pytest.raises(regex.InvalidRegex) as refused:
        regex.validate("*\\C")
    assert refused.value.description == "missing argument to repetition operator"
    with pytest.raises(regex.InvalidRegex) as refused:
        regex.validate("(a\\C")
    assert refused.value.description == "invalid escape sequence"


def test_a_pattern_matches_whole_topic_names_only() -> None:
    """``matcher(topic).matches()``: the whole name, not a prefix or a substring."""
    topics = ["orders", "orders-eu", "old-orders", "ORDERS"]
    assert regex.matching("orders", topics) == ("orders",)
    assert regex.matching("orders.*", topics) == ("orders", "orders-eu")
    assert regex.matching(".*orders", topics) == ("orders", "old-orders")
    assert regex.matching("(?i)orders", topics) == ("orders", "ORDERS")
    assert regex.matching("o.d", ["old", "o\nd"]) == ("old",)
    assert regex.matches("a|ab", "ab")  # leftmost-first alternation still matches the whole
    with pytest.raises(regex.InvalidRegex):
        regex.matching("(?=x)", topics)
