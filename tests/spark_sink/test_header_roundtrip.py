"""Headers are kept and replayed: the audit stores each record's headers,
``replay`` publishes them back byte for byte, and input whose sequence and
messageId are headers (SEQKEEPER_SEQ_HEADER, SEQKEEPER_MESSAGE_ID_HEADER)
goes through compact, replay and a worker without a dead letter."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from seqkeeper.spark_sink.audit import compact_audit, read_audit
from seqkeeper.spark_sink.crypto import Sealer, is_sealed
from seqkeeper.spark_sink.replay import Selection, replay
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.spark_sink.test_audit import send
from tests.topic_wait import wait_for

pytestmark = pytest.mark.integration

#: Names and values as producers write them: repeated names, binary, empty
#: and null values, a name that is not ASCII.
HEADERS = [
    ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    ("x-bin", bytes(range(256))),
    ("dup", b"1"),
    ("dup", b"2"),
    ("empty", b""),
    ("null", None),
    ("nom-\u00e9t\u00e9", b"\xff\x00"),
]


def test_headers_are_kept_sealed_and_replayed_byte_for_byte(spark, broker, names, tmp_path) -> None:
    source, target = f"hdr-{names['app_id']}", f"hdr-again-{names['app_id']}"
    asyncio.run(create_topics(broker.bootstrap, [source, target], 1))
    records = [
        (source, b"k", orjson.dumps({"messageId": f"m{i}"}), HEADERS[: i + 1]) for i in range(7)
    ]
    records.append((source, b"k", b'{"messageId":"plain"}', None))
    asyncio.run(send(broker.bootstrap, records))
    sealer = Sealer(b"h" * 32)
    compact_audit(spark, broker.bootstrap, [source], tmp_path / "w", sealer)
    rows = sorted(read_audit(spark, tmp_path / "w").collect(), key=lambda r: r.offset)
    assert [[bytes(h.key) for h in r.headers] for r in rows] == [
        [k.encode() for k, _ in HEADERS[: i + 1]] for i in range(7)
    ] + [[]]
    values = [h.value for r in rows for h in r.headers]
    assert all(v is None or is_sealed(bytes(v)) for v in values)  # never in clear
    assert values.count(None) == 2  # (records 5 and 6 have the null one)
    n = replay(spark, tmp_path / "w", Selection(), broker.bootstrap, target, sealer=sealer)
    assert n == 8
    original = asyncio.run(read_topic(broker.bootstrap, source))
    again = asyncio.run(read_topic(broker.bootstrap, target))
    assert [(r.value, r.headers) for r in again] == [(r.value, r.headers) for r in original]
    assert again[6].headers == tuple(HEADERS)


def test_header_shaped_input_round_trips_through_compact_replay_and_a_worker(
    spark, make_settings, names, tmp_path: Path
) -> None:
    """The captured input is compacted, then replayed into a worker's input:
    it orders every message by the sequence header, once, none dead."""
    settings = make_settings(seq_header="x-seq", message_id_header="x-id", partitions=1)
    bootstrap = settings.broker.bootstrap
    captured = f"captured-{names['app_id']}"
    asyncio.run(create_topics(bootstrap, [captured, *settings.topics()], 1))
    sent = []
    for account in ("a", "b"):
        for seq in (2, 1, 3, 5, 4, 2):  # out of order, one delivered twice
            headers = [("x-seq", str(seq).encode()), ("x-id", f"{account}/{seq}".encode())]
            sent.append((captured, account.encode(), orjson.dumps({"amount": seq}), headers))
    asyncio.run(send(bootstrap, sent))
    warehouse = tmp_path / "w"
    compact_audit(spark, bootstrap, [captured], warehouse, id_header="x-id")
    # the copy has its id (from the header) and bytes: not a row
    assert read_audit(spark, warehouse).count() == 10
    category = Selection(category=captured.replace("-", "_"))
    assert replay(spark, warehouse, category, bootstrap, settings.ordered.input_topic) == 10
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        ordered = wait_for(bootstrap, settings.ordered.ordered_topic, 10, worker, timeout=90)
    finally:
        assert worker.stop() == 0
    assert asyncio.run(read_topic(bootstrap, settings.ordered.dlq_topic)) == []
    got = {
        account: [int(r.header("x-seq") or b"0") for r in ordered if r.key == account]
        for account in (b"a", b"b")
    }
    assert got == {b"a": [1, 2, 3, 4, 5], b"b": [1, 2, 3, 4, 5]}
