"""The Python Kafka data source against the broker, compared with a plain
aiokafka read of the same topic."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.spark_sink.kafka_source import KafkaReader, read_kafka
from seqkeeper.topics import create_topics, read_topic

pytestmark = pytest.mark.integration


async def produce(bootstrap: str, topic: str, n: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(
                topic,
                f"v{i}".encode(),
                key=None if i % 7 == 0 else f"k{i % 5}".encode(),
                headers=[("h", str(i).encode())] if i % 3 == 0 else None,
            )
            for i in range(n)
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


@pytest.fixture
def topic(broker, names) -> str:  # type: ignore[no-untyped-def]
    name = f"spark-{names['app_id']}"
    asyncio.run(create_topics(broker.bootstrap, [name], 3))
    asyncio.run(produce(broker.bootstrap, name, 2500))  # multi-record batches
    return name


def test_reads_exactly_what_a_plain_consumer_reads(spark, broker, topic) -> None:
    expected = asyncio.run(read_topic(broker.bootstrap, topic))
    df = read_kafka(
        spark,
        {
            "kafka.bootstrap.servers": broker.bootstrap,
            "subscribe": topic,
            "includeHeaders": "true",
            "maxRecordsPerPartition": "300",
        },
    )
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    slices = KafkaReader(
        {
            "kafka.bootstrap.servers": broker.bootstrap,
            "subscribe": topic,
            "maxRecordsPerPartition": "300",
        }
    ).partitions()  # one per Kafka partition, split every 300 records
    assert len(slices) >= 9 and all(s.end - s.start <= 300 for s in slices)
    assert df.rdd.getNumPartitions() == len(slices)
    rows = df.collect()
    got = sorted(
        (
            r.partition,
            r.offset,
            r.key,
            r.value,
            tuple((h.key, h.value) for h in r.headers),
            int(r.timestamp.timestamp() * 1000),
        )
        for r in rows
    )
    want = sorted((e.partition, e.offset, e.key, e.value, e.headers, e.timestamp) for e in expected)
    assert len(got) == 2500 and got == want


def test_offset_ranges_as_json(spark, broker, topic) -> None:
    expected = asyncio.run(read_topic(broker.bootstrap, topic))
    ends = {p: max(e.offset for e in expected if e.partition == p) + 1 for p in range(3)}
    df = read_kafka(
        spark,
        {
            "kafka.bootstrap.servers": broker.bootstrap,
            "assign": json.dumps({topic: [0, 1]}),
            "startingOffsets": json.dumps({topic: {"0": 10, "1": -2}}),
            "endingOffsets": json.dumps({topic: {"0": 20, "1": -1}}),
        },
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(ends[1])]
