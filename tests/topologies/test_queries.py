"""The state queries' answers (topologies/state_queries.py), read from
topologies fed on an in-memory store (no broker): what the worker serves
at /state/<key>, /entities/<tenant>/<id> and /commands/<messageId>."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from seqkeeper import Message
from seqkeeper.processors.inventory import registry
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topologies import state_queries as queries
from seqkeeper.topologies.command_worker import CommandTopology
from seqkeeper.topologies.ordered import OrderedTopology


def event(seq: int, mid: str | None = None) -> bytes:
    return orjson.dumps({"messageId": mid or f"m{seq}", "seq": seq, "type": "t", "data": seq})


def ordered(processor: Any = None) -> OrderedTopology:
    settings = Settings.of(bootstrap="unused", gap_timeout=5.0, max_buffered_per_key=3)
    topology = OrderedTopology(settings, Stores(MemoryStore()), processor)
    topology.on_assigned({0})
    return topology


def test_a_key_state_says_what_waits_what_was_given_up_and_what_is_remembered() -> None:
    topology = ordered()
    for offset, seq in enumerate([1, 2, 2, 5, 4]):  # 2 twice; 3 missing
        topology.on_record(0, offset, b"k", event(seq), 100.0, wall=1.0)
    topology.confirm(topology.take())
    assert queries.key_state(topology, 0, "k") == {
        "key": "k",
        "partition": 0,
        "next_expected": 3,
        "confirmed": 3,
        "buffered": 2,  # 4 and 5 wait for 3
        "gap_since": 100.0,
        "skipped": [],
        "seen": {"count": 4, "head": 0, "tail": 4, "oldest": 100.0},
    }
    assert queries.key_state(topology, 0, "other") is None
    assert queries.key_state(topology, 1, "k") is None  # another partition's state


def test_a_gap_given_up_is_listed() -> None:
    topology = ordered()
    for offset, seq in enumerate([1, 3, 4, 5, 6]):  # the buffer (3) overflows: 2 is given up
        topology.on_record(0, offset, b"k", event(seq), 100.0, wall=1.0)
    found = queries.key_state(topology, 0, "k")
    assert found is not None
    assert found["skipped"] == [[2, 2]] and found["next_expected"] == 7
    assert found["buffered"] == 0 and "processor" not in found


def test_with_a_processor_its_cursor_and_state_are_shown() -> None:
    def total(state: Any, message: Message) -> tuple[Any, list[Any]]:
        return {"sum": (state or {"sum": 0})["sum"] + message.data}, []

    topology = ordered(total)
    assert queries.key_state(topology, 0, "k") is None
    for offset, seq in enumerate([1, 2, 4]):
        topology.on_record(0, offset, b"k", event(seq), 100.0, wall=1.0)
    assert topology.stage is not None
    asyncio.run(topology.stage.pending())  # (a sync fn runs in a worker thread)
    found = queries.key_state(topology, 0, "k")
    assert found is not None
    assert found["processor"] == {"cursor": 2, "state": {"sum": 3}}
    assert found["next_expected"] == 3 and found["buffered"] == 1


def command(mid: str, ctype: str, payload: object, sku: str = "sku-1", tenant: str = "t1") -> bytes:
    return orjson.dumps(
        {
            "messageId": mid,
            "commandType": ctype,
            "schemaVersion": 1,
            "correlationId": f"c-{mid}",
            "partitionKey": sku,
            "tenantId": tenant,
            "payload": payload,
        }
    )


def commands() -> CommandTopology:
    settings = Settings.of(bootstrap="unused", topology="commands")
    topology = CommandTopology(settings, CommandStore(MemoryStore()), registry)
    topology.on_assigned({0})
    return topology


def feed(topology: CommandTopology, *values: bytes) -> None:
    for offset, value in enumerate(values):
        key = orjson.loads(value)["partitionKey"].encode()
        topology.on_record(0, offset, key, value, [], 1.0, 100.0)


def test_an_entity_with_its_outbox_until_dispatched() -> None:
    topology = commands()
    feed(topology, command("a", "AddStock", {"quantity": 3}))
    found = queries.entity(topology, 0, "t1", "sku-1")
    assert found is not None
    assert (found["tenant"], found["id"], found["partition"], found["version"]) == (
        "t1",
        "sku-1",
        0,
        1,
    )
    assert found["state"] == {"available": 3, "reserved": {}}
    assert list(found["outbox"]) == ["a"]  # not dispatched yet
    topology.confirm(topology.take(), now=101.0)
    found = queries.entity(topology, 0, "t1", "sku-1")
    assert found is not None and found["outbox"] == {} and found["version"] == 1
    assert queries.entity(topology, 0, "t2", "sku-1") is None  # another tenant's
    assert queries.entity(topology, 0, "t1", "sku-2") is None


def test_a_command_by_messageid_gives_its_receipt_and_entity() -> None:
    topology = commands()
    feed(topology, command("a", "AddStock", {"quantity": 3}), command("b", "Nope", {}))
    topology.confirm(topology.take(), now=101.0)
    found = queries.command(topology, 0, "t1", "a")
    assert found is not None
    receipt = found["command"]
    assert (receipt["message_id"], receipt["status"], receipt["attempts"]) == ("a", "COMPLETED", 1)
    assert receipt["dispatched"] and receipt["received_at"] == 100.0
    assert found["entity"]["version"] == 1 and found["partition"] == 0
    failed = queries.command(topology, 0, "t1", "b")
    assert failed is not None and failed["command"]["status"] == "FAILED"
    assert failed["command"]["error"]
    assert queries.command(topology, 0, "t2", "a") is None  # receipts are per tenant


def test_command_queries_need_a_tenant_and_route_by_the_partition_key() -> None:
    (by_entity, by_message) = queries.COMMANDS
    assert by_entity.key({"tenant": "t1", "id": "sku-1"}) == b"sku-1"
    assert by_message.key({"tenant": "t1", "message_id": "a", "key": "sku-1"}) == b"sku-1"
    assert by_message.key({"tenant": "t1", "message_id": "a"}) is None  # searched
    try:
        by_message.key({"message_id": "a"})
    except ValueError as exc:
        assert "tenant" in str(exc)
    else:
        raise AssertionError("a receipt without a tenant")
