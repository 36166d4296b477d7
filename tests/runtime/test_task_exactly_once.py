"""The exactly-once cycle of the runtime (seqkeeper.runtime.task, E2-E4),
with transactions the test commits or fences by hand: each transaction
holds exactly its input partition's outputs, changelog writes and input
position; nothing is said durable before its commit; a failure stops the
cycles after it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.adapter.transactions import Fenced
from seqkeeper.runtime.protocol import Batch, OutboxOwner
from seqkeeper.runtime.task import Task

CHANGELOG = "changelog"


class Topology(OutboxOwner):
    """Emits numbered records per partition; every record is one step whose
    state write is its number, and positions move with it."""

    def __init__(self) -> None:
        self.outbox = Batch()
        self.generation = 0
        self.on_output: Callable[[], None] = lambda: None
        self.positions: dict[int, int] = {}
        self.written: dict[int, list[int]] = {}  # state writes not yet taken
        self.confirmed: list[list[tuple[int, int]]] = []  # per confirm: its records
        self.settled = 0
        self.n = 0

    def step(self, partition: int, outputs: int) -> None:
        self.n += 1
        for _ in range(outputs):
            self.emit(partition, "out", str(partition).encode(), str(self.n).encode())
        self.written.setdefault(partition, []).append(self.n)
        self.positions[partition] = self.positions.get(partition, 0) + 1

    def confirm(self, batch: Batch) -> None:
        self.confirmed.append(
            [(p, int(v)) for p, rs in batch.by_partition().items() for _, _, v, _ in rs]
        )  # type: ignore[arg-type]

    def settle(self) -> None:
        self.settled += 1


class Writes:
    def __init__(self, steps: list[int]) -> None:
        self.steps = steps

    def records(self) -> list[int]:
        return self.steps


class Store:
    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.persisted_calls: list[dict[tuple[str, int], int]] = []

    def take_writes(self) -> dict[int, Writes]:
        taken, self.topology.written = self.topology.written, {}
        return {p: Writes(steps) for p, steps in taken.items()}

    async def flush(self, writes: Any) -> None:
        raise AssertionError("exactly-once never writes the changelog outside a transaction")

    @property
    def changelog_topic(self) -> str:
        return CHANGELOG

    def committed(self, cycle: Any, last: Mapping[tuple[str, int], int]) -> None:
        if last:  # (a cycle with nothing to commit is committed with no offsets)
            self.persisted_calls.append(dict(last))

    def sync(self) -> None:
        pass


class Producer:
    async def group(
        self, records: Iterable[Any], topic_of: Any
    ) -> dict[tuple[str, int], list[Any]]:
        return {("out", 0): [int(value) for _, _, value, _ in records]}

    async def send(self, grouped: Any) -> Any:
        raise AssertionError("exactly-once sends only in transactions")


class Transactions:
    """Each commit waits until the test ends it (``end``: commit, or fence)."""

    def __init__(self) -> None:
        self.open: list[tuple[int, dict[Any, Any], int | None, asyncio.Future[None]]] = []
        self.committed: list[tuple[int, dict[Any, Any], int | None]] = []
        self.auto = False

    async def commit(
        self, partition: int, records: Mapping[tuple[str, int], Iterable[Any]], position: int | None
    ) -> dict[tuple[str, int], int]:
        got = {tp: list(rs) for tp, rs in records.items()}
        if not self.auto:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.open.append((partition, got, position, fut))
            await fut
        self.committed.append((partition, got, position))
        return {tp: rs[-1] for tp, rs in got.items() if rs}

    def end(self, fence: bool = False) -> None:
        """End the oldest open transaction."""
        if self.open:
            partition, _, _, fut = self.open.pop(0)
            if fence:
                fut.set_exception(Fenced(f"partition {partition}"))
            else:
                fut.set_result(None)


def make() -> tuple[Task, Topology, Store, Transactions]:
    topology = Topology()
    store = Store(topology)
    transactions = Transactions()
    task = Task(topology, store, Producer(), str, transactions=transactions)  # type: ignore[arg-type]
    return task, topology, store, transactions


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("step"), st.integers(0, 2), st.integers(0, 3)),
            st.tuples(st.just("end"), st.just(0), st.just(0)),
            st.tuples(st.just("take"), st.just(0), st.just(0)),
        ),
        max_size=40,
    )
)
def test_each_transaction_holds_its_partition_s_work_and_nothing_is_durable_before_it(
    ops: list[tuple[str, int, int]],
) -> None:
    async def main() -> None:
        task, topology, store, transactions = make()
        expected_outputs: dict[int, list[int]] = {}
        expected_steps: dict[int, list[int]] = {}
        takes: list[asyncio.Task[Any]] = []
        for op, partition, outputs in ops:
            if op == "step":
                topology.step(partition, outputs)
                expected_outputs.setdefault(partition, []).extend([topology.n] * outputs)
                expected_steps.setdefault(partition, []).append(topology.n)
            elif op == "take":  # (waits while two taken batches are open)
                takes.append(asyncio.create_task(task.take()))
            else:
                transactions.end()
            await asyncio.sleep(0)
            # nothing said durable before its transaction committed
            assert len(store.persisted_calls) <= len(transactions.committed)
        transactions.auto = True
        while transactions.open:
            transactions.end()
            await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*takes), 5)
        await asyncio.wait_for(task.cycle(), 5)
        # per partition, the transactions in order hold every output and
        # state write once, and the last position sent is the partition's
        outputs: dict[int, list[int]] = {}
        steps: dict[int, list[int]] = {}
        positions: dict[int, int] = {}
        for partition, records, position in transactions.committed:
            for (topic, p), rs in records.items():
                if topic == CHANGELOG:
                    assert p == partition
                    steps.setdefault(partition, []).extend(rs)
                else:
                    outputs.setdefault(partition, []).extend(rs)
            if position is not None:
                assert position > positions.get(partition, 0)  # only moved positions
                positions[partition] = position
        assert outputs == {p: v for p, v in expected_outputs.items() if v}
        assert steps == expected_steps
        assert positions == topology.positions
        # every batch was confirmed (as taken), its confirmations settled
        confirmed = sorted(r for c in topology.confirmed for r in c)
        assert confirmed == sorted((p, n) for p, ns in expected_outputs.items() for n in ns)
        assert topology.settled == len(topology.confirmed)

    asyncio.run(main())


def test_a_fenced_transaction_fails_the_cycles_after_it_and_persists_nothing() -> None:
    async def main() -> None:
        task, topology, store, transactions = make()
        topology.step(0, 1)
        stage = await task.take()
        while not transactions.open:
            await asyncio.sleep(0)
        transactions.end(fence=True)
        with pytest.raises(Fenced):
            await stage
        assert store.persisted_calls == []
        topology.step(0, 1)
        with pytest.raises(Fenced):
            await task.cycle()  # (the next take raises the stage's failure)
        assert transactions.committed == []

    asyncio.run(main())


def test_a_position_alone_is_committed_and_not_twice() -> None:
    async def main() -> None:
        task, topology, _, transactions = make()
        transactions.auto = True
        topology.positions[1] = 7  # (records that changed nothing: duplicates)
        await task.cycle()
        await task.cycle()
        assert transactions.committed == [(1, {}, 7)]

    asyncio.run(main())
