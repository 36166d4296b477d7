"""The outbox keeps each output's input partition (exactly-once commits a
partition's outputs in the transaction of its input)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.runtime.protocol import Batch, OutboxOwner


class Owner(OutboxOwner):
    def __init__(self) -> None:
        self.outbox = Batch()
        self.generation = 0
        self.outputs = 0
        self.on_output: Callable[[], None] = self.count

    def count(self) -> None:
        self.outputs += 1

    def confirm(self, batch: Batch) -> None:
        pass


@given(st.lists(st.lists(st.integers(0, 3), max_size=30), max_size=4))
def test_each_take_splits_its_records_by_partition_in_order(takes: list[list[int]]) -> None:
    owner = Owner()
    for n, partitions in enumerate(takes):
        for i, partition in enumerate(partitions):
            owner.emit(partition, "out", None, f"{n}:{i}".encode())
        batch = owner.take()
        expected: dict[int, list[bytes]] = {}
        for i, partition in enumerate(partitions):
            expected.setdefault(partition, []).append(f"{n}:{i}".encode())
        got = {
            p: [value for _, _, value, _ in records] for p, records in batch.by_partition().items()
        }
        assert got == expected
        assert [value for _, _, value, _ in batch.records] == [
            f"{n}:{i}".encode() for i in range(len(partitions))
        ]
    assert owner.outputs == sum(1 for partitions in takes if partitions)
