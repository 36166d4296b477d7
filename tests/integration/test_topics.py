"""Topic creation returns only once the new topics serve: on Apache Kafka a
new partition's leader shows in metadata a moment before the broker serves
it, so readers and writers that came right after used to fail or retry."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from seqkeeper.topics import create_topics, topic_partitions


def test_new_topics_serve_as_soon_as_created(broker, caplog: pytest.LogCaptureFixture) -> None:
    tags = [uuid.uuid4().hex[:8] for _ in range(3)]

    async def main() -> None:
        for tag in tags:
            topics = [f"new-{tag}.in", f"new-{tag}.out"]
            await create_topics(broker.bootstrap, topics, 4)
            consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
            await consumer.start()
            try:  # every partition known to a consumer that never subscribed
                for topic in topics:
                    assert len(await topic_partitions(consumer, topic)) == 4
            finally:
                await consumer.stop()
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
            await producer.start()
            try:
                for k in range(40):
                    await producer.send(topics[0], b"x", key=b"%d" % k)
                await producer.flush()
            finally:
                await producer.stop()

    with caplog.at_level(logging.WARNING, logger="aiokafka"):
        asyncio.run(main())
    retried = [r.getMessage() for r in caplog.records if "NotLeader" in r.getMessage()]
    assert retried == []
