"""An entity ended by its handler (``seqkeeper.End``) in the command
topology on an in-memory store: its record is deleted once the ending
command's messages are dispatched (a crash before that leaves them to the
assignment sweep), its receipts stay, and a new command starts anew."""

from __future__ import annotations

from typing import Any

import orjson

from seqkeeper import Command, End, Event, Registry
from seqkeeper.processors.command import receipt_id
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore, entity_key, pending_key
from seqkeeper.state.memory import MemoryStore
from seqkeeper.topologies.command_worker import CommandTopology
from tests.topologies.test_crash_consistency import LoggedStore

SETTINGS = Settings.of(bootstrap="unused", topology="commands")
ENTITY = "2:t1/acct"

registry = Registry()


@registry.register("Add")
def add(state: Any, c: Command) -> tuple[Any, list[Event]]:
    total = (state or {"total": 0})["total"] + c.payload
    return {"total": total}, [Event("Added", total)]


@registry.register("Close")
def close(state: Any, c: Command) -> tuple[Any, list[Event]]:
    return End(state), [Event("Closed")]


def cmd(mid: str, ctype: str, payload: object = None) -> tuple[bytes, bytes]:
    doc = {"messageId": mid, "commandType": ctype, "schemaVersion": 1, "correlationId": f"c-{mid}",
           "partitionKey": "acct", "tenantId": "t1", "replyTo": "replies", "payload": payload}  # fmt: skip
    return b"acct", orjson.dumps(doc)


class Recording(MemoryStore):
    """A memory store that lists the entity record's writes (None: a delete)."""

    def __init__(self) -> None:
        super().__init__()
        self.entity_writes: list[bytes | None] = []

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        if key == entity_key(ENTITY):
            self.entity_writes.append(value)
        super().put(partition, key, value)

    def delete(self, partition: int, key: bytes) -> None:
        if key == entity_key(ENTITY):
            self.entity_writes.append(None)
        super().delete(partition, key)


def worker(memory: MemoryStore) -> CommandTopology:
    topology = CommandTopology(SETTINGS, CommandStore(memory), registry)
    topology.on_assigned({0})
    return topology


def feed(topology: CommandTopology, *records: tuple[bytes, bytes]) -> dict[str, bytes]:
    for offset, (key, value) in enumerate(records):
        topology.on_record(0, offset, key, value, [], 1.0, 100.0)
    batch = topology.take()
    topology.confirm(batch, now=100.0)
    return {orjson.loads(v)["messageId"]: v for _, _, v, _ in batch.records}


def test_an_ended_entity_is_deleted_after_its_messages_and_its_receipts_stay() -> None:
    memory = Recording()
    topology = worker(memory)
    first = feed(topology, cmd("m1", "Add", 5), cmd("m2", "Add", 2))
    out = feed(topology, cmd("m3", "Close"))
    assert orjson.loads(out["2:t1/m3:reply"])["data"] == {"total": 7}
    assert orjson.loads(out["2:t1/m3:reply"])["ended"] is True
    # written with the Close's outbox, then deleted once it was dispatched
    assert memory.entity_writes[-1] is None and memory.entity_writes[-2] is not None
    assert memory.get(0, entity_key(ENTITY)) is None
    assert memory.get(0, pending_key(ENTITY)) is None
    store = CommandStore(memory)
    for mid in ("m1", "m2", "m3"):
        r = store.receipt(0, receipt_id("t1", mid))
        assert r is not None and r.status == "COMPLETED" and r.dispatched
    # a copy of an earlier command: its stored reply, byte for byte, no run
    again = feed(topology, cmd("m1", "Add", 5))
    assert again == {"2:t1/m1:reply": first["2:t1/m1:reply"]}
    assert memory.get(0, entity_key(ENTITY)) is None
    # a new command: a new entity
    new = feed(topology, cmd("m4", "Add", 1))
    reply = orjson.loads(new["2:t1/m4:reply"])
    assert (reply["data"], reply["version"]) == ({"total": 1}, 1)
    assert store.entity(0, ENTITY).version == 1
    ended = topology.metrics.registry.get_sample_value("seqkeeper_command_entities_ended_total")
    assert ended == 1


def test_a_crash_before_the_mark_leaves_the_ending_messages_to_the_sweep() -> None:
    memory = MemoryStore()
    first = worker(memory)
    feed(first, cmd("m1", "Add", 5))
    first.on_record(0, 1, *cmd("m2", "Close"), [], 1.0, 100.0)
    lost = {orjson.loads(v)["messageId"] for _, _, v, _ in first.take().records}
    assert lost == {"2:t1/m2:1", "2:t1/m2:reply"}  # taken, never confirmed: a crash
    assert memory.get(0, entity_key(ENTITY)) is not None  # the outbox holds them
    second = worker(memory)  # the assignment sweep dispatches them again
    batch = second.take()
    assert {orjson.loads(v)["messageId"] for _, _, v, _ in batch.records} == lost
    second.confirm(batch, now=101.0)
    assert memory.get(0, entity_key(ENTITY)) is None
    assert feed(second, cmd("m2", "Close")).keys() == {"2:t1/m2:reply"}  # a copy: no run


calls: list[str] = []  # the Drop commands run


@registry.register("Drop")
def drop(state: Any, c: Command) -> tuple[Any, list[Event]]:
    calls.append(c.message_id)
    return End(), []


def test_an_end_with_nothing_to_send_cut_before_its_receipt_is_not_run_again() -> None:
    changelog: list[tuple[int, bytes, bytes | None]] = []
    first = worker(LoggedStore(changelog))
    feed(first, cmd("m1", "Add", 5))
    _, value = cmd("m2", "Drop")
    quiet = orjson.dumps({**orjson.loads(value), "replyTo": None})  # no reply, no events
    calls.clear()
    first.on_record(0, 1, b"acct", quiet, [], 1.0, 100.0)
    assert calls == ["m2"]
    # a crash keeps the changelog up to the entity record, not the receipt after it
    cut = max(i for i, (_, key, _) in enumerate(changelog) if key == entity_key(ENTITY)) + 1
    assert any(key.startswith(b"R") and b"m2" in key for _, key, _ in changelog[cut:])
    del changelog[cut:]
    # the sweep finds the entry and keeps it (it tells no correlationId or type)
    second = worker(LoggedStore(changelog))
    second.confirm(second.take(), now=101.0)
    store = CommandStore(second.store.store)
    assert store.receipt(0, receipt_id("t1", "m2")) is None
    assert second.store.store.get(0, entity_key(ENTITY)) is not None
    second.on_record(0, 1, b"acct", quiet, [], 1.0, 102.0)  # read again: a duplicate
    second.confirm(second.take(), now=103.0)  # its receipt written, the entry marked
    receipt = store.receipt(0, receipt_id("t1", "m2"))
    assert receipt is not None and (receipt.status, receipt.dispatched) == ("COMPLETED", True)
    assert (receipt.command_type, receipt.correlation_id) == ("Drop", "c-m2")
    assert second.store.store.get(0, entity_key(ENTITY)) is None
    second.on_record(0, 1, b"acct", quiet, [], 1.0, 104.0)  # and again: a duplicate
    assert calls == ["m2"]
