"""Dead-letter records: the original bytes, and the reason in headers.

Headers follow both common conventions so existing tooling reads them:
Spring Kafka (``kafka_dlt-*``) and Kafka Connect (``__connect.errors.*``),
plus ``seqkeeper.reason`` (a stable code) and ``seqkeeper.detail`` (prose).

Each convention is written as its own tool writes it, so that tool reads ours
as its own. Spring Kafka's ``DeadLetterPublishingRecoverer``
(spring-projects/spring-kafka,
``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterPublishingRecoverer.java``,
``maybeAddOriginalHeaders``) writes the original partition as
``ByteBuffer.allocate(Integer.BYTES).putInt(partition)`` and the offset and
timestamp as ``ByteBuffer.allocate(Long.BYTES).putLong(...)``: 4- and 8-byte
big-endian two's complement integers, read back with ``ByteBuffer.wrap(v)
.getInt()``/``getLong()``; its topic, exception class and message are UTF-8
text. Kafka Connect's ``DeadLetterQueueReporter.populateContextHeaders``
writes its partition and offset as ``String.valueOf(...)`` in UTF-8:
decimal digits, ``-1`` when not known. :func:`readable` shows both as numbers.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable

REASON = "seqkeeper.reason"
DETAIL = "seqkeeper.detail"
#: Spring Kafka's names (``KafkaHeaders.DLT_*``).
ORIGINAL_TOPIC = "kafka_dlt-original-topic"
ORIGINAL_PARTITION = "kafka_dlt-original-partition"
ORIGINAL_OFFSET = "kafka_dlt-original-offset"
ORIGINAL_TIMESTAMP = "kafka_dlt-original-timestamp"
EXCEPTION_FQCN = "kafka_dlt-exception-fqcn"
EXCEPTION_MESSAGE = "kafka_dlt-exception-message"
#: The Spring headers that hold a binary integer, and its ``struct`` format:
#: Java's ``int`` (partition) and ``long`` (offset, timestamp), big-endian.
SPRING_BINARY: dict[str, str] = {
    ORIGINAL_PARTITION: ">i",
    ORIGINAL_OFFSET: ">q",
    ORIGINAL_TIMESTAMP: ">q",
}
#: Characters of a detail kept: a detail quotes the offending value, and it
#: goes in three headers, so an unbounded one could make the dead letter
#: larger than the broker takes (and its input was within the limit).
DETAIL_LIMIT = 1000


def bounded(detail: str) -> bytes:
    """A detail as a header value: at most :data:`DETAIL_LIMIT` characters
    (the cut said), UTF-8, a lone surrogate escaped (a user's exception
    text may hold one)."""
    if len(detail) > DETAIL_LIMIT:
        detail = f"{detail[:DETAIL_LIMIT]}... ({len(detail)} characters in all)"
    return detail.encode("utf-8", "backslashreplace")


def spring_int(name: str, number: int) -> bytes:
    """``number`` as Spring Kafka writes header ``name`` (a key of
    :data:`SPRING_BINARY`); ``struct.error`` when it does not fit a Java
    ``int``/``long``, as Kafka's own partitions and offsets always do."""
    return struct.pack(SPRING_BINARY[name], number)


def dead_letter_headers(
    reason: str,
    detail: str,
    topic: str,
    partition: int,
    offset: int | None,
    timestamp: int | None = None,
    exception_class: str = "seqkeeper.InvalidMessage",
) -> list[tuple[str, bytes]]:
    """Headers for a dead-lettered record from ``topic``/``partition``/``offset``
    (``offset`` ``None``: not known, its headers left out; ``timestamp`` in
    epoch milliseconds, ``None``: left out)."""
    text = bounded(detail)
    spring_offset = (
        [] if offset is None else [(ORIGINAL_OFFSET, spring_int(ORIGINAL_OFFSET, offset))]
    )
    connect_offset = [] if offset is None else [("__connect.errors.offset", str(offset).encode())]
    headers = [
        (REASON, reason.encode()),
        (DETAIL, text),
        (ORIGINAL_TOPIC, topic.encode()),
        (ORIGINAL_PARTITION, spring_int(ORIGINAL_PARTITION, partition)),
        *spring_offset,
        (EXCEPTION_FQCN, exception_class.encode()),
        (EXCEPTION_MESSAGE, text),
        ("__connect.errors.topic", topic.encode()),
        ("__connect.errors.partition", str(partition).encode()),
        *connect_offset,
        ("__connect.errors.exception.class.name", exception_class.encode()),
        ("__connect.errors.exception.message", text),
    ]
    if timestamp is not None:
        headers.append((ORIGINAL_TIMESTAMP, spring_int(ORIGINAL_TIMESTAMP, timestamp)))
    return headers


def readable(headers: Iterable[tuple[str, bytes | None]]) -> dict[str, str]:
    """A dead letter's headers as text for people: each Spring binary
    integer as its decimal number (a value of another width, which no
    Spring reader takes either, as its text), every other value as UTF-8
    (invalid bytes escaped), a null one as ``""``; the last of a name wins,
    as Kafka's ``lastHeader``."""
    out: dict[str, str] = {}
    for name, raw in headers:
        if raw is None:
            out[name] = ""
            continue
        fmt = SPRING_BINARY.get(name)
        if fmt is not None and len(raw) == struct.calcsize(fmt):
            out[name] = str(struct.unpack(fmt, raw)[0])
        else:
            out[name] = raw.decode("utf-8", "backslashreplace")
    return out


def schema_document(headers: Iterable[tuple[str, bytes | None]]) -> dict[str, str | None]:
    """Headers as the JSON object ``schemas/dead-letter-headers.schema.json``
    describes: each Spring binary integer's bytes in base64 (JSON has no
    bytes; the schema says ``contentEncoding: base64`` and the width), every
    other value as UTF-8 text (``UnicodeDecodeError`` if it is not: the
    schema's text headers are UTF-8), a null one as ``None``; the last of a
    name wins."""
    out: dict[str, str | None] = {}
    for name, raw in headers:
        if raw is None:
            out[name] = None
        elif name in SPRING_BINARY:
            out[name] = base64.b64encode(raw).decode("ascii")
        else:
            out[name] = raw.decode("utf-8")
    return out
