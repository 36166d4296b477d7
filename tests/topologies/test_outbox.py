"""The outbox cycle and the agents' back-pressure (topologies.shell), with a
broker whose acknowledgements the test releases by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from seqkeeper.topologies.shell import Batch, OutboxOwner, install_outbox, relieve


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


class App:
    def __init__(self, broker: Broker) -> None:
        self.batch_producer = Producer(broker)
        self.before_commit: list[Any] = []
        self.tasks: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self.outbox_cycle: Any = None
        self.outbox_taken: Any = None

    def task(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> Any:
        self.tasks.append(fn)
        return fn


def setup(
    linger: float = 0.0,
) -> tuple[App, Topology, Broker, Callable[[], dict[str, Any]]]:
    broker = Broker()
    app, topology = App(broker), Topology()
    probe = install_outbox(app, topology, Store(broker), lambda role: None, linger)  # type: ignore[arg-type]
    return app, topology, broker, probe


def emit(topology: Topology, n: int) -> None:
    for i in range(n):
        topology.emit("ordered", b"k", str(i).encode())


def test_the_next_take_runs_while_a_batch_is_produced_and_relieve_waits_only_for_it() -> None:
    async def main() -> None:
        app, topology, broker, probe = setup(linger=0.05)
        (outbox_task,) = app.tasks
        runner = asyncio.create_task(outbox_task())
        emit(topology, 3)
        await asyncio.sleep(0.06)  # the outbox task took those 3 after its linger
        assert broker.sent == ["changelog"] and topology.outbox.records == []
        emit(topology, 10)  # while their state writes wait for acknowledgement
        agent = asyncio.create_task(relieve(app, topology, limit=10))
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
        app, topology, broker, _ = setup()
        emit(topology, 2)
        first = asyncio.create_task(relieve(app, topology, limit=2))  # taken now
        await asyncio.sleep(0.01)
        assert broker.sent == ["changelog"] and not first.done()  # state first
        broker.ack()
        await asyncio.wait_for(first, 1)
        await asyncio.sleep(0.01)
        assert broker.sent == ["changelog", "outputs"]
        emit(topology, 4)
        second = asyncio.create_task(relieve(app, topology, limit=4))
        await asyncio.sleep(0.01)
        assert broker.sent == ["changelog", "outputs", "changelog"]
        broker.ack("changelog")  # the second batch's state, not the first's outputs
        await asyncio.wait_for(second, 1)
        await asyncio.sleep(0.01)
        # produced in order: the second batch waits for the first
        assert broker.sent == ["changelog", "outputs", "changelog"]
        emit(topology, 1)
        third = asyncio.create_task(app.outbox_cycle())
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
        app, topology, broker, _ = setup()
        broker.auto = True

        async def refused(grouped: Any) -> None:
            raise RuntimeError("the broker refused the batch")

        app.batch_producer.send = refused  # type: ignore[method-assign]
        emit(topology, 1)
        with pytest.raises(RuntimeError, match="refused"):
            await app.outbox_cycle()
        emit(topology, 1)
        with pytest.raises(RuntimeError, match="refused"):
            await app.outbox_cycle()  # never past a batch that was not produced
        assert topology.confirmed == []

    asyncio.run(main())


def test_relieve_with_nothing_under_way_takes_at_once() -> None:
    async def main() -> None:
        app, topology, broker, probe = setup()
        broker.auto = True
        emit(topology, 4)
        await relieve(app, topology, limit=4)
        assert topology.outbox.records == [] and broker.sent[0] == "changelog"
        await asyncio.sleep(0.01)
        assert topology.confirmed == [4] and broker.sent == ["changelog", "outputs"]
        await relieve(app, topology, limit=4)  # below the limit: nothing to do
        assert broker.sent == ["changelog", "outputs"]
        assert probe()["agents waiting for the outbox"] == 0

    asyncio.run(main())


def test_an_agent_never_holds_more_than_three_outboxes_unconfirmed() -> None:
    """The bound relieve keeps under a slow broker: two batches being
    produced (each at most a limit and a fetch) and the outbox filling up
    again."""
    limit, fetch = 50, 20

    async def main() -> int:
        app, topology, broker, _ = setup(linger=0.001)
        (outbox_task,) = app.tasks
        runner = asyncio.create_task(outbox_task())

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
            await relieve(app, topology, limit)
        acks.cancel()
        runner.cancel()
        return most

    most = asyncio.run(main())
    assert limit < most <= 3 * (limit + fetch)  # it ran ahead, within the bound
