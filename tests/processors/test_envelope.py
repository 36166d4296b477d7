import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.envelope import MAX_SEQ, InvalidMessage, Reason, parse


def value(**fields: object) -> bytes:
    base: dict[str, object] = {"messageId": "m1", "seq": 1, "type": "t"}
    base.update(fields)
    return orjson.dumps({k: v for k, v in base.items() if v is not ...})


def test_valid_message_keeps_original_bytes() -> None:
    raw = value(data={"a": [1, 2]}, metadata={"x": 1}, extra="kept")
    msg = parse(b"k", raw)
    assert (msg.key, msg.message_id, msg.seq, msg.type) == ("k", "m1", 1, "t")
    assert msg.value is raw


@pytest.mark.parametrize(
    ("key", "raw", "reason"),
    [
        (None, value(), Reason.MISSING_KEY),
        (b"", value(), Reason.MISSING_KEY),
        (b"\xff", value(), Reason.INVALID_KEY),
        (b"k", None, Reason.NULL_VALUE),
        (b"k", b"{nope", Reason.INVALID_JSON),
        (b"k", b'{"messageId": "\xff", "seq": 1, "type": "t"}', Reason.INVALID_UTF8),
        (b"k", b"[1]", Reason.NOT_AN_OBJECT),
        (b"k", value(messageId=...), Reason.MISSING_FIELD),
        (b"k", value(seq=...), Reason.MISSING_FIELD),
        (b"k", value(type=...), Reason.MISSING_FIELD),
        (b"k", value(messageId=""), Reason.INVALID_FIELD),
        (b"k", value(messageId=5), Reason.INVALID_FIELD),
        (b"k", value(seq=0), Reason.INVALID_FIELD),
        (b"k", value(seq=-1), Reason.INVALID_FIELD),
        (b"k", value(seq=True), Reason.INVALID_FIELD),
        (b"k", value(seq="3"), Reason.INVALID_FIELD),
        (b"k", value(seq=1.0), Reason.INVALID_FIELD),
        (b"k", value(seq=MAX_SEQ + 1), Reason.INVALID_FIELD),
        (b"k", value(type=None), Reason.INVALID_FIELD),
        (b"k", value(metadata=[1]), Reason.INVALID_FIELD),
    ],
)
def test_invalid_records_name_their_reason(
    key: bytes | None, raw: bytes | None, reason: str
) -> None:
    with pytest.raises(InvalidMessage) as info:
        parse(key, raw)
    assert info.value.reason == reason
    assert info.value.detail


@given(st.binary(max_size=64))
def test_parse_never_raises_anything_but_invalid_message(raw: bytes) -> None:
    try:
        parse(b"k", raw)
    except InvalidMessage as exc:
        assert exc.reason


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        (1_700_000_000_123, 1_700_000_000.123),
        ("2023-11-14T22:13:20.5+00:00", 1_700_000_000.5),
        ("2023-11-14T22:13:20Z", 1_700_000_000.0),
    ],
)
def test_event_time_field(field: object, expected: float) -> None:
    value = orjson.dumps({"messageId": "m", "seq": 1, "type": "t", "metadata": {"ts": field}})
    assert parse(b"k", value, ("metadata", "ts")).event_time == pytest.approx(expected)
    assert parse(b"k", value).event_time is None  # not configured


@pytest.mark.parametrize("field", ["yesterday", "2023-11-14T22:13:20", True, -5, [1], 1e300])
def test_an_event_time_that_is_not_a_time_is_invalid(field: object) -> None:
    value = orjson.dumps({"messageId": "m", "seq": 1, "type": "t", "metadata": {"ts": field}})
    with pytest.raises(InvalidMessage) as info:
        parse(b"k", value, ("metadata", "ts"))
    assert info.value.reason == Reason.INVALID_FIELD and "metadata.ts" in info.value.detail


def test_a_missing_event_time_is_none() -> None:
    value = orjson.dumps({"messageId": "m", "seq": 1, "type": "t"})
    assert parse(b"k", value, ("metadata", "ts")).event_time is None


FIELD_VALUES = {
    "messageId": (["m-1"], [..., "", 5, None, ["m"]]),
    "seq": ([1, MAX_SEQ], [..., 0, True, "3", 1.0, None, MAX_SEQ + 1]),
    "type": (["t", ""], [..., None, 3, {"t": 1}]),
}


@given(st.data())
def test_the_first_wrong_required_field_is_the_one_named(data: st.DataObject) -> None:
    """Required fields are checked in order (messageId, seq, type): the
    error names the first one that is missing or wrong; all right, it parses."""
    fields: dict[str, object] = {}
    first_wrong = None
    for name, (good, bad) in FIELD_VALUES.items():
        right = data.draw(st.booleans())
        fields[name] = data.draw(st.sampled_from(good if right else bad))
        if not right and first_wrong is None:
            first_wrong = name
    raw = value(**fields)
    if first_wrong is None:
        message = parse(b"k", raw)
        assert (message.message_id, message.seq, message.type) == (
            fields["messageId"],
            fields["seq"],
            fields["type"],
        )
        return
    with pytest.raises(InvalidMessage) as info:
        parse(b"k", raw)
    missing = fields[first_wrong] is ...
    assert info.value.reason == (Reason.MISSING_FIELD if missing else Reason.INVALID_FIELD)
    assert first_wrong in info.value.detail


# -- message shapes: key, sequence and messageId from fields or headers ---------

from seqkeeper.processors.envelope import DEFAULT_SHAPE, Shape  # noqa: E402


class KeyValueCodec:
    """A user's codec: ``a=1;b=x`` text, numbers as integers."""

    def decode(self, value: bytes) -> dict[str, object]:
        pairs = (part.split("=", 1) for part in value.decode().split(";") if part)
        return {k: int(v) if v.isdigit() else v for k, v in pairs}


class JsonCodec:
    def decode(self, value: bytes) -> object:
        return orjson.loads(value)


@given(
    st.text(min_size=1, max_size=8).filter(lambda k: "\x00" not in k),
    st.integers(1, MAX_SEQ),
    st.text(min_size=1, max_size=8),
    st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=3),
)
def test_a_shape_naming_the_default_places_reads_what_the_default_reads(
    key: str, seq: int, mid: str, headers: list[tuple[str, bytes]]
) -> None:
    value = orjson.dumps({"messageId": mid, "seq": seq, "type": "t", "data": {"k": key}})
    fast = parse(key.encode(), value, headers=tuple(headers))
    # the same places, spelled out (a codec object makes it a non-default shape)
    shaped = parse(key.encode(), value, shape=Shape(codec=JsonCodec()), headers=tuple(headers))
    assert shaped == fast and fast.headers == tuple(headers)


def test_key_sequence_and_message_id_from_dotted_fields_and_headers() -> None:
    value = orjson.dumps({"account": {"id": "acct-7"}, "meta": {"id": "m-1"}, "kind": "x"})
    headers = (("traceparent", b"00-abc-01"), ("x-seq", b"41"), ("x-seq", b"42"))
    shape = Shape(key_path=("account", "id"), seq_header="x-seq", id_path=("meta", "id"))
    m = parse(b"ignored", value, shape=shape, headers=headers)
    assert (m.key, m.seq, m.message_id, m.type) == ("acct-7", 42, "m-1", "")
    assert m.value == value and m.headers == headers
    by_header = Shape(seq_path=("n",), id_header="message-id")
    m = parse(b"k", b'{"n": 3}', shape=by_header, headers=(("message-id", b"abc"),))
    assert (m.key, m.seq, m.message_id) == ("k", 3, "abc")


@pytest.mark.parametrize(
    ("shape", "value", "headers", "reason", "says"),
    [
        (Shape(key_path=("a", "b")), b'{"a": {}}', (), Reason.MISSING_FIELD, "'a.b' is missing"),
        (Shape(key_path=("a",)), b'{"a": ""}', (), Reason.INVALID_KEY, "non-empty string"),
        (Shape(seq_header="s"), b'{"messageId": "m"}', (), Reason.MISSING_FIELD, "header 's'"),
        (Shape(seq_header="s"), b'{"messageId": "m"}', (("s", b"x"),), Reason.INVALID_FIELD,
         "header s must be an integer"),
        (Shape(id_path=("m", "id")), b'{"seq": 1, "m": {"id": 5}}', (), Reason.INVALID_FIELD,
         "m.id must be a non-empty string"),
        (Shape(codec=KeyValueCodec()), b"\xff", (), Reason.INVALID_JSON, "cannot be decoded"),
    ],
)  # fmt: skip
def test_a_shape_names_what_is_missing_or_wrong(
    shape: Shape, value: bytes, headers: tuple[tuple[str, bytes], ...], reason: str, says: str
) -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse(b"k", value, shape=shape, headers=headers)
    assert caught.value.reason == reason and says in caught.value.detail


def test_a_user_codec_reads_the_value() -> None:
    m = parse(b"k", b"messageId=m9;seq=9;type=Posted", shape=Shape(codec=KeyValueCodec()))
    assert (m.message_id, m.seq, m.type) == ("m9", 9, "Posted")
    assert DEFAULT_SHAPE.is_default and not Shape(seq_header="s").is_default
