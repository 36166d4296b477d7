"""adapter.recovery.pause_and_drop: a changelog partition paused at the end
of a recovery holds no records, even those of a fetch that was in flight at
the pause. aiokafka stores such a fetch's records (it checks only the
position), and records nobody takes hold back the next fetch from their
broker for aiokafka's prefetch backoff."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from seqkeeper.adapter.recovery import pause_and_drop
from seqkeeper.topics import create_topics


async def in_flight(consumer: AIOKafkaConsumer) -> None:
    deadline = time.monotonic() + 30
    while not any(not t.done() for t in consumer._fetcher._pending_tasks):
        assert time.monotonic() < deadline, "no fetch in flight"
        await asyncio.sleep(0.01)


def test_records_of_a_fetch_in_flight_at_the_pause_are_dropped(broker, names) -> None:
    topic = names["app_id"] + "-state-changelog"
    attempts = 5

    async def main() -> None:
        await create_topics(broker.bootstrap, [topic], attempts)
        # A long poll: the fetch waits at the broker until the record comes.
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=5_000,
        )
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await consumer.start()
        await producer.start()
        try:
            # A fetch found in flight may come back empty before the record
            # is written (on a loaded machine, or one that was about to end):
            # then that attempt shows nothing, and the next one, on a
            # partition of its own, starts clean.
            for partition in range(attempts):
                tp = TopicPartition(topic, partition)
                consumer.assign([tp])
                await in_flight(consumer)
                dropping = pause_and_drop(consumer, [tp])
                assert dropping is not None
                await producer.send_and_wait(topic, b"written by this worker", partition=partition)
                await asyncio.wait_for(dropping, 30)
                if consumer.highwater(tp) == 1:  # the fetch in flight brought the record
                    break
            else:
                raise AssertionError(f"no fetch in flight brought the record in {attempts} tries")
            assert tp not in consumer._fetcher._records
            assert consumer.paused() == {tp}
        finally:
            await producer.stop()
            await consumer.stop()

    asyncio.run(main())
