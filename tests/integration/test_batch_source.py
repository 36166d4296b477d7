"""The batch-source override of Faust's fetch loop (seqkeeper.adapter.batches):
records reach the agent as lists, each exactly once and in offset order per
partition, as their record batches hold them (seqkeeper.adapter.records: no
``ConsumerRecord`` each), and only acknowledged offsets are committed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from seqkeeper.topics import create_topics

pytestmark = pytest.mark.integration

PER_PARTITION, HOLD = 1500, 700
ROOT = Path(__file__).resolve().parents[2]


async def _produce(bootstrap: str, topic: str) -> None:
    await create_topics(bootstrap, [topic], 2)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futs = [
            await producer.send(topic, b"v%d" % i, partition=i % 2)
            for i in range(2 * PER_PARTITION)
        ]
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


async def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in (0, 1)}
    finally:
        await consumer.stop()


def _batches(out: Path) -> list[list[tuple[int, int, str, str]]]:
    """Per fetch: (partition, offset, value, the record's type) per record."""
    if not out.exists():
        return []
    return [[tuple(x) for x in orjson.loads(line)] for line in out.read_bytes().splitlines()]


def test_batch_source_delivers_lists_once_in_order_and_commits_acked(broker, tmp_path) -> None:
    tag = uuid.uuid4().hex[:6]
    topic, app_id, out = f"batch-{tag}", f"batch-app-{tag}", tmp_path / "batches.jsonl"
    asyncio.run(_produce(broker.bootstrap, topic))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BATCH_APP": app_id,
        "BATCH_BROKER": broker.bootstrap,
        "BATCH_TOPIC": topic,
        "BATCH_OUT": str(out),
        "BATCH_HOLD": str(HOLD),
    }
    app = str(Path(__file__).with_name("batch_app.py"))
    # no web server: Faust's worker command binds port 6066 by default (two
    # test runs on one machine collided there)
    cmd = [sys.executable, app, "worker", "--without-web", "-l", "warn"]
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while sum(map(len, _batches(out))) < 2 * PER_PARTITION and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.5)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # commits every 0.5 s
            committed = asyncio.run(_committed(broker.bootstrap, app_id, topic))
            if committed == {0: HOLD, 1: PER_PARTITION}:
                break
            time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    batches = _batches(out)
    delivered = [record for batch in batches for record in batch]
    for p in (0, 1):
        mine = [(o, v) for q, o, v, _ in delivered if q == p]
        # once, in order, each with its value (record i went to partition i % 2)
        assert mine == [(o, f"v{2 * o + p}") for o in range(PER_PARTITION)]
    assert {kind for *_, kind in delivered} == {"DefaultRecord"}  # the batch's own
    assert len(batches) < len(delivered) / 10  # lists, not one record at a time
    # acknowledged offsets only: partition 0 stops at the first record not acked
    assert committed == {0: HOLD, 1: PER_PARTITION}
