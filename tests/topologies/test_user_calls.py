"""Sync user functions in worker threads: the loop goes on while
one blocks, the timeout applies, a stuck call's key gets no second call
until it returns, and the stuck threads are bounded."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from seqkeeper.processors.command import Command, Event, Registry, receipt_id
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.topologies.command_worker import CommandTopology
from seqkeeper.topologies.user_calls import UserCalls
from tests.topologies.test_async_handlers import record, replies


def test_a_batch_stops_at_the_call_past_the_timeout_and_its_slot_waits() -> None:
    release = threading.Event()
    ran: list[str] = []
    freed: list[object] = []

    def call(name: str, block: bool = False):
        def run() -> str:
            ran.append(name)
            if block:
                release.wait(10)
            return name

        return run

    async def scenario() -> None:
        calls = UserCalls(0.2, freed.append)
        ticks = 0

        async def ticker() -> None:  # the loop is never blocked meanwhile
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        tick = asyncio.create_task(ticker())
        start = time.monotonic()
        outcomes, late = await calls.run(["a", "b", "c"], [call("a"), call("b", True), call("c")])
        assert time.monotonic() - start < 5
        assert outcomes == ["a"] and late == "b"
        assert ran == ["a", "b"]  # c never started: the caller offers it again
        assert ticks >= 5
        assert calls.blocked("b") and not calls.blocked("a") and not calls.full()
        release.set()
        for _ in range(200):
            if not calls.blocked("b"):
                break
            await asyncio.sleep(0.01)
        assert not calls.blocked("b") and freed == ["b"]
        assert ran == ["a", "b"]  # what b returned is dropped, c still not run
        tick.cancel()

    asyncio.run(scenario())


def test_stuck_calls_are_bounded() -> None:
    release = threading.Event()

    async def scenario() -> None:
        calls = UserCalls(0.05, stuck_threads=2)
        for slot in ("x", "y"):
            assert not calls.full()
            _, late = await calls.run([slot], [lambda: release.wait(10)])
            assert late == slot
        assert calls.full() and calls.stuck_count == 2
        release.set()
        for _ in range(200):
            if not calls.full():
                break
            await asyncio.sleep(0.01)
        assert not calls.full()

    asyncio.run(scenario())


@pytest.mark.parametrize("retry_due_while_stuck", [True, False])
def test_a_sync_handler_past_the_timeout_is_retried_never_beside_itself(
    retry_due_while_stuck: bool,
) -> None:
    """The command worker's sync handler blocks past the timeout: the
    attempt fails (retried), and the retry waits for the blocked call to
    return; the command is applied once."""
    release = threading.Event()
    running = 0
    most = 0
    calls = 0
    registry = Registry()

    @registry.register("Add")
    def add(state: Any, command: Command) -> tuple[Any, list[Event]]:
        nonlocal running, most, calls
        calls += 1
        running += 1
        most = max(most, running)
        try:
            if calls == 1:
                release.wait(10)
            return (state or 0) + 1, [Event("Added", command.payload)]
        finally:
            running -= 1

    settings = Settings.of(
        bootstrap="unused", handler_timeout=0.2, command_retry_delay=0.05, command_attempts=5
    )
    store = CommandStore(MemoryStore())
    topology = CommandTopology(settings, store, registry, threads=True)
    topology.on_assigned({0})

    async def scenario() -> None:
        waiting = topology.on_records(0, [record(0, "m1", "Add", 1)], time.time())
        assert waiting is not None
        await waiting
        receipt = store.receipt(0, receipt_id("t1", "m1"))
        assert receipt is not None and receipt.status == "PROCESSING"
        assert "ran past 0.2 s" in (receipt.error or "")
        if not retry_due_while_stuck:
            release.set()
        for _ in range(100):  # the timer's ticks
            await asyncio.sleep(0.05)
            waiting = topology.on_tick({}, time.time())
            if waiting is not None:
                await waiting
            if retry_due_while_stuck and _ == 10:
                assert calls == 1  # held: its first call still runs
                release.set()
            done = store.receipt(0, receipt_id("t1", "m1"))
            if done is not None and done.status == "COMPLETED":
                break

    asyncio.run(scenario())
    receipt = store.receipt(0, receipt_id("t1", "m1"))
    assert receipt is not None and receipt.status == "COMPLETED"
    assert calls == 2 and most == 1
    assert store.entity(0, receipt.entity).version == 1  # applied once
    assert [r["success"] for r in replies(topology.take())] == [True]
