"""Producing ordered records as whole record batches.

One ``send`` per record costs a future, callbacks and Faust's publish path
each time, and a busy worker makes several changelog writes and outputs
per message. Here the records of an outbox cycle are grouped per
topic-partition, in order, into aiokafka record batches (``create_batch`` /
``send_batch``): one future per batch. Order within a partition is kept
(aiokafka enqueues a partition's batches behind one another), and a crash
leaves a prefix of each partition's records, as with one ``send`` per
record. Records without an explicit partition go where aiokafka's default
partitioner (murmur2 of the key, as the Java client) would put them, so the
key → partition mapping is the same as a plain ``send``'s.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import Any

from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder

from seqkeeper.state.base import Header, Out, Record

__all__ = [
    "PRODUCER_BATCH_BYTES",
    "AcknowledgingProducer",
    "BatchProducer",
    "Header",
    "Out",
    "Partitioner",
    "Record",
]

#: Largest record batch the worker produces (within Kafka's default
#: 1 MiB message.max.bytes and aiokafka's 1 MiB max_request_size).
PRODUCER_BATCH_BYTES = 512 * 1024

#: Keys whose partition a topic's partitioner keeps (then it starts over).
PICKS_REMEMBERED = 100_000

_NO_HEADERS: list[Header] = []  # read only


class Partitioner:
    """A topic's partitioner (:meth:`BatchProducer.partitioner`): the
    partition aiokafka's default partitioner picks for a key, remembered in
    ``known`` (``None`` keys go to a random partition, never remembered)."""

    __slots__ = ("partitions", "known")

    def __init__(self, partitions: list[int]) -> None:
        self.partitions = partitions
        self.known: dict[bytes | None, int] = {}

    def __call__(self, key: bytes | None) -> int:
        parts = self.partitions
        if key is None:
            return int(random.choice(parts))
        known = self.known
        found = known.get(key)
        if found is None:
            if len(known) >= PICKS_REMEMBERED:
                known.clear()
            found = known[key] = int(parts[(murmur2(key) & 0x7FFFFFFF) % len(parts)])
        return found


class BatchProducer:
    """Sends records grouped per (topic, partition) through ``producer()``
    (an started ``AIOKafkaProducer``)."""

    def __init__(self, producer: Callable[[], Any]) -> None:
        self._producer_of = producer
        self._known: dict[str, list[int]] = {}
        self._picks: dict[str, Partitioner] = {}
        #: The sends waiting for their acknowledgements: per call, when it
        #: began (monotonic) and its batches' topic-partitions. Read by the
        #: worker's diagnostics (:mod:`seqkeeper.adapter.diagnostics`).
        self.waiting: dict[int, tuple[float, list[tuple[str, int]]]] = {}

    async def partitions(self, topic: str) -> list[int]:
        known = self._known.get(topic)
        if known is None:
            producer = self._producer_of()
            await producer.client._wait_on_metadata(topic)
            known = sorted(producer.client.cluster.partitions_for_topic(topic) or ())
            if not known:
                raise RuntimeError(f"topic {topic!r} has no partitions")
            self._known[topic] = known
        return known

    async def partitioner(self, topic: str) -> Partitioner:
        """``topic``'s :class:`Partitioner`: called with a key, the partition
        aiokafka's default partitioner picks (no await per record; up to
        :data:`PICKS_REMEMBERED` keys remembered: murmur2 is pure Python)."""
        pick = self._picks.get(topic)
        if pick is None:
            pick = self._picks[topic] = Partitioner(await self.partitions(topic))
        return pick

    async def group(
        self, records: Iterable[Out], topic_of: Callable[[str], str]
    ) -> dict[tuple[str, int], list[Record]]:
        """``records`` (each addressed by a name, ``topic_of(name)`` is its
        topic) grouped per topic-partition for :meth:`send`, each group in
        the order given; the partition as :meth:`partitioner` picks it. One
        pass, no call per record for a key whose partition is remembered."""
        routes: dict[str, tuple[dict[bytes | None, int], list[list[Record]], Partitioner]] = {}
        lists_of: dict[str, list[list[Record]]] = {}
        for name, key, value, headers in records:
            route = routes.get(name)
            if route is None:
                topic = topic_of(name)
                pick = await self.partitioner(topic)
                lists = lists_of.get(topic)
                if lists is None:  # (names of one topic share its lists: one order)
                    lists = lists_of[topic] = [[] for _ in range(max(pick.partitions) + 1)]
                route = routes[name] = (pick.known, lists, pick)
            known, lists, pick = route
            partition = known.get(key)
            if partition is None:
                partition = pick(key)
            lists[partition].append((key, value, headers or ()))
        return {
            (topic, partition): records
            for topic, lists in lists_of.items()
            for partition, records in enumerate(lists)
            if records
        }

    async def send(
        self, records: Mapping[tuple[str, int], Iterable[Record]]
    ) -> dict[tuple[str, int], int]:
        """Send every partition's records in order; wait until all are
        acknowledged; the offset of each partition's last record (partitions
        with no records are left out)."""
        producer = self._producer_of()
        waits: list[tuple[tuple[str, int], Any, int]] = []
        millis = int(time.time() * 1000)  # one timestamp per call
        for (topic, partition), items in records.items():
            batch, count = producer.create_batch(), 0
            # aiokafka's own builder (BatchBuilder.append wraps it in checks
            # and serializers we do not use, and reads the clock per record)
            append = batch._builder.append
            for key, value, headers in items:
                # a batch always takes its first record, whatever its size
                headers = list(headers) if headers else _NO_HEADERS  # (it takes lists only)
                if append(count, millis, key, value, headers) is None:
                    batch._relative_offset = count
                    fut = await producer.send_batch(batch, topic, partition=partition)
                    waits.append(((topic, partition), fut, count))
                    batch, count = producer.create_batch(), 0
                    append = batch._builder.append
                    append(count, millis, key, value, headers)
                count += 1
            if count == 0:
                continue  # no records for this partition (an empty iterable)
            batch._relative_offset = count
            fut = await producer.send_batch(batch, topic, partition=partition)
            waits.append(((topic, partition), fut, count))
        call = id(waits)
        self.waiting[call] = (time.monotonic(), [tp for tp, _, _ in waits])
        try:
            results = await asyncio.gather(*(fut for _, fut, _ in waits))
        finally:
            del self.waiting[call]
        last: dict[tuple[str, int], int] = {}
        for (tp, _, count), meta in zip(waits, results, strict=True):
            last[tp] = meta.offset + count - 1
        return last


class _Sent:
    """What a produce's future resolves to, as far as :meth:`BatchProducer.send` reads it."""

    __slots__ = ("offset",)

    def __init__(self, offset: int) -> None:
        self.offset = offset


class AcknowledgingProducer:
    """What :class:`BatchProducer` needs of aiokafka's producer, with no
    broker: batches are built with aiokafka's own builder and acknowledged
    at once, never sent (``seqkeeper.bench.core`` measures the worker's
    per-record work with it). Every topic has ``partitions`` partitions."""

    def __init__(self, partitions: int, batch_bytes: int) -> None:
        #: records "sent" per topic-partition
        self.offsets: dict[tuple[str, int], int] = {}
        self.batch_bytes = batch_bytes
        known = set(range(partitions))
        self.client = SimpleNamespace(
            cluster=SimpleNamespace(partitions_for_topic=lambda topic: known),
            _wait_on_metadata=self._no_metadata,
        )

    @staticmethod
    async def _no_metadata(topic: str) -> None:
        return None

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(self.batch_bytes, 0)

    async def send_batch(self, batch: BatchBuilder, topic: str, partition: int) -> Any:
        batch._build()
        first = self.offsets.get((topic, partition), 0)
        self.offsets[(topic, partition)] = first + batch._relative_offset
        done = asyncio.get_running_loop().create_future()
        done.set_result(_Sent(first))
        return done
