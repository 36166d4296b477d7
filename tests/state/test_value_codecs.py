"""The built-in value codecs: what ``encode`` writes ``decode`` reads back
(JSON, Avro, Avro in the Confluent wire format), and a value in another
framing, of another schema id, or cut short is refused with a
``ValueError`` (the worker dead-letters it), never read as something else."""

from __future__ import annotations

import pickle
import struct
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.envelope import InvalidMessage, Reason, Shape, parse
from seqkeeper.processors.resequencer import GAP_SKIPPED, GapSkipped
from seqkeeper.state.value_codecs import MAX_SCHEMA_ID, AvroCodec, JsonCodec, confluent_header

pytest.importorskip("fastavro")

#: What docs/codecs.md shows: one schema for the input, gap markers and
#: processor outputs (``causationId``, ``key``), ``data`` a union.
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Envelope",
    "namespace": "shop",
    "fields": [
        {"name": "messageId", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "type", "type": "string", "default": ""},
        {"name": "causationId", "type": ["null", "string"], "default": None},
        {"name": "key", "type": ["null", "string"], "default": None},
        {
            "name": "data",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Gap",
                    "namespace": "seqkeeper",
                    "fields": [{"name": "from", "type": "long"}, {"name": "to", "type": "long"}],
                },
                {
                    "type": "record",
                    "name": "Posting",
                    "fields": [
                        {"name": "amount", "type": "long"},
                        {"name": "note", "type": ["null", "string", "bytes"], "default": None},
                        {"name": "tags", "type": {"type": "array", "items": "string"}},
                        {"name": "rate", "type": "double", "default": 0.0},
                    ],
                },
            ],
            "default": None,
        },
    ],
}

LONG = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text()
POSTING = st.fixed_dictionaries(
    {
        "amount": LONG,
        "note": st.none() | TEXT | st.binary(),
        "tags": st.lists(TEXT, max_size=4),
        "rate": st.floats(allow_nan=False),
    }
)
DOCUMENT = st.fixed_dictionaries(
    {
        "messageId": TEXT,
        "seq": LONG,
        "type": TEXT,
        "causationId": st.none() | TEXT,
        "key": st.none() | TEXT,
        "data": st.none() | POSTING,
    }
)
SCHEMA_ID = st.integers(0, MAX_SCHEMA_ID)
JSON_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | LONG
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT.filter(lambda t: t.encode("utf-8", "ignore").decode() == t),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(TEXT.filter(lambda t: t.isprintable()), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text().filter(str.isprintable), JSON_VALUE, max_size=5))
def test_json_round_trips_and_is_orjson(document: dict[str, Any]) -> None:
    codec = JsonCodec()
    assert codec.encode(document) == orjson.dumps(document)
    assert codec.decode(codec.encode(document)) == document


@given(DOCUMENT)
def test_avro_round_trips(document: dict[str, Any]) -> None:
    codec = AvroCodec(SCHEMA)
    assert codec.decode(codec.encode(document)) == document


@given(DOCUMENT, SCHEMA_ID)
def test_the_confluent_framing_round_trips_and_is_magic_byte_and_id(
    document: dict[str, Any], schema_id: int
) -> None:
    codec = AvroCodec(SCHEMA, schema_id)
    value = codec.encode(document)
    assert value[:1] == b"\x00" and struct.unpack(">I", value[1:5]) == (schema_id,)
    assert value[5:] == AvroCodec(SCHEMA).encode(document)  # then the plain Avro binary
    assert codec.decode(value) == document


@given(DOCUMENT, SCHEMA_ID, SCHEMA_ID)
def test_another_schema_id_is_refused(document: dict[str, Any], schema_id: int, other: int) -> None:
    value = AvroCodec(SCHEMA, other).encode(document)
    if other == schema_id:
        assert AvroCodec(SCHEMA, schema_id).decode(value) == document
        return
    with pytest.raises(ValueError, match=f"schema id {other}, expected {schema_id}"):
        AvroCodec(SCHEMA, schema_id).decode(value)


@given(DOCUMENT, SCHEMA_ID, st.integers(1, 255))
def test_another_magic_byte_is_refused(
    document: dict[str, Any], schema_id: int, magic: int
) -> None:
    codec = AvroCodec(SCHEMA, schema_id)
    value = bytes([magic]) + codec.encode(document)[1:]
    with pytest.raises(ValueError, match=f"magic byte 0x{magic:02x}, expected 0x00"):
        codec.decode(value)


@given(DOCUMENT, st.none() | SCHEMA_ID, st.data())
def test_a_value_cut_short_or_with_bytes_after_it_is_refused(
    document: dict[str, Any], schema_id: int | None, data: st.DataObject
) -> None:
    codec = AvroCodec(SCHEMA, schema_id)
    value = codec.encode(document)
    cut = data.draw(st.integers(0, len(value) - 1))
    with pytest.raises(ValueError):
        codec.decode(value[:cut])
    with pytest.raises(ValueError, match="left after the record"):
        codec.decode(value + data.draw(st.binary(min_size=1, max_size=8)))


@given(st.binary(max_size=64), SCHEMA_ID)
def test_any_bytes_decode_or_raise_value_error(value: bytes, schema_id: int) -> None:
    for codec in (AvroCodec(SCHEMA), AvroCodec(SCHEMA, schema_id)):
        try:
            document = codec.decode(value)
        except ValueError:
            continue  # (any other exception fails the test)
        assert set(document) == {f["name"] for f in SCHEMA["fields"]}


def test_a_plain_avro_value_is_not_read_as_framed() -> None:
    plain = AvroCodec(SCHEMA).encode({"messageId": "m1", "seq": 1})
    with pytest.raises(ValueError, match="magic byte 0x04"):  # (the length of "m1", zigzag)
        AvroCodec(SCHEMA, 7).decode(plain)


def test_encode_refuses_what_the_schema_would_drop_or_lacks() -> None:
    codec = AvroCodec(SCHEMA, 3)
    with pytest.raises(ValueError, match="more fields than the schema"):
        codec.encode({"messageId": "m", "seq": 1, "extra": 1})  # (not written without it)
    with pytest.raises(ValueError, match="messageId"):
        codec.encode({"seq": 1})
    with pytest.raises(ValueError, match="mapping"):
        codec.encode([1])
    with pytest.raises(ValueError):
        confluent_header(MAX_SCHEMA_ID + 1)


@given(st.integers(1, 2**63 - 1), st.integers(0, 1000), st.none() | SCHEMA_ID)
def test_a_gap_marker_round_trips_and_parses_as_the_worker_reads_it(
    first: int, extra: int, schema_id: int | None
) -> None:
    last = min(first + extra, 2**63 - 1)
    gap = GapSkipped("k", first, last)
    codec = AvroCodec(SCHEMA, schema_id)
    value = gap.encoded(codec.encode)
    doc = codec.decode(value)
    assert {k: doc[k] for k in gap.document} == gap.document
    m = parse(b"k", value, shape=Shape(codec=codec))
    assert (m.message_id, m.seq, m.type) == (gap.message_id, first, GAP_SKIPPED)
    # JSON, the default, is byte for byte what it always was
    assert (
        gap.encoded(None)
        == gap.value
        == orjson.dumps(
            {
                "messageId": f"seqkeeper.gap:k:{first}-{last}",
                "seq": first,
                "type": GAP_SKIPPED,
                "data": {"from": first, "to": last},
            }
        )
    )


def test_bad_framing_dead_letters_with_a_reason() -> None:
    codec = AvroCodec(SCHEMA, 42)
    value = AvroCodec(SCHEMA, 41).encode({"messageId": "m", "seq": 1})
    with pytest.raises(InvalidMessage) as caught:
        parse(b"k", value, shape=Shape(codec=codec))
    assert caught.value.reason == Reason.INVALID_JSON
    assert "schema id 41, expected 42" in caught.value.detail


def test_the_avro_codec_pickles_for_spark_workers() -> None:
    codec = AvroCodec(SCHEMA, 9)
    value = codec.encode({"messageId": "m", "seq": 1})
    again = pickle.loads(pickle.dumps(codec))
    assert again.schema_id == 9 and again.decode(value) == codec.decode(value)
