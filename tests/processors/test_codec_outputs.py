"""What the ordered processor's pure part writes goes through the value
codec it is given: outputs, a gap marker it saw, a gap marker dead-lettered;
without one (JSON) the bytes are what they always were."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.envelope import Message as Envelope
from seqkeeper.processors.processor import (
    InvalidResult,
    Output,
    dead_letter,
    message_of,
    results,
)
from seqkeeper.processors.resequencer import GAP_SKIPPED, GapSkipped


class Base64Json:
    """A codec that is not JSON on the wire."""

    def decode(self, value: bytes) -> Any:
        return orjson.loads(base64.b64decode(value, validate=True))

    def encode(self, document: Any) -> bytes:
        return base64.b64encode(orjson.dumps(document))


CODEC = Base64Json()
DATA = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
).filter(lambda d: _jsonable(d))


def _jsonable(d: Any) -> bool:
    try:
        orjson.dumps(d)
    except TypeError:
        return False
    return True


def envelope(seq: int = 3) -> Envelope:
    value = orjson.dumps({"messageId": f"m{seq}", "seq": seq, "type": "Posted", "data": 1})
    return Envelope("k", f"m{seq}", seq, "Posted", value)


@given(st.lists(DATA, max_size=4), DATA)
def test_outputs_are_written_by_the_codec_and_json_stays_byte_identical(
    outputs: list[Any], state: Any
) -> None:
    message = message_of("k", envelope())
    plain_state, plain = results(message, (state, outputs))
    coded_state, coded = results(message, (state, outputs), encode=CODEC.encode)
    assert plain_state == coded_state == orjson.dumps(state)  # (the state is seqkeeper's own)
    assert len(plain) == len(coded) == len(outputs)
    for n, ((_, pk, pv, ph), (_, ck, cv, ch)) in enumerate(zip(plain, coded, strict=True), 1):
        body = {"messageId": f"1:k/m3:{n}", "causationId": "m3", "key": "k", "seq": 3}
        body["data"] = outputs[n - 1]
        assert pv == orjson.dumps(body)  # JSON: as before
        assert cv == base64.b64encode(pv) and CODEC.decode(cv) == body
        assert (pk, ph) == (ck, ch)


def test_an_output_the_codec_cannot_write_is_an_invalid_result() -> None:
    def refuses(document: Any) -> bytes:
        raise ValueError("no field total in the schema")

    message = message_of("k", envelope())
    with pytest.raises(InvalidResult, match="output 2 cannot be encoded.*no field total"):
        results(
            message, (None, [Output(1), Output({"total": 2}, type="T")]), encode=_only_ints(refuses)
        )
    with pytest.raises(InvalidResult, match="returned a str, not bytes"):
        results(message, (None, [1]), encode=lambda d: "text")  # type: ignore[arg-type,return-value]


def _only_ints(refuses: Any) -> Any:
    return lambda d: CODEC.encode(d) if isinstance(d["data"], int) else refuses(d)


@given(st.integers(1, 2**40), st.integers(0, 100))
def test_a_gap_reaches_fn_as_its_document_and_dead_letters_in_the_codec(
    first: int, extra: int
) -> None:
    gap = GapSkipped("k", first, first + extra)
    message = message_of("k", gap, CODEC.decode)
    assert (message.type, message.data, message.seq) == (
        GAP_SKIPPED,
        {"from": first, "to": first + extra},
        first,
    )
    assert dict(message.body) == orjson.loads(gap.value)
    origin = ("in", 0, -1)
    _, _, json_value, _ = dead_letter("k", gap, "boom", "E", 3, origin)
    _, _, coded_value, headers = dead_letter("k", gap, "boom", "E", 3, origin, CODEC.encode)
    assert json_value == gap.value and CODEC.decode(coded_value) == gap.document
    assert dict(headers)["seqkeeper.reason"] == b"processor-failed"


def test_a_message_dead_letters_with_its_own_bytes_whatever_the_codec() -> None:
    item = envelope()
    _, _, value, _ = dead_letter("k", item, "boom", "E", 3, ("in", 0, 5), CODEC.encode)
    assert value == item.value
