"""The input envelope of the ordered/deduplicated topics, parsed and validated.

Kafka key = the sequence key (UTF-8). Value = a JSON object with ``messageId``
(non-empty string), ``seq`` (integer >= 1), ``type`` (string), optional
``data`` (any JSON) and ``metadata`` (object); other fields are carried
through unchanged because the original bytes are what we emit.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, NoReturn

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


class InvalidMessage(ValueError):
    """A record that is not a valid envelope; ``reason`` is a :class:`Reason`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@value
class Message:
    """A valid input message. ``value`` is the original bytes, emitted as is."""

    key: str
    message_id: str
    seq: int
    type: str
    value: bytes
    #: Event time in seconds, when a time field is configured and present.
    event_time: float | None = None


def parse(key: bytes | None, value: bytes | None, time_field: tuple[str, ...] = ()) -> Message:
    """Validate a record; raise :class:`InvalidMessage` naming what is wrong.

    ``time_field``: the path of an optional event-time field (for example
    ``("metadata", "timestamp")``): epoch milliseconds (a number) or an
    ISO-8601 string with a UTC offset. Missing: ``event_time`` is ``None``;
    present but not a time: an ``invalid-field`` error."""
    if key is None or key == b"":
        raise InvalidMessage(Reason.MISSING_KEY, "the Kafka key (the sequence key) is empty")
    try:
        skey = key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidMessage(Reason.INVALID_KEY, f"the Kafka key is not UTF-8: {exc}") from None
    if value is None:
        raise InvalidMessage(
            Reason.NULL_VALUE, "the value is null (a tombstone); expected a JSON object"
        )
    try:
        doc: Any = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        text = str(exc)
        reason = Reason.INVALID_UTF8 if "utf-8" in text.lower() else Reason.INVALID_JSON
        raise InvalidMessage(reason, f"the value is not valid JSON: {text}") from None
    if not isinstance(doc, dict):
        raise InvalidMessage(
            Reason.NOT_AN_OBJECT, f"the value is a JSON {type(doc).__name__}; expected an object"
        )
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
    return Message(skey, message_id, seq, mtype, value, event_time)


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
