"""Repartitioning by a key taken from the value: the sub-topology before the
ordered one when ``SEQKEEPER_KEY_FIELD`` is set.

The producers of the input key their records by something else (or not at
all), so one sequence key's messages may sit on several input partitions,
where no single task would see them together. As Kafka Streams does after
``selectKey``, every input record is produced again to an internal topic
(``<group>-<input>-repartition``, as many partitions as the table) keyed
by the extracted key: value, headers and timestamp as they were. The
ordered topology reads that topic, so a key's messages meet on one
partition, and state queries route by its partitioning.

Delivery is at-least-once: the input offsets are committed (by a consumer
group of its own) only after the records produced for them are
acknowledged. A crash in between produces some records again; they are
the same messages (same messageId), and the Idempotent Receiver downstream
drops the copies. A record whose value names no key is dead-lettered here,
with the input's topic, partition and offset in its headers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import CommitFailedError, KafkaError

from seqkeeper.processors.dead_letter import dead_letter_headers
from seqkeeper.processors.envelope import InvalidMessage, Shape, key_field
from seqkeeper.security import ClientSecurity, kafka_options
from seqkeeper.settings import Settings

log = logging.getLogger("seqkeeper.repartition")


def route(
    record: Any, shape: Shape, input_topic: str
) -> tuple[bytes, list[tuple[str, bytes]]] | tuple[None, list[tuple[str, bytes]]]:
    """Where one input record goes: (its new key, its headers) for the
    repartition topic, or (``None``, dead-letter headers) when its value
    names no key."""
    headers = list(record.headers or ())
    try:
        return key_field(record.value, shape).encode("utf-8"), headers
    except InvalidMessage as exc:
        reasons = dead_letter_headers(
            exc.reason, exc.detail, input_topic, record.partition, record.offset, record.timestamp
        )
        return None, [*headers, *reasons]


def group_of(settings: Settings) -> str:
    """The repartition stage's consumer group (its own, beside the worker's)."""
    return f"{settings.group_id}-repartition"


class Repartitioner:
    """Consumes the input, produces each record keyed by its key field
    (see the module docstring). :meth:`run` until cancelled."""

    def __init__(self, settings: Settings, shape: Shape, topic: str) -> None:
        self.settings = settings
        self.shape = shape
        self.topic = topic  # the repartition topic

    async def run(self) -> None:
        s = self.settings
        consumer = AIOKafkaConsumer(
            s.ordered.input_topic,
            bootstrap_servers=s.broker.bootstrap,
            **kafka_options(ClientSecurity.of(s.security)),
            group_id=group_of(s),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=s.runtime.max_poll_records,
            fetch_max_wait_ms=s.runtime.fetch_wait_ms(),
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=s.broker.bootstrap,
            **kafka_options(ClientSecurity.of(s.security)),
            acks="all",
        )
        await producer.start()
        try:
            await consumer.start()
            try:
                while True:
                    batch = await consumer.getmany(timeout_ms=500)
                    if batch:
                        await self.move(producer, batch)
                        try:
                            await consumer.commit()
                        except CommitFailedError as exc:  # a rebalance: read again, deduped
                            log.warning("repartition commit failed (a rebalance?): %s", exc)
            finally:
                await consumer.stop()
        finally:
            await producer.stop()

    async def move(self, producer: AIOKafkaProducer, batch: dict[Any, list[Any]]) -> None:
        """Produce a fetched batch (each partition's records in order) and
        wait for every acknowledgement."""
        sent = []
        input_topic = self.settings.ordered.input_topic
        for records in batch.values():
            for r in records:
                key, headers = route(r, self.shape, input_topic)
                if key is None:
                    topic, key = self.settings.ordered.dlq_topic, r.key
                else:
                    topic = self.topic
                sent.append(
                    await producer.send(
                        topic, r.value, key=key, headers=headers, timestamp_ms=r.timestamp
                    )
                )
        try:
            await asyncio.gather(*sent)
        except KafkaError:
            log.exception("repartition: a produce failed; the batch is read again")
            raise
