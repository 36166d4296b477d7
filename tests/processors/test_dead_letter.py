"""Dead-letter headers are read by Spring Kafka and Kafka Connect as their own.

The Spring-style reader below is written from spring-kafka's source, not from
ours: ``DeadLetterPublishingRecoverer.maybeAddOriginalHeaders`` writes
``ByteBuffer.allocate(Integer.BYTES).putInt(partition)`` and
``ByteBuffer.allocate(Long.BYTES).putLong(offset or timestamp)``, which a
Spring consumer reads with ``ByteBuffer.wrap(bytes).getInt()``/``getLong()``
(big-endian, two's complement). Kafka Connect's ``DeadLetterQueueReporter``
writes ``String.valueOf(partition or offset)`` as UTF-8.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.dead_letter import bounded, dead_letter_headers, readable

JAVA_INT = st.integers(-(2**31), 2**31 - 1)
JAVA_LONG = st.integers(-(2**63), 2**63 - 1)


def get_int(value: bytes) -> int:
    """``ByteBuffer.wrap(value).getInt()`` of a header Spring allocated
    ``Integer.BYTES`` for."""
    assert len(value) == 4, value
    return int.from_bytes(value, "big", signed=True)


def get_long(value: bytes) -> int:
    """``ByteBuffer.wrap(value).getLong()`` of a header Spring allocated
    ``Long.BYTES`` for."""
    assert len(value) == 8, value
    return int.from_bytes(value, "big", signed=True)


@given(
    partition=st.one_of(st.integers(0, 2**31 - 1), JAVA_INT),
    offset=st.one_of(st.none(), st.just(-1), st.integers(0, 2**63 - 1)),
    timestamp=st.one_of(st.none(), st.just(-1), st.integers(-(2**63), -2), JAVA_LONG),
)
def test_spring_and_connect_read_the_coordinates_back(
    partition: int, offset: int | None, timestamp: int | None
) -> None:
    headers = dead_letter_headers("invalid-json", "why", "events.in", partition, offset, timestamp)
    names = [k for k, _ in headers]
    assert len(names) == len(set(names))  # one of each: Spring reads lastHeader
    h = dict(headers)
    assert get_int(h["kafka_dlt-original-partition"]) == partition
    assert h["__connect.errors.partition"] == str(partition).encode("ascii")
    if offset is None:
        assert "kafka_dlt-original-offset" not in h and "__connect.errors.offset" not in h
    else:
        assert get_long(h["kafka_dlt-original-offset"]) == offset
        assert h["__connect.errors.offset"] == str(offset).encode("ascii")
    if timestamp is None:
        assert "kafka_dlt-original-timestamp" not in h
    else:
        assert get_long(h["kafka_dlt-original-timestamp"]) == timestamp
    shown = readable(headers)
    assert shown["kafka_dlt-original-partition"] == str(partition)
    assert shown.get("kafka_dlt-original-offset") == (None if offset is None else str(offset))
    assert shown.get("kafka_dlt-original-timestamp") == (
        None if timestamp is None else str(timestamp)
    )


def test_the_bytes_are_spring_s() -> None:
    """Written out by hand: partition 3, offset 42, timestamp -1 (none)."""
    h = dict(dead_letter_headers("late-arrival", "why", "events.in", 3, 42, -1))
    assert h["kafka_dlt-original-partition"] == b"\x00\x00\x00\x03"
    assert h["kafka_dlt-original-offset"] == b"\x00\x00\x00\x00\x00\x00\x00\x2a"
    assert h["kafka_dlt-original-timestamp"] == b"\xff" * 8
    h = dict(dead_letter_headers("late-arrival", "why", "events.in", 2**31 - 1, 2**40, 2**62))
    assert h["kafka_dlt-original-partition"] == b"\x7f\xff\xff\xff"
    assert h["kafka_dlt-original-offset"] == b"\x00\x00\x01\x00\x00\x00\x00\x00"
    assert h["kafka_dlt-original-timestamp"] == b"\x40" + b"\x00" * 7


@given(st.text(), st.text(min_size=1), st.text())
def test_text_headers_stay_utf8(detail: str, topic: str, cls: str) -> None:
    h = dict(dead_letter_headers("handler-failed", detail, topic, 0, 0, exception_class=cls))
    assert h["kafka_dlt-original-topic"] == h["__connect.errors.topic"] == topic.encode("utf-8")
    assert h["kafka_dlt-exception-fqcn"] == h["__connect.errors.exception.class.name"]
    assert h["kafka_dlt-exception-fqcn"] == cls.encode("utf-8")
    assert h["kafka_dlt-exception-message"] == h["seqkeeper.detail"] == bounded(detail)
    assert h["seqkeeper.reason"] == b"handler-failed"
    assert readable(h.items())["seqkeeper.detail"] == bounded(detail).decode("utf-8")


def test_readable_shows_text_of_another_width_and_null_values() -> None:
    shown = readable(
        [("kafka_dlt-original-offset", b"17"), ("x", None), ("seqkeeper.reason", b"late-arrival")]
    )
    assert shown == {"kafka_dlt-original-offset": "17", "x": "", "seqkeeper.reason": "late-arrival"}
