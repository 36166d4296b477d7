"""The command worker against a real broker: a duplicate storm with poison
records, a kill -9 in the middle, a restart — every command answered, each
applied once, stock equal to the reference and never negative."""

from __future__ import annotations

import asyncio
import struct
import time

import orjson
import pytest
from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.demo import publish
from seqkeeper.inspect import load, lookup
from seqkeeper.topics import create_topics
from seqkeeper.verification.command_storm import storm, wait_until_commands_verified
from seqkeeper.worker import WorkerProcess

pytestmark = pytest.mark.integration


def test_duplicate_storm_with_a_crash(make_settings, names, tmp_path) -> None:
    tag = names["app_id"]
    settings = make_settings(
        topology="commands",
        partitions=3,
    )
    replies = f"{tag}.replies"
    asyncio.run(create_topics(settings.broker.bootstrap, [*settings.topics(), replies], 3))
    work = storm(commands=400, reply_to=replies, seed=3)
    half = len(work.records) // 2
    asyncio.run(
        publish(settings.broker.bootstrap, settings.commands.command_topic, work.records[:half])
    )
    first = WorkerProcess(settings, tmp_path / "first.log").start()
    first.wait_ready()
    time.sleep(1.5)
    first.kill()  # somewhere between persist, dispatch and mark
    asyncio.run(
        publish(settings.broker.bootstrap, settings.commands.command_topic, work.records[half:])
    )
    second = WorkerProcess(settings, tmp_path / "second.log").start()
    try:
        report = wait_until_commands_verified(settings, replies, 150, second)
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        assert report.commands == 401  # 400 + the poison with an unknown type
        assert report.copies > 2 * report.commands  # a storm indeed
        assert report.stock and all(s["available"] >= 0 for s in report.stock.values())
        # the Message Store: by messageId and by correlationId
        table = asyncio.run(load(settings))
        (one,) = lookup(table, message_id="cmd-3-1")
        assert one["command"]["status"] in ("COMPLETED", "FAILED", "EXPIRED")
        assert one["entity"]["id"] == one["command"]["entity"]
        shown = CliRunner().invoke(
            app,
            [
                "inspect",
                "-b",
                settings.broker.bootstrap,
                "--app-id",
                tag,
                "--message-id",
                "cmd-3-1",
            ],
        )
        assert shown.exit_code == 0, shown.output
        assert '"message_id": "cmd-3-1"' in shown.output and '"version"' in shown.output
        missing = CliRunner().invoke(
            app,
            ["inspect", "-b", settings.broker.bootstrap, "--app-id", tag, "--message-id", "nope"],
        )
        assert missing.exit_code == 1
        related = lookup(table, correlation_id="corr-1")
        assert {c["command"]["message_id"] for c in related} == {
            f"cmd-3-{n}" for n in range(400) if n % 50 == 1
        }
    finally:
        assert second.stop() == 0


def test_tenants_and_receipts_of_the_old_layout(make_settings, names, tmp_path) -> None:
    """On a real broker: t1's receipt of m1 is in the changelog under its old
    key (the layout without tenants). t1's copy of
    m1 is dropped (its stored reply sent again) and moves the receipt under
    its receipt id; t2's m1, which that receipt used to hide, is applied; a
    copy of t2's is dropped; inspect finds both."""
    from aiokafka import AIOKafkaProducer

    from seqkeeper.inspect import changelog_topic
    from seqkeeper.processors.command import Entity, Outgoing, Receipt
    from seqkeeper.state import command_records as cmd
    from seqkeeper.topics import read_topic

    tag = names["app_id"]
    settings = make_settings(
        topology="commands",
        partitions=1,
    )
    bootstrap, replies = settings.broker.bootstrap, f"{tag}.replies"
    changelog = changelog_topic(settings)
    asyncio.run(create_topics(bootstrap, [*settings.topics(), replies, changelog], 1))
    stored = Outgoing(replies, "sku-1", "m1:reply", b'{"messageId":"m1:reply","stored":true}')
    at = time.time()  # within the retention: the worker's timer keeps it
    receipt = Receipt(
        "m1", "COMPLETED", "2:t1/sku-1", "AddStock", "corr", at - 1, at, 1, None, stored, True
    )
    entity = Entity(1, {"available": 3, "reserved": {}})
    old_layout = [
        (b"e2:t1/sku-1", cmd.encode_entity(entity)),
        (b"rm1", cmd.encode_receipt(receipt)),
        (b"ccorr\x00m1", b""),
        (b"t" + struct.pack(">d", at) + b"m1", b""),
    ]

    def command(tenant: str, quantity: int) -> bytes:
        return orjson.dumps(
            {
                "messageId": "m1",
                "commandType": "AddStock",
                "schemaVersion": 1,
                "correlationId": "corr",
                "partitionKey": "sku-1",
                "tenantId": tenant,
                "replyTo": replies,
                "payload": {"quantity": quantity},
            }
        )

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for key, value in old_layout:
                await producer.send_and_wait(changelog, value, key=key, partition=0)
            for tenant, quantity in (("t1", 3), ("t2", 5), ("t2", 5)):
                await producer.send_and_wait(
                    settings.commands.command_topic,
                    command(tenant, quantity),
                    key=b"sku-1",
                    headers=[("tenant", tenant.encode())],
                )
        finally:
            await producer.stop()

    asyncio.run(produce())
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        deadline = time.monotonic() + 150
        while len(got := asyncio.run(read_topic(bootstrap, replies))) < 2:
            worker.check_alive()
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.5)
        time.sleep(1.5)  # a fourth reply would be a bug: give one time to show
        got = asyncio.run(read_topic(bootstrap, replies))
        events = asyncio.run(read_topic(bootstrap, settings.commands.events_topic))
    finally:
        assert worker.stop() == 0
    bodies = [orjson.loads(r.value) for r in got]
    assert got[0].value == stored.value  # t1's copy: its stored reply again
    # t2's, then its copy's (under exactly_once none when the copy was read
    # in the transaction that carries t2's reply: that one answers it)
    assert [b["data"]["available"] for b in bodies[1:]] in ([5], [5, 5])
    assert len({r.value for r in got[1:]}) == 1
    (event,) = {r.value for r in events}  # t2's (a copy before the confirm: again, identical)
    assert orjson.loads(event)["tenantId"] == "t2"
    table = asyncio.run(load(settings))
    assert b"rm1" not in table and b"ccorr\x00m1" not in table  # moved
    assert {b"R2:t1/m1", b"R2:t2/m1", b"C2:t1/corr\x00m1", b"C2:t2/corr\x00m1"} <= set(table)
    found = lookup(table, message_id="m1")
    assert [(c["entity"]["id"], c["entity"]["state"]["available"]) for c in found] == [
        ("2:t1/sku-1", 3),
        ("2:t2/sku-1", 5),
    ]
    assert [c["command"]["message_id"] for c in lookup(table, correlation_id="corr")] == ["m1"] * 2
    shown = CliRunner().invoke(
        app, ["inspect", "-b", bootstrap, "--app-id", tag, "--message-id", "m1"]
    )
    assert shown.exit_code == 0, shown.output
    assert shown.output.count('"message_id": "m1"') == 2


def test_inspect_without_a_command_worker_is_one_line(broker, names) -> None:
    """No changelog of this app id on the broker: one line naming the topic,
    exit 2, no traceback."""
    done = CliRunner().invoke(
        app,
        ["inspect", "-b", broker.bootstrap, "--app-id", names["app_id"], "--message-id", "m1"],
    )
    assert done.exit_code == 2, done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.output
    assert f"{names['app_id']}-commands" in lines[0] and "Traceback" not in done.output
