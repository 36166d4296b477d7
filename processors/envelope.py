"""The input envelope of the ordered/deduplicated topics, parsed and validated.

Kafka key = the sequence key (UTF-8). Value = a JSON object with ``messageId``
(non-empty string), ``seq`` (integer >= 1), ``type`` (string), optional
``data`` (any JSON) and ``metadata`` (object); other fields are carried
through unchanged because the original bytes are what we emit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NoReturn, Protocol

import orjson

from seqkeeper.processors.values import value

#: Largest accepted sequence number (sequences are stored as 8-byte integers).
MAX_SEQ = 2**63 - 1


class Reason:
    """Dead-letter reasons (the ``seqkeeper.reason`` header)."""

    MISSING_KEY = "missing-key"
    INVALID_KEY = "invalid-key"
    NULL_VALUE = "null-value"
    INVALID_UTF8 = "invalid-utf8"
    INVALID_JSON = "invalid-json"
    NOT_AN_OBJECT = "not-an-object"
    MISSING_FIELD = "missing-field"
    INVALID_FIELD = "invalid-field"
    SEQUENCE_CONFLICT = "sequence-conflict"
    LATE_ARRIVAL = "late-arrival"
    BUFFER_OVERFLOW = "buffer-overflow"
    #: the event time runs further ahead of the worker's clock than allowed
    FUTURE_EVENT_TIME = "future-event-time"


class InvalidMessage(ValueError):
    """A record that is not a valid envelope; ``reason`` is a :class:`Reason`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


#: A record's headers as the broker gives them: (name, bytes) pairs, in
#: order; a value is ``None`` when the producer sent a null one (Kafka allows it).
Headers = tuple[tuple[str, bytes | None], ...]


@value
class Message:
    """A valid input message. ``value`` is the original bytes and
    ``headers`` the original headers, emitted as they are."""

    key: str
    message_id: str
    seq: int
    type: str
    value: bytes
    #: Event time in seconds, when a time field is configured and present.
    event_time: float | None = None
    headers: Headers = ()


#: Headers that go on from a message to what is made of it (a command's
#: reply and events, a processor's outputs): a W3C trace.
TRACE_HEADERS = ("traceparent", "tracestate")


def scoped(scope: str, name: str) -> str:
    """``name`` within ``scope`` (a tenant, a key): ``<len(scope)>:<scope>/<name>``
    (the length makes the split unambiguous whatever either contains)."""
    return f"{len(scope)}:{scope}/{name}"


def unscoped(text: str) -> tuple[str, str]:
    """The scope and the name of a :func:`scoped` text; ``ValueError`` if
    ``text`` is not one."""
    length, _, rest = text.partition(":")
    if length.isascii() and length.isdigit():
        n = int(length)
        scope, name = rest[:n], rest[n + 1 :]
        if scoped(scope, name) == text:
            return scope, name
    raise ValueError(f"not a scoped name: {text!r}")


def output_id(scope: str, message_id: str, suffix: str) -> str:
    """The messageId of output ``suffix`` (``1``, ``2``, …, ``reply``) of
    input ``message_id``, whose ids are unique only within ``scope`` (a
    command's tenant, a processor's key): ``<scoped(scope, message_id)>:<suffix>``.
    Distinct (scope, message_id, suffix) give distinct ids: :func:`scoped`
    is one-to-one and a suffix holds no ``:``. Deterministic, so an output
    made again carries the same id."""
    assert ":" not in suffix
    return f"{scoped(scope, message_id)}:{suffix}"


def trace_of(headers: Iterable[tuple[str, bytes | None]]) -> tuple[tuple[str, bytes], ...]:
    """The trace headers among a record's headers, in their order (a null
    one carries no trace)."""
    return tuple((k, bytes(v)) for k, v in headers if k in TRACE_HEADERS and v is not None)


class Codec(Protocol):
    """How record values are read and written: bytes to a document (a
    mapping for a valid message) and back. JSON is built in, Avro too
    (``SEQKEEPER_CODEC=avro``); a user's codec (Protobuf, …) is named by
    ``SEQKEEPER_CODEC``. ``decode`` raises ``ValueError`` (or a subclass)
    for bytes it cannot read; ``encode`` makes every value seqkeeper
    writes itself (gap markers, processor outputs), so one topic never
    mixes formats, and raises for a document it cannot write."""

    def decode(self, value: bytes) -> Any: ...

    def encode(self, document: Any) -> bytes: ...


@value
class Shape:
    """Where a message's key, sequence and messageId are. A path is a
    field of the value (dotted in the settings); a header name takes the
    header's value (an integer in ASCII, for the sequence) instead. An
    empty key path means the Kafka key."""

    key_path: tuple[str, ...] = ()
    seq_path: tuple[str, ...] = ("seq",)
    seq_header: str = ""
    id_path: tuple[str, ...] = ("messageId",)
    id_header: str = ""
    codec: Codec | None = None  # None: JSON

    @property
    def is_default(self) -> bool:
        return self == DEFAULT_SHAPE


DEFAULT_SHAPE = Shape()


def parse(
    key: bytes | None,
    value: bytes | None,
    time_field: tuple[str, ...] = (),
    shape: Shape = DEFAULT_SHAPE,
    headers: Headers = (),
) -> Message:
    """Validate a record; raise :class:`InvalidMessage` naming what is wrong.

    ``time_field``: the path of an optional event-time field (for example
    ``("metadata", "timestamp")``): epoch milliseconds (a number) or an
    ISO-8601 string with a UTC offset. Missing: ``event_time`` is ``None``;
    present but not a time: an ``invalid-field`` error. ``shape``: where
    the key, sequence and messageId are (the default: the Kafka key and
    the ``seq`` and ``messageId`` fields, with ``type`` required)."""
    if shape is not DEFAULT_SHAPE and not shape.is_default:
        return _parse_shaped(key, value, time_field, shape, headers)
    skey = _kafka_key(key)
    if value is None:
        raise _null()
    doc = _document(value, None)
    message_id, seq, mtype = doc.get("messageId"), doc.get("seq"), doc.get("type")
    # (orjson makes exact str and int; a bool is not an int here)
    if not (
        type(message_id) is str
        and message_id
        and type(seq) is int
        and 1 <= seq <= MAX_SEQ
        and type(mtype) is str
    ):
        _invalid(doc)
    metadata = doc.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidMessage(Reason.INVALID_FIELD, f"metadata must be an object, got {metadata!r}")
    event_time = _event_time(doc, time_field) if time_field else None
    return Message(skey, message_id, seq, mtype, value, event_time, headers)


def _parse_shaped(
    key: bytes | None,
    value: bytes | None,
    time_field: tuple[str, ...],
    shape: Shape,
    headers: Headers,
) -> Message:
    if value is None:
        raise _null()
    doc = _document(value, shape.codec)
    skey = _key_in(doc, shape) if shape.key_path else _kafka_key(key)
    if shape.seq_header:
        raw = _header(headers, shape.seq_header, "seq")
        # ASCII digits only: int() would also take " 1", "+1" and "1_0"
        if not raw.isdigit() or len(raw) > 19:
            raise InvalidMessage(
                Reason.INVALID_FIELD, f"header {shape.seq_header} must be an integer, got {raw!r}"
            )
        seq: Any = int(raw)
    else:
        seq = _dig(doc, shape.seq_path, "seq")
    if type(seq) is not int or not 1 <= seq <= MAX_SEQ:
        where = f"header {shape.seq_header}" if shape.seq_header else ".".join(shape.seq_path)
        raise InvalidMessage(
            Reason.INVALID_FIELD, f"{where} must be an integer from 1 to {MAX_SEQ}, got {seq!r}"
        )
    if shape.id_header:
        raw = _header(headers, shape.id_header, "messageId")
        try:
            message_id: Any = raw.decode("utf-8")
        except UnicodeDecodeError:
            message_id = None
    else:
        message_id = _dig(doc, shape.id_path, "messageId")
    if not isinstance(message_id, str) or not message_id or not _utf8(message_id):
        where = f"header {shape.id_header}" if shape.id_header else ".".join(shape.id_path)
        raise InvalidMessage(
            Reason.INVALID_FIELD, f"{where} must be a non-empty string, got {message_id!r}"
        )
    mtype = doc.get("type", "")
    if not isinstance(mtype, str) or not _utf8(mtype):
        raise InvalidMessage(Reason.INVALID_FIELD, f"type must be a string, got {mtype!r}")
    event_time = _event_time(dict(doc), time_field) if time_field else None
    return Message(skey, message_id, seq, mtype, value, event_time, headers)


def _key_in(doc: Mapping[str, Any], shape: Shape) -> str:
    found = _dig(doc, shape.key_path, "key")
    if isinstance(found, int) and not isinstance(found, bool):
        found = str(found)
    if not isinstance(found, str) or not found or not _utf8(found):
        raise InvalidMessage(
            Reason.INVALID_KEY,
            f"key field {'.'.join(shape.key_path)} must be a non-empty string, got {found!r}",
        )
    return found


def _utf8(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (keys, ids and types are
    stored and produced so). A user's codec can give a lone surrogate,
    which JSON (orjson) never does."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def key_field(value: bytes | None, shape: Shape) -> str:
    """The sequence key a record's value names (``shape.key_path``): what
    the input is repartitioned by. :class:`InvalidMessage` when the value
    cannot be read or names no key."""
    if value is None:
        raise _null()
    return _key_in(_document(value, shape.codec), shape)


def _kafka_key(key: bytes | None) -> str:
    if key is None or key == b"":
        raise InvalidMessage(Reason.MISSING_KEY, "the Kafka key (the sequence key) is empty")
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidMessage(Reason.INVALID_KEY, f"the Kafka key is not UTF-8: {exc}") from None


def _null() -> InvalidMessage:
    return InvalidMessage(
        Reason.NULL_VALUE, "the value is null (a tombstone); expected a JSON object"
    )


def _document(value: bytes, codec: Codec | None) -> Any:
    """A record value as a mapping (JSON, or ``codec``'s), or
    :class:`InvalidMessage` saying why it is none."""
    if codec is None:
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            text = str(exc)
            reason = Reason.INVALID_UTF8 if "utf-8" in text.lower() else Reason.INVALID_JSON
            raise InvalidMessage(reason, f"the value is not valid JSON: {text}") from None
        if type(doc) is not dict:
            raise InvalidMessage(
                Reason.NOT_AN_OBJECT,
                f"the value is a JSON {type(doc).__name__}; expected an object",
            )
        return doc
    try:
        doc = codec.decode(value)
    except Exception as exc:  # noqa: BLE001 - the user's codec: any failure is a bad record
        raise InvalidMessage(
            Reason.INVALID_JSON, f"the value cannot be decoded: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(doc, Mapping):
        raise InvalidMessage(
            Reason.NOT_AN_OBJECT, f"the value is a {type(doc).__name__}; expected an object"
        )
    return doc


def _dig(doc: Mapping[str, Any], path: tuple[str, ...], what: str) -> Any:
    node: Any = doc
    for name in path:
        if not isinstance(node, Mapping) or name not in node:
            raise InvalidMessage(
                Reason.MISSING_FIELD, f"the {what} field {'.'.join(path)!r} is missing"
            )
        node = node[name]
    return node


def _header(headers: Headers, name: str, what: str) -> bytes:
    """The last value of header ``name`` (a producer that sets it again means the later)."""
    for hname, hvalue in reversed(headers):
        if hname == name:
            if hvalue is None:
                raise InvalidMessage(Reason.INVALID_FIELD, f"the {what} header {name!r} is null")
            return bytes(hvalue)
    raise InvalidMessage(Reason.MISSING_FIELD, f"the {what} header {name!r} is missing")


def _invalid(doc: dict[str, Any]) -> NoReturn:
    """Raise what is wrong with the required fields (the first wrong one;
    :func:`parse` found one): each is looked up and checked on its own."""
    message_id = _required(doc, "messageId")
    if not isinstance(message_id, str) or not message_id:
        raise InvalidMessage(
            Reason.INVALID_FIELD, f"messageId must be a non-empty string, got {message_id!r}"
        )
    seq = _required(doc, "seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= MAX_SEQ:
        raise InvalidMessage(
            Reason.INVALID_FIELD, f"seq must be an integer from 1 to {MAX_SEQ}, got {seq!r}"
        )
    mtype = _required(doc, "type")  # the one left that can be wrong
    raise InvalidMessage(Reason.INVALID_FIELD, f"type must be a string, got {mtype!r}")


def _event_time(doc: dict[str, Any], path: tuple[str, ...]) -> float | None:
    node: Any = doc
    for name in path:
        if not isinstance(node, dict) or name not in node:
            return None
        node = node[name]
    return parse_time(node, ".".join(path))


def parse_time(node: Any, where: str) -> float:
    """Seconds since the epoch from epoch milliseconds (a number) or an
    ISO-8601 string with a UTC offset; :class:`InvalidMessage` otherwise."""
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        if math.isfinite(node) and 0 <= node < 2**53:
            return float(node) / 1000.0
    elif isinstance(node, str):
        try:
            parsed = datetime.fromisoformat(node)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is not None:
                return parsed.timestamp()
    raise InvalidMessage(
        Reason.INVALID_FIELD,
        f"{where} must be epoch milliseconds or an ISO-8601 time with a UTC offset, got {node!r}",
    )


def _required(doc: dict[str, Any], field: str) -> Any:
    try:
        return doc[field]
    except KeyError:
        raise InvalidMessage(Reason.MISSING_FIELD, f"required field {field!r} is missing") from None
