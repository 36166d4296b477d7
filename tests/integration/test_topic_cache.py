"""TopicCache: repeated whole-topic reads fetch only the new records, and
always equal a fresh full read."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.topics import TopicCache, create_topics, read_topic

pytestmark = pytest.mark.integration


async def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futs = [await producer.send(topic, v, partition=i % 3) for i, v in enumerate(values)]
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


def _coords(records) -> list[tuple[int, int, bytes | None]]:
    return sorted((r.partition, r.offset, r.value) for r in records)


def test_cache_reads_appended_records_once(broker) -> None:
    topic = f"cache-{uuid.uuid4().hex[:6]}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 3))
    cache = TopicCache(broker.bootstrap)
    assert asyncio.run(cache.read(topic)) == []  # empty topic

    asyncio.run(_produce(broker.bootstrap, topic, [b"a%d" % i for i in range(50)]))
    first = list(asyncio.run(cache.read(topic)))
    assert len(first) == 50

    asyncio.run(_produce(broker.bootstrap, topic, [b"b%d" % i for i in range(31)]))
    second = asyncio.run(cache.read(topic))
    assert second[:50] == first  # what was read stays, in order
    assert len(second) == 81
    assert _coords(second) == _coords(asyncio.run(read_topic(broker.bootstrap, topic)))
    assert len({(r.partition, r.offset) for r in second}) == 81  # nothing read twice

    again = asyncio.run(cache.read(topic))  # nothing new
    assert len(again) == 81
