"""The runtime's commit protocol (seqkeeper.runtime.task): the outbox cycle,
the agents' back-pressure, the task's states and the local state, with a
broker whose acknowledgements the test releases by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.runtime.protocol import Batch, OutboxOwner
from seqkeeper.runtime.task import IllegalTransition, LocalState, Task, TaskState
from seqkeeper.state.rocksdb import FAUST_OFFSET_KEY, FORMAT, FORMAT_KEY


class Topology(OutboxOwner):
    def __init__(self) -> None:
        self.outbox = Batch()
        self.generation = 0
        self.on_output: Callable[[], None] = lambda: None
        self.confirmed: list[int] = []  # records per confirmed batch

    def confirm(self, batch: Batch) -> None:
        self.confirmed.append(len(batch.records))


class Broker:
    """Each send waits until the test acknowledges it (``ack``), or at
    once once ``auto`` is set."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, asyncio.Future[None]]] = []
        self.sent: list[str] = []  # "changelog" / "outputs", in order
        self.auto = False

    def ack(self, what: str | None = None) -> None:
        """Acknowledge every pending send (``what``: the oldest of that kind)."""
        for kind, fut in list(self.pending):
            if what is None or kind == what:
                fut.set_result(None)
                self.pending.remove((kind, fut))
                if what is not None:
                    return

    async def wait(self, what: str) -> None:
        self.sent.append(what)
        if self.auto:
            return
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((what, fut))
        await fut


class Store:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def take_writes(self) -> dict[int, Any]:
        return {0: "writes"}

    async def flush(self, writes: dict[int, Any]) -> None:
        await self.broker.wait("changelog")


class Producer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def group(self, records: Any, topic_of: Any) -> Any:
        return records

    async def send(self, grouped: Any) -> None:
        await self.broker.wait("outputs")


class RefusingProducer(Producer):
    async def send(self, grouped: Any) -> None:
        raise RuntimeError("the broker refused the batch")


def setup(
    linger: float = 0.0, producer: type[Producer] = Producer
) -> tuple[Task, Topology, Broker]:
    broker = Broker()
    topology = Topology()
    task = Task(topology, Store(broker), producer(broker), lambda role: role, linger)
    return task, topology, broker


def emit(topology: Topology, n: int) -> None:
    for i in range(n):
        topology.emit(0, "ordered", b"k", str(i).encode())


def test_the_next_take_runs_while_a_batch_is_produced_and_relieve_waits_only_for_it() -> None:
    async def main() -> None:
        task, topology, broker = setup(linger=0.05)
        probe = task.probe
        runner = asyncio.create_task(task.run())
        emit(topology, 3)
        await asyncio.sleep(0.06)  # the outbox task took those 3 after its linger
        assert broker.sent == ["changelog"] and topology.outbox.records == []
        emit(topology, 10)  # while their state writes wait for acknowledgement
        agent = asyncio.create_task(task.relieve(10))
        await asyncio.sleep(0.01)
        assert not agent.done()  # a take is under way: the outbox waits for it
        assert probe()["agents waiting for the outbox"] == 1
        broker.ack()  # the first batch's state writes
        await asyncio.wait_for(agent, 1)
        # at once (no linger): the next take took the 10 records while the
        # first batch is produced; its state writes go out with that batch
        assert topology.outbox.records == [] and topology.confirmed == []
        assert broker.sent[0] == "changelog"
        assert sorted(broker.sent[1:]) == ["changelog", "outputs"]
        assert probe()["outbox batches producing"] == 1 and probe()["outbox taking"]
        broker.ack()  # the first batch's outputs, the second's state writes
        await asyncio.sleep(0.01)
        assert (
            topology.confirmed == [3] and sorted(broker.sent) == ["changelog"] * 2 + ["outputs"] * 2
        )
        broker.ack()
        await asyncio.sleep(0.01)
        assert topology.confirmed == [3, 10]
        runner.cancel()

    asyncio.run(main())


def test_a_batch_is_produced_after_its_state_and_at_most_two_are_in_flight() -> None:
    async def main() -> None:
        task, topology, broker = setup()
        emit(topology, 2)
        first = asyncio.create_task(task.relieve(2))  # taken now
        await asyncio.sleep(0.01)
        assert broker.sent == ["changelog"] and not first.done()  # state first
        broker.ack()
        await asyncio.wait_for(first, 1)
        await asyncio.sleep(0.01)
        assert broker.sent == ["changelog", "outputs"]
        emit(topology, 4)
        second = asyncio.create_task(task.relieve(4))
        await asyncio.sleep(0.01)
        assert broker.sent == ["changelog", "outputs", "changelog"]
        broker.ack("changelog")  # the second batch's state, not the first's outputs
        await asyncio.wait_for(second, 1)
        await asyncio.sleep(0.01)
        # produced in order: the second batch waits for the first
        assert broker.sent == ["changelog", "outputs", "changelog"]
        emit(topology, 1)
        third = asyncio.create_task(task.cycle())
        await asyncio.sleep(0.01)
        # two batches in flight: the third take waits until the first is produced
        assert topology.outbox.records != [] and len(broker.sent) == 3
        broker.ack("outputs")
        await asyncio.sleep(0.01)
        assert topology.confirmed == [2] and topology.outbox.records == []
        assert sorted(broker.sent[3:]) == ["changelog", "outputs"]
        for _ in range(4):
            broker.ack()
            await asyncio.sleep(0.01)
        await asyncio.wait_for(third, 1)  # the whole cycle: every batch confirmed
        assert topology.confirmed == [2, 4, 1]
        assert sorted(broker.sent) == ["changelog"] * 3 + ["outputs"] * 3

    asyncio.run(main())


def test_a_failed_produce_fails_the_takes_after_it() -> None:
    async def main() -> None:
        task, topology, broker = setup(producer=RefusingProducer)
        broker.auto = True
        emit(topology, 1)
        with pytest.raises(RuntimeError, match="refused"):
            await task.cycle()
        emit(topology, 1)
        with pytest.raises(RuntimeError, match="refused"):
            await task.cycle()  # never past a batch that was not produced
        assert topology.confirmed == []

    asyncio.run(main())


def test_relieve_with_nothing_under_way_takes_at_once() -> None:
    async def main() -> None:
        task, topology, broker = setup()
        probe = task.probe
        broker.auto = True
        emit(topology, 4)
        await task.relieve(4)
        assert topology.outbox.records == [] and broker.sent[0] == "changelog"
        await asyncio.sleep(0.01)
        assert topology.confirmed == [4] and broker.sent == ["changelog", "outputs"]
        await task.relieve(4)  # below the limit: nothing to do
        assert broker.sent == ["changelog", "outputs"]
        assert probe()["agents waiting for the outbox"] == 0

    asyncio.run(main())


def test_an_agent_never_holds_more_than_three_outboxes_unconfirmed() -> None:
    """The bound relieve keeps under a slow broker: two batches being
    produced (each at most a limit and a fetch) and the outbox filling up
    again."""
    limit, fetch = 50, 20

    async def main() -> int:
        task, topology, broker = setup(linger=0.001)
        runner = asyncio.create_task(task.run())

        async def slow_broker() -> None:
            while True:  # one round of acknowledgements every few milliseconds
                await asyncio.sleep(0.01)
                broker.ack()

        acks = asyncio.create_task(slow_broker())
        emitted = most = 0
        for _ in range(60):  # the agent: a fetch, then back-pressure
            emit(topology, fetch)
            emitted += fetch
            most = max(most, emitted - sum(topology.confirmed))
            await task.relieve(limit)
        acks.cancel()
        runner.cancel()
        return most

    most = asyncio.run(main())
    assert limit < most <= 3 * (limit + fetch)  # it ran ahead, within the bound


# -- the task's states ------------------------------------------------------------


class Recording(Topology):
    """Records the calls the task makes, in order."""

    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls = calls

    def on_assigned(self, partitions: set[int]) -> None:
        self.calls.append(f"assigned {sorted(partitions)}")

    def on_revoked(self) -> None:
        self.calls.append("revoked")

    def on_tick(self, positions: Any, wall: float) -> None:
        self.calls.append("tick")

    def on_stop(self) -> None:
        self.calls.append("stop")
        self.emit(0, "ordered", b"k", b"written at stop")

    def describe(self) -> None:
        self.calls.append("describe")


class RecordingStore(Store):
    def __init__(self, broker: Broker, calls: list[str]) -> None:
        super().__init__(broker)
        self.calls = calls

    def sync(self) -> None:
        self.calls.append("sync")

    async def flush(self, writes: dict[int, Any]) -> None:
        self.calls.append("flush")
        await super().flush(writes)


def recording() -> tuple[Task, list[str], Broker]:
    calls: list[str] = []
    broker = Broker()
    broker.auto = True
    task = Task(Recording(calls), RecordingStore(broker, calls), Producer(broker), str)
    return task, calls, broker


def test_the_states_follow_the_rebalances_and_the_stop() -> None:
    async def main() -> None:
        task, calls, _ = recording()
        assert task.state is TaskState.CREATED
        task.on_tick({}, 1.0)  # nothing assigned: no tick
        task.on_rebalance()
        assert task.state is TaskState.RESTORING and calls == ["sync", "revoked"]
        task.on_tick({}, 1.0)  # restoring: no tick
        task.on_restored({0, 2})
        assert task.state is TaskState.RUNNING and calls[-1] == "assigned [0, 2]"
        task.on_tick({}, 2.0)
        assert calls[-1] == "tick"
        calls.clear()
        await task.suspend(rebalancing=False)
        # the last cycle, the topology's last writes made durable, then its description
        assert calls == ["sync", "flush", "stop", "flush", "sync", "describe"]
        assert task.state is TaskState.SUSPENDED
        task.on_rebalance()  # a stopping worker's rebalance: its local writes only
        task.on_restored({0})
        assert task.state is TaskState.SUSPENDED and calls[-2:] == ["describe", "sync"]
        task.close()
        assert task.state is TaskState.CLOSED
        with pytest.raises(IllegalTransition, match="closed cannot become running"):
            task._to(TaskState.RUNNING)

    asyncio.run(main())


def test_a_stop_during_a_rebalance_only_writes_the_local_state() -> None:
    async def main() -> None:
        task, calls, broker = recording()
        task.on_rebalance()
        task.on_restored({0})
        calls.clear()
        await task.suspend(rebalancing=True)
        assert calls == ["sync"] and broker.sent == []
        assert task.state is TaskState.SUSPENDED

    asyncio.run(main())


def _db(path: Path, entries: dict[bytes, bytes]) -> None:
    from rocksdict import Options, Rdict

    db = Rdict(str(path), Options(raw_mode=True))
    for key, value in entries.items():
        db.put(key, value)
    db.close()


def test_the_local_state_is_kept_after_an_unclean_stop(tmp_path: Path) -> None:
    """Kept, checked: a database with state but without the format key
    (written by a version that wrote RocksDB before the changelog had the
    writes) is discarded after an unclean stop, kept after a clean one."""
    tables = tmp_path / "tables"
    tables.mkdir()
    kept, old = tables / "state-0.db", tables / "state-1.db"
    _db(kept, {b"s1": b"v", FAUST_OFFSET_KEY: b"7", FORMAT_KEY: FORMAT})
    _db(old, {b"s1": b"v", FAUST_OFFSET_KEY: b"7"})
    said: list[str] = []
    local = LocalState(tmp_path, tables)
    local.open(said.append).result(timeout=10)
    assert kept.exists() and old.exists() and said == []  # the first start
    # no clean stop: the next start keeps what has the format key
    LocalState(tmp_path, tables).open(said.append).result(timeout=10)
    assert kept.exists() and not old.exists()
    assert said == [
        f"the previous worker did not stop cleanly: local state {tables} is kept; "
        "each partition replays the changelog after the offset its state holds",
        f"local state {old} holds state written before the changelog had it "
        "(an earlier version): discarded, rebuilt from the changelog",
    ]
    _db(old, {b"s1": b"v", FAUST_OFFSET_KEY: b"7"})
    local.close_cleanly()
    LocalState(tmp_path, tables).open(said.append).result(timeout=10)
    assert kept.exists() and old.exists() and len(said) == 2  # after a clean stop
    (kept / "CURRENT").write_text("garbage\n")  # corrupt: discarded either way
    local.close_cleanly()
    LocalState(tmp_path, tables).open(said.append).result(timeout=10)
    assert not kept.exists() and old.exists()
    assert said[2].startswith(f"local state {kept} is corrupt (does not open:")


def test_an_empty_database_needs_no_offset(tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    tables.mkdir()
    _db(tables / "state-0.db", {})
    (tmp_path / "worker.running").write_text("1\n")
    said: list[str] = []
    LocalState(tmp_path, tables).open(said.append).result(timeout=10)
    assert (tables / "state-0.db").exists() and len(said) == 1


# -- the protocol's order, whatever the broker does ----------------------------------


class Tagged(Topology):
    """Each take is numbered; its records carry the number."""

    def __init__(self) -> None:
        super().__init__()
        self.takes = 0
        self.confirmed_takes: list[int] = []

    def take(self) -> Batch:
        batch = super().take()
        batch.confirms[(0, "take")] = self.takes
        self.takes += 1
        return batch

    def confirm(self, batch: Batch) -> None:
        self.confirmed_takes.append(batch.confirms[(0, "take")])


class TaggedStore(Store):
    def __init__(self, broker: Broker, topology: Tagged, log: list[tuple[str, int]]) -> None:
        super().__init__(broker)
        self.topology, self.log = topology, log

    def take_writes(self) -> dict[int, Any]:
        return {0: self.topology.takes - 1}  # the take just made

    async def flush(self, writes: dict[int, Any]) -> None:
        await self.broker.wait("changelog")
        self.log.append(("changelog", writes[0]))


class TaggedProducer(Producer):
    def __init__(self, broker: Broker, log: list[tuple[str, int]]) -> None:
        super().__init__(broker)
        self.log = log

    async def group(self, records: Any, topic_of: Any) -> Any:
        return {int(value) for _, _, value, _ in records}

    async def send(self, grouped: Any) -> None:
        await self.broker.wait("outputs")
        if grouped:  # (a batch with confirmations only has no records)
            (n,) = grouped  # a batch holds the records of one take
            self.log.append(("outputs", n))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("emit"), st.integers(1, 5)),
            st.tuples(st.just("ack"), st.sampled_from(["changelog", "outputs", None])),
            st.tuples(st.just("relieve"), st.integers(1, 6)),
            st.tuples(st.just("cycle"), st.just(0)),
        ),
        max_size=40,
    )
)
def test_state_before_outputs_and_batches_in_take_order(ops: list[tuple[str, Any]]) -> None:
    """Whatever the order of the broker's acknowledgements: a batch's
    outputs are produced only after its own state writes were acknowledged,
    batches are produced and confirmed in the order they were taken, and a
    cycle returns only once everything taken before it is confirmed."""

    async def main() -> None:
        broker, log = Broker(), []
        topology = Tagged()
        task = Task(topology, TaggedStore(broker, topology, log), TaggedProducer(broker, log), str)
        waiting: list[asyncio.Task[None]] = []

        async def cycle_then_check(takes: int) -> None:
            """A cycle begun after ``takes`` takes returns with all of them confirmed."""
            await task.cycle()
            assert set(range(takes)) <= set(topology.confirmed_takes)

        for op, arg in ops:
            if op == "emit":
                for _ in range(arg):
                    topology.emit(0, "ordered", b"k", str(topology.takes).encode())
            elif op == "ack":
                broker.ack(arg)
            elif op == "relieve":
                waiting.append(asyncio.create_task(task.relieve(arg)))
            else:
                waiting.append(asyncio.create_task(cycle_then_check(topology.takes)))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        broker.auto = True
        broker.ack()
        await asyncio.wait_for(task.cycle(), 5)
        await asyncio.wait_for(asyncio.gather(*waiting), 5)
        produced = [n for kind, n in log if kind == "outputs"]
        assert produced == sorted(produced)
        for n in produced:
            assert log.index(("changelog", n)) < log.index(("outputs", n))
        assert topology.confirmed_takes == sorted(topology.confirmed_takes)
        assert set(produced) <= set(topology.confirmed_takes)

    asyncio.run(main())
