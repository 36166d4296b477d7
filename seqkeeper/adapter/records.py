"""Batch sources get the fetched records as their record batch holds them.

aiokafka's fetcher (0.14, pinned) turns every fetched record into a
``ConsumerRecord``, a dataclass of eleven fields built in Python. Building
it costs more than iterating the record batch itself, garbage collections
included (the batch's record and its headers list are two objects for the
collector where a ``ConsumerRecord`` is one), and it runs on Faust's
consumer thread, which holds the interpreter's lock meanwhile. An agent of
a batch source (:func:`seqkeeper.adapter.batches.batch_source`) reads ``offset``,
``key``, ``value``, ``headers`` and ``timestamp`` (milliseconds), which the
batch's own records (aiokafka's ``DefaultRecord``) have. So a consumer
whose key deserializer is a :class:`RawTopics` gets, for those topics, the
batch's records themselves (``headers`` a list of pairs instead of a
tuple); every other topic (a table's changelog) gets aiokafka's
``ConsumerRecord``, without a key deserializer. Transactional reads
(``read_committed``) keep aiokafka's own path, which skips aborted
transactions, and so does a consumer with a value deserializer.

:func:`install` puts :class:`RawPartitionRecords` where aiokafka's fetcher
looks for ``PartitionRecords``: for a consumer without a :class:`RawTopics`
it behaves as aiokafka's own.
"""

from __future__ import annotations

import struct
from collections.abc import Container, Iterator
from typing import Any

import aiokafka.consumer.fetcher as aiokafka_fetcher
import aiokafka.errors as Errors
import aiokafka.record.default_records as aiokafka_records
import aiokafka.record.memory_records as aiokafka_memory
from aiokafka.record.util import decode_varint


class RawTopics:
    """Given to an ``AIOKafkaConsumer`` as its key deserializer: its fetcher
    hands the records of ``topics`` over as their record batch holds them
    (see the module docstring). It is never called as a deserializer."""

    __slots__ = ("topics",)

    def __init__(self, topics: Container[str]) -> None:
        self.topics = topics

    def __call__(self, key: bytes | None) -> bytes | None:
        return key


class RawPartitionRecords(aiokafka_fetcher.PartitionRecords):  # type: ignore[misc]
    """aiokafka's ``PartitionRecords``, yielding the batch's records for the
    topics of a :class:`RawTopics` key deserializer."""

    next_fetch_offset: int  # (aiokafka's: where the next fetch starts)

    def __init__(
        self,
        tp: Any,
        records: Any,
        aborted_transactions: Any,
        fetch_offset: int,
        key_deserializer: Any,
        value_deserializer: Any,
        check_crcs: bool,
        isolation_level: int,
    ) -> None:
        marked = isinstance(key_deserializer, RawTopics)
        self._raw = (
            marked
            and tp.topic in key_deserializer.topics
            and value_deserializer is None  # (the batch's values are bytes)
            and isolation_level == aiokafka_fetcher.READ_UNCOMMITTED
        )
        super().__init__(
            tp,
            records,
            aborted_transactions,
            fetch_offset,
            None if marked else key_deserializer,
            value_deserializer,
            check_crcs,
            isolation_level,
        )
        if self._raw and isinstance(records, TolerantRecords):
            records.wrap = False  # (the loop below reads on itself: no wrapper per record)

    def _unpack_records(self) -> Iterator[Any]:
        if not self._raw:
            yield from super()._unpack_records()
            return
        # aiokafka's loop for read_uncommitted, without the ConsumerRecord
        records = self._records
        while records.has_next():
            batch = records.next_batch()
            if self._check_crcs and not batch.validate_crc():
                raise Errors.CorruptRecordException(f"Invalid CRC - {self._tp}")
            if not batch.is_control_batch:
                try:
                    for record in batch:
                        offset = record.offset
                        if offset >= self.next_fetch_offset:  # (below: a compressed set's)
                            self.next_fetch_offset = offset + 1
                            yield record
                except UnicodeDecodeError:  # a header name (TolerantBatch)
                    if not isinstance(records, TolerantRecords):
                        raise
                    for record in EscapingBatch(bytes(records.last)):
                        offset = record.offset
                        if offset >= self.next_fetch_offset:
                            self.next_fetch_offset = offset + 1
                            yield record
            self.next_fetch_offset = batch.next_offset


class EscapingBatch(aiokafka_records._DefaultRecordBatchPy):  # type: ignore[misc]
    """aiokafka's pure-Python record batch (0.14), reading a header name
    that is not UTF-8 with its bytes escaped (``\\xff``) where aiokafka's
    readers raise ``UnicodeDecodeError``: the Kafka protocol says the name
    is a string, but a producer (not Java's) may send any bytes.
    ``_read_msg`` is aiokafka's own, the name's decoding aside."""

    def _read_msg(self, decode_varint: Any = decode_varint) -> Any:
        buffer: Any = self._buffer
        pos: int = self._pos  # type: ignore[has-type]
        length, pos = decode_varint(buffer, pos)
        start_pos = pos
        _, pos = decode_varint(buffer, pos)  # attributes
        ts_delta, pos = decode_varint(buffer, pos)
        if self.timestamp_type == self.LOG_APPEND_TIME:
            timestamp = self.max_timestamp
        else:
            timestamp = self.first_timestamp + ts_delta
        offset_delta, pos = decode_varint(buffer, pos)
        fields: list[bytes | None] = []
        for _ in range(2):  # key, value
            n, pos = decode_varint(buffer, pos)
            fields.append(bytes(buffer[pos : pos + n]) if n >= 0 else None)
            pos += max(n, 0)
        count, pos = decode_varint(buffer, pos)
        if count < 0:
            raise Errors.CorruptRecordException(f"Found invalid number of record headers {count}")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(count):
            n, pos = decode_varint(buffer, pos)
            if n < 0:
                raise Errors.CorruptRecordException(f"Invalid negative header key size {n}")
            name = bytes(buffer[pos : pos + n]).decode("utf-8", "backslashreplace")
            pos += n
            n, pos = decode_varint(buffer, pos)
            headers.append((name, bytes(buffer[pos : pos + n]) if n >= 0 else None))
            pos += max(n, 0)
        if pos - start_pos != length:
            raise Errors.CorruptRecordException(
                f"Invalid record size: expected to read {length} bytes in record "
                f"payload, but instead read {pos - start_pos}"
            )
        self._pos = pos
        key, value = fields
        return aiokafka_records._DefaultRecordPy(
            self.base_offset + offset_delta, timestamp, self.timestamp_type, key, value, headers
        )


class TolerantBatch:
    """A fetched record batch, read by aiokafka's fast reader until a header
    name is not UTF-8; from that record on, by :class:`EscapingBatch`. One
    such record stopped the whole worker (the fetcher raised on it at every
    retry); now it goes on like any other, its header name escaped."""

    __slots__ = ("inner", "raw")

    def __init__(self, inner: Any, raw: memoryview) -> None:
        self.inner = inner
        self.raw = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __iter__(self) -> Iterator[Any]:
        done = -1
        try:
            for record in self.inner:
                done = record.offset
                yield record
        except UnicodeDecodeError:
            for record in EscapingBatch(bytes(self.raw)):
                if record.offset > done:
                    yield record


_BATCH_HEAD = struct.Struct(">qi")  # base offset, length of the rest


class TolerantRecords:
    """aiokafka's ``MemoryRecords`` (the record batches of one fetched
    partition), each batch a :class:`TolerantBatch`; or, for
    :class:`RawPartitionRecords` (``wrap`` false), aiokafka's own batch, the
    bytes of the last one kept for its loop to read on with
    :class:`EscapingBatch` (a wrapper costs each record a generator step)."""

    __slots__ = ("data", "inner", "at", "wrap", "last")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.inner = aiokafka_memory.MemoryRecords(data)
        self.at = 0
        self.wrap = True
        self.last = memoryview(b"")

    def size_in_bytes(self) -> int:
        return int(self.inner.size_in_bytes())

    def has_next(self) -> bool:
        return bool(self.inner.has_next())

    def next_batch(self) -> Any:
        batch = self.inner.next_batch()
        if batch is None:
            return None
        start = self.at
        _, length = _BATCH_HEAD.unpack_from(self.data, start)
        self.at = start + _BATCH_HEAD.size + length
        if batch.magic < 2 or batch.is_control_batch:
            # legacy batches have no headers; a control batch (a transaction's
            # commit or abort marker) has none either, and aiokafka's
            # read_committed fetcher reads it with next(), not a loop
            return batch
        self.last = memoryview(self.data)[start : self.at]
        return TolerantBatch(batch, self.last) if self.wrap else batch


def install() -> None:
    """Let aiokafka's fetcher build :class:`RawPartitionRecords` and read
    record batches as :class:`TolerantRecords` (idempotent)."""
    aiokafka_fetcher.PartitionRecords = RawPartitionRecords
    aiokafka_fetcher.MemoryRecords = TolerantRecords
