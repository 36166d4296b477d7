"""The command worker as a read_committed consumer sees it: two tenants send commands with the same messageIds, each record
delivered one to three times (copies close together, so that a copy is
often read before its command's dispatch is committed), and the worker is
killed (``kill -9``) mid-stream and started again.

* On a broker with transactions, under exactly_once: every event is on its
  topic once, read read_committed (before the fix a copy read before the
  take dispatched the stored events again inside the next transaction); a
  reply comes again only for a copy that asks after it was answered.
* On every broker (the embedded one under at_least_once, where identical
  repeats are allowed): the two tenants' outputs have distinct messageIds,
  and every command has its event and its reply (before the fix both
  tenants' events of ``m7`` were ``m7:1``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import orjson
import pytest

from seqkeeper.demo import publish
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

pytestmark = pytest.mark.integration

TENANTS = ("t1", "t2")
SKUS = tuple(f"sku-{i}" for i in range(4))
COMMANDS = 60  # per tenant


def command(tenant: str, mid: str, sku: str, quantity: int, replies: str) -> bytes:
    return orjson.dumps(
        {
            "messageId": mid,
            "commandType": "AddStock",
            "schemaVersion": 1,
            "correlationId": f"corr-{tenant}-{mid}",
            "partitionKey": sku,
            "tenantId": tenant,
            "replyTo": replies,
            "payload": {"quantity": quantity},
        }
    )


def deliveries(replies: str) -> list[tuple[bytes | None, bytes | None]]:
    """Each tenant's ``m0`` … ``m59``, each one to three times, shuffled
    within windows of 12 records (copies near each other)."""
    rng = random.Random(45)
    records: list[tuple[bytes | None, bytes | None]] = []
    for n in range(COMMANDS):
        for tenant in TENANTS:
            sku = SKUS[n % len(SKUS)]
            value = command(tenant, f"m{n}", sku, n % 5 + 1, replies)
            records += [(sku.encode(), value)] * rng.randint(1, 3)
    windows = [records[i : i + 12] for i in range(0, len(records), 12)]
    for window in windows:
        rng.shuffle(window)
    return [r for window in windows for r in window]


def test_each_event_once_and_tenants_ids_apart_across_copies_and_a_kill(
    broker: Broker, make_settings, names, tmp_path
) -> None:
    exactly_once = not broker.is_tansu  # (the embedded broker has no transactions)
    guarantee = "exactly_once" if exactly_once else "at_least_once"
    isolation = "read_committed" if exactly_once else "read_uncommitted"
    settings = make_settings(topology="commands", partitions=2, processing_guarantee=guarantee)
    bootstrap, topic = settings.broker.bootstrap, settings.commands.command_topic
    replies = f"{names['app_id']}.replies"
    asyncio.run(create_topics(bootstrap, [*settings.topics(), replies], 2))
    records = deliveries(replies)
    # last on each key: a command whose reply says every record before it was read
    ends = [(sku.encode(), command("t1", f"end-{sku}", sku, 1, replies)) for sku in SKUS]
    half = len(records) // 2

    def read(name: str) -> list[dict[str, object]]:
        got = asyncio.run(read_topic(bootstrap, name, isolation=isolation))
        return [orjson.loads(r.value) for r in got if r.value is not None]

    def wait(what: str, done, worker: WorkerProcess) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 90
        while not done():
            worker.check_alive()
            assert time.monotonic() < deadline, f"{what}; {worker.log()[-3000:]}"
            time.sleep(0.5)

    asyncio.run(publish(bootstrap, topic, records[:half]))
    first = WorkerProcess(settings, tmp_path / "first.log").start()
    try:
        wait("replies before the kill", lambda: len(read(replies)) >= 10, first)
    finally:
        first.kill()  # mid-stream: an open transaction, a batch in flight
    asyncio.run(publish(bootstrap, topic, records[half:] + ends))
    second = WorkerProcess(settings, tmp_path / "second.log").start()
    try:
        ended = {f"end-{sku}" for sku in SKUS}
        wait(
            "every key read to its end",
            lambda: ended <= {r["causationId"] for r in read(replies)},
            second,
        )
        time.sleep(1.0)  # (a repeat committed after the last reply would show)
        events, answers = read(settings.commands.events_topic), read(replies)
    finally:
        assert second.stop() == 0
    expected = {(t, f"m{n}") for t in TENANTS for n in range(COMMANDS)}
    expected |= {("t1", f"end-{sku}") for sku in SKUS}
    event_ids = Counter(str(e["messageId"]) for e in events)
    reply_ids = Counter(str(r["messageId"]) for r in answers)
    # point 4: one id per (tenant, messageId), whatever the other tenant sends
    assert {(e["tenantId"], e["causationId"]) for e in events} == expected
    assert len(event_ids) == len(reply_ids) == len(expected)
    assert "2:t1/m7:1" in event_ids and "2:t2/m7:1" in event_ids
    assert all(
        len({orjson.dumps(r) for r in answers if r["messageId"] == m}) == 1 for m in reply_ids
    )
    if exactly_once:  # point 0: each event once, as read_committed reads it
        assert [m for m, n in event_ids.items() if n > 1] == []
