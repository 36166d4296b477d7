"""Ordered processor: a user's function over each key's messages, once each,
in sequence order, with durable per-key state and an outbox.

After the Idempotent Receiver and the Resequencer, every released message
(and every gap given up, as a ``seqkeeper.GapSkipped`` message) reaches the
user's ``fn(state, message) -> (new_state, outputs)``. ``state`` is ``None``
for a new key, else the JSON value ``fn`` last returned. The outputs get
deterministic messageIds, ``<input messageId>:<n>``, and are stored with the
new state before they are produced (an outbox): a message is processed
once, and after a crash its stored outputs are produced again byte for
byte, so ``fn`` need not be deterministic.

This module is the pure part: the message ``fn`` sees (:func:`message_of`),
checking and encoding what it returns (:func:`results`), the dead letter of
a message it kept failing on (:func:`dead_letter`), and the cursor rule
(:func:`is_done`). Running ``fn`` (sync or async, timeouts, retries on a
timer) is the shell's (:mod:`seqkeeper.topologies.processing`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import orjson

from seqkeeper.processors.dead_letter import dead_letter_headers
from seqkeeper.processors.envelope import output_id, trace_of
from seqkeeper.processors.resequencer import GAP_SKIPPED, Emission, GapSkipped
from seqkeeper.processors.return_address import legal_topic, matches
from seqkeeper.processors.values import value

__all__ = [
    "GAP_SKIPPED",
    "PROCESSOR_FAILED",
    "InvalidResult",
    "Message",
    "Output",
    "OutputTopics",
    "Processor",
    "TOPIC_ROLE",
    "TopicNotAllowed",
    "command_message",
    "dead_letter",
    "first_seq",
    "is_done",
    "last_seq",
    "message_of",
    "results",
]

#: The dead-letter reason of a message the processor kept failing on.
PROCESSOR_FAILED = "processor-failed"

#: What the shell queues for an output record: (role, key, value, headers).
OutRecord = tuple[str, bytes, bytes, list[tuple[str, bytes]] | None]
#: The role of an output to a topic the processor named: this prefix and
#: the topic's name (``"processed"``: the processed topic).
TOPIC_ROLE = "topic:"


@dataclass(frozen=True)
class Message:
    """A message as an ordered processor sees it.

    ``body`` is the whole JSON object of the input value (``data`` is its
    ``data`` field). A gap given up arrives as ``type ==
    "seqkeeper.GapSkipped"`` with ``data == {"from": a, "to": b}`` and
    ``seq == a``."""

    key: str
    seq: int
    message_id: str
    type: str
    data: Any
    body: Mapping[str, Any] = field(repr=False)
    #: the input record's headers, as they came
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True)
class Output:
    """An output with more than a value: its ``type``, another Kafka
    ``key`` (default: the input's key), ``headers``, or another ``topic``
    (default: the processed topic; others must be allowed by
    ``SEQKEEPER_PROCESSOR_TOPICS``, else the input is dead-lettered). A
    plain JSON value in ``outputs`` is ``Output(value)``."""

    data: Any
    type: str | None = None
    key: str | None = None
    headers: Sequence[tuple[str, str | bytes]] = ()
    topic: str | None = None
    #: ``False``: ``data`` is the whole value, written as it is (another
    #: service's format, a Command Message: :func:`command_message`), not
    #: in seqkeeper's envelope; its id is then the caller's to make
    #: deterministic (``type`` is not used)
    envelope: bool = True


@value
class OutputTopics:
    """Where outputs may go besides the processed topic: a topic one of
    ``allowed`` matches (``*``: any run of characters), that is a legal
    Kafka name, none of the worker's ``own`` topics (its input, its other
    outputs: an output read back as input would loop), starts with none of
    its ``own_prefixes`` (its changelog) and is no Kafka internal topic
    (``__…``). ``processed`` is the processed topic itself,
    which an output may also name."""

    allowed: tuple[str, ...] = ()
    processed: str = ""
    own: tuple[str, ...] = ()
    #: the worker's internal topics (changelog, ...) by prefix
    own_prefixes: tuple[str, ...] = ()
    setting: str = "the topics allowed"

    def refusal(self, topic: str) -> str | None:
        """Why an output may not go to ``topic`` (``None``: it may)."""
        if not legal_topic(topic):
            return f"topic {topic[:300]!r} is not a Kafka topic name"
        if topic.replace(".", "_").startswith("__"):
            return f"topic {topic!r} is a Kafka internal topic"
        seen = topic.replace(".", "_")  # (Kafka: '.' and '_' collide)
        for own in self.own:
            if seen == own.replace(".", "_"):
                return f"topic {topic!r} is one of the worker's own topics"
        for prefix in self.own_prefixes:
            if seen.startswith(prefix.replace(".", "_")):
                return f"topic {topic!r} is an internal topic of the worker (prefix {prefix!r})"
        if not any(matches(pattern, topic) for pattern in self.allowed):
            allowed = ",".join(self.allowed) or "none"
            return f"topic {topic!r} is not among {self.setting} ({allowed}): add it there"
        return None


#: The user's function: sync, or async (awaited with a timeout).
Processor = Callable[
    [Any, Message],
    Union[tuple[Any, Sequence[Any]], Awaitable[tuple[Any, Sequence[Any]]]],
]


class InvalidResult(TypeError):
    """``fn`` returned something seqkeeper cannot store or produce."""


class TopicNotAllowed(InvalidResult):
    """An output names a topic outputs may not go to: the configuration
    decides, so trying again cannot help (the input is dead-lettered at
    once). ``topic``: the topic named."""

    def __init__(self, text: str, topic: str) -> None:
        super().__init__(text)
        self.topic = topic


def first_seq(item: Emission) -> int:
    """The first sequence an emission covers (a gap covers a range)."""
    return item.first if isinstance(item, GapSkipped) else item.seq


def last_seq(item: Emission) -> int:
    """The last sequence an emission covers (a gap covers a range)."""
    return item.last if isinstance(item, GapSkipped) else item.seq


def is_done(item: Emission, cursor: int) -> bool:
    """Whether ``item`` was processed already: the key's cursor (the last
    sequence processed, 0 for none) is at or past it. Items reach the
    processor in sequence order, so one number per key is the whole
    record of what was processed."""
    return last_seq(item) <= cursor


def message_of(key: str, item: Emission, decode: Callable[[bytes], Any] = orjson.loads) -> Message:
    """The :class:`Message` ``fn`` sees for a released item (``decode``:
    the input's codec)."""
    if isinstance(item, GapSkipped):
        body = item.document
        return Message(key, item.first, item.message_id, GAP_SKIPPED, body["data"], body)
    body = decode(item.value)
    data = body.get("data") if isinstance(body, Mapping) else None
    return Message(key, item.seq, item.message_id, item.type, data, body, item.headers)


#: No topic besides the processed topic (the default).
NO_TOPICS = OutputTopics()


def role_of(out: Output, topics: OutputTopics, n: int) -> str:
    """The role of output ``n``: ``"processed"``, or :data:`TOPIC_ROLE`
    and the topic it names; :class:`TopicNotAllowed` when ``topics`` do
    not allow it."""
    topic = out.topic
    if topic is None or (topic == topics.processed and topic):
        return "processed"
    if not isinstance(topic, str):
        raise InvalidResult(f"output {n}: topic must be a string, got {type(topic).__name__}")
    why = topics.refusal(topic)
    if why is not None:
        raise TopicNotAllowed(f"output {n}: {why}", topic)
    return TOPIC_ROLE + topic


def results(
    message: Message,
    result: Any,
    topics: OutputTopics = NO_TOPICS,
    encode: Callable[[Any], bytes] | None = None,
) -> tuple[bytes, list[OutRecord]]:
    """Check what ``fn`` returned for ``message`` and encode it: the new
    state as JSON (seqkeeper's own record), and the output records (role
    ``"processed"``, or :data:`TOPIC_ROLE` and a topic ``topics`` allow)
    with their messageIds, each enveloped value written by ``encode`` (the
    value codec's; ``None``: JSON; an ``envelope=False`` value, a command
    for the command worker, is always JSON, the command worker's format).
    Raises :class:`InvalidResult` saying what is wrong (its subclass
    :class:`TopicNotAllowed` for a topic not allowed)."""
    if not isinstance(result, tuple) or len(result) != 2:
        raise InvalidResult(
            f"the processor must return (new_state, outputs), got {type(result).__name__}"
        )
    state, outputs = result
    try:
        encoded_state = orjson.dumps(state)
    except TypeError as exc:
        raise InvalidResult(f"the new state is not JSON-serialisable: {exc}") from None
    if outputs is None:
        outputs = ()
    if isinstance(outputs, (str, bytes, Mapping)) or not isinstance(outputs, Sequence):
        raise InvalidResult(f"outputs must be a list, got {type(outputs).__name__}")
    records: list[OutRecord] = []
    for n, item in enumerate(outputs, 1):
        out = item if isinstance(item, Output) else Output(item)
        role = role_of(out, topics, n)
        mid = output_id(message.key, message.message_id, str(n))  # (input ids: unique per key)
        body: Any = out.data
        if out.envelope:
            body = {
                "messageId": mid,
                "causationId": message.message_id,
                "key": message.key,
                "seq": message.seq,
            }
            if out.type is not None:
                body["type"] = out.type
            body["data"] = out.data
        if encode is None or not out.envelope:
            try:
                value = orjson.dumps(body)
            except TypeError as exc:
                raise InvalidResult(f"output {n} is not JSON-serialisable: {exc}") from None
        else:
            try:
                value = encode(body)
            except Exception as exc:  # noqa: BLE001 - the codec's: any failure is the output's
                raise InvalidResult(
                    f"output {n} cannot be encoded by the value codec: {type(exc).__name__}: {exc}"
                ) from None
            if not isinstance(value, bytes):
                raise InvalidResult(
                    f"output {n}: the value codec's encode returned a "
                    f"{type(value).__name__}, not bytes"
                )
        key = message.key if out.key is None else out.key
        if not isinstance(key, str) or not key:
            raise InvalidResult(f"output {n}: key must be a non-empty string, got {key!r}")
        headers = [
            (name, h.encode() if isinstance(h, str) else bytes(h)) for name, h in out.headers
        ]
        own = {name for name, _ in headers}
        headers += [(n, h) for n, h in trace_of(message.headers) if n not in own]  # a trace goes on
        records.append((role, key.encode(), value, headers or None))
    return encoded_state, records


def command_message(
    message: Message,
    name: str,
    command_type: str,
    partition_key: str,
    payload: Any,
    *,
    tenant_id: str,
    topic: str,
    reply_to: str | None = None,
    schema_version: int = 1,
) -> Output:
    """A Command Message for the command worker (an :class:`Output` to
    ``topic``, its Kafka key the ``partition_key``), sent by a processor
    (a process manager) as its step on ``message``. Its messageId is
    ``<message.key>/<message.message_id>:<name>`` (:func:`output_id`), the
    same however often ``message`` is processed or its outputs produced
    again, so the command worker applies it once; ``name`` tells apart the
    commands of one step. ``correlationId`` is the processor's key, so the
    events the command's handler emits name it (the saga's input can be
    keyed by it: ``SEQKEEPER_KEY_FIELD=correlationId``); ``causationId`` is
    ``message``'s id."""
    command: dict[str, Any] = {
        "messageId": output_id(message.key, message.message_id, name),
        "commandType": command_type,
        "schemaVersion": schema_version,
        "correlationId": message.key,
        "causationId": message.message_id,
        "partitionKey": partition_key,
        "tenantId": tenant_id,
        "payload": payload,
    }
    if reply_to is not None:
        command["replyTo"] = reply_to
    return Output(command, key=partition_key, topic=topic, envelope=False)


def describe_error(exc: BaseException) -> tuple[str, str]:
    """An exception's class name and a one-line text for dead-letter headers."""
    cls = f"{type(exc).__module__}.{type(exc).__qualname__}"
    text = str(exc)
    return cls, f"{cls}: {text}" if text else cls


def dead_letter(
    key: str,
    item: Emission,
    error: str,
    exception_class: str,
    attempts: int,
    origin: tuple[str, int, int],
    encode: Callable[[Any], bytes] | None = None,
) -> OutRecord:
    """The dead letter of a message ``fn`` failed on ``attempts`` times:
    the input value as is (a gap marker's in the value codec, whose
    ``encode`` is given; ``None``: JSON), the reason and the last error in
    headers. ``origin``: input topic, partition and offset (``-1``: not known)."""
    detail = f"processor failed {attempts} times; last error: {error}"
    headers = dead_letter_headers(
        PROCESSOR_FAILED, detail, *origin, exception_class=exception_class
    )
    headers.append(("seqkeeper.attempts", str(attempts).encode()))
    headers.append(("seqkeeper.seq", str(first_seq(item)).encode()))
    value = item.encoded(encode) if isinstance(item, GapSkipped) else item.value
    return ("dlq", key.encode(), value, headers)
