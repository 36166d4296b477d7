"""The command topology on an in-memory store: faults between persist and
dispatch, and between dispatch and mark, never change the effect and always
re-dispatch the same messages."""

from __future__ import annotations

import orjson

from seqkeeper.processors.command import Command, Event, Registry, receipt_id
from seqkeeper.processors.inventory import registry
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.topologies.command_worker import CommandTopology

SETTINGS = Settings.of(bootstrap="unused", topology="commands", command_retry_delay=1.0)


def cmd(mid: str, ctype: str, payload: object, sku: str = "sku-1") -> tuple[bytes, bytes]:
    return sku.encode(), orjson.dumps(
        {
            "messageId": mid,
            "commandType": ctype,
            "schemaVersion": 1,
            "correlationId": f"c-{mid}",
            "partitionKey": sku,
            "tenantId": "t1",
            "replyTo": "replies",
            "payload": payload,
        }
    )


def rid(mid: str) -> str:
    """The receipt id of tenant t1's command ``mid``."""
    return receipt_id("t1", mid)


def worker(memory: MemoryStore) -> CommandTopology:
    topology = CommandTopology(SETTINGS, CommandStore(memory), registry)
    topology.on_assigned({0})
    return topology


def feed(topology: CommandTopology, *records: tuple[bytes, bytes]) -> None:
    for offset, (key, value) in enumerate(records):
        topology.on_record(0, offset, key, value, [], 1.0, 100.0)


def sent(batch) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    return {orjson.loads(v)["messageId"]: v for _, _, v, _ in batch.records}


def test_crash_between_persist_and_dispatch_dispatches_the_same_messages() -> None:
    memory = MemoryStore()
    first = worker(memory)
    feed(first, cmd("a", "AddStock", {"quantity": 3}))
    lost = sent(first.take())  # persisted, then the worker dies before producing
    assert set(lost) == {"2:t1/a:1", "2:t1/a:reply"}
    second = worker(memory)  # the assignment sweep finds the undispatched outbox
    batch = second.take()
    assert sent(batch) == lost
    second.confirm(batch)
    assert CommandStore(memory).receipt(0, rid("a")).dispatched  # type: ignore[union-attr]
    assert worker(memory).take().records == []  # nothing left to dispatch
    third = worker(memory)
    feed(third, cmd("a", "AddStock", {"quantity": 3}))  # a late copy: reply only
    assert set(sent(third.take())) == {"2:t1/a:reply"}
    assert CommandStore(memory).entity(0, "2:t1/sku-1").state == {"available": 3, "reserved": {}}


def test_crash_between_dispatch_and_mark_redispatches_without_a_second_effect() -> None:
    memory = MemoryStore()
    first = worker(memory)
    feed(
        first,
        cmd("a", "AddStock", {"quantity": 5}),
        cmd("r", "ReserveInventory", {"orderId": "o", "quantity": 4}),
    )
    produced = sent(first.take())  # produced, but the worker dies before the mark
    second = worker(memory)
    again = second.take()
    assert sent(again) == produced
    feed(second, cmd("r", "ReserveInventory", {"orderId": "o", "quantity": 4}))  # a copy
    assert set(sent(second.take())) <= set(produced)
    second.confirm(again)
    entity = CommandStore(memory).entity(0, "2:t1/sku-1")
    assert entity.version == 2 and entity.outbox == ()
    assert entity.state == {"available": 1, "reserved": {"o": 4}}


def test_poison_and_transient_failures_keep_the_partition_flowing() -> None:
    memory = MemoryStore()
    topology = worker(memory)
    topology.on_record(0, 0, b"k", b"{not json", [], 1.0, 100.0)
    key, value = cmd("x", "Teleport", {})
    topology.on_record(0, 1, key, value, [], 1.0, 100.0)
    key, value = cmd("t", "AddStock", {"quantity": 1})
    topology.on_record(0, 2, key, value, [("tenant", b"t2")], 1.0, 100.0)
    feed(topology, cmd("ok", "AddStock", {"quantity": 1}))
    batch = topology.take()
    dead = [
        dict(h or []) for t, _, _, h in batch.records if t == SETTINGS.commands.command_dlq_topic
    ]
    assert [h["seqkeeper.reason"] for h in dead] == [
        b"invalid-envelope",
        b"unknown-command-type",
        b"tenant-mismatch",
    ]
    replies = [orjson.loads(v) for t, _, v, _ in batch.records if t == "replies"]
    assert [r["messageId"] for r in replies] == ["2:t1/x:reply", "2:t1/ok:reply"]
    assert replies[1]["success"] and not replies[0]["success"]


def test_transient_failures_are_retried_by_the_timer_then_dead_lettered() -> None:
    flaky = Registry()
    calls: dict[str, int] = {}

    @flaky.register("Flaky")
    def handler(state: object, command: Command) -> tuple[object, list[Event]]:
        calls[command.message_id] = calls.get(command.message_id, 0) + 1
        if calls[command.message_id] <= command.payload["fail"]:
            raise ConnectionError("database away")
        return 1, []

    settings = Settings.of(
        bootstrap="unused", topology="commands", command_attempts=3, command_retry_delay=1.0
    )
    memory = MemoryStore()
    topology = CommandTopology(settings, CommandStore(memory), flaky)
    topology.on_assigned({0})
    for offset, (mid, fail) in enumerate([("soon", 2), ("never", 9)]):
        key, value = cmd(mid, "Flaky", {"fail": fail})
        topology.on_record(0, offset, key, value, [], 1.0, 100.0)
    assert topology.take().records == []  # nothing decided yet
    restarted = CommandTopology(settings, CommandStore(memory), flaky)
    restarted.on_assigned({0})  # the retry index survives a restart
    for now in (100.5, 101.0, 103.0):
        restarted.on_tick({}, now)
    records = restarted.take().records
    dead = [dict(h or []) for t, _, _, h in records if t == settings.commands.command_dlq_topic]
    assert calls == {"soon": 3, "never": 3}
    assert len(dead) == 1 and dead[0]["seqkeeper.attempts"] == b"3"
    assert b"ConnectionError" in dead[0]["kafka_dlt-exception-fqcn"]
    store = CommandStore(memory)
    assert store.receipt(0, rid("soon")).status == "COMPLETED"  # type: ignore[union-attr]
    assert store.receipt(0, rid("never")).status == "FAILED"  # type: ignore[union-attr]
    assert list(store.waiting_retries(0)) == []


def test_old_receipts_are_cleaned_in_batches_and_the_entity_stays_small() -> None:
    settings = Settings.of(bootstrap="unused", topology="commands", receipt_max_age=3600.0)
    memory = MemoryStore()
    topology = CommandTopology(settings, CommandStore(memory), registry)
    topology.on_assigned({0})
    n = 300
    for i in range(n):
        key, value = cmd(f"m{i}", "AddStock", {"quantity": 1})
        topology.on_record(0, i, key, value, [], 1.0, 100.0)
    topology.confirm(topology.take(), now=100.0)
    store = CommandStore(memory)
    entity = store.entity(0, "2:t1/sku-1")
    assert entity.version == n and entity.outbox == ()  # markers live apart
    assert len(memory.get(0, b"e2:t1/sku-1") or b"") < 200
    topology.on_tick({}, 100.0 + 1800)  # younger than the retention: kept
    assert store.receipt(0, rid("m0")) is not None
    topology.on_tick({}, 100.0 + 3601)  # one batch
    left = sum(1 for i in range(n) if store.receipt(0, rid(f"m{i}")) is not None)
    assert left == n - 256
    topology.on_tick({}, 100.0 + 3602)
    assert all(store.receipt(0, rid(f"m{i}")) is None for i in range(n))
    assert all(list(memory.items(0, f)) == [] for f in (b"R", b"C", b"T", b"r", b"c", b"t"))
    assert topology.metrics.registry.get_sample_value("seqkeeper_receipts_forgotten_total") == n


def test_under_exactly_once_copies_dispatch_no_event_again() -> None:
    """The runtime confirms a batch as it takes it and commits the
    confirmation in the batch's transaction (runtime/task.py, E2): a copy read
    before the take finds its command still in the outbox and sends nothing
    (at_least_once sends the stored messages again, test above); a copy
    after it finds the receipt dispatched and gets the stored reply."""
    settings = SETTINGS.with_overrides(processing_guarantee="exactly_once")
    topology = CommandTopology(settings, CommandStore(MemoryStore()), registry)
    topology.on_assigned({0})
    add = cmd("a", "AddStock", {"quantity": 3})
    feed(topology, add, add)  # the copy before the take
    batch = topology.take()
    topology.confirm(batch)
    assert sorted(orjson.loads(v)["messageId"] for _, _, v, _ in batch.records) == [
        "2:t1/a:1",
        "2:t1/a:reply",
    ]
    feed(topology, add)  # the copy after it
    assert set(sent(topology.take())) == {"2:t1/a:reply"}
    assert topology.metrics.duplicates._value.get() == 2
