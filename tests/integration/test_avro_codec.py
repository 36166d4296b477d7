"""The built-in Avro codec through a real worker, in the Confluent wire
format: the input is read with the schema, gap markers and processor
outputs are written with it (magic byte 0 and the schema id before each),
and a value of another schema id or not Avro at all is dead-lettered with
its bytes and a reason while the worker keeps going."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from seqkeeper.state.value_codecs import AvroCodec
from seqkeeper.topics import create_topics
from seqkeeper.worker import WorkerProcess
from tests.topic_wait import wait_for

pytestmark = pytest.mark.integration
pytest.importorskip("fastavro")

PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "codec_project"
SCHEMA = PROJECT / "envelope.avsc"
SCHEMA_ID = 42


def test_avro_in_the_confluent_wire_format_both_ways(make_settings, tmp_path: Path) -> None:
    codec = AvroCodec.from_file(SCHEMA, SCHEMA_ID)
    settings = make_settings(
        codec="avro",
        avro_schema=str(SCHEMA),
        avro_schema_id=SCHEMA_ID,
        processor="shopcodec.processor:totals",
        gap_timeout=1.0,
        partitions=1,
    )
    bootstrap = settings.broker.bootstrap
    o = settings.ordered
    asyncio.run(create_topics(bootstrap, [*settings.topics(), o.processed_topic], 1))

    def posting(key: str, seq: int) -> bytes:
        doc = {"messageId": f"{key}-m{seq}", "seq": seq, "type": "Posted", "data": {"amount": seq}}
        return codec.encode(doc)

    other_id = AvroCodec.from_file(SCHEMA, SCHEMA_ID + 1).encode({"messageId": "x1", "seq": 1})
    bad = [(b"k9", other_id), (b"k9", b'{"messageId":"x2","seq":1}')]  # (first: the worker goes on)
    inputs = [(b"k1", posting("k1", s)) for s in (1, 2, 4)] + [(b"k2", posting("k2", 1))]
    worker = WorkerProcess(settings, tmp_path / "worker.log", cwd=PROJECT).start()
    try:
        asyncio.run(_send(bootstrap, o.input_topic, [*bad, *inputs]))
        ordered = wait_for(bootstrap, o.ordered_topic, len(inputs) + 1, worker)
        processed = wait_for(bootstrap, o.processed_topic, len(inputs) + 1, worker)
        dead = wait_for(bootstrap, o.dlq_topic, len(bad), worker)
    finally:
        assert worker.stop() == 0

    header = b"\x00\x00\x00\x00\x2a"
    assert all((r.value or b"").startswith(header) for r in [*ordered, *processed])
    docs = [codec.decode(r.value or b"") for r in ordered]
    marker = [d for d in docs if d["type"] == "seqkeeper.GapSkipped"]
    assert [(d["messageId"], d["seq"], d["data"]) for d in marker] == [
        ("seqkeeper.gap:k1:3-3", 3, {"from": 3, "to": 3})
    ]
    assert {r.value for r in ordered} - {v for _, v in inputs} == {
        codec.encode(
            {"messageId": "seqkeeper.gap:k1:3-3", "seq": 3, "type": "seqkeeper.GapSkipped"}
            | {"data": {"from": 3, "to": 3}}
        )
    }
    outputs = {
        (d["key"], d["seq"]): d["data"] for d in map(codec.decode, (r.value for r in processed))
    }
    assert outputs == {
        ("k1", 1): {"total": 1, "seq": 1},
        ("k1", 2): {"total": 3, "seq": 2},
        ("k1", 3): {"gap": {"from": 3, "to": 3}},
        ("k1", 4): {"total": 7, "seq": 4},
        ("k2", 1): {"total": 1, "seq": 1},
    }
    letters = [(r.value, r.header("seqkeeper.reason")) for r in dead]
    assert letters == [(v, b"invalid-json") for _, v in bad]
    assert b"schema id 43, expected 42" in (dead[0].header("seqkeeper.detail") or b"")
    assert b"magic byte 0x7b" in (dead[1].header("seqkeeper.detail") or b"")


async def _send(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value in records:
            await producer.send(topic, value, key=key, partition=0)
        await producer.flush()
    finally:
        await producer.stop()
