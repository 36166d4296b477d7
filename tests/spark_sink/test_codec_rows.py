"""What compact's codec UDF makes of a value (no Spark needed): the fields
Spark's ``from_json`` would give for the same document in JSON, so a row
is the same whatever the topic's codec; ``None`` for a value the codec
cannot read (as ``from_json`` gives for bad JSON)."""

from __future__ import annotations

import base64
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.spark_sink.audit import DOC_FIELDS, _decoder


class Base64Json:
    def decode(self, value: bytes) -> Any:
        return orjson.loads(base64.b64decode(value, validate=True))

    def encode(self, document: Any) -> bytes:
        return base64.b64encode(orjson.dumps(document))


class WithBytes:
    """A codec whose documents hold bytes (as Avro's ``bytes`` and ``fixed`` do)."""

    def decode(self, value: bytes) -> Any:
        return {"messageId": "m1", "type": "T", "data": {"blob": value}}


LEAF = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=4)
JSON = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


@given(st.dictionaries(st.sampled_from(DOC_FIELDS), JSON, min_size=1))
def test_a_row_is_what_from_json_would_read(document: dict[str, Any]) -> None:
    row = _decoder(Base64Json())(Base64Json().encode(document))
    assert row is not None and len(row) == len(DOC_FIELDS)
    for name, text in zip(DOC_FIELDS, row, strict=True):
        field = document.get(name)
        if field is None:
            assert text is None
        elif isinstance(field, str):
            assert text == field  # (from_json gives a string field's text)
        else:
            assert text is not None and orjson.loads(text) == field  # (and the rest as JSON)


def test_a_value_the_codec_cannot_read_has_no_fields() -> None:
    decode = _decoder(Base64Json())
    assert decode(b'{"messageId": "m1"}') is None  # (JSON: not this codec's)
    assert decode(base64.b64encode(b"[1, 2]")) is None  # (not a mapping)
    assert decode(None) is None


def test_bytes_are_base64_text() -> None:
    row = _decoder(WithBytes())(b"\x00\xff")
    assert row is not None
    assert row[:3] == ("m1", "T", '{"blob":"AP8="}')
