"""A hostile-input campaign on the command topology, driven without a broker
(an in-memory store, as ``tests/topologies/test_tenants.py`` drives it).

Each drawn record is labelled with what must become of it, decided here and
not by the code under test: applied (the handler called once, the entity one
version on, a success reply), refused (a failure reply, nothing changed) or
dead-lettered with a given reason. Spoofed and repeated tenant headers,
Kafka keys that differ from ``partitionKey`` only once decoded, null and
non-UTF-8 headers, ``expiresAt`` and ``expectedVersion`` at and past their
edges, odd ``commandType`` and ``schemaVersion``, huge and deeply nested
payloads. Records with arbitrary hostile fields (:func:`mutated`) go to an
entity of their own and are held to the weaker rules: never an exception,
never applied unless the command schema accepts them, one outcome each.
Whatever the records, nothing goes to a topic but the events, the replies
and the dead letters.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seqkeeper.processors.command import Command, DomainError, Event, Registry
from seqkeeper.processors.dead_letter import readable, schema_document
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.topologies.command_worker import CommandTopology
from tests.hostile.hostile import command_reasons, loads_or_none, mutated, nested, schema

SETTINGS = Settings.of(bootstrap="unused", topology="commands")
EVENTS = SETTINGS.commands.events_topic
DLQ = SETTINGS.commands.command_dlq_topic
REPLIES = "replies"
NOW = 1_800_000_000.0  # seconds: the worker's clock in this campaign
NOW_MS = int(NOW * 1000)
COMMAND = schema("command.schema.json")
DEAD_LETTER = schema("dead-letter-headers.schema.json")
REASONS = command_reasons()

APPLIED, REFUSED = "applied", "refused"  # else: the dead-letter reason
#: Entities of the labelled records; the mutated ones have their own.
ENTITIES = ("e1", "e2")
TENANTS = ("t1", "t2")


def iso(seconds: float, offset_minutes: int) -> str:
    zone = timezone(timedelta(minutes=offset_minutes))
    return datetime.fromtimestamp(seconds, zone).isoformat()


PAST = [
    0,
    1,
    NOW_MS - 1,
    iso(NOW - 1, 23 * 60 + 59),
    iso(NOW - 60, -(23 * 60 + 59)),
    "0001-01-01T00:00:00+00:00",
    "1970-01-01T00:00:00Z",
    iso(NOW - 0.5, 0),
]
FUTURE = [
    NOW_MS + 10**9,
    2**53 - 1,
    "9999-12-31T23:59:59-23:59",
    iso(NOW + 60, 330),
    iso(NOW + 3600, -720),
]
BAD_EXPIRY = [
    -1,
    -(2**63),
    2**53,
    2**64,
    10**30,
    True,
    False,
    "",
    " ",
    "soon",
    "10000-01-01T00:00:00+00:00",
    "2030-01-01T00:00:00",
    "2030-01-01T00:00:00+24:00",
    "2030-02-30T00:00:00+00:00",
    [],
    {},
]
BAD_VERSION = [-1, -(2**63), 1.5, 1.0, 0.0, True, False, "0", "", [], {}, 2**64, 10**30]
BAD_SCHEMA_VERSION = [0, -1, 1.0, True, "1", None, 2**64, 1.5]


def dumps(doc: dict[str, Any]) -> bytes:
    """JSON with integers of any size (orjson stops at 64 bits)."""
    return json.dumps(doc, separators=(",", ":")).encode()


@st.composite
def labelled(draw: st.DrawFn, n: int, versions: dict[tuple[str, str], int]) -> tuple[Any, ...]:
    """Record ``n`` and what must become of it, given the entities'
    versions so far (updated when it is to be applied)."""
    tenant, entity = draw(st.sampled_from(TENANTS)), draw(st.sampled_from(ENTITIES))
    doc: dict[str, Any] = {
        "messageId": f"m{n}",
        "commandType": "Add",
        "schemaVersion": 1,
        "correlationId": f"c{n}",
        "partitionKey": entity,
        "tenantId": tenant,
        "replyTo": REPLIES,
        "payload": {"n": 1},
    }
    key: bytes | None = entity.encode()
    headers: list[tuple[str, bytes | None]] = []
    raw: bytes | None = None
    kind = draw(st.sampled_from([
        "good", "tenant-header", "expired", "future", "bad-expiry", "bad-expiry-literal",
        "version-ok", "version-conflict", "bad-version", "spoof", "key", "type", "schema-version",
        "huge", "odd-headers",
    ]))  # fmt: skip
    outcome = APPLIED
    if kind == "tenant-header":
        headers = [("tenant", tenant.encode())] * draw(st.integers(1, 3))
    elif kind == "expired":
        doc["expiresAt"] = draw(st.sampled_from(PAST))
        outcome = REFUSED
    elif kind == "future":
        doc["expiresAt"] = draw(st.sampled_from(FUTURE))
    elif kind == "bad-expiry":
        doc["expiresAt"] = draw(st.sampled_from(BAD_EXPIRY))
        outcome = "invalid-envelope"
    elif kind == "bad-expiry-literal":
        literal = draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e400", b"0x10"]))
        raw = dumps(doc)[:-1] + b',"expiresAt":' + literal + b"}"
        outcome = "invalid-envelope"
    elif kind == "version-ok":
        doc["expectedVersion"] = versions[(tenant, entity)]
    elif kind == "version-conflict":
        current = versions[(tenant, entity)]
        doc["expectedVersion"] = draw(st.sampled_from([current + 1, current + 7, 2**63, 2**64 - 1]))
        outcome = REFUSED
    elif kind == "bad-version":
        doc["expectedVersion"] = draw(st.sampled_from(BAD_VERSION))
        outcome = "invalid-envelope"
    elif kind == "spoof":
        other = b"t2" if tenant == "t1" else b"t1"
        own = tenant.encode()
        headers = draw(st.sampled_from([
            [("tenant", other)], [("tenant", own), ("tenant", other)], [("tenant", other), ("tenant", own)],
            [("tenant", None)], [("tenant", own + b" ")], [("tenant", b"")], [("tenant", own.upper())],
            [("tenant", b"\xff")], [("tenant", own), ("tenant", None)],
        ]))  # fmt: skip
        if headers == [("tenant", b"\xff")]:  # the header undecodable, the envelope its replacement
            doc["tenantId"] = "\ufffd"
        outcome = "tenant-mismatch"
    elif kind == "key":
        key, doc["partitionKey"] = draw(st.sampled_from([
            (None, entity), (b"", entity), (entity.encode() + b"\x00", entity), (b"\xff", "\ufffd"),
            (b"\xed\xa0\x80", "\ufffd\ufffd\ufffd"), (b"E1", "e1"), (b" e1", "e1"),
        ]))  # fmt: skip
        outcome = "key-mismatch"
    elif kind == "type":
        doc["commandType"] = draw(
            st.sampled_from(["add", " Add", "Add ", "Add\x00", "A" * 10_000, "Ad\u0064"[:2]])
        )
        outcome = "unknown-command-type"
    elif kind == "schema-version":
        value = draw(st.sampled_from([2, 2**63 - 1, 2**63, *BAD_SCHEMA_VERSION]))
        doc["schemaVersion"] = value
        ok = type(value) is int and 1 <= value < 2**64  # (orjson reads larger ones as floats)
        outcome = "unsupported-schema-version" if ok else "invalid-envelope"
    elif kind == "huge":
        how = draw(st.sampled_from(["deep", "deep-ok", "blob", "long-id"]))
        if how == "deep":  # past orjson's limit: not JSON it reads
            raw = dumps(doc).replace(b'"payload":{"n":1}', b'"payload":' + nested(100_000))
            outcome = "invalid-envelope"
        elif how == "deep-ok":
            doc["payload"] = {"n": 1, "deep": orjson.loads(nested(500))}
        elif how == "blob":
            doc["payload"] = {"n": 1, "blob": "x" * 300_000}
        else:
            doc["messageId"] = f"m{n}-" + "x" * 100_000
    elif kind == "odd-headers":
        headers = draw(st.sampled_from([
            [("traceparent", None)], [("traceparent", b"\xff\xfe")], [("x", None), ("y", b"\x00")],
            [("tracestate", b"")], [("", b"")],
        ]))  # fmt: skip
    if outcome == APPLIED:
        versions[(tenant, entity)] += 1
    value = dumps(doc) if raw is None else raw
    return kind, key, value, tuple(headers), outcome, (tenant, entity)


@st.composite
def campaigns(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    versions: dict[tuple[str, str], int] = defaultdict(int)
    records: list[tuple[Any, ...]] = []
    for n in range(draw(st.integers(1, 25))):
        if draw(st.integers(0, 4)) == 0:  # a record with arbitrary hostile fields
            base = {
                "messageId": f"x{n}", "commandType": "Add", "schemaVersion": 1, "correlationId": f"c{n}",
                "partitionKey": "mut", "tenantId": "t1", "replyTo": REPLIES, "payload": {"n": 1},
                "expectedVersion": None, "expiresAt": NOW_MS + 1000,
            }  # fmt: skip
            records.append(("mutated", b"mut", draw(mutated(base)), (), None, ("t1", "mut")))
        else:
            records.append(draw(labelled(n, versions)))
    return records


def registry(calls: list[str]) -> Registry:
    reg = Registry()

    @reg.register("Add")
    def add(state: Any, command: Command) -> tuple[Any, list[Event]]:
        calls.append(command.message_id)
        n = command.payload.get("n") if isinstance(command.payload, dict) else None
        if type(n) is not int:
            raise DomainError("payload.n must be an integer")
        return (state or 0) + n, [Event("Added", {"n": n})]

    return reg


CAMPAIGN = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def one(kind: str, key: bytes | None, outcome: str, headers: Any = (), **fields: Any) -> list[Any]:
    """A campaign of one record (the failing examples found, kept)."""
    doc = {
        "messageId": "m0", "commandType": "Add", "schemaVersion": 1, "correlationId": "c0",
        "partitionKey": "e1", "tenantId": "t1", "replyTo": REPLIES, "payload": {"n": 1}, **fields,
    }  # fmt: skip
    return [(kind, key, dumps(doc), tuple(headers), outcome, ("t1", "e1"))]


@CAMPAIGN
@given(campaigns())
# found: only the first of several tenant headers was compared with tenantId
@example(one("spoof", b"e1", "tenant-mismatch", [("tenant", b"t1"), ("tenant", b"t2")]))
# found: a null tenant header counted as none
@example(one("spoof", b"e1", "tenant-mismatch", [("tenant", None)]))
# found: keys and tenant headers were compared after decoding with replacement
@example(one("key", b"\xff", "key-mismatch", partitionKey="\ufffd"))
@example(one("spoof", b"e1", "tenant-mismatch", [("tenant", b"\xff")], tenantId="\ufffd"))
# found: a null traceparent raised TypeError
@example(one("odd-headers", b"e1", APPLIED, [("traceparent", None)]))
def test_adversarial_commands(records: list[tuple[Any, ...]]) -> None:
    calls: list[str] = []
    memory = MemoryStore()
    topology = CommandTopology(SETTINGS, CommandStore(memory), registry(calls))
    topology.on_assigned({0})
    out: list[tuple[str, bytes | None, bytes | None, Any]] = []
    for offset, (_, key, value, headers, _, _) in enumerate(records):
        topology.on_record(0, offset, key, value, list(headers), NOW - 1, NOW)
        batch = topology.take()
        out += batch.records
        topology.confirm(batch, now=NOW)
    docs = [d for d in map(loads_or_none, (r[2] for r in records)) if isinstance(d, dict)]
    asked = {d["replyTo"] for d in docs if isinstance(d.get("replyTo"), str)}
    assert {topic for topic, *_ in out} <= {EVENTS, REPLIES, DLQ} | asked

    dead: dict[int, list[dict[str, str]]] = defaultdict(list)
    for topic, key, value, headers in out:
        if topic == DLQ:
            doc = schema_document(headers)
            assert DEAD_LETTER.is_valid(doc) and doc["seqkeeper.reason"] in REASONS, doc
            offset = int(readable(headers)["kafka_dlt-original-offset"])
            assert (key, value) == records[offset][1:3]  # the record as it came
            dead[offset].append(doc)
    replies = [orjson.loads(v) for t, _, v, _ in out if t == REPLIES]
    by_correlation = defaultdict(list)
    for r in replies:
        by_correlation[r["correlationId"]].append(r)
    applied = Counter(calls)

    for offset, (kind, key, value, headers, outcome, _) in enumerate(records):
        letters = dead.get(offset, [])
        assert len(letters) <= 1, (kind, letters)
        doc = loads_or_none(value)
        mid = doc.get("messageId") if isinstance(doc, dict) else None
        if outcome is None:  # mutated: one outcome, applied only if the schema accepts it
            if letters:
                assert applied[mid] == 0 if isinstance(mid, str) else True
                continue
            assert isinstance(doc, dict) and COMMAND.is_valid(doc), value[:300]
            # decided, so not lost: its receipt is there
            rid = f"{len(doc['tenantId'])}:{doc['tenantId']}/{doc['messageId']}"
            assert CommandStore(memory).receipt(0, rid) is not None, value[:300]
            continue
        answers = by_correlation.get(f"c{offset}", [])
        if outcome == APPLIED:
            assert not letters, (kind, value[:300], headers, letters)
            assert applied[mid] == 1, (kind, value[:300])
            assert [a["success"] for a in answers] == [True], (kind, answers)
        elif outcome == REFUSED:
            assert not letters and applied[mid] == 0, (kind, value[:300], letters)
            assert [a["success"] for a in answers] == [False], (kind, answers)
        else:
            assert [d["seqkeeper.reason"] for d in letters] == [outcome], (
                kind,
                key,
                value[:300],
                headers,
                letters,
            )
            assert applied[mid] == 0
            assert all(not a["success"] for a in answers)

    # the entities moved exactly by the commands applied
    store = CommandStore(memory)
    expected: Counter[tuple[str, str]] = Counter()
    for _kind, _, _value, _, outcome, where in records:
        if outcome == APPLIED:
            expected[where] += 1
    for tenant in TENANTS:
        for entity in ENTITIES:
            got = store.entity(0, f"{len(tenant)}:{tenant}/{entity}")
            assert (got.version, got.state or 0) == (expected[(tenant, entity)],) * 2, (
                tenant,
                entity,
            )


BASE_COMMAND = {
    "messageId": "m",
    "commandType": "Add",
    "schemaVersion": 1,
    "correlationId": "c",
    "causationId": "x",
    "partitionKey": "e1",
    "tenantId": "t1",
    "replyTo": REPLIES,
    "expiresAt": NOW_MS,
    "expectedVersion": 0,
    "headers": {"a": 1},
    "payload": {"n": 1},
}


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    mutated(BASE_COMMAND),
    st.sampled_from([b"e1", b"e1", None, b"", b"\xff", b"E1"]),
    st.sampled_from([None, None, b"t1", b"t2", b"\xff", b""]),
)
@example(dumps({**BASE_COMMAND, "partitionKey": "\ufffd"}), b"\xff", None)
@example(dumps({**BASE_COMMAND, "tenantId": "\ufffd"}), b"e1", b"\xfe")
def test_the_command_envelope(value: bytes, key: bytes | None, tenant: bytes | None) -> None:
    """Whatever the fields: a command or a documented reason; what is
    accepted the command schema accepts, with the Kafka key and the tenant
    header the very bytes of partitionKey and tenantId."""
    from seqkeeper.processors.command import parse_command
    from seqkeeper.processors.envelope import InvalidMessage

    try:
        command = parse_command(key, value, tenant)
    except InvalidMessage as exc:
        assert exc.reason in REASONS
        return
    doc = orjson.loads(value)
    assert COMMAND.is_valid(doc), value[:300]
    assert key == command.partition_key.encode("utf-8")
    assert tenant is None or tenant == command.tenant_id.encode("utf-8")
    assert type(command.schema_version) is int and command.schema_version >= 1
    assert command.expected_version is None or (
        type(command.expected_version) is int and command.expected_version >= 0
    )
    assert command.expires_at is None or command.expires_at == command.expires_at  # not NaN
