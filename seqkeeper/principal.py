"""The principal Kafka names a client by, as the broker derives it, so that
``seqkeeper acls`` and every missing-ACL line grant the user the broker
actually authorizes.

* SASL: the SASL user (``User:<name>``).
* TLS with a client certificate and no SASL (mTLS): Kafka's
  ``DefaultKafkaPrincipalBuilder`` takes the certificate's subject as
  ``X500Principal.getName()`` renders it (RFC 2253: :func:`rfc2253`) and
  maps it with the broker's ``ssl.principal.mapping.rules``
  (``SslPrincipalMapper``: :class:`PrincipalMapper`). Without rules the
  principal is the whole distinguished name, ``User:CN=worker-a,OU=...``.
* Neither: Kafka names the client ``User:ANONYMOUS``, which every other
  unauthenticated client shares; granting it would give them all the same
  rights, so callers say so instead (:func:`anonymous_reason`).

Both are ports of Kafka 4.1 (``clients/.../security/ssl/SslPrincipalMapper``)
and OpenJDK 17 (``sun.security.x509.AVA.toRFC2253String``,
``X500Name.getRFC2253Name``), down to their quirks, because a principal
that differs by one character from the broker's is a grant that matches
nothing: ``tests/test_principal.py`` compares both with the JVM's own on
generated names and rules.

The rules' patterns are Java regular expressions, read here with Python's
``re`` (ASCII classes and case folding, as Java's defaults; ``(?<name>)``
groups and ``${name}`` references are translated). The two agree on what
mapping rules use (classes, groups, anchors, quantifiers); a construct
``re`` lacks (``\\p{..}``, ``\\Q..\\E``) is refused naming the rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Kafka's default for ``ssl.principal.mapping.rules``.
DEFAULT_RULES = "DEFAULT"


class MappingError(ValueError):
    """A mapping rule Kafka would refuse, or a name no rule maps: the
    message names the rule or the name."""


# -- SslPrincipalMapper ------------------------------------------------------

# Kafka's patterns, as its source spells them (re.ASCII: Java's \s is ASCII).
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)", re.ASCII)
_PARSER = re.compile(_RULE, re.ASCII)
_BACK_REFERENCE = re.compile(r"\$([0-9]+)")
_NAMED_GROUP = re.compile(r"(?<!\\)((?:\\\\)*)\(\?<([a-zA-Z][a-zA-Z0-9]*)>")
#: Java's line terminators: its ``.`` and ``$`` treat them apart from
#: Python's, so a rule holding one is refused rather than read otherwise.
_LINE_BREAKS = "\n\r\x85\u2028\u2029"
_INT_MAX = 2**31 - 1


def _java_trim(text: str) -> str:
    """``String.trim()``: every character up to U+0020 off both ends."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def _escape_literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's ``Rule.escapeLiteralBackReferences`` (from Apache NiFi): a
    ``$n`` naming a group the pattern lacks becomes a literal ``$n``, after
    cutting digits off as Java's own reading of ``$123`` does. Its offsets
    are those of the unescaped text while it inserts into the escaped one,
    as Kafka's are: a second such reference lands one character early."""
    if groups == 0:
        return replacement
    value = replacement
    for m in _BACK_REFERENCE.finditer(replacement):
        digits = m.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        if index > _INT_MAX:  # (Integer.parseInt refuses it)
            raise MappingError(f"back reference ${digits} is out of range")
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = m.start(1)
            value = value[: start - 1] + "\\" + value[start - 1 :]
    return value


def _expand(replacement: str, match: re.Match[str]) -> str:
    """Java's ``Matcher.appendReplacement`` text for ``match``: ``\\x`` is
    ``x``, ``$n`` the group (the longest number not above the group count),
    ``${name}`` the named group; a missing group adds nothing."""
    out: list[str] = []
    groups = match.re.groups
    i, n = 0, len(replacement)
    while i < n:
        c = replacement[i]
        if c == "\\":
            i += 1
            if i == n:
                raise MappingError("character to be escaped is missing")
            out.append(replacement[i])
            i += 1
        elif c == "$":
            i += 1
            if i == n:
                raise MappingError("illegal group reference: group index is missing")
            ref: int | str
            if replacement[i] == "{":
                end = replacement.find("}", i)
                name = replacement[i + 1 : end] if end > 0 else ""
                if (
                    end < 0
                    or not name
                    or not ("a" <= name[0].lower() <= "z")
                    or not all(ch.isascii() and ch.isalnum() for ch in name)
                ):
                    raise MappingError("named capturing group is missing trailing '}'")
                if name not in match.re.groupindex:
                    raise MappingError(f"no group with name {{{name}}}")
                ref, i = name, end + 1
            else:
                if not "0" <= replacement[i] <= "9":
                    raise MappingError("illegal group reference")
                number = ord(replacement[i]) - 48
                i += 1
                while i < n and "0" <= replacement[i] <= "9":
                    longer = number * 10 + ord(replacement[i]) - 48
                    if longer > groups:
                        break
                    number, i = longer, i + 1
                if number > groups:
                    raise MappingError(f"no group {number}")
                ref = number
            out.append(match.group(ref) or "")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _java_pattern(pattern: str) -> re.Pattern[str]:
    """A rule's Java pattern, compiled by ``re`` as Java reads it."""
    try:
        return re.compile(_NAMED_GROUP.sub(r"\1(?P<\2>", pattern), re.ASCII)
    except re.error as e:
        raise MappingError(f"pattern {pattern!r}: {e}") from None


@dataclass(frozen=True)
class Rule:
    """One rule: ``DEFAULT`` (``pattern`` None: the name as it is), or
    ``RULE:pattern/replacement/[LU]``."""

    pattern: str | None = None
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, name: str) -> str | None:
        """The mapped name, or None when the pattern does not match all of ``name``."""
        if self.pattern is None:
            return name
        compiled = _java_pattern(self.pattern)
        if not compiled.fullmatch(name):
            return None
        template = _escape_literal_back_references(self.replacement, compiled.groups)
        # (String.replaceAll: every match, as Kafka does after matches())
        result = "".join(
            piece if m is None else _expand(template, m) for piece, m in _java_finds(compiled, name)
        )
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        case = "/L" if self.lower else "/U" if self.upper else ""
        return f"RULE:{self.pattern}/{self.replacement}{case}"


def _java_finds(pattern: re.Pattern[str], text: str) -> Iterator[tuple[str, re.Match[str] | None]]:
    """``text`` cut by Java's ``Matcher.find()`` loop: the text between
    matches (with None) and each match. After an empty match Java moves one
    character on, where ``re.sub`` and ``finditer`` try a longer match at
    the same place ("CN=" with ``|(.+)``: Java replaces three empty matches,
    ``re`` the whole name)."""
    pos = last = 0
    while pos <= len(text):
        m = pattern.search(text, pos)
        if m is None:
            break
        yield text[last : m.start()], None
        yield "", m
        last = m.end()
        pos = m.end() + (1 if m.end() == m.start() else 0)
    yield text[last:], None


def _split(text: str) -> list[str]:
    """``SslPrincipalMapper.splitRules``: the rules Java's ``find()`` loop finds."""
    return [m.group(1) for _, m in _java_finds(_SPLITTER, text) if m is not None]


def parse_rules(text: str) -> tuple[Rule, ...]:
    """The rules of an ``ssl.principal.mapping.rules`` value, as Kafka
    parses them (empty rules ignored); a :class:`MappingError` for one Kafka
    refuses, or whose pattern cannot be read."""
    if any(c in _LINE_BREAKS for c in _java_trim(text)):
        raise MappingError("the rules hold a line break: give them on one line")
    rules = []
    for rule in _split(_java_trim(text)):
        m = _PARSER.match(rule)
        if m is None:
            raise MappingError(f"invalid rule: {rule}")
        if m.end() != len(rule):
            raise MappingError(f"invalid rule: `{rule}`, unmatched substring: `{rule[m.end() :]}`")
        if m.group(1) is not None:
            rules.append(Rule())
        elif m.group(2) is not None:
            parsed = Rule(m.group(2), m.group(4), m.group(6) == "L", m.group(6) == "U")
            _java_pattern(parsed.pattern or "")  # (refused now, not at the first name)
            rules.append(parsed)
    return tuple(rules)


class PrincipalMapper:
    """Kafka's ``SslPrincipalMapper``: the first rule that maps a name wins."""

    def __init__(self, rules: str = DEFAULT_RULES) -> None:
        self.rules = parse_rules(rules)

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            try:
                mapped = rule.apply(distinguished_name)
            except MappingError as e:
                raise MappingError(f"rule {rule}: {e}") from None
            if mapped is not None:
                return mapped
        raise MappingError(
            f"no rule applies to {distinguished_name!r} (the broker refuses such a "
            "certificate); end the rules with DEFAULT"
        )


# -- X500Principal.getName() -------------------------------------------------

#: The attribute types RFC 2253 names by keyword (OpenJDK's AVAKeyword
#: table, those ``rfc2253Compliant``); any other is written as its OID.
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
#: DER string tags whose value is written as text (OpenJDK's ``isDerString``:
#: UTF8String, PrintableString, T61String, IA5String, GeneralString,
#: BMPString); any other value is ``#`` and the hex of its encoding.
STRING_TAGS = frozenset({0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E})
_ESCAPED = ',=+<>#;"\\'


def _tlv(der: bytes, pos: int) -> tuple[int, int, int]:
    """The DER element at ``pos``: its tag, where its content starts, where it ends."""
    try:
        tag = der[pos]
        length = der[pos + 1]
        start = pos + 2
        if length & 0x80:
            size = length & 0x7F
            length = int.from_bytes(der[start : start + size], "big")
            start += size
    except IndexError:
        raise ValueError("truncated DER") from None
    if tag & 0x1F == 0x1F or start + length > len(der):
        raise ValueError("unsupported or truncated DER")
    return tag, start, start + length


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """The elements between ``start`` and ``end``: (tag, element start, content start, end)."""
    out = []
    while start < end:
        tag, content, stop = _tlv(der, start)
        out.append((tag, start, content, stop))
        start = stop
    return out


def _oid(content: bytes) -> str:
    arcs, value = [], 0
    for b in content:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise ValueError("empty OID")
    first = arcs[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(str(a) for a in head + arcs[1:])


def _value(tag: int, encoded: bytes, data: bytes, keyword: str) -> str:
    """``AVA.toRFC2253String``'s value: escaped text, or ``#`` and hex."""
    if keyword[0].isdigit() or tag not in STRING_TAGS:
        return "#" + encoded.hex()
    text = data.decode("utf-8", "replace")  # (Java decodes every string type so)
    chars: list[str] = []
    for c in text:
        if c in _ESCAPED:
            chars += ["\\", c]
        elif c == "\0":
            chars += ["\\", "0", "0"]
        else:
            chars.append(c)
    lead = 0
    while lead < len(chars) and chars[lead] in " \r":
        lead += 1
    trail = len(chars) - 1
    while trail >= 0 and chars[trail] in " \r":
        trail -= 1
    return "".join(("\\" + c) if i < lead or i > trail else c for i, c in enumerate(chars))


def rfc2253(name: bytes) -> str:
    """A DER-encoded X.500 name as Java's ``X500Principal.getName()``
    writes it: the last RDN first, ``,`` between RDNs, ``+`` between the
    attributes of one (in their encoded order); RFC 2253 keywords, other
    types as OIDs with ``#``-hex values; ``,=+<>#;"\\`` escaped anywhere,
    NUL as ``\\00``, leading and trailing spaces escaped. A
    :class:`ValueError` for bytes that are not such a name."""
    tag, start, end = _tlv(name, 0)
    if tag != 0x30 or end != len(name):
        raise ValueError("not a DER name")
    rdns = []
    for rdn_tag, _, rdn_start, rdn_end in _children(name, start, end):
        if rdn_tag != 0x31:
            raise ValueError("not a DER name")
        avas = []
        for ava_tag, _, ava_start, ava_end in _children(name, rdn_start, rdn_end):
            parts = _children(name, ava_start, ava_end) if ava_tag == 0x30 else []
            if len(parts) != 2 or parts[0][0] != 0x06:
                raise ValueError("not a DER name")
            (_, _, oid_start, oid_end), (value_tag, value_at, data_at, value_end) = parts
            oid = _oid(name[oid_start:oid_end])
            keyword = KEYWORDS.get(oid, oid)
            value = _value(value_tag, name[value_at:value_end], name[data_at:value_end], keyword)
            avas.append(f"{keyword}={value}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def certificate_subject(certfile: str) -> bytes:
    """The DER subject of the first certificate in the PEM file ``certfile``
    (the one a TLS client presents), as encoded in the certificate."""
    from cryptography import x509

    data = Path(certfile).read_bytes()
    try:
        [first, *_] = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ValueError("it holds no PEM certificate") from None
    # (the subject as encoded, from the signed part: the 6th field, or 5th without a version)
    tbs = first.tbs_certificate_bytes
    _, start, end = _tlv(tbs, 0)
    fields = _children(tbs, start, end)
    subject = fields[5] if fields[0][0] == 0xA0 else fields[4]
    return tbs[subject[1] : subject[3]]


def certificate_principal(certfile: str, rules: str = DEFAULT_RULES) -> str:
    """The name of ``User:<name>`` that a broker with
    ``ssl.principal.mapping.rules=rules`` gives the client presenting the
    certificate in ``certfile``."""
    return PrincipalMapper(rules).name(rfc2253(certificate_subject(certfile)))


def anonymous_reason(protocol: str) -> str:
    """Why a client with ``protocol``, no SASL user and no certificate has
    no principal of its own, and what to do."""
    return (
        f"the clients connect with {protocol}, without a SASL user or a client certificate, "
        "so Kafka names them User:ANONYMOUS, as every other unauthenticated client: "
        "granting that would give them all these rights; set SEQKEEPER_SASL_USERNAME "
        "(SASL_SSL) or SEQKEEPER_SSL_CERTFILE (SSL, a client certificate)"
    )
