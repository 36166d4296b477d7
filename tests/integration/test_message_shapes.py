"""Message shapes of real services, through a worker on a real broker:

* the sequence key is a field of the value, the sequence a header and the
  messageId a nested field; the producer spread one key's messages over
  both input partitions (keyed by something else). The worker repartitions
  them by the key field through its internal topic, so each key's messages
  come out in sequence order, once; a record naming no key is
  dead-lettered with the input's topic, partition and offset;
* the input headers (a W3C ``traceparent``) reach ``events.ordered`` and
  ``events.deduped`` byte for byte;
* a user's value codec (not JSON) from a project outside the package.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.topics import create_topics
from seqkeeper.worker import WorkerProcess
from tests.topic_wait import wait_for

pytestmark = pytest.mark.integration

TRACE = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def produce(bootstrap: str, topic: str, records: list[tuple[int, Any, bytes, list]]) -> None:  # type: ignore[type-arg]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition, key, value, headers in records:
            await producer.send(topic, value, key=key, partition=partition, headers=headers)
        await producer.flush()
    finally:
        await producer.stop()


def test_a_key_field_repartitions_and_headers_pass_through(make_settings, tmp_path: Path) -> None:
    settings = make_settings(
        partitions=2, key_field="account.id", seq_header="x-seq", message_id_field="meta.id"
    )
    bootstrap = settings.broker.bootstrap
    asyncio.run(create_topics(bootstrap, settings.topics(), 2))
    rng = random.Random(3)
    messages = [(f"acct-{a}", seq) for a in range(3) for seq in range(1, 21)]
    records = []
    for account, seq in messages:
        value = orjson.dumps(
            {"account": {"id": account}, "meta": {"id": f"{account}/{seq}"}, "amount": seq}
        )
        headers = [("traceparent", TRACE), ("x-seq", str(seq).encode())]
        for _ in range(rng.choice([1, 1, 2])):  # some delivered twice
            # keyed by something else: one account's messages on both partitions
            records.append(
                (rng.randrange(2), f"order-{rng.randrange(99)}".encode(), value, headers)
            )
    rng.shuffle(records)
    records.append((1, b"x", b'{"meta": {"id": "nokey"}}', [("traceparent", TRACE)]))
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        asyncio.run(produce(bootstrap, settings.ordered.input_topic, records))
        ordered = wait_for(bootstrap, settings.ordered.ordered_topic, len(messages), worker)
        dead = wait_for(bootstrap, settings.ordered.dlq_topic, 1, worker)
        deduped = wait_for(bootstrap, settings.ordered.deduped_topic, len(messages), worker)
    finally:
        assert worker.stop() == 0
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in ordered:
        doc = orjson.loads(r.value or b"")
        assert r.key == doc["account"]["id"].encode()
        per_key[doc["account"]["id"]].append(doc["amount"])
        assert r.headers == (("traceparent", TRACE), ("x-seq", str(doc["amount"]).encode()))
    assert dict(per_key) == {f"acct-{a}": list(range(1, 21)) for a in range(3)}
    assert len(deduped) == len(messages)
    assert all(r.header("traceparent") == TRACE for r in deduped)
    [letter] = dead
    assert letter.header("seqkeeper.reason") == b"missing-field"
    assert letter.header("kafka_dlt-original-topic") == settings.ordered.input_topic.encode()
    assert letter.header("kafka_dlt-original-partition") == b"\x00\x00\x00\x01"  # (Spring: an int)
    assert letter.headers[0] == ("traceparent", TRACE)


CODEC = '''
class KeyValueCodec:
    """Values as ``name=value;...`` text (numbers as integers; a nested
    field's name dotted)."""

    def decode(self, value):
        doc = {}
        for part in value.decode().split(";"):
            if part:
                name, v = part.split("=", 1)
                *parents, leaf = name.split(".")
                node = doc
                for p in parents:
                    node = node.setdefault(p, {})
                node[leaf] = int(v) if v.isdigit() else v
        return doc

    def encode(self, document, prefix=""):
        return b";".join(
            self.encode(v, f"{prefix}{k}.") if isinstance(v, dict) else f"{prefix}{k}={v}".encode()
            for k, v in document.items()
        )
'''


def test_a_user_codec_reads_the_input(make_settings, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "shop").mkdir(parents=True)
    (project / "shop" / "__init__.py").write_text("")
    (project / "shop" / "codec.py").write_text(CODEC)
    settings = make_settings(codec="shop.codec:KeyValueCodec")
    bootstrap = settings.broker.bootstrap
    asyncio.run(create_topics(bootstrap, settings.topics(), 1))
    values = [f"messageId=m{s};seq={s};type=Posted".encode() for s in (3, 1, 2, 2)]
    records = [(0, b"k", v, []) for v in values] + [(0, b"k", b"seq=oops", [])]
    worker = WorkerProcess(settings, tmp_path / "worker.log", cwd=project).start()
    try:
        asyncio.run(produce(bootstrap, settings.ordered.input_topic, records))
        ordered = wait_for(bootstrap, settings.ordered.ordered_topic, 3, worker)
        dead = wait_for(bootstrap, settings.ordered.dlq_topic, 1, worker)
    finally:
        assert worker.stop() == 0
    assert [r.value for r in ordered] == [values[1], values[2], values[0]]
    assert [r.header("seqkeeper.reason") for r in dead] == [b"invalid-field"]
