"""BatchProducer picks the partition aiokafka's default partitioner picks
(so records keep their key -> partition mapping when sent as batches)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from state.producer import BatchProducer


def _producer(partitions: int) -> SimpleNamespace:
    async def wait_on_metadata(topic: str) -> None:
        return None

    cluster = SimpleNamespace(partitions_for_topic=lambda topic: set(range(partitions)))
    return SimpleNamespace(
        client=SimpleNamespace(_wait_on_metadata=wait_on_metadata, cluster=cluster)
    )


@given(st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=50), st.integers(1, 64))
def test_partitioner_matches_aiokafka_default(keys: list[bytes], partitions: int) -> None:
    fake = _producer(partitions)
    pick = asyncio.run(BatchProducer(lambda: fake).partitioner("t"))
    everything = list(range(partitions))
    default = DefaultPartitioner()
    for key in keys:
        assert pick(key) == default(key, everything, everything)
    assert pick(None) in everything


def test_remembered_partitions_stay_right_when_the_memory_starts_over(monkeypatch) -> None:
    monkeypatch.setattr("state.producer.PICKS_REMEMBERED", 3)
    producer = BatchProducer(lambda: _producer(7))
    pick = asyncio.run(producer.partitioner("t"))
    assert asyncio.run(producer.partitioner("t")) is pick  # one per topic
    everything = list(range(7))
    default = DefaultPartitioner()
    keys = [b"k%d" % i for i in range(10)]
    for key in keys + keys:
        assert pick(key) == default(key, everything, everything)
