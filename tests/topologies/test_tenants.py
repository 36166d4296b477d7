"""Tenants on one partition of the command worker (in-memory store): the same
messageId from two tenants is two commands, each with its receipt, its
effect, its events and its reply; a repeat of either is a duplicate."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.processors.command import Command, Event, Registry, receipt_id
from seqkeeper.processors.envelope import output_id
from seqkeeper.processors.inventory import registry
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.topologies.command_worker import CommandTopology

SETTINGS = Settings.of(bootstrap="unused", topology="commands")
EVENTS = SETTINGS.commands.events_topic


def cmd(
    tenant: str, mid: str, quantity: int, sku: str = "sku-1", correlation: str = "corr"
) -> tuple[bytes, bytes]:
    return sku.encode(), orjson.dumps(
        {
            "messageId": mid,
            "commandType": "AddStock",
            "schemaVersion": 1,
            "correlationId": correlation,
            "partitionKey": sku,
            "tenantId": tenant,
            "replyTo": "replies",
            "payload": {"quantity": quantity},
        }
    )


def worker(memory: MemoryStore) -> CommandTopology:
    topology = CommandTopology(SETTINGS, CommandStore(memory), registry)
    topology.on_assigned({0})
    return topology


def out(topology: CommandTopology) -> list[tuple[str, dict[str, Any]]]:
    """(topic, body) of what the topology queued since the last take."""
    return [(t, orjson.loads(v)) for t, _, v, _ in topology.take().records]


def test_the_same_message_id_from_two_tenants_is_applied_for_each() -> None:
    memory = MemoryStore()
    topology = worker(memory)
    key, value = cmd("t1", "m1", 3)
    topology.on_record(0, 0, key, value, [], 1.0, 100.0)  # no header: the envelope's tenant
    key, value = cmd("t2", "m1", 5)
    topology.on_record(0, 1, key, value, [("tenant", b"t2")], 1.0, 100.0)
    first = topology.take()
    sent = [(t, orjson.loads(v)) for t, _, v, _ in first.records]
    events = [(b["tenantId"], b["messageId"], b["data"]) for t, b in sent if t == EVENTS]
    assert events == [  # (their ids name the tenant: distinct)
        ("t1", "2:t1/m1:1", {"sku": "sku-1", "quantity": 3}),
        ("t2", "2:t2/m1:1", {"sku": "sku-1", "quantity": 5}),
    ]
    replies = [b for t, b in sent if t == "replies"]
    assert [(r["messageId"], r["success"]) for r in replies] == [
        ("2:t1/m1:reply", True),
        ("2:t2/m1:reply", True),
    ]
    assert [r["data"]["available"] for r in replies] == [3, 5]
    store = CommandStore(memory)
    for tenant, available in (("t1", 3), ("t2", 5)):
        receipt = store.receipt(0, receipt_id(tenant, "m1"))
        assert receipt is not None and receipt.status == "COMPLETED"
        assert receipt.tenant == tenant and receipt.entity == f"2:{tenant}/sku-1"
        entity = store.entity(0, receipt.entity)
        assert entity.version == 1 and entity.state["available"] == available
    assert [k for k, _ in memory.items(0, b"R")] == [b"R2:t1/m1", b"R2:t2/m1"]
    assert [k for k, _ in memory.items(0, b"C")] == [b"C2:t1/corr\x00m1", b"C2:t2/corr\x00m1"]

    # repeats before the dispatch is confirmed: the same messages again, no effect
    key, value = cmd("t2", "m1", 5)
    topology.on_record(0, 2, key, value, [("tenant", b"t2")], 1.0, 101.0)
    assert out(topology) == sent[2:]  # t2's event and reply, as before
    topology.confirm(first, now=102.0)
    # repeats after it: dropped, each tenant's own stored reply sent again
    for offset, (tenant, quantity) in enumerate([("t1", 3), ("t2", 5), ("t1", 3)], 3):
        key, value = cmd(tenant, "m1", quantity)
        topology.on_record(0, offset, key, value, [], 1.0, 103.0)
    again = out(topology)
    assert [t for t, _ in again] == ["replies"] * 3
    assert [b["data"]["available"] for _, b in again] == [3, 5, 3]
    for tenant in ("t1", "t2"):
        entity = store.entity(0, f"2:{tenant}/sku-1")
        assert entity.version == 1 and entity.outbox == ()
        assert store.receipt(0, receipt_id(tenant, "m1")).dispatched  # type: ignore[union-attr]
    assert topology.metrics.registry.get_sample_value("seqkeeper_command_duplicates_total") == 4


def test_retries_of_two_tenants_with_one_message_id_are_apart() -> None:
    """A transient failure of t1's m1 and t2's m1: each is retried (after a
    restart too) and completed on its own."""
    flaky = Registry()
    calls: dict[str, int] = defaultdict(int)

    @flaky.register("AddStock")
    def handler(state: Any, command: Command) -> tuple[Any, list[Event]]:
        calls[command.tenant_id] += 1
        if calls[command.tenant_id] == 1:
            raise ConnectionError("away")
        return command.payload["quantity"], []

    memory = MemoryStore()
    topology = CommandTopology(SETTINGS, CommandStore(memory), flaky)
    topology.on_assigned({0})
    for offset, (tenant, quantity) in enumerate([("t1", 3), ("t2", 5)]):
        key, value = cmd(tenant, "m1", quantity)
        topology.on_record(0, offset, key, value, [], 1.0, 100.0)
    assert [k for k, _ in memory.items(0, b"W")] == [b"W2:t1/m1", b"W2:t2/m1"]
    restarted = CommandTopology(SETTINGS, CommandStore(memory), flaky)
    restarted.on_assigned({0})
    restarted.on_tick({}, 200.0)
    store = CommandStore(memory)
    assert calls == {"t1": 2, "t2": 2}
    assert [store.entity(0, f"2:{t}/sku-1").state for t in ("t1", "t2")] == [3, 5]
    assert list(memory.items(0, b"W")) == []


@st.composite
def deliveries(draw: st.DrawFn) -> list[tuple[str, str, int]]:
    """Commands (tenant, messageId, quantity) of three tenants that number
    their messageIds alike, each delivered 1-3 times, shuffled."""
    commands = [
        (tenant, f"m{n}", draw(st.integers(1, 9)))
        for tenant in ("t1", "t2", "t3")
        for n in range(draw(st.integers(0, 4)))
    ]
    copies = [c for c in commands for _ in range(draw(st.integers(1, 3)))]
    return draw(st.permutations(copies))


@settings(max_examples=60, deadline=None)
@given(deliveries(), st.lists(st.booleans(), min_size=1, max_size=8))
def test_each_tenant_and_message_id_is_applied_once(
    delivery: list[tuple[str, str, int]], confirms: list[bool]
) -> None:
    memory = MemoryStore()
    topology = worker(memory)
    replies: dict[tuple[str, str], set[bytes]] = defaultdict(set)  # by (tenant, messageId)

    def settle() -> None:
        batch = topology.take()
        for topic, _, v, _ in batch.records:
            if topic == "replies":
                body = orjson.loads(v)
                replies[(body["correlationId"], body["messageId"])].add(v)
        topology.confirm(batch, now=100.0)

    for offset, (tenant, mid, quantity) in enumerate(delivery):
        key, value = cmd(tenant, mid, quantity, correlation=tenant)
        topology.on_record(0, offset, key, value, [("tenant", tenant.encode())], 1.0, 100.0)
        if confirms[offset % len(confirms)]:
            settle()
    settle()
    store = CommandStore(memory)
    distinct = set(delivery)
    # every command answered; every copy of a reply byte-identical
    assert set(replies) == {(t, output_id(t, m, "reply")) for t, m, _ in distinct}
    assert all(len(copies) == 1 for copies in replies.values())
    for tenant in ("t1", "t2", "t3"):
        mine = {c for c in distinct if c[0] == tenant}
        entity = store.entity(0, f"2:{tenant}/sku-1")
        assert entity.version == len(mine)  # each of its commands applied once
        expected = sum(q for _, _, q in mine)
        assert (entity.state or {"available": 0})["available"] == expected
        for _, mid, _ in mine:
            receipt = store.receipt(0, receipt_id(tenant, mid))
            assert receipt is not None and receipt.status == "COMPLETED"
            assert receipt.tenant == tenant
    assert len(list(memory.items(0, b"R"))) == len(distinct)
