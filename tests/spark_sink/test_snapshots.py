"""State snapshots of a changelog topic: latest per key, tombstones delete,
incremental, rerun-idempotent, a killed run leaves the last one readable."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.topics import create_topics
from spark_sink.snapshots import compact_snapshots, latest_run, read_snapshot

pytestmark = pytest.mark.integration


async def put(bootstrap: str, topic: str, items: list[tuple[bytes, bytes | None]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        await asyncio.gather(*[await producer.send(topic, v, key=k) for k, v in items])
    finally:
        await producer.stop()


def rows(spark, warehouse, topic) -> dict[bytes, bytes]:  # type: ignore[no-untyped-def]
    return {bytes(r.key): bytes(r.value) for r in read_snapshot(spark, warehouse, topic).collect()}


def test_snapshots_are_latest_per_key_incremental_and_atomic(
    spark, broker, names, tmp_path
) -> None:
    topic = f"{names['app_id']}-state-changelog"
    asyncio.run(create_topics(broker.bootstrap, [topic], 2))
    first = [(f"k{i % 40}".encode(), f"v{i}".encode()) for i in range(200)]
    asyncio.run(put(broker.bootstrap, topic, [*first, (b"k3", None), (b"k4", None)]))
    warehouse = tmp_path / "warehouse"
    assert compact_snapshots(spark, broker.bootstrap, [topic], warehouse) == 1
    expected = {f"k{i}".encode(): f"v{160 + i}".encode() for i in range(40) if i not in (3, 4)}
    assert rows(spark, warehouse, topic) == expected
    reached = latest_run(warehouse)[1]["offsets"]
    assert sum(reached[topic].values()) == 202
    # a rerun without new records: the same rows, offsets unchanged
    assert compact_snapshots(spark, broker.bootstrap, [topic], warehouse) == 2
    assert rows(spark, warehouse, topic) == expected
    assert latest_run(warehouse)[1]["offsets"] == reached
    # new records: only they are read; a key comes back, another goes
    asyncio.run(put(broker.bootstrap, topic, [(b"k3", b"again"), (b"k5", None)]))
    assert compact_snapshots(spark, broker.bootstrap, [topic], warehouse) == 3
    expected[b"k3"] = b"again"
    del expected[b"k5"]
    assert rows(spark, warehouse, topic) == expected
    # a run killed before its commit point: the last complete run is still read
    (warehouse / "snapshots" / topic / "run=4").mkdir(parents=True)
    (warehouse / "snapshots" / topic / "run=4" / "part-0.parquet").write_bytes(b"garbage")
    assert latest_run(warehouse)[0] == 3 and rows(spark, warehouse, topic) == expected
