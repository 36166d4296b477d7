"""A real command worker and a real ordered worker, on a real broker, fed a
seeded batch of hostile records (a few hundred, the same every run) and then
good ones: both keep running, every hostile record is in its dead-letter
topic once, as it came, with the documented reason, the good ones come out
(headers, null values included, as they came), and no topic but the
expected ones received anything."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from seqkeeper.processors.dead_letter import readable
from seqkeeper.security import kafka_options
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics, end_offsets_of, read_topic
from seqkeeper.worker import WorkerProcess
from tests.hostile.hostile import (
    Record,
    command_reasons,
    event_reasons,
    hostile_commands,
    hostile_events,
    hostile_headers,
    rng,
)

pytestmark = pytest.mark.integration

SEED = 44
HOSTILE = 250  # per worker
GOOD_KEYS, GOOD_SEQS = 4, 5
INTERNAL = ("__consumer_offsets", "__transaction_state")


async def produce(bootstrap: str, topic: str, records: list[Record]) -> None:
    """In order, to partition 0 (so a record's offset is its index)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kafka_options(), acks="all")
    await producer.start()
    try:
        sent = [
            await producer.send(topic, value, key=key, headers=headers, partition=0)
            for key, value, headers in records
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def produce_raw_header(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    """One record whose header name is not UTF-8 (:mod:`tests.hostile.raw_header`)."""
    script = Path(__file__).with_name("raw_header.py")
    env = {**os.environ, "AIOKAFKA_NO_EXTENSIONS": "1"}
    args = [sys.executable, str(script), bootstrap, topic, key.decode(), value.decode()]
    subprocess.run(args, env=env, check=True, timeout=60)


#: How a header name that is not UTF-8 reaches the outputs: its bytes escaped.
ESCAPED = "\\xff\\xfe"


async def topic_ends(bootstrap: str) -> dict[str, int]:
    """Every topic of the cluster and the sum of its end offsets."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
    await admin.start()
    try:
        names = sorted(await admin.list_topics())
    finally:
        await admin.close()
    ends = await end_offsets_of(bootstrap, names)
    total: Counter[str] = Counter({n: 0 for n in names})
    for tp, end in ends.items():
        total[tp.topic] += end
    return dict(total)


def read(settings: Settings, topic: str) -> list[Any]:
    return asyncio.run(read_topic(settings.broker.bootstrap, topic))


def wait_for(what: str, check: Any, workers: list[WorkerProcess], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for w in workers:
            w.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:g} s")
        time.sleep(0.5)


def test_hostile_records_are_dead_lettered_and_good_ones_come_out(
    make_settings: Any, names: dict[str, str], tmp_path: Path
) -> None:
    tag = names["app_id"]
    replies = f"{tag}.replies"
    ordered = make_settings(app_id=f"{tag}-o", data_dir=tmp_path / "o")
    commands = make_settings(topology="commands", app_id=f"{tag}-c", data_dir=tmp_path / "c")
    bootstrap = ordered.broker.bootstrap
    asyncio.run(create_topics(bootstrap, [*ordered.topics(), *commands.topics(), replies], 2))
    workers = [
        WorkerProcess(ordered, tmp_path / "ordered.log").start(),
        WorkerProcess(commands, tmp_path / "commands.log").start(),
    ]
    try:
        for w in workers:
            w.wait_ready()
        before = asyncio.run(topic_ends(bootstrap))

        r = rng(SEED)
        events = hostile_events(r, HOSTILE)
        good_events: list[Record] = [
            (b"g%d" % k, orjson.dumps({"messageId": f"g{k}-{s}", "seq": s, "type": "t"}), hostile_headers(r))
            for s in range(1, GOOD_SEQS + 1)
            for k in range(GOOD_KEYS)
        ]  # fmt: skip
        labelled = hostile_commands(r, HOSTILE, replies)
        good_commands: list[Record] = [
            (
                b"sku-g%d" % (n % 3),
                orjson.dumps({
                    "messageId": f"g{n}", "commandType": "AddStock", "schemaVersion": 1,
                    "correlationId": f"gc{n}", "partitionKey": f"sku-g{n % 3}", "tenantId": "t1",
                    "replyTo": replies, "payload": {"quantity": 2},
                }),
                [("tenant", b"t1"), *hostile_headers(r)],
            )
            for n in range(20)
        ]  # fmt: skip
        good_commands = [
            (k, v, [(n, h) for n, h in hs if n != "tenant" or h == b"t1"])
            for k, v, hs in good_commands
        ]
        # first the hostile records, then one with a header name that is not
        # UTF-8 (a good one: it must go through), then the good ones
        raw_event = (
            b"g0",
            orjson.dumps({"messageId": "g0-0", "seq": 1, "type": "t"}),
            [(ESCAPED, b"v")],
        )
        good_events = [raw_event] + [  # (g0's others one seq on)
            (
                k,
                orjson.dumps({**orjson.loads(v), "seq": orjson.loads(v)["seq"] + 1})
                if k == b"g0"
                else v,
                h,
            )
            for k, v, h in good_events
        ]
        raw_command = (
            b"sku-g0",
            orjson.dumps(
                {**orjson.loads(good_commands[0][1]), "messageId": "graw", "correlationId": "gcraw"}
            ),
        )
        asyncio.run(produce(bootstrap, ordered.ordered.input_topic, events))
        produce_raw_header(bootstrap, ordered.ordered.input_topic, *raw_event[:2])
        asyncio.run(produce(bootstrap, ordered.ordered.input_topic, good_events[1:]))
        asyncio.run(
            produce(bootstrap, commands.commands.command_topic, [rec for rec, _ in labelled])
        )
        produce_raw_header(bootstrap, commands.commands.command_topic, *raw_command)
        asyncio.run(produce(bootstrap, commands.commands.command_topic, good_commands))
        good_commands.append((*raw_command, [(ESCAPED, b"v")]))

        dlq, cdlq = ordered.ordered.dlq_topic, commands.commands.command_dlq_topic
        wait_for(
            "the ordered output and the replies",
            lambda: (
                len(read(ordered, ordered.ordered.ordered_topic)) >= len(good_events)
                and len(read(ordered, dlq)) >= len(events)
                and len(read(commands, cdlq)) >= len(labelled)
                and sum(1 for x in read(commands, replies) if x.key and x.key.startswith(b"sku-g"))
                >= len(good_commands)
            ),
            workers,
        )
        time.sleep(1.0)  # anything more would come now
        assert all(w.running() for w in workers)

        # every hostile event dead-lettered once, as it came, with a documented reason
        letters = read(ordered, dlq)
        assert len(letters) == len(events)
        for letter in letters:
            offset = int(readable(letter.headers)["kafka_dlt-original-offset"])
            key, value, headers = events[offset]
            assert (letter.key, letter.value) == (key, value)
            assert dict(letter.headers)["seqkeeper.reason"].decode() in event_reasons()
            assert list(letter.headers)[: len(headers)] == headers  # its own headers first
        assert sorted(
            int(readable(x.headers)["kafka_dlt-original-offset"]) for x in letters
        ) == list(range(len(events)))
        # the good ones in order per key, with their headers as they came
        out = read(ordered, ordered.ordered.ordered_topic)
        got = {(x.key, orjson.loads(x.value)["seq"]): list(x.headers) for x in out}
        assert len(out) == len(good_events) == len(got)
        for key, value, headers in good_events:
            assert got[(key, orjson.loads(value)["seq"])] == headers
        for k in range(GOOD_KEYS):
            seqs = [orjson.loads(x.value)["seq"] for x in out if x.key == b"g%d" % k]
            assert seqs == list(range(1, GOOD_SEQS + 1 + (k == 0)))

        # every hostile command dead-lettered once with the reason it must get
        letters = read(commands, cdlq)
        assert len(letters) == len(labelled)
        by_offset = {int(readable(x.headers)["kafka_dlt-original-offset"]): x for x in letters}
        assert sorted(by_offset) == list(range(len(labelled)))
        for offset, ((key, value, _), reason) in enumerate(labelled):
            letter = by_offset[offset]
            assert (letter.key, letter.value) == (key, value)
            assert dict(letter.headers)["seqkeeper.reason"].decode() == reason, (offset, value)
            assert reason in command_reasons()
        # the good commands applied and answered
        answers = [orjson.loads(x.value) for x in read(commands, replies)]
        good = {a["correlationId"]: a for a in answers if a["correlationId"].startswith("gc")}
        assert sorted(good) == sorted([*(f"gc{n}" for n in range(20)), "gcraw"])
        assert all(a["success"] for a in good.values())
        assert all(not a["success"] for a in answers if not a["correlationId"].startswith("gc"))

        # nothing written anywhere else, no topic created
        after = asyncio.run(topic_ends(bootstrap))
        assert set(after) == set(before)
        grown = {t for t in after if after[t] > before[t]}
        expected = {
            ordered.ordered.input_topic, ordered.ordered.ordered_topic, ordered.ordered.deduped_topic,
            dlq, commands.commands.command_topic, commands.commands.events_topic, cdlq, replies,
        }  # fmt: skip
        unexpected = {
            t for t in grown - expected if t not in INTERNAL and not t.startswith(f"{tag}-")
        }
        assert not unexpected, unexpected
        assert {t for t in grown if t.startswith(f"{tag}-")} <= {
            t for t in after if t.endswith("-changelog")
        }, grown
    finally:
        for w in workers:
            assert w.stop() == 0, w.log()[-3000:]
