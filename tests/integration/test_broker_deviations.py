"""One test per known deviation of the embedded broker (Tansu 0.6), pinning
today's behaviour so that a broker that fixes it is noticed, plus the test
that our way around the first one is exact on any broker."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from seqkeeper.adapter.offsets import as_topic_partitions, end_offsets
from seqkeeper.broker import EmbeddedBroker
from seqkeeper.topics import create_topics, end_offsets_of, read_topic

pytestmark = pytest.mark.integration

RECORDS, PARTITIONS = 3000, 2


async def _produce_batched(bootstrap: str, topic: str) -> None:
    await create_topics(bootstrap, [topic], PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        futs = [
            await producer.send(topic, b"x" * 200, partition=i % PARTITIONS) for i in range(RECORDS)
        ]
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


async def _list_offsets_latest(bootstrap: str, topic: str) -> dict:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await c.start()
    try:
        return await c.end_offsets(as_topic_partitions(topic, PARTITIONS))
    finally:
        await c.stop()


def test_list_offsets_latest_is_short_on_multi_record_batches(broker) -> None:
    """Deviation 1 (pinned): ListOffsets(latest) returns the start of the last batch."""
    topic = f"dev1-{uuid.uuid4().hex[:6]}"
    asyncio.run(_produce_batched(broker.bootstrap, topic))
    reported = asyncio.run(_list_offsets_latest(broker.bootstrap, topic))
    truth = RECORDS // PARTITIONS
    if broker.is_tansu:
        # If this fails, the broker was fixed: update ../shared/notes/broker.md.
        assert all(v < truth for v in reported.values()), reported
    else:
        assert all(v == truth for v in reported.values()), reported


def test_fetch_high_watermark_gives_exact_end_offsets(broker) -> None:
    """Our fix (seqkeeper.adapter.offsets): exact on Tansu and on Apache Kafka."""
    topic = f"hw-{uuid.uuid4().hex[:6]}"
    asyncio.run(_produce_batched(broker.bootstrap, topic))
    ends = asyncio.run(end_offsets(broker.bootstrap, as_topic_partitions(topic, PARTITIONS)))
    assert sorted(ends.values()) == [RECORDS // PARTITIONS] * PARTITIONS
    assert sum(asyncio.run(end_offsets_of(broker.bootstrap, [topic])).values()) == RECORDS
    assert len(asyncio.run(read_topic(broker.bootstrap, topic))) == RECORDS


def test_end_offsets_of_empty_and_single_record_partitions(broker) -> None:
    topic = f"hw0-{uuid.uuid4().hex[:6]}"

    async def go() -> dict:
        await create_topics(broker.bootstrap, [topic], 3)
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await p.start()
        await (await p.send(topic, b"one", partition=1))
        await p.stop()
        return await end_offsets(broker.bootstrap, as_topic_partitions(topic, 3))

    assert [v for _, v in sorted(asyncio.run(go()).items())] == [0, 1, 0]


def test_idempotent_producer_is_unsupported(broker) -> None:
    """Deviation 2 (pinned): InitProducerId fails, so no idempotence/transactions."""
    if not broker.is_tansu:
        pytest.skip("Apache Kafka supports idempotent producers")

    async def go() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, enable_idempotence=True, request_timeout_ms=5000
        )
        try:
            await p.start()
            await asyncio.wait_for(p.send_and_wait(f"idem-{uuid.uuid4().hex[:6]}", b"x"), 10)
        finally:
            await p.stop()

    with pytest.raises(Exception):  # noqa: B017 - any failure pins the deviation
        asyncio.run(go())


def test_embedded_broker_is_memory_only() -> None:
    """Deviation 3 (pinned): nothing survives a broker restart."""
    b = EmbeddedBroker()

    async def topics() -> set[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap)
        await admin.start()
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("kept", 1, 1)])
        finally:
            await admin.close()

    with b:
        asyncio.run(create())
        assert "kept" in asyncio.run(topics())
    with b:
        assert "kept" not in asyncio.run(topics())


def test_leave_group_does_not_end_the_membership(broker) -> None:
    """Deviation 4 (pinned): a consumer that stops cleanly (LeaveGroup) stays
    a member until its session expires, so the next member to join waits for
    that (a restarted worker's first output comes a session timeout later;
    Apache Kafka rebalances at once). Joins also take half the session."""
    topic, group, session = f"leave-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}", 6.0

    async def join() -> tuple[AIOKafkaConsumer, float]:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            session_timeout_ms=int(session * 1000),
            heartbeat_interval_ms=1000,
        )
        t0 = time.monotonic()
        await c.start()
        while not c.assignment():
            await asyncio.sleep(0.01)
        return c, time.monotonic() - t0

    async def go() -> float:
        await create_topics(broker.bootstrap, [topic], 1)
        first, _ = await join()
        await first.stop()  # sends LeaveGroup
        second, took = await join()
        await second.stop()
        return took

    took = asyncio.run(go())
    if broker.is_tansu:
        # If this fails, the broker was fixed: restarts got a session faster.
        assert took > session, took
    else:
        assert took < session, took
