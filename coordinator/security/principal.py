"""Kafka's principals: ``User:ANONYMOUS``, ``User:<SASL authorization id>``, and for a TLS
client certificate ``User:<the subject's distinguished name>`` as Kafka's
``DefaultKafkaPrincipalBuilder`` makes it: Java's ``X500Principal.getName()``, RFC 2253 form
then mapped by ``ssl.principal.mapping.rules`` (:class:`PrincipalMapper`).

Java's RFC 2253 form, which this reproduces from the certificate's DER bytes: the relative
distinguished names last to first, joined by ``,``; the attributes of a multi-valued one joined
by ``+``; the keywords CN, C, L, ST, O, OU, STREET, DC and UID, any other attribute as its
dotted OID with the value's DER encoding in hex (``1.2.840.113549.1.9.1=#16...`` for an
e-mail address); in values ``,=+<>#;\\"`` escaped with a backslash, and leading and trailing
spaces too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"

#: Java's RFC 2253 keywords (``AVAKeyword`` entries marked RFC 2253 compliant).
KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
#: DER string types Java prints as text (``isDerString``): UTF8String, PrintableString,
#: T61String, IA5String, GeneralString, BMPString.
_TEXT_TAGS = {0x0C: "utf-8", 0x13: "latin-1", 0x14: "latin-1", 0x16: "latin-1", 0x1B: "latin-1"}
_BMP = 0x1E
_ESCAPED = ',=+<>#;\\"'


class CertificateError(ValueError):
    """DER bytes that are not an X.509 certificate this module can read."""


def _tlv(data: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at ``at``."""
    if at + 2 > len(data):
        raise CertificateError("truncated DER")
    tag, length = data[at], data[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or at + count > len(data):
            raise CertificateError("bad DER length")
        length = int.from_bytes(data[at : at + count], "big")
        at += count
    if at + length > len(data):
        raise CertificateError("truncated DER")
    return tag, at, at + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, value start, value end, element start) of each element in data[start:end]."""
    out = []
    at = start
    while at < end:
        tag, vstart, vend = _tlv(data, at)
        out.append((tag, vstart, vend, at))
        at = vend
    return out


def _oid(raw: bytes) -> str:
    if not raw:
        raise CertificateError("empty OID")
    parts = [raw[0] // 40, raw[0] % 40] if raw[0] < 80 else [2, raw[0] - 80]
    value = 0
    for byte in raw[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(str(p) for p in parts)


def subject_rdns(der: bytes) -> list[list[tuple[str, int, bytes, bytes]]]:
    """The certificate's subject: its RDNs in DER order, each a list of (OID, value tag,
    value bytes, the value's whole DER element)."""
    tag, start, end = _tlv(der, 0)  # Certificate
    tbs_tag, tstart, tend, _ = _children(der, start, end)[0]
    if tag != 0x30 or tbs_tag != 0x30:
        raise CertificateError("not a certificate")
    fields = _children(der, tstart, tend)
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5:
        raise CertificateError("certificate without a subject")
    s_tag, s_start, s_end, _ = fields[4]
    if s_tag != 0x30:
        raise CertificateError("subject is not a SEQUENCE")
    rdns = []
    for set_tag, set_start, set_end, _ in _children(der, s_start, s_end):
        if set_tag != 0x31:
            raise CertificateError("RDN is not a SET")
        avas = []
        for _, a_start, a_end, _ in _children(der, set_start, set_end):
            (o_tag, o_start, o_end, _), (v_tag, v_start, v_end, v_at) = _children(
                der, a_start, a_end
            )[:2]
            if o_tag != 0x06:
                raise CertificateError("attribute type is not an OID")
            avas.append((_oid(der[o_start:o_end]), v_tag, der[v_start:v_end], der[v_at:v_end]))
        rdns.append(avas)
    return rdns


def _escape(value: str) -> str:
    escaped = "".join("\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in value)
    lead = len(escaped) - len(escaped.lstrip(" \r"))
    trail = len(escaped.rstrip(" \r"))
    if lead >= len(escaped):
        return "".join("\\" + c for c in escaped)
    return (
        "".join("\\" + c for c in escaped[:lead])
        + escaped[lead:trail]
        + "".join("\\" + c for c in escaped[trail:])
    )


def _ava(oid: str, tag: int, value: bytes, element: bytes) -> str:
    keyword = KEYWORDS.get(oid)
    text: str | None = None
    if tag in _TEXT_TAGS:
        text = value.decode(_TEXT_TAGS[tag], "replace")
    elif tag == _BMP:
        text = value.decode("utf-16-be", "replace")
    if keyword is None or text is None:
        return f"{keyword or oid}=#{element.hex()}"
    return f"{keyword}={_escape(text)}"


def rfc2253_name(der: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()``."""
    return ",".join("+".join(_ava(*ava) for ava in rdn) for rdn in reversed(subject_rdns(der)))


def from_certificate(der: bytes, mapper: PrincipalMapper | None = None) -> str:
    """The principal Kafka's default builder gives a TLS client with this certificate (its
    name through ``ssl.principal.mapping.rules``; raises :class:`NoMatchingRule`)."""
    name = rfc2253_name(der)
    return f"User:{name if mapper is None else mapper.name(name)}"


def from_sasl(authorization_id: str) -> str:
    return f"User:{authorization_id}"


# --- ssl.principal.mapping.rules --------------------------------------------------------------

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule applies to a certificate's name: Kafka refuses
    the connection."""


@dataclass(frozen=True)
class _MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self._expand, name)
        return (
            result.lower() if self.case == "L" else result.upper() if self.case == "U" else result
        )

    def _expand(self, match: re.Match[str]) -> str:
        """Java's replacement syntax: ``\\x`` is x, ``$n`` group n (as many digits as name an
        existing group); a ``$n`` beyond the groups stays literal, as Kafka escapes it."""
        template, out, i = self.replacement, [], 0
        groups = match.re.groups
        while i < len(template):
            c = template[i]
            if c == "\\" and i + 1 < len(template):
                out.append(template[i + 1])
                i += 2
            elif c == "$" and i + 1 < len(template) and template[i + 1].isdigit():
                j = i + 1
                number = int(template[j])
                if number > groups:
                    out.append(c)
                    i += 1
                    continue
                j += 1
                while j < len(template) and template[j].isdigit():
                    longer = number * 10 + int(template[j])
                    if longer > groups:
                        break
                    number, j = longer, j + 1
                out.append(match.group(number) or "")
                i = j
            else:
                out.append(c)
                i += 1
        return "".join(out)


class PrincipalMapper:
    """Kafka's ``SslPrincipalMapper``: ``ssl.principal.mapping.rules`` (``DEFAULT``, or
    ``RULE:pattern/replacement/[LU]`` entries, comma-separated), the first rule whose pattern
    matches the whole distinguished name giving the principal's name."""

    def __init__(self, rules: str | None = None) -> None:
        text = (rules or "DEFAULT").strip()
        self.rules: list[_MappingRule] = []
        for split in _RULE_SPLITTER.finditer(text):
            rule = split[1]
            match = _RULE_PARSER.match(rule)
            if match is None or match.end() != len(rule):
                raise ValueError(f"Invalid rule: `{rule}`")
            if match[1] is not None:
                self.rules.append(_MappingRule(None))
            elif match[2] is not None:
                self.rules.append(_MappingRule(re.compile(match[2]), match[3], match[4]))
            if split.end() >= len(text):
                break

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {distinguished_name}")
