"""State snapshots of a changelog topic: latest per key, tombstones delete,
incremental, rerun-idempotent, a killed run leaves the last one readable."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.spark_sink.snapshots import compact_snapshots, latest_run, read_snapshot
from seqkeeper.topics import create_topics

pytestmark = pytest.mark.integration


async def put(bootstrap: str, topic: str, items: list[tuple[bytes, bytes | None]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        await asyncio.gather(*[await producer.send(topic, v, key=k) for k, v in items])
    finally:
        await producer.stop()


def rows(spark, warehouse, topic) -> dict[bytes, bytes]:  # type: ignore[no-untyped-def]
    return {bytes(r.key): bytes(r.value) for r in read_snapshot(spark, warehouse, topic).collect()}


def test_snapshots_are_latest_per_key_incremental_and_atomic(
    spark, broker, names, tmp_path
) -> None:
    topic = f"{names['app_id']}-state-changelog"
    asyncio.run(create_topics(broker.bootstrap, [topic], 2))
    first = [(f"k{i % 40}".encode(), f"v{i}".encode()) for i in range(200)]
    asyncio.run(put(broker.bootstrap, topic, [*first, (b"k3", None), (b"k4", None)]))
    warehouse = tmp_path / "warehouse"
    assert compact_snapshots(spark, broker.bootstrap, [topic], warehouse) == 1
    expected = {f"k{i}".encode(): f"v{160 + i}".encode() for i in range(40) if i not in (3, 4)}
    assert rows(spark, warehouse, topic) == expected
    reached = latest_run(warehouse)[1]["offsets"]
    assert sum(reached[topic].values()) == 202
    # a rerun without new records: the same rows, offsets unchanged
    assert compact_snapshots(spark, broker.bootstrap, [topic], warehouse) == 2
    assert rows(spark, warehouse, topic) == expected
    assert latest_run(warehouse)[1]["offsets"] == reached
    # new records: only they are read; a key comes back, another goes
    asyncio.run(put(broker.bootstrap, topic, [(b"k3", b"again"), (b"k5", None)]))
    assert compact_snapshots(spark, broker.bootstrap, [topic], warehouse) == 3
    expected[b"k3"] = b"again"
    del expected[b"k5"]
    assert rows(spark, warehouse, topic) == expected
    # a run killed before its commit point: the last complete run is still
    # read, and the next run removes the files it left
    orphan = warehouse / "seqkeeper" / "snapshots" / "data" / "run-1000-killed"
    orphan.mkdir(parents=True)
    (orphan / "part-0.parquet").write_bytes(b"garbage")
    assert latest_run(warehouse)[0] == 3 and rows(spark, warehouse, topic) == expected
    assert compact_snapshots(spark, broker.bootstrap, [topic], warehouse) == 4
    assert not orphan.exists() and rows(spark, warehouse, topic) == expected


def state_entries() -> list[tuple[bytes, bytes | None]]:
    """Real entries of both tables, as the workers write them."""
    from seqkeeper.processors.command import Entity, Outgoing, Receipt
    from seqkeeper.processors.deduplicator import Seen, SeenWindow
    from seqkeeper.processors.resequencer import KeyState
    from seqkeeper.state import codecs
    from seqkeeper.state import command_records as cmd
    from seqkeeper.state.formats import MARKER

    msg = b'{"messageId":"m7","seq":7,"type":"T","data":{"email":"a@b","n":7}}'
    ordered = [
        (codecs.key_state_key("k1"), codecs.encode_key_state(KeyState(5), SeenWindow(0, 2))),
        (codecs.key_state_key("k1"), codecs.encode_key_state(KeyState(6, 1), SeenWindow(0, 3))),
        (codecs.buffer_key("k1", 7), msg),
        (codecs.buffer_key("k1", 6), b'{"messageId":"m6"}'),
        (codecs.buffer_key("k1", 6), None),  # confirmed and deleted
        (codecs.seen_id_key("k1", "m5"), codecs.encode_seen_id(Seen(2, 1.5, 40))),
        (codecs.seen_position_key("k1", 2), codecs.encode_seen_position("m5", 1.5)),
        (MARKER, b"2/2"),  # each partition's state format
    ]
    out = Outgoing(None, "sku", "c1:0", b'{"messageId":"c1:0","data":{"email":"x@y"}}')
    receipt = Receipt("c1", "DONE", "sku", "AddStock", "corr", 1.0, 2.0, value=b'{"a":1}')
    commands = [
        (cmd.entity_key("sku"), cmd.encode_entity(Entity(1, {"stock": 3}, (("c1", (out,)),)))),
        (cmd.receipt_key("c1"), cmd.encode_receipt(receipt)),
        (cmd.pending_key("sku"), b""),
        (cmd.correlation_prefix("corr") + b"c1", b""),
        (MARKER, b"2/2"),
    ]
    return ordered + commands


def test_snapshots_are_decoded_and_optionally_encrypted(spark, broker, names, tmp_path) -> None:
    from seqkeeper.spark_sink.crypto import AuditKeyError, Sealer, is_sealed
    from seqkeeper.state import codecs
    from seqkeeper.state import command_records as cmd

    state, commands = f"{names['app_id']}-state-changelog", f"{names['app_id']}-commands-changelog"
    asyncio.run(create_topics(broker.bootstrap, [state, commands], 2))
    entries = state_entries()
    asyncio.run(put(broker.bootstrap, state, entries[:8]))
    asyncio.run(put(broker.bootstrap, commands, entries[8:]))
    # the plain-Python reference: the last value per key, described
    reference = {}
    for topic, describe, items in (
        (state, codecs.describe, entries[:8]),
        (commands, cmd.describe, entries[8:]),
    ):
        last = dict(items)
        reference[topic] = {k: describe(k, v) for k, v in last.items() if v is not None}
    compact_snapshots(spark, broker.bootstrap, [state, commands], tmp_path / "plain")
    for topic in (state, commands):
        got = {
            bytes(r.key): (r.family, r.subject, r.item, r.decoded)
            for r in read_snapshot(spark, tmp_path / "plain", topic).collect()
        }
        assert got == reference[topic]
    families = {v[0] for t in reference.values() for v in t.values()}
    assert families == {
        "key_state",
        "buffer",
        "seen_id",
        "seen_fifo",
        "entity",
        "receipt",
        "pending_outbox",
        "correlation",
        "state_format",
    }
    # encrypted: raw values and message-bearing decoded values sealed
    sealer = Sealer(b"s" * 32, ("email",))
    compact_snapshots(spark, broker.bootstrap, [state, commands], tmp_path / "sealed", sealer)
    first = {
        t: sorted(read_snapshot(spark, tmp_path / "sealed", t).collect()) for t in (state, commands)
    }
    # a rerun opens the sealed snapshot, merges and seals again: same bytes
    compact_snapshots(spark, broker.bootstrap, [state, commands], tmp_path / "sealed", sealer)
    with pytest.raises(AuditKeyError, match="encrypted"):
        compact_snapshots(spark, broker.bootstrap, [state], tmp_path / "sealed")
    for topic in (state, commands):
        rows = read_snapshot(spark, tmp_path / "sealed", topic).collect()
        assert sorted(rows) == first[topic]
        assert len(rows) == len(reference[topic])
        for r in rows:
            ctx = f"{r.topic}:{r.partition}:{r.offset}"
            assert is_sealed(bytes(r.value))
            assert sealer.open_bytes(bytes(r.value), ctx) == dict(entries)[bytes(r.key)]
            assert b"a@b" not in bytes(r.value) and "a@b" not in (r.decoded or "")
            assert "x@y" not in (r.decoded or "")
            if r.family == "buffer":
                doc = orjson.loads(r.decoded)
                assert doc["data"]["n"] == 7
                assert sealer.open_fields(doc["data"], f"{ctx}:data")["email"] == "a@b"
