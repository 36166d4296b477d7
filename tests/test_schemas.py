"""The JSON Schemas in schemas/ agree with what the code accepts and emits."""

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from seqkeeper.processors.dead_letter import dead_letter_headers, schema_document
from seqkeeper.processors.envelope import InvalidMessage, Reason, parse
from seqkeeper.processors.resequencer import GapSkipped
from seqkeeper.verification.workload import MALFORMED_KINDS, generate

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / name).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_generated_events_match_the_event_schema() -> None:
    v = validator("event.schema.json")
    for _key, value in generate(messages=200, keys=5, malformed=0).records:
        assert v.is_valid(orjson.loads(value))  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "key", "value"), MALFORMED_KINDS)
def test_field_errors_are_schema_errors(kind: str, key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(InvalidMessage) as info:
        parse(key, value)
    if info.value.reason in (Reason.MISSING_FIELD, Reason.INVALID_FIELD, Reason.NOT_AN_OBJECT):
        assert value is not None
        assert not validator("event.schema.json").is_valid(orjson.loads(value)), kind


@given(st.text(min_size=1), st.integers(1, 10**6), st.integers(0, 10**6))
def test_markers_match_their_schema(key: str, first: int, extra: int) -> None:
    marker = GapSkipped(key, first, first + extra)
    assert validator("gap-skipped.schema.json").is_valid(orjson.loads(marker.value))


@pytest.mark.parametrize("reason", [v for k, v in vars(Reason).items() if k.isupper()])
def test_dead_letter_headers_match_their_schema(reason: str) -> None:
    headers = dead_letter_headers(reason, "why", "events.in", 3, 42, 1700000000000)
    assert validator("dead-letter-headers.schema.json").is_valid(schema_document(headers))


def test_commands_replies_and_events_match_their_schemas() -> None:
    from seqkeeper.processors.command import parse_command
    from seqkeeper.processors.inventory import registry
    from seqkeeper.settings import Settings
    from seqkeeper.state.command_records import CommandStore
    from seqkeeper.state.memory import MemoryStore
    from seqkeeper.topologies.command_worker import CommandTopology
    from seqkeeper.verification.command_storm import storm

    commands, replies, events = (
        validator(n)
        for n in ("command.schema.json", "reply.schema.json", "domain-event.schema.json")
    )
    settings = Settings.of(bootstrap="unused", topology="commands")
    topology = CommandTopology(settings, CommandStore(MemoryStore()), registry)
    topology.on_assigned({0})
    work = storm(commands=60, seed=4)
    for offset, (key, value) in enumerate(work.records):
        try:
            parse_command(key, value)
        except InvalidMessage as exc:
            if exc.reason == "invalid-envelope":  # the key is not in the schema's view
                assert value is None or not commands.is_valid(_json_or_none(value))
            continue
        assert commands.is_valid(orjson.loads(value))  # type: ignore[arg-type]
        topology.on_record(0, offset, key, value, [], 1.0, 1e9)
    out = topology.take().records
    by_topic = {
        "replies": [v or b"" for t, _, v, _ in out if t == "commands.replies"],
        "events": [v or b"" for t, _, v, _ in out if t == settings.commands.events_topic],
    }
    assert by_topic["replies"] and by_topic["events"]
    for value in by_topic["replies"]:
        assert replies.is_valid(orjson.loads(value)), value
    for value in by_topic["events"]:
        assert events.is_valid(orjson.loads(value)), value


def _json_or_none(value: bytes) -> object:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return None


def test_the_reply_of_a_command_that_ends_its_entity_matches_its_schema() -> None:
    from seqkeeper import End, Registry
    from seqkeeper.processors.command import Entity, decide, parse_command

    registry = Registry()
    registry.register("Close")(lambda state, command: (End(state), []))
    doc = {"messageId": "m1", "commandType": "Close", "schemaVersion": 1, "correlationId": "c",
           "partitionKey": "k", "tenantId": "t", "replyTo": "x.replies", "payload": None}  # fmt: skip
    d = decide(registry, Entity(2, {"n": 1}), None, parse_command(b"k", orjson.dumps(doc)), 1.0)
    (reply,) = d.dispatch
    body = orjson.loads(reply.value)
    assert body["ended"] is True and body["version"] == 3
    assert validator("reply.schema.json").is_valid(body)


def registered(name: str) -> Draft202012Validator:
    """The validator of ``name``, its ``$ref`` to another schema file resolved
    (by ``$id``, as a schema registry would)."""
    from referencing import Registry, Resource

    docs = [json.loads(p.read_text()) for p in SCHEMAS.glob("*.schema.json")]
    registry: Registry = Registry().with_resources(
        (doc["$id"], Resource.from_contents(doc)) for doc in docs
    )
    schema = json.loads((SCHEMAS / name).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


@given(
    st.text(min_size=1, max_size=12),
    st.integers(1, 2**63 - 1),
    st.text(min_size=1, max_size=12),
    st.lists(
        st.tuples(
            json_values,
            st.none() | st.text(max_size=6),
            st.none() | st.text(min_size=1, max_size=6),
        ),
        max_size=4,
    ),
)
def test_processor_outputs_match_their_schema(
    key: str, seq: int, message_id: str, outputs: list[tuple[object, str | None, str | None]]
) -> None:
    from seqkeeper.processors.processor import Message, Output, results

    message = Message(key, seq, message_id, "Posted", None, {})
    _, records = results(message, ({}, [Output(d, type=t, key=k) for d, t, k in outputs]))
    assert len(records) == len(outputs)
    v = validator("processor-output.schema.json")
    for _, _, value, _ in records:
        assert v.is_valid(orjson.loads(value)), value
    for bad in ({"messageId": "x:1", "key": key, "seq": seq, "data": 1},  # no causationId
                {"messageId": "x", "causationId": "c", "key": key, "seq": seq, "data": 1}):  # fmt: skip
        assert not v.is_valid(bad)


def test_dead_letters_match_their_topic_s_schema() -> None:
    from seqkeeper.contracts import REASONS
    from seqkeeper.processors.processor import dead_letter
    from tests.processors.test_processor import released

    events = registered("event-dead-letter-headers.schema.json")
    commands = registered("command-dead-letter-headers.schema.json")
    event_reasons = REASONS["event-dead-letter-headers.schema.json"]
    command_reasons = REASONS["command-dead-letter-headers.schema.json"]
    for reason in event_reasons:
        if reason == "processor-failed":
            continue
        doc = schema_document(dead_letter_headers(reason, "why", "events.in", 1, 5, 17))
        assert events.is_valid(doc) and not commands.is_valid(doc), reason
    *_, processor_letter = dead_letter("k", released(), "e", "builtins.E", 5, ("events.in", 0, -1))
    doc = schema_document(processor_letter or [])
    assert doc["seqkeeper.reason"] == "processor-failed" and events.is_valid(doc)
    assert not events.is_valid({k: v for k, v in doc.items() if k != "seqkeeper.attempts"})
    for reason in set(command_reasons) - {"reply-undeliverable"}:  # (test_reply_topics.py)
        letter = dead_letter_headers(reason, "why", "commands.in", 0, 4, exception_class="E")
        doc = schema_document([*letter, ("seqkeeper.attempts", b"5")])
        assert commands.is_valid(doc) and not events.is_valid(doc), reason
    failed = dead_letter_headers("handler-failed", "why", "commands.in", 0, 4)
    assert not commands.is_valid(schema_document(failed))  # (no attempts)
    spring = schema_document(dead_letter_headers("late-arrival", "why", "events.in", 1, 5, -1))
    assert events.is_valid(spring)
    spring["kafka_dlt-original-offset"] = "NQ=="  # b"5" in base64: ASCII, as before
    assert not events.is_valid(spring)
