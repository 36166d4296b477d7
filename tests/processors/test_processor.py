"""The ordered processor's pure part: what fn sees, what it may return."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.envelope import parse
from seqkeeper.processors.processor import (
    GAP_SKIPPED,
    InvalidResult,
    Output,
    dead_letter,
    is_done,
    message_of,
    results,
)
from seqkeeper.processors.resequencer import GapSkipped

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


def released(seq: int = 3) -> Any:
    value = orjson.dumps({"messageId": f"m{seq}", "seq": seq, "type": "Posted", "data": {"a": 1}})
    return parse(b"acct", value)


def test_fn_sees_the_message_and_a_gap_as_a_gap_skipped_message() -> None:
    m = message_of("acct", released())
    assert (m.key, m.seq, m.message_id, m.type, m.data) == ("acct", 3, "m3", "Posted", {"a": 1})
    g = message_of("acct", GapSkipped("acct", 4, 6))
    assert (g.seq, g.type, g.data) == (4, GAP_SKIPPED, {"from": 4, "to": 6})
    assert g.message_id == "seqkeeper.gap:acct:4-6"


@given(json_values, st.lists(json_values, max_size=5))
def test_outputs_get_deterministic_ids_and_carry_the_data(state: Any, outs: list[Any]) -> None:
    message = message_of("acct", released())
    encoded, records = results(message, (state, outs))
    assert orjson.loads(encoded) == state
    assert [orjson.loads(r[2])["messageId"] for r in records] == [
        f"4:acct/m3:{n}" for n in range(1, len(outs) + 1)
    ]
    for (role, key, value, headers), data in zip(records, outs, strict=True):
        doc = orjson.loads(value)
        assert (role, key, headers) == ("processed", b"acct", None)
        assert (doc["causationId"], doc["seq"], doc["data"]) == ("m3", 3, data)
    assert results(message, (state, outs)) == (encoded, records)  # same input, same bytes


def test_an_output_may_name_its_type_key_and_headers() -> None:
    out = Output({"x": 1}, type="Rejected", key="other", headers=[("traceparent", "00-ab")])
    _, [(role, key, value, headers)] = results(message_of("acct", released()), (None, [out]))
    assert key == b"other" and headers == [("traceparent", b"00-ab")]
    assert orjson.loads(value)["type"] == "Rejected"


@pytest.mark.parametrize(
    ("result", "says"),
    [
        ("nope", "must return (new_state, outputs)"),
        ((1, 2, 3), "must return (new_state, outputs)"),
        (({1, 2}, []), "new state is not JSON-serialisable"),
        ((None, "text"), "outputs must be a list"),
        ((None, [object()]), "output 1 is not JSON-serialisable"),
        ((None, [Output(1, key="")]), "key must be a non-empty string"),
    ],
)
def test_a_result_that_cannot_be_stored_says_why(result: Any, says: str) -> None:
    with pytest.raises(InvalidResult, match=says.replace("(", r"\(").replace(")", r"\)")):
        results(message_of("acct", released()), result)


def test_the_cursor_covers_items_up_to_their_last_sequence() -> None:
    assert is_done(released(3), 3) and not is_done(released(4), 3)
    assert not is_done(GapSkipped("acct", 2, 4), 3) and is_done(GapSkipped("acct", 2, 4), 4)


def test_a_dead_letter_keeps_the_input_bytes_and_names_the_error() -> None:
    item = released()
    role, key, value, headers = dead_letter(
        "acct", item, "builtins.ValueError: bad", "builtins.ValueError", 5, ("events.in", 2, 41)
    )
    h = dict(headers or [])
    assert (role, key, value) == ("dlq", b"acct", item.value)
    assert h["seqkeeper.reason"] == b"processor-failed"
    assert h["kafka_dlt-exception-fqcn"] == b"builtins.ValueError"
    assert (
        h["kafka_dlt-original-offset"] == b"\x00" * 7 + b"\x29" and h["seqkeeper.attempts"] == b"5"
    )
    assert b"bad" in h["seqkeeper.detail"]
