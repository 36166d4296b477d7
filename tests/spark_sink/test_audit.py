"""The audit log against a plain-Python reference: message-db columns,
gapless per-stream positions and increasing global positions across runs,
one row per id per stream (:mod:`processors.message_log`), dead-letter
reasons, nothing appended by a rerun."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from datetime import timedelta

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.processors.message_log import EMPTY, Record, append
from seqkeeper.spark_sink.audit import AuditSummary, compact_audit, purge_audit, read_audit
from seqkeeper.spark_sink.crypto import Sealer
from seqkeeper.topics import create_topics, read_topic

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


def as_logged(records) -> list[Record]:  # type: ignore[no-untyped-def]
    """The topics' records as the audit names them (the reference's input)."""
    out = []
    for r in records:
        doc = orjson.loads(r.value) if r.value and r.value.startswith(b"{") else {}
        key = r.key.decode() if r.key is not None else ""
        ident = doc.get("messageId") or f"{r.topic}:{r.partition}:{r.offset}"
        out.append(
            Record(
                f"{r.topic.replace('-', '_')}-{key}", ident, r.value, r.topic, r.partition, r.offset
            )
        )
    return out


def new_records(bootstrap: str, topics: list[str], seen: set[tuple[str, int, int]]) -> list:  # type: ignore[type-arg]
    records = [r for t in topics for r in asyncio.run(read_topic(bootstrap, t))]
    return [r for r in records if (r.topic, r.partition, r.offset) not in seen]


@pytest.mark.parametrize("sealed", [False, True], ids=["clear", "sealed"])
def test_one_row_per_id_per_stream_as_message_db_writes(
    spark, broker, names, tmp_path, caplog, sealed
) -> None:
    """Identical copies (re-emissions, reply replays) are counted, not rows;
    a copy with other bytes is reported with its coordinates; positions and
    global positions are what message-db's write_message gives, run by run,
    and a later run leaves the earlier rows as they were."""
    events, replies = f"out-{names['app_id']}", f"{names['app_id']}.replies"
    topics = [events, replies]
    asyncio.run(create_topics(broker.bootstrap, topics, 2))
    sealer = Sealer(b"k" * 32, ("i",)) if sealed else None

    def event(i: int, extra: str = "") -> tuple[str, bytes, bytes, None]:
        doc = {"messageId": f"m{i}", "type": "T", "data": {"i": i, "x": extra}}
        return (events, f"k{i % 3}".encode(), orjson.dumps(doc), None)

    reply = (replies, b"c1", b'{"messageId":"c1:reply","type":"Reply","data":{}}', None)
    first = [event(i) for i in range(8)]
    # a re-emission of m1 and m2, a copy of m3 with other bytes, a reply sent twice
    asyncio.run(send(broker.bootstrap, first + [event(1), event(2), event(3, "other"), reply]))
    asyncio.run(send(broker.bootstrap, [reply]))
    summaries: list[AuditSummary] = []
    warehouse = tmp_path / "w"
    caplog.set_level(logging.WARNING, logger="seqkeeper.spark_sink.audit")
    compact_audit(spark, broker.bootstrap, topics, warehouse, sealer, summaries.append)
    seen: set[tuple[str, int, int]] = set()
    run1 = new_records(broker.bootstrap, topics, seen)
    log, rows1, copies1 = append(EMPTY, as_logged(run1))
    seen |= {(r.topic, r.partition, r.offset) for r in run1}
    before = {(r.stream_name, r.id): r for r in read_audit(spark, warehouse).collect()}
    (conflict,) = [c for c in copies1 if not c.identical]
    s = summaries[-1]
    assert (s.rows, s.copies, s.conflicts) == (9, {events: 2, replies: 1}, 1)
    assert s.listed[0].at == conflict.record.coordinates and s.listed[0].first == conflict.first
    at = ":".join(map(str, conflict.record.coordinates))
    assert any(at in m and "'m3'" in m for m in caplog.messages), caplog.messages
    # a second run: another copy of m0 (of a row of run 1), a conflict with
    # m4, new messages
    asyncio.run(send(broker.bootstrap, [event(0), event(4, "late")] + [event(i) for i in (8, 9)]))
    compact_audit(spark, broker.bootstrap, topics, warehouse, sealer, summaries.append)
    run2 = new_records(broker.bootstrap, topics, seen)
    _, rows2, copies2 = append(log, as_logged(run2))
    s = summaries[-1]
    assert (s.rows, s.copies, s.conflicts) == (2, {events: 1}, 1)
    got = {
        (r.stream_name, r.id): (r.position, r.global_position, r.topic, r.partition, r.offset)
        for r in read_audit(spark, warehouse).collect()
    }
    want = {
        (w.record.stream, w.record.id): (w.position, w.global_position, *w.record.coordinates)
        for w in rows1 + rows2
    }
    assert len(want) == 11 and got == want
    after = {(r.stream_name, r.id): r for r in read_audit(spark, warehouse).collect()}
    assert all(after[k] == row for k, row in before.items())  # run 1's rows unchanged
