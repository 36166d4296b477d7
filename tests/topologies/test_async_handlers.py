"""Async command handlers in the command topology (in-memory store): the run
is awaited, then the decision persisted in one block; commands of a fetch
keep their offset order; a run past the handler timeout is a transient
failure (retried, then dead-lettered naming the limit); one result is
persisted however often a handler ran; a change of the entity during the
await (a retry applied, a batch confirmed) is decided on, never
overwritten; a rebalance during the await writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import orjson

from seqkeeper.processors.command import Command, DomainError, Event, Registry, receipt_id
from seqkeeper.runtime.protocol import Batch
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.topologies.command_worker import CommandTopology

SETTINGS = Settings.of(
    bootstrap="unused",
    topology="commands",
    command_attempts=3,
    command_retry_delay=1.0,
    handler_timeout=0.05,
)
EVENTS = SETTINGS.commands.events_topic
DLQ = SETTINGS.commands.command_dlq_topic
ENTITY = "2:t1/acct"


@dataclass(frozen=True)
class Record:
    """A fetched input record (runtime.protocol.InputRecord)."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = 1_000


def record(offset: int, mid: str, ctype: str, payload: Any = None) -> Record:
    doc = {
        "messageId": mid,
        "commandType": ctype,
        "schemaVersion": 1,
        "correlationId": f"c-{mid}",
        "partitionKey": "acct",
        "tenantId": "t1",
        "replyTo": "replies",
        "payload": payload,
    }
    return Record(offset, b"acct", orjson.dumps(doc))


def topology_of(registry: Registry, memory: MemoryStore | None = None) -> CommandTopology:
    topology = CommandTopology(SETTINGS, CommandStore(memory or MemoryStore()), registry)
    topology.on_assigned({0})
    return topology


async def settle(waiting: Awaitable[None] | None) -> None:
    assert waiting is not None, "an async handler's run is awaited"
    await waiting


def replies(batch: Batch) -> list[dict[str, Any]]:
    return [orjson.loads(v) for t, _, v, _ in batch.records if t == "replies"]


def events(batch: Batch) -> list[dict[str, Any]]:
    return [orjson.loads(v) for t, _, v, _ in batch.records if t == EVENTS]


def test_async_and_sync_handlers_of_one_fetch_apply_in_offset_order() -> None:
    registry = Registry()

    @registry.register("Slow")
    async def slow(state: Any, command: Command) -> tuple[Any, list[Event]]:
        await asyncio.sleep(0.01)  # another service answering
        return [*(state or []), command.payload], [Event("Appended", command.payload)]

    @registry.register("Fast")
    def fast(state: Any, command: Command) -> tuple[Any, list[Event]]:
        return [*(state or []), command.payload], [Event("Appended", command.payload)]

    topology = topology_of(registry)
    sync_only = [record(0, "f0", "Fast", 0)]
    assert topology.on_records(0, sync_only, 100.0) is None  # no coroutine for sync handlers
    fetch = [
        record(1, "s1", "Slow", 1),
        record(2, "f2", "Fast", 2),
        record(3, "s3", "Slow", 3),
        record(4, "f4", "Fast", 4),
    ]
    asyncio.run(settle(topology.on_records(0, fetch, 100.0)))
    batch = topology.take()
    assert [(r["messageId"], r["success"], r["version"]) for r in replies(batch)] == [
        ("2:t1/f0:reply", True, 1),
        ("2:t1/s1:reply", True, 2),
        ("2:t1/f2:reply", True, 3),
        ("2:t1/s3:reply", True, 4),
        ("2:t1/f4:reply", True, 5),
    ]
    assert [e["data"] for e in events(batch)] == [0, 1, 2, 3, 4]
    store = topology.store
    entity = store.entity(0, ENTITY)
    assert entity.state == [0, 1, 2, 3, 4] and entity.version == 5
    receipt = store.receipt(0, receipt_id("t1", "s3"))
    assert receipt is not None and receipt.status == "COMPLETED" and receipt.attempts == 1


def test_a_domain_error_from_an_async_handler_is_a_failure_reply() -> None:
    registry = Registry()

    @registry.register("Refuse")
    async def refuse(state: Any, command: Command) -> tuple[Any, list[Event]]:
        await asyncio.sleep(0)
        raise DomainError("not today", {"why": "closed"})

    topology = topology_of(registry)
    asyncio.run(settle(topology.on_records(0, [record(0, "r", "Refuse")], 100.0)))
    batch = topology.take()
    [answer] = replies(batch)
    assert (answer["success"], answer["message"], answer["data"]) == (
        False,
        "not today",
        {"why": "closed"},
    )
    assert events(batch) == [] and topology.store.entity(0, ENTITY).version == 0


def test_a_handler_past_the_timeout_is_retried_then_dead_lettered_naming_the_timeout() -> None:
    registry = Registry()
    runs: list[float] = []

    @registry.register("Hang")
    async def hang(state: Any, command: Command) -> tuple[Any, list[Event]]:
        runs.append(asyncio.get_running_loop().time())
        await asyncio.sleep(5)  # far past the 0.05 s timeout
        return 1, []

    topology = topology_of(registry)
    asyncio.run(settle(topology.on_records(0, [record(0, "h", "Hang")], 100.0)))
    store = topology.store
    receipt = store.receipt(0, receipt_id("t1", "h"))
    assert receipt is not None and receipt.status == "PROCESSING" and receipt.attempts == 1
    assert receipt.error == "builtins.TimeoutError: handler ran past 0.05 s"
    # the backoff counts from when the run was given up
    assert receipt.retry_at is not None and 101.05 <= receipt.retry_at < 102.0
    assert topology.take().records == []
    assert topology.on_tick({}, 101.0) is None  # not due yet
    asyncio.run(settle(topology.on_tick({}, 110.0)))  # attempt 2
    asyncio.run(settle(topology.on_tick({}, 120.0)))  # attempt 3: the last
    assert len(runs) == 3
    assert topology.on_tick({}, 130.0) is None  # nothing left to retry
    batch = topology.take()
    [dead] = [dict(h or []) for t, _, _, h in batch.records if t == DLQ]
    assert dead["seqkeeper.reason"] == b"handler-failed"
    assert dead["seqkeeper.attempts"] == b"3"
    assert dead["kafka_dlt-exception-fqcn"] == b"builtins.TimeoutError"
    assert dead["kafka_dlt-exception-message"] == (
        b"handler failed 3 times; last error: builtins.TimeoutError: handler ran past 0.05 s"
    )
    assert dead["kafka_dlt-original-offset"] == b"\x00" * 8  # (Spring: a long)
    [answer] = replies(batch)
    assert not answer["success"] and "handler ran past 0.05 s" in answer["message"]
    final = store.receipt(0, receipt_id("t1", "h"))
    assert final is not None and final.status == "FAILED"


def test_transient_failures_then_success_persist_one_result() -> None:
    registry = Registry()
    runs: list[Any] = []

    @registry.register("Flaky")
    async def flaky(state: Any, command: Command) -> tuple[Any, list[Event]]:
        runs.append(state)
        await asyncio.sleep(0)
        if len(runs) <= 2:
            raise ConnectionError("the other service is away")
        return (state or 0) + command.payload, [Event("Added", command.payload)]

    topology = topology_of(registry)
    copy = record(0, "x", "Flaky", 5)
    asyncio.run(settle(topology.on_records(0, [copy], 100.0)))
    # a copy while the retry waits: a duplicate, the handler does not run
    assert topology.on_records(0, [Record(1, copy.key, copy.value)], 100.5) is None
    asyncio.run(settle(topology.on_tick({}, 110.0)))
    asyncio.run(settle(topology.on_tick({}, 120.0)))
    assert runs == [None, None, None]
    batch = topology.take()
    assert [e["messageId"] for e in events(batch)] == ["2:t1/x:1"]
    assert [(r["success"], r["data"], r["version"]) for r in replies(batch)] == [(True, 5, 1)]
    topology.confirm(batch, now=121.0)
    receipt = topology.store.receipt(0, receipt_id("t1", "x"))
    assert receipt is not None and receipt.status == "COMPLETED" and receipt.attempts == 3
    assert receipt.dispatched
    assert topology.store.entity(0, ENTITY).version == 1
    # a later copy: the stored reply again, no run
    assert topology.on_records(0, [Record(2, copy.key, copy.value)], 130.0) is None
    assert len(runs) == 3 and [r["data"] for r in replies(topology.take())] == [5]


def test_a_command_applied_during_the_await_is_kept_and_the_handler_runs_again() -> None:
    """A retry on the timer applies another command of the entity while the
    async handler waits: its outcome (on the old state) is not persisted; it
    runs again on the new state, and both commands count once."""
    registry = Registry()
    seen: list[Any] = []
    fails = {"b": 1}

    @registry.register("Credit")  # sync, fails once: its retry comes from the timer
    def credit(state: Any, command: Command) -> tuple[Any, list[Event]]:
        if fails[command.message_id]:
            fails[command.message_id] -= 1
            raise ConnectionError("away")
        return (state or 0) + command.payload, [Event("Credited")]

    async def scenario() -> None:
        started, release = asyncio.Event(), asyncio.Event()

        @registry.register("Double")
        async def double(state: Any, command: Command) -> tuple[Any, list[Event]]:
            seen.append(state)
            started.set()
            await release.wait()
            return (state or 1) * 2, [Event("Doubled")]

        topology = topology_of(registry)
        assert topology.on_records(0, [record(0, "b", "Credit", 3)], 100.0) is None  # retry armed
        running = asyncio.ensure_future(
            settle(topology.on_records(0, [record(1, "a", "Double")], 100.5))
        )
        await asyncio.wait_for(started.wait(), 5)
        assert topology.on_tick({}, 200.0) is None  # "b" retried (sync) and applied meanwhile
        assert topology.store.entity(0, ENTITY).version == 1
        release.set()
        await running
        assert seen == [None, 3]  # run again on the state "b" left
        entity = topology.store.entity(0, ENTITY)
        assert (entity.state, entity.version) == (6, 2)
        batch = topology.take()
        assert [(r["messageId"], r["version"]) for r in replies(batch)] == [
            ("2:t1/b:reply", 1),
            ("2:t1/a:reply", 2),
        ]
        assert [e["type"] for e in events(batch)] == ["Credited", "Doubled"]

    asyncio.run(scenario())


def test_a_confirm_during_the_await_is_not_undone() -> None:
    """The batch of an earlier command is confirmed while the handler waits
    (its messages leave the entity's outbox): the decision is made on the
    entity as it is then, so those messages are not put back; the state did
    not change, so the handler's outcome stands (one run)."""
    registry = Registry()
    runs: list[Any] = []

    @registry.register("Set")
    def set_(state: Any, command: Command) -> tuple[Any, list[Event]]:
        return command.payload, [Event("Set")]

    async def scenario() -> None:
        started, release = asyncio.Event(), asyncio.Event()

        @registry.register("Check")
        async def check(state: Any, command: Command) -> tuple[Any, list[Event]]:
            runs.append(state)
            started.set()
            await release.wait()
            return state, [Event("Checked")]

        topology = topology_of(registry)
        assert topology.on_records(0, [record(0, "s", "Set", 7)], 100.0) is None
        produced = topology.take()  # being produced while the next command runs
        running = asyncio.ensure_future(
            settle(topology.on_records(0, [record(1, "c", "Check")], 100.0))
        )
        await asyncio.wait_for(started.wait(), 5)
        topology.confirm(produced, now=100.2)
        assert topology.store.entity(0, ENTITY).outbox == ()
        release.set()
        await running
        assert runs == [7]
        entity = topology.store.entity(0, ENTITY)
        assert [cid for cid, _ in entity.outbox] == ["c"]
        batch = topology.take()
        assert sorted(orjson.loads(v)["messageId"] for _, _, v, _ in batch.records) == [
            "2:t1/c:1",
            "2:t1/c:reply",
        ]
        topology.confirm(batch, now=101.0)
        assert topology.store.entity(0, ENTITY).outbox == ()
        s = topology.store.receipt(0, receipt_id("t1", "s"))
        assert s is not None and s.dispatched

    asyncio.run(scenario())


def test_a_rebalance_during_the_await_writes_nothing() -> None:
    registry = Registry()
    runs: list[str] = []

    async def scenario() -> None:
        started, release = asyncio.Event(), asyncio.Event()

        @registry.register("Wait")
        async def wait(state: Any, command: Command) -> tuple[Any, list[Event]]:
            runs.append(command.message_id)
            started.set()
            await release.wait()
            return command.message_id, []

        memory = MemoryStore()
        topology = topology_of(registry, memory)
        fetch = [record(0, "w0", "Wait"), record(1, "w1", "Wait")]
        running = asyncio.ensure_future(settle(topology.on_records(0, fetch, 100.0)))
        await asyncio.wait_for(started.wait(), 5)
        topology.on_revoked()
        assert topology.on_records(1, [record(0, "o", "Wait")], 100.0) is None  # not read now
        release.set()
        await running
        assert runs == ["w0"]  # the rest of the fetch is left to the next owner
        assert topology.take().records == []
        store = CommandStore(memory)
        assert store.receipt(0, receipt_id("t1", "w0")) is None
        assert store.entity(0, ENTITY).version == 0
        # the next owner (here: the same worker, assigned again) reads them again
        topology.on_assigned({0})
        await settle(topology.on_records(0, fetch, 101.0))
        assert runs == ["w0", "w0", "w1"]
        assert store.entity(0, ENTITY).version == 2

    asyncio.run(scenario())


def test_one_tick_retries_every_due_command_in_turn() -> None:
    registry = Registry()
    runs: list[str] = []

    @registry.register("Once")  # fails its first run
    async def once(state: Any, command: Command) -> tuple[Any, list[Event]]:
        runs.append(command.message_id)
        await asyncio.sleep(0)
        if runs.count(command.message_id) == 1:
            raise ConnectionError("away")
        return [*(state or []), command.message_id], []

    @registry.register("SyncOnce")
    def sync_once(state: Any, command: Command) -> tuple[Any, list[Event]]:
        runs.append(command.message_id)
        if runs.count(command.message_id) == 1:
            raise ConnectionError("away")
        return [*(state or []), command.message_id], []

    topology = topology_of(registry)
    fetch = [record(0, "a", "Once"), record(1, "b", "SyncOnce"), record(2, "c", "Once")]
    asyncio.run(settle(topology.on_records(0, fetch, 100.0)))
    assert runs == ["a", "b", "c"] and topology.take().records == []
    asyncio.run(settle(topology.on_tick({}, 110.0)))  # all three due: one tick
    assert runs[:3] == ["a", "b", "c"] and sorted(runs[3:]) == ["a", "b", "c"]
    entity = topology.store.entity(0, ENTITY)
    assert entity.state == runs[3:] and entity.version == 3  # in the order retried
    assert [r["version"] for r in replies(topology.take())] == [1, 2, 3]
