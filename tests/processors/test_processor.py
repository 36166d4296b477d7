"""The ordered processor's pure part: what fn sees, what it may return."""

from __future__ import annotations

import fnmatch
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.command import parse_command
from seqkeeper.processors.envelope import output_id, parse
from seqkeeper.processors.processor import (
    GAP_SKIPPED,
    TOPIC_ROLE,
    InvalidResult,
    Output,
    OutputTopics,
    TopicNotAllowed,
    command_message,
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


# -- outputs to other topics (Output(topic=...)) ------------------------------
ALLOWED = OutputTopics(
    ("commands.in", "saga-*.commands"),
    "events.processed",
    ("events.in", "events.dlq"),
    ("seqkeeper-",),
    "SEQKEEPER_PROCESSOR_TOPICS",
)


def test_an_output_may_go_to_an_allowed_topic_with_its_deterministic_id() -> None:
    message = message_of("acct", released())
    outs = [
        Output({"a": 1}, topic="commands.in"),
        Output(2),
        Output(3, topic="saga-eu.commands"),
        Output(4, topic="events.processed"),
    ]
    _, records = results(message, (None, outs), ALLOWED)
    assert [r[0] for r in records] == [
        TOPIC_ROLE + "commands.in",
        "processed",
        TOPIC_ROLE + "saga-eu.commands",
        "processed",
    ]
    assert [orjson.loads(r[2])["messageId"] for r in records] == [
        f"4:acct/m3:{n}" for n in range(1, 5)
    ]


@pytest.mark.parametrize(
    ("topic", "says"),
    [
        ("other", r"topic 'other' is not among SEQKEEPER_PROCESSOR_TOPICS \(commands.in,saga-"),
        ("events.in", "topic 'events.in' is one of the worker's own topics"),
        ("events_in", "topic 'events_in' is one of the worker's own topics"),
        ("seqkeeper-state-changelog", "internal topic of the worker"),
        ("__consumer_offsets", "Kafka internal topic"),
        ("a b", "is not a Kafka topic name"),
    ],
)
def test_an_output_to_a_topic_not_allowed_says_which(topic: str, says: str) -> None:
    with pytest.raises(TopicNotAllowed, match=says) as raised:
        results(message_of("acct", released()), (None, [1, Output(2, topic=topic)]), ALLOWED)
    assert raised.value.topic == topic and "output 2" in str(raised.value)


def test_by_default_no_topic_besides_the_processed_topic_is_allowed() -> None:
    with pytest.raises(TopicNotAllowed, match=r"not among the topics allowed \(none\)"):
        results(message_of("acct", released()), (None, [Output(1, topic="commands.in")]))


topic_names = st.text("abc.-_*", min_size=1, max_size=6)


@given(st.lists(topic_names, max_size=3), st.lists(topic_names, max_size=3), topic_names)
def test_an_output_goes_to_a_topic_exactly_when_allowed_and_not_own(
    allowed: list[str], own: list[str], topic: str
) -> None:
    topics = OutputTopics(tuple(allowed), "events.processed", tuple(own))
    message = message_of("acct", released())
    expected = (
        "*" not in topic
        and topic not in (".", "..")
        and not topic.replace(".", "_").startswith("__")
        and topic.replace(".", "_") not in {o.replace(".", "_") for o in own}
        and any(fnmatch.fnmatchcase(topic, p.replace("[", "[[]")) for p in allowed)
    )
    try:
        _, [(role, *_)] = results(message, (None, [Output(1, topic=topic)]), topics)
    except TopicNotAllowed:
        assert not expected
    else:
        assert expected and role == TOPIC_ROLE + topic


# -- a processor's commands (command_message) ---------------------------------
@given(
    st.text("abc-:/", min_size=1, max_size=5),
    st.text("abc", min_size=1, max_size=3),
    json_values,
)
def test_a_processors_command_is_one_the_command_worker_accepts_with_a_stable_id(
    saga_key: str, name: str, payload: Any
) -> None:
    doc = {"messageId": "placed", "seq": 1, "type": "OrderPlaced", "data": None}
    message = message_of(saga_key, parse(saga_key.encode(), orjson.dumps(doc)))
    out = command_message(
        message, name, "Reserve", "sku-1", payload, tenant_id="shop", topic="commands.in"
    )
    topics = OutputTopics(("commands.in",))
    _, [(role, key, value, _)] = results(message, (None, [out]), topics)
    assert (role, key) == (TOPIC_ROLE + "commands.in", b"sku-1")
    command = parse_command(key, value)
    assert (command.command_type, command.partition_key, command.tenant_id) == (
        "Reserve",
        "sku-1",
        "shop",
    )
    assert (command.correlation_id, command.causation_id, command.payload) == (
        saga_key,
        "placed",
        payload,
    )
    assert command.message_id == output_id(saga_key, "placed", name)
    assert results(message, (None, [out]), topics)[1][0][2] == value  # same step, same bytes
    other = command_message(
        message, name + "x", "Reserve", "sku-1", payload, tenant_id="shop", topic="commands.in"
    )
    assert orjson.loads(results(message, (None, [other]), topics)[1][0][2])["messageId"] != (
        command.message_id
    )
