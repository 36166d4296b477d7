"""Batch sources get the fetched records as their record batch holds them
(seqkeeper.adapter.records): the same offsets, keys, values, timestamps and headers as
aiokafka's ``ConsumerRecord`` path, the same position for the next fetch
however far the records were taken, and every other topic unchanged."""

from __future__ import annotations

import itertools
import struct

import pytest
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import ConsumerRecord, TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.adapter.records import RawPartitionRecords, RawTopics

AIOKAFKA = RawPartitionRecords.__bases__[0]  # aiokafka's own PartitionRecords
TP = TopicPartition("in", 3)

record = st.tuples(
    st.none() | st.binary(max_size=6),
    st.none() | st.binary(max_size=12),
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.binary(max_size=3)), max_size=2),
)


def _batches(batches: list[list[tuple[bytes | None, bytes | None, list]]], base: int) -> bytes:
    """Record batches with consecutive offsets from ``base``."""
    out = b""
    for records in batches:
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
        for i, (key, value, headers) in enumerate(records):
            builder.append(i, 1_700_000_000_000 + base + i, key, value, headers)
        raw = builder.build()
        struct.pack_into(">q", raw, 0, base)  # the base offset (outside the CRC)
        out += bytes(raw)
        base += len(records)
    return out


def _fields(r: object) -> tuple:
    return (r.offset, r.key, r.value, r.timestamp, list(r.headers))  # type: ignore[attr-defined]


@given(
    st.lists(st.lists(record, min_size=1, max_size=5), min_size=1, max_size=4),
    st.integers(0, 25),
    st.integers(0, 25),
)
def test_raw_records_match_aiokafka_s_and_keep_its_position(batches, skip, take) -> None:
    data = _batches(batches, base=100)
    fetch_offset = 100 + skip  # may lie inside a batch: the records before are skipped
    theirs = AIOKAFKA(TP, MemoryRecords(data), [], fetch_offset, None, None, True, 0)
    ours = RawPartitionRecords(
        TP, MemoryRecords(data), [], fetch_offset, RawTopics({"in"}), None, True, 0
    )
    available = max(0, sum(map(len, batches)) - skip)
    got_theirs = list(itertools.islice(theirs, min(take, available)))
    got_ours = list(itertools.islice(ours, min(take, available)))
    assert all(isinstance(r, ConsumerRecord) for r in got_theirs)
    assert not any(isinstance(r, ConsumerRecord) for r in got_ours)
    assert [_fields(r) for r in got_ours] == [_fields(r) for r in got_theirs]
    assert ours.next_fetch_offset == theirs.next_fetch_offset  # where the next fetch starts
    if take < available:  # (an exhausted PartitionRecords may not be iterated again)
        assert [_fields(r) for r in ours] == [_fields(r) for r in theirs]  # the rest
        assert ours.next_fetch_offset == theirs.next_fetch_offset


def test_other_topics_and_consumers_keep_aiokafka_s_records() -> None:
    data = _batches([[(b"k", b"v", [("h", b"1")]), (None, b"w", [])]], base=7)
    for deserializer in (RawTopics({"another"}), None):
        records = list(
            RawPartitionRecords(TP, MemoryRecords(data), [], 7, deserializer, None, True, 0)
        )
        assert [type(r) for r in records] == [ConsumerRecord, ConsumerRecord]
        assert [(r.topic, r.partition, r.key, r.headers) for r in records] == [
            ("in", 3, b"k", (("h", b"1"),)),
            ("in", 3, None, ()),
        ]
    # read_committed keeps aiokafka's path (it skips aborted transactions)
    committed = list(
        RawPartitionRecords(TP, MemoryRecords(data), [], 7, RawTopics({"in"}), None, True, 1)
    )
    assert all(isinstance(r, ConsumerRecord) for r in committed)
    # both records: all() of an iterator that yields nothing holds too
    assert [(r.offset, r.key, r.value) for r in committed] == [(7, b"k", b"v"), (8, None, b"w")]
    # and so does a consumer with a value deserializer
    decoded = list(
        RawPartitionRecords(TP, MemoryRecords(data), [], 7, RawTopics({"in"}), bytes.upper, True, 0)
    )
    assert [(type(r), r.value) for r in decoded] == [(ConsumerRecord, b"V"), (ConsumerRecord, b"W")]


def test_a_corrupt_batch_is_refused() -> None:
    data = bytearray(_batches([[(b"k", b"value", [])]], base=0))
    data[-1] ^= 0xFF  # inside the CRC's range
    records = RawPartitionRecords(
        TP, MemoryRecords(bytes(data)), [], 0, RawTopics({"in"}), None, True, 0
    )
    with pytest.raises(CorruptRecordException):
        list(records)


def test_a_header_name_that_is_not_utf8_is_read_escaped() -> None:
    """aiokafka's readers raise UnicodeDecodeError on such a name (the
    fetcher, at every retry: the worker stopped); TolerantRecords reads the
    batch on with the name's bytes escaped, the other records as they were."""
    from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy

    from seqkeeper.adapter.records import TolerantRecords

    class RawName(str):
        def encode(self, *args: object, **kwargs: object) -> bytes:  # type: ignore[override]
            return b"\xff\xfe"

    builder = _DefaultRecordBatchBuilderPy(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, headers in enumerate([[], [(RawName("x"), b"v"), ("n", None)], [("h", b"1")]]):
        builder.append(i, 1_700_000_000_000 + i, b"k%d" % i, b"v", headers)
    raw = bytes(builder.build()) + _batches([[(b"k3", b"w", [("a", b"")])]], base=3)
    with pytest.raises(UnicodeDecodeError):
        list(RawPartitionRecords(TP, MemoryRecords(raw), [], 0, RawTopics({"in"}), None, True, 0))
    for deserializer in (RawTopics({"in"}), None):  # our records and aiokafka's
        got = list(
            RawPartitionRecords(TP, TolerantRecords(raw), [], 0, deserializer, None, True, 0)
        )
        assert [(r.offset, r.key, list(r.headers)) for r in got] == [
            (0, b"k0", []),
            (1, b"k1", [("\\xff\\xfe", b"v"), ("n", None)]),
            (2, b"k2", [("h", b"1")]),
            (3, b"k3", [("a", b"")]),
        ]
