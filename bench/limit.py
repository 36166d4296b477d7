"""The limit baseline: plain aiokafka — consume, decode and encode JSON with
orjson, produce, commit per batch.
``python -m seqkeeper.bench.limit BOOTSTRAP IN OUT GROUP [FETCH_MAX_WAIT_MS [CHANGELOG]]``
(aiokafka's 500 ms when no wait is given). With ``CHANGELOG`` it is the
write-ahead pipeline of the latency figures (:func:`write_ahead`)."""

from __future__ import annotations

import asyncio
import sys

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from seqkeeper.security import kafka_options


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
        **kafka_options(),
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=5_000,
        fetch_max_wait_ms=wait_ms,
    )
    if changelog is not None:
        await write_ahead(bootstrap, consumer, sink, changelog)
        return
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kafka_options(), linger_ms=5, acks=1)
    await consumer.start()
    await producer.start()
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=200, max_records=5_000)
            outputs: list[tuple[bytes, bytes | None]] = []
            for records in batch.values():
                for r in records:
                    doc = orjson.loads(r.value)
                    outputs.append((orjson.dumps(doc), r.key))
            futures = [await producer.send(sink, value, key=key) for value, key in outputs]
            if futures:
                await asyncio.gather(*futures)
                await consumer.commit()
    finally:
        await producer.stop()
        await consumer.stop()


async def write_ahead(
    bootstrap: str, consumer: AIOKafkaConsumer, sink: str, changelog: str
) -> None:
    """The write-ahead pipeline: per fetch, one record per input message to
    ``changelog`` (the input's key and partition, its offset as the value),
    acknowledged before the outputs are produced, as seqkeeper's outbox
    cycle does (state before output) but without its state. Both sends go
    as record batches (:class:`~seqkeeper.adapter.producer.BatchProducer`, seqkeeper's
    own, no linger), and the offsets are committed without waiting for the
    commit: a floor of seqkeeper's order of writes and its way of sending,
    not the limit's per-record sends."""
    from seqkeeper.adapter.producer import PRODUCER_BATCH_BYTES, BatchProducer, Out, Record

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, **kafka_options(), acks=1, max_batch_size=PRODUCER_BATCH_BYTES
    )
    out = BatchProducer(lambda: producer)
    await consumer.start()
    await producer.start()
    commit: asyncio.Task[None] | None = None
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=200, max_records=5_000)
            if not batch:
                continue
            state: dict[tuple[str, int], list[Record]] = {}
            outputs: list[Out] = []
            for tp, records in batch.items():
                state[(changelog, tp.partition)] = [
                    (r.key, orjson.dumps({"offset": r.offset}), ()) for r in records
                ]
                for r in records:
                    outputs.append((sink, r.key, orjson.dumps(orjson.loads(r.value)), None))
            await out.send(state)  # the state first, as seqkeeper's outbox
            await out.send(await out.group(outputs, str))  # (partitioned as the worker's)
            if commit is None or commit.done():
                if commit is not None:
                    commit.result()
                commit = asyncio.ensure_future(consumer.commit())
    finally:
        if commit is not None:
            await commit
        await producer.stop()
        await consumer.stop()


if __name__ == "__main__":
    bootstrap, source, sink, group, *rest = sys.argv[1:7]
    wait = int(rest[0]) if rest else 500
    asyncio.run(main(bootstrap, source, sink, group, wait, rest[1] if len(rest) > 1 else None))
