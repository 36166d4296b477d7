"""A hostile-input campaign on the input envelope, its message shapes and
the codecs that store what it accepts (no broker).

Whatever the bytes, :func:`parse` (and :func:`key_field`, which the
repartition stage calls) returns a message or raises :class:`InvalidMessage`
with a reason the dead-letter schema lists; it never raises anything else,
never accepts a value the event schema rejects, and what it accepts can be
stored and read back (:mod:`state.codecs`) and its dead letter produced
(headers of a bounded size, valid against their schema).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seqkeeper.processors.dead_letter import dead_letter_headers, schema_document
from seqkeeper.processors.envelope import (
    DEFAULT_SHAPE,
    MAX_SEQ,
    InvalidMessage,
    Message,
    Shape,
    key_field,
    parse,
)
from seqkeeper.runtime.repartition import route
from seqkeeper.state import codecs
from tests.hostile.hostile import (
    FRAGMENTS,
    event_reasons,
    header_values,
    loads_or_none,
    mutated,
    schema,
)

CAMPAIGN = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EVENT = schema("event.schema.json")
DEAD_LETTER = schema("dead-letter-headers.schema.json")
REASONS = event_reasons()
#: The bound on a dead letter's headers: the record itself is at most the
#: input's size plus this, so a dead letter fits where its input did.
HEADER_BYTES = 16 * 1024

BASE_EVENT = {
    "messageId": "m-1",
    "seq": 7,
    "type": "Posted",
    "data": {"n": 1},
    "metadata": {"timestamp": 1_700_000_000_000, "at": "2026-01-01T00:00:00+00:00"},
}
TIME_FIELDS = [(), ("metadata", "timestamp"), ("metadata", "at"), ("seq",), ("data",)]

kafka_keys = st.one_of(
    st.sampled_from([None, b"", b" ", b"\xff", b"\xed\xa0\x80", b"k", b"\x00", b"k" * 100_000]),
    st.binary(max_size=16),
    st.text(max_size=16).map(lambda t: t.encode("utf-8")),
)
header_names = st.sampled_from(["seq", "id", "traceparent", "tenant", "", "\x00", "s\u00e9q"])
headers_lists = st.lists(st.tuples(header_names, header_values()), max_size=4).map(tuple)
event_values = st.one_of(
    mutated(BASE_EVENT),
    mutated(BASE_EVENT),
    st.binary(max_size=64),
    st.sampled_from([None, b"", b"null", b"[]", b'"x"', *FRAGMENTS]),
)


def check_rejection(exc: InvalidMessage) -> None:
    """A rejection names a documented reason, and its dead letter can be
    produced: UTF-8 headers of a bounded size that match their schema."""
    assert exc.reason in REASONS, exc.reason
    headers = dead_letter_headers(exc.reason, exc.detail, "events.in", 0, 1, 1_700_000_000_000)
    assert sum(len(k) + len(v) for k, v in headers) <= HEADER_BYTES
    assert DEAD_LETTER.is_valid(schema_document(headers)), exc.detail[:200]


def check_storable(message: Message, packed: bool) -> None:
    """What the buffer keeps of an accepted message reads back the same."""
    for key in (
        codecs.buffer_key(message.key, message.seq),
        codecs.seen_id_key(message.key, message.message_id),
    ):
        assert codecs.key_of(key) == message.key
    raw = codecs.encode_message(message, packed)
    back = codecs.decode_message(message.key, raw)
    if raw is message.value:  # the original bytes alone: the event time is not kept
        back = replace(back, event_time=message.event_time)
    assert back == message


def check_time(message: Message) -> None:
    assert message.event_time is None or math.isfinite(message.event_time)


VALID = orjson.dumps(BASE_EVENT)


@CAMPAIGN
@given(kafka_keys, event_values, st.sampled_from(TIME_FIELDS), headers_lists)
# found: a null header value (Kafka allows one) could not be stored
@example(b"k", VALID, (), (("tenant", None),))
# found: the detail quoted the whole value, in three headers
@example(
    b"k",
    VALID.replace(b'"type":"Posted"', b'"type":' + b"[" * 1000 + b'"x"' * 1 + b"]" * 1000),
    (),
    (),
)
@example(
    b"k", VALID.replace(b'"metadata":{', b'"metadata":"' + b"x" * 300_000 + b'","m":{'), (), ()
)
def test_the_default_envelope(
    key: bytes | None, value: bytes | None, time_field: tuple[str, ...], headers: Any
) -> None:
    try:
        message = parse(key, value, time_field, DEFAULT_SHAPE, headers)
    except InvalidMessage as exc:
        check_rejection(exc)
        return
    assert value is not None and key is not None
    doc = orjson.loads(value)
    assert EVENT.is_valid(doc), value[:200]
    assert message.key.encode("utf-8") == key
    assert (message.message_id, message.seq, message.type) == (
        doc["messageId"],
        doc["seq"],
        doc["type"],
    )
    assert message.value is value
    check_time(message)
    check_storable(message, packed=False)
    check_storable(message, packed=True)


class HostileCodec:
    """A user's codec that returns what it was given to return (any Python
    object, including strings with lone surrogates) or raises it."""

    def __init__(self, result: Any) -> None:
        self.result = result

    def decode(self, value: bytes) -> Any:
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


class Odd(Mapping[str, Any]):
    """A mapping that is not a dict (as an Avro or Protobuf codec may give)."""

    def __init__(self, items: dict[str, Any]) -> None:
        self.items_ = items

    def __getitem__(self, k: str) -> Any:
        return self.items_[k]

    def __iter__(self) -> Any:
        return iter(self.items_)

    def __len__(self) -> int:
        return len(self.items_)


#: Text with everything Python strings can hold, lone surrogates included.
any_text = st.one_of(
    st.text(st.characters(blacklist_categories=()), max_size=8),
    st.sampled_from(["", " ", "\ud800", "k\udfff", "\x00", "x" * 10_000, "7"]),
)
python_values = st.recursive(
    st.one_of(
        any_text,
        any_text,
        st.none(),
        st.booleans(),
        st.integers(),
        st.sampled_from([0, 1, MAX_SEQ, MAX_SEQ + 1, -1, 2**64]),
        st.floats(),
        any_text,
        st.binary(max_size=4),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["seq", "id", "k", "type"]), inner, max_size=3),
    ),
    max_leaves=6,
)


@st.composite
def codec_docs(draw: st.DrawFn) -> Any:
    """What a user's codec may return: a mapping with the message's fields
    set to any Python value, another object, or an exception."""
    kind = draw(st.sampled_from(["doc", "doc", "doc", "other", "raise"]))
    if kind == "raise":
        return draw(
            st.sampled_from([ValueError("bad"), KeyError("k"), RecursionError(), TypeError()])
        )
    if kind == "other":
        return draw(python_values)
    doc: dict[str, Any] = {
        "messageId": "m-1",
        "seq": 3,
        "type": "T",
        "k": "key-1",
        "meta": {"seq": 4, "id": "m-2", "k": "key-2"},
    }
    for field in draw(
        st.lists(st.sampled_from(["messageId", "seq", "type", "k", "meta"]), max_size=3)
    ):
        doc[field] = draw(python_values)
    return Odd(doc) if draw(st.booleans()) else doc


@st.composite
def shapes(draw: st.DrawFn) -> Shape:
    key_path = draw(
        st.sampled_from([(), ("k",), ("k",), ("meta", "k"), ("meta", "k", "x"), ("no",)])
    )
    seq_header = draw(st.sampled_from(["", "", "seq"]))
    seq_path = draw(st.sampled_from([("seq",), ("meta", "seq"), ("nope",)]))
    id_header = draw(st.sampled_from(["", "", "id"]))
    id_path = draw(st.sampled_from([("messageId",), ("meta", "id")]))
    codec = HostileCodec(draw(codec_docs())) if draw(st.booleans()) else None
    return Shape(key_path, seq_path, seq_header, id_path, id_header, codec)


@st.composite
def shaped_headers(draw: st.DrawFn) -> tuple[tuple[str, bytes | None], ...]:
    """Headers with the shape's ``seq`` and ``id`` headers likely among them."""
    headers = list(draw(headers_lists))
    for name_ in ("seq", "id", "seq"):
        if draw(st.booleans()):
            headers.insert(draw(st.integers(0, len(headers))), (name_, draw(header_values())))
    return tuple(headers)


@CAMPAIGN
@given(shapes(), kafka_keys, event_values, shaped_headers(), st.sampled_from(TIME_FIELDS))
# found: int() read " 1", "+1" and "1_0" as sequence numbers
@example(Shape(seq_header="seq"), b"k", VALID, (("seq", b" 1_0"),), ())
# found: a null seq header raised TypeError
@example(Shape(seq_header="seq"), b"k", VALID, (("seq", None),), ())
# found: a codec's lone surrogates were accepted, then could not be stored
@example(
    Shape(("k",), codec=HostileCodec({"k": "\udfff", "messageId": "m", "seq": 1})),
    b"",
    b"x",
    (),
    (),
)
@example(Shape(codec=HostileCodec({"messageId": "m\ud800", "seq": 1})), b"k", b"x", (), ())
@example(
    Shape(codec=HostileCodec({"messageId": "m", "seq": 1, "type": "\ud800"})), b"k", b"x", (), ()
)
def test_message_shapes_and_codecs(
    shape: Shape, key: bytes | None, value: bytes | None, headers: Any, time_field: tuple[str, ...]
) -> None:
    try:
        message = parse(key, value, time_field, shape, headers)
    except InvalidMessage as exc:
        check_rejection(exc)
        return
    assert message.key and message.message_id
    assert type(message.seq) is int and 1 <= message.seq <= MAX_SEQ
    if shape.seq_header:  # "an integer in ASCII": digits, nothing else
        raw = [v for k, v in headers if k == shape.seq_header][-1]
        assert raw is not None and raw.isdigit() and int(raw) == message.seq, raw
    for text in (message.key, message.message_id, message.type):
        text.encode("utf-8")  # stored and produced as UTF-8
    check_time(message)
    check_storable(message, packed=True)


@CAMPAIGN
@given(shapes(), event_values, headers_lists)
@example(Shape(("k",), codec=HostileCodec({"k": "\udfff"})), b"x", ())
def test_the_key_field_the_input_is_repartitioned_by(
    shape: Shape, value: bytes | None, headers: Any
) -> None:
    if not shape.key_path:
        shape = Shape(("k",), codec=shape.codec)
    record = SimpleNamespace(value=value, headers=list(headers), partition=0, offset=5, timestamp=1)
    try:
        found = key_field(value, shape)
    except InvalidMessage as exc:
        check_rejection(exc)
        key, out = route(record, shape, "events.in")
        assert key is None and ("seqkeeper.reason", exc.reason.encode()) in out
        return
    assert found and isinstance(found, str)
    key, out = route(record, shape, "events.in")
    assert key == found.encode("utf-8") and out == list(headers)


@CAMPAIGN
@given(
    st.sampled_from([b'{"messageId":"m","type":"t","seq":', b'{"seq":']), st.sampled_from(FRAGMENTS)
)
def test_the_last_of_repeated_names_counts(prefix: bytes, fragment: bytes) -> None:
    """A name given twice: the last is the one read (as in JavaScript,
    Python's json and orjson), whatever the first held; the schema sees
    the same document."""
    value = (
        prefix
        + b"1,"
        + b'"seq":'
        + fragment
        + (b"}" if prefix.startswith(b'{"m') else b',"messageId":"m","type":"t"}')
    )
    doc = loads_or_none(value)
    try:
        message = parse(b"k", value)
    except InvalidMessage as exc:
        check_rejection(exc)  # (stricter than the schema: 1.0 is an integer to it)
        return
    assert message.seq == doc["seq"] and EVENT.is_valid(doc)


def test_every_reason_written_is_documented() -> None:
    """Each dead-letter reason the code can write is in the schema's enum
    (``processor-failed`` and the command topic's were missing) and in the
    README's topic contracts."""
    from seqkeeper.processors.command import CommandReason
    from seqkeeper.processors.envelope import Reason
    from seqkeeper.processors.processor import PROCESSOR_FAILED
    from tests.hostile.hostile import command_reasons

    def constants(cls: type) -> set[str]:
        return {v for k, v in vars(cls).items() if k.isupper()}

    written = constants(Reason) | constants(CommandReason) | {PROCESSOR_FAILED}
    assert written <= REASONS, written - REASONS
    assert constants(CommandReason) <= command_reasons()


@given(
    st.one_of(
        st.text(max_size=12), st.lists(st.text(min_size=1, max_size=4), max_size=4).map(".".join)
    )
)
def test_a_dotted_path_setting_is_its_field_names_or_refused(text: str) -> None:
    """``SEQKEEPER_KEY_FIELD`` and the other dotted paths: the parts between
    the dots, none empty, or a ValueError (a one-line setting error)."""
    from seqkeeper.settings import field_path

    try:
        parts = field_path(text)
    except ValueError as exc:
        assert "\n" not in str(exc) and (text.startswith(".") or text.endswith(".") or ".." in text)
        return
    assert ".".join(parts) == text and all(parts)
