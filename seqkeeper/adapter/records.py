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

from collections.abc import Container, Iterator
from typing import Any

import aiokafka.consumer.fetcher as aiokafka_fetcher
import aiokafka.errors as Errors


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
                for record in batch:
                    offset = record.offset
                    if offset >= self.next_fetch_offset:  # (below: a compressed set's)
                        self.next_fetch_offset = offset + 1
                        yield record
            self.next_fetch_offset = batch.next_offset


def install() -> None:
    """Let aiokafka's fetcher build :class:`RawPartitionRecords` (idempotent)."""
    aiokafka_fetcher.PartitionRecords = RawPartitionRecords
