"""The JSON Schemas in schemas/ agree with what the code accepts and emits."""

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from processors.dead_letter import dead_letter_headers
from processors.envelope import InvalidMessage, Reason, parse
from processors.resequencer import GapSkipped
from seqkeeper.workload import MALFORMED_KINDS, generate

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
    doc = {k: v.decode() for k, v in headers}
    assert validator("dead-letter-headers.schema.json").is_valid(doc)
