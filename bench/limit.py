"""The limit baseline: plain aiokafka — consume, decode and encode JSON with
orjson, produce, commit per batch.
``python -m bench.limit BOOTSTRAP IN OUT GROUP [FETCH_MAX_WAIT_MS [CHANGELOG]]``
(aiokafka's 500 ms when no wait is given). With ``CHANGELOG`` it is the
write-ahead floor of the latency figures: per fetch, one record per input
message goes to ``CHANGELOG`` (the input's key and partition, its offset as
the value) and is acknowledged before the outputs are produced — the
smallest pipeline with seqkeeper's order of writes (state before output),
without its state."""

from __future__ import annotations

import asyncio
import sys

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


async def main(
    bootstrap: str,
    source: str,
    sink: str,
    group: str,
    wait_ms: int = 500,
    changelog: str | None = None,
) -> None:
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
            outputs: list[tuple[bytes, bytes | None]] = []
            ahead = []
            for tp, records in batch.items():
                for r in records:
                    doc = orjson.loads(r.value)
                    outputs.append((orjson.dumps(doc), r.key))
                    if changelog is not None:
                        state = orjson.dumps({"offset": r.offset})
                        ahead.append(
                            await producer.send(changelog, state, key=r.key, partition=tp.partition)
                        )
            if ahead:
                await asyncio.gather(*ahead)  # the state first, as seqkeeper's outbox
            futures = [await producer.send(sink, value, key=key) for value, key in outputs]
            if futures:
                await asyncio.gather(*futures)
                await consumer.commit()
    finally:
        await producer.stop()
        await consumer.stop()


if __name__ == "__main__":
    bootstrap, source, sink, group, *rest = sys.argv[1:7]
    wait = int(rest[0]) if rest else 500
    asyncio.run(main(bootstrap, source, sink, group, wait, rest[1] if len(rest) > 1 else None))
