"""Transactional producers, one per owned input partition (exactly-once).

aiokafka 0.14 sends ``TxnOffsetCommit`` without the consumer group's
generation (no KIP-447), so a transaction cannot be fenced by the group:
only the producer epoch fences. A transactional id per input partition
(``<app id>-<input topic>-<partition>``, Kafka Streams' first exactly-once)
makes the new owner of a partition fence the old one: its
``InitProducerId`` bumps the epoch, aborts the old owner's open
transaction, and every later request of the old owner fails with
``ProducerFenced``.

Faust's own ``processing_guarantee="exactly_once"`` does the same with
known bugs (faust-streaming #177, #323, #517; aiokafka #1098): the
runtime owns these producers instead, and Faust's stays non-transactional.

Each transaction is sent as whole record batches (:class:`BatchProducer`,
which builds transactional batches for a transactional producer).

Private members: ``AIOKafkaProducer._txn_manager`` (aiokafka 0.14): after a
fence, aiokafka's transaction manager is in a fatal state and a later
``commit_transaction``/``abort_transaction`` raises ``AssertionError``
instead of ``ProducerFenced``; the state tells the two apart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import ProducerFenced

from seqkeeper.adapter.producer import PRODUCER_BATCH_BYTES, BatchProducer
from seqkeeper.security import ClientSecurity, kafka_options
from seqkeeper.state.base import Record

log = logging.getLogger("seqkeeper.transactions")

#: How long the broker lets a transaction stay open before it aborts it
#: (and fences its producer): long enough for a broker freeze of half a
#: minute, short enough that a hung worker does not hold back
#: ``read_committed`` readers of its outputs for long.
TRANSACTION_TIMEOUT_MS = 60_000


class Fenced(RuntimeError):
    """A newer owner of the input partition took its transactional id over
    (or the broker aborted a transaction that outlived its timeout)."""


class TransactionFailed(RuntimeError):
    """A transaction could not be committed; it was aborted."""


def transactional_id(app_id: str, topic: str, partition: int) -> str:
    return f"{app_id}-{topic}-{partition}"


class TransactionalProducers:
    """The transactional producers of the input partitions this worker owns."""

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        input_topic: str,
        group_id: str,
        security: ClientSecurity | None = None,
        **client: Any,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.app_id = app_id
        self.input_topic = input_topic
        self.group_id = group_id
        self.client = client
        self.producers: dict[int, tuple[AIOKafkaProducer, BatchProducer]] = {}

    def tid(self, partition: int) -> str:
        return transactional_id(self.app_id, self.input_topic, partition)

    async def assign(self, partitions: Iterable[int]) -> None:
        """Own exactly ``partitions``: start the producers of new ones (each
        start fences the partition's previous owner and completes or aborts
        its open transaction, so the committed offset and the changelog's
        end read after this are final), stop the others."""
        wanted = set(partitions)
        gone = [p for p in self.producers if p not in wanted]
        await asyncio.gather(*(self._stop(p) for p in gone))
        new = sorted(wanted - set(self.producers))
        started = await asyncio.gather(*(self._start(p) for p in new), return_exceptions=True)
        failed = [(p, e) for p, e in zip(new, started, strict=True) if isinstance(e, BaseException)]
        if failed:
            p, error = failed[0]
            raise TransactionFailed(
                f"the transactional producer of input partition {self.input_topic}/{p} "
                f"(transactional id {self.tid(p)}) did not start: {error!r}"
            ) from error

    async def _start(self, partition: int) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            transactional_id=self.tid(partition),
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
            max_batch_size=PRODUCER_BATCH_BYTES,
            **kafka_options(self.security),
            **self.client,
        )
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        self.producers[partition] = (producer, BatchProducer(lambda: producer))

    async def _stop(self, partition: int) -> None:
        producer, _ = self.producers.pop(partition)
        await producer.stop()

    async def close(self) -> None:
        await asyncio.gather(*(self._stop(p) for p in list(self.producers)))

    async def commit(
        self,
        partition: int,
        records: Mapping[tuple[str, int], Iterable[Record]],
        position: int | None,
    ) -> dict[tuple[str, int], int]:
        """One transaction for input partition ``partition``: ``records``
        (the changelog writes and the outputs of its state) and, when given,
        ``position`` as its committed input offset; the offset of each
        written partition's last record. :class:`Fenced` or
        :class:`TransactionFailed` when it did not commit."""
        owned = self.producers.get(partition)
        if owned is None:
            raise TransactionFailed(
                f"input partition {self.input_topic}/{partition} has no transactional producer"
            )
        producer, batches = owned
        try:
            await producer.begin_transaction()
            last = await batches.send(records) if records else {}
            if position is not None:
                await producer.send_offsets_to_transaction(
                    {TopicPartition(self.input_topic, partition): position}, self.group_id
                )
            await producer.commit_transaction()
        except Exception as error:
            raise await self._failed(partition, producer, error) from error
        return last

    async def _failed(
        self, partition: int, producer: AIOKafkaProducer, error: Exception
    ) -> Exception:
        where = f"input partition {self.input_topic}/{partition} (transactional id {self.tid(partition)})"
        manager = producer._txn_manager
        if isinstance(error, ProducerFenced) or manager.is_fatal_error():
            return Fenced(
                f"{where} has a newer owner, or its transaction outlived "
                f"{TRANSACTION_TIMEOUT_MS // 1000} s: {error!r}"
            )
        try:
            await producer.abort_transaction()
        except Exception as abort_error:  # (the reason to report is the first)
            log.warning("abort of %s failed too: %r", where, abort_error)
        return TransactionFailed(f"the transaction of {where} was aborted: {error!r}")
