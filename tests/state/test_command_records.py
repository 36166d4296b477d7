"""The command table's key layout, and the layout without tenants: receipts
kept under their bare messageId are found, deduplicate, and are moved under
their receipt id on read (in one write, safe wherever a crash cuts it)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from seqkeeper.inspect import lookup
from seqkeeper.processors.command import Entity, Outgoing, Receipt, receipt_id
from seqkeeper.processors.inventory import registry
from seqkeeper.settings import Settings
from seqkeeper.state import command_records as cmd
from seqkeeper.state.base import Change
from seqkeeper.state.memory import MemoryStore
from seqkeeper.topologies.command_worker import CommandTopology

MAX_AGE = 3600.0
SETTINGS = Settings.of(bootstrap="unused", topology="commands", receipt_max_age=MAX_AGE)
ENTITY = "2:t1/sku-1"
REPLY = Outgoing(
    "replies",
    "sku-1",
    "m1:reply",
    b'{"messageId":"m1:reply","correlationId":"corr","success":true,"data":{"available":3}}',
)
EVENT = Outgoing(None, "sku-1", "m1:1", b'{"messageId":"m1:1","type":"StockAdded"}')
ALL_RECEIPT_FAMILIES = (b"R", b"W", b"C", b"T", b"r", b"w", b"c", b"t")


def command(tenant: str, mid: str = "m1", quantity: int = 3) -> tuple[bytes, bytes]:
    return b"sku-1", orjson.dumps(
        {
            "messageId": mid,
            "commandType": "AddStock",
            "schemaVersion": 1,
            "correlationId": "corr",
            "partitionKey": "sku-1",
            "tenantId": tenant,
            "replyTo": "replies",
            "payload": {"quantity": quantity},
        }
    )


def receipt(dispatched: bool = True, **changes: Any) -> Receipt:
    """t1's AddStock m1, completed at 2.0."""
    doc: dict[str, Any] = {
        "message_id": "m1",
        "status": "COMPLETED",
        "entity": ENTITY,
        "command_type": "AddStock",
        "correlation_id": "corr",
        "received_at": 1.0,
        "updated_at": 2.0,
        "attempts": 1,
        "reply": REPLY,
        "dispatched": dispatched,
    }
    doc.update(changes)
    return Receipt(**doc)


def write_old_layout(memory: MemoryStore, r: Receipt, partition: int = 0) -> None:
    """``r`` with its index entries, keyed as the layout without tenants
    keeps them (the keys spelled out here, byte by byte)."""
    mid = r.message_id.encode()
    if r.status == "PROCESSING":
        memory.put(partition, b"w" + mid, b"")
    memory.put(partition, b"r" + mid, cmd.encode_receipt(r))
    memory.put(partition, b"c" + r.correlation_id.encode() + b"\x00" + mid, b"")
    if r.dispatched:
        memory.put(partition, b"t" + struct.pack(">d", r.updated_at) + mid, b"")


def waiting() -> Receipt:
    """t1's m1 after a transient failure, its retry due at 50.0."""
    return receipt(
        False,
        status="PROCESSING",
        reply=None,
        error="ConnectionError: away",
        retry_at=50.0,
        value=command("t1")[1],
        origin=("commands.in", 0, 7, None),
    )


def old_state(kind: str = "dispatched") -> MemoryStore:
    """m1's receipt in the old layout, and t1's entity: ``dispatched``: after
    m1 (AddStock 3); ``outbox``: the same, m1's messages still in its
    outbox; ``retry``: before m1, which waits for a retry."""
    memory = MemoryStore()
    if kind == "retry":
        write_old_layout(memory, waiting())
        return memory
    outbox = (("m1", (EVENT, REPLY)),) if kind == "outbox" else ()
    entity = Entity(1, {"available": 3, "reserved": {}}, outbox)
    if outbox:
        memory.put(0, b"o" + ENTITY.encode(), b"")
    memory.put(0, b"e" + ENTITY.encode(), cmd.encode_entity(entity))
    write_old_layout(memory, receipt(kind == "dispatched"))
    return memory


def keys(memory: MemoryStore, families: Sequence[bytes] = ALL_RECEIPT_FAMILIES) -> set[bytes]:
    return {k for f in families for k, _ in memory.items(0, f)}


def worker(memory: MemoryStore) -> CommandTopology:
    topology = CommandTopology(SETTINGS, cmd.CommandStore(memory), registry)
    topology.on_assigned({0})
    return topology


def feed(topology: CommandTopology, tenant: str, offset: int = 0, now: float = 100.0) -> list[Any]:
    key, value = command(tenant)
    topology.on_record(0, offset, key, value, [("tenant", tenant.encode())], 1.0, now)
    batch = topology.take()
    topology.confirm(batch, now=now)
    return [(t, v) for t, _, v, _ in batch.records]


NEW_KEYS = {
    b"R2:t1/m1",
    b"C2:t1/corr\x00m1",
    b"T" + struct.pack(">d", 2.0) + b"2:t1/m1",
}


def test_key_layouts() -> None:
    rid = receipt_id("t1", "m1")
    assert rid == "2:t1/m1"
    assert cmd.receipt_key(rid) == b"R2:t1/m1"
    assert cmd.retry_key(rid) == b"W2:t1/m1"
    assert cmd.correlation_key("t1", "corr", "m1") == b"C2:t1/corr\x00m1"
    assert cmd.age_key(2.0, rid) == b"T" + struct.pack(">d", 2.0) + b"2:t1/m1"
    assert cmd.old_receipt_key("m1") == b"rm1" and cmd.old_retry_key("m1") == b"wm1"
    assert cmd.old_correlation_key(receipt()) == b"ccorr\x00m1"
    assert cmd.old_age_key(2.0, "m1") == b"t" + struct.pack(">d", 2.0) + b"m1"
    value = cmd.encode_receipt(receipt())
    described = {
        key: cmd.describe(key, v)[:3]
        for key, v in [
            (b"R2:t1/m1", value),
            (b"rm1", value),
            (b"W2:t1/m1", b""),
            (b"wm1", b""),
            (b"C2:t1/corr\x00m1", b""),
            (b"ccorr\x00m1", b""),
            (b"T" + struct.pack(">d", 2.0) + b"2:t1/m1", b""),
            (b"t" + struct.pack(">d", 2.0) + b"m1", b""),
        ]
    }
    assert list(described.values()) == [
        ("receipt", "2:t1/m1", None),
        ("receipt", "m1", None),
        ("retry", "2:t1/m1", None),
        ("retry", "m1", None),
        ("correlation", "2:t1/corr", "m1"),
        ("correlation", "corr", "m1"),
        ("receipt_age", "2:t1/m1", None),
        ("receipt_age", "m1", None),
    ]


def test_an_old_receipt_deduplicates_and_is_moved_under_its_receipt_id() -> None:
    memory = old_state()
    topology = worker(memory)
    assert feed(topology, "t1") == [("replies", REPLY.value)]  # the stored reply, no effect
    assert keys(memory) == NEW_KEYS  # moved: the old keys gone
    assert memory.get(0, b"R2:t1/m1") == cmd.encode_receipt(receipt())
    assert feed(topology, "t1", 1) == [("replies", REPLY.value)]  # found under the new key
    entity = cmd.CommandStore(memory).entity(0, ENTITY)
    assert entity.version == 1 and entity.state == {"available": 3, "reserved": {}}


def test_an_old_receipt_does_not_hide_another_tenants_command() -> None:
    memory = old_state()
    topology = worker(memory)
    sent = feed(topology, "t2")  # t2's m1: its own command, applied
    assert [t for t, _ in sent] == [SETTINGS.commands.events_topic, "replies"]
    assert REPLY.value not in [v for _, v in sent]  # t1's reply goes to t1 only
    assert orjson.loads(sent[1][1])["data"]["available"] == 3  # t2's own stock
    assert b"rm1" in keys(memory)  # t1's receipt stays until one of t1's reads
    assert feed(topology, "t1", 1) == [("replies", REPLY.value)]
    assert keys(memory, (b"r", b"w", b"c", b"t")) == set()
    assert keys(memory, (b"R",)) == {b"R2:t1/m1", b"R2:t2/m1"}


def test_an_old_retry_is_resumed_and_moved() -> None:
    memory = old_state("retry")
    assert keys(memory) == {b"wm1", b"rm1", b"ccorr\x00m1"}
    topology = worker(memory)  # the assignment lists the old retry index
    assert keys(memory, (b"r", b"w", b"c", b"t")) == set()
    assert keys(memory, (b"W",)) == {b"W2:t1/m1"}
    topology.on_tick({}, 100.0)
    sent = [t for t, _, _, _ in topology.take().records]
    assert sent == [SETTINGS.commands.events_topic, "replies"]
    done = cmd.CommandStore(memory).receipt(0, "2:t1/m1")
    assert done is not None and done.status == "COMPLETED" and done.attempts == 2
    assert keys(memory, (b"W", b"w")) == set()


def test_old_receipts_past_retention_are_forgotten() -> None:
    memory = old_state()
    write_old_layout(memory, receipt(message_id="m2", updated_at=3.0 + MAX_AGE))
    topology = worker(memory)
    topology.on_tick({}, 2.0 + MAX_AGE + 1)  # m1 is past it, m2 is not
    assert keys(memory) == {b"rm2", b"ccorr\x00m2", b"t" + struct.pack(">d", 3.0 + MAX_AGE) + b"m2"}
    topology.on_tick({}, 4.0 + 2 * MAX_AGE)
    assert keys(memory) == set()


class Recording(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[list[Change]] = []

    def write(self, partition: int, changes: Sequence[Change]) -> None:
        self.writes.append(list(changes))
        super().write(partition, changes)


@pytest.mark.parametrize(
    ("kind", "move_families"),
    [
        ("dispatched", b"CTRrct"),  # new index entries, the receipt, the old ones' deletion
        ("outbox", b"CRrc"),
        ("retry", b"WCRrcw"),
    ],
)
def test_a_move_cut_anywhere_still_deduplicates_and_leaves_nothing_behind(
    kind: str, move_families: bytes
) -> None:
    recording = Recording()
    for k, v in old_state(kind).items(0):
        recording.put(0, k, v)
    assert cmd.CommandStore(recording).receipt(0, "2:t1/m1") is not None
    (move,) = recording.writes  # the move is one write
    assert bytes(key[0] for key, _, _ in move) == move_families
    for cut in range(len(move) + 1):
        memory = old_state(kind)
        memory.write(0, move[:cut])  # what a crash left of the move
        topology = worker(memory)
        if kind == "outbox":  # the assignment dispatched the outbox again
            assert len(topology.outbox.records) == 2, cut
        if kind == "retry":  # the assignment armed the retry, made now, once
            topology.on_tick({}, 100.0)
            assert len(topology.outbox.records) == 2, cut
        topology.confirm(topology.take(), now=100.0)
        reply = feed(topology, "t1")  # a redelivery: its reply again, no effect
        assert [(t, orjson.loads(v)["data"]["available"]) for t, v in reply] == [("replies", 3)], (
            cut
        )
        entity = cmd.CommandStore(memory).entity(0, ENTITY)
        assert entity.version == 1 and entity.outbox == (), cut
        topology.on_tick({}, 200.0 + MAX_AGE)  # past everyone's retention
        assert keys(memory) == set(), cut


def test_inspect_finds_receipts_of_both_layouts() -> None:
    memory = old_state()  # t1's m1 in the old layout
    topology = CommandTopology(SETTINGS, cmd.CommandStore(memory), registry)
    key, value = command("t2")
    topology.on_record(0, 0, key, value, [], 1.0, 100.0)  # t2's m1 in the new one
    table = dict(memory.items(0))
    assert b"rm1" in table and b"R2:t2/m1" in table

    def found(**query: str) -> list[tuple[str, str]]:
        return [(c["entity"]["id"], c["command"]["status"]) for c in lookup(table, **query)]

    both = [(ENTITY, "COMPLETED"), ("2:t2/sku-1", "COMPLETED")]
    assert found(message_id="m1") == both
    assert found(correlation_id="corr") == both
    assert found(message_id="m1", tenant="t1") == both[:1]
    assert found(correlation_id="corr", tenant="t2") == both[1:]
    assert found(message_id="m2") == [] and found(correlation_id="other") == []
    table[b"R2:t1/m1"] = cmd.encode_receipt(receipt(status="FAILED"))  # a cut move: both
    assert found(message_id="m1", tenant="t1") == [(ENTITY, "FAILED")]
    assert found(message_id="m1") == [(ENTITY, "FAILED"), both[1]]
