"""A corpus of bad and borderline input, each case with what the worker must
do with it: dead-letter it with a given reason, or apply a documented policy.

Every case has a key of its own (``<tag>-<n>``), so the expectations do not
depend on one another and a chaos run can check each one separately.
Policies (README, "Semantics"):

* ``emitted``   — valid (odd but legal): emitted to the ordered output once
* ``dropped``   — a redelivery (same messageId): emitted once, the copy dropped
* ``reply:ok`` / ``reply:failed`` / ``reply:expired`` — a command answered so
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from seqkeeper.processors.command import CommandReason
from seqkeeper.processors.envelope import MAX_SEQ, Reason

EMITTED, DROPPED = "emitted", "dropped"


@dataclass(frozen=True)
class Case:
    name: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    #: a dead-letter reason, or a policy (module docstring)
    expect: str = EMITTED
    #: records sent before this one on the same key (for duplicates, conflicts)
    before: tuple[tuple[bytes | None, bytes | None], ...] = ()


def _event(key: str, **fields: Any) -> bytes:
    doc: dict[str, Any] = {"messageId": f"{key}-m", "seq": 1, "type": "T", "data": {}}
    doc.update(fields)
    return orjson.dumps({k: v for k, v in doc.items() if v is not _DROP})


_DROP = object()


def ordered_cases(tag: str, max_bytes: int = 1_000_000) -> list[Case]:
    """Cases for the ordered/deduplicated worker (``max_bytes``: the
    broker's record limit; the oversized case stays under it, leaving room
    for the dead-letter headers)."""
    r = Reason
    # name, value (given the case's key) or raw bytes, expectation, Kafka key
    # (None: the case's own key)
    raw: list[tuple[str, Any, str, bytes | None | str]] = []

    def add(name: str, value: Any, expect: str, key: bytes | None | str = "own") -> None:
        raw.append((name, value, expect, key))

    def fields(**over: Any) -> Any:
        return lambda k: _event(k, **over)

    add("malformed JSON", b"{oops", r.INVALID_JSON)
    add("truncated JSON", b'{"messageId":"x","seq":1', r.INVALID_JSON)
    add("trailing garbage", b'{"messageId":"x","seq":1,"type":"T"} x', r.INVALID_JSON)
    add("empty value", b"", r.INVALID_JSON)
    add("whitespace only", b"   \n", r.INVALID_JSON)
    add("NaN literal", b'{"messageId":"x","seq":NaN,"type":"T"}', r.INVALID_JSON)
    add("single quotes", b"{'messageId':'x','seq':1,'type':'T'}", r.INVALID_JSON)
    add("byte order mark", b'\xef\xbb\xbf{"messageId":"x","seq":1,"type":"T"}', r.INVALID_UTF8)
    add("invalid UTF-8", b'{"messageId":"\xff\xfe","seq":1,"type":"T"}', r.INVALID_UTF8)
    add("UTF-16 JSON", '{"messageId":"x","seq":1}'.encode("utf-16"), r.INVALID_UTF8)
    add("lone surrogate escape", b'{"messageId":"\\ud800","seq":1,"type":"T"}', r.INVALID_JSON)
    add("too deeply nested", b"[" * 2000 + b"]" * 2000, r.INVALID_JSON)
    add(
        "seq above 2^64",
        b'{"messageId":"x","seq":18446744073709551616,"type":"T"}',
        r.INVALID_FIELD,
    )
    add("oversized malformed payload", b"{" + b"x" * (max_bytes - 4096), r.INVALID_JSON)
    add("null value (tombstone)", None, r.NULL_VALUE)
    add("JSON array", b"[1,2,3]", r.NOT_AN_OBJECT)
    add("JSON string", b'"hello"', r.NOT_AN_OBJECT)
    add("JSON number", b"42", r.NOT_AN_OBJECT)
    add("JSON null", b"null", r.NOT_AN_OBJECT)
    add("JSON true", b"true", r.NOT_AN_OBJECT)
    add("missing messageId", fields(messageId=_DROP), r.MISSING_FIELD)
    add("missing seq", fields(seq=_DROP), r.MISSING_FIELD)
    add("missing type", fields(type=_DROP), r.MISSING_FIELD)
    add("empty messageId", fields(messageId=""), r.INVALID_FIELD)
    add("numeric messageId", fields(messageId=7), r.INVALID_FIELD)
    add("null messageId", fields(messageId=None), r.INVALID_FIELD)
    add("object messageId", fields(messageId={"id": 1}), r.INVALID_FIELD)
    add("seq 0", fields(seq=0), r.INVALID_FIELD)
    add("negative seq", fields(seq=-5), r.INVALID_FIELD)
    add("seq above 2^63-1", fields(seq=MAX_SEQ + 1), r.INVALID_FIELD)
    add("fractional seq", fields(seq=1.5), r.INVALID_FIELD)
    add("float seq 1.0", fields(seq=1.0), r.INVALID_FIELD)
    add(
        "seq in exponent form",
        lambda k: _event(k).replace(b'"seq":1', b'"seq":1e0'),
        r.INVALID_FIELD,
    )
    add("string seq", fields(seq="1"), r.INVALID_FIELD)
    add("boolean seq", fields(seq=True), r.INVALID_FIELD)
    add("null seq", fields(seq=None), r.INVALID_FIELD)
    add("list seq", fields(seq=[1]), r.INVALID_FIELD)
    add("numeric type", fields(type=3), r.INVALID_FIELD)
    add("null type", fields(type=None), r.INVALID_FIELD)
    add("string metadata", fields(metadata="x"), r.INVALID_FIELD)
    add("list metadata", fields(metadata=[1]), r.INVALID_FIELD)
    add("empty key", fields(), r.MISSING_KEY, key=b"")
    add("null key", fields(), r.MISSING_KEY, key=None)
    add("key not UTF-8", fields(), r.INVALID_KEY, key=b"\xff\xfe\xfd")
    # valid, if odd: the documented policy is to accept them
    add("unknown extra fields", fields(extra={"nested": [1, 2]}, schemaVersion=99), EMITTED)
    add("huge key (64 KiB)", fields(), EMITTED, key=b"k" * 65536)
    add("key with NUL bytes", fields(), EMITTED, key=b"a\x00b")
    add("emoji key", fields(), EMITTED, key="🔑-ключ".encode())
    add("huge messageId (16 KiB)", fields(messageId="i" * 16384), EMITTED)
    add(
        "duplicate JSON keys (last wins)",
        lambda k: b'{"messageId":"%s-m","seq":1,"type":"T","type":"U"}' % k.encode(),
        EMITTED,
    )
    add("large valid payload", fields(data={"blob": "x" * (max_bytes // 4)}), EMITTED)

    cases: list[Case] = []
    for n, (name, value, expect, key) in enumerate(raw):
        own = f"{tag}-{n}"
        if key == "own":
            the_key: bytes | None = own.encode()
        elif isinstance(key, bytes) and key and expect == EMITTED:
            the_key = key + own.encode()  # odd keys, still one per case
        else:
            the_key = key if isinstance(key, bytes) or key is None else own.encode()
        the_value = value(own) if callable(value) else value
        cases.append(Case(name, the_key, the_value, expect=expect))
    # sequences: redelivery and conflict
    k = f"{tag}-dup"
    first = _event(k)
    cases.append(
        Case(
            "redelivered message (same bytes)",
            k.encode(),
            first,
            (),
            DROPPED,
            ((k.encode(), first),),
        )
    )
    k = f"{tag}-dupid"
    cases.append(
        Case(
            "same messageId, other bytes (the id wins)",
            k.encode(),
            _event(k, data={"other": True}),
            (),
            DROPPED,
            ((k.encode(), _event(k)),),
        )
    )
    k = f"{tag}-conflict"
    cases.append(
        Case(
            "same seq, another messageId",
            k.encode(),
            _event(k, messageId=f"{k}-other"),
            (),
            Reason.SEQUENCE_CONFLICT,
            ((k.encode(), _event(k)),),
        )
    )
    return cases


def command_cases(tag: str, reply_to: str) -> list[Case]:
    """Cases for the command worker."""
    c = CommandReason

    def cmd(n: int, **over: Any) -> tuple[bytes, bytes]:
        key = f"{tag}-sku-{n}"
        doc: dict[str, Any] = {
            "messageId": f"{tag}-c{n}",
            "commandType": "AddStock",
            "schemaVersion": 1,
            "correlationId": f"{tag}-corr",
            "partitionKey": key,
            "tenantId": "tenant-a",
            "replyTo": reply_to,
            "payload": {"quantity": 2},
        }
        doc.update(over)
        return key.encode(), orjson.dumps({k: v for k, v in doc.items() if v is not _DROP})

    out: list[Case] = []

    def add(name: str, kv: tuple[bytes, bytes | None], expect: str, **kw: Any) -> None:
        out.append(Case(name, kv[0], kv[1], expect=expect, **kw))

    add("command: not JSON", (cmd(0)[0], b"{nope"), c.INVALID_ENVELOPE)
    add("command: null value", (cmd(1)[0], None), c.INVALID_ENVELOPE)
    add("command: JSON array", (cmd(2)[0], b"[]"), c.INVALID_ENVELOPE)
    add("command: missing commandType", cmd(3, commandType=_DROP), c.INVALID_ENVELOPE)
    add("command: missing payload", cmd(4, payload=_DROP), c.INVALID_ENVELOPE)
    add("command: bad expiresAt", cmd(5, expiresAt="soon"), c.INVALID_ENVELOPE)
    key, value = cmd(6)
    add("command: partitionKey is not the Kafka key", (b"elsewhere-" + key, value), c.KEY_MISMATCH)
    add(
        "command: another tenant's header",
        cmd(7),
        c.TENANT_MISMATCH,
        headers=(("tenant", b"tenant-b"),),
    )
    add("command: unknown commandType", cmd(8, commandType="Teleport"), c.UNKNOWN_COMMAND_TYPE)
    add(
        "command: unsupported schemaVersion", cmd(9, schemaVersion=99), c.UNSUPPORTED_SCHEMA_VERSION
    )
    add("command: expired", cmd(10, expiresAt="2020-01-01T00:00:00+00:00"), "reply:expired")
    add("command: expectedVersion conflict", cmd(11, expectedVersion=5), "reply:failed")
    add(
        "command: domain error (negative quantity)",
        cmd(12, payload={"quantity": -3}),
        "reply:failed",
    )
    add(
        "command: release without reservation",
        cmd(13, commandType="ReleaseInventory", payload={"orderId": "none"}),
        "reply:failed",
    )
    dup = cmd(14)
    add("command: duplicated", dup, "reply:ok", before=(dup, dup))
    return out
