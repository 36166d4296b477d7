"""The limit baseline: plain aiokafka — consume, decode and encode JSON with
orjson, produce, commit per batch.
``python -m bench.limit BOOTSTRAP IN OUT GROUP [FETCH_MAX_WAIT_MS]``
(aiokafka's 500 ms when not given)."""

from __future__ import annotations

import asyncio
import sys

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


async def main(bootstrap: str, source: str, sink: str, group: str, wait_ms: int = 500) -> None:
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=5_000,
        fetch_max_wait_ms=wait_ms,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    await consumer.start()
    await producer.start()
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=200, max_records=5_000)
            futures = []
            for records in batch.values():
                for r in records:
                    doc = orjson.loads(r.value)
                    futures.append(await producer.send(sink, orjson.dumps(doc), key=r.key))
            if futures:
                await asyncio.gather(*futures)
                await consumer.commit()
    finally:
        await producer.stop()
        await consumer.stop()


if __name__ == "__main__":
    bootstrap, source, sink, group, *wait = sys.argv[1:6]
    asyncio.run(main(bootstrap, source, sink, group, *(int(w) for w in wait)))
