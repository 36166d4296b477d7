"""BatchProducer picks the partition aiokafka's default partitioner picks
(so records keep their key -> partition mapping when sent as batches), and
its batches hold exactly the records given, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.adapter.producer import BatchProducer


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
    monkeypatch.setattr("seqkeeper.adapter.producer.PICKS_REMEMBERED", 3)
    producer = BatchProducer(lambda: _producer(7))
    pick = asyncio.run(producer.partitioner("t"))
    assert asyncio.run(producer.partitioner("t")) is pick  # one per topic
    everything = list(range(7))
    default = DefaultPartitioner()
    keys = [b"k%d" % i for i in range(10)]
    for key in keys + keys:
        assert pick(key) == default(key, everything, everything)


class Sent:
    """A producer that keeps the batches it is given (base offset 0 each)."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.batches: list[tuple[str, int, Any]] = []

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(self.batch_size, 0)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Any:
        self.batches.append((topic, partition, batch))
        done = asyncio.get_running_loop().create_future()
        done.set_result(SimpleNamespace(offset=100 * len(self.batches)))
        return done


record = st.tuples(
    st.none() | st.binary(max_size=30),
    st.binary(max_size=300),
    st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=2).flatmap(
        lambda hs: st.sampled_from([hs, tuple(hs)])  # records come with either
    ),
)


@given(st.lists(record, min_size=1, max_size=40), st.integers(200, 2000))
def test_batches_hold_every_record_in_order_and_count_them(
    records: list[tuple[bytes | None, bytes, Sequence[tuple[str, bytes]]]], batch_size: int
) -> None:
    """Records appended straight to aiokafka's builder: full batches are
    sent and a new one started; each batch counts its records (aiokafka
    reads ``record_count``) and reads back as written."""
    sent = Sent(batch_size)
    last = asyncio.run(BatchProducer(lambda: sent).send({("t", 3): records}))
    got = []
    for topic, partition, batch in sent.batches:
        assert (topic, partition) == ("t", 3)
        read = list(DefaultRecordBatch(bytearray(batch._build())))
        assert batch.record_count() == len(read) > 0
        got += [(r.key, r.value, [tuple(h) for h in r.headers]) for r in read]
    assert got == [(k, v, [tuple(h) for h in hs]) for k, v, hs in records]
    assert last == {("t", 3): 100 * len(sent.batches) + sent.batches[-1][2].record_count() - 1}


def test_records_may_come_as_any_iterable_and_an_empty_one_sends_nothing() -> None:
    """The changelog's records come as a ``zip`` of two columns
    (``state.rocksdb.Writes``): read once, and no batch for none."""
    sent = Sent(2000)
    records = [(b"k", b"v%d" % i, ()) for i in range(5)]
    last = asyncio.run(
        BatchProducer(lambda: sent).send({("t", 0): iter(records), ("t", 1): iter(())})
    )
    assert [(topic, partition) for topic, partition, _ in sent.batches] == [("t", 0)]
    read = list(DefaultRecordBatch(bytearray(sent.batches[0][2]._build())))
    assert [(r.key, r.value) for r in read] == [(k, v) for k, v, _ in records]
    assert last == {("t", 0): 100 + 4}


named = st.tuples(
    st.sampled_from(["ordered", "deduped", "dlq", "late"]),
    st.none() | st.sampled_from([b"k%d" % i for i in range(12)]),
    st.binary(max_size=8),
    st.none() | st.just([("h", b"1")]),
)


@given(st.lists(named, max_size=60), st.integers(1, 5))
def test_grouping_keeps_each_partition_s_records_in_order(
    records: list[tuple[str, bytes | None, bytes, list[tuple[str, bytes]] | None]],
    partitions: int,
) -> None:
    """Per topic-partition, the records in the order given, where the
    partitioner puts them; names of one topic (here ``dlq`` and ``late``)
    share its partitions' order. ``None`` keys go anywhere, each once."""
    producer = BatchProducer(lambda: _producer(partitions))
    topics = {"ordered": "o", "deduped": "d", "dlq": "x", "late": "x"}
    grouped = asyncio.run(producer.group(records, topics.__getitem__))
    pick = asyncio.run(producer.partitioner("o"))
    for (_, partition), group in grouped.items():
        assert group, "no empty group"
        assert all(pick(k) == partition for k, _, _ in group if k is not None)
    for topic in set(topics.values()):
        mine = [(k, v, h or ()) for name, k, v, h in records if topics[name] == topic]
        theirs = [r for (t, _), group in grouped.items() if t == topic for r in group]
        assert sorted(theirs, key=repr) == sorted(mine, key=repr)
        for (t, _), group in grouped.items():
            if t == topic:  # a subsequence of the records given, in their order
                rest = iter(mine)
                assert all(any(r == m for m in rest) for r in group)
