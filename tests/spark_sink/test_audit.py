"""The audit log against a plain-Python reference: message-db columns,
gapless per-stream positions and increasing global positions across runs,
dead-letter reasons, nothing appended by a rerun."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import timedelta

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.spark_sink.audit import compact_audit, purge_audit, read_audit
from seqkeeper.topics import create_topics

pytestmark = pytest.mark.integration


async def send(bootstrap: str, items: list[tuple[str, bytes, bytes, list | None]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        await asyncio.gather(*[await producer.send(t, v, key=k, headers=h) for t, k, v, h in items])
    finally:
        await producer.stop()


def events(topic: str, start: int, n: int) -> list[tuple[str, bytes, bytes, list | None]]:
    out = []
    for i in range(start, start + n):
        key = f"k{i % 4}".encode()
        doc = {"messageId": f"m{i}", "seq": i, "type": "T", "data": {"i": i}}
        out.append((topic, key, orjson.dumps(doc), None))
    return out


def test_audit_log_positions_and_reruns(spark, broker, names, tmp_path) -> None:
    ordered, dlq = f"ordered-{names['app_id']}", f"dlq-{names['app_id']}"
    asyncio.run(create_topics(broker.bootstrap, [ordered, dlq], 2))
    bad = [(dlq, b"k0", b"{oops", [("seqkeeper.reason", b"invalid-json")])]
    asyncio.run(send(broker.bootstrap, events(ordered, 0, 60) + bad))
    warehouse = tmp_path / "warehouse"
    assert compact_audit(spark, broker.bootstrap, [ordered, dlq], warehouse) == 1
    rows = read_audit(spark, warehouse).collect()
    assert len(rows) == 61
    assert sorted(r.global_position for r in rows) == list(range(1, 62))
    by_stream = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
        by_stream[r.stream_name].append(r)
    for stream, items in by_stream.items():
        assert [r.position for r in items] == list(range(len(items))), stream
    category = ordered.replace("-", "_")
    assert {r.stream_name for r in rows if r.topic == ordered} == {
        f"{category}-k{i}" for i in range(4)
    }
    (dead,) = [r for r in rows if r.topic == dlq]
    assert dead.dead_letter_reason == "invalid-json" and dead.id == f"{dlq}:{dead.partition}:0"
    some = next(r for r in rows if r.id == "m5")
    assert some.type == "T" and orjson.loads(some.data) == {"i": 5}
    assert str(some.day) == some.time.strftime("%Y-%m-%d") and some.category == category
    # a rerun appends nothing and commits nothing
    assert compact_audit(spark, broker.bootstrap, [ordered, dlq], warehouse) == 1
    assert read_audit(spark, warehouse).count() == 61
    # new records continue every stream's positions and the global order
    asyncio.run(send(broker.bootstrap, events(ordered, 60, 20)))
    assert compact_audit(spark, broker.bootstrap, [ordered, dlq], warehouse) == 2
    rows = read_audit(spark, warehouse).collect()
    assert sorted(r.global_position for r in rows) == list(range(1, 82))
    for stream in {r.stream_name for r in rows}:
        positions = sorted(r.position for r in rows if r.stream_name == stream)
        assert positions == list(range(len(positions))), stream
    later = {r.id: r.global_position for r in rows if r.id in ("m59", "m60")}
    assert later["m60"] > 61  # appended after everything of the first run


def test_purge_deletes_days_older_than_the_retention(spark, broker, names, tmp_path) -> None:
    topic = f"old-{names['app_id']}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 1))
    asyncio.run(send(broker.bootstrap, events(topic, 0, 5)))
    warehouse = tmp_path / "w"
    compact_audit(spark, broker.bootstrap, [topic], warehouse)
    (day,) = {r.day for r in read_audit(spark, warehouse).collect()}
    assert purge_audit(warehouse, keep_days=3, today=day + timedelta(days=3)) == 0
    assert read_audit(spark, warehouse).count() == 5
    assert purge_audit(warehouse, keep_days=3, today=day + timedelta(days=4)) == 1
    assert read_audit(spark, warehouse) is None  # nothing left
    # purged rows do not reset positions: the streams continue
    asyncio.run(send(broker.bootstrap, events(topic, 5, 4)))
    compact_audit(spark, broker.bootstrap, [topic], warehouse)
    rows = read_audit(spark, warehouse).collect()
    assert sorted(r.global_position for r in rows) == [6, 7, 8, 9]
    assert min(r.position for r in rows) >= 1  # every key already had a message


def test_commands_are_audited_with_their_type_payload_and_metadata(
    spark, broker, names, tmp_path
) -> None:
    topic = f"commands-{names['app_id']}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 1))
    command = {
        "messageId": "c1",
        "commandType": "AddStock",
        "schemaVersion": 1,
        "correlationId": "corr-1",
        "partitionKey": "sku-1",
        "tenantId": "t1",
        "payload": {"sku": "sku-1", "quantity": 3},
    }
    asyncio.run(send(broker.bootstrap, [(topic, b"sku-1", orjson.dumps(command), None)]))
    compact_audit(spark, broker.bootstrap, [topic], tmp_path / "w")
    (row,) = read_audit(spark, tmp_path / "w").collect()
    assert (row.id, row.type, row.stream_name) == (
        "c1",
        "AddStock",
        f"{topic.replace('-', '_')}-sku-1",
    )
    assert orjson.loads(row.data) == command["payload"]
    assert orjson.loads(row.metadata) == {
        "correlationId": "corr-1",
        "tenantId": "t1",
        "schemaVersion": "1",
    }
