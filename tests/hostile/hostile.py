"""Hostile inputs, shared by the campaigns in this folder: JSON texts built
byte by byte (so they can hold what a JSON encoder never writes: duplicate
names, NaN, lone surrogates, invalid UTF-8, nesting beyond any parser's
limit), header lists with null values and names that repeat, and the
documented dead-letter reasons the campaigns check every rejection against.

The strategies and :func:`records` (the seeded batch of the integration
test) draw from the same pools, so a value the property tests find is a
value the workers are fed too.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import orjson
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parent.parent.parent

#: Levels of nesting: under orjson's limit (1024), past it, and far past
#: Python's recursion limit (a user's codec built on ``json``).
DEPTHS = (3, 1_023, 1_025, 100_000)


def nested(depth: int, inner: bytes = b"1", kind: str = "list") -> bytes:
    if kind == "list":
        return b"[" * depth + inner + b"]" * depth
    return b'{"a":' * depth + inner + b"}" * depth


#: JSON fragments (valid or not) that land where a value is expected.
FRAGMENTS: tuple[bytes, ...] = (
    b"0",
    b"1",
    b"-1",
    b"2",
    b"9223372036854775807",  # 2^63 - 1
    b"9223372036854775808",  # 2^63
    b"18446744073709551616",  # 2^64
    b"-9223372036854775809",
    b"100000000000000000000000000000",
    b"1.0",
    b"1.5",
    b"-0.0",
    b"1e3",
    b"1e308",
    b"1e400",  # infinity as a double
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"true",
    b"false",
    b"null",
    b'""',
    b'" "',
    b'"\\t\\n"',
    b'"1"',
    b'"\\u0000"',
    b'"\\ud800"',  # a lone surrogate
    b'"\\udc00x"',
    b'"\xff"',  # invalid UTF-8
    b'"\xed\xa0\x80"',  # a surrogate in UTF-8 bytes (CESU-8)
    b'"\xc0\xaf"',  # an overlong encoding
    b'"caf\xc3\xa9"',
    b'"\xf0\x9f\x92\xa9"',
    b"[]",
    b"{}",
    b'{"":1}',
    b"[1,2,",
    b"01",
    b"+1",
    b".5",
    b"0x10",
    b"'single'",
)


def long_string(n: int) -> bytes:
    return b'"' + b"x" * n + b'"'


@st.composite
def fragments(draw: st.DrawFn) -> bytes:
    """A hostile JSON fragment: one of :data:`FRAGMENTS`, a deep nest, a
    long string, or a plain value."""
    kind = draw(st.sampled_from(["pool", "pool", "pool", "nest", "long", "text", "int"]))
    if kind == "pool":
        return draw(st.sampled_from(FRAGMENTS))
    if kind == "nest":
        depth = draw(st.sampled_from(DEPTHS))
        return nested(
            depth, draw(st.sampled_from(FRAGMENTS)), draw(st.sampled_from(["list", "obj"]))
        )
    if kind == "long":
        return long_string(draw(st.sampled_from([1_000, 70_000, 300_000])))
    if kind == "text":
        return orjson.dumps(draw(st.text(max_size=20)))
    return str(draw(st.integers())).encode()


def obj(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """A JSON object text from (name, value) texts, in order: a name may repeat."""
    return b"{" + b",".join(n + b":" + v for n, v in pairs) + b"}"


def name(text: str) -> bytes:
    return orjson.dumps(text)


#: Names a record's fields are also spelled with (whitespace, case, escapes).
NAME_VARIANTS = (b'"seq "', b'"Seq"', b'"se\\u0071"', b'"messageId\\u0000"')


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> bytes:
    """``base`` as a JSON object text with some of its fields hostile:
    replaced, removed, repeated (the copy first or last), or joined by
    look-alike names; sometimes wrapped, truncated or with stray bytes."""
    pairs = [(name(k), orjson.dumps(v)) for k, v in base.items()]
    for _ in range(draw(st.integers(0, 3))):
        if not pairs:
            break
        i = draw(st.integers(0, len(pairs) - 1))
        how = draw(st.sampled_from(["replace", "replace", "drop", "repeat", "repeat", "alias"]))
        if how == "replace":
            pairs[i] = (pairs[i][0], draw(fragments()))
        elif how == "drop":
            del pairs[i]
        elif how == "repeat":
            copy = (pairs[i][0], draw(fragments()))
            pairs.insert(draw(st.sampled_from([i, i + 1, len(pairs)])), copy)
        else:
            pairs.append((draw(st.sampled_from(NAME_VARIANTS)), draw(fragments())))
    text = obj(pairs)
    edge = draw(st.sampled_from(["none"] * 8 + ["ws", "trail", "cut", "bom", "wrap"]))
    if edge == "ws":
        text = b" \t\r\n" + text + b"\n "
    elif edge == "trail":
        text += draw(st.sampled_from([b"{}", b"\x00", b",", b"garbage"]))
    elif edge == "cut":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    elif edge == "bom":
        text = b"\xef\xbb\xbf" + text
    elif edge == "wrap":
        text = b"[" + text + b"]"
    return text


#: Header values: bytes of every kind, and None (Kafka's null header value).
HEADER_VALUES: tuple[bytes | None, ...] = (
    None,
    b"",
    b" ",
    b"1",
    b"0",
    b"-1",
    b" 1",
    b"1_0",
    b"+1",
    b"\xd9\xa1",  # an Arabic-Indic one
    b"\xff",
    b"\xed\xa0\x80",
    b"9223372036854775808",
    b"1" * 5000,
)


def header_values() -> st.SearchStrategy[bytes | None]:
    return st.one_of(st.sampled_from(HEADER_VALUES), st.binary(max_size=12))


def schema(name_: str) -> Draft202012Validator:
    doc = json.loads((ROOT / "schemas" / name_).read_text())
    return Draft202012Validator(doc)


def event_reasons() -> set[str]:
    """The reasons ``events.dlq`` documents (its schema's enum)."""
    doc = json.loads((ROOT / "schemas" / "dead-letter-headers.schema.json").read_text())
    return set(doc["properties"]["seqkeeper.reason"]["enum"])


def command_reasons() -> set[str]:
    """The reasons the README's topic contracts list for ``commands.dlq``."""
    readme = (ROOT / "README.md").read_text()
    at = readme.index("- **`commands.dlq`**")
    entry = readme[at : readme.index("\n- **", at + 1) if "\n- **" in readme[at + 1 :] else None]
    entry = entry.split("\n\n")[0]
    return set(re.findall(r"`([a-z]+(?:-[a-z]+)*)`", entry)) - {"commands.dlq"}


def loads_or_none(value: bytes | None) -> Any:
    """The JSON document a value holds as a strict reader sees it, or None."""
    if value is None:
        return None
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return None


def rng(seed: int) -> random.Random:
    return random.Random(seed)


# -- the seeded batch of the integration test --------------------------------

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]

#: Values each required event field must not hold (the event schema rejects
#: them all, or they are not JSON at all).
BAD_EVENT_FIELDS: dict[str, tuple[bytes, ...]] = {
    "messageId": (b'""', b"1", b"null", b"true", b"[]", b"{}", b'"\\ud800"', b"NaN"),
    "seq": (
        b"0",
        b"-1",
        b'"1"',
        b"true",
        b"null",
        b"1.5",
        b"9223372036854775808",
        b"1e400",
        b"[1]",
    ),
    "type": (b"1", b"null", b"true", b"[]", b"{}", b"Infinity"),
}


def hostile_headers(r: random.Random) -> list[tuple[str, bytes | None]]:
    """Up to three headers: null values, non-UTF-8 bytes, names repeated."""
    names = ["traceparent", "x", "tenant", "seq", ""]
    return [(r.choice(names), r.choice(HEADER_VALUES)) for _ in range(r.randrange(4))]


def hostile_events(r: random.Random, n: int) -> list[Record]:
    """``n`` records no event contract accepts: each breaks it in one of
    several ways (the key, the value's bytes, its shape, a required field)."""
    out: list[Record] = []
    good = {"messageId": "h", "seq": 1, "type": "t", "data": {"a": 1}}
    for i in range(n):
        value: bytes | None = orjson.dumps({**good, "messageId": f"h{i}"})
        key: bytes | None = b"hk%d" % (i % 7)
        how = r.choice(
            ["key", "null", "bytes", "not-object", "deep", "field", "field", "drop", "repeat"]
        )
        if how == "key":
            key = r.choice([None, b"", b"\xff", b"\xed\xa0\x80", b"a\xc0\xafb"])
        elif how == "null":
            value = None
        elif how == "bytes":
            value = r.choice(
                [b"", b"\xff{}", b"{", b'{"messageId":"\xff","seq":1,"type":"t"}', b"NaN"]
            )
        elif how == "not-object":
            value = r.choice([b"[]", b'"x"', b"1", b"null", nested(r.choice(DEPTHS))])
        elif how in ("field", "repeat"):
            field = r.choice(list(BAD_EVENT_FIELDS))
            bad = r.choice(BAD_EVENT_FIELDS[field])
            pairs = [(name(k), orjson.dumps(v)) for k, v in good.items()]
            at = [p[0] for p in pairs].index(name(field))
            if how == "field":
                pairs[at] = (name(field), bad)
            else:  # given twice, the last one bad
                pairs.append((name(field), bad))
            value = obj(pairs)
        else:  # drop a required field
            dropped = r.choice(list(BAD_EVENT_FIELDS))
            value = orjson.dumps({k: v for k, v in good.items() if k != dropped})
        out.append((key, value, hostile_headers(r)))
    return out


def hostile_commands(r: random.Random, n: int, reply_to: str) -> list[tuple[Record, str]]:
    """``n`` commands, each with the dead-letter reason it must get."""
    out: list[tuple[Record, str]] = []
    for i in range(n):
        doc: dict[str, Any] = {
            "messageId": f"h{i}",
            "commandType": "AddStock",
            "schemaVersion": 1,
            "correlationId": f"hc{i}",
            "partitionKey": "sku-h",
            "tenantId": "t1",
            "replyTo": reply_to,
            "payload": {"quantity": 1},
        }
        key: bytes | None = b"sku-h"
        headers = [h for h in hostile_headers(r) if h[0] != "tenant"]
        raw: bytes | None = None
        how = r.choice(["field", "field", "bytes", "key", "tenant", "type", "version", "deep"])
        reason = "invalid-envelope"
        if how == "field":
            field, bad = r.choice([
                ("messageId", b'""'), ("messageId", b"1"), ("commandType", b"null"),
                ("schemaVersion", b"0"), ("schemaVersion", b"true"), ("schemaVersion", b"1.5"),
                ("correlationId", b"[]"), ("partitionKey", b"{}"), ("tenantId", b'""'),
                ("expectedVersion", b"-1"), ("expectedVersion", b"true"), ("expectedVersion", b'"0"'),
                ("expiresAt", b"-1"), ("expiresAt", b'"10000-01-01T00:00:00+00:00"'),
                ("expiresAt", b'"2030-01-01T00:00:00"'), ("expiresAt", b"NaN"), ("headers", b"[]"),
                ("replyTo", b'""'), ("causationId", b"1"), ("payload", b"Infinity"),
            ])  # fmt: skip
            pairs = [(name(k), orjson.dumps(v)) for k, v in doc.items()]
            pairs.append((name(field), bad))  # given last: the one read
            raw = obj(pairs)
        elif how == "bytes":
            raw = r.choice([None, b"", b"\xff", b"[]", b'{"messageId":"\xff"}', b"{"])
        elif how == "key":
            key = r.choice([None, b"", b"\xff", b"SKU-H", b"sku-h\x00"])
            reason = "key-mismatch"
        elif how == "tenant":
            headers.extend(r.choice([
                [("tenant", b"t2")], [("tenant", b"t1"), ("tenant", b"t2")], [("tenant", None)], [("tenant", b"\xff")],
            ]))  # fmt: skip
            reason = "tenant-mismatch"
        elif how == "type":
            doc["commandType"] = r.choice(["addstock", "AddStock ", "Nope", "x" * 5000])
            reason = "unknown-command-type"
        elif how == "version":
            doc["schemaVersion"] = r.choice([2, 9, 2**63 - 1])
            reason = "unsupported-schema-version"
        else:
            raw = orjson.dumps(doc).replace(b'{"quantity":1}', nested(r.choice(DEPTHS[1:])))
            if raw.count(b"[") <= 1023:  # within orjson's limit: read, then refused by no rule
                raw = orjson.dumps({**doc, "payload": None, "commandType": "Nope"})
                reason = "unknown-command-type"
        value = orjson.dumps(doc) if raw is None and how not in ("bytes",) else raw
        out.append(((key, value, headers), reason))
    return out
