"""A crash between a command's entity write and its receipt write, on a real
broker, under at_least_once.

No fault hook stops a worker between two writes of one command, so the test
puts on the changelog what such a crash leaves there: the prefix of the
command's writes up to its entity record (state, version 1 and the outbox),
made by the command topology itself, and no receipt. The command is still
on the input (its offset was never committed). A worker starts on it: the
assignment sweep dispatches the outbox and confirms it, the command is read
again, and once everything is confirmed the client sends a copy of it (a
retry after its reply timed out). The command must stay applied once: the
entity at version 1, every event and reply byte-identical to the stored
ones, the copy answered with the stored reply, a receipt COMPLETED and
dispatched. (Before the fix the confirmation dropped the outbox without a
receipt, and a copy read after it was applied a second time; a copy read
before it got a receipt without the reply, so the client's retry got no
answer.)

The same cut for a quiet command (a handler that emits no event, a command
without ``replyTo``): its entity record keeps an outbox entry holding
nothing, the one trace of the command until its receipt is written. (Before
the fix there was no entry: the copy read again was applied a second time,
version 2.)
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.inspect import changelog_topic, load, lookup
from seqkeeper.plugins import load_registry
from seqkeeper.state.command_records import CommandStore, decode_entity
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.topologies.command_worker import CommandTopology
from seqkeeper.worker import WorkerProcess
from tests.topologies.test_crash_consistency import LoggedStore

pytestmark = pytest.mark.integration


def test_a_command_cut_between_entity_and_receipt_is_applied_once(
    make_settings, names, tmp_path
) -> None:
    from aiokafka import AIOKafkaProducer

    tag = names["app_id"]
    settings = make_settings(
        topology="commands", partitions=1, processing_guarantee="at_least_once"
    )
    bootstrap, replies = settings.broker.bootstrap, f"{tag}.replies"
    changelog = changelog_topic(settings)
    asyncio.run(create_topics(bootstrap, [*settings.topics(), replies, changelog], 1))
    command = orjson.dumps(
        {
            "messageId": "m1",
            "commandType": "AddStock",
            "schemaVersion": 1,
            "correlationId": "corr-m1",
            "partitionKey": "sku-1",
            "tenantId": "t1",
            "replyTo": replies,
            "payload": {"quantity": 3},
        }
    )
    # What the worker writes for this command, in order; a crash kept the
    # writes up to the entity record.
    writes: list[tuple[int, bytes, bytes | None]] = []
    registry = load_registry(settings.commands.handlers)
    first = CommandTopology(settings, CommandStore(LoggedStore(writes)), registry)
    first.on_assigned({0})
    first.on_record(0, 0, b"sku-1", command, [], None, time.time())
    keys = [key[:1] for _, key, _ in writes]
    assert keys[:3] == [b"o", b"e", b"R"], keys  # (the write order this test is about)
    kept = writes[: keys.index(b"e") + 1]
    stored = decode_entity(kept[-1][2]).pending("m1")
    assert stored is not None
    stored_reply = next(m.value for m in stored if m.message_id == "2:t1/m1:reply")
    stored_event = next(m.value for m in stored if m.message_id == "2:t1/m1:1")

    async def produce(records: list[tuple[str, bytes, bytes | None]]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for topic, key, value in records:
                await producer.send_and_wait(topic, value, key=key, partition=0)
        finally:
            await producer.stop()

    asyncio.run(produce([(changelog, key, value) for _, key, value in kept]))
    asyncio.run(produce([(settings.commands.command_topic, b"sku-1", command)]))

    def confirmed() -> bool:
        table = asyncio.run(load(settings))
        entity = decode_entity(table.get(b"e2:t1/sku-1"))
        found = lookup(table, message_id="m1")
        return entity.outbox == () and bool(found) and found[0]["command"]["dispatched"]

    def wait_for(what: str, done, worker: WorkerProcess) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 120
        while not done():
            worker.check_alive()
            assert time.monotonic() < deadline, f"{what}; {worker.log()[-3000:]}"
            time.sleep(0.5)

    def read(topic: str) -> list[bytes]:
        return [r.value for r in asyncio.run(read_topic(bootstrap, topic)) if r.value is not None]

    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        # the sweep's dispatch and the command read again: two replies
        wait_for("two replies", lambda: len(read(replies)) >= 2, worker)
        wait_for("the outbox confirmed, with a receipt", confirmed, worker)
        asyncio.run(produce([(settings.commands.command_topic, b"sku-1", command)]))
        wait_for("the client's copy answered", lambda: len(read(replies)) >= 3, worker)
        time.sleep(1.0)  # a later reply or event would be a second effect: give one time
        answers, events = read(replies), read(settings.commands.events_topic)
        table = asyncio.run(load(settings))
    finally:
        assert worker.stop() == 0
    assert answers == [stored_reply] * 3
    assert events and set(events) == {stored_event}
    entity = decode_entity(table.get(b"e2:t1/sku-1"))
    assert (entity.version, entity.state, entity.outbox) == (
        1,
        {"available": 3, "reserved": {}},
        (),
    )
    (found,) = lookup(table, message_id="m1")
    receipt = found["command"]
    assert (receipt["status"], receipt["dispatched"]) == ("COMPLETED", True)
    assert receipt["reply"] == stored_reply.decode()
    assert [c["command"]["message_id"] for c in lookup(table, correlation_id="corr-m1")] == ["m1"]


QUIET = """
from seqkeeper import Registry

registry = Registry()


@registry.register("Touch")
def touch(state, command):
    return {"touches": (state or {}).get("touches", 0) + 1}, []  # no events
"""


def touch(mid: str, sku: str, reply_to: str | None) -> bytes:
    doc: dict[str, Any] = {
        "messageId": mid,
        "commandType": "Touch",
        "schemaVersion": 1,
        "correlationId": f"corr-{mid}",
        "partitionKey": sku,
        "tenantId": "t1",
        "payload": {},
    }
    if reply_to is not None:
        doc["replyTo"] = reply_to
    return orjson.dumps(doc)


def test_a_quiet_command_cut_between_entity_and_receipt_is_applied_once(
    make_settings, names, tmp_path: Path
) -> None:
    from aiokafka import AIOKafkaProducer

    project = tmp_path / "project"
    project.mkdir()
    (project / "quiet.py").write_text(QUIET)
    settings = make_settings(
        topology="commands",
        partitions=1,
        handlers="quiet:registry",
        processing_guarantee="at_least_once",
    )
    bootstrap, replies = settings.broker.bootstrap, f"{names['app_id']}.replies"
    topic, changelog = settings.commands.command_topic, changelog_topic(settings)
    asyncio.run(create_topics(bootstrap, [*settings.topics(), replies, changelog], 1))
    quiet = touch("m1", "sku-1", None)  # no replyTo, no events: nothing to send
    # What the worker writes for it, in order; a crash kept the writes up
    # to the entity record (version 1), not the receipt after it.
    code: dict[str, Any] = {}
    exec(QUIET, code)  # (the worker's handlers, in this process)
    writes: list[tuple[int, bytes, bytes | None]] = []
    first = CommandTopology(settings, CommandStore(LoggedStore(writes)), code["registry"])
    first.on_assigned({0})
    first.on_record(0, 0, b"sku-1", quiet, [], None, time.time())
    keys = [key[:1] for _, key, _ in writes]
    assert b"R" in keys[keys.index(b"e") :], keys  # (the receipt after the entity)
    kept = writes[: keys.index(b"e") + 1]
    assert decode_entity(kept[-1][2]).version == 1

    async def produce(records: list[tuple[str, bytes, bytes | None]]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for name, key, value in records:
                await producer.send_and_wait(name, value, key=key, partition=0)
        finally:
            await producer.stop()

    def replied(mid: str) -> bool:
        found = asyncio.run(read_topic(bootstrap, replies))
        return any(orjson.loads(r.value)["causationId"] == mid for r in found if r.value)

    def confirmed() -> bool:
        table = asyncio.run(load(settings))
        entity = decode_entity(table.get(b"e2:t1/sku-1"))
        found = lookup(table, message_id="m1")
        return entity.outbox == () and bool(found) and found[0]["command"]["dispatched"]

    def wait_for(what: str, done, worker: WorkerProcess) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 120
        while not done():
            worker.check_alive()
            assert time.monotonic() < deadline, f"{what}; {worker.log()[-3000:]}"
            time.sleep(0.5)

    asyncio.run(produce([(changelog, key, value) for _, key, value in kept]))
    # the command (its offset never committed), then a marker that answers
    asyncio.run(
        produce([(topic, b"sku-1", quiet), (topic, b"sku-2", touch("s1", "sku-2", replies))])
    )
    worker = WorkerProcess(settings, tmp_path / "worker.log", cwd=project).start()
    try:
        wait_for("the marker's reply", lambda: replied("s1"), worker)
        wait_for("the entry confirmed, with a receipt", confirmed, worker)
        # a copy redelivered, then a marker: one partition, read in order
        asyncio.run(
            produce([(topic, b"sku-1", quiet), (topic, b"sku-2", touch("s2", "sku-2", replies))])
        )
        wait_for("the second marker's reply", lambda: replied("s2"), worker)
        table = asyncio.run(load(settings))
        events = asyncio.run(read_topic(bootstrap, settings.commands.events_topic))
    finally:
        assert worker.stop() == 0
    entity = decode_entity(table.get(b"e2:t1/sku-1"))
    assert (entity.version, entity.state, entity.outbox) == (1, {"touches": 1}, ())
    (found,) = lookup(table, message_id="m1")
    receipt = found["command"]
    assert (receipt["status"], receipt["dispatched"], receipt["reply"]) == ("COMPLETED", True, None)
    assert events == []  # nothing to send, nothing sent
    assert receipt["command_type"] == "Touch"  # (the copy's, not guessed from an empty entry)
    assert [c["command"]["message_id"] for c in lookup(table, correlation_id="corr-m1")] == ["m1"]
