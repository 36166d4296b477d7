"""seqkeeper.adapter.offsets.committed_ends: where a read_committed reader's
last record ends, on partitions that end with transaction markers and
aborted records (Apache Kafka; the embedded broker has no transactions), and
on plain partitions (both brokers: there it equals the exact end)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from seqkeeper.adapter.offsets import as_topic_partitions, committed_ends, end_offsets
from seqkeeper.topics import create_topics

pytestmark = pytest.mark.integration


async def _send(producer: AIOKafkaProducer, topic: str, partition: int, n: int) -> list[int]:
    """``n`` records to one partition; their offsets."""
    futs = [await producer.send(topic, b"r%d" % i, partition=partition) for i in range(n)]
    return [m.offset for m in await asyncio.gather(*futs)]


def test_committed_ends_skip_markers_and_aborted_records(broker) -> None:
    if broker.is_tansu:
        pytest.skip("the embedded broker has no transactions")
    topic = f"ce-{uuid.uuid4().hex[:6]}"
    committed, aborted_tail, only_aborted, empty = as_topic_partitions(topic, 4)

    async def ends() -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        return (
            await committed_ends(broker.bootstrap, [committed, aborted_tail, only_aborted, empty]),
            await end_offsets(broker.bootstrap, [committed, aborted_tail, only_aborted, empty]),
        )

    async def go() -> None:
        await create_topics(broker.bootstrap, [topic], 4)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=topic)
        await producer.start()
        try:
            # (a) two committed transactions: the end is one past the last
            # record, below the high watermark (the commit marker's offset).
            for n in (3, 2):
                async with producer.transaction():
                    last = (await _send(producer, topic, committed.partition, n))[-1]
                    last_tail = (await _send(producer, topic, aborted_tail.partition, n))[-1]
            found, high = await ends()
            assert found[committed] == last + 1 < high[committed], (found, high)
            assert found[aborted_tail] == last_tail + 1

            # (b) an aborted transaction after them leaves the end unchanged:
            # longer than the first window, so the read goes back twice.
            # (c) a partition with only an aborted transaction has no end.
            await producer.begin_transaction()
            await _send(producer, topic, aborted_tail.partition, 40)
            await _send(producer, topic, only_aborted.partition, 3)
            await producer.abort_transaction()
            found, high = await ends()
            assert found[aborted_tail] == last_tail + 1, found
            assert high[aborted_tail] > last_tail + 40, high
            assert found[only_aborted] == 0 < high[only_aborted], (found, high)
            assert found[committed] == last + 1
            # (d) an empty partition.
            assert found[empty] == 0 == high[empty]
        finally:
            await producer.stop()

    asyncio.run(go())


def test_committed_ends_of_plain_partitions_are_the_exact_ends(broker) -> None:
    """(e) Without transactions there are no markers: the answer is the exact
    end, also on the embedded broker, whose ListOffsets is short after a
    batch of several records (test_broker_deviations.py)."""
    topic = f"ce-plain-{uuid.uuid4().hex[:6]}"
    tps = as_topic_partitions(topic, 3)

    async def go() -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        await create_topics(broker.bootstrap, [topic], 3)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
        await producer.start()
        try:
            await _send(producer, topic, 0, 500)  # batches of several records
            await _send(producer, topic, 1, 3)  # one batch
        finally:
            await producer.stop()
        return await committed_ends(broker.bootstrap, tps), await end_offsets(broker.bootstrap, tps)

    found, exact = asyncio.run(go())
    assert found == exact == {tps[0]: 500, tps[1]: 3, tps[2]: 0}
